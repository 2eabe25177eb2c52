package migrations_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	_ "github.com/lib/pq"              // database/sql driver "postgres"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/migrations"
)

// sqlDrivers are the database/sql drivers the *sql.DB variants are tested
// with: pgx's stdlib and lib/pq.
var sqlDrivers = []string{"pgx", "postgres"}

// openSQL opens a *sql.DB of driver on db with at most maxOpen
// connections, closed when the test ends.
func openSQL(t *testing.T, db *pgtest.DB, driver string, maxOpen int) *sql.DB {
	t.Helper()
	dsn := db.URL
	if driver == "postgres" {
		// The test server need not offer TLS: pgx falls back without it,
		// lib/pq may not.
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if q := u.Query(); q.Get("sslmode") == "" {
			q.Set("sslmode", "disable")
			u.RawQuery = q.Encode()
		}
		dsn = u.String()
	}
	sqlDB, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	sqlDB.SetMaxOpenConns(maxOpen)
	t.Cleanup(func() { _ = sqlDB.Close() })
	return sqlDB
}

func versionDBIs(t *testing.T, ctx context.Context, sqlDB *sql.DB, want uint) {
	t.Helper()
	var v uint
	var dirty bool
	mustBounded(t, ctx, "VersionDB", func() (err error) {
		v, dirty, err = migrations.VersionDB(ctx, sqlDB)
		return err
	})
	if v != want || dirty {
		t.Fatalf("VersionDB = %d dirty=%v; want %d, clean", v, dirty, want)
	}
}

// noneInUse checks that every connection of sqlDB is back, and that sqlDB
// still works.
func noneInUse(t *testing.T, ctx context.Context, sqlDB *sql.DB) {
	t.Helper()
	if n := sqlDB.Stats().InUse; n != 0 {
		t.Fatalf("%d connections of the *sql.DB still in use after the migrations returned", n)
	}
	if err := sqlDB.PingContext(ctx); err != nil {
		t.Fatalf("the *sql.DB after the migrations: %v", err)
	}
}

// TestSQLDB runs every operation through a *sql.DB of one connection, with
// pgx's stdlib and with lib/pq; the schema is the one Up builds.
func TestSQLDB(t *testing.T) {
	t.Parallel()
	want := catalog(t, pgtest.New(t).Pool)
	for _, driver := range sqlDrivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewEmpty(t)
			sqlDB := openSQL(t, db, driver, 1)
			ctx := deadline(t)

			versionDBIs(t, ctx, sqlDB, 0)
			mustBounded(t, ctx, "UpDB", func() error { return migrations.UpDB(ctx, sqlDB) })
			versionDBIs(t, ctx, sqlDB, migrations.Latest)
			wantLatestOnce(t, db.Pool, want)
			mustBounded(t, ctx, "UpDB at Latest", func() error { return migrations.UpDB(ctx, sqlDB) })
			for _, v := range []uint{1, 14, migrations.Latest} {
				mustBounded(t, ctx, fmt.Sprintf("ToDB(%d)", v), func() error { return migrations.ToDB(ctx, sqlDB, v) })
				versionDBIs(t, ctx, sqlDB, v)
			}
			mustBounded(t, ctx, "DownDB", func() error { return migrations.DownDB(ctx, sqlDB) })
			versionDBIs(t, ctx, sqlDB, 0)
			if got := catalog(t, db.Pool); got != "" {
				t.Fatalf("DownDB left objects behind:\n%s", got)
			}
			mustBounded(t, ctx, "ToDB(1) from none", func() error { return migrations.ToDB(ctx, sqlDB, 1) })
			mustBounded(t, ctx, "UpDB from 1", func() error { return migrations.UpDB(ctx, sqlDB) })
			wantLatestOnce(t, db.Pool, want)

			for _, bad := range []uint{0, 13, migrations.Latest + 1} {
				if err := migrations.ToDB(ctx, sqlDB, bad); err == nil {
					t.Errorf("ToDB(%d): want a refusal", bad)
				}
			}
			noneInUse(t, ctx, sqlDB)
		})
	}
	if err := migrations.UpDB(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "nil *sql.DB") {
		t.Errorf("UpDB(nil) = %v; want an error naming the nil *sql.DB", err)
	}
}

