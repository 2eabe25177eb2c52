//go:build unix

// Command pgleader operates pgleader leases from the shell: it applies the
// schema, shows the leases, advances a key's token counter, asks a leader to
// resign or to hand off to a chosen replica, grants a role what an
// application needs, and runs a command as a singleton, only while this
// replica holds the key's lease.
//
//	pgleader migrate  [--yes] up|down|version|to VERSION
//	pgleader status   [KEY]
//	pgleader advance  KEY FLOOR
//	pgleader resign   [--token N] KEY
//	pgleader transfer KEY OWNER
//	pgleader grant    [--steer] ROLE
//	pgleader run      --key KEY [flags] -- COMMAND [ARG...]
//
// Every command takes --database URL, or reads DATABASE_URL. Exit status: 0
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

const mainUsage = `pgleader runs a command on exactly one replica at a time, with the lease in PostgreSQL.

Usage:
  pgleader migrate  [--database URL] [--yes] up|down|version|to VERSION
  pgleader status   [--database URL] [KEY]
  pgleader advance  [--database URL] KEY FLOOR
  pgleader resign   [--database URL] [--token N] KEY
  pgleader transfer [--database URL] KEY OWNER
  pgleader grant    [--database URL] [--steer] ROLE
  pgleader run      [--database URL] --key KEY [flags] -- COMMAND [ARG...]

The database is --database, or else $DATABASE_URL.
Run 'pgleader COMMAND -h' for the flags of a command.
`

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
		fmt.Fprintf(stderr, "pgleader: %v\n", err)
		return 1
	}
}

func dispatch(args []string, stdout, stderr *os.File) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, mainUsage)
		return &usageError{err: errors.New("no command given")}
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, mainUsage)
		return nil
	case "migrate":
		return cmdMigrate(rest, stdout, stderr)
	case "status":
		return cmdStatus(rest, stdout, stderr)
	case "advance":
		return cmdAdvance(rest, stdout, stderr)
	case "grant":
		return cmdGrant(rest, stdout, stderr)
	case "resign":
		return cmdResign(rest, stdout, stderr)
	case "transfer":
		return cmdTransfer(rest, stdout, stderr)
	case "run":
		return cmdRun(rest, stderr)
	}
	return &usageError{err: fmt.Errorf("unknown command %q (want migrate, status, advance, resign, transfer, grant or run)", cmd)}
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
