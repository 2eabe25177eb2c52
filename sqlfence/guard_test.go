package sqlfence_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/sqlfence"
)

func newOutbox(t *testing.T) *pgtest.DB {
	t.Helper()
	db := pgtest.New(t)
	mustExec(t, db.Pool, `CREATE TABLE outbox (token bigint NOT NULL, body text NOT NULL)`)
	return db
}

func publish(ctx context.Context, token int64, body string) func(pgx.Tx) error {
	return func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO outbox (token, body) VALUES ($1, $2)`, token, body)
		return err
	}
}

// TestGuardStaleHolderRefused: after term N+1 claimed, term N's fenced
// transaction is refused and none of its statements commit, whether it
// uses the convenience or its own transaction, even if it ignores the error.
func TestGuardStaleHolderRefused(t *testing.T) {
	t.Parallel()
	db := newOutbox(t)
	ctx := context.Background()
	g := sqlfence.Guard{Resource: "outbox"}

	if err := g.Claim(ctx, db.Pool, 3, publish(ctx, 3, "a #1")); err != nil {
		t.Fatal(err)
	}
	if err := g.Write(ctx, db.Pool, 3, publish(ctx, 3, "a #2")); err != nil {
		t.Fatal(err)
	}
	if err := g.Claim(ctx, db.Pool, 4, publish(ctx, 4, "b #1")); err != nil {
		t.Fatal(err)
	}

	ran := false
	err := g.Write(ctx, db.Pool, 3, func(tx pgx.Tx) error { ran = true; return nil })
	wantStale(t, err, "outbox", 3, 4, false)
	if ran {
		t.Fatal("the body ran after the guard was refused")
	}
	wantStale(t, g.Claim(ctx, db.Pool, 4, nil), "outbox", 4, 4, true)
	wantStale(t, g.Claim(ctx, db.Pool, 3, nil), "outbox", 3, 4, true)

	// In the caller's transaction: writes before the guard, the guard
	// ignored, writes after it; nothing commits.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := publish(ctx, 3, "a #3")(tx); err != nil {
		t.Fatal(err)
	}
	wantStale(t, g.WriteTx(ctx, tx, 3), "outbox", 3, 4, false)
	_ = publish(ctx, 3, "a #4")(tx)
	if err := tx.Commit(ctx); !errors.Is(err, pgx.ErrTxCommitRollback) {
		t.Fatalf("commit after a refused guard: %v; want ErrTxCommitRollback", err)
	}

	rows, _ := db.Pool.Query(ctx, `SELECT body FROM outbox ORDER BY body`)
	bodies, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a #1", "a #2", "b #1"}; !slices.Equal(bodies, want) {
		t.Fatalf("outbox = %q; want %q", bodies, want)
	}
	if floor, err := g.Floor(ctx, db.Pool); err != nil || floor != 4 {
		t.Fatalf("floor = %d, %v; want 4", floor, err)
	}
	if floor, err := (sqlfence.Guard{Resource: "never"}).Floor(ctx, db.Pool); err != nil || floor != 0 {
		t.Fatalf("floor of an unused resource = %d, %v; want 0", floor, err)
	}
}

// TestGuardOrdersTerms: while term N's fenced transaction is open, term
// N+1's claim waits for it; N's writes commit, then N+1 claims, then N is
// refused. The guard holds its row lock even when the token is unchanged.
func TestGuardOrdersTerms(t *testing.T) {
	t.Parallel()
	db := newOutbox(t)
	ctx := context.Background()
	g := sqlfence.Guard{Resource: "outbox"}
	if err := g.Claim(ctx, db.Pool, 5, nil); err != nil {
		t.Fatal(err)
	}

	connN, connNext := db.Conn(t), db.Conn(t)
	pidNext := backendPID(t, connNext)
	txN, err := connN.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txN.Rollback(ctx)
	if err := g.WriteTx(ctx, txN, 5); err != nil {
		t.Fatal(err)
	}

	// The claim ends at the latest when txN rolls back, before the
	// connections close.
	done := make(chan error, 1)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	wg.Go(func() { done <- g.Claim(ctx, connNext, 6, publish(ctx, 6, "b #1")) })
	waitLockWait(t, db.Pool, pidNext, done)

	if err := publish(ctx, 5, "a #1")(txN); err != nil {
		t.Fatal(err)
	}
	if err := txN.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := receive(t, done); err != nil {
		t.Fatalf("claim by the next term: %v", err)
	}
	wantStale(t, g.Write(ctx, db.Pool, 5, publish(ctx, 5, "a #2")), "outbox", 5, 6, false)
	if n := count(t, db.Pool, `SELECT count(*) FROM outbox`); n != 2 {
		t.Fatalf("outbox has %d rows; want a #1 and b #1", n)
	}
}
