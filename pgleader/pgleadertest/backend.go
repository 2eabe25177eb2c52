// Package pgleadertest provides an in-memory pgleader.Backend for unit tests
// of leader bodies, with switches that inject the failures a real lock
// backend has: an outage, a hang, latency, lost lease data, no fence
// advance, lost notifications. Like the PostgreSQL backend it pushes lease
// events to watching candidates.
//
// A Backend keeps no candidates: its HandOff releases. Its view
// [Backend.WithHandOff] keeps them: waiting candidates register, a leader
// that steps down hands the lease to the best of them with the next token,
// and preferred leaders (Options.Priority, Options.MinTerm) and transfers
// work as on PostgreSQL, so tests of hand-off need no database.
//
// It keeps time with time.Now, so inside a testing/synctest bubble its
// leases expire on the bubble's fake clock, and tests of timing are exact.
package pgleadertest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/pgleader/pgleader/pgleader"
)

// Op names a backend operation in the History.
type Op string

// The operations recorded in the History.
const (
	OpAcquire Op = "acquire"
	OpRenew   Op = "renew"
	OpRelease Op = "release"
	OpAdvance Op = "advance"
)

// Event is one operation the backend decided, on its clock.
type Event struct {
	At    time.Time
	Op    Op
	Key   string
	Owner string
	Token int64
	// OK is whether the operation took effect: acquired, renewed,
	// released, advanced; for the hand-off operations (see OpCampaign),
	// won or confirmed, handed off or released, asked, withdrawn.
	OK bool
	// Expires is the lease's expiry after an acquire, renew, take or
	// campaign that took effect.
	Expires time.Time
}

// Backend is an in-memory pgleader.Backend, pgleader.Steerer,
// pgleader.Watcher and pgleader.SetBackend, with the same semantics as the
// PostgreSQL one but for candidates (see [Backend.WithHandOff]): both pass
// the suite of package
// github.com/pgleader/pgleader/pgleader/backendtest. It delivers a release
// event to the key's watchers before Release returns. It is safe for
// concurrent use.
type Backend struct {
	mu      sync.Mutex
	leases  map[string]*row
	fail    error
	latency time.Duration
	blocked chan struct{} // non-nil while blocked; closed by Unblock
	history []Event

	deaf     bool // Listening reports false and no events are sent
	watchers map[string]map[chan pgleader.Event]struct{}

	sets map[string]map[string]*member // set name → owner → member; see set.go

	candidates map[string]map[string]*candidate // key → owner → registration; see handoff.go
}

type row struct {
	holder   string
	token    int64
	acquired time.Time
	renewed  time.Time
	expires  time.Time
	value    string
	resign   bool // the term was asked to resign

	priority   int32  // the term's, from the campaign that won it or its candidate row
	handedOff  bool   // handed to holder by a hand-off and not yet confirmed
	transferTo string // the owner a Transfer asked the term to hand off to
}

func (r *row) held(now time.Time) bool { return r.holder != "" && now.Before(r.expires) }

// NewBackend returns an empty backend.
func NewBackend() *Backend {
	return &Backend{leases: make(map[string]*row), watchers: make(map[string]map[chan pgleader.Event]struct{}),
		candidates: make(map[string]map[string]*candidate)}
}

var (
	_ pgleader.Backend = (*Backend)(nil)
	_ pgleader.Steerer = (*Backend)(nil)
	_ pgleader.Watcher = (*Backend)(nil)
)

// Abilities implements pgleader.Backend: everything the PostgreSQL backend
// can do but keep candidates.
func (b *Backend) Abilities() pgleader.Abilities {
	return pgleader.Abilities{Advance: true, Values: true, Steer: b, Events: b}
}

// SetListening switches event delivery, as a LISTEN connection that drops
// (false) and comes back (true) would. Dropping sends EventDeaf and coming
// back sends EventResync to every watcher. It starts on.
func (b *Backend) SetListening(on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.deaf == !on {
		return
	}
	kind := pgleader.EventResync
	if !on {
		kind = pgleader.EventDeaf
	}
	b.deaf = false // deliver this event either way
	for key := range b.watchers {
		b.notify(pgleader.Event{Kind: kind, Key: key})
	}
	b.deaf = !on
}

