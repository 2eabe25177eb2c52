package pgleadertest

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/pgleader/pgleader/pgleader"
)

// HandoffBackend is a view of a [Backend] that keeps candidates, with the
// semantics of the PostgreSQL backend's
// (pgleader.campaign, hand_off, renew_term with a minimum term, transfer,
// candidates, withdraw): candidates register as they campaign, a leader
// that stops hands the lease to the best live one with the next token, a
// candidate of higher priority makes a leader step down after its minimum
// term (Options.Priority, Options.MinTerm), and a Transfer names the
// successor. An Elector on it hands off as one on PostgreSQL does; the
// successor hears a hand-off event (not checked: its WatchCandidate is
// Watch) and confirms its term by campaigning.
//
// It shares its Backend's leases, switches and History. Get one with
// [Backend.WithHandOff]: a Backend alone keeps no candidates, so that an
// Elector on it, or on a type that embeds it to intercept its methods,
// keeps releasing rather than handing off.
type HandoffBackend struct {
	*Backend
}

var (
	_ pgleader.Backend    = (*HandoffBackend)(nil)
	_ pgleader.SetBackend = (*HandoffBackend)(nil)
)

// WithHandOff returns a view of b that keeps candidates.
func (b *Backend) WithHandOff() *HandoffBackend {
	return &HandoffBackend{b}
}

// Abilities implements pgleader.Backend: the Backend's, and candidates.
func (h *HandoffBackend) Abilities() pgleader.Abilities {
	ab := h.Backend.Abilities()
	ab.Candidates = true
	return ab
}

// The hand-off operations recorded in the History, once per call. What they
// decide about terms is recorded as acquire, take, renew and release events
// too: a campaign as an acquire (won or refused) or, when it confirmed a
// term handed to its owner, a take; a hand-off as the release of the term
// it ended and, when it found a successor, the acquire of the successor's
// term (token + 1, expiring at the candidate's expiry).
const (
	// OpCampaign is a Campaign; OK when it won or confirmed a term.
	OpCampaign Op = "campaign"
	// OpTake is the confirmation of a term handed to Owner, by a Campaign
	// or an acquire; Expires is the term's new expiry.
	OpTake Op = "take"
	// OpHandOff is a HandOff by the term (Owner, Token); OK when the term
	// still held the lease.
	OpHandOff Op = "handoff"
	// OpTransfer is a Transfer to Owner; Token is the holding term's, and
	// OK whether it was asked.
	OpTransfer Op = "transfer"
	// OpWithdraw is a Withdraw; OK when Owner had a registration.
	OpWithdraw Op = "withdraw"
)

// candidate is a registration, as a row of pgleader.candidate.
type candidate struct {
	priority            int32
	value               string
	registered, expires time.Time
}

func (c *candidate) live(now time.Time) bool { return now.Before(c.expires) }

// liveCandidates returns key's live candidates other than except, the best
// first: to first if it is one, then by priority (highest first), the
// longest registered, and owner; b.mu is held.
func (b *Backend) liveCandidates(key, except, to string, now time.Time) []pgleader.Candidate {
	var out []pgleader.Candidate
	for owner, c := range b.candidates[key] {
		if owner != except && c.live(now) {
			out = append(out, pgleader.Candidate{Owner: owner, Priority: c.priority, Value: c.value,
				RegisteredAt: c.registered, ExpiresAt: c.expires})
		}
	}
	slices.SortFunc(out, func(x, y pgleader.Candidate) int {
		if to != "" && (x.Owner == to) != (y.Owner == to) {
			if x.Owner == to {
				return -1
			}
			return 1
		}
		if x.Priority != y.Priority {
			if x.Priority > y.Priority {
				return -1
			}
			return 1
		}
		if c := x.RegisteredAt.Compare(y.RegisteredAt); c != 0 {
			return c
		}
		return strings.Compare(x.Owner, y.Owner)
	})
	return out
}

