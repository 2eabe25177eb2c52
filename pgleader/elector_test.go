package pgleader_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/pgleader/pgleadertest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// idle is a body that works until its context is cancelled.
func idle(ctx context.Context, _ *pgleader.Term) error {
	<-ctx.Done()
	return nil
}

// termRecord is what a body saw of one term, on the local clock.
type termRecord struct {
	term                       *pgleader.Term
	token                      int64
	started, ending, cancelled time.Time
	returned                   time.Time
	reason                     pgleader.EndReason
	liveAtStart                bool
}

type recorder struct {
	mu    sync.Mutex
	terms []*termRecord
}

func (r *recorder) all() []termRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]termRecord, len(r.terms))
	for i, t := range r.terms {
		out[i] = *t
		out[i].reason = t.term.Reason()
	}
	return out
}

// body returns a Lead that records instants. It returns finishAfter into
// the term if that is positive, at once when the term starts ending if
// onEnding is set, and otherwise when its context is cancelled.
func (r *recorder) body(finishAfter time.Duration, onEnding bool) func(context.Context, *pgleader.Term) error {
	return func(ctx context.Context, t *pgleader.Term) error {
		rec := &termRecord{term: t, token: t.Token(), started: time.Now(), liveAtStart: t.Live()}
		r.mu.Lock()
		r.terms = append(r.terms, rec)
		r.mu.Unlock()
		defer func() {
			r.mu.Lock()
			rec.returned = time.Now()
			r.mu.Unlock()
		}()
		var finish <-chan time.Time
		if finishAfter > 0 {
			finish = time.After(finishAfter)
		}
		ending := t.Ending()
		for {
			select {
			case <-ending:
				ending = nil
				r.mu.Lock()
				rec.ending = time.Now()
				r.mu.Unlock()
				if onEnding {
					return nil
				}
			case <-ctx.Done():
				r.mu.Lock()
				rec.cancelled = time.Now()
				if rec.ending.IsZero() && !t.Live() {
					rec.ending = rec.cancelled
				}
				r.mu.Unlock()
				return ctx.Err()
			case <-finish:
				return nil
			}
		}
	}
}

type run struct {
	el     *pgleader.Elector
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, b pgleader.Backend, spec pgleader.Spec, opts pgleader.Options) *run {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	// These tests are about the loop's timing; New refuses RequireFenceAdvance without a floor.
	spec.RequireFenceAdvance = spec.RequireFenceAdvance && opts.FenceFloor != nil
	el, err := pgleader.New(b, spec, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &run{el: el, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- el.Run(ctx) }()
	return r
}

// stop cancels Run and waits for it to return nil.
func (r *run) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	if err := <-r.done; err != nil {
		t.Fatalf("Run returned %v, want nil", err)
	}
}

func releases(b *pgleadertest.Backend) (out []pgleadertest.Event) {
	for _, e := range b.History() {
		if e.Op == pgleadertest.OpRelease {
			out = append(out, e)
		}
	}
	return out
}

func acquisitions(b *pgleadertest.Backend) (out []pgleadertest.Event) {
	for _, e := range b.History() {
		if e.Op == pgleadertest.OpAcquire && e.OK {
			out = append(out, e)
		}
	}
	return out
}

func at(t *testing.T, what string, got, t0 time.Time, want time.Duration) {
	t.Helper()
	if got.Sub(t0) != want {
		t.Errorf("%s at t0%+v, want t0%+v", what, got.Sub(t0), want)
	}
}

// With the recipe's spec a term whose last acquire or renew was sent at s
// yields at s+4s, is cancelled at s+5s and is safe until s+5.5s.

func TestTimelineStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		b := pgleadertest.NewBackend()
		var rec recorder
		r := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "a", Lead: rec.body(0, false)})
		time.Sleep(3 * time.Second) // renewed at t0+2s
		r.stop(t)
		// The body ignores Ending: cancelled at the stop + YieldGrace, it
		// returns then, and the release waits ReleaseTimeout more, so
		// that a statement it had sent commits while the lease is held.
		at(t, "Run returned", time.Now(), t0, 4500*time.Millisecond)

		terms := rec.all()
		if len(terms) != 1 {
			t.Fatalf("%d terms, want 1", len(terms))
		}
		tr := terms[0]
		if tr.token != 1 || !tr.liveAtStart || tr.term.Live() || tr.reason != pgleader.ReasonStopped {
			t.Errorf("term = %+v; want token 1, live at start, not after, stopped", tr)
		}
		at(t, "started", tr.started, t0, 0)
		at(t, "ending", tr.ending, t0, 3*time.Second)
		at(t, "cancelled", tr.cancelled, t0, 4*time.Second) // YieldGrace after the stop
		rel := releases(b)
		if len(rel) != 1 || !rel[0].OK {
			t.Fatalf("releases = %+v, want one that took effect", rel)
		}
		at(t, "released", rel[0].At, t0, 4500*time.Millisecond)
		if got := r.el.Status(); got.Leading || got.LastEnd != pgleader.ReasonStopped || got.Terms != 1 || got.Token != 1 {
			t.Errorf("status = %+v", got)
		}
	})
}

// TestTimelineStoppedCancelOnStop: with CancelOnStop a body that ignores
// Ending is cancelled at the stop, and released ReleaseTimeout later (not
// YieldGrace + ReleaseTimeout); a resignation the same.
func TestTimelineStoppedCancelOnStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		b := pgleadertest.NewBackend()
		var rec recorder
		r := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "a", Lead: rec.body(0, false), CancelOnStop: true})
		time.Sleep(3 * time.Second)
		r.stop(t)
		at(t, "Run returned", time.Now(), t0, 3500*time.Millisecond)
		terms := rec.all()
		if len(terms) != 1 || terms[0].reason != pgleader.ReasonStopped {
			t.Fatalf("terms = %+v; want one, stopped", terms)
		}
		at(t, "ending", terms[0].ending, t0, 3*time.Second)
		at(t, "cancelled", terms[0].cancelled, t0, 3*time.Second)
		rel := releases(b)
		if len(rel) != 1 || !rel[0].OK {
			t.Fatalf("releases = %+v, want one that took effect", rel)
		}
		at(t, "released", rel[0].At, t0, 3500*time.Millisecond)

		// A resignation (StepDown) is cut short the same way.
		t1 := time.Now()
		var rec2 recorder
		r2 := start(t, b, recipeSpec("k2"), pgleader.Options{Owner: "a", Lead: rec2.body(0, false), CancelOnStop: true})
		time.Sleep(time.Second)
		if err := r2.el.StepDown(context.Background()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		terms = rec2.all()
		if len(terms) != 1 || terms[0].reason != pgleader.ReasonResigned {
			t.Fatalf("terms = %+v; want one, resigned", terms)
		}
		at(t, "resigned term cancelled", terms[0].cancelled, t1, time.Second)
		r2.stop(t)
	})
}

func TestTimelineStoppedBodyReturnsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		b := pgleadertest.NewBackend()
		var rec recorder
		r := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "a", Lead: rec.body(0, true)})
		time.Sleep(2500 * time.Millisecond)
		r.stop(t)
		at(t, "Run returned", time.Now(), t0, 2500*time.Millisecond)
		rel := releases(b)
		if len(rel) != 1 || !rel[0].OK {
			t.Fatalf("releases = %+v", rel)
		}
		at(t, "released", rel[0].At, t0, 2500*time.Millisecond)
	})
}

