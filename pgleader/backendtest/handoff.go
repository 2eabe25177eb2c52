package backendtest

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgleader/pgleader/pgleader"
)

// steered is a backend with its Steerer.
type steered struct {
	pgleader.Backend
	pgleader.Steerer
}

// handoffer returns b with its Steerer if it keeps candidates, or skips
// the subtest.
func handoffer(t *testing.T, b pgleader.Backend) steered {
	t.Helper()
	ab := b.Abilities()
	if !ab.Candidates || ab.Steer == nil {
		t.Skip("the backend keeps no candidates, or cannot steer (Abilities)")
	}
	return steered{b, ab.Steer}
}

// cand is a candidate that registers for long.
func cand(owner string, priority int32) pgleader.Candidate {
	return pgleader.Candidate{Owner: owner, Priority: priority, Value: "v-" + owner, TTL: long}
}

func mustCampaign(t *testing.T, h steered, key string, c pgleader.Candidate, wantAcquired bool) pgleader.Lease {
	t.Helper()
	l, acquired, err := h.Campaign(t.Context(), key, c, long, 0)
	if err != nil || acquired != wantAcquired {
		t.Fatalf("campaign of %s by %s = %+v, %v, %v; want acquired %v", key, c.Owner, l, acquired, err, wantAcquired)
	}
	return l
}

func mustCandidates(t *testing.T, h steered, key string) []pgleader.Candidate {
	t.Helper()
	cs, err := h.Candidates(t.Context(), key)
	if err != nil {
		t.Fatalf("candidates of %s: %v", key, err)
	}
	return cs
}

// wantCandidates fails unless key's live candidates are owners, in order.
func wantCandidates(t *testing.T, h steered, key string, owners ...string) []pgleader.Candidate {
	t.Helper()
	cs := mustCandidates(t, h, key)
	got := make([]string, len(cs))
	for i, c := range cs {
		got[i] = c.Owner
	}
	if !slices.Equal(got, owners) {
		t.Fatalf("candidates of %s = %q, want %q", key, got, owners)
	}
	return cs
}

func mustHandOff(t *testing.T, h steered, key, owner string, token int64, to, wantSuccessor string) {
	t.Helper()
	released, successor, err := h.HandOff(t.Context(), key, owner, token, to)
	if err != nil || !released || successor != wantSuccessor {
		t.Fatalf("hand-off of %s by %s (token %d, to %q) = %v, %q, %v; want released to %q",
			key, owner, token, to, released, successor, err, wantSuccessor)
	}
}

