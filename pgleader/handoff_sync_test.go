package pgleader_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/pgleader/pgleadertest"
)

// handOffEvents returns the history's events of op.
func handOffEvents(b *pgleadertest.HandoffBackend, op pgleadertest.Op) (out []pgleadertest.Event) {
	for _, e := range b.History() {
		if e.Op == op {
			out = append(out, e)
		}
	}
	return out
}

// TestHandOffOnStopSync: on pgleadertest's hand-off view, a leader that
// stops hands the lease to the waiting candidate in the operation that ends
// its term: the candidate, which would not look again before the lease's
// expiry, leads at the same instant with the next token and its own value,
// and the lease is never free in between.
func TestHandOffOnStopSync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := pgleadertest.NewBackend().WithHandOff()
		var recA, recB recorder
		a := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "a", Lead: recA.body(0, true)})
		time.Sleep(time.Millisecond)
		c := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "b", Value: "addr-b", Lead: recB.body(0, false)})
		time.Sleep(3 * time.Second) // a has renewed at 2s: b waits until about 8s
		synctest.Wait()
		if cs, err := b.Candidates(ctx, "k"); err != nil || len(cs) != 1 || cs[0].Owner != "b" {
			t.Fatalf("candidates = %+v, %v; want b registered", cs, err)
		}

		stopped := time.Now()
		a.stop(t)
		synctest.Wait()
		ta, tb := recA.all(), recB.all()
		if len(ta) != 1 || ta[0].reason != pgleader.ReasonStopped || !ta[0].returned.Equal(stopped) {
			t.Fatalf("a's terms = %+v; want one, stopped, its body returned at the stop", ta)
		}
		if len(tb) != 1 || tb[0].token != 2 || !tb[0].liveAtStart {
			t.Fatalf("b's terms = %+v; want one live term with token 2", tb)
		}
		at(t, "b's term started", tb[0].started, stopped, 0)
		l, err := b.Lease(ctx, "k")
		if err != nil || l.Holder != "b" || l.Token != 2 || l.Value != "addr-b" {
			t.Fatalf("lease = %+v, %v; want b's term 2 with value addr-b", l, err)
		}

		// No gap: the hand-off ended a's term (which still held the lease)
		// and began b's at one instant, and b confirmed it then.
		ho := handOffEvents(b, pgleadertest.OpHandOff)
		if len(ho) != 1 || ho[0].Owner != "a" || ho[0].Token != 1 || !ho[0].OK || !ho[0].At.Equal(stopped) {
			t.Fatalf("hand-offs = %+v; want a's term 1 handed off at the stop", ho)
		}
		var aExpires time.Time
		for _, e := range b.History() {
			if e.OK && e.Owner == "a" && e.Token == 1 && (e.Op == pgleadertest.OpAcquire || e.Op == pgleadertest.OpRenew) {
				aExpires = e.Expires
			}
		}
		if !aExpires.After(stopped) {
			t.Fatalf("a's lease expired at %v, before the hand-off at %v", aExpires, stopped)
		}
		acq := acquisitions(b.Backend)
		if len(acq) != 2 || acq[1].Owner != "b" || acq[1].Token != 2 || !acq[1].At.Equal(stopped) {
			t.Fatalf("terms begun = %+v; want a's 1, then b's 2 at the hand-off", acq)
		}
		take := handOffEvents(b, pgleadertest.OpTake)
		if len(take) != 1 || take[0].Owner != "b" || take[0].Token != 2 || !take[0].At.Equal(stopped) {
			t.Fatalf("confirmations = %+v; want b's term 2 confirmed at the hand-off", take)
		}
		c.stop(t)
		if l, _ := b.Lease(ctx, "k"); l.Held() || l.Token != 2 {
			t.Fatalf("lease after both stopped = %+v; want free with token 2", l)
		}
	})
}

// TestPreferredLeaderSync: a candidate of higher priority makes the leader
// step down at its first renewal once its term has lasted MinTerm, not
// before, and takes over with the next token; the old leader, of lower
// priority, then only waits.
func TestPreferredLeaderSync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		b := pgleadertest.NewBackend().WithHandOff()
		var recA, recP recorder
		a := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "a", MinTerm: 7 * time.Second, Lead: recA.body(0, true)})
		time.Sleep(time.Millisecond)
		p := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "p", Priority: 1, Lead: recP.body(0, false)})

		time.Sleep(7900 * time.Millisecond) // a renews at 2s, 4s and 6s: its term has not lasted 7s
		synctest.Wait()
		if n := len(recP.all()); n != 0 || !a.el.Status().Leading {
			t.Fatalf("at t0+7.9s: p ran %d terms, a leading %v; want a still leading before its MinTerm", n, a.el.Status().Leading)
		}
		time.Sleep(200 * time.Millisecond) // the renewal at 8s asks a to step down
		synctest.Wait()
		ta, tp := recA.all(), recP.all()
		if len(ta) != 1 || ta[0].reason != pgleader.ReasonResigned {
			t.Fatalf("a's terms = %+v; want one, resigned", ta)
		}
		if len(tp) != 1 || tp[0].token != 2 {
			t.Fatalf("p's terms = %+v; want one with token 2", tp)
		}
		at(t, "a's term ending", ta[0].ending, t0, 8*time.Second)
		at(t, "p's term started", tp[0].started, t0, 8*time.Second)

		time.Sleep(30 * time.Second)
		if s := p.el.Status(); !s.Leading || s.Token != 2 || len(recA.all()) != 1 {
			t.Fatalf("30s later: p %+v, a's terms %d; want p still leading term 2", s, len(recA.all()))
		}
		a.stop(t)
		p.stop(t)
	})
}

// TestTransferSync: Elector.Transfer to an owner that is not a candidate
// fails with ErrNoCandidate and leaves the term alone; to a candidate, it
// hands the lease to it rather than to a candidate of higher priority.
func TestTransferSync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := pgleadertest.NewBackend().WithHandOff()
		var recA, recB, recC recorder
		a := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "a", Lead: recA.body(0, true)})
		time.Sleep(time.Millisecond)
		bb := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "b", Lead: recB.body(0, false)})
		c := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "c", Priority: 5, MinTerm: time.Hour, Lead: recC.body(0, false)})
		time.Sleep(time.Second)
		synctest.Wait()

		if err := a.el.Transfer(ctx, "nobody"); !errors.Is(err, pgleader.ErrNoCandidate) {
			t.Fatalf("Transfer to a missing owner = %v; want ErrNoCandidate", err)
		}
		synctest.Wait()
		if s := a.el.Status(); !s.Leading || s.Token != 1 {
			t.Fatalf("a after a refused transfer: %+v; want still leading term 1", s)
		}
		if tr := handOffEvents(b, pgleadertest.OpTransfer); len(tr) != 0 {
			t.Fatalf("transfers recorded = %+v; want none (the refusal changes nothing)", tr)
		}

		if err := a.el.Transfer(ctx, "b"); err != nil {
			t.Fatalf("Transfer to b: %v", err)
		}
		synctest.Wait()
		if tb := recB.all(); len(tb) != 1 || tb[0].token != 2 || len(recC.all()) != 0 {
			t.Fatalf("b's terms %+v, c's %d; want b leading term 2, c none", tb, len(recC.all()))
		}
		if ta := recA.all(); len(ta) != 1 || ta[0].reason != pgleader.ReasonResigned {
			t.Fatalf("a's terms = %+v; want one, resigned", ta)
		}
		a.stop(t)
		bb.stop(t)
		c.stop(t)
	})
}
