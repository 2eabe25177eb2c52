package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/pgleader/pgleader/internal/wait"
	"github.com/pgleader/pgleader/pgleader"
)

// Config is one chaos run.
type Config struct {
	HarnessConfig
	// Seed drives the fault scheduler.
	Seed uint64
	// Duration is how long faults are injected, before the final heal.
	Duration time.Duration
	// Faults are the kinds to inject. Default AllFaults (FaultPGRestart
	// only with Restart, FaultFailover only with Cluster).
	Faults []string
	// Restart, if set, restarts the database server: the own cluster's
	// Restart. Never set it for a server others use.
	Restart func(ctx context.Context, immediate bool, down time.Duration) error
	// Cluster, if set, is the replicated cluster that URL is on (its
	// first primary), for FaultFailover.
	Cluster *Replicated
	// Log receives progress lines. Default io.Discard.
	Log io.Writer
}

// Outcome is what a run leaves: its history, the tables, and the verdict.
type Outcome struct {
	Seed   uint64
	Spec   pgleader.Spec
	Events []Event
	Tables Tables
	Report *Report
}

// WriteHistory writes the run's history to path as JSON lines, and the
// tables the checker read beside it, to path.tables.json, to investigate a
// violation.
func (o *Outcome) WriteHistory(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := (&History{events: o.Events}).WriteJSON(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	b, err := json.Marshal(o.Tables)
	if err != nil {
		return err
	}
	return os.WriteFile(path+".tables.json", b, 0o644)
}

// Run starts the replicas, injects faults for cfg.Duration, heals
// everything, waits for a leader to write, stops the replicas, reads the
// tables and checks the history.
func Run(ctx context.Context, cfg Config) (*Outcome, error) {
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.Faults == nil {
		cfg.Faults = AllFaults
	}
	h, err := NewHarness(ctx, cfg.HarnessConfig)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	if err := h.StartAll(); err != nil {
		return nil, err
	}
	spec := h.Spec()
	// Let the first leader settle before the first fault.
	wait.Sleep(ctx, spec.TTL)
	s := NewScheduler(h, cfg.Seed, cfg.Faults, cfg.Restart, cfg.Cluster, cfg.Log)
	if err := s.Run(ctx, cfg.Duration); err != nil {
		return nil, err
	}
	h.StopAll() // the last terms end as stopped and release
	tables, err := h.Tables(context.WithoutCancel(ctx))
	if err != nil {
		return nil, fmt.Errorf("chaos: read the tables: %w", err)
	}
	events, err := h.History().Events()
	if err != nil {
		return nil, err
	}
	return &Outcome{Seed: cfg.Seed, Spec: spec, Events: events, Tables: tables, Report: Check(events, tables, spec, h.IsSet())}, nil
}

// Summary writes the report's figures and violations.
func (r *Report) Summary(w io.Writer) {
	fmt.Fprintf(w, "run length:          %v\n", r.End.Sub(r.Start).Round(100*time.Millisecond))
	total := 0
	for _, n := range r.Faults {
		total += n
	}
	fmt.Fprintf(w, "faults:              %d (%s)\n", total, counts(r.Faults))
	handOffs := fmt.Sprintf("%d handed off", r.HandOffs)
	if r.Set {
		handOffs = "a set's hand-offs counted as releases"
	}
	fmt.Fprintf(w, "terms:               %d acquired, %d wrote (ends: %s), %s\n", r.Terms, r.TermsWrote, counts(r.EndReasons), handOffs)
	if len(r.Keys) > 1 {
		fmt.Fprintf(w, "keys:                %d, checked one by one (terms per key: %s; units per key: %s)\n", len(r.Keys),
			spread(r.Keys, func(k KeyFigures) int { return k.Terms }), spread(r.Keys, func(k KeyFigures) int { return k.Writes }))
	}
	fmt.Fprintf(w, "writes accepted:     %d (%d acknowledged to a replica)\n", r.Writes, r.Acked)
	fmt.Fprintf(w, "stale writes refused: %d (claims refused %d, writes without answer %d)\n", r.StaleRefused, r.ClaimsRefused, r.WriteErrors)
	fmt.Fprintf(w, "lease wipes:         %d (units written after their lease row was wiped: %d)\n", r.Wipes, r.WritesAfterWipe)
	fmt.Fprintf(w, "late after a pause:  %d (units paused between Live and send, landed after the lease)\n", r.LateAfterPause)
	fmt.Fprintf(w, "harness stalls:      %d, longest %v (its process, proxies included, made no progress; units late after one: %d)\n",
		r.Stalls, r.MaxStall.Round(time.Millisecond), r.LateAfterStall)
	if r.SessionBound {
		r.lapseSummary(w)
	}
	if len(r.Failovers) > 0 || r.LostUnits > 0 || r.LostTerms > 0 {
		fmt.Fprintf(w, "failovers:           %d (lost with the failed primary, excused: %d acknowledged units, %d won terms; %d terms ended by a release without an answer)\n",
			len(r.Failovers), r.LostUnits, r.LostTerms, r.UnansweredReleases)
		leader, write := r.FailoverTimes()
		fmt.Fprintf(w, "  promotion → next term:                  %s\n", leader)
		fmt.Fprintf(w, "  promotion → a new term's first write:   %s\n", write)
		for _, f := range r.Failovers {
			fmt.Fprintf(w, "  %s → %s promoted %s: next term after %s, a new term's first write after %s\n", f.Old, f.New,
				fmtTime(f.Promoted), fmtDur(f.ToLeader), fmtDur(f.ToWrite))
		}
	}
	if len(r.Recoveries) > 0 {
		worst := slices.Max(r.Recoveries)
		var sum time.Duration
		for _, d := range r.Recoveries {
			sum += d
		}
		of := ""
		if len(r.Keys) > 1 {
			of = " (every key)"
		}
		fmt.Fprintf(w, "recoveries:          %d heals, leader back%s in mean %v, max %v (bound %v)\n", len(r.Recoveries), of,
			(sum / time.Duration(len(r.Recoveries))).Round(time.Millisecond), worst.Round(time.Millisecond), r.RecoveryBound)
	}
	order := "clock_timestamp() at insert (the server does not track commit timestamps)"
	if r.CommitTimes {
		order = "commit timestamps"
	}
	fmt.Fprintf(w, "commit order:        log id order checked against %s\n", order)
	fmt.Fprintf(w, "violations:          %d\n", len(r.Violations))
	for i, v := range r.Violations {
		if i == 50 {
			fmt.Fprintf(w, "  … and %d more\n", len(r.Violations)-i)
			break
		}
		fmt.Fprintf(w, "  %s\n", v)
	}
}

// FailoverTimes summarizes the failovers: the times from promotion to the
// next term, and to its first accepted unit, as "p50 …, max … (n of m)".
func (r *Report) FailoverTimes() (leader, write string) {
	var ls, ws []time.Duration
	for _, f := range r.Failovers {
		if f.ToLeader > 0 {
			ls = append(ls, f.ToLeader)
		}
		if f.ToWrite > 0 {
			ws = append(ws, f.ToWrite)
		}
	}
	return quantiles(ls, len(r.Failovers)), quantiles(ws, len(r.Failovers))
}

func quantiles(ds []time.Duration, of int) string {
	if len(ds) == 0 {
		return fmt.Sprintf("none (of %d)", of)
	}
	slices.Sort(ds)
	return fmt.Sprintf("p50 %v, max %v (%d of %d failovers; the rest had none before the next failover or the end)",
		ds[(len(ds)-1)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond), len(ds), of)
}

func fmtDur(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}

// spread returns "min a, mean b, max c" of f over the keys.
func spread(keys []KeyFigures, f func(KeyFigures) int) string {
	lo, hi, sum := f(keys[0]), f(keys[0]), 0
	for _, k := range keys {
		lo, hi, sum = min(lo, f(k)), max(hi, f(k)), sum+f(k)
	}
	return fmt.Sprintf("min %d, mean %.1f, max %d", lo, float64(sum)/float64(len(keys)), hi)
}

func counts(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// Recheck checks a history that Outcome.WriteHistory wrote to path (and
// the tables beside it) again, with spec's timing (its defaults filled in
// as the run had them) and set as the run had it: to check a run's
// history with a newer checker.
func Recheck(path string, spec pgleader.Spec, set bool) (*Report, error) {
	spec, err := resolveSpec(spec)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := &History{}
	if err := readEvents(f, h); err != nil {
		return nil, fmt.Errorf("chaos: read %s: %w", path, err)
	}
	b, err := os.ReadFile(path + ".tables.json")
	if err != nil {
		return nil, err
	}
	var t Tables
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, err
	}
	events, err := h.Events()
	if err != nil {
		return nil, err
	}
	return Check(events, t, spec, set), nil
}
