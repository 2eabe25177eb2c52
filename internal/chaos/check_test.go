package chaos_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgleader/pgleader/internal/chaos"
	"github.com/pgleader/pgleader/pgleader"
)

// These tests feed the checker hand-written histories: a clean one, and one
// for each way a property can break, which it must report.

var (
	t0       = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	testSpec = pgleader.Spec{TTL: 3 * time.Second, CampaignEvery: 250 * time.Millisecond}
)

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

// story builds a history and the tables a run would leave.
type story struct {
	events []chaos.Event
	tables chaos.Tables
	server string // the primary that accepts units from now on
}

type term struct {
	s     *story
	key   string // "" for a one-key history
	owner string
	token int64
	start time.Time
	seq   int
}

// acquire records a won acquire at start ms with a 3s lease.
func (s *story) acquire(owner string, token int64, start int) *term {
	s.events = append(s.events, chaos.Event{Kind: chaos.KindAcquire, Result: chaos.OK, Owner: owner, Token: token,
		Term: ms(start), DB: ms(start), Expires: ms(start + 3000), Sent: ms(start - 1), Local: ms(start + 1)})
	return &term{s: s, owner: owner, token: token, start: ms(start)}
}

// acquireKey records a won acquire of key, as acquire does.
func (s *story) acquireKey(key, owner string, token int64, start int) *term {
	t := s.acquire(owner, token, start)
	t.key = key
	s.events[len(s.events)-1].Key = key
	return t
}

func (t *term) event(kind chaos.Kind, result chaos.Result) chaos.Event {
	return chaos.Event{Kind: kind, Result: result, Key: t.key, Owner: t.owner, Token: t.token, Term: t.start}
}

// renew records a renewal at ms with a 3s lease.
func (t *term) renew(at int) *term {
	e := t.event(chaos.KindRenew, chaos.OK)
	e.DB, e.Expires = ms(at), ms(at+3000)
	t.s.events = append(t.s.events, e)
	return t
}

func (t *term) release(at int) {
	e := t.event(chaos.KindRelease, chaos.OK)
	e.DB = ms(at)
	t.s.events = append(t.s.events, e)
}

// write records the next unit, acknowledged, committed at ms.
func (t *term) write(at int) *term {
	t.seq++
	t.unit(t.seq, at, true)
	return t
}

// unit logs unit seq at ms, and its acknowledgement if acked.
func (t *term) unit(seq, at int, acked bool) {
	id := int64(len(t.s.tables.Units) + 1)
	t.s.tables.Units = append(t.s.tables.Units, chaos.Unit{ID: id, Key: t.key, Owner: t.owner, Token: t.token, TermStart: t.start, Seq: seq,
		LoggedAt: ms(at), Server: t.s.server})
	if t.key != "" {
		if t.s.tables.Fences == nil {
			t.s.tables.Fences = map[string]int64{}
		}
		t.s.tables.Fences[t.key] = max(t.s.tables.Fences[t.key], t.token)
	}
	t.s.tables.Fence = max(t.s.tables.Fence, t.token)
	if acked {
		t.ack(seq, id, at)
	}
}

// ack records the acknowledgement of unit seq as row id, committed at ms
// on the current server.
func (t *term) ack(seq int, id int64, at int) {
	e := t.event(chaos.KindWrite, chaos.OK)
	e.Seq, e.ID, e.DB, e.Checked, e.Sent, e.Server = seq, id, ms(at), ms(at-2), ms(at-1), t.s.server
	t.s.events = append(t.s.events, e)
}

// lost records the next unit as acknowledged by the current server as row
// id, committed at ms, but not in the log: lost in a failover.
func (t *term) lost(id int64, at int) *term {
	t.seq++
	t.ack(t.seq, id, at)
	return t
}

// failover records that the primary was killed at ms, the standby named
// next promoted at promoted ms, and every path moved to it at moved ms.
func (s *story) failover(next string, killed, promoted, moved int) {
	s.events = append(s.events, chaos.Event{Kind: chaos.KindFault, Replica: -1, Fault: chaos.FaultFailover, Local: ms(killed)},
		chaos.Event{Kind: chaos.KindFailover, Replica: -1, Prev: s.server, Server: next, Sent: ms(killed), DB: ms(promoted), Local: ms(moved)})
	s.server = next
}

func (s *story) heal(at int) {
	s.events = append(s.events, chaos.Event{Kind: chaos.KindHeal, Replica: -1, DB: ms(at)})
}

func (s *story) check() *chaos.Report { return chaos.Check(s.events, s.tables, testSpec, false) }

// clean is a history that breaks nothing: a heals, a leads, releases, b
// leads.
func clean() *story {
	s := &story{}
	s.heal(0)
	a := s.acquire("a", 1, 10)
	a.write(20).write(1000).renew(1000).write(2000).release(2100)
	b := s.acquire("b", 2, 2200)
	b.write(2210).write(2300)
	return s
}

func expect(t *testing.T, r *chaos.Report, property, detail string) {
	t.Helper()
	for _, v := range r.Violations {
		if v.Property == property && strings.Contains(v.Detail, detail) {
			t.Logf("reported: %s", v)
			return
		}
	}
	t.Fatalf("want a violation of property %s mentioning %q; got %v", property, detail, r.Violations)
}

