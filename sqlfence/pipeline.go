package sqlfence

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Statement is one SQL statement and its bind arguments, for the pipelined
// fences.
type Statement struct {
	SQL  string
	Args []any
}

// Batcher sends pipelined batches. *pgxpool.Pool, *pgx.Conn and pgx.Tx
// satisfy it.
type Batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// WritePipelined is [Guard.Write] in one round trip: it sends the guard and
// stmts as one pipelined batch, which PostgreSQL runs as one implicit
// transaction, so stmts commit only if the guard is taken, and a failing
// statement rolls the guard back too. On a pgx.Tx they join that
// transaction instead. It returns the statements' command tags.
func (g Guard) WritePipelined(ctx context.Context, db Batcher, token int64, stmts ...Statement) ([]pgconn.CommandTag, error) {
	return g.pipelined(ctx, db, token, false, stmts)
}

// ClaimPipelined is [Guard.Claim] in one round trip, as WritePipelined is
// for Write.
func (g Guard) ClaimPipelined(ctx context.Context, db Batcher, token int64, stmts ...Statement) ([]pgconn.CommandTag, error) {
	return g.pipelined(ctx, db, token, true, stmts)
}

func (g Guard) pipelined(ctx context.Context, db Batcher, token int64, claim bool, stmts []Statement) ([]pgconn.CommandTag, error) {
	if err := g.check(token); err != nil {
		return nil, err
	}
	op, sql := "fence write", `SELECT pgleader.fence_write($1, $2)`
	if claim {
		op, sql = "fence claim", `SELECT pgleader.fence_claim($1, $2)`
	}
	return sendGuarded(ctx, db, Statement{sql, []any{g.Resource, token}}, stmts, func(err error) error {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == CodeFenced {
			return staleError(pgErr, g.Resource)
		}
		return sqlError(op, err)
	})
}

// WithLeasePipelined is [WithLease] in one round trip: it sends the lease
// guard and stmts as one pipelined batch, run by PostgreSQL as one implicit
// transaction, so no statement commits unless (key, token) holds its lease,
// and the lease row stays locked against a new term's acquisition until
// they commit. On a pgx.Tx they join that transaction instead. It returns
// the statements' command tags.
func WithLeasePipelined(ctx context.Context, db Batcher, key string, token int64, stmts ...Statement) ([]pgconn.CommandTag, error) {
	if err := checkLease(key, token); err != nil {
		return nil, err
	}
	return sendGuarded(ctx, db, Statement{`SELECT pgleader.lease_guard($1, $2)`, []any{key, token}}, stmts, func(err error) error {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == CodeLeaseNotHeld {
			return &leaseError{pgErr}
		}
		return sqlError("lease guard", err)
	})
}

// sendGuarded sends guard and stmts in one batch; guardErr maps the guard's
// error.
func sendGuarded(ctx context.Context, db Batcher, guard Statement, stmts []Statement, guardErr func(error) error) (tags []pgconn.CommandTag, err error) {
	b := &pgx.Batch{}
	b.Queue(guard.SQL, guard.Args...)
	for _, s := range stmts {
		if s.SQL == "" {
			return nil, invalidf("empty statement")
		}
		b.Queue(s.SQL, s.Args...)
	}
	results := db.SendBatch(ctx, b)
	defer func() {
		if cerr := results.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("sqlfence: pipelined batch: %w", cerr)
		}
	}()
	if _, err := results.Exec(); err != nil {
		return nil, guardErr(err)
	}
	tags = make([]pgconn.CommandTag, 0, len(stmts))
	for i := range stmts {
		tag, err := results.Exec()
		if err != nil {
			return nil, fmt.Errorf("sqlfence: pipelined statement %d: %w", i+1, err)
		}
		tags = append(tags, tag)
	}
	return tags, nil
}
