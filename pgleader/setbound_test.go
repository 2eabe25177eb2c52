package pgleader_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/internal/tcpproxy"
	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/pgleader/pgleadertest"
)

// setBoundSpec is long enough that a take-over before the keys' expiry
// cannot be the expiry's, even on a loaded machine.
func setBoundSpec(name string) pgleader.Spec {
	return pgleader.Spec{Key: name, TTL: 30 * time.Second, RenewEvery: 2 * time.Second,
		CampaignEvery: 500 * time.Millisecond, Margin: time.Second, YieldGrace: time.Second, ReleaseTimeout: time.Second}
}

// setTermLog records when each term of a set started and ended, by owner
// and key, on the local clock.
type setTermLog struct {
	mu    sync.Mutex
	terms []setTermRecord
}

type setTermRecord struct {
	owner, key   string
	token        int64
	started, end time.Time
	term         *pgleader.Term
}

func (l *setTermLog) body(owner string) func(context.Context, *pgleader.Term) error {
	return func(ctx context.Context, t *pgleader.Term) error {
		l.mu.Lock()
		i := len(l.terms)
		l.terms = append(l.terms, setTermRecord{owner: owner, key: t.Key(), token: t.Token(), started: time.Now(), term: t})
		l.mu.Unlock()
		select {
		case <-t.Ending():
		case <-ctx.Done():
		}
		l.mu.Lock()
		l.terms[i].end = time.Now()
		l.mu.Unlock()
		return nil
	}
}

func (l *setTermLog) all() []setTermRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]setTermRecord(nil), l.terms...)
}

// retaken waits until each of keys is held live by a term with a token
// above the one given.
func retaken(t *testing.T, pool *pgxpool.Pool, keys map[string]int64, within time.Duration) {
	t.Helper()
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	left := func() []string {
		var out []string
		now := heldBy(t, pool, names)
		for k, tok := range keys {
			if now[k].Token <= tok {
				out = append(out, k)
			}
		}
		return out
	}
	eventually(t, within, func() bool { return len(left()) == 0 }, func() string { return fmt.Sprintf("not live again under a new term: %v", left()) })
}

// memberPID is the pid of owner's bound session in set, 0 if unbound.
func memberPID(t *testing.T, pool *pgxpool.Pool, set, owner string) int32 {
	t.Helper()
	var pid *int32
	err := pool.QueryRow(context.Background(), `SELECT pid FROM pgleader.set_member WHERE set_name = $1 AND owner = $2`, set, owner).Scan(&pid)
	if err != nil || pid == nil {
		return 0
	}
	return *pid
}

