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
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/sqlfence"
)

// roleTTL is the TTL of the services of these tests: renewals every second
// and campaigns every 250ms, so the tests take seconds, while a renewal may
// still be a second late on a busy machine before a term starts ending.
const roleTTL = 3 * time.Second

// roleService is one application of a shared database, on a login role of
// its own: two replicas, each with a pool that connects as the role and one
// backend shared by an Elector on the service's key and a Set of its
// shards. The leader publishes to an outbox through a fenced transaction on
// the service's own fence resource.
type roleService struct {
	name     string // "a" or "b": the start of its keys and resource
	role     string
	key      string   // the Elector's key
	resource string   // the fence resource its leader writes under
	shards   []string // the Set's keys, named after the service
	replicas []*roleReplica
	obs      observations  // every observation of both replicas' Electors
	logs     pgtest.Buffer // both replicas' logs, at Info and above

	mu       sync.Mutex
	failures []error // writes the fence refused, or that failed otherwise
}

type roleReplica struct {
	owner   string
	pool    *pgxpool.Pool
	backend *pgleader.Postgres
	el      *pgleader.Elector
	set     *pgleader.Set
	cancel  context.CancelFunc
	done    chan error // the Elector's Run and the Set's Run
	once    sync.Once
}

// rolePool opens a pool that connects as the role of roleURL, closed when
// the test ends.
func rolePool(t *testing.T, roleURL string) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := pgxpool.New(ctx, roleURL)
	if err != nil {
		t.Fatalf("pool as %s: %v", roleURL, err)
	}
	t.Cleanup(p.Close)
	return p
}

// roleConn opens one connection as the role of roleURL, closed when the
// test ends.
func roleConn(t *testing.T, roleURL string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, roleURL)
	if err != nil {
		t.Fatalf("connect as %s: %v", roleURL, err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// wantRefused fails the test unless err is the refusal of an operation on
// another role's key or resource: SQLSTATE 42501 naming the role it
// belongs to.
func wantRefused(t *testing.T, what string, err error, owner string) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" || !strings.Contains(pgErr.Message, "belongs to role "+owner) {
		t.Errorf("%s: err = %v; want SQLSTATE 42501, belongs to role %s", what, err, owner)
	}
}

// createOutbox creates the table the services publish to, as the
// database's owner, and lets the roles insert into it. Each row records the
// role that wrote it.
func createOutbox(t *testing.T, db *pgtest.DB, roles ...string) {
	t.Helper()
	sql := `CREATE TABLE outbox (id bigserial PRIMARY KEY, svc name NOT NULL DEFAULT current_user,
		token bigint NOT NULL, seq int NOT NULL)`
	if _, err := db.Pool.Exec(context.Background(), sql); err != nil {
		t.Fatal(err)
	}
	for _, r := range roles {
		id := pgx.Identifier{r}.Sanitize()
		if _, err := db.Pool.Exec(context.Background(),
			`GRANT SELECT, INSERT ON outbox TO `+id+`; GRANT USAGE ON SEQUENCE outbox_id_seq TO `+id); err != nil {
			t.Fatal(err)
		}
	}
}

