package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/tcpproxy"
	"github.com/pgleader/pgleader/pgleader"
)

// Path is one of a replica's two ways to the database, each through its
// own proxy.
type Path int

// The paths.
const (
	// LeasePath carries the elector's statements and its LISTEN connection.
	LeasePath Path = 1 << iota
	// StorePath carries the body's claim, writes and the fence floor.
	StorePath
	// BothPaths is both.
	BothPaths = LeasePath | StorePath
)

// String returns the path's name.
func (p Path) String() string {
	switch p {
	case LeasePath:
		return "lease"
	case StorePath:
		return "store"
	case BothPaths:
		return "both"
	}
	return "none"
}

// HarnessConfig configures a Harness.
type HarnessConfig struct {
	// URL is a migrated database the harness may use as its own: it
	// creates its tables there. Its host must be reachable over TCP.
	URL string
	// Replicas is how many replicas to run. Default 3.
	Replicas int
	// Spec is every replica's timing and key (with SetKeys, the set's name).
	Spec pgleader.Spec
	// SetKeys, if positive, makes every replica run a pgleader.Set named
	// Spec.Key over that many keys (SetKeys(Spec.Key, n)), one body per key
	// it wins, instead of an Elector for Spec.Key.
	SetKeys int
	// NoFloor lists the replicas without the FenceFloor hook; PollOnly the
	// replicas without LISTEN.
	NoFloor, PollOnly []int
	// Broken makes every replica write without the fence condition, for
	// the checker's self-test.
	Broken bool
	// UnitEvery is the pause between units of the body. Default 25ms, or
	// 250ms with SetKeys (each key's body writes at that pace).
	UnitEvery time.Duration
	// Command, if set, runs each replica as a child process: the program
	// and arguments to re-execute, which must call ReplicaMain when the
	// environment variable ReplicaEnv is set. Otherwise replicas are
	// goroutines of the harness's process.
	Command []string
	// Verbose sends the electors' logs to standard error.
	Verbose bool
	// SessionBound turns pgleader.Options.SessionBound on in every
	// replica's Elector (not with SetKeys: a Set has no such option).
	SessionBound bool
}

// Harness runs replicas against one database, each through two proxies,
// and applies faults to them. Every fault and every replica operation is
// recorded in its History. Its methods are safe for concurrent use.
type Harness struct {
	cfg  HarnessConfig
	spec pgleader.Spec
	hist *History
	// watchdog, closed by Close, stops watch.
	watchdog   chan struct{}
	closeWatch sync.Once
	admin      *pgxpool.Pool
	via        *tcpproxy.Proxy // the admin pool's way to the database
	runID      string
	keys       []string // the elector's key, or the set's keys
	slots      []*slot
	closed     bool
	mu         sync.Mutex // guards closed and the slots' handles
}

// slot is one replica across its incarnations.
type slot struct {
	index        int
	lease, store *tcpproxy.Proxy
	mode         [2]proxyMode // the partitions in force, lease then store
	incarnation  int
	h            handle // nil while stopped
	paused       bool
	floor, poll  bool
	mu           sync.Mutex // serializes operations on this replica
}

type proxyMode struct {
	mode  tcpproxy.Mode
	delay time.Duration
	drip  int
}

// NewHarness sets up the store in cfg.URL and a pair of proxies per
// replica. It starts no replica; call Start or StartAll.
func NewHarness(ctx context.Context, cfg HarnessConfig) (*Harness, error) {
	if cfg.Replicas == 0 {
		cfg.Replicas = 3
	}
	if cfg.UnitEvery == 0 {
		cfg.UnitEvery = 25 * time.Millisecond
		if cfg.SetKeys > 0 {
			cfg.UnitEvery = 250 * time.Millisecond
		}
	}
	spec, err := resolveSpec(cfg.Spec)
	if err != nil {
		return nil, err
	}
	cfg.Spec = spec
	pcfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, err
	}
	if pcfg.ConnConfig.Host == "" || pcfg.ConnConfig.Host[0] == '/' {
		return nil, fmt.Errorf("chaos: the database must be reached over TCP to be proxied, got host %q", pcfg.ConnConfig.Host)
	}
	target := net.JoinHostPort(pcfg.ConnConfig.Host, strconv.Itoa(int(pcfg.ConnConfig.Port)))
	via, err := tcpproxy.Start(target)
	if err != nil {
		return nil, err
	}
	pcfg.ConnConfig.Host, pcfg.ConnConfig.Port, pcfg.ConnConfig.Fallbacks = "127.0.0.1", via.Port(), nil
	pcfg.ConnConfig.RuntimeParams["application_name"] = "chaos-harness"
	admin, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		via.Close()
		return nil, err
	}
	hist, err := NewSpooledHistory("")
	if err != nil {
		admin.Close()
		via.Close()
		return nil, err
	}
	h := &Harness{cfg: cfg, spec: spec, hist: hist, admin: admin, via: via, runID: randomID(), keys: []string{spec.Key},
		watchdog: make(chan struct{})}
	go h.watch(h.watchdog)
	if cfg.SetKeys > 0 {
		h.keys = SetKeys(spec.Key, cfg.SetKeys)
	}
	if err := Setup(ctx, admin, h.keys...); err != nil {
		h.Close()
		return nil, err
	}
	for i := range cfg.Replicas {
		s := &slot{index: i, floor: !contains(cfg.NoFloor, i), poll: contains(cfg.PollOnly, i)}
		h.slots = append(h.slots, s)
		if s.lease, err = tcpproxy.Start(target); err != nil {
			h.Close()
			return nil, err
		}
		if s.store, err = tcpproxy.Start(target); err != nil {
			h.Close()
			return nil, err
		}
	}
	return h, nil
}

