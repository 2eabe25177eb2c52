//go:build unix

package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/pgleader/pgleader/pgleader"
)

const (
	// killWait bounds the wait, after SIGKILL, for the command's processes
	// to be gone. Only a process stuck in the kernel (uninterruptible
	// sleep) or owned by another user outlasts it.
	killWait = 5 * time.Second
	// pollEvery is how often the sweep looks for the command's processes.
	pollEvery = 10 * time.Millisecond
)

// supervisor runs the command for each term: it is the elector's Lead body
// and, for --exit-with-child, its Observer.
type supervisor struct {
	path          string
	argv          []string
	log           *slog.Logger
	exitWithChild bool
	yieldGrace    time.Duration
	stopRun       context.CancelFunc
	force         chan struct{} // closed by kill
	forceOnce     sync.Once

	mu      sync.Mutex
	ran     bool // a command has run to its end
	status  int  // the last command's exit status
	termRan bool // the current term's command has ended
}

// kill makes the running term SIGKILL its command's group now, as a second
// signal to pgleader asks.
func (s *supervisor) kill() { s.forceOnce.Do(func() { close(s.force) }) }

func (s *supervisor) lastStatus() (status int, ran bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status, s.ran
}

func (s *supervisor) ended(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ran, s.status, s.termRan = true, status, true
}

// Observe implements pgleader.Observer. With --exit-with-child it stops Run
// when a term in which the command ran is over, after the lease is released,
// so that pgleader exits instead of campaigning again.
func (s *supervisor) Observe(o pgleader.Observation) {
	if o.Kind != pgleader.ObserveTermEnded || !s.exitWithChild {
		return
	}
	s.mu.Lock()
	ran := s.termRan
	s.termRan = false
	s.mu.Unlock()
	if ran {
		s.stopRun()
	}
}

// lead is the elector's body: it runs the command for term t and returns
// once the command and every process of its group are gone, so the lease is
// released (or given up) only after that.
func (s *supervisor) lead(ctx context.Context, t *pgleader.Term) error {
	return s.execute(ctx, t, s.log.With("key", t.Key(), "owner", t.Owner(), "token", t.Token()))
}

// execute runs the command once in term t, with env added to what lead
// gives it, and returns once the command and every process of its group
// are gone; the error names a status other than 0.
func (s *supervisor) execute(ctx context.Context, t *pgleader.Term, log *slog.Logger, env ...string) error {
	cmd := exec.Command(s.path, s.argv[1:]...)
	cmd.Args[0] = s.argv[0]
	cmd.Env = append(os.Environ(),
		"PGLEADER_KEY="+t.Key(),
		"PGLEADER_TOKEN="+strconv.FormatInt(t.Token(), 10),
		"PGLEADER_OWNER="+t.Owner())
	cmd.Env = append(cmd.Env, env...)
	// Files, not pipes: Wait then returns when the command exits, even if
	// processes it left behind still hold the descriptors.
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = sysProcAttr()
	waited, err := start(cmd)
	if err != nil {
		s.ended(startFailure(err))
		log.Error("command did not start", "err", err)
		return fmt.Errorf("start %s: %w", s.argv[0], err)
	}
	g := &group{pgid: cmd.Process.Pid, log: log}
	log.Info("command started", "pid", g.pgid)

	ending, cancelled, force := t.Ending(), ctx.Done(), (<-chan struct{})(s.force)
	killed := false
	for running := true; running; {
		select {
		case <-waited:
			running = false
		case <-ending:
			ending = nil
			if t.Reason() == pgleader.ReasonLost {
				continue // the body is cancelled at once: SIGKILL, no grace
			}
			log.Info("term ending; SIGTERM to the command's process group", "reason", t.Reason().String(), "pgid", g.pgid)
			g.signal(syscall.SIGTERM)
		case <-cancelled:
			cancelled = nil
			log.Warn("term cancelled; SIGKILL to the command's process group", "reason", t.Reason().String(), "pgid", g.pgid)
			g.signal(syscall.SIGKILL)
			killed = true
		case <-force:
			force = nil
			g.signal(syscall.SIGKILL)
			killed = true
		}
	}
	status := exitStatusOf(cmd.ProcessState)
	log.Info("command exited", "status", status, "pid", g.pgid)
	g.sweep(ctx, s.force, killed, s.yieldGrace)
	s.ended(status)
	if status != 0 {
		return fmt.Errorf("command exited with status %d", status)
	}
	return nil
}

