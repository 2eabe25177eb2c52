package migrations_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgleader/pgleader/internal/pgtest"
)

// setBind binds conn's session to owner's membership of set s.
func setBind(t *testing.T, conn *pgx.Conn, owner, ttl string) (bool, string) {
	t.Helper()
	var bound bool
	var refusal *string
	if err := conn.QueryRow(context.Background(), `SELECT bound, refusal FROM pgleader.set_bind('s', $1, $2::interval, NULL)`, owner, ttl).
		Scan(&bound, &refusal); err != nil {
		t.Fatalf("set_bind(%s): %v", owner, err)
	}
	if refusal == nil {
		return bound, ""
	}
	return bound, *refusal
}

type wakeResult struct {
	lapsed int
	dead   []string
	watch  string
}

// setWake is owner's wake for set s with keys (nil: none sent).
func setWake(t *testing.T, conn *pgx.Conn, owner string, keys []string) wakeResult {
	t.Helper()
	var r wakeResult
	var watch *string
	if err := conn.QueryRow(context.Background(), `SELECT lapsed, dead, watch FROM pgleader.set_wake('s', $1, $2)`, owner, keys).
		Scan(&r.lapsed, &r.dead, &watch); err != nil {
		t.Fatalf("set_wake(%s): %v", owner, err)
	}
	if watch != nil {
		r.watch = *watch
	}
	return r
}

