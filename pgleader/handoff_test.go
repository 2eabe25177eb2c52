package pgleader_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/pgleader"
)

func candidate(owner string, priority int32) pgleader.Candidate {
	return pgleader.Candidate{Owner: owner, Priority: priority, Value: "v-" + owner, TTL: ttl}
}

// TestHandOffRace: 16 candidates on their own connections, 200 rounds. In
// each the holder hands off while every other candidate campaigns, then the
// named successor confirms. Each round has exactly one term confirmed, with
// the next token: the hand-off is one write that draws token + 1, and only
// its successor can confirm it.
func TestHandOffRace(t *testing.T) {
	t.Parallel()
	const (
		candidates = 16
		rounds     = 200
	)
	_, db := newBackend(t)
	ctx := context.Background()
	backends := make([]*pgleader.Postgres, candidates)
	for i := range backends {
		backends[i] = pgleader.NewPostgres(db.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 1 }))
		if _, err := backends[i].Lease(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	owner := func(i int) string { return fmt.Sprintf("c%d", i) }

	holder, token := -1, int64(0)
	for i, b := range backends {
		l, won, err := b.Campaign(ctx, "k", candidate(owner(i), 0), ttl, 0)
		if err != nil {
			t.Fatal(err)
		}
		if won {
			if holder >= 0 {
				t.Fatalf("two first winners: %s and %s", owner(holder), owner(i))
			}
			holder, token = i, l.Token
		}
	}
	if token != 1 {
		t.Fatalf("first token %d, want 1", token)
	}

	for round := 0; round < rounds; round++ {
		type result struct {
			lease pgleader.Lease
			won   bool
			err   error
		}
		results := make([]result, candidates)
		var released bool
		var successor string
		var handErr error
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, b := range backends {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if i == holder {
					released, successor, handErr = b.HandOff(ctx, "k", owner(i), token, "")
					return
				}
				l, won, err := b.Campaign(ctx, "k", candidate(owner(i), 0), ttl, 0)
				results[i] = result{l, won, err}
			}()
		}
		close(start)
		wg.Wait()
		if handErr != nil || !released || successor == "" {
			t.Fatalf("round %d: hand_off = %v, %q, %v; want released to a successor", round, released, successor, handErr)
		}
		var winners []int
		next := -1
		for i, r := range results {
			if r.err != nil {
				t.Fatalf("round %d: %v", round, r.err)
			}
			if r.won {
				winners = append(winners, i)
			}
			if owner(i) == successor {
				next = i
			}
		}
		if next < 0 || next == holder {
			t.Fatalf("round %d: successor %q is not another candidate", round, successor)
		}
		if len(winners) == 0 { // the successor campaigned before the hand-off: it confirms now
			l, won, err := backends[next].Campaign(ctx, "k", candidate(successor, 0), ttl, 0)
			if err != nil {
				t.Fatal(err)
			}
			if won {
				winners = append(winners, next)
				results[next] = result{l, true, nil}
			}
		}
		if len(winners) != 1 || winners[0] != next {
			t.Fatalf("round %d: confirmed by %v, want exactly the successor %s", round, winners, successor)
		}
		if got := results[next].lease.Token; got != token+1 {
			t.Fatalf("round %d: successor's token %d, want %d", round, got, token+1)
		}
		if l, _, _ := backends[next].Campaign(ctx, "k", candidate(successor, 0), ttl, 0); l.Holder != successor || l.Token != token+1 {
			t.Fatalf("round %d: a second confirmation changed the lease: %+v", round, l)
		}
		holder, token = next, token+1
	}
	if token != rounds+1 {
		t.Fatalf("after %d rounds the token is %d: tokens were skipped", rounds, token)
	}
}

type handOffRun struct {
	*pgRun
	backend *pgleader.Postgres
}

