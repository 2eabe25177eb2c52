package migrations_test

import (
	"context"
	"maps"
	"slices"
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

	// c holds 0 and b 3: c gets three keys (up to b's level), then one
	// each, the tie to b by owner; k5 is released.
	got := setRelease(t, db.Pool, "a", keys, tokens, []bool{true, true, true, true, false})
	want := map[string]string{"k1": "c", "k2": "c", "k3": "c", "k4": "b", "k5": ""}
	if !maps.Equal(got, want) {
		t.Fatalf("set_release dealt %v; want %v", got, want)
	}
	var memberExp time.Time
	if err := db.Pool.QueryRow(ctx, `SELECT expires_at FROM pgleader.set_member WHERE set_name = 's' AND owner = 'c'`).Scan(&memberExp); err != nil {
		t.Fatal(err)
	}
	for i, k := range keys[:4] {
		l := readLease(t, db.Pool, k)
		if l.holder == nil || *l.holder != want[k] || l.token != tokens[i]+1 || !l.handedOff {
			t.Errorf("%s after the hand-off: %s at %d, handed off %v; want %s at %d, handed off", k, str(l.holder), l.token, l.handedOff, want[k], tokens[i]+1)
		}
		if k != "k4" && (l.expires == nil || l.expires.After(memberExp)) {
			t.Errorf("%s expires %v; want no later than c's member row, %v", k, l.expires, memberExp)
		}
	}
	if l := readLease(t, db.Pool, "k5"); l.holder != nil || l.token != tokens[4] {
		t.Errorf("k5 after its release: %s at %d; want free at %d", str(l.holder), l.token, tokens[4])
	}

	// b's campaign confirms only its own handed-off key (and may take the
	// free k5); c's keys stay c's.
	got2 := setAcquire(t, db.Pool, "b", keys...)
	if got2["k4"] != tokens[3]+1 || got2["k1"] != 0 || got2["k2"] != 0 || got2["k3"] != 0 {
		t.Fatalf("b's campaign won %v; want k4 at %d confirmed and none of c's", got2, tokens[3]+1)
	}
	if l := readLease(t, db.Pool, "k4"); l.handedOff || l.expires == nil || time.Until(*l.expires) < 30*time.Second {
		t.Errorf("k4 after b confirmed it: handed off %v, expires %v; want confirmed with a minute", l.handedOff, l.expires)
	}

	// In the grace (a new server) c's campaign confirms nothing.
	forgetEpoch(t, db)
	if got := setAcquire(t, db.Pool, "c", keys...); len(got) != 0 {
		t.Fatalf("c's campaign in the grace won %v; want nothing", got)
	}
	if l := readLease(t, db.Pool, "k1"); !l.handedOff {
		t.Errorf("k1 confirmed in the grace")
	}
	// And in the grace set_release frees rather than hands off.
	k4 := readLease(t, db.Pool, "k4")
	if got := setRelease(t, db.Pool, "b", []string{"k4"}, []int64{k4.token}, all(1, true)); !maps.Equal(got, map[string]string{"k4": ""}) {
		t.Fatalf("set_release in the grace = %v; want k4 freed", got)
	}
	endGrace(t, db)
	got3 := setAcquire(t, db.Pool, "c", "k1", "k2", "k3")
	if ks := slices.Sorted(maps.Keys(got3)); !slices.Equal(ks, []string{"k1", "k2", "k3"}) {
		t.Fatalf("c's campaign after the grace won %v; want k1, k2, k3 confirmed", got3)
	}

	// A hand-off nobody confirms is free at its expiry.
	mustExec(t, db.Pool, `UPDATE pgleader.lease SET holder = 'c', handed_off = true, expires_at = clock_timestamp() - interval '1 second' WHERE key = 'k4'`)
	if got := setAcquire(t, db.Pool, "b", "k4"); got["k4"] <= k4.token {
		t.Fatalf("b's campaign for an expired hand-off won %v; want k4 above %d", got, k4.token)
	}
}
