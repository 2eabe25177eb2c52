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

// pair starts two replicas of key: x leads (and has written), y waits.
func (b *bench) pair(ctx context.Context, key string, notify bool) (x, y *replica, err error) {
	if _, err := b.admin.Exec(ctx, `INSERT INTO digests (name, body) VALUES ($1, '') ON CONFLICT DO NOTHING`, key); err != nil {
		return nil, nil, err
	}
	if x, err = newReplica(ctx, b.url, key, "a-"+key, notify); err != nil {
		return nil, nil, err
	}
	if y, err = newReplica(ctx, b.url, key, "b-"+key, notify); err != nil {
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
	return x, y, b.ready(ctx, y, 1, notify)
}

// ready waits until r has campaigned n times and, with notify, listens.
func (b *bench) ready(ctx context.Context, r *replica, n int64, notify bool) error {
	if err := r.waitAttempts(ctx, n); err != nil {
		return err
	}
	for notify && !r.pg.Listening() {
		if !wait.Sleep(ctx, time.Millisecond) {
			return ctx.Err()
		}
	}
	return nil
}

// handover stops the leader gracefully n times, alternating, and measures
// from the start of each stop until the successor's acquire returned (a)
// and until its first fenced write committed (b).
// steps splits handovers into the leader's stop until its release
// returned, from there until the successor sent its winning acquire, and
// that acquire's round trip.
type steps struct{ stop, release, wake, acquire []time.Duration }

func (b *bench) handover(ctx context.Context, notify bool, n int) (toAcquire, toWrite []time.Duration, st steps, err error) {
	key := "handover-poll"
	if notify {
		key = "handover-notify"
	}
	x, y, err := b.pair(ctx, key, notify)
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
		for _, ch := range []chan time.Time{cand.sentAt, cand.acquiredAt, cand.firstWrite, leader.releaseSent, leader.releasedAt} {
			drainTimes(ch)
		}
		// Stop at a random point of the candidate's polling cycle.
		if !wait.Sleep(ctx, time.Duration(rand.Int64N(int64(recipe("").CampaignEvery)))) {
			return nil, nil, st, ctx.Err()
		}
		start := time.Now()
		leader.cancel()
		var at [5]time.Time
		for j, w := range []struct {
			ch   chan time.Time
			what string
		}{{leader.releasedAt, "release"}, {cand.sentAt, "successor acquire"}, {cand.acquiredAt, "successor acquire"}, {cand.firstWrite, "successor write"}, {leader.releaseSent, "release"}} {
			if at[j], err = await(ctx, w.ch, 10*time.Second, w.what); err != nil {
				return nil, nil, st, err
			}
		}
		toAcquire = append(toAcquire, at[2].Sub(start))
		toWrite = append(toWrite, at[3].Sub(start))
		st.stop = append(st.stop, at[4].Sub(start))
		st.release = append(st.release, at[0].Sub(at[4]))
		st.wake = append(st.wake, at[1].Sub(at[0]))
		st.acquire = append(st.acquire, at[2].Sub(at[1]))
		if err := <-leader.done; err != nil {
			return nil, nil, st, err
		}
		before := leader.attempts.Load()
		if err := leader.start(); err != nil {
			return nil, nil, st, err
		}
		if err := b.ready(ctx, leader, before+1, notify); err != nil {
			return nil, nil, st, err
		}
		leader, cand = cand, leader
	}
	return toAcquire, toWrite, st, nil
}

func (b *bench) handoverTable(ctx context.Context, rtt, idleRTT time.Duration) error {
	fmt.Printf("## Graceful handover (%d handovers per mode; from the start of the leader's stop)\n\n", *handovers)
	fmt.Println("| mode | (a) until successor's acquire returns: p50 / p90 / p99 / max | (b) until its first fenced write commits: p50 / p90 / p99 / max |")
	fmt.Println("|---|---|---|")
	var notifyA, notifyB []time.Duration
	var notifySteps steps
	for _, notify := range []bool{true, false} {
		a, w, st, err := b.handover(ctx, notify, *handovers)
		if err != nil {
			return err
		}
		mode := "polling every CampaignEvery (PollOnly)"
		if notify {
			mode = "LISTEN/NOTIFY"
			notifyA, notifyB, notifySteps = a, w, st
		}
		fmt.Printf("| %s | %s | %s |\n", mode, summary(a), summary(w))
	}
	defer fmt.Printf("With NOTIFY, (a) in steps (p50 / p90 / p99 / max):\n"+
		"- from the stop until the leader sent its release (the body returns): %s\n"+
		"- the release's round trip: %s\n"+
		"- until the successor sent its acquire (NOTIFY delivery, wake-up, fence floor read): %s\n"+
		"- the acquire's round trip: %s\n\n",
		summary(notifySteps.stop), summary(notifySteps.release), summary(notifySteps.wake), summary(notifySteps.acquire))
	// release, fence floor read, acquire; then claim and the first write.
	fmt.Printf("| physical floor: back-to-back round trip × statements | %s (3 statements) | %s (5 statements) |\n", ms(3*rtt), ms(5*rtt))
	fmt.Printf("| physical floor: round trip after idle × statements | %s | %s |\n\n", ms(3*idleRTT), ms(5*idleRTT))
	fmt.Printf("Goals: (a) p50 ≤ 3 ms and max ≤ 10 ms: %s (p50 %s, max %s); (b) p99 ≤ 15 ms: %s (p99 %s)\n\n",
		verdict(percentile(notifyA, 50) <= 3*time.Millisecond && percentile(notifyA, 100) <= 10*time.Millisecond),
		ms(percentile(notifyA, 50)), ms(percentile(notifyA, 100)),
		verdict(percentile(notifyB, 99) <= 15*time.Millisecond), ms(percentile(notifyB, 99)))
	return nil
}
