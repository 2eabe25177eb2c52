//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/pgleader/pgleader/pgleader"
)

const runUsage = `Usage: pgleader run [--database URL] --key KEY [flags] -- COMMAND [ARG...]
       pgleader run [--database URL] --key KEY --every DURATION|--cron EXPR [flags] -- COMMAND [ARG...]

Campaigns for KEY's lease and runs COMMAND only while holding it, in a
process group of its own, with PGLEADER_KEY, PGLEADER_TOKEN and
PGLEADER_OWNER added to its environment. Its standard input is /dev/null;
its output goes to pgleader's.

  term ending (stopped, renewals failing)  SIGTERM to the group
  term cancelled (YieldGrace later)        SIGKILL to the group
  lease lost                               SIGKILL to the group at once
  COMMAND exits                            leftovers in its group: SIGTERM,
                                           then SIGKILL; then the lease is
                                           released and pgleader campaigns
                                           again (or exits: --exit-with-child)
  SIGTERM, SIGINT or SIGHUP to pgleader    the term stops as above, the lease
                                           is released, pgleader exits;
                                           a second signal SIGKILLs the group

The lease is released only once the whole group is gone. Exit status: 0 after
a stop by signal; with --exit-with-child, COMMAND's status (128+N if a
signal N killed it); 127 if COMMAND is not found, 126 if it cannot run; 1 on
an error; 2 on bad usage.

With --every or --cron, KEY is a scheduled job (pgleader.RunJob): at each
instant of the schedule, on the database clock, one replica wins KEY's lease,
claims the instant and runs COMMAND once, as above, with PGLEADER_INSTANT
(RFC 3339, UTC) and PGLEADER_ATTEMPT added; the lease is released when the
group is gone. A status other than 0 records the run failed; pgleader goes
on to the next instant. A run whose pgleader dies is not run again, unless
--at-least-once: then another replica runs it once the lease has lapsed.
--exit-with-child, --value, --priority and --health-addr do not apply.
'pgleader status --jobs' shows each job's last run.

The timing flags default from --ttl as in pgleader.Spec (TTL/3, TTL/12, ...)
and must satisfy renew-every + yield-grace + release-timeout + margin < ttl.
`

