package pgleader_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/pgleader/pgleadertest"
)

// campaignSizes records how many keys each campaign sent, and for the
// campaigns that sent keys, who sent them and how many it won.
type campaignSizes struct {
	pgleader.SetBackend
	mu    sync.Mutex
	sizes []int
	parts []campaignPart
}

type campaignPart struct {
	owner     string
	sent, won int
	err       error
}

func (c *campaignSizes) AcquireSet(ctx context.Context, set, owner string, keys []string, floors []int64, ttl time.Duration, held, extra, total int, confirm []string) ([]pgleader.Lease, int, error) {
	c.mu.Lock()
	c.sizes = append(c.sizes, len(keys))
	c.mu.Unlock()
	won, members, err := c.SetBackend.AcquireSet(ctx, set, owner, keys, floors, ttl, held, extra, total, confirm)
	if len(keys) > 0 {
		c.mu.Lock()
		c.parts = append(c.parts, campaignPart{owner, len(keys), len(won), err})
		c.mu.Unlock()
	}
	return won, members, err
}

// TestSetCampaignsInParts: a set with more keys than one campaign may send
// takes them in parts, each campaign at most the budget, one after another
// without waiting CampaignEvery between parts that won keys.
func TestSetCampaignsInParts(t *testing.T) {
	defer pgleader.SetCampaignBudget(10)()
	synctest.Test(t, func(t *testing.T) {
		b := &campaignSizes{SetBackend: pgleadertest.NewBackend()}
		spec := setSpec("s")
		r := startSet(t, b, spec, keyNames("k", 55), pgleader.SetOptions{Owner: "a", Lead: quickBody})
		spec = r.set.Spec()
		// The first campaign waits CampaignEvery; the parts follow at once.
		time.Sleep(spec.CampaignEvery + 100*time.Millisecond)
		synctest.Wait()
		if h := held(r)[0]; h != 55 {
			t.Fatalf("held %d of 55 just after the first campaign; want all, in parts", h)
		}
		b.mu.Lock()
		sizes := slices.Clone(b.sizes)
		b.mu.Unlock()
		if len(sizes) < 6 || slices.Max(sizes) > 10 {
			t.Fatalf("campaigns sent %v keys; want 6 or more campaigns of at most 10", sizes)
		}
		r.stop(t)
	})
}

// TestSetCampaignSweepsParts: parts that win nothing, while the free keys
// lie in other parts, do not wait CampaignEvery each: the campaigns go on
// until the parts have covered every key once. Two members hold keys 0-39
// of 60 for a minute; the third, with parts of 10 keys, takes the 20 free
// ones within CampaignEvery of its first campaign.
func TestSetCampaignSweepsParts(t *testing.T) {
	defer pgleader.SetCampaignBudget(10)()
	synctest.Test(t, func(t *testing.T) {
		b := &campaignSizes{SetBackend: pgleadertest.NewBackend()}
		ctx := context.Background()
		keys := keyNames("k", 60)
		for i, owner := range []string{"a", "c"} {
			mine := keys[20*i : 20*i+20]
			won, _, err := b.SetBackend.AcquireSet(ctx, "s", owner, mine, nil, time.Minute, 0, 20, 60, nil)
			if err != nil || len(won) != 20 {
				t.Fatalf("%s won %d of its 20 keys: %v", owner, len(won), err)
			}
			tokens := make([]int64, len(won))
			for j, l := range won {
				tokens[j] = l.Token
			}
			if _, err := b.SetBackend.RenewSet(ctx, "s", owner, mine, tokens, time.Minute, 20); err != nil {
				t.Fatal(err)
			}
		}
		r := startSet(t, b, setSpec("s"), keys, pgleader.SetOptions{Owner: "b", Lead: quickBody})
		spec := r.set.Spec()
		time.Sleep(spec.CampaignEvery) // the first campaign
		synctest.Wait()
		time.Sleep(spec.CampaignEvery - time.Millisecond)
		synctest.Wait()
		b.mu.Lock()
		sizes := slices.Clone(b.sizes)
		b.mu.Unlock()
		if h := held(r)[0]; h != 20 {
			t.Errorf("b held %d of the 20 free keys within CampaignEvery of its first campaign (campaigns of %v keys); want all", h, sizes)
		}
		r.stop(t)
	})
}

