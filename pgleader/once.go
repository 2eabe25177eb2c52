package pgleader

import (
	"context"
	"fmt"
	"time"
)

// RunOnce campaigns once and, if it wins, runs one term: Claim, then Lead,
// renewing the lease while Lead runs, then releasing it. It returns
// Lead's error; an error matching [ErrHeld] at once, without waiting, if
// another term holds the lease; one matching [ErrTermEnded] (with the
// reason) if the term ended before Lead returned — its renewals failed, the
// lease was lost, ctx was cancelled, it resigned — or Claim refused it; and
// the backend's error if the campaign could not be made. It never retries:
// it is the building block of [Do]. RunOnce and Run may not run at the same
// time (ErrRunning).
func (e *Elector) RunOnce(ctx context.Context) error {
	if !e.running.TryLock() {
		return ErrRunning
	}
	defer e.running.Unlock()
	if e.ab.Hold != nil {
		defer e.ab.Hold()()
	}
	defer e.bindSession()()
	defer e.setState(StateStopped, time.Time{})
	e.setState(StateCampaigning, time.Time{})
	lease, sent, won, err := e.campaign(ctx, false, false)
	switch {
	case err != nil:
		return err
	case !won:
		return fmt.Errorf("%w: by %q with token %d, for %v more", ErrHeld, lease.Holder, lease.Token, lease.Remaining())
	}
	end := e.lead(ctx, lease.Token, sent, e.spec.TTL, true, func() {})
	reason, bodyErr := end.reason, end.err
	switch reason {
	case ReasonFinished:
		return bodyErr
	case ReasonRefused:
		if bodyErr != nil && bodyErr != errRefused {
			return fmt.Errorf("%w: %v: %w", ErrTermEnded, reason, bodyErr)
		}
		return fmt.Errorf("%w: %v (Claim refused token %d)", ErrTermEnded, reason, lease.Token)
	}
	if bodyErr != nil {
		return fmt.Errorf("%w: %v: %w", ErrTermEnded, reason, bodyErr)
	}
	return fmt.Errorf("%w: %v", ErrTermEnded, reason)
}

// Do runs fn once under the key's lease, for the one-shot job that must not
// run on two replicas at once (a nightly report, a cron task): it acquires
// the lease or returns an error matching [ErrHeld] at once if another
// replica holds it; renews it while fn runs, passing fn the term (with its
// fencing token, and Ending and Live to watch); releases it when fn
// returns; and returns fn's error. If the term ends before fn returns, fn's
// context is cancelled as for any term and Do's error matches
// [ErrTermEnded]. The owner is the default one (hostname:pid:random);
// for an owner, Claim or FenceFloor of your own, use New and
// [Elector.RunOnce].
func Do(ctx context.Context, b Backend, spec Spec, fn func(ctx context.Context, t *Term) error) error {
	el, err := New(b, spec, Options{Lead: fn})
	if err != nil {
		return err
	}
	return el.RunOnce(ctx)
}
