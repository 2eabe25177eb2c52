package pgleader

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgleader/pgleader/internal/hook"
)

// boundApplicationName names a session-bound elector's connection in
// pg_stat_activity.
const boundApplicationName = "pgleader bound lease"

// boundSession is the connection of one session-bound Elector (see
// Options.SessionBound): its campaigns, renewals, releases and hand-offs
// run on it, the terms it wins are bound to its session (schema version
// 19, migrations/0019_session_bound.up.sql), and between statements it
// keeps a read pending on it, so that the end of the session, whoever ends
// it, ends a bound term at once (ended). While another replica's bound
// term holds the lease, the candidate waits on it for that term's session
// lock, which the holder's release or the end of its session frees.
//
// It is used by one Elector's Run; mu serializes its statements, which
// the renewal goroutine and Run's own send.
type boundSession struct {
	cfg *pgx.ConnConfig
	key string
	// owner is the elector's, for internal/hook.Bound only.
	owner string
	ttl   time.Duration
	log   *slog.Logger

	mu   sync.Mutex
	conn *pgx.Conn
	be   *Postgres // the lease operations over conn
	// ended is closed when conn's session ends, or conn is closed; a new
	// connection gets a new one.
	ended chan struct{}
	// bound: a term bound to conn's session was won, confirmed or renewed
	// on it, and not released or handed off since.
	bound bool
	// readCancel and readDone belong to the pending read while one runs.
	readCancel context.CancelFunc
	readDone   chan struct{}
}

func newBoundSession(cfg *pgx.ConnConfig, key string, ttl time.Duration, log *slog.Logger) *boundSession {
	return &boundSession{cfg: cfg, key: key, ttl: ttl, log: log}
}

// errPooled is a session-bound elector's answer to a connection through a
// pooler that shares server sessions between clients (pgbouncer in
// transaction or statement mode): see open.
var errPooled = errors.New("a pooler (such as pgbouncer) is between this replica and PostgreSQL")

// errSessionPooler is open's answer to a connection through a pooler that
// gives each client a server session of its own for as long as it stays
// connected (pgbouncer in session mode). The session outlives the client:
// the pooler keeps it for the next client, so its end cannot tell that
// the holder is gone, nor its life that the holder is there. The elector
// runs TTL-bound instead, without a binding (never an early take-over).
var errSessionPooler = errors.New("a pooler in session mode (such as pgbouncer's pool_mode = session) is between this replica and PostgreSQL")

// open connects and checks that the session can hold a bound term: it is a
// server session of its own, not a pooler's (the process id the server
// announced at connect is the backend's), and the server will not end it
// for not hearing from the client within TTL (pgleader.bind_refusal).
// mu is held.
func (s *boundSession) open(ctx context.Context) error {
	c, err := connectNamed(ctx, s.cfg, boundApplicationName)
	if err != nil {
		return err
	}
	var pid uint32
	var refusal pgtype.Text
	if err := c.QueryRow(ctx, `SELECT pg_backend_pid(), pgleader.bind_refusal($1)`, exec, interval(s.ttl)).Scan(&pid, &refusal); err != nil {
		_ = c.Close(context.WithoutCancel(ctx))
		return sqlError("session-bound lease", err)
	}
	if err := ownSession(ctx, c, s.cfg, pid, "Options.SessionBound", "holder", "Elector"); err != nil {
		_ = c.Close(context.WithoutCancel(ctx))
		return err
	}
	if refusal.Valid {
		_ = c.Close(context.WithoutCancel(ctx))
		return invalidf("Options.SessionBound: %s; the lease could then be taken while its holder lives. "+
			"Raise or turn off that setting for the application's role (ALTER ROLE ... SET), or drop SessionBound", refusal.String)
	}
	if err := rehearseBound(ctx, c.PgConn(), s.ttl); err != nil {
		// Only the take-over's speed depends on it.
		s.log.Debug("rehearsing a session-bound take-over failed", "err", err)
	}
	s.conn, s.be, s.ended, s.bound = c, &Postgres{db: c, log: s.log}, make(chan struct{}), false
	return nil
}

