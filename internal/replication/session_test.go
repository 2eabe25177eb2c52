package replication_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/pgleader/pgleader/internal/chaos"
	"github.com/pgleader/pgleader/pgleader"
)

// boundRun is one session-bound elector and the terms its body saw.
type boundRun struct {
	owner  string
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	terms []*boundSeen
}

type boundSeen struct {
	token      int64
	start, end time.Time
	term       *pgleader.Term
}

func startBound(t *testing.T, owner, url string) *boundRun {
	t.Helper()
	b := &boundRun{owner: owner, done: make(chan struct{})}
	el, err := pgleader.New(pgleader.NewPostgres(pool(t, url), pgleader.WithLogger(quiet)), spec, pgleader.Options{
		Owner: owner, SessionBound: true, Logger: quiet,
		Lead: func(ctx context.Context, tm *pgleader.Term) error {
			s := &boundSeen{token: tm.Token(), start: time.Now(), term: tm}
			b.mu.Lock()
			b.terms = append(b.terms, s)
			b.mu.Unlock()
			<-tm.Ending()
			b.mu.Lock()
			s.end = time.Now()
			b.mu.Unlock()
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	go func() {
		defer close(b.done)
		_ = el.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-b.done })
	return b
}

func (b *boundRun) seen() []boundSeen {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]boundSeen, len(b.terms))
	for i, s := range b.terms {
		out[i] = *s
	}
	return out
}

// TestSessionBoundServerRestart: a server restart ends every session, but
// no term bound to a session of the server's earlier run lapses early
// (docs/model.md, "Session-bound leases": a clean restart and a crash
// recovery are refused by the server-run check, a crash also by the
// grace). The holder learns of its session's end through its pending read
// and ends its term as lost at once; the next term, by either replica,
// starts no sooner than the old term's expiry on the database clock (and,
// after a crash, the grace's end).
func TestSessionBoundServerRestart(t *testing.T) {
	t.Parallel()
	bin := postgresBin(t)
	for _, c := range []struct {
		name      string
		immediate bool
	}{{"clean", false}, {"crash", true}} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			server := startCluster(t, bin, chaos.ClusterOptions{})
			v := &variant{grace: true, db: "bound"}
			v.prepare(t, server.Addr())
			url := dbURL(server.Addr(), v.db)
			a := startBound(t, "a", url)
			deadline := time.Now().Add(20 * time.Second)
			for len(a.seen()) == 0 {
				if time.Now().After(deadline) {
					t.Fatal("a never led")
				}
				time.Sleep(10 * time.Millisecond)
			}
			b := startBound(t, "b", url)
			time.Sleep(spec.RenewEvery + time.Second) // b campaigned and waits on a's session; a renewed
			p := pool(t, url)
			var bound int
			if err := p.QueryRow(ctx, `SELECT count(*) FROM pgleader.lease_binding WHERE holder = 'a'`).Scan(&bound); err != nil || bound != 1 {
				t.Fatalf("a's term is not bound before the restart: %d %v", bound, err)
			}
			p.Close()

			restarted := time.Now()
			if err := server.Restart(ctx, c.immediate, 0); err != nil {
				t.Fatal(err)
			}
			// The old term's expiry, on the database clock, as the
			// server has it after the restart (a crash keeps what was
			// committed: the last renewal was flushed before it).
			p = pool(t, url)
			var oldToken int64
			var oldExpiry time.Time
			if err := p.QueryRow(ctx, `SELECT token, expires_at FROM pgleader.lease WHERE key = $1`, spec.Key).Scan(&oldToken, &oldExpiry); err != nil {
				t.Fatal(err)
			}
			first := a.seen()[0]
			if first.token != oldToken {
				t.Fatalf("the lease is at token %d after the restart, a led %d", oldToken, first.token)
			}
			deadline = time.Now().Add(5 * time.Second)
			for a.seen()[0].end.IsZero() {
				if time.Now().After(deadline) {
					t.Fatal("a's term did not end within 5 s of the restart: its pending read should have seen its session end")
				}
				time.Sleep(10 * time.Millisecond)
			}
			ended := a.seen()[0]
			if r := ended.term.Reason(); r != pgleader.ReasonLost {
				t.Errorf("a's term ended %v, want lost", r)
			}
			// The next term, and its start on the database clock.
			var next int64
			var acquired, graceUntil time.Time
			deadline = time.Now().Add(4 * spec.TTL)
			for {
				if err := p.QueryRow(ctx, `SELECT l.token, l.acquired_at, g.grace_until FROM pgleader.lease AS l, pgleader.grace() AS g
					WHERE l.key = $1`, spec.Key).Scan(&next, &acquired, &graceUntil); err == nil && next > oldToken && !acquired.IsZero() {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no term after token %d within %v of the restart", oldToken, 4*spec.TTL)
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Logf("%s restart: a's term ended %v after it; the next term (token %d) started %v after the old expiry (database clock)",
				c.name, ended.end.Sub(restarted), next, acquired.Sub(oldExpiry))
			if acquired.Before(oldExpiry) {
				t.Errorf("token %d started at %v, before token %d's expiry %v: a binding of the server's earlier run lapsed a term early",
					next, acquired, oldToken, oldExpiry)
			}
			if c.immediate && acquired.Before(graceUntil) {
				t.Errorf("token %d started at %v, inside the grace (until %v)", next, acquired, graceUntil)
			}
			_ = b
		})
	}
}

