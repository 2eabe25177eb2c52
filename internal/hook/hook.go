// Package hook holds switches that break pgleader on purpose, so that the
// fault-injection checker (internal/chaos) can show it catches the
// breakage (nothing but tests of the checker sets them), and Bound, through
// which the fault-injection harness sees a session-bound elector's own
// connection and the lapses of a session-bound set.
package hook

import (
	"sync/atomic"
	"time"
)

// NoYield, when set, disables the term's timeline: a term whose renewals
// fail is never told to yield, its body is never cancelled at C, and
// Term.Live ignores the clock. Lost and stopped terms still end.
var NoYield atomic.Bool

// Bound, when set, sees the statements a session-bound Elector
// (pgleader.Options.SessionBound) runs on its own connection, which no
// Backend wrapper sees: the fault-injection harness gates them while a
// replica is paused and records their outcomes, as it does for the
// backend's calls. It observes; it changes nothing the Elector decides.
var Bound atomic.Pointer[BoundHooks]

// BoundHooks are the calls of Bound. Each is optional.
type BoundHooks struct {
	// Gate is called before each statement on the connection of the
	// elector of owner (and before it connects); an error fails the
	// statement unsent, as a crashed process would.
	Gate func(owner string) error
	// Report is called after each campaign, renewal, release or
	// hand-off statement on that connection, with its outcome.
	Report func(BoundReport)
	// SetLapse is called when a session-bound Set member's statement
	// lapsed keys (pgleader.SetOptions.SessionBound): set_bind on its new
	// session, or set_wake on its watch connection.
	SetLapse func(SetLapse)
}

// SetLapse names the terms one set_bind or set_wake lapsed: Keys[i] was
// held by Holders[i] with token Tokens[i] since Acquired[i], and its lease
// now expires At (the database's clock). Owner is the member that ran the
// statement, sent at Sent.
type SetLapse struct {
	Owner, Set string
	// Op is "bind" or "wake".
	Op       string
	Sent, At time.Time
	Keys     []string
	Holders  []string
	Tokens   []int64
	Acquired []time.Time
}

// BoundReport is one statement on a session-bound elector's connection.
type BoundReport struct {
	Owner string
	// Op is "campaign", "renew", "release" or "handoff".
	Op   string
	Sent time.Time
	Err  error
	// A campaign's answer: Won, the lease's holder, token, expiry and
	// acquisition, the database's clock (Now), whether the term won is
	// bound to the session, and whether the campaign lapsed a bound term
	// whose session had ended.
	Won, Bound, Lapsed bool
	Holder             string
	Token              int64
	Now, Expires       time.Time
	AcquiredAt         time.Time
	// A renewal's: Expires (zero and Lost when the term was no longer
	// the owner's on this session). A release's or hand-off's: Released,
	// and Successor for a hand-off.
	Lost, Released bool
	Successor      string
}
