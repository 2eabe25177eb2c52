package sqlfence_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgleader/pgleader/sqlfence"
)

func wantNotHeld(t *testing.T, err error, detail string) {
	t.Helper()
	if !errors.Is(err, sqlfence.ErrLeaseNotHeld) || !strings.Contains(err.Error(), detail) {
		t.Fatalf("err = %v; want ErrLeaseNotHeld mentioning %q", err, detail)
	}
}

// TestLeaseGuardStaleHolderRefused: term N's lease-guarded transaction is
// refused once its lease is gone (a newer term acquired it, it expired, it
// was released, the lease data was lost), and none of its writes commit.
func TestLeaseGuardStaleHolderRefused(t *testing.T) {
	t.Parallel()
	db := newOutbox(t)
	ctx := context.Background()

	n := acquire(t, db.Pool, "pub", "a", time.Minute)
	if err := sqlfence.WithLease(ctx, db.Pool, "pub", n, publish(ctx, n, "a #1")); err != nil {
		t.Fatal(err)
	}
	release(t, db.Pool, "pub", "a", n)
	wantNotHeld(t, sqlfence.WithLease(ctx, db.Pool, "pub", n, publish(ctx, n, "a #2")), "the lease was released")
	next := acquire(t, db.Pool, "pub", "b", time.Minute)
	wantNotHeld(t, sqlfence.WithLease(ctx, db.Pool, "pub", n, publish(ctx, n, "a #3")),
		`lease "pub" is not held by token 1: the lease is at token 2`)

	// In the caller's transaction, with the error ignored: nothing commits.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	wantNotHeld(t, sqlfence.LeaseGuardTx(ctx, tx, "pub", n), "at token 2")
	_ = publish(ctx, n, "a #4")(tx)
	if err := tx.Commit(ctx); !errors.Is(err, pgx.ErrTxCommitRollback) {
		t.Fatalf("commit after a refused lease guard: %v; want ErrTxCommitRollback", err)
	}

	if err := sqlfence.WithLease(ctx, db.Pool, "pub", next, publish(ctx, next, "b #1")); err != nil {
		t.Fatal(err)
	}
	release(t, db.Pool, "pub", "b", next)

	short := acquire(t, db.Pool, "pub", "c", 50*time.Millisecond)
	waitExpired(t, db.Pool, "pub", short)
	wantNotHeld(t, sqlfence.WithLease(ctx, db.Pool, "pub", short, publish(ctx, short, "c #1")), "the lease expired at")

	mustExec(t, db.Pool, `DELETE FROM pgleader.lease`)
	wantNotHeld(t, sqlfence.WithLease(ctx, db.Pool, "pub", short, publish(ctx, short, "c #2")), "the key has no lease")

	if got := count(t, db.Pool, `SELECT count(*) FROM outbox WHERE body NOT IN ('a #1', 'b #1')`); got != 0 {
		t.Fatalf("%d refused writes committed", got)
	}
}

