package sqlfence_test

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// TestReadmeQuickStart: the README's quick start is the code of
// Example_quickStart between its markers, line for line (indentation
// aside), and at most 15 lines of code.
func TestReadmeQuickStart(t *testing.T) {
	trimmed := func(lines []string) []string {
		var out []string
		for _, l := range lines {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, l)
			}
		}
		return out
	}
	between := func(file, from, to string) []string {
		t.Helper()
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		i := strings.Index(s, from)
		if i < 0 {
			t.Fatalf("%s has no %q", file, from)
		}
		s = s[i+len(from):]
		j := strings.Index(s, to)
		if j < 0 {
			t.Fatalf("%s has no %q after %q", file, to, from)
		}
		return trimmed(strings.Split(s[:j], "\n"))
	}
	example := between("example_quickstart_test.go", "// quick start: begin", "// quick start: end")
	readme := between("../README.md", "## Quick start", "```\n\n")
	if i := slices.Index(readme, "```go"); i >= 0 {
		readme = readme[i+1:]
	}
	if !slices.Equal(readme, example) {
		t.Errorf("the README's quick start differs from Example_quickStart's code:\nREADME:\n%s\nexample:\n%s",
			strings.Join(readme, "\n"), strings.Join(example, "\n"))
	}
	code := 0
	for _, l := range example {
		if !strings.HasPrefix(l, "//") {
			code++
		}
	}
	if code > 15 {
		t.Errorf("the quick start is %d lines of code; the README promises at most 15", code)
	}
}
