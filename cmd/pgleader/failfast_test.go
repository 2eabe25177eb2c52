//go:build unix

package main_test

import (
	"strings"
	"testing"

	"github.com/pgleader/pgleader/internal/pgtest"
)

// TestRunFailsFastWithoutSchema: `pgleader run` on a database without the
// schema exits 1 at its first campaign, saying how to fix it, and never
// starts the command; a TTL above the database's max_ttl the same, with
// PostgreSQL's hint.
func TestRunFailsFastWithoutSchema(t *testing.T) {
	t.Parallel()
	bin := build(t)
	empty := pgtest.NewEmpty(t)
	code, stdout, stderr := runCLI(t, bin, []string{"DATABASE_URL=" + empty.URL}, "run", "--key", "job", "--", "echo", "ran")
	if code != 1 || !strings.Contains(stderr, "pgleader migrate up") || strings.Contains(stdout, "ran") {
		t.Errorf("run on an unmigrated database: exit %d, stdout %q, stderr %q; want 1, no command, and the fix", code, stdout, stderr)
	}
	migrated := pgtest.New(t)
	code, stdout, stderr = runCLI(t, bin, []string{"DATABASE_URL=" + migrated.URL}, "run", "--key", "job", "--ttl", "20m", "--", "echo", "ran")
	if code != 1 || !strings.Contains(stderr, "exceeds max_ttl") || !strings.Contains(stderr, "set_max_ttl") || strings.Contains(stdout, "ran") {
		t.Errorf("run with a TTL above max_ttl: exit %d, stdout %q, stderr %q; want 1, no command, and the hint", code, stdout, stderr)
	}
}
