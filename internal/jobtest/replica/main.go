// Command replica is one replica of the scheduled job that package jobtest's
// process tests run, three at a time, on one database: pgleader.RunJob with
// the job's function recording each run it starts in the test's table
// jobtest_entry, under a fence, so that a write of an ended term is refused.
//
// Usage:
//
//	replica -database URL -job NAME -owner NAME [-every 1s] [-at-least-once] [-retry-within D]
//	        [-ttl D] [-fence NAME] [-keep-runs N] [-work D] [-clock-ahead D] [-hang-first]
//
// A run inserts its entry (instant, attempt, owner, token, and the fence's
// token as the run found it), works for -work, then marks the entry
// completed; both writes take the fence with the run's token. With
// -hang-first the first run of this process never completes: it blocks after
// its entry, for the test to kill it there. On SIGTERM or SIGINT, RunJob
// returns once the run in progress ended and the replica exits 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/jobclock"
	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/sqlfence"
)

type config struct {
	database, job, owner, fence string
	every, retryWithin, ttl     time.Duration
	work, clockAhead            time.Duration
	atLeastOnce, hangFirst      bool
	keepRuns                    int
}

func main() {
	var c config
	flag.StringVar(&c.database, "database", "", "PostgreSQL connection `URL` (required)")
	flag.StringVar(&c.job, "job", "", "the job's `name` (required)")
	flag.StringVar(&c.owner, "owner", "", "this replica's `name` (required)")
	flag.DurationVar(&c.every, "every", time.Second, "the job's period")
	flag.BoolVar(&c.atLeastOnce, "at-least-once", false, "retry a run whose replica died (Job.AtLeastOnce)")
	flag.DurationVar(&c.retryWithin, "retry-within", 0, "Job.RetryWithin (with -at-least-once)")
	flag.IntVar(&c.keepRuns, "keep-runs", 0, "Job.KeepRuns (default pgleader's)")
	flag.DurationVar(&c.ttl, "ttl", 0, "the lease TTL of each run's term (default pgleader's)")
	flag.StringVar(&c.fence, "fence", "", "Job.Fence: the fence `resource` each claim takes; the entries are written under it (default: a resource named after the job, taken by the writes only)")
	flag.DurationVar(&c.work, "work", 0, "how long a run works between its entry and its completion")
	flag.DurationVar(&c.clockAhead, "clock-ahead", 0, "run the job runner's local clock this much ahead")
	flag.BoolVar(&c.hangFirst, "hang-first", false, "block the first run of this process after its entry, until its term ends")
	flag.Parse()
	if c.database == "" || c.job == "" || c.owner == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "replica: -database, -job and -owner are required, and nothing else")
		os.Exit(2)
	}
	if c.clockAhead != 0 {
		// libfaketime cannot do this: Go reads the time through the vDSO,
		// not the C library. Checked with faketime 0.9.10: `faketime -f +2h
		// date` is two hours ahead; a Go program's time.Now under the same
		// command is not, whether linked internally or externally.
		d := c.clockAhead
		jobclock.Now = func() time.Time { return time.Now().Add(d) }
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("owner", c.owner)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, c, log); err != nil {
		log.Error("replica failed", "err", err)
		os.Exit(1)
	}
	log.Info("stopped")
}

func run(ctx context.Context, c config, log *slog.Logger) error {
	pool, err := pgxpool.New(ctx, c.database)
	if err != nil {
		return err
	}
	defer pool.Close()
	resource := c.fence
	if resource == "" {
		resource = "jobtest/" + c.job
	}
	guard := sqlfence.Guard{Resource: resource}
	var started atomic.Bool
	job := pgleader.Job{
		Name:        c.job,
		Every:       c.every,
		AtLeastOnce: c.atLeastOnce,
		RetryWithin: c.retryWithin,
		Fence:       c.fence,
		KeepRuns:    c.keepRuns,
		Spec:        pgleader.Spec{TTL: c.ttl},
		Owner:       c.owner,
		Logger:      log,
		Run: func(ctx context.Context, t *pgleader.Term, r pgleader.JobRun) error {
			// A run is short and finishes what it started: a graceful stop
			// (its context cancelled after the term's YieldGrace) lets it
			// record its end. The fence, not the context, keeps a late
			// write of an ended term out.
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			err := pgx.BeginFunc(wctx, pool, func(tx pgx.Tx) error {
				var before int64
				if err := tx.QueryRow(wctx, `SELECT pgleader.fence_floor($1)`, resource).Scan(&before); err != nil {
					return err
				}
				if err := guard.WriteTx(wctx, tx, r.Token); err != nil {
					return err
				}
				_, err := tx.Exec(wctx, `INSERT INTO jobtest_entry (job, instant, attempt, owner, token, fence_before)
					VALUES ($1, $2, $3, $4, $5, $6)`, r.Job, r.Instant, r.Attempt, t.Owner(), r.Token, before)
				return err
			})
			if err != nil {
				return fmt.Errorf("entry of %v: %w", r.Instant, err)
			}
			log.Info("run", "instant", r.Instant, "attempt", r.Attempt, "token", r.Token)
			if c.hangFirst && !started.Swap(true) {
				log.Info("hanging", "instant", r.Instant)
				<-ctx.Done()
				return ctx.Err()
			}
			time.Sleep(c.work)
			return guard.Write(wctx, pool, r.Token, func(tx pgx.Tx) error {
				tag, err := tx.Exec(wctx, `UPDATE jobtest_entry SET completed_at = clock_timestamp()
					WHERE job = $1 AND instant = $2 AND token = $3`, r.Job, r.Instant, r.Token)
				if err == nil && tag.RowsAffected() != 1 {
					err = errors.New("no entry to complete")
				}
				return err
			})
		},
	}
	log.Info("running", "job", c.job, "every", c.every, "at-least-once", c.atLeastOnce, "clock-ahead", c.clockAhead)
	return pgleader.RunJob(ctx, pgleader.NewPostgres(pool, pgleader.WithLogger(log)), job)
}
