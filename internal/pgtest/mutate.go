package pgtest

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Mutate takes a defence out of a database's pgleader schema, for a control
// that shows a test would fail on a schema without what it guards: in the
// definition of function fn (a regprocedure, e.g. "pgleader._grace()") it
// replaces the one occurrence of old with new, and creates the function
// again. It fails the test if old does not occur exactly once, so a control
// cannot silently stop mutating when the function changes.
func Mutate(t testing.TB, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, fn, old, new string) {
	t.Helper()
	ctx := context.Background()
	var def string
	if err := db.QueryRow(ctx, `SELECT pg_get_functiondef($1::regprocedure)`, fn).Scan(&def); err != nil {
		t.Fatalf("definition of %s: %v", fn, err)
	}
	if n := strings.Count(def, old); n != 1 {
		t.Fatalf("mutate %s: %q occurs %d times in its definition; want once:\n%s", fn, old, n, def)
	}
	if _, err := db.Exec(ctx, strings.Replace(def, old, new, 1)); err != nil {
		t.Fatalf("mutate %s: %v", fn, err)
	}
}