// Watch implements pgleader.Watcher.
func (b *Backend) Watch(key string) (<-chan pgleader.Event, func()) {
	ch := make(chan pgleader.Event, 16)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.watchers[key] == nil {
		b.watchers[key] = make(map[chan pgleader.Event]struct{})
	}
	b.watchers[key][ch] = struct{}{}
	return ch, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.watchers[key], ch)
	}
}

// WatchCandidate implements pgleader.Watcher as Watch: hand-off events are
// delivered unchecked, and the candidate confirms its term by campaigning.
func (b *Backend) WatchCandidate(key string, _ pgleader.CandidateWatch) (<-chan pgleader.Event, func()) {
	return b.Watch(key)
}

// Announce implements pgleader.Watcher. It sends nothing: the backend's
// campaign tells the watchers of every acquire itself.
func (b *Backend) Announce(context.Context, string) error { return nil }

// Listening implements pgleader.Watcher.
func (b *Backend) Listening() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.deaf
}

// Forge delivers ev to the watchers of ev.Key as if anyone had sent it:
// a forged notification on PostgreSQL's channel looks the same, so a test
// can check that an event alone never makes a candidate wait longer or
// lead. The backend's own operations notify releases, hand-offs and
// acquires, as the PostgreSQL backend's release and hand-off and an
// Elector's announcement of its term do.
func (b *Backend) Forge(ev pgleader.Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.notify(ev)
}

// notify sends ev to key's watchers without blocking; b.mu is held.
func (b *Backend) notify(ev pgleader.Event) {
	if b.deaf {
		return
	}
	for ch := range b.watchers[ev.Key] {
		select {
		case ch <- ev:
		default: // a watcher that is not reading loses the event
		}
	}
}

// DropData forgets every lease, token counter and candidate registration,
// as a lock backend that restarted without persistence would. The next term
// of a key draws 1 unless its counter is advanced first.
func (b *Backend) DropData() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.leases = make(map[string]*row)
	b.candidates = make(map[string]map[string]*candidate)
}

// SetFailure makes every operation fail with err, without effect, until it
// is called with nil: an unreachable database.
func (b *Backend) SetFailure(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fail = err
}

// SetLatency makes every operation take d before the backend decides it,
// as a round trip to a distant database does.
func (b *Backend) SetLatency(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.latency = d
}

// Block makes every operation wait, without effect, until Unblock is called
// or its context ends: a database that stopped answering.
func (b *Backend) Block() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.blocked == nil {
		b.blocked = make(chan struct{})
	}
}

// Unblock lets blocked and later operations proceed.
func (b *Backend) Unblock() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.blocked != nil {
		close(b.blocked)
		b.blocked = nil
	}
}

// WithoutAdvance returns a view of b whose Abilities claim nothing: a
// lock backend that cannot move its token counter, keep values or push
// events.
func (b *Backend) WithoutAdvance() pgleader.Backend {
	return noAdvance{b}
}

type noAdvance struct{ *Backend }

func (n noAdvance) Abilities() pgleader.Abilities { return pgleader.Abilities{} }

func (n noAdvance) Campaign(ctx context.Context, key string, c pgleader.Candidate, ttl time.Duration, _ int64) (pgleader.Lease, bool, error) {
	return n.campaignCall(ctx, key, pgleader.Candidate{Owner: c.Owner}, ttl, 0, false)
}

// History returns every operation that reached the backend's decision, in
// order. Failed (SetFailure) and blocked calls are not in it.
func (b *Backend) History() []Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Event(nil), b.history...)
}

