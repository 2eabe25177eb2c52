package chaos

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pgleader/pgleader/internal/hook"
	"github.com/pgleader/pgleader/pgleader"
)

// startSessionBound is the Detail of a KindStart event of a replica whose
// Elector runs with pgleader.Options.SessionBound: the checker then
// classifies early take-overs (see checkLapses).
const startSessionBound = "session-bound"

// A session-bound Elector runs its campaigns, renewals and releases on a
// connection of its own, which the recorder does not wrap. The hook
// internal/hook.Bound shows them to the recorder of the elector's owner:
// held at its loop gate while the replica is paused, and recorded as the
// recorder records the backend's calls.
//
// A session-bound Set's lapses (set_bind on a member's new session, or a
// watcher's set_wake) are made on connections of the set's own too: the
// hook shows them to the set recorder of the member that made them.
var (
	boundMu      sync.Mutex
	boundRecs    = map[string]*recorder{}
	setLapseRecs = map[string]*setRecorder{}
	boundOnce    sync.Once
)

// installBound sets the hook, once.
func installBound() {
	boundOnce.Do(func() {
		hook.Bound.Store(&hook.BoundHooks{
			Gate: func(owner string) error {
				if r := boundRecorder(owner); r != nil {
					return r.gate.wait()
				}
				return nil
			},
			Report: func(b hook.BoundReport) {
				if r := boundRecorder(b.Owner); r != nil {
					r.bound(b)
				}
			},
			SetLapse: func(l hook.SetLapse) {
				boundMu.Lock()
				r := setLapseRecs[l.Owner]
				boundMu.Unlock()
				if r != nil {
					r.lapsed(l)
				}
			},
		})
	})
}

// watchBound routes the hook's calls for owner to rec until the returned
// function is called.
func watchBound(owner string, rec *recorder) func() {
	installBound()
	boundMu.Lock()
	boundRecs[owner] = rec
	boundMu.Unlock()
	return func() {
		boundMu.Lock()
		delete(boundRecs, owner)
		boundMu.Unlock()
	}
}

// watchSetLapses routes the lapses the set member owner makes to rec until
// the returned function is called.
func watchSetLapses(owner string, rec *setRecorder) func() {
	installBound()
	boundMu.Lock()
	setLapseRecs[owner] = rec
	boundMu.Unlock()
	return func() {
		boundMu.Lock()
		delete(setLapseRecs, owner)
		boundMu.Unlock()
	}
}

func boundRecorder(owner string) *recorder {
	boundMu.Lock()
	defer boundMu.Unlock()
	return boundRecs[owner]
}

// lapsed records the terms a set_bind or set_wake of the member lapsed: a
// KindLapse event per key, which names the lapsed term (its holder,
// token and start) and the instant its lease was made to expire (DB).
func (r *setRecorder) lapsed(l hook.SetLapse) {
	for i, k := range l.Keys {
		e := r.event(KindLapse, k, l.Sent, nil)
		e.Owner, e.Token, e.Term, e.DB, e.Expires = l.Holders[i], l.Tokens[i], l.Acquired[i], l.At, l.At
		e.Detail = fmt.Sprintf("lapsed by %s's %s", r.owner, l.Op)
		r.sink.Record(e)
	}
}

// lapsedDetail marks a campaign that lapsed a bound term whose session had
// ended: an early take-over.
const lapsedDetail = "lapsed a bound term whose session had ended"

// bound records one statement of the elector's own connection.
func (r *recorder) bound(b hook.BoundReport) {
	switch b.Op {
	case "campaign":
		l := pgleader.Lease{Key: r.key, Holder: b.Holder, Token: b.Token, Now: b.Now, ExpiresAt: b.Expires, AcquiredAt: b.AcquiredAt}
		e := r.event(KindAcquire, b.Sent, b.Err)
		if b.Err == nil {
			e.Token, e.DB, e.Expires = l.Token, l.Now, l.ExpiresAt
			if b.Won {
				e.Term = l.AcquiredAt
				r.mu.Lock()
				r.won = e
				r.mu.Unlock()
			} else {
				e.Result, e.Detail = Refused, "held by "+l.Holder
			}
			if b.Lapsed {
				e.Detail = joinDetail(e.Detail, lapsedDetail)
			}
			if b.Won && !b.Bound {
				e.Detail = joinDetail(e.Detail, "not bound")
			}
		}
		r.sink.Record(e)
	case "renew":
		err := b.Err
		if b.Lost {
			err = pgleader.ErrLost
		}
		r.renewed(b.Sent, b.Token, r.ttl, b.Expires, err)
	case "release", "handoff":
		e := r.event(KindRelease, b.Sent, b.Err)
		e.Token, e.Term = b.Token, r.term(b.Token)
		if b.Err == nil && !b.Released {
			e.Result = Refused
		}
		if b.Successor != "" {
			e.Detail = "handed off to " + b.Successor
		}
		r.sink.Record(e)
	}
}

