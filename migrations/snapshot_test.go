package migrations_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/migrations"
)

var update = flag.Bool("update", false, "TestSchemaSnapshot: write schema.sql from the catalog instead of comparing")

// snapshotFile is the checked-in catalog of the schema the migrations
// build; TestSchemaSnapshot keeps it true.
const snapshotFile = "schema.sql"

const snapshotHeader = `-- The catalog of the schema pgleader that the migrations in this directory
-- build, as PostgreSQL 13 to 18 report it: every table (with its columns,
-- constraints, indexes, triggers and comments), every function with its full
-- definition, and who may use what ("grants: none" means only the owner,
-- the role that migrated). Generated; do not edit. TestSchemaSnapshot fails
-- when a freshly migrated database differs from it; after a change to the
-- migrations, regenerate it with
--
--	make schema    (go test ./migrations -run '^TestSchemaSnapshot$' -update)
--
-- and review the difference with the migration.
`

// TestSchemaSnapshot migrates a fresh database and compares its catalog
// with schema.sql; with -update it writes schema.sql instead.
func TestSchemaSnapshot(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	if err := migrations.Up(context.Background(), db.Pool); err != nil {
		t.Fatal(err)
	}
	got := snapshotHeader + "\n" + catalog(t, db.Pool)
	if *update {
		if err := os.WriteFile(snapshotFile, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", snapshotFile)
		return
	}
	want, err := os.ReadFile(snapshotFile)
	if err != nil {
		t.Fatalf("%v (generate it with: make schema)", err)
	}
	if d := diffLines(string(want), got); d != "" {
		t.Errorf("the migrated schema differs from %s (- %s, + the database). If the change is meant, regenerate it with "+
			"make schema (go test ./migrations -run '^TestSchemaSnapshot$' -update) and commit it with the migration:\n%s",
			snapshotFile, snapshotFile, d)
	}
}

// TestSQLDocCoversTheSchema: docs/sql.md documents the functions of
// schema.sql, all of them (an application's as pgleader.name(…), the
// internal helpers by name), and names no SQL function schema.sql lacks.
func TestSQLDocCoversTheSchema(t *testing.T) {
	snapshot, err := os.ReadFile(snapshotFile)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../docs/sql.md")
	if err != nil {
		t.Fatal(err)
	}
	functions := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^-- function pgleader\.(\w+)\(`).FindAllStringSubmatch(string(snapshot), -1) {
		functions[m[1]] = true
	}
	if len(functions) < 50 {
		t.Fatalf("%s lists %d functions; the schema has more", snapshotFile, len(functions))
	}
	for name := range functions {
		want := "pgleader." + name + "("
		if strings.HasPrefix(name, "_") {
			want = "`" + name + "`"
		}
		if !strings.Contains(string(doc), want) {
			t.Errorf("docs/sql.md does not document %s (%s)", name, want)
		}
	}
	for _, m := range regexp.MustCompile(`pgleader\.([a-z_]+)\(`).FindAllStringSubmatch(string(doc), -1) {
		if !functions[m[1]] {
			t.Errorf("docs/sql.md names pgleader.%s(, which %s does not list", m[1], snapshotFile)
		}
	}
}

// catalogSQL lists every object of the schema pgleader, one row per object or
// part of one, with a key that orders them: the schema, then each table
// with its comment, columns (in order), constraints, indexes and triggers,
// then each function with its full definition. What PostgreSQL 13 to 18
// report differently is left out or normalized: NOT NULL constraints
// (listed in pg_constraint from 18 on; the columns say NOT NULL), and the
// owner's own privileges (17 added MAINTAIN); the owner is named only where
// an object's differs from the schema's.
const catalogSQL = `
WITH ns AS (
    SELECT n.oid, n.nspowner FROM pg_catalog.pg_namespace AS n WHERE n.nspname = 'pgleader'
), rel AS (
    SELECT c.oid, c.relname, c.relkind, c.relpersistence, c.reloptions, c.relowner, c.relacl,
           CASE WHEN c.relkind = 'i'
                THEN (SELECT t.relname FROM pg_catalog.pg_index AS x JOIN pg_catalog.pg_class AS t ON t.oid = x.indrelid
                       WHERE x.indexrelid = c.oid)
                ELSE c.relname END AS under
      FROM pg_catalog.pg_class AS c JOIN ns ON ns.oid = c.relnamespace
), grants AS (
    -- Every privilege on an object but its owner's, as "grantee privilege".
    SELECT o.oid, o.kind,
           coalesce(string_agg(CASE a.grantee WHEN 0 THEN 'PUBLIC' ELSE pg_catalog.pg_get_userbyid(a.grantee) END
                               || ' ' || a.privilege_type, ', '
                               ORDER BY CASE a.grantee WHEN 0 THEN 'PUBLIC' ELSE pg_catalog.pg_get_userbyid(a.grantee) END,
                                        a.privilege_type), 'none') AS list
      FROM (SELECT n.oid, 'n'::"char" AS kind, n.nspowner AS owner, coalesce(n.nspacl, acldefault('n', n.nspowner)) AS acl
              FROM pg_catalog.pg_namespace AS n JOIN ns ON ns.oid = n.oid
            UNION ALL
            SELECT c.oid, 'r', c.relowner, coalesce(c.relacl, acldefault('r', c.relowner)) FROM rel AS c
            UNION ALL
            SELECT p.oid, 'f', p.proowner, coalesce(p.proacl, acldefault('f', p.proowner))
              FROM pg_catalog.pg_proc AS p JOIN ns ON ns.oid = p.pronamespace) AS o
      LEFT JOIN LATERAL aclexplode(o.acl) AS a ON a.grantee <> o.owner
     GROUP BY o.oid, o.kind
)
SELECT line FROM (
    SELECT 'a' AS key, '-- schema pgleader; grants: ' || g.list AS line
      FROM ns JOIN grants AS g ON g.oid = ns.oid AND g.kind = 'n'
    UNION ALL
    SELECT 'b ' || c.relname || ' 0',
           '-- ' || CASE c.relkind WHEN 'r' THEN 'table' WHEN 'S' THEN 'sequence' WHEN 'v' THEN 'view'
                                   ELSE 'relation of kind ' || c.relkind::text END
           || ' pgleader.' || c.relname
           || CASE c.relpersistence WHEN 'u' THEN ' UNLOGGED' ELSE '' END
           || coalesce(' WITH (' || array_to_string(c.reloptions, ', ') || ')', '')
           || CASE WHEN c.relowner = (SELECT nspowner FROM ns) THEN '' ELSE '; owner ' || pg_catalog.pg_get_userbyid(c.relowner) END
           || '; grants: ' || g.list
      FROM rel AS c JOIN grants AS g ON g.oid = c.oid AND g.kind = 'r'
     WHERE c.relkind <> 'i'
    UNION ALL
    SELECT 'b ' || c.relname || ' 1', '--   comment ' || obj_description(c.oid, 'pg_class')
      FROM rel AS c WHERE obj_description(c.oid, 'pg_class') IS NOT NULL
    UNION ALL
    SELECT 'b ' || c.relname || ' 2 ' || lpad(a.attnum::text, 4, '0'),
           '--   column ' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
           || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
           || coalesce(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid), '')
           || coalesce(E'\n--     comment ' || col_description(c.oid, a.attnum), '')
      FROM rel AS c JOIN pg_catalog.pg_attribute AS a ON a.attrelid = c.oid
      LEFT JOIN pg_catalog.pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
     WHERE c.relkind <> 'i' AND a.attnum > 0 AND NOT a.attisdropped
    UNION ALL
    SELECT 'b ' || c.relname || ' 3 ' || co.conname, '--   constraint ' || co.conname || ' ' || pg_get_constraintdef(co.oid)
      FROM pg_catalog.pg_constraint AS co JOIN rel AS c ON c.oid = co.conrelid
     WHERE co.contype <> 'n'
    UNION ALL
    SELECT 'b ' || c.under || ' 4 ' || c.relname, '--   ' || pg_get_indexdef(c.oid)
      FROM rel AS c WHERE c.relkind = 'i'
    UNION ALL
    SELECT 'b ' || c.relname || ' 5 ' || tg.tgname, '--   ' || pg_get_triggerdef(tg.oid)
      FROM pg_catalog.pg_trigger AS tg JOIN rel AS c ON c.oid = tg.tgrelid
     WHERE NOT tg.tgisinternal
    UNION ALL
    SELECT 'c ' || p.oid::regprocedure::text,
           '-- function ' || p.oid::regprocedure::text
           || CASE WHEN p.proowner = (SELECT nspowner FROM ns) THEN '' ELSE '; owner ' || pg_catalog.pg_get_userbyid(p.proowner) END
           || '; grants: ' || g.list || E'\n'
           || rtrim(pg_get_functiondef(p.oid), E'\n') || ';'
      FROM pg_catalog.pg_proc AS p JOIN ns ON ns.oid = p.pronamespace
      JOIN grants AS g ON g.oid = p.oid AND g.kind = 'f'
) AS lines
ORDER BY key COLLATE "C"`

// catalog describes every object in the schema pgleader (catalogSQL), so
// two states of the schema can be compared and one can be checked in. A
// blank line separates objects; "" when there is no schema.
func catalog(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	rows, err := pool.Query(context.Background(), catalogSQL)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		if b.Len() > 0 && !strings.HasPrefix(s, "--  ") {
			b.WriteByte('\n')
		}
		b.WriteString(s)
		b.WriteByte('\n')
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// diffLines is a line diff of a and b: each run of changed lines, as "-"
// and "+" lines, after the last line above it that starts an object (a
// line that starts with "-- table" or "-- function") and its line number
// in a; "" when they are equal.
func diffLines(a, b string) string {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	// lcs[i][j]: the longest common subsequence of x[i:] and y[j:].
	lcs := make([][]int32, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int32, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var d strings.Builder
	object, objectLine := "", 0
	inHunk := false
	hunk := func(i int) {
		if inHunk {
			return
		}
		inHunk = true
		if object == "" {
			fmt.Fprintf(&d, "@@ %s:%d\n", snapshotFile, i+1)
			return
		}
		fmt.Fprintf(&d, "@@ %s:%d, in %s (line %d)\n", snapshotFile, i+1, object, objectLine)
	}
	for i, j := 0, 0; i < len(x) || j < len(y); {
		switch {
		case i < len(x) && j < len(y) && x[i] == y[j]:
			if strings.HasPrefix(x[i], "-- table ") || strings.HasPrefix(x[i], "-- function ") {
				object, objectLine = x[i], i+1
			}
			inHunk = false
			i++
			j++
		case i < len(x) && (j == len(y) || lcs[i+1][j] >= lcs[i][j+1]):
			hunk(i)
			fmt.Fprintf(&d, "- %s\n", x[i])
			i++
		default:
			hunk(i)
			fmt.Fprintf(&d, "+ %s\n", y[j])
			j++
		}
	}
	return d.String()
}