// testHandOff: a campaign registers a candidate while another term holds the
// lease; a hand-off ends the term and, in the same operation, gives the
// lease to the best live candidate with token + 1, its value, and its
// candidate expiry, with no moment free. Only the successor can confirm the
// term (by a campaign or an acquire), which extends it to TTL from then; a
// term handed off and never confirmed can hand off in turn, and one with no
// candidate left releases.
func testHandOff(t *testing.T, b pgleader.Backend) {
	h := handoffer(t, b)
	ctx := t.Context()
	if a := mustCampaign(t, h, "k", cand("a", 0), true); a.Token != 1 || a.Holder != "a" || a.Value != "v-a" {
		t.Fatalf("first campaign = %+v; want a with token 1 and value v-a", a)
	}
	mustCampaign(t, h, "k", cand("a", 0), false) // the holder: not a candidate of its own lease
	mustCampaign(t, h, "k", cand("b", 0), false)
	mustCampaign(t, h, "k", cand("c", 5), false)
	cs := wantCandidates(t, h, "k", "c", "b")
	for _, c := range cs {
		if c.Value != "v-"+c.Owner || c.RegisteredAt.IsZero() || c.ExpiresAt.Sub(c.RegisteredAt) != long {
			t.Fatalf("candidate %+v; want its value, and an expiry %v after its registration", c, long)
		}
	}
	if cs[0].Priority != 5 || cs[1].Priority != 0 {
		t.Fatalf("priorities %d, %d; want 5, 0", cs[0].Priority, cs[1].Priority)
	}
	mustCampaign(t, h, "k", cand("b", 0), false) // a refresh keeps the registration time
	again := wantCandidates(t, h, "k", "c", "b")
	if !again[1].RegisteredAt.Equal(cs[1].RegisteredAt) || again[1].ExpiresAt.Before(cs[1].ExpiresAt) {
		t.Fatalf("b refreshed: %+v, before %+v; want the same registration time and an expiry not earlier", again[1], cs[1])
	}

	mustHandOff(t, h, "k", "a", 1, "", "c") // the highest priority
	l := mustLease(t, b, "k")
	if l.Holder != "c" || l.Token != 2 || l.Value != "v-c" || !l.ExpiresAt.Equal(cs[0].ExpiresAt) ||
		!l.AcquiredAt.Equal(l.RenewedAt) || !l.ExpiresAt.After(l.Now) {
		t.Fatalf("lease after the hand-off = %+v; want c with token 2, value v-c, expiring at its candidate expiry %v",
			l, cs[0].ExpiresAt)
	}
	wantCandidates(t, h, "k", "b") // the successor's registration is gone

	// Handed off, not confirmed: held all the same.
	if got := mustCampaign(t, h, "k", cand("b", 0), false); got.Holder != "c" || got.Token != 2 {
		t.Fatalf("campaign by b during the hand-off = %+v; want c's term 2", got)
	}
	if got, ok, err := acquire(b, ctx, "k", "d", long); err != nil || ok || got.Holder != "c" || got.Token != 2 {
		t.Fatalf("acquire by d during the hand-off = %+v, %v, %v; want c's term 2", got, ok, err)
	}
	if released, successor, err := h.HandOff(ctx, "k", "a", 1, ""); err != nil || released || successor != "" {
		t.Fatalf("a second hand-off by the ended term = %v, %q, %v; want nothing", released, successor, err)
	}
	assertUnchanged(t, b, l)

	confirmed := mustCampaign(t, h, "k", cand("c", 5), true)
	if confirmed.Holder != "c" || confirmed.Token != 2 || !confirmed.AcquiredAt.Equal(l.AcquiredAt) ||
		!confirmed.ExpiresAt.Equal(confirmed.Now.Add(long)) || confirmed.Value != "v-c" {
		t.Fatalf("confirming campaign = %+v; want c's term 2, begun at the hand-off %v, extended to %v from now",
			confirmed, l.AcquiredAt, long)
	}
	if got := mustCampaign(t, h, "k", cand("c", 5), false); got.Holder != "c" || got.Token != 2 {
		t.Fatalf("a second confirmation = %+v; want refused, c's term 2 unchanged", got)
	}

	// To a named candidate, over a better one; confirmed by an acquire.
	mustCampaign(t, h, "k", cand("d", 9), false)
	mustHandOff(t, h, "k", "c", 2, "b", "b")
	if got, ok, err := acquire(b, ctx, "k", "b", long); err != nil || !ok || got.Holder != "b" || got.Token != 3 {
		t.Fatalf("acquire by the successor b = %+v, %v, %v; want its term 3 confirmed", got, ok, err)
	}
	// A target that is no candidate: the best live one.
	mustHandOff(t, h, "k", "b", 3, "nobody", "d")
	wantCandidates(t, h, "k")
	// An unconfirmed term with nobody waiting releases.
	mustHandOff(t, h, "k", "d", 4, "", "")
	if got := mustLease(t, b, "k"); got.Held() || got.Token != 4 {
		t.Fatalf("lease after a hand-off with no candidate = %+v; want free with token 4", got)
	}
	if got := mustAcquire(t, b, "k", "a", long); got.Token != 5 {
		t.Fatalf("token after 3 hand-offs and a release = %d, want 5", got.Token)
	}
}

