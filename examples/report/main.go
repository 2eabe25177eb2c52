// Command report is a scheduled job on one replica at a time: every
// -every (default 10s; a real report would be hourly or nightly), of all
// the replicas running it, exactly one writes the report of that instant,
// in a transaction fenced with the run's token. Run it several times side
// by side, stop and start them, and read the table:
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres go run ./examples/report -owner a
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres go run ./examples/report -owner b
//	psql -c 'SELECT * FROM report ORDER BY instant' postgres://postgres@127.0.0.1:5432/postgres
//	pgleader status --jobs
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/migrations"
	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/sqlfence"
)

func main() {
	owner := flag.String("owner", "", "this replica's name (default hostname:pid:random)")
	every := flag.Duration("every", 10*time.Second, "the report's schedule")
	atLeastOnce := flag.Bool("at-least-once", false, "retry a run whose replica died")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *owner, *every, *atLeastOnce); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, owner string, every time.Duration, atLeastOnce bool) error {
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS report (
		instant timestamptz PRIMARY KEY, token bigint NOT NULL, owner text NOT NULL,
		leases integer NOT NULL, written_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return err
	}
	// The guard that fences the report's writes; each run's claim takes it
	// with the run's token (Job.Fence), so a retry's claim shuts out the
	// writes of the attempt it took over.
	guard := sqlfence.Guard{Resource: "report"}
	return pgleader.RunJob(ctx, pgleader.NewPostgres(pool), pgleader.Job{
		Name:        "report",
		Every:       every,
		AtLeastOnce: atLeastOnce,
		Fence:       guard.Resource,
		Owner:       owner,
		Run: func(ctx context.Context, t *pgleader.Term, r pgleader.JobRun) error {
			slog.Info("report: writing", "instant", r.Instant, "token", r.Token, "attempt", r.Attempt)
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if err := guard.WriteTx(ctx, tx, r.Token); err != nil {
					return err // a later term took the report: write nothing
				}
				_, err := tx.Exec(ctx, `INSERT INTO report (instant, token, owner, leases)
					SELECT $1, $2, $3, count(*) FROM pgleader.leases()`, r.Instant, r.Token, t.Owner())
				return err
			})
		},
	})
}
