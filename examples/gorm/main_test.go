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
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgleader/pgleader/migrations"
	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/sqlfence"
)

// TestStaleTermRefused: term 1 publishes through GORM in all three
// strengths, term 2 takes the lease and publishes, and each of term 1's
// late writes is refused: the column and the guard as fenced (with both
// tokens), the lease guard as not holding the lease. The digest stays term
// 2's. GORM runs on pgx's stdlib, and pgleader's migrations were applied
// through its *sql.DB (Open).
func TestStaleTermRefused(t *testing.T) {
	ctx := context.Background()
	backend, db, closeAll, err := Open(ctx, testDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := sqlDB.Driver().(*stdlib.Driver); !ok {
		t.Fatalf("GORM's driver is %T; want pgx's stdlib", sqlDB.Driver())
	}
	latest := migrations.Versions()[len(migrations.Versions())-1]
	if v, dirty, err := migrations.VersionDB(ctx, sqlDB); err != nil || dirty || v != latest {
		t.Fatalf("schema version %d (dirty %t), %v; want %d", v, dirty, err, latest)
	}

	spec := pgleader.Spec{Key: key}
	publishAll := func(token int64, body string) error {
		d := Digest{Name: "daily", Body: body}
		return errors.Join(PublishColumn(ctx, db, token, d), PublishGuarded(ctx, db, token, d),
			PublishUnderLease(ctx, db, token, d))
	}
	var first, second int64
	for _, tok := range []*int64{&first, &second} {
		err := pgleader.Do(ctx, backend, spec, func(ctx context.Context, term *pgleader.Term) error {
			*tok = term.Token()
			return publishAll(term.Token(), "term "+strconv.FormatInt(term.Token(), 10))
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if second <= first {
		t.Fatalf("term 2's token %d is not above term 1's %d", second, first)
	}

	// Term 1 was paused mid-write (GC, a slow network) and its writes
	// arrive now: refused.
	late := Digest{Name: "daily", Body: "late"}
	var stale *sqlfence.StaleError
	if err := PublishColumn(ctx, db, first, late); !errors.As(err, &stale) || !errors.Is(err, sqlfence.ErrFenced) ||
		stale.Token != first || stale.Stored != second {
		t.Errorf("term 1's late column write: %v; want ErrFenced, token %d refused at %d", err, first, second)
	}
	stale = nil
	if err := PublishGuarded(ctx, db, first, late); !errors.As(err, &stale) || !errors.Is(err, sqlfence.ErrFenced) ||
		stale.Token != first || stale.Stored != second {
		t.Errorf("term 1's late guarded write: %v; want ErrFenced, token %d refused at %d", err, first, second)
	}
	if err := PublishUnderLease(ctx, db, first, late); !errors.Is(err, sqlfence.ErrLeaseNotHeld) {
		t.Errorf("term 1's late write under its lease: %v; want ErrLeaseNotHeld", err)
	}

	var d Digest
	if err := db.First(&d, "name = ?", "daily").Error; err != nil {
		t.Fatal(err)
	}
	if want := "term " + strconv.FormatInt(second, 10); d.Body != want || d.Fence == nil || *d.Fence != second {
		t.Fatalf("digest = %q at fence %v; want %q at fence %d", d.Body, d.Fence, want, second)
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
