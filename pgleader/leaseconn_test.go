package pgleader_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/pgleader"
)

// TestBodyHoldingThePoolDoesNotStarveRenewals: with the README's one pool
// for everything, a body that holds every pool connection must not make its
// own renewals wait until the term expires.
func TestBodyHoldingThePoolDoesNotStarveRenewals(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	pool := db.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 2 })
	spec := pgleader.Spec{Key: "k", TTL: 3 * time.Second} // renews every 1s, yields 2s after its last renewal
	held := make(chan struct{})
	lead := func(ctx context.Context, term *pgleader.Term) error {
		var conns []*pgxpool.Conn
		for range 2 {
			c, err := pool.Acquire(ctx)
			if err != nil {
				return err
			}
			conns = append(conns, c)
		}
		close(held)
		<-ctx.Done()
		for _, c := range conns {
			c.Release()
		}
		return nil
	}
	el, err := pgleader.New(pgleader.NewPostgres(pool, pgleader.WithLogger(quiet)), spec,
		pgleader.Options{Owner: "a", Lead: lead, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the body never got the pool's connections")
	}
	time.Sleep(3 * spec.TTL) // several yield instants' worth
	st := el.Status()
	if !st.Leading || st.Terms != 1 || st.LastEnd != pgleader.ReasonNone {
		t.Fatalf("status after %v of a body holding the pool: %+v; want the first term still leading", 3*spec.TTL, st)
	}
	if since := time.Since(st.LastRenewSent); since > 2*time.Second {
		t.Fatalf("last renewal sent %v ago, want within the last RenewEvery or so", since)
	}
}

// TestExhaustedPoolOpensBoundedSpares: while a statement runs on the lease
// connection and bodies hold every pool connection, each operation used to
// open a connection of its own, so many Electors on one backend could reach
// the server's max_connections ("too many clients"). At most MaxSpare such
// connections are open at a time; the rest wait for one, and all finish.
func TestExhaustedPoolOpensBoundedSpares(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	pool := db.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	var logs lockedLog
	p := pgleader.NewPostgres(pool, pgleader.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	release := pgleader.HoldConnections(p)
	defer release()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	body, err := pool.Acquire(ctx) // the body holds the pool's one connection
	if err != nil {
		t.Fatal(err)
	}
	defer body.Release()
	long := make(chan error, 1)
	go func() { // a statement that occupies the lease connection
		long <- pgleader.With(ctx, p, func(db pgleader.DB) error {
			return db.QueryRow(ctx, "select pg_sleep(3)").Scan(nil)
		})
	}()
	leaseConns := func() int {
		var n int
		if err := body.QueryRow(ctx, `select count(*) from pg_stat_activity
			where datname = current_database() and application_name = 'pgleader lease'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for leaseConns() == 0 {
		time.Sleep(10 * time.Millisecond)
	}

	const ops = 12
	errs := make(chan error, ops)
	for range ops {
		go func() {
			errs <- pgleader.With(ctx, p, func(db pgleader.DB) error {
				return db.QueryRow(ctx, "select pg_sleep(0.2)").Scan(nil)
			})
		}()
	}
	peak := 0
	for done := 0; done < ops; {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatalf("an operation: %v", err)
			}
			done++
		case <-time.After(20 * time.Millisecond):
			peak = max(peak, leaseConns())
		}
	}
	if err := <-long; err != nil {
		t.Fatalf("the long statement: %v", err)
	}
	t.Logf("at most %d lease connections open at once", peak)
	if want := 1 + pgleader.MaxSpare; peak > want {
		t.Fatalf("%d connections named %q open at once, want at most %d (the lease connection and %d spares)",
			peak, "pgleader lease", want, pgleader.MaxSpare)
	}
	if peak < 2 {
		t.Fatalf("peak of %d lease connections: no spare was opened, the test did not exercise the exhausted pool", peak)
	}
	// Operations waited for a spare: said once at Warn, not once each.
	if n := strings.Count(logs.String(), "level=WARN msg=\"lease operations wait"); n != 1 {
		t.Fatalf("%d warnings that operations wait for a spare, want 1; logs:\n%s", n, logs.String())
	}
}
