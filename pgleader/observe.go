package pgleader

import (
	"context"
	"time"
)

// Observe follows key's lease without campaigning, for a follower that
// forwards requests to the leader, a dashboard or a router. It sends the
// lease as the backend reads it at once, then again each time the holder,
// the token or the value changes, and closes the channel when ctx is done.
// A reader that falls behind gets the newest lease, not every one.
//
// Everything sent was read from the backend: with a [Watcher] that is
// listening, a notification (a release, an announced acquire) makes Observe
// read at once, but no notification is believed without that read, and a
// flood of them causes at most one read per every/10. Otherwise it reads
// every interval, and at the holder's expiry. every must be at least
// MinInterval; 2*RenewEvery is a good choice when the backend cannot push.
// Read errors are retried at the next interval and not reported: the last
// lease sent stands until a read succeeds.
func Observe(ctx context.Context, b Backend, key string, every time.Duration) (<-chan Lease, error) {
	if b == nil {
		return nil, invalidf("Observe: nil backend")
	}
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	if every < MinInterval {
		return nil, invalidf("Observe: every must be at least %v, got %v", MinInterval, every)
	}
	out := make(chan Lease, 1)
	go observe(ctx, b, key, every, out)
	return out, nil
}

func observe(ctx context.Context, b Backend, key string, every time.Duration, out chan Lease) {
	defer close(out)
	var events <-chan Event
	if w, ok := b.(Watcher); ok {
		var stop func()
		events, stop = w.Watch(key)
		defer stop()
	}
	gap := max(every/10, MinInterval) // the shortest wait between reads
	var last Lease
	sent := false
	for ctx.Err() == nil {
		read := time.Now()
		l, err := b.Lease(ctx, key)
		next := read.Add(every)
		if err == nil {
			if !sent || changed(last, l) {
				last, sent = l, true
				replace(out, l)
			}
			if l.Held() {
				// Look again right after the expiry the backend reported.
				next = minTime(next, read.Add(l.Remaining()+MinInterval))
			}
		}
		if !wakeAt(ctx, events, next, read.Add(gap)) {
			return
		}
	}
}

// wakeAt waits until next, or until an event arrives (but not before
// earliest), and reports whether ctx is still live.
func wakeAt(ctx context.Context, events <-chan Event, next, earliest time.Time) bool {
	timer := time.NewTimer(time.Until(next))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
			return true
		case <-events:
			drain(events)
			if !time.Now().Before(earliest) {
				return true
			}
			next = minTime(next, earliest)
			timer.Reset(time.Until(next))
		}
	}
}

// changed reports whether b names another term, or another value, than a.
func changed(a, b Lease) bool {
	return a.Holder != b.Holder || a.Token != b.Token || a.Value != b.Value
}

// replace sends l, dropping an unread older lease.
func replace(out chan Lease, l Lease) {
	for {
		select {
		case out <- l:
			return
		default:
		}
		select {
		case <-out:
		default:
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// announce sends the backend's announcement of term token, bounded by
// RenewEvery; a failure is logged at debug level only.
func (e *Elector) announce(ctx context.Context, a Watcher, token int64) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.spec.RenewEvery)
	defer cancel()
	if err := a.Announce(actx, e.spec.Key); err != nil {
		e.log.Debug("announcing the term failed; observers see it at their next read", "token", token, "err", err)
	}
}
