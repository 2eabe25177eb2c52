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
}

var modes = []mode{
	{"hand-off (LISTEN/NOTIFY, candidate rows)", true, true, "handover-handoff", false},
	{"release, then acquire (LISTEN/NOTIFY, NoHandOff)", true, false, "handover-notify", false},
	{"polling every CampaignEvery (PollOnly)", false, false, "handover-poll", false},
	{"hand-off, candidate registered over RenewEvery + Margin before (take writes)", true, true, "handover-aged", true},
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
func (b *bench) pair(ctx context.Context, key string, notify, handOff bool) (x, y *replica, err error) {
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

// handover stops the leader gracefully n times, alternating, and measures
// from the start of each stop until the successor knew it leads (its Claim
// was called: a) and until its first fenced write committed (b).
func (b *bench) handover(ctx context.Context, m mode, n int) (toKnow, toWrite []time.Duration, st steps, err error) {
	x, y, err := b.pair(ctx, m.key, m.notify, m.handOff)
	defer func() {
		x.close()
		if y != nil {
			y.close()
		}
	}()
	if err != nil {
		return nil, nil, st, err
	}
	leader, cand := x, y
	for i := 0; i < n; i++ {
		for _, ch := range []chan time.Time{cand.sentAt, cand.knowsAt, cand.firstWrite, leader.releaseSent, leader.releasedAt} {
			drainTimes(ch)
		}
		// Stop at a random point of the candidate's polling cycle.
		if !wait.Sleep(ctx, time.Duration(rand.Int64N(int64(benchIdle)))) {
			return nil, nil, st, ctx.Err()
		}
		if m.aged {
			if err := b.aged(ctx, m.key, cand.owner); err != nil {
				return nil, nil, st, err
			}
		}
		start := time.Now()
		leader.cancel()
		var at [5]time.Time
		for j, w := range []struct {
			ch   chan time.Time
			what string
		}{{leader.releasedAt, "release"}, {cand.sentAt, "successor's proof"}, {cand.knowsAt, "successor's claim"}, {cand.firstWrite, "successor write"}, {leader.releaseSent, "release"}} {
			if at[j], err = await(ctx, w.ch, 10*time.Second, w.what); err != nil {
				return nil, nil, st, err
			}
		}
		toKnow = append(toKnow, at[2].Sub(start))
		toWrite = append(toWrite, at[3].Sub(start))
		st.stop = append(st.stop, at[4].Sub(start))
		st.release = append(st.release, at[0].Sub(at[4]))
		st.wake = append(st.wake, at[1].Sub(at[0]))
		st.prove = append(st.prove, at[2].Sub(at[1]))
		if err := <-leader.done; err != nil {
			return nil, nil, st, err
		}
		before := leader.attempts.Load()
		if err := leader.start(); err != nil {
			return nil, nil, st, err
		}
		if err := b.ready(ctx, leader, before+1, m.notify, m.notify && m.handOff); err != nil {
			return nil, nil, st, err
		}
		leader, cand = cand, leader
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
		if m.aged {
			n = *agedHandovers
		}
		a, w, st, err := b.handover(ctx, m, n)
		if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		if m.handOff && !m.aged {
			handA, handB = a, w
		}
		stepsOf[m.name] = st
		name := m.name
		if m.aged {
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
