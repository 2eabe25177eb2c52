package migrations_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/pgtest"
)

// forgetEpoch empties pgleader.server_epoch, as crash recovery or a
// promotion does: the next lease operation notices a grace.
func forgetEpoch(t *testing.T, db *pgtest.DB) {
	t.Helper()
	mustExec(t, db.Pool, `DELETE FROM pgleader.server_epoch`)
}

// endGrace moves the grace's end into the past instead of waiting for it.
func endGrace(t *testing.T, db *pgtest.DB) {
	t.Helper()
	mustExec(t, db.Pool, `UPDATE pgleader.server_epoch SET grace_until = clock_timestamp() - interval '1 second'`)
}

type acquireResult struct {
	acquired bool
	holder   string
	token    int64
	expires  time.Time
	now      time.Time
}

func acquire(t *testing.T, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, key, owner, ttl string) acquireResult {
	t.Helper()
	var r acquireResult
	err := db.QueryRow(context.Background(), `SELECT acquired, holder, token, expires_at, db_now FROM pgleader.acquire($1, $2, $3::interval)`,
		key, owner, ttl).Scan(&r.acquired, &r.holder, &r.token, &r.expires, &r.now)
	if err != nil {
		t.Fatalf("acquire(%s, %s, %s): %v", key, owner, ttl, err)
	}
	return r
}

func renew(t *testing.T, db *pgxpool.Pool, key, owner string, token int64, ttl string) *time.Time {
	t.Helper()
	var e *time.Time
	if err := db.QueryRow(context.Background(), `SELECT pgleader.renew($1, $2, $3, $4::interval)`, key, owner, token, ttl).Scan(&e); err != nil {
		t.Fatalf("renew: %v", err)
	}
	return e
}

func TestFreshInstallHasNoGrace(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	var inGrace bool
	var maxTTL, offset time.Duration
	if err := db.Pool.QueryRow(context.Background(), `SELECT in_grace, max_ttl, max_clock_offset FROM pgleader.grace()`).Scan(&inGrace, &maxTTL, &offset); err != nil {
		t.Fatal(err)
	}
	if inGrace || maxTTL != 10*time.Minute || offset != time.Second {
		t.Fatalf("grace() = %v, max_ttl %v, max_clock_offset %v; want false, 10m, 1s", inGrace, maxTTL, offset)
	}
	if r := acquire(t, db.Pool, "k", "a", "10 minutes"); !r.acquired || r.token != 1 {
		t.Fatalf("acquire on a fresh install = %+v; want a win with token 1", r)
	}
}

// TestGraceGrantsNoNewTerm: once the server has forgotten its epoch, acquire
// wins nothing and advance moves nothing until max_ttl has passed from the
// first notice; the answer names the grace's end as the expiry to wait for.
func TestGraceGrantsNoNewTerm(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	mustExec(t, db.Pool, `SELECT pgleader.set_max_ttl('30 seconds')`)
	first := acquire(t, db.Pool, "k", "a", "1 second")
	mustExec(t, db.Pool, `SELECT pgleader.release('k', 'a', $1)`, first.token)
	forgetEpoch(t, db)

	// The notice also moved the counter to epoch 1's base (the token epochs).
	r := acquire(t, db.Pool, "k", "b", "1 second")
	if r.acquired || r.holder != "pgleader.grace" || r.token != 1<<40 {
		t.Fatalf("acquire in grace = %+v; want refused, holder pgleader.grace, token %d", r, int64(1<<40))
	}
	if left := r.expires.Sub(r.now); left <= 25*time.Second || left > 30*time.Second {
		t.Fatalf("grace ends %v after db_now; want max_ttl (30s) from the notice", left)
	}
	again := acquire(t, db.Pool, "other-key", "b", "1 second")
	if again.acquired || !again.expires.Equal(r.expires) {
		t.Fatalf("second acquire in grace = %+v; want refused with the same end %v (noticed once)", again, r.expires)
	}
	var advanced bool
	var counter int64
	if err := db.Pool.QueryRow(ctx, `SELECT advanced, token FROM pgleader.advance('k', 50)`).Scan(&advanced, &counter); err != nil {
		t.Fatal(err)
	}
	if advanced || counter != 1<<40 {
		t.Fatalf("advance in grace = %v, %d; want false, %d", advanced, counter, int64(1<<40))
	}
	var inGrace bool
	if err := db.Pool.QueryRow(ctx, `SELECT in_grace FROM pgleader.grace()`).Scan(&inGrace); err != nil || !inGrace {
		t.Fatalf("grace().in_grace = %v, %v; want true", inGrace, err)
	}

	endGrace(t, db)
	if r := acquire(t, db.Pool, "k", "b", "1 second"); !r.acquired || r.token != 1<<40+1 {
		t.Fatalf("acquire after the grace = %+v; want a win with token %d", r, int64(1<<40+1))
	}
}

