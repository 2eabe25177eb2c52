package pgleader_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/migrations"
	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/sqlfence"
)

// waitSession waits until a session of role named application (its
// application_name) has last run a statement that contains text, as
// pg_stat_activity shows it to the database's owner, or until failed.
func waitSession(t *testing.T, db *pgtest.DB, role, application, text string, failed func() bool) {
	t.Helper()
	waitFor(t, fmt.Sprintf("a %q session of %s to run %q", application, role, text), func() bool {
		var ran bool
		if err := db.Pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM pg_stat_activity
			WHERE datname = current_database() AND usename = $1 AND application_name = $2
			  AND state = 'idle' AND strpos(query, $3) > 0)`, role, application, text).Scan(&ran); err != nil {
			t.Fatal(err)
		}
		return ran || failed()
	})
}

// TestApplicationRoleRunsTheReadme: a role given only what grant_usage
// gives (and SELECT on the migration history) runs everything the README
// shows: migrations.Up at start-up, an Elector whose Claim, FenceFloor and
// body use a fence column in a table of the role's own with a fence trigger
// as backstop, a hand-off to a second replica on stop, Observe, Resign,
// a Set, Do, a fenced transaction and a lease-guarded transaction. Nothing
// it runs is refused, and the hand-off rehearsals on the lease and LISTEN
// connections, which run every function of a hand-off, succeed.
func TestApplicationRoleRunsTheReadme(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	role, appURL := db.NewRole(t, "SELECT pgleader.grant_usage($1, to_regclass('pgleader_schema_migrations'))")
	// The role's own tables go in the schema public, where PostgreSQL 15
	// no longer lets every role create.
	if _, err := db.Pool.Exec(ctx, "GRANT CREATE ON SCHEMA public TO "+pgx.Identifier{role}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	pool := rolePool(t, appURL)
	var logs pgtest.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	const key = "digest-publisher"

	// Once, at start-up, from every replica: on an up-to-date database it
	// changes nothing and is no error.
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatalf("migrations.Up as the application role: %v", err)
	}
	if v, dirty, err := migrations.Version(ctx, pool); err != nil || dirty || v != migrations.Latest {
		t.Fatalf("migrations.Version as the application role = %d, %v, %v; want %d", v, dirty, err, migrations.Latest)
	}
	// The hand-off rehearsal itself, on a connection of the role.
	conn := roleConn(t, appURL)
	if err := pgleader.Rehearse(ctx, conn.PgConn(), 6*time.Second); err != nil {
		t.Fatalf("a hand-off rehearsal as the application role: %v", err)
	}

	// The store: a fence column in the role's own table, with the fence
	// trigger as a backstop (installing it takes the table's owner).
	if _, err := pool.Exec(ctx, `CREATE TABLE digests (name text PRIMARY KEY, body text, fence bigint);
		INSERT INTO digests VALUES ('daily', '', 0);
		CREATE TABLE outbox (token bigint NOT NULL, message text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if trigger, err := sqlfence.InstallTrigger(ctx, pool, pgx.Identifier{"digests"}, "fence"); err != nil || trigger != "pgleader_fence_fence" {
		t.Fatalf("InstallTrigger as the application role = %q, %v", trigger, err)
	}
	digests := sqlfence.Column{Table: pgx.Identifier{"digests"}, KeyColumn: "name", FenceColumn: "fence"}

	// A follower: Observe the leader, as README's forwardTo would.
	var seenMu sync.Mutex
	var seen []pgleader.Lease
	observeCtx, stopObserving := context.WithCancel(ctx)
	leases, err := pgleader.Observe(observeCtx, pgleader.NewPostgres(rolePool(t, appURL), pgleader.WithLogger(logger)), key, 4*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	observed := make(chan struct{})
	go func() {
		defer close(observed)
		for l := range leases {
			seenMu.Lock()
			seen = append(seen, l)
			seenMu.Unlock()
		}
	}()
	t.Cleanup(func() { stopObserving(); <-observed })
	sawLeader := func(owner string, token int64, value string) bool {
		seenMu.Lock()
		defer seenMu.Unlock()
		for _, l := range seen {
			if l.Holder == owner && l.Token == token && l.Value == value {
				return true
			}
		}
		return false
	}

	// The README's Elector, on replicas pod-a and pod-b, each with a pool
	// and a backend of its own.
	var obs observations
	start := func(owner, value string) handOffRun {
		p := rolePool(t, appURL)
		b := pgleader.NewPostgres(p, pgleader.WithLogger(logger))
		el, err := pgleader.New(b, pgleader.Spec{Key: key, TTL: 6 * time.Second, RequireFenceAdvance: true},
			pgleader.Options{
				Owner: owner, Value: value, Logger: logger, Observer: &obs,
				Claim: func(ctx context.Context, t *pgleader.Term) (bool, error) {
					err := digests.Claim(ctx, p, "daily", t.Token())
					if errors.Is(err, sqlfence.ErrFenced) {
						return false, nil
					}
					return err == nil, err
				},
				FenceFloor: func(ctx context.Context) (int64, error) { return digests.Floor(ctx, p, "daily") },
				Lead: func(ctx context.Context, t *pgleader.Term) error {
					for t.Live() {
						err := digests.Write(ctx, p, "daily", t.Token(), sqlfence.Assign("body", fmt.Sprintf("%s #%d", owner, t.Token())))
						if err != nil {
							return err
						}
						select {
						case <-t.Ending():
						case <-time.After(50 * time.Millisecond):
						}
					}
					return nil
				},
			})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		r := &pgRun{el: el, cancel: cancel, done: make(chan error, 1)}
		go func() { r.done <- el.Run(runCtx) }()
		t.Cleanup(func() { r.cancel(); <-r.done; r.done <- nil })
		return handOffRun{r, b}
	}
	failed := func() bool {
		return strings.Contains(logs.String(), "preparing the hand-off failed") || strings.Contains(logs.String(), "rehearsing a hand-off")
	}

	a := start("pod-a", "10.0.0.1:8080")
	waitFor(t, "pod-a to lead", func() bool { return a.el.Status().Leading })
	token1 := a.el.Status().Token
	// pod-a's term rehearses its hand-off on its lease connection.
	waitSession(t, db, role, "pgleader lease", "pgleader.rehearsal", failed)
	if err := a.el.Check(); err != nil {
		t.Errorf("pod-a's health check: %v", err)
	}
	b := start("pod-b", "10.0.0.2:8080")
	registered(t, b.backend, key, "pod-b")
	// pod-b's LISTEN connection rehearses a hand-off and then checks
	// whether the lease was handed to it (pgleader.take).
	waitSession(t, db, role, "pgleader listen", "pgleader.take(", failed)
	waitFor(t, "pod-a to write its digest", func() bool {
		var body string
		var fence int64
		if err := pool.QueryRow(ctx, `SELECT body, fence FROM digests WHERE name = 'daily'`).Scan(&body, &fence); err != nil {
			t.Fatal(err)
		}
		return fence == token1 && body == fmt.Sprintf("pod-a #%d", token1)
	})
	waitFor(t, "Observe to see pod-a lead", func() bool { return sawLeader("pod-a", token1, "10.0.0.1:8080") })

	// A lease-guarded transaction commits while its term holds the lease.
	publish := func(token int64, message string) func(pgx.Tx) error {
		return func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO outbox VALUES ($1, $2)`, token, message)
			return err
		}
	}
	if err := sqlfence.WithLease(ctx, pool, key, token1, publish(token1, "guarded by pod-a's lease")); err != nil {
		t.Fatalf("a lease-guarded transaction of pod-a's live term: %v", err)
	}

	// Stopping pod-a hands the lease off to pod-b, with the next token,
	// and pod-a's hint (pgleader.hint_handoff) names pod-b.
	if _, err := conn.Exec(ctx, "LISTEN pgleader"); err != nil {
		t.Fatal(err)
	}
	a.cancel()
	if err := <-a.done; err != nil {
		t.Fatalf("pod-a's Run = %v", err)
	}
	a.done <- nil // for the cleanup
	waitFor(t, "pod-b to lead", func() bool { return b.el.Status().Leading })
	token2 := b.el.Status().Token
	if token2 <= token1 {
		t.Fatalf("pod-b leads with token %d after pod-a's %d; want a higher one", token2, token1)
	}
	if r := a.el.Status().LastEnd; r != pgleader.ReasonStopped {
		t.Errorf("pod-a's term ended %v; want stopped", r)
	}
	if !strings.Contains(logs.String(), `msg="handed the lease off" key=digest-publisher owner=pod-a`) ||
		!strings.Contains(logs.String(), "successor=pod-b") {
		t.Errorf("pod-a did not hand the lease off to pod-b:\n%s", logs.String())
	}
	for hint := ""; hint != "handoff 5 pod-b "+key; {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil {
			t.Fatalf("no hand-off hint naming pod-b (last heard %q): %v", hint, err)
		}
		hint = n.Payload
	}
	waitFor(t, "Observe to see pod-b lead", func() bool { return sawLeader("pod-b", token2, "10.0.0.2:8080") })
	// Leading and Observe tell of pod-b's term as soon as it is won; its
	// Claim of the digest row commits after that (a loaded PostgreSQL 18
	// run checked the column fence before it, and found pod-a's token
	// still the fence, as it is until the claim).
	waitFor(t, "pod-b to claim the digest row", func() bool {
		var fence int64
		if err := pool.QueryRow(ctx, `SELECT fence FROM digests WHERE name = 'daily'`).Scan(&fence); err != nil {
			t.Fatal(err)
		}
		return fence == token2
	})

	// The three fence strengths refuse pod-a's old term.
	if err := sqlfence.WithLease(ctx, pool, key, token1, publish(token1, "too late")); !errors.Is(err, sqlfence.ErrLeaseNotHeld) {
		t.Errorf("a lease-guarded transaction of pod-a's ended term: %v; want ErrLeaseNotHeld", err)
	}
	outbox := sqlfence.Guard{Resource: "outbox"}
	if err := outbox.Claim(ctx, pool, token2, publish(token2, "pod-b's first")); err != nil {
		t.Fatalf("a fenced transaction claiming pod-b's token %d: %v", token2, err)
	}
	if err := outbox.Write(ctx, pool, token1, publish(token1, "too late")); !errors.Is(err, sqlfence.ErrFenced) {
		t.Errorf("a fenced transaction of pod-a's token %d after pod-b's: %v; want ErrFenced", token1, err)
	}
	if f, err := outbox.Floor(ctx, pool); err != nil || f != token2 {
		t.Errorf("the outbox's fence floor = %d, %v; want %d", f, err, token2)
	}
	if err := digests.Write(ctx, pool, "daily", token1, sqlfence.Assign("body", "too late")); !errors.Is(err, sqlfence.ErrFenced) {
		t.Errorf("a column-fenced write of pod-a's token %d after pod-b's claim: %v; want ErrFenced", token1, err)
	}
	_, err = pool.Exec(ctx, `UPDATE digests SET body = 'no fence condition', fence = $1 WHERE name = 'daily'`, token1)
	if err := sqlfence.FromError(err); !errors.Is(err, sqlfence.ErrFenced) {
		t.Errorf("an update lowering the fence column, past the trigger: %v; want ErrFenced", err)
	}
	var messages []string
	rows, err := pool.Query(ctx, `SELECT message FROM outbox ORDER BY token, message`)
	if err != nil {
		t.Fatal(err)
	}
	if messages, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || strings.Join(messages, "|") != "guarded by pod-a's lease|pod-b's first" {
		t.Errorf("the outbox holds %q, %v; want only the two accepted messages", messages, err)
	}

	// Asked from outside to resign, pod-b ends its term and, alone now,
	// campaigns again and leads with a higher token.
	steer := pgleader.NewPostgres(pool, pgleader.PollOnly(), pgleader.WithLogger(logger))
	if l, asked, err := steer.Resign(ctx, key, 0); err != nil || !asked || l.Holder != "pod-b" || l.Token != token2 {
		t.Fatalf("Resign(%q) as the application role = %+v, %v, %v; want pod-b's term %d asked", key, l, asked, err, token2)
	}
	waitFor(t, "pod-b to lead again after resigning", func() bool {
		st := b.el.Status()
		return st.Leading && st.Token > token2
	})
	if r := b.el.Status().LastEnd; r != pgleader.ReasonResigned {
		t.Errorf("pod-b's term %d ended %v; want resigned", token2, r)
	}

	// A set: two replicas share four partitions.
	partitions := keyNames("partition", 4)
	var sets []*runningSet
	for _, owner := range []string{"pod-a", "pod-b"} {
		sets = append(sets, startSet(t, pgleader.NewPostgres(rolePool(t, appURL), pgleader.WithLogger(logger)),
			pgleader.Spec{Key: "outbox", TTL: roleTTL}, partitions, pgleader.SetOptions{Owner: owner, Lead: quickBody, Logger: logger}))
		t.Cleanup(sets[len(sets)-1].cancel) // if the test ends before it stops them
	}
	eventually(t, 20*time.Second, func() bool {
		return sets[0].set.Status().Members == 2 && sets[1].set.Status().Members == 2 && fmt.Sprint(held(sets...)) == "[2 2]"
	}, func() string { return fmt.Sprintf("the set's replicas hold %v; want 2 each", held(sets...)) })
	for _, s := range sets {
		s.stop(t)
	}

	// A one-shot job: run once under the lease, ErrHeld at once elsewhere.
	jobs := pgleader.NewPostgres(rolePool(t, appURL), pgleader.WithLogger(logger))
	started, finish := make(chan int64, 1), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- pgleader.Do(ctx, jobs, pgleader.Spec{Key: "nightly-report", TTL: roleTTL}, func(ctx context.Context, t *pgleader.Term) error {
			started <- t.Token()
			<-finish
			return nil
		})
	}()
	if tok := <-started; tok != 1 {
		t.Errorf("Do ran the report with token %d; want 1", tok)
	}
	err = pgleader.Do(ctx, jobs, pgleader.Spec{Key: "nightly-report", TTL: roleTTL}, func(context.Context, *pgleader.Term) error {
		t.Error("Do ran the report twice at once")
		return nil
	})
	if !errors.Is(err, pgleader.ErrHeld) {
		t.Errorf("a second Do while the first runs: %v; want ErrHeld", err)
	}
	close(finish)
	if err := <-done; err != nil {
		t.Errorf("Do = %v", err)
	}

	b.cancel()
	if err := <-b.done; err != nil {
		t.Fatalf("pod-b's Run = %v", err)
	}
	b.done <- nil

	// The observer saw both replicas' terms start, and no renewal was
	// refused by the database.
	obs.mu.Lock()
	startedTerms := map[string]bool{}
	for _, o := range obs.all {
		var pgErr *pgconn.PgError
		if o.Kind == pgleader.ObserveRenewed && errors.As(o.Err, &pgErr) {
			t.Errorf("a renewal of %s's term %d was refused: %v", o.Owner, o.Token, o.Err)
		}
		if o.Kind == pgleader.ObserveTermStarted {
			startedTerms[fmt.Sprintf("%s %d", o.Owner, o.Token)] = true
		}
	}
	obs.mu.Unlock()
	for _, term := range []string{fmt.Sprintf("pod-a %d", token1), fmt.Sprintf("pod-b %d", token2)} {
		if !startedTerms[term] {
			t.Errorf("the observer did not see term %q start; saw %v", term, startedTerms)
		}
	}
	for _, bad := range []string{"level=ERROR", "42501", "permission denied", "preparing the hand-off failed", "rehearsing a hand-off"} {
		if strings.Contains(logs.String(), bad) {
			t.Errorf("as the application role, the logs say %q:\n%s", bad, logs.String())
		}
	}
}
