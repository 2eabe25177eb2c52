package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/lib/pq"                // database/sql driver "postgres"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/sqlfence"
)

// sqlDrivers are the database/sql drivers the SQL variants are tested
// with: pgx's stdlib and lib/pq.
var sqlDrivers = []string{"pgx", "postgres"}

// eachDriver runs test once per database/sql driver, in parallel subtests.
func eachDriver(t *testing.T, test func(t *testing.T, driver string)) {
	t.Helper()
	for _, driver := range sqlDrivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			test(t, driver)
		})
	}
}

// openSQL opens a *sql.DB of driver on db, closed when the test ends.
func openSQL(t *testing.T, db *pgtest.DB, driver string) *sql.DB {
	t.Helper()
	dsn := db.URL
	if driver == "postgres" {
		// The test server need not offer TLS; lib/pq does not fall back.
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if q := u.Query(); q.Get("sslmode") == "" {
			q.Set("sslmode", "disable")
			u.RawQuery = q.Encode()
		}
		dsn = u.String()
	}
	sqlDB, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sqlDB.Close() })
	if err := sqlDB.PingContext(context.Background()); err != nil {
		t.Fatalf("%s: %v", driver, err)
	}
	return sqlDB
}

// insertSQL inserts a row into newOutbox's table in tx.
func insertSQL(ctx context.Context, token int64, body string) func(*sql.Tx) error {
	return func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO outbox (token, body) VALUES ($1, $2)`, token, body)
		return err
	}
}

func bodies(t *testing.T, db *pgtest.DB) []string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT body FROM outbox ORDER BY body`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// wantLocked checks that the row of table with key is locked by another
// session: a FOR UPDATE NOWAIT on db's pool fails with 55P03.
func wantLocked(t *testing.T, db *pgtest.DB, table, column, key string) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(),
		`SELECT 1 FROM `+table+` WHERE `+column+` = $1 FOR UPDATE NOWAIT`, key)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("%s row %q: FOR UPDATE NOWAIT = %v; want it locked by the open transaction (55P03)", table, key, err)
	}
}

// TestSQLColumn: strength 1 through database/sql, on a *sql.DB, in a
// *sql.Tx and on a *sql.Conn: the current token writes, a stale one is
// refused with both tokens, a missing row is ErrNotFound.
func TestSQLColumn(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, driver string) {
		db := newDigests(t, 0)
		sdb := openSQL(t, db, driver)
		ctx := context.Background()
		q := sqlfence.SQL(sdb)

		if err := digests.Claim(ctx, q, "daily", 3); err != nil {
			t.Fatal(err)
		}
		tx, err := sdb.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := digests.Write(ctx, sqlfence.SQL(tx), "daily", 3, sqlfence.Assign("body", "a #1")); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		conn, err := sdb.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := digests.Claim(ctx, sqlfence.SQL(conn), "daily", 4); err != nil {
			t.Fatal(err)
		}
		if err := digests.Write(ctx, sqlfence.SQL(conn), "daily", 4, sqlfence.Assign("body", "b #1")); err != nil {
			t.Fatal(err)
		}
		_ = conn.Close()

		err = digests.Write(ctx, q, "daily", 3, sqlfence.Assign("body", "a #2"))
		wantStale(t, err, "digests/daily", 3, 4, false)
		const msg = `sqlfence: resource "digests/daily" fenced: token 3 is stale, stored fence is 4`
		if err.Error() != msg {
			t.Fatalf("message = %q, want %q", err, msg)
		}
		wantStale(t, digests.Claim(ctx, q, "daily", 4), "digests/daily", 4, 4, true)
		if body, fence := readDigest(t, db.Pool, "daily"); body != "b #1" || fence != 4 {
			t.Fatalf("row = %q, %d; want the newer term's %q, 4", body, fence, "b #1")
		}
		if floor, err := digests.Floor(ctx, q, "daily"); err != nil || floor != 4 {
			t.Fatalf("floor = %d, %v; want 4", floor, err)
		}
		if _, err := digests.Floor(ctx, q, "weekly"); !errors.Is(err, sqlfence.ErrNotFound) {
			t.Fatalf("floor of a missing row: %v; want ErrNotFound", err)
		}
		if err := digests.Write(ctx, q, "weekly", 4); !errors.Is(err, sqlfence.ErrNotFound) || errors.Is(err, sqlfence.ErrFenced) {
			t.Fatalf("write of a missing row: %v; want ErrNotFound only", err)
		}

		// A value the driver cannot send is an error, not a panic or a refusal.
		err = digests.Write(ctx, q, "daily", 4, sqlfence.Assign("body", make(chan int)))
		if err == nil || errors.Is(err, sqlfence.ErrFenced) {
			t.Fatalf("write of a channel: %v; want the driver's error", err)
		}

		// Create: INSERT … ON CONFLICT, whose row count comes through too.
		created := digests
		created.Create = true
		if err := created.Write(ctx, q, "weekly", 2, sqlfence.Assign("body", "w")); err != nil {
			t.Fatal(err)
		}
		wantStale(t, created.Write(ctx, q, "weekly", 1, sqlfence.Assign("body", "x")), "digests/weekly", 1, 2, false)
		if floor, err := created.Floor(ctx, q, "monthly"); err != nil || floor != 0 {
			t.Fatalf("floor of a missing row with Create = %d, %v; want 0", floor, err)
		}
		if body, fence := readDigest(t, db.Pool, "weekly"); body != "w" || fence != 2 {
			t.Fatalf("weekly = %q, %d; want w, 2", body, fence)
		}
	})
}

