package gocronpgleader_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/gocronpgleader"
	"github.com/pgleader/pgleader/pgleader"
)

// entry is one entry into a job's body.
type entry struct {
	replica int
	at      time.Time // the real clock when the body was entered
	term    *pgleader.Term
	run     pgleader.JobRun
}

// fleet is a set of gocron schedulers, the replicas, each with a Locker of
// its own, running one job every second.
type fleet struct {
	t       *testing.T
	pool    *pgxpool.Pool
	job     string
	window  time.Duration
	entered chan struct{}

	mu      sync.Mutex
	entries []entry
	scheds  map[int]gocron.Scheduler
	locks   map[int]*atomic.Int64 // Lock calls, by replica
}

func newFleet(t *testing.T, job string, window time.Duration) *fleet {
	f := &fleet{t: t, pool: testPool(t), job: job, window: window, entered: make(chan struct{}, 1000),
		scheds: make(map[int]gocron.Scheduler), locks: make(map[int]*atomic.Int64)}
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for i, s := range f.scheds {
			_ = s.Shutdown()
			delete(f.scheds, i)
		}
	})
	return f
}

// countingLocker counts the Lock calls gocron makes: one per instant the
// replica's scheduler fires.
type countingLocker struct {
	*gocronpgleader.Locker
	n *atomic.Int64
}

func (c countingLocker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	c.n.Add(1)
	return c.Locker.Lock(ctx, key)
}

// start starts replica i, its clock off the real one by off.
func (f *fleet) start(i int, off time.Duration) {
	f.t.Helper()
	l, err := gocronpgleader.NewLocker(f.pool, gocronpgleader.Options{Window: f.window, Logger: quiet, Owner: fmt.Sprintf("replica-%d-%d", i, time.Now().UnixNano())})
	if err != nil {
		f.t.Fatal(err)
	}
	f.mu.Lock()
	if f.locks[i] == nil {
		f.locks[i] = new(atomic.Int64)
	}
	n := f.locks[i]
	f.mu.Unlock()
	s, err := gocron.NewScheduler(gocron.WithClock(newOffsetClock(off)), gocron.WithDistributedLocker(countingLocker{l, n}))
	if err != nil {
		f.t.Fatal(err)
	}
	body := func(ctx context.Context, t *pgleader.Term, r pgleader.JobRun) error {
		f.mu.Lock()
		f.entries = append(f.entries, entry{replica: i, at: time.Now(), term: t, run: r})
		f.mu.Unlock()
		f.entered <- struct{}{}
		return nil
	}
	if _, err := s.NewJob(gocron.CronJob("* * * * * *", true), gocron.NewTask(l.Task(f.job, body)), gocron.WithName(f.job)); err != nil {
		f.t.Fatal(err)
	}
	s.Start()
	f.mu.Lock()
	f.scheds[i] = s
	f.mu.Unlock()
}

// stop stops replica i's scheduler, waiting for its run in progress.
func (f *fleet) stop(i int) {
	f.t.Helper()
	f.mu.Lock()
	s := f.scheds[i]
	delete(f.scheds, i)
	f.mu.Unlock()
	if err := s.Shutdown(); err != nil {
		f.t.Fatal(err)
	}
}

// waitRuns waits until the job's body has been entered n times in all.
func (f *fleet) waitRuns(n int) {
	f.t.Helper()
	for {
		f.mu.Lock()
		got := len(f.entries)
		f.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-f.entered:
		case <-time.After(time.Minute):
			f.t.Fatalf("%d runs after a minute without one; want %d", got, n)
		}
	}
}

