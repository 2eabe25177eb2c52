package pgleader_test

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/internal/tcpproxy"
	"github.com/pgleader/pgleader/pgleader"
)

// boundSpec is long enough that a take-over before the lease's expiry
// cannot be the expiry's, even on a loaded machine.
var boundSpec = pgleader.Spec{Key: "bound", TTL: 30 * time.Second, RenewEvery: 2 * time.Second,
	CampaignEvery: 500 * time.Millisecond, Margin: time.Second, YieldGrace: time.Second, ReleaseTimeout: time.Second}

// boundTerms records each term's token, start and end on the local clock.
type boundTerms struct {
	mu    sync.Mutex
	terms []boundTerm
}

type boundTerm struct {
	owner        string
	token        int64
	started, end time.Time
	term         *pgleader.Term
}

func (b *boundTerms) body(owner string) func(context.Context, *pgleader.Term) error {
	return func(ctx context.Context, t *pgleader.Term) error {
		b.mu.Lock()
		i := len(b.terms)
		b.terms = append(b.terms, boundTerm{owner: owner, token: t.Token(), started: time.Now(), term: t})
		b.mu.Unlock()
		select {
		case <-t.Ending():
		case <-ctx.Done():
		}
		b.mu.Lock()
		b.terms[i].end = time.Now()
		b.mu.Unlock()
		return nil
	}
}

func (b *boundTerms) all() []boundTerm {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]boundTerm(nil), b.terms...)
}

func (b *boundTerms) waitFor(t *testing.T, n int, within time.Duration) []boundTerm {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if all := b.all(); len(all) >= n {
			return all
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%d terms after %v, want %d: %+v", len(b.all()), within, n, b.all())
	return nil
}

func boundPID(t *testing.T, pool *pgxpool.Pool, key string, token int64) int32 {
	t.Helper()
	var pid int32
	if err := pool.QueryRow(context.Background(),
		`SELECT pid FROM pgleader.lease_binding WHERE key = $1 AND token = $2`, key, token).Scan(&pid); err != nil {
		t.Fatalf("the binding of token %d: %v", token, err)
	}
	return pid
}

// TestSessionBoundTerminated ends the leader's session with
// pg_terminate_backend while its process lives (docs/model.md's one
// exception to P1): the waiting candidate leads long before the lease's
// expiry, with the next token, and the old holder learns of the end
// through its pending read and ends its term as lost; the overlap of
// belief (the successor's start to the old term's end) is printed.
func TestSessionBoundTerminated(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	var rec boundTerms
	spec := boundSpec
	a := start(t, pgleader.NewPostgres(db.NewPool(t)), spec,
		pgleader.Options{Owner: "a", SessionBound: true, Lead: rec.body("a")})
	first := rec.waitFor(t, 1, 10*time.Second)[0]
	b := start(t, pgleader.NewPostgres(db.NewPool(t)), spec,
		pgleader.Options{Owner: "b", SessionBound: true, Lead: rec.body("b")})
	defer b.stop(t)
	defer a.stop(t)
	// b is waiting on a's session once it has campaigned once.
	waitCandidate(t, db.Pool, spec.Key, "b")
	pid := boundPID(t, db.Pool, spec.Key, first.token)

	killed := time.Now()
	if _, err := db.Pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	terms := rec.waitFor(t, 2, spec.TTL/2)
	second := terms[1]
	if second.owner != "b" || second.token <= first.token {
		t.Fatalf("after the termination: %+v, want b with a token above %d", second, first.token)
	}
	var ended time.Time
	deadline := time.Now().Add(5 * time.Second)
	for ended.IsZero() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
		ended = rec.all()[0].end
	}
	if ended.IsZero() {
		t.Fatal("a's term did not end after its session was terminated")
	}
	if r := first.term.Reason(); r != pgleader.ReasonLost {
		t.Errorf("a's term ended %v, want lost", r)
	}
	t.Logf("terminated at 0; b leads at %v; a's body told at %v (overlap of belief %v)",
		second.started.Sub(killed), ended.Sub(killed), max(ended.Sub(second.started), 0))
	if second.started.Sub(killed) >= spec.TTL-spec.Margin {
		t.Errorf("b led %v after the termination: that is the expiry, not the session's end", second.started.Sub(killed))
	}
}

// waitCandidate waits until owner is a registered candidate of key.
func waitCandidate(t *testing.T, pool *pgxpool.Pool, key, owner string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		if err := pool.QueryRow(context.Background(),
			`SELECT count(*) FROM pgleader.candidate WHERE key = $1 AND owner = $2`, key, owner).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			time.Sleep(100 * time.Millisecond) // its wait has started
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s never registered as a candidate of %s", owner, key)
}