// TestSQLGuard: strength 2 through database/sql: ClaimSQL and WriteSQL in
// transactions of their own (on a *sql.DB and a *sql.Conn), ClaimSQLTx and
// WriteSQLTx in the caller's *sql.Tx. A stale token is refused, its body
// does not run, and a caller's transaction that ignores the refusal cannot
// commit.
func TestSQLGuard(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, driver string) {
		db := newOutbox(t)
		sdb := openSQL(t, db, driver)
		ctx := context.Background()
		g := sqlfence.Guard{Resource: "outbox"}

		if err := g.ClaimSQL(ctx, sdb, 3, insertSQL(ctx, 3, "a #1")); err != nil {
			t.Fatal(err)
		}
		if err := g.WriteSQL(ctx, sdb, 3, insertSQL(ctx, 3, "a #2")); err != nil {
			t.Fatal(err)
		}
		conn, err := sdb.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.ClaimSQL(ctx, conn, 4, insertSQL(ctx, 4, "b #1")); err != nil {
			t.Fatal(err)
		}
		_ = conn.Close()

		ran := false
		err = g.WriteSQL(ctx, sdb, 3, func(*sql.Tx) error { ran = true; return nil })
		wantStale(t, err, "outbox", 3, 4, false)
		if ran {
			t.Fatal("the body ran after the guard was refused")
		}
		wantStale(t, g.ClaimSQL(ctx, sdb, 4, nil), "outbox", 4, 4, true)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != sqlfence.CodeFenced {
			t.Fatalf("refusal %v does not unwrap to a *pgconn.PgError with SQLSTATE %s", err, sqlfence.CodeFenced)
		}

		// The caller's transaction: a write before the guard, the refusal
		// ignored, a write after it; the commit fails and nothing is kept.
		tx, err := sdb.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := insertSQL(ctx, 3, "a #3")(tx); err != nil {
			t.Fatal(err)
		}
		wantStale(t, g.WriteSQLTx(ctx, tx, 3), "outbox", 3, 4, false)
		_ = insertSQL(ctx, 3, "a #4")(tx)
		if err := tx.Commit(); err == nil {
			t.Fatal("a transaction whose guard was refused committed")
		}
		tx, err = sdb.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantStale(t, g.ClaimSQLTx(ctx, tx, 4), "outbox", 4, 4, true)
		_ = tx.Rollback()

		// The current token in the caller's transaction: the guard row
		// stays locked until it commits.
		tx, err = sdb.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.WriteSQLTx(ctx, tx, 4); err != nil {
			t.Fatal(err)
		}
		wantLocked(t, db, "pgleader.fence", "resource", "outbox")
		if err := insertSQL(ctx, 4, "b #2")(tx); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}

		// fn's error rolls back and is returned as it is.
		boom := errors.New("boom")
		err = g.WriteSQL(ctx, sdb, 4, func(tx *sql.Tx) error {
			if err := insertSQL(ctx, 4, "b #3")(tx); err != nil {
				return err
			}
			return boom
		})
		if err != boom {
			t.Fatalf("WriteSQL whose fn failed = %v; want fn's error", err)
		}

		if floor, err := g.Floor(ctx, sqlfence.SQL(sdb)); err != nil || floor != 4 {
			t.Fatalf("floor = %d, %v; want 4", floor, err)
		}
		if got, want := bodies(t, db), []string{"a #1", "a #2", "b #1", "b #2"}; !slices.Equal(got, want) {
			t.Fatalf("outbox = %q; want %q", got, want)
		}
	})
}

