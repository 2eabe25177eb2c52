package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/wait"
	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/sqlfence"
)

var (
	apiHandovers = flag.Int("api-handovers", 30, "hand-offs between two replica processes using the public API, interleaved with as many in one process")
	apiChild     = flag.Bool("api-child", false, "run as one replica process of the api measurement (arguments: URL KEY OWNER); the bench starts these itself")
	childBound   = flag.Bool("api-child-bound", false, "with -api-child: set Options.SessionBound (the bound measurement's replicas)")
	childLog     = flag.Bool("api-child-log", false, "with -api-child: log the Elector's and backend's records, debug level, to stderr")
)

// The api measurement's replica processes take commands on stdin, one a
// line, and report on stdout "<event> <time.Now().UnixNano()>": the same
// machine's wall clock in every process, so times compare across them.
const (
	cmdStart = "start" // run the Elector
	cmdStop  = "stop"  // cancel Run (reports evStop, then evStopped once Run returned)
	cmdExit  = "exit"

	evReady     = "ready"     // connected
	evListening = "listening" // Status().Listening, after a start
	evClaim     = "claim"     // Options.Claim called: the successor knows it leads
	evLead      = "lead"      // the body was entered: the Claim committed
	evWrote     = "wrote"     // the body's first fenced write committed
	evStop      = "stop"      // just before Run's context is cancelled
	evStopped   = "stopped"   // Run returned
	evLapsed    = "lapsed"    // a campaign lapsed a term whose bound session had ended (logged once it answered)
)

// lapsedMsg is what the Elector logs when its campaign lapsed a
// session-bound term whose session had ended.
const lapsedMsg = "the term holding the lease was bound to a session that has ended; took it over before its expiry"

// childLogger passes records on to next and reports evLapsed when the
// Elector logs lapsedMsg.
type childLogger struct {
	next   slog.Handler
	report func(string)
}

func (h childLogger) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.next.Enabled(ctx, l)
}

func (h childLogger) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == lapsedMsg {
		h.report(evLapsed)
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h childLogger) WithAttrs(as []slog.Attr) slog.Handler {
	return childLogger{h.next.WithAttrs(as), h.report}
}

func (h childLogger) WithGroup(name string) slog.Handler {
	return childLogger{h.next.WithGroup(name), h.report}
}

// runAPIChild is one replica of the api measurement, as an application
// writes it: its own pool with the default configuration, NewPostgres,
// New with the recipe's spec, a Claim and FenceFloor on the fenced row, and
// a body that writes once on entry, then Run.
func runAPIChild(args []string) error {
	if len(args) != 3 {
		return fmt.Errorf("-api-child wants URL KEY OWNER, got %q", args)
	}
	url, key, owner := args[0], args[1], args[2]
	var mu sync.Mutex
	report := func(ev string) {
		at := time.Now().UnixNano()
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf("%s %d\n", ev, at)
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return err
	}
	var next slog.Handler = slog.NewTextHandler(io.Discard, nil)
	if *childLog {
		next = slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug,
			ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey && len(groups) == 0 {
					return slog.String(a.Key, a.Value.Time().Format("15:04:05.000000"))
				}
				return a
			}})
	}
	logger := slog.New(childLogger{next, report})
	backend := pgleader.NewPostgres(pool, pgleader.WithLogger(logger))
	el, err := pgleader.New(backend, recipe(key), pgleader.Options{
		Owner:        owner,
		Logger:       logger,
		SessionBound: *childBound,
		Claim: func(ctx context.Context, t *pgleader.Term) (bool, error) {
			report(evClaim)
			err := digests.Claim(ctx, pool, key, t.Token())
			if errors.Is(err, sqlfence.ErrFenced) {
				return false, nil
			}
			return err == nil, err
		},
		FenceFloor: func(ctx context.Context) (int64, error) { return digests.Floor(ctx, pool, key) },
		Lead: func(ctx context.Context, t *pgleader.Term) error {
			report(evLead)
			if err := digests.Write(ctx, pool, key, t.Token(), sqlfence.Assign("body", owner)); err != nil {
				return err
			}
			report(evWrote)
			select {
			case <-t.Ending():
			case <-ctx.Done():
			}
			return nil
		},
	})
	if err != nil {
		return err
	}
	report(evReady)
	r := &childRun{el: el, cancel: func() {}, done: make(chan error, 1)}
	r.done <- nil
	defer r.stop()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case cmdStart:
			if err := r.start(ctx, report); err != nil {
				return err
			}
		case cmdStop:
			report(evStop)
			err := r.stop()
			report(evStopped)
			r.done <- err
		case cmdExit:
			return nil
		}
	}
	return nil
}

