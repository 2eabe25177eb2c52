package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
)

// event is one line of go test -json (see go doc test2json); build-output
// and build-fail events name the package being built in ImportPath.
type event struct {
	Action      string
	Package     string
	Test        string
	Output      string
	ImportPath  string
	FailedBuild string
	Elapsed     float64
}

// summary turns go test -json events into go test's usual output, as each
// package ends, and remembers what failed and what was skipped.
type summary struct {
	w        io.Writer
	pkgs     map[string]*pkg // the packages that have not ended yet
	failures []failure
	skips    []skip
}

// pkg is what a package running its tests has said so far.
type pkg struct {
	lines  []outLine
	tests  []string          // in the order they first appeared
	result map[string]string // a test's last action: run, pause, cont, pass, fail or skip
}

// outLine is a line of output, of a test or (test "") of the package.
type outLine struct{ test, text string }

type failure struct {
	pkg         string
	tests       []string // the tests that failed, less those whose subtests did
	unfinished  []string // tests still running when the test binary ended
	buildFailed bool
	noResult    bool // the command ended before the package did
}

type skip struct {
	pkg, test string
	where     string // file.go:line of the reason, if any
	reason    string // "" if the test gave none
}

func newSummary(w io.Writer) *summary {
	return &summary{w: w, pkgs: map[string]*pkg{}}
}

// line takes one line of the command's output.
func (s *summary) line(raw []byte) {
	var e event
	text := bytes.TrimSpace(raw)
	if len(text) == 0 || text[0] != '{' || json.Unmarshal(text, &e) != nil || e.Action == "" {
		s.write(string(raw))
		if !bytes.HasSuffix(raw, []byte("\n")) {
			s.write("\n")
		}
		return
	}
	s.event(e)
}

func (s *summary) write(text string) { _, _ = io.WriteString(s.w, text) }

func (s *summary) pkg(name string) *pkg {
	p := s.pkgs[name]
	if p == nil {
		p = &pkg{result: map[string]string{}}
		s.pkgs[name] = p
	}
	return p
}

func (p *pkg) see(test string) {
	if _, ok := p.result[test]; !ok {
		p.tests = append(p.tests, test)
		p.result[test] = "run"
	}
}

func (s *summary) event(e event) {
	switch e.Action {
	case "build-output":
		// As go test prints them, while the build goes on.
		s.write(e.Output)
		return
	case "build-fail":
		// The package's fail event follows, with FailedBuild set.
		return
	}
	p := s.pkg(e.Package)
	if e.Test != "" {
		p.see(e.Test)
	}
	switch e.Action {
	case "output":
		p.lines = append(p.lines, outLine{e.Test, e.Output})
	case "run", "pause", "cont":
		if e.Test != "" {
			p.result[e.Test] = e.Action
		}
	case "pass", "fail", "skip":
		if e.Test == "" {
			delete(s.pkgs, e.Package)
			s.ended(e, p)
			return
		}
		p.result[e.Test] = e.Action
		if e.Action == "skip" {
			where, reason := skipReason(p.output(e.Test))
			s.skips = append(s.skips, skip{pkg: e.Package, test: e.Test, where: where, reason: reason})
		}
	}
}

// output returns the lines of test.
func (p *pkg) output(test string) []string {
	var out []string
	for _, l := range p.lines {
		if l.test == test {
			out = append(out, l.text)
		}
	}
	return out
}

// ended prints a package's result as go test does without -json.
func (s *summary) ended(e event, p *pkg) {
	if e.Action != "fail" {
		printed := false
		for _, l := range p.lines {
			if l.test == "" && (strings.HasPrefix(l.text, "ok  \t") || strings.HasPrefix(l.text, "?   \t")) {
				s.write(l.text)
				printed = true
			}
		}
		if !printed && e.Action == "pass" {
			s.write(fmt.Sprintf("ok  \t%s\t%.3fs\n", e.Package, e.Elapsed))
		} else if !printed {
			s.write(fmt.Sprintf("?   \t%s\t[no test files]\n", e.Package))
		}
		return
	}
	s.failed(e.Package, p, e.FailedBuild != "", false)
}

