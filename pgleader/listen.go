package pgleader

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"maps"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/pgleader/pgleader/internal/speedup"
	"github.com/pgleader/pgleader/internal/wait"
)

// channel is the PostgreSQL notification channel of every lease event.
const channel = "pgleader"

// probeTimeout bounds the wait for the LISTEN connection's own test
// notification. Behind pgbouncer in transaction mode it never arrives.
const probeTimeout = 2 * time.Second

// reprobeAfter and reprobeMax space the probes after one found no
// delivery: a probe that was only slow must not turn LISTEN off for good,
// and a pooler that really cannot deliver costs one short connection per
// interval.
const (
	reprobeAfter = 30 * time.Second
	reprobeMax   = 10 * time.Minute
)

// applicationName names the LISTEN connection in pg_stat_activity.
const applicationName = "pgleader listen"

// listener holds one LISTEN connection while anything watches, and fans the
// notifications out to the watchers of each key.
type listener struct {
	db      DB // sends the probe notification
	connect *pgx.ConnConfig
	log     *slog.Logger

	life     sync.Mutex // serializes starting and stopping the goroutine
	cancel   context.CancelFunc
	done     chan struct{}
	stopping *time.Timer // stops the goroutine linger after the last unwatch

	mu        sync.Mutex
	watchers  map[string]map[*watch]struct{}
	count     int
	listening bool
	reprobe   time.Duration // the first wait after a probe found no delivery

	rehearsalFailed atomic.Bool // a rehearsal failed and said so at Warn

	off speedup.Mechanisms // switched off to measure them (internal/speedup)
}

type watch struct {
	key  string
	ch   chan Event
	cand *CandidateWatch // nil unless a candidate watches

	heedAfter time.Time // hand-off hints before this are not checked; guarded by listener.mu
}

// WatchCandidate implements [Watcher]: the LISTEN connection
// checks a hand-off hint naming c.Owner itself, with pgleader.take, as soon
// as it arrives. It is awake then, so the check costs one round trip with
// nothing idle on its path.
func (p *Postgres) WatchCandidate(key string, c CandidateWatch) (<-chan Event, func()) {
	if p.listen == nil {
		return nil, func() {}
	}
	return p.listen.watchAs(key, &c)
}

func newListener(db DB, connect *pgx.ConnConfig, log *slog.Logger) *listener {
	return &listener{db: db, connect: connect, log: log, watchers: make(map[string]map[*watch]struct{}), reprobe: reprobeAfter}
}

// Watch implements [Watcher].
func (p *Postgres) Watch(key string) (<-chan Event, func()) {
	if p.listen == nil {
		return nil, func() {}
	}
	return p.listen.watch(key)
}

// Listening implements [Watcher]: whether the LISTEN connection is up and
// delivering.
func (p *Postgres) Listening() bool {
	if p.listen == nil {
		return false
	}
	p.listen.mu.Lock()
	defer p.listen.mu.Unlock()
	return p.listen.listening
}

func (l *listener) watch(key string) (<-chan Event, func()) {
	return l.watchAs(key, nil)
}

func (l *listener) watchAs(key string, c *CandidateWatch) (<-chan Event, func()) {
	l.life.Lock()
	defer l.life.Unlock()
	w := &watch{key: key, ch: make(chan Event, 16), cand: c}
	l.mu.Lock()
	if l.watchers[key] == nil {
		l.watchers[key] = make(map[*watch]struct{})
	}
	l.watchers[key][w] = struct{}{}
	l.count++
	first := l.count == 1
	l.mu.Unlock()
	if l.stopping != nil {
		l.stopping.Stop() // watched again within linger: keep the session
		l.stopping = nil
	}
	if first && l.cancel == nil {
		ctx, cancel := context.WithCancel(context.Background())
		l.cancel, l.done = cancel, make(chan struct{})
		go l.run(ctx, l.done)
	}
	return w.ch, sync.OnceFunc(func() { l.unwatch(w) })
}

// unwatch removes w. The connection of the last watcher stays up for linger
// (see linger), then closes.
func (l *listener) unwatch(w *watch) {
	l.life.Lock()
	defer l.life.Unlock()
	l.mu.Lock()
	delete(l.watchers[w.key], w)
	if len(l.watchers[w.key]) == 0 {
		delete(l.watchers, w.key)
	}
	l.count--
	last := l.count == 0
	l.mu.Unlock()
	if last && l.cancel != nil {
		d := linger
		if l.off.Linger {
			d = 0
		}
		var t *time.Timer
		t = time.AfterFunc(d, func() {
			l.life.Lock()
			defer l.life.Unlock()
			if l.stopping != t {
				return // watched again since
			}
			l.stopping = nil
			l.cancel()
			<-l.done
			l.cancel = nil
		})
		l.stopping = t
	}
}