func TestCheckCleanHistory(t *testing.T) {
	t.Parallel()
	r := clean().check()
	if !r.OK() {
		t.Fatalf("violations in a clean history: %v", r.Violations)
	}
	if r.Terms != 2 || r.TermsWrote != 2 || r.Writes != 5 || r.Acked != 5 || len(r.Recoveries) != 1 || r.Recoveries[0] != 20*time.Millisecond {
		t.Fatalf("figures: %+v", r)
	}
}

func TestCheckOverlappingTerms(t *testing.T) {
	t.Parallel()
	s := clean()
	a := s.acquire("c", 3, 2500) // b's lease runs until 5200
	a.write(2600)
	expect(t, s.check(), chaos.PropNoOverlap, "held the lease until")
}

// TestCheckOverlapFromTheLeaseTable: the replica never heard its renewal's
// answer, but the lease table extended the lease; a term that began before
// that expiry overlaps it.
func TestCheckOverlapFromTheLeaseTable(t *testing.T) {
	t.Parallel()
	s := &story{}
	a := s.acquire("a", 1, 0)
	b := s.acquire("b", 2, 4000) // after the 3s the replica knows of, before the 5s the table granted
	a.write(10)
	b.write(4010)
	s.tables.Changes = []chaos.LeaseChange{
		{ID: 1, Op: "INSERT", At: ms(0)},
		{ID: 2, Op: "UPDATE", At: ms(0), NewHolder: "a", NewToken: 1, NewAcquired: ms(0), NewExpires: ms(3000)},
		{ID: 3, Op: "UPDATE", At: ms(2000), OldHolder: "a", OldToken: 1, OldAcquired: ms(0), OldExpires: ms(3000),
			NewHolder: "a", NewToken: 1, NewAcquired: ms(0), NewExpires: ms(5000)},
		{ID: 4, Op: "UPDATE", At: ms(4000), OldHolder: "a", OldToken: 1, OldAcquired: ms(0), OldExpires: ms(5000),
			NewHolder: "b", NewToken: 2, NewAcquired: ms(4000), NewExpires: ms(7000)},
	}
	r := s.check()
	expect(t, r, chaos.PropNoOverlap, "overlap 1s")

	s.acquire("ghost", 9, 8000) // a replica believes it won; the table never granted it
	expect(t, s.check(), chaos.PropLease, "never recorded")

	// The same write, as a hand-off by a, ends a's term: no overlap.
	s.tables.Changes[3].HandedOff = true
	for _, v := range s.check().Violations {
		if v.Property == chaos.PropNoOverlap {
			t.Errorf("a hand-off counted as an overlap: %s", v)
		}
	}
}

// TestCheckWipeEndsTheLease: after the lease rows are wiped, a new term may
// begin before the old one's expiry, and the old one's writes after the
// wipe are the fence's business, not a breach of the lease.
func TestCheckWipeEndsTheLease(t *testing.T) {
	t.Parallel()
	s := &story{}
	a := s.acquire("a", 5, 0)
	a.write(100)
	s.events = append(s.events, chaos.Event{Kind: chaos.KindWipe, Replica: -1, DB: ms(500)})
	a.write(600)
	b := s.acquire("b", 6, 700)
	b.write(710)
	r := s.check()
	if !r.OK() || r.WritesAfterWipe != 1 {
		t.Fatalf("violations %v, writes after wipe %d; want none and 1", r.Violations, r.WritesAfterWipe)
	}
}

func TestCheckWriteAfterLeaseEnded(t *testing.T) {
	t.Parallel()
	s := &story{}
	a := s.acquire("a", 1, 0)
	a.write(100).write(3100) // the lease expired at 3000
	expect(t, s.check(), chaos.PropWithinLease, "100ms after its lease ended")

	// The same lateness explained by a pause between the Live check and
	// the send is pgleader's documented limit, counted, not a breach.
	for i := range s.events {
		if s.events[i].Kind == chaos.KindWrite && s.events[i].Seq == 2 {
			s.events[i].Checked = ms(2900)
		}
	}
	r := s.check()
	if !r.OK() || r.LateAfterPause != 1 {
		t.Fatalf("violations %v, late after pause %d; want none and 1", r.Violations, r.LateAfterPause)
	}
}

// A stall of the harness's own process (its proxies are the network)
// between a unit's Live check and its commit excuses as much lateness as
// it lasted, and no more; a stall outside that span excuses nothing.
func TestCheckWriteAfterHarnessStall(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		from, to    int // the stall, in ms
		wantExcused bool
	}{
		{"between check and commit", 2950, 3010, true},
		{"shorter than the lateness", 2950, 2990, false},
		{"from before the check", 2850, 2950, false},
		{"to after the commit", 3000, 3300, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := &story{}
			a := s.acquire("a", 1, 0)
			a.write(100).write(3050) // the lease expired at 3000
			for i := range s.events {
				if s.events[i].Kind == chaos.KindWrite && s.events[i].Seq == 2 {
					// Checked and sent at once, 150 ms before the commit.
					s.events[i].Checked, s.events[i].Sent = ms(2900), ms(2900)
				}
			}
			s.events = append(s.events, chaos.Event{Kind: chaos.KindStall, Replica: -1, Sent: ms(c.from), Local: ms(c.to)})
			r := s.check()
			if r.Stalls != 1 || r.MaxStall != time.Duration(c.to-c.from)*time.Millisecond {
				t.Fatalf("stalls %d, longest %v; want 1, %dms", r.Stalls, r.MaxStall, c.to-c.from)
			}
			if c.wantExcused {
				if !r.OK() || r.LateAfterStall != 1 {
					t.Fatalf("violations %v, late after a stall %d; want none and 1 (%+v)", r.Violations, r.LateAfterStall, r)
				}
				return
			}
			if r.LateAfterStall != 0 {
				t.Fatalf("late after a stall %d; want 0", r.LateAfterStall)
			}
			expect(t, r, chaos.PropWithinLease, "50ms after its lease ended")
		})
	}
}

