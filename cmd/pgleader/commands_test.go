//go:build unix

package main_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestCommandsListedAlike: the package doc, the usage that -h prints and
// docs/cli.md each list every command once, in the same order, and the
// package doc's synopsis of each is the usage's less [--database URL]. The
// lists are written by hand in three places; this keeps them from drifting.
func TestCommandsListedAlike(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	if f.Doc == nil {
		t.Fatal("main.go has no package doc")
	}
	usage := constString(t, f, "mainUsage")

	// The doc's synopsis lines are indented by a tab ("//\tpgleader ..."),
	// the usage's by two spaces.
	doc := synopses(f.Doc.Text(), "\tpgleader ")
	use := synopses(usage, "  pgleader ")
	for i := range use {
		use[i] = strings.Join(strings.Fields(strings.Replace(use[i], "[--database URL]", "", 1)), " ")
	}
	for i := range doc {
		doc[i] = strings.Join(strings.Fields(doc[i]), " ")
	}
	if len(use) == 0 {
		t.Fatal("found no command in mainUsage")
	}
	if !slices.Equal(doc, use) {
		t.Errorf("the package doc lists\n\t%s\nbut the usage (less [--database URL]) lists\n\t%s",
			strings.Join(doc, "\n\t"), strings.Join(use, "\n\t"))
	}

	md, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	var sections []string
	for _, m := range regexp.MustCompile("(?m)^## `pgleader ([a-z]+)").FindAllStringSubmatch(string(md), -1) {
		sections = append(sections, m[1])
	}
	if want := names(use); !slices.Equal(sections, want) {
		t.Errorf("docs/cli.md has sections for %q, want one for each command of the usage, in its order: %q", sections, want)
	}
	if n := names(use); len(slices.Compact(slices.Sorted(slices.Values(n)))) != len(n) {
		t.Errorf("the usage lists a command twice: %q", n)
	}
}

// constString returns the value of the string constant name declared in f.
func constString(t *testing.T, f *ast.File, name string) string {
	t.Helper()
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, id := range vs.Names {
				if id.Name != name || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("%s is not a string literal", name)
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
		}
	}
	t.Fatalf("no constant %s in main.go", name)
	return ""
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

// names returns the command name, the first word, of each synopsis.
func names(synopses []string) []string {
	out := make([]string, len(synopses))
	for i, s := range synopses {
		out[i], _, _ = strings.Cut(s, " ")
	}
	return out
}