func joinDetail(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// Lapse is one early take-over of a session-bound run: a campaign lapsed
// the term Old, whose session had ended, at At (the database's clock),
// and New began at NewStart.
type Lapse struct {
	Old, New TermID // New is zero if no term began while Old's holder believed
	At       time.Time
	NewStart time.Time
	// BeliefEnd is when Old's holder stopped believing it led: its term
	// began to end (KindTermEnding), or its process crashed, whichever
	// came first; the host's clock, which the run's own servers share.
	// Known is false if the history shows neither (then BeliefEnd is the
	// term's expiry, as without the option).
	BeliefEnd time.Time
	Known     bool
	// Unheard: the holder never heard of its win (no won acquire in the
	// history), so it never believed it led.
	Unheard bool
	// Overlap is BeliefEnd - NewStart: positive when two replicas
	// believed they led at once (P1 of docs/model.md).
	Overlap time.Duration
	// Cause is what ended Old's session, as the fault log shows it (see
	// lapseCause), and Faults the harness's events that it saw near it.
	Cause  string
	Faults []string
	// Excused: the overlap is P1's one exception, a holder whose session
	// ended while its process lived (terminated, or reset by a proxy),
	// until it learned.
	Excused bool
}

// The causes of a lapse, from the fault log. The first two are the named
// case of P1's exception in docs/model.md ("Session-bound leases"):
// pg_terminate_backend of the holder's session, and a proxy that closed
// it (tcpproxy's drop, or its heal of a blackhole, which closes every
// connection whose traffic it swallowed). The holder's death is the crash
// case, where P1 holds. Anything else is no named case.
const (
	CauseTerminated = "session terminated (kill-backends, lease path)"
	CauseProxyReset = "session reset by the proxy (drop, or a blackhole's heal, on the lease path)"
	CauseCrashed    = "holder crashed"
	CauseStopped    = "holder stopped"
	CauseAfterEnd   = "the session ended after the holder's term had (its elector closed it)"
	CauseUnknown    = "no named case in the fault log"
)

// lapseSlack widens a lapse's window in the fault log: the harness
// records a fault just before it applies it, on the same host clock.
const lapseSlack = 100 * time.Millisecond

// lapsedByEvents ends, at the new term's start, a term that a won
// session-bound campaign reports it lapsed, where the lease audit cannot
// show the lapse: the term, or the lapse, was lost with a failed-over
// primary's last changes. The lapsed term is the one whose lease, as
// the events have it, held the row when the campaign won; campaign_bound
// lapsed it before the win, at a clock reading no later than the new
// term's acquisition. A set's lapse (KindLapse) names the term it lapsed
// and when, and ends it there.
func lapsedByEvents(events []Event, terms map[TermID]*termSpan, fs []failover) {
	for _, e := range events {
		if e.Kind == KindLapse {
			// A set's lapse names its term and instant.
			if t := terms[e.termID()]; t != nil && (!t.audited || mayBeLost(fs, e.Sent)) && e.DB.Before(t.end()) {
				t.lapsed = minTime(instant(e.DB), t.lapsed)
			}
			continue
		}
		if e.Kind != KindAcquire || e.Result != OK || !strings.Contains(e.Detail, lapsedDetail) {
			continue
		}
		at := instant(e.Term)
		for _, t := range terms {
			if t.id == e.termID() || !t.lapsed.IsZero() || t.audited && !mayBeLost(fs, e.Sent) {
				continue
			}
			if t.start().Before(at) && t.end().After(at) {
				t.lapsed = at
			}
		}
	}
}

// checkLapses classifies the early take-overs of a session-bound run: for
// each lapsed term, when its holder stopped believing it led, how long
// that overlapped the next term, and what ended its session. An overlap
// is excused only if its cause is one of the named case (CauseTerminated,
// CauseProxyReset); any other overlap is a violation of property 1.
func checkLapses(r *Report, events []Event, units []Unit, terms map[TermID]*termSpan) {
	list := sortedTerms(terms)
	slices.SortStableFunc(list, func(a, b *termSpan) int { return a.start().Compare(b.start()) })
	for _, t := range list {
		if t.lapsed.IsZero() {
			continue
		}
		l := Lapse{Old: t.id, At: t.lapsed, BeliefEnd: t.entitled()}
		believed := false
		for _, e := range events {
			switch {
			case e.Kind == KindAcquire && e.Result == OK && e.termID() == t.id:
				believed = true
			case e.Kind == KindTermEnding && e.termID() == t.id && (!l.Known || e.Local.Before(l.BeliefEnd)):
				l.BeliefEnd, l.Known = e.Local, true
			case e.Kind == KindStop && e.Owner == t.id.Owner && e.Detail == "crash" && e.Local.After(t.id.Start) &&
				(!l.Known || e.Local.Before(l.BeliefEnd)):
				// Its first crash after the term's start ends the
				// incarnation, and every belief it had.
				l.BeliefEnd, l.Known = e.Local, true
			}
		}
		if !believed {
			// The win's answer never reached the holder (the lease path
			// failed under the campaign): it never believed it led.
			l.BeliefEnd, l.Known, l.Unheard = t.start(), true, true
		}
		for _, n := range list {
			if n != t && !n.start().Before(t.lapsed) {
				l.New, l.NewStart = n.id, n.start()
				break
			}
		}
		if !l.NewStart.IsZero() {
			l.Overlap = l.BeliefEnd.Sub(l.NewStart)
		}
		l.Cause, l.Faults = lapseCause(events, t)
		if l.Cause == CauseUnknown && l.Known && !l.BeliefEnd.After(l.At) && !l.Unheard {
			l.Cause = CauseAfterEnd
		}
		l.Excused = l.Overlap > 0 && (l.Cause == CauseTerminated || l.Cause == CauseProxyReset)
		for _, u := range units {
			if u.termID() == t.id && u.at().After(t.lapsed) {
				r.UnitsAfterLapse++
			}
		}
		if l.Overlap > 0 && !l.Excused {
			known := ""
			if !l.Known {
				known = " (no end of its belief recorded: its expiry is used)"
			}
			r.violate(PropNoOverlap, "term %s was lapsed at %s and %s began at %s while its holder still believed it led until %s%s "+
				"(overlap %v); cause: %s; faults on its replica near it: %s",
				fmtTerm(t.id), fmtTime(t.lapsed), fmtTerm(l.New), fmtTime(l.NewStart), fmtTime(l.BeliefEnd), known,
				l.Overlap, l.Cause, strings.Join(l.Faults, "; "))
		}
		r.Lapses = append(r.Lapses, l)
	}
}

// lapseCause returns what ended the session of t, lapsed, as the fault log
// shows it, and the faults it considered: those on t's replica from its
// start to its lapse, and every restart and failover in that window.
func lapseCause(events []Event, t *termSpan) (string, []string) {
	var idx, inc int
	if _, err := fmt.Sscanf(t.id.Owner, "r%d.%d", &idx, &inc); err != nil {
		return CauseUnknown, nil
	}
	from, to := t.id.Start.Add(-lapseSlack), t.lapsed
	onLease := func(detail string) bool {
		return strings.HasPrefix(detail, "lease path") || strings.HasPrefix(detail, "both path")
	}
	var seen []string
	cause := CauseUnknown
	rank := map[string]int{CauseUnknown: 0, CauseStopped: 1, CauseProxyReset: 2, CauseTerminated: 3, CauseCrashed: 4}
	better := func(c string) {
		if rank[c] > rank[cause] {
			cause = c
		}
	}
	// A lasting fault's span: from its start to its fault-end on the
	// same replica.
	open := map[string]Event{}
	for _, e := range events {
		key := fmt.Sprintf("%d/%s", e.Replica, e.Fault)
		switch e.Kind {
		case KindFault:
			if e.Replica == idx || e.Replica < 0 {
				if !e.Local.Before(from) && !e.Local.After(to) {
					seen = append(seen, fmt.Sprintf("%s %s r%d %s", fmtTime(e.Local), e.Fault, e.Replica, e.Detail))
				}
			}
			if e.Replica != idx {
				continue
			}
			open[key] = e
			if e.Local.Before(from) || e.Local.After(to) {
				continue
			}
			switch {
			case e.Fault == FaultKill && onLease(e.Detail):
				better(CauseTerminated)
			case e.Fault == FaultDrop && onLease(e.Detail):
				better(CauseProxyReset)
			}
		case KindFaultUp:
			if e.Replica != idx {
				continue
			}
			f, ok := open[key]
			delete(open, key)
			// A blackhole's heal closes the connections whose traffic
			// it swallowed; a drop that began before the term and
			// lasted into it refused the session's reconnects only.
			if ok && f.Fault == FaultBlackhole && onLease(f.Detail) && !e.Local.Before(from) && !e.Local.After(to) {
				seen = append(seen, fmt.Sprintf("%s %s r%d healed", fmtTime(e.Local), f.Fault, e.Replica))
				better(CauseProxyReset)
			}
		case KindStop:
			if e.Owner == t.id.Owner && !e.Local.Before(from) && !e.Local.After(to) {
				seen = append(seen, fmt.Sprintf("%s stop %s %s", fmtTime(e.Local), e.Owner, e.Detail))
				if e.Detail == "crash" {
					better(CauseCrashed)
				} else {
					better(CauseStopped)
				}
			}
		case KindFailover:
			if !e.Local.Before(from) && !e.Local.After(to) {
				seen = append(seen, fmt.Sprintf("%s failover %s → %s", fmtTime(e.Local), e.Prev, e.Server))
			}
		}
	}
	return cause, seen
}

// lapseSummary writes the session-bound figures of a report.
func (r *Report) lapseSummary(w io.Writer) {
	causes := map[string]int{}
	var excused, other []time.Duration
	overlapped := 0
	for _, l := range r.Lapses {
		causes[l.Cause]++
		switch {
		case l.Excused:
			excused = append(excused, l.Overlap)
		case l.Overlap > 0:
			other = append(other, l.Overlap)
		}
		if l.Overlap > 0 {
			overlapped++
		}
	}
	fmt.Fprintf(w, "session-bound:       %d early take-overs (lapsed terms; by cause: %s); %d overlapped the holder's belief; units a lapsed term committed after its take-over: %d\n",
		len(r.Lapses), counts(causes), overlapped, r.UnitsAfterLapse)
	closest, lived := time.Duration(-1), 0
	for _, l := range r.Lapses {
		if l.Unheard || l.New == (TermID{}) || l.Cause == CauseCrashed {
			continue
		}
		lived++
		if gap := -l.Overlap; l.Overlap <= 0 && (closest < 0 || gap < closest) {
			closest = gap
		}
	}
	if closest >= 0 {
		fmt.Fprintf(w, "  of %d take-overs from a holder that lived and had heard of its win, the closest: its belief ended %v before the next term began\n",
			lived, closest.Round(time.Microsecond))
	}
	fmt.Fprintf(w, "  P1 overlaps excused as session ended while the holder lived: %d%s\n", len(excused), longest(excused))
	fmt.Fprintf(w, "  P1 overlaps of no named case (violations of property 1):     %d%s\n", len(other), longest(other))
	for _, l := range r.Lapses {
		verdict := "excused"
		switch {
		case l.Overlap > 0 && !l.Excused:
			verdict = "VIOLATION"
		case l.Overlap <= 0 && l.Cause == CauseUnknown:
			verdict = "no overlap, no named case"
		case l.Overlap <= 0:
			continue
		}
		fmt.Fprintf(w, "    %s: %s lapsed at %s, %s began at %s, holder believed until %s: overlap %v; %s; faults: %s\n",
			verdict, fmtTerm(l.Old), fmtTime(l.At), fmtTerm(l.New), fmtTime(l.NewStart), fmtTime(l.BeliefEnd),
			l.Overlap.Round(time.Microsecond), l.Cause, strings.Join(l.Faults, "; "))
	}
}

func longest(ds []time.Duration) string {
	if len(ds) == 0 {
		return ""
	}
	return fmt.Sprintf(", longest %v ms", slices.Max(ds).Milliseconds())
}