func TestCheckDecreasingTokens(t *testing.T) {
	t.Parallel()
	s := &story{}
	a := s.acquire("a", 1, 0)
	a.write(10)
	a.release(20)
	b := s.acquire("b", 2, 30)
	b.write(40)
	a.unit(2, 50, true) // a stale write the store accepted
	expect(t, s.check(), chaos.PropMonotonic, "token 1")
}

func TestCheckTwoTermsOfOneToken(t *testing.T) {
	t.Parallel()
	s := &story{}
	a := s.acquire("a", 4, 0)
	a.write(10)
	s.events = append(s.events, chaos.Event{Kind: chaos.KindWipe, Replica: -1, DB: ms(15)})
	b := s.acquire("b", 4, 20) // the counter restarted without a floor
	b.write(30)
	expect(t, s.check(), chaos.PropMonotonic, "two terms with token 4")
}

func TestCheckLostUnit(t *testing.T) {
	t.Parallel()
	s := clean()
	s.tables.Units = append(s.tables.Units[:1], s.tables.Units[2:]...) // acknowledged, then gone
	expect(t, s.check(), chaos.PropNoLoss, "acknowledged as row 2")
}

func TestCheckGapInSeqs(t *testing.T) {
	t.Parallel()
	s := &story{}
	a := s.acquire("a", 1, 0)
	a.unit(1, 10, true)
	a.unit(2, 20, true)
	a.unit(4, 30, true)
	expect(t, s.check(), chaos.PropNoLoss, "logged seq 4 where seq 3 was due")

	s = &story{}
	s.acquire("a", 1, 0).unit(2, 10, false)
	expect(t, s.check(), chaos.PropNoLoss, "logged seq 2 where seq 1 was due")
}

func TestCheckSlowRecovery(t *testing.T) {
	t.Parallel()
	s := &story{}
	s.heal(0)
	s.acquire("a", 1, 3400).write(3500) // bound: TTL 3s + CampaignEvery 250ms
	expect(t, s.check(), chaos.PropRecovery, "3.5s later")

	s.heal(4000) // and nobody writes after this one
	expect(t, s.check(), chaos.PropRecovery, "no unit was accepted after the heal")
}

// TestCheckSetRecovery: a set's keys are given YieldGrace + ReleaseTimeout +
// CampaignEvery more (a member that just stepped down holds its
// campaigns), and no more than that.
func TestCheckSetRecovery(t *testing.T) {
	t.Parallel()
	spec := testSpec
	spec.YieldGrace, spec.ReleaseTimeout = 500*time.Millisecond, 250*time.Millisecond
	if got, want := chaos.RecoveryBound(spec, true), 4250*time.Millisecond; got != want {
		t.Fatalf("RecoveryBound(set) = %v, want %v", got, want)
	}
	s := &story{}
	s.heal(0)
	s.acquire("a", 1, 3900).write(4000) // over an elector's 3.25s, within a set's 4.25s
	if r := chaos.Check(s.events, s.tables, spec, true); len(r.Violations) != 0 {
		t.Fatalf("set run: %v", r.Violations)
	}
	expect(t, chaos.Check(s.events, s.tables, spec, false), chaos.PropRecovery, "4s later")

	s = &story{}
	s.heal(0)
	s.acquire("a", 1, 4300).write(4400)
	expect(t, chaos.Check(s.events, s.tables, spec, true), chaos.PropRecovery, "4.4s later (bound 4.25s)")
}

