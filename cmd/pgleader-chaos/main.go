// Command pgleader-chaos tries to break pgleader's safety: it runs replicas
// of the recipe's publisher on a fenced table, injects faults at random
// from a seed, and checks the history for the four properties (see
// docs/safety.md). It exits 1 if any property was broken.
//
//	go run ./cmd/pgleader-chaos [-duration 2m] [-seed N] [-processes] [-own-cluster] [-set-keys 50]
//
// With -set-keys N each replica runs a pgleader.Set over N keys instead of
// an Elector for one key, with the same body for every key it wins, and the
// checker verifies the properties for each key on its own.
//
// By default it uses a scratch database on DATABASE_URL (else
// postgres://postgres@127.0.0.1:5432/postgres), dropped at the end, and
// never restarts that server. With -own-cluster it creates a throwaway
// cluster (initdb into a temporary directory), may restart it, and deletes
// it at the end; if failover is among the faults, the cluster is a primary
// with an asynchronous standby (pg_basebackup), and each failover builds
// the next standby from the new primary.
package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgleader/pgleader/internal/chaos"
	"github.com/pgleader/pgleader/internal/scratch"
	"github.com/pgleader/pgleader/migrations"
	"github.com/pgleader/pgleader/pgleader"
)

var (
	replicaMode = flag.Bool("replica", false, "run as one replica process (set by the program itself)")
	duration    = flag.Duration("duration", 2*time.Minute, "how long to inject faults")
	seed        = flag.Uint64("seed", 0, "the scheduler's seed (0: a random one, printed)")
	replicas    = flag.Int("replicas", 3, "number of replicas")
	setKeys     = flag.Int("set-keys", 0, "run a pgleader.Set over this many keys in each replica (0: one Elector for one key)")
	unitEvery   = flag.Duration("unit-every", 0, "pause between a body's units (default 25ms, or 250ms per key with -set-keys)")
	processes   = flag.Bool("processes", false, "run each replica as an OS process (paused with SIGSTOP)")
	ownCluster  = flag.Bool("own-cluster", false, "use a throwaway PostgreSQL cluster (with a standby), and restart it or fail it over as a fault")
	pgBin       = flag.String("pg-bin", "", "directory of initdb and pg_ctl for -own-cluster (default: found)")
	ttl         = flag.Duration("ttl", 3*time.Second, "lease TTL; the other timings follow the recipe's ratios")
	faults      = flag.String("faults", "", "comma-separated fault kinds (default: all); kinds: "+strings.Join(chaos.AllFaults, ","))
	noFloor     = flag.String("no-floor", "2", "comma-separated replicas without the FenceFloor hook")
	pollOnly    = flag.String("poll-only", "1", "comma-separated replicas without LISTEN/NOTIFY")
	history     = flag.String("history", "", "write the history as JSON lines to this file (and the tables the checker read to FILE.tables.json)")
	verbose     = flag.Bool("v", false, "the electors' logs on standard error")
	recheck     = flag.String("recheck", "", "check the history that -history wrote to this file again (with -ttl and -set-keys as the run had them), and run nothing")
	bound       = flag.Bool("session-bound", false, "turn pgleader.Options.SessionBound on in every replica's Elector (SetOptions.SessionBound with -set-keys); "+
		"the checker then counts P1 overlaps of a holder whose session ended while its process lived apart")
)

func main() {
	flag.Parse()
	if *replicaMode || os.Getenv(chaos.ReplicaEnv) != "" {
		os.Exit(chaos.ReplicaMain())
	}
	if *recheck != "" {
		os.Exit(recheckHistory(*recheck))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgleader-chaos:", err)
		code = 2
	}
	os.Exit(code)
}

