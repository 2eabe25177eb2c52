package chaos

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/pgleader/pgleader/pgleader"
)

// The properties the checker verifies.
const (
	// PropNoOverlap (1): at no instant of the database's clock do two
	// terms of the key hold a live lease.
	PropNoOverlap = "1"
	// PropWithinLease (1b): no accepted write of a term committed after
	// its lease expired or was released, unless a pause between the
	// body's Live check and the write's send accounts for the lateness.
	PropWithinLease = "1b"
	// PropMonotonic (2): in commit order, the store never accepted a token
	// lower than one it had accepted, nor the same token from two terms.
	PropMonotonic = "2"
	// PropNoLoss (3): every acknowledged unit is in the log, and each
	// term's units are contiguous from 1.
	PropNoLoss = "3"
	// PropRecovery (4): after every heal, a leader writes within TTL +
	// CampaignEvery.
	PropRecovery = "4"
	// PropLease: the lease table's history is consistent with what the
	// replicas saw (every won acquire is in it; no lapsed lease renewed).
	PropLease = "lease"
)

// Violation is one breach of a property.
type Violation struct {
	Property string
	Detail   string
}

// String returns "property P: detail".
func (v Violation) String() string { return "property " + v.Property + ": " + v.Detail }

// Report is the checker's verdict and the run's figures.
type Report struct {
	// Start and End bound the history on the local clock.
	Start, End time.Time
	// Faults counts the faults injected, by kind.
	Faults map[string]int
	// Terms is how many terms acquired the lease; TermsWrote how many of
	// them had a unit accepted.
	Terms, TermsWrote int
	// Writes is the units the store accepted (the log); Acked those whose
	// acknowledgement a replica received.
	Writes, Acked int
	// StaleRefused counts writes the fence refused; ClaimsRefused claims
	// it refused; WriteErrors writes without an answer.
	StaleRefused, ClaimsRefused, WriteErrors int
	// Wipes counts lease wipes; WritesAfterWipe units a term wrote after
	// its lease row was wiped (ordered by the fence, not the lease).
	Wipes, WritesAfterWipe int
	// LateAfterPause counts units that committed after their term's lease
	// ended because the replica was paused between its Live check and the
	// write: the limit documented by pgleader, which the fence orders.
	LateAfterPause int
	// Stalls counts the stalls of the harness's own process that its
	// watchdog recorded, and MaxStall is the longest. LateAfterStall counts
	// units that committed after their term's lease ended while a stall at
	// least as long as their lateness fell between their Live check and
	// their commit: the in-process proxies stand for the network, so such a
	// stall is a delay beyond the bound the delay faults keep to, outside
	// what the yield can cover (as a pause between Live and send is).
	Stalls         int
	MaxStall       time.Duration
	LateAfterStall int
	// LostUnits counts acknowledged units lost with a failed primary, and
	// LostTerms won terms lost with it (see failover.go): excused, and
	// checked as part of that server's history.
	LostUnits, LostTerms int
	// UnansweredReleases counts terms ended before their expiry by a
	// release whose answer never came and whose commit a failover may
	// have lost (see unanswered).
	UnansweredReleases int
	// Failovers is, for each failover, how long until the next term began
	// and until it wrote.
	Failovers []FailoverFigure
	// Recoveries is, for each heal, how long until a unit was accepted
	// (with several keys, until a unit of every key was).
	Recoveries []time.Duration
	healed     []time.Time // each recovery's heal, for one key
	// Keys is each key's figures, by key.
	Keys []KeyFigures
	// RecoveryBound is what property 4 allows after a heal (see
	// RecoveryBound).
	RecoveryBound time.Duration
	// RefusalCost is what property 4 adds to the bound for each claim
	// the fence refused after the heal (see RefusalCost).
	RefusalCost time.Duration
	// CommitTimes is whether the log's id order was checked against the
	// transactions' commit timestamps, not only clock_timestamp() at insert.
	CommitTimes bool
	// EndReasons counts how terms ended, as the replicas saw it.
	EndReasons map[string]int
	// HandOffs counts the releases that handed the lease to a waiting
	// replica in the same statement. A set's history does not tell its
	// hand-offs from its releases (SetBackend.ReleaseSet answers which
	// terms ended, not to whom), so a set run counts none: Set says so.
	HandOffs int
	// Set is whether the replicas ran a pgleader.Set.
	Set bool
	// SessionBound is whether the replicas ran with
	// pgleader.Options.SessionBound (a start event says so); Lapses are
	// then its early take-overs, each classified (see checkLapses), and
	// UnitsAfterLapse the units a lapsed term committed after its
	// take-over (ordered by the fence, property 2).
	SessionBound    bool
	Lapses          []Lapse
	UnitsAfterLapse int
	// Violations lists every breach found; a run passes with none.
	Violations []Violation
}