// TestLeaseGuardHoldsOffNextTerm is the case only the lease guard catches.
// Term N's transaction passes the guard, then N's lease expires while the
// transaction is still open. Term N+1's acquisition waits for it (seen in
// pg_stat_activity and pg_locks), N's write commits, and only then does
// N+1 begin: its acquired_at is after N's write. N's next guard is refused.
func TestLeaseGuardHoldsOffNextTerm(t *testing.T) {
	t.Parallel()
	db := newOutbox(t)
	ctx := context.Background()
	mustExec(t, db.Pool, `ALTER TABLE outbox ADD COLUMN written_at timestamptz NOT NULL DEFAULT clock_timestamp()`)

	n := acquire(t, db.Pool, "pub", "a", time.Second)
	connN, connNext := db.Conn(t), db.Conn(t)
	pidNext := backendPID(t, connNext)
	txN, err := connN.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txN.Rollback(ctx)
	if err := sqlfence.LeaseGuardTx(ctx, txN, "pub", n); err != nil {
		t.Fatal(err)
	}
	waitExpired(t, db.Pool, "pub", n)

	type acquisition struct {
		acquired   bool
		token      int64
		acquiredAt time.Time
		err        error
	}
	// The acquisition ends at the latest when txN rolls back, before the
	// connections close.
	done := make(chan acquisition, 1)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	wg.Go(func() {
		var a acquisition
		a.err = connNext.QueryRow(ctx, `SELECT acquired, token, db_now FROM pgleader.acquire('pub', 'b', '1 minute')`).
			Scan(&a.acquired, &a.token, &a.acquiredAt)
		done <- a
	})
	waitLockWait(t, db.Pool, pidNext, done)

	if err := publish(ctx, n, "a, after its lease expired")(txN); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-done:
		t.Fatalf("the next term acquired while term %d's guarded transaction was open: %+v", n, a)
	default:
	}
	if err := txN.Commit(ctx); err != nil {
		t.Fatalf("commit of the guarded transaction: %v", err)
	}

	a := receive(t, done)
	if a.err != nil || !a.acquired || a.token != n+1 {
		t.Fatalf("acquisition = %+v; want acquired with token %d", a, n+1)
	}
	var writtenAt time.Time
	err = db.Pool.QueryRow(ctx, `SELECT written_at FROM outbox WHERE token = $1`, n).Scan(&writtenAt)
	if err != nil {
		t.Fatalf("term %d's write did not commit: %v", n, err)
	}
	if !a.acquiredAt.After(writtenAt) {
		t.Fatalf("term %d began at %v, not after term %d's write at %v", a.token, a.acquiredAt, n, writtenAt)
	}
	wantNotHeld(t, sqlfence.WithLease(ctx, db.Pool, "pub", n, publish(ctx, n, "a, too late")), "at token 2")
	if got := count(t, db.Pool, `SELECT count(*) FROM outbox`); got != 1 {
		t.Fatalf("outbox has %d rows; want 1", got)
	}
}

// TestLeaseGuardLetsHolderRenew: an open guarded transaction does not block
// its own term's renewal (nor its release), and still passes afterwards.
func TestLeaseGuardLetsHolderRenew(t *testing.T) {
	t.Parallel()
	db := newOutbox(t)
	ctx := context.Background()

	n := acquire(t, db.Pool, "pub", "a", time.Minute)
	err := sqlfence.WithLease(ctx, db.Pool, "pub", n, func(tx pgx.Tx) error {
		// The timeout only detects a renewal blocked by the open transaction.
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var expires *time.Time
		err := db.Pool.QueryRow(rctx, `SELECT pgleader.renew('pub', 'a', $1, '1 minute')`, n).Scan(&expires)
		if err != nil || expires == nil {
			t.Fatalf("renew while the guarded transaction is open = %v, %v; want a new expiry", expires, err)
		}
		if err := sqlfence.LeaseGuardTx(ctx, tx, "pub", n); err != nil {
			t.Fatalf("guard after the renewal: %v", err)
		}
		return publish(ctx, n, "a #1")(tx)
	})
	if err != nil {
		t.Fatal(err)
	}

	err = sqlfence.WithLease(ctx, db.Pool, "pub", n, func(tx pgx.Tx) error {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var released bool
		err := db.Pool.QueryRow(rctx, `SELECT pgleader.release('pub', 'a', $1)`, n).Scan(&released)
		if err != nil || !released {
			t.Fatalf("release while the guarded transaction is open = %v, %v; want true", released, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestLeaseGuardUsesDatabaseClock: in a transaction that began while the
// lease was held, the guard is refused once the lease has expired: it reads
// clock_timestamp(), not the transaction's start (now()).
func TestLeaseGuardUsesDatabaseClock(t *testing.T) {
	t.Parallel()
	db := newOutbox(t)
	ctx := context.Background()

	n := acquire(t, db.Pool, "pub", "a", time.Second)
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var startedHeld bool
	err = tx.QueryRow(ctx, `SELECT now() < expires_at FROM pgleader.lease WHERE key = 'pub'`).Scan(&startedHeld)
	if err != nil || !startedHeld {
		t.Fatalf("the transaction began after the lease expired (%v, %v); the test needs it to begin before", startedHeld, err)
	}
	waitExpired(t, db.Pool, "pub", n)
	wantNotHeld(t, sqlfence.LeaseGuardTx(ctx, tx, "pub", n), "the lease expired at")
}
