package pgleader

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// candidacy is what Run remembers from one campaign to the next; of it,
// only the last token led and the last floor read outlast a Run.
type candidacy struct {
	failures   int       // campaigns failed in a row
	answered   bool      // a campaign of this Run was answered (see Permanent)
	hinted     bool      // the last wait ended on a release event
	waited     Lease     // the lease the last wait was for
	heedAfter  time.Time // release events before this are not heeded at once
	took       *Event    // a term handed to this replica, confirmed by the watcher
	registered bool      // the last campaign registered this replica as a candidate
	handedOff  bool      // the last term handed the lease off
	// holderBound: the last campaign found the lease held by a term bound
	// to a live session (Options.SessionBound), whose end the next wait
	// also waits for.
	holderBound bool
	// lastToken is the token of the last term led: the elector never
	// leads a token at or below it.
	lastToken int64
	// reuseFloor: the last campaign found another live term holding the
	// lease; floor is the last fence floor read, and floorRead whether
	// there is one (see campaign).
	reuseFloor bool
	floor      int64
	floorRead  bool
}

// waitForExpiry waits while lease is held by another term: until the expiry
// the backend reported (at most TTL away), a resync, or a release event (or
// a hand-off hint naming this replica), but not sooner than heedAfter for a
// release event. While the watcher is not listening it looks at least every
// CampaignEvery, less up to 10% jitter. A checked hand-off event (see
// [Event]) that confirmed a term ends the wait with that event; one that did
// not is a fresh read of the lease, whose expiry ends the wait if it is
// sooner (a hint never makes a candidate wait longer, nor lets its
// registration lapse). It
// reports whether a release event ended the wait, the confirmed hand-off if
// one did, and whether ctx is still live.
func (e *Elector) waitForExpiry(ctx context.Context, lease Lease, events <-chan Event, heedAfter time.Time, freed <-chan struct{}) (hinted bool, took *Event, live bool) {
	expiry := time.Now().Add(min(lease.Remaining(), e.spec.TTL))
	e.setState(StateWaiting, expiry)
	var heard bool // a release event is waiting for heedAfter
	next := func() time.Duration {
		d := time.Until(expiry)
		if heard {
			d = min(d, time.Until(heedAfter))
		}
		if e.ab.Events == nil || !e.ab.Events.Listening() {
			d = min(d, e.spec.CampaignEvery-jitter(e.spec.CampaignEvery/10))
		}
		return d
	}
	timer := time.NewTimer(next())
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, nil, false
		case <-freed:
			// The holder's session lock is this replica's: the bound
			// term's session ended, or it was released. The campaign
			// decides which.
			return false, nil, true
		case <-timer.C:
			return heard && !time.Now().Before(heedAfter), nil, true
		case ev := <-events:
			// Acquire and renew events change nothing: the expiry read
			// from the backend stands until a read says otherwise.
			switch {
			case ev.Kind == EventResync: // from the watcher itself, not the channel
				return false, nil, true
			case ev.Kind == EventReleased, ev.Kind == EventHandedOff && !ev.Checked && ev.Owner == e.opts.Owner:
				if !time.Now().Before(heedAfter) {
					return true, nil, true
				}
				heard = true
			case ev.Kind == EventHandedOff && ev.Checked && ev.Acquired:
				return false, &ev, true
			case ev.Kind == EventHandedOff && ev.Checked && ev.Err == nil:
				// A fresh read, which the watcher takes no more often
				// than HeedEvery however many hints are forged. It may
				// bring the next campaign forward, never put it off: only
				// a campaign registers this replica as a candidate again,
				// and its registration outlasts the expiry that campaign
				// read by Margin only.
				if !ev.Lease.Held() {
					return true, nil, true
				}
				if at := ev.Sent.Add(min(ev.Lease.Remaining(), e.spec.TTL)); at.Before(expiry) {
					expiry = at
					e.setState(StateWaiting, expiry)
				}
			}
			timer.Reset(next())
		}
	}
}

// drain empties events, and returns a term confirmed for this replica (see
// [Event.Checked]) if one was among them.
func drain(events <-chan Event) (Event, bool) {
	var took Event
	var ok bool
	for {
		select {
		case ev := <-events:
			if ev.keep() && !ok {
				took, ok = ev, true
			}
		default:
			return took, ok
		}
	}
}

