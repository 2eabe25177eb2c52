// Package backendtest is the test suite that every [pgleader.Backend] must
// pass: the contract written in the documentation of Backend, and of the
// abilities its [pgleader.Abilities] claim (advance, values, candidates,
// [pgleader.Steerer], [pgleader.Watcher]). Package pgleader runs it against [pgleader.Postgres],
// and package pgleadertest against its in-memory Backend, so the fake cannot
// drift from the real thing. A third-party backend runs it from a test of its
// own:
//
//	func TestBackendContract(t *testing.T) {
//		backendtest.Run(t, func(t *testing.T) pgleader.Backend {
//			return mybackend.New(t) // fresh and empty; cleaned up by t.Cleanup
//		})
//	}
//
// The subtests of an ability are skipped when the backend's Abilities do
// not claim it. Expiry is tested with TTLs of a few hundred
// milliseconds and waits of up to 30 seconds; no assertion depends on how
// long a call takes, only on the clock values the backend reports
// ([pgleader.Lease.Now] and ExpiresAt).
package backendtest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgleader/pgleader/internal/racetest"
	"github.com/pgleader/pgleader/pgleader"
)

const (
	// long is a TTL that no subtest outlives.
	long = time.Minute
	// short is a TTL a subtest waits out.
	short = 300 * time.Millisecond
	// patience bounds every wait for an expiry or an event.
	patience = 30 * time.Second
)

// Run runs the suite as parallel subtests of t. newBackend is called once
// per subtest and must return a fresh backend with no leases and no token
// counters; it may register cleanups on the t it is given.
func Run(t *testing.T, newBackend func(t *testing.T) pgleader.Backend) {
	t.Helper()
	for _, st := range []struct {
		name string
		test func(*testing.T, pgleader.Backend)
	}{
		{"FirstTokens", testFirstTokens},
		{"TokensIncrease", testTokensIncrease},
		{"FailedAcquire", testFailedAcquire},
		{"Renew", testRenew},
		{"StaleTerm", testStaleTerm},
		{"Expiry", testExpiry},
		{"LeaseRead", testLeaseRead},
		{"BadInput", testBadInput},
		{"AcquireRace", testAcquireRace},
		{"Advance", testAdvance},
		{"AcquireWithFloor", testAcquireWithFloor},
		{"Watch", testWatch},
		{"HandOff", testHandOff},
		{"HandOffChoice", testHandOffChoice},
		{"HandOffEvents", testHandOffEvents},
		{"PreferredLeader", testPreferredLeader},
		{"Transfer", testTransfer},
		{"HandOffBadInput", testHandOffBadInput},
	} {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			st.test(t, newBackend(t))
		})
	}
}

// testFirstTokens: on a fresh backend a key's first term draws 1 and the
// next 2, and every key has a counter of its own.
func testFirstTokens(t *testing.T, b pgleader.Backend) {
	first := mustAcquire(t, b, "k", "a", long)
	if first.Token != 1 || first.Holder != "a" || first.Key != "k" {
		t.Fatalf("first acquire = %+v; want key k, holder a, token 1", first)
	}
	mustRelease(t, b, "k", "a", 1)
	if second := mustAcquire(t, b, "k", "b", long); second.Token != 2 {
		t.Fatalf("second term's token = %d, want 2", second.Token)
	}
	if other := mustAcquire(t, b, "other", "a", long); other.Token != 1 {
		t.Fatalf("first token of another key = %d, want 1", other.Token)
	}
}

// testTokensIncrease: tokens strictly increase across release, reacquire by
// the same owner, and expiry; a renewal keeps the token.
func testTokensIncrease(t *testing.T, b pgleader.Backend) {
	ctx := t.Context()
	var last int64
	next := func(l pgleader.Lease) {
		t.Helper()
		if l.Token <= last {
			t.Fatalf("token %d after %d: tokens must strictly increase", l.Token, last)
		}
		last = l.Token
	}

	l := mustAcquire(t, b, "k", "a", long)
	next(l)
	mustRelease(t, b, "k", "a", l.Token)

	l = mustAcquire(t, b, "k", "a", long) // the same owner again: a new term
	next(l)
	mustRelease(t, b, "k", "a", l.Token)

	expired := mustAcquire(t, b, "k", "b", short)
	next(expired)
	waitFree(t, b, "k") // expiry, no release
	l = mustAcquire(t, b, "k", "a", long)
	next(l)

	if _, err := renew(b, ctx, "k", "b", expired.Token, long); !errors.Is(err, pgleader.ErrLost) {
		t.Fatalf("renew by the expired term: %v, want ErrLost", err)
	}
	if _, err := renew(b, ctx, "k", "a", l.Token, long); err != nil {
		t.Fatalf("renew by the holder: %v", err)
	}
	got := mustLease(t, b, "k")
	if got.Token != l.Token || got.Holder != "a" {
		t.Fatalf("lease after renew = %+v; want holder a, token %d (a renewal keeps the token)", got, l.Token)
	}
}

