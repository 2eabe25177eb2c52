package sqlfence_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/sqlfence"
)

// tracer counts the queries and batches sent on a pool.
type tracer struct{ queries, batches atomic.Int64 }

func (tr *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	tr.queries.Add(1)
	return ctx
}
func (tr *tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (tr *tracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	tr.batches.Add(1)
	return ctx
}
func (tr *tracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (tr *tracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func pipelineDB(t *testing.T) (*pgtest.DB, *pgxpool.Pool, *tracer) {
	t.Helper()
	db := pgtest.New(t)
	mustExec(t, db.Pool, `CREATE TABLE outbox (id int PRIMARY KEY, body text)`)
	tr := &tracer{}
	pool := db.NewPoolConfig(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = tr })
	if err := pool.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	return db, pool, tr
}

func insert(id int, body string) sqlfence.Statement {
	return sqlfence.Statement{SQL: `INSERT INTO outbox VALUES ($1, $2)`, Args: []any{id, body}}
}

var failing = sqlfence.Statement{SQL: `SELECT 1 / 0`}

func TestGuardPipelined(t *testing.T) {
	t.Parallel()
	db, pool, tr := pipelineDB(t)
	ctx := context.Background()
	g := sqlfence.Guard{Resource: "outbox"}

	tags, err := g.ClaimPipelined(ctx, pool, 2, insert(1, "a"), insert(2, "b"))
	if err != nil || len(tags) != 2 || tags[0].RowsAffected() != 1 {
		t.Fatalf("claim = %v, %v", tags, err)
	}
	if q, b := tr.queries.Load(), tr.batches.Load(); q != 0 || b != 1 {
		t.Fatalf("sent %d queries and %d batches, want one batch", q, b)
	}
	if _, err := g.WritePipelined(ctx, pool, 2, insert(3, "c")); err != nil {
		t.Fatal(err)
	}

	// A stale token: refused, and nothing of its batch commits.
	_, err = g.WritePipelined(ctx, pool, 1, insert(10, "stale"))
	wantStale(t, err, "outbox", 1, 2, false)
	_, err = g.ClaimPipelined(ctx, pool, 2, insert(11, "same token"))
	wantStale(t, err, "outbox", 2, 2, true)

	// A failing statement rolls back the statements before it and the
	// guard's new token.
	if _, err := g.WritePipelined(ctx, pool, 5, insert(20, "x"), failing); err == nil {
		t.Fatal("a batch with a failing statement succeeded")
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM outbox`); n != 3 {
		t.Fatalf("outbox has %d rows, want the 3 accepted ones", n)
	}
	if f, err := g.Floor(ctx, db.Pool); err != nil || f != 2 {
		t.Fatalf("floor = %d, %v; want 2 (the failed batch rolled back)", f, err)
	}

	// Inside an explicit transaction the batch joins it.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.WritePipelined(ctx, tx, 3, insert(30, "in tx")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM outbox WHERE id = 30`); n != 0 {
		t.Fatal("a pipelined write survived its transaction's rollback")
	}
	if _, err := g.WritePipelined(ctx, pool, 2, sqlfence.Statement{}); !errors.Is(err, sqlfence.ErrInvalid) {
		t.Fatalf("empty statement: %v, want ErrInvalid", err)
	}
}

func TestLeasePipelined(t *testing.T) {
	t.Parallel()
	db, pool, _ := pipelineDB(t)
	ctx := context.Background()

	n := acquire(t, db.Pool, "k", "a", time.Minute)
	if _, err := sqlfence.WithLeasePipelined(ctx, pool, "k", n, insert(1, "n")); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlfence.WithLeasePipelined(ctx, pool, "k", n, insert(2, "x"), failing); err == nil {
		t.Fatal("a batch with a failing statement succeeded")
	}
	release(t, db.Pool, "k", "a", n)
	acquire(t, db.Pool, "k", "b", time.Minute)
	_, err := sqlfence.WithLeasePipelined(ctx, pool, "k", n, insert(3, "stale"))
	if !errors.Is(err, sqlfence.ErrLeaseNotHeld) {
		t.Fatalf("the old term's pipelined write: %v, want ErrLeaseNotHeld", err)
	}
	if got := count(t, db.Pool, `SELECT count(*) FROM outbox`); got != 1 {
		t.Fatalf("outbox has %d rows, want only the first term's accepted one", got)
	}
}

// TestLeasePipelinedHoldsOffNextTerm: while a pipelined batch of term N is
// running, its lease expires; term N+1's acquisition waits until the batch
// has committed.
func TestLeasePipelinedHoldsOffNextTerm(t *testing.T) {
	t.Parallel()
	db, pool, _ := pipelineDB(t)
	ctx := context.Background()
	gate := db.Conn(t) // holds an advisory lock that stalls N's batch
	mustExec(t, gate, `SELECT pg_advisory_lock(42)`)

	n := acquire(t, db.Pool, "k", "a", 2*time.Second)
	batchDone := make(chan error, 1)
	go func() {
		_, err := sqlfence.WithLeasePipelined(ctx, pool, "k", n, insert(1, "n"),
			sqlfence.Statement{SQL: `SELECT pg_advisory_xact_lock_shared(42)`})
		batchDone <- err
	}()
	waitExpired(t, db.Pool, "k", n)

	next := db.Conn(t)
	pid := backendPID(t, next)
	type acq struct {
		token int64
		err   error
	}
	acquired := make(chan acq, 1)
	go func() {
		var r acq
		r.err = next.QueryRow(ctx, `SELECT token FROM pgleader.acquire('k', 'b', '1 minute')`).Scan(&r.token)
		acquired <- r
	}()
	waitLockWait(t, db.Pool, pid, acquired)

	mustExec(t, gate, `SELECT pg_advisory_unlock(42)`)
	if err := receive(t, batchDone); err != nil {
		t.Fatalf("term N's batch, checked before its lease expired: %v", err)
	}
	r := receive(t, acquired)
	if r.err != nil || r.token != n+1 {
		t.Fatalf("next acquire = %d, %v; want %d", r.token, r.err, n+1)
	}
	if got := count(t, db.Pool, `SELECT count(*) FROM outbox WHERE id = 1`); got != 1 {
		t.Fatal("term N's write did not commit")
	}
}