// check stops the replicas and checks that no two runs started less than
// Window apart on the database clock (the Locker's promise: the replicas'
// firings of one instant, the skewed one's included, fall within Window of
// each other, so two runs that close are one instant run twice), with one
// job_run row per body entry, done, with the body's instant and token. It
// logs the seconds of the real clock (the database's: same machine) in
// which no run started or more than one did: a scheduler that fires late
// on a loaded machine moves a run into the next second, which says
// nothing of the Locker (a make test beside another once counted a late
// run in the second after its own: one second with two runs, one with
// none).
func (f *fleet) check() {
	f.t.Helper()
	// Let the last run record its end before the schedulers stop.
	f.mu.Lock()
	last := f.entries[len(f.entries)-1].at
	f.mu.Unlock()
	time.Sleep(time.Until(last.Add(300 * time.Millisecond)))
	f.mu.Lock()
	var ids []int
	for i := range f.scheds {
		ids = append(ids, i)
	}
	f.mu.Unlock()
	for _, i := range ids {
		f.stop(i)
	}

	type row struct {
		instant time.Time
		state   string
		owner   string
	}
	rows := make(map[int64]row)
	rs, err := f.pool.Query(context.Background(), `SELECT instant, state, owner, token FROM pgleader.job_runs($1, 10000)`, f.job)
	if err != nil {
		f.t.Fatal(err)
	}
	for rs.Next() {
		var r row
		var token int64
		if err := rs.Scan(&r.instant, &r.state, &r.owner, &token); err != nil {
			f.t.Fatal(err)
		}
		rows[token] = r
	}
	if err := rs.Err(); err != nil {
		f.t.Fatal(err)
	}
	if len(rows) != len(f.entries) {
		f.t.Errorf("%d job_run rows for %d body entries", len(rows), len(f.entries))
	}
	perInstant := make(map[int64][]entry)
	ran := make(map[int]int)
	for _, e := range f.entries {
		r, ok := rows[e.run.Token]
		switch {
		case !ok:
			f.t.Errorf("body entered with token %d at %v: no job_run row", e.run.Token, e.run.Instant)
		case r.state != "done" || !r.instant.Equal(e.run.Instant) || r.owner != e.term.Owner():
			f.t.Errorf("body entered with token %d at %v by %s: row %+v", e.run.Token, e.run.Instant, e.term.Owner(), r)
		}
		s := e.at.Round(time.Second).Unix()
		perInstant[s] = append(perInstant[s], e)
		ran[e.replica]++
	}
	var secs []int64
	for s := range perInstant {
		secs = append(secs, s)
	}
	sort.Slice(secs, func(i, j int) bool { return secs[i] < secs[j] })
	doubles, missed := 0, 0
	for s := secs[0]; s <= secs[len(secs)-1]; s++ {
		switch es := perInstant[s]; len(es) {
		case 0:
			missed++
			f.t.Logf("second %v: no run started", time.Unix(s, 0).UTC())
		case 1:
		default:
			doubles++
			for _, e := range es {
				f.t.Logf("second %v: run by replica %d (token %d, claimed at %v)", time.Unix(s, 0).UTC(), e.replica, e.run.Token, e.run.Instant)
			}
		}
	}
	byInstant := slices.Clone(f.entries)
	slices.SortFunc(byInstant, func(a, b entry) int { return a.run.Instant.Compare(b.run.Instant) })
	for i := 1; i < len(byInstant); i++ {
		a, b := byInstant[i-1], byInstant[i]
		if gap := b.run.Instant.Sub(a.run.Instant); gap < f.window {
			f.t.Errorf("runs by replica %d (token %d) and replica %d (token %d) started %v apart on the database clock, less than Window (%v): one instant ran twice",
				a.replica, a.run.Token, b.replica, b.run.Token, gap, f.window)
		}
	}
	var calls []string
	for i := 0; i < len(f.locks); i++ {
		calls = append(calls, fmt.Sprintf("replica %d: %d Lock calls, %d runs", i, f.locks[i].Load(), ran[i]))
	}
	f.t.Logf("%d seconds, %d runs, %d seconds with two, %d with none; %v", secs[len(secs)-1]-secs[0]+1, len(f.entries), doubles, missed, calls)
}

// TestLockerSkew: three replicas run a job every second for 24 instants,
// one with its clock 2 s ahead (so it fires each instant two periods early,
// at the same real moments as the others): each instant runs exactly once.
func TestLockerSkew(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "skew", 500*time.Millisecond)
	for i, off := range []time.Duration{0, 0, 2 * time.Second} {
		f.start(i, off)
	}
	f.waitRuns(24)
	f.check()
}

// TestLockerRestart: as TestLockerSkew, but one replica is stopped after 8
// runs and started again (a new Locker, as a restarted process) 3 runs
// later; the others run the instants in between, and none runs twice.
func TestLockerRestart(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "restart", 500*time.Millisecond)
	for i, off := range []time.Duration{0, 0, 2 * time.Second} {
		f.start(i, off)
	}
	f.waitRuns(8)
	f.stop(0)
	f.waitRuns(11)
	f.start(0, 0)
	f.waitRuns(24)
	f.check()
}

// TestLockerSkewFiresLater: with a period longer than twice the skew, a
// replica whose clock is 2 s behind fires each instant 2 s after the
// other, finds its run within Window and does not run it again.
func TestLockerSkewFiresLater(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	const job = "later"
	var ranLate atomic.Int64
	runs := make(chan struct{}, 100)
	start := func(off time.Duration, late bool) (*atomic.Int64, gocron.Scheduler) {
		l, err := gocronpgleader.NewLocker(pool, gocronpgleader.Options{Window: 2500 * time.Millisecond, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		calls := new(atomic.Int64)
		s, err := gocron.NewScheduler(gocron.WithClock(newOffsetClock(off)), gocron.WithDistributedLocker(countingLocker{l, calls}))
		if err != nil {
			t.Fatal(err)
		}
		task := l.Task(job, func(context.Context, *pgleader.Term, pgleader.JobRun) error {
			if late {
				ranLate.Add(1)
			}
			runs <- struct{}{}
			return nil
		})
		if _, err := s.NewJob(gocron.CronJob("*/5 * * * * *", true), gocron.NewTask(task), gocron.WithName(job)); err != nil {
			t.Fatal(err)
		}
		s.Start()
		t.Cleanup(func() { _ = s.Shutdown() })
		return calls, s
	}
	_, first := start(0, false)
	// The late replica starts after the first run, so that each of its
	// firings follows one of the other's.
	<-runs
	lateCalls, late := start(-2*time.Second, true)
	for lateCalls.Load() < 4 {
		select {
		case <-runs:
		case <-time.After(time.Minute):
			t.Fatalf("the late replica fired %d times in a minute", lateCalls.Load())
		}
	}
	if err := errors.Join(late.Shutdown(), first.Shutdown()); err != nil {
		t.Fatal(err)
	}
	if n := ranLate.Load(); n != 0 {
		t.Errorf("the replica 2 s behind ran %d of the %d instants it fired; want 0", n, lateCalls.Load())
	}
}