// TestSQLLease: strength 3 through database/sql: WithLeaseSQL and
// LeaseGuardSQLTx let the holder's writes through, lock the lease row in
// the caller's transaction, and refuse a term that no longer holds the
// lease with ErrLeaseNotHeld.
func TestSQLLease(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, driver string) {
		db := newOutbox(t)
		sdb := openSQL(t, db, driver)
		ctx := context.Background()
		q := sqlfence.SQL(sdb)

		n := acquire(t, q, "pub", "a", time.Minute)
		if err := sqlfence.WithLeaseSQL(ctx, sdb, "pub", n, insertSQL(ctx, n, "a #1")); err != nil {
			t.Fatal(err)
		}
		release(t, q, "pub", "a", n)
		wantNotHeld(t, sqlfence.WithLeaseSQL(ctx, sdb, "pub", n, insertSQL(ctx, n, "a #2")), "the lease was released")
		next := acquire(t, q, "pub", "b", time.Minute)
		err := sqlfence.WithLeaseSQL(ctx, sdb, "pub", n, insertSQL(ctx, n, "a #3"))
		wantNotHeld(t, err, fmt.Sprintf(`lease "pub" is not held by token %d: the lease is at token %d`, n, next))
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != sqlfence.CodeLeaseNotHeld {
			t.Fatalf("refusal %v does not unwrap to a *pgconn.PgError with SQLSTATE %s", err, sqlfence.CodeLeaseNotHeld)
		}

		tx, err := sdb.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantNotHeld(t, sqlfence.LeaseGuardSQLTx(ctx, tx, "pub", n), fmt.Sprintf("at token %d", next))
		_ = insertSQL(ctx, n, "a #4")(tx)
		if err := tx.Commit(); err == nil {
			t.Fatal("a transaction whose lease guard was refused committed")
		}

		tx, err = sdb.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := sqlfence.LeaseGuardSQLTx(ctx, tx, "pub", next); err != nil {
			t.Fatal(err)
		}
		wantLocked(t, db, "pgleader.lease", "key", "pub")
		if err := insertSQL(ctx, next, "b #1")(tx); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := sqlfence.WithLeaseSQL(ctx, sdb, "pub", next, insertSQL(ctx, next, "b #2")); err != nil {
			t.Fatal(err)
		}
		if got, want := bodies(t, db), []string{"a #1", "b #1", "b #2"}; !slices.Equal(got, want) {
			t.Fatalf("outbox = %q; want %q", got, want)
		}
	})
}

