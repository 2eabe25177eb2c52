package pgleader

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgleader/pgleader/internal/hook"
	"github.com/pgleader/pgleader/internal/wait"
)

// The application names of a session-bound set member's two connections,
// in pg_stat_activity.
const (
	setSessionApplicationName = "pgleader set session"
	setWatchApplicationName   = "pgleader set watch"
)

// setSession is the bound session of a set member with
// SetOptions.SessionBound (schema version 25,
// migrations/0025_set_session.up.sql): a connection of its own that holds
// the member's lock (pgleader.set_bind) and, from then on, only keeps a
// read pending, so that the end of the session, whoever ends it, is known
// at once (ended). The member's other statements run on the backend's
// pool as ever: a key is bound to the session by the instant it was
// acquired, not by the connection that acquired it.
type setSession struct {
	cfg        *pgx.ConnConfig
	set, owner string
	ttl        time.Duration
	log        *slog.Logger

	mu         sync.Mutex
	conn       *pgx.Conn
	ended      chan struct{} // closed when conn's session ends, or conn is closed
	readCancel context.CancelFunc
	readDone   chan struct{}
}

// errBindBusy is bind's answer when another session holds the member's
// lock: a watcher granted it for a moment, or an earlier session of this
// member that has not ended yet. The caller tries again.
var errBindBusy = errors.New("another session holds this member's lock")

// bind opens the session and binds it: it must be a server session of its
// own, not a pooler's, and one the server will not end sooner than the TTL
// for not hearing from the client. keys are the set's: set_bind lapses
// those the member acquired under an earlier session of its that ended on
// this server run (lapsed counts them). It returns the channel closed when
// the session ends. Errors: errSessionPooler (the caller runs without a
// binding), an ErrInvalid one for a pooler that shares sessions or a
// refusal (the caller stops), errBindBusy, or a connection's.
func (s *setSession) bind(ctx context.Context, keys []string) (ended <-chan struct{}, lapsed int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropLocked()
	c, err := connectNamed(ctx, s.cfg, setSessionApplicationName)
	if err != nil {
		return nil, 0, err
	}
	var pid uint32
	if err := c.QueryRow(ctx, `SELECT pg_backend_pid()`, exec).Scan(&pid); err != nil {
		_ = c.Close(context.WithoutCancel(ctx))
		return nil, 0, sqlError("session-bound set member", err)
	}
	if err := ownSession(ctx, c, s.cfg, pid, "SetOptions.SessionBound", "member", "Set"); err != nil {
		_ = c.Close(context.WithoutCancel(ctx))
		return nil, 0, err
	}
	var bound bool
	var refusal pgtype.Text
	var l setLapsed
	sent := time.Now()
	if err := c.QueryRow(ctx, `SELECT bound, refusal, lapsed_keys, lapsed_tokens, lapsed_acquired, lapsed_at
	                             FROM pgleader.set_bind($1, $2, $3, $4)`, exec, s.set, s.owner, interval(s.ttl), keys).
		Scan(&bound, &refusal, &l.keys, &l.tokens, &l.acquired, &l.at); err != nil {
		_ = c.Close(context.WithoutCancel(ctx))
		return nil, 0, sqlError("set_bind", err)
	}
	switch {
	case refusal.Valid:
		_ = c.Close(context.WithoutCancel(ctx))
		return nil, 0, invalidf("SetOptions.SessionBound: %s; the set's keys could then be taken while this member lives. "+
			"Raise or turn off that setting for the application's role (ALTER ROLE ... SET), or drop SessionBound", refusal.String)
	case !bound:
		_ = c.Close(context.WithoutCancel(ctx))
		return nil, 0, errBindBusy
	}
	if len(l.keys) > 0 {
		l.holders = make([]string, len(l.keys))
		for i := range l.holders {
			l.holders[i] = s.owner
		}
		l.report(s.owner, s.set, "bind", sent)
		// The other members campaign for the keys lapsed now, not at
		// their next tick.
		setHint(ctx, c, s.set, "release", s.log, "lapsing this member's keys")
	}
	s.conn, s.ended = c, make(chan struct{})
	s.startRead()
	return s.ended, len(l.keys), nil
}

