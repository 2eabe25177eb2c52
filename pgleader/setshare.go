package pgleader

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/pgleader/pgleader/internal/lifecycle"
)

// This file is a Set's share of the keys: how many it holds beside the
// other members (rebalance, shed) and when a campaign may take anything
// (wantCampaign, schedule); docs/sets.md says why. set.go runs the terms.

// campaignBudget is the most keys one campaign sends, so that a campaign
// ends within its deadline however many keys a set has: a larger set takes
// them in parts. A campaign costs a few microseconds per key sent and about
// ten per key taken, and takes at most MaxSetTake (docs/sets.md); at
// 100,000 keys over three replicas a survivor of a crash finds the dead
// member's keys in the first part, and takes them in two campaigns.
var campaignBudget = 50000

// nextPart returns the part of keys (the keys this replica does not hold,
// sorted) that the next campaign sends, how many parts a sweep of keys
// takes, and the key the part after this one starts at. A sweep starts
// with this replica's home (see home), and goes on from the home's end in
// parts of at most campaignBudget keys that never wrap past the last key:
// the statement takes free keys in key order, so a wrapped part would take
// the first keys, another replica's home, first. A part that won keys is
// sent again (its keys won are no longer among keys); one that won
// nothing moves the sweep on; a sweep starts at home again when it is done
// or the members changed.
func (r *setRun) nextPart(keys []string, now time.Time) (part []string, sweep int, next string) {
	owners := r.owners(now)
	if o := strings.Join(owners, "\x00"); o != r.homeOf || !r.inSweep {
		r.homeOf, r.inSweep, r.idle = o, true, 0
		r.part, r.partEnd = r.home(owners)
	}
	from, to := r.bounds(keys)
	if from == to { // nothing of the home left to ask for: on to the part after it
		r.part, r.partEnd = r.partEnd, ""
		from, to = r.bounds(keys)
	}
	to = min(to, from+campaignBudget)
	if from == 0 && to == len(keys) {
		return keys, 1, ""
	}
	return keys[from:to], ceilDiv(len(keys), campaignBudget) + 2, keys[to-1] + "\x00"
}

// bounds returns where the part from r.part to r.partEnd lies in keys: a
// part past the last key starts again at the first, unless it is the
// home's (then it is empty).
func (r *setRun) bounds(keys []string) (from, to int) {
	from, _ = slices.BinarySearch(keys, r.part)
	to = len(keys)
	if r.partEnd != "" {
		to, _ = slices.BinarySearch(keys, r.partEnd)
		return from, max(from, to)
	}
	if from == len(keys) {
		from = 0
	}
	return from, to
}

// home returns the run of the set's keys that is this replica's: with
// the keys sorted and cut into as many runs of equal length as there are
// members (owners, sorted, as owners returns them), the run whose place
// is this replica's among the owners; end is "" for the last run. At a
// cold start the members' campaigns then ask for keys no other member asks
// for, and each takes its share from its own run; after a member's death
// the survivors split its keys the same way. Campaigns that all began at
// the same key would each win what the others had just taken, or nothing,
// and each key sent costs the statement time.
func (r *setRun) home(owners []string) (start, end string) {
	r.s.mu.Lock()
	keys := r.s.sortedKeys() // not changed once Add or Remove replaces it
	r.s.mu.Unlock()
	i, m := slices.Index(owners, r.s.opts.Owner), len(owners)
	if len(keys) == 0 || i < 0 {
		return "", ""
	}
	start = keys[i*len(keys)/m]
	if i+1 < m {
		end = keys[(i+1)*len(keys)/m]
	}
	return start, end
}

// owners returns the owners of the members live at now, as the last tick
// told them, and this replica's, sorted. Before the first tick they are
// not known (the run's first campaign waits for its second tick, which is
// sent as that campaign may start): this replica's alone.
func (r *setRun) owners(now time.Time) []string {
	owners := []string{r.s.opts.Owner}
	for _, mb := range r.members {
		if mb.Owner != r.s.opts.Owner && mb.Expires.After(now) {
			owners = append(owners, mb.Owner)
		}
	}
	slices.Sort(owners)
	return owners
}