// startRoleService starts the two replicas of service name on role, which
// connects with roleURL. The replicas are named alike in every service, so
// that anything keyed by owner alone would mix the services up.
func startRoleService(t *testing.T, name, role, roleURL string) *roleService {
	t.Helper()
	s := &roleService{name: name, role: role, key: name + "/leader", resource: name + "/outbox", shards: keyNames(name+"/shard", 6)}
	logger := slog.New(slog.NewTextHandler(&s.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	guard := sqlfence.Guard{Resource: s.resource}
	for i := range 2 {
		r := &roleReplica{owner: fmt.Sprintf("replica-%d", i), pool: rolePool(t, roleURL), done: make(chan error, 2)}
		r.backend = pgleader.NewPostgres(r.pool, pgleader.WithLogger(logger))
		var err error
		r.el, err = pgleader.New(r.backend, pgleader.Spec{Key: s.key, TTL: roleTTL, RequireFenceAdvance: true}, pgleader.Options{
			Owner: r.owner, Value: name + "/" + r.owner, Logger: logger, Observer: &s.obs,
			// The term's first write: the fence must be lower than its token.
			Claim: func(ctx context.Context, term *pgleader.Term) (bool, error) {
				err := guard.Claim(ctx, r.pool, term.Token(), nil)
				if errors.Is(err, sqlfence.ErrFenced) {
					return false, nil
				}
				return err == nil, err
			},
			FenceFloor: func(ctx context.Context) (int64, error) { return guard.Floor(ctx, r.pool) },
			Lead:       s.publish(r.pool, guard),
		})
		if err != nil {
			t.Fatal(err)
		}
		// Both services name their set "shards".
		r.set, err = pgleader.NewSet(r.backend, pgleader.Spec{Key: "shards", TTL: roleTTL}, s.shards,
			pgleader.SetOptions{Owner: r.owner, Lead: quickBody, Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		r.cancel = cancel
		go func() { r.done <- r.el.Run(ctx) }()
		go func() { r.done <- r.set.Run(ctx) }()
		t.Cleanup(func() { r.stop(t) })
		s.replicas = append(s.replicas, r)
	}
	return s
}

// stop stops the replica's Elector and Set and waits for both; it may be
// called more than once.
func (r *roleReplica) stop(t *testing.T) {
	r.once.Do(func() {
		r.cancel()
		for range 2 {
			if err := <-r.done; err != nil {
				t.Errorf("%s: Run = %v", r.owner, err)
			}
		}
	})
}

// publish is the leader's body: one row at a time into the outbox, each in
// a fenced transaction on the service's resource, until the term ends.
func (s *roleService) publish(pool *pgxpool.Pool, guard sqlfence.Guard) func(context.Context, *pgleader.Term) error {
	return func(ctx context.Context, term *pgleader.Term) error {
		for seq := 1; term.Live(); seq++ {
			err := guard.Write(ctx, pool, term.Token(), func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO outbox (token, seq) VALUES ($1, $2)`, term.Token(), seq)
				return err
			})
			if err != nil {
				if ctx.Err() == nil { // not the end of the term cutting a write short
					s.mu.Lock()
					s.failures = append(s.failures, fmt.Errorf("write %d of token %d: %w", seq, term.Token(), err))
					s.mu.Unlock()
				}
				return nil
			}
			select {
			case <-term.Ending():
			case <-time.After(20 * time.Millisecond):
			}
		}
		return nil
	}
}

// leader returns the replica whose Elector leads, or nil.
func (s *roleService) leader() *roleReplica {
	for _, r := range s.replicas {
		if r.el.Status().Leading {
			return r
		}
	}
	return nil
}

func (s *roleService) replica(owner string) *roleReplica {
	for _, r := range s.replicas {
		if r.owner == owner {
			return r
		}
	}
	panic("no replica " + owner)
}

// endings returns the service's Elector terms that began to end, as
// "owner token reason".
func (s *roleService) endings() []string {
	s.obs.mu.Lock()
	defer s.obs.mu.Unlock()
	var out []string
	for _, o := range s.obs.all {
		if o.Kind == pgleader.ObserveTermEnding {
			out = append(out, fmt.Sprintf("%s %d %v", o.Owner, o.Token, o.Reason))
		}
	}
	return out
}

// balanced reports whether each replica's Set holds half of the service's
// shards and counts exactly its two replicas as members.
func (s *roleService) balanced() bool {
	for _, r := range s.replicas {
		if st := r.set.Status(); st.Held != len(s.shards)/2 || st.Members != 2 {
			return false
		}
	}
	return true
}

func (s *roleService) setStatuses() string {
	var b strings.Builder
	for _, r := range s.replicas {
		st := r.set.Status()
		fmt.Fprintf(&b, " %s/%s holds %d, counts %d members;", s.name, r.owner, st.Held, st.Members)
	}
	return b.String()
}

// check fails the test if a write of the service failed, or if its logs
// show one of its own operations refused at the role boundary or a failed
// hand-off rehearsal.
func (s *roleService) check(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	for _, err := range s.failures {
		t.Errorf("service %s: %v", s.name, err)
	}
	s.mu.Unlock()
	logs := s.logs.String()
	for _, bad := range []string{"42501", "belongs to role", "preparing the hand-off failed", "rehearsing a hand-off"} {
		if strings.Contains(logs, bad) {
			t.Errorf("service %s logged %q:\n%s", s.name, bad, logs)
		}
	}
}

// checkOutbox fails the test unless the service's rows in the outbox are
// in token order: the fence let no write of a term through after a later
// term's.
func (s *roleService) checkOutbox(t *testing.T, db *pgtest.DB) {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT token FROM outbox WHERE svc = $1 ORDER BY id`, s.role)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	if len(tokens) == 0 {
		t.Errorf("service %s published nothing", s.name)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] < tokens[i-1] {
			t.Errorf("service %s: a row of token %d after one of token %d", s.name, tokens[i], tokens[i-1])
			return
		}
	}
}

// deref prints what p points to, or NULL.
func deref[T any](p *T) string {
	if p == nil {
		return "NULL"
	}
	return fmt.Sprint(*p)
}

// TestTwoServicesOnTwoRoles: two services on two roles in one database run
// Electors, a Set (of the same name) and sqlfence side by side. Neither can
// acquire, renew, release, hand off, take, resign, transfer, advance or
// fence the other's keys: every function refuses with 42501 or leaves them
// alone, and the other's terms go on undisturbed. A role given grant_steer
// can resign and transfer them, but not acquire them.
func TestTwoServicesOnTwoRoles(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	roleA, urlA := db.NewRole(t, "SELECT pgleader.grant_usage($1)")
	roleB, urlB := db.NewRole(t, "SELECT pgleader.grant_usage($1)")
	_, urlS := db.NewRole(t, "SELECT pgleader.grant_steer($1)")
	createOutbox(t, db, roleA, roleB)

	a := startRoleService(t, "a", roleA, urlA)
	b := startRoleService(t, "b", roleB, urlB)
	for _, s := range []*roleService{a, b} {
		eventually(t, 20*time.Second, func() bool { return s.leader() != nil && s.balanced() },
			func() string {
				return fmt.Sprintf("service %s: leader %v;%s", s.name, s.leader() != nil, s.setStatuses())
			})
	}

	// The same set name does not mix the roles' memberships: each role
	// sees its own two members, each holding its share of its own shards.
	for _, s := range []*roleService{a, b} {
		var members string
		eventually(t, 10*time.Second, func() bool {
			rep, err := s.replicas[0].backend.SetStatus(ctx, "shards", s.shards)
			if err != nil {
				t.Fatal(err)
			}
			var m []string
			for _, o := range rep.Owners {
				if o.Member {
					m = append(m, fmt.Sprintf("%s:%d", o.Owner, o.MemberHeld))
				}
			}
			members = strings.Join(m, " ")
			return members == "replica-0:3 replica-1:3"
		}, func() string {
			return fmt.Sprintf("set_status of shards as %s: members %q; want its own two, reporting 3 each", s.name, members)
		})
	}

	// A's term, as B reads it.
	attacker := roleConn(t, urlB)
	lead := a.leader()
	if lead == nil {
		t.Fatal("a has no leader")
	}
	standby := a.replica(map[string]string{"replica-0": "replica-1", "replica-1": "replica-0"}[lead.owner])
	registered(t, standby.backend, a.key, standby.owner) // a hand-off or transfer would have a successor
	var holder string
	var token int64
	if err := attacker.QueryRow(ctx, `SELECT holder, token FROM pgleader.lease($1)`, a.key).Scan(&holder, &token); err != nil {
		t.Fatal(err)
	}
	if holder != lead.owner || token != lead.el.Status().Token {
		t.Fatalf("as b, pgleader.lease(%q) = %s token %d; want %s token %d", a.key, holder, token, lead.owner, lead.el.Status().Token)
	}
	floor := func() int64 {
		var f int64
		if err := attacker.QueryRow(ctx, `SELECT pgleader.fence_floor($1)`, a.resource).Scan(&f); err != nil {
			t.Fatal(err)
		}
		return f
	}
	floorBefore := floor()
	shardRows, err := attacker.Query(ctx, `SELECT key, holder, token FROM pgleader.leases('a/shard')`)
	if err != nil {
		t.Fatal(err)
	}
	type shard struct {
		Key, Holder string
		Token       int64
	}
	shards, err := pgx.CollectRows(shardRows, pgx.RowToStructByPos[shard])
	if err != nil || len(shards) != len(a.shards) {
		t.Fatalf("a's shards as b reads them: %+v, %v", shards, err)
	}
	endingsBefore := len(a.endings())

	// B, with the holder and token it read, against every function that
	// acts on a key, a set's keys or a fence. Each asks for a TTL of five
	// minutes, so a renewal that got through would show in the expiry.
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`SELECT * FROM pgleader.acquire($1, 'intruder', '5 minutes')`, []any{a.key}},
		{`SELECT * FROM pgleader.acquire($1, 'intruder', '5 minutes', 0, 'v')`, []any{a.key}},
		{`SELECT * FROM pgleader.campaign($1, 'intruder', '5 minutes', 0, NULL, 100, '5 minutes')`, []any{a.key}},
		{`SELECT pgleader.renew($1, $2, $3, '5 minutes')`, []any{a.key, holder, token}},
		{`SELECT * FROM pgleader.renew_term($1, $2, $3, '5 minutes')`, []any{a.key, holder, token}},
		{`SELECT * FROM pgleader.renew_term($1, $2, $3, '5 minutes', NULL)`, []any{a.key, holder, token}},
		{`SELECT pgleader.release($1, $2, $3)`, []any{a.key, holder, token}},
		{`SELECT * FROM pgleader.hand_off($1, $2, $3)`, []any{a.key, holder, token}},
		{`SELECT * FROM pgleader.hand_off($1, $2, $3, $4)`, []any{a.key, holder, token, standby.owner}},
		{`SELECT * FROM pgleader.take($1, $2, '5 minutes')`, []any{a.key, standby.owner}},
		{`SELECT * FROM pgleader.take($1, $2, '5 minutes', '1 second')`, []any{a.key, standby.owner}},
		{`SELECT * FROM pgleader.resign($1)`, []any{a.key}},
		{`SELECT * FROM pgleader.resign($1, $2)`, []any{a.key, token}},
		{`SELECT * FROM pgleader.transfer($1, $2)`, []any{a.key, standby.owner}},
		{`SELECT * FROM pgleader.advance($1, 1000)`, []any{a.key}},
		{`SELECT pgleader.withdraw($1, $2)`, []any{a.key, standby.owner}},
		{`SELECT * FROM pgleader.acquire_many($1, 'intruder', '5 minutes', 100)`, []any{a.shards}},
		{`SELECT * FROM pgleader.acquire_many($1, 'intruder', '5 minutes', 100)`, []any{append([]string{"b/unseen"}, a.key)}},
		{`SELECT * FROM pgleader.set_acquire('shards', 'intruder', $1, '5 minutes', 0, 100)`, []any{a.shards}},
		{`SELECT pgleader.fence_write($1, $2)`, []any{a.resource, floorBefore + 100}},
		{`SELECT pgleader.fence_claim($1, $2)`, []any{a.resource, floorBefore + 100}},
		{`SELECT pgleader.lease_guard($1, $2)`, []any{a.key, token}},
	} {
		_, err := attacker.Exec(ctx, q.sql, q.args...)
		wantRefused(t, fmt.Sprintf("as b, %s %v", q.sql, q.args), err, roleA)
	}
	// The functions on many keys skip another role's keys: they renew and
	// release none of them.
	for _, s := range shards {
		var renewed int
		if err := attacker.QueryRow(ctx, `SELECT count(*) FROM pgleader.renew_many($1, $2, $3, '5 minutes')`,
			s.Holder, []string{s.Key}, []int64{s.Token}).Scan(&renewed); err != nil || renewed != 0 {
			t.Errorf("as b, renew_many of a's shard %s: %d renewed, %v; want none", s.Key, renewed, err)
		}
		var lost []string
		if err := attacker.QueryRow(ctx, `SELECT lost FROM pgleader.set_tick('probe', $1, $2, $3, '5 minutes', 1)`,
			s.Holder, []string{s.Key}, []int64{s.Token}).Scan(&lost); err != nil || len(lost) != 1 {
			t.Errorf("as b, set_tick of a's shard %s: lost %v, %v; want it reported lost, not renewed", s.Key, lost, err)
		}
		for _, sql := range []string{
			`SELECT count(*) FROM pgleader.release_many($1, $2, $3)`,
			`SELECT count(*) FROM pgleader.set_release('probe', $1, $2, $3, true)`,
		} {
			var released int
			if err := attacker.QueryRow(ctx, sql, s.Holder, []string{s.Key}, []int64{s.Token}).Scan(&released); err != nil || released != 0 {
				t.Errorf("as b, %s of a's shard %s: %d released, %v; want none", sql, s.Key, released, err)
			}
		}
	}
	// The same through the Go API, with B's own connection.
	bb := pgleader.NewPostgres(attacker, pgleader.PollOnly(), pgleader.WithLogger(quiet))
	goCalls := []struct {
		name string
		call func() error
	}{
		{"Campaign", func() error {
			_, _, err := bb.Campaign(ctx, a.key, pgleader.Candidate{Owner: "intruder"}, time.Minute, 0)
			return err
		}},
		{"Campaign", func() error {
			_, _, err := bb.Campaign(ctx, a.key, pgleader.Candidate{Owner: "intruder", TTL: time.Minute}, time.Minute, 0)
			return err
		}},
		{"RenewTerm", func() error {
			_, _, err := bb.RenewTerm(ctx, a.key, holder, token, time.Minute, pgleader.NoPreference)
			return err
		}},
		{"RenewTerm with a minimum term", func() error {
			_, _, err := bb.RenewTerm(ctx, a.key, holder, token, time.Minute, time.Second)
			return err
		}},
		{"Release", func() error { _, err := bb.Release(ctx, a.key, holder, token); return err }},
		{"HandOff", func() error { _, _, err := bb.HandOff(ctx, a.key, holder, token, standby.owner); return err }},
		{"Resign", func() error { _, _, err := bb.Resign(ctx, a.key, 0); return err }},
		{"Transfer", func() error { _, _, err := bb.Transfer(ctx, a.key, standby.owner); return err }},
		{"Advance", func() error { _, _, err := bb.Advance(ctx, a.key, 1000); return err }},
		{"Withdraw", func() error { return bb.Withdraw(ctx, a.key, standby.owner) }},
		{"AcquireSet", func() error {
			_, _, err := bb.AcquireSet(ctx, "shards", "intruder", a.shards, nil, time.Minute, 0, 100, 0, nil)
			return err
		}},
		{"sqlfence.Guard.Write", func() error {
			return sqlfence.Guard{Resource: a.resource}.Write(ctx, attacker, floorBefore+100, nil)
		}},
		{"sqlfence.Guard.Claim", func() error {
			return sqlfence.Guard{Resource: a.resource}.Claim(ctx, attacker, floorBefore+100, nil)
		}},
		{"sqlfence.WithLease", func() error { return sqlfence.WithLease(ctx, attacker, a.key, token, nil) }},
	}
	for _, c := range goCalls {
		err := c.call()
		wantRefused(t, "as b, "+c.name, err, roleA)
		sentinel := pgleader.ErrForbidden
		if strings.HasPrefix(c.name, "sqlfence.") {
			sentinel = sqlfence.ErrForbidden
		}
		if !errors.Is(err, sentinel) {
			t.Errorf("as b, %s: err = %v; want it to match %v", c.name, err, sentinel)
		}
	}

	// A's term is as it was: same holder and token, no resignation or
	// transfer asked, an expiry within A's own TTL, its standby still a
	// candidate and nobody else one, its fence and its shards untouched.
	var attackEnd time.Time
	var l struct {
		holder    *string
		token     int64
		left      time.Duration
		resign    *int64
		transfer  *string
		candidate []string
	}
	if err := db.Pool.QueryRow(ctx, `
		SELECT l.holder, l.token, l.expires_at - clock_timestamp(), l.resign_token, l.transfer_to,
		       (SELECT coalesce(array_agg(c.owner ORDER BY c.owner), '{}') FROM pgleader.candidate AS c
		         WHERE c.key = l.key AND c.expires_at > clock_timestamp()),
		       clock_timestamp()
		  FROM pgleader.lease AS l WHERE l.key = $1`, a.key).
		Scan(&l.holder, &l.token, &l.left, &l.resign, &l.transfer, &l.candidate, &attackEnd); err != nil {
		t.Fatal(err)
	}
	if l.holder == nil || *l.holder != holder || l.token != token || l.left > roleTTL || l.resign != nil || l.transfer != nil {
		t.Fatalf("a's lease after b's attempts: holder %s token %d, %v left, resign token %s, transfer to %s; want %s token %d, at most %v left, nothing asked",
			deref(l.holder), l.token, l.left, deref(l.resign), deref(l.transfer), holder, token, roleTTL)
	}
	if strings.Join(l.candidate, ",") != standby.owner {
		t.Errorf("a's candidates after b's attempts: %v; want only %s", l.candidate, standby.owner)
	}
	if f := floor(); f != floorBefore {
		t.Errorf("a's fence after b's attempts: %d; want %d", f, floorBefore)
	}
	var taken int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pgleader.lease
		WHERE key = ANY($1) AND (holder = 'intruder' OR role <> $2 OR expires_at > clock_timestamp() + interval '1 minute')`,
		a.shards, roleA).Scan(&taken); err != nil || taken != 0 {
		t.Errorf("a's shards after b's attempts: %d taken by b or renewed for b's five minutes (%v)", taken, err)
	}
	// A renews its term after all that, and leads on with the same token.
	waitFor(t, "a to renew its term after b's attempts", func() bool {
		var renewed bool
		if err := db.Pool.QueryRow(ctx, `SELECT renewed_at > $2 FROM pgleader.lease WHERE key = $1`, a.key, attackEnd).Scan(&renewed); err != nil {
			t.Fatal(err)
		}
		return renewed
	})
	if st := lead.el.Status(); !st.Leading || st.Token != token {
		t.Fatalf("%s after b's attempts: leading %v token %d; want leading token %d", lead.owner, st.Leading, st.Token, token)
	}
	if e := a.endings(); len(e) != endingsBefore {
		t.Fatalf("a's terms ended while b tried: %v", e[endingsBefore:])
	}
	if !a.balanced() {
		t.Errorf("a's set after b's attempts:%s", a.setStatuses())
	}

	// A role given grant_steer may resign and transfer A's term, and
	// advance A's key (a held one is not advanced), but may not take A's
	// key, fence or lease for itself.
	steerConn := roleConn(t, urlS)
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`SELECT * FROM pgleader.acquire($1, 'steerer', '5 minutes')`, []any{a.key}},
		{`SELECT * FROM pgleader.campaign($1, 'steerer', '5 minutes', 0, NULL, 0, '5 minutes')`, []any{a.key}},
		{`SELECT * FROM pgleader.take($1, $2, '5 minutes')`, []any{a.key, standby.owner}},
		{`SELECT pgleader.release($1, $2, $3)`, []any{a.key, holder, token}},
		{`SELECT * FROM pgleader.acquire_many($1, 'steerer', '5 minutes', 100)`, []any{a.shards}},
		{`SELECT pgleader.fence_write($1, $2)`, []any{a.resource, floorBefore + 100}},
		{`SELECT pgleader.lease_guard($1, $2)`, []any{a.key, token}},
	} {
		_, err := steerConn.Exec(ctx, q.sql, q.args...)
		wantRefused(t, fmt.Sprintf("as the steer role, %s %v", q.sql, q.args), err, roleA)
	}
	steer := pgleader.NewPostgres(steerConn, pgleader.PollOnly(), pgleader.WithLogger(quiet))
	if advanced, counter, err := steer.Advance(ctx, a.key, 1000); err != nil || advanced || counter != token {
		t.Fatalf("as the steer role, Advance of a's held key = %v, %d, %v; want not advanced, counter %d", advanced, counter, err, token)
	}
	if l, asked, err := steer.Resign(ctx, a.key, 0); err != nil || !asked || l.Holder != lead.owner || l.Token != token {
		t.Fatalf("as the steer role, Resign(%q) = %+v, %v, %v; want %s's term %d asked", a.key, l, asked, err, lead.owner, token)
	}
	// The leader resigns at its next renewal and hands off to its standby.
	waitFor(t, "a's standby to lead after the resignation", func() bool { return standby.el.Status().Leading })
	token2 := standby.el.Status().Token
	if token2 <= token {
		t.Fatalf("a's standby leads with token %d after the resignation of token %d; want a higher one", token2, token)
	}
	waitFor(t, "a's resigned term to end", func() bool { return lead.el.Status().LastEnd != pgleader.ReasonNone })
	if r := lead.el.Status().LastEnd; r != pgleader.ReasonResigned {
		t.Fatalf("a's term %d ended %v; want resigned", token, r)
	}
	// Then back to the former leader, now a candidate.
	registered(t, lead.backend, a.key, lead.owner)
	if l, asked, err := steer.Transfer(ctx, a.key, lead.owner); err != nil || !asked || l.Holder != standby.owner || l.Token != token2 {
		t.Fatalf("as the steer role, Transfer(%q, %s) = %+v, %v, %v; want %s's term %d asked", a.key, lead.owner, l, asked, err, standby.owner, token2)
	}
	waitFor(t, "a's former leader to lead after the transfer", func() bool { return lead.el.Status().Leading })
	if tok := lead.el.Status().Token; tok <= token2 {
		t.Fatalf("a's former leader leads with token %d after the transfer of token %d; want a higher one", tok, token2)
	}

	// B's own services ran undisturbed beside all this.
	if e := b.endings(); len(e) != 0 {
		t.Errorf("b's terms ended: %v", e)
	}
	if !b.balanced() {
		t.Errorf("b's set:%s", b.setStatuses())
	}
	for _, s := range []*roleService{a, b} {
		for _, r := range s.replicas {
			r.stop(t)
		}
		s.check(t)
		s.checkOutbox(t, db)
	}
}
