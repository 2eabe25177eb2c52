package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/wait"
	"github.com/pgleader/pgleader/pgleader"
)

// setReplica is one replica of a set (or, for the comparison, a set of
// independent Electors) on its own instrumented pool.
type setReplica struct {
	owner   string
	pool    *pgxpool.Pool
	pg      *pgleader.Postgres
	count   *counter
	crashed atomic.Bool
	// campaigns and ticks count the set's statements by kind; last is
	// when the last tick answered was sent (UnixNano).
	campaigns, ticks, last atomic.Int64
	// trace, when set, prints each set statement (-set-trace).
	trace atomic.Bool
	// bound runs the set with SetOptions.SessionBound (-set-bound).
	bound  bool
	set    *pgleader.Set
	cancel context.CancelFunc
	done   chan error
}

// Abilities implements pgleader.SetBackend: the PostgreSQL backend's.
func (r *setReplica) Abilities() pgleader.Abilities { return r.pg.Abilities() }

func newSetReplica(ctx context.Context, url, owner string) (*setReplica, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	r := &setReplica{owner: owner, count: &counter{}}
	cfg.ConnConfig.Tracer = r.count
	cfg.ConnConfig.RuntimeParams["application_name"] = "bench-" + owner
	if r.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, err
	}
	r.pg = pgleader.NewPostgres(r.pool, pgleader.WithLogger(quiet))
	return r, r.pool.Ping(ctx)
}

func (r *setReplica) close() {
	if r.cancel != nil {
		r.cancel()
		<-r.done
		r.cancel = nil
	}
	r.pool.Close()
}

// AcquireSet, RenewSet and ReleaseSet fail once the replica has crashed:
// it then renews and releases nothing, as a process that died.
func (r *setReplica) AcquireSet(ctx context.Context, set, owner string, keys []string, floors []int64, ttl time.Duration, held, extra, total int, confirm []string) ([]pgleader.Lease, int, error) {
	if r.crashed.Load() {
		return nil, 0, errCrashed
	}
	r.campaigns.Add(1)
	t := time.Now()
	won, m, err := r.pg.AcquireSet(ctx, set, owner, keys, floors, ttl, held, extra, total, confirm)
	r.traced(t, "acquire", fmt.Sprintf("%d keys, %d to confirm: won %d", len(keys), len(confirm), len(won)), err)
	return won, m, err
}

// traced prints one statement of the replica, with -set-trace.
func (r *setReplica) traced(t time.Time, kind, what string, err error) {
	if r.trace.Load() {
		traceLine(t, r.owner, kind, what, err)
	}
}

// traceLine prints one statement or event of a replica, begun at t, to
// stderr: -set-trace's line.
func traceLine(t time.Time, owner, kind, what string, err error) {
	fmt.Fprintf(os.Stderr, "%s %s %-8s %8.1f ms  %s  %v\n", t.Format("15:04:05.000"), owner, kind,
		float64(time.Since(t).Microseconds())/1000, what, err)
}

func (r *setReplica) RenewSet(ctx context.Context, set, owner string, keys []string, tokens []int64, ttl time.Duration, held int) (pgleader.SetRenewal, error) {
	if r.crashed.Load() {
		return pgleader.SetRenewal{}, errCrashed
	}
	r.ticks.Add(1)
	sent := time.Now()
	ans, err := r.pg.RenewSet(ctx, set, owner, keys, tokens, ttl, held)
	if err == nil {
		r.last.Store(sent.UnixNano())
	}
	r.traced(sent, "tick", fmt.Sprintf("%d keys, handed %d", len(keys), ans.Handed), err)
	return ans, err
}

// lastTick is when the last tick answered was sent.
func (r *setReplica) lastTick() time.Time { return time.Unix(0, r.last.Load()) }

func (r *setReplica) ReleaseSet(ctx context.Context, set, owner string, keys []string, tokens []int64, handOff []bool, leave bool) ([]bool, error) {
	if r.crashed.Load() {
		return nil, errCrashed
	}
	t := time.Now()
	ended, err := r.pg.ReleaseSet(ctx, set, owner, keys, tokens, handOff, leave)
	r.traced(t, "release", fmt.Sprintf("%d keys, leave %v", len(keys), leave), err)
	return ended, err
}