// TestSQLTrigger: InstallTrigger through a *sql.DB, and the trigger's
// refusal of the driver's own statements read by FromError.
func TestSQLTrigger(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, driver string) {
		db := newDigests(t, 5)
		sdb := openSQL(t, db, driver)
		ctx := context.Background()

		for range 2 { // idempotent
			name, err := sqlfence.InstallTrigger(ctx, sqlfence.SQL(sdb), pgx.Identifier{"public", "digests"}, "fence")
			if err != nil || name != "pgleader_fence_fence" {
				t.Fatalf("install = %q, %v; want pgleader_fence_fence", name, err)
			}
		}
		_, err := sdb.ExecContext(ctx, `UPDATE digests SET body = 'old term', fence = 3 WHERE name = 'daily'`)
		if err == nil {
			t.Fatal("the trigger let a lower fence through")
		}
		if driver == "postgres" {
			var pqErr *pq.Error
			if !errors.As(err, &pqErr) || pqErr.Code != sqlfence.CodeFenced {
				t.Fatalf("lowering update: %v; want a *pq.Error %s", err, sqlfence.CodeFenced)
			}
		}
		wantStale(t, sqlfence.FromError(err), "public.digests", 3, 5, false)

		tx, err := sdb.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tx.ExecContext(ctx, `UPDATE digests SET fence = NULL`)
		wantStale(t, sqlfence.FromError(err), "public.digests", 0, 5, false)
		_ = tx.Rollback()

		if _, err := sdb.ExecContext(ctx, `UPDATE digests SET fence = 6`); err != nil {
			t.Fatalf("raising the fence: %v", err)
		}
		if _, fence := readDigest(t, db.Pool, "daily"); fence != 6 {
			t.Fatalf("fence = %d; want 6", fence)
		}
		for _, bad := range []struct {
			table  pgx.Identifier
			column string
		}{{pgx.Identifier{"nosuch"}, "fence"}, {pgx.Identifier{"digests"}, "body"}} {
			if _, err := sqlfence.InstallTrigger(ctx, sqlfence.SQL(sdb), bad.table, bad.column); !errors.Is(err, sqlfence.ErrInvalid) {
				t.Errorf("install on %v.%s: %v; want ErrInvalid", bad.table, bad.column, err)
			}
		}
	})
}

// TestSQLErrors: through database/sql, a database without the schema is
// ErrNotMigrated for every strength, and other errors keep the driver's own
// error in the chain next to a *pgconn.PgError.
func TestSQLErrors(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, driver string) {
		empty := pgtest.NewEmpty(t)
		mustExec(t, empty.Pool, `CREATE TABLE digests (name text PRIMARY KEY, fence bigint)`)
		sdb := openSQL(t, empty, driver)
		ctx := context.Background()
		g := sqlfence.Guard{Resource: "r"}
		calls := map[string]error{
			"guard write": g.WriteSQL(ctx, sdb, 1, nil),
			"guard claim": g.ClaimSQL(ctx, sdb, 1, nil),
			"with lease":  sqlfence.WithLeaseSQL(ctx, sdb, "k", 1, nil),
		}
		_, calls["floor"] = g.Floor(ctx, sqlfence.SQL(sdb))
		_, calls["trigger"] = sqlfence.InstallTrigger(ctx, sqlfence.SQL(sdb), pgx.Identifier{"digests"}, "fence")
		for call, err := range calls {
			if !errors.Is(err, sqlfence.ErrNotMigrated) || !strings.Contains(err.Error(), "migrations.Up") {
				t.Errorf("%s: %v; want ErrNotMigrated naming migrations.Up", call, err)
			}
		}

		nosuch := sqlfence.Column{Table: pgx.Identifier{"nosuch"}, KeyColumn: "name", FenceColumn: "fence"}
		err := nosuch.Claim(ctx, sqlfence.SQL(sdb), "daily", 1)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42P01" || !strings.Contains(pgErr.Message, "nosuch") {
			t.Fatalf("claim on a missing table: %v; want a *pgconn.PgError 42P01 naming it", err)
		}
		if driver == "postgres" {
			var pqErr *pq.Error
			if !errors.As(err, &pqErr) || pqErr.Code != "42P01" {
				t.Fatalf("claim on a missing table: %v; want lib/pq's *pq.Error kept", err)
			}
		}
	})
}

