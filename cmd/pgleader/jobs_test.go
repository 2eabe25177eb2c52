//go:build unix

package main_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgleader/pgleader/internal/jobtest"
	"github.com/pgleader/pgleader/internal/pgtest"
)

// A jobLine is one line a test's scheduled command appended:
// "$PGLEADER_INSTANT $PGLEADER_TOKEN $PGLEADER_ATTEMPT $PGLEADER_OWNER".
type jobLine struct {
	instant time.Time
	raw     string // the instant as the command got it
	token   int64
	attempt int
	owner   string
}

// appendLine is the shell command that appends a jobLine to the file name.
func appendLine(name string) string {
	return `echo "$PGLEADER_INSTANT $PGLEADER_TOKEN $PGLEADER_ATTEMPT $PGLEADER_OWNER" >> ` + name + "\n"
}

func readLines(t *testing.T, name string) []jobLine {
	t.Helper()
	var out []jobLine
	for line := range strings.Lines(readFile(t, name)) {
		f := strings.Fields(line)
		if len(f) != 4 {
			t.Fatalf("%s: line %q is not INSTANT TOKEN ATTEMPT OWNER", name, line)
		}
		instant, err := time.Parse(time.RFC3339Nano, f[0])
		if err != nil {
			t.Fatalf("%s: PGLEADER_INSTANT %q: %v", name, f[0], err)
		}
		token, err1 := strconv.ParseInt(f[1], 10, 64)
		attempt, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: line %q: PGLEADER_TOKEN or PGLEADER_ATTEMPT is not a number", name, line)
		}
		out = append(out, jobLine{instant: instant, raw: f[0], token: token, attempt: attempt, owner: f[3]})
	}
	return out
}

// waitLines waits until the file name has at least n lines.
func waitLines(t *testing.T, name string, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d runs in %s", n, name), func() bool {
		return strings.Count(readFile(t, name), "\n") >= n
	})
}

// A jobRunRow is a row of pgleader.job_run.
type jobRunRow struct {
	state, owner string
	token        int64
	attempt      int
	startedAt    time.Time
	finishedAt   *time.Time // nil while running
}

// passedOver is jobtest.PassedOver on the runs of the map.
func passedOver(runs map[time.Time]jobRunRow, missing []time.Time, except time.Time) ([]time.Time, int) {
	var ended []jobtest.Ended
	for instant, r := range runs {
		ended = append(ended, jobtest.Ended{Instant: instant, FinishedAt: r.finishedAt})
	}
	return jobtest.PassedOver(ended, missing, except)
}

