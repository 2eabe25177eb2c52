package sqlfence_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/sqlfence"
)

// catalog lists every relation and schema outside the system catalogs.
func catalog(t *testing.T, db sqlfence.Querier) string {
	t.Helper()
	var s string
	err := db.QueryRow(context.Background(), `
		SELECT string_agg(n.nspname || ' / ' || c.relname || ' / ' || c.relkind::text, E'\n' ORDER BY n.nspname, c.relname)
		  FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
		 WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_toast%'`).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestHostileIdentifiers creates a table whose schema, table and column
// names hold quotes, semicolons, SQL, spaces and unicode, and uses every
// helper on it: they address exactly that table, and no other is created or
// dropped.
func TestHostileIdentifiers(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	var (
		schema = `s"; DROP TABLE x; --`
		table  = `"; DROP TABLE x; --`
		key    = `na"me'); DELETE FROM x; --`
		fence  = `fénce ☃ "f"`
		body   = `bo;dy $1 \`
	)
	q := func(parts ...string) string { return pgx.Identifier(parts).Sanitize() }
	mustExec(t, db.Pool, `CREATE TABLE x (id int)`)
	mustExec(t, db.Pool, `INSERT INTO x VALUES (1)`)
	mustExec(t, db.Pool, `CREATE SCHEMA `+q(schema))
	mustExec(t, db.Pool, `CREATE TABLE `+q(schema, table)+` (`+q(key)+` text PRIMARY KEY, `+q(body)+` text, `+q(fence)+` bigint)`)
	hostileKey := `'); DROP TABLE x; --`
	mustExec(t, db.Pool, `INSERT INTO `+q(schema, table)+` VALUES ($1, '', 0)`, hostileKey)
	before := catalog(t, db.Pool)

	c := sqlfence.Column{Table: pgx.Identifier{schema, table}, KeyColumn: key, FenceColumn: fence}
	if err := c.Claim(ctx, db.Pool, hostileKey, 2); err != nil {
		t.Fatal(err)
	}
	value := `"; DROP TABLE x; -- ☃`
	if err := c.Write(ctx, db.Pool, hostileKey, 2, sqlfence.Assign(body, value)); err != nil {
		t.Fatal(err)
	}
	wantStale(t, c.Write(ctx, db.Pool, hostileKey, 1, sqlfence.Assign(body, "stale")), schema+"."+table+"/"+hostileKey, 1, 2, false)
	if floor, err := c.Floor(ctx, db.Pool, hostileKey); err != nil || floor != 2 {
		t.Fatalf("floor = %d, %v; want 2", floor, err)
	}
	if _, err := sqlfence.InstallTrigger(ctx, db.Pool, pgx.Identifier{schema, table}, fence); err != nil {
		t.Fatal(err)
	}
	_, err := db.Pool.Exec(ctx, `UPDATE `+q(schema, table)+` SET `+q(fence)+` = 1`)
	wantStale(t, sqlfence.FromError(err), schema+"."+table, 1, 2, false)

	var got string
	err = db.Pool.QueryRow(ctx, `SELECT `+q(body)+` FROM `+q(schema, table)+` WHERE `+q(key)+` = $1`, hostileKey).Scan(&got)
	if err != nil || got != value {
		t.Fatalf("body = %q, %v; want %q", got, err, value)
	}
	if after := catalog(t, db.Pool); after != before {
		t.Fatalf("the catalog changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM x`); n != 1 {
		t.Fatalf("x has %d rows; want 1", n)
	}
}

// TestHostileResources uses guard resources and lease keys that look like
// SQL; they are values, stored and matched exactly.
func TestHostileResources(t *testing.T) {
	t.Parallel()
	db := newOutbox(t)
	ctx := context.Background()
	mustExec(t, db.Pool, `CREATE TABLE x (id int)`)
	before := catalog(t, db.Pool)

	names := []string{
		`'); DROP TABLE x; --`,
		`"; DROP TABLE x; --`,
		`' OR '1'='1`,
		`\'`,
		`$1`,
		`   spaces   `,
		`résumé ☃ 日本語`,
		`digests/daily`,
		"a\tb\nc",
	}
	for i, name := range names {
		g := sqlfence.Guard{Resource: name}
		token := int64(i + 2)
		if err := g.Claim(ctx, db.Pool, token, publish(ctx, token, name)); err != nil {
			t.Fatalf("claim %q: %v", name, err)
		}
		wantStale(t, g.Write(ctx, db.Pool, token-1, nil), name, token-1, token, false)
		_, err := db.Pool.Exec(ctx, `SELECT pgleader.fence_claim($1, $2)`, name, token)
		wantStale(t, sqlfence.FromError(err), name, token, token, true)
		if floor, err := g.Floor(ctx, db.Pool); err != nil || floor != token {
			t.Fatalf("floor %q = %d, %v; want %d", name, floor, err, token)
		}

		n := acquire(t, db.Pool, name, "owner "+name, time.Minute)
		if err := sqlfence.WithLease(ctx, db.Pool, name, n, nil); err != nil {
			t.Fatalf("lease guard %q: %v", name, err)
		}
		if err := sqlfence.WithLease(ctx, db.Pool, name, n+1, nil); !errors.Is(err, sqlfence.ErrLeaseNotHeld) {
			t.Fatalf("lease guard %q with a wrong token: %v", name, err)
		}
	}
	if n := count(t, db.Pool, `SELECT count(DISTINCT resource) FROM pgleader.fence`); n != len(names) {
		t.Fatalf("%d guard rows; want %d", n, len(names))
	}
	if after := catalog(t, db.Pool); after != before {
		t.Fatalf("the catalog changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}