// run keeps a LISTEN connection up until ctx ends, reconnecting with
// backoff. While it is down, Listening is false and candidates poll.
func (l *listener) run(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	defer l.setListening(false)
	backoff := 100 * time.Millisecond
	l.mu.Lock()
	reprobe := l.reprobe
	l.mu.Unlock()
	for ctx.Err() == nil {
		err := l.session(ctx)
		if l.setListening(false) {
			l.broadcast(Event{Kind: EventDeaf})
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errNoNotifications) {
			l.log.Warn("LISTEN does not deliver notifications on this connection (pgbouncer in transaction mode?); candidates poll every CampaignEvery",
				"probe_again_in", reprobe)
			if !wait.Sleep(ctx, reprobe) {
				return
			}
			reprobe = min(2*reprobe, reprobeMax)
			continue
		}
		l.log.Warn("LISTEN connection lost; candidates poll until it is back", "err", err, "retry_in", backoff)
		if !wait.Sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

var errNoNotifications = errors.New("pgleader: the LISTEN probe notification never arrived")

// session runs one LISTEN connection until it fails or ctx ends.
func (l *listener) session(ctx context.Context) error {
	cfg := l.connect.Copy()
	cfg.RuntimeParams = maps.Clone(cfg.RuntimeParams)
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["application_name"] = applicationName
	// Interrupt a wait by a deadline on the socket rather than a cancel
	// request, so the connection stays usable and stopping is immediate.
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	probes := make(chan string, 1)
	var checks []*watch // hand-off hints to check once the read returns
	theirs := cfg.OnNotification
	cfg.OnNotification = func(c *pgconn.PgConn, n *pgconn.Notification) {
		if theirs != nil {
			theirs(c, n)
		}
		if strings.HasPrefix(n.Channel, probeChannelPrefix) {
			select {
			case probes <- n.Channel + " " + n.Payload:
			default:
			}
			return
		}
		if n.Channel != channel {
			return
		}
		if ev, ok := parseEvent(n.Payload); ok {
			checks = append(checks, l.deliver(ev)...)
		}
	}
	dialCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := pgx.ConnectConfig(dialCtx, cfg)
	cancel()
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := l.probe(ctx, conn, probes); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
		return err
	}
	l.setListening(true)
	l.broadcast(Event{Kind: EventResync})
	// Check for every candidate once: a hand-off may have been missed while
	// the connection was down. Before that, rehearse a hand-off, so that a
	// real one's take does not pay for loading what it runs.
	l.mu.Lock()
	for _, ws := range l.watchers {
		for w := range ws {
			if w.cand != nil {
				checks = append(checks, w)
			}
		}
	}
	l.mu.Unlock()
	resync := len(checks)
	if resync > 0 && !l.off.Rehearsal {
		// With a candidate's TTL, which its takes use: at most max_ttl.
		var pgErr *pgconn.PgError
		if err := rehearse(ctx, conn.PgConn(), checks[0].cand.TTL); err != nil && !errors.As(err, &pgErr) {
			return err
		} else if err != nil && l.rehearsalFailed.CompareAndSwap(false, true) {
			l.log.Warn("rehearsing a hand-off on the LISTEN connection failed; a successor's check runs without it, slower (said once per backend)", "err", err)
		} else if err != nil {
			l.log.Debug("rehearsing a hand-off failed", "err", err)
		}
	}
	for {
		for len(checks) > 0 {
			w := checks[0]
			checks = checks[1:]
			if err := l.check(ctx, conn, w, resync <= 0); err != nil {
				return err
			}
			resync--
		}
		// Notifications are handled by OnNotification as they are read.
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
	}
}

// check asks the database whether the lease was handed to w's candidate,
// confirming the term if so, and delivers the answer to w. A check for a
// hint that proved false defers the next hint's check (see HeedEvery). It
// returns an error only when the connection can no longer be trusted.
func (l *listener) check(ctx context.Context, conn *pgx.Conn, w *watch, hint bool) error {
	sent := time.Now()
	cctx, cancel := context.WithDeadline(ctx, sent.Add(w.cand.Budget))
	lease, acquired, err := take(cctx, conn, w.key, w.cand.Owner, w.cand.TTL, w.cand.Keep)
	cancel()
	ev := Event{Kind: EventHandedOff, Key: w.key, Owner: w.cand.Owner, Checked: true,
		Acquired: acquired, Lease: lease, Sent: sent, Err: err}
	l.mu.Lock()
	if hint && !acquired {
		w.heedAfter = sent.Add(w.cand.HeedEvery)
	}
	if _, ok := l.watchers[w.key][w]; ok {
		send(w.ch, ev)
	}
	l.mu.Unlock()
	var pgErr *pgconn.PgError
	if err != nil && !errors.As(err, &pgErr) {
		return err
	}
	return nil
}

// probeChannelPrefix starts the name of each probe's own channel.
const probeChannelPrefix = "pgleader_probe_"

// probe listens on a channel of its own, sends a notification on it from
// another session and waits for it, which fails where LISTEN is accepted
// but nothing is delivered. Only after it arrives does the session LISTEN
// on the lease channel: behind a transaction pooler the server connection
// that ran the probe's LISTEN goes back to the pool, and a channel nobody
// else notifies leaves it nothing to forward.
func (l *listener) probe(ctx context.Context, conn *pgx.Conn, probes <-chan string) error {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	probeChannel := probeChannelPrefix + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, "LISTEN "+probeChannel); err != nil {
		return err
	}
	want := probeChannel + " probe"
	var ignored string
	if err := l.db.QueryRow(ctx, `SELECT pg_notify($1, $2)::text`, pgx.QueryExecModeExec, probeChannel, "probe").Scan(&ignored); err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	for {
		select {
		case got := <-probes:
			if got == want {
				_, err := conn.Exec(ctx, "UNLISTEN "+probeChannel)
				return err
			}
			continue
		default:
		}
		if _, err := conn.WaitForNotification(pctx); err != nil {
			var netErr net.Error
			if ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout())) {
				return errNoNotifications
			}
			return err
		}
	}
}