func (r *setReplica) start(name string, keys []string, lead func(context.Context, *pgleader.Term) error, obs pgleader.Observer) error {
	spec := recipe(name)
	spec.RequireFenceAdvance = false
	s, err := pgleader.NewSet(r, spec, keys, pgleader.SetOptions{Owner: r.owner, Logger: quiet, Lead: lead, Observer: obs, SessionBound: r.bound})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.set, r.cancel, r.done = s, cancel, make(chan error, 1)
	go func() { r.done <- s.Run(ctx) }()
	return nil
}

func (r *setReplica) stop() {
	r.cancel()
	<-r.done
	r.cancel = nil
}

// leadEntry is a body entered: by whom, when.
type leadEntry struct {
	owner string
	at    time.Time
}

type tickTimes struct {
	mu    sync.Mutex
	took  []time.Duration
	fails int
}

func (t *tickTimes) Observe(o pgleader.Observation) {
	if o.Kind != pgleader.ObserveRenewed {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if o.Err != nil {
		t.fails++
		return
	}
	t.took = append(t.took, o.Took)
}

func setKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	return keys
}

func memInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

// setsTable measures sets: one process holding setBig keys, then three
// replicas sharing setShared keys, then the same keys as independent
// Electors, for the database load.
func (b *bench) setsTable(ctx context.Context) error {
	fmt.Printf("## Sets of keys (issue 16; spec as above)\n\n")
	if err := b.setBigRun(ctx); err != nil {
		return err
	}
	if err := b.setSharedRun(ctx); err != nil {
		return err
	}
	modes := []bool{false}
	if *setBound {
		modes = append(modes, true)
	}
	for _, n := range *setScale {
		for _, bound := range modes {
			if err := b.setScaleRun(ctx, n, bound); err != nil {
				return err
			}
		}
	}
	return nil
}

func (b *bench) setBigRun(ctx context.Context) error {
	n := *setBig
	r, err := newSetReplica(ctx, b.url, "big")
	if err != nil {
		return err
	}
	defer r.close()
	keys := setKeys("big", n)

	// The body's own floor: a goroutine blocked in a select, as the bench
	// body is, with its context. The floor's goroutines stay blocked until
	// the set's memory is measured: once they exit, the runtime reuses
	// their goroutine structures (and some stacks) for the set's bodies,
	// which then look cheaper than they are by about half a kilobyte.
	before := memInUse()
	stopFloor := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			defer wg.Done()
			defer cancel()
			select {
			case <-ctx.Done():
			case <-stopFloor:
			}
		}()
	}
	floorPerKey := float64(memInUse()-before) / float64(n)
	stopFloorOnce := sync.OnceFunc(func() {
		close(stopFloor)
		wg.Wait()
	})
	defer stopFloorOnce()

	var ticks tickTimes
	lead := func(ctx context.Context, t *pgleader.Term) error {
		select {
		case <-t.Ending():
		case <-ctx.Done():
		}
		return nil
	}
	before = memInUse()
	started := time.Now()
	if err := r.start("big", keys, lead, &ticks); err != nil {
		return err
	}
	for r.set.Status().Held < n {
		if time.Since(started) > 30*time.Second {
			return fmt.Errorf("only %d of %d keys held after 30s", r.set.Status().Held, n)
		}
		if !wait.Sleep(ctx, 20*time.Millisecond) {
			return ctx.Err()
		}
	}
	tookAll := time.Since(started)
	if !wait.Sleep(ctx, 3*time.Second) {
		return ctx.Err()
	}
	perKey := float64(memInUse()-before) / float64(n)
	stopFloorOnce()
	ticks.mu.Lock()
	ticks.took = nil
	ticks.mu.Unlock()
	s0 := r.count.statements.Load()
	t0 := time.Now()
	if !wait.Sleep(ctx, *setFor) {
		return ctx.Err()
	}
	secs := time.Since(t0).Seconds()
	stmts := float64(r.count.statements.Load() - s0)
	st := r.set.Status()
	ticks.mu.Lock()
	took := append([]time.Duration(nil), ticks.took...)
	fails := ticks.fails
	ticks.mu.Unlock()
	stopAt := time.Now()
	r.stop()
	stopTook := time.Since(stopAt)

	// The floor of a tick: one plain UPDATE of the same rows, same size.
	var floorTook []time.Duration
	for range 5 {
		t := time.Now()
		if _, err := b.admin.Exec(ctx, `UPDATE pgleader.lease SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() + interval '6 seconds' WHERE key = ANY($1)`, keys); err != nil {
			return err
		}
		floorTook = append(floorTook, time.Since(t))
	}

	perTick := stmts / (secs / 2) // RenewEvery is 2s
	p99 := percentile(took, 99)
	extra := (perKey - floorPerKey) / 1024
	fmt.Printf("### %d keys held by one process (%.0f s)\n\n", n, secs)
	fmt.Println("| measure | figure | floor | goal |")
	fmt.Println("|---|---|---|---|")
	fmt.Printf("| all keys won from a cold start | %s | – | – |\n", tookAll.Round(time.Millisecond))
	fmt.Printf("| keys held with a live term at the end | %d of %d | – | all |\n", st.Held, n)
	fmt.Printf("| statements per RenewEvery (all of the process's statements) | %.2f | 1 | ≤ 1: %s |\n", perTick, verdict(perTick <= 1.01))
	if len(took) > 0 {
		fmt.Printf("| renewal tick round trip p50 / p99 / max (%d ticks, %d failed) | %s / %s / %s | one plain %d-row UPDATE, p50 of 5: %s | p99 ≤ 100 ms: %s |\n",
			len(took), fails, ms(percentile(took, 50)), ms(p99), ms(percentileMax(took)), n, ms(percentile(floorTook, 50)), verdict(p99 <= 100*time.Millisecond))
	}
	fmt.Printf("| memory per held key, heap + stacks | %.2f KB | %.2f KB (a goroutine blocked in select, with its context) | ≤ 2.5 KB beyond the body's own: %s (%.2f KB) |\n",
		perKey/1024, floorPerKey/1024, verdict(extra <= 2.5), extra)
	fmt.Printf("| graceful stop of all %d keys (Run returns) | %s | – | – |\n\n", n, stopTook.Round(time.Millisecond))
	return nil
}

