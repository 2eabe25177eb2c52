package pgleader_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/pgleader"
)

// endings records the observations of terms that ended early, and the
// slowest renewal, of electors and sets.
type endings struct {
	mu      sync.Mutex
	early   []string
	slowest time.Duration
}

func (e *endings) Observe(o pgleader.Observation) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case o.Kind == pgleader.ObserveTermEnding && o.Reason != pgleader.ReasonStopped:
		e.early = append(e.early, fmt.Sprintf("%s token %d: %v", o.Key, o.Token, o.Reason))
	case o.Kind == pgleader.ObserveRenewed:
		e.slowest = max(e.slowest, o.Took)
	}
}

func (e *endings) get() ([]string, time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.early...), e.slowest
}

// TestBlockedKeyDoesNotStallOthers: an outside transaction holds a
// lease-guarded lock on key b, so every campaign for b waits for its row
// lock until its deadline. An elector for key a and a set, on the same
// backend as b's elector, keep renewing: for four TTLs none of their terms
// ends early. (Sharing one connection, a renewal waited behind b's campaign
// for up to TTL - Margin - ReleaseTimeout - YieldGrace, past its own yield
// instant.)
func TestBlockedKeyDoesNotStallOthers(t *testing.T) {
	t.Parallel()
	t.Run("pool free", func(t *testing.T) { t.Parallel(); blockedKey(t, false) })
	t.Run("pool held by bodies", func(t *testing.T) { t.Parallel(); blockedKey(t, true) })
}

// blockedKey runs TestBlockedKeyDoesNotStallOthers; with holdPool, the
// test holds every connection of the backend's pool, as bodies that keep
// theirs would, while b's campaigns wait.
func blockedKey(t *testing.T, holdPool bool) {
	db := pgtest.New(t)
	ctx := context.Background()
	spec := func(key string) pgleader.Spec {
		return pgleader.Spec{Key: key, TTL: 3 * time.Second, RenewEvery: time.Second, CampaignEvery: 250 * time.Millisecond,
			Margin: 250 * time.Millisecond, YieldGrace: 500 * time.Millisecond, ReleaseTimeout: 250 * time.Millisecond}
	}

	// The outside transaction: a term of b's, and a write guarded by it
	// left open. Its FOR KEY SHARE lock on b's row outlives the term.
	outside := db.Conn(t)
	var token int64
	if err := outside.QueryRow(ctx, `SELECT token FROM pgleader.acquire('b', 'outsider', '1 minute')`).Scan(&token); err != nil {
		t.Fatal(err)
	}
	if _, err := outside.Exec(ctx, `BEGIN`); err != nil {
		t.Fatal(err)
	}
	if _, err := outside.Exec(ctx, `SELECT pgleader.lease_guard('b', $1)`, token); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = outside.Exec(context.Background(), `ROLLBACK`) })

	pool := db.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 3 })
	backend := pgleader.NewPostgres(pool, pgleader.WithLogger(quiet))
	var obs endings
	run := func(key, owner string) *pgRun {
		el, err := pgleader.New(backend, spec(key), pgleader.Options{Owner: owner, Lead: untilEnding, Logger: quiet, Observer: &obs})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		r := &pgRun{el: el, cancel: cancel, done: make(chan error, 1)}
		go func() { r.done <- el.Run(runCtx) }()
		t.Cleanup(func() { cancel(); <-r.done })
		return r
	}
	a := run("a", "ra")
	set, err := pgleader.NewSet(backend, spec("s"), keyNames("s", 3), pgleader.SetOptions{Owner: "rs", Lead: quickBody, Logger: quiet, Observer: &obs})
	if err != nil {
		t.Fatal(err)
	}
	setCtx, stopSet := context.WithCancel(ctx)
	setDone := make(chan error, 1)
	go func() { setDone <- set.Run(setCtx) }()
	t.Cleanup(func() { stopSet(); <-setDone })
	waitFor(t, "a to lead", func() bool { return a.el.Status().Leading })
	waitFor(t, "the set to hold its keys", func() bool { return set.Status().Held == 3 })

	b := run("b", "rb")
	waitFor(t, "b's campaign to wait for the row lock", func() bool {
		var waiting bool
		err := db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%pgleader.campaign(%')`).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		return waiting
	})
	if holdPool {
		for range pool.Config().MaxConns {
			c, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Release)
		}
	}
	time.Sleep(4 * spec("a").TTL)

	early, slowest := obs.get()
	t.Logf("the slowest renewal took %v", slowest)
	if len(early) > 0 {
		t.Fatalf("terms ended early while b's campaigns waited for its row lock: %v", early)
	}
	if s := a.el.Status(); !s.Leading || s.Terms != 1 {
		t.Fatalf("a: %+v; want leading its first term", s)
	}
	if s := set.Status(); s.Held != 3 {
		t.Fatalf("the set: %+v; want holding its 3 keys", s)
	}
	if s := b.el.Status(); s.Leading || s.Terms != 0 {
		t.Fatalf("b: %+v; want never leading while the outside transaction is open", s)
	}
}
