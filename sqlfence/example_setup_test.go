package sqlfence_test

import (
	"context"
	"crypto/rand"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/migrations"
)

// exampleDB creates a scratch database named pgleader_test_ex_…, applies
// pgleader's migrations and returns a pool on it, with a function that
// closes the pool and drops the database. The server is the one in
// PGLEADER_TEST_DATABASE_URL, or PostgreSQL on 127.0.0.1:5432 as postgres.
// Examples cannot take a *testing.T, so a failure panics.
func exampleDB() (*pgxpool.Pool, func()) {
	ctx := context.Background()
	url := os.Getenv(pgtest.EnvURL)
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	admin, err := pgx.Connect(ctx, url)
	must(err)
	name := pgx.Identifier{"pgleader_test_ex_" + strings.ToLower(rand.Text()[:16])}
	_, err = admin.Exec(ctx, "CREATE DATABASE "+name.Sanitize())
	must(err)
	drop := func() {
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name.Sanitize()+" WITH (FORCE)")
		_ = admin.Close(ctx)
	}

	cfg, err := pgxpool.ParseConfig(url)
	must(err)
	cfg.ConnConfig.Database = name[0]
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = migrations.Up(ctx, pool)
	}
	if err != nil {
		drop()
		panic(err)
	}
	return pool, func() { pool.Close(); drop() }
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
