package migrations_test

import (
	"context"
	"slices"
	"testing"
	"time"

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

// TestSetTickOnePass: version 21's set_tick renews in one pass the live
// terms it was given with their own tokens, sends the rest to renew_many,
// and answers as version 20 did: a term near its expiry (inside the pass's
// window) is still renewed, and a stale token, another owner's term and a
// lapsed term are lost, unchanged; a term asked to resign is flagged; the
// expiry answered is the earliest renewed; keys given twice are refused and
// leave every row as it was.
func TestSetTickOnePass(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	live, _ := shortTerm(t, db, "live", "a", "1 minute")
	resign, _ := shortTerm(t, db, "resign", "a", "1 minute")
	mustExec(t, db.Pool, `SELECT pgleader.resign('resign', NULL)`)
	near, _ := shortTerm(t, db, "near", "a", "1 minute")
	stale, _ := shortTerm(t, db, "stale", "a", "1 minute")
	other, _ := shortTerm(t, db, "other", "b", "1 minute")
	lapsed, _ := shortTerm(t, db, "lapsed", "a", "1 minute")
	// Moved in the transaction of the tick, just before it: near expires
	// inside the pass's window (a second), lapsed has expired.
	const prepare = `UPDATE pgleader.lease SET expires_at = CASE key WHEN 'near' THEN clock_timestamp() + interval '900 milliseconds'
	                 ELSE clock_timestamp() - interval '1 millisecond' END WHERE key IN ('near', 'lapsed')`

	before := map[string]leaseRow{}
	for _, k := range []string{"stale", "other"} {
		before[k] = readLease(t, db.Pool, k)
	}
	keys := []string{"live", "resign", "near", "stale", "other", "lapsed"}
	first := map[string]leaseRow{}
	for _, k := range keys {
		first[k] = readLease(t, db.Pool, k)
	}
	tokens := []int64{live, resign, near, stale + 1, other, lapsed}

	// Given twice: refused, nothing changed.
	var e time.Time
	if _, err := db.Pool.Exec(ctx, `SELECT * FROM pgleader.set_tick('s', 'a', $1, $2, '1 minute', 6)`,
		append(keys, "live"), append(tokens, live)); err == nil {
		t.Error("set_tick with a key given twice succeeded; want an error")
	}
	for _, k := range keys {
		if r := readLease(t, db.Pool, k); !sameTime(r.expires, first[k].expires) || r.token != first[k].token {
			t.Errorf("after the refused tick, %s: %+v; want it as it was, %+v", k, r, first[k])
		}
	}

	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	mustExec(t, tx, prepare)
	before["lapsed"] = readLeaseTx(t, tx, "lapsed")
	var lost, resigned []string
	var now time.Time
	if err := tx.QueryRow(ctx, `SELECT lost, resign, expires_at, db_now FROM pgleader.set_tick('s', 'a', $1, $2, '1 minute', 6)`,
		keys, tokens).Scan(&lost, &resigned, &e, &now); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	slices.Sort(lost)
	if want := []string{"lapsed", "other", "stale"}; !slices.Equal(lost, want) {
		t.Errorf("lost %v; want %v", lost, want)
	}
	if !slices.Equal(resigned, []string{"resign"}) {
		t.Errorf("resign %v; want [resign]", resigned)
	}
	for _, k := range []string{"live", "resign", "near"} {
		r := readLease(t, db.Pool, k)
		if r.expires == nil || r.expires.Sub(now) < 58*time.Second {
			t.Errorf("%s expires %v after the tick at %v; want renewed for a minute", k, r.expires, now)
		}
	}
	if e.Sub(now) < 58*time.Second || e.Sub(now) > time.Minute {
		t.Errorf("expires_at %v at %v; want about a minute on", e, now)
	}
	for k, b := range before {
		if a := readLease(t, db.Pool, k); a.token != b.token || !sameTime(a.expires, b.expires) || str(a.holder) != str(b.holder) {
			t.Errorf("%s changed by the tick: %+v, was %+v", k, a, b)
		}
	}
}

// readLeaseTx is readLease inside tx.
func readLeaseTx(t *testing.T, tx pgx.Tx, key string) leaseRow {
	t.Helper()
	var r leaseRow
	if err := tx.QueryRow(context.Background(), `SELECT holder, token, expires_at FROM pgleader.lease WHERE key = $1`, key).
		Scan(&r.holder, &r.token, &r.expires); err != nil {
		t.Fatal(err)
	}
	return r
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}
