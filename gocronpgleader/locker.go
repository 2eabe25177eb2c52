package gocronpgleader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgleader/pgleader/pgleader"
)

// ErrSkipped is matched by the error of [Locker.Lock] when this replica
// must not run the job now: another replica's term holds the job's lease,
// a run of the job started less than Window ago on the database clock, or
// this Locker's previous run of the job has not ended. gocron then skips
// the run (and passes the error to an AfterLockError listener).
var ErrSkipped = errors.New("gocronpgleader: another run holds or ran this instant")

// ErrNoRun is returned by a function from [Locker.Task] when the Locker
// holds no run of its job: the gocron job is not named like the Task's job
// (gocron.WithName), or its scheduler does not use this Locker.
var ErrNoRun = errors.New("gocronpgleader: this Locker holds no run of the job")

// scheduleDesc is what the adapter records as a job's schedule in
// pgleader.job: gocron knows the schedule, the database does not.
const scheduleDesc = "gocron"

// Options configure a [Locker]. The zero value of a field means its
// default.
type Options struct {
	// Window is how long after a run of a job started (on the database
	// clock) the job counts as run: a Lock for it within Window is
	// refused. Required. It must exceed the replicas' clock skew plus
	// gocron's delay in firing, and be shorter than the job's shortest
	// interval, or instants are skipped: half the shortest interval
	// suits a skew well under it (see the package doc).
	Window time.Duration
	// Backend is the pgleader backend the runs' terms campaign through.
	// Default pgleader.NewPostgres(db); pass the process's own, over the
	// same database, to share its connections.
	Backend *pgleader.Postgres
	// Spec sets the lease timing of each run's term (TTL, RenewEvery, …);
	// its Key must be empty (each term's key is its job's name).
	Spec pgleader.Spec
	// Owner names this replica in the leases and in the runs. Default
	// hostname:pid:random.
	Owner string
	// KeepRuns is how many of a job's newest runs the database keeps.
	// Default 1,000.
	KeepRuns int
	// Logger receives the terms' log. Default the backend's, else
	// slog.Default().
	Logger *slog.Logger
	// Observer, if set, receives the terms' observations, except the
	// refused claims of runs skipped as already run (as pgleader.RunJob
	// leaves them out).
	Observer pgleader.Observer

	// AtLeastOnce retries the runs that did not record their end: their
	// replica died, was cut off from the database, or gocron cancelled
	// the run. A later Lock of the job that claims a run, on any replica,
	// first finds the runs left running by earlier terms (started less
	// than RetryWithin ago) and the function from [Locker.Task] runs each
	// of them again, oldest first, as attempt + 1 under its own term's
	// higher token, before the run gocron fired it for. gocron fires a
	// Locker once per instant and never again for a past one, so the
	// retry waits for the job's next firing after the dead run's lease
	// lapsed. Only functions wrapped by Task retry runs (a plain gocron
	// function cannot be handed another run's instant); for others the
	// runs left running are logged at Warn and stay running. Without it
	// (the default) a run is at most once. A run whose function returned
	// an error is recorded failed and is not retried either way.
	AtLeastOnce bool
	// RetryWithin is how long after its start a run left running may
	// still be retried (AtLeastOnce only; then required). It must exceed
	// the job's longest interval plus the Spec's TTL, or a run left
	// running may have no firing to retry it in.
	RetryWithin time.Duration
}

// Locker is a gocron.Locker on pgleader: Lock wins the job's lease (the
// key is the job's name), claims a run of the job in pgleader.job_run
// unless one started less than Window ago, and keeps the lease renewed until
// Unlock, which records the run's end. Create it with [NewLocker]; it is
// safe for concurrent use. Give each replica its own Locker (its own
// owner): a Locker runs at most one run of a job at a time.
type Locker struct {
	db      pgleader.DB
	backend *pgleader.Postgres
	opts    Options

	mu   sync.Mutex
	runs map[string]*run // the runs held, by job
}