// failed prints the output of a failed package: its own lines, and each
// failed or unfinished test's lines in a block where it first appeared, its
// --- FAIL line first and indented by its depth, as go test without -v
// prints them.
func (s *summary) failed(name string, p *pkg, buildFailed, noResult bool) {
	f := failure{pkg: name, buildFailed: buildFailed, noResult: noResult}
	bad := func(test string) bool { r := p.result[test]; return r != "pass" && r != "skip" }
	for _, test := range p.tests {
		if !bad(test) {
			continue
		}
		if p.result[test] != "fail" {
			f.unfinished = append(f.unfinished, test)
			continue
		}
		sub := slices.ContainsFunc(p.tests, func(t string) bool {
			return strings.HasPrefix(t, test+"/") && p.result[t] == "fail"
		})
		if !sub {
			f.tests = append(f.tests, test)
		}
	}
	shown := map[string]bool{}
	for _, l := range p.lines {
		if l.test == "" {
			s.write(l.text)
			continue
		}
		if !bad(l.test) || shown[l.test] {
			continue
		}
		shown[l.test] = true
		s.block(l.test, p.output(l.test), p.result[l.test] == "fail")
	}
	if noResult {
		s.write(fmt.Sprintf("FAIL\t%s\t[no result: the command ended before the package did]\n", name))
	}
	s.failures = append(s.failures, f)
}

// block prints a failed or unfinished test's lines.
func (s *summary) block(test string, lines []string, failed bool) {
	indent := strings.Repeat("    ", strings.Count(test, "/"))
	header := "=== RUN   " + test + "\n" // an unfinished test's
	if failed {
		header = "--- FAIL: " + test + "\n"
	}
	var body []string
	for _, text := range lines {
		switch {
		case failed && strings.HasPrefix(text, "--- FAIL: "+test+" "):
			header = text
		case isFraming(text):
		default:
			body = append(body, text)
		}
	}
	s.write(indent + header)
	for _, text := range body {
		if text != "\n" {
			text = indent + text
		}
		s.write(text)
	}
}

// isFraming reports whether text is one of the lines go test -v adds to
// say which test runs, which it does not print without -v.
func isFraming(text string) bool {
	for _, p := range []string{"=== RUN ", "=== PAUSE ", "=== CONT ", "=== NAME "} {
		if strings.HasPrefix(text, p) {
			return true
		}
	}
	return false
}

// logLine is a line that t.Log, t.Skip and the like print: its place in
// the source, then the message.
var logLine = regexp.MustCompile(`^\s*([\w.+-]+\.go:\d+): (.*)$`)

// skipReason returns the last message a skipped test logged, which is the
// one t.Skip or t.Skipf gave (they log it, then stop the test), and where
// it was logged; "", "" if the test logged nothing (t.SkipNow).
func skipReason(lines []string) (where, reason string) {
	var msgs []string
	for _, text := range lines {
		text = strings.TrimRight(text, "\n")
		if isFraming(text) || strings.HasPrefix(strings.TrimSpace(text), "--- SKIP: ") {
			continue
		}
		if m := logLine.FindStringSubmatch(text); m != nil {
			where = m[1]
			msgs = append(msgs, m[2])
		} else if len(msgs) > 0 {
			msgs[len(msgs)-1] += "\n" + strings.TrimSpace(text)
		}
	}
	if len(msgs) == 0 {
		return "", ""
	}
	return where, msgs[len(msgs)-1]
}

// finish prints what is left of packages that never ended, then the failed
// tests and the skipped ones, and reports whether anything failed.
func (s *summary) finish() bool {
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for name := range s.pkgs {
			if !yield(name) {
				return
			}
		}
	}) {
		s.failed(name, s.pkgs[name], false, true)
		delete(s.pkgs, name)
	}
	if len(s.failures) > 0 {
		s.write("\nfailed:\n")
		for _, f := range s.failures {
			var what []string
			switch {
			case f.buildFailed:
				what = append(what, "[build failed]")
			case f.noResult:
				what = append(what, "[no result]")
			}
			what = append(what, f.tests...)
			for _, t := range f.unfinished {
				what = append(what, t+" (unfinished)")
			}
			if len(what) == 0 {
				what = append(what, "[the test binary failed outside any test]")
			}
			s.write(fmt.Sprintf("  %s: %s\n", f.pkg, strings.Join(what, ", ")))
		}
	}
	if len(s.skips) == 0 {
		s.write("\nskipped tests: none\n")
		return len(s.failures) > 0
	}
	s.write(fmt.Sprintf("\nskipped tests: %d\n", len(s.skips)))
	skips := slices.Clone(s.skips)
	slices.SortStableFunc(skips, func(a, b skip) int { return strings.Compare(a.pkg, b.pkg) })
	last := ""
	for _, sk := range skips {
		if sk.pkg != last {
			s.write("  " + sk.pkg + "\n")
			last = sk.pkg
		}
		reason := "(no reason given)"
		if sk.reason != "" {
			first, rest, _ := strings.Cut(sk.reason, "\n")
			reason = first + " (" + sk.where + ")"
			if rest != "" {
				reason += "\n        " + strings.ReplaceAll(rest, "\n", "\n        ")
			}
		}
		s.write(fmt.Sprintf("    %s: %s\n", sk.test, reason))
	}
	return len(s.failures) > 0
}
