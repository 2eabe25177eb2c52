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

// leaseConn is the connection the lease operations of running electors
// share. It is opened on first use while anyone holds it, reopened after any
// error that may have left it in an unknown state, and closed linger after
// the last holder lets go.
type leaseConn struct {
	cfg *pgx.ConnConfig

	mu      sync.Mutex // one statement at a time; guards the fields below
	conn    *pgx.Conn
	holders int
	closing *time.Timer   // closes conn linger after the last holder let go
	linger  time.Duration // 0: linger; tests set it
}

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
		if lc.holders == 0 && lc.conn != nil {
			c := lc.conn
			var t *time.Timer
			d := lc.linger
			if d == 0 {
				d = linger
			}
			t = time.AfterFunc(d, func() {
				lc.mu.Lock()
				defer lc.mu.Unlock()
				if lc.closing != t || lc.conn != c {
					return // held again, or replaced, since
				}
				_ = c.Close(context.Background())
				lc.conn, lc.closing = nil, nil
			})
			lc.closing = t
		}
	})
}

// do runs fn on the lease connection and reports true, or reports false
// without running it when nobody holds the connection.
func (lc *leaseConn) do(ctx context.Context, fn func(DB, *pgconn.PgConn) error) (bool, error) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.holders == 0 {
		return false, nil
	}
	if lc.conn == nil || lc.conn.IsClosed() {
		cfg := lc.cfg.Copy()
		cfg.RuntimeParams = maps.Clone(cfg.RuntimeParams)
		if cfg.RuntimeParams == nil {
			cfg.RuntimeParams = map[string]string{}
		}
		cfg.RuntimeParams["application_name"] = leaseApplicationName
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return true, err
		}
		lc.conn = c
	}
	err := fn(lc.conn, lc.conn.PgConn())
	var pgErr *pgconn.PgError
	if err != nil && !errors.As(err, &pgErr) {
		// A network error or a cancelled context: the connection's state
		// is unknown, so the next operation starts on a new one.
		_ = lc.conn.Close(context.Background())
		lc.conn = nil
	}
	return true, err
}

// with runs fn on the lease connection while an Elector runs, else on
// the DB: a pool connection where db is a pool, so that Release can
// pipeline.
func (p *Postgres) with(ctx context.Context, fn func(DB, *pgconn.PgConn) error) error {
	if p.lease != nil {
		if done, err := p.lease.do(ctx, fn); done {
			return err
		}
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