// testFailedAcquire: an acquire of a held lease changes nothing, consumes no
// token, and reports the holder, its token and its expiry.
func testFailedAcquire(t *testing.T, b pgleader.Backend) {
	ctx := t.Context()
	held := mustAcquire(t, b, "k", "a", long)
	for _, owner := range []string{"b", "c", "a"} { // the holder cannot take its lease twice either
		for range 3 {
			l, ok, err := acquire(b, ctx, "k", owner, long)
			if err != nil || ok {
				t.Fatalf("acquire by %s while held = %v, %v; want not acquired", owner, ok, err)
			}
			if l.Holder != "a" || l.Token != 1 || !l.ExpiresAt.Equal(held.ExpiresAt) {
				t.Fatalf("refused acquire by %s reported %+v; want holder a, token 1, expiry %v", owner, l, held.ExpiresAt)
			}
			if l.Now.IsZero() || !l.ExpiresAt.After(l.Now) || l.Remaining() <= 0 || l.Remaining() > long {
				t.Fatalf("refused acquire by %s: now %v, expiry %v, remaining %v; want an expiry after now, at most %v away",
					owner, l.Now, l.ExpiresAt, l.Remaining(), long)
			}
		}
	}
	if got := mustLease(t, b, "k"); got.Holder != "a" || got.Token != 1 || !got.ExpiresAt.Equal(held.ExpiresAt) {
		t.Fatalf("lease after refused acquires = %+v; want holder a, token 1, unchanged expiry", got)
	}
	mustRelease(t, b, "k", "a", 1)
	if l := mustAcquire(t, b, "k", "b", long); l.Token != 2 {
		t.Fatalf("token after 9 refused acquires = %d, want 2", l.Token)
	}
}

// testRenew: a renewal extends the lease from now on the backend's clock,
// returns the new expiry, and keeps the token.
func testRenew(t *testing.T, b pgleader.Backend) {
	ctx := t.Context()
	l := mustAcquire(t, b, "k", "a", long)
	expires, err := renew(b, ctx, "k", "a", l.Token, 2*long)
	if err != nil {
		t.Fatalf("renew: %v", err)
	}
	if !expires.After(l.ExpiresAt) {
		t.Fatalf("renew for %v returned %v, not after the acquire's expiry %v for %v", 2*long, expires, l.ExpiresAt, long)
	}
	got := mustLease(t, b, "k")
	if got.Holder != "a" || got.Token != l.Token || !got.ExpiresAt.Equal(expires) {
		t.Fatalf("lease after renew = %+v; want holder a, token %d, expiry %v", got, l.Token, expires)
	}
	if got.RenewedAt.Before(got.AcquiredAt) || !got.ExpiresAt.After(got.RenewedAt) {
		t.Fatalf("lease after renew: acquired %v, renewed %v, expires %v; want acquired <= renewed < expires",
			got.AcquiredAt, got.RenewedAt, got.ExpiresAt)
	}
	mustRelease(t, b, "k", "a", l.Token)
	if _, err := renew(b, ctx, "k", "a", l.Token, long); !errors.Is(err, pgleader.ErrLost) {
		t.Fatalf("renew after release: %v, want ErrLost", err)
	}
	if got := mustLease(t, b, "k"); got.Held() {
		t.Fatalf("renew after release took the lease: %+v", got)
	}
}

