package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/pgleader/pgleader/internal/wait"
)

// failover crashes the leader n times: its backend stops answering, as a
// dead process would, and its connections are terminated, so nothing is
// released. It measures, on the database clock, from the lease's expiry and
// from the crash until the successor's acquisition.
func (b *bench) failover(ctx context.Context, n int) (fromExpiry, fromCrash []time.Duration, err error) {
	x, y, err := b.pair(ctx, "failover", true, true)
	defer func() {
		x.close()
		if y != nil {
			y.close()
		}
	}()
	if err != nil {
		return nil, nil, err
	}
	leader, cand := x, y
	for i := 0; i < n; i++ {
		drainTimes(cand.knowsAt)
		drainTimes(cand.sentAt)
		drainTimes(cand.firstWrite)
		// Crash at a random point of the renewal cycle.
		if !wait.Sleep(ctx, time.Duration(rand.Int64N(int64(2*time.Second)))) {
			return nil, nil, ctx.Err()
		}
		leader.crashed.Store(true)
		var crashAt, expiresAt time.Time
		if _, err := b.admin.Exec(ctx,
			`SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE application_name = $1`,
			"bench-"+leader.owner); err != nil {
			return nil, nil, err
		}
		if err := b.admin.QueryRow(ctx, `SELECT clock_timestamp(), expires_at FROM pgleader.lease WHERE key = 'failover'`).
			Scan(&crashAt, &expiresAt); err != nil {
			return nil, nil, err
		}
		if _, err := await(ctx, cand.firstWrite, 15*time.Second, "successor after crash"); err != nil {
			return nil, nil, err
		}
		var acquiredAt time.Time
		if err := b.admin.QueryRow(ctx, `SELECT acquired_at FROM pgleader.lease WHERE key = 'failover'`).Scan(&acquiredAt); err != nil {
			return nil, nil, err
		}
		fromExpiry = append(fromExpiry, acquiredAt.Sub(expiresAt))
		fromCrash = append(fromCrash, acquiredAt.Sub(crashAt))

		// The crashed replica comes back as a candidate.
		if err := leader.stop(); err != nil {
			return nil, nil, err
		}
		leader.crashed.Store(false)
		before := leader.attempts.Load()
		if err := leader.start(); err != nil {
			return nil, nil, err
		}
		if err := b.ready(ctx, leader, before+1, true, false); err != nil {
			return nil, nil, err
		}
		leader, cand = cand, leader
	}
	return fromExpiry, fromCrash, nil
}

func (b *bench) failoverTable(ctx context.Context) error {
	fromExpiry, fromCrash, err := b.failover(ctx, *failovers)
	if err != nil {
		return err
	}
	fmt.Printf("## Crash failover (%d crashes: connections terminated, nothing released; database clock)\n\n", *failovers)
	fmt.Println("| measured from | p50 | p99 | max |")
	fmt.Println("|---|---|---|---|")
	fmt.Printf("| the lease's expiry | %s | %s | %s |\n", ms(percentile(fromExpiry, 50)), ms(percentile(fromExpiry, 99)), ms(percentile(fromExpiry, 100)))
	fmt.Printf("| the crash | %s | %s | %s |\n\n", ms(percentile(fromCrash, 50)), ms(percentile(fromCrash, 99)), ms(percentile(fromCrash, 100)))
	fmt.Printf("Goal: successor leads within 50 ms (p99) of the expiry: %s (p99 %s over %d)\n\n",
		verdict(percentile(fromExpiry, 99) <= 50*time.Millisecond), ms(percentile(fromExpiry, 99)), len(fromExpiry))
	return nil
}
