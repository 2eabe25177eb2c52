package migrations_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/pgtest"
)

// join records owner as a member of set s holding held keys.
func join(t *testing.T, db *pgxpool.Pool, owner string, held int) {
	t.Helper()
	mustExec(t, db, `SELECT 1 FROM pgleader.set_renew('s', $1, '{}', '{}', '1 minute', $2)`, owner, held)
}

// setAcquire is owner's campaign for keys, returning the keys won with
// their tokens.
func setAcquire(t *testing.T, db *pgxpool.Pool, owner string, keys ...string) map[string]int64 {
	t.Helper()
	var won []string
	var tokens []int64
	if err := db.QueryRow(context.Background(),
		`SELECT keys, tokens FROM pgleader.set_acquire('s', $1, $2, '1 minute', 0, $3)`, owner, keys, len(keys)).
		Scan(&won, &tokens); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for i, k := range won {
		out[k] = tokens[i]
	}
	return out
}

// setRelease ends owner's terms of keys at tokens, handing off those in
// handOff, and returns each key ended with its successor ("" if freed).
func setRelease(t *testing.T, db *pgxpool.Pool, owner string, keys []string, tokens []int64, handOff []bool) map[string]string {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT key, coalesce(successor, '') FROM pgleader.set_release('s', $1, $2, $3, false, $4)`,
		owner, keys, tokens, handOff)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for rows.Next() {
		var k, s string
		if err := rows.Scan(&k, &s); err != nil {
			t.Fatal(err)
		}
		out[k] = s
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func all(n int, v bool) []bool {
	out := make([]bool, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// TestSetHandOff: set_release hands keys to the other live members, dealt
// one by one to the member holding fewest, each with the next token,
// handed-off and expiring with its member's row; only that member's
// set_acquire confirms it, never during the grace; a stale term hands off
// nothing, and during the grace set_release frees.
func TestSetHandOff(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	keys := []string{"k1", "k2", "k3", "k4", "k5"}
	join(t, db.Pool, "a", 0)
	won := setAcquire(t, db.Pool, "a", keys...)
	if len(won) != 5 {
		t.Fatalf("a won %v; want all 5 keys", won)
	}
	join(t, db.Pool, "a", 5)
	join(t, db.Pool, "b", 3)
	join(t, db.Pool, "c", 0)
	tokens := []int64{won["k1"], won["k2"], won["k3"], won["k4"], won["k5"]}

	// A stale token hands off nothing.
	if got := setRelease(t, db.Pool, "a", keys[:1], []int64{tokens[0] + 7}, all(1, true)); len(got) != 0 {
		t.Fatalf("set_release with a stale token ended %v; want nothing", got)
	}

	// c holds 0 and b 3: c gets three keys (up to b's level), then the
	// tie goes to b by owner; k5 is released.
	got := setRelease(t, db.Pool, "a", keys, tokens, []bool{true, true, true, true, false})
	dealt := map[string]int{}
	for _, m := range got {
		dealt[m]++
	}
	if len(got) != 5 || got["k5"] != "" || dealt["c"] != 3 || dealt["b"] != 1 {
		t.Fatalf("set_release dealt %v; want 3 keys to c, 1 to b, k5 freed", got)
	}
	want := got
	var memberExp time.Time
	if err := db.Pool.QueryRow(ctx, `SELECT expires_at FROM pgleader.set_member WHERE set_name = 's' AND owner = 'c'`).Scan(&memberExp); err != nil {
		t.Fatal(err)
	}
	for i, k := range keys[:4] {
		l := readLease(t, db.Pool, k)
		if l.holder == nil || *l.holder != want[k] || l.token != tokens[i]+1 || !l.handedOff {
			t.Errorf("%s after the hand-off: %s at %d, handed off %v; want %s at %d, handed off", k, str(l.holder), l.token, l.handedOff, want[k], tokens[i]+1)
		}
		if want[k] == "c" && (l.expires == nil || l.expires.After(memberExp)) {
			t.Errorf("%s expires %v; want no later than c's member row, %v", k, l.expires, memberExp)
		}
	}
	if l := readLease(t, db.Pool, "k5"); l.holder != nil || l.token != tokens[4] {
		t.Errorf("k5 after its release: %s at %d; want free at %d", str(l.holder), l.token, tokens[4])
	}

	// b's campaign confirms only its own handed-off key (and may take the
	// free k5); c's keys stay c's.
	var bKey string
	var bTok int64
	var cKeys []string
	for i, k := range keys[:4] {
		if want[k] == "b" {
			bKey, bTok = k, tokens[i]+1
		} else {
			cKeys = append(cKeys, k)
		}
	}
	got2 := setAcquire(t, db.Pool, "b", keys...)
	if got2[bKey] != bTok || got2[cKeys[0]] != 0 || got2[cKeys[1]] != 0 || got2[cKeys[2]] != 0 {
		t.Fatalf("b's campaign won %v; want %s at %d confirmed and none of c's", got2, bKey, bTok)
	}
	if l := readLease(t, db.Pool, bKey); l.handedOff || l.expires == nil || time.Until(*l.expires) < 30*time.Second {
		t.Errorf("%s after b confirmed it: handed off %v, expires %v; want confirmed with a minute", bKey, l.handedOff, l.expires)
	}

	// In the grace (a new server) c's campaign confirms nothing.
	forgetEpoch(t, db)
	if got := setAcquire(t, db.Pool, "c", keys...); len(got) != 0 {
		t.Fatalf("c's campaign in the grace won %v; want nothing", got)
	}
	if l := readLease(t, db.Pool, cKeys[0]); !l.handedOff {
		t.Errorf("%s confirmed in the grace", cKeys[0])
	}
	// And in the grace set_release frees rather than hands off.
	bl := readLease(t, db.Pool, bKey)
	if got := setRelease(t, db.Pool, "b", []string{bKey}, []int64{bl.token}, all(1, true)); !maps.Equal(got, map[string]string{bKey: ""}) {
		t.Fatalf("set_release in the grace = %v; want %s freed", got, bKey)
	}
	endGrace(t, db)
	got3 := setAcquire(t, db.Pool, "c", cKeys...)
	if ks := slices.Sorted(maps.Keys(got3)); !slices.Equal(ks, cKeys) {
		t.Fatalf("c's campaign after the grace won %v; want %v confirmed", got3, cKeys)
	}

	// A hand-off nobody confirms is free at its expiry.
	mustExec(t, db.Pool, `UPDATE pgleader.lease SET holder = 'c', handed_off = true, expires_at = clock_timestamp() - interval '1 second' WHERE key = $1`, bKey)
	if got := setAcquire(t, db.Pool, "b", bKey); got[bKey] <= bl.token {
		t.Fatalf("b's campaign for an expired hand-off won %v; want %s above %d", got, bKey, bl.token)
	}
}

// TestSetConfirmsOnlyItsKeys: a term handed to an owner name by an
// Elector's hand_off is not confirmed by a set campaigning under the same
// name unless the set names the key: an Elector and a Set of one replica
// often share an Owner.
func TestSetConfirmsOnlyItsKeys(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	campaign(t, db.Pool, "el", "a", "", 0, "10 seconds")
	campaign(t, db.Pool, "el", "b", "", 0, "10 seconds")
	if _, successor, _ := handOff(t, db.Pool, "el", "a", 1, nil); successor == nil || *successor != "b" {
		t.Fatalf("hand_off to b = %s", str(successor))
	}
	join(t, db.Pool, "b", 0)
	if got := setAcquire(t, db.Pool, "b", "s1", "s2"); got["el"] != 0 {
		t.Fatalf("b's set campaign confirmed the elector's key: %v", got)
	}
	if l := readLease(t, db.Pool, "el"); !l.handedOff || l.holder == nil || *l.holder != "b" {
		t.Fatalf("the elector's key after b's set campaigned: %s, handed off %v; want still handed to b", str(l.holder), l.handedOff)
	}
}

// TestSetTickLapsesTogether: the keys one tick renews expire at one
// instant, no earlier than the member row the tick writes, so the
// survivors of a member that died find all its keys free when its row
// lapses (schema 17; before, each row took the clock as it was written).
// A release that hands off only part of its keys still frees the rest, and
// the member the others are handed to records them as held at its tick.
func TestSetTickLapsesTogether(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	var keys []string
	for i := range 2000 {
		keys = append(keys, "k"+strconv.Itoa(i))
	}
	won := setAcquire(t, db.Pool, "a", keys...)
	tokens := make([]int64, len(keys))
	for i, k := range keys {
		tokens[i] = won[k]
	}
	mustExec(t, db.Pool, `SELECT 1 FROM pgleader.set_tick('s', 'a', $1, $2, '1 minute', $3)`, keys, tokens, len(keys))
	var instants int
	var before bool
	if err := db.Pool.QueryRow(ctx, `SELECT count(DISTINCT l.expires_at), bool_and(l.expires_at >= m.expires_at)
	                                   FROM pgleader.lease AS l, pgleader.set_member AS m
	                                  WHERE l.key = ANY ($1) AND m.set_name = 's' AND m.owner = 'a'`, keys).Scan(&instants, &before); err != nil {
		t.Fatal(err)
	}
	if instants != 1 || !before {
		t.Fatalf("after one tick the %d keys expire at %d instants (not before the member row: %v); want 1 (true)", len(keys), instants, before)
	}

	join(t, db.Pool, "b", 0)
	hand := make([]bool, len(keys))
	for i := range 10 {
		hand[i] = true
	}
	ended := setRelease(t, db.Pool, "a", keys, tokens, hand)
	handed := 0
	for _, s := range ended {
		if s != "" {
			handed++
		}
	}
	if len(ended) != len(keys) || handed != 10 {
		t.Fatalf("release ended %d keys, %d handed off; want %d, 10", len(ended), handed, len(keys))
	}
	// b's next tick counts the 10 terms handed to it in the held its row
	// records, before it confirms them: the other members see them taken.
	var rec, h int
	if err := db.Pool.QueryRow(ctx, `SELECT handed FROM pgleader.set_tick('s', 'b', '{}', '{}', '1 minute', 0)`).Scan(&h); err != nil {
		t.Fatal(err)
	}
	if err := db.Pool.QueryRow(ctx, `SELECT held FROM pgleader.set_member WHERE set_name = 's' AND owner = 'b'`).Scan(&rec); err != nil {
		t.Fatal(err)
	}
	if rec != 10 || h != 10 {
		t.Fatalf("b's row records held %d with %d handed to it; want 10, 10", rec, h)
	}
}

// TestSetAcquireInParts: one set_acquire takes at most 10,000 keys, the
// next the rest; acquire_many inserts rows only for as many new keys as it
// may take (or 1,000), and takes the same keys as if it had inserted them
// all (the first free ones in key order).
func TestSetAcquireInParts(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	var keys []string
	for i := range 12000 {
		keys = append(keys, fmt.Sprintf("k%05d", i))
	}
	if n := len(setAcquire(t, db.Pool, "a", keys...)); n != 10000 {
		t.Fatalf("first set_acquire of 12000 keys won %d; want 10000", n)
	}
	if n := len(setAcquire(t, db.Pool, "a", keys...)); n != 2000 {
		t.Fatalf("second set_acquire won %d; want the other 2000", n)
	}

	// Free rows for x0001 and x0003; the other 1,498 x keys are new.
	mustExec(t, db.Pool, `SELECT pgleader.advance('x0001', 0), pgleader.advance('x0003', 0)`)
	var won []string
	if err := db.Pool.QueryRow(ctx, `SELECT array_agg(key ORDER BY key) FROM pgleader.acquire_many(
	            (SELECT array_agg('x' || lpad(i::text, 4, '0') ORDER BY i DESC) FROM generate_series(0, 1499) AS i), 'b', '1 minute', 3)`).Scan(&won); err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pgleader.lease WHERE key LIKE 'x%'`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(won, []string{"x0000", "x0001", "x0002"}) || rows != 1002 {
		t.Fatalf("acquire_many won %v with %d rows for x keys; want [x0000 x0001 x0002] and 1002 rows (2 free and 1,000 new)", won, rows)
	}
}