// testStaleTerm: renewals and releases by any term but the holder's answer
// ErrLost and false and change nothing.
func testStaleTerm(t *testing.T, b pgleader.Backend) {
	ctx := t.Context()
	old := mustAcquire(t, b, "k", "a", long)
	mustRelease(t, b, "k", "a", old.Token)
	cur := mustAcquire(t, b, "k", "b", long)
	before := mustLease(t, b, "k")

	for _, s := range []struct {
		name  string
		owner string
		token int64
	}{
		{"old term", "a", old.Token},
		{"holder with the old token", "b", old.Token},
		{"other owner with the current token", "a", cur.Token},
		{"holder with a future token", "b", cur.Token + 1},
	} {
		if _, err := renew(b, ctx, "k", s.owner, s.token, 2*long); !errors.Is(err, pgleader.ErrLost) {
			t.Errorf("%s: renew err = %v, want ErrLost", s.name, err)
		}
		if ok, err := b.Release(ctx, "k", s.owner, s.token); err != nil || ok {
			t.Errorf("%s: release = %v, %v; want false, nil", s.name, ok, err)
		}
	}
	if _, err := renew(b, ctx, "never-taken", "a", 1, long); !errors.Is(err, pgleader.ErrLost) {
		t.Errorf("renew of a key never taken: %v, want ErrLost", err)
	}
	if ok, err := b.Release(ctx, "never-taken", "a", 1); err != nil || ok {
		t.Errorf("release of a key never taken = %v, %v; want false, nil", ok, err)
	}
	assertUnchanged(t, b, before)
}

// testExpiry: a lease expires on the backend's clock: every candidate is
// refused while the backend's clock is before the reported expiry, and wins
// once it is past it. The expired term can no longer renew or release.
func testExpiry(t *testing.T, b pgleader.Backend) {
	ctx := t.Context()
	held := mustAcquire(t, b, "k", "a", short)
	for deadline := time.Now().Add(patience); ; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a lease of %v was still held after %v", short, patience)
		}
		got, ok, err := acquire(b, ctx, "k", "b", long)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			if got.Now.Before(held.ExpiresAt) {
				t.Fatalf("won at %v on the backend's clock, before the expiry %v", got.Now, held.ExpiresAt)
			}
			if got.Token != held.Token+1 {
				t.Fatalf("token after expiry = %d, want %d", got.Token, held.Token+1)
			}
			break
		}
		if !got.Now.Before(held.ExpiresAt) {
			t.Fatalf("refused at %v on the backend's clock, at or after the expiry %v", got.Now, held.ExpiresAt)
		}
	}
	if _, err := renew(b, ctx, "k", "a", held.Token, long); !errors.Is(err, pgleader.ErrLost) {
		t.Fatalf("renew by the expired term: %v, want ErrLost", err)
	}
	if ok, err := b.Release(ctx, "k", "a", held.Token); err != nil || ok {
		t.Fatalf("release by the expired term = %v, %v; want false", ok, err)
	}

	// Expired and not taken: free, with its token kept.
	mustAcquire(t, b, "e", "a", short)
	waitFree(t, b, "e")
	l := mustLease(t, b, "e")
	if l.Holder != "" || l.Token != 1 || !l.AcquiredAt.IsZero() || !l.RenewedAt.IsZero() || !l.ExpiresAt.IsZero() || l.Remaining() != 0 {
		t.Fatalf("expired lease = %+v; want no holder, token 1, zero times", l)
	}
	if _, err := renew(b, ctx, "e", "a", 1, long); !errors.Is(err, pgleader.ErrLost) {
		t.Fatalf("renew of an expired lease: %v, want ErrLost", err)
	}
}

// testLeaseRead: Lease reports a free key as token 0 with no holder, a held
// one with its term, and a released one with its last token.
func testLeaseRead(t *testing.T, b pgleader.Backend) {
	free := mustLease(t, b, "k")
	if free.Key != "k" || free.Holder != "" || free.Held() || free.Token != 0 || free.Remaining() != 0 ||
		!free.AcquiredAt.IsZero() || !free.RenewedAt.IsZero() || !free.ExpiresAt.IsZero() || free.Now.IsZero() {
		t.Fatalf("lease of a key never taken = %+v; want key k, no holder, token 0, zero times, the backend's now", free)
	}

	acq := mustAcquire(t, b, "k", "a", long)
	held := mustLease(t, b, "k")
	if held.Key != "k" || held.Holder != "a" || !held.Held() || held.Token != acq.Token ||
		!held.ExpiresAt.Equal(acq.ExpiresAt) || held.AcquiredAt.IsZero() || held.RenewedAt.Before(held.AcquiredAt) ||
		!held.ExpiresAt.After(held.Now) || held.Remaining() <= 0 || held.Remaining() > long {
		t.Fatalf("lease while held = %+v; want key k, holder a, token %d, expiry %v after now", held, acq.Token, acq.ExpiresAt)
	}

	mustRelease(t, b, "k", "a", acq.Token)
	rel := mustLease(t, b, "k")
	if rel.Holder != "" || rel.Token != acq.Token || !rel.ExpiresAt.IsZero() || !rel.AcquiredAt.IsZero() || rel.Remaining() != 0 {
		t.Fatalf("lease after release = %+v; want no holder, token %d, zero times", rel, acq.Token)
	}
}

