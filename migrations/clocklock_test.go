package migrations_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgleader/pgleader/internal/pgtest"
)

// The clock after the lock (migration 0020). A statement that changes a
// lease row may wait for the row's lock: another transaction holds it (a
// campaign, a hand-off, an application's transaction). A lease that lapses
// during that wait must not be renewed, confirmed, taken or have a run
// claimed with it once the wait is over: the expiry is judged on the
// database clock read after the row is locked, not before. PostgreSQL
// rechecks a WHERE clause after such a wait only if the other transaction
// changed the row; a transaction that only locked it (FOR UPDATE, FOR
// SHARE) lets the waiting UPDATE go ahead on what it judged before, so a
// clock_timestamp() in the WHERE clause is not enough. Each test below
// holds a lock that only locks, keeps it past the lease's expiry, and then
// expects a refusal.

// lockedPastExpiry runs call on a connection of its own while another
// transaction holds lockSQL's row lock, which it keeps until the database
// clock is past expiresAt (what the lease's expiry was when the call was
// made), and returns when call has returned.
func lockedPastExpiry(t *testing.T, db *pgtest.DB, lockSQL string, lockArgs []any, expiresAt time.Time, call func(c *pgx.Conn)) {
	t.Helper()
	ctx := context.Background()
	locker := db.Conn(t)
	caller := db.Conn(t)
	tx, err := locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if tag, err := tx.Exec(ctx, lockSQL, lockArgs...); err != nil || tag.RowsAffected() == 0 {
		t.Fatalf("%s: %v, %d rows; want the row locked", lockSQL, err, tag.RowsAffected())
	}
	var us int64
	if err := tx.QueryRow(ctx, `SELECT (extract(epoch FROM $1::timestamptz - clock_timestamp()) * 1e6)::bigint`, expiresAt).Scan(&us); err != nil {
		t.Fatal(err)
	}
	left := time.Duration(us) * time.Microsecond
	if left <= 0 {
		t.Fatalf("the lease had expired (%v ago) before the call was made; the test needs a live lease", -left)
	}
	pid := backendPID(t, caller)
	done := make(chan struct{})
	go func() {
		defer close(done)
		call(caller)
	}()
	waitLockWait(t, db.Pool, pid)
	// Past the expiry on the database clock, with a margin.
	time.Sleep(left + 100*time.Millisecond)
	var past bool
	if err := tx.QueryRow(ctx, `SELECT clock_timestamp() > $1::timestamptz`, expiresAt).Scan(&past); err != nil || !past {
		t.Fatalf("the database clock is not past %v (%v)", expiresAt, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(waitTimeout):
		t.Fatal("the call did not return after the lock was released")
	}
}

// shortTerm campaigns for key as owner with a short TTL and returns the
// term's token and expiry.
func shortTerm(t *testing.T, db *pgtest.DB, key, owner, ttl string) (int64, time.Time) {
	t.Helper()
	var ok bool
	var tok int64
	var e time.Time
	err := db.Pool.QueryRow(context.Background(),
		`SELECT acquired, token, expires_at FROM pgleader.campaign($1, $2, $3::interval, 0, NULL, 0, NULL)`, key, owner, ttl).
		Scan(&ok, &tok, &e)
	if err != nil || !ok {
		t.Fatalf("campaign(%s, %s, %s) = %v, %v; want a win", key, owner, ttl, ok, err)
	}
	return tok, e
}

// handedTerm hands key's lease from a to b, a candidate for cand (the
// handed term's expiry), and returns the handed term's token and expiry.
func handedTerm(t *testing.T, db *pgtest.DB, key, cand string) (int64, time.Time) {
	t.Helper()
	tok, _ := shortTerm(t, db, key, "a", "1 minute")
	campaign(t, db.Pool, key, "b", "", 0, cand)
	released, successor, tok2 := handOff(t, db.Pool, key, "a", tok, nil)
	if !released || str(successor) != "b" || tok2 != tok+1 {
		t.Fatalf("hand_off = %v, %s, %d; want true, b, %d", released, str(successor), tok2, tok+1)
	}
	r := readLease(t, db.Pool, key)
	if !r.handedOff || r.expires == nil {
		t.Fatalf("lease after hand_off = %+v; want handed off with an expiry", r)
	}
	return tok2, *r.expires
}

// wantUnchanged checks that key's lease still has expiry e and the
// handed-off flag handed: nothing changed it after its lapse.
func wantUnchanged(t *testing.T, db *pgtest.DB, key string, e time.Time, handed bool) {
	t.Helper()
	r := readLease(t, db.Pool, key)
	if r.expires == nil || !r.expires.Equal(e) || r.handedOff != handed {
		t.Errorf("lease %s after the call: expires %v, handed_off %v; want %v, %v (not changed after its expiry)",
			key, r.expires, r.handedOff, e, handed)
	}
}

// shortTTL is the TTL of the terms that lapse during a wait: long enough
// for the test to lock the row and start the call on a loaded machine.
const shortTTL = "2 seconds"

const lockUpdate = `SELECT 1 FROM pgleader.lease WHERE key = $1 FOR UPDATE`
const lockShare = `SELECT 1 FROM pgleader.lease WHERE key = $1 FOR SHARE`

// TestClockAfterLockRenewTerm: renew_term, in both forms (and so renew and
// renew_bound, which call them), refuses a term that lapsed while it waited
// for the lease row.
func TestClockAfterLockRenewTerm(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, lock, sql string }{
		{"renew_term/4 behind FOR UPDATE", lockUpdate, `SELECT expires_at FROM pgleader.renew_term($1, 'a', $2, '1 minute')`},
		{"renew_term/4 behind FOR SHARE", lockShare, `SELECT expires_at FROM pgleader.renew_term($1, 'a', $2, '1 minute')`},
		{"renew_term/5 behind FOR UPDATE", lockUpdate, `SELECT expires_at FROM pgleader.renew_term($1, 'a', $2, '1 minute', NULL)`},
		{"renew_term/5 with a minimum term behind FOR SHARE", lockShare, `SELECT expires_at FROM pgleader.renew_term($1, 'a', $2, '1 minute', '1 second')`},
		{"renew behind FOR UPDATE", lockUpdate, `SELECT pgleader.renew($1, 'a', $2, '1 minute')`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.New(t)
			tok, e := shortTerm(t, db, "k", "a", shortTTL)
			var got *time.Time
			var err error
			lockedPastExpiry(t, db, tc.lock, []any{"k"}, e, func(c *pgx.Conn) {
				err = c.QueryRow(context.Background(), tc.sql, "k", tok).Scan(&got)
			})
			if err != nil {
				t.Fatal(err)
			}
			if got != nil {
				t.Errorf("renewed a term that expired at %v while the renewal waited for its row: new expiry %v", e, *got)
			}
			wantUnchanged(t, db, "k", e, false)
		})
	}
}