// TestTimelineStoppedNearCancel: a stop late in a term whose renewals fail
// is cancelled at C, not YieldGrace after the stop.
func TestTimelineStoppedNearCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		b := pgleadertest.NewBackend()
		var rec recorder
		r := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "a", Lead: rec.body(0, false)})
		time.Sleep(time.Second)
		b.SetFailure(errors.New("connection refused"))
		time.Sleep(3700 * time.Millisecond) // t0+4.7s: past Y (4s), before C (5s)
		r.stop(t)
		tr := rec.all()[0]
		if tr.reason != pgleader.ReasonExpiring {
			t.Errorf("reason = %v, want expiring (it began before the stop)", tr.reason)
		}
		at(t, "ending", tr.ending, t0, 4*time.Second)
		at(t, "cancelled", tr.cancelled, t0, 5*time.Second)
	})
}

func TestTimelineExpiring(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		b := pgleadertest.NewBackend()
		var rec recorder
		r := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "a", Lead: rec.body(0, false)})
		time.Sleep(3 * time.Second) // renewed at t0+2s: Y = t0+6s, C = t0+7s
		b.SetFailure(errors.New("connection refused"))
		time.Sleep(10 * time.Second)

		tr := rec.all()[0]
		if tr.reason != pgleader.ReasonExpiring {
			t.Errorf("reason = %v, want expiring", tr.reason)
		}
		at(t, "ending", tr.ending, t0, 6*time.Second)
		at(t, "cancelled", tr.cancelled, t0, 7*time.Second)
		if st := r.el.Status(); st.Leading || st.LastError == nil || st.LastEnd != pgleader.ReasonExpiring {
			t.Errorf("status = %+v; want not leading, a last error, expiring", st)
		}
		// The database never answered again: no release reached it, and
		// Run is still campaigning rather than exiting.
		if rel := releases(b); len(rel) != 0 {
			t.Errorf("releases = %+v, want none", rel)
		}
		select {
		case err := <-r.done:
			t.Fatalf("Run exited during an outage: %v", err)
		default:
		}
		// When the database returns, the replica leads again with a new token.
		b.SetFailure(nil)
		time.Sleep(10 * time.Second)
		if terms := rec.all(); len(terms) != 2 || terms[1].token != 2 {
			t.Fatalf("after the outage: terms %+v; want a second term with token 2", terms)
		}
		r.stop(t)
	})
}

// TestTimelineFromSendTime: with 300ms round trips, the timeline counts from
// when a statement was sent, not from when its answer came back.
func TestTimelineFromSendTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		b := pgleadertest.NewBackend()
		b.SetLatency(300 * time.Millisecond)
		var rec recorder
		r := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "a", Lead: rec.body(0, false)})
		time.Sleep(3 * time.Second) // acquire sent at t0, renew sent at t0+2s
		b.SetFailure(errors.New("connection refused"))
		time.Sleep(5 * time.Second)
		tr := rec.all()[0]
		at(t, "started", tr.started, t0, 300*time.Millisecond)
		at(t, "ending", tr.ending, t0, 6*time.Second)
		at(t, "cancelled", tr.cancelled, t0, 7*time.Second)
		b.SetFailure(nil)
		r.stop(t)
	})
}

// TestTimelinePausedLeader blocks the leader's renewals (the database stops
// answering): it is told to yield at Y and cancelled at C all the same.
func TestTimelinePausedLeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		b := pgleadertest.NewBackend()
		var rec recorder
		r := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "a", Lead: rec.body(0, false)})
		time.Sleep(time.Second)
		b.Block()
		time.Sleep(6 * time.Second)
		tr := rec.all()[0]
		if tr.reason != pgleader.ReasonExpiring {
			t.Errorf("reason = %v, want expiring", tr.reason)
		}
		at(t, "ending", tr.ending, t0, 4*time.Second)
		at(t, "cancelled", tr.cancelled, t0, 5*time.Second)
		b.Unblock()
		r.stop(t)
	})
}

func TestTimelineLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		b := pgleadertest.NewBackend()
		var rec recorder
		r := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "a", Lead: rec.body(0, false)})
		time.Sleep(3 * time.Second)
		b.DropData() // the renewal at t0+4s finds the lease gone
		time.Sleep(1400 * time.Millisecond)
		tr := rec.all()[0]
		if tr.reason != pgleader.ReasonLost {
			t.Errorf("reason = %v, want lost", tr.reason)
		}
		at(t, "ending", tr.ending, t0, 4*time.Second)
		at(t, "cancelled", tr.cancelled, t0, 4*time.Second)
		if rel := releases(b); len(rel) != 0 {
			t.Errorf("a lost term released: %+v", rel)
		}
		// The counter went with the data: the next campaign draws token 1
		// again, which this elector led already, so it ends it without
		// leading it, and leads token 2.
		time.Sleep(time.Second)
		if rel := releases(b); len(rel) != 1 || rel[0].Token != 1 {
			t.Errorf("releases after the loss: %+v; want token 1's, once", rel)
		}
		if terms := rec.all(); len(terms) != 2 || terms[1].token != 2 {
			t.Errorf("terms led: %d; want a second, with token 2", len(terms))
		}
		r.stop(t)
	})
}

func TestTimelineFinished(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		b := pgleadertest.NewBackend()
		var rec recorder
		r := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "a", Lead: rec.body(3*time.Second, false)})
		time.Sleep(4 * time.Second)
		terms := rec.all()
		if len(terms) != 2 {
			t.Fatalf("%d terms, want 2 (finished, then campaigned again)", len(terms))
		}
		if terms[0].reason != pgleader.ReasonFinished || !terms[0].cancelled.IsZero() {
			t.Errorf("first term = %+v; want finished, never cancelled", terms[0])
		}
		at(t, "first term returned", terms[0].returned, t0, 3*time.Second)
		rel := releases(b)
		if len(rel) != 1 || !rel[0].OK || rel[0].Token != 1 {
			t.Fatalf("releases = %+v", rel)
		}
		at(t, "released", rel[0].At, t0, 3*time.Second)
		at(t, "second term started", terms[1].started, t0, 3500*time.Millisecond) // one CampaignEvery later
		if terms[1].token != 2 {
			t.Errorf("second token = %d, want 2", terms[1].token)
		}
		r.stop(t)
	})
}

func TestTimelineRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		b := pgleadertest.NewBackend()
		var mu sync.Mutex
		var claims []int64
		var endedAt []time.Time
		claim := func(_ context.Context, term *pgleader.Term) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			claims = append(claims, term.Token())
			go func() {
				<-term.Ending()
				mu.Lock()
				endedAt = append(endedAt, time.Now())
				mu.Unlock()
			}()
			return term.Token() >= 3, nil // the store's fence is 2
		}
		var rec recorder
		r := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "a", Lead: rec.body(0, false), Claim: claim})
		time.Sleep(2 * time.Second)
		r.stop(t)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(claims) != 3 || claims[0] != 1 || claims[1] != 2 || claims[2] != 3 {
			t.Fatalf("claims = %v, want [1 2 3]", claims)
		}
		rel := releases(b)
		if len(rel) != 3 {
			t.Fatalf("releases = %+v, want 3", rel)
		}
		// The third term's body ignores Ending: cancelled YieldGrace after
		// the stop, released ReleaseTimeout after that.
		for i, want := range []time.Duration{0, 500 * time.Millisecond, 2*time.Second + time.Second + 500*time.Millisecond} {
			at(t, "release", rel[i].At, t0, want)
		}
		at(t, "refused term ended", endedAt[0], t0, 0)
		terms := rec.all()
		if len(terms) != 1 || terms[0].token != 3 {
			t.Fatalf("bodies ran for %+v; want only token 3", terms)
		}
	})
}