// testBadInput: every operation refuses bad input with an error matching
// ErrInvalid that names the bad argument, and changes nothing.
func testBadInput(t *testing.T, b pgleader.Backend) {
	ctx := t.Context()
	held := mustAcquire(t, b, "k", "a", long)
	before := mustLease(t, b, "k")
	tooLong := strings.Repeat("x", max(pgleader.MaxKeyLen, pgleader.MaxOwnerLen)+1)

	type call struct {
		name, names string
		do          func() error
	}
	calls := []call{
		{"acquire empty key", "key", func() error { _, _, err := acquire(b, ctx, "", "b", long); return err }},
		{"acquire empty owner", "owner", func() error { _, _, err := acquire(b, ctx, "free", "", long); return err }},
		{"acquire long key", "key", func() error { _, _, err := acquire(b, ctx, tooLong, "b", long); return err }},
		{"acquire long owner", "owner", func() error { _, _, err := acquire(b, ctx, "free", tooLong, long); return err }},
		{"acquire NUL in key", "key", func() error { _, _, err := acquire(b, ctx, "free\x00", "b", long); return err }},
		{"acquire invalid UTF-8 key", "key", func() error { _, _, err := acquire(b, ctx, "free\xff", "b", long); return err }},
		{"acquire invalid UTF-8 owner", "owner", func() error { _, _, err := acquire(b, ctx, "free", "b\xff", long); return err }},
		{"acquire zero ttl", "ttl", func() error { _, _, err := acquire(b, ctx, "free", "b", 0); return err }},
		{"acquire negative ttl", "ttl", func() error { _, _, err := acquire(b, ctx, "free", "b", -time.Second); return err }},
		{"acquire 1ns ttl", "ttl", func() error { _, _, err := acquire(b, ctx, "free", "b", time.Nanosecond); return err }},
		{"renew empty key", "key", func() error { _, err := renew(b, ctx, "", "a", held.Token, long); return err }},
		{"renew empty owner", "owner", func() error { _, err := renew(b, ctx, "k", "", held.Token, long); return err }},
		{"renew zero token", "token", func() error { _, err := renew(b, ctx, "k", "a", 0, long); return err }},
		{"renew negative token", "token", func() error { _, err := renew(b, ctx, "k", "a", -1, long); return err }},
		{"renew zero ttl", "ttl", func() error { _, err := renew(b, ctx, "k", "a", held.Token, 0); return err }},
		{"release empty key", "key", func() error { _, err := b.Release(ctx, "", "a", held.Token); return err }},
		{"release empty owner", "owner", func() error { _, err := b.Release(ctx, "k", "", held.Token); return err }},
		{"release zero token", "token", func() error { _, err := b.Release(ctx, "k", "a", 0); return err }},
		{"release negative token", "token", func() error { _, err := b.Release(ctx, "k", "a", -1); return err }},
		{"lease empty key", "key", func() error { _, err := b.Lease(ctx, ""); return err }},
		{"lease long key", "key", func() error { _, err := b.Lease(ctx, tooLong); return err }},
	}
	if a := b.Abilities().Steer; a != nil && b.Abilities().Advance {
		calls = append(calls,
			call{"advance empty key", "key", func() error { _, _, err := a.Advance(ctx, "", 5); return err }},
			call{"advance negative floor", "floor", func() error { _, _, err := a.Advance(ctx, "free", -1); return err }},
			call{"advance floor above MaxFloor", "floor", func() error { _, _, err := a.Advance(ctx, "free", pgleader.MaxFloor+1); return err }},
		)
	}
	if b.Abilities().Advance {
		f := floored{b}
		calls = append(calls,
			call{"acquire with floor, empty owner", "owner", func() error { _, _, err := f.AcquireWithFloor(ctx, "free", "", long, 5); return err }},
			call{"acquire with floor, zero ttl", "ttl", func() error { _, _, err := f.AcquireWithFloor(ctx, "free", "b", 0, 5); return err }},
			call{"acquire with negative floor", "floor", func() error { _, _, err := f.AcquireWithFloor(ctx, "free", "b", long, -1); return err }},
			call{"acquire with floor above MaxFloor", "floor", func() error {
				_, _, err := f.AcquireWithFloor(ctx, "free", "b", long, pgleader.MaxFloor+1)
				return err
			}},
		)
	}
	for _, c := range calls {
		err := c.do()
		if !errors.Is(err, pgleader.ErrInvalid) || !strings.Contains(err.Error(), c.names) {
			t.Errorf("%s: err = %v; want an error matching ErrInvalid that names the %s", c.name, err, c.names)
		}
	}
	assertUnchanged(t, b, before)
	if l := mustLease(t, b, "free"); l.Held() || l.Token != 0 {
		t.Fatalf("refused calls on key free left %+v; want it untouched (token 0)", l)
	}

	maxKey, maxOwner := strings.Repeat("k", pgleader.MaxKeyLen), strings.Repeat("o", pgleader.MaxOwnerLen)
	if l := mustAcquire(t, b, maxKey, maxOwner, long); l.Token != 1 || l.Holder != maxOwner {
		t.Fatalf("a key of %d bytes and an owner of %d: %+v; want acquired with token 1",
			pgleader.MaxKeyLen, pgleader.MaxOwnerLen, l)
	}
}

