package migrations_test

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgleader/pgleader/internal/pgtest"
)

// set_tick's one pass (migration 0021) renews the terms whose lease expires
// after its window (a second for a TTL of a minute) without locking them
// first; these tests would fail if it renewed a term it must not.

const tickSQL = `SELECT lost, expires_at IS NOT NULL FROM pgleader.set_tick('s', 'a', $1, $2, '1 minute', 0)`

// TestSetTickOnePassLapsedDuringWait: a term 5 s from its expiry is in the
// one pass's reach; its row's lock is held past the expiry, so the pass
// outlasts its window and is undone, and the term is lost, not renewed,
// while the live terms are renewed.
func TestSetTickOnePassLapsedDuringWait(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	t1, _ := shortTerm(t, db, "k1", "a", "1 minute")
	t2, e2 := shortTerm(t, db, "k2", "a", "5 seconds")
	t3, _ := shortTerm(t, db, "k3", "a", "1 minute")
	var lost []string
	var renewed bool
	var err error
	lockedPastExpiry(t, db, lockUpdate, []any{"k2"}, e2, func(c *pgx.Conn) {
		err = c.QueryRow(context.Background(), tickSQL, []string{"k1", "k2", "k3"}, []int64{t1, t2, t3}).Scan(&lost, &renewed)
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(lost, []string{"k2"}) || !renewed {
		t.Errorf("lost %v (renewed any: %v); want [k2]: it expired at %v while the tick waited for its row", lost, renewed, e2)
	}
	wantUnchanged(t, db, "k2", e2, false)
}

// TestSetTickStaleAndLapsed: a stale token is not renewed, nor is a term
// that lapsed before the tick, nor a term near its expiry held with a
// stale token; the others are, in the one pass.
func TestSetTickStaleAndLapsed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	t1, _ := shortTerm(t, db, "live", "a", "1 minute")
	t2, _ := shortTerm(t, db, "stale", "a", "1 minute")
	t3, _ := shortTerm(t, db, "lapsed", "a", "1 minute")
	t4, _ := shortTerm(t, db, "near", "a", "1 minute")
	if _, err := db.Pool.Exec(ctx, `UPDATE pgleader.lease SET expires_at = clock_timestamp() - interval '1 millisecond' WHERE key = 'lapsed'`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE pgleader.lease SET expires_at = clock_timestamp() + interval '500 milliseconds' WHERE key = 'near'`); err != nil {
		t.Fatal(err)
	}
	before := map[string]leaseRow{}
	for _, k := range []string{"stale", "lapsed", "near"} {
		before[k] = readLease(t, db.Pool, k)
	}
	live := readLease(t, db.Pool, "live")
	var lost []string
	var renewed bool
	err := db.Pool.QueryRow(ctx, tickSQL, []string{"live", "stale", "lapsed", "near"}, []int64{t1, t2 + 1, t3, t4 + 1}).Scan(&lost, &renewed)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(lost)
	if !slices.Equal(lost, []string{"lapsed", "near", "stale"}) || !renewed {
		t.Errorf("lost %v (renewed any: %v); want [lapsed near stale]", lost, renewed)
	}
	for k, r := range before {
		after := readLease(t, db.Pool, k)
		if after.expires == nil || r.expires == nil || !after.expires.Equal(*r.expires) {
			t.Errorf("lease %s: expiry %v after the tick, %v before; want it unchanged", k, after.expires, r.expires)
		}
	}
	if r := readLease(t, db.Pool, "live"); r.expires == nil || !r.expires.After(*live.expires) {
		t.Errorf("live lease not renewed: expiry %v, was %v", r.expires, live.expires)
	}
}

// TestSetTickChecksKeys: a repeated key is an error even when every row
// matched, and nothing is renewed.
func TestSetTickChecksKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	t1, _ := shortTerm(t, db, "k1", "a", "1 minute")
	before := readLease(t, db.Pool, "k1")
	var lost []string
	var renewed bool
	err := db.Pool.QueryRow(ctx, tickSQL, []string{"k1", "k1"}, []int64{t1, t1}).Scan(&lost, &renewed)
	if err == nil {
		t.Fatalf("set_tick with a repeated key: lost %v; want an error", lost)
	}
	if after := readLease(t, db.Pool, "k1"); !after.expires.Equal(*before.expires) {
		t.Errorf("k1 renewed by a refused tick: %v, was %v", after.expires, before.expires)
	}
}
