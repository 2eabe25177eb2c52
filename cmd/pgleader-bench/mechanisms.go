package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/pgleader/pgleader/internal/speedup"
	"github.com/pgleader/pgleader/internal/wait"
)

var mechanismRounds = flag.Int("mechanism-rounds", 30, "hand-offs per variant in the mechanisms measurement (all on, and each mechanism off)")

// variant is the hand-off with some of its speed-ups switched off.
type variant struct {
	name string
	off  speedup.Mechanisms
	key  string
}

var variants = []variant{
	{"all on", speedup.Mechanisms{}, "mech-on"},
	{"rehearsal off", speedup.Mechanisms{Rehearsal: true}, "mech-no-rehearsal"},
	{"linger off", speedup.Mechanisms{Linger: true}, "mech-no-linger"},
}

// settle is how long after its term started a leader is stopped at the
// earliest: it rehearses its hand-off rehearseAfter (100 ms) after the
// start, and a deployed leader hands off long after that.
const settle = 300 * time.Millisecond

// mechanismRound is one hand-off of v on x and y, as between two processes
// that each hand off once: both get new backends (new lease and LISTEN
// sessions), x leads, y registers and listens; once x has rehearsed (if it
// does), a read on its lease connection stands for its last renewal, and x
// is stopped after a random idle spell of up to benchIdle. Then y stops
// too, releasing, and both backends are dropped.
func (b *bench) mechanismRound(ctx context.Context, v variant, x, y *replica) (sample, error) {
	x.fresh(v.off)
	y.fresh(v.off)
	for _, r := range []*replica{x, y} {
		for _, ch := range []chan time.Time{r.sentAt, r.knowsAt, r.bodyAt, r.firstWrite, r.releaseSent, r.releasedAt} {
			drainTimes(ch)
		}
	}
	if err := x.start(); err != nil {
		return sample{}, err
	}
	began, err := await(ctx, x.knowsAt, 10*time.Second, "leader's claim")
	if err != nil {
		return sample{}, err
	}
	if _, err := await(ctx, x.firstWrite, 10*time.Second, "leader's first write"); err != nil {
		return sample{}, err
	}
	before := y.attempts.Load()
	if err := y.start(); err != nil {
		return sample{}, err
	}
	if err := b.ready(ctx, y, before+1, true, true); err != nil {
		return sample{}, err
	}
	// y's LISTEN session rehearses once it listens: give it time too.
	if !wait.Sleep(ctx, max(time.Until(began.Add(settle)), 100*time.Millisecond)) {
		return sample{}, ctx.Err()
	}
	if _, err := x.pg.Lease(ctx, x.key); err != nil {
		return sample{}, err
	}
	if !wait.Sleep(ctx, time.Duration(rand.Int64N(int64(benchIdle)))) {
		return sample{}, ctx.Err()
	}
	start := time.Now()
	x.cancel()
	s, err := measure(ctx, start, x, y)
	if err != nil {
		return s, err
	}
	if err := <-x.done; err != nil {
		return s, err
	}
	return s, y.stop()
}

