package gocronpgleader_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The process test: three replica processes (the program in
// ./internal/replica), each a gocron scheduler with a Locker, run one job
// every second on one database while the test kills, stops and restarts
// them, and then reads pgleader.job_run and the table the job's task
// writes. It is package jobtest's TestAtMostOnce of the root module,
// through the gocron adapter.

// hang bounds every wait of the process test. It detects a hang; it
// asserts no timing.
const hang = 60 * time.Second

// entryTable is the table the replicas' task writes: one entry per run it
// starts, completed when the run ends. No key on the second: a second run
// twice shows as two entries. A retry (at least once) has the token of
// the run its term claimed next, and the instant of the run it retries.
const entryTable = `CREATE TABLE gocrontest_entry (
    job          text        NOT NULL,
    instant      timestamptz NOT NULL,
    owner        text        NOT NULL,
    token        bigint      NOT NULL,
    fence_before bigint      NOT NULL,
    started      timestamptz NOT NULL,
    completed_at timestamptz,
    PRIMARY KEY (job, instant, token)
)`

// buildReplica compiles the replica into a temporary directory, with the
// race detector if the test itself runs with it.
func buildReplica(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "replica")
	args := []string{"build", "-o", bin}
	if raceEnabled() {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, "./internal/replica")...).CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func raceEnabled() bool {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range info.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// output collects a process's output from its two pipes.
type output struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// replica is one running replica process.
type replica struct {
	owner string
	cmd   *exec.Cmd
	out   output
	done  chan struct{}
	err   error // set before done is closed
}

// startReplica runs a replica named owner. It is killed, if still running,
// when the test ends, and its output is logged if the test failed.
func startReplica(t *testing.T, bin, owner string, args ...string) *replica {
	t.Helper()
	r := &replica{owner: owner, done: make(chan struct{})}
	r.cmd = exec.Command(bin, append([]string{"-owner", owner}, args...)...)
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		r.err = r.cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			_ = r.cmd.Process.Kill()
			<-r.done
		}
		if t.Failed() {
			t.Logf("%s's output:\n%s", owner, r.out.String())
		}
	})
	return r
}

// kill ends the replica with SIGKILL and waits until it is gone.
func (r *replica) kill(t *testing.T) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s: %v", r.owner, err)
	}
	select {
	case <-r.done:
	case <-time.After(hang):
		t.Fatalf("%s still runs %v after SIGKILL", r.owner, hang)
	}
}

// stop sends SIGTERM and fails the test unless the replica exits 0.
func (r *replica) stop(t *testing.T) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("signal %s: %v", r.owner, err)
	}
	select {
	case <-r.done:
		if r.err != nil {
			t.Fatalf("%s exited after SIGTERM: %v", r.owner, r.err)
		}
	case <-time.After(hang):
		t.Fatalf("%s did not exit within %v of SIGTERM", r.owner, hang)
	}
}

// jobRun is a row of pgleader.job_run.
type jobRun struct {
	Instant  time.Time
	State    string
	Owner    string
	Token    int64
	Attempt  int
	Started  time.Time
	Finished *time.Time // nil while running
}

// procEntry is a row of gocrontest_entry.
type procEntry struct {
	Instant     time.Time
	Owner       string
	Token       int64
	FenceBefore int64
	Started     time.Time
	Completed   bool
}

// second is the second of the replicas' schedule that the entry's run
// fired for: the real clock's second when its task started. The replicas
// run on this machine's clock (one 2 s ahead, which fires the same real
// seconds), and a task starts a few milliseconds after its firing.
func (e procEntry) second() int64 { return e.Started.Unix() }

// lateDouble reports whether the entries of one second's runs are two of
// which the later started Window or more into the second. gocron fires at
// whole seconds of a replica's clock (B's is exactly 2 s ahead, so its
// seconds are the others'), so that run's firing, with its claim, was
// delayed by at least Window: the delay Options.Window must exceed, broken
// by the machine's load, not the Locker's rule (runs at least Window
// apart, which the tests check on their own).
func lateDouble(es []procEntry, window time.Duration) bool {
	if len(es) != 2 {
		return false
	}
	later := es[1]
	if es[0].Started.After(later.Started) {
		later = es[0]
	}
	return later.Started.Sub(later.Started.Truncate(time.Second)) >= window
}

// procHistory is what the database says happened to the job.
type procHistory struct {
	runs    []jobRun    // by instant
	entries []procEntry // by token
}

