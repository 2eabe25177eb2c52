package gocronpgleader_test

import (
	"context"
	"crypto/rand"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/pgleader/pgleader/migrations"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// quiet is the tests' logger: a term per run makes many lines.
var quiet = slog.New(slog.DiscardHandler)

// serverURL is the server of PGLEADER_TEST_DATABASE_URL, else of
// DATABASE_URL, else PostgreSQL on 127.0.0.1:5432 as postgres; its role
// must be allowed to create databases.
func serverURL() string {
	for _, v := range []string{"PGLEADER_TEST_DATABASE_URL", "DATABASE_URL"} {
		if s := os.Getenv(v); s != "" {
			return s
		}
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// newDatabase creates a migrated database pgleader_test_gocron_… on the
// server of serverURL and returns a pool on it and a function that closes
// the pool and drops the database.
func newDatabase(ctx context.Context) (*pgxpool.Pool, func(), error) {
	server := serverURL()
	u, err := url.Parse(server)
	if err != nil {
		return nil, nil, err
	}
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		return nil, nil, err
	}
	name := "pgleader_test_gocron_" + strings.ToLower(rand.Text()[:16])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		_ = admin.Close(ctx)
		return nil, nil, err
	}
	drop := func() {
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		_ = admin.Close(context.Background())
	}
	u.Path = "/" + name
	pool, err := pgxpool.New(ctx, u.String())
	if err == nil {
		err = migrations.Up(ctx, pool)
		if err != nil {
			pool.Close()
		}
	}
	if err != nil {
		drop()
		return nil, nil, err
	}
	return pool, func() { pool.Close(); drop() }, nil
}

// testPool is newDatabase for a test, cleaned up when it ends.
func testPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, cleanup, err := newDatabase(context.Background())
	if err != nil {
		t.Fatalf("no database on %s (set PGLEADER_TEST_DATABASE_URL to a server whose role may create databases, "+
			"or start one on 127.0.0.1:5432 with user postgres): %v", redacted(serverURL()), err)
	}
	t.Cleanup(cleanup)
	return pool
}

func redacted(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// offsetClock is the real clock off by a fixed amount: a replica whose
// clock runs ahead (positive) or behind.
type offsetClock struct {
	clockwork.Clock
	off time.Duration
}

func newOffsetClock(off time.Duration) offsetClock {
	return offsetClock{Clock: clockwork.NewRealClock(), off: off}
}

func (c offsetClock) Now() time.Time                  { return time.Now().Add(c.off) }
func (c offsetClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c offsetClock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }
