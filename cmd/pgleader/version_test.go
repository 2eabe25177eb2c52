//go:build unix

package main_test

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/migrations"
)

// testVersion runs version without a database, then on a database at each
// state of its schema: none, behind, up to date, ahead, a development
// version, dirty; and on one it cannot reach.
func testVersion(t *testing.T, bin string) {
	// What the build recorded, as the go command reads it.
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	mod := regexp.MustCompile(`(?m)^\tmod\tgithub.com/pgleader/pgleader\t(\S+)`).FindStringSubmatch(string(out))
	if mod == nil {
		t.Fatalf("go version -m names no main module:\n%s", out)
	}
	head := "pgleader " + mod[1] + "\n"
	if rev := regexp.MustCompile(`(?m)^\tbuild\tvcs.revision=(\S+)$`).FindStringSubmatch(string(out)); rev != nil {
		head += "revision " + rev[1]
		if strings.Contains(string(out), "\tbuild\tvcs.modified=true\n") {
			head += ", modified"
		}
		head += "\n"
	}
	head += fmt.Sprintf("ships schema version %d\n", migrations.Latest)

	code, stdout, stderr := runCLI(t, bin, nil, "version")
	if code != 0 || stdout != head || stderr != "" {
		t.Fatalf("version without a database: status %d, stdout %q, stderr %q; want 0 and %q", code, stdout, stderr, head)
	}

	db := pgtest.NewEmpty(t)
	env := []string{"DATABASE_URL=" + db.URL}
	ctx := context.Background()
	version := func(wantCode int, wantLast, wantErr string, args ...string) {
		t.Helper()
		code, stdout, stderr := runCLI(t, bin, env, append([]string{"version"}, args...)...)
		if code != wantCode || stdout != head+wantLast+"\n" || !strings.Contains(stderr, wantErr) || (wantErr == "") != (stderr == "") {
			t.Errorf("version %q: status %d, stdout:\n%s\nstderr:\n%s\nwant %d, %q last and an error containing %q",
				args, code, stdout, stderr, wantCode, wantLast, wantErr)
		}
	}
	migrate := func(args ...string) {
		t.Helper()
		if code, _, stderr := runCLI(t, bin, env, append([]string{"migrate"}, args...)...); code != 0 {
			t.Fatalf("migrate %q: status %d, stderr:\n%s", args, code, stderr)
		}
	}
	set := func(version uint, dirty bool) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, `UPDATE `+migrations.HistoryTable+` SET version = $1, dirty = $2`, version, dirty); err != nil {
			t.Fatal(err)
		}
	}
	latest := migrations.Latest

	version(0, "database at schema version 0 (no pgleader schema): run 'pgleader migrate up'", "")
	var created bool
	if err := db.Pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, migrations.HistoryTable).Scan(&created); err != nil || created {
		t.Errorf("version created the history table (%v): it must only read", err)
	}
	migrate("up")
	version(0, fmt.Sprintf("database at schema version %d: up to date", latest), "")
	// --database over DATABASE_URL.
	version(0, fmt.Sprintf("database at schema version %d: up to date", latest), "", "--database", db.URL)
	migrate("--yes", "to", "1")
	version(0, fmt.Sprintf("database at schema version 1: behind this pgleader (%d): run 'pgleader migrate up'", latest), "")
	migrate("up")
	set(latest+1, false)
	version(1, fmt.Sprintf("database at schema version %d: ahead of this pgleader (%d)", latest+1, latest),
		fmt.Sprintf("pgleader: version: the pgleader schema is at version %d, newer than this pgleader ships (%d): migrate with a pgleader that ships version %d or later", latest+1, latest, latest+1))
	set(13, false)
	version(1, "database at schema version 13: written by an unreleased development build", "DROP SCHEMA pgleader CASCADE")
	set(latest, true)
	version(1, fmt.Sprintf("database at schema version %d: dirty (its migration failed half-way)", latest),
		fmt.Sprintf("pgleader: version: version %d is dirty: its migration failed half-way", latest))

	// A database it cannot reach: the build's lines, then the error.
	code, stdout, stderr = runCLI(t, bin, nil, "version", "--database", "postgres://postgres@127.0.0.1:1/none?connect_timeout=5")
	if code != 1 || stdout != head || !strings.HasPrefix(stderr, "pgleader: version: ") {
		t.Errorf("version on an unreachable database: status %d, stdout %q, stderr %q; want 1 after %q", code, stdout, stderr, head)
	}
}

// testHelp: pgleader -h, help, and no command at all print a line of
// purpose for each command help-flags lists, and only for those; no command
// is bad usage and prints it on standard error.
func testHelp(t *testing.T, bin string) {
	code, flags, stderr := runCLI(t, bin, nil, "help-flags")
	if code != 0 || stderr != "" {
		t.Fatalf("help-flags: status %d, stderr %q", code, stderr)
	}
	var commands []string
	for line := range strings.Lines(flags) {
		commands = append(commands, strings.Fields(line)[0])
	}
	check := func(args []string, wantCode int, help, other string) {
		t.Helper()
		var listed []string
		for _, m := range regexp.MustCompile(`(?m)^  ([a-z-]+) +(\S.*)$`).FindAllStringSubmatch(help, -1) {
			listed = append(listed, m[1])
		}
		if want := append(append([]string(nil), commands...), "help"); strings.Join(listed, " ") != strings.Join(want, " ") {
			t.Errorf("pgleader %q lists %q, want a line for each of %q", args, listed, want)
		}
		if !strings.Contains(help, "Run 'pgleader COMMAND -h' for the usage and flags of a command.") {
			t.Errorf("pgleader %q does not say how to get a command's flags:\n%s", args, help)
		}
		if other != "" && !strings.HasPrefix(other, "pgleader: ") {
			t.Errorf("pgleader %q: the other stream has %q", args, other)
		}
	}
	for _, args := range [][]string{{"-h"}, {"--help"}, {"-help"}, {"help"}} {
		code, stdout, stderr := runCLI(t, bin, nil, args...)
		if code != 0 || stderr != "" {
			t.Errorf("pgleader %q: status %d, stderr %q", args, code, stderr)
		}
		check(args, 0, stdout, stderr)
	}
	code, stdout, stderr := runCLI(t, bin, nil)
	if code != 2 || stdout != "" || !strings.HasSuffix(stderr, "pgleader: no command given\nRun 'pgleader -h' for usage.\n") {
		t.Errorf("pgleader: status %d, stdout %q, stderr:\n%s", code, stdout, stderr)
	}
	check(nil, 2, stderr, "")
}