func readProcHistory(t *testing.T, pool *pgxpool.Pool, job string) procHistory {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	var h procHistory
	rows, err := pool.Query(ctx, `SELECT instant, state, owner, token, attempt, started_at, finished_at
		FROM pgleader.job_run WHERE job = $1 ORDER BY instant`, job)
	if err != nil {
		t.Fatal(err)
	}
	h.runs, err = pgx.CollectRows(rows, pgx.RowToStructByPos[jobRun])
	if err != nil {
		t.Fatal(err)
	}
	rows, err = pool.Query(ctx, `SELECT instant, owner, token, fence_before, started, completed_at IS NOT NULL
		FROM gocrontest_entry WHERE job = $1 ORDER BY token, started`, job)
	if err != nil {
		t.Fatal(err)
	}
	h.entries, err = pgx.CollectRows(rows, pgx.RowToStructByPos[procEntry])
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// first is the second of the first entry.
func (h procHistory) first() int64 {
	if len(h.entries) == 0 {
		return 0
	}
	f := h.entries[0].second()
	for _, e := range h.entries {
		f = min(f, e.second())
	}
	return f
}

// index numbers seconds from the first entry's: 0, 1, 2, …
func (h procHistory) index(sec int64) int { return int(sec - h.first()) }

// seconds is the number of seconds from the first entry's to the last's.
func (h procHistory) seconds() int {
	last := h.first() - 1
	for _, e := range h.entries {
		last = max(last, e.second())
	}
	return h.index(last) + 1
}

// lastEntry returns owner's last entry from second from on, or nil.
func (h procHistory) lastEntry(owner string, from int) *procEntry {
	var out *procEntry
	for i, e := range h.entries {
		if e.Owner == owner && h.index(e.second()) >= from {
			out = &h.entries[i]
		}
	}
	return out
}

func (h procHistory) entryOf(token int64) (procEntry, bool) {
	for _, e := range h.entries {
		if e.Token == token {
			return e, true
		}
	}
	return procEntry{}, false
}

// busyAt reports whether a run that started before second sec, other
// than the run of except, still held the job then: it ended less than
// 1.5 s before (its term releases the lease after recording the end, late
// on a machine busy with two test suites; the rule of the root module's
// jobtest.PassedOver) or has not ended. The replicas firing at sec found
// the job's lease held and skipped: on a loaded machine a run can end a
// second late. Such a second is skipped by the Locker's rule, not lost.
func (h procHistory) busyAt(sec int64, except time.Time) bool {
	at := time.Unix(sec, 0)
	for _, r := range h.runs {
		if r.Started.Before(at) && !r.Instant.Equal(except) && (r.Finished == nil || r.Finished.After(at.Add(-1500*time.Millisecond))) {
			return true
		}
	}
	return false
}

// runAt returns the run of instant.
func (h procHistory) runAt(instant time.Time) (jobRun, bool) {
	for _, r := range h.runs {
		if r.Instant.Equal(instant) {
			return r, true
		}
	}
	return jobRun{}, false
}

// entriesAt returns the entries of the run of instant, by token.
func (h procHistory) entriesAt(instant time.Time) []procEntry {
	var out []procEntry
	for _, e := range h.entries {
		if e.Instant.Equal(instant) {
			out = append(out, e)
		}
	}
	return out
}

// runsString lists the runs, each with its entries.
func (h procHistory) runsString() string {
	var b bytes.Buffer
	for _, r := range h.runs {
		fmt.Fprintf(&b, "  run at %s %s owner=%s token=%d attempt=%d started %s\n", r.Instant.Format("15:04:05.000"),
			r.State, r.Owner, r.Token, r.Attempt, r.Started.Format("15:04:05.000"))
		for _, e := range h.entriesAt(r.Instant) {
			fmt.Fprintf(&b, "    entry second %d by %s token=%d started %s fence_before=%d completed=%v\n", h.index(e.second()),
				e.Owner, e.Token, e.Started.Format("15:04:05.000"), e.FenceBefore, e.Completed)
		}
	}
	return b.String()
}

func (h procHistory) String() string {
	var b bytes.Buffer
	for _, r := range h.runs {
		e, _ := h.entryOf(r.Token)
		fmt.Fprintf(&b, "  second %d: run at %s %s owner=%s token=%d; entry started %s fence_before=%d completed=%v\n",
			h.index(e.second()), r.Instant.Format("15:04:05.000"), r.State, r.Owner, r.Token,
			e.Started.Format("15:04:05.000"), e.FenceBefore, e.Completed)
	}
	return b.String()
}

// waitProc polls the job's history until cond returns true, and fails the
// test after hang.
func waitProc(t *testing.T, pool *pgxpool.Pool, job, what string, cond func(procHistory) bool) procHistory {
	t.Helper()
	deadline := time.Now().Add(hang)
	for {
		h := readProcHistory(t, pool, job)
		if cond(h) {
			return h
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s; %d runs, %d entries", hang, what, len(h.runs), len(h.entries))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLockerProcesses runs a gocron job every second on three replica
// processes, each with a Locker (Window 500 ms), for at least 50 seconds:
// B's clock runs 2 s ahead; C is SIGKILLed in the middle of a run from
// second 15 on and restarted (as C2) about 5 seconds later; A is stopped
// with SIGTERM in the middle of a run from second 35 on and not restarted.
// No two runs may start within Window of each other, tokens increase with
// the runs' start, each write of a run finds the previous run's token in
// the fence, and every run is recorded done but the killed one, which
// stays running. The seconds without a run are those the killed run's
// lease still covered.
func TestLockerProcesses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testPool(t)
	if _, err := pool.Exec(ctx, entryTable); err != nil {
		t.Fatal(err)
	}
	bin := buildReplica(t)
	const job = "processes"
	const window = 500 * time.Millisecond
	common := []string{"-database", pool.Config().ConnString(), "-job", job, "-window", window.String(), "-work", "300ms"}
	a := startReplica(t, bin, "a", common...)
	b := startReplica(t, bin, "b", append(common, "-clock-ahead", "2s")...)
	c := startReplica(t, bin, "c", common...)

	// C dies right after the entry of its first run from second 15, while
	// that run works; if it won none by second 30, between runs.
	h := waitProc(t, pool, job, "a run of C from second 15", func(h procHistory) bool {
		return h.seconds() > 30 || h.lastEntry("c", 15) != nil
	})
	c.kill(t)
	// Read at once: a lease the dead C left covers the seconds until it
	// expires.
	var holder *string
	var expires *time.Time
	if err := pool.QueryRow(ctx, `SELECT holder, expires_at FROM pgleader.lease WHERE key = $1`, job).Scan(&holder, &expires); err != nil {
		t.Fatal(err)
	}
	var leftUntil time.Time
	if holder != nil && *holder == "c" {
		leftUntil = *expires
	}
	killedAt := h.seconds()

	waitProc(t, pool, job, "a run 5 seconds after C's death", func(h procHistory) bool { return h.seconds() >= killedAt+5 })
	c2 := startReplica(t, bin, "c2", common...)

	h = waitProc(t, pool, job, "a run of A from second 35", func(h procHistory) bool {
		return h.seconds() > 45 || h.lastEntry("a", 35) != nil
	})
	a.stop(t)
	aMidRun := h.lastEntry("a", 35) != nil && !h.lastEntry("a", 35).Completed

	waitProc(t, pool, job, "55 seconds", func(h procHistory) bool { return h.seconds() >= 55 })
	b.stop(t)
	c2.stop(t)

	h = readProcHistory(t, pool, job)
	defer func() {
		if t.Failed() {
			t.Logf("history:\n%s", h)
		}
	}()
	if n := h.seconds(); n < 50 {
		t.Errorf("%d seconds from the first run to the last; want at least 50", n)
	}
	if len(h.entries) != len(h.runs) {
		t.Errorf("%d entries for %d runs; want one entry per run", len(h.entries), len(h.runs))
	}

	// At most once in Window: the Locker's rule, on the database clock.
	// Tokens follow the runs, and each run's first write found the
	// previous run's token in the fence.
	owners := map[string]int{}
	perSecond := map[int64][]jobRun{}
	entries := map[int64][]procEntry{} // the runs' entries, by the second they started in
	var lost []jobRun
	var prev jobRun
	for i, r := range h.runs {
		owners[r.Owner]++
		if i > 0 {
			if d := r.Instant.Sub(prev.Instant); d < window {
				t.Errorf("runs with tokens %d and %d started %v apart; want at least Window (%v)", prev.Token, r.Token, d, window)
			}
			if r.Token <= prev.Token {
				t.Errorf("run with token %d started after the run with token %d; want tokens increasing with the start", r.Token, prev.Token)
			}
		}
		e, ok := h.entryOf(r.Token)
		switch {
		case !ok:
			t.Errorf("run by %s with token %d at %v: no entry", r.Owner, r.Token, r.Instant)
		case e.Owner != r.Owner || !e.Instant.Equal(r.Instant):
			t.Errorf("run by %s with token %d at %v: entry by %s at %v", r.Owner, r.Token, r.Instant, e.Owner, e.Instant)
		case e.FenceBefore != prev.Token:
			t.Errorf("run with token %d found the fence at %d; want the previous run's token %d", r.Token, e.FenceBefore, prev.Token)
		}
		switch {
		case r.State == "done" && e.Completed:
		case r.State == "running" && r.Owner == "c":
			lost = append(lost, r)
		default:
			t.Errorf("run by %s with token %d is %s, its entry completed %v; want done and completed, unless C was killed in it",
				r.Owner, r.Token, r.State, e.Completed)
		}
		perSecond[e.second()] = append(perSecond[e.second()], r)
		entries[e.second()] = append(entries[e.second()], e)
		prev = r
	}

	// The seconds: one run each, but those that C's lease covered after
	// its death. Until that lease expired, the others' Locks found the
	// job's key held (ErrHeld) and skipped; the first firing after it
	// won. So the missing seconds follow C's last run and precede the
	// lease's expiry (plus one second, for the firing's own delay):
	// about TTL (6 s) of them, fewer if C died between runs.
	cLast := h.lastEntry("c", 0)
	if cLast == nil {
		t.Fatalf("C ran no run before its death (%d runs)", len(h.runs))
	}
	var missing, doubled []int64
	for s := h.first(); s < h.first()+int64(h.seconds()); s++ {
		switch n := len(perSecond[s]); {
		case n == 0:
			missing = append(missing, s)
		case n > 1:
			doubled = append(doubled, s)
		}
	}
	if len(lost) > 1 {
		t.Errorf("%d runs of C left running; C died once", len(lost))
	}
	if len(lost) == 1 && lost[0].Token != cLast.Token {
		t.Errorf("C's run with token %d is left running, but C's last run had token %d", lost[0].Token, cLast.Token)
	}
	busy := 0
	for _, s := range missing {
		if h.busyAt(s, cLast.Instant) {
			busy++
			continue
		}
		if leftUntil.IsZero() || s <= cLast.second() || !time.Unix(s, 0).Before(leftUntil.Add(time.Second)) {
			t.Errorf("second %d has no run; C's last run was in second %d, its lease lasted until %v",
				h.index(s), h.index(cLast.second()), leftUntil)
		}
	}
	// Two runs in one second are at least Window apart (checked above):
	// the second of them needs a firing delayed by more than Window, which
	// Options.Window rules out and only a loaded machine brings.
	late := 0
	for _, s := range doubled {
		if lateDouble(entries[s], window) {
			late++
			continue
		}
		t.Errorf("second %d has %d runs", h.index(s), len(perSecond[s]))
	}
	if late > 0 {
		t.Logf("%d seconds had two runs, the later started Window or more into its second: a firing delayed past Window", late)
	}
	if owners["b"] == 0 {
		t.Errorf("B, its clock 2 s ahead, ran no run of %d", len(h.runs))
	}
	var delay time.Duration
	for _, e := range h.entries {
		delay = max(delay, e.Started.Sub(e.Started.Truncate(time.Second)))
	}
	t.Logf("%d seconds, %d runs (by owner %v), %d lost with C (left running), %d missed (%d while an earlier run ran late, the others while C's lease lasted, %v after its last run's start), %d doubled; "+
		"A stopped mid-run %v; latest task start %v after its second",
		h.seconds(), len(h.runs), owners, len(lost), len(missing), busy, leftUntil.Sub(cLast.Instant).Round(100*time.Millisecond), len(doubled),
		aMidRun, delay.Round(time.Millisecond))
}

// lateDouble excuses two runs in one second only when the later started
// Window or more into it (the case a loaded CI machine produced: runs
// started 152 ms and 949 ms into one second, Window 500 ms).
func TestLateDouble(t *testing.T) {
	sec := time.Date(2026, 12, 4, 17, 54, 32, 0, time.UTC)
	at := func(ms int) procEntry { return procEntry{Started: sec.Add(time.Duration(ms) * time.Millisecond)} }
	window := 500 * time.Millisecond
	for _, c := range []struct {
		es   []procEntry
		want bool
	}{
		{[]procEntry{at(152), at(949)}, true},
		{[]procEntry{at(949), at(152)}, true},
		{[]procEntry{at(10), at(499)}, false},
		{[]procEntry{at(10), at(600), at(900)}, false},
		{[]procEntry{at(600)}, false},
	} {
		if got := lateDouble(c.es, window); got != c.want {
			t.Errorf("lateDouble(%v) = %v, want %v", c.es, got, c.want)
		}
	}
}