// dropCandidates removes the registrations of owners and the expired ones
// of key; b.mu is held.
func (b *Backend) dropCandidates(key string, now time.Time, owners ...string) {
	cs := b.candidates[key]
	for owner, c := range cs {
		if !c.live(now) || slices.Contains(owners, owner) {
			delete(cs, owner)
		}
	}
	if len(cs) == 0 {
		delete(b.candidates, key)
	}
}

// register records owner as a candidate of key until now + c.TTL, keeping
// its registration time if it was still registered; b.mu is held.
func (b *Backend) register(key string, c pgleader.Candidate, now time.Time) {
	if b.candidates[key] == nil {
		b.candidates[key] = make(map[string]*candidate)
	}
	registered := now
	if old := b.candidates[key][c.Owner]; old != nil && old.live(now) {
		registered = old.registered
	}
	b.candidates[key][c.Owner] = &candidate{priority: c.Priority, value: c.Value, registered: registered, expires: now.Add(c.TTL)}
}

// outcome is what a campaign decided.
type outcome int

const (
	refused   outcome = iota // another term holds the lease
	won                      // a new term
	confirmed                // a term handed to the owner, now confirmed
)

// campaign is pgleader.campaign: it confirms a term handed to c.Owner,
// registers c while another term holds the lease (if c.TTL > 0), or wins a
// free lease with c's priority and value. It returns the acquire or take
// event it decided, for the caller to record; b.mu is held.
func (b *Backend) campaign(key string, c pgleader.Candidate, ttl time.Duration, floor int64, now time.Time) (pgleader.Lease, outcome, Event) {
	r := b.row(key)
	switch {
	case r.held(now) && r.holder == c.Owner && r.handedOff:
		r.renewed, r.expires, r.handedOff = now, now.Add(ttl), false
		b.dropCandidates(key, now, c.Owner)
		b.notify(pgleader.Event{Kind: pgleader.EventAcquired, Key: key}) // as for a won term
		return r.lease(key, now), confirmed, Event{At: now, Op: OpTake, Key: key, Owner: c.Owner, Token: r.token, OK: true, Expires: r.expires}
	case r.held(now):
		if c.TTL > 0 && r.holder != c.Owner {
			b.register(key, c, now)
		}
		return r.lease(key, now), refused, Event{At: now, Op: OpAcquire, Key: key, Owner: c.Owner, Token: r.token}
	}
	*r = row{holder: c.Owner, token: max(r.token, floor) + 1, acquired: now, renewed: now, expires: now.Add(ttl),
		value: c.Value, priority: c.Priority}
	b.dropCandidates(key, now, c.Owner)
	b.notify(pgleader.Event{Kind: pgleader.EventAcquired, Key: key}) // what an Elector's announcement does on PostgreSQL
	return r.lease(key, now), won, Event{At: now, Op: OpAcquire, Key: key, Owner: c.Owner, Token: r.token, OK: true, Expires: r.expires}
}

// Campaign implements pgleader.Backend as pgleader.campaign does.
func (h *HandoffBackend) Campaign(ctx context.Context, key string, c pgleader.Candidate, ttl time.Duration, floor int64) (pgleader.Lease, bool, error) {
	return h.campaignCall(ctx, key, c, ttl, floor, true)
}

func checkCandidateTTL(d time.Duration) error {
	if d != 0 && d < time.Microsecond {
		return fmt.Errorf("%w: candidate TTL must be 0 (no registration) or at least 1µs, got %v", pgleader.ErrInvalid, d)
	}
	return nil
}

