package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/pgleader/pgleader/internal/scratch"
	"github.com/pgleader/pgleader/internal/wait"
)

var (
	deployRounds = flag.Int("deploy-rounds", 30, "SIGTERMs to the leading publisher process per checkout in the deploy measurement")
	deploySrc    = flag.String("deploy-src", ".", "comma-separated checkouts whose examples/publisher the deploy measurement builds and runs, interleaved round by round; the first is the ratios' baseline")
	deployLogs   = flag.String("deploy-logs", "", "a directory to keep each publisher process's log in (default: none kept)")
)

// A publisher replaced by a deploy is SIGTERMed deploySettle plus up to
// deployJitter after its replacement started campaigning: at any point of
// the leader's renewal cycle (RenewEvery 2 s), the candidate's registration
// fresh or older than RenewEvery + Margin.
const (
	deploySettle = 1500 * time.Millisecond
	deployJitter = 2 * time.Second
)

// What the publisher logs (log/slog's text format) that the measurement
// reads, in every version of it: started campaigning, leads (since
// 2026-12-01 once the Claim committed, before that before it ran), its
// term's first unit published, a term ended.
var (
	logCampaigning = regexp.MustCompile(` msg=campaigning( |$)`)
	logLeading     = regexp.MustCompile(` msg=leading( |$)`)
	logFirstUnit   = regexp.MustCompile(` msg=published .*\bseq=1( |$)`)
	logTermEnded   = regexp.MustCompile(` msg="term ended"`)
)

// publisherProc is one publisher process; each event is the time its log
// line was read here.
type publisherProc struct {
	owner                              string
	cmd                                *exec.Cmd
	campaigning, leading, first, ended chan time.Time
	exited                             chan time.Time
}

func (d *deployment) start(ctx context.Context) (*publisherProc, error) {
	d.started++
	p := &publisherProc{owner: fmt.Sprintf("deploy-%d-%d", d.index, d.started),
		campaigning: make(chan time.Time, 1), leading: make(chan time.Time, 1), first: make(chan time.Time, 1),
		ended: make(chan time.Time, 1), exited: make(chan time.Time, 1)}
	p.cmd = exec.Command(d.bin, "-database", d.url, "-owner", p.owner)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	var keep io.WriteCloser = nopCloser{io.Discard}
	if *deployLogs != "" {
		if keep, err = os.Create(filepath.Join(*deployLogs, fmt.Sprintf("%s-%s.log", d.label, p.owner))); err != nil {
			return nil, err
		}
	}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		lines := bufio.NewScanner(stderr)
		for lines.Scan() {
			at := time.Now()
			line := lines.Text()
			for _, e := range []struct {
				re *regexp.Regexp
				ch chan time.Time
			}{{logCampaigning, p.campaigning}, {logLeading, p.leading}, {logFirstUnit, p.first}, {logTermEnded, p.ended}} {
				if e.re.MatchString(line) {
					offer(e.ch, at)
				}
			}
			fmt.Fprintf(keep, "%s %s\n", at.Format("15:04:05.000000"), line)
		}
		_ = p.cmd.Wait()
		p.exited <- time.Now()
		keep.Close()
	}()
	if _, err := awaitProc(ctx, p, p.campaigning, "campaigning"); err != nil {
		return nil, err
	}
	return p, nil
}

// awaitProc waits for the time on ch, for at most 15 s (over two TTLs, so
// a successor that missed the hand-off still takes over).
func awaitProc(ctx context.Context, p *publisherProc, ch chan time.Time, what string) (time.Time, error) {
	t, err := await(ctx, ch, 15*time.Second, what)
	if err != nil {
		return t, fmt.Errorf("%s: %w", p.owner, err)
	}
	return t, nil
}

func (p *publisherProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// deployment is a publisher built from one checkout, on a database of its
// own migrated by that publisher: a leading process and a waiting one.
type deployment struct {
	index        int
	src, label   string
	bin, url     string
	drop         func()
	started      int
	leader, cand *publisherProc
	stopAt       time.Time

	toLeading, toFirst, toEnded, toExit []time.Duration
}

func (b *bench) newDeployment(ctx context.Context, index int, src, dir string) (*deployment, error) {
	d := &deployment{index: index, src: src, bin: filepath.Join(dir, fmt.Sprintf("publisher-%d", index))}
	out, err := exec.CommandContext(ctx, "git", "-C", src, "describe", "--always", "--dirty").Output()
	if err != nil {
		return nil, fmt.Errorf("%s: git describe: %w", src, err)
	}
	d.label = strings.TrimSpace(string(out))
	build := exec.CommandContext(ctx, "go", "build", "-o", d.bin, "./examples/publisher")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s: go build: %w\n%s", src, err, out)
	}
	if d.url, d.drop, err = scratch.Database(ctx, b.server, "pgleader_bench_deploy_"); err != nil {
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, d.bin, "-database", d.url, "-migrate-only").CombinedOutput(); err != nil {
		d.close()
		return nil, fmt.Errorf("%s: publisher -migrate-only: %w\n%s", src, err, out)
	}
	if d.leader, err = d.start(ctx); err != nil {
		d.close()
		return nil, err
	}
	if _, err := awaitProc(ctx, d.leader, d.leader.first, "first unit"); err != nil {
		d.close()
		return nil, err
	}
	if d.cand, err = d.start(ctx); err != nil {
		d.close()
		return nil, err
	}
	d.stopAt = time.Now().Add(deploySettle + rand.N(deployJitter))
	return d, nil
}

