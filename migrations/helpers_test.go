package migrations_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/pgtest"
)

// waitTimeout bounds every wait for another session; it detects a hang, it
// is not a timing assertion.
const waitTimeout = 15 * time.Second

// rolePassword is every test role's password.
const rolePassword = pgtest.RolePassword

// createRole creates a LOGIN role with a unique name, and drops it (and
// whatever it owns or was granted in db) when the test ends.
func createRole(t *testing.T, db *pgtest.DB) string {
	t.Helper()
	role, _ := db.NewRole(t, "")
	return role
}

// urlAs is db's URL with another user.
func urlAs(t *testing.T, db *pgtest.DB, role string) string {
	t.Helper()
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, rolePassword)
	return u.String()
}

func mustExec(t *testing.T, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, sql string, args ...any) {
	t.Helper()
	if _, err := db.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// wantCode checks that err is a PostgreSQL error with code and a message
// containing msg.
func wantCode(t *testing.T, what string, err error, code, msg string) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != code || !strings.Contains(pgErr.Message, msg) {
		t.Errorf("%s: err = %v; want SQLSTATE %s with %q", what, err, code, msg)
	}
}

func backendPID(t *testing.T, conn *pgx.Conn) int32 {
	t.Helper()
	var pid int32
	if err := conn.QueryRow(context.Background(), `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

// waitLockWait polls until backend pid waits for a lock.
func waitLockWait(t *testing.T, db *pgxpool.Pool, pid int32) {
	t.Helper()
	for deadline := time.Now().Add(waitTimeout); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		var waitType *string
		err := db.QueryRow(context.Background(), `SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&waitType)
		if err != nil {
			t.Fatal(err)
		}
		if waitType != nil && *waitType == "Lock" {
			return
		}
	}
	t.Fatalf("backend %d did not wait for a lock within %v", pid, waitTimeout)
}