// setLapsed is what one set_bind or set_wake lapsed: the terms (key,
// holder, token, acquisition) and the expiry it gave them.
type setLapsed struct {
	keys, holders []string
	tokens        []int64
	acquired      []time.Time
	at            pgtype.Timestamptz
}

// report hands l to internal/hook.Bound, if set: the fault-injection
// checker ends those terms at l.at when a failover lost the lapse from the
// lease table's audit.
func (l setLapsed) report(owner, set, op string, sent time.Time) {
	if h := hook.Bound.Load(); h != nil && h.SetLapse != nil {
		h.SetLapse(hook.SetLapse{Owner: owner, Set: set, Op: op, Sent: sent, At: l.at.Time,
			Keys: l.keys, Holders: l.holders, Tokens: l.tokens, Acquired: l.acquired})
	}
}

// startRead keeps a read pending on the connection until close: it returns
// only when the server ends the session (an error, FATAL 57P01 when
// terminated, or the end of the stream), and then closes ended. mu is
// held.
func (s *setSession) startRead() {
	s.readCancel, s.readDone = keepReadPending(s.conn, s.ended, s.log, "the set member's bound session ended; its terms are lost")
}

// dropLocked stops the pending read and closes the connection, if any,
// which ends the session and lets go of the member's lock. mu is held.
func (s *setSession) dropLocked() {
	if s.readCancel != nil {
		s.readCancel()
		<-s.readDone
		s.readCancel, s.readDone = nil, nil
	}
	if s.conn != nil {
		_ = s.conn.Close(context.Background())
		s.conn = nil
	}
	if s.ended != nil {
		closeOnce(s.ended)
		s.ended = nil
	}
}

// close ends the session.
func (s *setSession) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropLocked()
}

// The run's side of SetOptions.SessionBound. The loop goroutine owns
// these fields of setRun; binder and watcher goroutines reach it through
// done.

// bindRetry is how soon a bind that found the member's lock held tries
// again: a watcher holds it for one statement.
const bindRetry = 50 * time.Millisecond

// startBinding starts the goroutine that binds the member's session, and
// binds it again each time it ends, until the run ends. Run's loop calls it
// once.
func (r *setRun) startBinding() {
	s := r.s
	r.sess = &setSession{cfg: s.backend.Abilities().connect, set: s.spec.Key, owner: s.opts.Owner, ttl: s.spec.TTL, log: s.log}
	r.sessCtx, r.sessStop = context.WithCancel(context.WithoutCancel(r.ctx))
	r.watchPoke = make(chan struct{}, 1)
	r.rebind()
}