// childRun is the api child's Elector's Run, started and stopped on
// command.
type childRun struct {
	el     *pgleader.Elector
	cancel context.CancelFunc
	done   chan error // Run's result; holds nil while Run is not running
}

// start runs the Elector and reports evListening once it listens or leads.
func (r *childRun) start(ctx context.Context, report func(string)) error {
	if err := <-r.done; err != nil {
		return err
	}
	ctx, r.cancel = context.WithCancel(ctx)
	go func() { r.done <- r.el.Run(ctx) }()
	go func() {
		for r.el.Status().State != pgleader.StateLeading && !r.el.Status().Listening {
			if !wait.Sleep(ctx, time.Millisecond) {
				return
			}
		}
		report(evListening)
	}()
	return nil
}

// stop cancels Run and returns its result.
func (r *childRun) stop() error {
	r.cancel()
	return <-r.done
}

// process is a replica process of the api measurement.
type process struct {
	owner  string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events map[string]chan int64
	exited chan error
}

// startProcess starts a replica process; flags are more of the child's
// flags (-api-child-bound, -api-child-log).
func startProcess(url, key, owner string, flags ...string) (*process, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := append(append([]string{"-api-child"}, flags...), url, key, owner)
	p := &process{owner: owner, cmd: exec.Command(self, args...), exited: make(chan error, 1),
		events: map[string]chan int64{}}
	for _, ev := range []string{evReady, evListening, evClaim, evLead, evWrote, evStop, evStopped, evLapsed} {
		p.events[ev] = make(chan int64, 4)
	}
	p.cmd.Stderr = os.Stderr
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		lines := bufio.NewScanner(out)
		for lines.Scan() {
			ev, at, ok := strings.Cut(lines.Text(), " ")
			ns, err := strconv.ParseInt(at, 10, 64)
			if ch := p.events[ev]; ok && err == nil && ch != nil {
				select {
				case ch <- ns:
				default:
				}
			}
		}
		p.exited <- p.cmd.Wait()
	}()
	_, err = p.await(evReady, 10*time.Second)
	return p, err
}

func (p *process) send(cmd string) error {
	_, err := fmt.Fprintln(p.stdin, cmd)
	return err
}

// await returns the time of the next ev the process reports.
func (p *process) await(ev string, d time.Duration) (time.Time, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case ns := <-p.events[ev]:
		return time.Unix(0, ns), nil
	case err := <-p.exited:
		return time.Time{}, fmt.Errorf("%s exited (%v) before %s", p.owner, err, ev)
	case <-t.C:
		return time.Time{}, fmt.Errorf("%s: no %s within %v", p.owner, ev, d)
	}
}

func (p *process) drain() {
	for _, ch := range p.events {
		for len(ch) > 0 {
			<-ch
		}
	}
}

