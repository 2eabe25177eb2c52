package pgleader

import (
	"context"
	"errors"
	"maps"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// leaseApplicationName names the lease connection in pg_stat_activity.
const leaseApplicationName = "pgleader lease"

// linger is how long a connection that nobody needs any more stays open:
// ending a session costs the server a process exit, and right after a
// hand-off that would compete with the successor's take for the CPU. A
// user who needs the connection again within linger gets the same session.
const linger = 100 * time.Millisecond

// maxSpare is how many connections of their own (see [leaseConn.once]) the
// operations of one backend may have open at a time. Beyond it an operation
// waits for the lease connection, a pool connection or a spare, whichever
// comes first: without a bound, many Electors on one backend whose bodies
// hold the pool would each open one, up to the server's max_connections.
const maxSpare = 2

// leaseConn is the connection the lease operations of running electors
// and sets share. It is opened on first use while anyone holds it, reopened
// after any error that may have left it in an unknown state, and closed
// linger after the last holder lets go.
//
// It runs one statement at a time, and an operation that finds it busy does
// not wait for it alone (see [Postgres.with]): a statement may wait for long
// on a row lock (a campaign for a key whose row an application's
// lease-guarded transaction holds waits until its deadline), and no other
// key's renewal may wait behind it.
type leaseConn struct {
	cfg *pgx.ConnConfig

	mu sync.Mutex // guards the fields below; never held across I/O
	// busy is non-nil while a statement runs on conn, or conn is being
	// opened or closed, and is closed when that ends: whoever set it owns
	// conn until then.
	busy    chan struct{}
	conn    *pgx.Conn
	holders int
	closing *time.Timer   // closes conn linger after the last holder let go
	linger  time.Duration // 0: linger; tests set it
	// spares counts the connections open for once; spareFreed, when
	// non-nil, is closed when one of them ends; warned is when an
	// operation was last told to wait for one (see takeSpare).
	spares     int
	spareFreed chan struct{}
	warned     time.Time
}

// spareWarnEvery is how often at most a backend logs that its operations
// wait for a spare connection.
const spareWarnEvery = time.Minute

// hold registers a user and returns the function that lets go.
func (lc *leaseConn) hold() func() {
	lc.mu.Lock()
	lc.holders++
	if lc.closing != nil {
		lc.closing.Stop()
		lc.closing = nil
	}
	lc.mu.Unlock()
	return sync.OnceFunc(func() {
		lc.mu.Lock()
		defer lc.mu.Unlock()
		lc.holders--
		lc.closeIdleLocked()
	})
}

// closeIdleLocked arranges for conn to close linger from now if nobody
// holds it and no close is pending. lc.mu is held.
func (lc *leaseConn) closeIdleLocked() {
	if lc.holders > 0 || lc.conn == nil || lc.closing != nil {
		return
	}
	d := lc.linger
	if d == 0 {
		d = linger
	}
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		lc.mu.Lock()
		if lc.closing != t {
			lc.mu.Unlock()
			return // held again since
		}
		lc.closing = nil
		if lc.busy != nil {
			// A statement runs on conn; the do that runs it arranges
			// the close again when it ends.
			lc.mu.Unlock()
			return
		}
		c := lc.conn
		lc.conn = nil
		lc.busy = make(chan struct{})
		lc.mu.Unlock()
		if c != nil {
			_ = c.Close(context.Background())
		}
		lc.done(nil)
	})
	lc.closing = t
}

// do runs fn on the lease connection and reports true. Without running fn
// it reports false, and nil when nobody holds the connection, or the
// channel that is closed when the statement running on it ends.
func (lc *leaseConn) do(ctx context.Context, fn func(DB, *pgconn.PgConn) error) (bool, <-chan struct{}, error) {
	lc.mu.Lock()
	if lc.holders == 0 || lc.busy != nil {
		busy := lc.busy
		lc.mu.Unlock()
		return false, busy, nil
	}
	lc.busy = make(chan struct{})
	c := lc.conn
	lc.mu.Unlock()

	if c == nil || c.IsClosed() {
		var err error
		if c, err = lc.connect(ctx); err != nil {
			lc.done(nil)
			return true, nil, err
		}
	}
	err := fn(c, c.PgConn())
	var pgErr *pgconn.PgError
	if err != nil && !errors.As(err, &pgErr) {
		// A network error or a cancelled context: the connection's state
		// is unknown, so the next operation starts on a new one.
		_ = c.Close(context.Background())
		c = nil
	}
	lc.done(c)
	return true, nil, err
}

