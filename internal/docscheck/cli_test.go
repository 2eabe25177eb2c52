//go:build unix

package docscheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode"

	"github.com/pgleader/pgleader/migrations"
)

// cliFlags returns the pgleader commands and each one's flags, from the
// hidden 'pgleader help-flags'.
var cliFlags = sync.OnceValues(func() (map[string][]string, error) {
	cmd := exec.Command("go", "run", "./cmd/pgleader", "help-flags")
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, err
	}
	flags := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) > 0 {
			flags[f[0]] = f[1:]
		}
	}
	return flags, nil
})

func commandFlags(t *testing.T) map[string][]string {
	t.Helper()
	flags, err := cliFlags()
	if err != nil {
		t.Fatalf("go run ./cmd/pgleader help-flags: %v", err)
	}
	if len(flags) < 5 || len(flags["run"]) < 5 {
		t.Fatalf("help-flags gave %v", flags)
	}
	return flags
}

// notCommands is the code spans that begin with "pgleader " and are not
// command lines.
var notCommands = map[string]string{
	"pgleader lease":  "the application_name of an elector's lease connection (docs/elector.md)",
	"pgleader listen": "the application_name of its LISTEN connection (docs/elector.md)",
}

// An invocation is a pgleader command line found in the docs.
type invocation struct {
	where   string
	args    []string // after "pgleader"
	refused bool     // an example of bad usage: its output is pgleader's error
}

// invocations returns the pgleader command lines of the docs' code: in code
// blocks (less "# comments"; in a block of a shell session, the lines after
// a "$ " prompt), and in code spans.
func invocations(t *testing.T) []invocation {
	t.Helper()
	var out []invocation
	for _, d := range docs(t) {
		ps := parts(d)
		session := map[int]bool{} // blocks with a prompt: the others' lines are output
		for _, p := range ps {
			for _, line := range p.lines {
				if p.code && strings.HasPrefix(strings.TrimSpace(line), "$ ") {
					session[p.block] = true
				}
			}
		}
		for _, p := range ps {
			if !p.code {
				for _, s := range spans(p) {
					if notCommands[s.text] != "" {
						continue
					}
					for _, args := range commandLines(s.text) {
						out = append(out, invocation{where: d.at(s.line), args: args})
					}
				}
				continue
			}
			for i, line := range p.lines {
				text, prompt := strings.CutPrefix(strings.TrimSpace(line), "$ ")
				if session[p.block] && !prompt || strings.HasPrefix(text, "#") || strings.HasPrefix(text, "//") {
					continue
				}
				if c := strings.Index(text, " #"); c >= 0 {
					text = text[:c]
				}
				refused := i+1 < len(p.lines) && strings.HasPrefix(strings.TrimSpace(p.lines[i+1]), "pgleader: ")
				for _, args := range commandLines(text) {
					out = append(out, invocation{where: d.at(p.start + i), args: args, refused: refused})
				}
			}
		}
	}
	return out
}

// commandLines returns the arguments of each pgleader command in a shell
// line: a command that is pgleader (or ./pgleader, /path/bin/pgleader, go
// run ./cmd/pgleader), after any VAR=value and exec, env, sudo, time or
// nohup.
func commandLines(line string) [][]string {
	var out [][]string
	for _, words := range shellCommands(line) {
		for len(words) > 0 && (strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") ||
			slices.Contains([]string{"exec", "env", "sudo", "time", "nohup"}, words[0])) {
			words = words[1:]
		}
		if len(words) >= 2 && words[0] == "go" && words[1] == "run" {
			words = words[2:]
			for len(words) > 0 && strings.HasPrefix(words[0], "-") {
				words = words[1:]
			}
		}
		if len(words) == 0 {
			continue
		}
		w := words[0]
		if w == "pgleader" || strings.HasSuffix(w, "/pgleader") && (strings.HasPrefix(w, ".") || strings.HasPrefix(w, "/") || strings.HasPrefix(w, "cmd/")) {
			out = append(out, words[1:])
		}
	}
	return out
}

// shellCommands splits a shell line into its commands (at ;, &, |, ( and
// )) and each into words, minding quotes.
func shellCommands(line string) [][]string {
	var cmds [][]string
	var words []string
	var word strings.Builder
	inWord := false
	endWord := func() {
		if inWord {
			words = append(words, word.String())
			word.Reset()
			inWord = false
		}
	}
	endCmd := func() {
		endWord()
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words = nil
	}
	var quote rune
	for _, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				word.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case unicode.IsSpace(r):
			endWord()
		case strings.ContainsRune(";&|()", r):
			endCmd()
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	endCmd()
	return cmds
}

// placeholder reports whether a word stands for something: COMMAND, KEY,
// <address>, ….
func placeholder(w string) bool {
	w = strings.Trim(w, "[]<>.…")
	return w == "" || strings.ToUpper(w) == w && strings.ToLower(w) != w
}