// TestSetNoCampaignAtShare: replicas at their share, with no key free, send
// no campaign, and one tick per RenewEvery each.
func TestSetNoCampaignAtShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := pgleadertest.NewBackend()
		sets := startReplicas(t, keyNames("k", 30), b, b, b)
		time.Sleep(12 * time.Second)
		synctest.Wait()
		if h := held(sets...); h[0] != 10 || h[1] != 10 || h[2] != 10 {
			t.Fatalf("held %v; want 10 each", h)
		}
		spec := sets[0].set.Spec()
		campaigns, ticks := countOps(b, pgleadertest.OpAcquireSet, ""), countOps(b, pgleadertest.OpRenewSet, "")
		time.Sleep(30 * spec.RenewEvery)
		synctest.Wait()
		if n := countOps(b, pgleadertest.OpAcquireSet, "") - campaigns; n != 0 {
			t.Errorf("%d campaigns in 30 RenewEvery at the share; want 0", n)
		}
		if n := countOps(b, pgleadertest.OpRenewSet, "") - ticks; n > 3*30 {
			t.Errorf("%d ticks in 30 RenewEvery by 3 replicas; want at most 90", n)
		}
		for _, s := range sets {
			s.stop(t)
		}
	})
}

// TestSetDeathMovesEachKeyOnce: when a member dies, the others take its
// keys within TTL + CampaignEvery of its last tick, each key once, evenly,
// and move no other key. (Before, the member holding fewest could take
// all the free keys as "extra" and then give half away.)
func TestSetDeathMovesEachKeyOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := pgleadertest.NewBackend()
		views := []*crashable{{SetBackend: b}, {SetBackend: b}, {SetBackend: b}}
		keys := keyNames("k", 300)
		// r2 ticks 700 ms out of step with the others, so its lease lapses
		// between their ticks.
		sets := startReplicas(t, keys, views[0], views[1])
		time.Sleep(700 * time.Millisecond)
		sets = append(sets, startSet(t, views[2], setSpec("s"), keys, pgleader.SetOptions{Owner: "r2", Lead: quickBody}))
		time.Sleep(12 * time.Second)
		synctest.Wait()
		if h := held(sets...); h[0] != 100 || h[1] != 100 || h[2] != 100 {
			t.Fatalf("held %v; want 100 each", h)
		}
		spec := sets[0].set.Spec()
		var dead []string
		for _, tm := range sets[2].set.Terms() {
			dead = append(dead, tm.Key())
		}
		since := len(b.History())
		views[2].dead.Store(true)
		time.Sleep(2 * spec.TTL)
		synctest.Wait()
		if h := held(sets[:2]...); h[0] != 150 || h[1] != 150 {
			t.Errorf("held %v after the death; want 150 each", h)
		}
		var lastTick time.Time
		moves := map[string][]pgleadertest.Event{}
		for _, e := range b.History() {
			if e.Op == pgleadertest.OpRenewSet && e.Owner == "r2" {
				lastTick = e.At
			}
		}
		for _, e := range b.History()[since:] {
			if e.Op == pgleadertest.OpAcquire && e.OK {
				moves[e.Key] = append(moves[e.Key], e)
			}
		}
		for _, k := range dead {
			if len(moves[k]) != 1 {
				t.Errorf("key %s of the dead member moved %d times; want once", k, len(moves[k]))
			} else if late := moves[k][0].At.Sub(lastTick); late > spec.TTL+spec.CampaignEvery {
				t.Errorf("key %s taken %v after the dead member's last tick; want at most TTL + CampaignEvery", k, late)
			}
			delete(moves, k)
		}
		for k, es := range moves {
			t.Errorf("key %s, not the dead member's, moved %d times", k, len(es))
		}
		views[2].dead.Store(false)
		for _, s := range sets {
			s.stop(t)
		}
		assertNoOverlap(t, b)
	})
}