// rebind binds the session in the background; the loop learns the outcome
// through done (bound, or the run's end for an error retrying cannot cure).
func (r *setRun) rebind() {
	s, ctx, gen := r.s, r.sessCtx, r.gen
	keys := s.Keys()
	r.sessWG.Add(1)
	go func() {
		defer r.sessWG.Done()
		var busySince time.Time
		for failures := 0; ; failures++ {
			bctx, cancel := context.WithTimeout(ctx, s.spec.TTL)
			ended, lapsed, err := r.sess.bind(bctx, keys)
			cancel()
			if ctx.Err() != nil {
				return
			}
			var f func()
			switch {
			case err == nil:
				if lapsed > 0 {
					s.log.Info("lapsed the keys this member held under its ended session", "keys", lapsed)
				}
				f = func() { r.sessionBound(gen, ended, lapsed > 0) }
			case errors.Is(err, errSessionPooler):
				f = func() {
					s.log.Warn("SetOptions.SessionBound cannot bind a member to a pooler's sessions; this Run's terms are bound to the TTL: "+
						"a crashed member's keys wait for their expiry", "err", err)
					r.sessionBound(gen, nil, false)
				}
			case Permanent(err):
				f = func() {
					s.fail(err)
					s.log.Error("set failed, and retrying cannot cure it: Run returns", "err", err)
					r.fatal = err
					r.stop()
				}
			}
			if f != nil {
				select {
				case r.done <- f:
				case <-ctx.Done():
				}
				return
			}
			retry := bindRetry
			switch {
			case !errors.Is(err, errBindBusy):
				busySince = time.Time{}
				retry = s.spec.backoff(failures + 1)
				s.log.Warn("binding the set member's session failed", "err", err, "retry_in", retry)
			case busySince.IsZero():
				busySince = time.Now()
			case time.Since(busySince) >= s.spec.TTL:
				// A watcher holds the lock for a statement; a TTL of it is
				// another live session under this Owner (a second replica
				// with the same Owner), or another member whose lock
				// shares its hash: this member does not campaign meanwhile.
				s.log.Warn("another session has held this set member's lock for a TTL: the member cannot bind, and does not campaign; "+
					"is another replica running with the same Owner?", "since", busySince)
				busySince = time.Now()
			}
			if !wait.Sleep(ctx, retry) {
				return
			}
		}
	}()
}

// sessionBound is the loop's news of a bind for generation gen: ended is
// the session's end, or nil when the run goes on without a binding; lapsed,
// whether the bind lapsed keys. The member campaigns from now on, and the
// watcher starts once.
func (r *setRun) sessionBound(gen int, ended <-chan struct{}, lapsed bool) {
	if gen != r.gen || r.stopping {
		return
	}
	r.bound, r.sessEnded = true, ended
	if lapsed {
		r.hinted = fullCampaign
	}
	if ended == nil {
		r.sessStop() // no binding, no watch
	} else if !r.watching {
		r.watching = true
		r.startWatch()
	}
	r.schedule()
}

// sessionLost ends every term as lost once the bound session ended: a
// watcher may already have lapsed their keys and another member taken
// them. Campaigns wait for the next binding, and a campaign sent before
// this releases what it won (see campaigned).
func (r *setRun) sessionLost() {
	r.sessEnded, r.bound = nil, false
	r.gen++
	now := time.Now()
	n := 0
	for k, st := range r.terms {
		if st.t.Reason() == ReasonNone {
			n++
		}
		r.step(k, st, st.m.Lost(now, false))
	}
	r.s.log.Warn("the set member's bound session ended: its terms end as lost, and it binds a new one", "terms", n)
	if !r.stopping {
		r.rebind()
	}
}

// startWatch starts the watcher: on a connection of its own it waits on
// the next live member's lock (pgleader.wait_member), and when the lock is
// granted (that member's session ended) or the wait times out it calls
// pgleader.set_wake, which lapses the keys of the members whose sessions
// ended and names the member to watch next.
func (r *setRun) startWatch() {
	s, ctx := r.s, r.sessCtx
	r.sessWG.Add(1)
	go func() {
		defer r.sessWG.Done()
		var conn *pgx.Conn
		defer func() {
			if conn != nil {
				_ = conn.Close(context.Background())
			}
		}()
		failures := 0
		for ctx.Err() == nil {
			if conn == nil || conn.IsClosed() {
				c, err := connectNamed(ctx, s.backend.Abilities().connect, setWatchApplicationName)
				if err != nil {
					failures++
					if !wait.Sleep(ctx, s.spec.backoff(failures)) {
						return
					}
					continue
				}
				conn = c
			}
			watch, err := r.wake(ctx, conn)
			if err == nil && watch == "" {
				// Nobody to watch: look again when a tick finds the
				// members changed, or a watch's time later.
				select {
				case <-r.watchPoke:
				case <-time.After(watchEvery(s.spec)):
				case <-ctx.Done():
					return
				}
				continue
			}
			if err == nil {
				// Granted or timed out, the next wake looks at the ring.
				var granted bool
				err = conn.QueryRow(ctx, `SELECT pgleader.wait_member($1, $2, $3)`, exec, s.spec.Key, watch, interval(watchEvery(s.spec))).
					Scan(&granted)
			}
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				failures++
				s.log.Warn("watching the set's next member failed", "err", err)
				_ = conn.Close(context.Background())
				conn = nil
				if !wait.Sleep(ctx, s.spec.backoff(failures)) {
					return
				}
				continue
			}
			failures = 0
		}
	}()
}