// liveKeys returns keys held live, by holder.
func liveKeys(t *testing.T, conn *pgx.Conn, keys []string) map[string][]string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT key, holder FROM pgleader.lease
		WHERE key = ANY ($1) AND holder IS NOT NULL AND expires_at > clock_timestamp() ORDER BY key`, keys)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for rows.Next() {
		var k, h string
		if err := rows.Scan(&k, &h); err != nil {
			t.Fatal(err)
		}
		out[h] = append(out[h], k)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSetWake: a bound member's keys are lapsed by a watcher's wake once
// its session ends, and only then; only the keys it acquired since its
// binding, among the keys sent; the ring's next member is named; nothing is
// lapsed in the grace or for a binding of an earlier server run.
func TestSetWake(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	sa, wb, sb := db.Conn(t), db.Conn(t), db.Conn(t)
	keys := []string{"k1", "k2", "k3", "k4"}

	// k1 is a's before its binding: never lapsed early.
	if won := setAcquire(t, db.Pool, "a", "k1"); len(won) != 1 {
		t.Fatalf("a won %v", won)
	}
	if ok, why := setBind(t, sa, "a", "1 minute"); !ok || why != "" {
		t.Fatalf("set_bind(a) = %v, %q; want bound", ok, why)
	}
	if ok, why := setBind(t, sb, "b", "1 minute"); !ok || why != "" {
		t.Fatalf("set_bind(b) = %v, %q; want bound", ok, why)
	}
	// A second session of a, while the first lives, is not bound.
	if ok, why := setBind(t, db.Conn(t), "a", "1 minute"); ok || why != "" {
		t.Fatalf("a second set_bind(a) = %v, %q; want not bound, no refusal", ok, why)
	}
	mustExec(t, db.Pool, `SELECT 1 FROM pgleader.set_renew('s', 'a', '{}', '{}', '1 minute', 1)`)
	mustExec(t, db.Pool, `SELECT 1 FROM pgleader.set_renew('s', 'b', '{}', '{}', '1 minute', 0)`)
	if won := setAcquire(t, db.Pool, "a", "k2", "k3"); len(won) != 2 {
		t.Fatalf("a won %v", won)
	}

	// Both live: nothing dead, nothing lapsed; b watches a, a watches b.
	if r := setWake(t, wb, "b", keys); r.lapsed != 0 || len(r.dead) != 0 || r.watch != "a" {
		t.Fatalf("wake with a live = %+v; want nothing lapsed, watch a", r)
	}
	if r := setWake(t, db.Conn(t), "a", nil); r.watch != "b" {
		t.Fatalf("a's wake = %+v; want watch b", r)
	}
	// A wait on a live member's lock times out.
	var got bool
	if err := wb.QueryRow(ctx, `SELECT pgleader.wait_member('s', 'a', '50 milliseconds')`).Scan(&got); err != nil || got {
		t.Fatalf("wait_member(a) while a lives = %v, %v; want false", got, err)
	}

	// a's session ends: b's wait is granted, and its wake lapses k2 and
	// k3 (sent), not k1 (before the binding).
	wbPID := backendPID(t, wb)
	done := make(chan error, 1)
	go func() {
		var g bool
		err := wb.QueryRow(ctx, `SELECT pgleader.wait_member('s', 'a', '15 seconds')`).Scan(&g)
		if err == nil && !g {
			err = context.DeadlineExceeded
		}
		done <- err
	}()
	waitLockWait(t, db.Pool, wbPID)
	mustExec(t, db.Pool, `SELECT pg_terminate_backend($1)`, backendPID(t, sa))
	if err := <-done; err != nil {
		t.Fatalf("wait_member(a) after a's session ended: %v", err)
	}
	// Without keys, the wake names the dead and lapses nothing, and keeps
	// the lock it was granted: a's new session cannot bind before the
	// wake with keys.
	if r := setWake(t, wb, "b", nil); r.lapsed != 0 || !slices.Equal(r.dead, []string{"a"}) {
		t.Fatalf("wake without keys = %+v; want a dead, nothing lapsed", r)
	}
	if ok, _ := setBind(t, db.Conn(t), "a", "1 minute"); ok {
		t.Fatal("a's new session bound between the wake without keys and the wake with them")
	}
	if r := setWake(t, wb, "b", []string{"k1", "k2"}); r.lapsed != 1 || !slices.Equal(r.dead, []string{"a"}) || r.watch != "" {
		t.Fatalf("wake = %+v; want k2 lapsed, a dead, nobody to watch", r)
	}
	if live := liveKeys(t, wb, keys); !slices.Equal(live["a"], []string{"k1", "k3"}) {
		t.Fatalf("after the wake a holds %v; want k1 (before its binding) and k3 (not sent)", live)
	}
	// a is unbound and no longer a member; b's wait lock is let go.
	var members int
	if err := wb.QueryRow(ctx, `SELECT count(*) FROM pgleader.set_member WHERE set_name = 's' AND expires_at > clock_timestamp()`).Scan(&members); err != nil || members != 1 {
		t.Fatalf("live members after the wake = %d, %v; want 1 (b)", members, err)
	}
	if r := setWake(t, wb, "b", keys); r.lapsed != 0 || len(r.dead) != 0 {
		t.Fatalf("a second wake = %+v; want nothing (a unbound)", r)
	}
	sa2 := db.Conn(t)
	if ok, _ := setBind(t, sa2, "a", "1 minute"); !ok {
		t.Fatal("a's new session could not bind after the wake: the watcher kept its lock")
	}

	// a's new binding, then a binding of an earlier server run and one in
	// the grace: neither lapses a's keys.
	if won := setAcquire(t, db.Pool, "a", "k4"); len(won) != 1 {
		t.Fatalf("a won %v", won)
	}
	mustExec(t, db.Pool, `SELECT pg_terminate_backend($1)`, backendPID(t, sa2))
	waitGone(t, db, "a")
	mustExec(t, db.Pool, `UPDATE pgleader.set_member SET server_start = server_start - interval '1 hour' WHERE owner = 'a'`)
	if r := setWake(t, wb, "b", keys); r.lapsed != 0 || len(r.dead) != 0 {
		t.Fatalf("wake for a binding of an earlier server run = %+v; want nothing", r)
	}
	mustExec(t, db.Pool, `UPDATE pgleader.set_member SET server_start = pg_postmaster_start_time() WHERE owner = 'a'`)
	mustExec(t, db.Pool, `UPDATE pgleader.server_epoch SET grace_until = clock_timestamp() + interval '1 minute'`)
	if r := setWake(t, wb, "b", keys); r.lapsed != 0 || !slices.Equal(r.dead, []string{"a"}) {
		t.Fatalf("wake in the grace = %+v; want a dead, nothing lapsed", r)
	}
	endGrace(t, db)
	if r := setWake(t, wb, "b", keys); r.lapsed != 1 {
		t.Fatalf("wake after the grace = %+v; want k4 lapsed", r)
	}
	if live := liveKeys(t, wb, keys); !slices.Equal(live["a"], []string{"k1", "k3"}) {
		t.Fatalf("a holds %v; want k1 and k3", live)
	}
}

// TestSetWakeRing: each member watches the next live bound member in owner
// order, round the ring, and a member bound by nobody is not watched.
func TestSetWakeRing(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	sessions := map[string]*pgx.Conn{}
	for _, o := range []string{"m0", "m1", "m2"} {
		sessions[o] = db.Conn(t)
		if ok, why := setBind(t, sessions[o], o, "1 minute"); !ok {
			t.Fatalf("set_bind(%s) = %v, %q", o, ok, why)
		}
	}
	join(t, db.Pool, "unbound", 0)
	w := db.Conn(t)
	for o, want := range map[string]string{"m0": "m1", "m1": "m2", "m2": "m0", "unbound": "m0"} {
		if r := setWake(t, w, o, nil); r.watch != want {
			t.Errorf("%s watches %q; want %q", o, r.watch, want)
		}
	}
	mustExec(t, db.Pool, `SELECT pg_terminate_backend($1)`, backendPID(t, sessions["m1"]))
	waitGone(t, db, "m1")
	if r := setWake(t, w, "m0", nil); r.watch != "m2" || !slices.Equal(r.dead, []string{"m1"}) {
		t.Errorf("m0 after m1's end = %+v; want m1 dead, watch m2", r)
	}
}

// waitGone waits until owner's member lock is free of its bound session.
func waitGone(t *testing.T, db *pgtest.DB, owner string) {
	t.Helper()
	for i := 0; ; i++ {
		var n int
		if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity a, pgleader.set_member s
			WHERE s.owner = $1 AND a.pid = s.pid`, owner).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if i > 3000 {
			t.Fatalf("%s's session still lives", owner)
		}
		pgSleep(t, db)
	}
}

