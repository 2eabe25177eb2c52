package docscheck

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pgleader/pgleader/migrations"
)

// A version list: "17", "14, 15, 16, 17", "1, 14 and 15", "2 to 13".
// Its parts are on one line: a number on the next is not taken for one of
// them ("version 9,\n2026-12-01").
const list = `\d+\b(?:(?:,[ \t]*(?:and[ \t]+)?|[ \t]+and[ \t]+|[ \t]+to[ \t]+|[ \t]*–[ \t]*)\d+\b)*`

var (
	// Phrases about pgleader's schema version: "schema version 12",
	// "schema at development version 11", "schema 14", "migration 10",
	// "versions 2 to 13", "Version 15". Every "version N" in these docs is
	// the schema's; one that names another thing's version is preceded by
	// its name (notVersionOf).
	schemaVersion = regexp.MustCompile(`(?i)\b(?:schema|migrations?)\s+(?:(?:then\s+)?at\s+)?(?:development\s+)?(?:versions?\s+)?(` + list + `)`)
	anyVersion    = regexp.MustCompile(`(?i)(\S+\s+)?\b(?:development\s+)?versions?\s+(` + list + `)`)
	// "this pgleader ships 17", "the versions this pgleader ships, 1, 14,
	// ...": the latest version, or every one.
	ships = regexp.MustCompile(`\bships[\s,(]+(` + list + `)`)
	// A migration file: 0015_set_scale.up.sql, or 0015_set_scale.
	migrationFile = regexp.MustCompile(`\b(00\d\d_[a-z0-9_]*[a-z0-9])((?:\.(?:up|down))?\.sql)?`)
	number        = regexp.MustCompile(`\d+`)
)

// notVersionOf is the words that, before "version N", make it the version
// of something else than pgleader's schema.
var notVersionOf = []string{"postgresql", "postgres", "go", "major", "server", "protocol", "tls", "api", "module", "compose", "docker", "spin", "node", "npm", "kernel", "debian", "ubuntu"}

// historical is the documents that record measurements of the development
// history, whose schema versions (2 to 13, squashed into 1 before the first
// release) they name without saying so each time; each must still say so.
var historical = map[string]string{
	"docs/benchmarks.md": "The\nschema versions that dated runs name are of the development history",
}

// TestSchemaVersions: the docs name no schema version this pgleader does not
// ship, except the development versions squashed into version 1 where the
// paragraph says so ("development", "squashed", "unreleased"); a version
// this pgleader ships is the latest (one number) or the list of them all.
func TestSchemaVersions(t *testing.T) {
	t.Parallel()
	shipped := migrations.Versions()
	latest := migrations.Latest
	if len(shipped) == 0 || shipped[len(shipped)-1] != latest {
		t.Fatalf("migrations.Versions() = %v, Latest %d", shipped, latest)
	}
	for name, says := range historical {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(strings.Fields(string(b)), " "), strings.Join(strings.Fields(says), " ")) {
			t.Errorf("%s no longer says %q: name its versions as development versions, or remove it from historical", name, says)
		}
	}
	checked := 0
	for _, d := range docs(t) {
		for _, p := range parts(d) {
			text := p.text()
			lower := strings.ToLower(text)
			development := historical[d.name] != "" ||
				strings.Contains(lower, "development") || strings.Contains(lower, "squashed") || strings.Contains(lower, "unreleased")
			where := func(offset int) string { return d.at(p.start + strings.Count(text[:offset], "\n")) }
			seen := map[int]bool{} // offsets of numbers already checked
			check := func(offset int, phrase, nums string) {
				for _, m := range number.FindAllStringIndex(nums, -1) {
					at := offset + m[0]
					if seen[at] {
						continue
					}
					seen[at] = true
					checked++
					n, _ := strconv.Atoi(nums[m[0]:m[1]])
					if os.Getenv("DOCSCHECK_SHOW") != "" {
						t.Logf("%s: %q: %d", where(at), phrase, n)
					}
					switch {
					case n == 0 || slices.Contains(shipped, uint(n)):
					case uint(n) < latest && development:
					case uint(n) < latest:
						t.Errorf("%s: %q names schema version %d, which no release ships (a development version, squashed into 1; say so in the paragraph); this pgleader ships %v",
							where(at), phrase, n, shipped)
					default:
						t.Errorf("%s: %q names schema version %d; this pgleader ships %v", where(at), phrase, n, shipped)
					}
				}
			}
			for _, m := range schemaVersion.FindAllStringSubmatchIndex(text, -1) {
				if semver(text, m[1]) {
					continue
				}
				check(m[2], text[m[0]:m[1]], text[m[2]:m[3]])
			}
			for _, m := range anyVersion.FindAllStringSubmatchIndex(text, -1) {
				if semver(text, m[1]) {
					continue
				}
				if m[2] >= 0 {
					before := strings.ToLower(strings.Trim(text[m[2]:m[3]], " \t\n*_`("))
					if slices.Contains(notVersionOf, before) {
						continue
					}
				}
				check(m[4], text[m[0]:m[1]], text[m[4]:m[5]])
			}
			for _, m := range ships.FindAllStringSubmatchIndex(text, -1) {
				var got []uint
				for _, s := range number.FindAllString(text[m[2]:m[3]], -1) {
					n, _ := strconv.Atoi(s)
					got = append(got, uint(n))
				}
				checked++
				if len(got) == 1 && got[0] != latest || len(got) > 1 && !slices.Equal(got, shipped) {
					t.Errorf("%s: %q: this pgleader ships %v, the latest %d", where(m[0]), text[m[0]:m[1]], shipped, latest)
				}
			}
		}
	}
	if checked < 20 {
		t.Errorf("checked %d version numbers in the docs; the patterns no longer find them", checked)
	}
}

// semver reports whether the number that ends at end in text goes on as a
// dotted version (Go 1.26, v0.8.2), which is not a schema version.
func semver(text string, end int) bool {
	return end+1 < len(text) && text[end] == '.' && text[end+1] >= '0' && text[end+1] <= '9'
}

// TestMigrationFiles: every migration file the docs name is in
// migrations/.
func TestMigrationFiles(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(root, "migrations", "00*_*.sql"))
	if err != nil {
		t.Fatal(err)
	}
	var have []string
	for _, f := range files {
		have = append(have, filepath.Base(f))
	}
	if len(have) < 2 {
		t.Fatalf("migrations/ has %v", have)
	}
	found := 0
	for _, d := range docs(t) {
		for i, line := range d.lines {
			for _, m := range migrationFile.FindAllStringSubmatch(line, -1) {
				found++
				stem, suffix := m[1], m[2]
				ok := slices.ContainsFunc(have, func(f string) bool {
					if suffix != "" {
						return f == stem+suffix
					}
					return strings.HasPrefix(f, stem+".")
				})
				if !ok {
					t.Errorf("%s: names %s, which migrations/ does not have (it has %s)", d.at(i), m[0], strings.Join(have, ", "))
				}
			}
		}
	}
	if found == 0 {
		t.Error("the docs name no migration file; the pattern no longer finds them")
	}
}