// campaign reads the fence floor and tries to acquire above it. It returns
// the lease as the backend saw it, and when the acquire was sent. The floor
// read is bounded by TTL, so a statement lost in a network partition does
// not stall the candidate until the connection is reset; the acquire is
// bounded by the yield instant of the term it would start, since a term
// answered later must not run (lead releases it at once).
//
// As a candidate it registers this replica until TTL + Margin from now,
// longer than the at most TTL until its next campaign.
//
// With reuseFloor it sends the floor it read last instead of reading it: the
// campaign follows one that found another term holding the lease, and is
// most likely to find it held again (renewed), when a floor read would be a
// wasted statement. That is safe: the floor only spares terms that Claim
// would refuse after lost lease data, and a refused term makes the next
// campaign read it.
func (e *Elector) campaign(ctx context.Context, asCandidate, reuseFloor bool) (Lease, time.Time, bool, error) {
	var floor int64
	switch {
	case reuseFloor && e.c.floorRead:
		floor = e.c.floor
	case e.opts.FenceFloor != nil && e.ab.Advance:
		var err error
		fctx, cancel := context.WithTimeout(ctx, e.spec.TTL)
		floor, err = e.opts.FenceFloor(fctx)
		cancel()
		if err != nil {
			return Lease{}, time.Time{}, false, e.fail(fmt.Errorf("pgleader: FenceFloor: %w", err))
		}
		if err := CheckFloor(floor); err != nil {
			return Lease{}, time.Time{}, false, e.fail(fmt.Errorf("pgleader: FenceFloor: %w", err))
		}
		e.c.floor, e.c.floorRead = floor, true
	}
	sent := time.Now()
	// The statement outlives a cancellation of ctx by up to ReleaseTimeout:
	// a campaign cut off before its answer may still have won on the
	// server, and only its answer says which token to release.
	actx, cancel := context.WithDeadline(context.WithoutCancel(ctx), e.spec.yieldAt(sent))
	defer cancel()
	stopWatch := context.AfterFunc(ctx, func() { time.AfterFunc(e.spec.ReleaseTimeout, cancel) })
	defer stopWatch()
	// Campaign even when not registering, so that a term won records this
	// replica's priority.
	c := Candidate{Owner: e.opts.Owner, Priority: e.opts.Priority, Value: e.opts.Value}
	if asCandidate {
		c.TTL = e.spec.TTL + e.spec.Margin
	}
	var lease Lease
	var won bool
	var err error
	if e.bs != nil {
		var lapsed bool
		lease, won, e.c.holderBound, lapsed, err = e.bs.campaign(actx, c, e.spec.TTL, floor)
		if lapsed {
			e.log.Info("the term holding the lease was bound to a session that has ended; took it over before its expiry",
				"won", won)
		}
		if errors.Is(err, errSessionPooler) {
			e.unbindSession(err)
			lease, won, err = e.backend.Campaign(actx, e.spec.Key, c, e.spec.TTL, floor)
		}
	} else {
		lease, won, err = e.backend.Campaign(actx, e.spec.Key, c, e.spec.TTL, floor)
	}
	if cerr := ctx.Err(); cerr != nil {
		// Stopping: no term starts now, and none won is left held.
		switch {
		case err == nil && won:
			rctx, rcancel := context.WithTimeout(context.Background(), e.spec.ReleaseTimeout)
			if _, rerr := e.backend.Release(rctx, e.spec.Key, e.opts.Owner, lease.Token); rerr != nil {
				e.log.Warn("could not release a term won by a campaign while stopping; it lapses after its TTL",
					"key", e.spec.Key, "owner", e.opts.Owner, "token", lease.Token, "err", rerr)
			}
			rcancel()
		case err != nil:
			e.releaseUnanswered()
		}
		if err == nil {
			err = fmt.Errorf("pgleader: campaign: %w", cerr)
		}
		return Lease{}, time.Time{}, false, e.fail(err)
	}
	if err != nil {
		return Lease{}, time.Time{}, false, e.fail(err)
	}
	return lease, sent, won, nil
}

// releaseUnanswered releases the lease if this replica holds it after a
// campaign that the caller's context cancelled went unanswered for
// ReleaseTimeout: the statement may have committed on the server, and
// nobody would release that term before its TTL ran out (the replica is
// stopping). The lease is this replica's if it holds it under its owner
// name. A statement that commits after this read is not caught.
func (e *Elector) releaseUnanswered() {
	ctx, cancel := context.WithTimeout(context.Background(), e.spec.ReleaseTimeout)
	defer cancel()
	l, err := e.backend.Lease(ctx, e.spec.Key)
	if err != nil {
		e.log.Warn("could not read the lease after a campaign cancelled before its answer; a term it won lapses after its TTL",
			"key", e.spec.Key, "owner", e.opts.Owner, "err", err)
		return
	}
	if !l.Held() || l.Holder != e.opts.Owner {
		return
	}
	switch released, err := e.backend.Release(ctx, e.spec.Key, e.opts.Owner, l.Token); {
	case err != nil:
		e.log.Warn("could not release a term won by a campaign cancelled before its answer; it lapses after its TTL",
			"key", e.spec.Key, "owner", e.opts.Owner, "token", l.Token, "err", err)
	case released:
		e.log.Info("released a term won by a campaign cancelled before its answer", "key", e.spec.Key, "owner", e.opts.Owner, "token", l.Token)
	}
}

// sessionWaitSlack is how much sooner than the wait for the lease's expiry
// the wait on the holder's session lock runs out by itself: interrupting
// it from the client costs the connection.
const sessionWaitSlack = 20 * time.Millisecond

// waitSession waits on the elector's connection, until shortly before the
// lease's expiry, for the session lock of the bound term holding it, and
// closes freed if it takes it. stop ends the wait (at once if it is still
// running sessionWaitSlack after stop is called) and waits for it.
func (e *Elector) waitSession(ctx context.Context, lease Lease) (freed <-chan struct{}, stop func()) {
	ch := make(chan struct{})
	done := make(chan struct{})
	wctx, cancel := context.WithCancel(ctx)
	d := max(min(lease.Remaining(), e.spec.TTL)-sessionWaitSlack, time.Millisecond)
	go func() {
		defer close(done)
		took, err := e.bs.waitHolder(wctx, d)
		switch {
		case took:
			close(ch)
		case err != nil && wctx.Err() == nil:
			e.log.Debug("waiting on the holder's session failed; waiting for the lease's expiry", "err", err)
		}
	}()
	return ch, func() {
		timer := time.NewTimer(sessionWaitSlack)
		select {
		case <-done:
		case <-timer.C:
			cancel()
			<-done
		}
		timer.Stop()
		cancel()
	}
}
