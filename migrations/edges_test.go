package migrations_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/migrations"
)

const maxFloor = 1<<62 - 1

// deleteWhileWaiting has a session hold key's row FOR KEY SHARE (as a
// lease-guarded transaction does) while op runs in another session and waits
// for that lock; the first session then deletes the row and commits. It
// returns op's error.
func deleteWhileWaiting(t *testing.T, db *pgtest.DB, key string, op func(conn *pgx.Conn) error) error {
	t.Helper()
	ctx := context.Background()
	holder, waiter := db.Conn(t), db.Conn(t)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM pgleader.lease WHERE key = $1 FOR KEY SHARE) s`, key).Scan(&n); err != nil || n != 1 {
		t.Fatalf("lock the row: %d rows, %v", n, err)
	}
	pid := backendPID(t, waiter)
	done := make(chan error, 1)
	go func() { done <- op(waiter) }()
	waitLockWait(t, db.Pool, pid)
	mustExec(t, tx, `DELETE FROM pgleader.lease WHERE key = $1`, key)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		return err
	case <-time.After(waitTimeout):
		t.Fatalf("op did not return within %v", waitTimeout)
		return nil
	}
}

// TestNoWinWithoutRow deletes the lease row while acquire or advance waits
// for its lock: the win each reports must be recorded by a row.
func TestNoWinWithoutRow(t *testing.T) {
	t.Parallel()
	t.Run("acquire", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		ctx := context.Background()
		mustExec(t, db.Pool, `SELECT pgleader.advance('k', 7)`)

		var acquired bool
		var token *int64
		err := deleteWhileWaiting(t, db, "k", func(c *pgx.Conn) error {
			return c.QueryRow(ctx, `SELECT acquired, token FROM pgleader.acquire('k', 'a', '1 minute')`).Scan(&acquired, &token)
		})
		if err != nil {
			t.Fatal(err)
		}
		if !acquired || token == nil {
			t.Fatalf("acquire = %v, token %v; want a win with a token", acquired, token)
		}
		var holder string
		var stored int64
		if err := db.Pool.QueryRow(ctx, `SELECT holder, token FROM pgleader.lease WHERE key = 'k'`).Scan(&holder, &stored); err != nil {
			t.Fatalf("no row records the win: %v", err)
		}
		if holder != "a" || stored != *token {
			t.Fatalf("row = %q/%d; want a/%d", holder, stored, *token)
		}
		if err := db.Pool.QueryRow(ctx, `SELECT acquired FROM pgleader.acquire('k', 'b', '1 minute')`).Scan(&acquired); err != nil || acquired {
			t.Fatalf("second acquire = %v, %v; want refused while a holds the lease", acquired, err)
		}
	})
	t.Run("advance", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		ctx := context.Background()
		mustExec(t, db.Pool, `SELECT pgleader.advance('k', 3)`)

		var advanced bool
		var counter *int64
		err := deleteWhileWaiting(t, db, "k", func(c *pgx.Conn) error {
			return c.QueryRow(ctx, `SELECT advanced, token FROM pgleader.advance('k', 5)`).Scan(&advanced, &counter)
		})
		if err != nil {
			t.Fatal(err)
		}
		if !advanced || counter == nil || *counter != 5 {
			t.Fatalf("advance = %v, counter %v; want advanced to 5", advanced, counter)
		}
		var stored int64
		if err := db.Pool.QueryRow(ctx, `SELECT token FROM pgleader.lease WHERE key = 'k'`).Scan(&stored); err != nil || stored != 5 {
			t.Fatalf("row token = %d, %v; want 5", stored, err)
		}
	})
}

// TestTokenSpace checks that no floor leaves a key without tokens.
func TestTokenSpace(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	limit := fmt.Sprint(int64(maxFloor))

	for _, sql := range []string{
		`SELECT * FROM pgleader.advance('k', $1)`,
		`SELECT * FROM pgleader.acquire('k', 'a', '1 minute', $1)`,
	} {
		for _, floor := range []int64{maxFloor + 1, 1<<63 - 1} {
			_, err := db.Pool.Exec(ctx, sql, floor)
			wantCode(t, fmt.Sprintf("%s with %d", sql, floor), err, "22023", limit)
		}
	}

	// The largest floor still leaves room.
	var token int64
	if err := db.Pool.QueryRow(ctx, `SELECT token FROM pgleader.acquire('k', 'a', '1 minute', $1)`, int64(maxFloor)).Scan(&token); err != nil || token != maxFloor+1 {
		t.Fatalf("acquire at the largest floor = %d, %v; want %d", token, err, int64(maxFloor+1))
	}

	// A counter set at the top by hand: acquire refuses it in words, not
	// with an overflow.
	mustExec(t, db.Pool, `UPDATE pgleader.lease SET holder = NULL, expires_at = NULL, token = 9223372036854775807 WHERE key = 'k'`)
	_, err := db.Pool.Exec(ctx, `SELECT * FROM pgleader.acquire('k', 'a', '1 minute')`)
	wantCode(t, "acquire at the top", err, "22003", "no token left")

	// Fence tokens obey the same limit, so every fence can be a floor.
	for _, sql := range []string{`SELECT pgleader.fence_write('r', $1)`, `SELECT pgleader.fence_claim('r', $1)`} {
		_, err := db.Pool.Exec(ctx, sql, int64(maxFloor+1))
		wantCode(t, sql, err, "22023", limit)
	}
	mustExec(t, db.Pool, `SELECT pgleader.fence_claim('r', $1)`, int64(maxFloor))
}

// listen returns a connection listening on the channel pgleader.
func listen(t *testing.T, db *pgtest.DB) *pgx.Conn {
	t.Helper()
	c := db.Conn(t)
	mustExec(t, c, `LISTEN pgleader`)
	return c
}

func nextNotification(t *testing.T, c *pgx.Conn) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	n, err := c.WaitForNotification(ctx)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	return n.Payload
}

// TestLeaseOperationsDoNotNotify runs every lease operation, then sends a
// marker: the marker is the first notification heard.
func TestLeaseOperationsDoNotNotify(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	l := listen(t, db)
	var token int64
	if err := db.Pool.QueryRow(context.Background(), `SELECT token FROM pgleader.acquire('k', 'a', '1 minute')`).Scan(&token); err != nil {
		t.Fatal(err)
	}
	mustExec(t, db.Pool, `SELECT pgleader.renew('k', 'a', $1, '1 minute')`, token)
	mustExec(t, db.Pool, `SELECT pgleader.release('k', 'a', $1)`, token)
	mustExec(t, db.Pool, `SELECT * FROM pgleader.advance('k', 10)`)
	mustExec(t, db.Pool, `SELECT pg_notify('pgleader', 'marker')`)
	if got := nextNotification(t, l); got != "marker" {
		t.Fatalf("first notification = %q; want the marker, no notification from a lease operation", got)
	}
}

// TestNotifyHint checks pgleader.notify's arguments and payload.
func TestNotifyHint(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	l := listen(t, db)
	mustExec(t, db.Pool, `SELECT pgleader.notify('acquire', 'a key')`)
	mustExec(t, db.Pool, `SELECT pgleader.notify('release', 'k')`)
	for _, want := range []string{"acquire a key", "release k"} {
		if got := nextNotification(t, l); got != want {
			t.Fatalf("notification = %q; want %q", got, want)
		}
	}
	for _, bad := range []struct{ sql, msg string }{
		{`SELECT pgleader.notify('renew', 'k')`, "event"},
		{`SELECT pgleader.notify(NULL, 'k')`, "event"},
		{`SELECT pgleader.notify('release', '')`, "key must not be empty"},
		{`SELECT pgleader.notify('release', NULL)`, "key must not be empty"},
		{`SELECT pgleader.notify('release', repeat('k', 201))`, "the limit is 200"},
	} {
		_, err := db.Pool.Exec(ctx, bad.sql)
		wantCode(t, bad.sql, err, "22023", bad.msg)
	}
}

// TestLeaseOperationsSurviveNotifyFailure makes pg_notify fail for the
// calling session (a function of that name earlier on its search_path) and
// runs the lease operations there.
func TestLeaseOperationsSurviveNotifyFailure(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	mustExec(t, db.Pool, `CREATE SCHEMA failing`)
	mustExec(t, db.Pool, `CREATE FUNCTION failing.pg_notify(text, text) RETURNS void LANGUAGE plpgsql AS
		$$BEGIN RAISE EXCEPTION 'simulated: the notification queue is full' USING ERRCODE = '54000'; END$$`)
	c := db.Conn(t)
	mustExec(t, c, `SET search_path = failing, pg_catalog, public`)

	var token int64
	if err := c.QueryRow(ctx, `SELECT token FROM pgleader.acquire('k', 'a', '1 minute')`).Scan(&token); err != nil {
		t.Fatalf("acquire: %v", err)
	}
	var expires *time.Time
	if err := c.QueryRow(ctx, `SELECT pgleader.renew('k', 'a', $1, '1 minute')`, token).Scan(&expires); err != nil || expires == nil {
		t.Fatalf("renew = %v, %v", expires, err)
	}
	var released bool
	if err := c.QueryRow(ctx, `SELECT pgleader.release('k', 'a', $1)`, token).Scan(&released); err != nil || !released {
		t.Fatalf("release = %v, %v", released, err)
	}
}

// TestFunctionsPinSearchPath checks every function in the schema pins its
// search_path, and that a caller's search_path cannot change what one
// computes.
func TestFunctionsPinSearchPath(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	rows, err := db.Pool.Query(ctx, `
		SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		 WHERE n.nspname = 'pgleader'
		   AND NOT coalesce('search_path=pg_catalog, pgleader, pg_temp' = ANY (p.proconfig), false)
		 ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	unpinned, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(unpinned) > 0 {
		t.Errorf("functions without a pinned search_path: %v", unpinned)
	}

	// A caller whose clock_timestamp() lies.
	mustExec(t, db.Pool, `CREATE SCHEMA lying`)
	mustExec(t, db.Pool, `CREATE FUNCTION lying.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS $$SELECT '2000-01-01'::timestamptz$$`)
	c := db.Conn(t)
	mustExec(t, c, `SET search_path = lying, pg_catalog, public`)
	var token int64
	if err := c.QueryRow(ctx, `SELECT token FROM pgleader.acquire('k', 'a', '1 second')`).Scan(&token); err != nil {
		t.Fatal(err)
	}
	var expires time.Time
	if err := c.QueryRow(ctx, `SELECT expires_at FROM pgleader.lease WHERE key = 'k'`).Scan(&expires); err != nil {
		t.Fatal(err)
	}
	if expires.Year() < 2020 {
		t.Fatalf("expiry %v was computed with the caller's clock_timestamp()", expires)
	}

	// install_fence_trigger still resolves the caller's table names.
	mustExec(t, db.Pool, `CREATE SCHEMA app`)
	mustExec(t, db.Pool, `CREATE TABLE app.docs (id int PRIMARY KEY, fence bigint)`)
	mustExec(t, c, `SET search_path = app, public`)
	mustExec(t, c, `SELECT pgleader.install_fence_trigger('docs', 'fence')`)
	mustExec(t, c, `INSERT INTO docs VALUES (1, 5)`)
	_, err = c.Exec(ctx, `UPDATE docs SET fence = 4`)
	wantCode(t, "lowering update", err, "PF001", "app.docs")
}