func (d *deployment) close() {
	for _, p := range []*publisherProc{d.leader, d.cand} {
		if p != nil {
			p.kill()
		}
	}
	if d.drop != nil {
		d.drop()
	}
}

// round SIGTERMs the leader, as a deploy stops the replica it replaces,
// waits for its successor to lead and publish and for the stopped process
// to exit, then starts a replacement, which waits its turn.
func (d *deployment) round(ctx context.Context) error {
	if !wait.Sleep(ctx, time.Until(d.stopAt)) {
		return ctx.Err()
	}
	leader, cand := d.leader, d.cand
	start := time.Now()
	if err := leader.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	leading, err := awaitProc(ctx, cand, cand.leading, "leading")
	if err != nil {
		return err
	}
	first, err := awaitProc(ctx, cand, cand.first, "first unit")
	if err != nil {
		return err
	}
	exited, err := awaitProc(ctx, leader, leader.exited, "exit")
	if err != nil {
		return err
	}
	var ended time.Time
	select {
	case ended = <-leader.ended: // logged before it exited, so read by now
	default:
		ended = exited
	}
	d.toLeading = append(d.toLeading, leading.Sub(start))
	d.toFirst = append(d.toFirst, first.Sub(start))
	d.toEnded = append(d.toEnded, ended.Sub(start))
	d.toExit = append(d.toExit, exited.Sub(start))
	d.leader, d.cand = cand, nil
	if d.cand, err = d.start(ctx); err != nil {
		return err
	}
	d.stopAt = time.Now().Add(deploySettle + rand.N(deployJitter))
	// Let the replacement's LISTEN session start before another
	// deployment's round.
	if !wait.Sleep(ctx, 200*time.Millisecond) {
		return ctx.Err()
	}
	return nil
}

// deployTable runs examples/publisher as a deploy does: two processes, the
// leader SIGTERMed, a replacement started, again and again; for each
// checkout in -deploy-src, interleaved.
func (b *bench) deployTable(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "pgleader-bench-deploy-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var ds []*deployment
	defer func() {
		for _, d := range ds {
			d.close()
		}
	}()
	for i, src := range strings.Split(*deploySrc, ",") {
		d, err := b.newDeployment(ctx, i, src, dir)
		if err != nil {
			return err
		}
		ds = append(ds, d)
	}
	order := make([]*deployment, len(ds))
	copy(order, ds)
	for round := 0; round < *deployRounds; round++ {
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, d := range order {
			if err := d.round(ctx); err != nil {
				return fmt.Errorf("%s, round %d: %w", d.label, round, err)
			}
		}
	}

	fmt.Printf("## Deploy: examples/publisher as two processes, the leader SIGTERMed (%d times per checkout, interleaved)\n\n", *deployRounds)
	fmt.Printf("Each checkout's publisher runs on a database of its own that it migrated. The leader is SIGTERMed %v to %v\n", deploySettle, deploySettle+deployJitter)
	fmt.Println("after its replacement logged \"campaigning\"; times are when this process read each log line. The")
	fmt.Println("publisher logs \"leading\" once its Claim committed since 2026-12-01, before the Claim before that.")
	fmt.Println()
	fmt.Println("| publisher built from | SIGTERM → the successor logs leading: p50 / p90 / p99 / max | p50, p90 against the first | → the stopped leader logs term ended | → the successor's first unit published | → the stopped process exited |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, d := range ds {
		fmt.Printf("| %s (%s) | %s | %.2f×, %.2f× | %s | %s | %s |\n", d.label, d.src, summary(d.toLeading),
			ratioOf(percentile(d.toLeading, 50), percentile(ds[0].toLeading, 50)), ratioOf(percentile(d.toLeading, 90), percentile(ds[0].toLeading, 90)),
			summary(d.toEnded), summary(d.toFirst), summary(d.toExit))
	}
	fmt.Println()
	return nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
