package migrations_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/pgtest"
)

// check is take with p_keep: the successor's check of a hand-off hint.
func check(t *testing.T, db *pgxpool.Pool, key, owner, keep string) (campaignResult, time.Time) {
	t.Helper()
	var r campaignResult
	var now time.Time
	err := db.QueryRow(context.Background(),
		`SELECT acquired, holder, token, expires_at, value, db_now FROM pgleader.take($1, $2, '10 seconds', $3::interval)`,
		key, owner, keep).Scan(&r.acquired, &r.holder, &r.token, &r.expires, &r.value, &now)
	if err != nil {
		t.Fatalf("take(%s, %s, keep %s): %v", key, owner, keep, err)
	}
	return r, now
}

// TestCheckBelievesOnARead: a term handed to c with at least keep left is
// reported acquired without a write (expiry and handed_off stay the
// hand-off's); with less left it is confirmed by a write, as take does. A
// hint naming another owner, or a term no longer handed off, is not
// acquired. c's first renewal confirms the term.
func TestCheckBelievesOnARead(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	campaign(t, db.Pool, "k", "a", "", 0, "8 seconds")
	campaign(t, db.Pool, "k", "c", "addr-c", 0, "8 seconds")
	if released, successor, _ := handOff(t, db.Pool, "k", "a", 1, nil); !released || str(successor) != "c" {
		t.Fatalf("hand_off = %v, %s; want c", released, str(successor))
	}
	handed := readLease(t, db.Pool, "k")

	if r, _ := check(t, db.Pool, "k", "b", "1 second"); r.acquired || str(r.holder) != "c" {
		t.Fatalf("check by b = %+v; want not acquired, held by c", r)
	}
	r, now := check(t, db.Pool, "k", "c", "5 seconds")
	if !r.acquired || r.token != 2 || str(r.value) != "addr-c" || r.expires == nil || !r.expires.Equal(*handed.expires) {
		t.Fatalf("check by c = %+v; want acquired, token 2, addr-c, the hand-off's expiry %v", r, handed.expires)
	}
	if left := r.expires.Sub(now); left < 5*time.Second || left > 8*time.Second {
		t.Fatalf("the check reports %v left; want between keep (5s) and the candidate TTL (8s)", left)
	}
	if l := readLease(t, db.Pool, "k"); !l.handedOff || !l.expires.Equal(*handed.expires) {
		t.Fatalf("after a check on a read: handed_off %v, expires %v; want unchanged (true, %v)", l.handedOff, l.expires, handed.expires)
	}

	// Less than keep left: confirmed by a write, the expiry TTL from now.
	r, now = check(t, db.Pool, "k", "c", "9 seconds")
	if !r.acquired || r.token != 2 || r.expires.Sub(now) != 10*time.Second {
		t.Fatalf("check by c with keep 9s = %+v (now %v); want acquired, expiring 10s from now", r, now)
	}
	if l := readLease(t, db.Pool, "k"); l.handedOff {
		t.Fatal("a check with less than keep left did not confirm the term")
	}
	if r, _ := check(t, db.Pool, "k", "c", "1 second"); r.acquired {
		t.Fatalf("a check of a confirmed term = %+v; want nothing to confirm", r)
	}

	// A term believed on a read is confirmed by its first renewal.
	campaign(t, db.Pool, "k", "d", "", 0, "8 seconds")
	if _, successor, _ := handOff(t, db.Pool, "k", "c", 2, nil); str(successor) != "d" {
		t.Fatalf("second hand_off went to %s; want d", str(successor))
	}
	if r, _ := check(t, db.Pool, "k", "d", "1 second"); !r.acquired || r.token != 3 {
		t.Fatalf("check by d = %+v; want acquired with token 3", r)
	}
	var expires time.Time
	var resign bool
	if err := db.Pool.QueryRow(ctx, `SELECT expires_at, resign FROM pgleader.renew_term('k', 'd', 3, '10 seconds', NULL)`).Scan(&expires, &resign); err != nil {
		t.Fatal(err)
	}
	if l := readLease(t, db.Pool, "k"); l.handedOff || !l.expires.Equal(expires) {
		t.Fatalf("after d's renewal: handed_off %v, expires %v; want false, %v", l.handedOff, l.expires, expires)
	}
	if r, _ := check(t, db.Pool, "k", "d", "1 second"); r.acquired {
		t.Fatalf("a check after the renewal = %+v; want nothing to confirm", r)
	}
	// The 4-argument renew_term confirms too.
	campaign(t, db.Pool, "k", "e", "", 0, "8 seconds")
	handOff(t, db.Pool, "k", "d", 3, nil)
	if _, err := db.Pool.Exec(ctx, `SELECT pgleader.renew_term('k', 'e', 4, '10 seconds')`); err != nil {
		t.Fatal(err)
	}
	if l := readLease(t, db.Pool, "k"); l.handedOff || str(l.holder) != "e" {
		t.Fatalf("after e's 4-argument renewal: holder %s handed_off %v; want e, false", str(l.holder), l.handedOff)
	}
}

// TestCheckRefusesBadKeep: keep must be 0 or more, and not NULL.
func TestCheckRefusesBadKeep(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	for _, keep := range []string{"'-1 second'", "NULL"} {
		_, err := db.Pool.Exec(context.Background(), `SELECT * FROM pgleader.take('k', 'c', '10 seconds', `+keep+`::interval)`)
		if err == nil || !strings.Contains(err.Error(), "22023") || !strings.Contains(err.Error(), "keep must be 0 or more") {
			t.Fatalf("take with keep %s: err %v; want 22023 naming keep", keep, err)
		}
	}
}