// TestSchemaOwnedByAnotherRole runs the migrations where another role
// created the schema pgleader first.
func TestSchemaOwnedByAnotherRole(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	other := createRole(t, db)
	mustExec(t, db.Pool, `CREATE SCHEMA pgleader AUTHORIZATION `+pgx.Identifier{other}.Sanitize())
	err := migrations.Up(context.Background(), db.Pool)
	if err == nil || !strings.Contains(err.Error(), "owned by") || !strings.Contains(err.Error(), other) {
		t.Fatalf("Up = %v; want an error naming the schema's owner %s", err, other)
	}
	var n int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'pgleader'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d relations created in the foreign schema (%v)", n, err)
	}
}

// TestFailedMigrationsReturnConnections migrates as a role that may not
// create the history table, three times, on a pool of two connections.
func TestFailedMigrationsReturnConnections(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	// PostgreSQL 14 and older let every role create in the schema public,
	// where golang-migrate would then create its history table.
	if _, err := db.Pool.Exec(context.Background(), `REVOKE CREATE ON SCHEMA public FROM PUBLIC`); err != nil {
		t.Fatal(err)
	}
	role := createRole(t, db)
	cfg, err := pgxpool.ParseConfig(urlAs(t, db, role))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-closed:
		case <-time.After(waitTimeout):
			t.Errorf("pool.Close did not return within %v: a connection was never released", waitTimeout)
		}
	})
	defer func() { go func() { pool.Close(); close(closed) }() }()

	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		err := migrations.Up(ctx, pool)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Fatalf("Up %d as %s = %v; want permission denied", i+1, role, err)
		}
	}
	// A connection closed on return is destroyed in the background.
	for deadline := time.Now().Add(waitTimeout); pool.Stat().AcquiredConns() > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still acquired after the failed migrations", pool.Stat().AcquiredConns())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("the pool after the failed migrations: %v", err)
	}
}

