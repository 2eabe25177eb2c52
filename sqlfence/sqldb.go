package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// SQLQuerier is what [SQL] adapts: *sql.DB, *sql.Tx and *sql.Conn satisfy
// it, with any database/sql driver for PostgreSQL, and so does a handle
// that wraps them with the same methods (sqlx's DB and Tx, GORM's
// Statement.ConnPool).
type SQLQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// SQLBeginner begins database/sql transactions: *sql.DB and *sql.Conn
// satisfy it.
type SQLBeginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// SQL returns db as a [Querier], for [Column]'s methods, [Guard.Floor] and
// [InstallTrigger]: each then runs its one statement through database/sql,
// in db's transaction if db is a *sql.Tx. The fences' errors are the same
// as through pgx: a stale token is a [*StaleError], a missing row
// [ErrNotFound], a database without the schema [ErrNotMigrated]. A driver's
// error with a SQLSTATE (lib/pq's *pq.Error) is returned with a
// *pgconn.PgError built from it in its chain, next to the driver's own, so
// errors.As finds either.
//
// The Querier's Exec reports only the rows affected: its CommandTag is the
// number alone, as database/sql gives no command tag. Its QueryRow's Scan
// returns pgx.ErrNoRows, which matches sql.ErrNoRows too, for no row. Bind
// arguments go to db's driver as they are, so they must be values that
// driver accepts.
//
// A nil db, or a nil *sql.DB, *sql.Tx or *sql.Conn, gives a Querier whose
// every statement fails with an error matching [ErrInvalid].
func SQL(db SQLQuerier) Querier {
	if isNil(db) {
		return sqlDB{err: invalidf("the database/sql handle is nil (%s)", typeName(db))}
	}
	return sqlDB{db: db}
}

// sqlDB is the [Querier] of [SQL]: err, if set, is every call's answer.
type sqlDB struct {
	db  SQLQuerier
	err error
}

func (q sqlDB) Exec(ctx context.Context, query string, args ...any) (pgconn.CommandTag, error) {
	if q.err != nil {
		return pgconn.CommandTag{}, q.err
	}
	res, err := q.db.ExecContext(ctx, query, args...)
	if err != nil {
		return pgconn.CommandTag{}, withPgError(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return pgconn.CommandTag{}, fmt.Errorf("sqlfence: the database/sql driver gave no count of rows affected: %w", err)
	}
	return pgconn.NewCommandTag(strconv.FormatInt(n, 10)), nil
}

func (q sqlDB) QueryRow(ctx context.Context, query string, args ...any) pgx.Row {
	if q.err != nil {
		return sqlRow{err: q.err}
	}
	return sqlRow{row: q.db.QueryRowContext(ctx, query, args...)}
}

// sqlRow is a *sql.Row as a pgx.Row.
type sqlRow struct {
	row *sql.Row
	err error
}

func (r sqlRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	err := r.row.Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return pgx.ErrNoRows
	}
	return withPgError(err)
}

// sqlTx hands a *sql.Tx to the functions that take a pgx.Tx
// ([Guard.ClaimTx], [Guard.WriteTx], [LeaseGuardTx]), so the SQL variants
// run the very same code. Those call Exec alone, which sqlTx implements
// (QueryRow too); the rest of pgx.Tx is the nil interface embedded, which
// they never reach.
type sqlTx struct {
	pgx.Tx
	q sqlDB
}

func (t sqlTx) Exec(ctx context.Context, query string, args ...any) (pgconn.CommandTag, error) {
	return t.q.Exec(ctx, query, args...)
}

func (t sqlTx) QueryRow(ctx context.Context, query string, args ...any) pgx.Row {
	return t.q.QueryRow(ctx, query, args...)
}

// ClaimSQLTx is [Guard.ClaimTx] in a database/sql transaction: it takes the
// guard in tx for a term's first write, and returns a [*StaleError]
// (matching [ErrFenced]) unless the stored token is strictly lower than
// token. The refusal aborts tx, which then cannot commit.
func (g Guard) ClaimSQLTx(ctx context.Context, tx *sql.Tx, token int64) error {
	if err := g.checkSQLTx(tx, token); err != nil {
		return err
	}
	return g.ClaimTx(ctx, sqlTx{q: sqlDB{db: tx}}, token)
}

