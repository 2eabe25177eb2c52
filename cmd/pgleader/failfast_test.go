//go:build unix

package main_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/migrations"
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

// TestStatusSaysWhy: status says what would stop a replica's Run at its
// first campaign, in each of its forms (every key, one key, --set,
// --jobs): no schema and no grant exit 1 with the command that fixes them;
// a schema behind this pgleader is printed with a warning naming the fix;
// an up-to-date schema gets no warning.
func TestStatusSaysWhy(t *testing.T) {
	t.Parallel()
	bin := build(t)
	forms := [][]string{{"status"}, {"status", "k"}, {"status", "--set", "s"}, {"status", "--jobs"}}
	status := func(url string, form []string) (int, string, string) {
		return runCLI(t, bin, nil, append(form, "--database", url)...)
	}

	migrated := pgtest.New(t)
	for _, form := range forms {
		if code, _, stderr := status(migrated.URL, form); code != 0 || stderr != "" {
			t.Errorf("%q on an up-to-date schema: exit %d, stderr %q; want 0 and nothing", form, code, stderr)
		}
	}
	_, noGrant := migrated.NewRole(t, "")
	for _, form := range forms {
		code, _, stderr := status(noGrant, form)
		if code != 1 || !strings.Contains(stderr, "permission denied") || !strings.Contains(stderr, "'pgleader grant ROLE'") ||
			strings.Contains(stderr, "pgleader: pgleader:") {
			t.Errorf("%q as a role without the grant: exit %d, stderr %q; want 1, the refusal and 'pgleader grant ROLE'", form, code, stderr)
		}
	}
	empty := pgtest.NewEmpty(t)
	for _, form := range forms {
		if code, _, stderr := status(empty.URL, form); code != 1 || !strings.Contains(stderr, "run 'pgleader migrate up'") {
			t.Errorf("%q without the schema: exit %d, stderr %q; want 1 and 'run 'pgleader migrate up''", form, code, stderr)
		}
	}
	old := pgtest.NewEmpty(t)
	if err := migrations.To(context.Background(), old.Pool, 15); err != nil {
		t.Fatal(err)
	}
	warning := fmt.Sprintf("pgleader: warning: database at schema version 15: behind this pgleader (%d): run 'pgleader migrate up'\n", migrations.Latest)
	for _, form := range forms[:3] {
		if code, stdout, stderr := status(old.URL, form); code != 0 || stdout == "" || stderr != warning {
			t.Errorf("%q on schema 15: exit %d, stdout %q, stderr %q; want 0, the status, and %q", form, code, stdout, stderr, warning)
		}
	}
	// The jobs came with version 18: status --jobs fails as a job's Run would.
	if code, _, stderr := status(old.URL, forms[3]); code != 1 || !strings.Contains(stderr, "run 'pgleader migrate up'") {
		t.Errorf("%q on schema 15: exit %d, stderr %q; want 1 and 'run 'pgleader migrate up''", forms[3], code, stderr)
	}
}