// NewLocker returns a Locker whose runs are recorded in the database of db
// (a pool; the schema must be at version 18 or later). It checks opts and
// returns an error matching pgleader.ErrInvalid that names a bad field.
func NewLocker(db pgleader.DB, opts Options) (*Locker, error) {
	switch {
	case db == nil:
		return nil, fmt.Errorf("%w: gocronpgleader.NewLocker: nil db", pgleader.ErrInvalid)
	case opts.Window <= 0:
		return nil, fmt.Errorf("%w: Options.Window is required and must be positive, got %v: "+
			"set it above the replicas' clock skew and below the jobs' shortest interval", pgleader.ErrInvalid, opts.Window)
	case opts.Spec.Key != "":
		return nil, fmt.Errorf("%w: Options.Spec.Key must be empty: each run's key is its job's name", pgleader.ErrInvalid)
	case opts.KeepRuns < 0:
		return nil, fmt.Errorf("%w: Options.KeepRuns must not be negative, got %d", pgleader.ErrInvalid, opts.KeepRuns)
	case opts.AtLeastOnce && opts.RetryWithin <= 0:
		return nil, fmt.Errorf("%w: Options.RetryWithin is required with AtLeastOnce and must be positive, got %v: "+
			"set it above the jobs' longest interval plus the TTL", pgleader.ErrInvalid, opts.RetryWithin)
	case !opts.AtLeastOnce && opts.RetryWithin != 0:
		return nil, fmt.Errorf("%w: Options.RetryWithin is set but AtLeastOnce is not", pgleader.ErrInvalid)
	}
	spec := opts.Spec
	spec.Key = "gocronpgleader"
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("Options.Spec: %w", err)
	}
	if opts.Owner != "" {
		if err := pgleader.CheckOwner(opts.Owner); err != nil {
			return nil, fmt.Errorf("Options.Owner: %w", err)
		}
	} else {
		opts.Owner = defaultOwner()
	}
	if opts.KeepRuns == 0 {
		opts.KeepRuns = 1000
	}
	if inner := opts.Observer; inner != nil {
		opts.Observer = pgleader.ObserverFunc(func(o pgleader.Observation) {
			if o.Kind == pgleader.ObserveClaimRefused && o.Err == nil {
				return
			}
			inner.Observe(o)
		})
	}
	b := opts.Backend
	if b == nil {
		b = pgleader.NewPostgres(db)
	}
	return &Locker{db: db, backend: b, opts: opts, runs: make(map[string]*run)}, nil
}

// Owner is the name of this replica in the leases and runs.
func (l *Locker) Owner() string { return l.opts.Owner }

// run is one run a Locker holds, from Lock to Unlock.
type run struct {
	l       *Locker
	job     string
	started chan struct{} // closed once the run is claimed and its body may start
	unlock  chan struct{} // closed by Unlock
	done    chan struct{} // closed once the term is over and its lease released
	once    sync.Once

	// Set before started closes (claim, lead); read after.
	term *pgleader.Term
	ctx  context.Context // the term's body context
	rec  pgleader.JobRun
	// skip says why the claim refused the run.
	skip string
	// left are the instants of the runs left running by earlier terms
	// that this run's term may retry (AtLeastOnce), oldest first; a Task
	// takes them over before its own run.
	left    []time.Time
	retried bool // a Task took left in hand; read after unlock

	err  error // RunOnce's, set before done closes
	fail error // the body's error, set by a Task before Unlock
}

// Lock implements gocron.Locker. It campaigns for the lease of the key
// job and, if it wins, claims a run of the job, unless a run started less
// than Window ago on the database clock; the error matches [ErrSkipped]
// when another replica runs or ran this instant. The lease is renewed
// until Unlock. If the term ends before Unlock (renewals failed, the lease
// was lost, ctx was cancelled), the context of a [Locker.Task] function is
// cancelled and the run's end is not recorded.
func (l *Locker) Lock(ctx context.Context, job string) (gocron.Lock, error) {
	if err := pgleader.CheckKey(job); err != nil {
		return nil, fmt.Errorf("gocronpgleader: job name: %w", err)
	}
	r := &run{l: l, job: job, started: make(chan struct{}), unlock: make(chan struct{}), done: make(chan struct{})}
	l.mu.Lock()
	if l.runs[job] != nil {
		l.mu.Unlock()
		return nil, fmt.Errorf("%w: this replica's run of %q has not ended", ErrSkipped, job)
	}
	l.runs[job] = r
	l.mu.Unlock()

	spec := l.opts.Spec
	spec.Key = job
	el, err := pgleader.New(l.backend, spec, pgleader.Options{Owner: l.opts.Owner, Logger: l.opts.Logger,
		Observer: l.opts.Observer, Claim: r.claim, Lead: r.lead, NoHandOff: true})
	if err != nil {
		l.forget(r)
		return nil, err
	}
	go func() {
		r.err = el.RunOnce(ctx)
		l.forget(r)
		close(r.done)
	}()
	select {
	case <-r.started:
		return r, nil
	case <-r.done:
	}
	switch {
	case r.skip != "":
		return nil, fmt.Errorf("%w: %s", ErrSkipped, r.skip)
	case errors.Is(r.err, pgleader.ErrHeld):
		return nil, fmt.Errorf("%w: %w", ErrSkipped, r.err)
	case r.err == nil:
		return nil, fmt.Errorf("gocronpgleader: the run of %q ended before it started", job)
	}
	return nil, fmt.Errorf("gocronpgleader: lock %q: %w", job, r.err)
}

