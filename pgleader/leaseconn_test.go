package pgleader_test

import (
	"context"
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
