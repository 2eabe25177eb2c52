package replication_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/chaos"
	"github.com/pgleader/pgleader/pgleader"
)

// stepSpec has spec's TTL (prepare makes it max_ttl) and a Margin larger
// than the rest of a term's tail (YieldGrace + ReleaseTimeout = 400ms), so
// that a step of 2 × Margin ends the lease on the database well before its
// holder yields: the holder's term stays Live about
// Margin - YieldGrace - ReleaseTimeout = 1.6s after the lease expired on
// the stepped clock.
var stepSpec = pgleader.Spec{Key: "digest-publisher", TTL: 6 * time.Second, RenewEvery: 2 * time.Second,
	CampaignEvery: 100 * time.Millisecond, Margin: 2 * time.Second, YieldGrace: 200 * time.Millisecond,
	ReleaseTimeout: 200 * time.Millisecond}

// TestClockStepForward steps the server's clock forward by 2 × Margin in the
// middle of C's term, right after a renewal that is C's last (C's lease path
// is cut at once, as a partition would): the lease, which C counts on until
// its safe end, expires on the stepped clock 2 × Margin early. D, polling
// the same server, takes the lease and claims the column fence while C's
// term is still Live: property 1 does not hold, which docs/model.md and
// docs/ha.md state. Property 2 does: the fence refuses every write C sends
// after D's claim.
func TestClockStepForward(t *testing.T) {
	t.Parallel()
	bin := postgresBin(t)
	lib := faketimeLib(t)
	ctx := context.Background()
	step := 2 * stepSpec.Margin
	offset := filepath.Join(readableDir(t), "faketime")
	setOffset := func(d time.Duration) {
		t.Helper()
		// The server reads the file at every clock reading: replace it
		// whole, never let it see half a write.
		tmp := offset + ".tmp"
		if err := os.WriteFile(tmp, []byte(fmt.Sprintf("+%ds\n", int(d/time.Second))), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, offset); err != nil {
			t.Fatal(err)
		}
	}
	setOffset(0)
	server := startCluster(t, bin, chaos.ClusterOptions{Env: []string{"LD_PRELOAD=" + lib,
		"FAKETIME_TIMESTAMP_FILE=" + offset, "FAKETIME_NO_CACHE=1", "DONT_FAKE_MONOTONIC=1"}})
	admin := pool(t, dbURL(server.Addr(), "postgres"))
	ahead := func() time.Duration {
		t.Helper()
		var now time.Time
		before := time.Now()
		if err := admin.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
			t.Fatal(err)
		}
		return now.Sub(before)
	}
	if a := ahead(); a < -500*time.Millisecond || a > 500*time.Millisecond {
		t.Fatalf("before the step the server's clock is %v ahead; want about 0", a)
	}

	v := &variant{grace: true, db: "clockstep"}
	v.prepare(t, server.Addr())
	url := dbURL(server.Addr(), v.db)
	cLease := startProxy(t, server.Addr())
	c := startFenced(t, "C", dbURL(cLease.Addr(), v.db), url, v.hist, nil)
	waitUntil(t, "C to write", liveness, func() bool { _, ok := v.hist.firstWrite("C", time.Time{}); return ok })
	d := startFenced(t, "D", url, url, v.hist, c)

	// C's next successful renewal is its last: its lease path is cut right
	// after, and the clock steps.
	last := c.el.Status().LastRenewSent
	waitUntil(t, "C to renew", liveness, func() bool { return c.el.Status().LastRenewSent.After(last) })
	cLease.Cut()
	renewed := c.el.Status().LastRenewSent
	setOffset(step)
	waitUntil(t, "the server's clock to step", liveness, func() bool { return ahead() > step-500*time.Millisecond })
	stepped := time.Now()

	claim := d.waitClaim(t)
	waitUntil(t, "C's term to end", liveness, func() bool { return !v.hist.leading("C") })
	waitUntil(t, "D to write", liveness, func() bool { _, ok := v.hist.firstWrite("D", claim.acked); return ok })
	c.stop()
	d.stop()

	cTerm := c.term()
	t.Logf("C's last renewal sent %s; the clock stepped %v forward by %s; C's term yields at %s (safe end %s)",
		renewed.Format("15:04:05.000"), step, stepped.Format("15:04:05.000"),
		cTerm.yield.Format("15:04:05.000"), cTerm.deadline.Format("15:04:05.000"))
	t.Logf("D's term %d started %s, claimed the fence %s; C believed until %s (%s)",
		claim.token, claim.started.Format("15:04:05.000"), claim.acked.Format("15:04:05.000"),
		cTerm.believed.Format("15:04:05.000"), cTerm.reason)
	t.Logf("overlap of belief: %v from D's term start, %v from D's claim, to C's local end; C live at D's claim: %v",
		cTerm.believed.Sub(claim.started).Round(time.Millisecond), cTerm.believed.Sub(claim.acked).Round(time.Millisecond), claim.rivalLive)
	t.Logf("history:\n%s", v.hist.summary())

	// Property 2, always: no write of C sent after D's claim was accepted,
	// and the fence stays at D's token.
	refused := 0
	for _, sent := range c.refusedSent() {
		if sent.After(claim.acked) {
			refused++
		}
	}
	for _, w := range writesOf(v.hist, "C") {
		if w.sent.After(claim.acked) {
			t.Errorf("the fence accepted a write of C sent %s, after D's claim at %s",
				w.sent.Format("15:04:05.000"), claim.acked.Format("15:04:05.000"))
		}
	}
	var fence int64
	if err := pool(t, url).QueryRow(ctx, `SELECT fence FROM digest WHERE id = 1`).Scan(&fence); err != nil {
		t.Fatal(err)
	}
	if fence != claim.token {
		t.Errorf("the fence is at %d; want D's token %d", fence, claim.token)
	}
	t.Logf("the fence refused %d writes C sent after D's claim", refused)

	// Property 1 is what the step breaks: the setup leaves C about 1.6s of
	// belief after its lease expired on the stepped clock, and D polls every
	// 100ms, so C is still live at D's claim, and goes on writing.
	if !claim.rivalLive || !cTerm.believed.After(claim.acked) {
		t.Errorf("C's term was not live at D's claim (overlap %v); the step did not bite",
			cTerm.believed.Sub(claim.acked).Round(time.Millisecond))
	} else if refused == 0 {
		t.Error("C sent no write after D's claim: the fence was not put to the test")
	}
}

