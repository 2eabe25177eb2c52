// Command bench measures how late a gocron job's body starts after its
// scheduled instant, for a job every second, and prints a markdown table:
// gocron alone (the floor), gocron with a gocronpgleader.Locker on each of
// three schedulers, and pgleader.RunJob natively on three runners. The
// three run side by side in one process, so they share the machine's load.
// It creates a scratch database, drops it at the end, and touches nothing
// else.
//
//	cd gocronpgleader && go run ./internal/bench [-instants 30]
//
// The server is DATABASE_URL, else postgres://postgres@127.0.0.1:5432/postgres.
// The delays of RunJob are measured from its instant on the database's
// clock, so run it with PostgreSQL on the same machine.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/gocronpgleader"
	"github.com/pgleader/pgleader/migrations"
	"github.com/pgleader/pgleader/pgleader"
)

var instants = flag.Int("instants", 30, "instants of the 1 s job measured per row (after one of warm-up)")

const replicas = 3

func main() {
	flag.Parse()
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// samples collects, per instant, the delays of the bodies entered for it.
type samples struct {
	mu     sync.Mutex
	delays map[int64][]time.Duration // by instant (Unix seconds)
	full   chan struct{}
	once   sync.Once
}

func newSamples() *samples {
	return &samples{delays: make(map[int64][]time.Duration), full: make(chan struct{})}
}

// add records a body entered at now for instant; the first instant seen is
// the warm-up and is left out.
func (s *samples) add(instant, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delays[instant.Unix()] = append(s.delays[instant.Unix()], now.Sub(instant))
	if len(s.delays) > *instants {
		s.once.Do(func() { close(s.full) })
	}
}

// row summarizes the instants after the first: p50 and p99 (nearest rank:
// of 30 instants, the slowest) of each instant's first body, and how many
// bodies ran in all (one per instant unless an instant ran twice).
func (s *samples) row(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := slices.Sorted(func(yield func(int64) bool) {
		for k := range s.delays {
			if !yield(k) {
				return
			}
		}
	})
	keys = keys[1:min(len(keys), *instants+1)]
	var first []time.Duration
	bodies := 0
	for _, k := range keys {
		first = append(first, slices.Min(s.delays[k]))
		bodies += len(s.delays[k])
	}
	slices.Sort(first)
	q := func(p float64) string {
		i := int(p*float64(len(first))+0.999999) - 1
		return ms(first[max(i, 0)])
	}
	return fmt.Sprintf("| %s | %d | %d | %s | %s |", name, len(keys), bodies, q(0.5), q(0.99))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func run(ctx context.Context) error {
	server := os.Getenv("DATABASE_URL")
	if server == "" {
		server = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	pool, drop, err := scratch(ctx, server)
	if err != nil {
		return err
	}
	defer drop()
	var version string
	if err := pool.QueryRow(ctx, `SHOW server_version`).Scan(&version); err != nil {
		return err
	}
	fmt.Printf("gocronpgleader bench  %s  go %s  %s/%s  %d CPUs  PostgreSQL %s\n",
		time.Now().UTC().Format(time.RFC3339), runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), version)
	fmt.Printf("a job every second, %d instants per row after one of warm-up; delay = body entered - scheduled instant\n\n", *instants)

	quiet := slog.New(slog.DiscardHandler)
	alone, locked, native := newSamples(), newSamples(), newSamples()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var scheds []gocron.Scheduler
	defer func() {
		for _, s := range scheds {
			_ = s.Shutdown()
		}
	}()
	entered := func(s *samples) func() {
		return func() {
			now := time.Now()
			s.add(now.Truncate(time.Second), now)
		}
	}

	// (a) gocron alone.
	s, err := gocron.NewScheduler()
	if err != nil {
		return err
	}
	if _, err := s.NewJob(gocron.CronJob("* * * * * *", true), gocron.NewTask(entered(alone))); err != nil {
		return err
	}
	scheds = append(scheds, s)

	// (b) gocron with the Locker, three schedulers.
	backend := pgleader.NewPostgres(pool, pgleader.WithLogger(quiet))
	for range replicas {
		l, err := gocronpgleader.NewLocker(pool, gocronpgleader.Options{Window: 500 * time.Millisecond, Backend: backend, Logger: quiet})
		if err != nil {
			return err
		}
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(l))
		if err != nil {
			return err
		}
		body := entered(locked)
		task := l.Task("bench-gocron", func(context.Context, *pgleader.Term, pgleader.JobRun) error { body(); return nil })
		if _, err := s.NewJob(gocron.CronJob("* * * * * *", true), gocron.NewTask(task), gocron.WithName("bench-gocron")); err != nil {
			return err
		}
		scheds = append(scheds, s)
	}
	for _, s := range scheds {
		s.Start()
	}

	// (c) pgleader.RunJob, three runners, each with a backend of its own
	// (its own lease connection), as in three replicas.
	errs := make(chan error, replicas)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for range replicas {
		wg.Go(func() {
			errs <- pgleader.RunJob(ctx, pgleader.NewPostgres(pool, pgleader.WithLogger(quiet)), pgleader.Job{Name: "bench-native", Every: time.Second, Logger: quiet,
				Run: func(_ context.Context, _ *pgleader.Term, r pgleader.JobRun) error {
					native.add(r.Instant, time.Now())
					return nil
				}})
		})
	}

	timeout := time.After(time.Duration(*instants)*time.Second + time.Minute)
	for _, s := range []*samples{alone, locked, native} {
		select {
		case <-s.full:
		case err := <-errs:
			return fmt.Errorf("RunJob: %w", err)
		case <-timeout:
			return errors.New("the instants did not all run within a minute of their time")
		}
	}
	fmt.Println("| scheduler | instants | bodies | p50 | p99 |")
	fmt.Println("|---|---|---|---|---|")
	fmt.Println(alone.row("gocron alone (the floor)"))
	fmt.Println(locked.row(fmt.Sprintf("gocron + gocronpgleader.Locker, %d schedulers", replicas)))
	fmt.Println(native.row(fmt.Sprintf("pgleader.RunJob, %d runners", replicas)))
	return nil
}

// scratch creates a migrated database pgleader_bench_gocron_… and returns
// a pool on it and a function that closes the pool and drops it.
func scratch(ctx context.Context, server string) (*pgxpool.Pool, func(), error) {
	u, err := url.Parse(server)
	if err != nil {
		return nil, nil, err
	}
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		return nil, nil, fmt.Errorf("no PostgreSQL at %s (set DATABASE_URL): %w", u.Redacted(), err)
	}
	name := "pgleader_bench_gocron_" + strings.ToLower(rand.Text()[:16])
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
		if err = migrations.Up(ctx, pool); err != nil {
			pool.Close()
		}
	}
	if err != nil {
		drop()
		return nil, nil, err
	}
	return pool, func() { pool.Close(); drop() }, nil
}
