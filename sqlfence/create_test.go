package sqlfence_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/sqlfence"
)

// created is the recipe's table with a NOT NULL column, fenced with Create.
var created = sqlfence.Column{Table: pgx.Identifier{"digests"}, KeyColumn: "name", FenceColumn: "fence", Create: true}

func newCreateTable(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := newDigests(t, 0).Pool
	mustExec(t, pool, `ALTER TABLE digests ALTER COLUMN body SET DEFAULT 'none', ALTER COLUMN body SET NOT NULL`)
	return pool
}

// TestColumnCreate: with Create, Claim and Write insert a missing row, Floor
// reads it as 0, and an existing row keeps its fence check.
func TestColumnCreate(t *testing.T) {
	t.Parallel()
	pool := newCreateTable(t)
	ctx := context.Background()

	if floor, err := created.Floor(ctx, pool, "new"); err != nil || floor != 0 {
		t.Fatalf("floor of a missing row = %d, %v; want 0", floor, err)
	}
	if err := created.Write(ctx, pool, "new", 3, sqlfence.Assign("body", "first")); err != nil {
		t.Fatalf("write creating the row: %v", err)
	}
	if body, fence := readDigest(t, pool, "new"); body != "first" || fence != 3 {
		t.Fatalf("created row = %q at %d; want \"first\" at 3", body, fence)
	}
	wantStale(t, created.Write(ctx, pool, "new", 2, sqlfence.Assign("body", "stale")), "digests/new", 2, 3, false)
	if err := created.Write(ctx, pool, "new", 3, sqlfence.Assign("body", "second")); err != nil {
		t.Fatalf("write at the stored fence: %v", err)
	}
	if body, fence := readDigest(t, pool, "new"); body != "second" || fence != 3 {
		t.Fatalf("row = %q at %d; want \"second\" at 3", body, fence)
	}

	if err := created.Claim(ctx, pool, "claimed", 5); err != nil {
		t.Fatalf("claim creating the row: %v", err)
	}
	if body, fence := readDigest(t, pool, "claimed"); body != "none" || fence != 5 {
		t.Fatalf("row created by claim = %q at %d; want the default \"none\" at 5", body, fence)
	}
	wantStale(t, created.Claim(ctx, pool, "claimed", 5), "digests/claimed", 5, 5, true)
	if err := created.Claim(ctx, pool, "claimed", 6); err != nil {
		t.Fatal(err)
	}
	// The existing row "daily" (fence 0) is claimed and written as before.
	if err := created.Claim(ctx, pool, "daily", 1); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM digests`); n != 3 {
		t.Fatalf("%d rows; want daily, new and claimed", n)
	}

	// Without Create nothing is created.
	if err := digests.Write(ctx, pool, "absent", 1, sqlfence.Assign("body", "x")); !errors.Is(err, sqlfence.ErrNotFound) {
		t.Fatalf("write without Create: %v; want ErrNotFound", err)
	}
	if _, err := digests.Floor(ctx, pool, "absent"); !errors.Is(err, sqlfence.ErrNotFound) {
		t.Fatalf("floor without Create: %v; want ErrNotFound", err)
	}
}

// TestColumnCreateRefusals: Create refuses an assignment to the key column,
// a table without a unique key, and a NOT NULL column left unassigned, and
// creates nothing.
func TestColumnCreateRefusals(t *testing.T) {
	t.Parallel()
	pool := newCreateTable(t)
	ctx := context.Background()

	err := created.Write(ctx, pool, "k", 1, sqlfence.Assign("name", "other"))
	if !errors.Is(err, sqlfence.ErrInvalid) || !strings.Contains(err.Error(), "key column") {
		t.Fatalf("assigning the key column: %v; want ErrInvalid naming the key column", err)
	}

	mustExec(t, pool, `CREATE TABLE loose (name text, fence bigint)`)
	loose := sqlfence.Column{Table: pgx.Identifier{"loose"}, KeyColumn: "name", FenceColumn: "fence", Create: true}
	err = loose.Claim(ctx, pool, "k", 1)
	if !errors.Is(err, sqlfence.ErrInvalid) || !strings.Contains(err.Error(), `unique index on "name"`) {
		t.Fatalf("Create without a unique key: %v; want ErrInvalid naming the key column", err)
	}

	mustExec(t, pool, `CREATE TABLE strict (name text PRIMARY KEY, body text NOT NULL, fence bigint)`)
	strict := sqlfence.Column{Table: pgx.Identifier{"strict"}, KeyColumn: "name", FenceColumn: "fence", Create: true}
	if err := strict.Claim(ctx, pool, "k", 1); err == nil || !strings.Contains(err.Error(), "body") {
		t.Fatalf("claim leaving a NOT NULL column empty: %v; want PostgreSQL's not-null error", err)
	}
	if err := strict.Write(ctx, pool, "k", 1, sqlfence.Assign("body", "b")); err != nil {
		t.Fatalf("write assigning the NOT NULL column: %v", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM loose`) + count(t, pool, `SELECT count(*) FROM digests WHERE name = 'k'`); n != 0 {
		t.Fatalf("refused calls created %d rows", n)
	}
}

