package migrations_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/pgleader/pgleader/internal/pgtest"
)

// termRow is a lease row's term columns: everything but the key's own
// (key, token, token_min, role).
type termRow struct {
	holder, value, transferTo        *string
	acquiredAt, renewedAt, expiresAt *time.Time
	priority                         int32
	handedOff                        bool
	resignToken                      *int64
}

func readTerm(t *testing.T, db *pgtest.DB, key string) termRow {
	t.Helper()
	var r termRow
	err := db.Pool.QueryRow(context.Background(), `
		SELECT holder, value, transfer_to, acquired_at, renewed_at, expires_at, priority, handed_off, resign_token
		  FROM pgleader.lease WHERE key = $1`, key).
		Scan(&r.holder, &r.value, &r.transferTo, &r.acquiredAt, &r.renewedAt, &r.expiresAt, &r.priority, &r.handedOff, &r.resignToken)
	if err != nil {
		t.Fatalf("row of %s: %v", key, err)
	}
	return r
}

// TestLeaseChangesHands: whichever function gives a key a new holder or
// frees it, the row keeps nothing of the term before: a new term has only
// what it was won or handed off with (holder, times, value, priority,
// handed_off), and no resignation request or transfer target; a freed
// lease has no term at all (every term column empty, priority 0,
// handed_off false). Before each change the row is made as dirty as a term
// can leave it (a value, a resignation request, a transfer target, a
// priority, handed_off), by the owner, so that any column a function
// forgets shows.
func TestLeaseChangesHands(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	str := func(s string) *string { return &s }
	// held gives key a term of owner "a" (token 1) and dirties it; expired
	// also ends it on the database clock.
	held := func(key string, expired bool) {
		t.Helper()
		if r := acquire(t, db.Pool, key, "a", "1 minute"); !r.acquired || r.token != 1 {
			t.Fatalf("acquire %s = %+v", key, r)
		}
		mustExec(t, db.Pool, `UPDATE pgleader.lease
			SET value = 'stale', resign_token = token, transfer_to = 'stale-target', priority = 7, handed_off = true,
			    expires_at = CASE WHEN $2 THEN clock_timestamp() - interval '1 second' ELSE expires_at END
			WHERE key = $1`, key, expired)
	}
	free := termRow{}
	for _, c := range []struct {
		name string
		// change runs the path, statement by statement with the key as
		// $1, on a key set up by held; want is the row's term after it.
		expired bool
		change  []string
		want    termRow
	}{
		{name: "campaign", expired: true,
			change: []string{`SELECT pgleader.campaign($1, 'b', '1 minute', 0, 'fresh', 3, NULL)`},
			want:   termRow{holder: str("b"), value: str("fresh"), priority: 3}},
		{name: "acquire", expired: true,
			change: []string{`SELECT pgleader.acquire($1, 'b', '1 minute')`},
			want:   termRow{holder: str("b")}},
		{name: "acquire_many", expired: true,
			change: []string{`SELECT pgleader.acquire_many(ARRAY[$1], 'b', '1 minute', 1)`},
			want:   termRow{holder: str("b")}},
		{name: "set_acquire", expired: true,
			change: []string{`SELECT pgleader.set_acquire('s', 'b', ARRAY[$1], '1 minute', 0)`},
			want:   termRow{holder: str("b")}},
		{name: "hand_off_to_candidate",
			change: []string{`SELECT pgleader.campaign($1, 'c', '1 minute', 0, 'c-value', 5, '1 minute')`,
				`SELECT pgleader.hand_off($1, 'a', 1)`},
			want: termRow{holder: str("c"), value: str("c-value"), priority: 5, handedOff: true}},
		{name: "hand_off_without_candidate",
			change: []string{`SELECT pgleader.hand_off($1, 'a', 1)`},
			want:   free},
		{name: "release",
			change: []string{`SELECT pgleader.release($1, 'a', 1)`},
			want:   free},
		{name: "release_many",
			change: []string{`SELECT pgleader.release_many('a', ARRAY[$1], ARRAY[1::bigint])`},
			want:   free},
		{name: "set_release",
			change: []string{`SELECT pgleader.set_release('s', 'a', ARRAY[$1], ARRAY[1::bigint], true)`},
			want:   free},
		{name: "set_release_hand_off",
			change: []string{`SELECT pgleader.set_renew('s', 'b', '{}', '{}', '1 minute', 0) WHERE $1::text IS NOT NULL`,
				`SELECT pgleader.set_release('s', 'a', ARRAY[$1], ARRAY[1::bigint], true, '{true}')`},
			want: termRow{holder: str("b"), handedOff: true}},
		{name: "advance", expired: true,
			change: []string{`SELECT pgleader.advance($1, 10)`},
			want:   free},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := "k-" + c.name
			held(key, c.expired)
			for _, sql := range c.change {
				mustExec(t, db.Pool, sql, key)
			}
			checkTerm(t, c.name, readTerm(t, db, key), c.want)
		})
	}

	// A new server frees every lease no live term holds when it moves to
	// the next token epoch.
	t.Run("epoch_bump", func(t *testing.T) {
		db := pgtest.New(t)
		if r := acquire(t, db.Pool, "k", "a", "1 minute"); !r.acquired {
			t.Fatalf("acquire = %+v", r)
		}
		mustExec(t, db.Pool, `UPDATE pgleader.lease
			SET value = 'stale', resign_token = token, transfer_to = 'stale-target', priority = 7, handed_off = true,
			    expires_at = clock_timestamp() - interval '1 second'`)
		forgetEpoch(t, db)
		mustExec(t, db.Pool, `SELECT pgleader.grace()`) // notices: the bump
		if e := epoch(t, db); e != 1 {
			t.Fatalf("epoch = %d after the notice; want 1", e)
		}
		checkTerm(t, "epoch_bump", readTerm(t, db, "k"), free)
	})
}

