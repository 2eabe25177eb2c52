package main

import (
	"context"
	"crypto/rand"
	"errors"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/lib/pq"

	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/sqlfence"
)

// TestStaleTermRefused: term 1 writes in all three strengths through
// lib/pq, term 2 takes the lease and writes, and each of term 1's late
// writes is refused: the column and the guard as fenced (with both
// tokens), the lease guard as not holding the lease. The digest stays term
// 2's. The migrations were applied through lib/pq too (Open).
func TestStaleTermRefused(t *testing.T) {
	ctx := context.Background()
	backend, db, closeAll, err := Open(ctx, testDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	if _, ok := db.Driver().(*pq.Driver); !ok {
		t.Fatalf("the writes' driver is %T; want lib/pq's", db.Driver())
	}
	spec := pgleader.Spec{Key: key}
	writeAll := func(token int64, body string) error {
		return errors.Join(WriteColumn(ctx, db, token, "daily", body), WriteGuarded(ctx, db, token, "daily", body),
			WriteUnderLease(ctx, db, token, "daily", body))
	}
	var first, second int64
	for _, tok := range []*int64{&first, &second} {
		err := pgleader.Do(ctx, backend, spec, func(ctx context.Context, term *pgleader.Term) error {
			*tok = term.Token()
			return writeAll(term.Token(), "term "+strconv.FormatInt(term.Token(), 10))
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if second <= first {
		t.Fatalf("term 2's token %d is not above term 1's %d", second, first)
	}

	var stale *sqlfence.StaleError
	if err := WriteColumn(ctx, db, first, "daily", "late"); !errors.As(err, &stale) || !errors.Is(err, sqlfence.ErrFenced) ||
		stale.Token != first || stale.Stored != second {
		t.Errorf("term 1's late column write: %v; want ErrFenced, token %d refused at %d", err, first, second)
	}
	if err := WriteGuarded(ctx, db, first, "daily", "late"); !errors.As(err, &stale) || !errors.Is(err, sqlfence.ErrFenced) ||
		stale.Token != first || stale.Stored != second {
		t.Errorf("term 1's late guarded write: %v; want ErrFenced, token %d refused at %d", err, first, second)
	}
	if err := WriteUnderLease(ctx, db, first, "daily", "late"); !errors.Is(err, sqlfence.ErrLeaseNotHeld) {
		t.Errorf("term 1's late write under its lease: %v; want ErrLeaseNotHeld", err)
	}
	var body string
	if err := db.QueryRowContext(ctx, `SELECT body FROM digests WHERE name = 'daily'`).Scan(&body); err != nil || body != "term 2" {
		t.Fatalf("digest = %q, %v; want term 2's", body, err)
	}
}

// TestRun: the command writes the digest once under the lease.
func TestRun(t *testing.T) {
	ctx := context.Background()
	dsn := testDSN(t)
	if err := run(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	_, db, closeAll, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	var body string
	if err := db.QueryRowContext(ctx, `SELECT body FROM digests WHERE name = 'daily'`).Scan(&body); err != nil || !strings.HasPrefix(body, "by term ") {
		t.Fatalf("digest = %q, %v; want one written by a term", body, err)
	}
}

// testDSN creates a database pgleader_test_libpq_…, dropped when the test
// ends, and returns its URL. The server is the one of
// PGLEADER_TEST_DATABASE_URL, else of DATABASE_URL, else PostgreSQL on
// 127.0.0.1:5432 as postgres; the role must be allowed to create databases.
func testDSN(t *testing.T) string {
	t.Helper()
	server := os.Getenv("PGLEADER_TEST_DATABASE_URL")
	if server == "" {
		server = os.Getenv("DATABASE_URL")
	}
	if server == "" {
		server = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	u, err := url.Parse(server)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		t.Fatalf("no PostgreSQL at %s: set DATABASE_URL to a server whose role may create databases, or start one on 127.0.0.1:5432 with user postgres: %v", u.Redacted(), err)
	}
	t.Cleanup(func() { _ = admin.Close(ctx) })
	name := "pgleader_test_libpq_" + strings.ToLower(rand.Text()[:16])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") })
	q := u.Query()
	if q.Get("sslmode") == "" {
		q.Set("sslmode", "disable") // lib/pq asks for TLS by default
	}
	u.Path, u.RawQuery = "/"+name, q.Encode()
	return u.String()
}