func percentileMax(s []time.Duration) time.Duration { return percentile(s, 100) }

func (b *bench) setSharedRun(ctx context.Context) error {
	n := *setShared
	keys := setKeys("shared", n)
	log := &entryLog{entries: make(map[string][]leadEntry)}
	var reps []*setReplica
	defer func() {
		for _, r := range reps {
			r.close()
		}
	}()
	for i := range 4 {
		r, err := newSetReplica(ctx, b.url, fmt.Sprintf("s%d", i))
		if err != nil {
			return err
		}
		reps = append(reps, r)
	}
	fmt.Printf("### %d keys shared by 3 replicas\n\n", n)
	fmt.Println("| measure | figure | floor | goal |")
	fmt.Println("|---|---|---|---|")

	// Cold start.
	start := time.Now()
	for _, r := range reps[:3] {
		if err := r.start("shared", keys, log.body, nil); err != nil {
			return err
		}
	}
	even := func(rs []*setReplica) bool {
		target := n / len(rs)
		for _, r := range rs {
			if h := r.set.Status().Held; h < target-1 || h > target+1 {
				return false
			}
		}
		return true
	}
	var spread time.Duration
	for !even(reps[:3]) {
		if time.Since(start) > 30*time.Second {
			break
		}
		if !wait.Sleep(ctx, 10*time.Millisecond) {
			return ctx.Err()
		}
	}
	spread = time.Since(start)
	counts := fmt.Sprint(reps[0].set.Status().Held, "/", reps[1].set.Status().Held, "/", reps[2].set.Status().Held)
	fmt.Printf("| cold start → every replica within ±1 of %d | %s (%s) | RenewEvery + CampaignEvery (2.5 s) | ≤ 2 TTL (12 s): %s |\n",
		n/3, spread.Round(time.Millisecond), counts, verdict(even(reps[:3]) && spread <= 12*time.Second))

	// Steady load, then a graceful stop.
	if !wait.Sleep(ctx, 3*time.Second) {
		return ctx.Err()
	}
	var s0 int64
	for _, r := range reps[:3] {
		s0 += r.count.statements.Load()
	}
	t0 := time.Now()
	if !wait.Sleep(ctx, *setFor) {
		return ctx.Err()
	}
	var s1 int64
	for _, r := range reps[:3] {
		s1 += r.count.statements.Load()
	}
	setRate := float64(s1-s0) / time.Since(t0).Seconds()

	victim := reps[2]
	victimKeys := heldKeys(victim.set)
	stopAt := time.Now()
	victim.stop()
	delays, missing := log.takeovers(ctx, victimKeys, victim.owner, stopAt, 10*time.Second)
	if len(delays) > 0 {
		p99 := percentile(delays, 99)
		fmt.Printf("| graceful stop → its %d keys led elsewhere, per key p50 / p99 / max | %s / %s / %s (%d never) | CampaignEvery (500 ms) | p99 ≤ 1 s: %s |\n",
			len(victimKeys), ms(percentile(delays, 50)), ms(p99), ms(percentileMax(delays)), missing, verdict(p99 <= time.Second && missing == 0))
	}

	// A fresh replica joins; then one crashes.
	if err := reps[3].start("shared", keys, log.body, nil); err != nil {
		return err
	}
	trio := []*setReplica{reps[0], reps[1], reps[3]}
	joinAt := time.Now()
	for !even(trio) && time.Since(joinAt) < 30*time.Second {
		if !wait.Sleep(ctx, 10*time.Millisecond) {
			return ctx.Err()
		}
	}
	fmt.Printf("| a replica joins two → every replica within ±1 of %d | %s | RenewEvery + YieldGrace + CampaignEvery (3.5 s) | within a few RenewEvery: %s |\n",
		n/3, time.Since(joinAt).Round(time.Millisecond), verdict(even(trio)))
	if !wait.Sleep(ctx, 2*time.Second) {
		return ctx.Err()
	}
	victim = reps[1]
	victimKeys = heldKeys(victim.set)
	crashAt := time.Now()
	victim.crashed.Store(true)
	delays, missing = log.takeovers(ctx, victimKeys, victim.owner, crashAt, 20*time.Second)
	if len(delays) > 0 {
		p99 := percentile(delays, 99)
		fmt.Printf("| crash → its %d keys led elsewhere, per key p50 / p99 / max | %s / %s / %s (%d never) | TTL after its last renewal (4–6 s) | p99 ≤ TTL + 1 s (7 s): %s |\n",
			len(victimKeys), ms(percentile(delays, 50)), ms(p99), ms(percentileMax(delays)), missing, verdict(p99 <= 7*time.Second && missing == 0))
	}
	for _, r := range reps {
		if r.cancel != nil {
			r.stop()
		}
	}

	// The same keys as independent Electors, one per key on each replica.
	elRate, err := b.electorRate(ctx, n)
	if err != nil {
		return err
	}
	ratio := elRate / setRate
	fmt.Printf("| database statements/s, %d keys across 3 replicas: set | %.2f | – | – |\n", n, setRate)
	fmt.Printf("| database statements/s, %d keys across 3 replicas: one Elector per key per replica | %.1f | – | – |\n", n, elRate)
	fmt.Printf("| ratio | %.0f× fewer | – | ≥ 50×: %s |\n\n", ratio, verdict(ratio >= 50))
	return nil
}

