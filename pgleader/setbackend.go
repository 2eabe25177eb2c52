package pgleader

import (
	"context"
	"time"
)

// SetMember is one live replica of a set as the backend last recorded it.
type SetMember struct {
	// Owner names the replica.
	Owner string
	// Held is how many of the set's keys it held live at its last renewal,
	// with the terms handed to it and not yet confirmed (Handed).
	Held int
	// Expires is when its membership lapses unless it renews: no later
	// than the leases it renewed with it.
	Expires time.Time
}

// SetRenewal is the answer of [SetBackend.RenewSet], per key in the order
// given and for the set.
type SetRenewal struct {
	// Expires is each term's new expiry (or an earlier instant: the lease
	// is held at least until then), or the zero time for a term that no
	// longer holds its lease.
	Expires []time.Time
	// Resign reports the terms renewed that were asked to end (resign,
	// transfer); nil when none was.
	Resign []bool
	// Members are the set's live members, owner included, ordered by owner.
	Members []SetMember
	// Handed is how many terms other members handed to owner
	// (ReleaseSet) that wait for its AcquireSet to confirm them.
	Handed int
}

// SetBackend runs the batched operations of a [Set]: each call is one
// statement, whatever the number of keys, and decides every key by the
// same rules as the corresponding [Backend] operation. Implementations must
// be safe for concurrent use. [Postgres] implements it; so does the
// in-memory backend of package pgleadertest.
type SetBackend interface {
	// AcquireSet is a replica's campaign. It first confirms the terms
	// handed to owner by another member's ReleaseSet whose keys are among
	// keys or confirm (its token as handed, AcquiredAt the hand-off's
	// instant) and returns them as won; a term handed to owner's name for a
	// key of neither (an Elector's, another set's) is left alone. Then it
	// counts the set's live members (owner included, even before it first
	// renews) and takes for owner up to ceil(total / members) - held -
	// (terms confirmed) + extra of keys, and at most MaxSetTake, among
	// those whose lease is free or expired, each drawing a token above its
	// counter and its floor (floors[i] for keys[i]; floors may be nil); it
	// returns the leases won
	// and the member count. keys are set keys owner does not hold, all of
	// them or a part; total is how many keys of the set owner knows (0:
	// held + len(keys)). A key locked by another operation is skipped, not
	// waited for.
	AcquireSet(ctx context.Context, set, owner string, keys []string, floors []int64, ttl time.Duration, held, extra, total int, confirm []string) (won []Lease, members int, err error)

	// RenewSet is a replica's renewal tick: it renews each term (keys[i],
	// owner, tokens[i]) as RenewTerm would, and records owner as a live
	// member of set holding held keys plus the terms handed to it and not
	// yet confirmed; see SetRenewal.
	RenewSet(ctx context.Context, set, owner string, keys []string, tokens []int64, ttl time.Duration, held int) (SetRenewal, error)

	// ReleaseSet ends each term (keys[i], owner, tokens[i]) that still
	// holds its lease, and reports for each whether it did. Where
	// handOff[i] (handOff may be nil), the lease goes to another live
	// member of the set, as HandOff gives one to a candidate: the member's
	// term draws the next token, unconfirmed, and the member's next
	// AcquireSet confirms it. The keys handed off are dealt one by one to
	// the member holding fewest (held at its last renewal, plus the keys
	// dealt to it). Other terms (and all, with no other live member) are
	// released as Release would. With leave, owner first leaves the set's
	// members.
	ReleaseSet(ctx context.Context, set, owner string, keys []string, tokens []int64, handOff []bool, leave bool) (ended []bool, err error)

	// Abilities is the backend's, as [Backend.Abilities]; a Set uses its
	// Logger and Hold.
	Abilities() Abilities
}

// MaxSetTake is the most keys one [SetBackend.AcquireSet] takes, so that
// a campaign's statement stays short; a Set campaigns again at once after a
// campaign that won (pgleader.set_acquire, schema 17).
const MaxSetTake = 10000

// checkSetCall checks what every SetBackend call shares.
func checkSetCall(set, owner string, keys []string, tokens []int64, needTokens bool) error {
	if err := CheckKey(set); err != nil {
		return invalidf("set name: %v", err)
	}
	if err := CheckOwner(owner); err != nil {
		return err
	}
	seen := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		if err := CheckKey(k); err != nil {
			return err
		}
		if _, dup := seen[k]; dup {
			return invalidf("key %q appears twice", k)
		}
		seen[k] = struct{}{}
	}
	if needTokens {
		if len(tokens) != len(keys) {
			return invalidf("%d keys but %d tokens", len(keys), len(tokens))
		}
		for _, t := range tokens {
			if err := CheckToken(t); err != nil {
				return err
			}
		}
	}
	return nil
}

// CheckSetAcquire returns an error matching [ErrInvalid] unless the
// arguments of [SetBackend.AcquireSet] are valid; backends call it before
// they send anything.
func CheckSetAcquire(set, owner string, keys []string, floors []int64, ttl time.Duration, held, extra, total int, confirm []string) error {
	if err := checkSetCall(set, owner, keys, nil, false); err != nil {
		return err
	}
	for _, k := range confirm {
		if err := CheckKey(k); err != nil {
			return err
		}
	}
	if err := CheckTTL(ttl); err != nil {
		return err
	}
	if floors != nil && len(floors) != len(keys) {
		return invalidf("%d keys but %d floors", len(keys), len(floors))
	}
	for _, f := range floors {
		if err := CheckFloor(f); err != nil {
			return err
		}
	}
	if held < 0 || extra < 0 {
		return invalidf("held and extra must not be negative, got %d and %d", held, extra)
	}
	if total != 0 && total < held+len(keys) {
		return invalidf("total must be 0 or at least held + len(keys) (%d), got %d", held+len(keys), total)
	}
	return nil
}

// CheckSetRenew is [CheckSetAcquire] for [SetBackend.RenewSet].
func CheckSetRenew(set, owner string, keys []string, tokens []int64, ttl time.Duration, held int) error {
	if err := checkSetCall(set, owner, keys, tokens, true); err != nil {
		return err
	}
	if held < 0 {
		return invalidf("held must not be negative, got %d", held)
	}
	return CheckTTL(ttl)
}

// CheckSetRelease is [CheckSetAcquire] for [SetBackend.ReleaseSet].
func CheckSetRelease(set, owner string, keys []string, tokens []int64, handOff []bool) error {
	if handOff != nil && len(handOff) != len(keys) {
		return invalidf("%d keys but %d hand-off flags", len(keys), len(handOff))
	}
	return checkSetCall(set, owner, keys, tokens, true)
}
