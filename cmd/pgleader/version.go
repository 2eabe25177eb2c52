//go:build unix

package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/pgleader/pgleader/migrations"
)

const versionUsage = `Usage: pgleader version [--database URL]

Prints this pgleader's version (its module version, "(devel)" for a local
build, and the VCS revision it was built from when the build recorded one)
and the schema version it ships. Given a database (--database, or
DATABASE_URL set), it also prints the database's schema version, whether it
is behind or ahead of this pgleader, and what to run about it. It reads the
database and changes nothing.

Exit status: 0, also when the database's schema is behind ('pgleader
migrate up' brings it up to date); 1 if the database cannot be read, or if
this pgleader cannot migrate its schema: its last migration failed half-way
(dirty), it is newer than this pgleader ships, or an unreleased development
build wrote it. The message on standard error says what to do.
`

func cmdVersion(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", versionUsage, stderr)
	db := databaseFlag(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("version", "takes no arguments, got %q", pos)
	}
	bi, ok := debug.ReadBuildInfo()
	fmt.Fprint(stdout, describeBuild(bi, ok))
	fmt.Fprintf(stdout, "ships schema version %d\n", migrations.Latest)
	if *db == "" && os.Getenv("DATABASE_URL") == "" {
		return nil
	}

	ctx, pool, done, err := connect("version", *db)
	if err != nil {
		return err
	}
	defer done()
	// migrations.Version creates the history table where there is none;
	// version looks first, so that it changes nothing, and so that a role
	// that may not create the table is told the database has no schema.
	var exists bool
	err = pool.QueryRow(ctx, `SELECT to_regclass(quote_ident(current_schema()) || '.' || quote_ident($1)) IS NOT NULL`,
		migrations.HistoryTable).Scan(&exists)
	if err != nil {
		return fmt.Errorf("version: %w", err)
	}
	var version uint
	var dirty bool
	if exists {
		if version, dirty, err = migrations.Version(ctx, pool); err != nil {
			return fmt.Errorf("version: %w", err)
		}
	}
	line, err := describeSchema(version, dirty)
	fmt.Fprintln(stdout, line)
	if err != nil {
		return fmt.Errorf("version: %w", err)
	}
	return nil
}

// describeBuild is the first lines of version: the main module's version,
// then the VCS revision and whether the tree had changes, if the build
// recorded them.
func describeBuild(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi == nil {
		return "pgleader, version unknown (the binary has no build information)\n"
	}
	version := bi.Main.Version
	if version == "" {
		version = "(devel)"
	}
	out := "pgleader " + version + "\n"
	var revision, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if revision != "" {
		out += "revision " + revision
		if modified == "true" {
			out += ", modified"
		}
		out += "\n"
	}
	return out
}

// describeSchema is version's line about the database's schema, at version
// (0 for none), and an error if this pgleader cannot migrate it.
func describeSchema(version uint, dirty bool) (string, error) {
	at := fmt.Sprintf("database at schema version %d", version)
	if err := migrations.CheckVersion(version); err != nil {
		if version > migrations.Latest {
			return fmt.Sprintf("%s: ahead of this pgleader (%d)", at, migrations.Latest), err
		}
		return at + ": written by an unreleased development build", err
	}
	switch {
	case dirty:
		return at + ": dirty (its migration failed half-way)", dirtyError(version)
	case version == 0:
		return at + " (no pgleader schema): run 'pgleader migrate up'", nil
	case version < migrations.Latest:
		return fmt.Sprintf("%s: behind this pgleader (%d): run 'pgleader migrate up'", at, migrations.Latest), nil
	}
	return at + ": up to date", nil
}
