package pgleader

import (
	"errors"
	"fmt"
)

var (
	// ErrLost is returned by [Backend.Renew] when the term no longer holds
	// the lease: it expired on the database clock, another term took it, or
	// the lease data was lost.
	ErrLost = errors.New("pgleader: lease lost")

	// ErrInvalid is matched by every error about bad input or bad
	// configuration: an empty or over-long key or owner, a non-positive
	// TTL, an invalid Spec.
	ErrInvalid = errors.New("pgleader: invalid")

	// ErrNotMigrated is matched when the database lacks pgleader's schema.
	ErrNotMigrated = errors.New("pgleader: the pgleader schema is missing or outdated; " +
		"apply it with 'pgleader migrate up' (cmd/pgleader) or migrations.Up(ctx, pool) from github.com/pgleader/pgleader/migrations")

	// ErrAdvanceUnsupported is returned when a Spec requires fence advance
	// and the backend cannot move its token counter.
	ErrAdvanceUnsupported = errors.New("pgleader: backend cannot advance its token counter")

	// ErrNotLeader is returned by [Elector.StepDown] when the elector holds
	// no live term.
	ErrNotLeader = errors.New("pgleader: not leading")

	// ErrHeld is matched by the error of [Elector.RunOnce] and [Do] when
	// another term holds the lease; the error names the holder.
	ErrHeld = errors.New("pgleader: the lease is held by another term")

	// ErrTermEnded is matched by the error of [Elector.RunOnce] and [Do]
	// when the term ended before the body returned (lost, expiring,
	// stopped, resigned) or never ran it (refused); the error names the
	// reason, and wraps the body's own error if it returned one.
	ErrTermEnded = errors.New("pgleader: the term ended before the body finished")

	// ErrForbidden is matched when PostgreSQL refused an operation to the
	// connection's role (SQLSTATE 42501): the key belongs to another role
	// (a key is the role's that first acquired it), or
	// the role was not granted the use of pgleader (pgleader grant ROLE).
	// The error carries the server's message, which names the key's role.
	ErrForbidden = errors.New("pgleader: forbidden to this role")
)

// Permanent reports whether err is one that retrying cannot cure: the
// schema is missing or older than this module needs ([ErrNotMigrated]),
// the connection's role may not use it or the key ([ErrForbidden]), or the
// database refused an argument, such as a TTL above its max_ttl
// ([ErrInvalid]). Such an error ends [Elector.Run] and [Set.Run] when the
// database has not yet answered that kind of statement in the run (an
// Elector's campaign; a Set's tick, or its campaign); after an answer,
// they log it and retry, since a migration or a grant under way can cause
// it for a moment. Status's LastError is then the error Run returned.
func Permanent(err error) bool {
	return errors.Is(err, ErrNotMigrated) || errors.Is(err, ErrForbidden) || errors.Is(err, ErrInvalid)
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
