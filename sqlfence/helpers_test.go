package sqlfence_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/sqlfence"
)

// waitTimeout bounds every wait for another session; it detects a hang, it
// is not a timing assertion.
const waitTimeout = 15 * time.Second

func mustExec(t *testing.T, db sqlfence.Querier, sql string, args ...any) {
	t.Helper()
	if _, err := db.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// acquire takes key's lease for owner through the SQL API, so these tests do
// not depend on package pgleader, and returns the new term's token.
func acquire(t *testing.T, db sqlfence.Querier, key, owner string, ttl time.Duration) int64 {
	t.Helper()
	var acquired bool
	var token int64
	err := db.QueryRow(context.Background(),
		`SELECT acquired, token FROM pgleader.acquire($1, $2, make_interval(secs => $3))`,
		key, owner, ttl.Seconds()).Scan(&acquired, &token)
	if err != nil || !acquired {
		t.Fatalf("acquire %q by %q = %v (token %d), %v; want acquired", key, owner, acquired, token, err)
	}
	return token
}

func release(t *testing.T, db sqlfence.Querier, key, owner string, token int64) {
	t.Helper()
	var ok bool
	err := db.QueryRow(context.Background(), `SELECT pgleader.release($1, $2, $3)`, key, owner, token).Scan(&ok)
	if err != nil || !ok {
		t.Fatalf("release %q/%q/%d = %v, %v; want true", key, owner, token, ok, err)
	}
}

// waitExpired polls until the term no longer holds its lease on the
// database clock.
func waitExpired(t *testing.T, db sqlfence.Querier, key string, token int64) {
	t.Helper()
	for deadline := time.Now().Add(waitTimeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var holds bool
		if err := db.QueryRow(context.Background(), `SELECT pgleader.holds($1, $2)`, key, token).Scan(&holds); err != nil {
			t.Fatal(err)
		}
		if !holds {
			return
		}
	}
	t.Fatalf("lease %q token %d still held after %v", key, token, waitTimeout)
}

// backendPID returns the server process of conn.
func backendPID(t *testing.T, conn *pgx.Conn) int32 {
	t.Helper()
	var pid int32
	if err := conn.QueryRow(context.Background(), `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

// waitLockWait polls pg_stat_activity until backend pid waits for a lock,
// and checks pg_locks agrees. It fails if done is closed or receives first:
// the other session finished instead of waiting.
func waitLockWait[T any](t *testing.T, db *pgxpool.Pool, pid int32, done <-chan T) {
	t.Helper()
	ctx := context.Background()
	for deadline := time.Now().Add(waitTimeout); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		select {
		case r := <-done:
			t.Fatalf("backend %d finished without waiting for a lock: %+v", pid, r)
		default:
		}
		var waitType *string
		err := db.QueryRow(ctx, `SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&waitType)
		if err != nil {
			t.Fatal(err)
		}
		if waitType == nil || *waitType != "Lock" {
			continue
		}
		var waiting int
		err = db.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE pid = $1 AND NOT granted`, pid).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting == 0 {
			t.Fatalf("backend %d waits for a lock by pg_stat_activity, but pg_locks shows no ungranted lock", pid)
		}
		return
	}
	t.Fatalf("backend %d did not wait for a lock within %v", pid, waitTimeout)
}

// receive returns the next value from ch, failing after waitTimeout.
func receive[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		var zero T
		t.Fatalf("no result within %v", waitTimeout)
		return zero
	}
}

func count(t *testing.T, db sqlfence.Querier, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// wantStale checks that err is a *sqlfence.StaleError with these fields.
func wantStale(t *testing.T, err error, resource string, token, stored int64, claim bool) {
	t.Helper()
	var se *sqlfence.StaleError
	if !errors.As(err, &se) || !errors.Is(err, sqlfence.ErrFenced) {
		t.Fatalf("err = %v; want a *StaleError matching ErrFenced", err)
	}
	if se.Resource != resource || se.Token != token || se.Stored != stored || se.Claim != claim {
		t.Fatalf("StaleError = %+v; want resource %q, token %d, stored %d, claim %v",
			*se, resource, token, stored, claim)
	}
}
