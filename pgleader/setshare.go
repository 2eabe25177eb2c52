package pgleader

import (
	"cmp"
	"maps"
	"slices"
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

// home is the key this replica's campaigns start at, at the start of a
// sweep of its parts: with the set's keys sorted and cut into as many runs
// of equal length as there are live members, the first key of the run
// whose place is this replica's among the members' owners, sorted (see
// owners). At a cold start the members' campaigns then ask for keys no
// other member asks for first, and each takes its share from its own run;
// after a member's death the survivors split its keys the same way. A
// statement takes free keys in key order and skips the rows another holds
// locked, but campaigns that all began at the same key would each win what
// the others had just taken, or nothing.
func (r *setRun) home(owners []string) string {
	i := slices.Index(owners, r.s.opts.Owner)
	if i <= 0 {
		return ""
	}
	r.s.mu.Lock()
	keys := slices.Sorted(maps.Keys(r.s.keys))
	r.s.mu.Unlock()
	return keys[i*len(keys)/len(owners)]
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
// while keys are free, or after a hint that keys were freed; one that only
// confirms with terms handed to this replica, or after a hint that keys
// were handed off.
func (r *setRun) wantCampaign(now time.Time) int {
	r.s.mu.Lock()
	n := len(r.s.keys)
	r.s.mu.Unlock()
	held, others, m := len(r.terms)+len(r.releasing)+r.handed, 0, 1
	for _, mb := range r.members {
		if mb.Owner != r.s.opts.Owner && mb.Expires.After(now) {
			others, m = others+mb.Held, m+1
		}
	}
	switch {
	case r.ticks == 0 || r.extra > 0 || (held < ceilDiv(n, m) && held+others < n):
		return fullCampaign
	case r.handed > 0:
		return max(r.hinted, confirmOnly)
	}
	return r.hinted
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
	if r.campaigning || r.stopping || r.ticks < 2 {
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
	case held == share && n%m != 0:
		// At the ceiling while someone is two or more below: one key moves,
		// so no two members differ by more than one.
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
