package chaos

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/pgleader/pgleader/internal/tcpproxy"
	"github.com/pgleader/pgleader/internal/wait"
)

// The fault kinds the scheduler injects.
const (
	FaultStop        = "stop"          // stop a replica gracefully; restart it later
	FaultCrash       = "crash"         // crash a replica; restart it later
	FaultKill        = "kill-backends" // pg_terminate_backend its connections on a path
	FaultDrop        = "drop"          // partition a path: connections closed and refused
	FaultBlackhole   = "blackhole"     // partition a path: connections open, nothing forwarded
	FaultDelay       = "delay"         // delay a path's traffic
	FaultDrip        = "drip"          // slow-drip a path's traffic
	FaultPause       = "pause"         // pause a replica past its lease (SIGSTOP in process mode)
	FaultPauseInUnit = "pause-in-unit" // pause its body after a Live check (goroutine mode)
	FaultWipe        = "wipe"          // delete the lease rows
	FaultZombie      = "zombie"        // pause the leader inside a unit, wipe, resume it
	FaultPGRestart   = "pg-restart"    // restart PostgreSQL (own cluster only)
	FaultFailover    = "failover"      // kill the primary, promote its standby, move every path (own cluster only)
)

// AllFaults lists every fault kind.
var AllFaults = []string{FaultStop, FaultCrash, FaultKill, FaultDrop, FaultBlackhole, FaultDelay, FaultDrip,
	FaultPause, FaultPauseInUnit, FaultWipe, FaultZombie, FaultPGRestart, FaultFailover}

// faultWeights make the frequent faults frequent; process-level faults and
// restarts of the server are rarer.
var faultWeights = map[string]int{
	FaultStop: 2, FaultCrash: 2, FaultKill: 3, FaultDrop: 3, FaultBlackhole: 3, FaultDelay: 3, FaultDrip: 2,
	FaultPause: 3, FaultPauseInUnit: 2, FaultWipe: 2, FaultZombie: 2, FaultPGRestart: 1, FaultFailover: 1,
}

// Scheduler injects faults at random into a Harness, from a seed: the same
// seed gives the same sequence of decisions (which fault, which replica or
// the leader, how long, when). The system's own timing is not replayed, so
// a rerun meets the same faults, not the same interleavings.
type Scheduler struct {
	h       *Harness
	rng     *rand.Rand
	faults  []string
	restart func(ctx context.Context, immediate bool, down time.Duration) error
	cluster *Replicated
	log     io.Writer

	mu     sync.Mutex
	busy   map[int]bool // replicas under a fault
	active int
	wg     sync.WaitGroup
}

// NewScheduler returns a scheduler over h with the given fault kinds.
// restart, if not nil, restarts the database server (FaultPGRestart);
// cluster, if not nil, is the replicated cluster h's database is on, which
// FaultFailover fails over.
func NewScheduler(h *Harness, seed uint64, faults []string, restart func(ctx context.Context, immediate bool, down time.Duration) error,
	cluster *Replicated, log io.Writer) *Scheduler {
	var usable []string
	for _, f := range faults {
		switch {
		case f == FaultPGRestart && restart == nil:
		case f == FaultFailover && cluster == nil:
		case f == FaultPauseInUnit && h.Processes():
		default:
			usable = append(usable, f)
		}
	}
	return &Scheduler{h: h, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), faults: usable,
		restart: restart, cluster: cluster, log: log, busy: map[int]bool{}}
}

// maxActive bounds how many lasting faults overlap, so that the run is not
// one long outage.
const maxActive = 2

func (s *Scheduler) ttl() time.Duration { return s.h.Spec().TTL }

// between returns a duration in [lo, hi)·TTL.
func (s *Scheduler) between(lo, hi float64) time.Duration {
	return time.Duration((lo + s.rng.Float64()*(hi-lo)) * float64(s.ttl()))
}

func (s *Scheduler) pick() string {
	total := 0
	for _, f := range s.faults {
		total += faultWeights[f]
	}
	n := s.rng.IntN(total)
	for _, f := range s.faults {
		if n -= faultWeights[f]; n < 0 {
			return f
		}
	}
	return s.faults[0]
}

