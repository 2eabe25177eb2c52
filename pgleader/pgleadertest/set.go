package pgleadertest

import (
	"context"
	"slices"
	"time"

	"github.com/pgleader/pgleader/pgleader"
)

var _ pgleader.SetBackend = (*Backend)(nil)

// The batched operations recorded in the History, once per call; the keys
// they decide are recorded as acquire, renew and release events too.
const (
	OpAcquireSet Op = "acquire-set"
	OpRenewSet   Op = "renew-set"
	OpReleaseSet Op = "release-set"
)

type member struct {
	held    int
	expires time.Time
}

// liveMembers returns set's members unexpired at now, ordered by owner;
// b.mu is held.
func (b *Backend) liveMembers(set string, now time.Time) []pgleader.SetMember {
	var out []pgleader.SetMember
	for owner, m := range b.sets[set] {
		if now.Before(m.expires) {
			out = append(out, pgleader.SetMember{Owner: owner, Held: m.held})
		}
	}
	slices.SortFunc(out, func(a, c pgleader.SetMember) int {
		if a.Owner < c.Owner {
			return -1
		}
		if a.Owner > c.Owner {
			return 1
		}
		return 0
	})
	return out
}

// AcquireSet implements pgleader.SetBackend as pgleader.set_acquire does.
func (b *Backend) AcquireSet(ctx context.Context, set, owner string, keys []string, floors []int64, ttl time.Duration, held, extra int) ([]pgleader.Lease, int, error) {
	if err := pgleader.CheckSetAcquire(set, owner, keys, floors, ttl, held, extra); err != nil {
		return nil, 0, err
	}
	now, err := b.enter(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer b.mu.Unlock()
	b.record(Event{At: now, Op: OpAcquireSet, Key: set, Owner: owner})
	m := 0
	self := false
	for _, mb := range b.liveMembers(set, now) {
		m++
		self = self || mb.Owner == owner
	}
	if !self {
		m++
	}
	n := held + len(keys)
	limit := min(max((n+m-1)/m-held, 0)+extra, len(keys))
	order := slices.Clone(keys)
	slices.Sort(order)
	floor := make(map[string]int64, len(floors))
	for i, f := range floors {
		floor[keys[i]] = f
	}
	var won []pgleader.Lease
	for _, k := range order {
		if len(won) == limit {
			break
		}
		r := b.row(k)
		if r.held(now) {
			continue
		}
		*r = row{holder: owner, token: max(r.token, floor[k]) + 1, acquired: now, renewed: now, expires: now.Add(ttl)}
		b.record(Event{At: now, Op: OpAcquire, Key: k, Owner: owner, Token: r.token, OK: true, Expires: r.expires})
		won = append(won, r.lease(k, now))
	}
	return won, m, nil
}

// RenewSet implements pgleader.SetBackend as pgleader.set_renew does.
func (b *Backend) RenewSet(ctx context.Context, set, owner string, keys []string, tokens []int64, ttl time.Duration, held int) ([]time.Time, []pgleader.SetMember, error) {
	if err := pgleader.CheckSetRenew(set, owner, keys, tokens, ttl, held); err != nil {
		return nil, nil, err
	}
	now, err := b.enter(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer b.mu.Unlock()
	b.record(Event{At: now, Op: OpRenewSet, Key: set, Owner: owner})
	expires := make([]time.Time, len(keys))
	for i, k := range keys {
		r := b.leases[k]
		if r == nil || !r.held(now) || r.holder != owner || r.token != tokens[i] {
			b.record(Event{At: now, Op: OpRenew, Key: k, Owner: owner, Token: tokens[i]})
			continue
		}
		r.renewed, r.expires = now, now.Add(ttl)
		expires[i] = r.expires
		b.record(Event{At: now, Op: OpRenew, Key: k, Owner: owner, Token: tokens[i], OK: true, Expires: r.expires})
	}
	if b.sets == nil {
		b.sets = make(map[string]map[string]*member)
	}
	if b.sets[set] == nil {
		b.sets[set] = make(map[string]*member)
	}
	mb := b.sets[set][owner]
	if mb == nil || mb.held != held || mb.expires.Before(now.Add(ttl/2)) {
		b.sets[set][owner] = &member{held: held, expires: now.Add(ttl)}
	}
	return expires, b.liveMembers(set, now), nil
}

// ReleaseSet implements pgleader.SetBackend as pgleader.set_release does.
func (b *Backend) ReleaseSet(ctx context.Context, set, owner string, keys []string, tokens []int64, leave bool) ([]bool, error) {
	if err := pgleader.CheckSetRelease(set, owner, keys, tokens); err != nil {
		return nil, err
	}
	now, err := b.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	b.record(Event{At: now, Op: OpReleaseSet, Key: set, Owner: owner, OK: leave})
	if leave {
		delete(b.sets[set], owner)
	}
	out := make([]bool, len(keys))
	for i, k := range keys {
		r := b.leases[k]
		ok := r != nil && r.holder == owner && r.token == tokens[i]
		if ok {
			*r = row{token: r.token}
			b.notify(pgleader.Event{Kind: pgleader.EventReleased, Key: k})
		}
		out[i] = ok
		b.record(Event{At: now, Op: OpRelease, Key: k, Owner: owner, Token: tokens[i], OK: ok})
	}
	return out, nil
}

// Steal gives key's lease to owner with a new token, as a replica whose
// acquire raced an expiry would hold it: the term that held it finds it
// lost at its next renewal.
func (b *Backend) Steal(key, owner string, ttl time.Duration) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	r := b.row(key)
	*r = row{holder: owner, token: r.token + 1, acquired: now, renewed: now, expires: now.Add(ttl)}
	return r.token
}
