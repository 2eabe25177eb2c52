package pgleader_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgleader/pgleader/pgleader"
)

// fastSpec is a set's timing for tests against PostgreSQL: TTL 1s, so
// RenewEvery 333ms, CampaignEvery 83ms.
func fastSpec(name string) pgleader.Spec { return pgleader.Spec{Key: name, TTL: time.Second} }

// eventually polls cond every 20ms for up to d and fails with what() if it
// never holds.
func eventually(t *testing.T, d time.Duration, cond func() bool, what func() string) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("after %v: %s", d, what())
}

func waitHeld(t *testing.T, d time.Duration, sets []*runningSet, want ...int) {
	t.Helper()
	eventually(t, d, func() bool { return slices.Equal(held(sets...), want) },
		func() string { return fmt.Sprintf("held %v; want %v", held(sets...), want) })
}

// TestSetPostgresSpread: against PostgreSQL, replicas of a set share its
// keys evenly as they join, stop, crash, and as keys are added and removed.
func TestSetPostgresSpread(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t)
	keys := keyNames("p", 30)
	spec := fastSpec("spread")
	views := []*crashable{{SetBackend: b}, {SetBackend: b}, {SetBackend: b}}
	start := func(i int) *runningSet {
		return startSet(t, views[i], spec, keys, pgleader.SetOptions{Owner: fmt.Sprintf("r%d", i), Lead: quickBody})
	}
	a := start(0)
	waitHeld(t, 2*time.Second, []*runningSet{a}, 30)
	bb := start(1)
	c := start(2)
	all := []*runningSet{a, bb, c}
	waitHeld(t, 4*time.Second, all, 10, 10, 10)

	// Graceful stop: its keys are led elsewhere within a second.
	c.stop(t)
	waitHeld(t, time.Second, all[:2], 15, 15)

	// Keys added and removed.
	a.set.Add("p-new")
	bb.set.Add("p-new")
	eventually(t, 2*time.Second, func() bool { h := held(a, bb); return h[0]+h[1] == 31 },
		func() string { return fmt.Sprintf("held %v; want 31 in all", held(a, bb)) })
	a.set.Remove("p-new")
	bb.set.Remove("p-new")
	eventually(t, 2*time.Second, func() bool {
		l, err := b.Lease(context.Background(), "p-new")
		return err == nil && !l.Held()
	}, func() string { return "the removed key is still held" })
	waitHeld(t, 4*time.Second, all[:2], 15, 15)

	// Crash: its keys are led elsewhere within TTL + a second.
	views[1].dead.Store(true)
	waitHeld(t, spec.TTL+time.Second, all[:1], 30)
	views[1].dead.Store(false)
	bb.stop(t)
	a.stop(t)

	var members int
	if err := db.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM pgleader.set_member WHERE set_name = 'spread' AND expires_at > clock_timestamp()`).Scan(&members); err != nil {
		t.Fatal(err)
	}
	if members != 0 {
		t.Fatalf("%d live members after every replica stopped; want 0", members)
	}
}

// TestSetPostgresPartialRenewal: a renewal that finds one key's lease gone
// to another term ends that term as lost and no other.
func TestSetPostgresPartialRenewal(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t)
	var rec setRecorder
	// TTL 3s, not fastSpec's 1s: every other key's term must stay live, so
	// a renewal tick may be late by up to a second on a busy machine
	// (with 1s, a third of a second ended them as expiring beside a
	// second make test).
	spec := pgleader.Spec{Key: "partial", TTL: 3 * time.Second}
	r := startSet(t, b, spec, keyNames("q", 5), pgleader.SetOptions{Owner: "a", Lead: rec.lead})
	waitHeld(t, 3*time.Second, []*runningSet{r}, 5)
	if _, err := db.Pool.Exec(context.Background(),
		`UPDATE pgleader.lease SET holder = 'intruder', token = token + 1 WHERE key = 'q-001'`); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, 3*time.Second, []*runningSet{r}, 4)
	time.Sleep(3 * time.Second) // three more ticks
	for _, term := range rec.all() {
		want := pgleader.ReasonNone
		switch {
		case term.Key() == "q-001" && term.Token() == 1:
			want = pgleader.ReasonLost
		case term.Key() == "q-001":
			continue // won again once the intruder's lease expired
		}
		if term.Reason() != want {
			t.Fatalf("term %s: %v; want %v", term.Key(), term.Reason(), want)
		}
	}
	r.stop(t)
}

// TestSetPostgresBodyPanic: one key's body panicking ends only its term.
func TestSetPostgresBodyPanic(t *testing.T) {
	t.Parallel()
	b, _ := newBackend(t)
	rec := setRecorder{panics: map[string]bool{"z-002": true}}
	// TTL 3s, not fastSpec's 1s: the other keys' terms must stay live while
	// z-002's is won again, and a renewal tick may be late by a second on a
	// busy machine (with 1s, the other keys' terms ended as expiring beside
	// a second make test: "8 bodies").
	spec := pgleader.Spec{Key: "panic", TTL: 3 * time.Second}
	r := startSet(t, b, spec, keyNames("z", 4), pgleader.SetOptions{Owner: "a", Lead: rec.lead})
	eventually(t, 10*time.Second, func() bool { return len(rec.all()) == 5 && held(r)[0] == 4 },
		func() string { return fmt.Sprintf("%d bodies, held %v; want 5 and 4", len(rec.all()), held(r)) })
	for _, term := range rec.all() {
		if term.Key() != "z-002" && term.Token() != 1 {
			t.Fatalf("term %s token %d; want 1: another key's term was touched", term.Key(), term.Token())
		}
	}
	r.stop(t)
}

// TestSetPostgresFloorsAndArguments: floors raise the tokens drawn, and bad
// arguments are refused by the SQL functions as by Go.
func TestSetPostgresFloorsAndArguments(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t)
	ctx := context.Background()
	won, members, err := b.AcquireSet(ctx, "f", "a", []string{"f1", "f2"}, []int64{41, 0}, time.Second, 0, 0, 0, nil)
	if err != nil || members != 1 || len(won) != 2 || won[0].Token != 42 || won[1].Token != 1 {
		t.Fatalf("AcquireSet = %+v, %d, %v; want f1 at 42 and f2 at 1", won, members, err)
	}
	ans, err := b.RenewSet(ctx, "f", "a", []string{"f1", "f2"}, []int64{42, 7}, time.Second, 1)
	exp, ms := ans.Expires, ans.Members
	if err != nil || exp[0].IsZero() || !exp[1].IsZero() || len(ms) != 1 || ms[0].Owner != "a" || ms[0].Held != 1 || ms[0].Expires.After(exp[0]) {
		t.Fatalf("RenewSet = %v, %v, %v; want f1 renewed, f2 lost, member a holding 1 until no later than f1's lease", exp, ms, err)
	}
	rel, err := b.ReleaseSet(ctx, "f", "a", []string{"f1", "f2"}, []int64{42, 1}, nil, true)
	if err != nil || !slices.Equal(rel, []bool{true, true}) {
		t.Fatalf("ReleaseSet = %v, %v", rel, err)
	}
	for _, q := range []string{
		`SELECT * FROM pgleader.acquire_many(ARRAY['a','a'], 'o', '1s', 1)`,
		`SELECT * FROM pgleader.acquire_many(ARRAY['a'], 'o', '1s', -1)`,
		`SELECT * FROM pgleader.acquire_many(ARRAY['a'], 'o', '1s', 1, ARRAY[4611686018427387904])`,
		`SELECT * FROM pgleader.acquire_many(ARRAY['a'], 'o', '1 day', 1)`,
		`SELECT * FROM pgleader.renew_many('o', ARRAY['a'], ARRAY[]::bigint[], '1s')`,
		`SELECT * FROM pgleader.release_many('o', ARRAY[NULL]::text[], ARRAY[1])`,
		`SELECT * FROM pgleader.set_renew('', 'o', '{}', '{}', '1s', 0)`,
	} {
		_, err := db.Pool.Exec(ctx, q)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "22023" || !strings.HasPrefix(pe.Message, "pgleader: ") {
			t.Errorf("%s: %v; want SQLSTATE 22023 with a pgleader message", q, err)
		}
	}
}

// TestSetTickAnswersTheLostKeys: the renewal tick (pgleader.set_tick)
// reports exactly the keys it did not renew, among many, and for the others
// an expiry no later than the one it wrote to each lease row.
func TestSetTickAnswersTheLostKeys(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t)
	ctx := context.Background()
	keys := keyNames("t", 500)
	won, _, err := b.AcquireSet(ctx, "tick", "a", keys, nil, time.Minute, 0, len(keys), 0, nil)
	if err != nil || len(won) != len(keys) {
		t.Fatalf("AcquireSet won %d of %d: %v", len(won), len(keys), err)
	}
	tokens := make([]int64, len(won))
	names := make([]string, len(won))
	for i, l := range won {
		names[i], tokens[i] = l.Key, l.Token
	}
	lost := map[string]bool{"t-007": true, "t-250": true, "t-499": true}
	for k := range lost {
		if _, err := db.Pool.Exec(ctx, `UPDATE pgleader.lease SET holder = 'intruder', token = token + 1 WHERE key = $1`, k); err != nil {
			t.Fatal(err)
		}
	}
	ans, err := b.RenewSet(ctx, "tick", "a", names, tokens, time.Minute, len(names)-len(lost))
	exp, members := ans.Expires, ans.Members
	if err != nil || len(exp) != len(names) || len(members) != 1 {
		t.Fatalf("RenewSet = %d expiries, %v, %v", len(exp), members, err)
	}
	rows, err := db.Pool.Query(ctx, `SELECT key, expires_at FROM pgleader.lease WHERE holder = 'a'`)
	if err != nil {
		t.Fatal(err)
	}
	written := map[string]time.Time{}
	for rows.Next() {
		var k string
		var e time.Time
		if err := rows.Scan(&k, &e); err != nil {
			t.Fatal(err)
		}
		written[k] = e
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for i, k := range names {
		switch {
		case lost[k] && !exp[i].IsZero():
			t.Errorf("key %s was taken, but the tick reports it renewed until %v", k, exp[i])
		case !lost[k] && exp[i].IsZero():
			t.Errorf("key %s was renewed, but the tick reports it lost", k)
		case !lost[k] && exp[i].After(written[k]):
			t.Errorf("key %s: the tick reports %v, after the expiry it wrote, %v", k, exp[i], written[k])
		}
	}
	if _, err := db.Pool.Exec(ctx, `SELECT * FROM pgleader.set_tick('', 'a', '{}', '{}', '1s', 0)`); err == nil {
		t.Error("set_tick accepted an empty set name")
	}
}