// ownSession checks that c, whose backend is pid, is a server session of
// its own, not a pooler's: the process id the server announced at connect
// is the backend's. Through a pooler it returns errSessionPooler (wrapped)
// for one in session mode, told by sessionPooled, and an ErrInvalid error
// for one that shares server sessions between clients. option names the
// option, who what the session stands for, and what the component.
func ownSession(ctx context.Context, c *pgx.Conn, cfg *pgx.ConnConfig, pid uint32, option, who, what string) error {
	announced := c.PgConn().PID()
	if announced == pid {
		return nil
	}
	session, err := sessionPooled(ctx, c, cfg)
	switch {
	case err != nil:
		return sqlError(option+": probing the pooler", err)
	case session:
		return fmt.Errorf("pgleader: %s: %w (the connection announced process %d and its backend is %d)",
			option, errSessionPooler, announced, pid)
	}
	return invalidf("%s: %w: the connection announced process %d and its backend is %d, "+
		"and a notification sent to it from another connection did not arrive within %v: the pooler shares server sessions "+
		"between clients (transaction or statement mode), so a session cannot stand for the %s; "+
		"connect this %s's pool to PostgreSQL directly (or through a pooler in session mode, where the option falls back to the TTL), "+
		"or drop SessionBound", option, errPooled, announced, pid, probeTimeout, who, what)
}

// sessionPooled tells, for a connection c through a pooler, whether the
// pooler gives c a server session of its own for as long as c stays
// connected (session mode): c listens on a channel of its own, another
// connection made with cfg notifies it, and the notification arrives
// within probeTimeout only if the server session that ran the LISTEN is
// still c's. In transaction or statement mode that session went back to
// the pool when the LISTEN's transaction ended, and nothing reaches c.
func sessionPooled(ctx context.Context, c *pgx.Conn, cfg *pgx.ConnConfig) (bool, error) {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	ch := probeChannelPrefix + hex.EncodeToString(b) // hex: safe as an identifier
	if _, err := c.Exec(ctx, "LISTEN "+ch, exec); err != nil {
		return false, err
	}
	other, err := connectNamed(ctx, cfg, boundApplicationName+" probe")
	if err != nil {
		return false, err
	}
	_, err = other.Exec(ctx, `SELECT pg_notify($1, 'probe')`, exec, ch)
	_ = other.Close(context.WithoutCancel(ctx))
	if err != nil {
		return false, err
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	for {
		n, err := c.WaitForNotification(pctx)
		switch {
		case err == nil && n.Channel == ch:
			return true, nil
		case err == nil:
			continue
		case ctx.Err() == nil && pctx.Err() != nil:
			return false, nil // nothing arrived: not c's session any more
		}
		return false, err
	}
}

// rehearseBound runs, on a new session-bound connection, a whole take-over
// in a transaction that it rolls back, so that the real one does not pay
// for loading what it runs: the session's first winning campaign_bound
// (its lapse, the campaign's win and the binding) cost 15-17 ms of server
// time on the bench machine, a later one 6-8 ms, and a waiting candidate's
// connection has only ever lost before its take-over. A made-up key is won
// and bound by one made-up owner; the key's lock is let go, so the binding
// is of a backend that no longer holds it; another owner's campaign lapses
// that term, wins and binds it, and renews it; then a hand-off as
// [rehearse] runs it. The advisory lock, which a rollback does not free,
// is let go after.
func rehearseBound(ctx context.Context, pg *pgconn.PgConn, ttl time.Duration) error {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	key := "pgleader.rehearsal." + hex.EncodeToString(b) // hex: safe in a literal
	sql := fmt.Sprintf(`BEGIN;
SELECT acquired FROM pgleader.campaign_bound('%[1]s', '%[2]s.a', '%[3]d microseconds', 0, NULL, 0, NULL);
SELECT pgleader.unbind('%[1]s');
SELECT lapsed FROM pgleader.campaign_bound('%[1]s', '%[2]s.b', '%[3]d microseconds', 0, NULL, 0, '%[3]d microseconds');
SELECT bound FROM pgleader.renew_bound('%[1]s', '%[2]s.b', (SELECT token FROM pgleader.lease('%[1]s')), '%[3]d microseconds', NULL);
ROLLBACK;
SELECT pgleader.unbind('%[1]s')`, key, rehearsalOwner, ttl.Microseconds())
	_, err := pg.Exec(ctx, sql).ReadAll()
	if s := pg.TxStatus(); s == 'T' || s == 'E' {
		if _, rerr := pg.Exec(ctx, "ROLLBACK").ReadAll(); err == nil {
			err = rerr
		}
		if _, uerr := pg.Exec(ctx, fmt.Sprintf(`SELECT pgleader.unbind('%s')`, key)).ReadAll(); err == nil {
			err = uerr
		}
	}
	if err == nil {
		err = rehearse(ctx, pg, ttl)
	}
	return err
}

// use stops the pending read and returns with mu held and a connection
// open, or an error (with mu released).
func (s *boundSession) use(ctx context.Context) error {
	if h := hook.Bound.Load(); h != nil && h.Gate != nil {
		if err := h.Gate(s.owner); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.stopRead()
	if s.conn != nil && !s.conn.IsClosed() {
		return nil
	}
	s.dropLocked()
	if err := s.open(ctx); err != nil {
		s.mu.Unlock()
		return err
	}
	return nil
}

// done ends a use: after an error that may have left the connection in an
// unknown state it closes it (ending the session, and so a term bound to
// it), else it starts the pending read while a term is bound. It releases
// mu.
func (s *boundSession) done(err error) {
	defer s.mu.Unlock()
	var pgErr *pgconn.PgError
	if err != nil && !errors.As(err, &pgErr) || s.conn != nil && s.conn.IsClosed() {
		s.dropLocked()
		return
	}
	if s.bound {
		s.startRead()
	}
}

// dropLocked closes the connection, if any, and closes its ended.
func (s *boundSession) dropLocked() {
	if s.conn != nil {
		_ = s.conn.Close(context.Background())
		s.conn, s.be = nil, nil
	}
	if s.ended != nil {
		closeOnce(s.ended)
		s.ended = nil
	}
	s.bound = false
}

// startRead keeps a read pending on the connection until stopRead: it
// returns only when the server ends the session (an error, FATAL 57P01 when
// terminated, or the end of the stream) or stopRead interrupts it. mu is
// held.
func (s *boundSession) startRead() {
	// The read tells lead at once, without waiting for mu, which a
	// statement stuck on the dead connection may hold.
	s.readCancel, s.readDone = keepReadPending(s.conn, s.ended, s.log,
		"the session-bound lease connection's session ended; its term is lost")
}

// keepReadPending keeps a read pending on conn until the returned cancel
// is called: when the server ends the session (an error, FATAL 57P01 when
// terminated, or the end of the stream) it logs msg and closes ended. done
// is closed when the read has returned.
func keepReadPending(conn *pgx.Conn, ended chan struct{}, log *slog.Logger, msg string) (cancel context.CancelFunc, done chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan struct{})
	go func() {
		defer close(done)
		for {
			err := conn.PgConn().WaitForNotification(ctx)
			if err == nil {
				continue // nothing listens on this session; ignore
			}
			if ctx.Err() != nil && !conn.PgConn().IsClosed() {
				return // cancelled
			}
			log.Warn(msg, "err", err)
			closeOnce(ended)
			return
		}
	}()
	return cancel, done
}

// stopRead interrupts the pending read, if one runs, and waits for it. mu
// is held.
func (s *boundSession) stopRead() {
	if s.readCancel == nil {
		return
	}
	s.readCancel()
	<-s.readDone
	s.readCancel, s.readDone = nil, nil
	if s.conn != nil && s.conn.IsClosed() {
		s.dropLocked()
	}
}

// closeOnce closes ch unless it is closed already. Only the pending read
// and dropLocked (which waits for the read first, so the two never race)
// close an ended channel.
func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// sessionEnded returns the channel closed when the session of the bound
// term ends, or nil while no term is bound.
func (s *boundSession) sessionEnded() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.bound {
		return nil
	}
	return s.ended
}