// testHandOffChoice: among candidates of equal priority the longest
// registered is chosen; an expired candidate is neither listed, chosen nor
// a transfer target, and registers afresh; a withdrawn one is gone; a
// campaign with no candidate TTL registers nothing.
func testHandOffChoice(t *testing.T, b pgleader.Backend) {
	h := handoffer(t, b)
	ctx := t.Context()
	mustCampaign(t, h, "k", cand("a", 0), true)
	mustCampaign(t, h, "k", cand("b", 0), false)
	mustCampaign(t, h, "k", cand("c", 0), false)
	mustCampaign(t, h, "k", pgleader.Candidate{Owner: "e", Priority: 100, TTL: short}, false)
	mustCampaign(t, h, "k", pgleader.Candidate{Owner: "x", Priority: 200}, false) // TTL 0: not registered
	wantCandidates(t, h, "k", "e", "b", "c")

	for deadline := time.Now().Add(patience); len(mustCandidates(t, h, "k")) != 2; sleep(ctx, 20*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a candidate registered for %v was still listed after %v", short, patience)
		}
	}
	wantCandidates(t, h, "k", "b", "c")
	if _, _, err := h.Transfer(ctx, "k", "e"); !errors.Is(err, pgleader.ErrNoCandidate) {
		t.Fatalf("transfer to an expired candidate: %v, want ErrNoCandidate", err)
	}
	mustCampaign(t, h, "k", cand("e", 0), false) // registers afresh: after b and c
	wantCandidates(t, h, "k", "b", "c", "e")

	if err := h.Withdraw(ctx, "k", "b"); err != nil {
		t.Fatal(err)
	}
	if err := h.Withdraw(ctx, "k", "never"); err != nil {
		t.Fatalf("withdrawing an owner that never registered: %v", err)
	}
	wantCandidates(t, h, "k", "c", "e")
	mustCampaign(t, h, "k", cand("b", 0), false) // registers again: now the last
	wantCandidates(t, h, "k", "c", "e", "b")
	mustHandOff(t, h, "k", "a", 1, "", "c")
	wantCandidates(t, h, "k", "e", "b")
}

// testHandOffEvents: a hand-off is delivered to the key's watchers as a
// hand-off event naming the successor; one that finds no candidate as a
// release.
func testHandOffEvents(t *testing.T, b pgleader.Backend) {
	h := handoffer(t, b)
	w := b.Abilities().Events
	if w == nil {
		t.Skip("the backend pushes no events (Abilities.Events)")
	}
	events, stop := w.Watch("k")
	defer stop()
	for deadline := time.Now().Add(patience); !w.Listening(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the watcher was not listening after %v", patience)
		}
	}
	mustCampaign(t, h, "k", cand("a", 0), true)
	mustCampaign(t, h, "k", cand("b", 0), false)
	mustHandOff(t, h, "k", "a", 1, "", "b")
	timeout := time.NewTimer(patience)
	defer timeout.Stop()
	for handedOff := false; !handedOff; {
		select {
		case ev := <-events:
			switch {
			case ev.Key != "k":
				t.Fatalf("a watcher of k received %v of %q", ev.Kind, ev.Key)
			case ev.Kind == pgleader.EventReleased:
				t.Fatal("a hand-off to b was delivered as a release")
			case ev.Kind == pgleader.EventHandedOff && ev.Owner != "b":
				t.Fatalf("the hand-off to b was delivered naming %q", ev.Owner)
			case ev.Kind == pgleader.EventHandedOff:
				handedOff = true
			}
		case <-timeout.C:
			t.Fatalf("no hand-off event within %v", patience)
		}
	}
	mustCampaign(t, h, "k", cand("b", 0), true)
	mustHandOff(t, h, "k", "b", 2, "", "")
	waitRelease(t, events, "k")
}

