package migrations_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgleader/pgleader/internal/pgtest"
)

// TestSettingsSerializedWhenTheAdvisoryLockIsTaken: any role that can
// connect can take the settings' advisory lock. From version 13 a lease
// operation that finds it held exclusively does not wait for it (else such
// a session would stall every lease operation): it reads the settings row
// FOR SHARE instead. The setters' serialization must still hold: here an
// acquire with a 60 s TTL runs while a hostile session holds the advisory
// lock, its transaction stays open, the hostile session lets go, and a
// setter lowering max_ttl to 2 s must wait for that transaction and then
// refuse. Were the fallback a plain read, the setter would find no term,
// and a 60 s term would commit under a 2 s max_ttl.
func TestSettingsSerializedWhenTheAdvisoryLockIsTaken(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, hostileURL := db.NewRole(t, "")
	_, appURL := db.NewRole(t, "SELECT pgleader.grant_usage($1)")

	hostile := connect(t, hostileURL)
	mustExec(t, hostile, `SELECT pg_advisory_lock(1885826148, 1)`)

	app := connect(t, appURL)
	mustExec(t, app, `BEGIN`)
	actx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	var acquired bool
	if err := app.QueryRow(actx, `SELECT acquired FROM pgleader.acquire('k', 'a', '60 seconds')`).Scan(&acquired); err != nil || !acquired {
		t.Fatalf("acquire while another session holds the settings' advisory lock: %v, %v", acquired, err)
	}
	mustExec(t, hostile, `SELECT pg_advisory_unlock(1885826148, 1)`)

	setter := db.Conn(t)
	pid := backendPID(t, setter)
	done := make(chan error, 1)
	go func() {
		_, err := setter.Exec(ctx, `SELECT pgleader.set_max_ttl('2 seconds')`)
		done <- err
	}()
	waitLockWait(t, db.Pool, pid)
	mustExec(t, app, `COMMIT`)
	select {
	case err := <-done:
		wantCode(t, "set_max_ttl after a 60 s term committed", err, "55000", "below the TTL")
	case <-time.After(waitTimeout):
		t.Fatal("set_max_ttl did not return")
	}
	if m := maxTTL(t, db.Pool); m != 10*time.Minute {
		t.Fatalf("max_ttl = %v; want 10m unchanged", m)
	}
}

// connect opens a connection with url, closed when the test ends.
func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}
