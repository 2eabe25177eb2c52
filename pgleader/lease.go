package pgleader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgleader/pgleader/internal/check"
)

// MaxKeyLen and MaxOwnerLen are the longest key and owner, and MaxValueLen
// the longest value, in bytes, that a lease accepts.
const (
	MaxKeyLen   = 200
	MaxOwnerLen = 200
	MaxValueLen = 1024
)

// Lease is one key's lease as a backend last saw it.
type Lease struct {
	// Key names the lease.
	Key string
	// Holder is the owner of the term that holds the lease unexpired, or ""
	// when it is free (released, expired or never taken).
	Holder string
	// Token is the holding term's token; when the lease is free, the last
	// token issued for the key (0 if none).
	Token int64
	// AcquiredAt, RenewedAt and ExpiresAt are the holding term's times on
	// the backend's clock; zero when the lease is free.
	AcquiredAt, RenewedAt, ExpiresAt time.Time
	// Now is the backend's clock when it read the lease.
	Now time.Time
	// Value is what the holding term published with its lease
	// (Options.Value), "" when it published nothing or the lease is free.
	// Only a backend with Abilities.Values keeps values.
	Value string
}

// Held reports whether a term held the lease when it was read.
func (l Lease) Held() bool { return l.Holder != "" }

// Remaining is how long the lease had left when it was read, on the
// backend's clock; 0 when it is free.
func (l Lease) Remaining() time.Duration {
	if !l.Held() {
		return 0
	}
	return max(l.ExpiresAt.Sub(l.Now), 0)
}

// Backend is the one contract a lease store keeps for an [Elector]: the
// operations of a term, each one atomic, conditional operation decided on
// the backend's own clock, and Abilities, which says what else it can do.
// Implementations must be safe for concurrent use.
//
// The PostgreSQL implementation is [Postgres]; an in-memory one for tests is
// in package pgleadertest. Every implementation must pass the test suite in
// package github.com/pgleader/pgleader/pgleader/backendtest, which checks
// this contract and, where Abilities claims them, the abilities.
type Backend interface {
	// Campaign takes the lease for c.Owner if it is free or expired,
	// drawing a token greater than every token issued before for key (and,
	// if the backend can advance, above floor: the counter is first raised
	// to floor), publishes c.Value with it if the backend keeps values,
	// and returns it with acquired = true. If another term holds the lease,
	// nothing about it changes, no token is consumed, the holder, its
	// token, expiry and value are returned with acquired = false, and, if
	// the backend keeps candidates and c.TTL > 0, c is registered as a
	// candidate of key until c.TTL from now. If c.Owner holds a term handed
	// to it and not yet confirmed, Campaign confirms it: the lease is
	// extended to ttl from now and acquired is true.
	Campaign(ctx context.Context, key string, c Candidate, ttl time.Duration, floor int64) (lease Lease, acquired bool, err error)

	// RenewTerm extends the term's lease to ttl from now on the backend's
	// clock and returns the new expiry, or [ErrLost] if the term no longer
	// holds it unexpired. It never changes the token. resign reports that
	// the term was asked to end since (see [Steerer]), or, unless minTerm
	// is [NoPreference], that the term has lasted minTerm while a live
	// candidate of higher priority waits.
	RenewTerm(ctx context.Context, key, owner string, token int64, ttl, minTerm time.Duration) (expires time.Time, resign bool, err error)

	// HandOff ends the term (key, owner, token) and, in the same atomic
	// operation, hands the lease to the best live candidate: to if it is
	// one (or the target of a transfer), else the one of highest priority,
	// then the longest waiting. The successor's term has the next token
	// and expires at its candidate expiry until it confirms it (by
	// Campaign). Without a live candidate, or in a backend that keeps
	// none, it releases. It reports whether the term still held the lease,
	// and the successor ("" if released).
	HandOff(ctx context.Context, key, owner string, token int64, to string) (released bool, successor string, err error)

	// Release frees the lease if the term still holds it, and reports
	// whether it did. A stale term's release changes nothing.
	Release(ctx context.Context, key, owner string, token int64) (released bool, err error)

	// Lease reads key's lease.
	Lease(ctx context.Context, key string) (Lease, error)

	// Abilities says what the backend can do beyond the operations above.
	// It returns the same value on every call.
	Abilities() Abilities
}

// NoPreference is the minTerm of a RenewTerm that never asks the term to
// step down for a candidate of higher priority; any other negative minTerm
// is invalid.
const NoPreference time.Duration = -1

