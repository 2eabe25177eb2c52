//go:build unix

package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgleader/pgleader/migrations"
)

const grantUsage = `Usage: pgleader grant [--database URL] [--steer] ROLE

Gives ROLE what an application needs to use pgleader without owning it, by
calling the SQL function pgleader.grant_usage: USAGE on the schema
"pgleader" and EXECUTE on the functions an application calls (no privilege
on any table: the functions are the only door), and
SELECT on the history table pgleader_schema_migrations in this connection's
current schema, so that 'migrate up' (or migrations.Up) run by ROLE on an
up-to-date database succeeds. ROLE acts only on its own keys: a key belongs
to the role that first acquired it.

With --steer (pgleader.grant_steer), ROLE may also resign, transfer and
advance the keys of every role, e.g. for an operator's 'pgleader resign'.

Run it as the role that migrated, after 'pgleader migrate up'; it is safe to
repeat.
`

func cmdGrant(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("grant", grantUsage, stderr)
	db := databaseFlag(fs)
	steer := fs.Bool("steer", false, "also let ROLE resign, transfer and advance every role's keys (pgleader.grant_steer)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] == "" {
		return usagef("grant", "want ROLE, got %d arguments", len(pos))
	}
	role := pos[0]
	ctx, pool, done, err := connect("grant", *db)
	if err != nil {
		return err
	}
	defer done()

	var history *string
	err = pool.QueryRow(ctx, `
		WITH h AS (SELECT to_regclass(quote_ident(current_schema()) || '.' || quote_ident($2)) AS t)
		SELECT t::text FROM h, pgleader.grant_usage($1, h.t) AS g`, role, migrations.HistoryTable).Scan(&history)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgErr.Code == "3F000" || pgErr.Code == "42883") {
			return errors.New("grant: the database has no pgleader schema, or an outdated one: run 'pgleader migrate up'")
		}
		return fmt.Errorf("grant: %w", err)
	}
	if *steer {
		if _, err := pool.Exec(ctx, `SELECT pgleader.grant_steer($1)`, role); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "42883" {
				return errors.New("grant: --steer: the schema lacks pgleader.grant_steer: run 'pgleader migrate up'")
			}
			return fmt.Errorf("grant --steer: %w", err)
		}
		fmt.Fprintf(stdout, "%s may steer (resign, transfer, advance) every role's keys\n", role)
	}
	if history == nil {
		fmt.Fprintf(stdout, "granted the use of pgleader to %s (no history table %s in the current schema)\n", role, migrations.HistoryTable)
		return nil
	}
	fmt.Fprintf(stdout, "granted the use of pgleader to %s, and SELECT on %s\n", role, *history)
	return nil
}
