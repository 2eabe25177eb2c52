package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/pgleader/pgleader/internal/wait"
)

// await waits for a value on ch, at most d.
func await(ctx context.Context, ch <-chan time.Time, d time.Duration, what string) (time.Time, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case v := <-ch:
		return v, nil
	case <-t.C:
		return time.Time{}, fmt.Errorf("no %s within %v", what, d)
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
}

func drainTimes(ch chan time.Time) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// mode is how a handover goes: by hand-off to a registered candidate, by
// release and a NOTIFY-woken acquire, or by release and polling. An aged
// hand-off stops the leader only once the candidate's registration has less
// than TTL - RenewEvery left, so that its check confirms the term by a
// write rather than believe it on a read.
type mode struct {
	name            string
	notify, handOff bool
	key             string
	aged            bool
	// ctxOnly: the bodies watch only ctx.Done(), not Ending; cancelOnStop
	// sets Options.CancelOnStop.
	ctxOnly, cancelOnStop bool
}

var modes = []mode{
	{"hand-off (LISTEN/NOTIFY, candidate rows)", true, true, "handover-handoff", false, false, false},
	{"release, then acquire (LISTEN/NOTIFY, NoHandOff)", true, false, "handover-notify", false, false, false},
	{"polling every CampaignEvery (PollOnly)", false, false, "handover-poll", false, false, false},
	{"hand-off, candidate registered over RenewEvery + Margin before (take writes)", true, true, "handover-aged", true, false, false},
	{"hand-off, a body that watches only ctx", true, true, "handover-ctx", false, true, false},
	{"hand-off, a body that watches only ctx, CancelOnStop", true, true, "handover-ctx-cancel", false, true, true},
}

// benchIdle bounds the wait before each stop: a random point of the
// candidate's polling cycle, soon after the leader's term began. The floor
// after a stop's idle spell (coldRoundTrips) draws its spells the same way.
var benchIdle = recipe("").CampaignEvery

// agedLeft is what an aged hand-off's candidate registration has left at
// most when the leader stops: less than the Elector's TTL - RenewEvery.
const agedLeft = 3800 * time.Millisecond