// slowReleases makes each ReleaseSet take delay, failing as a statement
// cancelled by its context would.
type slowReleases struct {
	pgleader.SetBackend
	delay time.Duration
}

func (s *slowReleases) ReleaseSet(ctx context.Context, set, owner string, keys []string, tokens []int64, handOff []bool, leave bool) ([]bool, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.SetBackend.ReleaseSet(ctx, set, owner, keys, tokens, handOff, leave)
}

// TestSetReleasesManyKeysPastReleaseTimeout: a statement ending thousands
// of terms may take longer than ReleaseTimeout (a second for 33,000 keys);
// it is given ReleaseTimeout per thousand keys, so it ends them rather
// than leave every key to its expiry.
func TestSetReleasesManyKeysPastReleaseTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := pgleadertest.NewBackend()
		keys := keyNames("k", 2500)
		r := startSet(t, &slowReleases{SetBackend: b, delay: time.Second}, setSpec("s"), keys, pgleader.SetOptions{Owner: "a", Lead: quickBody})
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if h := held(r)[0]; h != 2500 {
			t.Fatalf("held %d; want 2500", h)
		}
		r.stop(t)
		for _, k := range []string{keys[0], keys[1249], keys[2499]} {
			if l, _ := b.Lease(context.Background(), k); l.Held() {
				t.Errorf("key %s still held after the stop: the release of 2,500 keys, taking 1 s, was cut off", k)
			}
		}
	})
}

// slowSet answers campaigns and ticks late, as a loaded database does at
// 100,000 keys.
type slowSet struct {
	pgleader.SetBackend
	acquire, renew time.Duration
}

func (b *slowSet) AcquireSet(ctx context.Context, set, owner string, keys []string, floors []int64, ttl time.Duration, held, extra, total int, confirm []string) ([]pgleader.Lease, int, error) {
	time.Sleep(b.acquire)
	return b.SetBackend.AcquireSet(ctx, set, owner, keys, floors, ttl, held, extra, total, confirm)
}

func (b *slowSet) RenewSet(ctx context.Context, set, owner string, keys []string, tokens []int64, ttl time.Duration, held int) (pgleader.SetRenewal, error) {
	time.Sleep(b.renew)
	return b.SetBackend.RenewSet(ctx, set, owner, keys, tokens, ttl, held)
}

// TestSetTicksForSlowCampaign: terms won by a campaign that took 1.7 s are
// renewed RenewEvery after that campaign was sent, not at the set's usual
// step, which came 1.5 s later: with ticks that take 0.6 s, that one was
// answered after the terms' yield instant, and every key was dropped and
// won again (seen at 100,000 keys after a cold start).
func TestSetTicksForSlowCampaign(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &slowSet{SetBackend: pgleadertest.NewBackend(), acquire: 1700 * time.Millisecond, renew: 600 * time.Millisecond}
		var mu sync.Mutex
		entered := 0
		body := func(ctx context.Context, term *pgleader.Term) error {
			mu.Lock()
			entered++
			mu.Unlock()
			<-term.Ending()
			return nil
		}
		r := startSet(t, b, setSpec("s"), keyNames("k", 10), pgleader.SetOptions{Owner: "a", Lead: body})
		time.Sleep(20 * time.Second)
		synctest.Wait()
		mu.Lock()
		n := entered
		mu.Unlock()
		if h := held(r)[0]; h != 10 || n != 10 {
			t.Errorf("after 20 s: held %d, bodies entered %d; want 10 and 10 (every term kept)", h, n)
		}
		r.stop(t)
	})
}