// testPreferredLeader: RenewTerm with a minimum term renews as without, and asks
// the term to resign when a live candidate of higher priority than the
// term's waits and the term has lasted minTerm, or when it was asked to
// resign. A term carries the priority of the campaign that won it (0 for an
// acquire) or of the candidate it was handed to.
func testPreferredLeader(t *testing.T, b pgleader.Backend) {
	h := handoffer(t, b)
	ctx := t.Context()
	renew := func(key, owner string, token int64, minTerm time.Duration, want bool) {
		t.Helper()
		expires, resign, err := h.RenewTerm(ctx, key, owner, token, long, minTerm)
		if err != nil || resign != want {
			t.Fatalf("renew of %s by %s (token %d, min term %v) = %v, %v, %v; want resign %v",
				key, owner, token, minTerm, expires, resign, err, want)
		}
		if l := mustLease(t, b, key); l.Holder != owner || l.Token != token || !l.ExpiresAt.Equal(expires) {
			t.Fatalf("lease after the renewal = %+v; want %s's term %d expiring at %v", l, owner, token, expires)
		}
	}

	mustCampaign(t, h, "k", cand("a", 1), true)
	renew("k", "a", 1, 0, false) // nobody waits
	mustCampaign(t, h, "k", cand("b", 1), false)
	mustCampaign(t, h, "k", cand("c", 0), false)
	renew("k", "a", 1, 0, false) // equal and lower priorities
	mustCampaign(t, h, "k", cand("d", 2), false)
	renew("k", "a", 1, long, false) // the term has not lasted long
	renew("k", "a", 1, 0, true)
	if _, resign, err := h.RenewTerm(ctx, "k", "a", 1, long, pgleader.NoPreference); err != nil || resign {
		t.Fatalf("RenewTerm with NoPreference beside a preferred candidate = %v, %v; want no resign (no minimum term)", resign, err)
	}
	if _, _, err := h.RenewTerm(ctx, "k", "b", 1, long, 0); !errors.Is(err, pgleader.ErrLost) {
		t.Fatalf("RenewTerm by another owner: %v, want ErrLost", err)
	}
	if err := h.Withdraw(ctx, "k", "d"); err != nil {
		t.Fatal(err)
	}
	renew("k", "a", 1, 0, false)
	if _, asked, err := h.Resign(ctx, "k", 1); err != nil || !asked {
		t.Fatalf("resign = %v, %v", asked, err)
	}
	renew("k", "a", 1, long, true) // asked to resign, whatever the minimum term

	// A handed term has its candidate's priority: b's 1, which c (0) does
	// not pre-empt, and a (2) does.
	mustHandOff(t, h, "k", "a", 1, "", "b")
	renew("k", "b", 2, 0, false)
	mustCampaign(t, h, "k", cand("a", 2), false)
	renew("k", "b", 2, 0, true)

	// A term won by an acquire has priority 0.
	mustAcquire(t, b, "p", "p", long)
	mustCampaign(t, h, "p", cand("q", 0), false)
	renew("p", "p", 1, 0, false)
	mustCampaign(t, h, "p", cand("q", 1), false)
	renew("p", "p", 1, 0, true)
}

// testTransfer: Transfer asks the holder to end its term (it learns at its
// next renewal) and marks the named live candidate as its successor; it
// refuses an owner that is not a live candidate with ErrNoCandidate, and
// asks nobody when the lease is free or already the target's. A target that
// is gone by the hand-off leaves it to the best candidate.
func testTransfer(t *testing.T, b pgleader.Backend) {
	h := handoffer(t, b)
	ctx := t.Context()
	if l, asked, err := h.Transfer(ctx, "k", "b"); err != nil || asked || l.Held() {
		t.Fatalf("transfer of a free key = %+v, %v, %v; want nobody asked", l, asked, err)
	}
	mustCampaign(t, h, "k", cand("a", 0), true)
	before := mustLease(t, b, "k")
	if _, asked, err := h.Transfer(ctx, "k", "nobody"); !errors.Is(err, pgleader.ErrNoCandidate) || asked {
		t.Fatalf("transfer to a missing owner = %v, %v; want ErrNoCandidate", asked, err)
	}
	if l, asked, err := h.Transfer(ctx, "k", "a"); err != nil || asked || l.Holder != "a" || l.Token != 1 {
		t.Fatalf("transfer to the holder = %+v, %v, %v; want nobody asked, a's term 1", l, asked, err)
	}
	assertUnchanged(t, b, before)
	if _, resign, err := h.RenewTerm(ctx, "k", "a", 1, long, pgleader.NoPreference); err != nil || resign {
		t.Fatalf("renew after refused transfers = %v, %v; want not asked", resign, err)
	}

	mustCampaign(t, h, "k", cand("b", 0), false)
	mustCampaign(t, h, "k", cand("c", 5), false)
	if l, asked, err := h.Transfer(ctx, "k", "b"); err != nil || !asked || l.Holder != "a" || l.Token != 1 {
		t.Fatalf("transfer to b = %+v, %v, %v; want a's term 1 asked", l, asked, err)
	}
	if _, resign, err := h.RenewTerm(ctx, "k", "a", 1, long, pgleader.NoPreference); err != nil || !resign {
		t.Fatalf("renew after the transfer = %v, %v; want asked to resign", resign, err)
	}
	mustHandOff(t, h, "k", "a", 1, "", "b") // b over c, of higher priority
	mustCampaign(t, h, "k", cand("b", 0), true)
	if _, resign, err := h.RenewTerm(ctx, "k", "b", 2, long, pgleader.NoPreference); err != nil || resign {
		t.Fatalf("the successor's renewal = %v, %v; want not asked (the transfer was the last term's)", resign, err)
	}

	mustCampaign(t, h, "k", cand("a", 0), false)
	if _, asked, err := h.Transfer(ctx, "k", "a"); err != nil || !asked {
		t.Fatalf("transfer to a = %v, %v", asked, err)
	}
	if err := h.Withdraw(ctx, "k", "a"); err != nil {
		t.Fatal(err)
	}
	mustHandOff(t, h, "k", "b", 2, "", "c")
}