// TestGraceKeepsKnownSetTerms: renew_many, a set's tick, follows renew's
// rule in the grace with its one clock reading (schema 17): a term a
// minute from its expiry is renewed, one 500 ms from it (max_clock_offset
// 1 s) is not, and after the grace it is.
func TestGraceKeepsKnownSetTerms(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	held := acquire(t, db.Pool, "held", "a", "1 minute")
	near := acquire(t, db.Pool, "near", "a", "1 minute")
	mustExec(t, db.Pool, `UPDATE pgleader.lease SET expires_at = clock_timestamp() + interval '500 milliseconds' WHERE key = 'near'`)
	forgetEpoch(t, db)
	renewed := func() []string {
		t.Helper()
		var keys []string
		if err := db.Pool.QueryRow(ctx, `SELECT coalesce(array_agg(key ORDER BY key), '{}') FROM pgleader.renew_many('a', $1, $2, '1 minute')`,
			[]string{"held", "near"}, []int64{held.token, near.token}).Scan(&keys); err != nil {
			t.Fatal(err)
		}
		return keys
	}
	if got := renewed(); !slices.Equal(got, []string{"held"}) {
		t.Fatalf("renew_many in the grace renewed %v; want [held] (near is within max_clock_offset of its expiry)", got)
	}
	endGrace(t, db)
	mustExec(t, db.Pool, `UPDATE pgleader.lease SET expires_at = clock_timestamp() + interval '30 seconds' WHERE key = 'near'`)
	if got := renewed(); !slices.Equal(got, []string{"held", "near"}) {
		t.Fatalf("renew_many after the grace renewed %v; want both", got)
	}
}