// TestCheckRecoveryAfterRefusals: after a wipe, a replica without a
// FenceFloor climbs to the fence one refused claim at a time; property 4
// allows RefusalCost for each refusal after the heal, and no more.
func TestCheckRecoveryAfterRefusals(t *testing.T) {
	t.Parallel()
	spec := testSpec
	spec.CampaignEvery, spec.ReleaseTimeout = 250*time.Millisecond, 250*time.Millisecond
	if got, want := chaos.RefusalCost(spec), 500*time.Millisecond; got != want {
		t.Fatalf("RefusalCost = %v, want %v", got, want)
	}
	bound := chaos.RecoveryBound(spec, true)
	story := func(refusals int, accepted time.Duration) *story {
		s := &story{}
		s.heal(0)
		for i := range refusals {
			tm := s.acquire("a", int64(i+1), 10+i*500)
			s.events = append(s.events, chaos.Event{Kind: chaos.KindClaim, Result: chaos.Refused, Owner: "a",
				Token: tm.token, Term: tm.start, Sent: ms(20 + i*500), Local: ms(30 + i*500)})
			tm.release(40 + i*500)
		}
		at := int(accepted / time.Millisecond)
		s.acquire("a", int64(refusals+1), at-10).write(at)
		return s
	}
	// Four refusals: the bound grows by 2s.
	if r := chaos.Check(story(4, bound+1900*time.Millisecond).events, story(4, bound+1900*time.Millisecond).tables, spec, true); len(r.Violations) != 0 {
		t.Fatalf("recovery within the bound plus four refusals: %v", r.Violations)
	}
	s := story(4, bound+2100*time.Millisecond)
	expect(t, chaos.Check(s.events, s.tables, spec, true), chaos.PropRecovery, "later (bound")
	// Without refusals, the plain bound.
	s = story(0, bound+100*time.Millisecond)
	expect(t, chaos.Check(s.events, s.tables, spec, true), chaos.PropRecovery, "later (bound")
}

// failoverStory is an asynchronous failover that loses acknowledged rows,
// which the checker must excuse. On pg1, term a (token 1) wrote units 1
// and 2 and renewed at 1000; all of that reached the standby pg2. Then
// replication lagged: a renewed at 2000, wrote unit 3 (row 3) and
// released; b won token 2 and wrote its unit 1 (row 4). pg1 was killed at
// 4000 and pg2 promoted; its grace ran until about 7600. c then drew token
// 2 again (pg2's counter had only a's term), claimed (the fence on pg2 was
// 1) and wrote, its unit drawing row id 3 again (the sequence's advance
// was lost too).
func failoverStory() (s *story, a, b, c *term) {
	s = &story{server: "pg1"}
	s.heal(0)
	a = s.acquire("a", 1, 10)
	a.write(20).renew(1000).write(1500)
	a.renew(2000).lost(3, 2500).release(3100)
	b = s.acquire("b", 2, 3200)
	b.lost(4, 3300)
	s.failover("pg2", 4000, 4500, 4600)
	c = s.acquire("c", 2, 7700)
	c.write(7710).write(7800)
	s.tables.Changes = []chaos.LeaseChange{
		{ID: 1, Op: "INSERT", At: ms(10), Server: "pg1"},
		{ID: 2, Op: "UPDATE", At: ms(10), NewHolder: "a", NewToken: 1, NewAcquired: ms(10), NewExpires: ms(3010), Server: "pg1"},
		{ID: 3, Op: "UPDATE", At: ms(1000), OldHolder: "a", OldToken: 1, OldAcquired: ms(10), OldExpires: ms(3010),
			NewHolder: "a", NewToken: 1, NewAcquired: ms(10), NewExpires: ms(4000), Server: "pg1"},
		// pg2 inherited the row as of change 3: a's term, until 4000.
		{ID: 4, Op: "UPDATE", At: ms(7700), OldHolder: "a", OldToken: 1, OldAcquired: ms(10), OldExpires: ms(4000),
			NewHolder: "c", NewToken: 2, NewAcquired: ms(7700), NewExpires: ms(10700), Server: "pg2"},
	}
	return s, a, b, c
}

func TestCheckFailoverExcusesLostRows(t *testing.T) {
	t.Parallel()
	s, _, _, _ := failoverStory()
	r := s.check()
	if !r.OK() {
		t.Fatalf("violations in a failover that only lost what async replication loses: %v", r.Violations)
	}
	if r.LostUnits != 2 || r.LostTerms != 1 || r.Terms != 3 || r.Writes != 4 || r.Acked != 6 {
		t.Fatalf("lost units %d, lost terms %d, terms %d, writes %d, acked %d; want 2, 1, 3, 4, 6",
			r.LostUnits, r.LostTerms, r.Terms, r.Writes, r.Acked)
	}
	if len(r.Failovers) != 1 || r.Failovers[0].ToLeader != 3200*time.Millisecond || r.Failovers[0].ToWrite != 3210*time.Millisecond {
		t.Fatalf("failover figures %+v; want the next term 3.2s and its first write 3.21s after the promotion", r.Failovers)
	}
}

