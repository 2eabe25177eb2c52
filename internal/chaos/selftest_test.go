package chaos_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pgleader/pgleader/internal/chaos"
	"github.com/pgleader/pgleader/internal/hook"
	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/internal/tcpproxy"
	"github.com/pgleader/pgleader/pgleader"
)

// These tests show that the checker can fail: each breaks pgleader or the
// store on purpose, sets up the scenario deterministically, and requires
// the breach to be reported, and the same scenario unbroken to pass.

// fastSpec is the recipe's ratios at TTL 3s, as the chaos runs use.
func fastSpec() pgleader.Spec {
	return pgleader.Spec{Key: "digest-publisher", TTL: 3 * time.Second, RequireFenceAdvance: true}
}

func newHarness(t *testing.T, cfg chaos.HarnessConfig) *chaos.Harness {
	t.Helper()
	db := pgtest.New(t)
	cfg.URL = db.URL
	h, err := chaos.NewHarness(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out after %v waiting for %s", within, what)
}

// writes counts replica's write events with the given result.
func writes(h *chaos.Harness, replica int, result chaos.Result) int {
	events, err := h.History().Events()
	if err != nil {
		panic(err) // a test's spool in its temporary directory cannot fail quietly
	}
	n := 0
	for _, e := range events {
		if e.Kind == chaos.KindWrite && e.Replica == replica && e.Result == result {
			n++
		}
	}
	return n
}

func leads(h *chaos.Harness, replica int) bool {
	l, ok := h.Leader(context.Background())
	return ok && l == replica
}

func finish(t *testing.T, h *chaos.Harness) *chaos.Report {
	t.Helper()
	h.StopAll()
	tables, err := h.Tables(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	events, err := h.History().Events()
	if err != nil {
		t.Fatal(err)
	}
	r := chaos.Check(events, tables, h.Spec(), h.IsSet())
	var b strings.Builder
	r.Summary(&b)
	t.Logf("checker's report:\n%s", b.String())
	return r
}

// TestCheckerCatchesNoYield breaks the term's timeline with hook.NoYield.
// The leader's lease path is cut, so its renewals fail while its store path
// works: with the yield it stops writing at Y, before its lease expires;
// without, it writes past the expiry, and property 1b must be reported.
//
// Not parallel: hook.NoYield is process-wide, and parallel tests run only
// after this one has finished.
func TestCheckerCatchesNoYield(t *testing.T) {
	run := func(t *testing.T, noYield bool) *chaos.Report {
		hook.NoYield.Store(noYield)
		t.Cleanup(func() { hook.NoYield.Store(false) })
		h := newHarness(t, chaos.HarnessConfig{Replicas: 1, Spec: fastSpec()})
		if err := h.Start(0); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "r0 to lead and write", 10*time.Second, func() bool { return leads(h, 0) && writes(h, 0, chaos.OK) > 3 })
		h.Partition(0, chaos.LeasePath, tcpproxy.Drop, 0, 0)
		time.Sleep(h.Spec().TTL + time.Second) // the lease expires on the database meanwhile
		return finish(t, h)
	}
	t.Run("yield", func(t *testing.T) {
		if r := run(t, false); !r.OK() {
			t.Fatalf("violations with the yield working: %v", r.Violations)
		}
	})
	t.Run("no-yield", func(t *testing.T) {
		r := run(t, true)
		if !r.Has(chaos.PropWithinLease) {
			t.Fatalf("hook.NoYield let the leader write past its lease, and the checker did not report property 1b: %v", r.Violations)
		}
	})
}

// TestCheckerCatchesBrokenStore removes the fence condition from the
// store's write. The recipe's stale writer: the leader is paused after its
// Live check, its lease data is lost, a new term claims and writes, and the
// old leader resumes its write. The fenced store refuses it; the broken one
// accepts a lower token after a higher one, and property 2 must be
// reported.
func TestCheckerCatchesBrokenStore(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, broken bool) *chaos.Report {
		// r1 polls, so it campaigns soon after the wipe rather than at the
		// old lease's expiry.
		h := newHarness(t, chaos.HarnessConfig{Replicas: 2, Spec: fastSpec(), PollOnly: []int{1}, Broken: broken})
		if err := h.Start(0); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "r0 to lead and write", 10*time.Second, func() bool { return leads(h, 0) && writes(h, 0, chaos.OK) > 3 })
		if err := h.Start(1); err != nil {
			t.Fatal(err)
		}
		h.Pause(0, true)
		time.Sleep(100 * time.Millisecond) // r0's body reaches its next write and is held there
		held := writes(h, 0, chaos.OK)
		if _, err := h.Wipe(context.Background()); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "r1 to lead and write", 10*time.Second, func() bool { return writes(h, 1, chaos.OK) > 0 })
		h.Resume(0)
		waitFor(t, "r0's held write to be answered", 10*time.Second, func() bool {
			return writes(h, 0, chaos.OK) > held || writes(h, 0, chaos.Refused) > 0
		})
		return finish(t, h)
	}
	t.Run("fenced", func(t *testing.T) {
		t.Parallel()
		r := run(t, false)
		if !r.OK() || r.StaleRefused != 1 {
			t.Fatalf("violations %v, stale writes refused %d; want none and 1", r.Violations, r.StaleRefused)
		}
	})
	t.Run("broken", func(t *testing.T) {
		t.Parallel()
		r := run(t, true)
		if !r.Has(chaos.PropMonotonic) {
			t.Fatalf("the broken store accepted a stale token and the checker did not report property 2: %v", r.Violations)
		}
	})
}