// aged waits until cand's registration for key has less than agedLeft left.
func (b *bench) aged(ctx context.Context, key, owner string) error {
	for {
		var left time.Duration
		err := b.admin.QueryRow(ctx, `SELECT coalesce(extract(epoch FROM max(expires_at) - clock_timestamp()), 0) * 1e9
			FROM pgleader.candidate WHERE key = $1 AND owner = $2`, key, owner).Scan(&left)
		if err != nil {
			return err
		}
		if left > 0 && left < agedLeft {
			return nil
		}
		if !wait.Sleep(ctx, 20*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// pair starts two replicas of key: x leads (and has written), y waits.
func (b *bench) pair(ctx context.Context, key string, notify, handOff bool, setup ...func(*replica)) (x, y *replica, err error) {
	if _, err := b.admin.Exec(ctx, `INSERT INTO digests (name, body) VALUES ($1, '') ON CONFLICT DO NOTHING`, key); err != nil {
		return nil, nil, err
	}
	if x, err = newReplica(ctx, b.url, key, "a-"+key, notify, handOff); err != nil {
		return nil, nil, err
	}
	if y, err = newReplica(ctx, b.url, key, "b-"+key, notify, handOff); err != nil {
		x.close()
		return nil, nil, err
	}
	for _, f := range setup {
		f(x)
		f(y)
	}
	if err := x.start(); err != nil {
		return x, y, err
	}
	if _, err := await(ctx, x.firstWrite, 10*time.Second, "first write"); err != nil {
		return x, y, err
	}
	if err := y.start(); err != nil {
		return x, y, err
	}
	return x, y, b.ready(ctx, y, 1, notify, notify && handOff)
}

// ready waits until r has campaigned n times and, with notify, listens;
// with registered, until it is a live candidate of its key.
func (b *bench) ready(ctx context.Context, r *replica, n int64, notify, registered bool) error {
	if err := r.waitAttempts(ctx, n); err != nil {
		return err
	}
	for notify && !r.pg.Listening() {
		if !wait.Sleep(ctx, time.Millisecond) {
			return ctx.Err()
		}
	}
	for registered {
		var ok bool
		if err := b.admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pgleader.candidates($1) WHERE owner = $2)`, r.key, r.owner).Scan(&ok); err != nil {
			return err
		}
		if ok {
			return nil
		}
		if !wait.Sleep(ctx, time.Millisecond) {
			return ctx.Err()
		}
	}
	return nil
}

// steps splits a handover: from the start of the leader's stop until it
// sent the statement that ends its term (release or hand_off); that
// statement's round trip; from its answer until the successor sent the
// statement that proved its term (notification delivery, wake-up, and on
// the old path the fence floor read); and from that send until the
// successor knew it leads (its round trip).
type steps struct{ stop, release, wake, prove []time.Duration }

// sample is one handover, from the start of the leader's stop: until the
// successor knew it leads (its Claim was called), until its body was
// entered (the Claim committed), until its first fenced write committed,
// and the first of those in steps.
type sample struct {
	toKnow, toBody, toWrite    time.Duration
	stop, release, wake, prove time.Duration
}

// add appends s's steps.
func (st *steps) add(s sample) {
	st.stop = append(st.stop, s.stop)
	st.release = append(st.release, s.release)
	st.wake = append(st.wake, s.wake)
	st.prove = append(st.prove, s.prove)
}

// handoverPair is two replicas of a key, one leading and one waiting, that
// swap roles at each handover.
type handoverPair struct {
	b            *bench
	m            mode
	leader, cand *replica
}

func (b *bench) newHandoverPair(ctx context.Context, m mode) (*handoverPair, error) {
	x, y, err := b.pair(ctx, m.key, m.notify, m.handOff, func(r *replica) { r.ctxOnly, r.cancelOnStop = m.ctxOnly, m.cancelOnStop })
	p := &handoverPair{b: b, m: m, leader: x, cand: y}
	if err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

func (p *handoverPair) close() {
	for _, r := range []*replica{p.leader, p.cand} {
		if r != nil {
			r.close()
		}
	}
}

// round stops the leader gracefully at a random point of the candidate's
// polling cycle, measures until the successor knew it leads, entered its
// body and wrote, then restarts the stopped replica as the candidate.
func (p *handoverPair) round(ctx context.Context) (sample, error) {
	leader, cand := p.leader, p.cand
	for _, ch := range []chan time.Time{cand.sentAt, cand.knowsAt, cand.bodyAt, cand.firstWrite, leader.releaseSent, leader.releasedAt} {
		drainTimes(ch)
	}
	if !wait.Sleep(ctx, time.Duration(rand.Int64N(int64(benchIdle)))) {
		return sample{}, ctx.Err()
	}
	if p.m.aged {
		if err := p.b.aged(ctx, p.m.key, cand.owner); err != nil {
			return sample{}, err
		}
	}
	start := time.Now()
	leader.cancel()
	s, err := measure(ctx, start, leader, cand)
	if err != nil {
		return s, err
	}
	if err := <-leader.done; err != nil {
		return s, err
	}
	before := leader.attempts.Load()
	if err := leader.start(); err != nil {
		return s, err
	}
	if err := p.b.ready(ctx, leader, before+1, p.m.notify, p.m.notify && p.m.handOff); err != nil {
		return s, err
	}
	p.leader, p.cand = cand, leader
	return s, nil
}

// measure waits for what a handover that started at start records on the
// stopped leader and its successor.
func measure(ctx context.Context, start time.Time, leader, cand *replica) (sample, error) {
	var at [6]time.Time
	var err error
	for j, w := range []struct {
		ch   chan time.Time
		what string
	}{{leader.releasedAt, "release"}, {cand.sentAt, "successor's proof"}, {cand.knowsAt, "successor's claim"},
		{cand.bodyAt, "successor's body"}, {cand.firstWrite, "successor write"}, {leader.releaseSent, "release"}} {
		if at[j], err = await(ctx, w.ch, 10*time.Second, w.what); err != nil {
			return sample{}, err
		}
	}
	return sample{toKnow: at[2].Sub(start), toBody: at[3].Sub(start), toWrite: at[4].Sub(start),
		stop: at[5].Sub(start), release: at[0].Sub(at[5]), wake: at[1].Sub(at[0]), prove: at[2].Sub(at[1])}, nil
}

// handover stops the leader gracefully n times, alternating, and measures
// from the start of each stop until the successor knew it leads (its Claim
// was called: a) and until its first fenced write committed (b).
func (b *bench) handover(ctx context.Context, m mode, n int) (toKnow, toWrite []time.Duration, st steps, err error) {
	p, err := b.newHandoverPair(ctx, m)
	if err != nil {
		return nil, nil, st, err
	}
	defer p.close()
	for i := 0; i < n; i++ {
		s, err := p.round(ctx)
		if err != nil {
			return nil, nil, st, err
		}
		toKnow = append(toKnow, s.toKnow)
		toWrite = append(toWrite, s.toWrite)
		st.add(s)
	}
	return toKnow, toWrite, st, nil
}

func (b *bench) handoverTable(ctx context.Context, rtt, idleRTT time.Duration, cold floors) error {
	fmt.Printf("## Graceful handover (%d handovers per mode; from the start of the leader's stop)\n\n", *handovers)
	fmt.Println("| mode | (a) until the successor knows it leads: p50 / p90 / p99 / max | (b) until its first fenced write commits: p50 / p90 / p99 / max |")
	fmt.Println("|---|---|---|")
	var handA, handB []time.Duration
	stepsOf := map[string]steps{}
	for _, m := range modes {
		n := *handovers
		if m.aged || m.ctxOnly {
			n = *agedHandovers
		}
		a, w, st, err := b.handover(ctx, m, n)
		if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		if m.handOff && !m.aged && !m.ctxOnly {
			handA, handB = a, w
		}
		stepsOf[m.name] = st
		name := m.name
		if m.aged || m.ctxOnly {
			name = fmt.Sprintf("%s, %d handovers", m.name, n)
		}
		fmt.Printf("| %s | %s | %s |\n", name, summary(a), summary(w))
	}
	// Hand-off: hand_off; the successor's take; then claim and the first
	// write, each on the pool (which pings a connection idle over 1 s).
	fmt.Printf("| physical floor of hand-off: back-to-back round trip × statements | %s (2 statements) | %s (4 statements) |\n", ms(2*rtt), ms(4*rtt))
	fmt.Printf("| physical floor of hand-off: round trip after 10 ms idle × statements | %s | %s |\n", ms(2*idleRTT), ms(4*idleRTT))
	// The leader's hand_off follows its connection's idle spell, the
	// successor's take the notification's wake-up: one cold statement, then
	// (if the wake-up were free) warm ones.
	fmt.Printf("| physical floor of hand-off: round trip after a stop's idle spell (0–%v) + back-to-back round trips | %s | %s |\n", benchIdle, ms(cold.bench+rtt), ms(cold.bench+3*rtt))
	fmt.Printf("| the same with the idle spell of a stop at any point of a renewal cycle (0–%v) | %s | %s |\n\n", recipe("").RenewEvery, ms(cold.cycle+rtt), ms(cold.cycle+3*rtt))
	fmt.Println("(a) in steps, p50 / p90 / p99 / max:")
	fmt.Println()
	fmt.Println("| mode | stop → leader sends release or hand_off | its round trip | → successor sends the statement that proves its term | that statement's round trip |")
	fmt.Println("|---|---|---|---|---|")
	for _, m := range modes {
		if !m.notify {
			continue
		}
		st := stepsOf[m.name]
		fmt.Printf("| %s | %s | %s | %s | %s |\n", m.name, summary(st.stop), summary(st.release), summary(st.wake), summary(st.prove))
	}
	fmt.Println()
	fmt.Printf("Goals (hand-off): (a) p50 ≤ 1.5 ms and max ≤ 5 ms: %s (p50 %s, max %s; floor after a stop's idle spell %s); (b) p50 ≤ 2.5 ms and p99 ≤ 8 ms: %s (p50 %s, p99 %s; floor %s)\n\n",
		verdict(percentile(handA, 50) <= 1500*time.Microsecond && percentile(handA, 100) <= 5*time.Millisecond),
		ms(percentile(handA, 50)), ms(percentile(handA, 100)), ms(cold.bench+rtt),
		verdict(percentile(handB, 50) <= 2500*time.Microsecond && percentile(handB, 99) <= 8*time.Millisecond),
		ms(percentile(handB, 50)), ms(percentile(handB, 99)), ms(cold.bench+3*rtt))
	return nil
}