// TestSessionBoundStopAndRestart: a stopped leader hands off to the bound
// candidate, whose term is bound (by its first renewal, since a hand-off
// is confirmed there); a leader that stops without candidates releases and
// lets go of its session lock, and a new elector binds its own term.
func TestSessionBoundStopAndRestart(t *testing.T) {
	db := pgtest.New(t)
	var rec boundTerms
	spec := boundSpec
	spec.RenewEvery = 300 * time.Millisecond
	pa := pgleader.NewPostgres(db.NewPool(t))
	a := start(t, pa, spec, pgleader.Options{Owner: "a", SessionBound: true, Lead: rec.body("a")})
	first := rec.waitFor(t, 1, 10*time.Second)[0]
	b := start(t, pgleader.NewPostgres(db.NewPool(t)), spec, pgleader.Options{Owner: "b", SessionBound: true, Lead: rec.body("b")})
	defer b.stop(t)
	waitCandidate(t, db.Pool, spec.Key, "b")
	stopped := time.Now()
	a.stop(t)
	second := rec.waitFor(t, 2, spec.TTL/2)[1]
	t.Logf("a stopped; b leads %v later", second.started.Sub(stopped))
	if second.owner != "b" || second.token <= first.token {
		t.Fatalf("after a's stop: %+v", second)
	}
	// The hand-off's term binds at its first renewal.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := db.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM pgleader.lease_binding WHERE key = $1 AND token = $2 AND holder = 'b'`, spec.Key, second.token).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b's term %d was never bound", second.token)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSessionBoundRefused: Run refuses the option where a session cannot
// hold a bound term, before campaigning: a server that ends idle sessions
// sooner than the TTL, a pooler between the replica and PostgreSQL, and a
// backend that has no connections of its own.
func TestSessionBoundRefused(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	// idle_session_timeout exists from PostgreSQL 14; on 13 (where a
	// connection that sets it is refused) tcp_user_timeout, which 12 has,
	// shows the same refusal over the TCP connections the tests use.
	setting, value := "idle_session_timeout", "5s"
	var version int
	var tcp bool
	if err := db.Pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, inet_client_addr() IS NOT NULL`).Scan(&version, &tcp); err != nil {
		t.Fatal(err)
	}
	if version < 140000 {
		if !tcp {
			t.Fatalf("PostgreSQL %d has no idle_session_timeout and the test's connection is not TCP: no setting left to refuse", version)
		}
		setting, value = "tcp_user_timeout", "5000"
	}
	short := db.NewPoolConfig(t, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams[setting] = value })
	el, err := pgleader.New(pgleader.NewPostgres(short), boundSpec, pgleader.Options{Owner: "a", SessionBound: true, Lead: idle, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	err = el.Run(rctx)
	if !errors.Is(err, pgleader.ErrInvalid) || !pgleader.Permanent(err) || !strings.Contains(err.Error(), setting) {
		t.Errorf("Run with %s %s below a TTL of 30s: %v, want a permanent ErrInvalid naming the setting", setting, value, err)
	}

	conn := db.Conn(t)
	if _, err := pgleader.New(pgleader.NewPostgres(conn), boundSpec, pgleader.Options{SessionBound: true, Lead: idle}); !errors.Is(err, pgleader.ErrInvalid) {
		t.Errorf("New over a single connection with SessionBound: %v, want ErrInvalid", err)
	}

	url := db.Pgbouncer(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	el, err = pgleader.New(pgleader.NewPostgres(pool, pgleader.PollOnly()), boundSpec, pgleader.Options{Owner: "a", SessionBound: true, Lead: idle, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	err = el.Run(rctx)
	if !errors.Is(err, pgleader.ErrInvalid) || !strings.Contains(err.Error(), "pooler") {
		t.Errorf("Run through pgbouncer with SessionBound: %v, want a permanent ErrInvalid naming the pooler", err)
	}
}

// TestSessionBoundAppRole: the option works for an application role given
// the application's functions by grant_usage (version 19's functions are
// among them), and another role can neither campaign for the key nor lapse
// its term, even once the holder's session has ended.
func TestSessionBoundAppRole(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	_, appURL := db.NewRole(t, "SELECT pgleader.grant_usage($1)")
	_, otherURL := db.NewRole(t, "SELECT pgleader.grant_usage($1)")
	var rec boundTerms
	spec := boundSpec
	a := start(t, pgleader.NewPostgres(rolePool(t, appURL)), spec, pgleader.Options{Owner: "a", SessionBound: true, Lead: rec.body("a")})
	defer a.stop(t)
	first := rec.waitFor(t, 1, 10*time.Second)[0]
	pid := boundPID(t, db.Pool, spec.Key, first.token)

	other, err := pgleader.New(pgleader.NewPostgres(rolePool(t, otherURL)), spec,
		pgleader.Options{Owner: "o", SessionBound: true, Lead: idle, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := other.Run(rctx); !errors.Is(err, pgleader.ErrForbidden) {
		t.Errorf("another role's session-bound Run on the key: %v, want ErrForbidden", err)
	}
	var holder string
	var token int64
	if err := db.Pool.QueryRow(ctx, `SELECT coalesce(holder, ''), token FROM pgleader.lease WHERE key = $1`, spec.Key).Scan(&holder, &token); err != nil {
		t.Fatal(err)
	}
	if holder == "o" || token > first.token+1 {
		t.Errorf("after the other role's campaign the lease is %q at token %d", holder, token)
	}

	b := start(t, pgleader.NewPostgres(rolePool(t, appURL)), spec, pgleader.Options{Owner: "b", SessionBound: true, Lead: rec.body("b")})
	defer b.stop(t)
	terms := rec.waitFor(t, 2, spec.TTL/2)
	if terms[1].token <= first.token {
		t.Errorf("after a's session ended: %+v", terms[1])
	}
}

// TestSessionBoundRunOnce: RunOnce binds its term too, and lets go of the
// session (and its lock) when it returns.
func TestSessionBoundRunOnce(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	var bound int
	el, err := pgleader.New(pgleader.NewPostgres(db.NewPool(t)), boundSpec, pgleader.Options{Owner: "once", SessionBound: true, Logger: quiet,
		Lead: func(ctx context.Context, tm *pgleader.Term) error {
			return db.Pool.QueryRow(ctx, `SELECT count(*) FROM pgleader.lease_binding WHERE key = $1 AND token = $2 AND holder = 'once'`,
				boundSpec.Key, tm.Token()).Scan(&bound)
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := el.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if bound != 1 {
		t.Errorf("RunOnce's term was not bound: %d bindings", bound)
	}
	if locks := bindingLocks(t, db.Pool); locks != 0 {
		t.Errorf("%d session locks left after RunOnce returned", locks)
	}
}

// bindingLocks counts the binding locks (pgleader._binding_lock's class)
// held in pool's database.
func bindingLocks(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var locks int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1885826149
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&locks); err != nil {
		t.Fatal(err)
	}
	return locks
}

// campaignCounter counts the session-bound campaigns run on connections
// of a pool's configuration.
type campaignCounter struct {
	mu sync.Mutex
	n  int
}

func (c *campaignCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, "campaign_bound") {
		c.mu.Lock()
		c.n++
		c.mu.Unlock()
	}
	return ctx
}

func (c *campaignCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *campaignCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// TestSessionBoundGraceWaits: during the server's grace (after a crash
// restart or a promotion), a session-bound candidate waits for the
// grace's end, as one without the option does, instead of campaigning
// again at once. (The first cut reported the grace as a free lease, and
// an Elector campaigned hundreds of times a second until it ended: the
// chaos run of 2026-12-03 counted some 10,000 refused campaigns.)
func TestSessionBoundGraceWaits(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `DELETE FROM pgleader.server_epoch`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `SELECT pgleader.grace()`); err != nil {
		t.Fatal(err)
	}
	grace := 2 * time.Second
	if _, err := db.Pool.Exec(ctx, `UPDATE pgleader.server_epoch SET grace_until = clock_timestamp() + $1::interval`, grace.String()); err != nil {
		t.Fatal(err)
	}
	var c campaignCounter
	pool := db.NewPoolConfig(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = &c })
	var rec boundTerms
	began := time.Now()
	a := start(t, pgleader.NewPostgres(pool), boundSpec,
		pgleader.Options{Owner: "a", SessionBound: true, Lead: rec.body("a")})
	defer a.stop(t)
	first := rec.waitFor(t, 1, grace+10*time.Second)[0]
	if first.started.Sub(began) < grace-200*time.Millisecond {
		t.Errorf("a led %v after the grace began, before its end at %v", first.started.Sub(began), grace)
	}
	// One campaign at the start, one at the grace's end, and a few more
	// if a wait ends early on a loaded machine; not one per round trip.
	if n := c.count(); n > 10 {
		t.Errorf("%d campaigns in a grace of %v, want a wait for its end", n, grace)
	}
}

// TestSessionBoundSessionPooler: through a pooler in session mode, which
// keeps a client's server session for the next client when the client
// goes, Options.SessionBound falls back to the TTL: the terms won are not
// bound, the fallback is logged, and when the leader's connections are
// cut (its process gone, as far as the pooler can tell) the other replica
// leads only after the dead term's expiry, not on the pooler's reuse of
// its server session.
func TestSessionBoundSessionPooler(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	via, err := url.Parse(db.PgbouncerSession(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := tcpproxy.Start(via.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	cut := *via
	cut.Host = proxy.Addr()
	pool := func(u string) *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(u)
		if err != nil {
			t.Fatal(err)
		}
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	spec := pgleader.Spec{Key: "bound-session-pooler", TTL: 3 * time.Second, RenewEvery: time.Second,
		CampaignEvery: 200 * time.Millisecond, Margin: 500 * time.Millisecond, YieldGrace: 200 * time.Millisecond, ReleaseTimeout: 500 * time.Millisecond}
	var logs pgtest.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	var rec boundTerms
	a := start(t, pgleader.NewPostgres(pool(cut.String())), spec, pgleader.Options{Owner: "a", SessionBound: true, Lead: rec.body("a"), Logger: logger})
	defer a.cancel()
	first := rec.waitFor(t, 1, 20*time.Second)[0]
	if first.owner != "a" {
		t.Fatalf("first term by %q, want a", first.owner)
	}
	if !strings.Contains(logs.String(), "cannot bind terms to a pooler's sessions") {
		t.Errorf("no log of the fallback to the TTL; logs:\n%s", logs.String())
	}
	b := start(t, pgleader.NewPostgres(pool(via.String())), spec, pgleader.Options{Owner: "b", SessionBound: true, Lead: rec.body("b")})
	defer b.stop(t)
	time.Sleep(spec.CampaignEvery * 3) // b campaigns and loses

	var bindings int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pgleader.lease_binding WHERE key = $1`, spec.Key).Scan(&bindings); err != nil {
		t.Fatal(err)
	}
	if bindings != 0 {
		t.Errorf("%d bindings of the key through a session-mode pooler, want none", bindings)
	}

	proxy.Cut()
	var expires time.Time
	var holder string
	if err := db.Pool.QueryRow(ctx, `SELECT holder, expires_at FROM pgleader.lease WHERE key = $1`, spec.Key).Scan(&holder, &expires); err != nil {
		t.Fatal(err)
	}
	if holder != "a" {
		t.Fatalf("holder at the cut %q, want a", holder)
	}
	second := rec.waitFor(t, 2, 20*time.Second)[1]
	if second.owner != "b" {
		t.Fatalf("second term by %q, want b", second.owner)
	}
	var acquired time.Time
	if err := db.Pool.QueryRow(ctx, `SELECT acquired_at FROM pgleader.lease WHERE key = $1 AND token = $2`, spec.Key, second.token).Scan(&acquired); err != nil {
		t.Fatal(err)
	}
	if acquired.Before(expires) {
		t.Errorf("b acquired at %v, %v before a's term expired (%v): an early take-over through a session-mode pooler",
			acquired, expires.Sub(acquired), expires)
	}
}

