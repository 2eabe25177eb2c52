package pgleader_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/pgleader/pgleadertest"
)

// TestStepDown: the leader ends its term gracefully and releases, Run goes
// on, and a waiting replica takes over at once.
func TestStepDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := pgleadertest.NewBackend()
		var recA, recB recorder
		a := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "a", Lead: recA.body(0, false)})
		time.Sleep(time.Millisecond)
		bb := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "b", Lead: recB.body(0, false)})
		synctest.Wait()
		if err := bb.el.StepDown(context.Background()); !errors.Is(err, pgleader.ErrNotLeader) {
			t.Fatalf("StepDown of a replica that waits = %v, want ErrNotLeader", err)
		}
		if st := bb.el.Status(); st.State != pgleader.StateWaiting || st.WaitUntil.IsZero() || !st.Listening {
			t.Fatalf("b's status = %+v, want waiting until a time, listening", st)
		}
		time.Sleep(10 * time.Second)
		began := time.Now()
		if err := a.el.StepDown(context.Background()); err != nil {
			t.Fatalf("StepDown = %v", err)
		}
		ta := recA.all()
		if len(ta) != 1 || ta[0].reason != pgleader.ReasonResigned || ta[0].ending != began {
			t.Fatalf("a's terms = %+v, want one that resigned at %v", ta, began)
		}
		// This body returns when cancelled: YieldGrace after StepDown; the
		// lease was released ReleaseTimeout after that.
		if got := ta[0].cancelled.Sub(began); got != time.Second {
			t.Errorf("a's body cancelled %v after StepDown, want YieldGrace (1s)", got)
		}
		synctest.Wait()
		tb := recB.all()
		if released := ta[0].returned.Add(500 * time.Millisecond); len(tb) != 1 || tb[0].token != 2 || tb[0].started != released {
			t.Fatalf("b's terms = %+v, want token 2 from the instant a released (%v)", tb, released)
		}
		if st := a.el.Status(); st.LastEnd != pgleader.ReasonResigned || st.State == pgleader.StateStopped {
			t.Fatalf("a's status after stepping down = %+v; want Run still running, last end resigned", st)
		}
		a.stop(t)
		bb.stop(t)
		if st := a.el.Status(); st.State != pgleader.StateStopped {
			t.Fatalf("a's state after Run returned = %v", st.State)
		}
	})
}

// TestRunOnce covers the one-shot outcomes: held elsewhere, finished,
// failed, refused, and a term that ends under the body.
func TestRunOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := pgleadertest.NewBackend()
		spec := recipeSpec("job")
		spec.RequireFenceAdvance = false
		ctx := context.Background()

		// Another replica holds the lease: ErrHeld at once, naming it.
		if _, ok, err := b.Acquire(ctx, "job", "other", 6*time.Second); err != nil || !ok {
			t.Fatal(err)
		}
		before := time.Now()
		err := pgleader.Do(ctx, b, spec, func(context.Context, *pgleader.Term) error {
			t.Error("fn ran while another replica held the lease")
			return nil
		})
		if !errors.Is(err, pgleader.ErrHeld) || !strings.Contains(err.Error(), `"other"`) || time.Since(before) != 0 {
			t.Fatalf("Do while held = %v after %v, want ErrHeld naming the holder at once", err, time.Since(before))
		}
		time.Sleep(6 * time.Second)

		// fn runs under a live term, renewed while it runs; the lease is
		// released when it returns.
		var token int64
		err = pgleader.Do(ctx, b, spec, func(ctx context.Context, term *pgleader.Term) error {
			token = term.Token()
			time.Sleep(5 * time.Second) // longer than the yield instant without renewals
			if !term.Live() {
				return errors.New("the term was not renewed while fn ran")
			}
			return nil
		})
		if err != nil || token != 2 {
			t.Fatalf("Do = %v with token %d, want nil with token 2", err, token)
		}
		if l, _ := b.Lease(ctx, "job"); l.Held() {
			t.Fatalf("lease after Do = %+v, want released", l)
		}

		// fn's error is Do's.
		boom := errors.New("boom")
		if err := pgleader.Do(ctx, b, spec, func(context.Context, *pgleader.Term) error { return boom }); err != boom {
			t.Fatalf("Do = %v, want fn's error", err)
		}

		// The lease is lost under fn: fn is cancelled and Do says why.
		err = pgleader.Do(ctx, b, spec, func(ctx context.Context, _ *pgleader.Term) error {
			b.DropData()
			<-ctx.Done()
			return ctx.Err()
		})
		if !errors.Is(err, pgleader.ErrTermEnded) || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "lost") {
			t.Fatalf("Do with the lease lost under fn = %v, want ErrTermEnded: lost, wrapping fn's error", err)
		}

		// A refused claim: fn never runs.
		el, err := pgleader.New(b, spec, pgleader.Options{Owner: "a", Logger: quiet,
			Claim: func(context.Context, *pgleader.Term) (bool, error) { return false, nil },
			Lead: func(context.Context, *pgleader.Term) error {
				t.Error("Lead ran after Claim refused")
				return nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		if err := el.RunOnce(ctx); !errors.Is(err, pgleader.ErrTermEnded) || !strings.Contains(err.Error(), "refused") {
			t.Fatalf("RunOnce with Claim refusing = %v, want ErrTermEnded: refused", err)
		}
	})
}

// TestDoOnPostgres: two replicas run the same job at once; exactly one
// runs it, the other is told at once who holds it.
func TestDoOnPostgres(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	spec := pgleader.Spec{Key: "nightly-report", TTL: 3 * time.Second}
	started, finish := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- pgleader.Do(ctx, pgleader.NewPostgres(db.NewPool(t)), spec, func(ctx context.Context, term *pgleader.Term) error {
			close(started)
			<-finish
			return nil
		})
	}()
	<-started
	err := pgleader.Do(ctx, pgleader.NewPostgres(db.NewPool(t)), spec, func(context.Context, *pgleader.Term) error {
		t.Error("the second replica ran the job too")
		return nil
	})
	if !errors.Is(err, pgleader.ErrHeld) {
		t.Fatalf("second Do = %v, want ErrHeld", err)
	}
	close(finish)
	if err := <-first; err != nil {
		t.Fatalf("first Do = %v", err)
	}
}

// TestLoggerFromBackend: one logger given to the backend covers its
// electors.
func TestLoggerFromBackend(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	var logs lockedLog
	b := pgleader.NewPostgres(db.NewPool(t), pgleader.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	r := startOn(t, b, pgleader.Spec{Key: "k", TTL: 3 * time.Second}, "a") // startOn sets its own quiet logger
	r.stopNow(t)
	el, err := pgleader.New(b, pgleader.Spec{Key: "k2", TTL: 3 * time.Second}, pgleader.Options{Owner: "a", Lead: untilEnding})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx) }()
	waitFor(t, "a to lead k2", func() bool { return el.Status().Leading })
	cancel()
	<-done
	if !strings.Contains(logs.String(), "key=k2") || !strings.Contains(logs.String(), "msg=leading") {
		t.Fatalf("the backend's logger did not receive the elector's logs:\n%s", logs.String())
	}
}
