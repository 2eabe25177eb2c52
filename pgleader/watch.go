package pgleader

import (
	"context"
	"time"
)

// EventKind says what happened to a lease.
type EventKind int

// The kinds of lease events.
const (
	// EventAcquired: a term took the lease (a hint; sent by replicas of
	// earlier versions, which notified every acquire).
	EventAcquired EventKind = iota + 1
	// EventRenewed: the holding term extended the lease (a hint; sent by
	// replicas of earlier versions, which notified every renewal).
	EventRenewed
	// EventReleased: the holding term freed the lease (a hint).
	EventReleased
	// EventResync: the watcher (re)connected, and events may have been
	// missed before it; candidates should look again.
	EventResync
	// EventDeaf: the watcher stopped delivering events (its connection
	// was lost); candidates poll until EventResync.
	EventDeaf
	// EventHandedOff: the holding term handed the lease to Event.Owner (a
	// hint, unless Checked).
	EventHandedOff
)

// String returns the kind's name.
func (k EventKind) String() string {
	switch k {
	case EventAcquired:
		return "acquire"
	case EventRenewed:
		return "renew"
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
	// term with less left was confirmed, as by Handoffer.Campaign, and has
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

// Watcher is implemented by backends that push lease events, so candidates
// campaign when a lease is released or expires instead of polling. The
// PostgreSQL backend does it with LISTEN/NOTIFY on one connection per
// backend, shared by every Elector that uses it.
type Watcher interface {
	// Watch delivers key's events on the returned channel until stop is
	// called. Delivery never blocks the watcher: a reader that falls more
	// than a few events behind loses the oldest ones. stop waits until
	// nothing more is sent, and may be called more than once.
	Watch(key string) (events <-chan Event, stop func())
	// Listening reports whether events are being delivered now. While it
	// is false, candidates poll every CampaignEvery.
	Listening() bool
}

// CandidateWatch is what a [CandidateWatcher] needs to check a hand-off hint
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

// CandidateWatcher is implemented by Watchers that check a hand-off hint
// naming a candidate themselves, on their own connection, and deliver the
// answer as a Checked [EventHandedOff] ([Postgres] does). An Elector whose
// backend is a [Handoffer] uses it when it waits.
type CandidateWatcher interface {
	Watcher
	// WatchCandidate is Watch for candidate c: a hand-off hint naming
	// c.Owner is checked with the backend (confirming the term if it was
	// handed to c.Owner, as Handoffer.Campaign does) and delivered as a
	// Checked event; hints naming others are not delivered.
	WatchCandidate(key string, c CandidateWatch) (events <-chan Event, stop func())
}

// FloorAcquirer is implemented by backends that can raise the token counter
// to a floor and acquire in one atomic operation. It does what Advance and
// then Acquire do, in one round trip.
type FloorAcquirer interface {
	AcquireWithFloor(ctx context.Context, key, owner string, ttl time.Duration, floor int64) (lease Lease, acquired bool, err error)
}