// TestSetForgedHintFlood: hints forged on the set's name every 10 ms, half
// claiming keys freed and half keys handed, cost a replica at its share at
// most one sweep of its parts (here 5: its home, then 30 keys in parts of
// 10 that never wrap past the last key) and ten campaigns that send no key
// per CampaignEvery; the set keeps its keys. (With the
// sweep counting confirmations as parts, every hint cost a campaign.)
func TestSetForgedHintFlood(t *testing.T) {
	defer pgleader.SetCampaignBudget(10)()
	synctest.Test(t, func(t *testing.T) {
		b := pgleadertest.NewBackend()
		views := []*campaignSizes{{SetBackend: b}, {SetBackend: b}}
		sets := startReplicas(t, keyNames("k", 60), views[0], views[1])
		time.Sleep(12 * time.Second)
		synctest.Wait()
		if h := held(sets...); h[0] != 30 || h[1] != 30 {
			t.Fatalf("held %v; want 30 each", h)
		}
		spec := sets[0].set.Spec()
		for _, v := range views {
			v.mu.Lock()
			v.sizes = nil
			v.mu.Unlock()
		}
		const flood = 10 * time.Second
		for i := range int(flood / (10 * time.Millisecond)) {
			kind := pgleader.EventReleased
			if i%2 == 1 {
				kind = pgleader.EventHandedOff
			}
			b.Forge(pgleader.Event{Kind: kind, Key: "s"})
			time.Sleep(10 * time.Millisecond)
		}
		synctest.Wait()
		periods := int(flood/spec.CampaignEvery) + 1 // and one for the flood's edges
		const sweep = 30/10 + 2
		for i, v := range views {
			v.mu.Lock()
			parts, confirms := 0, 0
			for _, n := range v.sizes {
				if n > 0 {
					parts++
				} else {
					confirms++
				}
			}
			v.mu.Unlock()
			if parts > sweep*periods || confirms > 10*periods {
				t.Errorf("replica %d: %d campaigns with keys and %d without in %v of forged hints; want at most %d and %d",
					i, parts, confirms, flood, sweep*periods, 10*periods)
			}
			t.Logf("replica %d: %d campaigns with keys, %d without (bounds %d, %d)", i, parts, confirms, sweep*periods, 10*periods)
		}
		if h := held(sets...); h[0] != 30 || h[1] != 30 {
			t.Errorf("held %v after the flood; want 30 each", h)
		}
		for _, s := range sets {
			s.stop(t)
		}
	})
}

// TestSetColdStartHomes: replicas that start together each take their
// share from their own run of the sorted keys (the run whose place is the
// replica's among the owners, sorted) with their first campaigns, which
// send no key beyond that run, so no campaign asks for keys another takes:
// with a budget above the home's size, and with parts of 40 keys.
func TestSetColdStartHomes(t *testing.T) {
	for _, budget := range []int{0, 40} {
		t.Run(fmt.Sprintf("budget=%d", budget), func(t *testing.T) {
			if budget > 0 {
				defer pgleader.SetCampaignBudget(budget)()
			}
			synctest.Test(t, func(t *testing.T) {
				b := pgleadertest.NewBackend()
				view := &campaignSizes{SetBackend: b}
				keys := keyNames("k", 300)
				sets := startReplicas(t, keys, view, view, view)
				spec := sets[0].set.Spec()
				time.Sleep(spec.CampaignEvery + 100*time.Millisecond)
				synctest.Wait()
				view.mu.Lock()
				for _, p := range view.parts {
					if p.sent > 100 {
						t.Errorf("%s's campaign sent %d keys; want at most its home's 100", p.owner, p.sent)
					}
				}
				view.mu.Unlock()
				for i, r := range sets {
					var got []string
					for _, term := range r.set.Terms() {
						got = append(got, term.Key())
					}
					if want := keys[100*i : 100*i+100]; !slices.Equal(got, want) {
						t.Errorf("r%d holds %d keys (%v ...) after the first campaigns; want its run %s to %s", i, len(got), got[:min(3, len(got))], want[0], want[99])
					}
				}
				if n := countOps(b, pgleadertest.OpAcquireSet, ""); n > 9 {
					t.Errorf("%d campaigns; want at most 9 (three parts each)", n)
				}
				for _, r := range sets {
					r.stop(t)
				}
			})
		})
	}
}

