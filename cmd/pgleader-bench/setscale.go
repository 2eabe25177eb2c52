package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pgleader/pgleader/internal/wait"
	"github.com/pgleader/pgleader/pgleader"
)

// setScaleRun measures issue 27's goals for n keys shared by three
// replicas, each on its own pool (in this process, or with -set-procs each
// in a process of its own): cold start, a steady
// window, renewal ticks against their floor, statements by kind, a
// graceful stop by hand-off and a crash.
func (b *bench) setScaleRun(ctx context.Context, n int, sessionBound bool) error {
	name, mode := fmt.Sprintf("scale%d", n), ""
	if sessionBound {
		name, mode = name+"b", ", SetOptions.SessionBound"
	}
	keys := setKeys(name, n)
	log := &entryLog{entries: make(map[string][]leadEntry)}
	var reps []scaleReplica
	defer func() {
		for _, r := range reps {
			r.close()
		}
	}()
	ticks := make([]*tickTimes, 3)
	for i := range 3 {
		owner := fmt.Sprintf("%s-r%d", name, i)
		ticks[i] = &tickTimes{}
		if *setProcs {
			reps = append(reps, &procScale{url: b.url, set: name, owner: owner, n: n, log: log, took: ticks[i], bound: sessionBound})
			continue
		}
		r, err := newSetReplica(ctx, b.url, owner)
		if err != nil {
			return err
		}
		r.trace.Store(*setTrace)
		r.bound = sessionBound
		reps = append(reps, &localScale{setReplica: r, set: name, keys: keys, log: log, took: ticks[i]})
	}
	spec := recipe(name)
	fmt.Printf("### %d keys over 3 replicas%s (issue 27)\n\n", n, mode)
	fmt.Println("| measure | figure | floor | goal |")
	fmt.Println("|---|---|---|---|")

	// Cold start.
	start := time.Now()
	for _, r := range reps {
		if err := r.start(); err != nil {
			return err
		}
	}
	live := func(rs []scaleReplica) int {
		h := 0
		for _, r := range rs {
			h += r.held()
		}
		return h
	}
	even := func(rs []scaleReplica) bool {
		lo, hi := n, 0
		for _, r := range rs {
			h := r.held()
			lo, hi = min(lo, h), max(hi, h)
		}
		return hi-lo <= 1 && live(rs) == n
	}
	var allLive, spread time.Duration
	for (allLive == 0 || spread == 0) && time.Since(start) < 60*time.Second {
		if allLive == 0 && live(reps) == n {
			allLive = time.Since(start)
		}
		if spread == 0 && even(reps) {
			spread = time.Since(start)
		}
		if !wait.Sleep(ctx, 10*time.Millisecond) {
			return ctx.Err()
		}
	}
	fmt.Printf("| cold start → every key live | %s | – | ≤ 10 s: %s |\n", durOrNever(allLive), verdict(allLive > 0 && allLive <= 10*time.Second))
	fmt.Printf("| cold start → spread ±1 (%d/%d/%d) | %s | – | – |\n", reps[0].held(), reps[1].held(),
		reps[2].held(), durOrNever(spread))

	// Steady window: live keys sampled every 100 ms, statements by kind,
	// ticks.
	if !wait.Sleep(ctx, 2*spec.RenewEvery) {
		return ctx.Err()
	}
	for _, t := range ticks {
		t.mu.Lock()
		t.took, t.fails = nil, 0
		t.mu.Unlock()
	}
	c0 := make([][2]int64, 3)
	for i, r := range reps {
		c, t := r.counts()
		c0[i] = [2]int64{c, t}
	}
	window := *setFor
	t0 := time.Now()
	minLive, samples, full := n, 0, 0
	for time.Since(t0) < window {
		l := live(reps)
		minLive = min(minLive, l)
		samples++
		if l == n {
			full++
		}
		if !wait.Sleep(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
	secs := time.Since(t0).Seconds()
	var campaigns, tickCount int64
	perReplicaTicks := make([]float64, 3)
	for i, r := range reps {
		c, t := r.counts()
		campaigns += c - c0[i][0]
		d := t - c0[i][1]
		tickCount += d
		perReplicaTicks[i] = float64(d) / (secs / spec.RenewEvery.Seconds())
	}
	fmt.Printf("| steady window (%.0f s): samples with every key live | %d of %d (fewest live: %d) | – | 100 %%: %s |\n",
		secs, full, samples, minLive, verdict(full == samples))
	fmt.Printf("| steady: campaigns / ticks per second, 3 replicas | %.2f / %.2f | – | no campaign at the share: %s |\n",
		float64(campaigns)/secs, float64(tickCount)/secs, verdict(campaigns == 0))
	fmt.Printf("| steady: ticks per RenewEvery, per replica | %.2f / %.2f / %.2f | 1 | ≤ 1: %s |\n",
		perReplicaTicks[0], perReplicaTicks[1], perReplicaTicks[2], verdict(slices.Max(perReplicaTicks) <= 1.05))

	// Tick times against the floor: one plain UPDATE of one replica's
	// held rows, in the same run.
	var took []time.Duration
	for _, t := range ticks {
		t.mu.Lock()
		took = append(took, t.took...)
		t.mu.Unlock()
	}
	held0 := reps[0].heldKeys() // the floor is measured at the end, on these rows

	// Graceful stop by hand-off.
	victim := reps[2]
	victimKeys := victim.heldKeys()
	stopAt := time.Now()
	victim.stop()
	victim.traced(stopAt, "stop", "Run returned", nil)
	stopDelays, stopMissing := log.takeovers(ctx, victimKeys, victim.name(), stopAt, 20*time.Second)
	stopKeys := victimKeys

	// A crash: the victim's last tick, then its keys led elsewhere.
	if err := victim.start(); err != nil {
		return err
	}
	rejoin := time.Now()
	for !even(reps) && time.Since(rejoin) < 30*time.Second {
		if !wait.Sleep(ctx, 20*time.Millisecond) {
			return ctx.Err()
		}
	}
	if !wait.Sleep(ctx, spec.RenewEvery) {
		return ctx.Err()
	}
	victim = reps[1]
	victimKeys = victim.heldKeys()
	crashAt := time.Now()
	victim.crash()
	victim.traced(crashAt, "crash", "", nil)
	lastTick := victim.lastTick()
	delays, missing := log.takeovers(ctx, victimKeys, victim.name(), lastTick, 30*time.Second)
	// A tick in flight at the kill may still have run on the server, and
	// then it is the dead member's last: its keys lapse a RenewEvery later
	// than after the last tick answered. Its member row (expiring at the
	// tick's clock + TTL) tells, read once the keys were taken: a backend
	// whose client was killed runs its statement to the end, so a read at
	// the kill could come before that tick committed. The answered tick's
	// send time is kept unless the row shows a later tick ran; no key could
	// be taken before that tick's lease lapsed, so every delay counts from it.
	var memberExpires *time.Time
	if err := b.admin.QueryRow(ctx, `SELECT max(expires_at) FROM pgleader.set_member WHERE owner = $1`, victim.name()).Scan(&memberExpires); err != nil {
		return err
	}
	if memberExpires != nil {
		if ran := memberExpires.Add(-spec.TTL); ran.Sub(lastTick) > spec.RenewEvery/2 {
			fmt.Printf("| crash: a tick in flight at the kill ran on the server | at %s, %s after the last tick answered | – | measured from it |\n",
				ran.Format("15:04:05.000"), ms(ran.Sub(lastTick)))
			for i := range delays {
				delays[i] -= ran.Sub(lastTick)
			}
			lastTick = ran
		}
	}
	moved := log.movedTwice(victimKeys, crashAt)
	if len(delays) > 0 {
		p99, bound := percentile(delays, 99), spec.TTL+spec.CampaignEvery
		fmt.Printf("| crash → its %d keys led elsewhere, after its last tick, p50 / p99 / max | %s / %s / %s (%d never) | TTL (%s) | ≤ TTL + CampaignEvery (%s): %s |\n",
			len(victimKeys), ms(percentile(delays, 50)), ms(p99), ms(percentileMax(delays)), missing, spec.TTL, bound, verdict(percentileMax(delays) <= bound && missing == 0))
		if sessionBound {
			// The same take-overs counted from the SIGKILL (issue 30).
			since := crashAt.Sub(lastTick)
			fromKill := make([]time.Duration, len(delays))
			for i, d := range delays {
				fromKill[i] = d - since
			}
			fmt.Printf("| crash (SIGKILL) → its %d keys led elsewhere, after the kill, p50 / p99 / max | %s / %s / %s (%d never) | – | – |\n",
				len(victimKeys), ms(percentile(fromKill, 50)), ms(percentile(fromKill, 99)), ms(percentileMax(fromKill)), missing)
		}
		fmt.Printf("| crash: keys that moved twice | %d | 0 | 0: %s |\n", moved, verdict(moved == 0))
	}
	for _, r := range reps {
		if r.running() {
			r.stop()
		}
	}
	// The floor of a tick: one plain UPDATE of the rows replica 0 held,
	// as renew_many writes them, once no replica runs (beside the ticks
	// it could deadlock with them: it locks in another order).
	var floor []time.Duration
	for range 7 {
		t := time.Now()
		if _, err := b.admin.Exec(ctx, `UPDATE pgleader.lease SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() + interval '6 seconds' WHERE key = ANY($1)`, held0); err != nil {
			return err
		}
		floor = append(floor, time.Since(t))
	}
	// The floor of a hand-off: one UPDATE that gives the stopped replica's
	// keys to another owner with the next token (rolled back).
	var handFloor []time.Duration
	for range 5 {
		tx, err := b.admin.Begin(ctx)
		if err != nil {
			return err
		}
		t := time.Now()
		_, err = tx.Exec(ctx, `UPDATE pgleader.lease SET token = token + 1, holder = 'floor', acquired_at = clock_timestamp(), renewed_at = clock_timestamp(), expires_at = clock_timestamp() + interval '6 seconds', handed_off = true WHERE key = ANY($1)`, stopKeys)
		handFloor = append(handFloor, time.Since(t))
		if rerr := tx.Rollback(ctx); err == nil {
			err = rerr
		}
		if err != nil {
			return err
		}
	}
	if len(stopDelays) > 0 {
		p99 := percentile(stopDelays, 99)
		fmt.Printf("| graceful stop → its %d keys led elsewhere, per key p50 / p99 / max | %s / %s / %s (%d never) | one UPDATE handing those rows to another owner, p50 of 5: %s | p99 ≤ 200 ms: %s |\n",
			len(stopKeys), ms(percentile(stopDelays, 50)), ms(p99), ms(percentileMax(stopDelays)), stopMissing, ms(percentile(handFloor, 50)),
			verdict(p99 <= 200*time.Millisecond && stopMissing == 0))
	}
	if len(took) > 0 {
		p99, f := percentile(took, 99), percentile(floor, 50)
		fmt.Printf("| renewal tick p50 / p99 (%d ticks, steady window) | %s / %s | one UPDATE of %d held rows, p50 of 7: %s | p99 ≤ 2 × floor (%s): %s (%.2f×) |\n",
			len(took), ms(percentile(took, 50)), ms(p99), len(held0), ms(f), ms(2*f), verdict(p99 <= 2*f), float64(p99)/float64(f))
	}
	fmt.Println()
	return nil
}

func durOrNever(d time.Duration) string {
	if d == 0 {
		return "never (60 s)"
	}
	return d.Round(time.Millisecond).String()
}

// entryLog records every body entered, per key.
type entryLog struct {
	mu      sync.Mutex
	entries map[string][]leadEntry
}

func (l *entryLog) body(ctx context.Context, t *pgleader.Term) error {
	l.add(t.Key(), t.Owner(), time.Now())
	select {
	case <-t.Ending():
	case <-ctx.Done():
	}
	return nil
}

// takeovers waits until every key of keys has a body entered after since
// by another owner than from, up to limit, and returns each key's delay
// (to the first such entry).
func (l *entryLog) takeovers(ctx context.Context, keys []string, from string, since time.Time, limit time.Duration) ([]time.Duration, int) {
	deadline := time.Now().Add(limit)
	for {
		var out []time.Duration
		l.mu.Lock()
		for _, k := range keys {
			for _, e := range l.entries[k] {
				if e.owner != from && e.at.After(since) {
					out = append(out, e.at.Sub(since))
					break
				}
			}
		}
		l.mu.Unlock()
		if len(out) == len(keys) || time.Now().After(deadline) || !wait.Sleep(ctx, 10*time.Millisecond) {
			return out, len(keys) - len(out)
		}
	}
}

// movedTwice counts keys with more than one body entered after since.
func (l *entryLog) movedTwice(keys []string, since time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, k := range keys {
		c := 0
		for _, e := range l.entries[k] {
			if e.at.After(since) {
				c++
			}
		}
		if c > 1 {
			n++
		}
	}
	return n
}

// intList defines a flag holding a comma-separated list of positive
// integers, with a default.
func intList(name, def, usage string) *[]int {
	var out []int
	parse := func(v string) error {
		out = out[:0]
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				return fmt.Errorf("want positive whole numbers separated by commas, got %q", v)
			}
			out = append(out, n)
		}
		return nil
	}
	if err := parse(def); err != nil {
		panic(err)
	}
	flag.Func(name, usage+" (default "+def+")", parse)
	return &out
}