// TestCheckFailoverViolations: what the checker excuses after a failover
// cannot hide a breach of the fence properties, on either server.
func TestCheckFailoverViolations(t *testing.T) {
	t.Parallel()
	t.Run("two terms live across the failover", func(t *testing.T) {
		t.Parallel()
		// c is granted on pg2 at 4700, while b's term, lost with pg1,
		// runs until 6200: the grace did not hold.
		s, _, _, _ := failoverStory()
		s.acquire("d", 3, 4700).write(4710)
		expect(t, s.check(), chaos.PropNoOverlap, "term (b, token 2")
	})
	t.Run("older term written on the new primary after a newer one", func(t *testing.T) {
		t.Parallel()
		// b's token 2 reaches pg2 after c's token 2 wrote there: the same
		// token from two terms.
		s, _, b, _ := failoverStory()
		b.write(7900)
		expect(t, s.check(), chaos.PropMonotonic, "two terms with token 2 both wrote")
	})
	t.Run("lower token on the new primary", func(t *testing.T) {
		t.Parallel()
		s, a, _, _ := failoverStory()
		a.write(7900)
		expect(t, s.check(), chaos.PropMonotonic, "with token 1")
	})
	t.Run("stale write on the lost primary", func(t *testing.T) {
		t.Parallel()
		// pg1 accepted a's token 1 after b's token 2: lost or not, the
		// fence failed there.
		s, a, _, _ := failoverStory()
		s.server = "pg1"
		a.lost(5, 3400)
		expect(t, s.check(), chaos.PropMonotonic, "(lost with pg1)")
	})
	t.Run("a loss that is not a lagging suffix", func(t *testing.T) {
		t.Parallel()
		// a's unit 1 is gone but a later unit of pg1's survived: not what
		// replaying WAL in order can do.
		s, _, _, _ := failoverStory()
		s.tables.Units = s.tables.Units[1:]
		expect(t, s.check(), chaos.PropNoLoss, "acknowledged as row 1 by pg1")
	})
	t.Run("a loss on the surviving primary", func(t *testing.T) {
		t.Parallel()
		s, _, _, _ := failoverStory()
		s.tables.Units = s.tables.Units[:len(s.tables.Units)-1]
		expect(t, s.check(), chaos.PropNoLoss, "by pg2, which the log does not hold")
	})
	t.Run("a term the new primary granted but did not record", func(t *testing.T) {
		t.Parallel()
		s, _, _, _ := failoverStory()
		s.acquire("e", 3, 12000)
		expect(t, s.check(), chaos.PropLease, "never recorded")
	})
}

// setStory is a clean history of a set's two keys: on each key one term
// writes, releases, and the next one writes. The keys' terms are live at
// the same time, with tokens that interleave across keys in the log,
// which only a checker that partitions by key accepts.
func setStory() (s *story, b2 *term) {
	s = &story{}
	s.heal(0)
	a1 := s.acquireKey("k1", "a", 5, 10)
	b1 := s.acquireKey("k2", "b", 1, 10)
	a1.write(20)
	b1.write(30)
	a1.write(40).release(100)
	b1.write(50).release(100)
	a2 := s.acquireKey("k1", "b", 6, 200)
	b2 = s.acquireKey("k2", "a", 2, 200)
	b2.write(210)
	a2.write(220)
	return s, b2
}

// TestCheckSetPerKey: each key's history is checked on its own, so two
// keys' terms may be live at once and their tokens interleave in the log.
func TestCheckSetPerKey(t *testing.T) {
	t.Parallel()
	s, _ := setStory()
	r := s.check()
	if !r.OK() {
		t.Fatalf("violations in a clean set history: %v", r.Violations)
	}
	if r.Terms != 4 || r.TermsWrote != 4 || len(r.Keys) != 2 || len(r.Recoveries) != 1 || r.Recoveries[0] != 30*time.Millisecond {
		t.Fatalf("figures: terms %d, wrote %d, keys %+v, recoveries %v", r.Terms, r.TermsWrote, r.Keys, r.Recoveries)
	}
}

// TestCheckSetTwoLiveTermsOnOneKey: a broken set hands key k2 to a second
// term while the first one's lease is live; the checker must report
// property 1 on k2, and nothing on k1.
func TestCheckSetTwoLiveTermsOnOneKey(t *testing.T) {
	t.Parallel()
	s, b2 := setStory()
	c := s.acquireKey("k2", "c", 3, 1000) // b2's lease runs until 3200
	c.write(1010)
	b2.write(1020) // and b2 goes on writing: a stale token after a higher one
	r := s.check()
	expect(t, r, chaos.PropNoOverlap, "key k2: term (c, token 3")
	expect(t, r, chaos.PropMonotonic, "key k2: unit")
	for _, v := range r.Violations {
		if strings.Contains(v.Detail, "key k1") {
			t.Errorf("a violation on the untouched key: %s", v)
		}
	}
}

// TestCheckSetAlignsStarts: a set's campaign reports one database time for
// every key it won, read after the rows were written, so the lease audit's
// acquisition is a little earlier than the term's recorded start. Within
// the campaign's round trip it is the same term; a won acquire the audit
// has no acquisition for is still reported.
func TestCheckSetAlignsStarts(t *testing.T) {
	t.Parallel()
	s := &story{}
	a := s.acquireKey("k1", "a", 1, 10) // sent at 9, answered at 11; start read at 10
	a.write(20).write(30)
	s.tables.Changes = []chaos.LeaseChange{
		{ID: 1, Key: "k1", Op: "INSERT", At: ms(9), NewHolder: "a", NewToken: 1, NewAcquired: ms(9), NewExpires: ms(3009)},
	}
	r := s.check()
	if !r.OK() || r.Terms != 1 {
		t.Fatalf("violations %v, terms %d; want none and 1", r.Violations, r.Terms)
	}
	// An acquisition before the campaign was sent is another term.
	s.tables.Changes[0].NewAcquired = ms(7)
	expect(t, s.check(), chaos.PropLease, "never recorded")
}

