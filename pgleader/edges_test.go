package pgleader_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/internal/tcpproxy"
	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/pgleader/pgleadertest"
)

// TestParseEventChecksEveryField: a notification payload can come from any
// role, so every field is checked and anything odd is dropped.
func TestParseEventChecksEveryField(t *testing.T) {
	t.Parallel()
	for _, p := range []string{
		"release k", "acquire k", "acquire a key with spaces",
	} {
		if _, ok := pgleader.ParseEvent(p); !ok {
			t.Errorf("%q refused", p)
		}
	}
	for _, p := range []string{
		"", "release", "release ", "resign k", "RELEASE k", "renew k", "renew 6000000 k",
		"release " + strings.Repeat("k", pgleader.MaxKeyLen+1), "release \xff\xfe",
	} {
		if ev, ok := pgleader.ParseEvent(p); ok {
			t.Errorf("%q accepted as %+v", p, ev)
		}
	}
}

// TestForgedAcquireDoesNotDelayFailover: anyone who can connect can notify
// "acquire" for a key, as if a live term had just taken it. A candidate
// that believed it would wait another lease period while the holder is
// dead; it must lead when the lease it read expires.
func TestForgedAcquireDoesNotDelayFailover(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	// A holder that dies at once: its lease runs 2s and is never renewed.
	if _, ok, err := pgleader.NewPostgres(db.Pool).Acquire(ctx, "k", "dead", 2*time.Second); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	backend := &pgCounting{Postgres: pgleader.NewPostgres(db.NewPool(t), pgleader.WithLogger(quiet))}
	spec := pgleader.Spec{Key: "k", TTL: 10 * time.Minute, CampaignEvery: 5 * time.Minute, RenewEvery: time.Second}
	b := startOn(t, backend, spec, "b")
	waitFor(t, "b to listen", backend.Listening)
	waitFor(t, "b to campaign", func() bool { return backend.acquires.Load() > 0 })
	time.Sleep(100 * time.Millisecond) // b waits for the expiry it read
	for _, payload := range []string{"acquire k", "renew 3600000000 k"} {
		if _, err := db.Pool.Exec(ctx, `SELECT pg_notify('pgleader', $1)`, payload); err != nil {
			t.Fatal(err)
		}
	}
	// waitFor allows 20s: ten times the lease's 2s, far from an hour.
	waitFor(t, "b to lead once the dead holder's lease expired", func() bool { return b.el.Status().Leading })
}

// pgCounting counts the acquire statements of a PostgreSQL backend.
type pgCounting struct {
	*pgleader.Postgres
	acquires atomic.Int64
}

func (c *pgCounting) Campaign(ctx context.Context, key string, cand pgleader.Candidate, ttl time.Duration, floor int64) (pgleader.Lease, bool, error) {
	c.acquires.Add(1)
	return c.Postgres.Campaign(ctx, key, cand, ttl, floor)
}

