package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/migrations"
)

// migrateDeadline bounds each test below: a migration that waits for a
// connection it will never get fails the test instead of stalling the run.
// It detects a hang; it is not a timing assertion.
const migrateDeadline = 60 * time.Second

// deadline is a context that ends after migrateDeadline.
func deadline(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), migrateDeadline)
	t.Cleanup(cancel)
	return ctx
}

// bounded runs f and returns its error, or an error saying f did not
// complete within ctx (migrateDeadline), or that it hangs if it outlives
// ctx by a grace period (a call that ignores its context). It may run on
// any goroutine.
func bounded(ctx context.Context, what string, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		if err != nil && ctx.Err() != nil {
			return fmt.Errorf("%s did not complete within %v: %w", what, migrateDeadline, err)
		}
		return err
	case <-ctx.Done():
	}
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("%s did not complete within %v: %w", what, migrateDeadline, err)
		}
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s did not return within %v, nor 10 s after its context ended: it hangs", what, migrateDeadline)
	}
}

// mustBounded is bounded for a call that must succeed.
func mustBounded(t *testing.T, ctx context.Context, what string, f func() error) {
	t.Helper()
	if err := bounded(ctx, what, f); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// versionIs checks Version on pool, under ctx.
func versionIs(t *testing.T, ctx context.Context, pool *pgxpool.Pool, want uint) {
	t.Helper()
	var v uint
	var dirty bool
	mustBounded(t, ctx, "Version", func() (err error) {
		v, dirty, err = migrations.Version(ctx, pool)
		return err
	})
	if v != want || dirty {
		t.Fatalf("Version = %d dirty=%v; want %d, clean", v, dirty, want)
	}
}

// historyRows is the history table's rows, as "version/dirty".
func historyRows(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT version, dirty FROM `+migrations.HistoryTable+` ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var v int64
		var dirty bool
		if err := rows.Scan(&v, &dirty); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d/%v", v, dirty))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// wantLatestOnce checks that the database is at Latest, recorded once and
// clean, with the schema a single Up builds (want, a catalog).
func wantLatestOnce(t *testing.T, pool *pgxpool.Pool, want string) {
	t.Helper()
	if got, exp := historyRows(t, pool), []string{fmt.Sprintf("%d/false", migrations.Latest)}; !slices.Equal(got, exp) {
		t.Fatalf("history = %v; want %v", got, exp)
	}
	if got := catalog(t, pool); got != want {
		t.Fatalf("schema differs from one Up's:\n%s", diffLines(want, got))
	}
}

// noneAcquired waits until every connection of pool is back.
func noneAcquired(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	for end := time.Now().Add(waitTimeout); pool.Stat().AcquiredConns() > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d connections still acquired after the migrations returned", pool.Stat().AcquiredConns())
		}
	}
}

func onePool(t *testing.T, db *pgtest.DB, conns int32) *pgxpool.Pool {
	t.Helper()
	return db.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = conns })
}

// TestPoolOfOne runs every operation on a pool of one connection: each
// needs one connection, not two (the first Up checks the schema's owner,
// which once waited for a second connection until its context ended).
func TestPoolOfOne(t *testing.T) {
	t.Parallel()
	ref := pgtest.New(t)
	db := pgtest.NewEmpty(t)
	pool := onePool(t, db, 1)
	ctx := deadline(t)

	versionIs(t, ctx, pool, 0)
	mustBounded(t, ctx, "Up", func() error { return migrations.Up(ctx, pool) })
	versionIs(t, ctx, pool, migrations.Latest)
	mustBounded(t, ctx, "To(1)", func() error { return migrations.To(ctx, pool, 1) })
	versionIs(t, ctx, pool, 1)
	mustBounded(t, ctx, "Up from 1", func() error { return migrations.Up(ctx, pool) })
	versionIs(t, ctx, pool, migrations.Latest)
	wantLatestOnce(t, pool, catalog(t, ref.Pool))
	mustBounded(t, ctx, "Up at Latest", func() error { return migrations.Up(ctx, pool) })
	mustBounded(t, ctx, "Down", func() error { return migrations.Down(ctx, pool) })
	versionIs(t, ctx, pool, 0)
	if got := catalog(t, pool); got != "" {
		t.Fatalf("Down left objects behind:\n%s", got)
	}
	noneAcquired(t, pool)
}

