package pgleader_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/pgleader"
)

// TestApplicationRoleThroughPgbouncer: behind pgbouncer in transaction
// mode, the SQL functions see the role the client logged in as (pgbouncer
// logs in to the server as that role), so an application role's electors
// elect one leader at a time with increasing tokens, and the key is that
// role's, not pgbouncer's or the owner's.
func TestApplicationRoleThroughPgbouncer(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	role, _ := db.NewRole(t, "SELECT pgleader.grant_usage($1)")
	via, err := url.Parse(db.Pgbouncer(t, role))
	if err != nil {
		t.Fatal(err)
	}
	via.User = url.UserPassword(role, pgtest.RolePassword)
	pool := func() *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(via.String())
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec // no named prepared statements
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	spec := pgleader.Spec{Key: "k", TTL: 3 * time.Second, CampaignEvery: 100 * time.Millisecond}
	a := startOn(t, pgleader.NewPostgres(pool(), pgleader.PollOnly(), pgleader.WithLogger(quiet)), spec, "a")
	waitFor(t, "a to lead", func() bool { return a.el.Status().Leading })
	b := startOn(t, pgleader.NewPostgres(pool(), pgleader.PollOnly(), pgleader.WithLogger(quiet)), spec, "b")
	a.stopNow(t)
	waitFor(t, "b to lead", func() bool { return b.el.Status().Leading })
	if tok := b.el.Status().Token; tok != 2 {
		t.Fatalf("b leads with token %d, want 2", tok)
	}
	var keyRole string
	if err := db.Pool.QueryRow(ctx, `SELECT role FROM pgleader.lease WHERE key = 'k'`).Scan(&keyRole); err != nil || keyRole != role {
		t.Fatalf("the key belongs to %q (%v); want the application role %s", keyRole, err, role)
	}
}
