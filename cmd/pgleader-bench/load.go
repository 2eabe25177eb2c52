package main

import (
	"context"
	"fmt"
	"time"

	"github.com/pgleader/pgleader/internal/wait"
)

// loadTable counts, for loadFor, the statements an idle candidate and a
// leader send on their own connections, with and without NOTIFY, and the
// notifications they receive.
func (b *bench) loadTable(ctx context.Context) error {
	type pairOf struct {
		mode   string
		leader *replica
		cand   *replica
	}
	var pairs []pairOf
	defer func() {
		for _, p := range pairs {
			p.leader.close()
			p.cand.close()
		}
	}()
	for _, notify := range []bool{true, false} {
		key, mode := "load-poll", "polling (PollOnly)"
		if notify {
			key, mode = "load-notify", "LISTEN/NOTIFY"
		}
		x, y, err := b.pair(ctx, key, notify, true)
		if err != nil {
			if x != nil {
				x.close()
			}
			if y != nil {
				y.close()
			}
			return err
		}
		pairs = append(pairs, pairOf{mode, x, y})
	}
	if !wait.Sleep(ctx, time.Second) { // past start-up
		return ctx.Err()
	}
	type snap struct{ stmts, notes int64 }
	read := func(r *replica) snap { return snap{r.count.statements.Load(), r.count.notifications.Load()} }
	before := make(map[*replica]snap)
	for _, p := range pairs {
		before[p.leader], before[p.cand] = read(p.leader), read(p.cand)
	}
	start := time.Now()
	if !wait.Sleep(ctx, *loadFor) {
		return ctx.Err()
	}
	secs := time.Since(start).Seconds()

	fmt.Printf("## Database load (pgx tracer on each replica's own connections, %.0f s)\n\n", secs)
	fmt.Println("| mode | idle candidate statements/s | leader statements/s | notifications/s received by the candidate |")
	fmt.Println("|---|---|---|---|")
	var idleNotify, leaderNotify float64
	for _, p := range pairs {
		c, l := read(p.cand), read(p.leader)
		cs := float64(c.stmts-before[p.cand].stmts) / secs
		ls := float64(l.stmts-before[p.leader].stmts) / secs
		ns := float64(c.notes-before[p.cand].notes) / secs
		if p.cand.key == "load-notify" {
			idleNotify, leaderNotify = cs, ls
		}
		fmt.Printf("| %s | %.3f | %.3f | %.3f |\n", p.mode, cs, ls, ns)
	}
	fmt.Printf("\nGoals (LISTEN/NOTIFY, hand-off on): idle candidate ≤ 0.167 statements/s (one per TTL): %s (%.3f/s); leader ≤ 0.5 statements/s (one per RenewEvery): %s (%.3f/s)\n\n",
		verdict(idleNotify <= 1.0/6), idleNotify, verdict(leaderNotify <= 0.5), leaderNotify)
	return nil
}
