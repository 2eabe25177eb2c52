package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pgleader/pgleader/pgleader"
)

var (
	setProcs = flag.Bool("set-procs", false, "run each replica of the sets scale measurement in a process of its own, and crash one with SIGKILL (the default: three pools in this process, and a crash that fails its statements)")
	setBound = flag.Bool("set-bound", false, "with -set-procs, measure the sets scale measurement twice per key count: as ever, then with SetOptions.SessionBound in every replica (its crash row then also counts from the SIGKILL)")
	setChild = flag.Bool("set-child", false, "run as one replica process of the sets scale measurement (arguments: URL SET OWNER KEYS); the bench starts these itself")
)

// scaleReplica is one replica of the sets scale measurement: a Set on a
// pool of its own, in this process (localScale) or in one of its own
// (procScale).
type scaleReplica interface {
	name() string
	start() error
	// held is the Set's Status().Held; heldKeys the keys whose bodies run.
	held() int
	heldKeys() []string
	// stop cancels Run and waits for it to return; crash makes the
	// replica stop renewing and releasing at once.
	stop()
	crash()
	lastTick() time.Time
	counts() (campaigns, ticks int64)
	running() bool
	close()
	traced(t time.Time, kind, what string, err error)
}

// localScale is a replica in this process; a crash fails its statements.
type localScale struct {
	*setReplica
	set  string
	keys []string
	log  *entryLog
	took *tickTimes // the ticks' round trips
}

func (r *localScale) name() string { return r.owner }
func (r *localScale) start() error {
	return r.setReplica.start(r.set, r.keys, r.log.body, r.took)
}
func (r *localScale) held() int          { return r.setReplica.set.Status().Held }
func (r *localScale) heldKeys() []string { return heldKeys(r.setReplica.set) }
func (r *localScale) crash()             { r.crashed.Store(true) }
func (r *localScale) counts() (int64, int64) {
	return r.campaigns.Load(), r.ticks.Load()
}
func (r *localScale) running() bool { return r.cancel != nil }

// procScale is a replica in a process of its own (pgleader-bench
// -set-child), which reports on its standard output: R once ready, E KEY
// NS when a body starts, X KEY when it returns, T NS for each tick's
// round trip, S HELD CAMPAIGNS TICKS LAST every 10 ms, D once Run returned
// after a stop.
type procScale struct {
	url, set, owner string
	n               int
	bound           bool // SetOptions.SessionBound
	log             *entryLog
	took            *tickTimes // the ticks' round trips

	cmd    *exec.Cmd
	stdin  io.WriteCloser
	exited chan struct{}

	mu        sync.Mutex
	keys      map[string]bool
	nHeld     int
	campaigns int64
	nTicks    int64
	last      int64
}

func (p *procScale) name() string { return p.owner }

func (p *procScale) start() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	args := []string{"-set-child"}
	if *setTrace {
		args = append(args, "-set-trace")
	}
	if p.bound {
		args = append(args, "-set-bound")
	}
	p.cmd = exec.Command(self, append(args, p.url, p.set, p.owner, strconv.Itoa(p.n))...)
	p.cmd.Stderr = os.Stderr
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return err
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.keys, p.nHeld, p.campaigns, p.nTicks = map[string]bool{}, 0, 0, 0
	p.mu.Unlock()
	if err := p.cmd.Start(); err != nil {
		return err
	}
	ready, exited := make(chan struct{}), make(chan struct{})
	p.exited = exited
	go func() {
		defer close(exited)
		lines := bufio.NewScanner(out)
		for lines.Scan() {
			p.line(lines.Text(), ready)
		}
		_ = p.cmd.Wait()
	}()
	select {
	case <-ready:
		return nil
	case <-exited:
		return fmt.Errorf("%s exited before it was ready", p.owner)
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-exited
		return fmt.Errorf("%s: not ready within 10 s (killed)", p.owner)
	}
}

