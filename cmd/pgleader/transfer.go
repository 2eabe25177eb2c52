//go:build unix

package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/pgleader/pgleader/pgleader"
)

const transferUsage = `Usage: pgleader transfer [--database URL] KEY OWNER

Asks the term holding KEY's lease to end and hand the lease to OWNER, a
replica waiting for KEY (see the candidates in 'pgleader status KEY'). The
holder learns at its next renewal (within RenewEvery), ends its term
gracefully as on stop (the body is told, then cancelled YieldGrace later)
and hands off: OWNER's term starts with the next token, in the statement
that ends the old one. If OWNER has stopped waiting by then, the best other
candidate takes over.

It exits 0 if the holder was asked; 1 if OWNER is not a live candidate of
KEY (nothing changes), nobody holds the lease, or OWNER already holds it.
`

func cmdTransfer(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("transfer", transferUsage, stderr)
	db := databaseFlag(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usagef("transfer", "want KEY and OWNER, got %d arguments", len(pos))
	}
	key, to := pos[0], pos[1]
	if err := pgleader.CheckKey(key); err != nil {
		return usagef("transfer", "KEY: %v", err)
	}
	if err := pgleader.CheckOwner(to); err != nil {
		return usagef("transfer", "OWNER: %v", err)
	}
	ctx, pool, done, err := connect("transfer", *db)
	if err != nil {
		return err
	}
	defer done()

	l, asked, err := pgleader.NewPostgres(pool, pgleader.PollOnly()).Transfer(ctx, key, to)
	switch {
	case errors.Is(err, pgleader.ErrNoCandidate):
		fmt.Fprintf(stdout, "not asked: %q is not a live candidate of key %q (see 'pgleader status %s')\n", to, key, key)
		return exitStatus(1)
	case err != nil:
		return notMigratedHint(err)
	case asked:
		fmt.Fprintf(stdout, "asked: key %q term %d of %s will end at its next renewal and hand off to %s\n", key, l.Token, l.Holder, to)
		return nil
	case !l.Held():
		fmt.Fprintf(stdout, "not asked: nobody holds key %q (last token %d)\n", key, l.Token)
	default:
		fmt.Fprintf(stdout, "not asked: %s already holds key %q (term %d)\n", l.Holder, key, l.Token)
	}
	return exitStatus(1)
}