func (l *Locker) forget(r *run) {
	l.mu.Lock()
	if l.runs[r.job] == r {
		delete(l.runs, r.job)
	}
	l.mu.Unlock()
}

// claim is the term's Claim hook: it refuses the run if one started less
// than Window ago, and else claims one at the database clock's now.
func (r *run) claim(ctx context.Context, t *pgleader.Term) (bool, error) {
	var now time.Time
	var last pgtype.Timestamptz
	var left []time.Time
	query, args := `SELECT pgleader.job_schedule($1, $2, NULL), (SELECT instant FROM pgleader.job_runs($1, 1)),
		'{}'::timestamptz[]`, []any{r.job, scheduleDesc}
	if r.l.opts.AtLeastOnce {
		// The runs left running by earlier terms: the lease is this
		// term's, so none of them has a live term.
		query = `SELECT pgleader.job_schedule($1, $2, NULL), (SELECT instant FROM pgleader.job_runs($1, 1)),
			(SELECT coalesce(array_agg(r.instant ORDER BY r.instant), '{}') FROM pgleader.job_runs($1, 1000) AS r
			  WHERE r.state = 'running' AND r.token < $3)`
		args = append(args, t.Token())
	}
	err := r.l.db.QueryRow(ctx, query, args...).Scan(&now, &last, &left)
	if err != nil {
		return false, fmt.Errorf("gocronpgleader: job_schedule: %w", err)
	}
	for _, at := range left {
		if now.Before(at.Add(r.l.opts.RetryWithin)) {
			r.left = append(r.left, at)
		}
	}
	if last.Valid && now.Sub(last.Time) < r.l.opts.Window {
		r.skip = fmt.Sprintf("a run of %q started %v ago, less than Window (%v)",
			r.job, now.Sub(last.Time).Round(time.Millisecond), r.l.opts.Window)
		return false, nil
	}
	var outcome string
	var attempt pgtype.Int4
	err = r.l.db.QueryRow(ctx, `SELECT outcome, attempt FROM pgleader.job_claim($1, $2, $3, $4)`,
		r.job, now, t.Owner(), t.Token()).Scan(&outcome, &attempt)
	if err != nil {
		return false, fmt.Errorf("gocronpgleader: job_claim: %w", err)
	}
	if outcome != "run" {
		r.skip = fmt.Sprintf("the claim of %q at %v was refused (%s)", r.job, now, outcome)
		return false, nil
	}
	r.term, r.rec = t, pgleader.JobRun{Job: r.job, Instant: now, Attempt: int(attempt.Int32), Token: t.Token()}
	return true, nil
}

// lead is the term's body: it lets Lock return and holds the term until
// Unlock, then records the run's end.
func (r *run) lead(ctx context.Context, t *pgleader.Term) error {
	r.ctx = ctx
	close(r.started)
	select {
	case <-r.unlock:
	case <-ctx.Done():
		return fmt.Errorf("gocronpgleader: the term of %q ended before Unlock: %w", r.job, ctx.Err())
	}
	if len(r.left) > 0 && !r.retried {
		r.l.logger().Warn("gocronpgleader: runs left running were not retried: AtLeastOnce retries them only "+
			"through a function wrapped by Locker.Task", "job", r.job, "instants", r.left)
	}
	return r.finish(ctx, t, r.rec.Instant, r.fail)
}

// finish records the end of the run of the job at instant that t claimed:
// done, or failed with fail. It says at Warn why the end could not be
// recorded (gocron ignores Unlock's error).
func (r *run) finish(ctx context.Context, t *pgleader.Term, instant time.Time, fail error) error {
	var msg pgtype.Text
	if fail != nil {
		msg = pgtype.Text{String: strings.ToValidUTF8(fail.Error(), "?"), Valid: true}
	}
	var recorded bool
	err := r.l.db.QueryRow(ctx, `SELECT pgleader.job_finish($1, $2, $3, $4, $5, $6, $7)`,
		r.job, instant, t.Owner(), t.Token(), fail == nil, msg, r.l.opts.KeepRuns).Scan(&recorded)
	switch {
	case err != nil:
		err = fmt.Errorf("gocronpgleader: job_finish: %w", err)
	case !recorded:
		err = fmt.Errorf("gocronpgleader: the run of %q at %v was no longer this term's to record", r.job, instant)
	}
	if err != nil {
		r.l.logger().Warn("gocronpgleader: the run's end was not recorded", "job", r.job, "instant", instant,
			"token", t.Token(), "err", err)
	}
	return err
}

