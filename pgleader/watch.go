package pgleader

import (
	"context"
	"time"
)

// EventKind says what happened to a lease.
type EventKind int

// The kinds of lease events.
const (
	// EventAcquired: a term took the lease (a hint, from the Elector's
	// announcement of its term; see Watcher.Announce).
	EventAcquired EventKind = iota + 1
	// EventReleased: the holding term freed the lease (a hint).
	EventReleased
	// EventResync: the watcher (re)connected, and events may have been
	// missed before it; candidates should look again.
	EventResync
	// EventDeaf: the watcher stopped delivering events (its connection
	// was lost); candidates poll until EventResync.
	EventDeaf
	// EventHandedOff: the holding term handed the lease to Event.Owner (a
	// hint, unless Checked). From schema version 24 the hint names the
	// row's holder whenever the lease moved past the ended term to a live
	// holder: the successor also after it took the lease, and a campaign's
	// winner when the hand-off found no successor and released.
	EventHandedOff
)

// String returns the kind's name.
func (k EventKind) String() string {
	switch k {
	case EventAcquired:
		return "acquire"
	case EventReleased:
		return "release"
	case EventResync:
		return "resync"
	case EventDeaf:
		return "deaf"
	case EventHandedOff:
		return "handoff"
	}
	return "unknown"
}

// Event is one change to a key's lease, pushed to candidates by a Watcher.
// Acquire, renew and release events are hints: the PostgreSQL channel they
// come on accepts a notification from any role that can connect, so a
// candidate only ever looks again when it hears one, and believes what it
// reads.
type Event struct {
	Kind EventKind
	Key  string
	// Owner is the successor a hand-off event names.
	Owner string
	// Checked is set on a hand-off event that the watcher already checked
	// with the database for the candidate it names (see [Postgres]): Lease
	// and Acquired are the database's answer to a statement sent at Sent,
	// or Err why there is none. Acquired means the term was handed to the
	// candidate and is live: Lease.ExpiresAt less Lease.Now is how long it
	// had left when the database looked, at least CandidateWatch.Keep (a
	// term with less left was confirmed, as by Backend.Campaign, and has
	// the TTL).
	Checked  bool
	Acquired bool
	Lease    Lease
	Sent     time.Time
	Err      error
}

// keep reports whether ev must not be dropped for a newer event: it is the
// only record of a confirmed term.
func (ev Event) keep() bool { return ev.Checked && ev.Acquired }

// Watcher is the part of a backend that pushes lease events (see
// Abilities.Events), so candidates campaign when a lease is released
// instead of polling. The PostgreSQL backend does it with LISTEN/NOTIFY on
// one connection per backend, shared by every Elector that uses it.
type Watcher interface {
	// Watch delivers key's events on the returned channel until stop is
	// called. Delivery never blocks the watcher: a reader that falls more
	// than a few events behind loses the oldest ones. stop waits until
	// nothing more is sent, and may be called more than once.
	Watch(key string) (events <-chan Event, stop func())
	// WatchCandidate is Watch for candidate c: a hand-off hint naming
	// c.Owner is checked with the backend (confirming the term if it was
	// handed to c.Owner, as Campaign does) and delivered as a Checked
	// event; hints naming others are not delivered. A backend that keeps
	// no candidates watches as Watch does.
	WatchCandidate(key string, c CandidateWatch) (events <-chan Event, stop func())
	// Listening reports whether events are being delivered now. While it
	// is false, candidates poll every CampaignEvery.
	Listening() bool
	// Announce tells key's watchers, best-effort, that a term took the
	// lease: a backend whose acquire notifies nothing (so that a
	// notification can never fail or slow it) needs it for [Observe]. An
	// Elector announces each term it wins, after the term has started.
	// Watchers treat it as a hint and read the lease.
	Announce(ctx context.Context, key string) error
}

// CandidateWatch is what [Watcher.WatchCandidate] needs to check a hand-off hint
// for a candidate.
type CandidateWatch struct {
	// Owner is the candidate; TTL the lease TTL its confirmed term gets.
	Owner string
	TTL   time.Duration
	// Budget bounds each check from its send: a term confirmed later would
	// be past its yield instant.
	Budget time.Duration
	// HeedEvery spaces the checks after one proved false, so that a flood
	// of forged hints costs at most one statement per HeedEvery.
	HeedEvery time.Duration
	// Keep is how long a handed-off term must have left to be believed on
	// a read alone: its first bound is then the hand-off's (the candidate's
	// expiry), and the holder's first renewal confirms it. A term with less
	// left, or every term when Keep is 0, is confirmed by a write that
	// extends it to TTL.
	Keep time.Duration
}
