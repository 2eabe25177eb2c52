package pgleader_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/pgleader"
)

// startLogged starts an elector for owner on a backend of its own whose
// logs, and the elector's, go to log at Debug level.
func startLogged(t *testing.T, db *pgtest.DB, spec pgleader.Spec, owner string, log *pgtest.Buffer) handOffRun {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b := pgleader.NewPostgres(db.NewPool(t), pgleader.WithLogger(logger))
	el, err := pgleader.New(b, spec, pgleader.Options{Owner: owner, Lead: untilEnding, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &pgRun{el: el, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- el.Run(ctx) }()
	t.Cleanup(func() { r.cancel(); <-r.done; r.done <- nil })
	return handOffRun{r, b}
}

// TestRehearsalUnderShortMaxTTL: under a max_ttl of 6 s, as docs/ha.md
// recommends, a term's hand-off rehearsal (on its lease connection) and the
// listener's (on its LISTEN connection) run, instead of failing on a TTL
// above max_ttl.
func TestRehearsalUnderShortMaxTTL(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `SELECT pgleader.set_max_ttl('6 seconds')`); err != nil {
		t.Fatal(err)
	}
	var log pgtest.Buffer
	a := startLogged(t, db, pgleader.Spec{Key: "k", TTL: 6 * time.Second}, "a", &log)
	waitFor(t, "a to lead", func() bool { return a.el.Status().Leading })
	failed := func() bool { return strings.Contains(log.String(), "hand-off failed") }
	waitFor(t, "a's rehearsal to run", func() bool {
		var done bool
		err := db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'pgleader lease'
			  AND state = 'idle' AND query LIKE '%pgleader.rehearsal%')`).Scan(&done)
		if err != nil {
			t.Fatal(err)
		}
		return done || failed()
	})
	if failed() {
		t.Fatalf("a rehearsal failed under max_ttl 6s:\n%s", log.String())
	}
}

// TestHandOffHintAfterEpochBump: a term held across a move to a new token
// epoch hands off to a successor that draws above the epoch's base, not
// token + 1. The hint still says "handoff" and names the successor, and the
// log names no successor token the successor did not get.
func TestHandOffHintAfterEpochBump(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	spec := slowPollSpec("k")
	var log pgtest.Buffer
	a := startLogged(t, db, spec, "a", &log)
	waitFor(t, "a to lead", func() bool { return a.el.Status().Leading })
	c := startCandidate(t, db, spec, "c", pgleader.Options{})
	registered(t, a.backend, "k", "c")
	waitFor(t, "c to wait", func() bool { return c.el.Status().State == pgleader.StateWaiting })

	// A new server, as after crash recovery: the next lease call moves to
	// epoch 1 and a's held term keeps token 1, its next draw above 2^40.
	// The grace that begins then is ended at once.
	if _, err := db.Pool.Exec(ctx, `DELETE FROM pgleader.server_epoch`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `SELECT pgleader.grace()`); err != nil {
		t.Fatal(err)
	}
	var epoch int64
	if err := db.Pool.QueryRow(ctx, `SELECT epoch FROM pgleader.settings`).Scan(&epoch); err != nil || epoch != 1 {
		t.Fatalf("epoch after the notice: %d, %v; want 1", epoch, err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE pgleader.server_epoch SET grace_until = clock_timestamp() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}

	listen := db.Conn(t)
	if _, err := listen.Exec(ctx, "LISTEN pgleader"); err != nil {
		t.Fatal(err)
	}
	a.stopNow(t)
	want := int64(1)<<40 + 1
	waitFor(t, "c to lead", func() bool { return c.el.Status().Leading })
	if tok := c.el.Status().Token; tok != want {
		t.Fatalf("c leads token %d; want %d, the first of epoch 1", tok, want)
	}

	var hint string
	for hint == "" {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := listen.WaitForNotification(wctx)
		cancel()
		if err != nil {
			t.Fatalf("no hand-off or release hint for k: %v", err)
		}
		if strings.HasPrefix(n.Payload, "handoff ") || strings.HasPrefix(n.Payload, "release ") {
			hint = n.Payload
		}
	}
	if hint != "handoff 1 c k" {
		t.Fatalf("a's hint after the hand-off: %q; want %q", hint, "handoff 1 c k")
	}
	for _, line := range strings.Split(log.String(), "\n") {
		if strings.Contains(line, "successor_token=") && !strings.Contains(line, fmt.Sprintf("successor_token=%d", want)) {
			t.Fatalf("a's log names a successor token c did not get: %s", line)
		}
	}
}