func run(ctx context.Context) (int, error) {
	if *seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		*seed = binary.LittleEndian.Uint64(b[:]) >> 1
	}
	cfg := chaos.Config{Seed: *seed, Duration: *duration, Log: os.Stdout}
	cfg.Replicas, cfg.Verbose, cfg.SetKeys, cfg.UnitEvery = *replicas, *verbose, *setKeys, *unitEvery
	cfg.SessionBound = *bound
	cfg.Spec = pgleader.Spec{Key: "digest-publisher", TTL: *ttl, RequireFenceAdvance: true}
	var err error
	if cfg.NoFloor, err = ints(*noFloor); err != nil {
		return 2, fmt.Errorf("-no-floor: %w", err)
	}
	if cfg.PollOnly, err = ints(*pollOnly); err != nil {
		return 2, fmt.Errorf("-poll-only: %w", err)
	}
	if *faults != "" {
		cfg.Faults = strings.Split(*faults, ",")
	}
	if *processes {
		self, err := os.Executable()
		if err != nil {
			return 2, err
		}
		cfg.Command = []string{self, "-replica"}
	}

	if *ownCluster {
		bin := *pgBin
		if bin == "" {
			if bin, err = chaos.FindPostgresBin(); err != nil {
				return 2, err
			}
		}
		if cfg.Faults == nil || slices.Contains(cfg.Faults, chaos.FaultFailover) {
			cluster, err := chaos.StartReplicated(ctx, bin, chaos.ClusterOptions{})
			if err != nil {
				return 2, err
			}
			defer stopCluster(cluster)
			fmt.Printf("own cluster in %s (%s, with a standby)\n", cluster.Dir(), cluster.Primary())
			cfg.URL, cfg.Restart, cfg.Cluster = cluster.URL(), cluster.Restart, cluster
		} else {
			cluster, err := chaos.StartCluster(ctx, bin)
			if err != nil {
				return 2, err
			}
			defer stopCluster(cluster)
			fmt.Printf("own cluster in %s\n", cluster.Dir())
			cfg.URL, cfg.Restart = cluster.URL(), cluster.Restart
		}
	} else {
		server := os.Getenv("DATABASE_URL")
		if server == "" {
			server = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
		}
		u, drop, err := scratch.Database(ctx, server, "pgleader_chaos_")
		if err != nil {
			return 2, err
		}
		defer drop()
		cfg.URL = u
	}
	if err := migrations.UpURL(ctx, cfg.URL); err != nil {
		return 2, err
	}
	// The grace after a crash restart or a promotion (docs/ha.md) lasts
	// max_ttl: keep it to the TTL. The standby replays the setting.
	if err := setMaxTTL(ctx, cfg.URL, *ttl); err != nil {
		return 2, err
	}

	mode := "goroutines"
	if *processes {
		mode = "processes"
	}
	if *setKeys > 0 {
		mode += fmt.Sprintf("  a set of %d keys", *setKeys)
	}
	spec := cfg.Spec
	fmt.Printf("pgleader-chaos  seed %d  %s  %d replicas (no FenceFloor: %s; poll-only: %s)  own cluster: %v\n",
		*seed, mode, *replicas, orNone(*noFloor), orNone(*pollOnly), *ownCluster)
	fmt.Printf("reproduce: go run ./cmd/pgleader-chaos -seed %d -duration %v -ttl %v%s\n", *seed, *duration, *ttl, extraFlags())
	out, err := chaos.Run(ctx, cfg)
	if err != nil {
		return 2, err
	}
	spec = out.Spec
	fmt.Printf("\nspec: TTL %v, RenewEvery %v, CampaignEvery %v, Margin %v, YieldGrace %v, ReleaseTimeout %v\n",
		spec.TTL, spec.RenewEvery, spec.CampaignEvery, spec.Margin, spec.YieldGrace, spec.ReleaseTimeout)
	fmt.Printf("seed: %d\n", out.Seed)
	out.Report.Summary(os.Stdout)
	if *history != "" {
		if err := out.WriteHistory(*history); err != nil {
			return 2, err
		}
		fmt.Printf("history: %s\n", *history)
	}
	if !out.Report.OK() {
		return 1, nil
	}
	return 0, nil
}

// recheckHistory checks a saved history again and prints the report.
func recheckHistory(path string) int {
	r, err := chaos.Recheck(path, pgleader.Spec{Key: "digest-publisher", TTL: *ttl, RequireFenceAdvance: true}, *setKeys > 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgleader-chaos: -recheck:", err)
		return 2
	}
	r.Summary(os.Stdout)
	if !r.OK() {
		return 1
	}
	return 0
}

func stopCluster(c interface{ Stop() error }) {
	if err := c.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "pgleader-chaos: stop the cluster:", err)
	}
}

func setMaxTTL(ctx context.Context, url string, ttl time.Duration) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `SELECT pgleader.set_max_ttl($1::interval)`, ttl.String())
	return err
}

func extraFlags() string {
	var b strings.Builder
	flag.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "seed", "duration", "ttl", "history", "v":
		default:
			fmt.Fprintf(&b, " -%s=%s", f.Name, f.Value)
		}
	})
	return b.String()
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func ints(list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}
