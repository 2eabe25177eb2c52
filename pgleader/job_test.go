package pgleader_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/migrations"
	"github.com/pgleader/pgleader/pgleader"
)

func jobSpec() pgleader.Spec {
	return pgleader.Spec{TTL: 2 * time.Second, RenewEvery: 500 * time.Millisecond, CampaignEvery: 200 * time.Millisecond,
		Margin: 100 * time.Millisecond, YieldGrace: 200 * time.Millisecond, ReleaseTimeout: 200 * time.Millisecond}
}

// entries records what the job functions saw.
type entries struct {
	mu  sync.Mutex
	all []pgleader.JobRun
	by  []string
}

func (e *entries) add(owner string, r pgleader.JobRun) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, r)
	e.by = append(e.by, owner)
}

func (e *entries) list() ([]pgleader.JobRun, []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]pgleader.JobRun(nil), e.all...), append([]string(nil), e.by...)
}

// runJob starts RunJob in the background; the returned stop cancels it and
// returns its error.
func runJob(t *testing.T, pool *pgxpool.Pool, job pgleader.Job) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pgleader.RunJob(ctx, pgleader.NewPostgres(pool), job) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				err = errors.New("RunJob did not return 30 s after its context was cancelled")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// TestJobOncePerInstant: three runners of a job every second; no instant
// runs twice, each run is recorded done by the term that ran it, and the
// runs' tokens grow with their instants.
func TestJobOncePerInstant(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	oncePerInstant(t, db, func() *pgxpool.Pool { return db.NewPool(t) })
}

// TestJobThroughPgbouncer: the same through pgbouncer in transaction
// pooling mode, each runner on a pool with pgx's defaults: the job's
// statements are single statements, and a run's term outlives the server
// connections that carry them.
func TestJobThroughPgbouncer(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	via := db.Pgbouncer(t)
	oncePerInstant(t, db, func() *pgxpool.Pool {
		p, err := pgxpool.New(context.Background(), via)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	})
}

