//go:build unix

package main

import (
	"errors"
	"flag"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestCommandsListedAlike: the package doc, the help and docs/cli.md each
// list every command once, in the order of the commands table, and the
// package doc's synopsis of each is the first line of the command's own
// usage less [--database URL]. The package doc and docs/cli.md are written
// by hand; this keeps them from drifting from the code.
func TestCommandsListedAlike(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, parser.PackageClauseOnly|parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	if f.Doc == nil {
		t.Fatal("main.go has no package doc")
	}
	// The doc's synopsis lines are indented by a tab ("//\tpgleader ...").
	doc := synopses(f.Doc.Text(), "\tpgleader ")
	var use, names []string
	for _, c := range commands {
		names = append(names, c.name)
		first, _, _ := strings.Cut(commandUsage(t, c), "\n")
		s, ok := strings.CutPrefix(first, "Usage: pgleader ")
		if !ok {
			t.Errorf("%s -h begins %q, want \"Usage: pgleader %s ...\"", c.name, first, c.name)
		}
		use = append(use, strings.Join(strings.Fields(strings.Replace(s, "[--database URL]", "", 1)), " "))
	}
	if len(names) == 0 {
		t.Fatal("no commands")
	}
	if len(slices.Compact(slices.Sorted(slices.Values(names)))) != len(names) {
		t.Errorf("a command is in the table twice: %q", names)
	}
	for i := range doc {
		doc[i] = strings.Join(strings.Fields(doc[i]), " ")
	}
	if !slices.Equal(doc, use) {
		t.Errorf("the package doc lists\n\t%s\nbut the commands' usages (less [--database URL]) say\n\t%s",
			strings.Join(doc, "\n\t"), strings.Join(use, "\n\t"))
	}

	// The help: a line of purpose per command, in the table's order.
	var helped []string
	for _, m := range regexp.MustCompile(`(?m)^  ([a-z-]+) +(\S.*)$`).FindAllStringSubmatch(mainUsage(), -1) {
		helped = append(helped, m[1])
	}
	if want := append(slices.Clone(names), "help"); !slices.Equal(helped, want) {
		t.Errorf("the help lists %q, want %q", helped, want)
	}
	for _, c := range commands {
		if c.purpose == "" || strings.Contains(c.purpose, "\n") || len(c.purpose) > 70 {
			t.Errorf("%s's purpose %q is not one line of at most 70 characters", c.name, c.purpose)
		}
	}

	md, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	var sections []string
	for _, m := range regexp.MustCompile("(?m)^## `pgleader ([a-z]+)").FindAllStringSubmatch(string(md), -1) {
		sections = append(sections, m[1])
	}
	if !slices.Equal(sections, names) {
		t.Errorf("docs/cli.md has sections for %q, want one for each command, in the help's order: %q", sections, names)
	}
}

// commandUsage returns what 'pgleader NAME -h' prints, and checks that it
// stops there.
func commandUsage(t *testing.T, c command) string {
	t.Helper()
	name := filepath.Join(t.TempDir(), "usage")
	out, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if err := c.run([]string{"-h"}, out, out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("%s -h returned %v, want flag.ErrHelp", c.name, err)
	}
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// synopses returns what follows "pgleader " on each line of text that
// starts with prefix.
func synopses(text, prefix string) []string {
	var out []string
	for line := range strings.Lines(text) {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			out = append(out, strings.TrimSpace(rest))
		}
	}
	return out
}

// TestHelpFlags: help-flags prints, for each command, the flags its -h
// lists. Not parallel: help-flags sets flagSetMade, which every command
// reads.
func TestHelpFlags(t *testing.T) {
	var b strings.Builder
	if err := helpFlags(nil, &b); err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for _, c := range commands {
		line := []string{c.name}
		for _, m := range regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(commandUsage(t, c), -1) {
			line = append(line, m[1])
		}
		if len(line) == 1 {
			t.Errorf("%s -h lists no flag", c.name)
		}
		want.WriteString(strings.Join(line, " ") + "\n")
	}
	if b.String() != want.String() {
		t.Errorf("help-flags prints\n%s\nwant what -h lists:\n%s", b.String(), want.String())
	}
	if flagSetMade != nil {
		t.Error("help-flags left flagSetMade set")
	}
}