func heldKeys(s *pgleader.Set) []string {
	var out []string
	for _, t := range s.Terms() {
		out = append(out, t.Key())
	}
	return out
}

// electorRate runs n Electors (one per key) on each of three replicas and
// returns their statements per second once settled.
func (b *bench) electorRate(ctx context.Context, n int) (float64, error) {
	keys := setKeys("el", n)
	var reps []*setReplica
	var cancels []context.CancelFunc
	var wg sync.WaitGroup
	defer func() {
		for _, c := range cancels {
			c()
		}
		wg.Wait()
		for _, r := range reps {
			r.pool.Close()
		}
	}()
	for i := range 3 {
		r, err := newSetReplica(ctx, b.url, fmt.Sprintf("e%d", i))
		if err != nil {
			return 0, err
		}
		reps = append(reps, r)
		for _, k := range keys {
			spec := recipe(k)
			spec.RequireFenceAdvance = false
			el, err := pgleader.New(r.pg, spec, pgleader.Options{Owner: r.owner, Logger: quiet,
				Lead: func(ctx context.Context, t *pgleader.Term) error {
					select {
					case <-t.Ending():
					case <-ctx.Done():
					}
					return nil
				}})
			if err != nil {
				return 0, err
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancels = append(cancels, cancel)
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := el.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
					fmt.Println("elector:", err)
				}
			}()
		}
	}
	if !wait.Sleep(ctx, 10*time.Second) { // past the start-up storm
		return 0, ctx.Err()
	}
	var s0 int64
	for _, r := range reps {
		s0 += r.count.statements.Load()
	}
	t0 := time.Now()
	if !wait.Sleep(ctx, *setFor) {
		return 0, ctx.Err()
	}
	var s1 int64
	for _, r := range reps {
		s1 += r.count.statements.Load()
	}
	return float64(s1-s0) / time.Since(t0).Seconds(), nil
}
