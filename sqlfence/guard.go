package sqlfence

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Beginner begins transactions. *pgxpool.Pool and *pgx.Conn satisfy it, and
// so does pgx.Tx, whose Begin starts a savepoint: the guard then lasts
// until the outer transaction ends.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Guard is strength 2: a fenced transaction. Its guard row, one per
// Resource in the table pgleader.fence, holds the highest token that took
// the resource. Taking it inside a transaction locks the row until the
// transaction ends and raises its token, and makes every statement of that transaction commit only if no higher token took
// the resource first: a higher token's take waits for the lock, and is then
// compared with the committed value. Takes of one resource therefore
// serialize; keep guarded transactions short.
//
// A refused take raises an error in PostgreSQL, so the transaction is
// aborted and cannot commit even if the caller ignores the returned error.
// Under REPEATABLE READ or SERIALIZABLE a take that meets a concurrent one
// may fail with a serialization error (SQLSTATE 40001) instead.
//
// A Guard is a plain value, safe for concurrent use.
type Guard struct {
	// Resource names what the guard protects, for example "outbox" or
	// "digests/daily". Any text of 1 to [MaxResourceLen] bytes.
	Resource string
}

// ClaimTx takes the guard in tx for a term's first write: the stored token
// must be strictly lower than token, so of two holders of one token exactly
// one claims. It returns a [*StaleError] (matching [ErrFenced]) otherwise.
func (g Guard) ClaimTx(ctx context.Context, tx pgx.Tx, token int64) error {
	return g.take(ctx, tx, token, true)
}

// WriteTx takes the guard in tx for a write: the stored token must not be
// higher than token. It returns a [*StaleError] (matching [ErrFenced])
// otherwise. Call it before the transaction's other writes.
func (g Guard) WriteTx(ctx context.Context, tx pgx.Tx, token int64) error {
	return g.take(ctx, tx, token, false)
}

// Claim begins a transaction on db, takes the guard as [Guard.ClaimTx] does,
// runs fn (which may be nil) and commits. It rolls back if the claim is
// refused or fn returns an error, and returns that error.
func (g Guard) Claim(ctx context.Context, db Beginner, token int64, fn func(pgx.Tx) error) error {
	return g.inTx(ctx, db, token, true, fn)
}

// Write begins a transaction on db, takes the guard as [Guard.WriteTx]
// does, runs fn (which may be nil) and commits. It rolls back if the write
// is refused or fn returns an error, and returns that error.
func (g Guard) Write(ctx context.Context, db Beginner, token int64, fn func(pgx.Tx) error) error {
	return g.inTx(ctx, db, token, false, fn)
}

// Floor reads the highest token that took the resource, 0 if none has.
// Read while the lease is free, it is the floor to advance the lease's
// token counter past after the lease data was lost.
func (g Guard) Floor(ctx context.Context, db Querier) (int64, error) {
	if err := checkName("resource", g.Resource, MaxResourceLen); err != nil {
		return 0, err
	}
	var floor int64
	if err := db.QueryRow(ctx, `SELECT pgleader.fence_floor($1)`, g.Resource).Scan(&floor); err != nil {
		return 0, sqlError("fence floor", err)
	}
	return floor, nil
}

func (g Guard) inTx(ctx context.Context, db Beginner, token int64, claim bool, fn func(pgx.Tx) error) error {
	if err := g.check(token); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := g.take(ctx, tx, token, claim); err != nil {
			return err
		}
		if fn == nil {
			return nil
		}
		return fn(tx)
	})
}

func (g Guard) take(ctx context.Context, tx pgx.Tx, token int64, claim bool) error {
	if err := g.check(token); err != nil {
		return err
	}
	op, sql := "fence write", `SELECT pgleader.fence_write($1, $2)`
	if claim {
		op, sql = "fence claim", `SELECT pgleader.fence_claim($1, $2)`
	}
	_, err := tx.Exec(ctx, sql, g.Resource, token)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == CodeFenced {
		return staleError(pgErr, g.Resource)
	}
	if err != nil {
		return sqlError(op, err)
	}
	return nil
}

func (g Guard) check(token int64) error {
	if err := checkName("resource", g.Resource, MaxResourceLen); err != nil {
		return err
	}
	return checkToken(token)
}
