package main

import (
	"context"
	"crypto/rand"
	"errors"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/sqlfence"
)

// TestStaleTermRefused: term 1 publishes through GORM, term 2 takes the
// lease and publishes, and term 1's late write is refused as fenced; the
// digest stays term 2's.
func TestStaleTermRefused(t *testing.T) {
	ctx := context.Background()
	backend, db, closeAll, err := Open(ctx, testDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	spec := pgleader.Spec{Key: "daily-digest"}

	// Term 1 holds the lease and publishes.
	var first int64
	err = pgleader.Do(ctx, backend, spec, func(ctx context.Context, term *pgleader.Term) error {
		first = term.Token()
		return Publish(ctx, db, first, Digest{Name: "daily", Body: "term 1"})
	})
	if err != nil {
		t.Fatal(err)
	}
	// Term 2 (another replica, or a later run) takes the lease and publishes.
	var second int64
	err = pgleader.Do(ctx, backend, spec, func(ctx context.Context, term *pgleader.Term) error {
		second = term.Token()
		return Publish(ctx, db, second, Digest{Name: "daily", Body: "term 2"})
	})
	if err != nil {
		t.Fatal(err)
	}
	if second <= first {
		t.Fatalf("term 2's token %d is not above term 1's %d", second, first)
	}

	// Term 1 was paused mid-write (GC, a slow network) and its write
	// arrives now: refused.
	err = Publish(ctx, db, first, Digest{Name: "daily", Body: "term 1, late"})
	var stale *sqlfence.StaleError
	if !errors.Is(err, sqlfence.ErrFenced) || !errors.As(err, &stale) || stale.Token != first || stale.Stored != second {
		t.Fatalf("term 1's late write: %v; want ErrFenced, token %d refused at stored %d", err, first, second)
	}

	var d Digest
	if err := db.First(&d, "name = ?", "daily").Error; err != nil {
		t.Fatal(err)
	}
	if d.Body != "term 2" {
		t.Fatalf("digest = %q; want term 2's", d.Body)
	}
}

// TestRun: the command publishes the digest once under the lease.
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
	var d Digest
	if err := db.First(&d, "name = ?", "daily").Error; err != nil || !strings.Contains(d.Body, "by term") {
		t.Fatalf("digest = %+v, %v; want one published by a term", d, err)
	}
}

// testDSN creates a database pgleader_test_gorm_…, dropped when the test
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
	name := "pgleader_test_gorm_" + strings.ToLower(rand.Text()[:16])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	// Registered after admin's Close, so it runs first.
	t.Cleanup(func() { _, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") })
	u.Path = "/" + name
	return u.String()
}