// OK reports whether the run broke no property.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

// Has reports whether a property was broken.
func (r *Report) Has(property string) bool {
	for _, v := range r.Violations {
		if v.Property == property {
			return true
		}
	}
	return false
}

func (r *Report) violate(property, format string, args ...any) {
	r.Violations = append(r.Violations, Violation{property, fmt.Sprintf(format, args...)})
}

// termSpan is one term's lease on the database clock.
type termSpan struct {
	id      TermID
	expires time.Time // the latest expiry granted to it
	// released and wiped are when its row was released or deleted; zero
	// if never.
	released, wiped time.Time
	// freed is when the server freed its row after the row's expiry by
	// its own record (the token epoch's move): not an end of the term,
	// whose lease may run on by renewals lost in a failover.
	freed   time.Time
	audited bool // the lease table recorded its acquisition
	// began is when the audit recorded its acquisition (the acquiring
	// statement's clock after it wrote the row), zero if not audited.
	began time.Time
	// lapsed is when a session-bound campaign lapsed it (set its expiry
	// to that instant) because its session had ended; zero if never.
	lapsed time.Time
	// mayEnd is the earliest instant at which a release of it whose answer
	// never came may have committed, where the lease audit cannot rule
	// that out (see unanswered); zero if none.
	mayEnd time.Time
}

// start is when the term's lease began: its acquisition time, or, if later,
// when the acquiring statement wrote the row. A set's campaign stamps every
// row it takes with one clock reading taken before it locks them
// (acquire_many's t), so a row freed by a release that committed after that
// reading is stamped as acquired before it was freed; the row was not the
// new term's until the campaign wrote it.
func (t *termSpan) start() time.Time { return maxTime(t.id.Start, t.began) }

// end is the end of its lease interval: expiry, release or wipe.
func (t *termSpan) end() time.Time { return minTime(t.expires, t.released, t.wiped, t.lapsed) }

// entitled is how long the term may write: until its expiry or release.
// A wipe loses the lease data, not the holder's belief; what it writes
// after a wipe is ordered by the fence (property 2).
func (t *termSpan) entitled() time.Time { return minTime(t.expires, t.released) }

