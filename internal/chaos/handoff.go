package chaos

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/pgleader/pgleader/pgleader"
)

// The recorder keeps the PostgreSQL backend's candidates, so the checker
// runs with hand-off on: stops, resignations and finished terms hand the
// lease to a waiting replica, and a successor's term may be confirmed by
// its LISTEN connection (recorded as its winning acquire).

// acquired records an acquire (or a confirmation) sent at sent.
func (r *recorder) acquired(sent time.Time, l pgleader.Lease, won bool, err error) {
	e := r.event(KindAcquire, sent, err)
	if err == nil {
		e.Token, e.DB, e.Expires = l.Token, l.Now, l.ExpiresAt
		if won {
			e.Term = l.AcquiredAt // a confirmed term began at its hand-off
			r.mu.Lock()
			r.won = e
			r.mu.Unlock()
		} else {
			e.Result, e.Detail = Refused, "held by "+l.Holder
		}
	}
	r.sink.Record(e)
}

// renewed records a renewal of token sent at sent.
func (r *recorder) renewed(sent time.Time, token int64, ttl time.Duration, expires time.Time, err error) {
	e := r.event(KindRenew, sent, err)
	e.Token, e.Term = token, r.term(token)
	switch {
	case err == nil:
		e.Expires, e.DB = expires, expires.Add(-ttl)
	case errors.Is(err, pgleader.ErrLost):
		e.Result = Lost
	}
	r.sink.Record(e)
}

// Campaign implements pgleader.Backend.
func (r *recorder) Campaign(ctx context.Context, key string, c pgleader.Candidate, ttl time.Duration, floor int64) (pgleader.Lease, bool, error) {
	if err := r.gate.wait(); err != nil {
		return pgleader.Lease{}, false, err
	}
	sent := time.Now()
	l, won, err := r.pg.Campaign(ctx, key, c, ttl, floor)
	r.acquired(sent, l, won, err)
	return l, won, err
}

// RenewTerm implements pgleader.Backend.
func (r *recorder) RenewTerm(ctx context.Context, key, owner string, token int64, ttl, minTerm time.Duration) (time.Time, bool, error) {
	if err := r.gate.wait(); err != nil {
		return time.Time{}, false, err
	}
	sent := time.Now()
	expires, resign, err := r.pg.RenewTerm(ctx, key, owner, token, ttl, minTerm)
	r.renewed(sent, token, ttl, expires, err)
	return expires, resign, err
}

// HandOff implements pgleader.Backend; it is recorded as a release.
func (r *recorder) HandOff(ctx context.Context, key, owner string, token int64, to string) (bool, string, error) {
	if err := r.gate.wait(); err != nil {
		return false, "", err
	}
	sent := time.Now()
	released, successor, err := r.pg.HandOff(ctx, key, owner, token, to)
	e := r.event(KindRelease, sent, err)
	e.Token, e.Term = token, r.term(token)
	if err == nil && !released {
		e.Result = Refused
	}
	if successor != "" {
		e.Detail = "handed off to " + successor
	}
	r.sink.Record(e)
	return released, successor, err
}

// Resign implements pgleader.Steerer.
func (r *recorder) Resign(ctx context.Context, key string, token int64) (pgleader.Lease, bool, error) {
	return r.pg.Resign(ctx, key, token)
}

// Transfer implements pgleader.Steerer.
func (r *recorder) Transfer(ctx context.Context, key, to string) (pgleader.Lease, bool, error) {
	return r.pg.Transfer(ctx, key, to)
}

// Candidates implements pgleader.Steerer.
func (r *recorder) Candidates(ctx context.Context, key string) ([]pgleader.Candidate, error) {
	return r.pg.Candidates(ctx, key)
}

// Withdraw implements pgleader.Steerer.
func (r *recorder) Withdraw(ctx context.Context, key, owner string) error {
	if err := r.gate.wait(); err != nil {
		return err
	}
	return r.pg.Withdraw(ctx, key, owner)
}

// WatchCandidate implements pgleader.Watcher. A term its LISTEN
// connection confirmed is recorded as the winning acquire it is; the event
// is held while the replica is paused, as the process would hold it.
func (r *recorder) WatchCandidate(key string, c pgleader.CandidateWatch) (<-chan pgleader.Event, func()) {
	in, stop := r.pg.WatchCandidate(key, c)
	if in == nil {
		return nil, stop
	}
	out := make(chan pgleader.Event, 16)
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case ev := <-in:
				if ev.Checked && ev.Acquired {
					if r.gate.wait() != nil {
						return
					}
					r.acquired(ev.Sent, ev.Lease, true, nil)
				}
				select {
				case out <- ev:
				case <-done:
					return
				}
			case <-done:
				return
			}
		}
	}()
	return out, sync.OnceFunc(func() {
		stop()
		close(done)
		<-finished
	})
}
