//go:build unix

// Command pgleader operates pgleader leases from the shell: it applies the
// schema, shows the leases, advances a key's token counter, asks a leader to
// resign or to hand off to a chosen replica, grants a role what an
// application needs, runs a command as a singleton, only while this
// replica holds the key's lease, or once per instant of a schedule on one
// replica, and says which version it is and which schema version it and the
// database have.
//
//	pgleader migrate  [--yes] up|down|version|to VERSION
//	pgleader status   [KEY]
//	pgleader advance  KEY FLOOR
//	pgleader resign   [--token N] KEY
//	pgleader transfer KEY OWNER
//	pgleader grant    [--steer] ROLE
//	pgleader run      --key KEY [flags] -- COMMAND [ARG...]
//	pgleader version
//
// Every command takes --database URL, or reads DATABASE_URL; version needs
// no database, and reads one if given. 'pgleader help' lists the commands,
// 'pgleader help COMMAND' a command's usage and flags. Exit status: 0
// on success, 1 on an error, 2 on bad usage; run passes its command's status
// through (see docs/cli.md for the whole contract, the signals and the
// process-group handling).
//
// pgleader runs on Unix only: it supervises the command as a process group.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"
)

// A command is one of pgleader's commands: its name, the line the help
// gives its purpose, and what runs it.
type command struct {
	name    string
	purpose string
	run     func(args []string, stdout, stderr *os.File) error
}

// commands are pgleader's commands, in the order the help lists them.
var commands = []command{
	{"migrate", "apply, revert or show pgleader's schema in the database", writers(cmdMigrate)},
	{"status", "show the leases, a key's candidates, a set's members, or the jobs", writers(cmdStatus)},
	{"advance", "raise a free key's token counter, after the lease data was lost", writers(cmdAdvance)},
	{"resign", "ask the term holding a key to end", writers(cmdResign)},
	{"transfer", "ask the term holding a key to hand it to a waiting replica", writers(cmdTransfer)},
	{"grant", "give a role what an application (or, --steer, an operator) needs", writers(cmdGrant)},
	{"run", "run a command while this replica holds a key's lease, or on a schedule", func(args []string, _, stderr *os.File) error {
		return cmdRun(args, stderr)
	}},
	{"version", "print this pgleader's version and schema version, and the database's", writers(cmdVersion)},
}

// writers adapts a command that writes to any io.Writer.
func writers(f func(args []string, stdout, stderr io.Writer) error) func([]string, *os.File, *os.File) error {
	return func(args []string, stdout, stderr *os.File) error { return f(args, stdout, stderr) }
}

// mainUsage is what 'pgleader -h' prints: a line of purpose per command.
func mainUsage() string {
	var b strings.Builder
	b.WriteString("pgleader runs a command on exactly one replica at a time, with the lease in PostgreSQL.\n\n")
	b.WriteString("Usage: pgleader COMMAND [flags] [ARG...]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-9s %s\n", c.name, c.purpose)
	}
	fmt.Fprintf(&b, "  %-9s %s\n", "help", "print this help, or with COMMAND the command's usage and flags")
	b.WriteString(`
The database is --database URL, or else $DATABASE_URL (version runs without).
Run 'pgleader COMMAND -h' for the usage and flags of a command.
`)
	return b.String()
}

func main() {
	os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr))
}

// cli runs one command line and returns the process's exit status.
func cli(args []string, stdout, stderr *os.File) int {
	err := dispatch(args, stdout, stderr)
	var status exitStatus
	var usage *usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &status):
		return int(status)
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "pgleader: %v\n", usage.err)
		if usage.cmd != "" {
			fmt.Fprintf(stderr, "Run 'pgleader %s -h' for usage.\n", usage.cmd)
		} else {
			fmt.Fprint(stderr, "Run 'pgleader -h' for usage.\n")
		}
		return 2
	default:
		// The library's errors begin with "pgleader: " too.
		fmt.Fprintf(stderr, "pgleader: %s\n", strings.TrimPrefix(err.Error(), "pgleader: "))
		return 1
	}
}

func dispatch(args []string, stdout, stderr *os.File) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, mainUsage())
		return &usageError{err: errors.New("no command given")}
	}
	name, rest := args[0], args[1:]
	switch name {
	case "-h", "-help", "--help":
		fmt.Fprint(stdout, mainUsage())
		return nil
	case "help":
		switch len(rest) {
		case 0:
			fmt.Fprint(stdout, mainUsage())
			return nil
		case 1:
			if c, ok := lookup(rest[0]); ok {
				return c.run([]string{"-h"}, stdout, stderr)
			}
			return unknownCommand(rest[0])
		}
		return &usageError{err: fmt.Errorf("help takes at most one COMMAND, got %d arguments", len(rest))}
	case "help-flags":
		return helpFlags(rest, stdout)
	}
	if c, ok := lookup(name); ok {
		return c.run(rest, stdout, stderr)
	}
	return unknownCommand(name)
}

func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func unknownCommand(name string) error {
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.name
	}
	return &usageError{err: fmt.Errorf("unknown command %q (want %s or %s)", name,
		strings.Join(names[:len(names)-1], ", "), names[len(names)-1])}
}

// flagSetMade, when set, is called with each flag set newFlagSet makes: the
// hidden command help-flags learns each command's flags through it.
var flagSetMade func(*flag.FlagSet)

