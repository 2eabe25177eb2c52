package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/sqlfence"
)

// fenceTable measures the throughput of one connection writing one row in
// each way, in interleaved rounds, and reports medians and ratios to the
// plain UPDATE.
func (b *bench) fenceTable(ctx context.Context) error {
	cfg, err := pgxpool.ParseConfig(b.url)
	if err != nil {
		return err
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE rows (id int PRIMARY KEY, v bigint, fence bigint NOT NULL DEFAULT 0);
		INSERT INTO rows VALUES (1, 0, 0)`); err != nil {
		return err
	}
	// Held for the whole measurement, which must end within the lease's
	// TTL: the longest the schema allows by default (max_ttl, 10 minutes).
	const ttl = 10 * time.Minute
	lease, ok, err := pgleader.NewPostgres(pool, pgleader.PollOnly()).Acquire(ctx, "fence-bench", "bench", ttl)
	if err != nil || !ok {
		return fmt.Errorf("acquire the bench lease: %v, %v", ok, err)
	}
	token := lease.Token
	column := sqlfence.Column{Table: pgx.Identifier{"rows"}, KeyColumn: "id", FenceColumn: "fence"}
	guard := sqlfence.Guard{Resource: "fence-bench"}
	const update = `UPDATE rows SET v = $1 WHERE id = 1`
	var n int64
	kinds := []struct {
		name string
		op   func() error
	}{
		{"plain UPDATE", func() error { _, err := pool.Exec(ctx, update, n); return err }},
		{"column fence (Column.Write)", func() error { return column.Write(ctx, pool, 1, token, sqlfence.Assign("v", n)) }},
		{"fenced transaction (Guard.Write)", func() error {
			return guard.Write(ctx, pool, token, func(tx pgx.Tx) error { _, err := tx.Exec(ctx, update, n); return err })
		}},
		{"lease-guarded transaction (WithLease)", func() error {
			return sqlfence.WithLease(ctx, pool, "fence-bench", token, func(tx pgx.Tx) error { _, err := tx.Exec(ctx, update, n); return err })
		}},
		{"fenced transaction, pipelined (Guard.WritePipelined)", func() error {
			_, err := guard.WritePipelined(ctx, pool, token, sqlfence.Statement{SQL: update, Args: []any{n}})
			return err
		}},
		{"lease-guarded transaction, pipelined (WithLeasePipelined)", func() error {
			_, err := sqlfence.WithLeasePipelined(ctx, pool, "fence-bench", token, sqlfence.Statement{SQL: update, Args: []any{n}})
			return err
		}},
	}
	if need := time.Duration(*rounds*len(kinds))*(*fenceFor) + time.Minute; need > ttl {
		return fmt.Errorf("-rounds %d × -fence %v × %d ways is too long for one lease of %v", *rounds, *fenceFor, len(kinds), ttl)
	}
	rates := make([][]float64, len(kinds))
	for round := 0; round < *rounds; round++ {
		for i, k := range kinds {
			count := 0
			start := time.Now()
			for time.Since(start) < *fenceFor {
				n++
				if err := k.op(); err != nil {
					return fmt.Errorf("%s: %w", k.name, err)
				}
				count++
			}
			rates[i] = append(rates[i], float64(count)/time.Since(start).Seconds())
		}
	}
	median := func(xs []float64) float64 {
		s := slices.Clone(xs)
		slices.Sort(s)
		return s[len(s)/2]
	}
	plain := median(rates[0])
	fmt.Printf("## Fenced write cost (one connection, one row; median of %d interleaved rounds of %v)\n\n", *rounds, *fenceFor)
	fmt.Println("| write | ops/s | ratio to plain | round trips |")
	fmt.Println("|---|---|---|---|")
	trips := []string{"1", "1", "4 (BEGIN, fence, UPDATE, COMMIT)", "4 (BEGIN, guard, UPDATE, COMMIT)", "1 (one pipelined batch)", "1 (one pipelined batch)"}
	ratios := make([]float64, len(kinds))
	for i, k := range kinds {
		ratios[i] = median(rates[i]) / plain
		fmt.Printf("| %s | %.0f | %.2f× | %s |\n", k.name, median(rates[i]), ratios[i], trips[i])
	}
	fmt.Printf("\nGoals: column fence ≥ 0.95× plain: %s (%.2f×); lease-guarded ≥ 0.8× plain: interactive %s (%.2f×), pipelined %s (%.2f×)\n\n",
		verdict(ratios[1] >= 0.95), ratios[1], verdict(ratios[3] >= 0.8), ratios[3], verdict(ratios[5] >= 0.8), ratios[5])
	return nil
}
