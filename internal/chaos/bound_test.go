package chaos_test

import (
	"strings"
	"testing"

	"github.com/pgleader/pgleader/internal/chaos"
)

// lapsed is a session-bound history: r0.1 wins token 1 at 10 and writes;
// at 1500 a campaign of r1.1 lapses its term (its session ended) and wins
// token 2 at 1501, while r0.1 learns of its session's end at believed ms.
// fault, if not nil, is what the fault log shows on r0 at 1400.
func lapsed(believed int, fault *chaos.Event) *story {
	s := &story{}
	s.events = append(s.events,
		chaos.Event{Kind: chaos.KindStart, Replica: 0, Owner: "r0.1", Detail: "session-bound", Local: ms(0)},
		chaos.Event{Kind: chaos.KindStart, Replica: 1, Owner: "r1.1", Detail: "session-bound", Local: ms(0)})
	s.heal(0)
	a := s.acquire("r0.1", 1, 10)
	a.write(20).write(1000)
	if fault != nil {
		f := *fault
		f.Kind, f.Replica, f.Local = chaos.KindFault, 0, ms(1400)
		s.events = append(s.events, f)
	}
	b := s.acquire("r1.1", 2, 1501)
	b.write(1510).write(1600)
	s.events = append(s.events, chaos.Event{Kind: chaos.KindTermEnding, Owner: "r0.1", Token: 1, Term: ms(10), Local: ms(believed)})
	s.tables.Changes = []chaos.LeaseChange{
		{ID: 1, Op: "INSERT", At: ms(10), NewHolder: "r0.1", NewToken: 1, NewAcquired: ms(10), NewExpires: ms(3010)},
		{ID: 2, Op: "UPDATE", At: ms(1500), OldHolder: "r0.1", OldToken: 1, OldAcquired: ms(10), OldExpires: ms(3010),
			NewHolder: "r0.1", NewToken: 1, NewAcquired: ms(10), NewExpires: ms(1500)},
		{ID: 3, Op: "UPDATE", At: ms(1501), OldHolder: "r0.1", OldToken: 1, OldAcquired: ms(10), OldExpires: ms(1500),
			NewHolder: "r1.1", NewToken: 2, NewAcquired: ms(1501), NewExpires: ms(4501)},
	}
	return s
}

func TestLapseWithoutOverlap(t *testing.T) {
	r := lapsed(1450, nil) // r0.1 had stopped believing before the take-over
	if !r.check().OK() {
		t.Fatalf("violations: %v", r.check().Violations)
	}
	rep := r.check()
	if !rep.SessionBound || len(rep.Lapses) != 1 || rep.Lapses[0].Overlap > 0 || rep.Lapses[0].Cause != chaos.CauseAfterEnd {
		t.Fatalf("lapses: %+v", rep.Lapses)
	}
}

func TestLapseExcused(t *testing.T) {
	for _, f := range []chaos.Event{
		{Fault: chaos.FaultKill, Detail: "lease path: 3 backends (err <nil>)"},
		{Fault: chaos.FaultDrop, Detail: "both path for 2s"},
	} {
		rep := lapsed(1520, &f).check()
		if !rep.OK() {
			t.Fatalf("%s: violations: %v", f.Fault, rep.Violations)
		}
		if len(rep.Lapses) != 1 || !rep.Lapses[0].Excused || rep.Lapses[0].Overlap.Milliseconds() != 19 {
			t.Fatalf("%s: lapses: %+v", f.Fault, rep.Lapses)
		}
		var b strings.Builder
		rep.Summary(&b)
		if !strings.Contains(b.String(), "P1 overlaps excused as session ended while the holder lived: 1, longest 19 ms") {
			t.Fatalf("%s: summary:\n%s", f.Fault, b.String())
		}
	}
}

func TestLapseNotExcused(t *testing.T) {
	// A pause, a store-path kill, or nothing: no named case ends the
	// holder's session, so an overlap of belief breaks property 1.
	for _, f := range []*chaos.Event{
		nil,
		{Fault: chaos.FaultPause, Detail: " for 2s"},
		{Fault: chaos.FaultKill, Detail: "store path: 1 backends (err <nil>)"},
		{Fault: chaos.FaultDelay, Detail: "lease path by 20ms for 2s"},
	} {
		expect(t, lapsed(1520, f).check(), chaos.PropNoOverlap, "while its holder still believed it led")
	}
}

