//go:build unix

package main

import (
	"fmt"
	"io"

	"github.com/pgleader/pgleader/migrations"
)

const migrateUsage = `Usage: pgleader migrate [--database URL] [--yes] up|down|version

  up       apply every pgleader migration not yet applied (safe to repeat,
           and to run from several replicas at once)
  down     revert them all: drops the schema "pgleader" with every lease,
           token counter and fence in it; needs --yes
  version  print the applied schema version; exits 1 if the last migration
           failed half-way (dirty)

The history is kept in the table pgleader_schema_migrations, apart from the
application's own golang-migrate history.
`

func cmdMigrate(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("migrate", migrateUsage, stderr)
	db := databaseFlag(fs)
	yes := fs.Bool("yes", false, "confirm 'down', which drops every lease and token counter")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("migrate", "want one of up, down or version, got %q", pos)
	}
	action := pos[0]
	if action != "up" && action != "down" && action != "version" {
		return usagef("migrate", "unknown action %q (want up, down or version)", action)
	}
	if action == "down" && !*yes {
		return usagef("migrate", "down drops the schema \"pgleader\" with every lease and token counter; add --yes to confirm")
	}
	url, err := databaseURL("migrate", *db)
	if err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	pool, err := openPool(ctx, "migrate", url)
	if err != nil {
		return err
	}
	defer pool.Close()

	switch action {
	case "up":
		if err := migrations.Up(ctx, pool); err != nil {
			return err
		}
	case "down":
		if err := migrations.Down(ctx, pool); err != nil {
			return err
		}
	}
	version, dirty, err := migrations.Version(ctx, pool)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "schema version %d (this pgleader ships %d)\n", version, migrations.Latest)
	if dirty {
		return fmt.Errorf("migrate: version %d is dirty: its migration failed half-way; repair the schema by hand, then force the version with the golang-migrate CLI (table %s)",
			version, migrations.HistoryTable)
	}
	return nil
}