// testAcquireRace: candidates racing for one key, round after round, on one
// backend (racetest.Round checks each round). Every tenth round ends by
// expiry instead of release.
func testAcquireRace(t *testing.T, b pgleader.Backend) {
	const candidates, rounds = 8, 50
	backends := slices.Repeat([]pgleader.Backend{b}, candidates)
	next := int64(1) // the token the next winner must draw
	for round := range rounds {
		byExpiry := round%10 == 9
		ttl := long
		if byExpiry {
			ttl = short
		}
		winner, w := racetest.Round(t, round, backends, "k", ttl, byExpiry, &next)
		if byExpiry {
			waitFree(t, b, "k")
		} else {
			mustRelease(t, b, "k", winner, w.Token)
		}
	}
}

// testAdvance: Advance raises a free key's counter so the next term draws
// floor+1, changes nothing while a term holds the lease, never lowers the
// counter, applies to an expired lease, and accepts floors up to MaxFloor.
func testAdvance(t *testing.T, b pgleader.Backend) {
	a := b.Abilities().Steer
	if a == nil || !b.Abilities().Advance {
		t.Skip("the backend cannot advance (Abilities)")
	}
	ctx := t.Context()
	advance := func(key string, floor int64, wantAdvanced bool, wantCounter int64) {
		t.Helper()
		ok, counter, err := a.Advance(ctx, key, floor)
		if err != nil || ok != wantAdvanced || counter != wantCounter {
			t.Fatalf("advance(%s, %d) = %v, %d, %v; want %v, %d", key, floor, ok, counter, err, wantAdvanced, wantCounter)
		}
	}

	advance("k", 50, true, 50)
	if l := mustLease(t, b, "k"); l.Held() || l.Token != 50 {
		t.Fatalf("lease after advance(50) = %+v; want free with token 50", l)
	}
	l := mustAcquire(t, b, "k", "a", long)
	if l.Token != 51 {
		t.Fatalf("token after advance(50) = %d, want 51", l.Token)
	}

	before := mustLease(t, b, "k")
	advance("k", 1000, false, 51) // held: nothing changes, however high the floor
	assertUnchanged(t, b, before)
	if _, err := renew(b, ctx, "k", "a", 51, long); err != nil {
		t.Fatalf("the holder lost its lease to advance: %v", err)
	}
	mustRelease(t, b, "k", "a", 51)

	advance("k", 10, true, 51) // never down
	if l := mustAcquire(t, b, "k", "a", long); l.Token != 52 {
		t.Fatalf("token after advance(10) over 51 = %d, want 52", l.Token)
	}
	mustRelease(t, b, "k", "a", 52)

	short := mustAcquire(t, b, "k", "a", short)
	waitFree(t, b, "k")
	advance("k", 70, true, 70) // an expired lease is free
	if _, err := renew(b, ctx, "k", "a", short.Token, long); !errors.Is(err, pgleader.ErrLost) {
		t.Fatalf("the expired term renewed after advance: %v", err)
	}
	if l := mustAcquire(t, b, "k", "b", long); l.Token != 71 {
		t.Fatalf("token after advance(70) = %d, want 71", l.Token)
	}

	advance("top", pgleader.MaxFloor, true, pgleader.MaxFloor)
	if l := mustAcquire(t, b, "top", "a", long); l.Token != pgleader.MaxFloor+1 {
		t.Fatalf("token after advance(MaxFloor) = %d, want %d", l.Token, pgleader.MaxFloor+1)
	}
	mustRelease(t, b, "top", "a", pgleader.MaxFloor+1)
	advance("top", pgleader.MaxFloor, true, pgleader.MaxFloor+1)
	if _, _, err := a.Advance(ctx, "top", pgleader.MaxFloor+1); !errors.Is(err, pgleader.ErrInvalid) {
		t.Fatalf("advance above MaxFloor: %v, want ErrInvalid", err)
	}
	if l := mustLease(t, b, "top"); l.Token != pgleader.MaxFloor+1 {
		t.Fatalf("a refused advance moved the counter to %d", l.Token)
	}
}

