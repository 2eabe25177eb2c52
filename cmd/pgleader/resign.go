//go:build unix

package main

import (
	"fmt"
	"io"
	"strconv"

	"github.com/pgleader/pgleader/pgleader"
)

const resignUsage = `Usage: pgleader resign [--database URL] [--token N] KEY

Asks the term holding KEY's lease to end. Its replica learns at its next
renewal (within RenewEvery), ends the term gracefully as it would on stop
(the body is told, then cancelled YieldGrace later, then the lease is
released), and campaigns again; a waiting replica usually takes over. With
--token, only the term with that token is asked, so a resign meant for a
term that has already ended does not hit its successor; N is a positive
whole number, and a --token given empty asks nobody.

It exits 0 if a term was asked, and 1 if nobody holds the lease or another
term than --token does.
`

func cmdResign(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("resign", resignUsage, stderr)
	db := databaseFlag(fs)
	tokenFlag := fs.String("token", "", "ask only the term with this token")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("resign", "want one KEY, got %d arguments", len(pos))
	}
	key := pos[0]
	if err := pgleader.CheckKey(key); err != nil {
		return usagef("resign", "KEY: %v", err)
	}
	var token int64
	if given(fs, "token") {
		token, err = strconv.ParseInt(*tokenFlag, 10, 64)
		if err != nil || token < 1 {
			return usagef("resign", "--token must be a positive whole number, got %q", *tokenFlag)
		}
	}
	ctx, pool, done, err := connect("resign", *db)
	if err != nil {
		return err
	}
	defer done()

	l, asked, err := pgleader.NewPostgres(pool, pgleader.PollOnly()).Resign(ctx, key, token)
	switch {
	case err != nil:
		return notMigratedHint(err)
	case asked:
		fmt.Fprintf(stdout, "asked: key %q term %d of %s will end at its next renewal\n", key, l.Token, l.Holder)
		return nil
	case !l.Held():
		fmt.Fprintf(stdout, "not asked: nobody holds key %q (last token %d)\n", key, l.Token)
	default:
		fmt.Fprintf(stdout, "not asked: key %q is held by term %d of %s, not %d\n", key, l.Token, l.Holder, token)
	}
	return exitStatus(1)
}