// enter waits out the latency and a Block, checks the failure switch, and
// returns with b.mu held and the backend's clock read.
func (b *Backend) enter(ctx context.Context) (time.Time, error) {
	b.mu.Lock()
	latency := b.latency
	b.mu.Unlock()
	if latency > 0 {
		t := time.NewTimer(latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return time.Time{}, ctx.Err()
		}
	}
	for {
		b.mu.Lock()
		blocked := b.blocked
		if blocked == nil {
			break
		}
		b.mu.Unlock()
		select {
		case <-blocked:
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
	if err := ctx.Err(); err != nil {
		b.mu.Unlock()
		return time.Time{}, err
	}
	if b.fail != nil {
		err := b.fail
		b.mu.Unlock()
		return time.Time{}, err
	}
	return time.Now(), nil
}

func (b *Backend) record(e Event) { b.history = append(b.history, e) }

func (b *Backend) row(key string) *row {
	r := b.leases[key]
	if r == nil {
		r = &row{}
		b.leases[key] = r
	}
	return r
}

// Acquire takes the lease for owner: Campaign with no floor, value or
// registration.
func (b *Backend) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (pgleader.Lease, bool, error) {
	return b.Campaign(ctx, key, pgleader.Candidate{Owner: owner}, ttl, 0)
}

// Campaign implements pgleader.Backend as pgleader.campaign does, but
// registers nobody: a Backend keeps no candidates.
func (b *Backend) Campaign(ctx context.Context, key string, c pgleader.Candidate, ttl time.Duration, floor int64) (pgleader.Lease, bool, error) {
	return b.campaignCall(ctx, key, c, ttl, floor, false)
}

// campaignCall is Campaign; with candidates it registers c and records
// the campaign in the History.
func (b *Backend) campaignCall(ctx context.Context, key string, c pgleader.Candidate, ttl time.Duration, floor int64, candidates bool) (pgleader.Lease, bool, error) {
	if err := firstErr(pgleader.CheckKey(key), pgleader.CheckOwner(c.Owner), pgleader.CheckTTL(ttl), pgleader.CheckFloor(floor),
		pgleader.CheckValue(c.Value), checkCandidateTTL(c.TTL)); err != nil {
		return pgleader.Lease{}, false, err
	}
	now, err := b.enter(ctx)
	if err != nil {
		return pgleader.Lease{}, false, err
	}
	defer b.mu.Unlock()
	if !candidates {
		c.TTL = 0
	}
	l, how, decided := b.campaign(key, c, ttl, floor, now)
	if candidates {
		b.record(Event{At: now, Op: OpCampaign, Key: key, Owner: c.Owner, Token: l.Token, OK: how != refused, Expires: decided.Expires})
	}
	b.record(decided)
	return l, how != refused, nil
}

// Renew extends the term's lease: RenewTerm without its resignation.
func (b *Backend) Renew(ctx context.Context, key, owner string, token int64, ttl time.Duration) (time.Time, error) {
	expires, _, err := b.RenewTerm(ctx, key, owner, token, ttl, pgleader.NoPreference)
	return expires, err
}

// RenewTerm implements pgleader.Backend; minTerm changes nothing, as a
// Backend keeps no candidates.
func (b *Backend) RenewTerm(ctx context.Context, key, owner string, token int64, ttl, minTerm time.Duration) (time.Time, bool, error) {
	return b.renewTerm(ctx, key, owner, token, ttl, minTerm, false)
}

// renewTerm is RenewTerm; with candidates, a live candidate of higher
// priority asks a term that has lasted minTerm to resign.
func (b *Backend) renewTerm(ctx context.Context, key, owner string, token int64, ttl, minTerm time.Duration, candidates bool) (time.Time, bool, error) {
	if err := firstErr(pgleader.CheckKey(key), pgleader.CheckOwner(owner), pgleader.CheckToken(token), pgleader.CheckTTL(ttl)); err != nil {
		return time.Time{}, false, err
	}
	if minTerm < 0 && minTerm != pgleader.NoPreference {
		return time.Time{}, false, fmt.Errorf("%w: minTerm must not be negative (but NoPreference), got %v", pgleader.ErrInvalid, minTerm)
	}
	now, err := b.enter(ctx)
	if err != nil {
		return time.Time{}, false, err
	}
	defer b.mu.Unlock()
	r, err := b.renew(key, owner, token, ttl, now)
	if err != nil {
		return time.Time{}, false, err
	}
	resign := r.resign
	if candidates && !resign && minTerm >= 0 && now.Sub(r.acquired) >= minTerm {
		for _, c := range b.liveCandidates(key, owner, "", now) {
			if c.Priority > r.priority {
				resign = true
				break
			}
		}
	}
	return r.expires, resign, nil
}

// HandOff implements pgleader.Backend: a Backend keeps no candidates, so
// it releases.
func (b *Backend) HandOff(ctx context.Context, key, owner string, token int64, to string) (bool, string, error) {
	if to != "" {
		if err := pgleader.CheckOwner(to); err != nil {
			return false, "", err
		}
	}
	released, err := b.Release(ctx, key, owner, token)
	return released, "", err
}

// renew extends the term's lease to ttl from now and records the renewal;
// b.mu is held.
func (b *Backend) renew(key, owner string, token int64, ttl time.Duration, now time.Time) (*row, error) {
	r := b.leases[key]
	if r == nil || !r.held(now) || r.holder != owner || r.token != token {
		b.record(Event{At: now, Op: OpRenew, Key: key, Owner: owner, Token: token})
		return nil, pgleader.ErrLost
	}
	r.renewed, r.expires = now, now.Add(ttl)
	b.record(Event{At: now, Op: OpRenew, Key: key, Owner: owner, Token: token, OK: true, Expires: r.expires})
	return r, nil
}

// Resign implements pgleader.Steerer.
func (b *Backend) Resign(ctx context.Context, key string, token int64) (pgleader.Lease, bool, error) {
	if err := pgleader.CheckKey(key); err != nil {
		return pgleader.Lease{}, false, err
	}
	if token != 0 {
		if err := pgleader.CheckToken(token); err != nil {
			return pgleader.Lease{}, false, err
		}
	}
	now, err := b.enter(ctx)
	if err != nil {
		return pgleader.Lease{}, false, err
	}
	defer b.mu.Unlock()
	r := b.row(key)
	l := r.lease(key, now)
	if !r.held(now) || (token != 0 && r.token != token) {
		return l, false, nil
	}
	r.resign = true
	return l, true, nil
}

// Release implements pgleader.Backend.
func (b *Backend) Release(ctx context.Context, key, owner string, token int64) (bool, error) {
	if err := firstErr(pgleader.CheckKey(key), pgleader.CheckOwner(owner), pgleader.CheckToken(token)); err != nil {
		return false, err
	}
	now, err := b.enter(ctx)
	if err != nil {
		return false, err
	}
	defer b.mu.Unlock()
	r := b.leases[key]
	ok := r != nil && r.holder == owner && r.token == token
	if ok {
		*r = row{token: r.token}
		b.notify(pgleader.Event{Kind: pgleader.EventReleased, Key: key})
	}
	b.record(Event{At: now, Op: OpRelease, Key: key, Owner: owner, Token: token, OK: ok})
	return ok, nil
}

// Lease implements pgleader.Backend.
func (b *Backend) Lease(ctx context.Context, key string) (pgleader.Lease, error) {
	if err := pgleader.CheckKey(key); err != nil {
		return pgleader.Lease{}, err
	}
	now, err := b.enter(ctx)
	if err != nil {
		return pgleader.Lease{}, err
	}
	defer b.mu.Unlock()
	r := b.leases[key]
	if r == nil {
		return pgleader.Lease{Key: key, Now: now}, nil
	}
	return r.lease(key, now), nil
}

// Advance implements pgleader.Steerer.
func (b *Backend) Advance(ctx context.Context, key string, floor int64) (bool, int64, error) {
	if err := firstErr(pgleader.CheckKey(key), pgleader.CheckFloor(floor)); err != nil {
		return false, 0, err
	}
	now, err := b.enter(ctx)
	if err != nil {
		return false, 0, err
	}
	defer b.mu.Unlock()
	r := b.row(key)
	if r.held(now) {
		b.record(Event{At: now, Op: OpAdvance, Key: key, Token: r.token})
		return false, r.token, nil
	}
	*r = row{token: max(r.token, floor)}
	b.record(Event{At: now, Op: OpAdvance, Key: key, Token: r.token, OK: true})
	return true, r.token, nil
}

func (r *row) lease(key string, now time.Time) pgleader.Lease {
	if !r.held(now) {
		return pgleader.Lease{Key: key, Token: r.token, Now: now}
	}
	return pgleader.Lease{Key: key, Holder: r.holder, Token: r.token,
		AcquiredAt: r.acquired, RenewedAt: r.renewed, ExpiresAt: r.expires, Now: now, Value: r.value}
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