// TestSetDeathSplitsByHome: after a member's death the survivors split its
// keys by their homes among the members left, each asking first for keys
// the other does not (the homes are worked out again when the members
// change): with three replicas on 300 keys, in parts of 40, the death of
// the middle one leaves the first holding keys 0-149 and the last 150-299,
// each having won every campaign it sent for them.
func TestSetDeathSplitsByHome(t *testing.T) {
	defer pgleader.SetCampaignBudget(40)()
	synctest.Test(t, func(t *testing.T) {
		b := &campaignSizes{SetBackend: pgleadertest.NewBackend()}
		views := []*crashable{{SetBackend: b}, {SetBackend: b}, {SetBackend: b}}
		keys := keyNames("k", 300)
		sets := startReplicas(t, keys, views[0], views[1], views[2])
		time.Sleep(12 * time.Second)
		synctest.Wait()
		if h := held(sets...); h[0] != 100 || h[1] != 100 || h[2] != 100 {
			t.Fatalf("held %v; want 100 each", h)
		}
		spec := sets[0].set.Spec()
		b.mu.Lock()
		since := len(b.parts)
		b.mu.Unlock()
		views[1].dead.Store(true)
		time.Sleep(2 * spec.TTL)
		synctest.Wait()
		for i, want := range map[int][]string{0: keys[:150], 2: keys[150:]} {
			var got []string
			for _, term := range sets[i].set.Terms() {
				got = append(got, term.Key())
			}
			if !slices.Equal(got, want) {
				t.Errorf("r%d holds %d keys (%v ...) after r1's death; want %s to %s", i, len(got), got[:min(3, len(got))], want[0], want[len(want)-1])
			}
		}
		b.mu.Lock()
		for _, p := range b.parts[since:] {
			if p.owner != "r1" && p.won == 0 {
				t.Errorf("%s's campaign for %d keys won nothing (err %v); want every campaign after the death to win", p.owner, p.sent, p.err)
			}
		}
		b.mu.Unlock()
		views[1].dead.Store(false)
		for _, s := range sets {
			s.stop(t)
		}
	})
}

// TestSetNoShedWhileKeysFree: a member at the ceiling of its share does not
// step down from a key for a member two or more below while keys are free
// (that member takes a free key instead). At a cold start of 100 keys over
// three replicas the last, whose home holds 34 keys (the ceiling), wins
// them first and ticks while the others, whose campaigns are slow, hold
// none as far as it knows: it keeps all 34.
func TestSetNoShedWhileKeysFree(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := pgleadertest.NewBackend()
		slow := &slowCampaigns{SetBackend: b, delay: 2500 * time.Millisecond}
		keys := keyNames("k", 100)
		var mu sync.Mutex
		ended := 0
		sets := startReplicas(t, keys, slow, slow)
		sets = append(sets, startSet(t, b, setSpec("s"), keys, pgleader.SetOptions{Owner: "r2", Lead: quickBody,
			Observer: pgleader.ObserverFunc(func(o pgleader.Observation) {
				if o.Kind == pgleader.ObserveTermEnded {
					mu.Lock()
					ended++
					mu.Unlock()
				}
			})}))
		time.Sleep(12 * time.Second)
		synctest.Wait()
		if h := held(sets...); h[0] != 33 || h[1] != 33 || h[2] != 34 {
			t.Errorf("held %v; want 33, 33 and 34 (each its home)", h)
		}
		mu.Lock()
		if ended != 0 {
			t.Errorf("r2 ended %d terms in the cold start; want none", ended)
		}
		mu.Unlock()
		for _, s := range sets {
			s.stop(t)
		}
	})
}

// releaseCalls records each ReleaseSet: how many keys, and whether it left.
type releaseCalls struct {
	pgleader.SetBackend
	mu    sync.Mutex
	calls [][2]int // keys, leave (0 or 1)
}

func (c *releaseCalls) ReleaseSet(ctx context.Context, set, owner string, keys []string, tokens []int64, handOff []bool, leave bool) ([]bool, error) {
	c.mu.Lock()
	l := 0
	if leave {
		l = 1
	}
	c.calls = append(c.calls, [2]int{len(keys), l})
	c.mu.Unlock()
	return c.SetBackend.ReleaseSet(ctx, set, owner, keys, tokens, handOff, leave)
}

