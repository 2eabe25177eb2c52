package pgleader_test

import (
	"context"
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