// heldBy returns, for each key of keys held live, its holder and expiry.
func heldBy(t *testing.T, pool *pgxpool.Pool, keys []string) map[string]pgleader.Lease {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT key, holder, token, expires_at, acquired_at FROM pgleader.lease
		WHERE key = ANY ($1) AND holder IS NOT NULL AND expires_at > clock_timestamp()`, keys)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]pgleader.Lease{}
	for rows.Next() {
		var l pgleader.Lease
		if err := rows.Scan(&l.Key, &l.Holder, &l.Token, &l.ExpiresAt, &l.AcquiredAt); err != nil {
			t.Fatal(err)
		}
		out[l.Key] = l
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSetSessionBoundTerminated: a member's bound session is terminated
// while its process lives. The other member lapses and takes its keys long
// before their expiry, the member ends all its terms as lost (the overlap
// of belief is printed), binds a new session and takes its share again.
func TestSetSessionBoundTerminated(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	spec := setBoundSpec("sb-term")
	keys := keyNames("st", 20)
	var rec setTermLog
	a := startSet(t, pgleader.NewPostgres(db.NewPool(t)), spec, keys, pgleader.SetOptions{Owner: "a", SessionBound: true, Lead: rec.body("a")})
	b := startSet(t, pgleader.NewPostgres(db.NewPool(t)), spec, keys, pgleader.SetOptions{Owner: "b", SessionBound: true, Lead: rec.body("b")})
	defer a.stop(t)
	defer b.stop(t)
	waitHeld(t, 20*time.Second, []*runningSet{a, b}, 10, 10)
	pid := memberPID(t, db.Pool, spec.Key, "a")
	if pid == 0 || memberPID(t, db.Pool, spec.Key, "b") == 0 {
		t.Fatal("a member of a session-bound set is not bound")
	}
	aKeys := map[string]int64{}
	for k, l := range heldBy(t, db.Pool, keys) {
		if l.Holder == "a" {
			aKeys[k] = l.Token
		}
	}

	killed := time.Now()
	mustExec(t, db.Pool, `SELECT pg_terminate_backend($1)`, pid)
	retaken(t, db.Pool, aKeys, spec.TTL/2)
	took := time.Since(killed)
	if took >= spec.TTL-spec.Margin {
		t.Fatalf("a's keys were live again %v after the termination: that is the expiry, not the session's end", took)
	}
	// Every term of a that ran at the termination ended lost; the overlap
	// of belief is how long a's body went on after b's began, per key.
	var overlap time.Duration
	ended := map[string]time.Time{}
	for _, r := range rec.all() {
		if r.owner == "a" && r.started.Before(killed) {
			if r.end.IsZero() {
				t.Fatalf("a's term of %s did not end after its session was terminated", r.key)
			}
			if reason := r.term.Reason(); reason != pgleader.ReasonLost {
				t.Errorf("a's term of %s ended %v; want lost", r.key, reason)
			}
			ended[r.key] = r.end
		}
	}
	for _, r := range rec.all() {
		if _, was := aKeys[r.key]; r.owner == "b" && was && r.started.After(killed) {
			overlap = max(overlap, ended[r.key].Sub(r.started))
		}
	}
	t.Logf("terminated at 0; a's keys were live again at %v; the longest overlap of belief %v", took, overlap)

	// a binds a new session and, once the members rebalance (b hands a
	// its share), leads its share again.
	eventually(t, 10*time.Second, func() bool { p := memberPID(t, db.Pool, spec.Key, "a"); return p != 0 && p != pid },
		func() string { return "a did not bind a new session" })
	waitHeld(t, 20*time.Second, []*runningSet{a, b}, 10, 10)

	// The keys handed to a are bound to its new session: its end frees
	// them at once too (a binds again and may win some back itself).
	aKeys2 := map[string]int64{}
	for k, l := range heldBy(t, db.Pool, keys) {
		if l.Holder == "a" {
			aKeys2[k] = l.Token
		}
	}
	killed = time.Now()
	mustExec(t, db.Pool, `SELECT pg_terminate_backend($1)`, memberPID(t, db.Pool, spec.Key, "a"))
	retaken(t, db.Pool, aKeys2, spec.TTL/2)
	if took := time.Since(killed); took >= spec.TTL-spec.Margin {
		t.Fatalf("a's keys were live again %v after the second termination: that is the expiry", took)
	}
}

// setChildEnv names the database a child process of the test binary runs
// a session-bound set member against (see runSetChild).
const setChildEnv = "PGLEADER_TEST_SET_CHILD"

// runSetChild runs, in a child process of the test binary, the member
// "child" of set sb-child over keys sc-000 to sc-019 with the TTL in
// seconds of PGLEADER_TEST_SET_TTL, until it is killed, and prints a line
// "lead KEY TOKEN" when a term starts. It reports whether this process is
// such a child.
func runSetChild() bool {
	u := os.Getenv(setChildEnv)
	if u == "" {
		return false
	}
	ttl, err := time.ParseDuration(os.Getenv("PGLEADER_TEST_SET_TTL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	pool, err := pgxpool.New(context.Background(), u)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	var out sync.Mutex
	set, err := pgleader.NewSet(pgleader.NewPostgres(pool), pgleader.Spec{Key: "sb-child", TTL: ttl}, keyNames("sc", 20),
		pgleader.SetOptions{Owner: "child", SessionBound: true, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
			Lead: func(ctx context.Context, t *pgleader.Term) error {
				out.Lock()
				fmt.Printf("lead %s %d\n", t.Key(), t.Token())
				out.Unlock()
				<-t.Ending()
				return nil
			}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	err = set.Run(context.Background())
	fmt.Fprintln(os.Stderr, "child: Run returned", err)
	os.Exit(1)
	return true
}

// setChild is a running child member: its process and the keys it leads.
type setChild struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	lead map[string]int64
}

func startSetChild(t *testing.T, db *pgtest.DB, ttl time.Duration) *setChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), setChildEnv+"="+db.URL, "PGLEADER_TEST_SET_TTL="+ttl.String())
	var stderr pgtest.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &setChild{cmd: cmd, lead: map[string]int64{}}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("the child's log:\n%s", stderr.String())
		}
	})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var k string
			var tok int64
			if _, err := fmt.Sscanf(sc.Text(), "lead %s %d", &k, &tok); err == nil {
				c.mu.Lock()
				c.lead[k] = tok
				c.mu.Unlock()
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	return c
}

func (c *setChild) leads() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.lead)
}

// startBeside starts the in-process member "b" of the child's set and
// waits until the two share the keys.
func startBeside(t *testing.T, db *pgtest.DB, ttl time.Duration, child *setChild, rec *setTermLog) *runningSet {
	t.Helper()
	b := startSet(t, pgleader.NewPostgres(db.NewPool(t)), pgleader.Spec{Key: "sb-child", TTL: ttl}, keyNames("sc", 20),
		pgleader.SetOptions{Owner: "b", SessionBound: true, Lead: rec.body("b")})
	eventually(t, 30*time.Second, func() bool {
		return b.set.Status().Held == 10 && len(heldBy(t, db.Pool, keyNames("sc", 20))) == 20 && child.leads() >= 10
	}, func() string {
		return fmt.Sprintf("b holds %d, the child led %d, %d keys held", b.set.Status().Held, child.leads(), len(heldBy(t, db.Pool, keyNames("sc", 20))))
	})
	return b
}

// TestSetSessionBoundSIGKILL: the child member's process is killed. The
// other member takes its keys long before their expiry, each with a
// higher token, and a write fenced by the dead member's token is refused.
func TestSetSessionBoundSIGKILL(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ttl := 30 * time.Second
	child := startSetChild(t, db, ttl)
	var rec setTermLog
	b := startBeside(t, db, ttl, child, &rec)
	defer b.stop(t)
	before := heldBy(t, db.Pool, keyNames("sc", 20))

	killed := time.Now()
	if err := child.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, ttl/2, func() bool { return b.set.Status().Held == 20 },
		func() string { return fmt.Sprintf("b holds %d; want all 20", b.set.Status().Held) })
	took := time.Since(killed)
	after := heldBy(t, db.Pool, keyNames("sc", 20))
	for k, l := range before {
		if l.Holder != "child" {
			continue
		}
		n := after[k]
		if n.Holder != "b" || n.Token <= l.Token || !n.AcquiredAt.Before(l.ExpiresAt) {
			t.Errorf("%s after the kill: %+v; want b's, with a token above %d, acquired before the child's expiry %v", k, n, l.Token, l.ExpiresAt)
		}
		// The dead member's token is fenced out by b's claim.
		mustExec(t, db.Pool, `SELECT pgleader.fence_claim($1, $2)`, "res-"+k, n.Token)
		if _, err := db.Pool.Exec(context.Background(), `SELECT pgleader.fence_write($1, $2)`, "res-"+k, l.Token); err == nil {
			t.Errorf("a write fenced by the dead member's token %d on %s landed after b's claim at %d", l.Token, k, n.Token)
		}
	}
	t.Logf("SIGKILL at 0; b held all 20 keys at %v (TTL %v)", took, ttl)
	if took >= ttl-time.Second {
		t.Fatalf("b held every key %v after the kill: that is the expiry, not the session's end", took)
	}
}

// noEarlyTake checks that b took none of the child's keys before the
// expiry they had when the child stopped answering: its session lives.
func noEarlyTake(t *testing.T, db *pgtest.DB, b *runningSet, ttl time.Duration, before map[string]pgleader.Lease, what string) {
	t.Helper()
	eventually(t, ttl+20*time.Second, func() bool { return b.set.Status().Held == 20 },
		func() string {
			return fmt.Sprintf("b holds %d; want all 20 once the child's keys expired", b.set.Status().Held)
		})
	after := heldBy(t, db.Pool, keyNames("sc", 20))
	for k, l := range before {
		if l.Holder != "b" && after[k].AcquiredAt.Before(l.ExpiresAt) {
			t.Errorf("%s: b acquired %s at %v, before the child's term expired at %v: an early take-over while the child's session lived",
				what, k, after[k].AcquiredAt, l.ExpiresAt)
		}
	}
}

// TestSetSessionBoundSIGSTOP: the child member's process is stopped; its
// session lives, so its keys are taken only once they expire.
func TestSetSessionBoundSIGSTOP(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ttl := 4 * time.Second
	child := startSetChild(t, db, ttl)
	var rec setTermLog
	b := startBeside(t, db, ttl, child, &rec)
	defer b.stop(t)
	if err := child.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// A tick in flight at the stop may still renew: read the expiries once
	// it would have landed (a later expiry only makes the check stricter).
	time.Sleep(500 * time.Millisecond)
	before := heldBy(t, db.Pool, keyNames("sc", 20))
	noEarlyTake(t, db, b, ttl, before, "SIGSTOP")
}

// TestSetSessionBoundPartition: every connection of a member goes through
// a proxy that stops forwarding (a partition): the server does not see
// its sessions end, so the other member takes its keys only at their
// expiry, and the cut member's terms end by its own timeline.
func TestSetSessionBoundPartition(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ttl := 4 * time.Second
	spec := pgleader.Spec{Key: "sb-part", TTL: ttl}
	keys := keyNames("sc", 20)
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := tcpproxy.Start(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	u.Host = proxy.Addr()
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var rec setTermLog
	a := startSet(t, pgleader.NewPostgres(pool), spec, keys, pgleader.SetOptions{Owner: "a", SessionBound: true, Lead: rec.body("a")})
	b := startSet(t, pgleader.NewPostgres(db.NewPool(t)), spec, keys, pgleader.SetOptions{Owner: "b", SessionBound: true, Lead: rec.body("b")})
	defer b.stop(t)
	waitHeld(t, 20*time.Second, []*runningSet{a, b}, 10, 10)
	if memberPID(t, db.Pool, spec.Key, "a") == 0 {
		t.Fatal("a is not bound")
	}
	proxy.Blackhole()
	cut := time.Now()
	time.Sleep(500 * time.Millisecond)
	before := heldBy(t, db.Pool, keys)
	eventually(t, ttl+20*time.Second, func() bool { return b.set.Status().Held == 20 },
		func() string { return fmt.Sprintf("b holds %d; want all 20", b.set.Status().Held) })
	after := heldBy(t, db.Pool, keys)
	for k, l := range before {
		if l.Holder == "a" && after[k].AcquiredAt.Before(l.ExpiresAt) {
			t.Errorf("b acquired %s at %v, before a's term expired at %v: an early take-over across a partition", k, after[k].AcquiredAt, l.ExpiresAt)
		}
	}
	// a's terms ended by its timeline, before their expiry.
	for _, r := range rec.all() {
		if r.owner == "a" && r.started.Before(cut) && (r.end.IsZero() || r.end.After(cut.Add(ttl))) {
			t.Errorf("a's term of %s ended at %v after the cut; want before the TTL", r.key, r.end.Sub(cut))
		}
	}
	a.cancel()
	proxy.Restore()
	<-a.done
}

// TestSetSessionBoundRefused: the option needs a backend that opens
// sessions of its own, a server that keeps idle sessions for the TTL, and
// no pooler that shares sessions between clients; Run falls back to the
// TTL behind a pooler in session mode.
func TestSetSessionBoundRefused(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	keys := keyNames("sr", 4)
	opts := func(owner string, log *slog.Logger) pgleader.SetOptions {
		return pgleader.SetOptions{Owner: owner, SessionBound: true, Lead: quickBody, Logger: log}
	}
	if _, err := pgleader.NewSet(pgleadertest.NewBackend(), fastSpec("sr"), keys, opts("a", nil)); !errors.Is(err, pgleader.ErrInvalid) {
		t.Errorf("NewSet over the in-memory backend with SessionBound: %v; want ErrInvalid", err)
	}
	if _, err := pgleader.NewSet(pgleader.NewPostgres(db.Conn(t)), fastSpec("sr"), keys, opts("a", nil)); !errors.Is(err, pgleader.ErrInvalid) {
		t.Errorf("NewSet over a single connection with SessionBound: %v; want ErrInvalid", err)
	}

	run := func(pool *pgxpool.Pool, log *slog.Logger) error {
		s, err := pgleader.NewSet(pgleader.NewPostgres(pool, pgleader.PollOnly()), pgleader.Spec{Key: "sr", TTL: 30 * time.Second}, keys, opts("a", log))
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		return s.Run(rctx)
	}
	// idle_session_timeout exists from PostgreSQL 14; on 13
	// tcp_user_timeout shows the same refusal over TCP.
	setting, value := "idle_session_timeout", "5s"
	var version int
	if err := db.Pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version < 140000 {
		setting, value = "tcp_user_timeout", "5000"
	}
	short := db.NewPoolConfig(t, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams[setting] = value })
	if err := run(short, nil); !errors.Is(err, pgleader.ErrInvalid) || !pgleader.Permanent(err) || !strings.Contains(err.Error(), setting) {
		t.Errorf("Run with %s %s below a TTL of 30s: %v; want a permanent ErrInvalid naming the setting", setting, value, err)
	}

	pool, err := pgxpool.New(ctx, db.Pgbouncer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := run(pool, nil); !errors.Is(err, pgleader.ErrInvalid) || !strings.Contains(err.Error(), "pooler") {
		t.Errorf("Run through pgbouncer in transaction mode with SessionBound: %v; want a permanent ErrInvalid naming the pooler", err)
	}

	// Session mode: the member runs, unbound, and says so.
	spool, err := pgxpool.New(ctx, db.PgbouncerSession(t))
	if err != nil {
		t.Fatal(err)
	}
	defer spool.Close()
	var logs pgtest.Buffer
	s := startSet(t, pgleader.NewPostgres(spool), fastSpec("sr-session"), keys, opts("a", slog.New(slog.NewTextHandler(&logs, nil))))
	waitHeld(t, 20*time.Second, []*runningSet{s}, 4)
	s.stop(t)
	if !strings.Contains(logs.String(), "cannot bind a member to a pooler's sessions") {
		t.Errorf("no log of the fallback to the TTL; logs:\n%s", logs.String())
	}
	var bound int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pgleader.set_member WHERE pid IS NOT NULL`).Scan(&bound); err != nil {
		t.Fatal(err)
	}
	if bound != 0 {
		t.Errorf("%d members bound through a session-mode pooler; want none", bound)
	}
}

func mustExec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}
