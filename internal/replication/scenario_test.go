package replication_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/chaos"
	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/internal/tcpproxy"
	"github.com/pgleader/pgleader/migrations"
	"github.com/pgleader/pgleader/pgleader"
)

// spec is the recipe's TTL and renewal period with a short tail after the
// yield (Margin + ReleaseTimeout + YieldGrace = 700ms), so that a standby
// clock 2s ahead ends a lease before its holder yields.
var spec = pgleader.Spec{Key: "digest-publisher", TTL: 6 * time.Second, RenewEvery: 2 * time.Second,
	CampaignEvery: 200 * time.Millisecond, Margin: 200 * time.Millisecond, YieldGrace: 300 * time.Millisecond,
	ReleaseTimeout: 200 * time.Millisecond}

// liveness bounds how long the new primary may take to have a leader write:
// the grace (max_ttl = TTL) plus a TTL, and a generous allowance for a
// loaded machine. It detects a hang; it is not a timing assertion.
const liveness = 45 * time.Second

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func postgresBin(t *testing.T) string { return pgtest.ServerBin(t) }

func startCluster(t *testing.T, bin string, opts chaos.ClusterOptions) *chaos.Cluster {
	t.Helper()
	c, err := chaos.StartClusterWith(context.Background(), bin, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

func startProxy(t *testing.T, target string) *tcpproxy.Proxy {
	t.Helper()
	p, err := tcpproxy.Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dbURL(addr, db string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&connect_timeout=2", addr, db)
}

func pool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func exec1(t *testing.T, url, sql string, args ...any) {
	t.Helper()
	p := pool(t, url)
	defer p.Close()
	if _, err := p.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// variant is one schema under test, in a database of its own on the same
// servers: without the grace (the control) it must show the violation, with
// it (the schema as it is) it must not. Both are the latest schema, which
// the Go client needs; the control has the grace switched off by replacing
// pgleader._grace with a function that never starts one.
type variant struct {
	grace bool
	db    string
	hist  *history
	// c holds the lease when the primary is lost; d campaigns on the server
	// that takes over.
	c, d       *replica
	cLease     *tcpproxy.Proxy // c's lease path: stays on the lost primary
	cStore     *tcpproxy.Proxy // c's store path: moves with the primary's address
	promotedAt time.Time
}

// prepare creates v's database on the primary at addr, migrates it with
// max_ttl = TTL (and, for the control, no grace), and creates the fenced
// table.
func (v *variant) prepare(t *testing.T, addr string) {
	t.Helper()
	ctx := context.Background()
	exec1(t, dbURL(addr, "postgres"), "CREATE DATABASE "+v.db)
	url := dbURL(addr, v.db)
	if err := migrations.UpURL(ctx, url); err != nil {
		t.Fatal(err)
	}
	exec1(t, url, `SELECT pgleader.set_max_ttl($1::interval)`, spec.TTL.String())
	if !v.grace {
		exec1(t, url, `CREATE OR REPLACE FUNCTION pgleader._grace(OUT grace_until timestamptz, OUT max_ttl interval, OUT max_clock_offset interval)
			LANGUAGE sql AS $$ SELECT '-infinity'::timestamptz, s.max_ttl, s.max_clock_offset FROM pgleader.settings AS s $$`)
	}
	exec1(t, url, `CREATE TABLE digest (id int PRIMARY KEY, fence bigint NOT NULL, n bigint NOT NULL);
		INSERT INTO digest VALUES (1, 0, 0)`)
	v.hist = &history{}
}

// hold has L take the lease for 1s, and returns the function that
// releases it.
func hold(t *testing.T, url string) (release func()) {
	t.Helper()
	p := pool(t, url)
	var token int64
	if err := p.QueryRow(context.Background(), `SELECT token FROM pgleader.acquire('digest-publisher', 'L', '1 second')`).Scan(&token); err != nil {
		t.Fatal(err)
	}
	return func() {
		if _, err := p.Exec(context.Background(), `SELECT pgleader.release('digest-publisher', 'L', $1)`, token); err != nil {
			t.Fatal(err)
		}
	}
}

// replica is an Elector whose body writes fenced units and records them.
type replica struct {
	owner  string
	el     *pgleader.Elector
	cancel context.CancelFunc
	done   chan struct{}
}

func startReplica(t *testing.T, owner, leaseURL, storeURL string, h *history) *replica {
	t.Helper()
	lease, store := pool(t, leaseURL), pool(t, storeURL)
	el, err := pgleader.New(pgleader.NewPostgres(lease, pgleader.PollOnly()), spec, pgleader.Options{
		Owner: owner, Logger: quiet,
		Lead: func(ctx context.Context, term *pgleader.Term) error {
			rec := h.begin(owner, term.Token(), term.Started())
			defer h.end(rec)
			for term.Live() {
				sent := time.Now()
				tag, err := store.Exec(ctx, `UPDATE digest SET fence = $1, n = n + 1 WHERE id = 1 AND fence <= $1`, term.Token())
				switch {
				case err == nil && tag.RowsAffected() == 1:
					h.write(rec, sent, time.Now())
				case err == nil:
					return nil // fenced: a newer term wrote
				}
				// An error (the server is down) is retried: the body
				// writes as long as its term is live.
				select {
				case <-term.Ending():
				case <-time.After(50 * time.Millisecond):
				}
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{owner: owner, el: el, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(r.done); _ = el.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

func (r *replica) stop() {
	r.cancel()
	<-r.done
}

// history is what the replicas did, on this process's clock.
type history struct {
	mu    sync.Mutex
	terms []*term
}

type term struct {
	owner      string
	token      int64
	start, end time.Time // the acquire's send; the body's return
	writes     []write   // accepted units
}

type write struct{ sent, acked time.Time }

func (h *history) begin(owner string, token int64, start time.Time) *term {
	h.mu.Lock()
	defer h.mu.Unlock()
	tm := &term{owner: owner, token: token, start: start}
	h.terms = append(h.terms, tm)
	return tm
}

func (h *history) end(tm *term) {
	h.mu.Lock()
	defer h.mu.Unlock()
	tm.end = time.Now()
}

func (h *history) write(tm *term, sent, acked time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	tm.writes = append(tm.writes, write{sent, acked})
}

// firstWrite returns when owner's first accepted unit was acknowledged, if
// one after since was.
func (h *history) firstWrite(owner string, since time.Time) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, tm := range h.terms {
		for _, w := range tm.writes {
			if tm.owner == owner && w.acked.After(since) {
				return w.acked, true
			}
		}
	}
	return time.Time{}, false
}

func (h *history) leading(owner string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, tm := range h.terms {
		if tm.owner == owner && tm.end.IsZero() {
			return true
		}
	}
	return false
}

// violations checks the history: no two terms live at once (a term runs
// from its acquire's send until its body returned), and no accepted unit of
// a term sent after a later term's first unit was acknowledged.
func (h *history) violations() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for i, a := range h.terms {
		for _, b := range h.terms[i+1:] {
			old, young := a, b
			if young.start.Before(old.start) {
				old, young = young, old
			}
			end := old.end
			if end.IsZero() {
				end = time.Now()
			}
			if young.start.Before(end) {
				out = append(out, fmt.Sprintf("two terms live at once: %s/%d until %s and %s/%d from %s",
					old.owner, old.token, end.Format("15:04:05.000"), young.owner, young.token, young.start.Format("15:04:05.000")))
			}
			if len(young.writes) == 0 {
				continue
			}
			first := young.writes[0].acked
			for _, w := range old.writes {
				if w.sent.After(first) {
					out = append(out, fmt.Sprintf("write of %s/%d accepted after %s/%d's first: sent %s, first acknowledged %s",
						old.owner, old.token, young.owner, young.token, w.sent.Format("15:04:05.000"), first.Format("15:04:05.000")))
					break
				}
			}
		}
	}
	return out
}

func (h *history) summary() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := ""
	for _, tm := range h.terms {
		s += fmt.Sprintf("  %s token %d: %s..%s, %d units\n", tm.owner, tm.token,
			tm.start.Format("15:04:05.000"), tm.end.Format("15:04:05.000"), len(tm.writes))
	}
	return s
}

// waitUntil polls cond until it holds or limit passes.
func waitUntil(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
	}
}

// waitReplayed waits until the standby has replayed everything the primary
// has written so far.
func waitReplayed(t *testing.T, primary, standby *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	var lsn string
	if err := primary.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the standby to replay "+lsn, 30*time.Second, func() bool {
		var ok bool
		err := standby.QueryRow(ctx, `SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn`, lsn).Scan(&ok)
		return err == nil && ok
	})
}

// verdict checks each variant: the control must break safety (the
// scenario bites), the schema must not, and its new leader must write.
func verdict(t *testing.T, variants []*variant) {
	t.Helper()
	for _, v := range variants {
		if v.grace {
			first, ok := time.Time{}, false
			waitUntil(t, fmt.Sprintf("%s: a leader to write on the new server", v.db), liveness, func() bool {
				first, ok = v.hist.firstWrite("D", v.promotedAt)
				return ok
			})
			t.Logf("%s: the new server's first accepted write came %v after it took over",
				v.db, first.Sub(v.promotedAt).Round(time.Millisecond))
		}
	}
	for _, v := range variants {
		// Let c's term end (its yield is at most TTL after its last renew).
		waitUntil(t, fmt.Sprintf("%s: C's term to end", v.db), liveness, func() bool { return !v.hist.leading("C") })
		v.c.stop()
		v.d.stop()
		got := v.hist.violations()
		t.Logf("%s history:\n%s", v.db, v.hist.summary())
		switch {
		case !v.grace && len(got) == 0:
			t.Errorf("%s: no violation; the scenario did not bite", v.db)
		case !v.grace:
			t.Logf("%s broke safety, as expected without the grace: %v", v.db, got)
		case len(got) > 0:
			t.Errorf("%s: %d violations: %v", v.db, len(got), got)
		}
	}
}

func faketimeLib(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("dpkg", "-L", "libfaketime").Output()
	if err == nil {
		for _, line := range splitLines(string(out)) {
			if filepath.Base(line) == "libfaketime.so.1" {
				return line
			}
		}
	}
	for _, p := range []string{"/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	pgtest.SkipWithout(t, "libfaketime", "libfaketime")
	return ""
}

func splitLines(s string) []string {
	var out []string
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != '\n' {
			i++
		}
		out = append(out, s[:i])
		if i < len(s) {
			i++
		}
		s = s[i:]
	}
	return out
}