// testHandOffBadInput: the hand-off operations refuse bad input with an
// error matching ErrInvalid that names the bad argument, and change nothing.
func testHandOffBadInput(t *testing.T, b pgleader.Backend) {
	h := handoffer(t, b)
	ctx := t.Context()
	mustCampaign(t, h, "k", cand("a", 0), true)
	before := mustLease(t, b, "k")
	c := cand("b", 0)
	with := func(f func(*pgleader.Candidate)) pgleader.Candidate {
		d := c
		f(&d)
		return d
	}
	for _, s := range []struct {
		name, names string
		do          func() error
	}{
		{"campaign empty key", "key", func() error { _, _, err := h.Campaign(ctx, "", c, long, 0); return err }},
		{"campaign empty owner", "owner", func() error {
			_, _, err := h.Campaign(ctx, "k", with(func(d *pgleader.Candidate) { d.Owner = "" }), long, 0)
			return err
		}},
		{"campaign zero ttl", "ttl", func() error { _, _, err := h.Campaign(ctx, "k", c, 0, 0); return err }},
		{"campaign negative floor", "floor", func() error { _, _, err := h.Campaign(ctx, "k", c, long, -1); return err }},
		{"campaign long value", "value", func() error {
			_, _, err := h.Campaign(ctx, "k", with(func(d *pgleader.Candidate) { d.Value = strings.Repeat("v", pgleader.MaxValueLen+1) }), long, 0)
			return err
		}},
		{"campaign 1ns candidate TTL", "candidate", func() error {
			_, _, err := h.Campaign(ctx, "k", with(func(d *pgleader.Candidate) { d.TTL = time.Nanosecond }), long, 0)
			return err
		}},
		{"hand-off zero token", "token", func() error { _, _, err := h.HandOff(ctx, "k", "a", 0, ""); return err }},
		{"hand-off empty owner", "owner", func() error { _, _, err := h.HandOff(ctx, "k", "", 1, ""); return err }},
		{"hand-off to an invalid owner", "owner", func() error { _, _, err := h.HandOff(ctx, "k", "a", 1, "b\x00"); return err }},
		{"renew negative min term", "minTerm", func() error { _, _, err := h.RenewTerm(ctx, "k", "a", 1, long, -time.Second); return err }},
		{"renew preferring zero ttl", "ttl", func() error { _, _, err := h.RenewTerm(ctx, "k", "a", 1, 0, 0); return err }},
		{"transfer empty key", "key", func() error { _, _, err := h.Transfer(ctx, "", "b"); return err }},
		{"transfer empty target", "owner", func() error { _, _, err := h.Transfer(ctx, "k", ""); return err }},
		{"candidates empty key", "key", func() error { _, err := h.Candidates(ctx, ""); return err }},
		{"withdraw empty owner", "owner", func() error { return h.Withdraw(ctx, "k", "") }},
	} {
		err := s.do()
		if !errors.Is(err, pgleader.ErrInvalid) || !strings.Contains(err.Error(), s.names) {
			t.Errorf("%s: err = %v; want an error matching ErrInvalid that names the %s", s.name, err, s.names)
		}
	}
	assertUnchanged(t, b, before)
	wantCandidates(t, h, "k")
}