// TestAppRoleGrants gives an application role the grants of
// pgleader.grant_usage and uses the schema as that role.
func TestAppRoleGrants(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	role := createRole(t, db)
	mustExec(t, db.Pool, `SELECT pgleader.grant_usage($1, to_regclass($2))`, role, migrations.HistoryTable)
	mustExec(t, db.Pool, `SELECT pgleader.grant_usage($1, to_regclass($2))`, role, migrations.HistoryTable) // idempotent

	cfg, err := pgxpool.ParseConfig(urlAs(t, db, role))
	if err != nil {
		t.Fatal(err)
	}
	app, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()

	if err := migrations.Up(ctx, app); err != nil {
		t.Fatalf("Up as %s on an up-to-date database: %v", role, err)
	}
	if v, dirty, err := migrations.Version(ctx, app); err != nil || dirty || v != migrations.Latest {
		t.Fatalf("Version as %s = %d, %v, %v", role, v, dirty, err)
	}
	var token int64
	if err := app.QueryRow(ctx, `SELECT token FROM pgleader.acquire('k', 'a', '1 minute', 3)`).Scan(&token); err != nil {
		t.Fatalf("acquire as %s: %v", role, err)
	}
	for _, sql := range []string{
		`SELECT pgleader.renew('k', 'a', $1, '1 minute')`,
		`SELECT pgleader.holds('k', $1)`,
		`SELECT token = $1 FROM pgleader.lease('k')`,
		`SELECT pgleader.fence_claim('r', $1)`,
		`SELECT pgleader.fence_write('r', $1)`,
		`SELECT pgleader.fence_floor('r') + $1`,
		`SELECT pgleader.lease_guard('k', $1)`,
		`SELECT pgleader.release('k', 'a', $1)`,
		`SELECT pgleader.notify('release', 'k') IS NULL AND $1 > 0`,
		`SELECT * FROM pgleader.advance('k', $1)`,
	} {
		if _, err := app.Exec(ctx, sql, token); err != nil {
			t.Errorf("%s as %s: %v", sql, role, err)
		}
	}

	// The functions are the only door: no privilege on any table, sets
	// included.
	for _, table := range []string{"lease", "fence", "candidate", "set_member", "settings", "server_epoch", "steerer"} {
		for _, priv := range []string{"SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER"} {
			var ok bool
			if err := app.QueryRow(ctx, `SELECT has_table_privilege('pgleader.' || $1, $2)`, table, priv).Scan(&ok); err != nil || ok {
				t.Errorf("%s on pgleader.%s as %s: %v %v", priv, table, role, ok, err)
			}
		}
	}

	// Granting takes the schema's owner: the application role may not
	// even execute grant_usage.
	_, err = app.Exec(ctx, `SELECT pgleader.grant_usage($1)`, role)
	wantCode(t, "grant_usage by the app role", err, "42501", "permission denied")
	_, err = db.Pool.Exec(ctx, `SELECT pgleader.grant_usage('no_such_role_pgleader')`)
	wantCode(t, "grant_usage to no role", err, "42704", "no_such_role_pgleader")
}