// WriteSQLTx is [Guard.WriteTx] in a database/sql transaction: it takes the
// guard in tx for a write, and returns a [*StaleError] (matching
// [ErrFenced]) if a higher token has taken it. Call it before tx's other
// writes; a refusal aborts tx, which then cannot commit.
func (g Guard) WriteSQLTx(ctx context.Context, tx *sql.Tx, token int64) error {
	if err := g.checkSQLTx(tx, token); err != nil {
		return err
	}
	return g.WriteTx(ctx, sqlTx{q: sqlDB{db: tx}}, token)
}

// ClaimSQL is [Guard.Claim] on database/sql: it begins a transaction on db,
// takes the guard as [Guard.ClaimSQLTx] does, runs fn (which may be nil)
// and commits. It rolls back if the claim is refused or fn returns an
// error, and returns that error.
func (g Guard) ClaimSQL(ctx context.Context, db SQLBeginner, token int64, fn func(*sql.Tx) error) error {
	return g.inSQLTx(ctx, db, token, g.ClaimSQLTx, fn)
}

// WriteSQL is [Guard.Write] on database/sql: it begins a transaction on db,
// takes the guard as [Guard.WriteSQLTx] does, runs fn (which may be nil)
// and commits. It rolls back if the write is refused or fn returns an
// error, and returns that error.
func (g Guard) WriteSQL(ctx context.Context, db SQLBeginner, token int64, fn func(*sql.Tx) error) error {
	return g.inSQLTx(ctx, db, token, g.WriteSQLTx, fn)
}

func (g Guard) inSQLTx(ctx context.Context, db SQLBeginner, token int64,
	take func(context.Context, *sql.Tx, int64) error, fn func(*sql.Tx) error) error {
	if err := g.check(token); err != nil {
		return err
	}
	return withSQLTx(ctx, db, func(tx *sql.Tx) error {
		if err := take(ctx, tx, token); err != nil {
			return err
		}
		if fn == nil {
			return nil
		}
		return fn(tx)
	})
}

func (g Guard) checkSQLTx(tx *sql.Tx, token int64) error {
	if err := g.check(token); err != nil {
		return err
	}
	if tx == nil {
		return invalidf("guard %q: the *sql.Tx is nil", g.Resource)
	}
	return nil
}

// LeaseGuardSQLTx is [LeaseGuardTx] in a database/sql transaction: it
// checks, inside tx, that the term (key, token) holds an unexpired lease,
// and locks the lease row FOR KEY SHARE until tx ends, so no new term
// begins before tx has committed. It returns an error matching
// [ErrLeaseNotHeld] if the term does not hold the lease; the refusal aborts
// tx, which then cannot commit. Call it before tx's writes.
func LeaseGuardSQLTx(ctx context.Context, tx *sql.Tx, key string, token int64) error {
	if err := checkLease(key, token); err != nil {
		return err
	}
	if tx == nil {
		return invalidf("lease guard %q: the *sql.Tx is nil", key)
	}
	return LeaseGuardTx(ctx, sqlTx{q: sqlDB{db: tx}}, key, token)
}

// WithLeaseSQL is [WithLease] on database/sql: it begins a transaction on
// db, checks the lease as [LeaseGuardSQLTx] does, runs fn (which may be
// nil) and commits. It rolls back if the check fails or fn returns an
// error, and returns that error.
func WithLeaseSQL(ctx context.Context, db SQLBeginner, key string, token int64, fn func(*sql.Tx) error) error {
	if err := checkLease(key, token); err != nil {
		return err
	}
	return withSQLTx(ctx, db, func(tx *sql.Tx) error {
		if err := LeaseGuardSQLTx(ctx, tx, key, token); err != nil {
			return err
		}
		if fn == nil {
			return nil
		}
		return fn(tx)
	})
}

// withSQLTx runs fn in a transaction on db and commits it, or rolls it back
// if fn fails or panics.
func withSQLTx(ctx context.Context, db SQLBeginner, fn func(*sql.Tx) error) error {
	if isNil(db) {
		return invalidf("the database/sql handle to begin a transaction on is nil (%s)", typeName(db))
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlfence: begin: %w", withPgError(err))
	}
	// After a commit the rollback does nothing (sql.ErrTxDone).
	defer func() { _ = tx.Rollback() }()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlfence: commit: %w", withPgError(err))
	}
	return nil
}

// isNil reports whether v is nil or a nil pointer (or other nil value)
// held in an interface.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

func typeName(v any) string {
	if v == nil {
		return "nil"
	}
	return reflect.TypeOf(v).String()
}