// TestSQLBadInput: nil handles and transactions are refused with
// ErrInvalid before any statement, after the checks of the other input.
func TestSQLBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g := sqlfence.Guard{Resource: "r"}
	floor := func(q sqlfence.Querier) error { _, err := g.Floor(ctx, q); return err }
	install := func(q sqlfence.Querier) error {
		_, err := sqlfence.InstallTrigger(ctx, q, pgx.Identifier{"digests"}, "fence")
		return err
	}
	ran := false
	fn := func(*sql.Tx) error { ran = true; return nil }
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"SQL(nil) claim", digests.Claim(ctx, sqlfence.SQL(nil), "daily", 1), "handle is nil (nil)"},
		{"nil *sql.DB floor", floor(sqlfence.SQL((*sql.DB)(nil))), "handle is nil (*sql.DB)"},
		{"nil *sql.Tx write", digests.Write(ctx, sqlfence.SQL((*sql.Tx)(nil)), "daily", 1), "handle is nil (*sql.Tx)"},
		{"nil *sql.Conn trigger", install(sqlfence.SQL((*sql.Conn)(nil))), "handle is nil (*sql.Conn)"},
		{"ClaimSQLTx nil tx", g.ClaimSQLTx(ctx, nil, 1), "*sql.Tx is nil"},
		{"WriteSQLTx nil tx", g.WriteSQLTx(ctx, nil, 1), "*sql.Tx is nil"},
		{"LeaseGuardSQLTx nil tx", sqlfence.LeaseGuardSQLTx(ctx, nil, "k", 1), "*sql.Tx is nil"},
		{"ClaimSQL nil db", g.ClaimSQL(ctx, nil, 1, fn), "is nil (nil)"},
		{"WriteSQL nil *sql.DB", g.WriteSQL(ctx, (*sql.DB)(nil), 1, fn), "is nil (*sql.DB)"},
		{"WithLeaseSQL nil *sql.Conn", sqlfence.WithLeaseSQL(ctx, (*sql.Conn)(nil), "k", 1, fn), "is nil (*sql.Conn)"},
		// The other input is checked first, with the pgx API's words.
		{"WriteSQLTx empty resource", sqlfence.Guard{}.WriteSQLTx(ctx, nil, 1), "resource must not be empty"},
		{"ClaimSQLTx token 0", g.ClaimSQLTx(ctx, nil, 0), "token must be positive, got 0"},
		{"ClaimSQL token above MaxToken", g.ClaimSQL(ctx, nil, sqlfence.MaxToken+1, fn), "above the limit"},
		{"LeaseGuardSQLTx empty key", sqlfence.LeaseGuardSQLTx(ctx, nil, "", 1), "key must not be empty"},
		{"WithLeaseSQL token -1", sqlfence.WithLeaseSQL(ctx, nil, "k", -1, fn), "token must be positive, got -1"},
		{"SQL claim empty key column", sqlfence.Column{Table: pgx.Identifier{"t"}, FenceColumn: "f"}.Claim(ctx, sqlfence.SQL(nil), "k", 1), "key column must not be empty"},
	}
	for _, c := range cases {
		if !errors.Is(c.err, sqlfence.ErrInvalid) || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: err = %v; want ErrInvalid containing %q", c.name, c.err, c.want)
		}
	}
	if ran {
		t.Error("a body ran on bad input")
	}
}

// sqlStateOnly is a driver error that has a SQLSTATE and a text, nothing
// else.
type sqlStateOnly struct{ code, text string }

func (e *sqlStateOnly) Error() string    { return e.text }
func (e *sqlStateOnly) SQLState() string { return e.code }

