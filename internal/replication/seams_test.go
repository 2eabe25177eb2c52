package replication_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/chaos"
	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/migrations"
)

// seamDBs are the two databases each seam test runs, on the same servers:
// "control", whose schema lacks the defence the test is about (the seam's
// mutation), must show the violation (the scenario bites); "schema" must
// not.
var seamDBs = []struct {
	db      string
	control bool
}{{"control", true}, {"schema", false}}

// failoverWithSeam starts a primary and an asynchronous standby, creates
// and migrates each database on the primary (applying mutate to the
// control's), runs before on each while replication flows, cuts
// replication once the standby has replayed it, runs lost on each (on the
// primary only), then kills the primary and promotes the standby. It
// returns the standby's address.
func failoverWithSeam(t *testing.T, mutate func(p *pgxpool.Pool), before, lost func(db string, control bool, url string)) string {
	t.Helper()
	bin := postgresBin(t)
	ctx := context.Background()
	primary := startCluster(t, bin, chaos.ClusterOptions{})
	repl := startProxy(t, primary.Addr())
	standby := startStandby(t, primary, repl.Addr(), chaos.ClusterOptions{})
	for _, s := range seamDBs {
		exec1(t, dbURL(primary.Addr(), "postgres"), "CREATE DATABASE "+s.db)
		url := dbURL(primary.Addr(), s.db)
		if err := migrations.UpURL(ctx, url); err != nil {
			t.Fatal(err)
		}
		if s.control {
			mutate(pool(t, url))
		}
		before(s.db, s.control, url)
	}
	waitReplayed(t, pool(t, dbURL(primary.Addr(), "postgres")), pool(t, dbURL(standby.Addr(), "postgres")))
	repl.Cut() // nothing from here on reaches the standby
	for _, s := range seamDBs {
		lost(s.db, s.control, dbURL(primary.Addr(), s.db))
	}
	if err := primary.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	return standby.Addr()
}

// args is arg for a statement that takes $1, and nothing for one that
// does not.
func args(sql string, arg any) []any {
	if strings.Contains(sql, "$1") {
		return []any{arg}
	}
	return nil
}

func openConn(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// TestHandedOffRowAfterFailover is issue 24's first seam on real servers.
// B hands token 1 to C (token 2, handed off, unconfirmed); that much
// reaches the standby. On the primary only, C confirms and leads token 2
// and hands it to D (token 3), and D confirms. The standby is promoted
// with "C, token 2, handed off". A fresh replica named C checks the hint
// (take with keep, as the Go successor does): it is not told it leads,
// and the key's next term draws above the old server's tokens once the
// grace is over. The control's take believes a handed-off term during the
// grace when it expires more than max_clock_offset away, as a renewal
// would: there C is told it leads token 2 again, in the grace, while D
// believes token 3.
func TestHandedOffRowAfterFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const maxTTL = "8 seconds"
	newAddr := failoverWithSeam(t,
		func(p *pgxpool.Pool) {
			pgtest.Mutate(t, p, "pgleader.take(text, text, interval, interval)",
				"AND t >= g.grace_until THEN", "AND (t >= g.grace_until OR r.expires_at > t + g.max_clock_offset) THEN")
		},
		func(db string, _ bool, url string) {
			exec1(t, url, `SELECT pgleader.set_max_ttl($1::interval)`, maxTTL)
			p := pool(t, url)
			for _, sql := range []string{
				`SELECT * FROM pgleader.campaign('k', 'B', $1::interval, 0, NULL, 0, $1::interval)`,
				`SELECT * FROM pgleader.campaign('k', 'C', $1::interval, 0, NULL, 0, $1::interval)`,
				`SELECT * FROM pgleader.hand_off('k', 'B', 1)`,
			} {
				if _, err := p.Exec(ctx, sql, args(sql, maxTTL)...); err != nil {
					t.Fatalf("%s: %s: %v", db, sql, err)
				}
			}
		},
		func(db string, _ bool, url string) {
			p := pool(t, url)
			for _, sql := range []string{
				`SELECT * FROM pgleader.take('k', 'C', $1::interval)`,
				`SELECT * FROM pgleader.campaign('k', 'D', $1::interval, 0, NULL, 0, $1::interval)`,
				`SELECT * FROM pgleader.hand_off('k', 'C', 2)`,
				`SELECT * FROM pgleader.take('k', 'D', $1::interval)`,
			} {
				if _, err := p.Exec(ctx, sql, args(sql, maxTTL)...); err != nil {
					t.Fatalf("%s: %s: %v", db, sql, err)
				}
			}
			var holder string
			var tok int64
			if err := p.QueryRow(ctx, `SELECT holder, token FROM pgleader.lease('k')`).Scan(&holder, &tok); err != nil || holder != "D" || tok != 3 {
				t.Fatalf("%s: on the primary D should lead token 3: %s %d %v", db, holder, tok, err)
			}
		})

	for _, s := range seamDBs {
		p := pool(t, dbURL(newAddr, s.db))
		var acquired, handed bool
		var holder string
		var tok int64
		err := p.QueryRow(ctx, `SELECT l.handed_off, l.holder, l.token FROM pgleader.lease AS l WHERE l.key = 'k'`).Scan(&handed, &holder, &tok)
		if err != nil || !handed || holder != "C" || tok != 2 {
			t.Fatalf("%s: the promoted row = %s %d handed_off %v (%v); the scenario needs C's unconfirmed token 2", s.db, holder, tok, handed, err)
		}
		check := func() (bool, int64) {
			t.Helper()
			var h *string
			if err := p.QueryRow(ctx, `SELECT acquired, holder, token FROM pgleader.take('k', 'C', $1::interval, '1 second')`, maxTTL).Scan(&acquired, &h, &tok); err != nil {
				t.Fatalf("%s: C's check on the new server: %v", s.db, err)
			}
			return acquired, tok
		}
		acquired, tok = check()
		t.Logf("%s: C's check on the new server: acquired %v, token %d", s.db, acquired, tok)
		if s.control {
			if !acquired || tok != 2 {
				t.Errorf("%s: C's check = %v token %d; the control must lead token 2 again", s.db, acquired, tok)
			}
			continue
		}
		if acquired {
			t.Fatalf("%s: C was told it leads token %d again, in the grace (D led token 3 on the lost server)", s.db, tok)
		}
		// After the grace: nobody leads a token of the old server again.
		waitUntil(t, s.db+": a term on the new server", liveness, func() bool {
			if ok, tok := check(); ok {
				t.Fatalf("%s: C confirmed token %d after the grace; the row should have expired in it", s.db, tok)
			}
			var won bool
			if err := p.QueryRow(ctx, `SELECT acquired, token FROM pgleader.acquire('k', 'E', $1::interval)`, maxTTL).Scan(&won, &tok); err != nil {
				t.Fatal(err)
			}
			return won
		})
		if tok <= 1<<40 {
			t.Fatalf("%s: the new server's first term drew %d; want above the old server's epoch", s.db, tok)
		}
	}
}

