package chaos

import (
	"slices"
	"time"
)

// This file is what the checker knows of failovers, and what it excuses
// because of them (docs/safety.md, "What the checker excuses after a
// failover").
//
// An asynchronous standby has a prefix of what its primary committed: WAL
// is replayed in order. When the primary is killed and the standby
// promoted, the rows the primary acknowledged after that prefix are gone,
// and with them the lease changes and units they recorded. PostgreSQL
// promises nothing more; pgleader's promise (docs/ha.md) is that the new
// server grants no term while one the old server granted may be live. So
// the checker excuses exactly the absence of rows that async replication
// can lose, and checks everything it knows of them against the properties
// as if they had survived:
//
//   - a unit acknowledged by a server that was failed over, and later (in
//     id and in time) than every unit that survived from that server, is
//     lost, not missing (property 3). It still counts for properties 1b, 2
//     and 3's seq contiguity, as a unit of that server's history;
//   - a won acquire that may have been answered by a server that was
//     failed over, and is later than every lease change that survived
//     from it, is lost, not unrecorded (property lease). Its term still
//     takes part in property 1, with the lease interval its replica saw;
//   - a release or wipe that may have committed on a server that was
//     failed over ends a term the surviving lease table still shows as
//     holding. So may a release whose answer never came, from its send (and
//     after the last change that survived from its server), if that
//     server's surviving audit leaves the term holding the row; it is
//     settled as late as it may have committed without an overlap
//     (unanswered and settleUnanswered in check.go).

// failover is one failover from the history.
type failover struct {
	old, new string
	// killed: the old primary's kill began (local clock); promoted: the
	// new primary's clock once promoted; moved: every path had moved to
	// the new primary (local clock).
	killed, promoted, moved time.Time
}

func failovers(events []Event) []failover {
	var out []failover
	for _, e := range events {
		if e.Kind == KindFailover {
			out = append(out, failover{old: e.Prev, new: e.Server, killed: e.Sent, promoted: e.DB, moved: e.Local})
		}
	}
	slices.SortFunc(out, func(a, b failover) int { return a.killed.Compare(b.killed) })
	return out
}

// lostBy returns the failed servers that may have answered a statement
// sent at sent: a server is primary from the kill of its predecessor (a
// proxy may already have moved to it) until every path moved away from it.
func lostBy(fs []failover, sent time.Time) []string {
	var out []string
	for k, f := range fs {
		if sent.Before(f.moved) && (k == 0 || !sent.Before(fs[k-1].killed)) {
			out = append(out, f.old)
		}
	}
	return out
}

// mayBeLost reports whether a statement sent at sent may have committed on
// a server that was failed over.
func mayBeLost(fs []failover, sent time.Time) bool { return len(lostBy(fs, sent)) > 0 }

// lostUnit reports whether the acknowledged write e, absent from the log,
// was lost in a failover: its server was failed over, and it is later, in
// id and in time, than every unit that survived from that server
// (survivors: the last surviving unit of each server).
func lostUnit(fs []failover, e Event, survivors map[string]*Unit) bool {
	if e.Server == "" || !slices.ContainsFunc(fs, func(f failover) bool { return f.old == e.Server }) {
		return false
	}
	last := survivors[e.Server]
	return last == nil || (e.ID > last.ID && e.DB.After(last.LoggedAt))
}

// lostTerm reports whether the won acquire e, which the lease table never
// recorded, was lost in a failover: a server that may have answered it was
// failed over, and e is later than every lease change that survived from
// that server (lastChange: the time of each server's last).
func lostTerm(fs []failover, e Event, lastChange map[string]time.Time) bool {
	for _, s := range lostBy(fs, e.Sent) {
		if e.Term.After(lastChange[s]) {
			return true
		}
	}
	return false
}

// FailoverFigure is what one failover cost: from the promotion to the
// next term's acquisition, and to the first unit accepted from a term
// begun after the promotion (the next term's, unless its claim was
// refused or it failed before writing).
type FailoverFigure struct {
	// Old and New name the failed primary and the promoted standby.
	Old, New string
	// Promoted is the new primary's clock once promoted.
	Promoted time.Time
	// ToLeader and ToWrite are zero if no term began (or wrote) before the
	// next failover or the end of the run.
	ToLeader, ToWrite time.Duration
}

// failoverFigures measures each failover: the first term that began after
// the promotion (before the next failover), and the first unit such a
// term had accepted (units: the log's and the lost ones).
func failoverFigures(fs []failover, terms map[TermID]*termSpan, units []Unit) []FailoverFigure {
	list := sortedTerms(terms)
	var out []FailoverFigure
	for k, f := range fs {
		fig := FailoverFigure{Old: f.old, New: f.new, Promoted: f.promoted}
		until := time.Time{}
		if k+1 < len(fs) {
			until = fs[k+1].killed
		}
		in := func(t time.Time) bool { return t.After(f.promoted) && (until.IsZero() || t.Before(until)) }
		for _, t := range list {
			if in(t.id.Start) {
				fig.ToLeader = t.id.Start.Sub(f.promoted)
				break
			}
		}
		for _, u := range units {
			if d := u.at().Sub(f.promoted); in(u.TermStart) && in(u.at()) && (fig.ToWrite == 0 || d < fig.ToWrite) {
				fig.ToWrite = d
			}
		}
		out = append(out, fig)
	}
	return out
}
