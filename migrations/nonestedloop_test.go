package migrations_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgleader/pgleader/internal/pgtest"
)

// A nested loop with the lease table read through on one side: the plan
// that walks the table once per key.
var walkPerKey = regexp.MustCompile(`(?s)Nested Loop.*Seq Scan on lease`)

// readsLease: a plan that reads the lease table at all.
var readsLease = regexp.MustCompile(`Scan.* on lease`)

// TestCampaignNoTableWalkPerKey: a campaign's statements never read the
// lease table through once per key, whatever the planner would favour
// (migration 0022). With statistics taken while every lease was held,
// version 21's acquire_many planned a nested loop over the whole table for
// the free rows (at 33,333 keys of 100,000, more than four minutes); here
// a session that turned hash and merge joins off stands for such
// statistics, where the planner then walks the table as it did. The
// statistics are taken while every lease is held, a third of the leases
// lapse, and another member campaigns, then ticks, renews and releases
// the keys it took: every plan of those statements, as auto_explain
// reports them, must be free of the walk. The tick, the renewal and the
// release walked at version 22 (migration 0023): with the caller's rows
// expected at about one, the planner read the table once and the keys
// once per row it found.
func TestCampaignNoTableWalkPerKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	const n = 3000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%05d", i)
	}
	var won int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pgleader.acquire_many($1, 'b', '1 minute', $2)`, keys, n).Scan(&won); err != nil {
		t.Fatal(err)
	}
	if won != n {
		t.Fatalf("b took %d keys, want %d", won, n)
	}
	mustExec(t, db.Pool, `ANALYZE pgleader.lease`)
	mustExec(t, db.Pool, `UPDATE pgleader.lease SET expires_at = clock_timestamp() - interval '1 second' WHERE right(key, 1) IN ('0', '3', '6')`)

	cfg, err := pgx.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var plans []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		defer mu.Unlock()
		plans = append(plans, n.Message)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `LOAD 'auto_explain'`); err != nil {
		t.Skipf("this server cannot load auto_explain, which shows the plans inside the functions: %v", err)
	}
	for _, set := range []string{
		`SET auto_explain.log_min_duration = 0`, `SET auto_explain.log_nested_statements = on`,
		`SET client_min_messages = log`, `SET enable_hashjoin = off`, `SET enable_mergejoin = off`,
	} {
		if _, err := conn.Exec(ctx, set); err != nil {
			t.Fatal(err)
		}
	}
	var taken []string
	var tokens []int64
	if err := conn.QueryRow(ctx, `SELECT keys, tokens FROM pgleader.set_acquire('s', 'a', $1, '1 minute', 0, 0, NULL, $2)`, keys, n).Scan(&taken, &tokens); err != nil {
		t.Fatal(err)
	}
	if len(taken) != 900 {
		t.Errorf("a took %d keys, want the 900 that lapsed", len(taken))
	}
	// The statements of a term's life after the campaign, under the same
	// statistics: its ticks, a renewal and the release.
	for _, q := range []string{
		`SELECT lost FROM pgleader.set_tick('s', 'a', $1, $2, '1 minute', 0)`,
		`SELECT renewed FROM pgleader.set_renew('s', 'a', $1, $2, '1 minute', 0)`,
		`SELECT count(*) FROM pgleader.renew_many('a', $1, $2, '1 minute')`,
		`SELECT count(*) FROM pgleader.set_release('s', 'a', $1, $2, false)`,
	} {
		if _, err := conn.Exec(ctx, q, taken, tokens); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// The function's settings end with it: the session keeps its own (a
	// pooler's server connection, shared with the application's
	// transactions, must not be left with nested loops off).
	var settings string
	if err := conn.QueryRow(ctx, `SELECT current_setting('enable_nestloop') || current_setting('enable_hashjoin') || current_setting('enable_mergejoin')`).Scan(&settings); err != nil {
		t.Fatal(err)
	}
	if settings != "onoffoff" {
		t.Errorf("after the calls the session's enable_nestloop, enable_hashjoin, enable_mergejoin read %q, want on, off, off as it set them", settings)
	}
	mu.Lock()
	defer mu.Unlock()
	leaseRead := 0
	for _, p := range plans {
		if walkPerKey.MatchString(p) {
			t.Errorf("a statement reads the lease table through in a nested loop:\n%s", p)
		}
		if strings.Contains(p, "JIT:") {
			t.Errorf("a statement was compiled by JIT, which its cost penalties for the turned-off join methods can set off:\n%s", p)
		}
		if readsLease.MatchString(p) {
			leaseRead++
		}
	}
	if leaseRead == 0 {
		t.Errorf("no plan reads the lease table; auto_explain reported %d plans", len(plans))
	}
}