// testAcquireWithFloor: a campaign with a floor draws max(counter, floor)+1 when
// the lease is free, and changes nothing while it is held.
func testAcquireWithFloor(t *testing.T, b pgleader.Backend) {
	if !b.Abilities().Advance {
		t.Skip("the backend cannot advance (Abilities)")
	}
	f := floored{b}
	ctx := t.Context()
	acquire := func(owner string, floor int64, wantAcquired bool, wantHolder string, wantToken int64) {
		t.Helper()
		l, ok, err := f.AcquireWithFloor(ctx, "k", owner, long, floor)
		if err != nil || ok != wantAcquired || l.Holder != wantHolder || l.Token != wantToken {
			t.Fatalf("acquire with floor %d by %s = %+v, %v, %v; want acquired %v, holder %s, token %d",
				floor, owner, l, ok, err, wantAcquired, wantHolder, wantToken)
		}
	}

	acquire("a", 10, true, "a", 11)
	before := mustLease(t, b, "k")
	acquire("b", 100, false, "a", 11) // held: no token consumed, the counter stays
	assertUnchanged(t, b, before)
	mustRelease(t, b, "k", "a", 11)

	acquire("b", 5, true, "b", 12) // a floor below the counter: counter + 1
	mustRelease(t, b, "k", "b", 12)
	acquire("a", 0, true, "a", 13)
	mustRelease(t, b, "k", "a", 13)

	if _, _, err := f.AcquireWithFloor(ctx, "k", "a", long, pgleader.MaxFloor+1); !errors.Is(err, pgleader.ErrInvalid) {
		t.Fatalf("acquire with a floor above MaxFloor: %v, want ErrInvalid", err)
	}
	if l := mustLease(t, b, "k"); l.Held() || l.Token != 13 {
		t.Fatalf("a refused acquire with floor left %+v; want free with token 13", l)
	}
	acquire("a", pgleader.MaxFloor, true, "a", pgleader.MaxFloor+1)
}

// testWatch: a release is delivered to the watchers of its key, and only to
// them; stop may be called twice. To tell "not delivered" from "not yet", it
// relies on a backend delivering its events in the order of the operations
// that caused them, as both of pgleader's do (one LISTEN connection; the
// in-memory backend delivers synchronously).
func testWatch(t *testing.T, b pgleader.Backend) {
	w := b.Abilities().Events
	if w == nil {
		t.Skip("the backend pushes no events (Abilities.Events)")
	}
	evA, stopA := w.Watch("a")
	defer stopA()
	evB, stopB := w.Watch("b")
	defer stopB()
	evC, stopC := w.Watch("c")
	defer stopC()
	for deadline := time.Now().Add(patience); !w.Listening(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the watcher was not listening after %v", patience)
		}
	}

	la := mustAcquire(t, b, "a", "x", long)
	lb := mustAcquire(t, b, "b", "x", long)
	lc := mustAcquire(t, b, "c", "x", long)
	mustRelease(t, b, "a", "x", la.Token)
	waitRelease(t, evA, "a")
	mustRelease(t, b, "c", "x", lc.Token)
	waitRelease(t, evC, "c")
	for drained := false; !drained; { // c's release came after a's: anything a's sent to b is here
		select {
		case ev := <-evB:
			if ev.Kind == pgleader.EventReleased || ev.Key != "b" {
				t.Fatalf("a watcher of %q received %v of %q before its key was released", "b", ev.Kind, ev.Key)
			}
		default:
			drained = true
		}
	}
	mustRelease(t, b, "b", "x", lb.Token)
	waitRelease(t, evB, "b")

	stopA()
	stopA()
}

