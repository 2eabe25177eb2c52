package sqlfence

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgleader/pgleader/internal/check"
)

// LeaseGuardTx is strength 3: it checks, inside tx, that the term (key,
// token) holds an unexpired lease in pgleader.lease on the database clock
// (clock_timestamp(), read after the lock below is granted), and returns an
// error matching [ErrLeaseNotHeld] if not.
//
// Before the check it locks the lease row FOR KEY SHARE until tx ends.
// Acquiring the lease locks the row FOR UPDATE before reading the clock, so
// a new term cannot begin while tx is open, even if this term's lease
// expires meanwhile: the acquisition waits until tx commits or rolls back,
// and its term starts after that. So no write of tx commits after the next
// term has begun. The holder's own renewal and release take only FOR NO KEY
// UPDATE and are not blocked. Keep guarded transactions short: while one is
// open past the lease's expiry, the key has no leader.
//
// A refusal raises an error in PostgreSQL, so tx is aborted and cannot
// commit even if the caller ignores the returned error. Call it before the
// transaction's writes. Under REPEATABLE READ or SERIALIZABLE it may fail
// with a serialization error (SQLSTATE 40001) if the lease row changed after
// the transaction's snapshot, for example by a renewal; call it first.
func LeaseGuardTx(ctx context.Context, tx pgx.Tx, key string, token int64) error {
	if err := checkLease(key, token); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `SELECT pgleader.lease_guard($1, $2)`, key, token)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == CodeLeaseNotHeld {
		return &leaseError{pgErr}
	}
	if err != nil {
		return sqlError("lease guard", err)
	}
	return nil
}

// WithLease begins a transaction on db, checks the lease as [LeaseGuardTx]
// does, runs fn (which may be nil) and commits. It rolls back if the check
// fails or fn returns an error, and returns that error.
func WithLease(ctx context.Context, db Beginner, key string, token int64, fn func(pgx.Tx) error) error {
	if err := checkLease(key, token); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := LeaseGuardTx(ctx, tx, key, token); err != nil {
			return err
		}
		if fn == nil {
			return nil
		}
		return fn(tx)
	})
}

func checkLease(key string, token int64) error {
	if err := checkName("key", key, MaxResourceLen); err != nil {
		return err
	}
	// A lease token is only compared, never stored: any positive one will do.
	if err := check.Token(token); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}
