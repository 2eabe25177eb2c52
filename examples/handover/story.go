package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/examples/internal/digests"
	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/sqlfence"
)

// key is the leadership key the replicas campaign for, and the digest's row.
const key = "digest-publisher"

// lostFence is the store's fence when the lease data is lost in act 2: the
// recipe's store that has already seen token 50.
const lostFence = 50

// options are the story's knobs.
type options struct {
	every  time.Duration // between a leader's units
	logger *slog.Logger  // the electors' own logs
}

// tell runs the story in pool's database, which must be migrated and
// otherwise empty, printing it to out.
func tell(ctx context.Context, pool *pgxpool.Pool, out io.Writer, opts options) error {
	w := &world{
		say:     &narrator{out: out, start: time.Now()},
		pool:    pool,
		store:   digests.Store{DB: pool, Name: key},
		backend: pgleader.NewPostgres(pool, pgleader.WithLogger(opts.logger)),
		opts:    opts,
	}
	defer w.stopAll()
	if err := w.store.Setup(ctx); err != nil {
		return err
	}
	gap, err := w.handover(ctx)
	if err != nil {
		return err
	}
	if err := w.recovery(ctx); err != nil {
		return err
	}
	return w.summary(ctx, out, gap)
}

// world is the story's state: the store, the replicas, and what each term
// did.
type world struct {
	say     *narrator
	pool    *pgxpool.Pool
	store   digests.Store
	backend *pgleader.Postgres // shared by the replicas, as replicas of one process should
	opts    options

	mu            sync.Mutex
	terms         []*term // in the order they began
	refusedClaims int
	replicas      []*replica
}

// term is what the story records of one term.
type term struct {
	owner   string
	token   int64
	units   int // units the store accepted
	refused int // writes the fence refused
	ended   pgleader.EndReason
}

// handover is act 1. It returns the time from pod-a's stop to pod-b's first
// unit, on the database clock.
func (w *world) handover(ctx context.Context) (time.Duration, error) {
	w.say.act("1. Handover: the leader is stopped, as a deploy stops it")
	a := w.start(ctx, "pod-a")
	if err := w.waitUnits(ctx, 1, 3); err != nil {
		return 0, err
	}
	b := w.start(ctx, "pod-b")
	if l, err := w.backend.Lease(ctx, key); err == nil && l.Held() {
		w.say.line("pod-b", "campaigns: the lease is %s's (token %d) for another %v on the database clock;",
			l.Holder, l.Token, l.Remaining().Round(time.Millisecond))
		w.say.line("", "pod-b sleeps until then, or until LISTEN hears the lease released")
	}
	if err := w.waitUnits(ctx, 1, 5); err != nil {
		return 0, err
	}

	stopAt, err := w.dbNow(ctx)
	if err != nil {
		return 0, err
	}
	w.say.line("deploy", "stops pod-a: its Run context is cancelled (what SIGTERM does in examples/publisher)")
	if err := a.stop(); err != nil {
		return 0, err
	}
	if l, err := w.backend.Lease(ctx, key); err != nil || (l.Held() && l.Token == 1) {
		return 0, fmt.Errorf("pod-a's Run returned without releasing the lease: %+v, %v", l, err)
	}
	w.say.line("pod-a", "Run returned: term 1 ended %s, and its lease is released", w.termOf(1).ended)
	if err := w.waitUnits(ctx, 2, 1); err != nil {
		return 0, err
	}
	var first time.Time
	err = w.pool.QueryRow(ctx, `SELECT min(published_at) FROM published WHERE token = 2`).Scan(&first)
	if err != nil {
		return 0, err
	}
	gap := first.Sub(stopAt)
	w.say.line("", "handover gap: pod-b's first unit was published %v after pod-a was stopped (database clock)",
		gap.Round(time.Millisecond))
	if err := w.waitUnits(ctx, 2, 3); err != nil {
		return 0, err
	}

	// A paused leader finishes the unit it was paused in when it wakes:
	// only the store can refuse that write.
	late := w.termOf(1)
	err = w.store.Publish(ctx, 1, late.units+1, "pod-a")
	if !errors.Is(err, sqlfence.ErrFenced) {
		return 0, fmt.Errorf("a late write with token 1 was not refused by the fence: %v", err)
	}
	w.mu.Lock()
	late.refused++
	w.mu.Unlock()
	w.say.line("pod-a", "a late write with token 1, as a paused pod-a would send on waking, is refused:")
	w.say.line("", "  %v", err)

	w.say.line("deploy", "stops pod-b")
	return gap, b.stop()
}