// campaign is Backend.Campaign through pgleader.campaign_bound. It also
// reports whether the term holding the lease (when another does) is bound
// to a live session, and whether this campaign lapsed a bound term whose
// session had ended.
func (s *boundSession) campaign(ctx context.Context, c Candidate, ttl time.Duration, floor int64) (l Lease, won, holderBound, lapsed bool, err error) {
	if err := s.use(ctx); err != nil {
		return Lease{}, false, false, false, err
	}
	sent := time.Now()
	defer func() {
		s.report(hook.BoundReport{Op: "campaign", Sent: sent, Err: err, Won: won, Bound: s.bound, Lapsed: lapsed,
			Holder: l.Holder, Token: l.Token, Now: l.Now, Expires: l.ExpiresAt, AcquiredAt: l.AcquiredAt})
		s.done(err)
	}()
	var holder, value pgtype.Text
	var expires, now, acquiredAt pgtype.Timestamptz
	var bound bool
	var cand pgtype.Interval
	if c.TTL > 0 {
		cand = interval(c.TTL)
	}
	err = s.conn.QueryRow(ctx, `SELECT acquired, holder, token, expires_at, db_now, value, acquired_at, bound, holder_bound, lapsed
		FROM pgleader.campaign_bound($1, $2, $3, $4, $5, $6, $7)`, exec,
		s.key, c.Owner, interval(ttl), floor, pgtype.Text{String: c.Value, Valid: c.Value != ""}, c.Priority, cand).
		Scan(&won, &holder, &l.Token, &expires, &now, &value, &acquiredAt, &bound, &holderBound, &lapsed)
	if err != nil {
		return Lease{}, false, false, false, sqlError("campaign", err)
	}
	l.Key, l.Now = s.key, now.Time
	if holder.Valid {
		// In the server's grace the holder is 'pgleader.grace' and the
		// expiry the grace's end, as Postgres.Campaign reports it: the
		// Elector waits for it. (A lease reported free there had the
		// Elector campaign again at once, hundreds of times a second,
		// until the grace ended.)
		l.Holder, l.ExpiresAt, l.Value = holder.String, expires.Time, value.String
		l.AcquiredAt = acquiredAt.Time
	}
	s.bound = won && bound
	return l, won, holderBound, lapsed, nil
}