// wake runs pgleader.set_wake on conn, first without keys, and again with
// the set's keys this member does not hold if that names dead members (a
// granted lock is as often a graceful leave, whose member row is gone, as
// a death, and at 100,000 keys each wake would send 66,666 keys beside the
// confirmations of the leaver's hand-offs), and returns the member to
// watch next. When it lapsed keys it tells this run and, by a
// hint on the set's name, the other members to campaign now.
func (r *setRun) wake(ctx context.Context, conn *pgx.Conn) (string, error) {
	s := r.s
	var keys []string
	for {
		var dead []string
		var watch pgtype.Text
		var l setLapsed
		sent := time.Now()
		if err := conn.QueryRow(ctx, `SELECT dead, watch, lapsed_keys, lapsed_holders, lapsed_tokens, lapsed_acquired, lapsed_at
		                                FROM pgleader.set_wake($1, $2, $3)`, exec, s.spec.Key, s.opts.Owner, keys).
			Scan(&dead, &watch, &l.keys, &l.holders, &l.tokens, &l.acquired, &l.at); err != nil {
			return "", sqlError("set_wake", err)
		}
		if len(dead) > 0 && keys == nil {
			var ok bool
			if keys, ok = r.askCandidates(ctx); !ok {
				return "", ctx.Err()
			}
			if keys == nil {
				keys = []string{}
			}
			continue
		}
		if len(l.keys) > 0 {
			l.report(s.opts.Owner, s.spec.Key, "wake", sent)
			s.log.Info("lapsed the keys of set members whose sessions ended", "keys", len(l.keys), "members", dead)
			setHint(ctx, conn, s.spec.Key, "release", s.log, "lapsing a dead member's keys")
			select {
			case r.done <- func() {
				if !r.stopping {
					r.hinted = fullCampaign
					r.schedule()
				}
			}:
			case <-ctx.Done():
			}
		}
		return watch.String, nil
	}
}

// watchEvery is how long a watcher waits on one member's lock before it
// looks at the ring again: a member that joined between it and the member
// it watches is watched from then on (set_wake names it).
func watchEvery(sp Spec) time.Duration { return min(sp.RenewEvery, time.Second) }

// pokeWatch tells the watcher, if it has nobody to watch, to look at the
// ring again: a tick found the members changed.
func (r *setRun) pokeWatch(before, after []SetMember) {
	if r.sess == nil || slices.EqualFunc(before, after, func(a, b SetMember) bool { return a.Owner == b.Owner }) {
		return
	}
	select {
	case r.watchPoke <- struct{}{}:
	default:
	}
}

// askCandidates asks the loop for the set's keys this member neither holds
// nor is releasing.
func (r *setRun) askCandidates(ctx context.Context) ([]string, bool) {
	reply := make(chan []string, 1)
	select {
	case r.done <- func() { reply <- r.candidates() }:
	case <-ctx.Done():
		return nil, false
	}
	select {
	case keys := <-reply:
		return keys, true
	case <-ctx.Done():
		return nil, false
	}
}

// stopBinding ends the watcher and the binder and closes the bound
// session, as the run ends: after the leave, so a watcher that wakes finds
// no member to lapse.
func (r *setRun) stopBinding() {
	if r.sess == nil {
		return
	}
	r.sessStop()
	r.sessWG.Wait()
	r.sess.close()
}