// TestFromErrorDrivers: FromError reads lib/pq's errors (fields and all),
// and any error with a SQLState method from its text; other errors pass
// unchanged. The real servers' errors are read in the tests above.
func TestFromErrorDrivers(t *testing.T) {
	t.Parallel()
	guardPQ := &pq.Error{Code: sqlfence.CodeFenced, Severity: "ERROR",
		Message: `pgleader: resource "outbox" fenced: token 6 is stale, stored fence is 7`,
		Detail:  "stale token 6, stored fence 7"}
	err := sqlfence.FromError(fmt.Errorf("publish: %w", guardPQ))
	wantStale(t, err, "outbox", 6, 7, false)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != sqlfence.CodeFenced || pgErr.Detail != guardPQ.Detail {
		t.Fatalf("%v: want a *pgconn.PgError built from the *pq.Error", err)
	}

	triggerPQ := &pq.Error{Code: sqlfence.CodeFenced, Schema: "app", Table: "jobs", Column: "term",
		Message: "pgleader: table app.jobs fenced: claim of token 7 refused, stored fence is 7 (column fence)",
		Detail:  "claim token 7, stored fence 7"}
	wantStale(t, sqlfence.FromError(triggerPQ), "app.jobs", 7, 7, true)

	leasePQ := &pq.Error{Code: sqlfence.CodeLeaseNotHeld,
		Message: `pgleader: lease "pub" is not held by token 1`, Detail: "the lease is at token 2"}
	wantNotHeld(t, sqlfence.FromError(leasePQ), `lease "pub" is not held by token 1: the lease is at token 2`)

	// Only a SQLSTATE and a text: the tokens and the resource come from the text.
	bare := &sqlStateOnly{sqlfence.CodeFenced,
		`ERROR: pgleader: resource "outbox" fenced: claim of token 7 refused, stored fence is 9 (SQLSTATE PF001)`}
	wantStale(t, sqlfence.FromError(fmt.Errorf("wrapped: %w", bare)), "outbox", 7, 9, true)
	bare = &sqlStateOnly{sqlfence.CodeFenced, "pgleader: table public.digests fenced: token 3 is stale, stored fence is 5 (column fence)"}
	if se := new(sqlfence.StaleError); !errors.As(sqlfence.FromError(bare), &se) || se.Token != 3 || se.Stored != 5 || se.Claim {
		t.Fatalf("FromError(%q) = %+v; want token 3 stale at stored 5", bare.text, se)
	}
	if err := sqlfence.FromError(&sqlStateOnly{sqlfence.CodeLeaseNotHeld, "pq: lease not held"}); !errors.Is(err, sqlfence.ErrLeaseNotHeld) {
		t.Fatalf("a bare PF002: %v; want ErrLeaseNotHeld", err)
	}

	for _, other := range []error{
		&pq.Error{Code: "23505", Message: "duplicate key value violates unique constraint"},
		&sqlStateOnly{"40001", "could not serialize access"},
		&sqlStateOnly{"", "no code"},
		errors.New("plain"),
	} {
		if got := sqlfence.FromError(other); got != other {
			t.Errorf("FromError(%v) = %v; want it unchanged", other, got)
		}
	}
	if sqlfence.FromError(nil) != nil {
		t.Error("FromError(nil) != nil")
	}
}

// TestSQLClaimRace is TestColumnClaimRace and TestGuardClaimRace through
// database/sql: two holders of one token, each on a *sql.DB of one
// connection, claim at once, many times; exactly one wins each round, and
// only the winner's write commits.
func TestSQLClaimRace(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, driver string) {
		db := newDigests(t, 50)
		ctx := context.Background()
		var dbs [2]*sql.DB
		for i := range dbs {
			dbs[i] = openSQL(t, db, driver)
			dbs[i].SetMaxOpenConns(1)
		}

		sqlClaimRace(t, dbs, func(sdb *sql.DB, token int64) error {
			return digests.Claim(ctx, sqlfence.SQL(sdb), "daily", token)
		})
		if floor, err := digests.Floor(ctx, db.Pool, "daily"); err != nil || floor != 250 {
			t.Fatalf("column floor after the race = %d, %v; want 250", floor, err)
		}

		g := sqlfence.Guard{Resource: "digests/daily"}
		if err := g.WriteSQL(ctx, dbs[0], 50, nil); err != nil {
			t.Fatal(err)
		}
		mustExec(t, db.Pool, `UPDATE digests SET body = ''`)
		sqlClaimRace(t, dbs, func(sdb *sql.DB, token int64) error {
			return g.ClaimSQL(ctx, sdb, token, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, `UPDATE digests SET body = body || $1 WHERE name = 'daily'`, fmt.Sprintf("%d,", token))
				return err
			})
		})
		var want string
		for token := 51; token <= 250; token++ {
			want += fmt.Sprintf("%d,", token)
		}
		if body, _ := readDigest(t, db.Pool, "daily"); body != want {
			t.Fatalf("body = %q; want each token once, in order", body)
		}
	})
}

func sqlClaimRace(t *testing.T, dbs [2]*sql.DB, claim func(sdb *sql.DB, token int64) error) {
	t.Helper()
	const rounds = 200
	for round := range rounds {
		token := int64(51 + round)
		var errs [2]error
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, sdb := range dbs {
			wg.Go(func() {
				<-start
				errs[i] = claim(sdb, token)
			})
		}
		close(start)
		wg.Wait()

		won := 0
		for _, err := range errs {
			var se *sqlfence.StaleError
			switch {
			case err == nil:
				won++
			case errors.As(err, &se) && se.Claim && se.Token == token && se.Stored == token:
			default:
				t.Fatalf("round %d: %v; want nil or a refused claim of %d at stored %d", round, err, token, token)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d holders of token %d claimed; want exactly 1", round, won, token)
		}
	}
}
