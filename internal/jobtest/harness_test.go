package jobtest_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/jobtest"
	"github.com/pgleader/pgleader/internal/pgtest"
)

// hang bounds every wait of these tests. It detects a hang; it asserts no
// timing.
const hang = 60 * time.Second

// entryTable is the table the replicas' job function writes: one entry per
// run it starts, completed when the run ends. No key on (job, instant): an
// instant run twice shows as two entries.
const entryTable = `CREATE TABLE jobtest_entry (
    job          text        NOT NULL,
    instant      timestamptz NOT NULL,
    attempt      integer     NOT NULL,
    owner        text        NOT NULL,
    token        bigint      NOT NULL,
    fence_before bigint      NOT NULL,
    written_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    completed_at timestamptz,
    PRIMARY KEY (job, instant, token)
)`

// newDB returns a migrated database with the entry table.
func newDB(t *testing.T) *pgtest.DB {
	t.Helper()
	db := pgtest.New(t)
	if _, err := db.Pool.Exec(context.Background(), entryTable); err != nil {
		t.Fatal(err)
	}
	return db
}

// build compiles the replica into a temporary directory, with the race
// detector if the test itself runs with it.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "replica")
	args := []string{"build", "-o", bin}
	if raceEnabled() {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, "./replica")...).CombinedOutput()
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

// replica is one running replica process.
type replica struct {
	owner string
	cmd   *exec.Cmd
	out   pgtest.Buffer
	done  chan struct{}
	err   error // set before done is closed
}

// start runs a replica named owner. It is killed, if still running, when the
// test ends, and its output is logged if the test failed.
func start(t *testing.T, bin, owner string, args ...string) *replica {
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

// run is a row of pgleader.job_run.
type run struct {
	Instant   time.Time
	State     string
	Owner     string
	Token     int64
	Attempt   int
	StartedAt time.Time
	// FinishedAt is when the run's end was recorded; nil while running.
	FinishedAt *time.Time
}

// entry is a row of jobtest_entry.
type entry struct {
	Instant     time.Time
	Attempt     int
	Owner       string
	Token       int64
	FenceBefore int64
	Completed   bool
}

// history is what the database says happened to a job.
type history struct {
	every   time.Duration
	runs    []run   // by instant
	entries []entry // by instant, then token
}

func readHistory(t *testing.T, pool *pgxpool.Pool, job string, every time.Duration) history {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	h := history{every: every}
	rows, err := pool.Query(ctx, `SELECT instant, state, owner, token, attempt, started_at, finished_at
		FROM pgleader.job_run WHERE job = $1 ORDER BY instant`, job)
	if err != nil {
		t.Fatal(err)
	}
	h.runs, err = pgx.CollectRows(rows, pgx.RowToStructByPos[run])
	if err != nil {
		t.Fatal(err)
	}
	rows, err = pool.Query(ctx, `SELECT instant, attempt, owner, token, fence_before, completed_at IS NOT NULL
		FROM jobtest_entry WHERE job = $1 ORDER BY instant, token`, job)
	if err != nil {
		t.Fatal(err)
	}
	h.entries, err = pgx.CollectRows(rows, pgx.RowToStructByPos[entry])
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// index numbers instants from the job's first run: 0, 1, 2, …
func (h history) index(instant time.Time) int {
	if len(h.runs) == 0 {
		return -1
	}
	return int(instant.Sub(h.runs[0].Instant) / h.every)
}

// instants is the number of instants from the first run to the last.
func (h history) instants() int {
	if len(h.runs) == 0 {
		return 0
	}
	return h.index(h.runs[len(h.runs)-1].Instant) + 1
}

// missing lists the instants between the first run and the last that have
// no run.
func (h history) missing() []time.Time {
	var out []time.Time
	for i := 1; i < len(h.runs); i++ {
		for at := h.runs[i-1].Instant.Add(h.every); at.Before(h.runs[i].Instant); at = at.Add(h.every) {
			out = append(out, at)
		}
	}
	return out
}

// passedOver is jobtest.PassedOver on the history's runs.
func (h history) passedOver(missing []time.Time, except time.Time) ([]time.Time, int) {
	ended := make([]jobtest.Ended, len(h.runs))
	for i, r := range h.runs {
		ended[i] = jobtest.Ended{Instant: r.Instant, FinishedAt: r.FinishedAt}
	}
	return jobtest.PassedOver(ended, missing, except)
}

// entriesAt returns the entries of one instant.
func (h history) entriesAt(instant time.Time) []entry {
	var out []entry
	for _, e := range h.entries {
		if e.Instant.Equal(instant) {
			out = append(out, e)
		}
	}
	return out
}

// runAt returns the run of one instant, if any.
func (h history) runAt(instant time.Time) (run, bool) {
	for _, r := range h.runs {
		if r.Instant.Equal(instant) {
			return r, true
		}
	}
	return run{}, false
}

// waitFor polls the job's history until cond returns true, and fails the
// test after hang.
func waitFor(t *testing.T, pool *pgxpool.Pool, job string, every time.Duration, what string, cond func(history) bool) history {
	t.Helper()
	return waitWithin(t, hang, pool, job, every, what, cond)
}

// waitWithin is waitFor with a bound of its own.
func waitWithin(t *testing.T, within time.Duration, pool *pgxpool.Pool, job string, every time.Duration, what string,
	cond func(history) bool) history {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		h := readHistory(t, pool, job, every)
		if cond(h) {
			return h
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s; %d runs, %d entries", within, what, len(h.runs), len(h.entries))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (h history) String() string {
	s := ""
	for _, r := range h.runs {
		s += fmt.Sprintf("  run #%d %s %s owner=%s token=%d attempt=%d\n", h.index(r.Instant),
			r.Instant.Format("15:04:05"), r.State, r.Owner, r.Token, r.Attempt)
	}
	for _, e := range h.entries {
		s += fmt.Sprintf("  entry #%d owner=%s token=%d attempt=%d fence_before=%d completed=%v\n", h.index(e.Instant),
			e.Owner, e.Token, e.Attempt, e.FenceBefore, e.Completed)
	}
	return s
}