// TestNoOverlapWithPausedLeader pauses one leader's renewals while another
// replica campaigns: the second term starts only once the first term's
// lease has expired on the backend's clock, after the first body was
// cancelled.
func TestNoOverlapWithPausedLeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		b := pgleadertest.NewBackend()
		paused := &pauseOwner{Backend: b, owner: "a", gate: make(chan struct{})}
		var recA, recB recorder
		a := start(t, paused, recipeSpec("k"), pgleader.Options{Owner: "a", Lead: recA.body(0, false)})
		time.Sleep(time.Millisecond)
		bb := start(t, paused, recipeSpec("k"), pgleader.Options{Owner: "b", Lead: recB.body(0, false)})
		time.Sleep(time.Second)
		paused.pause()
		time.Sleep(10 * time.Second)

		acq := acquisitions(b)
		if len(acq) != 2 || acq[0].Owner != "a" || acq[1].Owner != "b" {
			t.Fatalf("acquisitions = %+v; want a then b", acq)
		}
		if acq[1].At.Before(acq[0].Expires) {
			t.Fatalf("b's term began at t0%+v, before a's lease expired at t0%+v", acq[1].At.Sub(t0), acq[0].Expires.Sub(t0))
		}
		ta := recA.all()[0]
		at(t, "a ending", ta.ending, t0, 4*time.Second)
		at(t, "a cancelled", ta.cancelled, t0, 5*time.Second)
		if !ta.cancelled.Before(acq[1].At) {
			t.Fatalf("a's body ran until t0%+v, b began at t0%+v", ta.cancelled.Sub(t0), acq[1].At.Sub(t0))
		}
		tb := recB.all()
		if len(tb) != 1 || tb[0].token != 2 {
			t.Fatalf("b's terms = %+v, want one with token 2", tb)
		}
		at(t, "b started", tb[0].started, t0, 6*time.Second) // b campaigns at a's expiry
		paused.resume()
		a.stop(t)
		bb.stop(t)
	})
}

// pauseOwner cuts one owner off from the backend while paused: its renewals
// acquires and releases wait until resumed.
type pauseOwner struct {
	*pgleadertest.Backend
	owner string
	mu    sync.Mutex
	on    bool
	gate  chan struct{}
}

func (p *pauseOwner) pause()  { p.mu.Lock(); p.on = true; p.mu.Unlock() }
func (p *pauseOwner) resume() { p.mu.Lock(); p.on = false; close(p.gate); p.mu.Unlock() }

func (p *pauseOwner) wait(ctx context.Context, owner string) error {
	p.mu.Lock()
	on := p.on
	p.mu.Unlock()
	if !on || owner != p.owner {
		return nil
	}
	select {
	case <-p.gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *pauseOwner) RenewTerm(ctx context.Context, key, owner string, token int64, ttl, minTerm time.Duration) (time.Time, bool, error) {
	if err := p.wait(ctx, owner); err != nil {
		return time.Time{}, false, err
	}
	return p.Backend.RenewTerm(ctx, key, owner, token, ttl, minTerm)
}

func (p *pauseOwner) Campaign(ctx context.Context, key string, c pgleader.Candidate, ttl time.Duration, floor int64) (pgleader.Lease, bool, error) {
	if err := p.wait(ctx, c.Owner); err != nil {
		return pgleader.Lease{}, false, err
	}
	return p.Backend.Campaign(ctx, key, c, ttl, floor)
}

func (p *pauseOwner) Release(ctx context.Context, key, owner string, token int64) (bool, error) {
	if err := p.wait(ctx, owner); err != nil {
		return false, err
	}
	return p.Backend.Release(ctx, key, owner, token)
}

func TestRunTwiceAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := start(t, pgleadertest.NewBackend(), recipeSpec("k"), pgleader.Options{Owner: "a", Lead: idle})
		time.Sleep(time.Second)
		if err := r.el.Run(context.Background()); !errors.Is(err, pgleader.ErrRunning) {
			t.Errorf("second Run = %v, want ErrRunning", err)
		}
		r.stop(t)
	})
}

func TestBodyPanicEndsTheTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := pgleadertest.NewBackend()
		calls := 0
		lead := func(ctx context.Context, _ *pgleader.Term) error {
			calls++
			if calls == 1 {
				panic("boom")
			}
			<-ctx.Done()
			return nil
		}
		t0 := time.Now()
		r := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "a", Lead: lead})
		time.Sleep(2 * time.Second)
		st := r.el.Status()
		if st.Terms != 2 || st.LastError == nil || !st.Leading {
			t.Errorf("status = %+v; want a second term after the panic, with the panic as last error", st)
		}
		rel := releases(b)
		if len(rel) != 1 || !rel[0].OK {
			t.Fatalf("releases = %+v; want the panicked term released", rel)
		}
		// A body that failed may have left a statement on its way: the
		// release waits ReleaseTimeout after the panic.
		at(t, "released", rel[0].At, t0, 500*time.Millisecond)
		r.stop(t)
	})
}

func TestFenceFloorAdvancesBeforeAcquire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := pgleadertest.NewBackend()
		fence := int64(50)
		var claimed []int64
		claim := func(_ context.Context, term *pgleader.Term) (bool, error) {
			claimed = append(claimed, term.Token())
			if term.Token() <= fence {
				return false, nil
			}
			fence = term.Token()
			return true, nil
		}
		floor := func(context.Context) (int64, error) { return fence, nil }
		r := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "a", Lead: idle, Claim: claim, FenceFloor: floor})
		time.Sleep(time.Second)
		r.stop(t)
		if len(claimed) != 1 || claimed[0] != 51 {
			t.Fatalf("claims = %v, want [51]", claimed)
		}
	})
}

// attempts counts the acquire attempts by owner.
func attempts(b *pgleadertest.Backend, owner string) int {
	n := 0
	for _, e := range b.History() {
		if e.Op == pgleadertest.OpAcquire && e.Owner == owner {
			n++
		}
	}
	return n
}

// TestCandidateWakesOnRelease: a waiting candidate campaigns the instant the
// leader releases, and while the leader renews it looks only when the
// expiry it last read comes: renewals are not notified (an event could be
// forged), so it reads once per TTL - RenewEvery at most.
func TestCandidateWakesOnRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := pgleadertest.NewBackend()
		var recB recorder
		a := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "a", Lead: idle})
		time.Sleep(time.Millisecond)
		bb := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "b", Lead: recB.body(0, false)})
		time.Sleep(60 * time.Second)
		// The first read, then one at each expiry read: 4s apart with
		// TTL 6s and renewals every 2s.
		if n, most := attempts(b, "b"), 1+int(60*time.Second/(4*time.Second)); n > most {
			t.Errorf("the idle candidate tried %d times in 60s of healthy leadership, want at most %d", n, most)
		}
		a.stop(t)
		stoppedAt := time.Now()
		synctest.Wait()
		tb := recB.all()
		if len(tb) != 1 || tb[0].token != 2 {
			t.Fatalf("b's terms = %+v, want one with token 2", tb)
		}
		if gap := tb[0].started.Sub(stoppedAt); gap != 0 {
			t.Errorf("b led %v after a's release, want at once", gap)
		}
		bb.stop(t)
	})
}

// TestCandidatePollsWhenNotListening: without notifications a candidate
// polls every CampaignEvery (less jitter), and still takes over.
func TestCandidatePollsWhenNotListening(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := pgleadertest.NewBackend()
		a := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "a", Lead: idle})
		time.Sleep(time.Millisecond)
		b.SetListening(false)
		var recB recorder
		bb := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "b", Lead: recB.body(0, false)})
		time.Sleep(10 * time.Second)
		if n := attempts(b, "b"); n < 20 || n > 23 {
			t.Errorf("the polling candidate tried %d times in 10s, want 20 to 23 (every 450-500ms)", n)
		}
		a.stop(t)
		stoppedAt := time.Now()
		time.Sleep(time.Second)
		tb := recB.all()
		if len(tb) != 1 {
			t.Fatalf("b's terms = %+v, want one", tb)
		}
		if gap := tb[0].started.Sub(stoppedAt); gap <= 0 || gap > 500*time.Millisecond {
			t.Errorf("b led %v after a's release, want within one CampaignEvery", gap)
		}
		// Listening again: a resync makes the candidate look at once.
		bb.stop(t)
		b.SetListening(true)
	})
}