// TestMaxTTLLoweredBesideAnOpenAcquire is issue 24's second seam on real
// servers. A's transaction acquires with a 60 s TTL and stays open while
// an operator lowers max_ttl to 2 s; the lowered setting reaches the
// standby, A's commit does not. The setter cannot go through while A's
// transaction is open (55P03), and the new server's grace outlasts A's
// term. The control's setter does not take the settings lock: it goes
// through, so the promoted standby's grace lasts 2 s while A believes for
// 60 s.
func TestMaxTTLLoweredBesideAnOpenAcquire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	aExpires := map[string]time.Time{}
	open := map[string]*pgx.Conn{}
	newAddr := failoverWithSeam(t,
		func(p *pgxpool.Pool) {
			pgtest.Mutate(t, p, "pgleader.set_max_ttl(interval)", "PERFORM pgleader._lock_settings();", "")
		},
		func(db string, control bool, url string) {
			a := openConn(t, url)
			var won bool
			var e time.Time
			if _, err := a.Exec(ctx, `BEGIN`); err != nil {
				t.Fatal(err)
			}
			if err := a.QueryRow(ctx, `SELECT acquired, expires_at FROM pgleader.acquire('k', 'A', '60 seconds')`).Scan(&won, &e); err != nil || !won {
				t.Fatalf("%s: A's acquire: %v %v", db, won, err)
			}
			aExpires[db], open[db] = e, a
			_, err := pool(t, url).Exec(ctx, `SELECT pgleader.set_max_ttl('2 seconds')`)
			var pgErr *pgconn.PgError
			switch {
			case control && err != nil:
				t.Fatalf("%s: set_max_ttl: %v; the control must lower it", db, err)
			case !control && (!errors.As(err, &pgErr) || pgErr.Code != "55P03"):
				t.Fatalf("%s: set_max_ttl beside A's open acquire: %v; want 55P03", db, err)
			}
		},
		func(db string, _ bool, _ string) {
			if _, err := open[db].Exec(ctx, `COMMIT`); err != nil {
				t.Fatalf("%s: A's commit: %v", db, err)
			}
		})

	for _, s := range seamDBs {
		p := pool(t, dbURL(newAddr, s.db))
		var graceUntil time.Time
		var maxTTL time.Duration
		if err := p.QueryRow(ctx, `SELECT grace_until, max_ttl FROM pgleader.grace()`).Scan(&graceUntil, &maxTTL); err != nil {
			t.Fatal(err)
		}
		short := graceUntil.Before(aExpires[s.db])
		t.Logf("%s: the new server's grace ends %v before A's term (max_ttl %v)", s.db, aExpires[s.db].Sub(graceUntil).Round(time.Millisecond), maxTTL)
		switch {
		case s.control && !short:
			t.Errorf("%s: the grace outlasts A's term; the control must show it short", s.db)
		case !s.control && short:
			t.Errorf("%s: the grace ends at %v, before A's term at %v: a new term could start while A believes", s.db, graceUntil, aExpires[s.db])
		}
	}
}
