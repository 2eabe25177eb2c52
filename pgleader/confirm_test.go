package pgleader_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/pgleader"
)

// TestSuccessorBelievesOnARead: a term handed to a candidate whose
// registration has at least TTL - RenewEvery left is believed on the
// check's read: at Claim the row is still marked handed off, the term's
// safe end is the hand-off's expiry less Margin (not TTL from the check),
// and its first renewal confirms it.
func TestSuccessorBelievesOnARead(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	spec := pgleader.Spec{Key: "k", TTL: 4 * time.Second, RenewEvery: 2 * time.Second, CampaignEvery: 100 * time.Millisecond,
		Margin: 200 * time.Millisecond, YieldGrace: 200 * time.Millisecond, ReleaseTimeout: 200 * time.Millisecond}
	a := startCandidate(t, db, spec, "a", pgleader.Options{})
	waitFor(t, "a to lead", func() bool { return a.el.Status().Leading })

	type atClaim struct {
		handedOff bool
		expires   time.Time
		deadline  time.Time
		token     int64
	}
	claims := make(chan atClaim, 4)
	b := startCandidate(t, db, spec, "b", pgleader.Options{Claim: func(ctx context.Context, term *pgleader.Term) (bool, error) {
		var c atClaim
		err := db.Pool.QueryRow(ctx, `SELECT handed_off, expires_at FROM pgleader.lease WHERE key = 'k'`).Scan(&c.handedOff, &c.expires)
		c.deadline, c.token = term.Deadline(), term.Token()
		claims <- c
		return err == nil, err
	}})
	// Stop a while b's registration has between 2.3 s and 3.6 s left: at
	// least keep (TTL - RenewEvery = 2 s), and less than TTL less Margin.
	waitFor(t, "b's registration to be some time old", func() bool {
		cs, err := a.backend.Candidates(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if left := time.Until(c.ExpiresAt); c.Owner == "b" && left > 2300*time.Millisecond && left < 3600*time.Millisecond {
				return true
			}
		}
		return false
	})
	a.stopNow(t)
	var c atClaim
	select {
	case c = <-claims:
	case <-time.After(20 * time.Second):
		t.Fatal("b never claimed")
	}
	if c.token != 2 || !c.handedOff {
		t.Fatalf("at b's Claim: token %d, handed_off %v; want 2, and the term not yet confirmed (believed on a read)", c.token, c.handedOff)
	}
	// Same machine, same clock: the term's safe end is at least Margin
	// before the expiry the hand-off gave it.
	if limit := c.expires.Add(-spec.Margin); c.deadline.After(limit) {
		t.Fatalf("b's term is safe until %v, past the hand-off's expiry %v less Margin", c.deadline, c.expires)
	}
	waitFor(t, "b's first renewal to confirm the term", func() bool {
		var handedOff bool
		if err := db.Pool.QueryRow(context.Background(), `SELECT handed_off FROM pgleader.lease WHERE key = 'k'`).Scan(&handedOff); err != nil {
			t.Fatal(err)
		}
		return !handedOff
	})
	if s := b.el.Status(); !s.Leading || s.Token != 2 || s.Terms != 1 {
		t.Fatalf("b after its first renewal: %+v; want still leading term 2", s)
	}
}

// repeating is a Postgres backend whose candidate watch delivers every
// confirmed hand-off twice, as a check that raced a campaign would.
type repeating struct{ *pgleader.Postgres }

func (r repeating) WatchCandidate(key string, c pgleader.CandidateWatch) (<-chan pgleader.Event, func()) {
	in, stop := r.Postgres.WatchCandidate(key, c)
	out := make(chan pgleader.Event, 16)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case ev := <-in:
				out <- ev
				if ev.Checked && ev.Acquired {
					out <- ev
				}
			case <-done:
				return
			}
		}
	}()
	return out, sync.OnceFunc(func() { stop(); close(done) })
}

// TestStaleHandOffEventNotLedTwice: a confirmed hand-off event for a term
// that was led already (here, delivered twice) never starts a second term
// with its token: after the first ends, the elector campaigns.
func TestStaleHandOffEventNotLedTwice(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	spec := slowPollSpec("k")
	spec.CampaignEvery = 100 * time.Millisecond // the pause after a term that finished
	a := startCandidate(t, db, spec, "a", pgleader.Options{})
	waitFor(t, "a to lead", func() bool { return a.el.Status().Leading })

	var mu sync.Mutex
	var tokens []int64
	bb := pgleader.NewPostgres(db.NewPool(t), pgleader.WithLogger(quiet))
	el, err := pgleader.New(repeating{bb}, spec, pgleader.Options{Owner: "b", Logger: quiet,
		Lead: func(ctx context.Context, term *pgleader.Term) error {
			mu.Lock()
			tokens = append(tokens, term.Token())
			n := len(tokens)
			mu.Unlock()
			if n == 1 {
				return nil // the first term finishes at once
			}
			return untilEnding(ctx, term)
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx) }()
	defer func() { cancel(); <-done }()
	registered(t, a.backend, "k", "b")

	a.stopNow(t)
	waitFor(t, "b to lead a second term", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(tokens) >= 2
	})
	mu.Lock()
	defer mu.Unlock()
	if tokens[0] != 2 || tokens[1] <= tokens[0] {
		t.Fatalf("b led tokens %v; want 2, then a later one won by a campaign", tokens)
	}
}

// failingHandOff is a Postgres backend whose first hand-off fails before it
// reaches the database.
type failingHandOff struct {
	*pgleader.Postgres
	failed atomic.Bool
}

func (f *failingHandOff) HandOff(ctx context.Context, key, owner string, token int64, to string) (bool, string, error) {
	if !f.failed.Swap(true) {
		return false, "", errors.New("injected: the hand-off never reached the database")
	}
	return f.Postgres.HandOff(ctx, key, owner, token, to)
}

// TestOwnEndedTermNotLedAgain: a term believed on a read ends before its
// first renewal and its hand-off fails, so the row still names it as handed
// off; the next campaign finds it confirmed for this owner. The elector
// ends it in the database rather than lead its token a second time, and
// leads next with a new token.
func TestOwnEndedTermNotLedAgain(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	spec := slowPollSpec("k")
	spec.CampaignEvery = 100 * time.Millisecond
	a := startCandidate(t, db, spec, "a", pgleader.Options{})
	waitFor(t, "a to lead", func() bool { return a.el.Status().Leading })

	var mu sync.Mutex
	var tokens []int64
	bb := &failingHandOff{Postgres: pgleader.NewPostgres(db.NewPool(t), pgleader.WithLogger(quiet))}
	el, err := pgleader.New(bb, spec, pgleader.Options{Owner: "b", Logger: quiet,
		Lead: func(ctx context.Context, term *pgleader.Term) error {
			mu.Lock()
			tokens = append(tokens, term.Token())
			n := len(tokens)
			mu.Unlock()
			if n == 1 {
				return nil // the first term finishes at once
			}
			return untilEnding(ctx, term)
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx) }()
	defer func() { cancel(); <-done }()
	registered(t, a.backend, "k", "b")

	a.stopNow(t)
	waitFor(t, "b to lead a second term", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(tokens) >= 2
	})
	mu.Lock()
	defer mu.Unlock()
	if tokens[0] != 2 || tokens[1] <= tokens[0] {
		t.Fatalf("b led tokens %v; want 2, then a later one", tokens)
	}
	if !bb.failed.Load() {
		t.Fatal("the first hand-off was never tried")
	}
}