func pgSleep(t *testing.T, db *pgtest.DB) {
	t.Helper()
	mustExec(t, db.Pool, `SELECT pg_sleep(0.005)`)
}

// TestSetBindRefusal: set_bind refuses a session the server would end for
// idleness sooner than the TTL, and checks its arguments.
func TestSetBindRefusal(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	c := db.Conn(t)
	// idle_session_timeout exists from PostgreSQL 14; on 13
	// tcp_user_timeout shows the same refusal over the tests' TCP
	// connections.
	var version int
	var tcp bool
	if err := c.QueryRow(context.Background(), `SELECT current_setting('server_version_num')::int, inet_client_addr() IS NOT NULL`).Scan(&version, &tcp); err != nil {
		t.Fatal(err)
	}
	setting := `SET idle_session_timeout = '2s'`
	if version < 140000 {
		if !tcp {
			t.Fatalf("PostgreSQL %d has no idle_session_timeout and the test's connection is not TCP: no setting left to refuse", version)
		}
		setting = `SET tcp_user_timeout = 2000`
	}
	mustExec(t, c, setting)
	if ok, why := setBind(t, c, "a", "10 seconds"); ok || why == "" {
		t.Fatalf("set_bind after %s, TTL 10s = %v, %q; want a refusal", setting, ok, why)
	}
	if ok, why := setBind(t, c, "a", "1 second"); !ok || why != "" {
		t.Fatalf("set_bind after %s, TTL 1s = %v, %q; want bound", setting, ok, why)
	}
	_, err := c.Exec(context.Background(), `SELECT * FROM pgleader.set_bind('s', 'a', '1 hour')`)
	wantCode(t, "set_bind for longer than max_ttl", err, "22023", "max_ttl")
	_, err = c.Exec(context.Background(), `SELECT * FROM pgleader.set_bind('', 'a', '1 minute')`)
	wantCode(t, "set_bind with an empty set name", err, "22023", "")
	_, err = c.Exec(context.Background(), `SELECT pgleader.wait_member('s', 'a', '0 seconds')`)
	wantCode(t, "wait_member with no timeout", err, "22023", "timeout must be positive")
}