// Abilities is what a [Backend] can do beyond the operations every backend
// has. The zero value is a backend that keeps neither values nor
// candidates, cannot advance, and pushes no events.
type Abilities struct {
	// Advance: Campaign raises the token counter to its floor, so that
	// after lost lease data the next term draws floor+1 (see
	// Spec.RequireFenceAdvance).
	Advance bool
	// Values: Campaign publishes Candidate.Value with a term it wins, and
	// RenewTerm reports a resignation asked from outside.
	Values bool
	// Candidates: Campaign registers waiting candidates and HandOff hands
	// the lease to one; RenewTerm honours minTerm. Without, HandOff
	// releases.
	Candidates bool
	// Steer asks terms from outside to end, hands them over, lists and
	// withdraws candidates and advances counters; nil if the backend
	// cannot.
	Steer Steerer
	// Events pushes lease events, so candidates wake at a release instead
	// of polling; nil if the backend cannot.
	Events Watcher
	// Logger receives the logs of Electors and Sets that have no logger
	// of their own; nil: slog.Default().
	Logger *slog.Logger
	// Hold, if set, is called as Run starts and the function it returns as
	// Run ends: the backend keeps its connections open while any Run does.
	Hold func() (release func())
	// PrepareHandOff, if set, loads what a hand-off with ttl will need
	// (on the connection it will run on), off the hand-off's path: an
	// Elector calls it once a term has settled. A failure costs the
	// hand-off time, not correctness.
	PrepareHandOff func(ctx context.Context, ttl time.Duration) error

	// session opens the connection of a session-bound Elector (see
	// Options.SessionBound); nil if the backend cannot bind terms to a
	// session: only a Postgres backend that can open connections of its
	// own can.
	session func(key string, ttl time.Duration, log *slog.Logger) *boundSession
	// connect is the configuration of the connections a session-bound
	// Set member opens of its own (see SetOptions.SessionBound); nil if
	// the backend cannot open any.
	connect *pgx.ConnConfig
}

// Steerer is the part of a backend that acts on terms from outside them.
type Steerer interface {
	// Resign asks the term holding key's lease — only the term with token,
	// if token is not 0 — to end: its holder learns at its next renewal and
	// ends the term as resigned, gracefully. It reports whether a term was
	// asked, and the lease as it was: held by another token, or free (then
	// nobody was asked).
	Resign(ctx context.Context, key string, token int64) (lease Lease, asked bool, err error)
	// Transfer asks the term holding key to end and hand off to the live
	// candidate to; its holder learns at its next renewal. An error
	// matching [ErrNoCandidate] says to is not a live candidate. It reports
	// whether a term was asked, and the lease as it was.
	Transfer(ctx context.Context, key, to string) (lease Lease, asked bool, err error)
	// Candidates lists key's live candidates, the best first.
	Candidates(ctx context.Context, key string) ([]Candidate, error)
	// Withdraw removes owner's candidate registration for key.
	Withdraw(ctx context.Context, key, owner string) error
	// Advance raises key's token counter to at least floor while the lease
	// is free, so the next term draws at least floor+1. It never lowers
	// the counter and changes nothing while a term holds the lease; it
	// reports whether the lease was free and the counter afterwards.
	Advance(ctx context.Context, key string, floor int64) (advanced bool, counter int64, err error)
}

// CheckKey returns an error matching [ErrInvalid] unless key is a usable
// lease key: not empty, valid UTF-8, at most [MaxKeyLen] bytes.
func CheckKey(key string) error {
	return checkName("key", key, MaxKeyLen)
}

// CheckOwner is [CheckKey] for owners, with the limit [MaxOwnerLen].
func CheckOwner(owner string) error {
	return checkName("owner", owner, MaxOwnerLen)
}

// CheckValue returns an error matching [ErrInvalid] unless value is valid
// UTF-8 without NUL, at most [MaxValueLen] bytes; "" is valid.
func CheckValue(value string) error {
	if value == "" {
		return nil
	}
	return checkName("value", value, MaxValueLen)
}

// CheckTTL returns an error matching [ErrInvalid] unless ttl is at least one
// microsecond, the database's resolution.
func CheckTTL(ttl time.Duration) error {
	if ttl < time.Microsecond {
		return invalidf("ttl must be at least 1µs, got %v", ttl)
	}
	return nil
}

func checkName(what, s string, limit int) error {
	if err := check.Name(what, s, limit); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// CheckToken returns an error matching [ErrInvalid] unless token is
// positive, as every issued token is.
func CheckToken(token int64) error {
	if err := check.Token(token); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// MaxFloor is the largest floor a key's token counter may be advanced to,
// 2^62 - 1. It leaves 2^62 tokens above every floor, so no floor, advance
// or fence can exhaust a key's tokens; the SQL functions refuse larger
// floors too.
const MaxFloor int64 = 1<<62 - 1

// CheckFloor returns an error matching [ErrInvalid] unless floor is 0 to
// [MaxFloor].
func CheckFloor(floor int64) error {
	if floor < 0 {
		return invalidf("floor must not be negative, got %d", floor)
	}
	if floor > MaxFloor {
		return invalidf("floor %d is above the limit %d (2^62 - 1)", floor, MaxFloor)
	}
	return nil
}

func checkTerm(key, owner string, token int64) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if err := CheckOwner(owner); err != nil {
		return err
	}
	return CheckToken(token)
}

// Candidate is a replica campaigning for a key (see [Backend.Campaign]).
type Candidate struct {
	// Owner, Priority and Value are the candidate's: Value becomes its
	// term's value when it wins or the lease is handed to it, and a leader
	// of lower Priority steps down for it (see Options.Priority).
	Owner    string
	Priority int32
	Value    string
	// TTL is how long the campaign keeps the registration (0: Campaign
	// does not register); RegisteredAt and ExpiresAt are the backend's
	// record, set by Steerer.Candidates.
	TTL                     time.Duration
	RegisteredAt, ExpiresAt time.Time
}

// ErrNoCandidate is matched by the error of a transfer to an owner that is
// not a live candidate of the key.
var ErrNoCandidate = errors.New("pgleader: not a live candidate")
