package migrations_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgleader/pgleader/internal/pgtest"
)

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