// TestSetLeavesWithItsHandOff: a stopping replica leaves the set's members
// in the statement that hands off its last terms, not before: a leave sent
// first had the others count one member fewer while it still held its
// keys, and campaign for keys that were not free before confirming the
// ones handed to them.
func TestSetLeavesWithItsHandOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := pgleadertest.NewBackend()
		rc := &releaseCalls{SetBackend: b}
		sets := startReplicas(t, keyNames("k", 20), b, rc)
		time.Sleep(12 * time.Second)
		synctest.Wait()
		if h := held(sets...); h[0] != 10 || h[1] != 10 {
			t.Fatalf("held %v; want 10 each", h)
		}
		sets[1].stop(t)
		time.Sleep(time.Second)
		synctest.Wait()
		rc.mu.Lock()
		calls := slices.Clone(rc.calls)
		rc.mu.Unlock()
		keys := 0
		for i, c := range calls {
			keys += c[0]
			if c[1] == 1 && (i != len(calls)-1 || c[0] == 0) {
				t.Errorf("release statements (keys, leave) %v: a leave before or without the last terms' hand-off", calls)
			}
		}
		if len(calls) == 0 || calls[len(calls)-1][1] != 1 || keys != 10 {
			t.Errorf("release statements (keys, leave) %v; want the 10 keys handed off, the last statement leaving", calls)
		}
		if h := held(sets[0]); h[0] != 20 {
			t.Errorf("r0 held %d keys a second after r1's stop; want all 20", h[0])
		}
		sets[0].stop(t)
	})
}

// TestSetKeysFollowAddRemove: Keys returns the keys sorted as Add and
// Remove leave them (the Set keeps them sorted between changes), and a
// caller's change to the slice returned does not reach the set.
func TestSetKeysFollowAddRemove(t *testing.T) {
	s, err := pgleader.NewSet(pgleadertest.NewBackend(), setSpec("s"), []string{"c", "a"}, pgleader.SetOptions{Owner: "o", Lead: quickBody})
	if err != nil {
		t.Fatal(err)
	}
	got := s.Keys()
	if !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("Keys() = %v; want [a c]", got)
	}
	got[0] = "z"
	if err := s.Add("b", "d"); err != nil {
		t.Fatal(err)
	}
	s.Remove("c")
	if got := s.Keys(); !slices.Equal(got, []string{"a", "b", "d"}) {
		t.Fatalf("Keys() after Add(b, d) and Remove(c) = %v; want [a b d]", got)
	}
}

// staleCounts reports every other member (or only the member only) as
// holding one key fewer than it does, as a tick that is a moment old can.
type staleCounts struct {
	pgleader.SetBackend
	owner string
	only  string
	on    atomic.Bool
}

func (c *staleCounts) RenewSet(ctx context.Context, set, owner string, keys []string, tokens []int64, ttl time.Duration, held int) (pgleader.SetRenewal, error) {
	d, err := c.SetBackend.RenewSet(ctx, set, owner, keys, tokens, ttl, held)
	for i := range d.Members {
		if !c.on.Load() {
			break
		}
		if o := d.Members[i].Owner; o != c.owner && (c.only == "" || o == c.only) && d.Members[i].Held > 0 {
			d.Members[i].Held--
		}
	}
	return d, err
}