// helpFlags is the hidden command help-flags: for each command, a line of
// its name and the names of its flags, for the check that the documentation
// names no flag the commands lack (internal/docscheck). Each command is run
// with -h, which defines its flags and returns before it does anything.
func helpFlags(args []string, stdout io.Writer) error {
	if len(args) != 0 {
		return &usageError{err: errors.New("help-flags takes no arguments")}
	}
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer null.Close()
	defer func() { flagSetMade = nil }()
	for _, c := range commands {
		var fs *flag.FlagSet
		flagSetMade = func(f *flag.FlagSet) { fs = f }
		if err := c.run([]string{"-h"}, null, null); !errors.Is(err, flag.ErrHelp) || fs == nil {
			return fmt.Errorf("help-flags: %s -h made no flag set or did not stop for help: %v", c.name, err)
		}
		line := []string{c.name}
		fs.VisitAll(func(f *flag.Flag) { line = append(line, f.Name) })
		fmt.Fprintln(stdout, strings.Join(line, " "))
	}
	return nil
}

// usageError is bad usage: the process exits 2 and points to the help.
type usageError struct {
	cmd string
	err error
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(cmd, format string, args ...any) error {
	return &usageError{cmd: cmd, err: fmt.Errorf(cmd+": "+format, args...)}
}

// exitStatus ends the process with this status and no further message: the
// command has said what there was to say.
type exitStatus int

func (s exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(s)) }

// newFlagSet returns a flag set for cmd that prints usage, then its flags,
// to stderr, and does not exit on its own.
func newFlagSet(cmd, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fmt.Fprintln(stderr, "\nFlags:")
		fs.PrintDefaults()
	}
	if flagSetMade != nil {
		flagSetMade(fs)
	}
	return fs
}

func databaseFlag(fs *flag.FlagSet) *string {
	return fs.String("database", "", "PostgreSQL connection `URL` (default $DATABASE_URL)")
}

// parse parses args for fs, letting flags and positional arguments mix, and
// returns the positional ones. A negative number is a positional argument,
// so that its command can say which values it takes, rather than the flag
// package calling it an unknown flag; after a flag that takes a value it is
// that value, so the command can say so ("--token -1"). A parse error, and
// a --database given empty, are bad usage.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for len(args) > 0 {
		if isNegativeNumber(args[0]) {
			pos, args = append(pos, args[0]), args[1:]
			continue
		}
		end := len(args)
		for i := 0; i < len(args); i++ {
			if isNegativeNumber(args[i]) {
				end = i
				break
			}
			if takesValue(fs, args[i]) {
				i++
			}
		}
		if err := fs.Parse(args[:end]); err != nil {
			return nil, flagError(fs.Name(), err)
		}
		rest := fs.Args()
		if len(rest) > 0 {
			pos = append(pos, rest[0])
			rest = rest[1:]
		}
		args = append(rest[:len(rest):len(rest)], args[end:]...)
	}
	return pos, refuseEmpty(fs, "database")
}

// takesValue reports whether arg is one of fs's flags, not a bool one,
// written without "=value": the flag package takes the next argument as its
// value, whatever it looks like.
func takesValue(fs *flag.FlagSet, arg string) bool {
	name, ok := strings.CutPrefix(arg, "-")
	if !ok {
		return false
	}
	name = strings.TrimPrefix(name, "-")
	if name == "" || name[0] == '-' || strings.Contains(name, "=") {
		return false
	}
	f := fs.Lookup(name)
	if f == nil {
		return false
	}
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return !ok || !b.IsBoolFlag()
}

// given reports whether the flag name was on the command line, even with an
// empty value.
func given(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

// refuseEmpty returns bad usage if one of the named flags was given an
// empty value. That is what "--owner $POD_NAME" becomes when the variable
// is unset; taking it for a flag left out would act on a default (another
// database, a random owner) that the caller did not ask for.
func refuseEmpty(fs *flag.FlagSet, names ...string) error {
	for _, name := range names {
		if given(fs, name) && fs.Lookup(name).Value.String() == "" {
			return usagef(fs.Name(), "--%s was given an empty value (an unset shell variable?)", name)
		}
	}
	return nil
}

func isNegativeNumber(s string) bool {
	if len(s) < 2 || s[0] != '-' {
		return false
	}
	for _, r := range s[1:] {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// flagError turns a flag package error, which it has already printed with
// the usage, into bad usage; -h stays flag.ErrHelp.
func flagError(cmd string, err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return &usageError{cmd: cmd, err: fmt.Errorf("%s: %w", cmd, err)}
}

// databaseURL returns --database, or else $DATABASE_URL.
func databaseURL(cmd, flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if v := os.Getenv("DATABASE_URL"); v != "" {
		return v, nil
	}
	return "", usagef(cmd, "no database: pass --database URL or set DATABASE_URL")
}

// connect is what every command that talks to the database starts with: the
// database URL (see databaseURL), a context cancelled by SIGINT or SIGTERM
// and a pool on the URL. done closes the pool, then releases the signals.
func connect(cmd, flagValue string) (ctx context.Context, pool *pgxpool.Pool, done func(), err error) {
	url, err := databaseURL(cmd, flagValue)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, stop := signalContext()
	if pool, err = openPool(ctx, cmd, url); err != nil {
		stop()
		return nil, nil, nil, err
	}
	return ctx, pool, func() { pool.Close(); stop() }, nil
}

// openPool opens a pool on url; a URL that does not parse is bad usage.
func openPool(ctx context.Context, cmd, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, usagef(cmd, "--database: %v", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cmd, err)
	}
	return pool, nil
}

// signalContext is cancelled by SIGINT or SIGTERM, for the commands that
// only talk to the database.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}