// resolveSpec fills in the Spec's defaults the way pgleader.New does, so
// the checker knows the real timing.
func resolveSpec(spec pgleader.Spec) (pgleader.Spec, error) {
	el, err := pgleader.New(noBackend{}, spec, pgleader.Options{Owner: "spec",
		Lead:       func(context.Context, *pgleader.Term) error { return nil },
		FenceFloor: func(context.Context) (int64, error) { return 0, nil }})
	if err != nil {
		return spec, err
	}
	return el.Spec(), nil
}

// noBackend only lets resolveSpec build an Elector; it is never run.
type noBackend struct{ pgleader.Backend }

// Abilities claims Advance, as RequireFenceAdvance wants.
func (noBackend) Abilities() pgleader.Abilities { return pgleader.Abilities{Advance: true} }

func contains(list []int, i int) bool {
	for _, v := range list {
		if v == i {
			return true
		}
	}
	return false
}

func randomID() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// History returns the run's history.
func (h *Harness) History() *History { return h.hist }

// Spec returns the replicas' Spec with its defaults filled in.
func (h *Harness) Spec() pgleader.Spec { return h.spec }

// Keys returns the keys the replicas campaign for: the elector's key, or
// the set's keys.
func (h *Harness) Keys() []string { return slices.Clone(h.keys) }

// IsSet reports whether the replicas run a set.
func (h *Harness) IsSet() bool { return h.cfg.SetKeys > 0 }

// Replicas returns the number of replicas.
func (h *Harness) Replicas() int { return len(h.slots) }

// HasFloor reports whether replica i uses the FenceFloor hook.
func (h *Harness) HasFloor(i int) bool { return h.slots[i].floor }

// Processes reports whether replicas are child processes.
func (h *Harness) Processes() bool { return len(h.cfg.Command) > 0 }

func (h *Harness) appName(i int) string { return fmt.Sprintf("chaos-%s-r%d", h.runID, i) }

func (h *Harness) fault(i int, name string, detail string) {
	h.hist.Record(Event{Kind: KindFault, Replica: i, Fault: name, Detail: detail})
}

// Start starts replica i if it is stopped, as a new incarnation.
func (h *Harness) Start(i int) error {
	s := h.slots[i]
	s.mu.Lock()
	defer s.mu.Unlock()
	return h.start(s)
}

func (h *Harness) start(s *slot) error {
	h.mu.Lock()
	closed := h.closed
	h.mu.Unlock()
	if s.h != nil || closed {
		return nil
	}
	s.incarnation++
	cfg := ReplicaConfig{Index: s.index, Owner: ownerName(s.index, s.incarnation), AppName: h.appName(s.index),
		URL: h.cfg.URL, LeaseAddr: s.lease.Addr(), StoreAddr: s.store.Addr(), Spec: h.spec,
		Floor: s.floor, PollOnly: s.poll, Broken: h.cfg.Broken, UnitEvery: h.cfg.UnitEvery, Verbose: h.cfg.Verbose,
		SessionBound: h.cfg.SessionBound}
	if h.IsSet() {
		cfg.Keys = h.keys
	}
	if h.Processes() {
		p, err := startProcess(h.cfg.Command, cfg, h.hist)
		if err != nil {
			return err
		}
		s.h = p
	} else {
		s.h = startGoroutine(cfg, h.hist, func() { s.lease.Cut(); s.store.Cut() })
	}
	return nil
}

// StartAll starts every stopped replica.
func (h *Harness) StartAll() error {
	var errs []error
	for i := range h.slots {
		errs = append(errs, h.Start(i))
	}
	return errors.Join(errs...)
}

