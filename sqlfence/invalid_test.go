package sqlfence_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/sqlfence"
)

// unreachable fails the test if a refused call reaches the database.
type unreachable struct{ t *testing.T }

func (u unreachable) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	u.t.Error("Exec called on bad input")
	return pgconn.CommandTag{}, errors.New("unreachable")
}

func (u unreachable) QueryRow(context.Context, string, ...any) pgx.Row {
	u.t.Error("QueryRow called on bad input")
	return nil
}

func (u unreachable) Begin(context.Context) (pgx.Tx, error) {
	u.t.Error("Begin called on bad input")
	return nil, errors.New("unreachable")
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := unreachable{t}
	var tx pgx.Tx // never used: the input is refused first
	ok := sqlfence.Column{Table: pgx.Identifier{"digests"}, KeyColumn: "name", FenceColumn: "fence"}
	with := func(f func(*sqlfence.Column)) sqlfence.Column { c := ok; f(&c); return c }
	long := strings.Repeat("r", sqlfence.MaxResourceLen+1)
	ident64 := strings.Repeat("i", 64)

	cases := []struct {
		name string
		err  error
		want string
	}{
		{"no table", with(func(c *sqlfence.Column) { c.Table = nil }).Claim(ctx, db, "k", 1), "table must be"},
		{"three-part table", with(func(c *sqlfence.Column) { c.Table = pgx.Identifier{"a", "b", "c"} }).Claim(ctx, db, "k", 1), "got 3 parts"},
		{"empty table", with(func(c *sqlfence.Column) { c.Table = pgx.Identifier{"public", ""} }).Claim(ctx, db, "k", 1), "table must not be empty"},
		{"empty key column", with(func(c *sqlfence.Column) { c.KeyColumn = "" }).Write(ctx, db, "k", 1), "key column must not be empty"},
		{"empty fence column", with(func(c *sqlfence.Column) { c.FenceColumn = "" }).Claim(ctx, db, "k", 1), "fence column must not be empty"},
		{"key is fence", with(func(c *sqlfence.Column) { c.KeyColumn = "fence" }).Claim(ctx, db, "k", 1), "both"},
		{"NUL in identifier", with(func(c *sqlfence.Column) { c.Table = pgx.Identifier{"dig\x00ests"} }).Claim(ctx, db, "k", 1), "without NUL"},
		{"identifier too long", with(func(c *sqlfence.Column) { c.FenceColumn = ident64 }).Claim(ctx, db, "k", 1), "64 bytes; the limit is 63"},
		{"invalid UTF-8 identifier", with(func(c *sqlfence.Column) { c.KeyColumn = "\xff" }).Claim(ctx, db, "k", 1), "valid UTF-8"},
		{"column token 0", ok.Claim(ctx, db, "k", 0), "token must be positive, got 0"},
		{"column token -1", ok.Write(ctx, db, "k", -1), "token must be positive, got -1"},
		{"set empty column", ok.Write(ctx, db, "k", 1, sqlfence.Assign("", 1)), "column must not be empty"},
		{"set fence column", ok.Write(ctx, db, "k", 1, sqlfence.Assign("fence", 1)), "fence column"},
		{"set twice", ok.Write(ctx, db, "k", 1, sqlfence.Assign("body", 1), sqlfence.Assign("body", 2)), "assigned twice"},
		{"floor empty key column", func() error {
			_, err := with(func(c *sqlfence.Column) { c.KeyColumn = "" }).Floor(ctx, db, "k")
			return err
		}(), "key column must not be empty"},
		{"guard empty resource", sqlfence.Guard{}.Write(ctx, db, 1, nil), "resource must not be empty"},
		{"guard long resource", sqlfence.Guard{Resource: long}.Claim(ctx, db, 1, nil), "201 bytes; the limit is 200"},
		{"guard NUL resource", sqlfence.Guard{Resource: "a\x00"}.WriteTx(ctx, tx, 1), "without NUL"},
		{"guard token 0", sqlfence.Guard{Resource: "r"}.ClaimTx(ctx, tx, 0), "token must be positive"},
		{"guard floor empty", func() error { _, err := sqlfence.Guard{}.Floor(ctx, db); return err }(), "resource must not be empty"},
		{"lease empty key", sqlfence.WithLease(ctx, db, "", 1, nil), "key must not be empty"},
		{"lease token 0", sqlfence.LeaseGuardTx(ctx, tx, "k", 0), "token must be positive"},
		{"lease long key", sqlfence.WithLease(ctx, db, long, 1, nil), "201 bytes"},
		{"trigger empty column", func() error {
			_, err := sqlfence.InstallTrigger(ctx, db, pgx.Identifier{"digests"}, "")
			return err
		}(), "fence column must not be empty"},
		{"trigger no table", func() error { _, err := sqlfence.InstallTrigger(ctx, db, nil, "fence"); return err }(), "table must be"},
	}
	for _, c := range cases {
		if !errors.Is(c.err, sqlfence.ErrInvalid) || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: err = %v; want ErrInvalid containing %q", c.name, c.err, c.want)
		}
	}
}