// retryLeft runs fn again for each run left running that the claim found
// (AtLeastOnce), oldest first: each is taken over by this run's term
// (pgleader.job_claim's retry: the token is this term's, the attempt one
// more) and its end recorded. It stops when ctx ends; a run another term
// took over first, or whose RetryWithin passed, is passed over.
func (r *run) retryLeft(ctx context.Context, fn func(context.Context, *pgleader.Term, pgleader.JobRun) error) {
	r.retried = true
	for _, instant := range r.left {
		if ctx.Err() != nil {
			return
		}
		var outcome string
		var attempt pgtype.Int4
		err := r.l.db.QueryRow(ctx, `SELECT outcome, attempt FROM pgleader.job_claim($1, $2, $3, $4, $5)`,
			r.job, instant, r.term.Owner(), r.term.Token(), instant.Add(r.l.opts.RetryWithin)).Scan(&outcome, &attempt)
		if err != nil {
			r.l.logger().Warn("gocronpgleader: could not take over a run left running", "job", r.job, "instant", instant,
				"err", fmt.Errorf("job_claim: %w", err))
			return
		}
		if outcome != "retry" {
			r.l.logger().Info("gocronpgleader: a run left running was not retried", "job", r.job, "instant", instant,
				"outcome", outcome)
			if outcome == "lost" {
				return
			}
			continue
		}
		rec := pgleader.JobRun{Job: r.job, Instant: instant, Attempt: int(attempt.Int32), Token: r.term.Token()}
		r.l.logger().Info("gocronpgleader: retrying a run left running", "job", r.job, "instant", instant,
			"attempt", rec.Attempt, "token", rec.Token)
		ferr := fn(ctx, r.term, rec)
		if ferr != nil && !r.term.Live() {
			// The term ended under the retry: the run stays running, for
			// another retry.
			r.l.logger().Warn("gocronpgleader: the retry's term ended before it finished; its end is not recorded",
				"job", r.job, "instant", instant, "token", rec.Token, "reason", r.term.Reason(), "err", ferr)
			return
		}
		// Recorded under the term's context: gocron's cancelling the
		// job's context does not end the term.
		_ = r.finish(r.ctx, r.term, instant, ferr)
	}
}

// logger is Options.Logger, else slog.Default().
func (l *Locker) logger() *slog.Logger {
	if l.opts.Logger != nil {
		return l.opts.Logger
	}
	return slog.Default()
}

// Unlock implements gocron.Lock: it records the run's end and releases
// the job's lease, and returns once the lease is released. Its error says
// why the end could not be recorded (the term had ended, the database
// failed); gocron ignores it.
func (r *run) Unlock(context.Context) error {
	r.once.Do(func() { close(r.unlock) })
	<-r.done
	return r.err
}

// Term returns the term and the run that this Locker holds for job now,
// if any: the token of the term is the one to fence the run's writes with.
// Prefer [Locker.Task], whose function gets them with a context that ends
// with the term.
func (l *Locker) Term(job string) (*pgleader.Term, pgleader.JobRun, bool) {
	l.mu.Lock()
	r := l.runs[job]
	l.mu.Unlock()
	if r == nil {
		return nil, pgleader.JobRun{}, false
	}
	select {
	case <-r.started:
		return r.term, r.rec, true
	default:
		return nil, pgleader.JobRun{}, false
	}
}

// Task adapts fn, a function as pgleader.Job's Run takes it, into a gocron
// task function for the job named job (name the gocron job so, with
// gocron.WithName): gocron.NewTask(locker.Task("digest", fn)). fn gets the
// run's term, for its fencing token, and a context cancelled when the term
// ends (lease lost, renewals failing) or when gocron cancels the job's
// context (shutdown, job removed). fn's error is recorded as the run's
// (state failed). Without a run held by this Locker for job, the function
// returns [ErrNoRun] without calling fn.
func (l *Locker) Task(job string, fn func(ctx context.Context, t *pgleader.Term, r pgleader.JobRun) error) func(context.Context) error {
	return func(jobCtx context.Context) error {
		l.mu.Lock()
		r := l.runs[job]
		l.mu.Unlock()
		if r == nil {
			return fmt.Errorf("%w: %q", ErrNoRun, job)
		}
		select {
		case <-r.started:
		default:
			return fmt.Errorf("%w: %q", ErrNoRun, job)
		}
		ctx, cancel := context.WithCancel(r.ctx)
		defer cancel()
		stop := context.AfterFunc(jobCtx, cancel)
		defer stop()
		if len(r.left) > 0 {
			r.retryLeft(ctx, fn)
			if err := r.ctx.Err(); err != nil {
				// The term ended in a retry: this run stays running too.
				r.fail = fmt.Errorf("gocronpgleader: the term of %q ended while it retried runs left running: %w", job, err)
				return r.fail
			}
		}
		err := fn(ctx, r.term, r.rec)
		r.fail = err
		return err
	}
}

// defaultOwner is pgleader's default owner, hostname:pid:random, drawn
// once per Locker so that all its runs share it.
func defaultOwner() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s:%d:%04x", host, os.Getpid(), rand.Uint32()&0xffff)
}
