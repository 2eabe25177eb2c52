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