// A campaign takes free keys (and confirms the terms handed to this
// replica), or only confirms those, sending no key.
const (
	noCampaign = iota
	confirmOnly
	fullCampaign
)

// wantCampaign says which campaign may take anything, as far as the last
// tick tells, with the members whose rows lapsed by now left out: a full
// one before the first tick, with extra keys agreed on, below the share
// while keys are free (but not again on the counts a sweep that won
// nothing was sent on, see fruitless), or after a hint that keys were
// freed; one that only confirms with terms handed to this replica, or
// after a hint that keys were handed off.
func (r *setRun) wantCampaign(now time.Time) int {
	r.s.mu.Lock()
	n := len(r.s.keys)
	r.s.mu.Unlock()
	held, others, m := r.view(now)
	switch {
	case r.ticks == 0 || r.extra > 0 || (held < ceilDiv(n, m) && held+others < n && !r.fruitless.same(others, m)):
		return fullCampaign
	case r.handed > 0:
		return max(r.hinted, confirmOnly)
	}
	return r.hinted
}

// view returns the keys this replica holds (counting those handed to it),
// those the other live members held at their last tick, and the number of
// live members, this one included.
func (r *setRun) view(now time.Time) (held, others, m int) {
	held, m = len(r.terms)+len(r.releasing)+r.handed, 1
	for _, mb := range r.members {
		if mb.Owner != r.s.opts.Owner && mb.Expires.After(now) {
			others, m = others+mb.Held, m+1
		}
	}
	return held, others, m
}

// fruitless records a sweep of the parts that won nothing: the others'
// counts it was sent on, the expiry of each other live member's row then,
// and when it ended. Counts a tick old can show keys free that the others
// have just taken (at a cold start, for seconds, while each takes its
// home); a replica one below the ceiling then swept 50,000-key parts every
// CampaignEvery, and beside the ticks of 33,333 keys such sweeps made them
// outlast their deadline and every term was lost. It campaigns on such
// counts again only once a tick sent after the sweep was answered and
// showed every other member's row renewed since (their counts are then
// newer than the sweep), or the live members or their counts changed (a
// member's row lapsed), or a TTL passed: at most one such sweep per
// RenewEvery while the others tick. A member that died after a tick that
// counted a key it held by then is never renewed: its count stays one
// short until its row lapses, and the survivors swept every RenewEvery
// for that key (50,000-key parts at 100,000 keys) until then.
type fruitless struct {
	set       bool
	at        time.Time
	others, m int
	seen      []SetMember // the other live members' rows as the sweep ended
}

func (f fruitless) same(others, m int) bool { return f.set && others == f.others && m == f.m }

// stale reports whether a tick sent at sent and answered with members
// leaves the fruitless sweep's counts as they were: sent before the sweep
// ended, or some member's row not renewed since, and a TTL not passed.
func (f fruitless) stale(sent time.Time, members []SetMember, ttl time.Duration, now time.Time) bool {
	if !f.set || now.Sub(f.at) > ttl {
		return false
	}
	if !sent.After(f.at) {
		return true
	}
	for _, was := range f.seen {
		for _, mb := range members {
			if mb.Owner == was.Owner && mb.Expires.Equal(was.Expires) {
				return true
			}
		}
	}
	return false
}

// gate is the earliest instant of the next campaign: paceAt, or hintAt
// for one a hint asks for, and never before shedHold.
func (r *setRun) gate() time.Time {
	if r.hinted != noCampaign {
		return latest(r.hintAt, r.shedHold)
	}
	return latest(r.paceAt, r.shedHold)
}

