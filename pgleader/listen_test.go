package pgleader_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/internal/tcpproxy"
	"github.com/pgleader/pgleader/pgleader"
)

// untilEnding is a body that returns as soon as its term starts ending.
func untilEnding(ctx context.Context, t *pgleader.Term) error {
	select {
	case <-t.Ending():
	case <-ctx.Done():
	}
	return nil
}

// slowPollSpec polls so rarely that a candidate that leads within a test
// can only have been woken by a notification.
func slowPollSpec(key string) pgleader.Spec {
	return pgleader.Spec{Key: key, TTL: 10 * time.Minute, CampaignEvery: 5 * time.Minute, RenewEvery: time.Second}
}

func startOn(t *testing.T, b pgleader.Backend, spec pgleader.Spec, owner string) *pgRun {
	t.Helper()
	el, err := pgleader.New(b, spec, pgleader.Options{Owner: owner, Lead: untilEnding, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &pgRun{el: el, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- el.Run(ctx) }()
	t.Cleanup(func() { r.cancel(); <-r.done; r.done <- nil })
	return r
}

func (r *pgRun) stopNow(t *testing.T) {
	t.Helper()
	r.cancel()
	if err := <-r.done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	r.done <- nil
}

// TestNotifyWakesCandidate: a candidate that would not poll for minutes
// leads as soon as the leader releases, because the release notified it.
func TestNotifyWakesCandidate(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	spec := slowPollSpec("k")
	a := startOn(t, pgleader.NewPostgres(db.NewPool(t), pgleader.WithLogger(quiet)), spec, "a")
	waitFor(t, "a to lead", func() bool { return a.el.Status().Leading })
	bBackend := pgleader.NewPostgres(db.NewPool(t), pgleader.WithLogger(quiet))
	b := startOn(t, bBackend, spec, "b")
	waitFor(t, "b to listen", bBackend.Listening)
	waitFor(t, "b to have campaigned once", func() bool { return b.el.Status().LastError == nil && !b.el.Status().Leading })

	a.stopNow(t)
	waitFor(t, "b to lead after the release notification", func() bool { return b.el.Status().Leading })
	if tok := b.el.Status().Token; tok != 2 {
		t.Fatalf("b leads with token %d, want 2", tok)
	}
	// A leader needs no lease events: once its term has lasted RenewEvery,
	// with no candidate left on its backend, the LISTEN connection closes.
	waitFor(t, "b's LISTEN connection to close while it leads", func() bool { return !bBackend.Listening() })
}

// TestListenFallbackAndReconnect cuts the LISTEN connection: the listener
// reconnects, and while it cannot, the candidate falls back to polling and
// still takes over.
func TestListenFallbackAndReconnect(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	proxy, err := tcpproxy.Start(db.HostPort())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	listenCfg, err := pgx.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	listenCfg.Host, listenCfg.Port = "127.0.0.1", proxy.Port()

	spec := pgleader.Spec{Key: "k", TTL: 10 * time.Minute, CampaignEvery: 200 * time.Millisecond}
	a := startOn(t, pgleader.NewPostgres(db.NewPool(t), pgleader.WithLogger(quiet)), spec, "a")
	waitFor(t, "a to lead", func() bool { return a.el.Status().Leading })
	bBackend := pgleader.NewPostgres(db.NewPool(t), pgleader.ListenWith(listenCfg), pgleader.WithLogger(quiet))
	b := startOn(t, bBackend, spec, "b")
	waitFor(t, "b to listen", bBackend.Listening)

	// The LISTEN connection drops and comes back: the listener reconnects.
	accepted := proxy.Accepted()
	proxy.Cut()
	waitFor(t, "b to notice the lost LISTEN connection", func() bool { return !bBackend.Listening() })
	proxy.Restore()
	waitFor(t, "b's listener to reconnect", bBackend.Listening)
	if proxy.Accepted() <= accepted {
		t.Fatal("listening again without a new connection through the proxy")
	}

	// It drops for good: b falls back to polling and still takes over.
	proxy.Cut()
	waitFor(t, "b to notice the lost LISTEN connection", func() bool { return !bBackend.Listening() })
	a.stopNow(t) // its release or hand-off notification cannot reach b
	for deadline := time.Now().Add(20 * time.Second); !b.el.Status().Leading; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			l, err := pgleader.NewPostgres(db.Pool, pgleader.PollOnly()).Lease(context.Background(), "k")
			t.Fatalf("b does not lead by polling after 20s: status %+v; lease %+v (%v)", b.el.Status(), l, err)
		}
	}
	if bBackend.Listening() {
		t.Fatal("b's listener is back while the proxy refuses connections")
	}
}

// TestPgbouncerTransactionMode runs two electors through pgbouncer in
// transaction pooling mode, where LISTEN cannot deliver: the backend detects
// it, polls, and still elects one leader at a time with increasing tokens.
func TestPgbouncerTransactionMode(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	via := db.Pgbouncer(t)
	pool := func() *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(via)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec // no named prepared statements
		p, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	spec := pgleader.Spec{Key: "k", TTL: 3 * time.Second, CampaignEvery: 100 * time.Millisecond}
	var logs lockedLog // what the listeners say about the probe
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	backendA := pgleader.NewPostgres(pool(), pgleader.WithLogger(logger))
	backendB := pgleader.NewPostgres(pool(), pgleader.WithLogger(logger))
	a := startOn(t, backendA, spec, "a")
	waitFor(t, "a to lead", func() bool { return a.el.Status().Leading })
	b := startOn(t, backendB, spec, "b")

	// The probe notification never arrives through pgbouncer: the
	// listener says so and stays poll-only.
	waitFor(t, "b's listener to find that LISTEN does not deliver", func() bool {
		return strings.Contains(logs.String(), "LISTEN does not deliver notifications")
	})
	if backendA.Listening() || backendB.Listening() {
		t.Fatal("a backend believes it is listening through pgbouncer in transaction mode")
	}
	if b.el.Status().Leading {
		t.Fatal("b leads while a does")
	}
	a.stopNow(t)
	waitFor(t, "b to lead by polling", func() bool { return b.el.Status().Leading })
	if tok := b.el.Status().Token; tok != 2 {
		t.Fatalf("b leads with token %d, want 2", tok)
	}
	l, err := pgleader.NewPostgres(db.Pool).Lease(context.Background(), "k")
	if err != nil || l.Holder != "b" || l.Token != 2 {
		t.Fatalf("lease = %+v, %v; want b with token 2", l, err)
	}
}