// renewTerm is Backend.RenewTerm through pgleader.renew_bound: a term bound
// to this session is renewed only on it.
func (s *boundSession) renewTerm(ctx context.Context, owner string, token int64, ttl, minTerm time.Duration) (expires time.Time, resign bool, err error) {
	if err := s.use(ctx); err != nil {
		return time.Time{}, false, err
	}
	sent := time.Now()
	defer func() {
		r := hook.BoundReport{Op: "renew", Sent: sent, Err: err, Token: token, Expires: expires}
		if errors.Is(err, ErrLost) {
			r.Err, r.Lost = nil, true
		}
		s.report(r)
		s.done(err)
	}()
	var e pgtype.Timestamptz
	var bound bool
	err = s.conn.QueryRow(ctx, `SELECT expires_at, resign, bound FROM pgleader.renew_bound($1, $2, $3, $4, $5)`, exec,
		s.key, owner, token, interval(ttl), pgtype.Interval{Microseconds: minTerm.Microseconds(), Valid: minTerm >= 0}).
		Scan(&e, &resign, &bound)
	if err != nil {
		return time.Time{}, false, sqlError("renew", err)
	}
	if !e.Valid {
		s.bound = false
		return time.Time{}, false, ErrLost
	}
	s.bound = bound
	return e.Time, resign, nil
}

// end runs the release or hand-off of a term won on this session, then
// lets go of the key's session lock, which wakes a candidate waiting on
// it. Without a connection (its session ended), it runs on fallback: a
// term can be released from any session.
func (s *boundSession) end(ctx context.Context, fallback Backend, op func(Backend) error) error {
	s.mu.Lock()
	s.stopRead()
	if s.conn == nil || s.conn.IsClosed() {
		// The session ended, and its lock with it: nothing to let go of,
		// and no reason to open a connection for the release.
		s.dropLocked()
		s.mu.Unlock()
		return op(fallback)
	}
	var be Backend = s.be
	if h := hook.Bound.Load(); h != nil && h.Report != nil {
		be = reportedEnd{s.be, s}
	}
	err := op(be)
	if err == nil || s.conn.IsClosed() {
		s.bound = false
	}
	if !s.conn.IsClosed() {
		if _, uerr := s.conn.Exec(ctx, `SELECT pgleader.unbind($1)`, exec, s.key); uerr != nil && err == nil {
			err = fmt.Errorf("pgleader: unbind: %w", uerr)
		}
	}
	s.done(err)
	return err
}

// report hands r to internal/hook.Bound, if set.
func (s *boundSession) report(r hook.BoundReport) {
	if h := hook.Bound.Load(); h != nil && h.Report != nil {
		r.Owner = s.owner
		h.Report(r)
	}
}

// reportedEnd is the session's backend for a release or hand-off while
// internal/hook.Bound is set: it reports the statement's outcome.
type reportedEnd struct {
	*Postgres
	s *boundSession
}

func (b reportedEnd) Release(ctx context.Context, key, owner string, token int64) (bool, error) {
	sent := time.Now()
	released, err := b.Postgres.Release(ctx, key, owner, token)
	b.s.report(hook.BoundReport{Op: "release", Sent: sent, Err: err, Token: token, Released: released})
	return released, err
}

func (b reportedEnd) HandOff(ctx context.Context, key, owner string, token int64, to string) (bool, string, error) {
	sent := time.Now()
	released, successor, err := b.Postgres.HandOff(ctx, key, owner, token, to)
	b.s.report(hook.BoundReport{Op: "handoff", Sent: sent, Err: err, Token: token, Released: released, Successor: successor})
	return released, successor, err
}

// waitHolder waits up to d on the connection for the holder's session lock
// and reports whether it took it: the bound holder released the lease or
// its session ended. A wait cut short by ctx costs the connection (pgx
// closes it), so callers let the wait run out when they can.
func (s *boundSession) waitHolder(ctx context.Context, d time.Duration) (took bool, err error) {
	if err := s.use(ctx); err != nil {
		return false, err
	}
	defer func() { s.done(err) }()
	err = s.conn.QueryRow(ctx, `SELECT pgleader.wait_session($1, $2)`, exec, s.key, interval(d)).Scan(&took)
	if err != nil {
		return false, sqlError("wait for the holder's session", err)
	}
	return took, nil
}

// close ends the session (and with it any lock or bound term on it).
func (s *boundSession) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopRead()
	s.dropLocked()
}