// TestColumnCreateWaitsForUncommittedRow: a session claiming a missing row
// waits for another session's uncommitted insert of the same key (a write of
// token 7), then goes through the fence check against it; if that insert
// rolls back, it inserts the row itself.
func TestColumnCreateWaitsForUncommittedRow(t *testing.T) {
	t.Parallel()
	pool := newCreateTable(t)
	ctx := context.Background()

	for _, c := range []struct {
		name      string
		commit    bool
		token     int64 // the second session's; the first claims 7
		wantErr   bool
		wantFence int64
		wantBody  string
	}{
		{"same token, commit", true, 7, true, 7, "a"},
		{"higher token, commit", true, 8, false, 8, "a"},
		{"same token, rollback", false, 7, false, 7, "none"},
	} {
		key := strings.ReplaceAll(c.name, " ", "")
		a, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Rollback(ctx) // after a failure; a no-op once committed
		if err := created.Write(ctx, a, key, 7, sqlfence.Assign("body", "a")); err != nil {
			t.Fatalf("%s: first session: %v", c.name, err)
		}
		conn := pgxConn(t, pool)
		pid := backendPID(t, conn)
		done := make(chan error, 1)
		go func() { done <- created.Claim(ctx, conn, key, c.token) }()
		waitLockWait(t, pool, pid, done)
		if c.commit {
			err = a.Commit(ctx)
		} else {
			err = a.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		err = receive(t, done)
		if c.wantErr {
			wantStale(t, err, "digests/"+key, c.token, 7, true)
		} else if err != nil {
			t.Fatalf("%s: second session: %v", c.name, err)
		}
		if body, fence := readDigest(t, pool, key); body != c.wantBody || fence != c.wantFence {
			t.Fatalf("%s: row = %q at %d; want %q at %d", c.name, body, fence, c.wantBody, c.wantFence)
		}
	}
}

// TestColumnCreateClaimRace: two holders of one token claim a row that does
// not exist yet, at once, on their own connections: exactly one creates it.
func TestColumnCreateClaimRace(t *testing.T) {
	t.Parallel()
	db := newDigests(t, 0)
	ctx := context.Background()
	pools := racePools(t, func(t *testing.T) *pgxpool.Pool {
		return db.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	})
	claimRace(t, pools, func(pool *pgxpool.Pool, token int64) error {
		return created.Claim(ctx, pool, fmt.Sprint("k", token), token)
	})
	if n := count(t, db.Pool, `SELECT count(*) FROM digests WHERE name LIKE 'k%'`); n != 200 {
		t.Fatalf("%d rows after 200 rounds; want one per round", n)
	}
}

// pgxConn is one connection of its own, closed when the test ends.
func pgxConn(t *testing.T, pool *pgxpool.Pool) *pgx.Conn {
	t.Helper()
	c, err := pgx.ConnectConfig(context.Background(), pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}
