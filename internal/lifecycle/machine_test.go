package lifecycle

import (
	"fmt"
	"testing"
	"time"
)

// The recipe's timing: TTL 6s, so S = s+5.5s, C = s+5s, Y = s+4s.
var recipe = Timing{TTL: 6 * time.Second, RenewEvery: 2 * time.Second, CampaignEvery: 500 * time.Millisecond,
	Margin: 500 * time.Millisecond, YieldGrace: time.Second, ReleaseTimeout: 500 * time.Millisecond}

// step feeds the machine one event at an instant (milliseconds after the
// winning statement was sent) and checks the actions it returns and, when
// set, the instants it then needs.
type step struct {
	at   int64  // ms
	ev   string // start, start-late, renew, renewed, resigned, failed, lost, gone, stop, resign, done, done-cancelled, done-error, refused, tick
	want Actions
	next int64 // ms; -1: none; 0: not checked
	rnw  int64 // RenewAt, ms; -1: none; 0: not checked
}

// TestTimeline is the package doc's timeline and the end reasons
// (pgleader/doc.go, "How a term ends"), event by event.
func TestTimeline(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bound time.Duration
		tm    Timing
		steps []step
	}{
		{name: "healthy term renews every RenewEvery and moves its timeline", steps: []step{
			{at: 10, ev: "start", next: 4000, rnw: 2000},
			{at: 2000, ev: "renew", next: 4000, rnw: -1},
			{at: 2010, ev: "renewed", want: Actions{Extended: true}, next: 6000, rnw: 4000},
		}},
		{name: "renewals fail until Y: expiring, cancelled at C, released best-effort", steps: []step{
			{at: 10, ev: "start"},
			{at: 2000, ev: "renew"},
			{at: 2100, ev: "failed", want: Actions{Note: RenewFailed}, next: 4000, rnw: 2600},
			{at: 2600, ev: "renew"},
			{at: 3000, ev: "failed", want: Actions{Note: RenewFailed}, rnw: 3500},
			{at: 4000, ev: "tick", want: Actions{End: Expiring, Note: ExpiredAfterFailures}, next: 5000, rnw: -1},
			{at: 5000, ev: "tick", want: Actions{Cancel: true}, next: -1},
			{at: 5050, ev: "done-cancelled", want: Actions{Cancel: true, Note: ReleaseHeld}, next: 5500},
			{at: 5500, ev: "tick", want: Actions{Release: true}},
		}},
		{name: "a renewal unanswered at Y: expiring; the release waits for it", steps: []step{
			{at: 10, ev: "start"},
			{at: 2000, ev: "renew"},
			{at: 4000, ev: "tick", want: Actions{End: Expiring, Note: ExpiredUnanswered}},
			{at: 5000, ev: "tick", want: Actions{Cancel: true}},
			{at: 5100, ev: "done-cancelled", want: Actions{Cancel: true, StopRenewing: true, Note: ReleaseHeld}, next: -1},
			{at: 5400, ev: "failed", want: Actions{}, next: 5500},
			{at: 5500, ev: "tick", want: Actions{Release: true, HandOff: false}},
		}},
		{name: "stop: Ending at once, cancelled YieldGrace later, handed off once returned", steps: []step{
			{at: 10, ev: "start"},
			{at: 1000, ev: "stop", want: Actions{End: Stopped, Note: Stopping}, next: 2000, rnw: -1},
			{at: 2000, ev: "tick", want: Actions{Cancel: true}},
			{at: 2100, ev: "done-cancelled", want: Actions{Cancel: true, Note: ReleaseHeld}, next: 2500},
			{at: 2500, ev: "tick", want: Actions{Release: true, HandOff: true}},
		}},
		{name: "stop: a body that returns within YieldGrace is released at once", steps: []step{
			{at: 10, ev: "start"},
			{at: 1000, ev: "stop", want: Actions{End: Stopped, Note: Stopping}},
			{at: 1200, ev: "done", want: Actions{Cancel: true, Release: true, HandOff: true}},
		}},
		{name: "stop shortly before Y: cancelled at C, sooner than YieldGrace", steps: []step{
			{at: 10, ev: "start"},
			{at: 3900, ev: "stop", want: Actions{End: Stopped, Note: Stopping}, next: 4900},
			{at: 4900, ev: "tick", want: Actions{Cancel: true}},
		}},
		{name: "lost: cancelled at once, nothing released", steps: []step{
			{at: 10, ev: "start"},
			{at: 2000, ev: "renew"},
			{at: 2010, ev: "lost", want: Actions{End: Lost, Cancel: true, Note: LeaseLost}, next: -1},
			{at: 2020, ev: "done-cancelled", want: Actions{Cancel: true, Forget: true}},
		}},
		{name: "schema gone: as lost, said so", steps: []step{
			{at: 10, ev: "start"},
			{at: 2000, ev: "renew"},
			{at: 2010, ev: "gone", want: Actions{End: Lost, Cancel: true, Note: SchemaGone}},
			{at: 2020, ev: "done", want: Actions{Cancel: true, Forget: true}},
		}},
		{name: "lost while stopping: cancelled at once, forgotten", steps: []step{
			{at: 10, ev: "start"},
			{at: 1000, ev: "stop", want: Actions{End: Stopped, Note: Stopping}},
			{at: 1000, ev: "renew", want: Actions{}}, // refused: the term is ending
			{at: 1500, ev: "lost", want: Actions{Cancel: true}},
			{at: 1600, ev: "done", want: Actions{Cancel: true, Forget: true}},
		}},
		{name: "finished: handed off at once", steps: []step{
			{at: 10, ev: "start"},
			{at: 1000, ev: "done", want: Actions{End: Finished, Cancel: true, Release: true, HandOff: true}},
		}},
		{name: "finished while renewing: released once the renewal is answered", steps: []step{
			{at: 10, ev: "start"},
			{at: 2000, ev: "renew"},
			{at: 2005, ev: "done", want: Actions{End: Finished, Cancel: true, StopRenewing: true}},
			{at: 2010, ev: "renewed", want: Actions{Release: true, HandOff: true}},
		}},
		{name: "an error: finished, released ReleaseTimeout after it returned", steps: []step{
			{at: 10, ev: "start"},
			{at: 1000, ev: "done-error", want: Actions{End: Finished, Cancel: true, Note: ReleaseHeldAfterError}, next: 1500},
			{at: 1500, ev: "tick", want: Actions{Release: true, HandOff: true}},
		}},
		{name: "refused: released at once, not handed off", steps: []step{
			{at: 10, ev: "start"},
			{at: 20, ev: "refused", want: Actions{End: Refused, Cancel: true, Release: true}},
		}},
		{name: "born late: released without running the body", steps: []step{
			{at: 4000, ev: "start-late", want: Actions{End: Expiring, Release: true, Note: BornLate}, next: -1, rnw: -1},
		}},
		{name: "asked to resign at a renewal: as a stop, resigned", steps: []step{
			{at: 10, ev: "start"},
			{at: 2000, ev: "renew"},
			{at: 2010, ev: "resigned", want: Actions{End: Resigned, Extended: true, Note: Resigning}, next: 3010},
			{at: 3010, ev: "tick", want: Actions{Cancel: true}},
			{at: 3020, ev: "done-cancelled", want: Actions{Cancel: true, Note: ReleaseHeld}, next: 3510},
			{at: 3600, ev: "tick", want: Actions{Release: true, HandOff: true}},
		}},
		{name: "handed over on a read with TTL-RenewEvery left: renews at once", bound: 4 * time.Second, steps: []step{
			{at: 10, ev: "start", next: 2000, rnw: 0},
			{at: 10, ev: "renew", rnw: -1},
			{at: 20, ev: "renewed", want: Actions{Extended: true}, next: 4010, rnw: 2010},
		}},
		{name: "NoYield: no yield and no cancel at C; a stop still ends it", tm: func() Timing { tm := recipe; tm.NoYield = true; return tm }(), steps: []step{
			{at: 10, ev: "start", next: -1},
			{at: 9000, ev: "tick", want: Actions{}},
			{at: 9000, ev: "stop", want: Actions{End: Stopped, Note: Stopping}, next: 10000},
			{at: 10000, ev: "tick", want: Actions{Cancel: true}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tm := tc.tm
			if tm.TTL == 0 {
				tm = recipe
			}
			bound := tc.bound
			if bound == 0 {
				bound = tm.TTL
			}
			t0 := time.Unix(1000, 0)
			ms := func(n int64) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
			var m *Machine
			var sent time.Time
			for i, s := range tc.steps {
				now := ms(s.at)
				var got Actions
				switch s.ev {
				case "start", "start-late":
					m, got = Start(&tm, t0, bound, now)
				case "renew":
					if _, ok := m.StartRenewal(now); ok {
						sent = now
					}
				case "renewed":
					got = m.Renewed(sent, false, now)
				case "resigned":
					got = m.Renewed(sent, true, now)
				case "failed":
					got = m.RenewFailed(now)
				case "lost", "gone":
					got = m.Lost(now, s.ev == "gone")
				case "stop":
					got = m.Yield(Stopped, now)
				case "resign":
					got = m.Yield(Resigned, now)
				case "done", "done-cancelled", "done-error", "refused":
					got = m.BodyDone(s.ev == "refused", s.ev == "done-error", s.ev == "done-cancelled", now)
				case "tick":
					got = m.Tick(now)
				default:
					t.Fatalf("step %d: unknown event %q", i, s.ev)
				}
				if got != s.want {
					t.Errorf("step %d (%s at %dms): actions %+v, want %+v", i, s.ev, s.at, got, s.want)
				}
				if s.next != 0 {
					checkAt(t, fmt.Sprintf("step %d: Next", i), m.Next(), s.next, ms)
				}
				if s.rnw != 0 {
					checkAt(t, fmt.Sprintf("step %d: RenewAt", i), m.RenewAt(), s.rnw, ms)
				}
			}
		})
	}
}