// TestGraceKeepsKnownTerms: during the grace a term the server knows still
// holds, and its holder may renew it while its expiry is more than
// max_clock_offset away; a term that close to its expiry may not (the
// previous server's clock may have ended it already).
func TestGraceKeepsKnownTerms(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	held := acquire(t, db.Pool, "held", "a", "1 minute")
	near := acquire(t, db.Pool, "near", "a", "1 minute")
	mustExec(t, db.Pool, `UPDATE pgleader.lease SET expires_at = clock_timestamp() + interval '500 milliseconds' WHERE key = 'near'`)
	forgetEpoch(t, db)

	if r := acquire(t, db.Pool, "held", "b", "1 minute"); r.acquired || r.holder != "a" || r.token != held.token {
		t.Fatalf("acquire of a held key in grace = %+v; want the holder a, token %d", r, held.token)
	}
	if e := renew(t, db.Pool, "held", "a", held.token, "1 minute"); e == nil {
		t.Fatal("renew in grace of a term a minute from its expiry was refused")
	}
	if e := renew(t, db.Pool, "near", "a", near.token, "1 minute"); e != nil {
		t.Fatalf("renew in grace of a term 500ms from its expiry (max_clock_offset 1s) = %v; want refused", e)
	}
	mustExec(t, db.Pool, `SELECT pgleader.lease_guard('held', $1)`, held.token)
	_, err := db.Pool.Exec(ctx, `SELECT pgleader.lease_guard('near', $1)`, near.token)
	wantCode(t, "lease_guard near its expiry in grace", err, "PF002", "is not held by token")

	endGrace(t, db)
	mustExec(t, db.Pool, `UPDATE pgleader.lease SET expires_at = clock_timestamp() + interval '30 seconds' WHERE key = 'near'`)
	if e := renew(t, db.Pool, "near", "a", near.token, "1 minute"); e == nil {
		t.Fatal("renew after the grace of a live term was refused")
	}
}