// TestClockAfterLockSetRenewal: the set renewal (renew_many, under set_tick
// and set_renew) renews the live terms and loses the one that lapsed while
// it waited for that term's row.
func TestClockAfterLockSetRenewal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, sql string }{
		{"renew_many", `SELECT coalesce(array_agg(key ORDER BY key), '{}') FROM pgleader.renew_many('a', $1, $2, '1 minute')`},
		{"set_tick", `SELECT ARRAY(SELECT u FROM unnest($1::text[]) AS u EXCEPT SELECT unnest(lost) ORDER BY 1)
		                FROM pgleader.set_tick('s', 'a', $1, $2, '1 minute', 0)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.New(t)
			t1, _ := shortTerm(t, db, "k1", "a", "1 minute")
			t2, e2 := shortTerm(t, db, "k2", "a", shortTTL)
			t3, _ := shortTerm(t, db, "k3", "a", "1 minute")
			var renewed []string
			var err error
			lockedPastExpiry(t, db, lockUpdate, []any{"k2"}, e2, func(c *pgx.Conn) {
				err = c.QueryRow(context.Background(), tc.sql, []string{"k1", "k2", "k3"}, []int64{t1, t2, t3}).Scan(&renewed)
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(renewed) != 2 || renewed[0] != "k1" || renewed[1] != "k3" {
				t.Errorf("renewed %v; want [k1 k3]: k2 expired at %v while the renewal waited for its row", renewed, e2)
			}
			wantUnchanged(t, db, "k2", e2, false)
		})
	}
}

// TestClockAfterLockSetConfirm: set_acquire does not confirm a handed-off
// term that lapsed while the confirmation waited for its row (the chaos
// finding: a graceful stop handed keys to a member whose terms lapsed while
// the confirming statement ran).
func TestClockAfterLockSetConfirm(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	tok, e := handedTerm(t, db, "k", shortTTL)
	var keys []string
	var err error
	lockedPastExpiry(t, db, lockUpdate, []any{"k"}, e, func(c *pgx.Conn) {
		err = c.QueryRow(context.Background(),
			`SELECT keys FROM pgleader.set_acquire('s', 'b', '{}', '1 minute', 0, 0, NULL, NULL, ARRAY['k'])`).Scan(&keys)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Errorf("set_acquire confirmed %v: term %d expired at %v while the confirmation waited for its row", keys, tok, e)
	}
	wantUnchanged(t, db, "k", e, true)
}

// TestClockAfterLockTake: take (both forms) does not confirm a handed-off
// term that lapsed while it waited for its row; campaign, which locks the
// row before it reads the clock, never did (a control).
func TestClockAfterLockTake(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, sql string }{
		{"take/3", `SELECT acquired, token FROM pgleader.take($1, 'b', '1 minute')`},
		{"take/4", `SELECT acquired, token FROM pgleader.take($1, 'b', '1 minute', '1 minute')`},
		{"campaign", `SELECT acquired, token FROM pgleader.campaign($1, 'b', '1 minute', 0, NULL, 0, NULL)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.New(t)
			tok, e := handedTerm(t, db, "k", shortTTL)
			var acquired bool
			var got int64
			var err error
			lockedPastExpiry(t, db, lockShare, []any{"k"}, e, func(c *pgx.Conn) {
				err = c.QueryRow(context.Background(), tc.sql, "k").Scan(&acquired, &got)
			})
			if err != nil {
				t.Fatal(err)
			}
			if acquired && got == tok {
				t.Fatalf("confirmed handed term %d, which expired at %v while the call waited for its row", tok, e)
			}
			if !acquired {
				wantUnchanged(t, db, "k", e, true)
			}
		})
	}
}

