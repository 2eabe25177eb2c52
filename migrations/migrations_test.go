package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func mustVersion(t *testing.T, pool *pgxpool.Pool, want uint) {
	t.Helper()
	v, dirty, err := migrations.Version(context.Background(), pool)
	if err != nil || dirty || v != want {
		t.Fatalf("version = %d dirty=%v err=%v; want %d, clean", v, dirty, err, want)
	}
}

func TestUpDownUpLeavesTheSameSchema(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	ctx := context.Background()

	mustVersion(t, db.Pool, 0)
	if err := migrations.Up(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	mustVersion(t, db.Pool, migrations.Latest)
	first := catalog(t, db.Pool)
	if !strings.Contains(first, "-- table pgleader.lease") || !strings.Contains(first, "FUNCTION pgleader.acquire(") {
		t.Fatalf("catalog after up lacks the lease table or acquire:\n%s", first)
	}
	if err := migrations.Up(ctx, db.Pool); err != nil { // already there: no error
		t.Fatalf("second Up: %v", err)
	}

	if err := migrations.Down(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	mustVersion(t, db.Pool, 0)
	if got := catalog(t, db.Pool); got != "" {
		t.Fatalf("down left objects behind:\n%s", got)
	}

	if err := migrations.Up(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	if second := catalog(t, db.Pool); second != first {
		t.Fatalf("up after down differs:\nfirst:\n%s\nsecond:\n%s", first, second)
	}

	// Step down and up one version at a time through To.
	for _, v := range slices.Backward(shipped(t)) {
		if err := migrations.To(ctx, db.Pool, v); err != nil {
			t.Fatalf("To(%d): %v", v, err)
		}
		mustVersion(t, db.Pool, v)
	}
	if err := migrations.To(ctx, db.Pool, migrations.Latest); err != nil {
		t.Fatal(err)
	}
	if third := catalog(t, db.Pool); third != first {
		t.Fatalf("To(Latest) differs from Up:\n%s\nvs\n%s", first, third)
	}
	for _, bad := range []uint{0, migrations.Latest + 1} {
		if err := migrations.To(ctx, db.Pool, bad); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("To(%d) = %v; want an out-of-range error", bad, err)
		}
	}
}

func TestURLVariants(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	ctx := context.Background()
	if err := migrations.UpURL(ctx, db.URL); err != nil {
		t.Fatal(err)
	}
	if v, dirty, err := migrations.VersionURL(ctx, db.URL); err != nil || dirty || v != migrations.Latest {
		t.Fatalf("VersionURL = %d, %v, %v", v, dirty, err)
	}
	if err := migrations.DownURL(ctx, db.URL); err != nil {
		t.Fatal(err)
	}
	if err := migrations.ToURL(ctx, db.URL, 1); err != nil {
		t.Fatal(err)
	}
	mustVersion(t, db.Pool, 1)
	if err := migrations.UpURL(ctx, "postgres://127.0.0.1:1/none?connect_timeout=1"); err == nil {
		t.Fatal("UpURL to a closed port: want an error")
	}
	if err := migrations.Up(ctx, nil); err == nil {
		t.Fatal("Up(nil): want an error")
	}
}

// TestAppMigrationsSurvive runs an application's own golang-migrate
// migrations, with golang-migrate's default history table, beside ours.
func TestAppMigrationsSurvive(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	ctx := context.Background()

	app := fstest.MapFS{
		"1_things.up.sql":   {Data: []byte(`CREATE TABLE things (id int PRIMARY KEY);`)},
		"1_things.down.sql": {Data: []byte(`DROP TABLE things;`)},
		"2_more.up.sql":     {Data: []byte(`ALTER TABLE things ADD COLUMN name text;`)},
		"2_more.down.sql":   {Data: []byte(`ALTER TABLE things DROP COLUMN name;`)},
	}
	appMigrate := func(f func(*migrate.Migrate) error) {
		t.Helper()
		src, err := iofs.New(app, ".")
		if err != nil {
			t.Fatal(err)
		}
		sqlDB := stdlib.OpenDBFromPool(db.Pool)
		defer sqlDB.Close()
		drv, err := migratepgx.WithInstance(sqlDB, &migratepgx.Config{}) // the default table
		if err != nil {
			t.Fatal(err)
		}
		m, err := migrate.NewWithInstance("iofs", src, "pgx5", drv)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if err := f(m); err != nil && err != migrate.ErrNoChange {
			t.Fatal(err)
		}
	}
	appVersion := func() (v int64, dirty bool) {
		t.Helper()
		if err := db.Pool.QueryRow(ctx, `SELECT version, dirty FROM public.schema_migrations`).Scan(&v, &dirty); err != nil {
			t.Fatal(err)
		}
		return v, dirty
	}

	appMigrate(func(m *migrate.Migrate) error { return m.Migrate(1) })
	if err := migrations.Up(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	if v, dirty := appVersion(); v != 1 || dirty {
		t.Fatalf("app history after our Up = %d dirty=%v; want 1", v, dirty)
	}
	mustVersion(t, db.Pool, migrations.Latest)

	// The app goes on migrating; our history is untouched by it.
	appMigrate(func(m *migrate.Migrate) error { return m.Up() })
	if v, _ := appVersion(); v != 2 {
		t.Fatalf("app version = %d, want 2", v)
	}
	mustVersion(t, db.Pool, migrations.Latest)

	if err := migrations.Down(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	if v, dirty := appVersion(); v != 2 || dirty {
		t.Fatalf("app history after our Down = %d dirty=%v; want 2", v, dirty)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM things`).Scan(&n); err != nil {
		t.Fatalf("app table gone after our Down: %v", err)
	}
}

// TestConcurrentUp has several processes' worth of pools migrate one empty
// database at once.
func TestConcurrentUp(t *testing.T) {
	t.Parallel()
	ref := pgtest.New(t)
	want := catalog(t, ref.Pool)

	for round := 0; round < 3; round++ {
		db := pgtest.NewEmpty(t)
		const migrators = 4
		pools := make([]*pgxpool.Pool, migrators)
		for i := range pools {
			pools[i] = db.NewPool(t)
		}
		var wg sync.WaitGroup
		errs := make([]error, migrators)
		start := make(chan struct{})
		for i, p := range pools {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = migrations.Up(context.Background(), p)
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d migrator %d: %v", round, i, err)
			}
		}
		mustVersion(t, db.Pool, migrations.Latest)
		if got := catalog(t, db.Pool); got != want {
			t.Fatalf("round %d: schema after concurrent Up differs:\nwant:\n%s\ngot:\n%s", round, want, got)
		}
	}
}

// shipped returns the versions of the embedded up migrations in order:
// numbers may skip (a branch reserves its number while others land).
func shipped(t *testing.T) []uint {
	t.Helper()
	names, err := fs.Glob(migrations.FS(), "*.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	vs := migrations.Versions()
	if len(vs) != len(names) {
		t.Fatalf("Versions() = %v for %d up migrations %v", vs, len(names), names)
	}
	return vs
}

// TestUnreleasedVersionRefused: a database a development build left at one
// of the squashed versions 2 to 13 is refused by Up, To and Down with an
// error that says so and how to recover, not golang-migrate's "no migration
// found for version 13"; following it recovers. A version newer than
// Latest is refused as such.
func TestUnreleasedVersionRefused(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	ctx := context.Background()
	if err := migrations.Up(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	record := func(v uint) {
		t.Helper()
		mustExec(t, db.Pool, `UPDATE `+migrations.HistoryTable+` SET version = $1`, v)
		mustVersion(t, db.Pool, v)
	}
	ops := map[string]func() error{
		"Up":   func() error { return migrations.Up(ctx, db.Pool) },
		"To":   func() error { return migrations.To(ctx, db.Pool, 1) },
		"Down": func() error { return migrations.Down(ctx, db.Pool) },
	}
	for _, v := range []uint{2, 13} {
		record(v)
		for name, op := range ops {
			err := op()
			if !errors.Is(err, migrations.ErrUnreleasedSchema) {
				t.Fatalf("%s at version %d: %v; want ErrUnreleasedSchema", name, v, err)
			}
			for _, want := range []string{"unreleased development version", fmt.Sprintf("schema version %d", v),
				"DROP SCHEMA pgleader CASCADE; DROP TABLE " + migrations.HistoryTable, "grant_usage"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%s at version %d: %q lacks %q", name, v, err, want)
				}
			}
			mustVersion(t, db.Pool, v) // refused: nothing changed
		}
	}

	record(migrations.Latest + 13) // past the squashed range: a newer release's
	for name, op := range ops {
		err := op()
		if err == nil || errors.Is(err, migrations.ErrUnreleasedSchema) || !strings.Contains(err.Error(), "newer than this pgleader ships") {
			t.Errorf("%s at version %d: %v; want a newer-version error", name, migrations.Latest+13, err)
		}
	}

	// The recovery the error gives.
	record(13)
	mustExec(t, db.Pool, `DROP SCHEMA pgleader CASCADE`)
	mustExec(t, db.Pool, `DROP TABLE `+migrations.HistoryTable)
	if err := migrations.Up(ctx, db.Pool); err != nil {
		t.Fatalf("Up after the recovery: %v", err)
	}
	mustVersion(t, db.Pool, migrations.Latest)
}

// TestNumbering: the versions squashed into 1 stay unused, so that
// CheckVersion can tell a development build's database from a released
// one; Latest is the highest version shipped, and every version has a down
// migration.
func TestNumbering(t *testing.T) {
	vs := shipped(t)
	for _, v := range vs {
		if v >= 2 && v <= 13 {
			t.Errorf("a migration is numbered %d: versions 2 to 13 are a development build's; number it 14 or more", v)
		}
		if err := migrations.CheckVersion(v); err != nil {
			t.Errorf("CheckVersion(%d) of a shipped version: %v", v, err)
		}
		name, err := fs.Glob(migrations.FS(), fmt.Sprintf("%04d_*.down.sql", v))
		if err != nil || len(name) != 1 {
			t.Errorf("version %d has %d down migrations (%v); want 1", v, len(name), err)
		}
	}
	if vs[len(vs)-1] != migrations.Latest {
		t.Errorf("the highest migration is %d; Latest is %d", vs[len(vs)-1], migrations.Latest)
	}
}

// TestUpgradeKeepsGrants: a role granted the application's functions at
// version 1 can still run every one of them once version 14 replaced some,
// and again after a step back down to 1.
func TestUpgradeKeepsGrants(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	ctx := context.Background()
	if err := migrations.To(ctx, db.Pool, 1); err != nil {
		t.Fatal(err)
	}
	role := createRole(t, db)
	mustExec(t, db.Pool, `SELECT pgleader.grant_usage($1)`, role)
	app, err := pgx.Connect(ctx, urlAs(t, db, role))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(ctx)
	run := func(when string, sqls ...string) {
		t.Helper()
		for _, q := range sqls {
			if _, err := app.Exec(ctx, q); err != nil {
				t.Errorf("%s: %s: %v", when, q, err)
			}
		}
	}
	v1 := []string{
		`SELECT * FROM pgleader.set_acquire('s', 'a', '{k1}', '1 minute', 0)`,
		`SELECT * FROM pgleader.set_tick('s', 'a', '{k1}', '{1}', '1 minute', 1)`,
		`SELECT * FROM pgleader.set_renew('s', 'a', '{k1}', '{1}', '1 minute', 1)`,
		`SELECT * FROM pgleader.renew_many('a', '{k1}', '{1}', '1 minute')`,
	}
	run("at 1", v1...)
	run("at 1", `SELECT * FROM pgleader.set_release('s', 'a', '{k1}', '{1}', true)`)
	if err := migrations.Up(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Exec(ctx, `DISCARD ALL`); err != nil {
		t.Fatal(err)
	}
	run("at 14", v1[0], `SELECT * FROM pgleader.set_tick('s', 'a', '{k1}', '{2}', '1 minute', 1)`,
		`SELECT * FROM pgleader.set_renew('s', 'a', '{k1}', '{2}', '1 minute', 1)`,
		`SELECT * FROM pgleader.renew_many('a', '{k1}', '{2}', '1 minute')`,
		`SELECT * FROM pgleader.set_release('s', 'a', '{k1}', '{2}', true, '{true}')`)
	if err := migrations.To(ctx, db.Pool, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Exec(ctx, `DISCARD ALL`); err != nil {
		t.Fatal(err)
	}
	run("back at 1", v1[0], `SELECT * FROM pgleader.set_release('s', 'a', '{k1}', '{3}', true)`)
	for _, v := range []uint{2, 13} {
		if err := migrations.To(ctx, db.Pool, v); err == nil || !strings.Contains(err.Error(), "development versions") || !strings.Contains(err.Error(), "[1 14 15 16 17 18 19 20 21 22 23 24 25 26 27]") {
			t.Errorf("To(%d) = %v; want a refusal naming the development versions", v, err)
		}
	}
}
