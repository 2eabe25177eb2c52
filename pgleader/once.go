package pgleader

import (
	"context"
	"fmt"
	"time"
)

// StepDown ends the live term gracefully, as [Elector.Run]'s stop would
// (the body is told at once, cancelled YieldGrace later, and the lease is
// released when it returns, or ReleaseTimeout after the cancellation if it
// returned only once cancelled), without stopping Run: the elector campaigns
// again afterwards, after CampaignEvery, so a waiting replica (woken by the
// release) takes over first. The term ends with [ReasonResigned]. StepDown
// returns once the term is over and its lease released, or when ctx is
// done; ErrNotLeader if no term is live. It is safe for concurrent use.
func (e *Elector) StepDown(ctx context.Context) error {
	e.mu.Lock()
	t := e.term
	e.mu.Unlock()
	if t == nil || !t.Live() {
		return ErrNotLeader
	}
	return t.resignAndWait(ctx)
}

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

// Transfer ends the live term as [Elector.StepDown] does and hands the lease
// to the candidate to: pgleader.transfer marks the lease for it (an error
// matching [ErrNoCandidate] if to is not a live candidate of the key; then
// nothing changes), and the hand-off picks it if it is still live then. It
// returns once the term is over, or when ctx is done; ErrNotLeader if no
// term is live. The backend must keep candidates and steer, with hand-off
// on. To
// transfer the term of another replica, call the backend's Transfer (or
// pgleader.transfer in SQL, or the CLI's transfer): its holder learns at
// its next renewal.
func (e *Elector) Transfer(ctx context.Context, to string) error {
	if !e.handOff || e.ab.Steer == nil {
		return invalidf("Transfer: %T cannot hand off (its Abilities lack Candidates or Steer, or Options.NoHandOff is set)", e.backend)
	}
	if err := CheckOwner(to); err != nil {
		return err
	}
	e.mu.Lock()
	t := e.term
	e.mu.Unlock()
	if t == nil || !t.Live() {
		return ErrNotLeader
	}
	l, asked, err := e.ab.Steer.Transfer(ctx, e.spec.Key, to)
	if err != nil {
		return err
	}
	if !asked || l.Token != t.token {
		return fmt.Errorf("%w: the lease is held by term %d of %q", ErrNotLeader, l.Token, l.Holder)
	}
	return t.resignAndWait(ctx)
}

// resignAndWait asks t to end as resigned and waits until it is over (its
// lease released or handed off), or until ctx is done.
func (t *Term) resignAndWait(ctx context.Context) error {
	t.requestResign()
	select {
	case <-t.over:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