// setListening sets whether events are delivered and reports whether that
// changed.
func (l *listener) setListening(v bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	changed := l.listening != v
	l.listening = v
	return changed
}

// deliver sends ev to the watchers of its key, and returns the candidate
// watchers whose hand-off hint is to be checked instead.
func (l *listener) deliver(ev Event) []*watch {
	l.mu.Lock()
	defer l.mu.Unlock()
	var checks []*watch
	for w := range l.watchers[ev.Key] {
		if ev.Kind == EventHandedOff && w.cand != nil {
			if w.cand.Owner == ev.Owner && !time.Now().Before(w.heedAfter) {
				checks = append(checks, w)
			}
			continue
		}
		send(w.ch, ev)
	}
	return checks
}

func (l *listener) broadcast(ev Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for key, ws := range l.watchers {
		for w := range ws {
			e := ev
			e.Key = key
			send(w.ch, e)
		}
	}
}

// send delivers ev without blocking, dropping the oldest event if the
// reader is behind, but never a confirmed term (ev.keep): a newer hint is
// dropped instead.
func send(ch chan Event, ev Event) {
	for {
		select {
		case ch <- ev:
			return
		default:
		}
		select {
		case old := <-ch:
			if old.keep() && !ev.keep() {
				ev = old
			}
		default:
		}
	}
}

// parseEvent reads a payload "acquire <key>", "release <key>", or
// "handoff <n> <owner> <key>" where n is the owner's length in bytes.
// Anyone who can connect can send one, so every field is checked and
// anything else is dropped.
func parseEvent(payload string) (Event, bool) {
	kind, rest, ok := strings.Cut(payload, " ")
	switch {
	case !ok:
		return Event{}, false
	case kind == "handoff":
		return parseHandOff(rest)
	case CheckKey(rest) != nil:
		return Event{}, false
	case kind == "acquire":
		return Event{Kind: EventAcquired, Key: rest}, true
	case kind == "release":
		return Event{Kind: EventReleased, Key: rest}, true
	}
	return Event{}, false
}

// parseHandOff reads "<n> <owner> <key>", the rest of a hand-off payload.
func parseHandOff(rest string) (Event, bool) {
	ns, rest, ok := strings.Cut(rest, " ")
	if !ok || len(ns) == 0 || len(ns) > 3 || strings.Trim(ns, "0123456789") != "" {
		return Event{}, false
	}
	n, err := strconv.Atoi(ns)
	if err != nil || n > len(rest)-2 || rest[n] != ' ' {
		return Event{}, false
	}
	owner, key := rest[:n], rest[n+1:]
	if CheckOwner(owner) != nil || CheckKey(key) != nil {
		return Event{}, false
	}
	return Event{Kind: EventHandedOff, Key: key, Owner: owner}, true
}