// fenced is an Elector on stepSpec whose claim raises the column fence and
// whose body writes fenced units for as long as its term is live, recording
// the writes the fence refuses instead of stopping at the first: what the
// test measures is how long the holder believes.
type fenced struct {
	*replica
	claims chan claimed

	mu      sync.Mutex
	last    termSeen
	refused []time.Time // the send instants of refused writes
}

// claimed is a claim of the fence that succeeded.
type claimed struct {
	token          int64
	started, acked time.Time // the term's acquire sent; the claim acknowledged
	rivalLive      bool      // whether the rival's term was live then
}

// termSeen is the last term the body ran.
type termSeen struct {
	t               *pgleader.Term
	deadline, yield time.Time // the safe end S and yield Y, last seen
	believed        time.Time // when the body first saw Live turn false
	reason          pgleader.EndReason
}

// startFenced starts a fenced replica; its claims record whether rival's
// term, if rival is not nil, was live as they were acknowledged.
func startFenced(t *testing.T, owner, leaseURL, storeURL string, h *history, rival *fenced) *fenced {
	t.Helper()
	lease, store := pool(t, leaseURL), pool(t, storeURL)
	f := &fenced{claims: make(chan claimed, 4)}
	el, err := pgleader.New(pgleader.NewPostgres(lease, pgleader.PollOnly()), stepSpec, pgleader.Options{
		Owner: owner, Logger: quiet,
		Claim: func(ctx context.Context, term *pgleader.Term) (bool, error) {
			tag, err := store.Exec(ctx, `UPDATE digest SET fence = $1 WHERE id = 1 AND fence < $1`, term.Token())
			if err != nil || tag.RowsAffected() == 0 {
				return false, err
			}
			c := claimed{token: term.Token(), started: term.Started(), acked: time.Now()}
			if rival != nil {
				c.rivalLive = rival.live()
			}
			select {
			case f.claims <- c:
			default:
			}
			return true, nil
		},
		Lead: func(ctx context.Context, term *pgleader.Term) error {
			rec := h.begin(owner, term.Token(), term.Started())
			defer h.end(rec)
			f.began(term)
			for term.Live() {
				f.seen(term)
				if err := f.writeOnce(ctx, store, term, h, rec); err != nil {
					return nil // the body's context ended
				}
				select {
				case <-term.Ending():
				case <-time.After(20 * time.Millisecond):
				}
			}
			f.ended(term)
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.replica = &replica{owner: owner, el: el, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(f.done); _ = el.Run(ctx) }()
	t.Cleanup(f.stop)
	return f
}

// writeOnce sends one fenced unit; only the body's context ending is an
// error.
func (f *fenced) writeOnce(ctx context.Context, store *pgxpool.Pool, tm *pgleader.Term, h *history, rec *term) error {
	sent := time.Now()
	tag, err := store.Exec(ctx, `UPDATE digest SET n = n + 1 WHERE id = 1 AND fence <= $1`, tm.Token())
	switch {
	case err != nil:
		return ctx.Err()
	case tag.RowsAffected() == 1:
		h.write(rec, sent, time.Now())
	default:
		f.mu.Lock()
		f.refused = append(f.refused, sent)
		f.mu.Unlock()
	}
	return nil
}

func (f *fenced) began(term *pgleader.Term) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last = termSeen{t: term}
}

func (f *fenced) seen(term *pgleader.Term) {
	deadline := term.Deadline()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last.deadline = deadline
	f.last.yield = deadline.Add(-stepSpec.ReleaseTimeout - stepSpec.YieldGrace)
}

func (f *fenced) ended(term *pgleader.Term) {
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last.believed = now
	f.last.reason = term.Reason()
}

// live reports whether the replica's last term is live.
func (f *fenced) live() bool {
	f.mu.Lock()
	term := f.last.t
	f.mu.Unlock()
	return term != nil && term.Live()
}

func (f *fenced) term() termSeen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

func (f *fenced) refusedSent() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.refused...)
}

// waitClaim returns the replica's first successful claim of the fence.
func (f *fenced) waitClaim(t *testing.T) claimed {
	t.Helper()
	select {
	case c := <-f.claims:
		return c
	case <-time.After(liveness):
		t.Fatalf("%s did not claim the fence within %v", f.owner, liveness)
		return claimed{}
	}
}

// writesOf returns the accepted units of owner's terms.
func writesOf(h *history, owner string) []write {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []write
	for _, tm := range h.terms {
		if tm.owner == owner {
			out = append(out, tm.writes...)
		}
	}
	return out
}

// readableDir returns a new directory that the server can read even when it
// runs as another user than the test (as root, through runuser): the
// parent of t.TempDir's directories is the test's own.
func readableDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pgleader-clockstep-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