func (p *process) close() {
	_ = p.send(cmdExit)
	_ = p.stdin.Close()
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// processPair is two replica processes of a key that swap roles at each
// hand-off.
type processPair struct {
	b            *bench
	key          string
	leader, cand *process
}

func (b *bench) newProcessPair(ctx context.Context, key string) (*processPair, error) {
	if _, err := b.admin.Exec(ctx, `INSERT INTO digests (name, body) VALUES ($1, '') ON CONFLICT DO NOTHING`, key); err != nil {
		return nil, err
	}
	pp := &processPair{b: b, key: key}
	var err error
	if pp.leader, err = startProcess(b.url, key, "a-"+key); err != nil {
		return pp, err
	}
	if err := pp.leader.send(cmdStart); err != nil {
		return pp, err
	}
	if _, err := pp.leader.await(evWrote, 10*time.Second); err != nil {
		return pp, err
	}
	if pp.cand, err = startProcess(b.url, key, "b-"+key); err != nil {
		return pp, err
	}
	return pp, pp.ready(ctx, pp.cand)
}

// ready starts p's Elector and waits until it listens and is a live
// candidate.
func (pp *processPair) ready(ctx context.Context, p *process) error {
	if err := p.send(cmdStart); err != nil {
		return err
	}
	if _, err := p.await(evListening, 10*time.Second); err != nil {
		return err
	}
	for {
		var ok bool
		if err := pp.b.admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pgleader.candidates($1) WHERE owner = $2)`, pp.key, p.owner).Scan(&ok); err != nil {
			return err
		}
		if ok {
			return nil
		}
		if !wait.Sleep(ctx, time.Millisecond) {
			return ctx.Err()
		}
	}
}

func (pp *processPair) close() {
	for _, p := range []*process{pp.leader, pp.cand} {
		if p != nil {
			p.close()
		}
	}
}

// round stops the leading process's Run at a random point of the
// candidate's polling cycle, as the in-process pair does, measures on both
// processes' clocks, and restarts the stopped Run as the candidate.
func (pp *processPair) round(ctx context.Context) (sample, error) {
	leader, cand := pp.leader, pp.cand
	leader.drain()
	cand.drain()
	if !wait.Sleep(ctx, time.Duration(rand.Int64N(int64(benchIdle)))) {
		return sample{}, ctx.Err()
	}
	if err := leader.send(cmdStop); err != nil {
		return sample{}, err
	}
	var at [4]time.Time
	var err error
	for i, w := range []struct {
		p  *process
		ev string
	}{{leader, evStop}, {cand, evClaim}, {cand, evLead}, {cand, evWrote}} {
		if at[i], err = w.p.await(w.ev, 10*time.Second); err != nil {
			return sample{}, err
		}
	}
	if _, err := leader.await(evStopped, 10*time.Second); err != nil {
		return sample{}, err
	}
	if err := pp.ready(ctx, leader); err != nil {
		return sample{}, err
	}
	pp.leader, pp.cand = cand, leader
	return sample{toKnow: at[1].Sub(at[0]), toBody: at[2].Sub(at[0]), toWrite: at[3].Sub(at[0])}, nil
}

// apiTable runs hand-offs between two replica processes that use only the
// public API, interleaved with hand-offs between two bench replicas in
// this process, and prints both.
func (b *bench) apiTable(ctx context.Context) error {
	n := *apiHandovers
	bare, err := b.newHandoverPair(ctx, mode{name: "", notify: true, handOff: true, key: "api-bare"})
	if err != nil {
		return err
	}
	defer bare.close()
	procs, err := b.newProcessPair(ctx, "api-processes")
	defer procs.close()
	if err != nil {
		return err
	}
	var inProcess, apart []sample
	for i := 0; i < n; i++ {
		first := rand.IntN(2) == 0
		for j := 0; j < 2; j++ {
			if (j == 0) == first {
				s, err := bare.round(ctx)
				if err != nil {
					return fmt.Errorf("in one process, round %d: %w", i, err)
				}
				inProcess = append(inProcess, s)
			} else {
				s, err := procs.round(ctx)
				if err != nil {
					return fmt.Errorf("between processes, round %d: %w", i, err)
				}
				apart = append(apart, s)
			}
		}
	}
	fmt.Printf("## Hand-off as an application sees it (%d hand-offs each, interleaved)\n\n", n)
	fmt.Println("From the stop (Run's context cancelled) until the successor's Claim was called, its body entered")
	fmt.Println("(the Claim committed) and its first fenced write committed. Bench replicas: both in this")
	fmt.Println("process, each on its own pool (MinConns 2) through the bench's timing backend; public API: each")
	fmt.Println("replica its own OS process with its own pool (default configuration), NewPostgres + New + Run,")
	fmt.Println("times from each process's clock.")
	fmt.Println()
	fmt.Println("| replicas | until Claim is called: p50 / p90 / p99 / max | until the body is entered | until its first fenced write commits |")
	fmt.Println("|---|---|---|---|")
	for _, r := range []struct {
		name string
		s    []sample
	}{{"bench replicas, one process (the hand-off row above)", inProcess}, {"public API, a process each", apart}} {
		fmt.Printf("| %s | %s | %s | %s |\n", r.name, summary(field(r.s, func(s sample) time.Duration { return s.toKnow })),
			summary(field(r.s, func(s sample) time.Duration { return s.toBody })), summary(field(r.s, func(s sample) time.Duration { return s.toWrite })))
	}
	var cells []string
	for _, f := range []func(sample) time.Duration{
		func(s sample) time.Duration { return s.toKnow }, func(s sample) time.Duration { return s.toBody }, func(s sample) time.Duration { return s.toWrite }} {
		a, x := field(apart, f), field(inProcess, f)
		cells = append(cells, fmt.Sprintf("%.2f× / %.2f× / %.2f×", ratioOf(percentile(a, 50), percentile(x, 50)),
			ratioOf(percentile(a, 90), percentile(x, 90)), ratioOf(percentile(a, 99), percentile(x, 99))))
	}
	fmt.Printf("| public API against bench replicas, p50 / p90 / p99 | %s |\n\n", strings.Join(cells, " | "))
	return nil
}