func cmdRun(args []string, stderr *os.File) error {
	fs := newFlagSet("run", runUsage, stderr)
	db := databaseFlag(fs)
	var spec pgleader.Spec
	fs.StringVar(&spec.Key, "key", "", "the lease `key` naming the work (required)")
	owner := fs.String("owner", "", "this replica's `name`, unique among replicas (default hostname:pid:random)")
	value := fs.String("value", "", "a `value` published with the lease while this replica leads, e.g. its address (at most 1024 bytes; shown by status)")
	priority := fs.Int("priority", 0, "this replica's `priority` as a candidate: a leader of lower priority hands the lease to it (after a term of at least ttl)")
	fs.DurationVar(&spec.TTL, "ttl", 0, "lease TTL on the database clock (default 6s)")
	fs.DurationVar(&spec.RenewEvery, "renew-every", 0, "interval between renewals (default ttl/3)")
	fs.DurationVar(&spec.CampaignEvery, "campaign-every", 0, "interval between campaigns while another replica leads (default ttl/12)")
	fs.DurationVar(&spec.Margin, "margin", 0, "allowance for clock drift between this host and the database (default ttl/12)")
	fs.DurationVar(&spec.YieldGrace, "yield-grace", 0, "time between SIGTERM and SIGKILL when the term ends (default ttl/6)")
	fs.DurationVar(&spec.ReleaseTimeout, "release-timeout", 0, "time for the group to die after SIGKILL, and bound of the release (default ttl/12)")
	exitWithChild := fs.Bool("exit-with-child", false, "exit with COMMAND's status when it exits, instead of campaigning again")
	healthAddr := fs.String("health-addr", "", "serve GET /healthz on this `address` (host:port)")
	sessionBound := fs.Bool("session-bound", false, "bind each term to this replica's database session: when the leader's process dies, a candidate with the same flag leads at once instead of at the lease's expiry (docs/ha.md; schema 19)")
	jf := defineJobFlags(fs)
	if err := fs.Parse(args); err != nil {
		return flagError("run", err)
	}
	if err := refuseEmpty(fs, "database", "key", "owner", "health-addr"); err != nil {
		return err
	}
	argv := fs.Args()
	switch {
	case spec.Key == "":
		return usagef("run", "--key is required")
	case *priority < math.MinInt32 || *priority > math.MaxInt32:
		return usagef("run", "--priority must be a 32-bit integer, got %d", *priority)
	case len(argv) == 0:
		return usagef("run", "no command: pgleader run --key KEY [flags] -- COMMAND [ARG...]")
	}
	job, err := jf.job(fs, spec.Key)
	if err != nil {
		return err
	}
	if err := spec.Validate(); err != nil {
		return usagef("run", "%s", specFlags.Replace(err.Error()))
	}
	if *owner != "" {
		if err := pgleader.CheckOwner(*owner); err != nil {
			return usagef("run", "--owner: %v", err)
		}
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		fmt.Fprintf(stderr, "pgleader: run: %v\n", err)
		return exitStatus(startFailure(err))
	}
	url, err := databaseURL("run", *db)
	if err != nil {
		return err
	}

	// The pool outlives ctx: the lease is released after ctx is cancelled.
	pool, err := openPool(context.Background(), "run", url)
	if err != nil {
		return err
	}
	defer pool.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	logger := slog.New(slog.NewTextHandler(stderr, nil))
	backend := pgleader.NewPostgres(pool, pgleader.WithLogger(logger))
	sup := &supervisor{path: path, argv: argv, log: logger, exitWithChild: *exitWithChild,
		stopRun: cancel, force: make(chan struct{})}
	// A job's runner makes electors of its own; this one, never run then,
	// still fills in the defaults of the timing and the owner for it.
	el, err := pgleader.New(backend, spec, pgleader.Options{
		Owner: *owner, Value: *value, Priority: int32(*priority), Lead: sup.lead, Logger: logger, Observer: sup,
		SessionBound: *sessionBound})
	if err != nil {
		return usagef("run", "%v", err)
	}
	spec = el.Spec()
	sup.yieldGrace = spec.YieldGrace
	log := logger.With("key", spec.Key, "owner", el.Status().Owner)

	// The first signal stops the elector, which ends the term as stopped;
	// pgleader exits only once the command's group is gone. A second one
	// kills the group at once.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	defer close(done)
	go func() {
		signals := 0
		for {
			select {
			case <-done:
				return
			case s := <-sigs:
				signals++
				if signals == 1 {
					log.Info("stopping on signal; the command's group gets SIGTERM, then SIGKILL after the yield grace", "signal", s.String())
					cancel()
				} else {
					log.Warn("second signal; killing the command's group now", "signal", s.String())
					sup.kill()
				}
			}
		}
	}()

	// Fail now, not in a retry loop, when the database is wrong.
	if _, err := backend.Lease(ctx, spec.Key); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("run: reading the lease: %w", notMigratedHint(err))
	}
	if err := becomeSubreaper(); err != nil {
		log.Warn("cannot become a child subreaper; descendants that leave the command's process group may outlive it", "err", err)
	}
	if jf.scheduled(fs) {
		job.Spec, job.Owner, job.Logger = spec, el.Status().Owner, logger
		job.Observer, job.Run = pgleader.ObserverFunc(sup.observeJob), sup.runJob
		log.Info("scheduled", "command", argv, "schedule", jf.schedule, "at_least_once", job.AtLeastOnce,
			"missed", jf.missed, "ttl", spec.TTL, "yield_grace", spec.YieldGrace)
		if err := pgleader.RunJob(ctx, backend, job); err != nil {
			return fmt.Errorf("run: %w", notMigratedHint(err))
		}
		log.Info("stopped")
		return nil
	}
	if *healthAddr != "" {
		stopHealth, err := serveHealth(log, *healthAddr, el)
		if err != nil {
			return fmt.Errorf("run: --health-addr: %w", err)
		}
		defer stopHealth()
	}

	log.Info("campaigning", "command", argv, "ttl", spec.TTL, "renew_every", spec.RenewEvery,
		"yield_grace", spec.YieldGrace, "release_timeout", spec.ReleaseTimeout)
	if err := el.Run(ctx); err != nil {
		return err
	}
	status, ran := sup.lastStatus()
	log.Info("stopped", "last_command_status", status, "command_ran", ran)
	if *exitWithChild && ran && status != 0 {
		return exitStatus(status)
	}
	return nil
}

// specFlags names the flags in the errors of pgleader.Spec.Validate.
var specFlags = strings.NewReplacer("pgleader: invalid: ", "", "Spec: ", "", "Spec.", "",
	"Key", "--key", "TTL", "--ttl", "RenewEvery", "--renew-every", "CampaignEvery", "--campaign-every",
	"Margin", "--margin", "YieldGrace", "--yield-grace", "ReleaseTimeout", "--release-timeout")

// serveHealth serves pgleader.HealthHandler at /healthz on addr until the
// returned function is called.
func serveHealth(log *slog.Logger, addr string, el *pgleader.Elector) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", pgleader.HealthHandler(el))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("health endpoint failed", "err", err)
		}
	}()
	log.Info("health endpoint listening", "addr", ln.Addr().String(), "path", "/healthz")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-served
	}, nil
}

// startFailure is the shell's status for a command that could not start:
// 127 if it was not found, 126 if it was found and could not run.
func startFailure(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		return 127
	}
	return 126
}
