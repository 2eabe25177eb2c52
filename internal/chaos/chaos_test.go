package chaos_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgleader/pgleader/internal/chaos"
	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/migrations"
)

// CI's short seeded runs. A failure prints the seed and the checker's
// report; `go run ./cmd/pgleader-chaos -seed N` replays the same faults.

func shortRun(t *testing.T, cfg chaos.Config) *chaos.Outcome {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = pgtest.New(t).URL
	}
	cfg.Spec = fastSpec()
	cfg.NoFloor, cfg.PollOnly = []int{2}, []int{1}
	var log strings.Builder
	cfg.Log = &log
	out, err := chaos.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	out.Report.Summary(&b)
	t.Logf("seed %d\n%s\n%s", cfg.Seed, log.String(), b.String())
	if !out.Report.OK() {
		if path, err := keepHistory(t, out); err != nil {
			t.Logf("the history could not be kept: %v", err)
		} else {
			t.Logf("history (JSON lines) kept in %s, and the tables the checker read in %s.tables.json", path, path)
		}
		t.Fatalf("seed %d broke a property: %v", cfg.Seed, out.Report.Violations)
	}
	if out.Report.Writes == 0 || out.Report.Terms < 2 || len(out.Report.Recoveries) == 0 {
		t.Fatalf("seed %d: the run did too little to prove anything: %+v", cfg.Seed, out.Report)
	}
	return out
}

// everyFaultBut returns every fault kind except the server restart, which
// needs a cluster of the test's own.
func everyFaultBut(skip ...string) []string {
	var out []string
	for _, f := range chaos.AllFaults {
		if !slices.Contains(skip, f) {
			out = append(out, f)
		}
	}
	return out
}

// TestChaosShort runs three goroutine replicas for a minute under every
// fault but the server restart.
func TestChaosShort(t *testing.T) {
	shortRun(t, chaos.Config{Seed: 2, Duration: 60 * time.Second, Faults: everyFaultBut(chaos.FaultPGRestart)})
}

// TestChaosSet runs three goroutine replicas, each running a pgleader.Set
// over 20 keys, for 10s under every fault but the server's restart and
// failover. The checker holds every key to every property on its own.
func TestChaosSet(t *testing.T) {
	const keys = 20
	out := shortRun(t, chaos.Config{Seed: 2, Duration: 10 * time.Second, Faults: everyFaultBut(chaos.FaultPGRestart, chaos.FaultFailover),
		HarnessConfig: chaos.HarnessConfig{SetKeys: keys}})
	r := out.Report
	if len(r.Keys) != keys {
		t.Fatalf("seed 2: the checker saw %d keys, want %d: %+v", len(r.Keys), keys, r.Keys)
	}
	for _, k := range r.Keys {
		if k.TermsWrote == 0 {
			t.Errorf("seed 2: key %s had no term that wrote: %+v", k.Key, k)
		}
	}
	owners := map[string]bool{}
	for _, e := range out.Events {
		if e.Kind == chaos.KindWrite && e.Result == chaos.OK {
			owners[e.Owner[:strings.Index(e.Owner, ".")]] = true
		}
	}
	if len(owners) < 2 {
		t.Errorf("seed 2: only %v wrote; the set did not share its keys", owners)
	}
}

// TestChaosProcesses runs three replica processes (this test binary,
// re-executed) for a shorter while: stops and crashes are real, pauses are
// SIGSTOP.
func TestChaosProcesses(t *testing.T) {
	shortRun(t, chaos.Config{Seed: 7, Duration: 20 * time.Second, Faults: everyFaultBut(chaos.FaultPGRestart),
		HarnessConfig: chaos.HarnessConfig{Command: []string{os.Args[0]}}})
}

// TestChaosFailover runs three goroutine replicas for 12s on a cluster of
// the test's own, a primary with an asynchronous standby, failing it over
// (replication cut up to a TTL before the primary is killed, so
// acknowledged rows are lost) among crashes and wipes. It needs the
// PostgreSQL server binaries, pg_basebackup among them.
func TestChaosFailover(t *testing.T) {
	bin := pgtest.ServerBin(t)
	ctx := context.Background()
	cluster, err := chaos.StartReplicated(ctx, bin, chaos.ClusterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })
	url := cluster.URL()
	if err := migrations.UpURL(ctx, url); err != nil {
		t.Fatal(err)
	}
	// The grace after a promotion lasts max_ttl: keep it to the TTL.
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.Exec(ctx, `SELECT pgleader.set_max_ttl($1::interval)`, fastSpec().TTL.String())
	db.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := shortRun(t, chaos.Config{HarnessConfig: chaos.HarnessConfig{URL: url}, Seed: 3, Duration: 12 * time.Second,
		Faults: []string{chaos.FaultFailover, chaos.FaultCrash, chaos.FaultWipe}, Restart: cluster.Restart, Cluster: cluster})
	if len(out.Report.Failovers) == 0 {
		t.Fatalf("seed 3: no failover happened: %+v", out.Report)
	}
}

// keepHistory writes a failed run's history and tables to a file of the
// system's temporary directory that outlives the test, to find out why.
func keepHistory(t *testing.T, out *chaos.Outcome) (string, error) {
	f, err := os.CreateTemp("", "pgleader-"+t.Name()+"-*.jsonl")
	if err != nil {
		return "", err
	}
	f.Close()
	return f.Name(), out.WriteHistory(f.Name())
}