// TestCheckSetStampBeforeRelease: a set's campaign stamps the rows it takes
// with one clock reading taken before it locks them, so a row freed by a
// release that committed after that reading is stamped as acquired before
// the release. The lease was not the new term's until the campaign wrote
// the row (the audit's time of the change): no overlap. A row written
// before the release, stamp or not, is one.
func TestCheckSetStampBeforeRelease(t *testing.T) {
	t.Parallel()
	s := &story{}
	a := s.acquireKey("k1", "a", 1, 10)
	a.write(20)
	a.release(1000)
	b := s.acquireKey("k1", "b", 2, 999)
	b.write(1010)
	s.tables.Changes = []chaos.LeaseChange{
		{ID: 1, Key: "k1", Op: "INSERT", At: ms(10), NewHolder: "a", NewToken: 1, NewAcquired: ms(10), NewExpires: ms(3010)},
		{ID: 2, Key: "k1", Op: "UPDATE", At: ms(1000), OldHolder: "a", OldToken: 1, OldAcquired: ms(10), OldExpires: ms(3010)},
		{ID: 3, Key: "k1", Op: "UPDATE", At: ms(1001), NewHolder: "b", NewToken: 2, NewAcquired: ms(999), NewExpires: ms(3999)},
	}
	if r := s.check(); !r.OK() {
		t.Fatalf("violations: %v", r.Violations)
	}
	s.tables.Changes[2].At = ms(999)
	expect(t, s.check(), chaos.PropNoOverlap, "overlap 1ms")
}

// TestCheckFailoverLostReleaseThenWipe: a's release committed on pg1 and
// was acknowledged, then b won the free row on pg1; both were lost when
// pg1 failed over. On pg2 the row still shows a's term, until a wipe
// there, or until the token epoch's move frees the row once it expired.
// a's term ended at its release, not then, so b's lost term does not
// overlap it; without the acknowledged release it does.
func TestCheckFailoverLostReleaseThenWipe(t *testing.T) {
	t.Parallel()
	for _, epoch := range []bool{false, true} {
		build := func(released bool) *story {
			s := lostReleaseStory(released)
			if epoch {
				s.tables.Changes[1] = chaos.LeaseChange{ID: 2, Key: "k1", Op: "UPDATE", At: ms(2800),
					OldHolder: "a", OldToken: 1, OldAcquired: ms(0), OldExpires: ms(3000), Server: "pg2"}
				s.events = s.events[:len(s.events)-1] // no wipe
			}
			return s
		}
		r := build(true).check()
		if !r.OK() || r.LostTerms != 1 {
			t.Fatalf("epoch %v: violations %v, lost terms %d; want none and 1", epoch, r.Violations, r.LostTerms)
		}
		expect(t, build(false).check(), chaos.PropNoOverlap, "term (b, token 2")
	}
}

// lostReleaseStory: a wins k1 on pg1 and writes; with released, its
// release is acknowledged at 2000; b wins k1 on pg1 at 2100; pg1 fails over
// to pg2 at 2500–2700, losing a's release and b's term; a wipe on pg2 at
// 2800 deletes the row, which pg2 still shows as a's.
func lostReleaseStory(released bool) *story {
	s := &story{server: "pg1"}
	a := s.acquireKey("k1", "a", 1, 0)
	a.write(100)
	if released {
		e := a.event(chaos.KindRelease, chaos.OK)
		e.Sent, e.Local = ms(2000), ms(2001)
		s.events = append(s.events, e)
	}
	s.acquireKey("k1", "b", 2, 2100)
	s.failover("pg2", 2500, 2600, 2700)
	s.events = append(s.events, chaos.Event{Kind: chaos.KindWipe, Replica: -1, DB: ms(2800)})
	s.tables.Changes = []chaos.LeaseChange{
		{ID: 1, Key: "k1", Op: "INSERT", At: ms(0), NewHolder: "a", NewToken: 1, NewAcquired: ms(0), NewExpires: ms(3000), Server: "pg1"},
		{ID: 2, Key: "k1", Op: "DELETE", At: ms(2800), OldHolder: "a", OldToken: 1, OldAcquired: ms(0), OldExpires: ms(3000), Server: "pg2"},
	}
	return s
}