var negative = regexp.MustCompile(`^-\d+$`)

// TestCommandLines: every pgleader command line in the docs names a
// command the CLI has and only flags that command defines; migrate to N
// names a version this pgleader ships, unless the example shows it
// refused.
func TestCommandLines(t *testing.T) {
	t.Parallel()
	flags := commandFlags(t)
	var all []string
	for _, f := range flags {
		all = append(all, f...)
	}
	found := 0
	for _, inv := range invocations(t) {
		found++
		args := inv.args
		if len(args) == 0 {
			continue
		}
		name, rest := args[0], args[1:]
		var allowed []string
		switch {
		case strings.HasPrefix(name, "-"):
			rest, allowed = args, nil // pgleader -h
		case placeholder(name):
			allowed = all
		case name == "help":
			if len(rest) > 0 && !placeholder(rest[0]) && flags[rest[0]] == nil {
				t.Errorf("%s: pgleader %s: there is no command %q", inv.where, strings.Join(args, " "), rest[0])
			}
			continue
		case flags[name] == nil:
			t.Errorf("%s: pgleader %s: there is no command %q (the commands: %s)", inv.where, strings.Join(args, " "), name, strings.Join(slices.Sorted(mapKeys(flags)), ", "))
			continue
		default:
			allowed = flags[name]
		}
		for i, a := range rest {
			if a == "--" {
				break // run's COMMAND follows
			}
			a = strings.Trim(a, "[]")
			if !strings.HasPrefix(a, "-") || a == "-" || negative.MatchString(a) {
				if name == "migrate" && a == "to" && i+1 < len(rest) && !inv.refused {
					if n, err := strconv.Atoi(rest[i+1]); err == nil && !slices.Contains(migrations.Versions(), uint(n)) {
						t.Errorf("%s: pgleader %s: this pgleader ships versions %v", inv.where, strings.Join(args, " "), migrations.Versions())
					}
				}
				continue
			}
			flag, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if flag == "h" || flag == "help" || placeholder(flag) || slices.Contains(allowed, flag) {
				continue
			}
			t.Errorf("%s: pgleader %s: %s has no flag --%s", inv.where, strings.Join(args, " "), name, flag)
		}
	}
	if found < 30 {
		t.Errorf("found %d pgleader command lines in the docs; the scan no longer finds them", found)
	}
}

func mapKeys(m map[string][]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestCLIDocHasEveryFlag: docs/cli.md's section of each command names each
// of its flags (a flag every command takes may be named once, before the
// sections), and the flags its code spans name ("`--token`") are the
// command's.
func TestCLIDocHasEveryFlag(t *testing.T) {
	t.Parallel()
	flags := commandFlags(t)
	b, err := os.ReadFile(filepath.Join(root, "docs/cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	heading := regexp.MustCompile("(?m)^## `pgleader ([a-z-]+)")
	hs := heading.FindAllStringSubmatchIndex(md, -1)
	if len(hs) == 0 {
		t.Fatal("docs/cli.md has no section of a command")
	}
	intro := md[:hs[0][0]]
	section := map[string]string{}
	for i, h := range hs {
		end := len(md)
		if i+1 < len(hs) {
			end = hs[i+1][0]
		}
		// A section ends at the next heading of its level.
		if j := regexp.MustCompile(`(?m)^## `).FindStringIndex(md[h[1]:end]); j != nil {
			end = h[1] + j[0]
		}
		section[md[h[2]:h[3]]] = md[h[0]:end]
	}
	names := func(text string) []string {
		var out []string
		for _, m := range regexp.MustCompile(`(?:^|[^-\w])--([a-z][a-z-]*[a-z])\b`).FindAllStringSubmatch(text, -1) {
			out = append(out, m[1])
		}
		return out
	}
	common := slices.Clone(flags["run"])
	for _, fs := range flags {
		common = slices.DeleteFunc(common, func(f string) bool { return !slices.Contains(fs, f) })
	}
	for name, fs := range flags {
		text, ok := section[name]
		if !ok {
			t.Errorf("docs/cli.md has no section \"## `pgleader %s ...`\"", name)
			continue
		}
		named := names(text)
		for _, f := range fs {
			if !slices.Contains(named, f) && !(slices.Contains(common, f) && slices.Contains(names(intro), f)) {
				t.Errorf("docs/cli.md, section %s: does not name --%s", name, f)
			}
		}
		for _, s := range regexp.MustCompile("`(--[a-z][a-z-]*)").FindAllStringSubmatch(text, -1) {
			if f := strings.TrimPrefix(s[1], "--"); !slices.Contains(fs, f) {
				t.Errorf("docs/cli.md, section %s: names %s, which %s does not have", name, s[1], name)
			}
		}
	}
}