func jobRuns(t *testing.T, db *pgtest.DB, job string) map[time.Time]jobRunRow {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(),
		`SELECT instant, state, owner, token, attempt, started_at, finished_at FROM pgleader.job_run WHERE job = $1`, job)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[time.Time]jobRunRow{}
	for rows.Next() {
		var instant time.Time
		var r jobRunRow
		if err := rows.Scan(&instant, &r.state, &r.owner, &r.token, &r.attempt, &r.startedAt, &r.finishedAt); err != nil {
			t.Fatal(err)
		}
		out[instant.UTC()] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkOncePerInstant checks the lines of a scheduled command against the
// job's runs: each instant was run once (one line), on a whole second in
// UTC, by a term of its own (with rising, by a token that rises with the
// instant), and each line is a run the database recorded with that token;
// each run recorded done has its line. It returns the runs.
//
// Tokens rise with the instants only without --at-least-once: with it, a
// replica may still claim an instant, for up to --retry-within, after
// another claimed a later one.
func checkOncePerInstant(t *testing.T, db *pgtest.DB, job string, lines []jobLine, rising bool) map[time.Time]jobRunRow {
	t.Helper()
	seen := map[time.Time]jobLine{}
	for _, l := range lines {
		if prev, ok := seen[l.instant]; ok {
			t.Errorf("instant %s ran twice: tokens %d and %d", l.raw, prev.token, l.token)
		}
		seen[l.instant] = l
		if !strings.HasSuffix(l.raw, "Z") || l.instant.Nanosecond() != 0 {
			t.Errorf("PGLEADER_INSTANT %q is not a whole second in UTC", l.raw)
		}
	}
	sorted := slices.SortedFunc(func(yield func(jobLine) bool) {
		for _, l := range seen {
			if !yield(l) {
				return
			}
		}
	}, func(a, b jobLine) int { return a.instant.Compare(b.instant) })
	for i := 1; rising && i < len(sorted); i++ {
		if sorted[i].token <= sorted[i-1].token {
			t.Errorf("instant %s ran with token %d, instant %s before it with %d: tokens must rise",
				sorted[i].raw, sorted[i].token, sorted[i-1].raw, sorted[i-1].token)
		}
	}
	runs := jobRuns(t, db, job)
	for _, l := range lines {
		r, ok := runs[l.instant]
		if !ok || r.token != l.token || r.owner != l.owner || r.attempt != l.attempt {
			t.Errorf("instant %s ran with token %d (%s, attempt %d); pgleader.job_run has %+v (found: %v)",
				l.raw, l.token, l.owner, l.attempt, r, ok)
		}
	}
	for instant, r := range runs {
		if _, ok := seen[instant]; !ok && r.state == "done" {
			t.Errorf("pgleader.job_run has instant %s done by token %d, and the command did not run for it", instant, r.token)
		}
		if r.state == "failed" {
			t.Errorf("pgleader.job_run has instant %s failed: %+v", instant, r)
		}
	}
	return runs
}

// instants numbers a job's instants from its first recorded run: 0, 1, 2, …
type instants struct {
	first, last time.Time
	every       time.Duration
}

func readInstants(t *testing.T, db *pgtest.DB, job string, every time.Duration) instants {
	t.Helper()
	s := instants{every: every}
	var first, last *time.Time
	if err := db.Pool.QueryRow(context.Background(), `SELECT min(instant), max(instant) FROM pgleader.job_run WHERE job = $1`,
		job).Scan(&first, &last); err != nil {
		t.Fatal(err)
	}
	if first != nil {
		s.first, s.last = first.UTC(), last.UTC()
	}
	return s
}

func (s instants) index(at time.Time) int {
	if s.first.IsZero() {
		return -1
	}
	return int(at.Sub(s.first) / s.every)
}

// count is the number of instants from the first run to the last.
func (s instants) count() int {
	if s.first.IsZero() {
		return 0
	}
	return s.index(s.last) + 1
}

// missing lists the instants from the first run to the last that have no
// run.
func (s instants) missing(runs map[time.Time]jobRunRow) []time.Time {
	var out []time.Time
	for at := s.first; !s.first.IsZero() && at.Before(s.last); at = at.Add(s.every) {
		if _, ok := runs[at]; !ok {
			out = append(out, at)
		}
	}
	return out
}

// waitInstants waits, for up to 2*hang, until cond holds for the job's
// instants.
func waitInstants(t *testing.T, db *pgtest.DB, job string, every time.Duration, what string, cond func(instants) bool) instants {
	t.Helper()
	var s instants
	eventuallyWithin(t, 2*hang, what, func() bool {
		s = readInstants(t, db, job, every)
		return cond(s)
	})
	return s
}

func derefOr(s *string, none string) string {
	if s == nil {
		return none
	}
	return *s
}

// lastRuns returns each owner's latest instant among runs.
func lastRuns(runs map[time.Time]jobRunRow) map[string]time.Time {
	last := map[string]time.Time{}
	for instant, r := range runs {
		if instant.After(last[r.owner]) {
			last[r.owner] = instant
		}
	}
	return last
}

// caughtStarting reports whether the run of instant was left running,
// without a line, by a replica stopped by SIGTERM (one of stopped) in it:
// its last run. The signal came as the command started, before it could
// ignore it, and the command died at once; the run is not retried (at most
// once) and, with --at-least-once, no replica was left to retry it.
func caughtStarting(runs map[time.Time]jobRunRow, lines []jobLine, instant time.Time, stopped ...string) bool {
	r := runs[instant]
	return r.state == "running" && slices.Contains(stopped, r.owner) && instant.Equal(lastRuns(runs)[r.owner]) &&
		!slices.ContainsFunc(lines, func(l jobLine) bool { return l.instant.Equal(instant) })
}

// stopAll stops the processes with SIGTERM, at once and just after a run
// ended: no replica is then starting a command (whose SIGTERM would come
// before the command could ignore it), and none is until the next instant.
// Each must exit 0.
func stopAll(t *testing.T, lines string, procs ...*process) {
	t.Helper()
	waitLines(t, lines, len(readLines(t, lines))+1)
	for _, p := range procs {
		p.signal(t, syscall.SIGTERM)
	}
	for _, p := range procs {
		if code := p.wait(t); code != 0 {
			t.Errorf("exit status after SIGTERM %d, want 0; stderr:\n%s", code, p.errors(t))
		}
	}
}

// maxLate is how many instants testRunEveryAtMostOnce lets go without a
// run for no reason it can see: every replica reached them late, on a busy
// machine.
const maxLate = 2

// testRunEveryAtMostOnce is internal/jobtest's TestAtMostOnce through
// pgleader run --every: a job every second on three processes for at least
// 50 instants. B's job clock runs 2 s ahead (PGLEADER_TEST_CLOCK_AHEAD, in
// a binary built with the pgleader_testclock tag); C is SIGKILLed in its
// first run from instant 15 on, which hangs, and started again as C2 five
// instants later; A is stopped by SIGTERM in its first run from instant 35
// on. The command ignores SIGTERM, notes its start (an entry), works 300 ms
// and notes its end (a line). No instant runs twice; the only instants
// without a run are those the killed run's lease still covered, and at
// most maxLate that every replica reached late; every run is recorded done
// but the killed one, left running.
func testRunEveryAtMostOnce(t *testing.T, _ string) {
	bin := build(t, "pgleader_testclock")
	db := pgtest.New(t)
	const job = "every-job"
	every := time.Second
	shared := t.TempDir()
	entries, runs := filepath.Join(shared, "entries"), filepath.Join(shared, "runs")
	armed, hung := filepath.Join(shared, "armed"), filepath.Join(shared, "hung")
	script := writeScript(t, shared, `
trap '' TERM
`+appendLine(entries)+`
if [ "$PGLEADER_OWNER" = replica-c ] && [ -e `+armed+` ] && mkdir `+hung+` 2>/dev/null; then
	echo $$ > `+hung+`/child.tmp && mv `+hung+`/child.tmp `+hung+`/child.pid
	exec sleep 300
fi
sleep 0.3
`+appendLine(runs))
	// A yield grace well beyond the 300 ms a run works: a stopped run ends
	// and is recorded done.
	timing := append(slices.Clone(fast), "--yield-grace", "1500ms")
	replica := func(owner string, env ...string) *process {
		args := append([]string{"run", "--database", db.URL, "--key", job, "--every", every.String(), "--owner", owner}, timing...)
		return start(t, bin, t.TempDir(), env, append(args, "--", script)...)
	}
	a := replica("replica-a")
	b := replica("replica-b", "PGLEADER_TEST_CLOCK_AHEAD=2s")
	c := replica("replica-c")

	waitInstants(t, db, job, every, "15 instants", func(s instants) bool { return s.count() >= 15 })
	writeFile(t, armed)
	child := waitPID(t, filepath.Join(hung, "child.pid"))
	c.signal(t, syscall.SIGKILL)
	c.wait(t)
	// Read at once: the lease the dead C left covers the instants until it
	// expires.
	var holder *string
	var leftUntil time.Time
	if err := db.Pool.QueryRow(context.Background(), `SELECT holder, expires_at FROM pgleader.lease WHERE key = $1`,
		job).Scan(&holder, &leftUntil); err != nil {
		t.Fatal(err)
	}
	if holder == nil || *holder != "replica-c" {
		t.Fatalf("C was killed in a run, and the lease's holder is %q", derefOr(holder, "nobody"))
	}
	eventually(t, "the hanging command died with its pgleader", func() bool { return !alive(child) })
	var killed jobLine
	for _, l := range readLines(t, entries) {
		if l.owner == "replica-c" {
			killed = l
		}
	}

	s := waitInstants(t, db, job, every, "5 instants after the killed run's", func(s instants) bool {
		return s.count() > s.index(killed.instant)+5
	})
	t.Logf("C killed in instant %d, started again as C2 at instant %d", s.index(killed.instant), s.count())
	c2 := replica("replica-c2")

	waitInstants(t, db, job, every, "a run of A from instant 35 on", func(s instants) bool {
		return s.count() > 45 || slices.ContainsFunc(readLines(t, entries), func(l jobLine) bool {
			return l.owner == "replica-a" && s.index(l.instant) >= 35
		})
	})
	// In its run, after its entry: the command ignores SIGTERM by then.
	a.signal(t, syscall.SIGTERM)
	if code := a.wait(t); code != 0 {
		t.Errorf("exit status after SIGTERM %d, want 0; stderr:\n%s", code, a.errors(t))
	}

	waitInstants(t, db, job, every, "55 instants", func(s instants) bool { return s.count() >= 55 })
	stopAll(t, runs, b, c2)

	s = readInstants(t, db, job, every)
	entered, ended := readLines(t, entries), readLines(t, runs)
	recorded := checkOncePerInstant(t, db, job, entered, true)
	defer func() {
		if t.Failed() {
			t.Logf("entries:\n%s\nruns:\n%s\npgleader.job_run: %+v", readFile(t, entries), readFile(t, runs), recorded)
		}
	}()
	if n := s.count(); n < 50 {
		t.Errorf("%d instants from the first run to the last; want at least 50", n)
	}
	if !strings.Contains(b.errors(t), "the job runner's clock runs 2s ahead") {
		t.Errorf("B's clock was not set ahead: the binary lacks the pgleader_testclock tag, or B its variable; stderr:\n%s", b.errors(t))
	}
	owners := map[string]int{}
	caught := 0
	for instant, r := range recorded {
		owners[r.owner]++
		completed := slices.ContainsFunc(ended, func(l jobLine) bool { return l.instant.Equal(instant) && l.token == r.token })
		switch {
		case r.attempt != 1:
			t.Errorf("instant %d ran as attempt %d; without --at-least-once every run is the first", s.index(instant), r.attempt)
		case r.state == "done" && completed:
		case r.state == "running" && instant.Equal(killed.instant) && !completed:
		case caughtStarting(recorded, entered, instant, "replica-a", "replica-b", "replica-c2"):
			caught++
		default:
			t.Errorf("instant %d: run by %s is %s, its command ended %v; want done and ended, unless C was killed in it",
				s.index(instant), r.owner, r.state, completed)
		}
	}
	for _, l := range ended {
		if !slices.ContainsFunc(entered, func(e jobLine) bool { return e.raw == l.raw && e.token == l.token && e.owner == l.owner }) {
			t.Errorf("instant %s ended with token %d and has no entry of that token", l.raw, l.token)
		}
	}
	if r := recorded[killed.instant]; r.owner != "replica-c" || r.state != "running" {
		t.Errorf("the killed run's instant %d: %+v, want left running by replica-c", s.index(killed.instant), r)
	}
	missing, busy := passedOver(recorded, s.missing(recorded), killed.instant)
	var late []int
	for _, at := range missing {
		// Until its lease expires (plus one period for a campaign that a
		// runner's estimate of the database clock sent a little early),
		// the others find the job held and skip the instant.
		if !at.After(killed.instant) || !at.Before(leftUntil.Add(every)) {
			late = append(late, s.index(at))
		}
	}
	// Any other instant without a run is one that no replica reached
	// within its start window (a second): at most once skips it. On a
	// machine busy with another make test that happened to one instant of
	// 55 (twice, both before the kill); a scheduler that drops instants
	// drops more. That no instant runs twice is checked above, strictly.
	if len(late) > maxLate {
		t.Errorf("instants %v have no run; C died in instant %d, its lease lasted until %v after it; want at most %d such instants",
			late, s.index(killed.instant), leftUntil.Sub(killed.instant), maxLate)
	} else if len(late) > 0 {
		t.Logf("instants %v have no run: no replica reached them in time (at most %d allowed)", late, maxLate)
	}
	if owners["replica-b"] == 0 {
		t.Errorf("B, its clock 2 s ahead, ran no instant of %d", len(recorded))
	}
	t.Logf("%d instants, %d runs (by owner %v), 1 lost with C (left running), %d missed while its lease lasted, %d while an earlier run ran late, %d reached late by every replica, %d left running by a stop as their command started",
		s.count(), len(recorded), owners, len(missing)-len(late), busy, len(late), caught)
}

// testRunEveryAtLeastOnce is internal/jobtest's TestAtLeastOnce through
// pgleader run --every --at-least-once: a job every 3 s on three processes
// for at least 20 instants; once they run in step, a run's command hangs and
// its pgleader is SIGKILLed. Another replica runs that instant, once, as
// attempt 2 with a higher token; every other instant runs once, as attempt
// 1, and every run is recorded done.
//
// The period is longer than the TTL (2 s): a replica that lost an instant
// waits out the winner's lease before it looks again, and a replica takes
// over only a run of the instant it is trying (see
// testRunEveryAtLeastOnceShortPeriod).
func testRunEveryAtLeastOnce(t *testing.T, bin string) {
	runEveryAtLeastOnce(t, bin, 3*time.Second, 2*time.Second, 0)
}

// testRunEveryAtLeastOnceShortPeriod is testRunEveryAtLeastOnce with a
// period shorter than the TTL, every 2 s with a TTL of 3 s, as
// internal/jobtest's TestAtLeastOnce has, and the processes started 1.5 s
// into a period. The three try the instant just passed; the losers wait for
// the winner's lease, while the winner alone runs the next instant and hangs
// in the one after, and is killed. Before pgleader/job.go looked for runs
// left running after each instant (it did only when it started) and let
// the losers sit out their next instants, no live replica tried the hung
// run again, though --retry-within (20 s) had not passed: this test failed
// three runs in three.
func testRunEveryAtLeastOnceShortPeriod(t *testing.T, bin string) {
	runEveryAtLeastOnce(t, bin, 2*time.Second, 3*time.Second, 1500*time.Millisecond)
}

// runEveryAtLeastOnce is testRunEveryAtLeastOnce with a period, a TTL, and,
// unless 0, how far into a period (on the local clock) the processes
// start.
func runEveryAtLeastOnce(t *testing.T, bin string, every, ttl, startInto time.Duration) {
	db := pgtest.New(t)
	const job = "once-job"
	timing := append(slices.Clone(fast), "--ttl", ttl.String())
	shared := t.TempDir()
	runs := filepath.Join(shared, "runs")
	armed := filepath.Join(shared, "armed")
	first := filepath.Join(shared, "first")
	// The first run once armed records itself and hangs; every other run
	// appends its line.
	script := writeScript(t, shared, `
trap '' TERM
if [ -e `+armed+` ] && mkdir `+first+` 2>/dev/null; then
	echo "$PGLEADER_INSTANT $PGLEADER_TOKEN $PGLEADER_ATTEMPT $PGLEADER_OWNER" > `+first+`/run.tmp && mv `+first+`/run.tmp `+first+`/run
	echo $PPID > `+first+`/pgleader.tmp && mv `+first+`/pgleader.tmp `+first+`/pgleader.pid
	echo $$ > `+first+`/child.tmp && mv `+first+`/child.tmp `+first+`/child.pid
	exec sleep 300
fi
`+appendLine(runs))
	if startInto > 0 {
		time.Sleep((startInto - time.Duration(time.Now().UnixNano())%every + every) % every)
	}
	var procs []*process
	owners := []string{"replica-a", "replica-b", "replica-c"}
	for _, owner := range owners {
		args := append([]string{"run", "--database", db.URL, "--key", job, "--every", every.String(), "--at-least-once",
			"--retry-within", "20s", "--owner", owner}, timing...)
		procs = append(procs, start(t, bin, t.TempDir(), nil, append(args, "--", script)...))
	}
	waitLines(t, runs, 2)
	writeFile(t, armed)
	pid := waitPID(t, filepath.Join(first, "pgleader.pid"))
	child := waitPID(t, filepath.Join(first, "child.pid"))
	eventually(t, "the first run wrote its line", func() bool { return readFile(t, filepath.Join(first, "run")) != "" })
	firstRun := readLines(t, filepath.Join(first, "run"))[0]
	var killed *process
	var others []*process
	var stopped []string // the others' owners
	for i, p := range procs {
		if p.cmd.Process.Pid == pid {
			killed = p
		} else {
			others, stopped = append(others, p), append(stopped, owners[i])
		}
	}
	if killed == nil {
		t.Fatalf("the first run's parent %d is none of the pgleader processes", pid)
	}
	killed.signal(t, syscall.SIGKILL)
	killed.wait(t)
	eventually(t, "the hanging command died with its pgleader", func() bool { return !alive(child) })

	// The instant is taken over once the killed replica's lease lapsed.
	for deadline := time.Now().Add(hang); !slices.ContainsFunc(readLines(t, runs), func(l jobLine) bool { return l.instant.Equal(firstRun.instant) }); {
		if time.Now().After(deadline) {
			var logs []string
			for _, p := range procs {
				logs = append(logs, p.errors(t))
			}
			t.Fatalf("after %v: the first instant %s did not run again; the runs: %+v; the logs:\n%s",
				hang, firstRun.raw, jobRuns(t, db, job), strings.Join(logs, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitInstants(t, db, job, every, "20 instants, 5 after the killed run's", func(s instants) bool {
		return s.count() >= 20 && s.count() > s.index(firstRun.instant)+5
	})
	stopAll(t, runs, others...)

	s := readInstants(t, db, job, every)
	lines := readLines(t, runs)
	recorded := checkOncePerInstant(t, db, job, lines, false)
	defer func() {
		if t.Failed() {
			t.Logf("runs:\n%s\npgleader.job_run: %+v", readFile(t, runs), recorded)
		}
	}()
	if n := s.count(); n < 20 {
		t.Errorf("%d instants from the first run to the last; want at least 20", n)
	}
	for _, l := range lines {
		switch {
		case l.instant.Equal(firstRun.instant):
			if l.attempt != 2 || l.token <= firstRun.token || l.owner == firstRun.owner {
				t.Errorf("the killed run's instant %s ran again as %+v; want attempt 2 by another replica with a token above %d",
					l.raw, l, firstRun.token)
			}
		case l.attempt != 1:
			t.Errorf("instant %s ran as attempt %d; only the killed run's instant is retried", l.raw, l.attempt)
		}
	}
	retry := recorded[firstRun.instant]
	if retry.state != "done" || retry.attempt != 2 {
		t.Errorf("pgleader.job_run for the killed run's instant: %+v, want done as attempt 2", retry)
	}
	caught := 0
	for instant, r := range recorded {
		switch {
		case r.state == "done":
		case caughtStarting(recorded, lines, instant, stopped...):
			caught++
		default:
			t.Errorf("instant %d: run by %s is %s; want done", s.index(instant), r.owner, r.state)
		}
	}
	// The instants that came while the hung run held the job, and until its
	// lease expired, may have no run: a runner does not start them late
	// (--missed skip), and at least once retries runs, not instants.
	missing, busy := passedOver(recorded, s.missing(recorded), firstRun.instant)
	for _, at := range missing {
		if !at.After(firstRun.instant) || !at.Before(retry.startedAt) {
			t.Errorf("instant %d has no run; only those between the hung instant %d and its retry may lack one",
				s.index(at), s.index(firstRun.instant))
		}
	}
	t.Logf("%d instants, %d runs, 1 retried (instant %d, token %d → %d, %v after its instant), %d missed while the hung run held the job, %d while an earlier run ran late, %d left running by a stop as their command started",
		s.count(), len(recorded), s.index(firstRun.instant), firstRun.token, retry.token,
		retry.startedAt.Sub(firstRun.instant).Round(100*time.Millisecond), len(missing), busy, caught)
}

// testStatusJobs lists jobs with no run, a run going on, a run done and one
// failed, all of them or one.
func testStatusJobs(t *testing.T, bin string) {
	db := pgtest.New(t)
	ctx := context.Background()
	header := "JOB +SCHEDULE +NEXT +LAST RUN +OWNER +TOKEN +STATE +ATTEMPT +TOOK +ERROR\n"
	code, stdout, stderr := runCLI(t, bin, nil, "status", "--jobs", "--database", db.URL)
	if !regexp.MustCompile("^"+header+"$").MatchString(stdout) || code != 0 {
		t.Fatalf("status --jobs without jobs: status %d, stdout %q, stderr:\n%s", code, stdout, stderr)
	}

	if _, err := db.Pool.Exec(ctx, `SELECT pgleader.job_schedule('a-never-ran', 'cron 0 3 * * *', NULL)`); err != nil {
		t.Fatal(err)
	}
	for _, job := range []struct{ name, command string }{
		{"b-done", "true"},
		{"c-failed", "exit 3"},
		{"d-running", "exec sleep 300"},
	} {
		args := append([]string{"run", "--database", db.URL, "--key", job.name, "--every", "1s", "--owner", "pod-" + job.name}, fast...)
		p := start(t, bin, t.TempDir(), nil, append(args, "--", "sh", "-c", job.command)...)
		state := map[string]string{"b-done": "done", "c-failed": "failed", "d-running": "running"}[job.name]
		eventually(t, job.name+" has a run "+state, func() bool {
			return slices.ContainsFunc(slices.Collect(mapValues(jobRuns(t, db, job.name))), func(r jobRunRow) bool { return r.state == state })
		})
		if job.name == "d-running" {
			code, stdout, stderr = runCLI(t, bin, nil, "status", "--database", db.URL, "d-running", "--jobs")
			running := regexp.MustCompile("^" + header +
				`d-running +every 1s +\S+Z +\S+Z +pod-d-running +\d+ +running +1 +\d[\d.]*m?s so far +-\n$`)
			if code != 0 || !running.MatchString(stdout) {
				t.Errorf("status --jobs d-running: status %d, stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
		}
		p.signal(t, syscall.SIGTERM)
		if code := p.wait(t); code != 0 {
			t.Errorf("%s: exit status after SIGTERM %d, want 0; stderr:\n%s", job.name, code, p.errors(t))
		}
	}

	code, stdout, stderr = runCLI(t, bin, nil, "status", "--database", db.URL, "--jobs")
	table := regexp.MustCompile("^" + header +
		`a-never-ran +cron 0 3 \* \* \* +- +- +- +- +- +- +- +-\n` +
		`b-done +every 1s +\S+Z +\S+Z +pod-b-done +\d+ +done +1 +\d[\d.]*[mµn]?s +-\n` +
		`c-failed +every 1s +\S+Z +\S+Z +pod-c-failed +\d+ +failed +1 +\d[\d.]*[mµn]?s +"command exited with status 3"\n` +
		// Stopped in its run, which its term's end left unrecorded.
		`d-running +every 1s +\S+Z +\S+Z +pod-d-running +\d+ +running +1 +\S+ so far +-\n$`)
	if code != 0 || !table.MatchString(stdout) {
		t.Errorf("status --jobs: status %d, stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	code, stdout, _ = runCLI(t, bin, nil, "status", "--database", db.URL, "--jobs", "c-failed")
	if lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n"); code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[1], "c-failed ") {
		t.Errorf("status --jobs c-failed: status %d, stdout:\n%s", code, stdout)
	}
	code, stdout, _ = runCLI(t, bin, nil, "status", "--database", db.URL, "--jobs", "no-such-job")
	if !regexp.MustCompile("^"+header+"$").MatchString(stdout) || code != 0 {
		t.Errorf("status --jobs no-such-job: status %d, stdout:\n%s", code, stdout)
	}
}

// writeFile creates the file name, empty.
func writeFile(t *testing.T, name string) {
	t.Helper()
	if err := os.WriteFile(name, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func mapValues[K comparable, V any](m map[K]V) func(func(V) bool) {
	return func(yield func(V) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

// testJobsNotMigrated: on a schema before jobs (17), run --every and
// status --jobs say to migrate, with exit status 1.
func testJobsNotMigrated(t *testing.T, bin string) {
	db := pgtest.NewEmpty(t)
	env := []string{"DATABASE_URL=" + db.URL}
	if code, _, stderr := runCLI(t, bin, env, "migrate", "to", "17"); code != 0 {
		t.Fatalf("migrate to 17: status %d, stderr:\n%s", code, stderr)
	}
	for _, args := range [][]string{
		{"status", "--jobs"},
		append(append([]string{"run", "--key", "old-schema", "--every", "1s"}, fast...), "--", "true"),
	} {
		code, _, stderr := runCLI(t, bin, env, args...)
		if code != 1 || !strings.Contains(stderr, "run 'pgleader migrate up'") {
			t.Errorf("pgleader %q on schema 17: status %d, stderr:\n%s\nwant 1 and how to migrate", args, code, stderr)
		}
	}
}