func startCandidate(t *testing.T, db *pgtest.DB, spec pgleader.Spec, owner string, opts pgleader.Options) handOffRun {
	t.Helper()
	b := pgleader.NewPostgres(db.NewPool(t), pgleader.WithLogger(quiet))
	opts.Owner, opts.Logger = owner, quiet
	if opts.Lead == nil {
		opts.Lead = untilEnding
	}
	el, err := pgleader.New(b, spec, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &pgRun{el: el, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- el.Run(ctx) }()
	t.Cleanup(func() { r.cancel(); <-r.done; r.done <- nil })
	return handOffRun{r, b}
}

// registered waits until owner is a live candidate of key.
func registered(t *testing.T, b *pgleader.Postgres, key, owner string) {
	t.Helper()
	waitFor(t, owner+" to register as a candidate", func() bool {
		cs, err := b.Candidates(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if c.Owner == owner {
				return true
			}
		}
		return false
	})
}

// TestHandOffOnStop: a leader that stops hands the lease to the waiting
// candidate, which leads with the next token and its own value, although it
// would not look again for minutes.
func TestHandOffOnStop(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	spec := slowPollSpec("k")
	a := startCandidate(t, db, spec, "a", pgleader.Options{Value: "addr-a"})
	waitFor(t, "a to lead", func() bool { return a.el.Status().Leading })
	b := startCandidate(t, db, spec, "b", pgleader.Options{Value: "addr-b"})
	registered(t, a.backend, "k", "b")

	a.stopNow(t)
	waitFor(t, "b to lead", func() bool { return b.el.Status().Leading })
	l, err := a.backend.Lease(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if l.Holder != "b" || l.Token != 2 || l.Value != "addr-b" || b.el.Status().Token != 2 {
		t.Fatalf("lease %+v, b's token %d; want b with token 2 and value addr-b", l, b.el.Status().Token)
	}
	if cs, _ := a.backend.Candidates(context.Background(), "k"); len(cs) != 0 {
		t.Fatalf("candidates after the hand-off: %+v; want none (a stopped, b leads)", cs)
	}
}

// TestHostileHandOffHint: a notification that names a waiting candidate as
// the successor, while another term holds the lease, makes the candidate
// check with the database and nothing more: not even wait longer.
func TestHostileHandOffHint(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	spec := slowPollSpec("k")
	a := startCandidate(t, db, spec, "a", pgleader.Options{})
	waitFor(t, "a to lead", func() bool { return a.el.Status().Leading })
	b := startCandidate(t, db, spec, "b", pgleader.Options{})
	registered(t, a.backend, "k", "b")
	waitFor(t, "b to wait", func() bool { return b.el.Status().State == pgleader.StateWaiting })
	before := b.el.Status().WaitUntil

	var hinted time.Time
	if err := db.Pool.QueryRow(context.Background(), `SELECT clock_timestamp() FROM pg_notify('pgleader', 'handoff 1 b k')`).Scan(&hinted); err != nil {
		t.Fatal(err)
	}
	// b's LISTEN connection checks with the database (pgleader.take).
	waitFor(t, "b's listener to check the hint", func() bool {
		var checked bool
		err := db.Pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'pgleader listen'
			  AND query LIKE '%pgleader.take(%' AND query_start > $1 AND state = 'idle')`, hinted).Scan(&checked)
		if err != nil {
			t.Fatal(err)
		}
		return checked
	})
	// The check read a's renewed expiry, later than the one b's campaign
	// read: b keeps the sooner one.
	if s := b.el.Status(); s.Leading || s.Terms != 0 || s.WaitUntil.After(before) {
		t.Fatalf("b after a forged hand-off hint: %+v; want not leading, and waiting until %v at the latest", s, before)
	}
	l, err := a.backend.Lease(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if l.Holder != "a" || l.Token != 1 || !a.el.Status().Leading {
		t.Fatalf("lease %+v after a forged hint; want a's term 1, still leading", l)
	}
}

// TestDeadSuccessor: the lease is handed to a candidate that never confirms
// it (its process is gone); the term ends at its candidate expiry, and a
// live candidate takes over with the token after it.
func TestDeadSuccessor(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	spec := pgleader.Spec{Key: "k", TTL: 2 * time.Second, RenewEvery: 500 * time.Millisecond, CampaignEvery: 100 * time.Millisecond,
		Margin: 200 * time.Millisecond, YieldGrace: 200 * time.Millisecond, ReleaseTimeout: 200 * time.Millisecond}
	a := startCandidate(t, db, spec, "a", pgleader.Options{})
	waitFor(t, "a to lead", func() bool { return a.el.Status().Leading })
	c := startCandidate(t, db, spec, "c", pgleader.Options{})
	registered(t, a.backend, "k", "c")
	dead := pgleader.NewPostgres(db.NewPool(t), pgleader.PollOnly())
	if _, won, err := dead.Campaign(context.Background(), "k", pgleader.Candidate{Owner: "dead", Priority: 9, TTL: time.Second}, spec.TTL, 0); err != nil || won {
		t.Fatalf("dead's campaign: won %v, %v", won, err)
	}
	a.stopNow(t)
	l, err := dead.Lease(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if l.Holder == "dead" && l.Token != 2 {
		t.Fatalf("handed to dead with token %d, want 2", l.Token)
	}
	waitFor(t, "c to lead", func() bool { return c.el.Status().Leading })
	if tok := c.el.Status().Token; tok != 3 {
		t.Fatalf("c leads with token %d; want 3, after the dead successor's 2", tok)
	}
}

// TestTransfer: the leader hands off to the named candidate rather than the
// better one; a transfer to an owner that is not a candidate is an error
// that changes nothing.
func TestTransfer(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	spec := slowPollSpec("k")
	a := startCandidate(t, db, spec, "a", pgleader.Options{})
	waitFor(t, "a to lead", func() bool { return a.el.Status().Leading })
	b := startCandidate(t, db, spec, "b", pgleader.Options{})
	c := startCandidate(t, db, spec, "c", pgleader.Options{Priority: 5, MinTerm: time.Hour})
	registered(t, a.backend, "k", "b")
	registered(t, a.backend, "k", "c")

	err := a.el.Transfer(context.Background(), "nobody")
	if !errors.Is(err, pgleader.ErrNoCandidate) {
		t.Fatalf("Transfer to a missing owner = %v; want ErrNoCandidate", err)
	}
	if !a.el.Status().Leading {
		t.Fatal("a failed transfer ended the term")
	}
	if err := a.el.Transfer(context.Background(), "b"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b to lead", func() bool { return b.el.Status().Leading })
	if c.el.Status().Terms != 0 || b.el.Status().Token != 2 {
		t.Fatalf("b's token %d, c's terms %d; want 2 and 0", b.el.Status().Token, c.el.Status().Terms)
	}

	// From outside: b learns at its next renewal and hands off to a.
	registered(t, a.backend, "k", "a")
	if _, asked, err := a.backend.Transfer(context.Background(), "k", "a"); err != nil || !asked {
		t.Fatalf("Postgres.Transfer = %v, %v", asked, err)
	}
	waitFor(t, "a to lead again", func() bool { return a.el.Status().Leading })
	if tok := a.el.Status().Token; tok != 3 {
		t.Fatalf("a leads with token %d, want 3", tok)
	}
}

// TestPreferredLeader: a candidate of higher priority makes the leader step
// down at its first renewal past MinTerm, and takes over.
func TestPreferredLeader(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	spec := slowPollSpec("k")
	a := startCandidate(t, db, spec, "a", pgleader.Options{MinTerm: time.Millisecond})
	waitFor(t, "a to lead", func() bool { return a.el.Status().Leading })
	p := startCandidate(t, db, spec, "p", pgleader.Options{Priority: 1})
	waitFor(t, "p to lead", func() bool { return p.el.Status().Leading })
	// a records its end once its hand-off returned, which may be after p
	// confirmed its term.
	waitFor(t, "a's term to end", func() bool { return a.el.Status().LastEnd != pgleader.ReasonNone })
	if s := a.el.Status(); s.LastEnd != pgleader.ReasonResigned || p.el.Status().Token != 2 {
		t.Fatalf("a ended as %v, p's token %d; want resigned and 2", s.LastEnd, p.el.Status().Token)
	}
	// p keeps the lease: a, of lower priority, only waits.
	registered(t, p.backend, "k", "a")
	if p.el.Status().Token != 2 || !p.el.Status().Leading {
		t.Fatal("the preferred leader lost its term to a candidate of lower priority")
	}
}

// TestEqualPriorityKeepsTheLeader: a term won by a campaign that did not
// register (the leader was not listening) still carries its replica's
// priority, so a candidate of the same priority does not pre-empt it.
func TestEqualPriorityKeepsTheLeader(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	spec := slowPollSpec("k")
	spec.CampaignEvery = time.Second
	el, err := pgleader.New(pgleader.NewPostgres(db.NewPool(t), pgleader.PollOnly(), pgleader.WithLogger(quiet)), spec,
		pgleader.Options{Owner: "a", Lead: untilEnding, Logger: quiet, Priority: 3, MinTerm: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "a to lead", func() bool { return el.Status().Leading })
	b := startCandidate(t, db, spec, "b", pgleader.Options{Priority: 3})
	registered(t, b.backend, "k", "b")
	renewed := el.Status().LastRenewSent
	waitFor(t, "a to renew after b registered", func() bool { return el.Status().LastRenewSent.After(renewed) })
	if s := el.Status(); !s.Leading || s.Token != 1 {
		t.Fatalf("a after renewing beside a candidate of equal priority: %+v; want still leading with token 1", s)
	}
}