// TestForgedReleaseFloodIsRateLimited: forged "release" notifications make
// a candidate look, but once one proved false the next is heeded no sooner
// than CampaignEvery later, so a flood cannot turn candidates into a load.
func TestForgedReleaseFloodIsRateLimited(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	spec := pgleader.Spec{Key: "k", TTL: 6 * time.Second, CampaignEvery: 500 * time.Millisecond}
	a := startOn(t, pgleader.NewPostgres(db.NewPool(t), pgleader.WithLogger(quiet)), spec, "a")
	waitFor(t, "a to lead", func() bool { return a.el.Status().Leading })
	cb := &pgCounting{Postgres: pgleader.NewPostgres(db.NewPool(t), pgleader.WithLogger(quiet))}
	b := startOn(t, cb, spec, "b")
	waitFor(t, "b to listen", cb.Listening)
	waitFor(t, "b to campaign", func() bool { return cb.acquires.Load() > 0 })

	before := cb.acquires.Load()
	start := time.Now()
	for range 200 {
		if _, err := db.Pool.Exec(ctx, `SELECT pg_notify('pgleader', 'release k')`); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	elapsed := time.Since(start)
	n := cb.acquires.Load() - before
	// One campaign per CampaignEvery at most, one more at the start of the
	// flood and one per expiry read (4s apart here), and one to spare.
	most := int64(elapsed/spec.CampaignEvery) + 3 + int64(elapsed/(4*time.Second))
	t.Logf("%d acquires during %v of forged releases (bound %d)", n, elapsed.Round(time.Millisecond), most)
	if n > most {
		t.Errorf("%d acquires in %v of forged releases, want at most %d", n, elapsed, most)
	}
	if b.el.Status().Leading || !a.el.Status().Leading {
		t.Fatal("a forged release changed who leads")
	}
}

// lateAnswers decides each acquire at once but answers it after delay,
// whatever the context says: an answer that arrives after the term's yield
// instant.
type lateAnswers struct {
	*pgleadertest.Backend
	delay atomic.Int64
}

func (l *lateAnswers) Campaign(ctx context.Context, key string, c pgleader.Candidate, ttl time.Duration, floor int64) (pgleader.Lease, bool, error) {
	lease, ok, err := l.Backend.Campaign(ctx, key, c, ttl, floor)
	time.Sleep(time.Duration(l.delay.Load()))
	return lease, ok, err
}

// TestTermBornLateDoesNotRun: an acquire answered after the term's yield
// instant starts a term that must neither claim (a write) nor lead; it is
// released at once, and the next term runs normally.
func TestTermBornLateDoesNotRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &lateAnswers{Backend: pgleadertest.NewBackend()}
		b.delay.Store(int64(4500 * time.Millisecond)) // Y is 4s after the send with the recipe's spec
		var mu sync.Mutex
		var claimed []int64
		claim := func(_ context.Context, t *pgleader.Term) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			claimed = append(claimed, t.Token())
			return true, nil
		}
		claims := func() []int64 {
			mu.Lock()
			defer mu.Unlock()
			return append([]int64(nil), claimed...)
		}
		var rec recorder
		r := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "a", Lead: rec.body(0, false), Claim: claim})
		time.Sleep(4600 * time.Millisecond)
		synctest.Wait()
		if len(claims()) != 0 || len(rec.all()) != 0 {
			t.Fatalf("a term answered 4.5s after its send claimed %v and ran %d bodies", claims(), len(rec.all()))
		}
		if st := r.el.Status(); st.LastEnd != pgleader.ReasonExpiring || st.Terms != 0 {
			t.Fatalf("status = %+v, want the late term ended as expiring and none started", st)
		}
		var released bool
		for _, e := range b.History() {
			if e.Op == pgleadertest.OpRelease && e.Token == 1 && e.OK {
				released = true
			}
		}
		if !released {
			t.Fatalf("the late term's lease was not released: %+v", b.History())
		}
		b.delay.Store(0)
		time.Sleep(time.Second)
		synctest.Wait()
		if c := claims(); len(c) != 1 || c[0] != 2 || len(rec.all()) != 1 {
			t.Fatalf("after answers are prompt again: claims %v, bodies %d; want token 2 claimed and led", c, len(rec.all()))
		}
		r.stop(t)
	})
}

// TestYieldLogSaysWhatHappened: renewals that failed are logged as failed;
// a renewal that was sent and never answered (a stalled connection, a
// paused process) is not.
func TestYieldLogSaysWhatHappened(t *testing.T) {
	for _, c := range []struct {
		name      string
		break_    func(*pgleadertest.Backend)
		want, not string
	}{
		{"failing", func(b *pgleadertest.Backend) { b.SetFailure(errors.New("connection refused")) },
			"renewals failed until the yield instant", "before a renewal was answered"},
		{"unanswered", func(b *pgleadertest.Backend) { b.Block() },
			"the yield instant passed before a renewal was answered", "renewals failed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := pgleadertest.NewBackend()
				var logs lockedLog
				log := slog.New(slog.NewTextHandler(&logs, nil))
				r := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "a", Lead: idle, Logger: log})
				time.Sleep(time.Second)
				c.break_(b)
				time.Sleep(5 * time.Second) // past Y at 4s
				b.Unblock()
				b.SetFailure(nil)
				out := logs.String()
				if !strings.Contains(out, c.want) || strings.Contains(out, c.not) {
					t.Errorf("log lacks %q or has %q:\n%s", c.want, c.not, out)
				}
				r.stop(t)
			})
		})
	}
}

