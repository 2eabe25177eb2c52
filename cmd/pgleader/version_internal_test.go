//go:build unix

package main

import (
	"fmt"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/pgleader/pgleader/migrations"
)

func TestDescribeBuild(t *testing.T) {
	t.Parallel()
	vcs := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{
		{"local build", &debug.BuildInfo{Main: debug.Module{Path: "github.com/pgleader/pgleader", Version: "(devel)"}}, true,
			"pgleader (devel)\n"},
		{"go install of a release", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.2"}}, true,
			"pgleader v1.4.2\n"},
		{"a clean checkout", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.3-0.20270102030405-0123456789ab"},
			Settings: vcs("-buildmode", "exe", "vcs", "git", "vcs.revision", "0123456789abcdef0123456789abcdef01234567", "vcs.modified", "false")}, true,
			"pgleader v1.4.3-0.20270102030405-0123456789ab\nrevision 0123456789abcdef0123456789abcdef01234567\n"},
		{"a checkout with changes", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: vcs("vcs.revision", "0123456789abcdef0123456789abcdef01234567", "vcs.time", "2027-01-02T03:04:05Z", "vcs.modified", "true")}, true,
			"pgleader (devel)\nrevision 0123456789abcdef0123456789abcdef01234567, modified\n"},
		{"no version recorded", &debug.BuildInfo{}, true, "pgleader (devel)\n"},
		{"no build information", nil, false, "pgleader, version unknown (the binary has no build information)\n"},
	} {
		if got := describeBuild(tc.bi, tc.ok); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestDescribeSchema(t *testing.T) {
	t.Parallel()
	latest := migrations.Latest
	for _, tc := range []struct {
		version uint
		dirty   bool
		want    string
		err     string // "" for none
	}{
		{0, false, "database at schema version 0 (no pgleader schema): run 'pgleader migrate up'", ""},
		{1, false, fmt.Sprintf("database at schema version 1: behind this pgleader (%d): run 'pgleader migrate up'", latest), ""},
		{latest - 1, false, fmt.Sprintf("database at schema version %d: behind this pgleader (%d): run 'pgleader migrate up'", latest-1, latest), ""},
		{latest, false, fmt.Sprintf("database at schema version %d: up to date", latest), ""},
		{latest, true, fmt.Sprintf("database at schema version %d: dirty (its migration failed half-way)", latest), "repair the schema by hand"},
		{latest + 1, false, fmt.Sprintf("database at schema version %d: ahead of this pgleader (%d)", latest+1, latest),
			fmt.Sprintf("migrate with a pgleader that ships version %d or later", latest+1)},
		{13, false, "database at schema version 13: written by an unreleased development build", "DROP SCHEMA pgleader CASCADE"},
		{2, true, "database at schema version 2: written by an unreleased development build", "unreleased development version"},
	} {
		got, err := describeSchema(tc.version, tc.dirty)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("version %d, dirty %v: %q, %v; want %q and an error containing %q", tc.version, tc.dirty, got, err, tc.want, tc.err)
		}
	}
}
