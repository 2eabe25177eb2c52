// Command pgleader-bench measures pgleader against a local PostgreSQL and
// prints a table: graceful handover with and without NOTIFY, crash failover,
// the statements idle candidates and leaders issue, the cost of fenced
// writes, and the cost of sets. It creates scratch databases, drops them at
// the end, and touches nothing else.
//
// Three parts look at the hand-off from further out: with each of its
// speed-ups switched off (mechanisms), between two processes that use only
// the public API (api), and as a deploy does it, SIGTERMing the leading
// examples/publisher process, built from this checkout or older ones
// (deploy: -deploy-src). One SIGKILLs the leading replica process, with
// session-bound leases (Options.SessionBound) and without (bound).
//
//	go run ./cmd/pgleader-bench [-handovers 50] [-failovers 10] [-bound-failovers 20] [-load 30s] [-only sets]
//
// The server is DATABASE_URL, else postgres://postgres@127.0.0.1:5432/postgres.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/scratch"
	"github.com/pgleader/pgleader/internal/wait"
	"github.com/pgleader/pgleader/migrations"
	"github.com/pgleader/pgleader/pgleader"
)

var (
	handovers     = flag.Int("handovers", 50, "graceful handovers per mode")
	agedHandovers = flag.Int("aged-handovers", 20, "graceful hand-offs to a candidate whose registration is older than RenewEvery + Margin")
	failovers     = flag.Int("failovers", 10, "crash failovers (each takes about one TTL)")
	loadFor       = flag.Duration("load", 30*time.Second, "how long to count statements of an idle candidate and a leader")
	fenceFor      = flag.Duration("fence", 500*time.Millisecond, "duration of each fenced-write measurement round")
	rounds        = flag.Int("rounds", 5, "interleaved rounds of fenced-write measurements")
	only          = flag.String("only", "", "comma-separated subset: handover,mechanisms,api,deploy,failover,bound,load,fence,sets")
	setBig        = flag.Int("set-keys", 10000, "keys held by one process in the sets measurement")
	setShared     = flag.Int("set-shared", 1000, "keys shared by three replicas in the sets measurement")
	setScale      = intList("set-scale", "10000,100000", "key counts shared by three replicas in the sets scale measurement (issue 27)")
	setFor        = flag.Duration("set-for", 20*time.Second, "how long each sets load measurement counts")
	setTrace      = flag.Bool("set-trace", false, "print every statement of the sets scale measurement, with its start and duration (to stderr)")
)

// quiet discards the electors' logs; the bench prints its own table.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// recipe is the recipe's spec: TTL 6s, renew 2s, campaign 500ms, margin
// 500ms, grace 1s, release 500ms.
func recipe(key string) pgleader.Spec {
	return pgleader.Spec{Key: key, TTL: 6 * time.Second, RenewEvery: 2 * time.Second,
		CampaignEvery: 500 * time.Millisecond, Margin: 500 * time.Millisecond,
		YieldGrace: time.Second, ReleaseTimeout: 500 * time.Millisecond, RequireFenceAdvance: true}
}

