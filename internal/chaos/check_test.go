package chaos_test

import (
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
}

type term struct {
	s     *story
	owner string
	token int64
	start time.Time
	seq   int
}

// acquire records a won acquire at start ms with a 3s lease.
func (s *story) acquire(owner string, token int64, start int) *term {
	s.events = append(s.events, chaos.Event{Kind: chaos.KindAcquire, Result: chaos.OK, Owner: owner, Token: token,
		Term: ms(start), DB: ms(start), Expires: ms(start + 3000)})
	return &term{s: s, owner: owner, token: token, start: ms(start)}
}

func (t *term) event(kind chaos.Kind, result chaos.Result) chaos.Event {
	return chaos.Event{Kind: kind, Result: result, Owner: t.owner, Token: t.token, Term: t.start}
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
	t.s.tables.Units = append(t.s.tables.Units, chaos.Unit{ID: id, Owner: t.owner, Token: t.token, TermStart: t.start, Seq: seq, LoggedAt: ms(at)})
	t.s.tables.Fence = max(t.s.tables.Fence, t.token)
	if acked {
		e := t.event(chaos.KindWrite, chaos.OK)
		e.Seq, e.ID, e.DB, e.Checked, e.Sent = seq, id, ms(at), ms(at-2), ms(at-1)
		t.s.events = append(t.s.events, e)
	}
}

func (s *story) heal(at int) {
	s.events = append(s.events, chaos.Event{Kind: chaos.KindHeal, Replica: -1, DB: ms(at)})
}

func (s *story) check() *chaos.Report { return chaos.Check(s.events, s.tables, testSpec) }

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