// TestRenewWithoutSchemaEndsTermAtOnce: a renewal that finds the schema
// dropped (or migrated down) under a live term is not retried as if the
// database were slow: the term ends at once, as lost.
func TestRenewWithoutSchemaEndsTermAtOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	spec := pgleader.Spec{Key: "k", TTL: 3 * time.Second}
	var reason atomic.Int64
	ended := make(chan struct{})
	lead := func(ctx context.Context, term *pgleader.Term) error {
		<-term.Ending()
		reason.Store(int64(term.Reason()))
		close(ended)
		<-ctx.Done()
		return nil
	}
	el, err := pgleader.New(pgleader.NewPostgres(db.NewPool(t), pgleader.PollOnly()), spec,
		pgleader.Options{Owner: "a", Lead: lead, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "a to lead", func() bool { return el.Status().Leading })
	if _, err := db.Pool.Exec(context.Background(), `DROP SCHEMA pgleader CASCADE`); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatal("the term did not end")
	}
	if got := pgleader.EndReason(reason.Load()); got != pgleader.ReasonLost {
		t.Fatalf("the term ended as %v, want lost (not retried until the yield instant)", got)
	}
	if err := el.Status().LastError; !errors.Is(err, pgleader.ErrNotMigrated) {
		t.Fatalf("last error = %v, want ErrNotMigrated", err)
	}
}