// recovery is act 2: the lease data is lost while the store has seen token
// 50, and FenceFloor lets the first new term draw 51 at once.
func (w *world) recovery(ctx context.Context) error {
	w.say.act(fmt.Sprintf("2. The lease data is lost; the store has seen token %d", lostFence))
	if _, err := w.pool.Exec(ctx, `DELETE FROM pgleader.lease`); err != nil {
		return err
	}
	w.say.line("chaos", "deletes every row of pgleader.lease: the key's token counter is gone and would restart at 1")
	if _, err := w.pool.Exec(ctx, `UPDATE digests SET fence = $2 WHERE name = $1`, key, lostFence); err != nil {
		return err
	}
	w.say.line("chaos", "sets the store's fence to %d, as if terms up to %d had written before the loss", lostFence, lostFence)
	w.say.line("", "without FenceFloor, claims of tokens 1 to %d would all be refused, one campaign each", lostFence)

	a := w.start(ctx, "pod-a")
	w.say.line("pod-a", "FenceFloor reads the store's fence while the lease is free; the acquire draws one more")
	if err := w.waitUnits(ctx, lostFence+1, 3); err != nil {
		return err
	}
	w.say.line("deploy", "stops pod-a")
	return a.stop()
}

// summary checks that the story went as the recipe says, then prints one
// row per term and the measurements.
func (w *world) summary(ctx context.Context, out io.Writer, gap time.Duration) error {
	units, err := w.store.Units(ctx)
	if err != nil {
		return err
	}
	counts := map[int64]int{}
	for i, u := range units {
		counts[u.Token]++
		if i == 0 {
			continue
		}
		prev := units[i-1]
		if u.Token < prev.Token || (u.Token == prev.Token && u.Seq != prev.Seq+1) || (u.Token != prev.Token && u.Seq != 1) {
			return fmt.Errorf("the log is out of order: unit %+v follows %+v", u, prev)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var tokens []int64
	for _, t := range w.terms {
		tokens = append(tokens, t.token)
	}
	if fmt.Sprint(tokens) != fmt.Sprint([]int64{1, 2, lostFence + 1}) {
		return fmt.Errorf("the terms drew tokens %v; the recipe expects [1 2 %d]", tokens, lostFence+1)
	}

	fmt.Fprintf(out, "\nSummary\n")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "term\towner\ttoken\tunits published\trefused writes\tended\t\n")
	refused := 0
	for i, t := range w.terms {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%s\t\n", i+1, t.owner, t.token, counts[t.token], t.refused, t.ended)
		refused += t.refused
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nhandover gap, from pod-a's stop to pod-b's first unit: %v (database clock)\n", gap.Round(time.Millisecond))
	fmt.Fprintf(out, "after the lease data was lost: the first term drew token %d; claims refused: %d\n",
		lostFence+1, w.refusedClaims)
	fmt.Fprintf(out, "units published: %d, numbered without gaps within each term; writes refused: %d\n",
		len(units), refused)
	return nil
}

// replica is one running elector.
type replica struct {
	name   string
	el     *pgleader.Elector
	cancel context.CancelFunc
	done   chan error

	once sync.Once
	err  error
}

// start runs a replica named name until it is stopped.
func (w *world) start(ctx context.Context, name string) *replica {
	el, err := pgleader.New(w.backend,
		pgleader.Spec{Key: key, RequireFenceAdvance: true},
		pgleader.Options{
			Owner:      name,
			Lead:       w.publish,
			Claim:      w.claim,
			FenceFloor: w.store.Floor,
			Logger:     w.opts.logger,
		})
	if err != nil {
		panic(err) // the Spec and Options above are valid
	}
	rctx, cancel := context.WithCancel(ctx)
	r := &replica{name: name, el: el, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- el.Run(rctx) }()
	w.mu.Lock()
	w.replicas = append(w.replicas, r)
	w.mu.Unlock()
	w.say.line(name, "starts campaigning for %q", key)
	return r
}

// stop cancels the replica's Run and waits for it to return, which it does
// after its term, if any, has ended and released the lease.
func (r *replica) stop() error {
	r.once.Do(func() {
		r.cancel()
		r.err = <-r.done
	})
	return r.err
}

func (w *world) stopAll() {
	w.mu.Lock()
	rs := w.replicas
	w.mu.Unlock()
	for _, r := range rs {
		_ = r.stop()
	}
}

// claim is the Claim hook: the term's first write raises the store's fence
// to its token, if the fence is lower.
func (w *world) claim(ctx context.Context, t *pgleader.Term) (bool, error) {
	ok, err := w.store.Claim(ctx, t.Token())
	if err != nil {
		return false, err
	}
	if !ok {
		w.mu.Lock()
		w.refusedClaims++
		w.mu.Unlock()
		w.say.line(t.Owner(), "won the lease with token %d, but the store's fence refused the claim", t.Token())
		return false, nil
	}
	w.mu.Lock()
	w.terms = append(w.terms, &term{owner: t.Owner(), token: t.Token()})
	w.mu.Unlock()
	w.say.line(t.Owner(), "leads with token %d; its claim raised the store's fence to %d", t.Token(), t.Token())
	return true, nil
}

// publish is the Lead body, the recipe's publisher: one unit at a time,
// the term checked between units, stopping at the first refused write.
func (w *world) publish(ctx context.Context, t *pgleader.Term) error {
	rec := w.termOf(t.Token())
	seq := 0
	for t.Live() {
		seq++
		if err := w.store.Publish(ctx, t.Token(), seq, t.Owner()); err != nil {
			if errors.Is(err, sqlfence.ErrFenced) {
				w.mu.Lock()
				rec.refused++
				w.mu.Unlock()
				w.say.line(t.Owner(), "write of unit %d refused: %v", seq, err)
			}
			return err
		}
		w.mu.Lock()
		rec.units = seq
		w.mu.Unlock()
		w.say.line(t.Owner(), "published unit %d (token %d)", seq, t.Token())
		select {
		case <-t.Ending():
		case <-time.After(w.opts.every):
		}
	}
	w.mu.Lock()
	rec.ended = t.Reason()
	w.mu.Unlock()
	w.say.line(t.Owner(), "term %d is ending (%s); unit %d was its last, and the body returns", t.Token(), t.Reason(), seq)
	return nil
}

// termOf returns the record of the term with token, or an empty one.
func (w *world) termOf(token int64) *term {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range w.terms {
		if t.token == token {
			return t
		}
	}
	return &term{token: token}
}

// waitUnits waits until the term with token has published at least n
// units.
func (w *world) waitUnits(ctx context.Context, token int64, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for {
		w.mu.Lock()
		var units int
		for _, t := range w.terms {
			if t.token == token {
				units = t.units
			}
		}
		w.mu.Unlock()
		if units >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for token %d to publish %d units: %w", token, n, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// dbNow reads the database's clock.
func (w *world) dbNow(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := w.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now)
	return now, err
}

// narrator prints the story, each line stamped with the time since it began.
// It is safe for concurrent use.
type narrator struct {
	mu    sync.Mutex
	out   io.Writer
	start time.Time
}

func (n *narrator) line(who, format string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	fmt.Fprintf(n.out, "%7.3fs  %-6s  %s\n", time.Since(n.start).Seconds(), who, fmt.Sprintf(format, args...))
}

func (n *narrator) act(title string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	fmt.Fprintf(n.out, "\n%s\n", title)
}
