//go:build unix

package main

import (
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/pgleader/pgleader/pgleader"
)

const advanceUsage = `Usage: pgleader advance [--database URL] KEY FLOOR

Raises KEY's token counter to at least FLOOR while its lease is free, so the
next term draws at least FLOOR+1. FLOOR is 0 to 4611686018427387903
(2^62 - 1), which leaves room for tokens above every floor. Use it after the lease data was lost (a
restore, a wiped table) with FLOOR the highest token your fenced store has
seen. It never lowers the counter, and changes nothing while a replica holds
the lease: stop the replicas, or let the lease expire, first.

It prints whether it advanced and the counter afterwards, and exits 0 if it
advanced, 1 if the lease was held.
`

func cmdAdvance(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("advance", advanceUsage, stderr)
	db := databaseFlag(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usagef("advance", "want KEY FLOOR, got %d arguments", len(pos))
	}
	key := pos[0]
	if err := pgleader.CheckKey(key); err != nil {
		return usagef("advance", "KEY: %v", err)
	}
	floor, err := strconv.ParseInt(pos[1], 10, 64)
	if err != nil || pgleader.CheckFloor(floor) != nil {
		return usagef("advance", "FLOOR must be a whole number from 0 to %d, got %q", pgleader.MaxFloor, pos[1])
	}
	ctx, pool, done, err := connect("advance", *db)
	if err != nil {
		return err
	}
	defer done()

	advanced, counter, err := pgleader.NewPostgres(pool, pgleader.PollOnly()).Advance(ctx, key, floor)
	if err != nil {
		return notMigratedHint(err)
	}
	if !advanced {
		fmt.Fprintf(stdout, "not advanced: key %q is held; counter %d\n", key, counter)
		return exitStatus(1)
	}
	if counter == math.MaxInt64 {
		// Only a counter set by hand gets here; tokens never go down.
		fmt.Fprintf(stdout, "advanced: key %q counter %d; no token is left for it: use another key\n", key, counter)
		return exitStatus(1)
	}
	fmt.Fprintf(stdout, "advanced: key %q counter %d; the next term draws %d\n", key, counter, counter+1)
	return nil
}
