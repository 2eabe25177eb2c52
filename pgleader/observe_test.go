package pgleader_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/pgleader/pgleadertest"
)

// collect reads leases from ch into the returned function's result.
func collect(t *testing.T, ch <-chan pgleader.Lease) func() []pgleader.Lease {
	t.Helper()
	got := make(chan pgleader.Lease, 100)
	go func() {
		for l := range ch {
			got <- l
		}
		close(got)
	}()
	var seen []pgleader.Lease
	return func() []pgleader.Lease {
		for {
			select {
			case l, ok := <-got:
				if !ok {
					return seen
				}
				seen = append(seen, l)
			default:
				return seen
			}
		}
	}
}

func holders(ls []pgleader.Lease) string {
	s := ""
	for _, l := range ls {
		s += fmt.Sprintf("[%s %d %s]", l.Holder, l.Token, l.Value)
	}
	return s
}

// TestObservePushed: with a listening backend, an observer that would read
// only once a minute sees each new leader within moments: announced
// acquires and release notifications make it read, and it reports what it
// read.
func TestObservePushed(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	obsBackend := pgleader.NewPostgres(db.NewPool(t), pgleader.WithLogger(quiet))
	ch, err := pgleader.Observe(ctx, obsBackend, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	seen := collect(t, ch)
	waitFor(t, "the first, free lease", func() bool { return len(seen()) == 1 })
	waitFor(t, "the observer to listen", obsBackend.Listening)

	spec := pgleader.Spec{Key: "k", TTL: 3 * time.Second}
	start := func(owner, value string) *pgRun {
		el, err := pgleader.New(pgleader.NewPostgres(db.NewPool(t), pgleader.WithLogger(quiet)), spec,
			pgleader.Options{Owner: owner, Value: value, Lead: untilEnding, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		rctx, rcancel := context.WithCancel(context.Background())
		r := &pgRun{el: el, cancel: rcancel, done: make(chan error, 1)}
		go func() { r.done <- el.Run(rctx) }()
		t.Cleanup(func() { r.cancel(); <-r.done; r.done <- nil })
		return r
	}
	a := start("a", "10.0.0.1")
	waitFor(t, "the observer to see a", func() bool {
		s := seen()
		return s[len(s)-1].Holder == "a"
	})
	b := start("b", "10.0.0.2")
	waitFor(t, "b to wait", func() bool { return b.el.Status().State == pgleader.StateWaiting })
	a.stopNow(t)
	waitFor(t, "the observer to see b", func() bool {
		s := seen()
		return s[len(s)-1].Holder == "b"
	})
	s := seen()
	if s[0].Held() {
		t.Errorf("first lease %+v, want free", s[0])
	}
	for i, l := range s {
		if l.Held() && ((l.Holder == "a") != (l.Token == 1) || (l.Holder == "a") != (l.Value == "10.0.0.1")) {
			t.Errorf("lease %d = %+v: holder, token and value do not belong together", i, l)
		}
		if i > 0 && s[i-1].Holder == l.Holder && s[i-1].Token == l.Token {
			t.Errorf("lease %d repeats the one before: %s", i, holders(s))
		}
	}
	if last := s[len(s)-1]; last.Token != 2 || last.Value != "10.0.0.2" {
		t.Errorf("last lease %+v, want b's token 2 with its value", last)
	}
}

// TestObserveIgnoresForgedEvents: notifications make the observer read,
// never report; a flood costs at most one read per every/10.
func TestObserveIgnoresForgedEvents(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := startOn(t, pgleader.NewPostgres(db.NewPool(t), pgleader.WithLogger(quiet)), pgleader.Spec{Key: "k", TTL: 6 * time.Second}, "a")
	waitFor(t, "a to lead", func() bool { return a.el.Status().Leading })
	obs := &pgCountingLease{Postgres: pgleader.NewPostgres(db.NewPool(t), pgleader.WithLogger(quiet))}
	ch, err := pgleader.Observe(ctx, obs, "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	seen := collect(t, ch)
	waitFor(t, "the observer to see a", func() bool { return len(seen()) == 1 })
	waitFor(t, "the observer to listen", obs.Listening)
	before, start := obs.reads.Load(), time.Now()
	for range 100 {
		for _, p := range []string{"release 0 k", "acquire 0 k"} {
			if _, err := db.Pool.Exec(context.Background(), `SELECT pg_notify('pgleader', $1)`, p); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	elapsed := time.Since(start)
	reads := obs.reads.Load() - before
	// every/10 is 100ms: one read per 100ms at most, one for the expiry
	// (6s away at most) and one to spare.
	if most := int64(elapsed/(100*time.Millisecond)) + 2; reads > most {
		t.Errorf("%d reads during %v of forged events, want at most %d", reads, elapsed, most)
	}
	if s := seen(); len(s) != 1 {
		t.Errorf("the observer reported %s; a still leads, so nothing changed", holders(s))
	}
}

// pgCountingLease counts the lease reads of a PostgreSQL backend.
type pgCountingLease struct {
	*pgleader.Postgres
	reads atomicInt
}

func (c *pgCountingLease) Lease(ctx context.Context, key string) (pgleader.Lease, error) {
	c.reads.Add(1)
	return c.Postgres.Lease(ctx, key)
}

// TestObservePolls: without notifications the observer reads every
// interval, and at the holder's expiry.
func TestObservePolls(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := pgleader.Observe(ctx, pgleader.NewPostgres(db.NewPool(t), pgleader.PollOnly()), "k", 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	seen := collect(t, ch)
	b := pgleader.NewPostgres(db.Pool, pgleader.PollOnly())
	if _, ok, err := b.Acquire(context.Background(), "k", "x", time.Second); err != nil || !ok {
		t.Fatal(err)
	}
	waitFor(t, "the observer to see x", func() bool {
		s := seen()
		return len(s) > 0 && s[len(s)-1].Holder == "x"
	})
	waitFor(t, "the observer to see x's lease expire", func() bool {
		s := seen()
		return !s[len(s)-1].Held()
	})
	if _, err := pgleader.Observe(ctx, b, "k", time.Millisecond); err == nil {
		t.Error("Observe accepted an interval of 1ms")
	}
}

// A follower forwards requests to the leader's address, which the leader
// publishes with its lease.
func ExampleObserve() {
	ctx, cancel := context.WithCancel(context.Background())
	backend := pgleadertest.NewBackend() // pgleader.NewPostgres(pool) in production
	leases, err := pgleader.Observe(ctx, backend, "api-writer", 2*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Printf("at first: held %v\n", (<-leases).Held())

	el, err := pgleader.New(backend, pgleader.Spec{Key: "api-writer"}, pgleader.Options{
		Owner: "pod-a", Value: "10.0.0.7:8080", Logger: quiet,
		Lead: func(_ context.Context, t *pgleader.Term) error { <-t.Ending(); return nil }})
	if err != nil {
		panic(err)
	}
	done := make(chan error)
	go func() { done <- el.Run(ctx) }()
	l := <-leases
	fmt.Printf("leader %s with token %d: forward to %s\n", l.Holder, l.Token, l.Value)
	cancel()
	<-done
	// Output:
	// at first: held false
	// leader pod-a with token 1: forward to 10.0.0.7:8080
}

type atomicInt = atomic.Int64