func TestMaxTTL(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `SELECT * FROM pgleader.acquire('k', 'a', '11 minutes')`)
	wantCode(t, "acquire above max_ttl", err, "22023", "exceeds max_ttl")
	r := acquire(t, db.Pool, "k", "a", "2 minutes")
	_, err = db.Pool.Exec(ctx, `SELECT pgleader.renew('k', 'a', $1, '1 hour')`, r.token)
	wantCode(t, "renew above max_ttl", err, "22023", "exceeds max_ttl")

	_, err = db.Pool.Exec(ctx, `SELECT pgleader.set_max_ttl('1 minute')`)
	wantCode(t, "set_max_ttl below a live term's TTL", err, "55000", `below the TTL 00:02:00 of the term holding key "k"`)
	for _, bad := range []string{"NULL", "'50 milliseconds'", "'25 hours'"} {
		_, err = db.Pool.Exec(ctx, `SELECT pgleader.set_max_ttl(`+bad+`)`)
		wantCode(t, "set_max_ttl("+bad+")", err, "22023", "max_ttl must be between")
	}
	for _, bad := range []string{"NULL", "'-1 second'", "'2 hours'"} {
		_, err = db.Pool.Exec(ctx, `SELECT pgleader.set_max_clock_offset(`+bad+`)`)
		wantCode(t, "set_max_clock_offset("+bad+")", err, "22023", "max_clock_offset must be between")
	}

	mustExec(t, db.Pool, `SELECT pgleader.release('k', 'a', $1)`, r.token)
	var old time.Duration
	if err := db.Pool.QueryRow(ctx, `SELECT pgleader.set_max_ttl('1 minute')`).Scan(&old); err != nil || old != 10*time.Minute {
		t.Fatalf("set_max_ttl = %v, %v; want the old 10m", old, err)
	}
	_, err = db.Pool.Exec(ctx, `SELECT * FROM pgleader.acquire('k', 'a', '2 minutes')`)
	wantCode(t, "acquire above the lowered max_ttl", err, "22023", "exceeds max_ttl 00:01:00")
	if err := db.Pool.QueryRow(ctx, `SELECT pgleader.set_max_clock_offset('2 seconds')`).Scan(&old); err != nil || old != time.Second {
		t.Fatalf("set_max_clock_offset = %v, %v; want the old 1s", old, err)
	}
}

// TestGraceForApplicationRole: a role given only grant_usage notices the
// grace too, and cannot change the settings.
func TestGraceForApplicationRole(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	role := createRole(t, db)
	mustExec(t, db.Pool, `SELECT pgleader.grant_usage($1)`, role)
	forgetEpoch(t, db)
	app, err := pgx.Connect(ctx, urlAs(t, db, role))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(ctx)
	if r := acquire(t, app, "k", "a", "1 minute"); r.acquired || r.holder != "pgleader.grace" {
		t.Fatalf("acquire by the application role in grace = %+v; want refused by the grace", r)
	}
	if e := epoch(t, db); e != 1 {
		t.Fatalf("epoch after a notice by the application role = %d; want 1", e)
	}
	_, err = app.Exec(ctx, `SELECT pgleader.set_max_ttl('1 hour')`)
	wantCode(t, "set_max_ttl by the application role", err, "42501", "permission denied")
	endGrace(t, db)
	if r := acquire(t, app, "k", "a", "1 minute"); !r.acquired || r.token != 1<<40+1 {
		t.Fatalf("acquire by the application role after the grace = %+v; want token %d", r, int64(1<<40+1))
	}
}

// TestGraceGrantsNoSetTerm: during the grace after a notice, a set's
// campaign (set_acquire) and acquire_many take no key, free or never seen
// (_take_free's check since schema 27); after it, both win.
func TestGraceGrantsNoSetTerm(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_ = acquire(t, db.Pool, "seen", "a", "1 second")
	forgetEpoch(t, db)
	mustExec(t, db.Pool, `SELECT pgleader.grace()`)
	won := func(sql string) []string {
		t.Helper()
		var keys []string
		if err := db.Pool.QueryRow(ctx, sql).Scan(&keys); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return keys
	}
	setSQL := `SELECT keys FROM pgleader.set_acquire('s', 'b', ARRAY['s1','s2'], '1 minute', 0)`
	manySQL := `SELECT coalesce(array_agg(key ORDER BY key), '{}') FROM pgleader.acquire_many(ARRAY['m1','m2'], 'b', '1 minute', 2)`
	if got := won(setSQL); len(got) != 0 {
		t.Errorf("set_acquire in the grace won %v; want none", got)
	}
	if got := won(manySQL); len(got) != 0 {
		t.Errorf("acquire_many in the grace won %v; want none", got)
	}
	endGrace(t, db)
	if got := won(setSQL); len(got) != 2 {
		t.Errorf("set_acquire after the grace won %v; want both keys", got)
	}
	if got := won(manySQL); len(got) != 2 {
		t.Errorf("acquire_many after the grace won %v; want both keys", got)
	}
}
