package main

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/speedup"
	"github.com/pgleader/pgleader/internal/wait"
	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/sqlfence"
)

var digests = sqlfence.Column{Table: pgx.Identifier{"digests"}, KeyColumn: "name", FenceColumn: "fence"}

var errCrashed = errors.New("bench: this replica has crashed")

// counter counts the statements sent on a pool's connections and the
// notifications they receive.
type counter struct {
	statements    atomic.Int64
	notifications atomic.Int64
}

func (c *counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.statements.Add(1)
	return ctx
}

func (c *counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// replica is one elector on its own pool, instrumented.
type replica struct {
	owner   string
	key     string
	pool    *pgxpool.Pool
	pg      *pgleader.Postgres
	opts    []pgleader.PostgresOption // pg's
	count   *counter
	crashed atomic.Bool

	noHandOff    bool
	ctxOnly      bool // the body watches only ctx.Done(), not Ending
	cancelOnStop bool // Options.CancelOnStop
	attempts     atomic.Int64
	sentAt       chan time.Time // when the statement that proved a term was sent
	knowsAt      chan time.Time // when the successor knew it leads (Claim was called)
	bodyAt       chan time.Time // when a term's body was entered (its Claim committed)
	releaseSent  chan time.Time // when a release that took effect was sent
	releasedAt   chan time.Time // when it returned
	firstWrite   chan time.Time // when a term's first fenced write committed

	el     *pgleader.Elector
	cancel context.CancelFunc
	done   chan error
}

func newReplica(ctx context.Context, url, key, owner string, notify, handOff bool) (*replica, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	r := &replica{owner: owner, key: key, count: &counter{}, noHandOff: !handOff,
		sentAt: make(chan time.Time, 1), knowsAt: make(chan time.Time, 1), bodyAt: make(chan time.Time, 1),
		releaseSent: make(chan time.Time, 1), releasedAt: make(chan time.Time, 1), firstWrite: make(chan time.Time, 1)}
	cfg.MinConns = 2
	cfg.ConnConfig.Tracer = r.count
	cfg.ConnConfig.RuntimeParams["application_name"] = "bench-" + owner
	cfg.ConnConfig.OnNotification = func(*pgconn.PgConn, *pgconn.Notification) { r.count.notifications.Add(1) }
	if r.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, err
	}
	r.opts = []pgleader.PostgresOption{pgleader.WithLogger(quiet)}
	if !notify {
		r.opts = append(r.opts, pgleader.PollOnly())
	}
	r.pg = pgleader.NewPostgres(r.pool, r.opts...)
	if err := r.pool.Ping(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// fresh gives the replica a new backend over its pool, with the mechanisms
// in off switched off: new lease and LISTEN sessions, as a new process
// would open, while the old backend's close after their linger.
func (r *replica) fresh(off speedup.Mechanisms) {
	r.pg = pgleader.NewPostgres(r.pool, r.opts...)
	speedup.Off(r.pg, off)
}

// start runs the elector until stop or crash.
func (r *replica) start() error {
	el, err := pgleader.New(&timed{r.pg, r}, recipe(r.key), pgleader.Options{
		Owner: r.owner, Logger: quiet, Lead: r.lead, Claim: r.claim, FenceFloor: r.floor, NoHandOff: r.noHandOff,
		CancelOnStop: r.cancelOnStop,
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.el, r.cancel, r.done = el, cancel, make(chan error, 1)
	go func() { r.done <- el.Run(ctx) }()
	return nil
}

// stop cancels Run and waits for it.
func (r *replica) stop() error {
	r.cancel()
	return <-r.done
}

func (r *replica) close() {
	if r.cancel != nil {
		r.cancel()
	}
	r.pool.Close()
}

// waiting waits until the replica has campaigned at least n times.
func (r *replica) waitAttempts(ctx context.Context, n int64) error {
	for r.attempts.Load() < n {
		if !wait.Sleep(ctx, time.Millisecond) {
			return ctx.Err()
		}
	}
	return nil
}

// claim is the first thing a term runs: the successor knows it leads.
func (r *replica) claim(ctx context.Context, t *pgleader.Term) (bool, error) {
	offer(r.knowsAt, time.Now())
	offer(r.sentAt, r.el.Status().LastRenewSent)
	err := digests.Claim(ctx, r.pool, r.key, t.Token())
	if errors.Is(err, sqlfence.ErrFenced) {
		return false, nil
	}
	return err == nil, err
}

func (r *replica) floor(ctx context.Context) (int64, error) {
	return digests.Floor(ctx, r.pool, r.key)
}

// lead writes once as soon as the term starts, then holds it until it
// ends.
func (r *replica) lead(ctx context.Context, t *pgleader.Term) error {
	offer(r.bodyAt, time.Now())
	if err := digests.Write(ctx, r.pool, r.key, t.Token(), sqlfence.Assign("body", r.owner)); err != nil {
		return err
	}
	offer(r.firstWrite, time.Now())
	ending := t.Ending()
	if r.ctxOnly {
		ending = nil
	}
	select {
	case <-ending:
	case <-ctx.Done():
	}
	return nil
}

func offer(ch chan time.Time, t time.Time) {
	select {
	case ch <- t:
	default:
	}
}

// timed is the replica's backend: PostgreSQL, with its lease operations
// timed and a switch that makes it behave like a crashed process. It embeds
// the *pgleader.Postgres so that the elector finds everything the backend
// does (its own lease connection, its checked hand-off hints).
type timed struct {
	*pgleader.Postgres
	r *replica
}

func (t *timed) crashed() error {
	if t.r.crashed.Load() {
		return errCrashed
	}
	return nil
}

// Abilities is the Postgres backend's, with t steering, so that its
// withdrawals and advances fail as a crashed replica's would.
func (t *timed) Abilities() pgleader.Abilities {
	ab := t.Postgres.Abilities()
	ab.Steer = t
	return ab
}

func (t *timed) Campaign(ctx context.Context, key string, c pgleader.Candidate, ttl time.Duration, floor int64) (pgleader.Lease, bool, error) {
	if err := t.crashed(); err != nil {
		return pgleader.Lease{}, false, err
	}
	defer t.r.attempts.Add(1)
	return t.Postgres.Campaign(ctx, key, c, ttl, floor)
}

func (t *timed) RenewTerm(ctx context.Context, key, owner string, token int64, ttl, minTerm time.Duration) (time.Time, bool, error) {
	if err := t.crashed(); err != nil {
		return time.Time{}, false, err
	}
	return t.Postgres.RenewTerm(ctx, key, owner, token, ttl, minTerm)
}

func (t *timed) Release(ctx context.Context, key, owner string, token int64) (bool, error) {
	if err := t.crashed(); err != nil {
		return false, err
	}
	sent := time.Now()
	ok, err := t.Postgres.Release(ctx, key, owner, token)
	if ok {
		offer(t.r.releaseSent, sent)
		offer(t.r.releasedAt, time.Now())
	}
	return ok, err
}

func (t *timed) HandOff(ctx context.Context, key, owner string, token int64, to string) (bool, string, error) {
	if err := t.crashed(); err != nil {
		return false, "", err
	}
	sent := time.Now()
	ok, successor, err := t.Postgres.HandOff(ctx, key, owner, token, to)
	if ok {
		offer(t.r.releaseSent, sent)
		offer(t.r.releasedAt, time.Now())
	}
	return ok, successor, err
}

func (t *timed) Advance(ctx context.Context, key string, floor int64) (bool, int64, error) {
	if err := t.crashed(); err != nil {
		return false, 0, err
	}
	return t.Postgres.Advance(ctx, key, floor)
}

func (t *timed) Withdraw(ctx context.Context, key, owner string) error {
	if err := t.crashed(); err != nil {
		return err
	}
	return t.Postgres.Withdraw(ctx, key, owner)
}
