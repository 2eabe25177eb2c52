package docscheck

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// A doc is one document, as lines.
type doc struct {
	name  string // its path from the root, and "(package doc)" for a Go file's
	first int    // the line number of lines[0] in the file
	lines []string
}

func (d doc) at(i int) string { return d.name + ":" + strconv.Itoa(d.first+i) }

// docs returns every document the checks read: the Markdown files, and the
// package doc of each command under cmd/.
func docs(t *testing.T) []doc {
	t.Helper()
	var names []string
	for _, pattern := range []string{"*.md", "docs/*.md", "sqlfence/*.md", "examples/*/*.md", "cmd/*/*.md", "otelpgleader/*.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, m...)
	}
	var out []doc
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, doc{name: rel(t, name), first: 1, lines: strings.Split(string(b), "\n")})
	}
	goFiles, err := filepath.Glob(filepath.Join(root, "cmd/*/*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range goFiles {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, name, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if f.Doc == nil {
			continue
		}
		d := doc{name: rel(t, name) + " (package doc)", first: fset.Position(f.Doc.Pos()).Line}
		for _, c := range f.Doc.List {
			text, ok := strings.CutPrefix(c.Text, "//")
			if !ok { // a /* */ comment: taken as it is
				d.lines = append(d.lines, strings.Split(c.Text, "\n")...)
				continue
			}
			d.lines = append(d.lines, strings.TrimPrefix(text, " "))
		}
		out = append(out, d)
	}
	if len(out) < 10 {
		t.Fatalf("found %d documents; is the root %s?", len(out), root)
	}
	return out
}

func rel(t *testing.T, name string) string {
	t.Helper()
	r, err := filepath.Rel(root, name)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.ToSlash(r)
}

// A part of a document: a paragraph (lines up to a blank line) of prose or
// of code.
type part struct {
	start int      // index of its first line
	lines []string // its lines
	code  bool     // a fenced or indented code block
	block int      // for code, which block: blank lines split a block into parts
}

func (p part) text() string { return strings.Join(p.lines, "\n") }

var fence = regexp.MustCompile("^\\s*(```|~~~)")

// parts splits d into paragraphs of prose and blocks of code. A fenced
// block is code; so is a line indented by a tab or four spaces that follows
// a blank line or another such line (a Markdown indented block, or a code
// block of a Go doc comment).
func parts(d doc) []part {
	var out []part
	var cur *part
	flush := func() {
		if cur != nil && len(cur.lines) > 0 {
			out = append(out, *cur)
		}
		cur = nil
	}
	block, lastCode := 0, false // lastCode: the last line that was not blank was code
	add := func(i int, line string, code bool) {
		if code && !lastCode {
			block++
		}
		lastCode = code
		if cur == nil || cur.code != code {
			flush()
			cur = &part{start: i, code: code, block: block}
		}
		cur.lines = append(cur.lines, line)
	}
	inFence, prevBlank, prevCode := false, true, false
	for i, line := range d.lines {
		switch {
		case fence.MatchString(line):
			flush()
			inFence = !inFence
			prevBlank, prevCode, lastCode = false, false, false
			continue
		case inFence:
			if strings.TrimSpace(line) == "" {
				flush()
				continue
			}
			add(i, line, true)
			continue
		case strings.TrimSpace(line) == "":
			flush()
			prevBlank, prevCode = true, false
			continue
		}
		indented := strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "    ")
		code := indented && (prevBlank || prevCode)
		add(i, line, code)
		prevBlank, prevCode = false, code
	}
	flush()
	return out
}

// A span is the text of a code span in prose, and where it starts.
type span struct {
	line int // index in the doc
	text string
}

var codeSpan = regexp.MustCompile("(`+)([^`]+?)(`+)")

// spans returns the code spans of a prose part (they may run over lines).
func spans(p part) []span {
	text := p.text()
	var out []span
	for _, m := range codeSpan.FindAllStringSubmatchIndex(text, -1) {
		if text[m[2]:m[3]] != text[m[6]:m[7]] {
			continue
		}
		out = append(out, span{
			line: p.start + strings.Count(text[:m[0]], "\n"),
			text: strings.Join(strings.Fields(text[m[4]:m[5]]), " "),
		})
	}
	return out
}

func TestParts(t *testing.T) {
	t.Parallel()
	d := doc{name: "x.md", first: 1, lines: strings.Split("Some prose with `pgleader run\n--key K`.\n\n    $ pgleader status\n    KEY\n\n    more output\n\n- a list\n  continued `x`\n\n```sh\npgleader migrate up\n\npgleader version\n```\n", "\n")}
	ps := parts(d)
	var got []string
	for _, p := range ps {
		kind := "prose"
		if p.code {
			kind = "code" + strconv.Itoa(p.block)
		}
		got = append(got, kind+"@"+strconv.Itoa(p.start)+":"+p.text())
	}
	want := []string{
		"prose@0:Some prose with `pgleader run\n--key K`.",
		"code1@3:    $ pgleader status\n    KEY",
		"code1@6:    more output",
		"prose@8:- a list\n  continued `x`",
		"code2@12:pgleader migrate up",
		"code2@14:pgleader version",
	}
	if !slices.Equal(got, want) {
		t.Errorf("parts:\n%q\nwant\n%q", got, want)
	}
	if s := spans(ps[0]); len(s) != 1 || s[0].text != "pgleader run --key K" || s[0].line != 0 {
		t.Errorf("spans: %+v", s)
	}
}