// connect opens a connection with the lease connection's settings.
func (lc *leaseConn) connect(ctx context.Context) (*pgx.Conn, error) {
	return connectNamed(ctx, lc.cfg, leaseApplicationName)
}

// connectNamed opens a connection with cfg, named name in pg_stat_activity.
func connectNamed(ctx context.Context, cfg *pgx.ConnConfig, name string) (*pgx.Conn, error) {
	cfg = cfg.Copy()
	cfg.RuntimeParams = maps.Clone(cfg.RuntimeParams)
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["application_name"] = name
	return pgx.ConnectConfig(ctx, cfg)
}

// takeSpare reserves one of the maxSpare connections for once and reports
// true; with none left it reports false, a channel closed when one is
// freed, and whether the caller should log that it waits (at most once per
// spareWarnEvery).
func (lc *leaseConn) takeSpare() (ok bool, freed <-chan struct{}, warn bool) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.spares < maxSpare {
		lc.spares++
		return true, nil, false
	}
	if lc.spareFreed == nil {
		lc.spareFreed = make(chan struct{})
	}
	now := time.Now()
	if warn = now.Sub(lc.warned) >= spareWarnEvery; warn {
		lc.warned = now
	}
	return false, lc.spareFreed, warn
}

// once runs fn on a connection of its own, opened for it and closed after,
// for an operation that finds the lease connection busy and the pool
// exhausted; it frees the spare that takeSpare reserved for it.
func (lc *leaseConn) once(ctx context.Context, fn func(DB, *pgconn.PgConn) error) error {
	defer func() {
		lc.mu.Lock()
		lc.spares--
		if lc.spareFreed != nil {
			close(lc.spareFreed)
			lc.spareFreed = nil
		}
		lc.mu.Unlock()
	}()
	c, err := lc.connect(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close(context.WithoutCancel(ctx)) }()
	return fn(c, c.PgConn())
}

// done ends what set busy, leaving c as the connection, and arranges its
// close if every holder let go meanwhile.
func (lc *leaseConn) done(c *pgx.Conn) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	lc.conn = c
	close(lc.busy)
	lc.busy = nil
	lc.closeIdleLocked()
}

// with runs fn on the lease connection while an Elector or a Set runs,
// else on the DB: a pool connection where db is a pool, so that Release can
// pipeline. While another statement runs on the lease connection, fn runs
// on whichever comes first: the lease connection once that statement ends,
// or a pool connection; and on a connection opened for it if the pool is
// exhausted (by bodies that hold its connections) and fewer than maxSpare
// such connections are open, else on whichever of the three frees first.
// So a statement that waits for long holds up no other.
func (p *Postgres) with(ctx context.Context, fn func(DB, *pgconn.PgConn) error) error {
	for p.lease != nil {
		done, busy, err := p.lease.do(ctx, fn)
		if done {
			return err
		}
		if busy == nil {
			break // nobody holds the lease connection
		}
		pool, ok := p.db.(*pgxpool.Pool)
		if !ok {
			break
		}
		var freed <-chan struct{} // nil unless every spare is in use
		if st := pool.Stat(); st.IdleConns() == 0 && st.TotalConns() >= st.MaxConns() {
			// Bodies hold every pool connection: waiting for one, or for
			// the busy statement, could outlast this operation's term.
			ok, f, warn := p.lease.takeSpare()
			if ok {
				return p.lease.once(ctx, fn)
			}
			if freed = f; warn {
				p.logger().Warn("lease operations wait: the lease connection is busy, bodies hold every pool connection, and the backend's spare connections are all open; raise the pool's MaxConns or hold fewer of its connections in bodies",
					"spares", maxSpare)
			}
		}
		actx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-busy:
				cancel()
			case <-freed:
				cancel()
			case <-actx.Done():
			}
		}()
		c, err := pool.Acquire(actx)
		cancel()
		if err == nil {
			defer c.Release()
			return fn(c, c.Conn().PgConn())
		}
		if ctx.Err() != nil {
			return err
		}
		// The lease connection or a spare is free again: try it.
	}
	switch db := p.db.(type) {
	case *pgxpool.Pool:
		c, err := db.Acquire(ctx)
		if err != nil {
			return err
		}
		defer c.Release()
		return fn(c, c.Conn().PgConn())
	case *pgx.Conn:
		return fn(db, db.PgConn())
	}
	return fn(p.db, nil)
}

// holdConnections keeps the backend's lease connection while an Elector
// runs; see [Postgres].
func (p *Postgres) holdConnections() func() {
	if p.lease == nil {
		return func() {}
	}
	return p.lease.hold()
}
