// Command handover tells the recipe's story against PostgreSQL, in one
// process: two replicas of a digest publisher hand over from token 1 to
// token 2 when the leader is stopped, a late write of the old term is
// refused by the fence, and after the lease data is lost the first new term
// draws a token above the store's fence at once.
//
// Usage:
//
//	handover -database postgres://user@host:5432/postgres
//
// The URL names a server, not a database to write in: the program creates
// a database of its own there (pgleader_demo_ and a random suffix), applies
// pgleader's migrations to it, and drops it when it ends. Its role must be
// allowed to CREATE DATABASE. `make demo` runs it (see scripts/demo.sh).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/migrations"
)

func main() {
	var (
		database = flag.String("database", os.Getenv("DATABASE_URL"), "PostgreSQL server `URL`; the demo creates and drops a database of its own there [$DATABASE_URL]")
		every    = flag.Duration("every", 250*time.Millisecond, "interval between a leader's units")
		verbose  = flag.Bool("v", false, "also print the electors' own logs (to stderr)")
		ping     = flag.Bool("ping", false, "only check that the server answers, then exit 0 if it does, 1 if not")
	)
	flag.Parse()
	if *database == "" || *every <= 0 || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	if *ping {
		if err := pingServer(ctx, *database); err != nil {
			fmt.Fprintln(os.Stderr, "handover:", err)
			os.Exit(1)
		}
		return
	}
	logs := slog.New(slog.DiscardHandler)
	if *verbose {
		logs = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if err := demo(ctx, *database, os.Stdout, options{every: *every, logger: logs}); err != nil {
		fmt.Fprintln(os.Stderr, "handover:", err)
		os.Exit(1)
	}
}

func pingServer(ctx context.Context, serverURL string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// demo creates a database on the server, tells the story in it, and drops
// it again, whatever happened.
func demo(ctx context.Context, serverURL string, out io.Writer, opts options) (err error) {
	admin, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return fmt.Errorf("connect to the server: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))

	name := "pgleader_demo_" + randomSuffix()
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create the demo's database (the role must be allowed to CREATE DATABASE): %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, dropErr := admin.Exec(dctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		if dropErr != nil {
			err = errors.Join(err, fmt.Errorf("drop the demo's database %s: %w", name, dropErr))
		}
	}()

	cfg, err := pgxpool.ParseConfig(serverURL)
	if err != nil {
		return err
	}
	cfg.ConnConfig.Database = name
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool); err != nil {
		return fmt.Errorf("migrate the demo's database: %w", err)
	}

	fmt.Fprintf(out, "pgleader demo: the recipe's publisher on one replica, in PostgreSQL %s\n", serverVersion(ctx, pool))
	fmt.Fprintf(out, "database %s on %s:%d, created for this run and dropped at its end\n",
		name, cfg.ConnConfig.Host, cfg.ConnConfig.Port)
	return tell(ctx, pool, out, opts)
}

func serverVersion(ctx context.Context, pool *pgxpool.Pool) string {
	var v string
	if err := pool.QueryRow(ctx, `SHOW server_version`).Scan(&v); err != nil {
		return "(version unknown)"
	}
	return v
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