// setLapseStory is a session-bound set's lapse that a failover lost, as
// in the run of seed 1548191883976329413 (docs/safety.md): r0.1 wins k1
// with token 1 on pg1 at 0 and renews it at 1000 (until 4000); its
// lease-path backends are terminated at 1400 and it ends its term at
// 1401. At 1500 a statement lapses that term (expiry 1500): the member's
// own new session's set_bind, or another member's set_wake; then owner
// wins k1 with token 2 at 1600. pg1 is failed over at 2000, losing the
// lapse and the new term: pg2's audit shows token 1 holding k1 until
// 4000. With reported, the history has the lapse's report.
func setLapseStory(owner string, reported bool) *story {
	const k = "s-00"
	s := &story{server: "pg1"}
	s.events = append(s.events,
		chaos.Event{Kind: chaos.KindStart, Replica: 0, Owner: "r0.1", Detail: "session-bound", Local: ms(-10)},
		chaos.Event{Kind: chaos.KindStart, Replica: 1, Owner: "r1.1", Detail: "session-bound", Local: ms(-10)})
	s.heal(-5)
	a := s.acquireKey(k, "r0.1", 1, 0)
	a.write(100).renew(1000)
	s.events = append(s.events,
		chaos.Event{Kind: chaos.KindFault, Replica: 0, Fault: chaos.FaultKill, Detail: "lease path: 2 backends (err <nil>)", Local: ms(1400)},
		chaos.Event{Kind: chaos.KindTermEnding, Key: k, Owner: "r0.1", Token: 1, Term: ms(0), Local: ms(1401)})
	if reported {
		by := map[string]int{"r0.1": 0, "r1.1": 1}[owner]
		s.events = append(s.events, chaos.Event{Kind: chaos.KindLapse, Replica: by, Key: k, Owner: "r0.1", Token: 1, Term: ms(0),
			DB: ms(1500), Expires: ms(1500), Sent: ms(1499), Local: ms(1501), Result: chaos.OK})
	}
	b := s.acquireKey(k, owner, 2, 1600)
	b.lost(2, 1700)
	s.failover("pg2", 2000, 2100, 2200)
	s.tables.Changes = []chaos.LeaseChange{
		{ID: 1, Key: k, Op: "INSERT", At: ms(0), NewHolder: "r0.1", NewToken: 1, NewAcquired: ms(0), NewExpires: ms(3000), Server: "pg1"},
		{ID: 2, Key: k, Op: "UPDATE", At: ms(1000), OldHolder: "r0.1", OldToken: 1, OldAcquired: ms(0), OldExpires: ms(3000),
			NewHolder: "r0.1", NewToken: 1, NewAcquired: ms(0), NewExpires: ms(4000), Server: "pg1"},
	}
	s.tables.Units = s.tables.Units[:1] // the new term's unit was lost with pg1
	return s
}

// TestSetLapseLostInFailover: a set's lapse that the audit lost ends the
// lapsed term where its report says, and the take-over is classified as
// an early one; without the report the two terms overlap.
func TestSetLapseLostInFailover(t *testing.T) {
	for _, owner := range []string{"r0.1", "r1.1"} {
		r := setLapseStory(owner, true).check()
		if !r.OK() {
			t.Fatalf("%s: violations: %v", owner, r.Violations)
		}
		if r.LostTerms != 1 || len(r.Lapses) != 1 || r.Lapses[0].Overlap > 0 || r.Lapses[0].Cause != chaos.CauseTerminated {
			t.Fatalf("%s: lost terms %d, lapses %+v; want 1 and one lapse by termination without overlap", owner, r.LostTerms, r.Lapses)
		}
		expect(t, setLapseStory(owner, false).check(), chaos.PropNoOverlap, "held the lease until 12:00:04")
	}
}