// TestSetWakeOtherRole: a wake lapses only keys of the caller's role, even
// for a member of another role with the same set and owner names whose
// session ended.
func TestSetWakeOtherRole(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	h, hURL := db.NewRole(t, "SELECT pgleader.grant_usage($1)")
	hs, err := pgx.Connect(context.Background(), hURL)
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close(context.Background())
	hw, err := pgx.Connect(context.Background(), hURL)
	if err != nil {
		t.Fatal(err)
	}
	defer hw.Close(context.Background())
	if ok, why := setBind(t, hs, "a", "1 minute"); !ok {
		t.Fatalf("%s's set_bind(a) = %v, %q", h, ok, why)
	}
	// The schema's owner's member a wins k after h's a was bound.
	if won := setAcquire(t, db.Pool, "a", "k"); len(won) != 1 {
		t.Fatalf("a won %v", won)
	}
	mustExec(t, db.Pool, `SELECT pg_terminate_backend($1)`, backendPID(t, hs))
	waitGone(t, db, "a")
	if r := setWake(t, hw, "b", []string{"k"}); r.lapsed != 0 || !slices.Equal(r.dead, []string{"a"}) {
		t.Fatalf("%s's wake = %+v; want its own a dead and the owner's key not lapsed", h, r)
	}
	if live := liveKeys(t, db.Conn(t), []string{"k"}); !slices.Equal(live["a"], []string{"k"}) {
		t.Fatalf("k after another role's wake: %v; want a's still", live)
	}
}

