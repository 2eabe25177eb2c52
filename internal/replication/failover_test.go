package replication_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgleader/pgleader/internal/chaos"
)

func variants() []*variant {
	return []*variant{{grace: false, db: "nograce"}, {grace: true, db: "grace"}}
}

func startStandby(t *testing.T, primary *chaos.Cluster, source string, opts chaos.ClusterOptions) *chaos.Cluster {
	t.Helper()
	s, err := primary.StartStandby(context.Background(), source, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// startC starts C with both paths on the primary, each through a proxy of
// its own, and waits for its first accepted unit.
func startC(t *testing.T, v *variant, primary string) {
	t.Helper()
	v.cLease, v.cStore = startProxy(t, primary), startProxy(t, primary)
	v.c = startReplica(t, "C", dbURL(v.cLease.Addr(), v.db), dbURL(v.cStore.Addr(), v.db), v.hist)
}

func waitCWrote(t *testing.T, vs []*variant) {
	t.Helper()
	for _, v := range vs {
		waitUntil(t, "C to write", liveness, func() bool { _, ok := v.hist.firstWrite("C", time.Time{}); return ok })
	}
}

// takeOver moves the primary's address to the server at addr: C's store
// path follows it (its lease path stays where it was, so C's renewals fail
// and it writes until its yield), and D starts there.
func takeOver(t *testing.T, vs []*variant, addr string) {
	t.Helper()
	now := time.Now()
	for _, v := range vs {
		v.promotedAt = now
		v.cStore.Retarget(addr)
		d := startProxy(t, addr)
		v.d = startReplica(t, "D", dbURL(d.Addr(), v.db), dbURL(d.Addr(), v.db), v.hist)
	}
}

// TestAsyncFailover is issue 13's worked example. L holds term 1 on the
// primary P, replicated; replication is then cut, L releases, C acquires
// term 2 on P and writes. P dies, the standby S is promoted with L's row
// (expiring 1s after it was taken), and the primary's address moves to S.
// C's renewals go nowhere, so C writes to S until its yield; D campaigns
// on S. Without the grace (the control) D draws token 2 again at once and
// both write; with it D waits until C's term is over.
func TestAsyncFailover(t *testing.T) {
	t.Parallel()
	bin := postgresBin(t)
	ctx := context.Background()
	primary := startCluster(t, bin, chaos.ClusterOptions{})
	repl := startProxy(t, primary.Addr())
	standby := startStandby(t, primary, repl.Addr(), chaos.ClusterOptions{})
	vs := variants()
	var releases []func()
	for _, v := range vs {
		v.prepare(t, primary.Addr())
		releases = append(releases, hold(t, dbURL(primary.Addr(), v.db)))
	}
	waitReplayed(t, pool(t, dbURL(primary.Addr(), "postgres")), pool(t, dbURL(standby.Addr(), "postgres")))
	repl.Cut() // nothing from here on reaches the standby
	for i, v := range vs {
		releases[i]()
		startC(t, v, primary.Addr())
	}
	waitCWrote(t, vs)
	if err := primary.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	takeOver(t, vs, standby.Addr())
	verdict(t, vs)
}

// TestPromotionClockAhead promotes a standby whose clock runs 2s ahead of
// the primary's (libfaketime), more than Margin. C's term, renewed on the
// primary and replicated, ends 2s early on the standby's clock; C cannot
// reach the new primary to renew and writes until its yield. Without the
// grace D takes the lease while C is still live; with it D waits.
func TestPromotionClockAhead(t *testing.T) {
	t.Parallel()
	bin := postgresBin(t)
	lib := faketimeLib(t)
	ctx := context.Background()
	primary := startCluster(t, bin, chaos.ClusterOptions{})
	standby := startStandby(t, primary, primary.Addr(), chaos.ClusterOptions{
		Env: []string{"LD_PRELOAD=" + lib, "FAKETIME=+2s", "DONT_FAKE_MONOTONIC=1"}})
	sp := pool(t, dbURL(standby.Addr(), "postgres"))
	var standbyNow time.Time
	if err := sp.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&standbyNow); err != nil {
		t.Fatal(err)
	}
	if ahead := time.Until(standbyNow); ahead < 1500*time.Millisecond {
		t.Fatalf("the standby's clock is %v ahead; libfaketime did not take (want about 2s)", ahead)
	}
	vs := variants()
	for _, v := range vs {
		v.prepare(t, primary.Addr())
		startC(t, v, primary.Addr())
	}
	waitCWrote(t, vs)
	// Fail over right after C's renewal reached the standby.
	c := vs[0].c
	last := c.el.Status().LastRenewSent
	waitUntil(t, "C to renew", liveness, func() bool { return c.el.Status().LastRenewSent.After(last) })
	waitReplayed(t, pool(t, dbURL(primary.Addr(), "postgres")), sp)
	if err := primary.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	takeOver(t, vs, standby.Addr())
	verdict(t, vs)
}

// TestCrashRecoveryAsyncCommit crashes a server running with
// synchronous_commit = off. L's term 1 is durable; L's release and C's
// term 2, acknowledged and in WAL buffers, are lost in the crash. C cannot
// reach the server to renew after it restarts and writes until its yield.
// Without the grace D draws token 2 again at once; with it D waits.
func TestCrashRecoveryAsyncCommit(t *testing.T) {
	t.Parallel()
	bin := postgresBin(t)
	ctx := context.Background()
	server := startCluster(t, bin, chaos.ClusterOptions{Settings: []string{"synchronous_commit=off", "wal_writer_delay=10000ms"}})
	vs := variants()
	var releases []func()
	for _, v := range vs {
		v.prepare(t, server.Addr())
		releases = append(releases, hold(t, dbURL(server.Addr(), v.db)))
	}
	// Make term 1 durable, and start a fresh WAL segment so that what
	// follows stays in one partly filled page that only the WAL writer
	// (every 10s) would write.
	exec1(t, dbURL(server.Addr(), "postgres"), `CHECKPOINT; SELECT pg_switch_wal()`)
	for i, v := range vs {
		releases[i]()
		startC(t, v, server.Addr())
	}
	waitCWrote(t, vs)
	for _, v := range vs {
		v.cLease.Cut()
	}
	if err := server.Restart(ctx, true, 0); err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		var token int64
		p := pool(t, dbURL(server.Addr(), v.db))
		if err := p.QueryRow(ctx, `SELECT token FROM pgleader.lease WHERE key = 'digest-publisher'`).Scan(&token); err != nil {
			t.Fatal(err)
		}
		if token != 1 {
			t.Fatalf("%s: after the crash the lease is at token %d; the crash was to lose C's term 2", v.db, token)
		}
	}
	takeOver(t, vs, server.Addr())
	verdict(t, vs)
}

// TestCleanRestartKeepsTrust: a clean restart keeps the server's epoch (no
// grace); a crash loses it (grace).
func TestCleanRestartKeepsTrust(t *testing.T) {
	t.Parallel()
	bin := postgresBin(t)
	ctx := context.Background()
	server := startCluster(t, bin, chaos.ClusterOptions{})
	v := &variant{grace: true, db: "grace"}
	v.prepare(t, server.Addr())
	inGrace := func() bool {
		p := pool(t, dbURL(server.Addr(), v.db))
		defer p.Close()
		var g bool
		if err := p.QueryRow(ctx, `SELECT in_grace FROM pgleader.grace()`).Scan(&g); err != nil {
			t.Fatal(err)
		}
		return g
	}
	if inGrace() {
		t.Fatal("in grace after the migration")
	}
	if err := server.Restart(ctx, false, 0); err != nil {
		t.Fatal(err)
	}
	if inGrace() {
		t.Fatal("in grace after a clean restart")
	}
	if err := server.Restart(ctx, true, 0); err != nil {
		t.Fatal(err)
	}
	if !inGrace() {
		t.Fatal("not in grace after a crash")
	}
}