func main() {
	flag.Parse()
	if *apiChild {
		if err := runAPIChild(flag.Args()); err != nil {
			fmt.Fprintln(os.Stderr, "pgleader-bench -api-child:", err)
			os.Exit(1)
		}
		return
	}
	if *setChild {
		if err := runSetChild(flag.Args()); err != nil {
			fmt.Fprintln(os.Stderr, "pgleader-bench -set-child:", err)
			os.Exit(1)
		}
		return
	}
	if *setBound && !*setProcs {
		// In one process a crash fails the replica's statements while its
		// sessions live on: nothing would end its bound session.
		fmt.Fprintln(os.Stderr, "pgleader-bench: -set-bound needs -set-procs (a crash must end the replica's process, and with it its sessions)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "pgleader-bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	server := os.Getenv("DATABASE_URL")
	if server == "" {
		server = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	dbURL, drop, err := scratch.Database(ctx, server, "pgleader_bench_")
	if err != nil {
		return err
	}
	defer drop()
	if err := migrations.UpURL(ctx, dbURL); err != nil {
		return err
	}
	b := &bench{url: dbURL, server: server}
	if err := b.init(ctx); err != nil {
		return err
	}
	defer b.admin.Close()

	var version string
	_ = b.admin.QueryRow(ctx, `SHOW server_version`).Scan(&version)
	host, _ := os.Hostname()
	fmt.Printf("pgleader-bench  %s  go %s  %s/%s  %d CPUs  PostgreSQL %s  host %s\n",
		time.Now().UTC().Format(time.RFC3339), runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), version, host)
	fmt.Println("spec: TTL 6s, RenewEvery 2s, CampaignEvery 500ms, Margin 500ms, YieldGrace 1s, ReleaseTimeout 500ms")

	want := func(name string) bool { return *only == "" || strings.Contains(","+*only+",", ","+name+",") }
	rtt, err := b.roundTrip(ctx, 50, 500, func() time.Duration { return 0 })
	if err != nil {
		return err
	}
	idleRTT, err := b.roundTrip(ctx, 50, 500, func() time.Duration { return 10 * time.Millisecond })
	if err != nil {
		return err
	}
	fmt.Printf("single-row UPDATE round trip, median of 500: back to back %s; after 10 ms idle %s\n", ms(rtt), ms(idleRTT))
	var cold floors
	if want("handover") {
		if cold, err = b.coldRoundTrips(ctx); err != nil {
			return err
		}
		fmt.Printf("after an idle spell drawn from 0–%v (a stop in this bench), median of %d: %s; from 0–%v (a stop at any point of a leader's renewal cycle), median of %d: %s\n",
			benchIdle, benchSamples, ms(cold.bench), recipe("").RenewEvery, cycleSamples, ms(cold.cycle))
	}
	fmt.Println()

	if want("handover") {
		if err := b.handoverTable(ctx, rtt, idleRTT, cold); err != nil {
			return fmt.Errorf("handover: %w", err)
		}
	}
	if want("mechanisms") {
		if err := b.mechanismsTable(ctx); err != nil {
			return fmt.Errorf("mechanisms: %w", err)
		}
	}
	if want("api") {
		if err := b.apiTable(ctx); err != nil {
			return fmt.Errorf("api: %w", err)
		}
	}
	if want("deploy") {
		if err := b.deployTable(ctx); err != nil {
			return fmt.Errorf("deploy: %w", err)
		}
	}
	if want("failover") {
		if err := b.failoverTable(ctx); err != nil {
			return fmt.Errorf("failover: %w", err)
		}
	}
	if want("bound") {
		if err := b.boundTable(ctx); err != nil {
			return fmt.Errorf("bound: %w", err)
		}
	}
	if want("load") {
		if err := b.loadTable(ctx); err != nil {
			return fmt.Errorf("load: %w", err)
		}
	}
	if want("fence") {
		if err := b.fenceTable(ctx); err != nil {
			return fmt.Errorf("fence: %w", err)
		}
	}
	if want("sets") {
		if err := b.setsTable(ctx); err != nil {
			return fmt.Errorf("sets: %w", err)
		}
	}
	return nil
}

type bench struct {
	url    string
	server string // the server's URL, for more scratch databases
	admin  *pgxpool.Pool
}

func (b *bench) init(ctx context.Context) error {
	var err error
	b.admin, err = pgxpool.New(ctx, b.url)
	if err != nil {
		return err
	}
	_, err = b.admin.Exec(ctx, `
		CREATE TABLE digests (name text PRIMARY KEY, body text, fence bigint NOT NULL DEFAULT 0);
		CREATE TABLE rtt (id int PRIMARY KEY, n bigint NOT NULL);
		INSERT INTO rtt VALUES (1, 0);`)
	return err
}

// roundTrip is the median time of n single-row UPDATEs, the unit of the
// physical floor, each sent after idle() of quiet, after warm unmeasured.
// On this kind of virtual machine a process that slept takes long to wake,
// the longer the sleep (for a SELECT 1 about 0.4 ms after 50 ms, 1.6 ms
// after a second), and every statement of a handover follows a quiet spell.
func (b *bench) roundTrip(ctx context.Context, warm, n int, idle func() time.Duration) (time.Duration, error) {
	c, err := b.admin.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer c.Release()
	var samples []time.Duration
	for i := 0; i < warm+n; i++ {
		if d := idle(); d > 0 && !wait.Sleep(ctx, d) {
			return 0, ctx.Err()
		}
		start := time.Now()
		if _, err := c.Exec(ctx, `UPDATE rtt SET n = n + 1 WHERE id = 1`); err != nil {
			return 0, err
		}
		if i >= warm {
			samples = append(samples, time.Since(start))
		}
	}
	return percentile(samples, 50), nil
}

// floors are single-row UPDATE round trips after the idle spells a
// hand-off's first statement follows: the leader's hand_off is the first
// statement on its connection since its last renewal (or, early in a term,
// since the hand-off rehearsal).
type floors struct{ bench, cycle time.Duration }

// How many cold round trips each floor takes the median of: a cycle's
// spells are four times as long.
const benchSamples, cycleSamples = 100, 50

func (b *bench) coldRoundTrips(ctx context.Context) (floors, error) {
	var f floors
	var err error
	spread := func(d time.Duration) func() time.Duration {
		return func() time.Duration { return time.Duration(rand.Int64N(int64(d))) }
	}
	if f.bench, err = b.roundTrip(ctx, 2, benchSamples, spread(benchIdle)); err != nil {
		return f, err
	}
	f.cycle, err = b.roundTrip(ctx, 2, cycleSamples, spread(recipe("").RenewEvery))
	return f, err
}