// HandOff implements pgleader.Backend as pgleader.hand_off does. It
// delivers a hand-off event naming the successor (or a release event) to
// the key's watchers before it returns.
func (h *HandoffBackend) HandOff(ctx context.Context, key, owner string, token int64, to string) (bool, string, error) {
	b := h.Backend
	if err := firstErr(pgleader.CheckKey(key), pgleader.CheckOwner(owner), pgleader.CheckToken(token)); err != nil {
		return false, "", err
	}
	if to != "" {
		if err := pgleader.CheckOwner(to); err != nil {
			return false, "", err
		}
	}
	now, err := b.enter(ctx)
	if err != nil {
		return false, "", err
	}
	defer b.mu.Unlock()
	r := b.leases[key]
	if r == nil || r.holder != owner || r.token != token {
		b.record(Event{At: now, Op: OpHandOff, Key: key, Owner: owner, Token: token})
		b.record(Event{At: now, Op: OpRelease, Key: key, Owner: owner, Token: token})
		return false, "", nil
	}
	b.record(Event{At: now, Op: OpHandOff, Key: key, Owner: owner, Token: token, OK: true})
	b.record(Event{At: now, Op: OpRelease, Key: key, Owner: owner, Token: token, OK: true})
	target := to
	if target == "" {
		target = r.transferTo
	}
	if cs := b.liveCandidates(key, owner, target, now); len(cs) > 0 && r.token < math.MaxInt64 {
		c := cs[0]
		*r = row{holder: c.Owner, token: r.token + 1, acquired: now, renewed: now, expires: c.ExpiresAt,
			value: c.Value, priority: c.Priority, handedOff: true}
		b.dropCandidates(key, now, c.Owner, owner)
		b.record(Event{At: now, Op: OpAcquire, Key: key, Owner: c.Owner, Token: r.token, OK: true, Expires: r.expires})
		b.notify(pgleader.Event{Kind: pgleader.EventHandedOff, Key: key, Owner: c.Owner})
		return true, c.Owner, nil
	}
	*r = row{token: r.token}
	b.dropCandidates(key, now, owner)
	b.notify(pgleader.Event{Kind: pgleader.EventReleased, Key: key})
	return true, "", nil
}

// RenewTerm implements pgleader.Backend as pgleader.renew_term does.
func (h *HandoffBackend) RenewTerm(ctx context.Context, key, owner string, token int64, ttl, minTerm time.Duration) (time.Time, bool, error) {
	return h.renewTerm(ctx, key, owner, token, ttl, minTerm, true)
}

// Transfer implements pgleader.Steerer as pgleader.transfer does: the
// holder learns at its next renewal, and its hand-off goes to to if to is
// still a live candidate then.
func (b *Backend) Transfer(ctx context.Context, key, to string) (pgleader.Lease, bool, error) {
	if err := firstErr(pgleader.CheckKey(key), pgleader.CheckOwner(to)); err != nil {
		return pgleader.Lease{}, false, err
	}
	now, err := b.enter(ctx)
	if err != nil {
		return pgleader.Lease{}, false, err
	}
	defer b.mu.Unlock()
	r := b.row(key)
	l := r.lease(key, now)
	if !r.held(now) || r.holder == to {
		b.record(Event{At: now, Op: OpTransfer, Key: key, Owner: to, Token: r.token})
		return l, false, nil
	}
	if c := b.candidates[key][to]; c == nil || !c.live(now) {
		return pgleader.Lease{}, false, fmt.Errorf("%w: %q is not a live candidate of key %q", pgleader.ErrNoCandidate, to, key)
	}
	r.resign, r.transferTo = true, to
	b.record(Event{At: now, Op: OpTransfer, Key: key, Owner: to, Token: r.token, OK: true})
	return l, true, nil
}

// Candidates implements pgleader.Steerer as pgleader.candidates does.
func (b *Backend) Candidates(ctx context.Context, key string) ([]pgleader.Candidate, error) {
	if err := pgleader.CheckKey(key); err != nil {
		return nil, err
	}
	now, err := b.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	return b.liveCandidates(key, "", "", now), nil
}

// Withdraw implements pgleader.Steerer as pgleader.withdraw does.
func (b *Backend) Withdraw(ctx context.Context, key, owner string) error {
	if err := firstErr(pgleader.CheckKey(key), pgleader.CheckOwner(owner)); err != nil {
		return err
	}
	now, err := b.enter(ctx)
	if err != nil {
		return err
	}
	defer b.mu.Unlock()
	_, ok := b.candidates[key][owner]
	delete(b.candidates[key], owner)
	if len(b.candidates[key]) == 0 {
		delete(b.candidates, key)
	}
	b.record(Event{At: now, Op: OpWithdraw, Key: key, Owner: owner, OK: ok})
	return nil
}