// Stop stops replica i: gracefully, or as a crash. It returns when the
// incarnation is gone.
func (h *Harness) Stop(i int, crash bool) {
	s := h.slots[i]
	s.mu.Lock()
	defer s.mu.Unlock()
	h.stop(s, crash)
}

func (h *Harness) stop(s *slot, crash bool) {
	if s.h == nil {
		return
	}
	how := "graceful"
	if crash {
		how = "crash"
	}
	h.hist.Record(Event{Kind: KindStop, Replica: s.index, Owner: ownerName(s.index, s.incarnation), Detail: how})
	s.h.stop(crash)
	s.h, s.paused = nil, false
	// A crash in goroutine mode cut the proxies; put back what is in force.
	h.applyMode(s, LeasePath)
	h.applyMode(s, StorePath)
}

// Pause freezes replica i past its lease, as a stop-the-world pause: in
// goroutine mode its backend calls and its body are held at gates (inUnit:
// the body is caught after it has seen Live true); in process mode it gets
// SIGSTOP. Resume lets it go.
func (h *Harness) Pause(i int, inUnit bool) {
	s := h.slots[i]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h == nil || s.paused {
		return
	}
	s.paused = true
	s.h.pause(inUnit && !h.Processes())
}

// Resume lets a paused replica i go on.
func (h *Harness) Resume(i int) {
	s := h.slots[i]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h != nil && s.paused {
		s.h.resume()
	}
	s.paused = false
}

// Partition degrades replica i's path (or both): Drop, Blackhole, Delay
// (by delay) or Drip (drip bytes per 10ms), until Mend.
func (h *Harness) Partition(i int, p Path, mode tcpproxy.Mode, delay time.Duration, drip int) {
	s := h.slots[i]
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, one := range []Path{LeasePath, StorePath} {
		if p&one != 0 {
			s.mode[one>>1] = proxyMode{mode, delay, drip}
			h.applyMode(s, one)
		}
	}
}

// Mend restores replica i's path (or both).
func (h *Harness) Mend(i int, p Path) { h.Partition(i, p, tcpproxy.Pass, 0, 0) }

func (h *Harness) applyMode(s *slot, p Path) {
	px, m := s.lease, s.mode[0]
	if p == StorePath {
		px, m = s.store, s.mode[1]
	}
	switch m.mode {
	case tcpproxy.Pass:
		px.Restore()
	case tcpproxy.Drop:
		px.Cut()
	case tcpproxy.Blackhole:
		px.Blackhole()
	case tcpproxy.Delay:
		px.Delay(m.delay)
	case tcpproxy.Drip:
		px.Drip(m.drip, 10*time.Millisecond)
	}
}