// Run injects faults for d, in phases: faults for a while, then every fault
// healed and a quiet spell until every key's leader writes again (or the
// recovery bound has passed), then the next phase. It heals everything
// before it returns.
func (s *Scheduler) Run(ctx context.Context, d time.Duration) error {
	end := time.Now().Add(d)
	for phase := 1; time.Now().Before(end) && ctx.Err() == nil; phase++ {
		length := min(s.between(4, 10), time.Until(end))
		fmt.Fprintf(s.log, "phase %d: faults for %v\n", phase, length.Round(time.Second))
		if err := s.phase(ctx, length); err != nil {
			return err
		}
		heal, err := s.h.HealAll(context.WithoutCancel(ctx))
		if err != nil {
			return err
		}
		s.awaitRecovery(ctx, heal)
	}
	return nil
}

// awaitRecovery waits until a unit of every key is accepted after heal, or
// the recovery bound and a second have passed, and then a little more: a
// quiet spell. (Waiting for the first key alone ended a set's run before
// its slowest key, still within the bound, had written.)
func (s *Scheduler) awaitRecovery(ctx context.Context, heal time.Time) {
	spec := s.h.Spec()
	deadline := time.Now().Add(RecoveryBound(spec, s.h.IsSet()) + time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if all, err := s.h.WroteSince(ctx, heal); err == nil && all {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	wait.Sleep(ctx, spec.TTL/2)
}

func (s *Scheduler) phase(ctx context.Context, length time.Duration) error {
	pctx, cancel := context.WithTimeout(ctx, length)
	defer cancel()
	for {
		if !wait.Sleep(pctx, s.between(0.05, 0.6)) {
			break
		}
		p := s.draw() // drawn even when it is not used, to keep the sequence
		s.mu.Lock()
		full := s.active >= maxActive
		s.mu.Unlock()
		if !full {
			s.inject(pctx, p)
		}
	}
	cancel()
	s.wg.Wait() // every lasting fault heals itself when the phase ends
	return nil
}

// plan is one fault's every random choice, drawn before anything about
// the system is looked at, so the sequence of plans follows from the seed
// alone.
type plan struct {
	kind      string
	leader    bool // aim at the leader if there is one, else at replica
	replica   int
	path      Path
	d         time.Duration // how long a lasting fault holds
	frac      float64       // where in its range a delay, drip or down time falls
	immediate bool
}

func (s *Scheduler) draw() plan {
	return plan{kind: s.pick(), leader: s.rng.Float64() < 0.6, replica: s.rng.IntN(s.h.Replicas()),
		path: paths[s.rng.IntN(len(paths))], d: s.between(0.2, 2.5), frac: s.rng.Float64(), immediate: s.rng.IntN(2) == 0}
}

// target resolves the plan's replica: the leader, if aimed at it, or the
// drawn one, or the next one not already under a fault; ok is false if
// none is free.
func (s *Scheduler) target(ctx context.Context, p plan) (int, bool) {
	r := p.replica
	if p.leader {
		if l, ok := s.h.Leader(ctx); ok {
			r = l
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for range s.h.Replicas() {
		if !s.busy[r] {
			return r, true
		}
		r = (r + 1) % s.h.Replicas()
	}
	return 0, false
}

// lasting runs a fault that holds replica r for d: apply now, heal after d
// or when the phase ends.
func (s *Scheduler) lasting(ctx context.Context, r int, name, detail string, d time.Duration, apply, heal func()) {
	s.mu.Lock()
	s.busy[r] = true
	s.active++
	s.mu.Unlock()
	fmt.Fprintf(s.log, "  %-13s r%d %s for %v\n", name, r, detail, d.Round(time.Millisecond))
	s.h.fault(r, name, fmt.Sprintf("%s for %v", detail, d.Round(time.Millisecond)))
	apply()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		wait.Sleep(ctx, d)
		heal()
		s.h.hist.Record(Event{Kind: KindFaultUp, Replica: r, Fault: name})
		s.mu.Lock()
		delete(s.busy, r)
		s.active--
		s.mu.Unlock()
	}()
}

func (s *Scheduler) instant(r int, name, detail string) {
	who := fmt.Sprintf("r%d", r)
	if r < 0 {
		who = "--"
	}
	fmt.Fprintf(s.log, "  %-13s %s %s\n", name, who, detail)
	s.h.fault(r, name, detail)
}

var paths = []Path{LeasePath, StorePath, BothPaths}

// inject applies the fault p, unless every replica is already under one.
func (s *Scheduler) inject(ctx context.Context, p plan) {
	if p.kind == FaultZombie {
		p.leader = true // a zombie is a leader by definition
	}
	r, ok := s.target(ctx, p)
	if !ok {
		return
	}
	h := s.h
	ttl := float64(s.ttl())
	switch p.kind {
	case FaultStop, FaultCrash:
		crash := p.kind == FaultCrash
		down := time.Duration(p.frac * 2 * ttl)
		s.lasting(ctx, r, p.kind, "down", down, func() { h.Stop(r, crash) }, func() { _ = h.Start(r) })
	case FaultKill:
		n, err := h.KillBackends(ctx, r, p.path)
		s.instant(r, p.kind, fmt.Sprintf("%s path: %d backends (err %v)", p.path, n, err))
	case FaultDrop, FaultBlackhole, FaultDelay, FaultDrip:
		mode, delay, drip, detail := tcpproxy.Drop, time.Duration(0), 0, p.path.String()+" path"
		switch p.kind {
		case FaultBlackhole:
			mode = tcpproxy.Blackhole
		case FaultDelay:
			// One way, at most a third of what separates the yield from
			// the lease's expiry, so the writes the yield lets through
			// land in time: a longer delay is an outage, not a delay.
			spec := h.Spec()
			slack := spec.Margin + spec.ReleaseTimeout + spec.YieldGrace
			mode, delay = tcpproxy.Delay, time.Duration(p.frac*float64(slack/3))
			detail += fmt.Sprintf(" by %v", delay.Round(time.Millisecond))
		case FaultDrip:
			mode, drip = tcpproxy.Drip, 32+int(p.frac*96)
			detail += fmt.Sprintf(" at %d bytes/10ms", drip)
		}
		s.lasting(ctx, r, p.kind, detail, p.d, func() { h.Partition(r, p.path, mode, delay, drip) }, func() { h.Mend(r, p.path) })
	case FaultPause, FaultPauseInUnit:
		d := time.Duration((0.5 + p.frac*1.5) * ttl) // mostly past the lease
		inUnit := p.kind == FaultPauseInUnit
		s.lasting(ctx, r, p.kind, "", d, func() { h.Pause(r, inUnit) }, func() { h.Resume(r) })
	case FaultWipe:
		at, err := h.Wipe(ctx)
		s.instant(-1, p.kind, fmt.Sprintf("at %s (err %v)", fmtTime(at), err))
	case FaultZombie:
		// The recipe's worst case: the leader is caught inside a unit, the
		// lease data is lost, a new term may claim, and the old leader
		// resumes its write.
		d := time.Duration((0.1 + p.frac*0.5) * ttl)
		s.lasting(ctx, r, p.kind, "paused in a unit, lease wiped", d, func() {
			h.Pause(r, true)
			_, _ = h.Wipe(ctx)
		}, func() { h.Resume(r) })
	case FaultFailover:
		s.failover(ctx, time.Duration(p.frac*ttl))
	case FaultPGRestart:
		down := time.Duration(p.frac * 0.5 * ttl)
		s.instant(-1, p.kind, fmt.Sprintf("immediate=%v, down %v", p.immediate, down.Round(time.Millisecond)))
		if err := s.restart(context.WithoutCancel(ctx), p.immediate, down); err != nil {
			fmt.Fprintf(s.log, "  pg-restart failed: %v\n", err)
		}
	}
}

// failover fails the cluster over, with replication cut lag before the
// kill, and moves every path to the new primary, if a standby has caught
// up; otherwise it does nothing. The cluster serializes failovers and
// restarts, so at most one is in flight, and the next failover waits for
// the standby it builds from the new primary.
func (s *Scheduler) failover(ctx context.Context, lag time.Duration) {
	if !s.cluster.Ready() {
		fmt.Fprintf(s.log, "  %-13s -- skipped: no standby has caught up yet\n", FaultFailover)
		return
	}
	f, ok, err := s.cluster.Failover(context.WithoutCancel(ctx), lag)
	if !ok {
		return
	}
	s.instant(-1, FaultFailover, fmt.Sprintf("replication cut %v before %s was killed; %s promoted", lag.Round(time.Millisecond), f.Old, f.New))
	if err != nil {
		fmt.Fprintf(s.log, "  failover failed: %v\n", err)
		return
	}
	s.h.Retarget(f.Addr)
	s.h.hist.Record(Event{Kind: KindFailover, Replica: -1, Prev: f.Old, Server: f.New, Sent: f.Killed, DB: f.Promoted})
}
