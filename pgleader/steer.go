package pgleader

import (
	"context"
	"fmt"
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
