// Package lifecycle is the life of one term, from the answer that won it to
// its release, as a pure state machine: no goroutines, no timers and no
// clock reads. Its driver (pgleader's Elector for one key, its Set for
// many) feeds it what happened and when, carries out the actions it
// returns, and wakes it at the instant Next names. Every decision about a
// term's timeline is made here, once: when to renew, when to retry a
// failed renewal, when the term yields and its body is cancelled, what a
// stop, a resignation, a lost lease or a missing schema do, how long a
// release is held after a body that may have left a statement in flight,
// and whether the lease may be handed off.
//
// A term's timeline counts from s, the instant the last successful acquire
// or renew was sent (see pgleader.Spec):
//
//	safe end  S = s + bound - Margin   (bound is TTL, or less for a term handed over on a read)
//	cancel    C = S - ReleaseTimeout
//	yield     Y = C - YieldGrace
package lifecycle

import "time"

// Reason is why a term ended; its values are pgleader.EndReason's.
type Reason int

// The reasons, in pgleader.EndReason's order.
const (
	None Reason = iota
	Stopped
	Expiring
	Lost
	Finished
	Refused
	Resigned
)

// Timing is a Spec's durations.
type Timing struct {
	TTL, RenewEvery, CampaignEvery, Margin, YieldGrace, ReleaseTimeout time.Duration
	// CancelOnStop cancels the body at once when the term is stopped or
	// resigned, rather than YieldGrace later.
	CancelOnStop bool
	// NoYield breaks the timeline on purpose (internal/hook.NoYield, for
	// the fault checker's self-test): the term never yields and its body
	// is not cancelled at C. Stops, resignations and lost leases still
	// end it.
	NoYield bool
}

// Timeline returns the safe end, cancel and yield instants of a term whose
// proof was sent at sent with bound left.
func (tm Timing) Timeline(sent time.Time, bound time.Duration) (safeEnd, cancelAt, yieldAt time.Time) {
	safeEnd = sent.Add(bound - tm.Margin)
	cancelAt = safeEnd.Add(-tm.ReleaseTimeout)
	return safeEnd, cancelAt, cancelAt.Add(-tm.YieldGrace)
}

// RenewRetry is how soon a renewal that failed is tried again.
func (tm Timing) RenewRetry() time.Duration { return min(tm.CampaignEvery, tm.RenewEvery) }

// Note names a log line the driver writes; the machine decides when.
type Note int

// The notes.
const (
	NoNote Note = iota
	BornLate
	Stopping
	Resigning
	RenewFailed
	LeaseLost
	SchemaGone
	ExpiredAfterFailures
	ExpiredUnanswered
	ReleaseHeld
	ReleaseHeldAfterError
)

// Actions is what the driver does after feeding the machine an event.
type Actions struct {
	// End: the term began to end now, with this reason: close Ending.
	End Reason
	// Cancel: cancel the body's context now.
	Cancel bool
	// Extended: a renewal moved the timeline (SafeEnd and YieldAt).
	Extended bool
	// StopRenewing: a renewal in flight is of no use any more.
	StopRenewing bool
	// Release: release the lease now; HandOff: it may be handed to a
	// waiting candidate instead. Forget: the term is over and the lease
	// is not this term's to release. After either the machine is done.
	Release, HandOff, Forget bool
	Note                     Note
}

// Machine is one term. A Set keeps one per held key, so its fields are
// ordered to pack and its Timing is shared.
type Machine struct {
	tm                         *Timing // read only, shared by the driver's terms
	safeEnd, cancelAt, yieldAt time.Time
	renewAt                    time.Time // zero while renewing or when no renewal is due
	softAt                     time.Time // when a stop or resignation asked the term to end
	cancelledAt                time.Time
	releaseAt                  time.Time // the release is held until then
	reason                     Reason
	renewing, renewFailed      bool
	lost                       bool // the lease is not this term's any more
	running                    bool // the body has not returned
	over                       bool
}

