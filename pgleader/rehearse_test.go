package pgleader_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/pgleader"
)

// TestRehearsalLeavesNothing: the hand-off rehearsal that warms a session
// commits nothing, notifies nothing, draws no token of any real key and
// leaves its connection out of any transaction, also when it fails.
func TestRehearsalLeavesNothing(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	b := pgleader.NewPostgres(db.Pool, pgleader.PollOnly())
	l, _, err := b.Acquire(ctx, "k", "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	listen := db.Conn(t)
	if _, err := listen.Exec(ctx, "LISTEN pgleader"); err != nil {
		t.Fatal(err)
	}
	c := db.Conn(t)
	for range 3 {
		if err := pgleader.Rehearse(ctx, c.PgConn(), time.Minute); err != nil {
			t.Fatal(err)
		}
		if s := c.PgConn().TxStatus(); s != 'I' {
			t.Fatalf("transaction status after the rehearsal %q, want idle", s)
		}
	}
	var leases, candidates int
	if err := db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM pgleader.lease), (SELECT count(*) FROM pgleader.candidate)`).Scan(&leases, &candidates); err != nil {
		t.Fatal(err)
	}
	if leases != 1 || candidates != 0 {
		t.Fatalf("after 3 rehearsals: %d lease rows and %d candidate rows, want only k's row and none", leases, candidates)
	}
	after, err := b.Lease(ctx, "k")
	if err != nil || after.Holder != "a" || after.Token != l.Token || !after.ExpiresAt.Equal(l.ExpiresAt) {
		t.Fatalf("k after the rehearsals: %+v, %v; want %+v unchanged", after, err, l)
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if n, err := listen.WaitForNotification(wctx); err == nil {
		t.Fatalf("the rehearsal notified: %+v", n)
	}

	// A failure inside the transaction (the function is gone) is reported,
	// and the connection is left usable, out of the aborted transaction.
	if _, err := db.Pool.Exec(ctx, `ALTER FUNCTION pgleader.take(text, text, interval) RENAME TO take_gone`); err != nil {
		t.Fatal(err)
	}
	if err := pgleader.Rehearse(ctx, c.PgConn(), time.Minute); err == nil {
		t.Fatal("a rehearsal without pgleader.take succeeded")
	}
	if s := c.PgConn().TxStatus(); s != 'I' {
		t.Fatalf("transaction status after a failed rehearsal %q, want idle", s)
	}
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pgleader.lease`).Scan(&leases); err != nil || leases != 1 {
		t.Fatalf("lease rows after a failed rehearsal: %d, %v; want 1", leases, err)
	}
	var one int
	if err := c.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("the connection after a failed rehearsal: %v", err)
	}
}

// TestHandedOffTermIsNotAnnounced: a term that a hand-off gave this replica
// sends no announcement of its own; the hand-off's hint was the one
// notification, and an observer still sees the new holder.
func TestHandedOffTermIsNotAnnounced(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	spec := slowPollSpec("k")
	a := startCandidate(t, db, spec, "a", pgleader.Options{})
	waitFor(t, "a to lead", func() bool { return a.el.Status().Leading })
	b := startCandidate(t, db, spec, "b", pgleader.Options{})
	registered(t, a.backend, "k", "b")
	waitFor(t, "b to wait", func() bool { return b.el.Status().State == pgleader.StateWaiting })
	octx, stop := context.WithCancel(ctx)
	obs, err := pgleader.Observe(octx, pgleader.NewPostgres(db.Pool), "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		stop()
		for range obs { // until Observe has returned
		}
	}()
	if l := <-obs; l.Holder != "a" {
		t.Fatalf("observed %+v first, want a", l)
	}
	listen := db.Conn(t)
	if _, err := listen.Exec(ctx, "LISTEN pgleader"); err != nil {
		t.Fatal(err)
	}

	// b registered above; on a busy machine the set-up since can outlast
	// its registration, and a stop with no live candidate releases ("release
	// k", seen once on PostgreSQL 14 in CI). The hand-off is what is tested.
	registered(t, a.backend, "k", "b")
	a.stopNow(t)
	waitFor(t, "b to lead", func() bool { return b.el.Status().Leading })
	var payloads []string
	for {
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		n, err := listen.WaitForNotification(wctx)
		cancel()
		if err != nil {
			break
		}
		payloads = append(payloads, n.Payload)
	}
	if len(payloads) != 1 || payloads[0] != "handoff 1 b k" {
		t.Fatalf("notifications of the hand-off: %q; want only the hand-off's hint", payloads)
	}
	select {
	case l := <-obs:
		if l.Holder != "b" || l.Token != 2 {
			t.Fatalf("observed %+v, want b with token 2", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the observer did not see b within 10s")
	}
}
