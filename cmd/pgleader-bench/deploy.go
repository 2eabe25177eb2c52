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

	"github.com/jackc/pgx/v5"

	"github.com/pgleader/pgleader/internal/scratch"
	"github.com/pgleader/pgleader/internal/wait"
)

var (
	deployRounds = flag.Int("deploy-rounds", 30, "SIGTERMs to the leading publisher process per checkout in the deploy measurement")
	deploySrc    = flag.String("deploy-src", ".", "comma-separated checkouts whose examples/publisher the deploy measurement builds and runs, interleaved round by round; the first is the ratios' baseline")
	deployLogs   = flag.String("deploy-logs", "", "a directory to keep each publisher process's log in (default: none kept)")
)

// A publisher replaced by a deploy is SIGTERMed deploySettle plus up to
// deployJitter after its replacement started campaigning. By default at
// any point of the leader's renewal cycle (RenewEvery 2 s) and of the
// candidate's campaigns (one at each lease expiry it reads, 4-6 s apart),
// so that its registration is as often fresh as older than RenewEvery +
// Margin, as for a replacement that waited its turn for long.
var (
	deploySettle  = flag.Duration("deploy-settle", 6*time.Second, "the least time between a replacement publisher's start and the SIGTERM to the leader")
	deployJitter  = flag.Duration("deploy-jitter", 6*time.Second, "a random time of up to this is added to -deploy-settle")
	deployArgs    = flag.String("deploy-args", "", "more arguments for every publisher process, space-separated (e.g. -migrate)")
	deployOverlap = flag.Duration("deploy-overlap", 0, "start each replacement up to this long (at random) before the SIGTERM to the leader, whose successor is then the older waiting process, as a rolling update that surges does (default: after the successor leads)")
	deployBuild   = flag.String("deploy-build-flags", "", "more go build flags for the publisher, space-separated (e.g. -race, as make test builds it)")
	deployTrace   = flag.Bool("deploy-trace", false, "have the server log every statement of the deploy measurement's databases (to see the hand-off's path; the logging slows it)")
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

// start starts a publisher process and waits until it campaigns.
func (d *deployment) start(ctx context.Context) (*publisherProc, error) {
	p, err := d.spawn()
	if err != nil {
		return nil, err
	}
	if _, err := awaitProc(ctx, p, p.campaigning, "campaigning"); err != nil {
		return nil, err
	}
	return p, nil
}

// spawn starts a publisher process.
func (d *deployment) spawn() (*publisherProc, error) {
	d.started++
	p := &publisherProc{owner: fmt.Sprintf("deploy-%d-%d", d.index, d.started),
		campaigning: make(chan time.Time, 1), leading: make(chan time.Time, 1), first: make(chan time.Time, 1),
		ended: make(chan time.Time, 1), exited: make(chan time.Time, 1)}
	p.cmd = exec.Command(d.bin, append([]string{"-database", d.url, "-owner", p.owner}, strings.Fields(*deployArgs)...)...)
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
	return p, nil
}

// awaitLeading waits until one of the processes (b may be nil) logs
// leading, for at most 15 s.
func awaitLeading(ctx context.Context, a, b *publisherProc) (*publisherProc, time.Time, error) {
	var bLeading chan time.Time // nil: never ready
	if b != nil {
		bLeading = b.leading
	}
	t := time.NewTimer(15 * time.Second)
	defer t.Stop()
	select {
	case at := <-a.leading:
		return a, at, nil
	case at := <-bLeading:
		return b, at, nil
	case <-t.C:
		return nil, time.Time{}, fmt.Errorf("%s: no leading within 15s", a.owner)
	case <-ctx.Done():
		return nil, time.Time{}, ctx.Err()
	}
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
	db           *pgx.Conn // reads when each claim ran
	started      int
	leader, cand *publisherProc
	stopAt       time.Time

	toLeading, toFirst, toEnded, toExit, toClaim []time.Duration
}

// claimTrigger records, on the database's clock, when each term's Claim
// raised the digest's fence: the same moment in every version of the
// publisher, which logs "leading" before or after its Claim depending on
// the version.
const claimTrigger = `
CREATE TABLE bench_claim (token bigint PRIMARY KEY, at timestamptz NOT NULL);
CREATE FUNCTION bench_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO bench_claim VALUES (NEW.fence, clock_timestamp()) ON CONFLICT DO NOTHING;
	RETURN NULL;
END$$;
CREATE TRIGGER bench_claim AFTER UPDATE OF fence ON digests
	FOR EACH ROW WHEN (NEW.fence > OLD.fence) EXECUTE FUNCTION bench_claim();`

func (b *bench) newDeployment(ctx context.Context, index int, src, dir string) (*deployment, error) {
	d := &deployment{index: index, src: src, bin: filepath.Join(dir, fmt.Sprintf("publisher-%d", index))}
	out, err := exec.CommandContext(ctx, "git", "-C", src, "describe", "--always", "--dirty").Output()
	if err != nil {
		return nil, fmt.Errorf("%s: git describe: %w", src, err)
	}
	d.label = strings.TrimSpace(string(out))
	build := exec.CommandContext(ctx, "go", append(append([]string{"build", "-o", d.bin}, strings.Fields(*deployBuild)...), "./examples/publisher")...)
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
	if d.db, err = pgx.Connect(ctx, d.url); err != nil {
		d.close()
		return nil, err
	}
	if _, err := d.db.Exec(ctx, claimTrigger); err != nil {
		d.close()
		return nil, err
	}
	if *deployTrace {
		if err := trace(ctx, b.server, d.url); err != nil {
			d.close()
			return nil, err
		}
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
	d.stopAt = time.Now().Add(*deploySettle + rand.N(*deployJitter))
	return d, nil
}

func (d *deployment) close() {
	for _, p := range []*publisherProc{d.leader, d.cand} {
		if p != nil {
			p.kill()
		}
	}
	if d.db != nil {
		d.db.Close(context.Background())
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
	var next *publisherProc
	if *deployOverlap > 0 {
		var err error
		if next, err = d.spawn(); err != nil {
			return err
		}
		if !wait.Sleep(ctx, rand.N(*deployOverlap)) {
			return ctx.Err()
		}
	}
	start := time.Now()
	if err := leader.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	// A replacement started before the SIGTERM may win instead.
	winner, leading, err := awaitLeading(ctx, cand, next)
	if err != nil {
		return err
	}
	spawned := next
	if winner == next {
		next, cand = cand, next
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
	var claimed time.Time
	if err := d.db.QueryRow(ctx, `SELECT at FROM bench_claim ORDER BY token DESC LIMIT 1`).Scan(&claimed); err != nil {
		return err
	}
	d.toClaim = append(d.toClaim, claimed.Sub(start))
	d.leader, d.cand = cand, nil
	switch {
	case spawned == nil:
		next, err = d.start(ctx)
	case spawned == next:
		_, err = awaitProc(ctx, next, next.campaigning, "campaigning")
	}
	if err != nil {
		return err
	}
	d.cand = next
	d.stopAt = time.Now().Add(*deploySettle + rand.N(*deployJitter))
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
	fmt.Printf("Each checkout's publisher runs on a database of its own that it migrated. The leader is SIGTERMed %v to %v\n", *deploySettle, *deploySettle+*deployJitter)
	fmt.Println("after its replacement logged \"campaigning\". The successor's Claim is timed by a trigger on the")
	fmt.Println("digest's row (clock_timestamp() as its UPDATE raised the fence), the rest when this process read each")
	fmt.Println("log line. The publisher logs \"leading\" once its Claim committed since bc4394b, before the Claim until then.")
	fmt.Println()
	fmt.Println("| publisher built from | SIGTERM → the successor's Claim ran: p50 / p90 / p99 / max | p50, p90 against the first | → the stopped leader logs term ended | → the successor logs leading | → its first unit published | → the stopped process exited |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, d := range ds {
		fmt.Printf("| %s (%s) | %s | %.2f×, %.2f× | %s | %s | %s | %s |\n", d.label, d.src, summary(d.toClaim),
			ratioOf(percentile(d.toClaim, 50), percentile(ds[0].toClaim, 50)), ratioOf(percentile(d.toClaim, 90), percentile(ds[0].toClaim, 90)),
			summary(d.toEnded), summary(d.toLeading), summary(d.toFirst), summary(d.toExit))
	}
	fmt.Println()
	return nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// trace makes the server log every statement (and the settings in more)
// of the database at url, from its next session on.
func trace(ctx context.Context, server, url string, more ...string) error {
	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return err
	}
	db := pgx.Identifier{cfg.Database}.Sanitize()
	for _, set := range append([]string{"log_min_duration_statement = 0"}, more...) {
		if _, err := conn.Exec(ctx, "ALTER DATABASE "+db+" SET "+set); err != nil {
			return err
		}
	}
	return nil
}
