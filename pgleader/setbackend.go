package pgleader

import (
	"context"
	"time"
)

// SetMember is one live replica of a set as the backend last recorded it.
type SetMember struct {
	// Owner names the replica.
	Owner string
	// Held is how many of the set's keys it held live at its last renewal.
	Held int
}

// SetBackend runs the batched operations of a [Set]: each call is one
// statement, whatever the number of keys, and decides every key by the
// same rules as the corresponding [Backend] operation. Implementations must
// be safe for concurrent use. [Postgres] implements it; so does the
// in-memory backend of package pgleadertest.
type SetBackend interface {
	// AcquireSet is a replica's campaign. It counts the set's live members
	// (owner included, even before it first renews), takes for owner up to
	// ceil(n / members) - held + extra of keys, where n = held + len(keys),
	// among those whose lease is free or expired, each drawing a token
	// above its counter and its floor (floors[i] for keys[i]; floors may be
	// nil), and returns the leases won and the member count. keys are the
	// set's keys owner does not hold. A key locked by another operation is
	// skipped, not waited for.
	AcquireSet(ctx context.Context, set, owner string, keys []string, floors []int64, ttl time.Duration, held, extra int) (won []Lease, members int, err error)

	// RenewSet is a replica's renewal tick: it renews each term (keys[i],
	// owner, tokens[i]) as Renew would, returning the new expiry (or an
	// earlier instant: the lease is held at least until then) or the zero
	// time for a term that no longer holds its lease, and records
	// owner as a live member of set holding held keys, returning the live
	// members (owner included) ordered by owner.
	RenewSet(ctx context.Context, set, owner string, keys []string, tokens []int64, ttl time.Duration, held int) (expires []time.Time, members []SetMember, err error)

	// ReleaseSet releases each term (keys[i], owner, tokens[i]) as Release
	// would and reports for each whether it did; with leave, it also
	// removes owner from the set's members.
	ReleaseSet(ctx context.Context, set, owner string, keys []string, tokens []int64, leave bool) (released []bool, err error)

	// Abilities is the backend's, as [Backend.Abilities]; a Set uses its
	// Logger and Hold.
	Abilities() Abilities
}

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
func CheckSetAcquire(set, owner string, keys []string, floors []int64, ttl time.Duration, held, extra int) error {
	if err := checkSetCall(set, owner, keys, nil, false); err != nil {
		return err
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
func CheckSetRelease(set, owner string, keys []string, tokens []int64) error {
	return checkSetCall(set, owner, keys, tokens, true)
}