// TestBadInputSQL: the SQL functions refuse the same input for callers that
// bypass Go, with SQLSTATE 22023, and store nothing.
func TestBadInputSQL(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	for _, q := range []string{
		`SELECT pgleader.fence_claim('', 1)`,
		`SELECT pgleader.fence_claim(NULL, 1)`,
		`SELECT pgleader.fence_write('r', 0)`,
		`SELECT pgleader.fence_write('r', NULL)`,
		`SELECT pgleader.fence_write(repeat('r', 201), 1)`,
		`SELECT pgleader.fence_floor('')`,
		`SELECT pgleader.lease_guard('', 1)`,
		`SELECT pgleader.lease_guard('k', 0)`,
		`SELECT pgleader.install_fence_trigger(NULL, 'fence')`,
	} {
		var pgErr *pgconn.PgError
		_, err := db.Pool.Exec(ctx, q)
		if !errors.As(err, &pgErr) || pgErr.Code != "22023" || !strings.HasPrefix(pgErr.Message, "pgleader: ") {
			t.Errorf("%s: err = %v; want SQLSTATE 22023 with a pgleader message", q, err)
		}
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM pgleader.fence`); n != 0 {
		t.Fatalf("refused calls left %d guard rows", n)
	}
}

// TestNotMigrated: without the schema, or with a schema pgleader that lacks
// the functions, the guard and lease operations say how to migrate.
func TestNotMigrated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	empty := pgtest.NewEmpty(t)
	bare := pgtest.NewEmpty(t)
	mustExec(t, bare.Pool, `CREATE SCHEMA pgleader`)
	for name, db := range map[string]*pgtest.DB{"empty": empty, "an empty schema pgleader": bare} {
		mustExec(t, db.Pool, `CREATE TABLE digests (name text PRIMARY KEY, fence bigint)`)
		g := sqlfence.Guard{Resource: "r"}
		calls := map[string]error{
			"guard write": g.Write(ctx, db.Pool, 1, nil),
			"guard claim": g.Claim(ctx, db.Pool, 1, nil),
			"with lease":  sqlfence.WithLease(ctx, db.Pool, "k", 1, nil),
		}
		_, calls["floor"] = g.Floor(ctx, db.Pool)
		_, calls["trigger"] = sqlfence.InstallTrigger(ctx, db.Pool, pgx.Identifier{"digests"}, "fence")
		for call, err := range calls {
			if !errors.Is(err, sqlfence.ErrNotMigrated) || !strings.Contains(err.Error(), "migrations.Up") {
				t.Errorf("%s on %s: %v; want ErrNotMigrated naming migrations.Up", call, name, err)
			}
		}
	}
}