// TestResyncWakesCandidate: when the watcher comes back it may have missed
// a release, so a waiting candidate looks again at once.
func TestResyncWakesCandidate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := pgleadertest.NewBackend()
		a := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "a", Lead: idle})
		time.Sleep(time.Millisecond)
		bb := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "b", Lead: idle})
		time.Sleep(time.Second)
		before := attempts(b, "b")
		b.SetListening(false)
		b.SetListening(true)
		synctest.Wait()
		if n := attempts(b, "b"); n != before+1 {
			t.Errorf("attempts after resync = %d, want %d", n, before+1)
		}
		a.stop(t)
		bb.stop(t)
	})
}

// countingBackend counts the calls that reach Acquire, failed or not.
type countingBackend struct {
	*pgleadertest.Backend
	mu       sync.Mutex
	acquires int
}

func (c *countingBackend) Campaign(ctx context.Context, key string, cand pgleader.Candidate, ttl time.Duration, floor int64) (pgleader.Lease, bool, error) {
	c.mu.Lock()
	c.acquires++
	c.mu.Unlock()
	return c.Backend.Campaign(ctx, key, cand, ttl, floor)
}

// TestOutageBacksOffAndLogs: while the database is down a candidate retries
// with growing intervals (up to TTL/2) and logs each failure, never exits, and
// leads once the database is back.
func TestOutageBacksOffAndLogs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &countingBackend{Backend: pgleadertest.NewBackend()}
		b.SetFailure(errors.New("connection refused"))
		var logs lockedLog
		log := slog.New(slog.NewTextHandler(&logs, nil))
		r := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "a", Lead: idle, Logger: log})
		time.Sleep(60 * time.Second)
		b.mu.Lock()
		n := b.acquires
		b.mu.Unlock()
		// Fixed 500ms polling would make 120 attempts; doubling up to half
		// the 6s TTL (less up to 20% jitter) makes about 24.
		if n < 20 || n > 30 {
			t.Errorf("%d attempts in a 60s outage, want 20 to 30 (backing off up to TTL/2)", n)
		}
		if got := strings.Count(logs.String(), "campaign failed"); got != n {
			t.Errorf("%d 'campaign failed' log lines for %d failed attempts", got, n)
		}
		select {
		case err := <-r.done:
			t.Fatalf("Run exited during the outage: %v", err)
		default:
		}
		b.SetFailure(nil)
		time.Sleep(7 * time.Second)
		if !r.el.Status().Leading {
			t.Fatal("not leading 7s after the database came back")
		}
		r.stop(t)
	})
}

type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestTermWait: Wait pauses for its duration while the term is live, and
// returns false as soon as the term begins to end.
func TestTermWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := pgleadertest.NewBackend()
		type wait struct {
			took time.Duration
			live bool
		}
		waits := make(chan wait, 10)
		r := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "a", Lead: func(ctx context.Context, term *pgleader.Term) error {
			for {
				t0 := time.Now()
				live := term.Wait(700 * time.Millisecond)
				waits <- wait{time.Since(t0), live}
				if !live {
					return nil
				}
			}
		}})
		time.Sleep(1500 * time.Millisecond) // two full waits, and 100 ms of a third
		r.stop(t)
		close(waits)
		var got []wait
		for w := range waits {
			got = append(got, w)
		}
		want := []wait{{700 * time.Millisecond, true}, {700 * time.Millisecond, true}, {100 * time.Millisecond, false}}
		if !slices.Equal(got, want) {
			t.Fatalf("waits = %+v; want %+v", got, want)
		}
	})
}