// setRun is one session-bound set member and the terms its body saw, by
// key.
type setRun struct {
	mu    sync.Mutex
	terms []*setSeen
	set   *pgleader.Set
}

type setSeen struct {
	key        string
	token      int64
	start, end time.Time
	term       *pgleader.Term
}

func startBoundSet(t *testing.T, owner, url string, keys []string) *setRun {
	t.Helper()
	r := &setRun{}
	s, err := pgleader.NewSet(pgleader.NewPostgres(pool(t, url), pgleader.WithLogger(quiet)), pgleader.Spec{Key: "bound-set", TTL: spec.TTL}, keys,
		pgleader.SetOptions{Owner: owner, SessionBound: true, Logger: quiet,
			Lead: func(ctx context.Context, tm *pgleader.Term) error {
				seen := &setSeen{key: tm.Key(), token: tm.Token(), start: time.Now(), term: tm}
				r.mu.Lock()
				r.terms = append(r.terms, seen)
				r.mu.Unlock()
				<-tm.Ending()
				r.mu.Lock()
				seen.end = time.Now()
				r.mu.Unlock()
				return nil
			}})
	if err != nil {
		t.Fatal(err)
	}
	r.set = s
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

// live returns the terms running now.
func (r *setRun) live() []setSeen {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []setSeen
	for _, s := range r.terms {
		if s.end.IsZero() {
			out = append(out, *s)
		}
	}
	return out
}

// TestSetSessionBoundServerRestart: as TestSessionBoundServerRestart, for
// the members of a session-bound set: a restart ends every member's bound
// session, the members end all their terms as lost, and no key's next term
// starts before its old term's expiry (nor, after a crash, inside the
// grace): the members' bindings name the server's earlier run.
func TestSetSessionBoundServerRestart(t *testing.T) {
	t.Parallel()
	bin := postgresBin(t)
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5"}
	for _, c := range []struct {
		name      string
		immediate bool
	}{{"clean", false}, {"crash", true}} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			server := startCluster(t, bin, chaos.ClusterOptions{})
			v := &variant{grace: true, db: "boundset"}
			v.prepare(t, server.Addr())
			url := dbURL(server.Addr(), v.db)
			a := startBoundSet(t, "a", url, keys)
			b := startBoundSet(t, "b", url, keys)
			deadline := time.Now().Add(30 * time.Second)
			for len(a.live()) != 3 || len(b.live()) != 3 {
				if time.Now().After(deadline) {
					t.Fatalf("a leads %d keys and b %d; want 3 each", len(a.live()), len(b.live()))
				}
				time.Sleep(10 * time.Millisecond)
			}
			p := pool(t, url)
			var bound int
			if err := p.QueryRow(ctx, `SELECT count(*) FROM pgleader.set_member WHERE pid IS NOT NULL`).Scan(&bound); err != nil || bound != 2 {
				t.Fatalf("%d members bound before the restart (%v); want 2", bound, err)
			}
			p.Close()
			before := append(a.live(), b.live()...)

			restarted := time.Now()
			if err := server.Restart(ctx, c.immediate, 0); err != nil {
				t.Fatal(err)
			}
			p = pool(t, url)
			old := map[string]struct {
				token  int64
				expiry time.Time
			}{}
			rows, err := p.Query(ctx, `SELECT key, token, expires_at FROM pgleader.lease WHERE key = ANY ($1)`, keys)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var k string
				var tok int64
				var e time.Time
				if err := rows.Scan(&k, &tok, &e); err != nil {
					t.Fatal(err)
				}
				old[k] = struct {
					token  int64
					expiry time.Time
				}{tok, e}
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			// Every term running at the restart ends, lost, within
			// seconds: the pending reads see the sessions end.
			deadline = time.Now().Add(5 * time.Second)
			for _, r := range []*setRun{a, b} {
				for {
					r.mu.Lock()
					open := 0
					for _, s := range r.terms {
						if s.end.IsZero() && s.start.Before(restarted) {
							open++
						}
					}
					r.mu.Unlock()
					if open == 0 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("%d terms from before the restart still run 5 s after it", open)
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			for _, s := range before {
				if reason := s.term.Reason(); reason != pgleader.ReasonLost {
					t.Errorf("the term of %s ended %v; want lost", s.key, reason)
				}
			}
			// Each key's next term, on the database clock.
			deadline = time.Now().Add(4 * spec.TTL)
			for _, k := range keys {
				var next int64
				var acquired, graceUntil time.Time
				for {
					if err := p.QueryRow(ctx, `SELECT l.token, l.acquired_at, g.grace_until FROM pgleader.lease AS l, pgleader.grace() AS g
						WHERE l.key = $1 AND l.holder IS NOT NULL`, k).Scan(&next, &acquired, &graceUntil); err == nil && next > old[k].token {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("no term of %s after token %d within %v of the restart", k, old[k].token, 4*spec.TTL)
					}
					time.Sleep(20 * time.Millisecond)
				}
				if acquired.Before(old[k].expiry) {
					t.Errorf("%s: token %d started at %v, before token %d's expiry %v: a binding of the server's earlier run lapsed a key early",
						k, next, acquired, old[k].token, old[k].expiry)
				}
				if c.immediate && acquired.Before(graceUntil) {
					t.Errorf("%s: token %d started at %v, inside the grace (until %v)", k, next, acquired, graceUntil)
				}
			}
			t.Logf("%s restart: every term from before it ended lost; every key's next term started at or after its old expiry", c.name)
		})
	}
}