// waitRelease reads events until key's release, failing on an event of
// another key. Other kinds are hints a backend may send too.
func waitRelease(t *testing.T, events <-chan pgleader.Event, key string) {
	t.Helper()
	timeout := time.NewTimer(patience)
	defer timeout.Stop()
	for {
		select {
		case ev := <-events:
			if ev.Key != key {
				t.Fatalf("a watcher of %q received %v of %q", key, ev.Kind, ev.Key)
			}
			if ev.Kind == pgleader.EventReleased {
				return
			}
		case <-timeout.C:
			t.Fatalf("no release event for %q within %v", key, patience)
		}
	}
}

func mustAcquire(t *testing.T, b pgleader.Backend, key, owner string, ttl time.Duration) pgleader.Lease {
	t.Helper()
	l, ok, err := acquire(b, t.Context(), key, owner, ttl)
	if err != nil {
		t.Fatalf("acquire %s by %s: %v", key, owner, err)
	}
	if !ok {
		t.Fatalf("acquire %s by %s: held by %q (token %d)", key, owner, l.Holder, l.Token)
	}
	if l.Key != key || l.Holder != owner || l.Token <= 0 || !l.ExpiresAt.After(l.Now) {
		t.Fatalf("acquire %s by %s = %+v; want the key, the owner, a positive token and an expiry after now", key, owner, l)
	}
	return l
}

func mustRelease(t *testing.T, b pgleader.Backend, key, owner string, token int64) {
	t.Helper()
	ok, err := b.Release(t.Context(), key, owner, token)
	if err != nil || !ok {
		t.Fatalf("release %s by %s with token %d = %v, %v; want true", key, owner, token, ok, err)
	}
}

func mustLease(t *testing.T, b pgleader.Backend, key string) pgleader.Lease {
	t.Helper()
	l, err := b.Lease(t.Context(), key)
	if err != nil {
		t.Fatalf("lease %s: %v", key, err)
	}
	return l
}

// assertUnchanged fails unless before's key still has the same term, token
// and times.
func assertUnchanged(t *testing.T, b pgleader.Backend, before pgleader.Lease) {
	t.Helper()
	after := mustLease(t, b, before.Key)
	if after.Holder != before.Holder || after.Token != before.Token || !after.AcquiredAt.Equal(before.AcquiredAt) ||
		!after.RenewedAt.Equal(before.RenewedAt) || !after.ExpiresAt.Equal(before.ExpiresAt) {
		t.Fatalf("the lease changed: before %+v, after %+v", before, after)
	}
}

// waitFree polls key's lease until it is free; the wait is bounded by
// patience, not asserted.
func waitFree(t *testing.T, b pgleader.Backend, key string) {
	t.Helper()
	for deadline := time.Now().Add(patience); time.Now().Before(deadline); {
		l := mustLease(t, b, key)
		if !l.Held() {
			return
		}
		sleep(t.Context(), min(l.Remaining(), 20*time.Millisecond)+time.Millisecond)
	}
	t.Fatalf("lease %s still held after %v", key, patience)
}

func sleep(ctx context.Context, d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
}

// acquire and renew are Campaign and RenewTerm in their simplest form.
func acquire(b pgleader.Backend, ctx context.Context, key, owner string, ttl time.Duration) (pgleader.Lease, bool, error) {
	return b.Campaign(ctx, key, pgleader.Candidate{Owner: owner}, ttl, 0)
}

func renew(b pgleader.Backend, ctx context.Context, key, owner string, token int64, ttl time.Duration) (time.Time, error) {
	expires, _, err := b.RenewTerm(ctx, key, owner, token, ttl, pgleader.NoPreference)
	return expires, err
}

// floored campaigns for an owner with a floor.
type floored struct{ b pgleader.Backend }

func (f floored) AcquireWithFloor(ctx context.Context, key, owner string, ttl time.Duration, floor int64) (pgleader.Lease, bool, error) {
	return f.b.Campaign(ctx, key, pgleader.Candidate{Owner: owner}, ttl, floor)
}
