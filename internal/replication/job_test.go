package replication_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/pgleader/pgleader/internal/chaos"
	"github.com/pgleader/pgleader/migrations"
	"github.com/pgleader/pgleader/pgleader"
)

// jobRan is one run of a job's function, as the function saw it.
type jobRan struct {
	instant time.Time
	token   int64
	entered time.Time
}

// TestJobAcrossFailover runs a job every second through a path that
// follows the primary's address. Its first runs replicate; then
// replication is cut and the next runs' rows exist only on the primary,
// which dies; the standby is promoted and the path moves to it. The new
// primary starts no run before its grace ends (max_ttl, 3 s here): the
// instants in it are passed over (Missed: skip). The runs after it draw
// tokens above every token the old primary issued (the token epochs), and
// no instant runs twice, although the rows of the last runs on the old
// primary were lost. (With a period longer than the grace, or
// MissedRunLatest, an instant whose row was lost could run again after the
// grace: docs/jobs.md says so; this test does not cover that case.)
func TestJobAcrossFailover(t *testing.T) {
	t.Parallel()
	bin := postgresBin(t)
	ctx := context.Background()
	primary := startCluster(t, bin, chaos.ClusterOptions{})
	repl := startProxy(t, primary.Addr())
	standby := startStandby(t, primary, repl.Addr(), chaos.ClusterOptions{})
	exec1(t, dbURL(primary.Addr(), "postgres"), "CREATE DATABASE jobs")
	if err := migrations.UpURL(ctx, dbURL(primary.Addr(), "jobs")); err != nil {
		t.Fatal(err)
	}
	exec1(t, dbURL(primary.Addr(), "jobs"), `SELECT pgleader.set_max_ttl('3 seconds')`)

	path := startProxy(t, primary.Addr()) // the primary's address: moves at the failover
	var mu sync.Mutex
	var ran []jobRan
	runs := func() []jobRan {
		mu.Lock()
		defer mu.Unlock()
		return append([]jobRan(nil), ran...)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- pgleader.RunJob(runCtx, pgleader.NewPostgres(pool(t, dbURL(path.Addr(), "jobs")), pgleader.WithLogger(quiet)),
			pgleader.Job{Name: "tick", Every: time.Second, Owner: "a", Logger: quiet,
				Spec: pgleader.Spec{TTL: 2 * time.Second, RenewEvery: 500 * time.Millisecond, CampaignEvery: 200 * time.Millisecond,
					Margin: 100 * time.Millisecond, YieldGrace: 200 * time.Millisecond, ReleaseTimeout: 200 * time.Millisecond},
				Run: func(ctx context.Context, term *pgleader.Term, r pgleader.JobRun) error {
					mu.Lock()
					ran = append(ran, jobRan{r.Instant, r.Token, time.Now()})
					mu.Unlock()
					return nil
				}})
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("RunJob: %v", err)
			}
		}
	}
	defer stop()

	waitUntil(t, "3 runs", liveness, func() bool { return len(runs()) >= 3 })
	waitReplayed(t, pool(t, dbURL(primary.Addr(), "postgres")), pool(t, dbURL(standby.Addr(), "postgres")))
	repl.Cut() // nothing from here on reaches the standby
	cut := len(runs())
	waitUntil(t, "2 runs after the cut", liveness, func() bool { return len(runs()) >= cut+2 })
	if err := primary.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	before := runs()
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	path.Retarget(standby.Addr())
	waitUntil(t, "3 runs on the new primary", liveness, func() bool {
		n := 0
		for _, r := range runs() {
			if r.entered.After(promoted) {
				n++
			}
		}
		return n >= 3
	})
	stop()

	s := pool(t, dbURL(standby.Addr(), "jobs"))
	var graceUntil time.Time
	if err := s.QueryRow(ctx, `SELECT grace_until FROM pgleader.grace()`).Scan(&graceUntil); err != nil {
		t.Fatal(err)
	}
	var maxOld int64
	lost := 0
	for _, r := range before {
		maxOld = max(maxOld, r.token)
		var n int
		if err := s.QueryRow(ctx, `SELECT count(*) FROM pgleader.job_run WHERE job = 'tick' AND instant = $1`, r.instant).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			lost++
		}
	}
	if lost == 0 {
		t.Fatalf("no run's row was lost in the failover (%d runs before it): the scenario did not happen", len(before))
	}
	seen := map[time.Time]bool{}
	after := 0
	for _, r := range runs() {
		if seen[r.instant] {
			t.Errorf("instant %v ran twice", r.instant)
		}
		seen[r.instant] = true
		if !r.entered.After(promoted) {
			continue
		}
		after++
		var started time.Time
		if err := s.QueryRow(ctx, `SELECT started_at FROM pgleader.job_run WHERE job = 'tick' AND instant = $1`, r.instant).Scan(&started); err != nil {
			t.Fatalf("the run of %v on the new primary: %v", r.instant, err)
		}
		if started.Before(graceUntil) {
			t.Errorf("the run of %v started at %v on the new primary, in its grace (until %v)", r.instant, started, graceUntil)
		}
		if r.token <= maxOld {
			t.Errorf("the run of %v on the new primary has token %d, not above the old primary's %d", r.instant, r.token, maxOld)
		}
	}
	t.Logf("%d runs before the failover (%d rows lost with it, tokens up to %d), %d after, the first at %v past the grace's end",
		len(before), lost, maxOld, after, firstAfter(runs(), promoted).Sub(graceUntil).Round(10*time.Millisecond))
}

// firstAfter is when the first run entered after t entered.
func firstAfter(rs []jobRan, t time.Time) time.Time {
	for _, r := range rs {
		if r.entered.After(t) {
			return r.entered
		}
	}
	return time.Time{}
}
