package sqlfence_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgleader/pgleader/sqlfence"
)

// TestTriggerRefusesLowerFence: with the trigger installed, any UPDATE that
// lowers the fence (or sets it to NULL) is refused with an error naming the
// table and both tokens; keeping or raising it passes.
func TestTriggerRefusesLowerFence(t *testing.T) {
	t.Parallel()
	db := newDigests(t, 5)
	ctx := context.Background()

	for range 2 { // idempotent
		name, err := sqlfence.InstallTrigger(ctx, db.Pool, pgx.Identifier{"public", "digests"}, "fence")
		if err != nil || name != "pgleader_fence_fence" {
			t.Fatalf("install = %q, %v; want pgleader_fence_fence", name, err)
		}
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM pg_trigger WHERE tgrelid = 'digests'::regclass`); n != 1 {
		t.Fatalf("%d triggers after installing twice; want 1", n)
	}

	// A write path that forgot the fence condition.
	_, err := db.Pool.Exec(ctx, `UPDATE digests SET body = 'old term', fence = 3 WHERE name = 'daily'`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != sqlfence.CodeFenced || pgErr.TableName != "digests" {
		t.Fatalf("lowering update: %v; want SQLSTATE %s on table digests", err, sqlfence.CodeFenced)
	}
	for _, want := range []string{"public.digests", "token 3", "stored fence is 5"} {
		if !strings.Contains(pgErr.Message, want) {
			t.Errorf("message %q does not contain %q", pgErr.Message, want)
		}
	}
	wantStale(t, sqlfence.FromError(err), "public.digests", 3, 5, false)

	for _, q := range []string{
		`UPDATE digests SET fence = NULL`,
		`UPDATE digests SET fence = fence - 1`,
		`INSERT INTO digests (name, fence) VALUES ('daily', 4) ON CONFLICT (name) DO UPDATE SET fence = excluded.fence`,
	} {
		if _, err := db.Pool.Exec(ctx, q); !errors.Is(sqlfence.FromError(err), sqlfence.ErrFenced) {
			t.Errorf("%s: %v; want it refused", q, err)
		}
	}
	for _, q := range []string{
		`UPDATE digests SET body = 'same term', fence = 5`,
		`UPDATE digests SET body = 'fence untouched'`,
		`UPDATE digests SET fence = 6`,
		`INSERT INTO digests (name, fence) VALUES ('weekly', 1)`,
		`UPDATE digests SET fence = 2 WHERE name = 'weekly'`,
	} {
		if _, err := db.Pool.Exec(ctx, q); err != nil {
			t.Errorf("%s: %v; want it to pass", q, err)
		}
	}
	if body, fence := readDigest(t, db.Pool, "daily"); body != "fence untouched" || fence != 6 {
		t.Fatalf("row = %q, %d", body, fence)
	}
	// The column fence never trips it.
	if err := digests.Write(ctx, db.Pool, "daily", 6, sqlfence.Assign("body", "via Column")); err != nil {
		t.Fatal(err)
	}
}

func TestTriggerSQLAndBadTargets(t *testing.T) {
	t.Parallel()
	db := newDigests(t, 5)
	ctx := context.Background()
	long := strings.Repeat("f", 60)
	mustExec(t, db.Pool, `ALTER TABLE digests ADD COLUMN `+pgx.Identifier{long}.Sanitize()+` integer`)

	var name string
	err := db.Pool.QueryRow(ctx, `SELECT pgleader.install_fence_trigger('digests', $1)`, long).Scan(&name)
	if err != nil || !strings.HasPrefix(name, "pgleader_fence_") || len(name) > 63 {
		t.Fatalf("install on a 60-byte column = %q, %v", name, err)
	}
	mustExec(t, db.Pool, `UPDATE digests SET `+pgx.Identifier{long}.Sanitize()+` = 2`)
	if _, err := db.Pool.Exec(ctx, `UPDATE digests SET `+pgx.Identifier{long}.Sanitize()+` = 1`); !errors.Is(sqlfence.FromError(err), sqlfence.ErrFenced) {
		t.Fatalf("lowering the 60-byte column: %v; want refused", err)
	}

	bad := []struct {
		table  pgx.Identifier
		column string
	}{
		{pgx.Identifier{"nosuch"}, "fence"},
		{pgx.Identifier{"nosuch", "digests"}, "fence"},
		{pgx.Identifier{"digests"}, "nosuch"},
		{pgx.Identifier{"digests"}, "body"},  // not an integer
		{pgx.Identifier{"Digests"}, "fence"}, // identifiers are exact
	}
	for _, b := range bad {
		if _, err := sqlfence.InstallTrigger(ctx, db.Pool, b.table, b.column); !errors.Is(err, sqlfence.ErrInvalid) {
			t.Errorf("install on %v.%s: %v; want ErrInvalid", b.table, b.column, err)
		}
	}
}