// unansweredReleaseStory is the history of issue 24's item 10, on key k
// of a set (timings rounded). On pg1, a wins k with token 10 at 0 and
// renews at 1000 and 2000 (the standby has all of that); then replication
// is cut. a's body returns and its term ends at 2300 (the set records the
// end before it releases), and a sends its release at 2310 on a lease
// path delayed one way by 279 ms: ReleaseTimeout (250 ms) passes first,
// so the release is unanswered (at 2560), and it commits on pg1 at about
// 2590. b's campaign, sent at 2599, wins k at 2600 with token 11 at once,
// claims and writes a unit that pg1 acknowledges. pg1 is killed at 3500
// and pg2 promoted, which holds the row as of a's renewal at 2000 (a's,
// until 5000): a's release and b's term are lost with pg1. After pg2's
// grace, c wins token 11 again and writes.
//
// With ended, a's term ends (term-end, then its release sent) at ended and
// ended+10 ms instead: the release cannot have freed the row before it was
// sent, and a replica whose body has not returned has not sent it.
func unansweredReleaseStory(ended int) *story {
	const k = "digest-publisher-17"
	s := &story{server: "pg1"}
	a := s.acquireKey(k, "a", 10, 0)
	a.write(100).renew(1000).write(1100).renew(2000).write(2100)
	end := a.event(chaos.KindTermEnd, "")
	end.Detail, end.Local = "finished", ms(ended)
	rel := a.event(chaos.KindRelease, chaos.Failed)
	rel.Sent, rel.Local, rel.Err = ms(ended+10), ms(ended+260), "timeout: context deadline exceeded"
	s.events = append(s.events, end, rel)
	b := s.acquireKey(k, "b", 11, 2600)
	b.lost(4, 2700)
	s.failover("pg2", 3500, 3600, 3700)
	c := s.acquireKey(k, "c", 11, 6800)
	c.write(6810).write(6900)
	s.tables.Changes = []chaos.LeaseChange{
		{ID: 1, Key: k, Op: "INSERT", At: ms(0), NewHolder: "a", NewToken: 10, NewAcquired: ms(0), NewExpires: ms(3000), Server: "pg1"},
		{ID: 2, Key: k, Op: "UPDATE", At: ms(1000), OldHolder: "a", OldToken: 10, OldAcquired: ms(0), OldExpires: ms(3000),
			NewHolder: "a", NewToken: 10, NewAcquired: ms(0), NewExpires: ms(4000), Server: "pg1"},
		{ID: 3, Key: k, Op: "UPDATE", At: ms(2000), OldHolder: "a", OldToken: 10, OldAcquired: ms(0), OldExpires: ms(4000),
			NewHolder: "a", NewToken: 10, NewAcquired: ms(0), NewExpires: ms(5000), Server: "pg1"},
		{ID: 4, Key: k, Op: "UPDATE", At: ms(6800), OldHolder: "a", OldToken: 10, OldAcquired: ms(0), OldExpires: ms(5000),
			NewHolder: "c", NewToken: 11, NewAcquired: ms(6800), NewExpires: ms(9800), Server: "pg2"},
	}
	return s
}

// TestCheckUnansweredReleaseLostInFailover: a release whose answer never
// came may have committed at any instant after it was sent. Where the
// server that may have committed it was failed over, and what survived of
// its audit leaves the term holding the row, the checker lets the release
// end the term from its send: a term whose release was sent before the
// next term began does not overlap it (issue 24, item 10). A term that
// still believed it led when the next one began, and so had not sent its
// release, does; so does one whose surviving audit shows the row taken
// from it, and one on a server whose audit is whole.
func TestCheckUnansweredReleaseLostInFailover(t *testing.T) {
	t.Parallel()
	t.Run("ended before the next term began", func(t *testing.T) {
		t.Parallel()
		r := unansweredReleaseStory(2300).check()
		if !r.OK() || r.LostTerms != 1 || r.LostUnits != 1 || r.Terms != 3 || r.UnansweredReleases != 1 {
			t.Fatalf("violations %v, lost terms %d, lost units %d, terms %d, ended by a release without an answer %d; want none, 1, 1, 3, 1",
				r.Violations, r.LostTerms, r.LostUnits, r.Terms, r.UnansweredReleases)
		}
	})
	t.Run("still believing when the next term began", func(t *testing.T) {
		t.Parallel()
		// a's release, sent at 2660, is the earliest it can have ended.
		expect(t, unansweredReleaseStory(2650).check(), chaos.PropNoOverlap, "(overlap 60ms)")
	})
	t.Run("the surviving audit shows the row taken", func(t *testing.T) {
		t.Parallel()
		// pg1's audit survived up to b's acquisition, which took a's row
		// with no release before it: the release had not committed then.
		s := unansweredReleaseStory(2300)
		s.tables.Changes = slices.Insert(s.tables.Changes, 3, chaos.LeaseChange{ID: 4, Key: s.tables.Changes[0].Key, Op: "UPDATE",
			At: ms(2600), OldHolder: "a", OldToken: 10, OldAcquired: ms(0), OldExpires: ms(5000),
			NewHolder: "b", NewToken: 11, NewAcquired: ms(2600), NewExpires: ms(5600), Server: "pg1"})
		s.tables.Changes[4].ID, s.tables.Changes[4].OldHolder, s.tables.Changes[4].OldToken = 5, "b", 11
		s.tables.Changes[4].OldAcquired, s.tables.Changes[4].OldExpires = ms(2600), ms(5600)
		expect(t, s.check(), chaos.PropNoOverlap, "(overlap 2.4s)")
	})
	t.Run("no failover: the audit is whole", func(t *testing.T) {
		t.Parallel()
		// Without a failover the audit holds every change pg1 committed:
		// no release of a's term, and b's acquisition of a's live row.
		s := unansweredReleaseStory(2300)
		s.events = slices.DeleteFunc(s.events, func(e chaos.Event) bool {
			return e.Kind == chaos.KindFault || e.Kind == chaos.KindFailover || e.Owner == "c"
		})
		s.tables.Units = slices.DeleteFunc(s.tables.Units, func(u chaos.Unit) bool { return u.Owner == "c" })
		s.tables.Units = append(s.tables.Units, chaos.Unit{ID: 4, Key: s.tables.Changes[0].Key, Owner: "b", Token: 11,
			TermStart: ms(2600), Seq: 1, LoggedAt: ms(2700), Server: "pg1"})
		s.tables.Changes[3] = chaos.LeaseChange{ID: 4, Key: s.tables.Changes[0].Key, Op: "UPDATE", At: ms(2600),
			OldHolder: "a", OldToken: 10, OldAcquired: ms(0), OldExpires: ms(5000),
			NewHolder: "b", NewToken: 11, NewAcquired: ms(2600), NewExpires: ms(5600), Server: "pg1"}
		r := s.check()
		expect(t, r, chaos.PropNoOverlap, "(overlap 2.4s)")
		if len(r.Violations) != 1 {
			t.Errorf("want only the overlap; got %v", r.Violations)
		}
	})
}

