package pgleader_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/pgleader/pgleadertest"
)

// TestValuePublishedWithTheLease: a leader's value is read with its lease,
// returned to a losing campaign, and gone once the lease is released.
func TestValuePublishedWithTheLease(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	b := pgleader.NewPostgres(db.NewPool(t), pgleader.WithLogger(quiet))
	el, err := pgleader.New(b, pgleader.Spec{Key: "k", TTL: 3 * time.Second},
		pgleader.Options{Owner: "a", Value: "10.0.0.7:8080", Lead: untilEnding, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- el.Run(runCtx) }()
	waitFor(t, "a to lead", func() bool { return el.Status().Leading })

	if l, err := b.Lease(ctx, "k"); err != nil || l.Value != "10.0.0.7:8080" || l.Holder != "a" {
		t.Fatalf("Lease = %+v, %v; want a's value", l, err)
	}
	if l, won, err := b.Campaign(ctx, "k", pgleader.Candidate{Owner: "b", Value: "other"}, time.Second, 0); err != nil || won || l.Value != "10.0.0.7:8080" {
		t.Fatalf("losing Campaign = %+v %v %v; want the holder's value", l, won, err)
	}
	var sqlValue string
	if err := db.Pool.QueryRow(ctx, `SELECT value FROM pgleader.lease('k')`).Scan(&sqlValue); err != nil || sqlValue != "10.0.0.7:8080" {
		t.Fatalf("pgleader.lease(k).value = %q, %v", sqlValue, err)
	}
	cancel()
	<-done
	if l, err := b.Lease(ctx, "k"); err != nil || l.Value != "" || l.Held() {
		t.Fatalf("Lease after release = %+v, %v; want free, no value", l, err)
	}

	// Too long, or on a backend that cannot keep it: refused up front.
	_, err = pgleader.New(b, pgleader.Spec{Key: "k"}, pgleader.Options{Value: strings.Repeat("v", pgleader.MaxValueLen+1), Lead: untilEnding})
	if !errors.Is(err, pgleader.ErrInvalid) || !strings.Contains(err.Error(), "Options.Value") {
		t.Fatalf("New with a 1025-byte value = %v", err)
	}
	if _, _, err := b.Campaign(ctx, "k", pgleader.Candidate{Owner: "a", Value: strings.Repeat("v", 1025)}, time.Second, 0); !errors.Is(err, pgleader.ErrInvalid) {
		t.Fatalf("Campaign with a 1025-byte value = %v", err)
	}
	var sqlErr error
	_, sqlErr = db.Pool.Exec(ctx, `SELECT * FROM pgleader.acquire('k', 'a', '1 second', 0, repeat('v', 1025))`)
	if sqlErr == nil || !strings.Contains(sqlErr.Error(), "the limit is 1024") {
		t.Fatalf("SQL acquire with a 1025-byte value = %v", sqlErr)
	}
}

// TestResignFromOutside: pgleader.resign ends the holder's term gracefully
// at its next renewal; a waiting replica takes over; resigning a free key
// or a stale term asks nobody and says so.
func TestResignFromOutside(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	spec := pgleader.Spec{Key: "k", TTL: 3 * time.Second} // renews every 1s
	admin := pgleader.NewPostgres(db.Pool, pgleader.PollOnly())

	if l, asked, err := admin.Resign(ctx, "k", 0); err != nil || asked || l.Held() {
		t.Fatalf("Resign of a key nobody holds = %+v %v %v; want nobody asked", l, asked, err)
	}
	var reason atomic.Int64
	lead := func(ctx context.Context, term *pgleader.Term) error {
		<-term.Ending()
		reason.Store(int64(term.Reason()))
		<-ctx.Done()
		return nil
	}
	a, err := pgleader.New(pgleader.NewPostgres(db.NewPool(t), pgleader.WithLogger(quiet)), spec,
		pgleader.Options{Owner: "a", Lead: lead, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "a to lead", func() bool { return a.Status().Leading })
	bBackend := pgleader.NewPostgres(db.NewPool(t), pgleader.WithLogger(quiet))
	b := startOn(t, bBackend, spec, "b")
	waitFor(t, "b to wait", func() bool { return b.el.Status().State == pgleader.StateWaiting })

	if l, asked, err := admin.Resign(ctx, "k", 7); err != nil || asked || l.Holder != "a" || l.Token != 1 {
		t.Fatalf("Resign of stale token 7 = %+v %v %v; want nobody asked, a holds token 1", l, asked, err)
	}
	var sqlAsked bool
	var detail string
	if err := db.Pool.QueryRow(ctx, `SELECT resigned, detail FROM pgleader.resign('k', 1)`).Scan(&sqlAsked, &detail); err != nil || !sqlAsked {
		t.Fatalf("SQL resign('k', 1) = %v %q %v", sqlAsked, detail, err)
	}
	waitFor(t, "b to lead after a resigned", func() bool { return b.el.Status().Leading })
	// a records its end once its release or hand-off returned, which may be
	// after b confirmed its term.
	waitFor(t, "a's term to end", func() bool { return a.Status().LastEnd != pgleader.ReasonNone })
	if st := a.Status(); st.LastEnd != pgleader.ReasonResigned || pgleader.EndReason(reason.Load()) != pgleader.ReasonResigned {
		t.Fatalf("a's last term ended as %v (body saw %v), want resigned", st.LastEnd, pgleader.EndReason(reason.Load()))
	}
	if tok := b.el.Status().Token; tok != 2 {
		t.Fatalf("b leads with token %d, want 2", tok)
	}
	if st := a.Status(); st.State == pgleader.StateStopped {
		t.Fatal("a's Run stopped; resigning must only end the term")
	}
}

// TestResignTimeline: a resignation asked between renewals takes effect at
// the next renewal, and ends the term as a stop would.
func TestResignTimeline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := pgleadertest.NewBackend()
		var rec recorder
		r := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "a", Lead: rec.body(0, false)})
		time.Sleep(2500 * time.Millisecond)
		if _, asked, err := b.Resign(context.Background(), "k", 0); err != nil || !asked {
			t.Fatalf("Resign = %v %v", asked, err)
		}
		synctest.Wait()
		time.Sleep(3 * time.Second)
		terms := rec.all()
		if len(terms) == 0 || terms[0].reason != pgleader.ReasonResigned {
			t.Fatalf("terms = %+v, want the first resigned", terms)
		}
		t0 := terms[0].started
		at(t, "ending", terms[0].ending, t0, 4*time.Second)       // the renewal at 4s reported it
		at(t, "cancelled", terms[0].cancelled, t0, 5*time.Second) // YieldGrace later
		r.stop(t)
	})
}