// TestSlowProbeDoesNotTurnListenOffForGood: a probe notification that takes
// longer than the probe waits (a loaded server, a slow network) makes the
// backend poll for a while, not for the rest of its life.
func TestSlowProbeDoesNotTurnListenOffForGood(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	listenCfg, err := pgx.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := tcpproxy.Start(net.JoinHostPort(listenCfg.Host, strconv.Itoa(int(listenCfg.Port))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	listenCfg.Host, listenCfg.Port = "127.0.0.1", proxy.Port()

	var logs lockedLog
	backend := pgleader.NewPostgres(db.NewPool(t), pgleader.ListenWith(listenCfg),
		pgleader.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	pgleader.SetReprobe(backend, 200*time.Millisecond)
	proxy.Delay(3 * time.Second) // longer than the probe waits
	startOn(t, backend, pgleader.Spec{Key: "k", TTL: 10 * time.Minute}, "a")
	waitFor(t, "the probe to time out", func() bool {
		return strings.Contains(logs.String(), "LISTEN does not deliver notifications")
	})
	proxy.Restore()
	waitFor(t, "the backend to listen after probing again", backend.Listening)
}

// TestPoolerWithPgxDefaults: behind pgbouncer in transaction mode, with a
// plain URL (pgx caches prepared statements by default), candidates still
// elect; and the probe leaves no pooled server connection listening on the
// lease channel, which would make pgbouncer log every notification.
func TestPoolerWithPgxDefaults(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	via, bouncerLog := db.PgbouncerWithLog(t)
	pool := func() *pgxpool.Pool {
		p, err := pgxpool.New(context.Background(), via)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	spec := pgleader.Spec{Key: "k", TTL: 3 * time.Second, CampaignEvery: 100 * time.Millisecond}
	var logs lockedLog
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	a := startOn(t, pgleader.NewPostgres(pool(), pgleader.WithLogger(logger)), spec, "a")
	waitFor(t, "a to lead through pgbouncer", func() bool { return a.el.Status().Leading })
	b := startOn(t, pgleader.NewPostgres(pool(), pgleader.WithLogger(logger)), spec, "b")
	waitFor(t, "b's listener to find that LISTEN does not deliver", func() bool {
		return strings.Contains(logs.String(), "LISTEN does not deliver notifications")
	})

	notLinked := func() int { return strings.Count(bouncerLog(), "when not linked") }
	before := notLinked()
	for range 20 {
		if _, err := db.Pool.Exec(context.Background(), `SELECT pg_notify('pgleader', 'release zz')`); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(500 * time.Millisecond)
	if after := notLinked(); after != before {
		t.Errorf("pgbouncer logged %d notifications for unlinked server connections after 20 lease notifications", after-before)
	}

	a.stopNow(t)
	waitFor(t, "b to lead by polling", func() bool { return b.el.Status().Leading })
	if tok := b.el.Status().Token; tok != 2 {
		t.Fatalf("b leads with token %d, want 2", tok)
	}
}

// TestLeaseOpsSurviveFailingNotify: a notification that cannot be sent (a
// full queue; here, a pg_notify that raises) never fails acquire, renew or
// release; and renewals notify nothing at all.
func TestLeaseOpsSurviveFailingNotify(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `CREATE FUNCTION public.pg_notify(text, text) RETURNS void
		LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'too many notifications in the NOTIFY queue'; END $$`); err != nil {
		t.Fatal(err)
	}
	// Sessions that find public.pg_notify before pg_catalog's.
	pool := db.NewPoolConfig(t, func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["search_path"] = "public, pg_catalog"
	})
	var raised bool
	if err := pool.QueryRow(ctx, `SELECT pg_notify('pgleader', 'x') IS NULL`).Scan(&raised); err == nil {
		t.Fatal("the failing pg_notify is not in effect")
	}
	b := pgleader.NewPostgres(pool, pgleader.PollOnly())
	l, ok, err := b.Acquire(ctx, "k", "a", time.Minute)
	if err != nil || !ok {
		t.Fatalf("acquire with notifications failing: %v %v", ok, err)
	}
	if _, err := b.Renew(ctx, "k", "a", l.Token, time.Minute); err != nil {
		t.Fatalf("renew with notifications failing: %v", err)
	}
	if released, err := b.Release(ctx, "k", "a", l.Token); err != nil || !released {
		t.Fatalf("release with notifications failing: %v %v", released, err)
	}
	if l, err := b.Lease(ctx, "k"); err != nil || l.Held() {
		t.Fatalf("after release: %+v %v", l, err)
	}
}

// TestFailedHintIsSaid: a release hint that cannot be sent leaves waiting
// candidates to find the lease at its expiry, a slower hand-over; the
// backend says so at Warn rather than drop the error.
func TestFailedHintIsSaid(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `CREATE FUNCTION public.pg_notify(text, text) RETURNS void
		LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'too many notifications in the NOTIFY queue'; END $$`); err != nil {
		t.Fatal(err)
	}
	pool := db.NewPoolConfig(t, func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["search_path"] = "public, pg_catalog"
	})
	var logs lockedLog
	b := pgleader.NewPostgres(pool, pgleader.PollOnly(), pgleader.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	l, ok, err := b.Acquire(ctx, "k", "a", time.Minute)
	if err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	if released, err := b.Release(ctx, "k", "a", l.Token); err != nil || !released {
		t.Fatalf("release: %v %v", released, err)
	}
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "too many notifications") {
		t.Fatalf("the failed hint was not said at Warn; logs:\n%s", out)
	}
}

// TestOnlyReleasesNotify counts the notifications of each lease operation:
// none for acquire and renew (a notifying commit takes a cluster-wide lock),
// one for release.
func TestOnlyReleasesNotify(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	listen := db.Conn(t)
	if _, err := listen.Exec(ctx, "LISTEN pgleader"); err != nil {
		t.Fatal(err)
	}
	count := func() (n int) {
		for {
			wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			_, err := listen.WaitForNotification(wctx)
			cancel()
			if err != nil {
				return n
			}
			n++
		}
	}
	b := pgleader.NewPostgres(db.Pool, pgleader.PollOnly())
	l, _, err := b.Acquire(ctx, "k", "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Errorf("acquire sent %d notifications, want 0", n)
	}
	for range 5 {
		if _, err := b.Renew(ctx, "k", "a", l.Token, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(); n != 0 {
		t.Errorf("5 renewals sent %d notifications, want 0", n)
	}
	if _, err := b.Release(ctx, "k", "a", l.Token); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Errorf("release sent %d notifications, want 1", n)
	}
}
