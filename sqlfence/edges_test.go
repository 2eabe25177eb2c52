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

// TestBadKeyCheckedInGo: a Column key PostgreSQL cannot store as text is
// refused as ErrInvalid, not with the server's encoding error.
func TestBadKeyCheckedInGo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDigests(t, 5).Pool
	c := sqlfence.Column{Table: pgx.Identifier{"digests"}, KeyColumn: "name", FenceColumn: "fence"}
	_, floorErr := c.Floor(ctx, db, "a\x00b")
	for name, err := range map[string]error{
		"claim NUL":         c.Claim(ctx, db, "a\x00b", 1),
		"write NUL":         c.Write(ctx, db, "a\x00b", 1),
		"floor NUL":         floorErr,
		"claim invalid UTF": c.Claim(ctx, db, "\xff", 1),
	} {
		if !errors.Is(err, sqlfence.ErrInvalid) || !strings.Contains(err.Error(), "key") {
			t.Errorf("%s: err = %v; want ErrInvalid about the key", name, err)
		}
	}
}

// TestTokenLimit: tokens above 2^62-1 are refused, so every stored fence can
// serve as a lease's floor.
func TestTokenLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := unreachable{t}
	const limit = 1<<62 - 1
	var tx pgx.Tx
	c := sqlfence.Column{Table: pgx.Identifier{"digests"}, KeyColumn: "name", FenceColumn: "fence"}
	g := sqlfence.Guard{Resource: "r"}
	for name, err := range map[string]error{
		"column claim":   c.Claim(ctx, db, "k", limit+1),
		"column write":   c.Write(ctx, db, "k", 1<<63-1),
		"guard write":    g.Write(ctx, db, limit+1, nil),
		"guard claim tx": g.ClaimTx(ctx, tx, limit+1),
	} {
		if !errors.Is(err, sqlfence.ErrInvalid) || !strings.Contains(err.Error(), "4611686018427387903") {
			t.Errorf("%s: err = %v; want ErrInvalid naming the limit", name, err)
		}
	}
}

// TestTriggerAfterRenamedColumn: renaming the fence column must not turn
// the trigger into one that lets every lowering update through.
func TestTriggerAfterRenamedColumn(t *testing.T) {
	t.Parallel()
	db := newDigests(t, 5)
	ctx := context.Background()
	if _, err := sqlfence.InstallTrigger(ctx, db.Pool, pgx.Identifier{"digests"}, "fence"); err != nil {
		t.Fatal(err)
	}
	mustExec(t, db.Pool, `ALTER TABLE digests RENAME COLUMN fence TO term`)
	_, err := db.Pool.Exec(ctx, `UPDATE digests SET term = 1`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		t.Fatalf("lowering update after the rename: %v; want it refused", err)
	}
	for _, want := range []string{"public.digests", `"fence"`} {
		if !strings.Contains(pgErr.Message, want) {
			t.Errorf("message %q does not name %s", pgErr.Message, want)
		}
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM digests WHERE term = 5`); n != 1 {
		t.Fatalf("the fence was lowered")
	}
	// Installing it again on the new name fences the table again.
	if _, err := sqlfence.InstallTrigger(ctx, db.Pool, pgx.Identifier{"digests"}, "term"); err != nil {
		t.Fatal(err)
	}
	mustExec(t, db.Pool, `DROP TRIGGER pgleader_fence_fence ON digests`)
	_, err = db.Pool.Exec(ctx, `UPDATE digests SET term = 1`)
	if !errors.Is(sqlfence.FromError(err), sqlfence.ErrFenced) {
		t.Fatalf("lowering update after reinstalling: %v; want ErrFenced", err)
	}
}

// TestTriggerInstallWithoutCreateOrReplace: CREATE OR REPLACE TRIGGER is
// PostgreSQL 14 and later; the installer must not use it.
func TestTriggerInstallWithoutCreateOrReplace(t *testing.T) {
	t.Parallel()
	db := newDigests(t, 5)
	def := ""
	if err := db.Pool.QueryRow(context.Background(),
		`SELECT pg_get_functiondef('pgleader.install_fence_trigger(regclass, name)'::regprocedure)`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.ToUpper(def), "OR REPLACE TRIGGER") {
		t.Fatalf("install_fence_trigger uses CREATE OR REPLACE TRIGGER, which PostgreSQL 13 lacks")
	}
}