// mechanismsTable measures the hand-off with every speed-up on and with
// each switched off, the variants interleaved round by round in a new
// random order each round.
func (b *bench) mechanismsTable(ctx context.Context) error {
	n := *mechanismRounds
	fmt.Printf("## Hand-off speed-ups, each switched off (%d hand-offs per variant, interleaved)\n\n", n)
	type pairOf struct{ x, y *replica }
	pairs := make([]pairOf, len(variants))
	defer func() {
		for _, p := range pairs {
			for _, r := range []*replica{p.x, p.y} {
				if r != nil {
					r.close()
				}
			}
		}
	}()
	for i, v := range variants {
		if _, err := b.admin.Exec(ctx, `INSERT INTO digests (name, body) VALUES ($1, '') ON CONFLICT DO NOTHING`, v.key); err != nil {
			return err
		}
		var err error
		if pairs[i].x, err = newReplica(ctx, b.url, v.key, "a-"+v.key, true, true); err != nil {
			return err
		}
		if pairs[i].y, err = newReplica(ctx, b.url, v.key, "b-"+v.key, true, true); err != nil {
			return err
		}
	}
	got := make([][]sample, len(variants))
	order := make([]int, len(variants))
	for i := range order {
		order[i] = i
	}
	for round := 0; round < n; round++ {
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, i := range order {
			s, err := b.mechanismRound(ctx, variants[i], pairs[i].x, pairs[i].y)
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", variants[i].name, round, err)
			}
			got[i] = append(got[i], s)
		}
	}

	fmt.Println("Each round gives both replicas new backends (new lease and LISTEN sessions, as a new process")
	fmt.Println("would open), stops the leader at least 300 ms into its term, after a read on its lease")
	fmt.Printf("connection and a random idle spell of 0–%v, and measures from the stop.\n\n", benchIdle)
	fmt.Println("| variant | (a) until the successor knows it leads: p50 / p90 / p99 / max | (a) p50, p99 against all on | (a) p50 saved by the mechanism, 90% interval | (b) until its first fenced write commits: p50 / p90 / p99 / max | (b) p50, p99 against all on |")
	fmt.Println("|---|---|---|---|---|---|")
	base := got[0]
	for i, v := range variants {
		a, w := field(got[i], func(s sample) time.Duration { return s.toKnow }), field(got[i], func(s sample) time.Duration { return s.toWrite })
		a0, w0 := field(base, func(s sample) time.Duration { return s.toKnow }), field(base, func(s sample) time.Duration { return s.toWrite })
		saved := "–"
		if i > 0 {
			lo, hi := savedInterval(a0, a)
			saved = fmt.Sprintf("%.0f %% (%.0f to %.0f %%)", 100*(1-ratioOf(percentile(a0, 50), percentile(a, 50))), 100*lo, 100*hi)
		}
		fmt.Printf("| %s | %s | %.2f×, %.2f× | %s | %s | %.2f×, %.2f× |\n", v.name, summary(a),
			ratioOf(percentile(a, 50), percentile(a0, 50)), ratioOf(percentile(a, 99), percentile(a0, 99)), saved,
			summary(w), ratioOf(percentile(w, 50), percentile(w0, 50)), ratioOf(percentile(w, 99), percentile(w0, 99)))
	}
	fmt.Println()
	fmt.Println("(a) in steps, p50 / p90 / p99 / max:")
	fmt.Println()
	fmt.Println("| variant | stop → leader sends hand_off | its round trip (with the hint) | → successor sends its check | the check's round trip |")
	fmt.Println("|---|---|---|---|---|")
	for i, v := range variants {
		var st steps
		for _, s := range got[i] {
			st.add(s)
		}
		fmt.Printf("| %s | %s | %s | %s | %s |\n", v.name, summary(st.stop), summary(st.release), summary(st.wake), summary(st.prove))
	}
	fmt.Println()
	fmt.Println("A mechanism is worth keeping if it saves at least 20 % of (a)'s p50 or p99: switched off, (a) is at least 1.25× all on.")
	for i, v := range variants[1:] {
		a := field(got[i+1], func(s sample) time.Duration { return s.toKnow })
		a0 := field(base, func(s sample) time.Duration { return s.toKnow })
		s50 := 1 - ratioOf(percentile(a0, 50), percentile(a, 50))
		s99 := 1 - ratioOf(percentile(a0, 99), percentile(a, 99))
		fmt.Printf("- %s: saves %.0f %% of p50, %.0f %% of p99: %s\n", v.name[:len(v.name)-len(" off")], 100*s50, 100*s99, verdict(s50 >= 0.2 || s99 >= 0.2))
	}
	fmt.Println()
	return nil
}

func field(samples []sample, f func(sample) time.Duration) []time.Duration {
	out := make([]time.Duration, len(samples))
	for i, s := range samples {
		out[i] = f(s)
	}
	return out
}

// ratioOf is a/b.
func ratioOf(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// savedInterval is a bootstrap 90% interval of 1 - p50(on)/p50(off), the
// share of the median that the mechanism saves.
func savedInterval(on, off []time.Duration) (lo, hi float64) {
	const n = 2000
	saved := make([]time.Duration, n) // in units of 1e-6, to reuse percentile
	for i := range saved {
		a, b := resample(on), resample(off)
		saved[i] = time.Duration(1e6 * (1 - ratioOf(percentile(a, 50), percentile(b, 50))))
	}
	return float64(percentile(saved, 5)) / 1e6, float64(percentile(saved, 95)) / 1e6
}

func resample(s []time.Duration) []time.Duration {
	out := make([]time.Duration, len(s))
	for i := range out {
		out[i] = s[rand.IntN(len(s))]
	}
	return out
}