// TestSQLDBRefusals: through a *sql.DB of either driver, UpDB and ToDB
// refuse a schema another role owns, and UpDB, ToDB and DownDB a version
// this module cannot migrate, as their pool variants do.
func TestSQLDBRefusals(t *testing.T) {
	t.Parallel()
	for _, driver := range sqlDrivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewEmpty(t)
			sqlDB := openSQL(t, db, driver, 1)
			ctx := deadline(t)

			other := createRole(t, db)
			mustExec(t, db.Pool, `CREATE SCHEMA pgleader AUTHORIZATION `+pgx.Identifier{other}.Sanitize())
			for name, op := range map[string]func() error{
				"UpDB":     func() error { return migrations.UpDB(ctx, sqlDB) },
				"ToDB(14)": func() error { return migrations.ToDB(ctx, sqlDB, 14) },
			} {
				err := bounded(ctx, name, op)
				if err == nil || !strings.Contains(err.Error(), "owned by "+other) {
					t.Fatalf("%s into %s's schema = %v; want a refusal naming the owner", name, other, err)
				}
			}
			if got := historyRows(t, db.Pool); len(got) != 0 {
				t.Fatalf("history after the refusals = %v; want none", got)
			}
			mustExec(t, db.Pool, `DROP SCHEMA pgleader`)

			mustBounded(t, ctx, "UpDB", func() error { return migrations.UpDB(ctx, sqlDB) })
			ops := map[string]func() error{
				"UpDB":    func() error { return migrations.UpDB(ctx, sqlDB) },
				"ToDB(1)": func() error { return migrations.ToDB(ctx, sqlDB, 1) },
				"DownDB":  func() error { return migrations.DownDB(ctx, sqlDB) },
			}
			mustExec(t, db.Pool, `UPDATE `+migrations.HistoryTable+` SET version = 13`)
			for name, op := range ops {
				if err := bounded(ctx, name, op); !errors.Is(err, migrations.ErrUnreleasedSchema) {
					t.Errorf("%s at version 13: %v; want ErrUnreleasedSchema", name, err)
				}
			}
			versionDBIs(t, ctx, sqlDB, 13)
			mustExec(t, db.Pool, `UPDATE `+migrations.HistoryTable+` SET version = $1`, migrations.Latest+13)
			for name, op := range ops {
				if err := bounded(ctx, name, op); err == nil || !strings.Contains(err.Error(), "newer than this pgleader ships") {
					t.Errorf("%s at version %d: %v; want a newer-version refusal", name, migrations.Latest+13, err)
				}
			}
			versionDBIs(t, ctx, sqlDB, migrations.Latest+13)
			noneInUse(t, ctx, sqlDB)
		})
	}
}

// TestSQLDBAndPoolConcurrently: callers through lib/pq (a *sql.DB of two
// connections) and through pgx (a pool of one) migrate one empty database
// at once; they serialize on one lock, and the schema is built once.
func TestSQLDBAndPoolConcurrently(t *testing.T) {
	t.Parallel()
	want := catalog(t, pgtest.New(t).Pool)
	db := pgtest.NewEmpty(t)
	sqlDB := openSQL(t, db, "postgres", 2)
	pool := onePool(t, db, 1)
	ctx := deadline(t)

	const callers = 6
	var wg sync.WaitGroup
	errs := make([]error, callers)
	start := make(chan struct{})
	for i := range callers {
		wg.Go(func() {
			<-start
			if i%2 == 0 {
				errs[i] = bounded(ctx, fmt.Sprintf("UpDB %d", i), func() error { return migrations.UpDB(ctx, sqlDB) })
			} else {
				errs[i] = bounded(ctx, fmt.Sprintf("Up %d", i), func() error { return migrations.Up(ctx, pool) })
			}
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("caller %d: %v", i, err)
		}
	}
	wantLatestOnce(t, db.Pool, want)
	noneInUse(t, ctx, sqlDB)
	noneAcquired(t, pool)
}