// TestSessionBoundSessionPoolerRunOnce: RunOnce through a pooler in session
// mode falls back to the TTL as Run does: its one term runs, is not bound,
// the fallback is logged, and no session lock is left behind when it
// returns.
func TestSessionBoundSessionPoolerRunOnce(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(db.PgbouncerSession(t))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var logs pgtest.Buffer
	var ran bool
	var bindings int
	el, err := pgleader.New(pgleader.NewPostgres(pool), boundSpec, pgleader.Options{Owner: "once", SessionBound: true,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Lead: func(ctx context.Context, tm *pgleader.Term) error {
			ran = true
			return db.Pool.QueryRow(ctx, `SELECT count(*) FROM pgleader.lease_binding WHERE key = $1`, boundSpec.Key).Scan(&bindings)
		}})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := el.RunOnce(rctx); err != nil {
		t.Fatalf("RunOnce through a session-mode pooler: %v", err)
	}
	if !ran {
		t.Fatal("RunOnce returned without running its body")
	}
	if bindings != 0 {
		t.Errorf("%d bindings of RunOnce's term through a session-mode pooler, want none", bindings)
	}
	if !strings.Contains(logs.String(), "cannot bind terms to a pooler's sessions") {
		t.Errorf("no log of the fallback to the TTL; logs:\n%s", logs.String())
	}
	if locks := bindingLocks(t, db.Pool); locks != 0 {
		t.Errorf("%d session locks left after RunOnce returned", locks)
	}
	var holder *string
	if err := db.Pool.QueryRow(ctx, `SELECT holder FROM pgleader.lease WHERE key = $1`, boundSpec.Key).Scan(&holder); err != nil {
		t.Fatal(err)
	}
	if holder != nil {
		t.Errorf("the lease is held by %q after RunOnce returned, want released", *holder)
	}
}