// Start begins the term won by a statement sent at sent, with bound left
// then (TTL, or what a hand-off gave a term believed on a read), at now.
// A term answered at or after its yield instant never runs its body: it is
// released at once (Actions.Release), ending as expiring. The machine keeps
// tm, which must not change while it runs.
func Start(tm *Timing, sent time.Time, bound time.Duration, now time.Time) (*Machine, Actions) {
	m := &Machine{tm: tm, running: true}
	m.safeEnd, m.cancelAt, m.yieldAt = tm.Timeline(sent, bound)
	// The first renewal comes as much sooner as the bound is short of TTL.
	m.renewAt = sent.Add(tm.RenewEvery - (tm.TTL - bound))
	if !now.Before(m.yieldAt) {
		m.running = false
		m.reason = Expiring
		m.over = true
		return m, Actions{End: Expiring, Release: true, Note: BornLate}
	}
	return m, Actions{}
}

// SafeEnd is the instant until which the lease is certainly held.
func (m *Machine) SafeEnd() time.Time { return m.safeEnd }

// YieldAt is the yield instant; the zero time with Timing.NoYield.
func (m *Machine) YieldAt() time.Time {
	if m.tm.NoYield {
		return time.Time{}
	}
	return m.yieldAt
}

// Over reports whether the term was released or forgotten.
func (m *Machine) Over() bool { return m.over }

// RenewAt is when the next renewal is due; the zero time if none is (one
// is in flight, the term is ending, or its safe end has passed).
func (m *Machine) RenewAt() time.Time {
	if m.renewing || m.reason != None || !m.renewAt.Before(m.safeEnd) {
		return time.Time{}
	}
	return m.renewAt
}

// StartRenewal reports whether a renewal may be sent now and, if so,
// records it in flight; the renewal must be answered by the safe end it
// returns. A term that is ending, or past its safe end, renews no more.
func (m *Machine) StartRenewal(now time.Time) (deadline time.Time, ok bool) {
	if m.renewing || m.reason != None || !now.Before(m.safeEnd) {
		return time.Time{}, false
	}
	m.renewing, m.renewAt = true, time.Time{}
	return m.safeEnd, true
}

// Renewed: the renewal sent at sent succeeded; resign says the database
// asked the term to step down (pgleader.resign, a transfer, a candidate of
// higher priority).
func (m *Machine) Renewed(sent time.Time, resign bool, now time.Time) Actions {
	m.renewing, m.renewFailed = false, false
	if m.reason != None {
		return m.settle(now, Actions{})
	}
	m.safeEnd, m.cancelAt, m.yieldAt = m.tm.Timeline(sent, m.tm.TTL)
	m.renewAt = sent.Add(m.tm.RenewEvery)
	act := Actions{Extended: true}
	if resign {
		act = m.Yield(Resigned, now)
		act.Extended = true
	}
	return act
}

// RenewFailed: the renewal failed for a reason that may pass (a timeout, a
// dropped connection); it is tried again RenewRetry later, until the yield
// instant ends the term.
func (m *Machine) RenewFailed(now time.Time) Actions {
	m.renewing = false
	if m.reason != None {
		return m.settle(now, Actions{})
	}
	m.renewFailed = true
	m.renewAt = now.Add(m.tm.RenewRetry())
	return Actions{Note: RenewFailed}
}

// Lost: a renewal found the lease no longer this term's, or, with
// schemaGone, found the pgleader schema gone (dropped or migrated down
// under the term: its row and token counter may be gone with it, so the
// term ends at once rather than retry until its yield instant). The body
// is cancelled at once and nothing is released.
func (m *Machine) Lost(now time.Time, schemaGone bool) Actions {
	m.renewing = false
	if m.over {
		return Actions{}
	}
	var act Actions
	if m.reason == None {
		m.reason, act.End, act.Note = Lost, Lost, LeaseLost
		if schemaGone {
			act.Note = SchemaGone
		}
	}
	m.lost = true // ending already or not, there is nothing to release
	m.cancel(now, &act)
	return m.settle(now, act)
}

// Yield ends the term as stopped or resigned: Ending at once, the body
// cancelled YieldGrace later (or at C, if that is sooner; at once with
// CancelOnStop), the lease released once it returns.
func (m *Machine) Yield(reason Reason, now time.Time) Actions {
	if m.reason != None {
		return Actions{}
	}
	m.reason, m.softAt = reason, now
	act := Actions{End: reason, Note: Stopping}
	if reason == Resigned {
		act.Note = Resigning
	}
	if m.tm.CancelOnStop {
		m.cancel(now, &act)
	}
	return m.settle(now, act)
}