// KillBackends terminates replica i's backend connections on path with
// pg_terminate_backend, and returns how many: those its pools opened,
// found by application_name, and, with SessionBound, every connection
// through the path's proxy, found by the client port the server sees (the
// connections pgleader opens of its own, the session-bound one among
// them, carry pgleader's application_name).
func (h *Harness) KillBackends(ctx context.Context, i int, p Path) (int, error) {
	var like string
	switch p {
	case LeasePath:
		like = h.appName(i) + "-lease"
	case StorePath:
		like = h.appName(i) + "-store"
	default:
		like = h.appName(i) + "-%"
	}
	ports := []int{}
	if h.cfg.SessionBound {
		s := h.slots[i]
		if p&LeasePath != 0 {
			ports = append(ports, s.lease.ServerPorts()...)
		}
		if p&StorePath != 0 {
			ports = append(ports, s.store.ServerPorts()...)
		}
	}
	var n int
	err := h.admin.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()
		  AND (application_name LIKE $1 OR client_addr IS NOT NULL AND client_port = ANY($2))`, like, ports).Scan(&n)
	return n, err
}

// Wipe deletes the lease rows of every key (the elector's, or the set's),
// as if the lock data were lost, and records the database time it
// happened.
func (h *Harness) Wipe(ctx context.Context) (time.Time, error) {
	var at time.Time
	err := h.admin.QueryRow(ctx, `WITH d AS (DELETE FROM pgleader.lease WHERE key = ANY($1) RETURNING 1)
		SELECT clock_timestamp() FROM (SELECT count(*) FROM d) AS c`, h.keys).Scan(&at)
	if err == nil {
		h.hist.Record(Event{Kind: KindWipe, Replica: -1, DB: at})
	}
	return at, err
}

// Leader returns the replica whose incarnation holds the lease unexpired,
// as the lease table says; for a set, the one that holds the most keys
// (ties: the lowest owner).
func (h *Harness) Leader(ctx context.Context) (int, bool) {
	var holder string
	var err error
	if h.IsSet() {
		err = h.admin.QueryRow(ctx, `SELECT coalesce((SELECT holder FROM pgleader.lease
			WHERE key = ANY($1) AND holder IS NOT NULL AND expires_at > clock_timestamp()
			GROUP BY holder ORDER BY count(*) DESC, holder LIMIT 1), '')`, h.keys).Scan(&holder)
	} else {
		err = h.admin.QueryRow(ctx, `SELECT coalesce(holder, '') FROM pgleader.lease($1)`, h.spec.Key).Scan(&holder)
	}
	if err != nil || holder == "" {
		return 0, false
	}
	var i, inc int
	if _, err := fmt.Sscanf(holder, "r%d.%d", &i, &inc); err != nil || i < 0 || i >= len(h.slots) {
		return 0, false
	}
	return i, true
}

// DBNow returns the database's clock_timestamp().
func (h *Harness) DBNow(ctx context.Context) (time.Time, error) {
	var t time.Time
	err := h.admin.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&t)
	return t, err
}

// WroteSince reports whether every key of the run had a unit accepted after
// t, on the database's clock: what property 4 asks of each key after a
// heal.
func (h *Harness) WroteSince(ctx context.Context, t time.Time) (bool, error) {
	var n int
	err := h.admin.QueryRow(ctx, `SELECT count(DISTINCT key) FROM chaos_log WHERE key = ANY($1) AND logged_at > $2`,
		h.keys, t).Scan(&n)
	return n == len(h.keys), err
}

// HealAll ends every fault: it mends every path, resumes every paused
// replica and starts every stopped one, then records a heal event with the
// database time, from which a leader must be back within TTL +
// CampaignEvery.
func (h *Harness) HealAll(ctx context.Context) (time.Time, error) {
	for i, s := range h.slots {
		h.Mend(i, BothPaths)
		h.Resume(i)
		s.mu.Lock()
		err := h.start(s)
		s.mu.Unlock()
		if err != nil {
			return time.Time{}, err
		}
	}
	var at time.Time
	var err error
	for try := 0; try < 100; try++ { // the database may be restarting
		if at, err = h.DBNow(ctx); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return at, err
	}
	h.hist.Record(Event{Kind: KindHeal, Replica: -1, DB: at})
	return at, nil
}

// Retarget moves every path to the database (the replicas' and the
// harness's own) to the server at addr, closing their connections, as a
// failover moves the primary's address. Partitions in force stay in force.
func (h *Harness) Retarget(addr string) {
	h.via.Retarget(addr)
	for _, s := range h.slots {
		s.lease.Retarget(addr)
		s.store.Retarget(addr)
	}
}

// Tables reads what the checker needs from the database. It tries three
// times: after a failover the pool may still hold connections to the lost
// server.
func (h *Harness) Tables(ctx context.Context) (t Tables, err error) {
	for try := 0; try < 3; try++ {
		if t, err = ReadTables(ctx, h.admin, h.keys...); err == nil {
			return t, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return t, err
}

// StopAll stops every replica gracefully, for good: Start does nothing
// after it.
func (h *Harness) StopAll() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range h.slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.Resume(s.index)
			h.Stop(s.index, false)
		}()
	}
	wg.Wait()
}

// Close stops every replica and closes the proxies and the harness's pool.
func (h *Harness) Close() {
	h.StopAll()
	h.closeWatch.Do(func() { close(h.watchdog) })
	for _, s := range h.slots {
		if s.lease != nil {
			s.lease.Close()
		}
		if s.store != nil {
			s.store.Close()
		}
	}
	h.admin.Close()
	h.via.Close()
	_ = h.hist.Close() // a temporary file: nothing to do if its removal fails
}

// stallTick is the watchdog's period, and stallMin the lateness it records
// as a stall of the harness's process.
const (
	stallTick = 5 * time.Millisecond
	stallMin  = 50 * time.Millisecond
)

// watch records every stall of this process (a wake-up at least stallMin
// late) until done is closed: a garbage collection, a starved CPU or a
// stopped process delays the in-process proxies' traffic as it delays the
// watchdog.
func (h *Harness) watch(done <-chan struct{}) {
	t := time.NewTicker(stallTick)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			// time.Now, not the tick's value: a tick that waited in the
			// channel carries the time it was sent, not when this ran.
			now := time.Now()
			if gap := now.Sub(last); gap >= stallTick+stallMin {
				h.hist.Record(Event{Kind: KindStall, Replica: -1, Sent: last, Local: now, Detail: gap.Round(time.Millisecond).String()})
			}
			last = now
		}
	}
}