// schedule arms the campaign timer: at once if a campaign may take
// anything (but not before gate), else at the instant the first other
// member's row lapses, when its keys may be free; not before the run's
// second tick is answered.
func (r *setRun) schedule() {
	if r.campaigning || r.stopping || r.ticks < 2 || r.unbound() {
		return
	}
	now := time.Now()
	var at time.Time
	if r.wantCampaign(now) != noCampaign {
		at = now
	} else {
		for _, mb := range r.members {
			if mb.Owner != r.s.opts.Owner && mb.Expires.After(now) && (at.IsZero() || mb.Expires.Before(at)) {
				at = mb.Expires
			}
		}
	}
	if !at.IsZero() {
		at = latest(at, r.gate())
	}
	wake(r.campaignT, at)
}

func latest(t time.Time, ts ...time.Time) time.Time {
	for _, u := range ts {
		if u.After(t) {
			t = u
		}
	}
	return t
}

// rebalance steps down from keys above this replica's fair share, when
// another member is under its share and can take them, and decides whether
// this replica takes the keys nobody holds beyond its share. Counts of the
// other members are as of their last renewal.
func (r *setRun) rebalance() {
	s := r.s
	s.mu.Lock()
	n := len(s.keys)
	s.mu.Unlock()
	m := max(len(r.members), 1)
	share := ceilDiv(n, m)
	held := r.nLive
	deficit, total, lowest := 0, held, true
	for _, mb := range r.members {
		if mb.Owner == s.opts.Owner {
			continue
		}
		deficit += max(share-mb.Held, 0)
		total += mb.Held
		if mb.Held < held || (mb.Held == held && mb.Owner < s.opts.Owner) {
			lowest = false
		}
	}
	shed := 0
	switch {
	case held > share:
		shed = min(held-share, deficit)
	case held == share && n%m != 0 && total >= n:
		// At the ceiling while someone is two or more below and no key is
		// free (else that one takes a free key; counts can be a tick old
		// while the members take their homes at a cold start): one key
		// moves, so no two members differ by more than one.
		for _, mb := range r.members {
			if mb.Owner != s.opts.Owner && mb.Held <= held-2 {
				shed = 1
				break
			}
		}
	}
	if shed > 0 {
		r.shed(shed)
	}
	// Keys nobody holds, seen on two ticks in a row, while every member is
	// at its share (members that know fewer keys, a member that cannot
	// win): the member holding fewest takes them. While one is under its
	// share it takes them itself, and none moves twice.
	free := n - total
	r.extra = 0
	if free > 0 && lowest && r.freeSeen && deficit == 0 && held >= share {
		r.extra = free
	}
	r.freeSeen = free > 0
}

// shed ends the n most recently won live terms as resigned, and holds this
// replica's campaigns until those keys are free (YieldGrace for the bodies,
// ReleaseTimeout for the release) and every other member has campaigned
// once since (CampaignEvery). The keys were shed for a member under its
// share; a shedder that campaigned at once, itself under its share now,
// would race that member for them, and could keep a cold start from
// settling (TestSetColdStartConverges).
func (r *setRun) shed(n int) {
	sp := r.s.spec
	r.shedHold = time.Now().Add(sp.YieldGrace + sp.ReleaseTimeout + sp.CampaignEvery)
	var live []*setTerm
	for _, st := range r.terms {
		if st.t.Reason() == ReasonNone {
			live = append(live, st)
		}
	}
	slices.SortFunc(live, func(a, b *setTerm) int {
		if c := b.t.started.Compare(a.t.started); c != 0 {
			return c
		}
		return cmp.Compare(a.t.key, b.t.key)
	})
	r.s.log.Info("above the fair share; stepping down from keys", "keys", min(n, len(live)))
	r.yield(func(yield func(string) bool) {
		for _, st := range live[:min(n, len(live))] {
			if !yield(st.t.key) {
				return
			}
		}
	}, lifecycle.Resigned)
}