// TestClockAfterLockJobClaim: job_claim claims no run for a term that
// lapsed while it waited for the run's row: neither the term's own
// claim again nor a retry's take-over.
func TestClockAfterLockJobClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const lockRun = `SELECT 1 FROM pgleader.job_run WHERE job = $1 FOR UPDATE`
	claim := func(c interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}, owner string, tok int64, instant time.Time) (string, error) {
		var outcome string
		err := c.QueryRow(ctx, `SELECT outcome FROM pgleader.job_claim('j', $1, $2, $3, clock_timestamp() + interval '1 hour')`,
			instant, owner, tok).Scan(&outcome)
		return outcome, err
	}
	t.Run("again", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		tok, e := shortTerm(t, db, "j", "a", shortTTL)
		instant := time.Now().Add(-time.Minute).Truncate(time.Second)
		if o, err := claim(db.Pool, "a", tok, instant); err != nil || o != "run" {
			t.Fatalf("first claim = %q, %v; want run", o, err)
		}
		var o string
		var err error
		lockedPastExpiry(t, db, lockRun, []any{"j"}, e, func(c *pgx.Conn) { o, err = claim(c, "a", tok, instant) })
		if err != nil || o != "lost" {
			t.Errorf("claim again = %q, %v; want lost: the term expired at %v while the claim waited for the run's row", o, err, e)
		}
	})
	t.Run("retry", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		tok1, _ := shortTerm(t, db, "j", "a", "1 minute")
		instant := time.Now().Add(-time.Minute).Truncate(time.Second)
		if o, err := claim(db.Pool, "a", tok1, instant); err != nil || o != "run" {
			t.Fatalf("first claim = %q, %v; want run", o, err)
		}
		mustExec(t, db.Pool, `SELECT pgleader.release('j', 'a', $1)`, tok1)
		tok2, e := shortTerm(t, db, "j", "b", shortTTL)
		var o string
		var err error
		lockedPastExpiry(t, db, lockRun, []any{"j"}, e, func(c *pgx.Conn) { o, err = claim(c, "b", tok2, instant) })
		if err != nil || o != "lost" {
			t.Errorf("retry = %q, %v; want lost: the term expired at %v while the claim waited for the run's row", o, err, e)
		}
		var owner string
		var tok int64
		if err := db.Pool.QueryRow(ctx, `SELECT owner, token FROM pgleader.job_run WHERE job = 'j'`).Scan(&owner, &tok); err != nil ||
			owner != "a" || tok != tok1 {
			t.Errorf("run = %s, %d, %v; want still a's, token %d", owner, tok, err, tok1)
		}
	})
}