// TestSetFruitlessSweepWaitsForTick: a replica below its share whose ticks
// show keys free that are not (31 keys held 11, 10, 10; one at 10 is
// told the others hold 19 where they hold 21) sends at most one sweep of its parts
// per tick, not one per CampaignEvery. Beside ticks of 33,333 keys such
// sweeps of 50,000-key parts made the ticks outlast their deadline.
func TestSetFruitlessSweepWaitsForTick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := pgleadertest.NewBackend()
		keys := keyNames("k", 31)
		var stale []*staleCounts
		var views []pgleader.SetBackend
		for i := range 3 {
			stale = append(stale, &staleCounts{SetBackend: b, owner: fmt.Sprintf("r%d", i)})
			views = append(views, stale[i])
		}
		sets := startReplicas(t, keys, views...)
		time.Sleep(12 * time.Second)
		synctest.Wait()
		h := held(sets...)
		low := slices.Index(h, 10)
		if h[0]+h[1]+h[2] != 31 || low < 0 {
			t.Fatalf("held %v; want 31 in all, 10 by one", h)
		}
		stale[low].on.Store(true)
		owner := fmt.Sprintf("r%d", low)
		campaigns, ticks := countOps(b, pgleadertest.OpAcquireSet, owner), countOps(b, pgleadertest.OpRenewSet, owner)
		time.Sleep(20 * time.Second)
		synctest.Wait()
		campaigns, ticks = countOps(b, pgleadertest.OpAcquireSet, owner)-campaigns, countOps(b, pgleadertest.OpRenewSet, owner)-ticks
		const sweep = 3 // its home, then the rest, split where it wraps
		if campaigns > sweep*(ticks+1) {
			t.Errorf("%s sent %d campaigns beside %d ticks in 20 s; want at most one sweep (%d) per tick", owner, campaigns, ticks, sweep)
		}
		t.Logf("%s: %d campaigns, %d ticks", owner, campaigns, ticks)
		for _, s := range sets {
			s.stop(t)
		}
	})
}

// TestSetDeadMemberSweptOnce: a member dies after a tick that counted one
// key fewer than it held, so the survivors' counts show a key free that is
// not, until its row lapses. Each survivor sweeps its parts for that key
// once, not once per tick: the dead member's row is never renewed, so the
// counts cannot get newer until it lapses. (A bench run at 100,000 keys had
// both survivors sweep 50,000-key parts every RenewEvery until the lapse,
// beside their ticks and right before the take.) Its keys are then taken.
func TestSetDeadMemberSweptOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := pgleadertest.NewBackend()
		keys := keyNames("k", 31)
		// The survivors see r2's count one short once it dies.
		stale := []*staleCounts{{SetBackend: b, owner: "r0", only: "r2"}, {SetBackend: b, owner: "r1", only: "r2"}}
		dying := &crashable{SetBackend: b}
		sets := startReplicas(t, keys, stale[0], stale[1], dying)
		time.Sleep(12 * time.Second)
		synctest.Wait()
		if h := held(sets...); h[0]+h[1]+h[2] != 31 {
			t.Fatalf("held %v; want all 31", h)
		}
		spec := sets[0].set.Spec()
		stale[0].on.Store(true)
		stale[1].on.Store(true)
		dying.dead.Store(true)
		var lastTick time.Time
		for _, e := range b.History() {
			if e.Op == pgleadertest.OpRenewSet && e.Owner == "r2" {
				lastTick = e.At
			}
		}
		before := []int{countOps(b, pgleadertest.OpAcquireSet, "r0"), countOps(b, pgleadertest.OpAcquireSet, "r1")}
		died := time.Now()
		time.Sleep(time.Until(lastTick.Add(spec.TTL - 100*time.Millisecond)))
		synctest.Wait()
		const sweep = 3 // its home, then the rest, split where it wraps
		for i, n := range before {
			owner := fmt.Sprintf("r%d", i)
			t.Logf("%s: %d campaigns; held %v", owner, countOps(b, pgleadertest.OpAcquireSet, owner)-n, held(sets...))
			if c := countOps(b, pgleadertest.OpAcquireSet, owner) - n; c > sweep {
				t.Errorf("%s sent %d campaigns in the %v between r2's death and its row's lapse; want one sweep at most (%d)",
					owner, c, time.Since(died), sweep)
			}
		}
		time.Sleep(2 * spec.TTL)
		synctest.Wait()
		if h := held(sets[:2]...); h[0]+h[1] != 31 {
			t.Errorf("the survivors hold %v after the lapse; want all 31", h)
		}
		dying.dead.Store(false)
		for _, s := range sets {
			s.stop(t)
		}
		assertNoOverlap(t, b)
	})
}