func minTime(first time.Time, rest ...time.Time) time.Time {
	m := first
	for _, t := range rest {
		if !t.IsZero() && (m.IsZero() || t.Before(m)) {
			m = t
		}
	}
	return m
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// RecoveryBound is how long after a heal property 4 gives a key to have a
// unit accepted, with spec's timing (defaults filled in, as
// [Harness.Spec] has them): TTL + CampaignEvery for an elector; for a
// set (set true), YieldGrace + ReleaseTimeout + CampaignEvery more, the
// documented edge where every other member had just stepped down from a
// key toward the one that died and holds its campaigns (docs/sets.md).
func RecoveryBound(spec pgleader.Spec, set bool) time.Duration {
	b := spec.TTL + spec.CampaignEvery
	if set {
		b += spec.YieldGrace + spec.ReleaseTimeout + spec.CampaignEvery
	}
	return b
}

// RefusalCost is what one refused claim costs a key's recovery, with
// spec's timing: the term that drew a token the fence had passed ends as
// refused and releases (within ReleaseTimeout), and its replica campaigns
// again CampaignEvery later, one token higher. After the lease data was
// lost, a replica without a FenceFloor climbs to the fence that way, one
// refusal per token (the documented cost of going without a floor; see
// pgleader.Options.FenceFloor), so property 4 allows it per refusal.
func RefusalCost(spec pgleader.Spec) time.Duration {
	return spec.CampaignEvery + spec.ReleaseTimeout
}

// Check verifies properties 1 to 4 on a run's history and the tables read
// after it, with spec's timing, and returns the report; set says the
// replicas ran a pgleader.Set (see RecoveryBound). The properties are per
// key: the history, the log and the lease audit are partitioned by key
// (the harness's own events, which have no key, belong to every key), and
// each key is checked on its own, as if it were the only one. A history
// whose events name no key is one key.
func Check(events []Event, tables Tables, spec pgleader.Spec, set bool) *Report {
	r := &Report{Faults: map[string]int{}, EndReasons: map[string]int{},
		RecoveryBound: RecoveryBound(spec, set), RefusalCost: RefusalCost(spec), Set: set}
	for _, e := range events {
		if e.Kind == KindStart && e.Detail == startSessionBound {
			r.SessionBound = true
		}
		if r.Start.IsZero() || e.Local.Before(r.Start) {
			r.Start = e.Local
		}
		r.End = maxTime(r.End, e.Local)
		switch e.Kind {
		case KindFault:
			r.Faults[e.Fault]++
		case KindWipe:
			r.Wipes++
		case KindStall:
			r.Stalls++
			r.MaxStall = max(r.MaxStall, e.Local.Sub(e.Sent))
		case KindTermEnd:
			r.EndReasons[e.Detail]++
		case KindRelease:
			if e.Result == OK && strings.HasPrefix(e.Detail, "handed off to ") {
				r.HandOffs++
			}
		case KindClaim:
			if e.Result == Refused {
				r.ClaimsRefused++
			}
		case KindWrite:
			switch e.Result {
			case OK:
				r.Acked++
			case Refused:
				r.StaleRefused++
			case Failed:
				r.WriteErrors++
			}
		}
	}
	r.Writes, r.CommitTimes = len(tables.Units), tables.CommitTimes

	keys := keysOf(events, tables)
	fs := failovers(events)
	heals := map[time.Time]time.Duration{}
	for _, key := range keys {
		kevents, ktables := partition(events, tables, key)
		k := &Report{RecoveryBound: r.RecoveryBound, RefusalCost: r.RefusalCost, SessionBound: r.SessionBound}
		checkKey(k, kevents, ktables, fs)
		r.Lapses = append(r.Lapses, k.Lapses...)
		r.UnitsAfterLapse += k.UnitsAfterLapse
		r.Keys = append(r.Keys, KeyFigures{Key: key, Terms: k.Terms, TermsWrote: k.TermsWrote, Writes: len(ktables.Units)})
		r.Terms += k.Terms
		r.TermsWrote += k.TermsWrote
		r.WritesAfterWipe += k.WritesAfterWipe
		r.LateAfterPause += k.LateAfterPause
		r.LateAfterStall += k.LateAfterStall
		r.LostUnits += k.LostUnits
		r.LostTerms += k.LostTerms
		r.UnansweredReleases += k.UnansweredReleases
		for _, v := range k.Violations {
			if len(keys) > 1 {
				v.Detail = "key " + key + ": " + v.Detail
			}
			r.Violations = append(r.Violations, v)
		}
		for i, took := range k.Recoveries {
			heals[k.healed[i]] = max(heals[k.healed[i]], took)
		}
		r.Failovers = mergeFailovers(r.Failovers, k.Failovers)
	}
	for _, at := range slices.SortedFunc(maps.Keys(heals), time.Time.Compare) {
		r.Recoveries = append(r.Recoveries, heals[at])
	}
	return r
}

// KeyFigures is one key's share of a run.
type KeyFigures struct {
	Key               string
	Terms, TermsWrote int
	Writes            int
}

// checkKey verifies the properties on one key's events and tables.
func checkKey(r *Report, events []Event, tables Tables, fs []failover) {
	events, tables.Units = alignStarts(events, tables.Units, tables.Changes)
	terms := buildTerms(r, events, tables.Changes, fs)
	r.Terms = len(terms)
	lost := lostUnits(r, events, tables.Units, fs)
	all := append(slices.Clone(tables.Units), lost...)
	checkOverlap(r, terms)
	if r.SessionBound {
		checkLapses(r, events, all, terms)
	}
	checkWithinLease(r, events, all, terms)
	checkMonotonic(r, tables)
	checkLostOrder(r, tables.Units, lost, fs)
	checkContiguous(r, tables.Units, lost)
	checkRecovery(r, events, all)
	r.Failovers = failoverFigures(fs, terms, all)
}

// keysOf returns the keys named in the history and the tables, sorted, or
// [""] if none is.
func keysOf(events []Event, tables Tables) []string {
	seen := map[string]bool{}
	for _, e := range events {
		if e.Key != "" {
			seen[e.Key] = true
		}
	}
	for _, u := range tables.Units {
		if u.Key != "" {
			seen[u.Key] = true
		}
	}
	for _, c := range tables.Changes {
		if c.Key != "" {
			seen[c.Key] = true
		}
	}
	if len(seen) == 0 {
		return []string{""}
	}
	return slices.Sorted(maps.Keys(seen))
}

// partition returns key's events (its own and the harness's, which have no
// key) and its tables: its units in id order, its lease changes, and its
// fence.
func partition(events []Event, tables Tables, key string) ([]Event, Tables) {
	var out []Event
	for _, e := range events {
		if e.Key == key || e.Key == "" {
			out = append(out, e)
		}
	}
	t := Tables{Fence: tables.Fence, CommitTimes: tables.CommitTimes}
	if f, ok := tables.Fences[key]; ok {
		t.Fence = f
	}
	for _, u := range tables.Units {
		if u.Key == key || u.Key == "" {
			t.Units = append(t.Units, u)
		}
	}
	for _, c := range tables.Changes {
		if c.Key == key || c.Key == "" {
			t.Changes = append(t.Changes, c)
		}
	}
	return out, t
}

// alignStarts identifies each won term by the lease row's acquisition
// time. An elector's acquire reports that time itself; a set's campaign
// reports one clock reading for every key it won (set_acquire's db_now),
// taken after the rows were written, which the replica recorded as the
// term's start and its body wrote into the log. For a won acquire whose
// term the audit does not show as such, the audit's acquisition of the
// same key by the same owner with the same token, at most the statement's
// round trip before that reading (the latest such), is the term's start:
// the acquire's events and units are rewritten to it. An acquire with no
// such acquisition is left as it is (lost in a failover, or a violation of
// property lease).
func alignStarts(events []Event, units []Unit, changes []LeaseChange) ([]Event, []Unit) {
	audited := map[TermID]bool{}
	for _, c := range changes {
		if c.NewHolder != "" {
			audited[TermID{c.NewHolder, c.NewToken, instant(c.NewAcquired)}] = true
		}
	}
	moved := map[TermID]time.Time{}
	for _, e := range events {
		if e.Kind != KindAcquire || e.Result != OK || audited[e.termID()] {
			continue
		}
		window := e.Local.Sub(e.Sent)
		var best time.Time
		for _, c := range changes {
			if c.NewHolder != e.Owner || c.NewToken != e.Token || c.NewAcquired.After(e.Term) {
				continue
			}
			if e.Term.Sub(c.NewAcquired) <= window && c.NewAcquired.After(best) {
				best = c.NewAcquired
			}
		}
		if !best.IsZero() {
			moved[e.termID()] = instant(best)
		}
	}
	if len(moved) == 0 {
		return events, units
	}
	events, units = slices.Clone(events), slices.Clone(units)
	for i := range events {
		if at, ok := moved[events[i].termID()]; ok && !events[i].Term.IsZero() {
			events[i].Term = at
		}
	}
	for i := range units {
		if at, ok := moved[units[i].termID()]; ok {
			units[i].TermStart = at
		}
	}
	return events, units
}

// mergeFailovers combines the failover figures of the keys checked so far
// (acc) with one key's (k): the same failovers, each taking the longest
// time any key took to a new term and to its first write.
func mergeFailovers(acc, k []FailoverFigure) []FailoverFigure {
	if acc == nil {
		return slices.Clone(k)
	}
	for i := range acc {
		if i < len(k) {
			acc[i].ToLeader = max(acc[i].ToLeader, k[i].ToLeader)
			acc[i].ToWrite = max(acc[i].ToWrite, k[i].ToWrite)
		}
	}
	return acc
}

// buildTerms reconstructs every term's lease from the lease table's audit,
// and from the replicas' acquire, renew, release and wipe events where the
// audit does not cover them: where it has no audit, or where the audit's
// rows may have been lost in one of the failovers fs.
func buildTerms(r *Report, events []Event, changes []LeaseChange, fs []failover) map[TermID]*termSpan {
	terms := map[TermID]*termSpan{}
	lastChange := map[string]time.Time{} // each server's last surviving change
	var cur *termSpan                    // the term in the lease row, as the audit walks
	var rows []surviving                 // the row after each change of a server of the lineage
	order := lineage(fs)
	for _, c := range changes {
		if c.Server != "" {
			lastChange[c.Server] = maxTime(lastChange[c.Server], c.At)
		}
		oldID := TermID{c.OldHolder, c.OldToken, instant(c.OldAcquired)}
		newID := TermID{c.NewHolder, c.NewToken, instant(c.NewAcquired)}
		if c.OldHolder != "" && cur != nil && cur.id == oldID {
			switch {
			case c.Op == "DELETE":
				cur.wiped = c.At
			case c.NewHolder == "" && !c.At.Before(c.OldExpires):
				// The server freed a row that had expired by its own
				// record: the token epoch's move after a promotion frees
				// every expired row. That is not the holder's release:
				// its term runs to the expiry its replica was told of,
				// which counts renewals lost with the failed primary (the
				// holder may write until its yield, docs/ha.md; the grace
				// keeps every other term off the row until then).
				cur.freed = c.At
			case c.NewHolder == "":
				cur.released = c.At
			case newID != oldID && c.HandedOff:
				// Handed off: the write that ends the term starts the
				// next one, at the instant it stamps as that one's start.
				cur.released = minTime(c.At, instant(c.NewAcquired))
			case r.SessionBound && newID == oldID && c.NewExpires.Before(c.OldExpires):
				// campaign_bound lapsed the term: its session had ended.
				cur.lapsed = minTime(instant(c.NewExpires), cur.lapsed)
			case newID == oldID && !c.NewExpires.Equal(c.OldExpires):
				// Judged by the instant the server decided the renewal
				// at (the row's renewed_at, when the change wrote it),
				// not by when the audit trigger ran, after the
				// statement's last row; a change that left renewed_at
				// as it was, or an audit without it (older histories),
				// is judged by At.
				decided := c.At
				if !c.NewRenewed.IsZero() && !c.NewRenewed.Equal(c.OldRenewed) {
					decided = c.NewRenewed
				}
				if !decided.Before(c.OldExpires) {
					r.violate(PropLease, "term %s renewed at %s (audited at %s) after its lease expired at %s",
						fmtTerm(oldID), fmtTime(decided), fmtTime(c.At), fmtTime(c.OldExpires))
				}
				cur.expires = maxTime(cur.expires, c.NewExpires)
			}
		}
		if c.NewHolder != "" && newID != oldID {
			cur = &termSpan{id: newID, expires: c.NewExpires, audited: true, began: c.At}
			terms[newID] = cur
		}
		if n, ok := order[c.Server]; ok {
			row := surviving{server: n, at: c.At}
			if cur != nil && cur.released.IsZero() && cur.wiped.IsZero() && cur.freed.IsZero() {
				row.holder = cur
			}
			rows = append(rows, row)
		}
	}
	audited := len(changes) > 0

	var wipes []time.Time
	for _, e := range events {
		switch {
		case e.Kind == KindWipe:
			wipes = append(wipes, e.DB)
		case e.Kind == KindAcquire && e.Result == OK:
			t := terms[e.termID()]
			if t == nil {
				switch {
				case audited && lostTerm(fs, e, lastChange):
					r.LostTerms++
				case audited:
					r.violate(PropLease, "%s won term %s, which the lease table never recorded", e.Owner, fmtTerm(e.termID()))
				}
				t = &termSpan{id: e.termID()}
				terms[t.id] = t
			}
			t.expires = maxTime(t.expires, e.Expires)
		}
	}
	for _, e := range events {
		if e.Term.IsZero() {
			continue
		}
		t := terms[e.termID()]
		if t == nil {
			continue
		}
		switch {
		case e.Kind == KindRenew && e.Result == OK:
			t.expires = maxTime(t.expires, e.Expires)
		case e.Kind == KindRelease && e.Result == Failed:
			if at, ok := unanswered(t, e, fs, rows); ok {
				t.mayEnd = minTime(at, t.mayEnd)
			}
		case e.Kind == KindRelease && e.Result == OK && (!t.audited || mayBeLost(fs, e.Sent)):
			// The release's commit time is on the server; its send is the
			// best the replica knows (for a release lost in a failover, at
			// most its round trip early). A possibly lost release ends the
			// term if the surviving audit ends it later, by another change
			// than this release (which it would record before the replica
			// heard of it): a wipe on the promoted server, or the token
			// epoch's move there, which frees the expired row.
			at := e.DB
			if at.IsZero() {
				at = e.Sent
			}
			if !t.audited || at.Before(t.end()) && (t.released.IsZero() || t.released.After(e.Local)) {
				t.released = at
			}
		}
	}
	if r.SessionBound {
		lapsedByEvents(events, terms, fs)
	}
	r.UnansweredReleases += settleUnanswered(terms)
	for _, t := range terms {
		for _, w := range wipes {
			// A wipe the audit recorded ends the term no later than w.
			if (!t.audited || mayBeLost(fs, w)) && w.After(t.id.Start) && w.Before(t.end()) {
				t.wiped = w
			}
		}
	}
	return terms
}

// surviving is the lease row as the surviving audit left it after one
// change: on the server numbered server in the lineage, at the change's
// time, held by holder (nil if no term held it, or the audit does not know
// which).
type surviving struct {
	server int
	at     time.Time
	holder *termSpan
}

// unanswered returns the earliest instant at which e, a release of t whose
// answer never came, may have ended t's lease, and whether the lease audit
// leaves that possible at all. Its outcome is unknown: it may have
// committed at any instant after it was sent, on the server it reached.
// Where that server's audit survived whole (no failover lost its rows),
// the audit shows whether it committed, and ended the term if it did. So
// it may end t only on a server that was failed over (lostBy), and only
// if what survived of that server's history (rows, in the audit's order)
// leaves t holding the row: it committed after that, and after it was
// sent. A term the audit never recorded (lost in a failover itself, or an
// audit-free history) may have been ended by it from its send.
func unanswered(t *termSpan, e Event, fs []failover, rows []surviving) (time.Time, bool) {
	if !t.audited {
		return e.Sent, true
	}
	order := lineage(fs)
	var at time.Time
	for _, s := range lostBy(fs, e.Sent) {
		// The row on s as its surviving history left it: after its last
		// change, or the last change of a server before it in the
		// lineage, whose row s inherited.
		var last *surviving
		for i := range rows {
			if rows[i].server <= order[s] {
				last = &rows[i]
			}
		}
		if last == nil || last.holder != t {
			continue
		}
		at = minTime(maxTime(e.Sent, last.at), at)
	}
	return at, !at.IsZero()
}

// lineage numbers the servers in the order they were primary: the first
// one 0, each promoted standby the next number.
func lineage(fs []failover) map[string]int {
	order := map[string]int{}
	for k, f := range fs {
		if k == 0 {
			order[f.old] = 0
		}
		order[f.new] = k + 1
	}
	return order
}

// settleUnanswered ends each term that a release whose answer never came
// may have ended (mayEnd, before its lease ended otherwise) as late as that
// release may have committed without the term overlapping the next one to
// begin: at the next term's start, or at mayEnd if that is later. Property
// 1 holds under a commit between mayEnd and that start, if any; property
// 1b then holds the term's units to the latest such commit, so the one
// outcome serves both. A term that still believed it led when the next one
// began had not sent its release (pgleader releases a term only once its
// body returned), so its mayEnd is after that start, and the overlap is
// reported. It returns how many terms it ended.
func settleUnanswered(terms map[TermID]*termSpan) int {
	list := sortedTerms(terms)
	slices.SortStableFunc(list, func(a, b *termSpan) int { return a.start().Compare(b.start()) })
	n := 0
	for i, t := range list {
		if t.mayEnd.IsZero() || !t.mayEnd.Before(t.end()) || i+1 == len(list) {
			continue
		}
		if at := maxTime(t.mayEnd, list[i+1].start()); at.Before(t.end()) {
			t.released = at
			n++
		}
	}
	return n
}

func sortedTerms(terms map[TermID]*termSpan) []*termSpan {
	list := make([]*termSpan, 0, len(terms))
	for _, t := range terms {
		list = append(list, t)
	}
	slices.SortFunc(list, func(a, b *termSpan) int {
		return cmp.Or(a.id.Start.Compare(b.id.Start), cmp.Compare(a.id.Token, b.id.Token), cmp.Compare(a.id.Owner, b.id.Owner))
	})
	return list
}

// checkOverlap: property 1. Sorted by start, each term must start at or
// after the end of every earlier term's lease.
func checkOverlap(r *Report, terms map[TermID]*termSpan) {
	var latest *termSpan
	list := sortedTerms(terms)
	slices.SortStableFunc(list, func(a, b *termSpan) int { return a.start().Compare(b.start()) })
	for _, t := range list {
		if latest != nil && t.start().Before(latest.end()) {
			r.violate(PropNoOverlap, "term %s began at %s while term %s held the lease until %s (overlap %v)",
				fmtTerm(t.id), fmtTime(t.start()), fmtTerm(latest.id), fmtTime(latest.end()), latest.end().Sub(t.start()))
		}
		if latest == nil || t.end().After(latest.end()) {
			latest = t
		}
	}
}

// checkWithinLease: property 1b, on the accepted units.
func checkWithinLease(r *Report, events []Event, units []Unit, terms map[TermID]*termSpan) {
	type key struct {
		term TermID
		seq  int
	}
	writes := map[key]Event{} // by term and seq: a lost unit's id may be drawn again
	var stalls []Event
	for _, e := range events {
		switch {
		case e.Kind == KindWrite && e.Result == OK:
			writes[key{e.termID(), e.Seq}] = e
		case e.Kind == KindStall:
			stalls = append(stalls, e)
		}
	}
	wrote := map[TermID]bool{}
	for _, u := range units {
		t := terms[u.termID()]
		if t == nil {
			r.violate(PropWithinLease, "unit %d (%s seq %d) was written by term %s, which never held the lease",
				u.ID, u.Owner, u.Seq, fmtTerm(u.termID()))
			continue
		}
		wrote[t.id] = true
		at := u.at()
		if at.Before(t.id.Start) {
			r.violate(PropWithinLease, "unit %d of term %s committed at %s, before the term began", u.ID, fmtTerm(t.id), fmtTime(at))
		}
		if !t.wiped.IsZero() && at.After(t.wiped) {
			r.WritesAfterWipe++
		}
		end := t.entitled()
		if !at.After(end) {
			continue
		}
		late := at.Sub(end)
		e, ok := writes[key{u.termID(), u.Seq}]
		if ok && e.Sent.Sub(e.Checked) >= late {
			r.LateAfterPause++
			continue
		}
		if ok && stalledFor(stalls, e.Checked, at) >= late {
			r.LateAfterStall++
			continue
		}
		r.violate(PropWithinLease, "unit %d (seq %d) of term %s committed at %s, %v after its lease ended at %s",
			u.ID, u.Seq, fmtTerm(t.id), fmtTime(at), late, fmtTime(end))
	}
	r.TermsWrote = len(wrote)
}

// stalledFor returns the longest harness stall that lies wholly between
// from and to.
func stalledFor(stalls []Event, from, to time.Time) time.Duration {
	var longest time.Duration
	for _, s := range stalls {
		if !s.Sent.Before(from) && !s.Local.After(to) {
			longest = max(longest, s.Local.Sub(s.Sent))
		}
	}
	return longest
}

// checkMonotonic: property 2, in the log's id order, which is commit
// order: the fenced UPDATE takes the digest row's lock before the log row
// draws its id, and holds it until commit, so writers draw ids in the order
// they commit. The log's own clock readings (and commit timestamps, when
// tracked) must agree.
func checkMonotonic(r *Report, tables Tables) {
	var prev *Unit
	for i := range tables.Units {
		u := &tables.Units[i]
		if prev != nil {
			checkPair(r, prev, u, tables.CommitTimes, "")
		}
		prev = u
	}
	if prev != nil && tables.Fence < prev.Token {
		r.violate(PropMonotonic, "the digest's fence is %d, below the last accepted token %d", tables.Fence, prev.Token)
	}
}

// checkPair checks that u may follow prev in commit order; note describes
// u if it is not in the log.
func checkPair(r *Report, prev, u *Unit, commitTimes bool, note string) {
	switch {
	case u.Token < prev.Token:
		r.violate(PropMonotonic, "unit %d with token %d (term %s)%s was accepted after unit %d with token %d (term %s)",
			u.ID, u.Token, fmtTerm(u.termID()), note, prev.ID, prev.Token, fmtTerm(prev.termID()))
	case u.Token == prev.Token && u.termID() != prev.termID():
		r.violate(PropMonotonic, "two terms with token %d both wrote: unit %d of %s%s follows unit %d of %s",
			u.Token, u.ID, fmtTerm(u.termID()), note, prev.ID, fmtTerm(prev.termID()))
	}
	if u.LoggedAt.Before(prev.LoggedAt) || (commitTimes && u.Committed.Before(prev.Committed)) {
		r.violate(PropMonotonic, "units %d and %d%s are not in commit order (logged %s then %s; committed %s then %s)",
			prev.ID, u.ID, note, fmtTime(prev.LoggedAt), fmtTime(u.LoggedAt), fmtTime(prev.Committed), fmtTime(u.Committed))
	}
}

// checkLostOrder: property 2 on each failed server's own history. When it
// was killed, a server held the log's units that it and the servers before
// it accepted, then the units lost with it; those must follow in order.
func checkLostOrder(r *Report, units, lost []Unit, fs []failover) {
	for k, f := range fs {
		before := map[string]bool{}
		for _, g := range fs[:k+1] {
			before[g.old] = true
		}
		var prev *Unit
		for i := range units {
			if before[units[i].Server] {
				prev = &units[i]
			}
		}
		var mine []Unit
		for _, u := range lost {
			if u.Server == f.old {
				mine = append(mine, u)
			}
		}
		slices.SortFunc(mine, func(a, b Unit) int { return cmp.Or(a.LoggedAt.Compare(b.LoggedAt), cmp.Compare(a.ID, b.ID)) })
		for i := range mine {
			u := &mine[i]
			if prev != nil {
				checkPair(r, prev, u, false, " (lost with "+f.old+")")
			}
			prev = u
		}
	}
}

// lostUnits: property 3's first half. Every acknowledged unit must be in
// the log under its row id, unless it was lost in a failover (lostUnit);
// it returns those, as units of the server that accepted them.
func lostUnits(r *Report, events []Event, units []Unit, fs []failover) []Unit {
	byID := make(map[int64]*Unit, len(units))
	survivors := map[string]*Unit{} // each server's last unit in the log
	for i := range units {
		u := &units[i]
		byID[u.ID] = u
		if u.Server != "" {
			survivors[u.Server] = u
		}
	}
	var lost []Unit
	for _, e := range events {
		if e.Kind != KindWrite || e.Result != OK {
			continue
		}
		u := byID[e.ID]
		if u != nil && u.termID() == e.termID() && u.Seq == e.Seq {
			continue
		}
		if lostUnit(fs, e, survivors) {
			r.LostUnits++
			lost = append(lost, Unit{ID: e.ID, Owner: e.Owner, Token: e.Token, TermStart: e.Term, Seq: e.Seq, Server: e.Server, LoggedAt: e.DB})
			continue
		}
		r.violate(PropNoLoss, "%s's unit seq %d of term %s was acknowledged as row %d%s, which the log does not hold",
			e.Owner, e.Seq, fmtTerm(e.termID()), e.ID, onServer(e.Server))
	}
	return lost
}

func onServer(s string) string {
	if s == "" {
		return ""
	}
	return " by " + s
}

// checkContiguous: property 3's second half. Each term's units, in the log
// and lost in a failover, are numbered 1, 2, 3, … with no gap and no
// repeat, and the log holds them in that order.
func checkContiguous(r *Report, units, lost []Unit) {
	type key struct {
		term TermID
		seq  int
	}
	gone := map[key]bool{}
	for _, u := range lost {
		gone[key{u.termID(), u.Seq}] = true
	}
	next := map[TermID]int{}
	for _, u := range units {
		id := u.termID()
		want := next[id] + 1
		for gone[key{id, want}] {
			want++
		}
		if u.Seq != want {
			r.violate(PropNoLoss, "term %s logged seq %d where seq %d was due (unit %d)", fmtTerm(id), u.Seq, want, u.ID)
		}
		next[id] = max(u.Seq, next[id])
	}
}

// checkRecovery: property 4. After each heal, some unit must be accepted
// within r.RecoveryBound, and r.RefusalCost more for each claim the fence
// refused meanwhile. A unit lost in a later failover counts: it was
// accepted.
func checkRecovery(r *Report, events []Event, units []Unit) {
	units = slices.Clone(units)
	slices.SortStableFunc(units, func(a, b Unit) int { return a.LoggedAt.Compare(b.LoggedAt) })
	for _, e := range events {
		if e.Kind != KindHeal {
			continue
		}
		i, _ := slices.BinarySearchFunc(units, e.DB, func(u Unit, t time.Time) int { return u.LoggedAt.Compare(t) })
		if i == len(units) {
			r.violate(PropRecovery, "no unit was accepted after the heal at %s", fmtTime(e.DB))
			continue
		}
		took := units[i].LoggedAt.Sub(e.DB)
		r.Recoveries = append(r.Recoveries, took)
		r.healed = append(r.healed, instant(e.DB))
		bound := max(r.RecoveryBound, graceEnd(events, e.DB, r.RecoveryBound).Add(r.RecoveryBound).Sub(e.DB))
		bound += time.Duration(refusedClaims(events, e.DB, units[i].LoggedAt)) * r.RefusalCost
		if took > bound {
			r.violate(PropRecovery, "after the heal at %s the first unit was accepted %v later (bound %v)",
				fmtTime(e.DB), took.Round(time.Millisecond), bound)
		}
	}
}

// refusedClaims counts the claims the fence refused that were sent from
// since until before.
func refusedClaims(events []Event, since, before time.Time) int {
	n := 0
	for _, c := range events {
		if c.Kind == KindClaim && c.Result == Refused && !c.Sent.Before(since) && c.Sent.Before(before) {
			n++
		}
	}
	return n
}

// graceEnd returns when the server's grace (docs/ha.md) after the last
// crash restart or failover before heal ends at the latest, or the zero
// time. The run sets max_ttl to the TTL; the restart itself (down for at
// most TTL/2, then started) is allowed graceStart, and so is the first
// lease operation on a promoted server after the paths moved to it. A
// crash restart or a promotion grants no new term for max_ttl from the
// server's first lease operation after it.
func graceEnd(events []Event, heal time.Time, ttlPlus time.Duration) time.Time {
	var end time.Time
	for _, f := range events {
		crash := f.Kind == KindFault && f.Fault == FaultPGRestart && strings.HasPrefix(f.Detail, "immediate=true")
		if (crash || f.Kind == KindFailover) && f.Local.Before(heal) {
			end = maxTime(end, f.Local.Add(graceStart+ttlPlus))
		}
	}
	return end
}

// graceStart bounds how long after a crash restart's fault event, or a
// failover's move of the paths, the server notices its grace.
const graceStart = 10 * time.Second

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("15:04:05.000000")
}

func fmtTerm(id TermID) string {
	return fmt.Sprintf("(%s, token %d, from %s)", id.Owner, id.Token, fmtTime(id.Start))
}