// start starts cmd and returns a channel that receives Wait's result.
// On Linux the command is started with a parent-death signal, which the
// kernel ties to the thread that forked it, not to the process: the
// goroutine stays on that thread until the command is reaped.
func start(cmd *exec.Cmd) (<-chan error, error) {
	started := make(chan error, 1)
	waited := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		waited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return waited, nil
}

// exitStatusOf returns a shell's view of how a process ended: its exit code,
// or 128+N if signal N killed it.
func exitStatusOf(ps *os.ProcessState) int {
	if ps == nil {
		return 1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// group is the command's process group, and on Linux the strays: its
// descendants that left the group (setsid, setpgid), which this process
// finds because, as a child subreaper, it adopts them.
type group struct {
	pgid int
	log  *slog.Logger
}

// signal sends sig to the group and to the strays. SIGTERM is followed by
// SIGCONT so that stopped processes act on it.
func (g *group) signal(sig syscall.Signal) {
	g.send(sig)
	if sig == syscall.SIGTERM {
		g.send(syscall.SIGCONT)
	}
}

func (g *group) send(sig syscall.Signal) {
	_ = syscall.Kill(-g.pgid, sig)
	for _, pid := range strays(g.pgid) {
		_ = syscall.Kill(pid, sig)
	}
}

// sweep returns once the group and the strays are gone. Call it after the
// command itself was reaped. Unless they were killed already, what is left
// gets SIGTERM, then SIGKILL after grace or when ctx (the body's) is
// cancelled or force is closed; the wait after SIGKILL is bounded by
// killWait.
func (g *group) sweep(ctx context.Context, force <-chan struct{}, killed bool, grace time.Duration) {
	if g.gone() {
		return
	}
	if !killed {
		g.log.Info("the command left processes behind; SIGTERM to them", "pgid", g.pgid)
		g.signal(syscall.SIGTERM)
		timer := time.NewTimer(grace)
		defer timer.Stop()
		if g.waitGone(ctx.Done(), force, timer.C, 0) {
			return
		}
		g.log.Warn("SIGKILL to the processes the command left behind", "pgid", g.pgid)
	}
	g.signal(syscall.SIGKILL)
	timer := time.NewTimer(killWait)
	defer timer.Stop()
	if !g.waitGone(nil, nil, timer.C, syscall.SIGKILL) {
		g.log.Error("processes of the command outlived SIGKILL; going on", "pgid", g.pgid, "waited", killWait)
	}
}

// waitGone polls until the group and strays are gone (true) or one of the
// channels is ready (false), sending resend, if not 0, on every poll to
// catch processes forked meanwhile.
func (g *group) waitGone(a, b <-chan struct{}, timeout <-chan time.Time, resend syscall.Signal) bool {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		if g.gone() {
			return true
		}
		select {
		case <-a:
			return false
		case <-b:
			return false
		case <-timeout:
			return false
		case <-tick.C:
			if resend != 0 {
				g.send(resend)
			}
		}
	}
}

// gone reaps the group's members that this process adopted and reports
// whether no process of the group, and no stray, is left.
func (g *group) gone() bool {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-g.pgid, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			break
		}
	}
	if err := syscall.Kill(-g.pgid, 0); err != syscall.ESRCH {
		return false
	}
	return len(strays(g.pgid)) == 0
}