// line takes one line of the child's report; one it cannot read is
// printed to stderr, never taken as zeros.
func (p *procScale) line(s string, ready chan struct{}) {
	f := strings.Fields(s)
	fields := map[string]int{"R": 1, "E": 3, "X": 2, "T": 2, "S": 5, "D": 1}
	bad := len(f) == 0 || fields[f[0]] != len(f)
	nums := make([]int64, len(f))
	for i := 1; !bad && i < len(f); i++ {
		if i == 1 && (f[0] == "E" || f[0] == "X") {
			continue // the key
		}
		var err error
		nums[i], err = strconv.ParseInt(f[i], 10, 64)
		bad = err != nil
	}
	if bad {
		fmt.Fprintf(os.Stderr, "pgleader-bench: %s reported a line it should not: %q\n", p.owner, s)
		return
	}
	switch f[0] {
	case "R":
		close(ready)
	case "E":
		p.log.add(f[1], p.owner, time.Unix(0, nums[2]))
		p.mu.Lock()
		p.keys[f[1]] = true
		p.mu.Unlock()
	case "X":
		p.mu.Lock()
		delete(p.keys, f[1])
		p.mu.Unlock()
	case "T":
		p.took.Observe(pgleader.Observation{Kind: pgleader.ObserveRenewed, Took: time.Duration(nums[1])})
	case "S":
		p.mu.Lock()
		p.nHeld, p.campaigns, p.nTicks, p.last = int(nums[1]), nums[2], nums[3], nums[4]
		p.mu.Unlock()
	}
}

func (p *procScale) held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nHeld
}

func (p *procScale) heldKeys() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.keys))
	for k := range p.keys {
		out = append(out, k)
	}
	return out
}

func (p *procScale) running() bool {
	if p.exited == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop asks the process to stop its Set and waits for it to exit.
func (p *procScale) stop() {
	if !p.running() {
		return
	}
	_, _ = fmt.Fprintln(p.stdin, "stop")
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		fmt.Fprintf(os.Stderr, "pgleader-bench: %s did not exit within 30 s of stop; killing it\n", p.owner)
		p.crash()
	}
}

// crash kills the process with SIGKILL.
func (p *procScale) crash() {
	if !p.running() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

func (p *procScale) lastTick() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Unix(0, p.last)
}

func (p *procScale) counts() (int64, int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.campaigns, p.nTicks
}

func (p *procScale) close() { p.stop() }

func (p *procScale) traced(t time.Time, kind, what string, err error) {
	if *setTrace {
		traceLine(t, p.owner, kind, what, err)
	}
}

// runSetChild is a replica process of the sets scale measurement (see
// procScale): it runs the Set until told "stop" on its standard input, or
// until that closes (the bench is gone).
func runSetChild(args []string) error {
	if len(args) != 4 {
		return fmt.Errorf("-set-child wants URL SET OWNER KEYS, got %q", args)
	}
	url, set, owner := args[0], args[1], args[2]
	n, err := strconv.Atoi(args[3])
	if err != nil || n <= 0 {
		return fmt.Errorf("-set-child: KEYS must be a positive count, got %q", args[3])
	}
	ctx := context.Background()
	r, err := newSetReplica(ctx, url, owner)
	if err != nil {
		return err
	}
	defer r.close()
	r.trace.Store(*setTrace)
	r.bound = *setBound
	var mu sync.Mutex
	out := bufio.NewWriterSize(os.Stdout, 1<<16)
	emit := func(format string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format, a...)
	}
	flush := func() {
		mu.Lock()
		defer mu.Unlock()
		_ = out.Flush()
	}
	lead := func(ctx context.Context, t *pgleader.Term) error {
		emit("E %s %d\n", t.Key(), time.Now().UnixNano())
		select {
		case <-t.Ending():
		case <-ctx.Done():
		}
		emit("X %s\n", t.Key())
		return nil
	}
	obs := pgleader.ObserverFunc(func(o pgleader.Observation) {
		if o.Kind == pgleader.ObserveRenewed && o.Err == nil {
			emit("T %d\n", int64(o.Took))
		}
	})
	if err := r.start(set, setKeys(set, n), lead, obs); err != nil {
		return err
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() && in.Text() != "stop" {
		}
	}()
	status := func() {
		emit("S %d %d %d %d\n", r.set.Status().Held, r.campaigns.Load(), r.ticks.Load(), r.last.Load())
		flush()
	}
	emit("R\n")
	status()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			status()
		case <-stopped:
			r.stop()
			status()
			emit("D\n")
			flush()
			return nil
		}
	}
}

// add records a body entered by owner at at.
func (l *entryLog) add(key, owner string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries[key] = append(l.entries[key], leadEntry{owner, at})
}