// TestPoolOfOneRefusals: the refusals hold on a pool of one connection,
// and come at once.
func TestPoolOfOneRefusals(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	pool := onePool(t, db, 1)
	ctx := deadline(t)

	other := createRole(t, db)
	mustExec(t, db.Pool, `CREATE SCHEMA pgleader AUTHORIZATION `+pgx.Identifier{other}.Sanitize())
	err := bounded(ctx, "Up into another role's schema", func() error { return migrations.Up(ctx, pool) })
	if err == nil || !strings.Contains(err.Error(), "owned by "+other) {
		t.Fatalf("Up = %v; want a refusal naming the schema's owner %s", err, other)
	}
	err = bounded(ctx, "To(1) into another role's schema", func() error { return migrations.To(ctx, pool, 1) })
	if err == nil || !strings.Contains(err.Error(), "owned by "+other) {
		t.Fatalf("To(1) = %v; want a refusal naming the schema's owner %s", err, other)
	}
	mustExec(t, db.Pool, `DROP SCHEMA pgleader`)

	mustBounded(t, ctx, "Up", func() error { return migrations.Up(ctx, pool) })
	mustExec(t, db.Pool, `UPDATE `+migrations.HistoryTable+` SET version = 13`)
	for name, op := range map[string]func() error{
		"Up":   func() error { return migrations.Up(ctx, pool) },
		"To":   func() error { return migrations.To(ctx, pool, 1) },
		"Down": func() error { return migrations.Down(ctx, pool) },
	} {
		if err := bounded(ctx, name, op); !errors.Is(err, migrations.ErrUnreleasedSchema) {
			t.Errorf("%s at version 13 on a pool of one: %v; want ErrUnreleasedSchema", name, err)
		}
	}
	versionIs(t, ctx, pool, 13)
	noneAcquired(t, pool)
}

// TestConcurrentUpSmallPool has six callers share a pool of four: Up
// from each at once, then Up and Version mixed, then Up, To, Down and
// Version mixed. Each call holds one connection at a time, so every call
// completes and the schema is built once.
func TestConcurrentUpSmallPool(t *testing.T) {
	t.Parallel()
	ref := pgtest.New(t)
	want := catalog(t, ref.Pool)
	db := pgtest.NewEmpty(t)
	pool := onePool(t, db, 4)
	ctx := deadline(t)

	const callers = 6
	together := func(what string, op func(i int) error) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make([]error, callers)
		start := make(chan struct{})
		for i := range callers {
			wg.Go(func() {
				<-start
				errs[i] = bounded(ctx, fmt.Sprintf("%s %d", what, i), func() error { return op(i) })
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("%s %d: %v", what, i, err)
			}
		}
	}

	together("Up", func(int) error { return migrations.Up(ctx, pool) })
	wantLatestOnce(t, pool, want)
	noneAcquired(t, pool)

	mustBounded(t, ctx, "Down", func() error { return migrations.Down(ctx, pool) })
	shipped := append([]uint{0}, migrations.Versions()...)
	together("Up or Version", func(i int) error {
		if i%2 == 0 {
			return migrations.Up(ctx, pool)
		}
		v, dirty, err := migrations.Version(ctx, pool)
		if err == nil && (dirty || !slices.Contains(shipped, v)) {
			err = fmt.Errorf("Version = %d dirty=%v; want a shipped version or 0, clean", v, dirty)
		}
		return err
	})
	wantLatestOnce(t, pool, want)
	noneAcquired(t, pool)

	// Each takes the migration lock in turn, in no set order: the schema
	// ends at whichever version the last one left, and Up brings it back.
	together("Up, To, Down or Version", func(i int) error {
		switch i % 4 {
		case 0:
			return migrations.Up(ctx, pool)
		case 1:
			return migrations.To(ctx, pool, 1)
		case 2:
			return migrations.Down(ctx, pool)
		}
		v, dirty, err := migrations.Version(ctx, pool)
		if err == nil && (dirty || !slices.Contains(shipped, v)) {
			err = fmt.Errorf("Version = %d dirty=%v; want a shipped version or 0, clean", v, dirty)
		}
		return err
	})
	noneAcquired(t, pool)
	mustBounded(t, ctx, "Up after the mix", func() error { return migrations.Up(ctx, pool) })
	wantLatestOnce(t, pool, want)
	noneAcquired(t, pool)
}

// TestContextEndsWhileLocked: while another migrator holds golang-migrate's
// lock (taken here through golang-migrate's own pgx driver, as an older
// pgleader takes it), Up waits for it, and returns when its context ends,
// leaving no connection acquired and nothing locked; once the lock is
// free, Up migrates.
func TestContextEndsWhileLocked(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	pool := onePool(t, db, 2)

	sqlDB := stdlib.OpenDBFromPool(db.Pool)
	defer sqlDB.Close()
	drv, err := migratepgx.WithInstance(sqlDB, &migratepgx.Config{MigrationsTable: migrations.HistoryTable})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	if err := drv.Lock(); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	outer := deadline(t)
	err = bounded(outer, "Up while another migrator holds the lock", func() error { return migrations.Up(ctx, pool) })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Up while locked = %v; want context.DeadlineExceeded", err)
	}
	noneAcquired(t, pool)
	if got := historyRows(t, db.Pool); len(got) != 0 {
		t.Fatalf("history after the refused Up = %v; want none", got)
	}

	if err := drv.Unlock(); err != nil {
		t.Fatal(err)
	}
	mustBounded(t, outer, "Up once the lock is free", func() error { return migrations.Up(outer, pool) })
	versionIs(t, outer, pool, migrations.Latest)
	noneAcquired(t, pool)
	var held int
	if err := db.Pool.QueryRow(outer, `SELECT count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&held); err != nil || held != 0 {
		t.Fatalf("%d advisory locks held after the migrations (%v); want none", held, err)
	}
}
