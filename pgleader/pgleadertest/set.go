package pgleadertest

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strings"
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
			out = append(out, pgleader.SetMember{Owner: owner, Held: m.held, Expires: m.expires})
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
func (b *Backend) AcquireSet(ctx context.Context, set, owner string, keys []string, floors []int64, ttl time.Duration, held, extra, total int, confirm []string) ([]pgleader.Lease, int, error) {
	if err := pgleader.CheckSetAcquire(set, owner, keys, floors, ttl, held, extra, total, confirm); err != nil {
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
	n := cmp.Or(total, held+len(keys))
	order := slices.Clone(keys)
	slices.Sort(order)
	floor := make(map[string]int64, len(floors))
	for i, f := range floors {
		floor[keys[i]] = f
	}
	// The terms handed to owner among keys and confirm are confirmed
	// first, and count as held.
	var won []pgleader.Lease
	mine := map[string]bool{}
	for _, k := range slices.Concat(keys, confirm) {
		mine[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(mine)) {
		if r := b.leases[k]; r != nil && r.held(now) && r.holder == owner && r.handedOff {
			r.handedOff, r.renewed, r.expires = false, now, now.Add(ttl)
			b.record(Event{At: now, Op: OpAcquire, Key: k, Owner: owner, Token: r.token, OK: true, Expires: r.expires})
			won = append(won, r.lease(k, now))
		}
	}
	limit := min(max((n+m-1)/m-held-len(won), 0)+extra, len(keys), pgleader.MaxSetTake) + len(won)
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
func (b *Backend) RenewSet(ctx context.Context, set, owner string, keys []string, tokens []int64, ttl time.Duration, held int) (pgleader.SetRenewal, error) {
	if err := pgleader.CheckSetRenew(set, owner, keys, tokens, ttl, held); err != nil {
		return pgleader.SetRenewal{}, err
	}
	now, err := b.enter(ctx)
	if err != nil {
		return pgleader.SetRenewal{}, err
	}
	defer b.mu.Unlock()
	b.record(Event{At: now, Op: OpRenewSet, Key: set, Owner: owner})
	out := pgleader.SetRenewal{Expires: make([]time.Time, len(keys))}
	for i, k := range keys {
		r, err := b.renew(k, owner, tokens[i], ttl, now)
		if err != nil {
			continue
		}
		out.Expires[i] = r.expires
		if r.resign {
			if out.Resign == nil {
				out.Resign = make([]bool, len(keys))
			}
			out.Resign[i] = true
		}
	}
	if b.sets == nil {
		b.sets = make(map[string]map[string]*member)
	}
	if b.sets[set] == nil {
		b.sets[set] = make(map[string]*member)
	}
	for _, r := range b.leases {
		if r.held(now) && r.holder == owner && r.handedOff {
			out.Handed++
		}
	}
	b.sets[set][owner] = &member{held: held + out.Handed, expires: now.Add(ttl)}
	out.Members = b.liveMembers(set, now)
	return out, nil
}

// ReleaseSet implements pgleader.SetBackend as pgleader.set_release does.
func (b *Backend) ReleaseSet(ctx context.Context, set, owner string, keys []string, tokens []int64, handOff []bool, leave bool) ([]bool, error) {
	if err := pgleader.CheckSetRelease(set, owner, keys, tokens, handOff); err != nil {
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
	var to []pgleader.SetMember // the other live members, each with the keys dealt to it
	for _, mb := range b.liveMembers(set, now) {
		if mb.Owner != owner {
			to = append(to, mb)
		}
	}
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(i, j int) int { return strings.Compare(keys[i], keys[j]) })
	out := make([]bool, len(keys))
	freed := false
	defer func() {
		// The hint on the set's name, as Postgres sends it.
		if freed {
			b.notify(pgleader.Event{Kind: pgleader.EventReleased, Key: set})
		} else if slices.Contains(out, true) {
			b.notify(pgleader.Event{Kind: pgleader.EventAcquired, Key: set})
		}
	}()
	for _, i := range order {
		k := keys[i]
		r := b.leases[k]
		ok := r != nil && r.holder == owner && r.token == tokens[i]
		out[i] = ok
		b.record(Event{At: now, Op: OpRelease, Key: k, Owner: owner, Token: tokens[i], OK: ok})
		switch {
		case !ok:
		case handOff != nil && handOff[i] && len(to) > 0:
			j := 0 // the fewest, then the first by owner
			for n := range to {
				if to[n].Held < to[j].Held {
					j = n
				}
			}
			to[j].Held++
			*r = row{holder: to[j].Owner, token: r.token + 1, acquired: now, renewed: now,
				expires: b.sets[set][to[j].Owner].expires, handedOff: true}
		default:
			*r = row{token: r.token}
			freed = true
			b.notify(pgleader.Event{Kind: pgleader.EventReleased, Key: k})
		}
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
