// Command publisher runs one replica of the recipe's digest publisher: the
// work that must run on exactly one replica at a time. Every replica
// campaigns for the same key; the one that leads publishes numbered units
// into a fenced table, one unit at a time, checking that its term is live
// between units and stopping at the first write the fence refuses.
//
// Usage:
//
//	publisher -database postgres://... [-owner NAME] [-migrate] [-every 500ms]
//
// Every flag may be given in the environment instead (see the usage text,
// or README.md); a flag on the command line wins. On SIGTERM or SIGINT the
// replica ends its term as stopped, finishes the unit it is in, releases
// the lease and exits 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/examples/internal/digests"
	"github.com/pgleader/pgleader/migrations"
	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/sqlfence"
)

// config is what the flags and the environment set.
type config struct {
	database    string
	owner       string
	key         string
	every       time.Duration
	migrate     bool
	migrateOnly bool
}

// envs names, for each flag, the environment variable read when the flag is
// not on the command line.
var envs = map[string]string{
	"database":     "DATABASE_URL",
	"owner":        "PUBLISHER_OWNER",
	"key":          "PUBLISHER_KEY",
	"every":        "PUBLISHER_EVERY",
	"migrate":      "PUBLISHER_MIGRATE",
	"migrate-only": "PUBLISHER_MIGRATE_ONLY",
}

// parseConfig reads the flags in args, then fills each flag not given from
// its environment variable, looked up with getenv.
func parseConfig(args []string, getenv func(string) string, output io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("publisher", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&c.database, "database", "", "PostgreSQL connection `URL` (required)")
	fs.StringVar(&c.owner, "owner", "", "this replica's `name`, unique among the running replicas (default hostname:pid:random)")
	fs.StringVar(&c.key, "key", "digest-publisher", "the leadership `key`, also the digest's row")
	fs.DurationVar(&c.every, "every", 500*time.Millisecond, "interval between units")
	fs.BoolVar(&c.migrate, "migrate", false, "apply pgleader's migrations before starting")
	fs.BoolVar(&c.migrateOnly, "migrate-only", false, "apply pgleader's migrations, create the tables, and exit")
	fs.VisitAll(func(f *flag.Flag) { f.Usage += " [$" + envs[f.Name] + "]" })
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: publisher -database URL [flags]\n\nRuns one replica of the digest publisher. Flags, or the environment variables in brackets:\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for name, env := range envs {
		if v := getenv(env); v != "" && !given[name] {
			if err := fs.Set(name, v); err != nil {
				return c, fmt.Errorf("%s=%q: %w", env, v, err)
			}
		}
	}
	switch {
	case c.database == "":
		return c, errors.New("no database: give -database or set DATABASE_URL")
	case c.every <= 0:
		return c, fmt.Errorf("-every must be positive, got %v", c.every)
	}
	c.migrate = c.migrate || c.migrateOnly
	return c, nil
}

func main() {
	cfg, err := parseConfig(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "publisher:", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, log); err != nil {
		log.Error("publisher failed", "err", err)
		os.Exit(1)
	}
}

// run connects, prepares the database, and campaigns until ctx is
// cancelled.
func run(ctx context.Context, cfg config, log *slog.Logger) error {
	pool, err := pgxpool.New(ctx, cfg.database)
	if err != nil {
		return err
	}
	defer pool.Close()

	if cfg.migrate {
		if err := migrations.Up(ctx, pool); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		log.Info("pgleader's migrations are applied")
	}
	store := digests.Store{DB: pool, Name: cfg.key}
	if err := store.Setup(ctx); err != nil {
		return err
	}
	if cfg.migrateOnly {
		return nil
	}

	backend := pgleader.NewPostgres(pool, pgleader.WithLogger(log))
	if _, err := backend.Lease(ctx, cfg.key); err != nil {
		if errors.Is(err, pgleader.ErrNotMigrated) {
			return fmt.Errorf("run the publisher once with -migrate: %w", err)
		}
		return err
	}
	el, err := pgleader.New(backend,
		pgleader.Spec{Key: cfg.key, RequireFenceAdvance: true},
		pgleader.Options{
			Owner:      cfg.owner,
			Lead:       publish(store, cfg.every, log),
			Claim:      func(ctx context.Context, t *pgleader.Term) (bool, error) { return store.Claim(ctx, t.Token()) },
			FenceFloor: store.Floor,
			Logger:     log,
		})
	if err != nil {
		return err
	}
	log.Info("campaigning", "key", cfg.key, "owner", el.Status().Owner, "every", cfg.every)
	return el.Run(ctx)
}

// publish is the body of each term: numbered units, one at a time, with the
// term checked between units. Once the term is ending it returns without
// starting another unit; a unit already being written is finished. A write
// the fence refuses means a newer term has written: the body stops there.
func publish(store digests.Store, every time.Duration, log *slog.Logger) func(context.Context, *pgleader.Term) error {
	return func(ctx context.Context, t *pgleader.Term) error {
		log := log.With("owner", t.Owner(), "token", t.Token())
		for seq := 1; t.Live(); seq++ {
			if err := store.Publish(ctx, t.Token(), seq, t.Owner()); err != nil {
				if errors.Is(err, sqlfence.ErrFenced) {
					log.Warn("write refused: a newer term has written; stopping", "seq", seq, "err", err)
				}
				return err
			}
			log.Info("published", "seq", seq)
			select {
			case <-t.Ending():
			case <-time.After(every):
			}
		}
		return nil
	}
}