// BodyDone: the body (Claim, then Lead) returned at now. refused: Claim
// refused the token or failed. failed: it returned another error.
// cancelledFirst: its context had been cancelled before it returned. A
// body that returned only once cancelled, or with an error, may have left
// a statement that has not run yet (pgx returns at once on cancellation;
// a statement whose connection broke still commits on the server): its
// release is held until ReleaseTimeout after the cancellation, or after it
// returned, so that statement commits while the lease is still held, as
// it would in a term that expires.
func (m *Machine) BodyDone(refused, failed, cancelledFirst bool, now time.Time) Actions {
	m.running = false
	act := Actions{Cancel: true, StopRenewing: m.renewing}
	if m.reason == None {
		m.reason, act.End = Finished, Finished
		if refused {
			m.reason, act.End = Refused, Refused
		}
	}
	switch {
	case m.lost: // nothing to release, so nothing to hold
	case cancelledFirst && !m.cancelledAt.IsZero():
		m.releaseAt, act.Note = m.cancelledAt.Add(m.tm.ReleaseTimeout), ReleaseHeld
	case failed && !refused:
		m.releaseAt, act.Note = now.Add(m.tm.ReleaseTimeout), ReleaseHeldAfterError
	}
	if !now.Before(m.releaseAt) {
		act.Note = NoNote
	}
	return m.settle(now, act)
}

// Tick: the instant Next named has come (or any later one).
func (m *Machine) Tick(now time.Time) Actions {
	var act Actions
	if m.reason == None && !m.tm.NoYield && !now.Before(m.yieldAt) {
		m.reason, act.End, act.Note = Expiring, Expiring, ExpiredUnanswered
		if m.renewFailed {
			act.Note = ExpiredAfterFailures
		}
	}
	if at := m.cancelBy(); m.running && !at.IsZero() && !now.Before(at) {
		m.cancel(now, &act)
	}
	return m.settle(now, act)
}

// Next is the next instant at which the machine needs a Tick; the zero
// time if none. A due renewal is not among them: see RenewAt.
func (m *Machine) Next() time.Time {
	var next time.Time
	add := func(at time.Time) {
		if !at.IsZero() && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	if m.reason == None && !m.tm.NoYield {
		add(m.yieldAt)
	}
	if m.running {
		add(m.cancelBy())
	} else if !m.over && !m.renewing {
		add(m.releaseAt)
	}
	return next
}

// cancelBy is when the body's context is to be cancelled, while it is
// not: at C, and YieldGrace after a stop or resignation (at once with
// CancelOnStop) if that is sooner.
func (m *Machine) cancelBy() time.Time {
	if !m.cancelledAt.IsZero() {
		return time.Time{}
	}
	var at time.Time
	if !m.tm.NoYield {
		at = m.cancelAt
	}
	if !m.softAt.IsZero() {
		soft := m.softAt.Add(m.tm.YieldGrace)
		if m.tm.CancelOnStop {
			soft = m.softAt
		}
		if at.IsZero() || soft.Before(at) {
			at = soft
		}
	}
	return at
}

func (m *Machine) cancel(now time.Time, act *Actions) {
	if m.running && m.cancelledAt.IsZero() {
		m.cancelledAt = now
		act.Cancel = true
	}
}

// settle adds the term's end to act once the body has returned, no
// renewal is in flight and the release is no longer held: release (or hand
// off) what a stopped, resigned or finished term held, release what an
// expiring or refused one held (its successor would need the fence floor
// read first, or has lost its footing), and forget a lost one.
func (m *Machine) settle(now time.Time, act Actions) Actions {
	if m.over || m.running || m.renewing {
		return act
	}
	if m.lost {
		m.over, act.Forget = true, true
		return act
	}
	if now.Before(m.releaseAt) {
		return act
	}
	m.over, act.Release = true, true
	act.HandOff = m.reason == Stopped || m.reason == Resigned || m.reason == Finished
	return act
}
