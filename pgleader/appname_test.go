package pgleader_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/pgleader"
)

// TestConnectionsNameThemselves: an operator finds the backend's own
// connections in pg_stat_activity by application_name.
func TestConnectionsNameThemselves(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	a := startOn(t, pgleader.NewPostgres(db.NewPool(t), pgleader.WithLogger(quiet)), pgleader.Spec{Key: "k", TTL: 3 * time.Second}, "a")
	waitFor(t, "a to lead", func() bool { return a.el.Status().Leading })
	bBackend := pgleader.NewPostgres(db.NewPool(t), pgleader.WithLogger(quiet))
	startOn(t, bBackend, pgleader.Spec{Key: "k", TTL: 3 * time.Second}, "b")
	waitFor(t, "b to listen", bBackend.Listening)
	count := func(name string) int { return countConnections(t, db, name) }
	waitFor(t, "b's LISTEN connection named 'pgleader listen'", func() bool { return count("pgleader listen") >= 1 })
	waitFor(t, "the lease connections named 'pgleader lease'", func() bool { return count("pgleader lease") == 2 })
}

// TestConnectionsCloseAfterRun: once every Run of a backend has returned,
// its lease and LISTEN connections close (a moment later: they linger so
// that a hand-off's successor does not compete with their shutdown).
func TestConnectionsCloseAfterRun(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	count := func(name string) int { return countConnections(t, db, name) }
	spec := pgleader.Spec{Key: "k", TTL: 3 * time.Second}
	a := startOn(t, pgleader.NewPostgres(db.NewPool(t), pgleader.WithLogger(quiet)), spec, "a")
	waitFor(t, "a to lead", func() bool { return a.el.Status().Leading })
	bBackend := pgleader.NewPostgres(db.NewPool(t), pgleader.WithLogger(quiet))
	b := startOn(t, bBackend, spec, "b")
	waitFor(t, "b to listen", bBackend.Listening)
	waitFor(t, "both lease connections and b's LISTEN connection", func() bool {
		return count("pgleader lease") == 2 && count("pgleader listen") >= 1
	})
	a.stopNow(t)
	waitFor(t, "b to lead", func() bool { return b.el.Status().Leading })
	b.stopNow(t)
	waitFor(t, "every lease and LISTEN connection to close", func() bool {
		return count("pgleader lease") == 0 && count("pgleader listen") == 0
	})
}

// countConnections counts the connections to db's database named name in
// pg_stat_activity.
func countConnections(t *testing.T, db *pgtest.DB, name string) (n int) {
	t.Helper()
	err := db.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`, name).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestLeaseConnectionReusedWithinLinger: a Run that starts while the lease
// connection of the last one still lingers gets the same session; one that
// starts after it closed gets a new one.
func TestLeaseConnectionReusedWithinLinger(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	backend := pgleader.NewPostgres(db.NewPool(t), pgleader.WithLogger(quiet))
	// pid waits for the lease connection to show: a leading Elector may
	// have none for a moment (one that a statement's error or deadline
	// closed is opened again by the next statement, and a statement that
	// finds it busy runs on a pool connection), and pg_stat_activity
	// names a new backend only once its start-up is done. On PostgreSQL 13
	// in CI a read at once found none.
	pid := func() (p int) {
		t.Helper()
		waitFor(t, "the lease connection in pg_stat_activity", func() bool {
			err := db.Pool.QueryRow(context.Background(),
				`SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'pgleader lease'`).Scan(&p)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				t.Fatal(err)
			}
			return err == nil
		})
		return p
	}
	spec := pgleader.Spec{Key: "k", TTL: 3 * time.Second}
	run := func() int {
		r := startOn(t, backend, spec, "a")
		waitFor(t, "a to lead", func() bool { return r.el.Status().Leading })
		p := pid()
		r.stopNow(t)
		return p
	}
	pgleader.SetLinger(backend, time.Hour)
	first := run()
	if again := run(); again != first {
		t.Fatalf("the second Run's lease connection is backend %d, want the lingering %d", again, first)
	}
	pgleader.SetLinger(backend, time.Millisecond)
	run() // its connection closes 1 ms after it returns
	waitFor(t, "the lease connection to close", func() bool { return countConnections(t, db, "pgleader lease") == 0 })
	if next := run(); next == first {
		t.Fatalf("a Run after the lease connection closed got backend %d again", next)
	}
}

// TestSetUsesTheBackendsAbilities: a Set with no logger of its own logs to
// the backend's (Abilities.Logger), and holds the backend's lease
// connection while it runs and lets it go after (Abilities.Hold).
func TestSetUsesTheBackendsAbilities(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	var logs lockedLog
	b := pgleader.NewPostgres(db.NewPool(t), pgleader.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	set, err := pgleader.NewSet(b, pgleader.Spec{Key: "s", TTL: 3 * time.Second}, []string{"s-1", "s-2"},
		pgleader.SetOptions{Owner: "a", Lead: untilEnding})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- set.Run(ctx) }()
	count := func() int { return countConnections(t, db, "pgleader lease") }
	waitFor(t, "the set to hold its keys", func() bool { return set.Status().Held == 2 })
	if n := count(); n != 1 {
		cancel()
		<-done
		t.Fatalf("%d lease connections while the set runs, want 1", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the lease connection to close after Run", func() bool { return count() == 0 })
	if !strings.Contains(logs.String(), "set=s") || !strings.Contains(logs.String(), `msg="terms ended"`) {
		t.Fatalf("the backend's logger did not receive the set's logs:\n%s", logs.String())
	}
}
