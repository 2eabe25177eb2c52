//go:build unix

package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/pgleader/pgleader/migrations"
)

const migrateUsage = `Usage: pgleader migrate [--database URL] [--yes] up|down|version|to VERSION

  up       apply every pgleader migration not yet applied (safe to repeat,
           and to run from several replicas at once)
  down     revert them all: drops the schema "pgleader" with every lease,
           token counter and fence in it; needs --yes
  to N     migrate up or down to version N (1 to the version this pgleader
           ships); going down reverts what the later versions added, and
           needs --yes
  version  print the applied schema version; exits 1 if the last migration
           failed half-way (dirty), or if this pgleader cannot migrate it (a
           newer version, or one an unreleased development build wrote)

The history is kept in the table pgleader_schema_migrations, apart from the
application's own golang-migrate history.
`

func cmdMigrate(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("migrate", migrateUsage, stderr)
	db := databaseFlag(fs)
	yes := fs.Bool("yes", false, "confirm 'down', which drops every lease and token counter, or 'to' a lower version")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	action, target, err := migrateAction(pos)
	if err != nil {
		return err
	}
	if action == "down" && !*yes {
		return usagef("migrate", "down drops the schema \"pgleader\" with every lease and token counter; add --yes to confirm")
	}
	ctx, pool, done, err := connect("migrate", *db)
	if err != nil {
		return err
	}
	defer done()

	switch action {
	case "up":
		if err := migrations.Up(ctx, pool); err != nil {
			return err
		}
	case "down":
		if err := migrations.Down(ctx, pool); err != nil {
			return err
		}
	case "to":
		current, _, err := migrations.Version(ctx, pool)
		if err != nil {
			return err
		}
		if err := migrations.CheckVersion(current); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		if target < current && !*yes {
			var reverted []string
			for _, v := range migrations.Versions() {
				if v > target && v <= current {
					reverted = append(reverted, strconv.FormatUint(uint64(v), 10))
				}
			}
			what := "version " + strings.Join(reverted, ", ")
			if len(reverted) > 1 {
				what = "versions " + strings.Join(reverted, ", ")
			}
			return usagef("migrate", "to %d reverts %s and drops what it added; add --yes to confirm", target, what)
		}
		if err := migrations.To(ctx, pool, target); err != nil {
			return err
		}
	}
	version, dirty, err := migrations.Version(ctx, pool)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "schema version %d (this pgleader ships %d)\n", version, migrations.Latest)
	if err := migrations.CheckVersion(version); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if dirty {
		return fmt.Errorf("migrate: %w", dirtyError(version))
	}
	return nil
}

// dirtyError says that version's migration failed half-way, and what to do.
func dirtyError(version uint) error {
	return fmt.Errorf("version %d is dirty: its migration failed half-way; repair the schema by hand, then force the version with the golang-migrate CLI (table %s)",
		version, migrations.HistoryTable)
}

// shippedList is the versions this pgleader ships, as "1, 14".
func shippedList() string {
	var vs []string
	for _, v := range migrations.Versions() {
		vs = append(vs, strconv.FormatUint(uint64(v), 10))
	}
	return strings.Join(vs, ", ")
}

// migrateAction checks migrate's arguments: one of up, down or version, or
// to and a version this pgleader ships.
func migrateAction(pos []string) (action string, target uint, err error) {
	if len(pos) == 2 && pos[0] == "to" {
		n, err := strconv.ParseUint(pos[1], 10, 32)
		if err != nil || !slices.Contains(migrations.Versions(), uint(n)) {
			return "", 0, usagef("migrate", "to: VERSION must be one of the versions this pgleader ships, %s, got %q (down --yes reverts every version)", shippedList(), pos[1])
		}
		return "to", uint(n), nil
	}
	if len(pos) == 1 && pos[0] == "to" {
		return "", 0, usagef("migrate", "to needs a VERSION, one of %s", shippedList())
	}
	if len(pos) != 1 {
		return "", 0, usagef("migrate", "want one of up, down, version or to VERSION, got %q", pos)
	}
	switch pos[0] {
	case "up", "down", "version":
		return pos[0], 0, nil
	}
	return "", 0, usagef("migrate", "unknown action %q (want up, down, version or to VERSION)", pos[0])
}