func checkAt(t *testing.T, what string, got time.Time, want int64, ms func(int64) time.Time) {
	t.Helper()
	if want < 0 {
		if !got.IsZero() {
			t.Errorf("%s = %v, want none", what, got.Sub(ms(0)))
		}
		return
	}
	if !got.Equal(ms(want)) {
		t.Errorf("%s = %v, want %dms", what, got.Sub(ms(0)), want)
	}
}

// TestOverIsFinal: once released or forgotten, nothing the driver feeds
// the machine asks for anything again.
func TestOverIsFinal(t *testing.T) {
	t0 := time.Unix(1000, 0)
	m, _ := Start(&recipe, t0, recipe.TTL, t0)
	if act := m.BodyDone(false, false, false, t0.Add(time.Second)); !act.Release {
		t.Fatalf("BodyDone: %+v, want a release", act)
	}
	later := t0.Add(time.Minute)
	for name, act := range map[string]Actions{
		"tick": m.Tick(later), "lost": m.Lost(later, false), "stop": m.Yield(Stopped, later),
		"failed": m.RenewFailed(later), "renewed": m.Renewed(later, true, later),
	} {
		if act != (Actions{}) {
			t.Errorf("%s after the release: %+v, want nothing", name, act)
		}
	}
	if !m.Next().IsZero() || !m.RenewAt().IsZero() || !m.Over() {
		t.Errorf("after the release: Next %v, RenewAt %v, Over %v", m.Next(), m.RenewAt(), m.Over())
	}
}