// TestSetBindLapsesOwnKeys: a member's new session, bound after its earlier
// one ended on this server run, lapses the keys among those sent that the
// member acquired since the earlier binding (no watcher may have been
// waiting when it ended); not those acquired before it, nor in the grace,
// nor for a binding of an earlier server run.
func TestSetBindLapsesOwnKeys(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	keys := []string{"k0", "k1", "k2"}
	bindKeys := func(c *pgx.Conn) (bool, int) {
		t.Helper()
		var ok bool
		var n int
		if err := c.QueryRow(ctx, `SELECT bound, lapsed FROM pgleader.set_bind('s', 'a', '1 minute', $1)`, keys).Scan(&ok, &n); err != nil {
			t.Fatal(err)
		}
		return ok, n
	}
	if won := setAcquire(t, db.Pool, "a", "k0"); len(won) != 1 {
		t.Fatalf("a won %v", won)
	}
	s1 := db.Conn(t)
	if ok, n := bindKeys(s1); !ok || n != 0 {
		t.Fatalf("the first bind = %v, %d lapsed; want bound, none", ok, n)
	}
	if won := setAcquire(t, db.Pool, "a", "k1", "k2"); len(won) != 2 {
		t.Fatalf("a won %v", won)
	}
	// A second session while the first lives binds nothing, lapses nothing.
	if ok, n := bindKeys(db.Conn(t)); ok || n != 0 {
		t.Fatalf("a bind while the first session lives = %v, %d lapsed; want not bound, none", ok, n)
	}
	mustExec(t, db.Pool, `SELECT pg_terminate_backend($1)`, backendPID(t, s1))
	waitGone(t, db, "a")

	// In the grace, and for a binding of an earlier server run: nothing.
	mustExec(t, db.Pool, `UPDATE pgleader.server_epoch SET grace_until = clock_timestamp() + interval '1 minute'`)
	s2 := db.Conn(t)
	if ok, n := bindKeys(s2); !ok || n != 0 {
		t.Fatalf("a bind in the grace = %v, %d lapsed; want bound, none", ok, n)
	}
	endGrace(t, db)
	mustExec(t, db.Pool, `SELECT pg_terminate_backend($1)`, backendPID(t, s2))
	waitGone(t, db, "a")
	mustExec(t, db.Pool, `UPDATE pgleader.set_member SET server_start = server_start - interval '1 hour', bound_at = '-infinity' WHERE owner = 'a'`)
	s3 := db.Conn(t)
	if ok, n := bindKeys(s3); !ok || n != 0 {
		t.Fatalf("a bind after a binding of an earlier server run = %v, %d lapsed; want bound, none", ok, n)
	}
	if live := liveKeys(t, s3, keys); len(live["a"]) != 3 {
		t.Fatalf("a holds %v; want all three still", live)
	}

	// s3 ends on this run: the next bind lapses k1 and k2 only if they
	// were acquired since s3's binding. They were not (before it): none.
	mustExec(t, db.Pool, `SELECT pg_terminate_backend($1)`, backendPID(t, s3))
	waitGone(t, db, "a")
	s4 := db.Conn(t)
	if ok, n := bindKeys(s4); !ok || n != 0 {
		t.Fatalf("a bind with only keys from before the ended binding = %v, %d lapsed; want bound, none", ok, n)
	}
	// Keys won under s4, which then ends: the next bind lapses them.
	mustExec(t, db.Pool, `UPDATE pgleader.lease SET expires_at = clock_timestamp() WHERE key IN ('k1', 'k2')`)
	if won := setAcquire(t, db.Pool, "a", "k1", "k2"); len(won) != 2 {
		t.Fatalf("a won %v", won)
	}
	mustExec(t, db.Pool, `SELECT pg_terminate_backend($1)`, backendPID(t, s4))
	waitGone(t, db, "a")
	if ok, n := bindKeys(db.Conn(t)); !ok || n != 2 {
		t.Fatalf("a bind after the session that won k1 and k2 ended = %v, %d lapsed; want bound, 2", ok, n)
	}
	if live := liveKeys(t, db.Conn(t), keys); !slices.Equal(live["a"], []string{"k0"}) {
		t.Fatalf("a holds %v; want k0 only", live)
	}
}

// lapsedTerms is what a set_bind or set_wake says it lapsed.
type lapsedTerms struct {
	keys, holders []string
	tokens        []int64
	acquired      []time.Time
	at            *time.Time
}

// leaseTerms reads each key's holder, token, acquisition and expiry.
func leaseTerms(t *testing.T, db *pgtest.DB, keys []string) lapsedTerms {
	t.Helper()
	var l lapsedTerms
	var expires []time.Time
	if err := db.Pool.QueryRow(context.Background(), `SELECT array_agg(key ORDER BY key), array_agg(holder ORDER BY key),
		array_agg(token ORDER BY key), array_agg(acquired_at ORDER BY key), array_agg(expires_at ORDER BY key)
		FROM pgleader.lease WHERE key = ANY ($1)`, keys).Scan(&l.keys, &l.holders, &l.tokens, &l.acquired, &expires); err != nil {
		t.Fatal(err)
	}
	if len(expires) == 0 {
		t.Fatalf("no lease rows for %v", keys)
	}
	for _, e := range expires[1:] {
		if !e.Equal(expires[0]) {
			t.Fatalf("expiries %v; want one instant", expires)
		}
	}
	l.at = &expires[0]
	return l
}

