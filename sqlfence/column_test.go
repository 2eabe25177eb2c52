package sqlfence_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/sqlfence"
)

var digests = sqlfence.Column{Table: pgx.Identifier{"digests"}, KeyColumn: "name", FenceColumn: "fence"}

// newDigests returns a database with the recipe's table, unchanged, and one
// row "daily" whose fence is fence.
func newDigests(t *testing.T, fence any) *pgtest.DB {
	t.Helper()
	db := pgtest.New(t)
	mustExec(t, db.Pool, `CREATE TABLE digests (name text PRIMARY KEY, body text, fence bigint)`)
	mustExec(t, db.Pool, `INSERT INTO digests (name, body, fence) VALUES ('daily', '', $1)`, fence)
	return db
}

func readDigest(t *testing.T, db sqlfence.Querier, name string) (body string, fence int64) {
	t.Helper()
	err := db.QueryRow(context.Background(), `SELECT body, fence FROM digests WHERE name = $1`, name).Scan(&body, &fence)
	if err != nil {
		t.Fatal(err)
	}
	return body, fence
}

// TestColumnStaleHolderRefused: term N claims and writes, term N+1 claims;
// N's next write and a repeated claim are refused and change nothing.
func TestColumnStaleHolderRefused(t *testing.T) {
	t.Parallel()
	db := newDigests(t, 0)
	ctx := context.Background()

	if err := digests.Claim(ctx, db.Pool, "daily", 3); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"a #1", "a #2"} { // later writes accept an equal fence
		if err := digests.Write(ctx, db.Pool, "daily", 3, sqlfence.Assign("body", body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := digests.Claim(ctx, db.Pool, "daily", 4); err != nil {
		t.Fatal(err)
	}
	if err := digests.Write(ctx, db.Pool, "daily", 4, sqlfence.Assign("body", "b #1")); err != nil {
		t.Fatal(err)
	}

	err := digests.Write(ctx, db.Pool, "daily", 3, sqlfence.Assign("body", "a #3"))
	wantStale(t, err, "digests/daily", 3, 4, false)
	const msg = `sqlfence: resource "digests/daily" fenced: token 3 is stale, stored fence is 4`
	if err.Error() != msg {
		t.Fatalf("message = %q, want %q", err, msg)
	}
	wantStale(t, digests.Claim(ctx, db.Pool, "daily", 3), "digests/daily", 3, 4, true)
	wantStale(t, digests.Claim(ctx, db.Pool, "daily", 4), "digests/daily", 4, 4, true)
	wantStale(t, digests.Write(ctx, db.Pool, "daily", 3), "digests/daily", 3, 4, false)

	if body, fence := readDigest(t, db.Pool, "daily"); body != "b #1" || fence != 4 {
		t.Fatalf("row = %q, %d; want the newer term's %q, 4", body, fence, "b #1")
	}
	if floor, err := digests.Floor(ctx, db.Pool, "daily"); err != nil || floor != 4 {
		t.Fatalf("floor = %d, %v; want 4", floor, err)
	}
}

// TestColumnNullFence: a row never fenced (NULL) is lower than every token.
func TestColumnNullFence(t *testing.T) {
	t.Parallel()
	db := newDigests(t, nil)
	ctx := context.Background()

	if floor, err := digests.Floor(ctx, db.Pool, "daily"); err != nil || floor != 0 {
		t.Fatalf("floor of a NULL fence = %d, %v; want 0", floor, err)
	}
	if err := digests.Claim(ctx, db.Pool, "daily", 1); err != nil {
		t.Fatal(err)
	}
	mustExec(t, db.Pool, `UPDATE digests SET fence = NULL`)
	if err := digests.Write(ctx, db.Pool, "daily", 1, sqlfence.Assign("body", "x")); err != nil {
		t.Fatal(err)
	}
	if body, fence := readDigest(t, db.Pool, "daily"); body != "x" || fence != 1 {
		t.Fatalf("row = %q, %d; want x, 1", body, fence)
	}
}

func TestColumnNotFound(t *testing.T) {
	t.Parallel()
	db := newDigests(t, 0)
	ctx := context.Background()

	calls := map[string]error{
		"claim": digests.Claim(ctx, db.Pool, "weekly", 1),
		"write": digests.Write(ctx, db.Pool, "weekly", 1, sqlfence.Assign("body", "x")),
	}
	_, calls["floor"] = digests.Floor(ctx, db.Pool, "weekly")
	for name, err := range calls {
		if !errors.Is(err, sqlfence.ErrNotFound) || errors.Is(err, sqlfence.ErrFenced) {
			t.Errorf("%s of a missing row: %v; want ErrNotFound only", name, err)
		}
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM digests`); n != 1 {
		t.Fatalf("%d rows; want 1", n)
	}
}

// TestColumnWriteAssignments: several columns of several types, inside a
// caller's transaction and on a schema-qualified table given as []string.
func TestColumnWriteAssignments(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	mustExec(t, db.Pool, `CREATE SCHEMA app`)
	mustExec(t, db.Pool, `CREATE TABLE app.jobs (id bigint PRIMARY KEY, state text, tries int, payload jsonb, term integer NOT NULL DEFAULT 0)`)
	mustExec(t, db.Pool, `INSERT INTO app.jobs (id) VALUES (7)`)
	jobs := sqlfence.Column{Table: []string{"app", "jobs"}, KeyColumn: "id", FenceColumn: "term"}

	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if err := jobs.Claim(ctx, tx, int64(7), 2); err != nil {
			return err
		}
		return jobs.Write(ctx, tx, int64(7), 2,
			sqlfence.Assign("state", "done"), sqlfence.Assign("tries", 3), sqlfence.Assign("payload", map[string]int{"n": 1}))
	})
	if err != nil {
		t.Fatal(err)
	}
	var state, payload string
	var tries, term int
	err = db.Pool.QueryRow(ctx, `SELECT state, tries, payload::text, term FROM app.jobs WHERE id = 7`).
		Scan(&state, &tries, &payload, &term)
	if err != nil || state != "done" || tries != 3 || payload != `{"n": 1}` || term != 2 {
		t.Fatalf("row = %q %d %s %d, %v", state, tries, payload, term, err)
	}
	wantStale(t, jobs.Write(ctx, db.Pool, int64(7), 1, sqlfence.Assign("state", "x")), "app.jobs/7", 1, 2, false)
}
