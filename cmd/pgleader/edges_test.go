//go:build unix

package main_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgleader/pgleader/internal/pgtest"
)

// createRole creates a LOGIN role with a unique name (roles are
// cluster-wide) and drops it, with what it owns or was granted in db, when
// the test ends.
func createRole(t *testing.T, db *pgtest.DB) string {
	t.Helper()
	role, _ := db.NewRole(t, "")
	return role
}

func urlAs(t *testing.T, db *pgtest.DB, role string) string {
	t.Helper()
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	return u.String()
}

// testAdvanceRange: a FLOOR outside 0..MaxFloor is bad usage that names the
// range, and a counter at the top is never printed as a negative token.
func testAdvanceRange(t *testing.T, bin string) {
	db := pgtest.New(t)
	for _, floor := range []string{"-1", "4611686018427387904", "9223372036854775807"} {
		code, _, stderr := runCLI(t, bin, nil, "advance", "--database", db.URL, "k", floor)
		if code != 2 || !strings.Contains(stderr, "FLOOR must be a whole number from 0 to 4611686018427387903") ||
			strings.Contains(stderr, "flag provided") || strings.Contains(stderr, "Flags:") {
			t.Errorf("advance k %s: status %d, stderr:\n%s\nwant 2 and the valid range, without the usage", floor, code, stderr)
		}
	}
	if _, err := db.Pool.Exec(context.Background(), `SELECT pgleader.advance('k', 1)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(context.Background(), `UPDATE pgleader.lease SET token = 9223372036854775807 WHERE key = 'k'`); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, bin, nil, "advance", "--database", db.URL, "k", "5")
	if strings.Contains(stdout, "-9223372036854775808") || !strings.Contains(stdout+stderr, "no token") {
		t.Errorf("advance at the top: status %d, stdout %q, stderr:\n%s\nwant it to say no token is left", code, stdout, stderr)
	}
}

// testMigrateWithoutCreate migrates as a role that may not create the
// history table: pgleader prints the error and exits 1.
func testMigrateWithoutCreate(t *testing.T, bin string) {
	db := pgtest.NewEmpty(t)
	role := createRole(t, db)
	code, _, stderr := runCLI(t, bin, nil, "migrate", "--database", urlAs(t, db, role), "up")
	if code != 1 || !strings.Contains(stderr, "permission denied") {
		t.Fatalf("migrate up without CREATE: status %d, stderr:\n%s\nwant 1 and the error", code, stderr)
	}
}

// testGrant grants a role what it needs and uses pgleader as that role.
func testGrant(t *testing.T, bin string) {
	db := pgtest.New(t)
	role := createRole(t, db)
	for range 2 { // idempotent
		code, stdout, stderr := runCLI(t, bin, nil, "grant", "--database", db.URL, role)
		if code != 0 || !strings.Contains(stdout, role) {
			t.Fatalf("grant %s: status %d, stdout %q, stderr:\n%s", role, code, stdout, stderr)
		}
	}
	asRole := urlAs(t, db, role)
	for _, args := range [][]string{
		{"migrate", "--database", asRole, "up"},
		{"advance", "--database", asRole, "k", "3"},
		{"status", "--database", asRole},
	} {
		if code, stdout, stderr := runCLI(t, bin, nil, args...); code != 0 {
			t.Errorf("pgleader %q as %s: status %d, stdout %q, stderr:\n%s", args, role, code, stdout, stderr)
		}
	}

	// A key belongs to the role that first acquired it: another application
	// role may not resign it; a role granted --steer may.
	app, err := pgx.Connect(context.Background(), asRole)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(context.Background())
	if _, err := app.Exec(context.Background(), `SELECT pgleader.acquire('held', 'a', '1 minute')`); err != nil {
		t.Fatal(err)
	}
	other, steer := createRole(t, db), createRole(t, db)
	if code, stdout, stderr := runCLI(t, bin, nil, "grant", "--database", db.URL, other); code != 0 {
		t.Fatalf("grant %s: status %d, stdout %q, stderr:\n%s", other, code, stdout, stderr)
	}
	code, stdout, stderr := runCLI(t, bin, nil, "grant", "--database", db.URL, "--steer", steer)
	if code != 0 || !strings.Contains(stdout, steer+" may steer") {
		t.Fatalf("grant --steer %s: status %d, stdout %q, stderr:\n%s", steer, code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, bin, nil, "resign", "--database", urlAs(t, db, other), "held")
	if code != 1 || !strings.Contains(stderr, "42501") || !strings.Contains(stderr, "belongs to role "+role) {
		t.Errorf("resign of %s's key by %s: status %d, stdout %q, stderr:\n%s", role, other, code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, bin, nil, "resign", "--database", urlAs(t, db, steer), "held")
	if code != 0 || !strings.Contains(stdout, "will end") {
		t.Errorf("resign of %s's key by the steer role %s: status %d, stdout %q, stderr:\n%s", role, steer, code, stdout, stderr)
	}
	var asked bool
	if err := db.Pool.QueryRow(context.Background(), `SELECT resign_token IS NOT NULL FROM pgleader.lease WHERE key = 'held'`).Scan(&asked); err != nil || !asked {
		t.Errorf("after the steer role's resign: asked = %v, %v; want the term asked to end", asked, err)
	}

	code, _, stderr = runCLI(t, bin, nil, "grant", "--database", db.URL, "no_such_role_pgleader")
	if code != 1 || !strings.Contains(stderr, "no_such_role_pgleader") {
		t.Errorf("grant to no role: status %d, stderr:\n%s", code, stderr)
	}
	code, _, stderr = runCLI(t, bin, nil, "grant", "--database", db.URL)
	if code != 2 || !strings.Contains(stderr, "want ROLE") {
		t.Errorf("grant without a role: status %d, stderr:\n%s", code, stderr)
	}
}