// TestCheckCountsHandOffs: a release that handed the lease to a waiting
// replica is counted as a hand-off, and a plain release or a refused
// hand-off is not.
func TestCheckCountsHandOffs(t *testing.T) {
	t.Parallel()
	s := clean()
	a := s.acquire("a", 3, 3000)
	handed := a.event(chaos.KindRelease, chaos.OK)
	handed.DB, handed.Detail = ms(3100), "handed off to b"
	refused := a.event(chaos.KindRelease, chaos.Refused)
	refused.DB, refused.Detail = ms(3200), "handed off to c"
	s.events = append(s.events, handed, refused)
	if r := s.check(); r.HandOffs != 1 {
		t.Fatalf("HandOffs = %d, want 1", r.HandOffs)
	}
}

// TestCheckLostRenewalThenEpochFree: a renews on pg1 and is told of an
// expiry at 4000, but the renewal is lost when pg1 fails over; pg2 still
// shows the lease expiring at 3000, and the token epoch's move frees the
// expired row at 3100. a may write until its yield, as its replica was
// told (docs/ha.md): a write at 3500 is within its lease, one at 4100 is
// not.
func TestCheckLostRenewalThenEpochFree(t *testing.T) {
	t.Parallel()
	build := func(last int) *story {
		s := &story{server: "pg1"}
		s.heal(0)
		a := s.acquire("a", 1, 0)
		a.write(10).renew(1000)
		s.failover("pg2", 1500, 1600, 1700)
		a.write(last)
		s.tables.Changes = []chaos.LeaseChange{
			{ID: 1, Op: "INSERT", At: ms(0), NewHolder: "a", NewToken: 1, NewAcquired: ms(0), NewExpires: ms(3000), Server: "pg1"},
			{ID: 2, Op: "UPDATE", At: ms(3100), OldHolder: "a", OldToken: 1, OldAcquired: ms(0), OldExpires: ms(3000), Server: "pg2"},
		}
		return s
	}
	if r := build(3500).check(); !r.OK() {
		t.Fatalf("a write within the lease its replica was told of, after the epoch freed the row pg2 saw as expired: %v", r.Violations)
	}
	expect(t, build(4100).check(), chaos.PropWithinLease, "after its lease ended at")
}

// TestCheckRenewalJudgedWhenDecided: a set's tick decides each row's
// renewal on the clock it reads with the row locked (renewed_at), and the
// audit trigger runs once the statement has written its last row, a
// millisecond or more later. A renewal decided before the expiry and
// audited after it is not a violation (a 5-minute run of 1,000 keys reported
// 17 such, 0.7 to 0.9 ms after); one decided at or after the expiry is, and
// so is one audited after it when the audit has no renewed_at or the
// change did not write it.
func TestCheckRenewalJudgedWhenDecided(t *testing.T) {
	t.Parallel()
	story := func(decided time.Time) *story {
		s := &story{}
		s.heal(0)
		a := s.acquire("a", 1, 0)
		a.write(10)
		s.tables.Changes = []chaos.LeaseChange{
			{ID: 1, Op: "INSERT", At: ms(0)},
			{ID: 2, Op: "UPDATE", At: ms(0), NewHolder: "a", NewToken: 1, NewAcquired: ms(0), NewExpires: ms(3000), NewRenewed: ms(0)},
			{ID: 3, Op: "UPDATE", At: ms(3001), OldHolder: "a", OldToken: 1, OldAcquired: ms(0), OldExpires: ms(3000),
				NewHolder: "a", NewToken: 1, NewAcquired: ms(0), NewExpires: decided.Add(3 * time.Second), NewRenewed: decided},
		}
		return s
	}
	if r := story(ms(2999)).check(); len(r.Violations) > 0 {
		t.Fatalf("a renewal decided 1 ms before the expiry and audited 1 ms after it: %v", r.Violations)
	}
	expect(t, story(ms(3000)).check(), chaos.PropLease, "renewed at")
	legacy := story(ms(2999))
	legacy.tables.Changes[2].NewRenewed = time.Time{}
	expect(t, legacy.check(), chaos.PropLease, "renewed at")
	// A change that moved the expiry but left renewed_at as it was
	// decided nothing at that instant: judged by the audit's stamp.
	unwritten := story(ms(0))
	unwritten.tables.Changes[2].OldRenewed = ms(0)
	unwritten.tables.Changes[2].NewExpires = ms(6000)
	expect(t, unwritten.check(), chaos.PropLease, "renewed at")
}