// checkTerm compares a row's term with want: a new term's times are the
// database's (acquired and renewed when it began, expiring later), so only
// their shape is checked.
func checkTerm(t *testing.T, what string, got, want termRow) {
	t.Helper()
	s := func(p *string) string {
		if p == nil {
			return "NULL"
		}
		return *p
	}
	if s(got.holder) != s(want.holder) || s(got.value) != s(want.value) || s(got.transferTo) != "NULL" ||
		got.priority != want.priority || got.handedOff != want.handedOff || got.resignToken != nil {
		t.Errorf("%s: holder %s, value %s, transfer_to %s, priority %d, handed_off %v, resign_token %v; "+
			"want holder %s, value %s, transfer_to NULL, priority %d, handed_off %v, resign_token NULL",
			what, s(got.holder), s(got.value), s(got.transferTo), got.priority, got.handedOff, got.resignToken,
			s(want.holder), s(want.value), want.priority, want.handedOff)
	}
	switch {
	case want.holder == nil && (got.acquiredAt != nil || got.renewedAt != nil || got.expiresAt != nil):
		t.Errorf("%s: a free lease has times %v, %v, %v; want none", what, got.acquiredAt, got.renewedAt, got.expiresAt)
	case want.holder != nil && (got.acquiredAt == nil || got.renewedAt == nil || got.expiresAt == nil ||
		!got.renewedAt.Equal(*got.acquiredAt) || !got.expiresAt.After(*got.acquiredAt)):
		t.Errorf("%s: a new term has times %v, %v, %v; want acquired = renewed, expiring later", what, got.acquiredAt, got.renewedAt, got.expiresAt)
	}
}

// TestTermColumnsCoverTheLease: every column of pgleader.lease is either
// the key's own (key, token, token_min, role), which outlives its terms, or
// one of the term columns pgleader._term sets whenever the lease changes
// hands. A new column must be one or the other, or a term could carry it
// over to the next.
func TestTermColumnsCoverTheLease(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	var lease, term []string
	err := db.Pool.QueryRow(context.Background(), `
		SELECT ARRAY(SELECT a.attname::text FROM pg_attribute AS a
		              WHERE a.attrelid = 'pgleader.lease'::regclass AND a.attnum > 0 AND NOT a.attisdropped
		              ORDER BY 1),
		       ARRAY(SELECT n FROM pg_proc AS p, unnest(p.proargnames, p.proargmodes) AS u(n, m)
		              WHERE p.oid = 'pgleader._term'::regproc AND u.m = 't' ORDER BY 1)`).Scan(&lease, &term)
	if err != nil {
		t.Fatal(err)
	}
	key := []string{"key", "role", "token", "token_min"}
	for _, c := range lease {
		if slices.Contains(key, c) == slices.Contains(term, c) {
			t.Errorf("lease.%s: want it either the key's own (%v) or among _term's columns (%v)", c, key, term)
		}
	}
	for _, c := range term {
		if !slices.Contains(lease, c) {
			t.Errorf("_term returns %s, which the lease table lacks", c)
		}
	}
}
