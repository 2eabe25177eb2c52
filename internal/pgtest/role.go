package pgtest

import (
	"context"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
)

// RolePassword is the password of every role NewRole creates, for servers
// that ask for one (testcontainers' image trusts only local connections); a
// trusting server ignores it.
const RolePassword = "pgleader-test"

// NewRole creates a login role with a random name "pgleader_test_role_…",
// dropped (with everything it owns) when the test ends, and returns its name
// and a URL that connects to d as it. grant is run by d's owner with the
// role's name as $1, e.g. "SELECT pgleader.grant_usage($1)"; "" grants
// nothing. Roles are the cluster's, so tests in parallel use different names.
func (d *DB) NewRole(t testing.TB, grant string) (role, roleURL string) {
	t.Helper()
	ctx := context.Background()
	role = "pgleader_test_role_" + randomSuffix()
	if _, err := d.Pool.Exec(ctx, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN PASSWORD '"+RolePassword+"'"); err != nil {
		t.Fatalf("create role %s: %v", role, err)
	}
	t.Cleanup(func() {
		_, _ = d.Pool.Exec(ctx, "DROP OWNED BY "+pgx.Identifier{role}.Sanitize())
		if _, err := d.Pool.Exec(ctx, "DROP ROLE "+pgx.Identifier{role}.Sanitize()); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	if grant != "" {
		if _, err := d.Pool.Exec(ctx, grant, role); err != nil {
			t.Fatalf("%s for %s: %v", grant, role, err)
		}
	}
	u, err := url.Parse(d.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, RolePassword)
	return role, u.String()
}