// oncePerInstant runs three runners of a job every second, each on a pool
// from newPool, until 6 instants ran, and checks each ran once, recorded
// done by the term that ran it, with tokens growing.
func oncePerInstant(t *testing.T, db *pgtest.DB, newPool func() *pgxpool.Pool) {
	t.Helper()
	var got entries
	var stops []func() error
	for _, owner := range []string{"a", "b", "c"} {
		stops = append(stops, runJob(t, newPool(), pgleader.Job{
			Name: "tick", Every: time.Second, Owner: owner, Spec: jobSpec(),
			Run: func(ctx context.Context, term *pgleader.Term, r pgleader.JobRun) error {
				if term.Token() != r.Token || r.Attempt != 1 || r.Job != "tick" {
					return fmt.Errorf("run %+v in term %d", r, term.Token())
				}
				got.add(owner, r)
				return nil
			},
		}))
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if runs, _ := got.list(); len(runs) >= 6 {
			break
		}
		if time.Now().After(deadline) {
			runs, _ := got.list()
			t.Fatalf("%d runs after 60 s, want 6", len(runs))
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, stop := range stops {
		if err := stop(); err != nil {
			t.Fatalf("RunJob = %v", err)
		}
	}
	runs, by := got.list()
	seen := map[time.Time]bool{}
	for i, r := range runs {
		if seen[r.Instant] {
			t.Fatalf("instant %v ran twice: %+v", r.Instant, runs)
		}
		seen[r.Instant] = true
		if r.Instant.Truncate(time.Second) != r.Instant {
			t.Errorf("instant %v is not on a second", r.Instant)
		}
		var state, owner string
		var token int64
		if err := db.Pool.QueryRow(context.Background(),
			`SELECT state, owner, token FROM pgleader.job_run WHERE job = 'tick' AND instant = $1`, r.Instant).Scan(&state, &owner, &token); err != nil {
			t.Fatalf("the run of %v: %v", r.Instant, err)
		}
		if state != "done" || owner != by[i] || token != r.Token {
			t.Errorf("the run of %v is recorded %s by %s with token %d; it ran by %s with token %d", r.Instant, state, owner, token, by[i], r.Token)
		}
		if i > 0 && (!r.Instant.After(runs[i-1].Instant) || r.Token <= runs[i-1].Token) {
			t.Errorf("run %d (%v, token %d) does not follow run %d (%v, token %d)", i, r.Instant, r.Token, i-1, runs[i-1].Instant, runs[i-1].Token)
		}
	}
	var rows int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pgleader.job_run WHERE job = 'tick'`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != len(runs) {
		t.Errorf("%d runs recorded, %d ran", rows, len(runs))
	}
	st, err := pgleader.NewPostgres(db.Pool).JobStatuses(context.Background(), "tick")
	if err != nil {
		t.Fatal(err)
	}
	last := runs[len(runs)-1]
	if len(st) != 1 || st[0].Schedule != "every 1s" || !st[0].Last.Instant.Equal(last.Instant) || st[0].Last.State != "done" || st[0].Last.Token != last.Token {
		t.Errorf("JobStatuses = %+v, want the last run %+v, done", st, last)
	}
	if st[0].NextAt.Before(last.Instant) {
		t.Errorf("next instant %v before the last run's %v", st[0].NextAt, last.Instant)
	}
}

// deadRun makes the state a runner leaves when it dies in the middle of
// a run: it holds the job's lease (for ttl) and its run of instant is
// running.
func deadRun(t *testing.T, pool *pgxpool.Pool, job string, instant time.Time, ttl time.Duration, fence string) int64 {
	t.Helper()
	ctx := context.Background()
	var token int64
	if err := pool.QueryRow(ctx, `SELECT token FROM pgleader.acquire($1, 'dead', $2)`, job, ttl).Scan(&token); err != nil {
		t.Fatal(err)
	}
	var outcome string
	var fenceArg any
	if fence != "" {
		fenceArg = fence
	}
	if err := pool.QueryRow(ctx, `SELECT outcome FROM pgleader.job_claim($1, $2, 'dead', $3, NULL, $4)`, job, instant, token, fenceArg).Scan(&outcome); err != nil || outcome != "run" {
		t.Fatalf("the dead runner's claim: %q, %v", outcome, err)
	}
	return token
}

// lastHour is the instant of an hourly job that passed last.
func lastHour(t *testing.T, pool *pgxpool.Pool) time.Time {
	var now time.Time
	if err := pool.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	if now.Sub(now.Truncate(time.Hour)) > 59*time.Minute {
		t.Skip("the hour turns within a minute; this test wants one instant")
	}
	return now.Truncate(time.Hour).UTC()
}

// TestJobAtLeastOnceTakesOver: a runner died in the middle of a run (its
// lease still held); a runner with AtLeastOnce waits for the lease to lapse,
// takes the run over with a higher token (attempt 2), and its claim takes
// the fence, so the dead run's late write is refused. Without AtLeastOnce
// the run is left as it is.
func TestJobAtLeastOnceTakesOver(t *testing.T) {
	t.Parallel()
	for _, atLeastOnce := range []bool{false, true} {
		t.Run(fmt.Sprint("AtLeastOnce=", atLeastOnce), func(t *testing.T) {
			t.Parallel()
			db := pgtest.New(t)
			instant := lastHour(t, db.Pool)
			dead := deadRun(t, db.Pool, "hourly", instant, 2*time.Second, "report")
			var got entries
			ran := make(chan struct{}, 1)
			stop := runJob(t, db.NewPool(t), pgleader.Job{
				Name: "hourly", Every: time.Hour, Missed: pgleader.MissedRunLatest, AtLeastOnce: atLeastOnce,
				Fence: "report", Owner: "b", Spec: jobSpec(),
				Run: func(ctx context.Context, _ *pgleader.Term, r pgleader.JobRun) error {
					got.add("b", r)
					ran <- struct{}{}
					return nil
				},
			})
			select {
			case <-ran:
			case <-time.After(8 * time.Second):
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			runs, _ := got.list()
			var state, owner string
			var attempt int
			var token int64
			if err := db.Pool.QueryRow(context.Background(), `SELECT state, owner, token, attempt FROM pgleader.job_run WHERE job = 'hourly' AND instant = $1`,
				instant).Scan(&state, &owner, &token, &attempt); err != nil {
				t.Fatal(err)
			}
			_, lateErr := db.Pool.Exec(context.Background(), `SELECT pgleader.fence_write('report', $1)`, dead)
			if !atLeastOnce {
				if len(runs) != 0 || state != "running" || owner != "dead" || token != dead {
					t.Fatalf("at most once: runs %+v, the run %s by %s (token %d); want none, the dead run's left as it was", runs, state, owner, token)
				}
				if lateErr != nil {
					t.Fatalf("the dead run's write, with nobody after it: %v", lateErr)
				}
				return
			}
			if len(runs) != 1 || !runs[0].Instant.Equal(instant) || runs[0].Attempt != 2 || runs[0].Token <= dead {
				t.Fatalf("runs %+v; want one of %v, attempt 2, with a token above %d", runs, instant, dead)
			}
			if state != "done" || owner != "b" || attempt != 2 || token != runs[0].Token {
				t.Fatalf("the run is %s by %s (token %d, attempt %d)", state, owner, token, attempt)
			}
			if lateErr == nil {
				t.Fatalf("the dead run's fenced write after the retry's claim was accepted")
			}
		})
	}
}

// TestJobMissedPolicy: an hourly job whose last instant passed with no run
// runs it at start under MissedRunLatest, and not under MissedSkip (the
// instant is more than a minute old unless the hour just turned); a second
// runner with MissedRunLatest finds it run and skips.
func TestJobMissedPolicy(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	instant := lastHour(t, db.Pool)
	if time.Since(instant) < 2*time.Minute {
		t.Skip("the hour just turned: the instant may still start under MissedSkip")
	}
	var skipped, ran entries
	skips := make(chan pgleader.Observation, 16)
	obs := pgleader.ObserverFunc(func(o pgleader.Observation) {
		if o.Kind == pgleader.ObserveJobSkipped {
			skips <- o
		}
	})
	count := func(e *entries) int { r, _ := e.list(); return len(r) }
	stop := runJob(t, db.NewPool(t), pgleader.Job{Name: "hourly", Every: time.Hour, Spec: jobSpec(), Owner: "skip",
		Run: func(_ context.Context, _ *pgleader.Term, r pgleader.JobRun) error { skipped.add("skip", r); return nil }})
	time.Sleep(time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := count(&skipped); n != 0 {
		t.Fatalf("MissedSkip ran %d runs of an instant more than a minute old", n)
	}
	for i, owner := range []string{"latest-1", "latest-2"} {
		done := make(chan struct{}, 1)
		stop := runJob(t, db.NewPool(t), pgleader.Job{Name: "hourly", Every: time.Hour, Missed: pgleader.MissedRunLatest, Spec: jobSpec(),
			Owner: owner, Observer: obs,
			Run: func(_ context.Context, _ *pgleader.Term, r pgleader.JobRun) error {
				ran.add(owner, r)
				done <- struct{}{}
				return nil
			}})
		if i == 0 {
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("MissedRunLatest did not run the missed instant in 10 s")
			}
		} else {
			select {
			case o := <-skips:
				if !o.Instant.Equal(instant) || o.Owner != owner {
					t.Fatalf("skipped %+v, want %v by %s", o, instant, owner)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the second runner did not skip the instant in 10 s")
			}
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	if runs, by := ran.list(); len(runs) != 1 || !runs[0].Instant.Equal(instant) || by[0] != "latest-1" {
		t.Fatalf("runs %+v by %v; want one of %v by latest-1", runs, by, instant)
	}
}

// TestJobFailedRun: a function's error is recorded as the run's, failed,
// and the observer hears of it.
func TestJobFailedRun(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	instant := lastHour(t, db.Pool)
	obs := make(chan pgleader.Observation, 16)
	stop := runJob(t, db.Pool, pgleader.Job{Name: "hourly", Every: time.Hour, Missed: pgleader.MissedRunLatest, Spec: jobSpec(),
		Observer: pgleader.ObserverFunc(func(o pgleader.Observation) {
			if o.Kind == pgleader.ObserveJobRun {
				obs <- o
			}
		}),
		Run: func(context.Context, *pgleader.Term, pgleader.JobRun) error {
			return errors.New("the report's query failed")
		}})
	var o pgleader.Observation
	select {
	case o = <-obs:
	case <-time.After(10 * time.Second):
		t.Fatal("no run in 10 s")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if o.Err == nil || !o.Instant.Equal(instant) || o.Key != "hourly" {
		t.Fatalf("observed %+v", o)
	}
	st, err := pgleader.NewPostgres(db.Pool).JobStatuses(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || st[0].Last.State != "failed" || st[0].Last.Error != "the report's query failed" || st[0].Last.Duration() <= 0 {
		t.Fatalf("JobStatuses = %+v", st)
	}
}

// TestJobConfiguration: bad jobs are refused before anything is sent, and
// a database at schema 17 is refused as not migrated.
func TestJobConfiguration(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	p := pgleader.NewPostgres(db.Pool)
	run := func(context.Context, *pgleader.Term, pgleader.JobRun) error { return nil }
	for _, c := range []struct {
		job  pgleader.Job
		want string
	}{
		{pgleader.Job{Every: time.Hour, Run: run}, "Job.Name"},
		{pgleader.Job{Name: "j", Run: run}, "needs Every or Cron"},
		{pgleader.Job{Name: "j", Every: time.Hour, Cron: "@daily", Run: run}, "not both"},
		{pgleader.Job{Name: "j", Every: time.Millisecond, Run: run}, "at least 1s"},
		{pgleader.Job{Name: "j", Cron: "61 * * * *", Run: run}, "cron expression"},
		{pgleader.Job{Name: "j", Every: time.Hour}, "Job.Run is nil"},
		{pgleader.Job{Name: "j", Every: time.Hour, Run: run, Spec: pgleader.Spec{Key: "k"}}, "must be empty or Name"},
		{pgleader.Job{Name: "j", Every: time.Hour, Run: run, RetryWithin: time.Minute}, "AtLeastOnce is not"},
		{pgleader.Job{Name: "j", Every: time.Hour, Run: run, Missed: 7}, "unknown policy"},
	} {
		err := pgleader.RunJob(context.Background(), p, c.job)
		if !errors.Is(err, pgleader.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("RunJob(%+v) = %v, want ErrInvalid saying %q", c.job, err, c.want)
		}
	}
	old := pgtest.NewEmpty(t)
	if err := migrations.To(context.Background(), old.Pool, 17); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := pgleader.RunJob(ctx, pgleader.NewPostgres(old.Pool), pgleader.Job{Name: "j", Every: time.Hour, Run: run})
	if !errors.Is(err, pgleader.ErrNotMigrated) {
		t.Fatalf("RunJob on schema 17 = %v, want ErrNotMigrated", err)
	}
}

// TestJobSchedule: Every counts from the Unix epoch, Cron from its zone.
func TestJobSchedule(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 3, 14, 7, 30, 0, time.UTC)
	s, err := pgleader.ParseSchedule(7*time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	next := s.Next(at)
	if next.UnixNano()%int64(7*time.Minute) != 0 || !next.After(at) || next.Sub(at) > 7*time.Minute {
		t.Errorf("every 7m after %v: %v", at, next)
	}
	if l := s.Latest(at, at.Add(-time.Hour)); !l.Equal(next.Add(-7 * time.Minute)) {
		t.Errorf("latest every 7m at %v: %v", at, l)
	}
	if l := s.Latest(at, at.Add(-time.Second)); !l.IsZero() && l.Before(at.Add(-time.Second)) {
		t.Errorf("latest looked back too far: %v", l)
	}
	c, err := pgleader.ParseSchedule(0, "CRON_TZ=Europe/Paris 0 3 * * *")
	if err != nil {
		t.Fatal(err)
	}
	if n := c.Next(at); !n.Equal(time.Date(2026, 12, 4, 2, 0, 0, 0, time.UTC)) {
		t.Errorf("03:00 Paris after %v: %v", at, n)
	}
	if l := c.Latest(at, at.Add(-48*time.Hour)); !l.Equal(time.Date(2026, 12, 3, 2, 0, 0, 0, time.UTC)) {
		t.Errorf("latest 03:00 Paris at %v: %v", at, l)
	}
	if s.String() != "every 7m0s" || c.String() != "cron CRON_TZ=Europe/Paris 0 3 * * *" {
		t.Errorf("descriptions %q, %q", s, c)
	}
}

// TestJobRoles: a role granted pgleader's use (and nothing else) runs a
// job; another such role may not run a job of the same name, and RunJob
// says so at once; its fenced run cannot be taken by the other role.
func TestJobRoles(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	roleA, urlA := db.NewRole(t, "SELECT pgleader.grant_usage($1)")
	_, urlB := db.NewRole(t, "SELECT pgleader.grant_usage($1)")
	poolA, poolB := rolePool(t, urlA), rolePool(t, urlB)
	instant := lastHour(t, db.Pool)
	ran := make(chan pgleader.JobRun, 1)
	stop := runJob(t, poolA, pgleader.Job{Name: "hourly", Every: time.Hour, Missed: pgleader.MissedRunLatest, Fence: "hourly-report",
		Spec: jobSpec(), Run: func(_ context.Context, _ *pgleader.Term, r pgleader.JobRun) error { ran <- r; return nil }})
	select {
	case r := <-ran:
		if !r.Instant.Equal(instant) {
			t.Fatalf("ran %+v, want %v", r, instant)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("role a's job did not run in 10 s")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	st, err := pgleader.NewPostgres(poolA).JobStatuses(context.Background(), "hourly")
	if err != nil || len(st) != 1 || st[0].Role != roleA || st[0].Last.State != "done" {
		t.Fatalf("JobStatuses as role a = %+v, %v", st, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = pgleader.RunJob(ctx, pgleader.NewPostgres(poolB), pgleader.Job{Name: "hourly", Every: time.Hour, Spec: jobSpec(),
		Run: func(context.Context, *pgleader.Term, pgleader.JobRun) error { return errors.New("role b ran a's job") }})
	if !errors.Is(err, pgleader.ErrForbidden) || !strings.Contains(err.Error(), roleA) {
		t.Fatalf("RunJob as role b = %v, want ErrForbidden naming %s", err, roleA)
	}
}

// TestJobCronEvery: "@every D" is Every D, counted from the epoch: two
// replicas reading their clocks two seconds apart wait for the same instant
// (robfig/cron counts @every from the moment it is asked).
func TestJobCronEvery(t *testing.T) {
	t.Parallel()
	s, err := pgleader.ParseSchedule(0, "CRON_TZ=Europe/Paris @every 10s")
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)
	if a, b := s.Next(base.Add(time.Second)), s.Next(base.Add(3*time.Second)); !a.Equal(b) || !a.Equal(base.Add(10*time.Second)) {
		t.Fatalf("@every 10s after :01 and :03: %v and %v, want both %v", a, b, base.Add(10*time.Second))
	}
	for _, bad := range []string{"@every 500ms", "@every", "@every ten", "@every 1s 2s"} {
		if _, err := pgleader.ParseSchedule(0, bad); !errors.Is(err, pgleader.ErrInvalid) {
			t.Errorf("ParseSchedule(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

// TestJobTakesOverAfterAnInstant: a runner that starts while a dead
// runner's lease still holds (so it cannot take its run over yet) takes it
// over after one of its own instants, once the lease lapsed: a run left on
// an instant no live runner is attempting is not left forever.
func TestJobTakesOverAfterAnInstant(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	var now time.Time
	if err := db.Pool.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	left := now.Truncate(time.Second).Add(-5 * time.Second).UTC()
	dead := deadRun(t, db.Pool, "tick", left, 2*time.Second, "")
	retried := make(chan pgleader.JobRun, 1)
	stop := runJob(t, db.NewPool(t), pgleader.Job{Name: "tick", Every: time.Second, AtLeastOnce: true, RetryWithin: time.Minute,
		Owner: "b", Spec: jobSpec(),
		Run: func(_ context.Context, _ *pgleader.Term, r pgleader.JobRun) error {
			if r.Instant.Equal(left) {
				retried <- r
			}
			return nil
		}})
	select {
	case r := <-retried:
		if r.Attempt != 2 || r.Token <= dead {
			t.Fatalf("took over %+v; want attempt 2 with a token above %d", r, dead)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the run left at " + left.String() + " was not taken over in 20 s")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var state string
	if err := db.Pool.QueryRow(context.Background(), `SELECT state FROM pgleader.job_run WHERE job = 'tick' AND instant = $1`, left).Scan(&state); err != nil || state != "done" {
		t.Fatalf("the run left at %v is %q (%v), want done", left, state, err)
	}
}

// TestJobTTLAboveMaxTTL: a job whose TTL exceeds the database's max_ttl is
// refused when RunJob starts, not at its first instant's campaign (an
// hour away here), with an error that retrying cannot cure and that says
// the fix.
func TestJobTTLAboveMaxTTL(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.Pool.Exec(ctx, `SELECT pgleader.set_max_ttl('1 second')`); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	err := pgleader.RunJob(ctx, pgleader.NewPostgres(db.Pool), pgleader.Job{Name: "hourly", Every: time.Hour, Spec: jobSpec(),
		Run: func(context.Context, *pgleader.Term, pgleader.JobRun) error { return nil }})
	if !pgleader.Permanent(err) || !errors.Is(err, pgleader.ErrInvalid) || !strings.Contains(err.Error(), "max_ttl 1s") ||
		!strings.Contains(err.Error(), "set_max_ttl") {
		t.Fatalf("RunJob with a TTL of 2s over a max_ttl of 1s = %v; want ErrInvalid naming max_ttl and set_max_ttl", err)
	}
	t.Logf("refused after %v: %v", time.Since(started).Round(time.Millisecond), err)
}
