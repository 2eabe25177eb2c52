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
)

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
