// Command replica is one replica of the gocron job that package
// gocronpgleader's process test runs, three at a time, on one database: a
// gocron v2 scheduler with a gocronpgleader.Locker, the job's task
// recording each run it starts in the test's table gocrontest_entry, under
// a fence, so that a write of an ended term is refused.
//
// Usage:
//
//	replica -database URL -job NAME -owner NAME [-window 500ms] [-work D] [-clock-ahead D]
//	        [-at-least-once -retry-within D] [-hang-first]
//
// The job runs at every second of the scheduler's clock (a cron schedule
// with seconds). A run inserts its entry (the run's instant and token on
// the database clock, the owner, the fence's token as the run found it,
// and the real clock's time at the task's start), works for -work, then
// marks the entry completed; both writes take the fence with the run's
// token. With -hang-first the first run of the process never completes: it
// blocks after its entry until its context ends (the term's end, or
// gocron's shutdown). With -at-least-once the Locker retries runs left
// running (Options.AtLeastOnce). On SIGTERM or SIGINT the scheduler shuts
// down, waiting for the run in progress, and the replica exits 0.
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

	"github.com/go-co-op/gocron/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jonboulle/clockwork"

	"github.com/pgleader/pgleader/gocronpgleader"
	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/sqlfence"
)

type config struct {
	database, job, owner   string
	window, work           time.Duration
	clockAhead             time.Duration
	atLeastOnce, hangFirst bool
	retryWithin            time.Duration
}

func main() {
	var c config
	flag.StringVar(&c.database, "database", "", "PostgreSQL connection `URL` (required)")
	flag.StringVar(&c.job, "job", "", "the job's `name` (required)")
	flag.StringVar(&c.owner, "owner", "", "this replica's `name` (required)")
	flag.DurationVar(&c.window, "window", 500*time.Millisecond, "the Locker's Window")
	flag.DurationVar(&c.work, "work", 0, "how long a run works between its entry and its completion")
	flag.DurationVar(&c.clockAhead, "clock-ahead", 0, "run the scheduler's clock this much ahead")
	flag.BoolVar(&c.atLeastOnce, "at-least-once", false, "retry runs left running (Options.AtLeastOnce)")
	flag.DurationVar(&c.retryWithin, "retry-within", 0, "Options.RetryWithin")
	flag.BoolVar(&c.hangFirst, "hang-first", false, "block the first run of this process after its entry, until its context ends")
	flag.Parse()
	if c.database == "" || c.job == "" || c.owner == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "replica: -database, -job and -owner are required, and nothing else")
		os.Exit(2)
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

// offsetClock is the real clock off by a fixed amount. It moves what
// gocron reads as now, and so the seconds it fires; its timers wait real
// durations. libfaketime cannot do this: Go reads the time through the
// vDSO, not the C library.
type offsetClock struct {
	clockwork.Clock
	off time.Duration
}

func (c offsetClock) Now() time.Time                  { return time.Now().Add(c.off) }
func (c offsetClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c offsetClock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

func run(ctx context.Context, c config, log *slog.Logger) error {
	pool, err := pgxpool.New(ctx, c.database)
	if err != nil {
		return err
	}
	defer pool.Close()
	locker, err := gocronpgleader.NewLocker(pool, gocronpgleader.Options{Window: c.window, Owner: c.owner, Logger: log,
		AtLeastOnce: c.atLeastOnce, RetryWithin: c.retryWithin})
	if err != nil {
		return err
	}
	s, err := gocron.NewScheduler(gocron.WithClock(offsetClock{clockwork.NewRealClock(), c.clockAhead}),
		gocron.WithDistributedLocker(locker))
	if err != nil {
		return err
	}
	guard := sqlfence.Guard{Resource: "gocrontest/" + c.job}
	var ran atomic.Bool
	task := func(ctx context.Context, t *pgleader.Term, r pgleader.JobRun) error {
		hang := c.hangFirst && !ran.Swap(true)
		err := record(ctx, pool, guard, c.work, hang, t, r)
		if err != nil {
			log.Error("run failed", "instant", r.Instant, "token", r.Token, "err", err)
		} else {
			log.Info("run", "instant", r.Instant, "token", r.Token)
		}
		return err
	}
	// A cron schedule, not gocron.DurationJob: every replica then fires at
	// the same seconds of its clock whenever it started, and a Window
	// shorter than the period separates the runs. With a DurationJob each
	// replica fires at its own phase, and firings more than Window apart
	// within one period would each run.
	_, err = s.NewJob(gocron.CronJob("* * * * * *", true), gocron.NewTask(locker.Task(c.job, task)), gocron.WithName(c.job))
	if err != nil {
		return err
	}
	log.Info("running", "job", c.job, "window", c.window, "clock-ahead", c.clockAhead)
	s.Start()
	<-ctx.Done()
	return s.Shutdown()
}

// record is the job's work: the run's entry, -work, the entry's completion,
// each write under the fence with the run's token.
func record(ctx context.Context, pool *pgxpool.Pool, guard sqlfence.Guard, work time.Duration, hang bool, t *pgleader.Term, r pgleader.JobRun) error {
	started := time.Now()
	// A run is short and finishes what it started: gocron cancels the
	// job's context at shutdown, while it waits for the run. The
	// fence, not the context, keeps a late write of an ended term out.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err := pgx.BeginFunc(wctx, pool, func(tx pgx.Tx) error {
		var before int64
		if err := tx.QueryRow(wctx, `SELECT pgleader.fence_floor($1)`, guard.Resource).Scan(&before); err != nil {
			return err
		}
		if err := guard.WriteTx(wctx, tx, r.Token); err != nil {
			return err
		}
		_, err := tx.Exec(wctx, `INSERT INTO gocrontest_entry (job, instant, owner, token, fence_before, started)
			VALUES ($1, $2, $3, $4, $5, $6)`, r.Job, r.Instant, t.Owner(), r.Token, before, started)
		return err
	})
	if err != nil {
		return fmt.Errorf("entry of the run at %v: %w", r.Instant, err)
	}
	if hang {
		<-ctx.Done()
		return fmt.Errorf("the run at %v hung: %w", r.Instant, ctx.Err())
	}
	time.Sleep(work)
	return guard.Write(wctx, pool, r.Token, func(tx pgx.Tx) error {
		tag, err := tx.Exec(wctx, `UPDATE gocrontest_entry SET completed_at = clock_timestamp()
			WHERE job = $1 AND instant = $2 AND token = $3`, r.Job, r.Instant, r.Token)
		if err == nil && tag.RowsAffected() != 1 {
			err = errors.New("no entry to complete")
		}
		return err
	})
}
