package sqlfence_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/migrations"
	"github.com/pgleader/pgleader/sqlfence"
)

// schemaDump describes every object outside the system catalogs: relations,
// columns, constraints, indexes, functions (by definition), triggers and
// comments. Two equal dumps mean the same schema.
func schemaDump(t *testing.T, db sqlfence.Querier) string {
	t.Helper()
	var s *string
	err := db.QueryRow(context.Background(), `
		WITH ns AS (
		    SELECT oid, nspname FROM pg_namespace
		     WHERE nspname NOT IN ('pg_catalog', 'information_schema') AND nspname NOT LIKE 'pg\_toast%'
		       AND nspname NOT LIKE 'pg\_temp%')
		SELECT string_agg(line, E'\n' ORDER BY line) FROM (
		    SELECT 'schema ' || nspname || ' ' || coalesce(obj_description(oid, 'pg_namespace'), '') FROM ns
		    UNION ALL
		    SELECT 'relation ' || c.oid::regclass::text || ' ' || c.relkind::text || ' ' || coalesce(obj_description(c.oid, 'pg_class'), '')
		      FROM pg_class c JOIN ns ON ns.oid = c.relnamespace
		    UNION ALL
		    SELECT 'column ' || c.oid::regclass::text || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
		           || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
		           || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
		      FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN ns ON ns.oid = c.relnamespace
		      LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		     WHERE a.attnum > 0 AND NOT a.attisdropped
		    UNION ALL
		    SELECT 'constraint ' || co.conrelid::regclass::text || ' ' || co.conname || ' ' || pg_get_constraintdef(co.oid)
		      FROM pg_constraint co JOIN ns ON ns.oid = co.connamespace
		    UNION ALL
		    SELECT 'index ' || pg_get_indexdef(i.indexrelid)
		      FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN ns ON ns.oid = c.relnamespace
		    UNION ALL
		    SELECT 'function ' || p.oid::regprocedure::text || ' ' || md5(pg_get_functiondef(p.oid))
		      FROM pg_proc p JOIN ns ON ns.oid = p.pronamespace
		    UNION ALL
		    SELECT 'trigger ' || pg_get_triggerdef(tg.oid) FROM pg_trigger tg WHERE NOT tg.tgisinternal
		) AS lines(line)`).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	if s == nil {
		return ""
	}
	return *s
}

// TestMigrationRoundTrip: going down drops exactly what going up created,
// and the fence triggers on application tables with it (the tables stay),
// so up, down and up again leave identical catalogs.
func TestMigrationRoundTrip(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	ctx := context.Background()
	mustExec(t, db.Pool, `CREATE TABLE digests (name text PRIMARY KEY, body text, fence bigint)`)
	step := func(name string, migrate func(context.Context, *pgxpool.Pool) error) string {
		t.Helper()
		if err := migrate(ctx, db.Pool); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return schemaDump(t, db.Pool)
	}

	up := step("up", migrations.Up)
	if !strings.Contains(up, "relation pgleader.fence r") || !strings.Contains(up, "pgleader.lease_guard(text,bigint)") {
		t.Fatalf("the schema lacks the fence objects:\n%s", up)
	}
	if _, err := sqlfence.InstallTrigger(ctx, db.Pool, pgx.Identifier{"digests"}, "fence"); err != nil {
		t.Fatal(err)
	}
	if got := schemaDump(t, db.Pool); !strings.Contains(got, "TRIGGER pgleader_fence_fence AFTER UPDATE ON public.digests") {
		t.Fatalf("no fence trigger on digests:\n%s", got)
	}
	down := step("down", migrations.Down)
	if strings.Contains(down, "pgleader.") || strings.Contains(down, "trigger ") || !strings.Contains(down, "relation digests r") {
		t.Fatalf("after down: want no pgleader object and no trigger left, and the table kept:\n%s", down)
	}
	if got := step("up again", migrations.Up); got != up {
		t.Fatalf("after up, down, up the catalog differs:\nwant:\n%s\ngot:\n%s", up, got)
	}
	if v, dirty, err := migrations.Version(ctx, db.Pool); err != nil || dirty || v != migrations.Latest {
		t.Fatalf("version = %d (dirty %v), %v; want %d", v, dirty, err, migrations.Latest)
	}
}
