package pgleader_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/pgleader"
)

// TestSetThroughPgbouncer: members of a set that reach PostgreSQL through
// pgbouncer in transaction mode, with pgx's defaults (a plain URL), share
// its keys, take over a stopped member's keys and a crashed one's, and
// every key's token rises with each new holder. Every statement of the
// Set, its lease connection's too, runs on a pooled server connection that
// other clients' transactions share.
func TestSetThroughPgbouncer(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	via := db.Pgbouncer(t)
	backend := func() *pgleader.Postgres {
		p, err := pgxpool.New(context.Background(), via)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return pgleader.NewPostgres(p, pgleader.WithLogger(quiet))
	}
	keys := keyNames("pb", 12)
	spec := pgleader.Spec{Key: "pooled", TTL: 2 * time.Second}
	views := []*crashable{{SetBackend: backend()}, {SetBackend: backend()}, {SetBackend: backend()}}
	start := func(i int) *runningSet {
		return startSet(t, views[i], spec, keys, pgleader.SetOptions{Owner: fmt.Sprintf("m%d", i), Lead: quickBody})
	}
	tokens := func() map[string]int64 {
		t.Helper()
		rows, err := db.Pool.Query(context.Background(), `SELECT key, token FROM pgleader.lease WHERE key = ANY($1)`, keys)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for rows.Next() {
			var k string
			var tok int64
			if err := rows.Scan(&k, &tok); err != nil {
				t.Fatal(err)
			}
			out[k] = tok
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	// rose checks that every key's token rose from before, for keys that
	// changed holder: moved lists them.
	rose := func(before, after map[string]int64, moved []string) {
		t.Helper()
		for _, k := range moved {
			if after[k] <= before[k] {
				t.Errorf("key %s moved to another member and its token went from %d to %d", k, before[k], after[k])
			}
		}
	}
	heldBy := func(owner string) []string {
		t.Helper()
		rows, err := db.Pool.Query(context.Background(),
			`SELECT key FROM pgleader.lease WHERE key = ANY($1) AND holder = $2 AND expires_at > clock_timestamp()`, keys, owner)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	a, b, c := start(0), start(1), start(2)
	all := []*runningSet{a, b, c}
	waitHeld(t, 10*time.Second, all, 4, 4, 4)

	// Graceful stop: c's keys go to a and b.
	before, moved := tokens(), heldBy("m2")
	if len(moved) != 4 {
		t.Fatalf("the lease table has %d live keys of m2, which holds 4", len(moved))
	}
	c.stop(t)
	waitHeld(t, 10*time.Second, all[:2], 6, 6)
	rose(before, tokens(), moved)

	// Crash: b stops answering; its keys go to a once its leases lapse.
	before, moved = tokens(), heldBy("m1")
	if len(moved) != 6 {
		t.Fatalf("the lease table has %d live keys of m1, which holds 6", len(moved))
	}
	views[1].dead.Store(true)
	waitHeld(t, spec.TTL+10*time.Second, all[:1], 12)
	rose(before, tokens(), moved)
	views[1].dead.Store(false)
	b.stop(t)
	a.stop(t)
}