func (l lapsedTerms) String() string {
	at := "NULL"
	if l.at != nil {
		at = l.at.Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("keys %v, holders %v, tokens %v, acquired %v, at %s", l.keys, l.holders, l.tokens, l.acquired, at)
}

func (l lapsedTerms) equal(m lapsedTerms) bool {
	return slices.Equal(l.keys, m.keys) && slices.Equal(l.holders, m.holders) && slices.Equal(l.tokens, m.tokens) &&
		slices.EqualFunc(l.acquired, m.acquired, time.Time.Equal) && (l.at == nil) == (m.at == nil) && (l.at == nil || l.at.Equal(*m.at))
}

// TestSetLapseNamesTerms: set_wake and set_bind name each term they lapse
// (key, holder, token, acquisition) and the expiry they gave it, which the
// lease row then shows; nothing and NULL when they lapse nothing.
func TestSetLapseNamesTerms(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	keys := []string{"k0", "k1", "k2", "k3"}
	wake := func(c *pgx.Conn, owner string) lapsedTerms {
		t.Helper()
		l := lapsedTerms{}
		if err := c.QueryRow(ctx, `SELECT lapsed_keys, lapsed_holders, lapsed_tokens, lapsed_acquired, lapsed_at
			FROM pgleader.set_wake('s', $1, $2)`, owner, keys).Scan(&l.keys, &l.holders, &l.tokens, &l.acquired, &l.at); err != nil {
			t.Fatal(err)
		}
		return l
	}
	bind := func(c *pgx.Conn, owner string) lapsedTerms {
		t.Helper()
		var ok bool
		l := lapsedTerms{}
		if err := c.QueryRow(ctx, `SELECT bound, lapsed_keys, lapsed_tokens, lapsed_acquired, lapsed_at
			FROM pgleader.set_bind('s', $1, '1 minute', $2)`, owner, keys).Scan(&ok, &l.keys, &l.tokens, &l.acquired, &l.at); err != nil {
			t.Fatal(err)
		}
		if !ok {
			t.Fatalf("%s's bind: not bound", owner)
		}
		l.holders = make([]string, len(l.keys))
		for i := range l.holders {
			l.holders[i] = owner
		}
		return l
	}
	empty := lapsedTerms{keys: []string{}, holders: []string{}, tokens: []int64{}, acquired: []time.Time{}}
	sa, sb := db.Conn(t), db.Conn(t)
	if l := bind(sa, "a"); !l.equal(empty) {
		t.Fatalf("a's first bind lapsed %v; want nothing", l)
	}
	if l := bind(sb, "b"); !l.equal(empty) {
		t.Fatalf("b's first bind lapsed %v; want nothing", l)
	}
	if won := setAcquire(t, db.Pool, "a", "k0", "k2"); len(won) != 2 {
		t.Fatalf("a won %v", won)
	}
	if won := setAcquire(t, db.Pool, "b", "k1"); len(won) != 1 {
		t.Fatalf("b won %v", won)
	}
	w := db.Conn(t)
	if l := wake(w, "b"); !l.equal(empty) {
		t.Fatalf("a wake with every member live lapsed %v; want nothing", l)
	}
	held := leaseTerms(t, db, []string{"k0", "k2"})
	mustExec(t, db.Pool, `SELECT pg_terminate_backend($1)`, backendPID(t, sa))
	waitGone(t, db, "a")
	l := wake(w, "b")
	after := leaseTerms(t, db, []string{"k0", "k2"})
	if !after.at.Before(*held.at) {
		t.Fatalf("a's keys expire %v after b's wake, %v before it; want earlier", after.at, held.at)
	}
	held.at = after.at
	if !l.equal(held) || !after.equal(held) {
		t.Fatalf("b's wake after a's session ended lapsed %v; the rows show %v, held %v", l, after, held)
	}

	// b's session ends; its new session's bind lapses k1, which it won
	// under the ended one.
	before := leaseTerms(t, db, []string{"k1"})
	mustExec(t, db.Pool, `SELECT pg_terminate_backend($1)`, backendPID(t, sb))
	waitGone(t, db, "b")
	l = bind(db.Conn(t), "b")
	after = leaseTerms(t, db, []string{"k1"})
	if !after.at.Before(*before.at) {
		t.Fatalf("k1 expires %v after b's new bind, %v before it; want earlier", after.at, before.at)
	}
	before.at = after.at
	if !l.equal(before) || !after.equal(before) {
		t.Fatalf("b's bind after its session ended lapsed %v; the row shows %v, held %v", l, after, before)
	}
}
