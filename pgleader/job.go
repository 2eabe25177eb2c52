package pgleader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/robfig/cron/v3"

	"github.com/pgleader/pgleader/internal/jobclock"
	"github.com/pgleader/pgleader/internal/wait"
)

// Job is a scheduled job: a function that one replica runs at each
// scheduled instant, however many replicas run [RunJob] for it. See
// docs/jobs.md.
//
// An instant is a point of the schedule on the database clock, so replicas
// whose clocks are seconds apart still agree on it. At each instant every
// runner campaigns for the lease of the key Name; the term that wins claims
// the run (Name, instant) in the table pgleader.job_run with its token, in
// one statement conditional on holding the lease, and runs the function only
// if no other term claimed that instant first. The function's fenced writes
// carry the term's token (sqlfence), as any term's.
type Job struct {
	// Name names the job and is the key of its lease (1 to MaxKeyLen
	// bytes). Required. A job belongs to the database role that first ran
	// it, as a key does.
	Name string

	// Every runs the job at each multiple of Every since the Unix epoch on
	// the database clock: Every = time.Hour runs it on the hour. At least
	// one second. Exactly one of Every and Cron is required.
	Every time.Duration
	// Cron runs the job at the instants of a cron expression: five fields
	// (minute, hour, day of month, month, day of week) or a descriptor
	// (@hourly, @daily, …), in UTC unless it begins with CRON_TZ=Area/City.
	// Parsed by github.com/robfig/cron/v3's standard parser, except
	// "@every D", which is Every: D (counted from the Unix epoch, so that
	// every replica finds the same instants; the parser counts from the
	// moment it is asked).
	Cron string

	// AtLeastOnce retries a run that did not record its end: its replica
	// died, was cut off from the database, or was stopped in the middle.
	// Another runner takes it over, as a new term with a higher token and
	// attempt + 1, until RetryWithin after the instant. Without it (the
	// default) a run is at most once: one whose replica died is not
	// repeated. A run whose function returned an error is recorded as
	// failed and is not retried either way.
	AtLeastOnce bool
	// RetryWithin is how long after its instant a run may still be taken
	// over (AtLeastOnce only). Default: until the next instant or two TTLs
	// after the instant, whichever is later (a dead runner's lease lapses
	// within a TTL). A runner that starts takes over the runs left running
	// whose RetryWithin has not passed, before its first instant.
	RetryWithin time.Duration

	// Missed says what a runner does with an instant it did not reach in
	// time: every runner was down, or this one was still busy with the
	// previous run. Default MissedSkip.
	Missed MissedPolicy
	// StartWithin is how late after its instant a run may still start
	// (under MissedSkip). Default one minute or the schedule's period,
	// whichever is shorter.
	StartWithin time.Duration

	// Fence, if set, names a fence resource (see package sqlfence) that
	// each run takes with its token when it claims its instant, in the same
	// statement: after a retry's claim the earlier attempt's writes under
	// that resource are refused.
	Fence string

	// KeepRuns is how many of the job's newest runs the database keeps.
	// Default 1,000.
	KeepRuns int

	// Spec sets the lease timing of each run's term (TTL, RenewEvery, …).
	// Its Key must be empty or Name.
	Spec Spec
	// Owner names this runner in the lease and in the job's runs. Default
	// hostname:pid:random.
	Owner string
	// Logger receives the runner's log. Default the backend's, else
	// slog.Default().
	Logger *slog.Logger
	// Observer, if set, receives the terms' observations and one
	// ObserveJobRun or ObserveJobSkipped per instant this runner tried.
	Observer Observer

	// Run is the job's function. Its context is cancelled when the term
	// ends before it returns (lease lost, RunJob's context cancelled), as a
	// body's. A nil error records the run done, an error records it failed.
	Run func(ctx context.Context, t *Term, r JobRun) error
}

// MissedPolicy says what a runner does with instants it did not reach in
// time.
type MissedPolicy int

const (
	// MissedSkip runs an instant only if the runner reaches it within
	// StartWithin; the others are skipped (and reported as missed).
	MissedSkip MissedPolicy = iota
	// MissedRunLatest runs the latest instant that passed, once, if it has
	// no run: when a runner starts after instants passed with every runner
	// down, or when its previous run ran past the next instants.
	MissedRunLatest
)

// JobRun is a run of a scheduled job, as its function sees it.
type JobRun struct {
	Job     string
	Instant time.Time // the scheduled instant, on the database clock
	Attempt int       // 1, or more for a run taken over (AtLeastOnce)
	Token   int64     // the term's fencing token
}

// JobStatus is a job as the database knows it: its schedule, the next
// instant its runners wait for, and its last run.
type JobStatus struct {
	Job      string
	Schedule string
	NextAt   time.Time // zero if unknown
	Role     string
	// Last is the newest recorded run; zero Instant if none.
	Last JobRunRecord
	// Now is the database clock when it was read.
	Now time.Time
}

// JobRunRecord is one recorded run.
type JobRunRecord struct {
	Instant    time.Time
	State      string // "running", "done" or "failed"
	Owner      string
	Token      int64
	Attempt    int
	StartedAt  time.Time
	FinishedAt time.Time // zero while running
	Error      string
}

// Duration is how long the run took, or zero while it runs.
func (r JobRunRecord) Duration() time.Duration {
	if r.FinishedAt.IsZero() {
		return 0
	}
	return r.FinishedAt.Sub(r.StartedAt)
}

// JobSchedule is a parsed schedule: Every or Cron.
type JobSchedule struct {
	every time.Duration
	cron  cron.Schedule
	desc  string
}

// ParseSchedule parses a schedule as Job takes it: every > 0 or a cron
// expression, not both.
func ParseSchedule(every time.Duration, expr string) (JobSchedule, error) {
	switch {
	case every != 0 && expr != "":
		return JobSchedule{}, invalidf("a job takes Every or Cron, not both")
	case every != 0:
		if every < time.Second {
			return JobSchedule{}, invalidf("Every must be at least 1s, got %v", every)
		}
		return JobSchedule{every: every, desc: "every " + every.String()}, nil
	case expr != "":
		if d, ok, err := cronEvery(expr); ok {
			if err != nil {
				return JobSchedule{}, invalidf("cron expression %q: %v", expr, err)
			}
			if d < time.Second {
				return JobSchedule{}, invalidf("cron expression %q: @every must be at least 1s, got %v", expr, d)
			}
			return JobSchedule{every: d, desc: "every " + d.String()}, nil
		}
		s, err := cron.ParseStandard(expr)
		if err != nil {
			return JobSchedule{}, invalidf("cron expression %q: %v", expr, err)
		}
		if len(expr) > 190 {
			return JobSchedule{}, invalidf("cron expression is %d bytes; the limit is 190", len(expr))
		}
		return JobSchedule{cron: s, desc: "cron " + expr}, nil
	}
	return JobSchedule{}, invalidf("a job needs Every or Cron")
}

// cronEvery reports whether expr is "@every D" (after an optional time
// zone, which does not matter to it) and parses D.
func cronEvery(expr string) (time.Duration, bool, error) {
	f := strings.Fields(expr)
	if len(f) > 0 && (strings.HasPrefix(f[0], "CRON_TZ=") || strings.HasPrefix(f[0], "TZ=")) {
		f = f[1:]
	}
	if len(f) == 0 || f[0] != "@every" {
		return 0, false, nil
	}
	if len(f) != 2 {
		return 0, true, fmt.Errorf("@every takes one duration")
	}
	d, err := time.ParseDuration(f[1])
	return d, true, err
}

// String describes the schedule ("every 1h0m0s", "cron 0 3 * * *").
func (s JobSchedule) String() string { return s.desc }

// Next returns the first instant strictly after t (zero if none).
func (s JobSchedule) Next(t time.Time) time.Time {
	if s.every > 0 {
		n := t.UnixNano()
		d := int64(s.every)
		k := n / d
		if n < 0 && n%d != 0 {
			k--
		}
		return time.Unix(0, (k+1)*d).UTC()
	}
	return s.cron.Next(t).UTC()
}

// Latest returns the last instant at or before t, looking back no further
// than since (zero if none).
func (s JobSchedule) Latest(t, since time.Time) time.Time {
	if s.every > 0 {
		p := s.Next(t).Add(-s.every)
		if p.Before(since) {
			return time.Time{}
		}
		return p
	}
	var last time.Time
	for n := s.cron.Next(since.Add(-time.Nanosecond)); !n.IsZero() && !n.After(t); n = s.cron.Next(n) {
		last = n
	}
	return last.UTC()
}

// period is the gap between the instants after t.
func (s JobSchedule) period(t time.Time) time.Duration {
	a := s.Next(t)
	if a.IsZero() {
		return 0
	}
	b := s.Next(a)
	if b.IsZero() {
		return 0
	}
	return b.Sub(a)
}

// jobRunner runs one Job.
type jobRunner struct {
	p     *Postgres
	job   Job
	sched JobSchedule
	el    *Elector
	log   *slog.Logger
	spec  Spec

	// the database clock: db was read when the local clock read at.
	at, db time.Time

	// the instant being attempted and what its claim said.
	instant time.Time
	claimed string
	run     JobRun
}

// RunJob runs job on this replica until ctx is cancelled: at each
// instant of its schedule it campaigns for the job's lease and, if it wins
// and the instant has not been run, runs job.Run. It returns nil once ctx is
// cancelled (after the run in progress, if any, ended as a term ends), or
// at once an error that retrying cannot cure ([Permanent]): bad
// configuration, no schema, no grant, a TTL above the database's max_ttl.
//
// RunJob needs the Postgres backend: the runs are recorded in the database
// that holds the lease. The schema must be at version 18 or later.
func RunJob(ctx context.Context, p *Postgres, job Job) error {
	r, err := newJobRunner(p, job)
	if err != nil {
		return err
	}
	// The backend's lease connection stays open between instants, so a
	// run's statements do not wait for a new session, nor for the pool's
	// health check of a connection idle since the last instant.
	defer p.holdConnections()()
	return r.loop(ctx)
}

func newJobRunner(p *Postgres, job Job) (*jobRunner, error) {
	if p == nil {
		return nil, invalidf("RunJob: nil backend")
	}
	if err := CheckKey(job.Name); err != nil {
		return nil, fmt.Errorf("Job.Name: %w", err)
	}
	if job.Run == nil {
		return nil, invalidf("Job.Run is nil")
	}
	sched, err := ParseSchedule(job.Every, job.Cron)
	if err != nil {
		return nil, fmt.Errorf("Job: %w", err)
	}
	if job.Spec.Key != "" && job.Spec.Key != job.Name {
		return nil, invalidf("Job.Spec.Key is %q; it must be empty or Name (%q)", job.Spec.Key, job.Name)
	}
	if job.Missed != MissedSkip && job.Missed != MissedRunLatest {
		return nil, invalidf("Job.Missed: unknown policy %d", job.Missed)
	}
	if job.StartWithin < 0 || job.RetryWithin < 0 || job.KeepRuns < 0 {
		return nil, invalidf("Job: StartWithin, RetryWithin and KeepRuns must not be negative")
	}
	if job.RetryWithin != 0 && !job.AtLeastOnce {
		return nil, invalidf("Job.RetryWithin is set but AtLeastOnce is not")
	}
	if job.Fence != "" {
		if err := CheckKey(job.Fence); err != nil {
			return nil, fmt.Errorf("Job.Fence: %w", err)
		}
	}
	if job.KeepRuns == 0 {
		job.KeepRuns = 1000
	}
	spec := job.Spec
	spec.Key = job.Name
	r := &jobRunner{p: p, job: job, sched: sched}
	obs := job.Observer
	if obs != nil {
		// A claim refused because the instant was run elsewhere is a skip,
		// reported as ObserveJobSkipped; only a failed claim is passed on.
		inner := obs
		obs = ObserverFunc(func(o Observation) {
			if o.Kind == ObserveClaimRefused && o.Err == nil {
				return
			}
			inner.Observe(o)
		})
	}
	el, err := New(p, spec, Options{Owner: job.Owner, Logger: job.Logger, Observer: obs, Claim: r.claim, Lead: r.lead})
	if err != nil {
		return nil, err
	}
	r.el, r.spec, r.log = el, el.Spec(), el.log
	r.job.Owner = el.opts.Owner
	return r, nil
}

// now is the database clock as this runner last read it, advanced by the
// local clock since.
func (r *jobRunner) now() time.Time { return r.db.Add(jobclock.Now().Sub(r.at)) }

// read records a reading of the database clock, db, by a statement sent at
// sent (local clock) and answered now: the reading is taken to be of the
// middle of the round trip.
func (r *jobRunner) read(sent, db time.Time) {
	back := jobclock.Now()
	r.at, r.db = sent.Add(back.Sub(sent)/2), db
}

func (r *jobRunner) startWithin() time.Duration {
	if r.job.StartWithin > 0 {
		return r.job.StartWithin
	}
	d := time.Minute
	if p := r.sched.period(r.now()); p > 0 && p < d {
		d = p
	}
	return d
}

func (r *jobRunner) observe(kind ObservationKind, instant time.Time, missed bool, took time.Duration, err error) {
	if r.job.Observer == nil {
		return
	}
	r.job.Observer.Observe(Observation{Kind: kind, Key: r.job.Name, Owner: r.job.Owner, Instant: instant,
		Missed: missed, Took: took, Err: err})
}

// schedule records the next instant in pgleader.job and reads the clock.
// The first call (next zero, when RunJob starts) also reads the database's
// max_ttl: a TTL above it would be refused only at the first instant's
// campaign, which may be hours away, so RunJob refuses it at once, as the
// database would.
func (r *jobRunner) schedule(ctx context.Context, next time.Time) error {
	var nextArg pgtype.Timestamptz
	query := `SELECT pgleader.job_schedule($1, $2, $3), NULL::interval`
	if !next.IsZero() {
		nextArg = pgtype.Timestamptz{Time: next, Valid: true}
	} else {
		query = `SELECT pgleader.job_schedule($1, $2, $3), (SELECT g.max_ttl FROM pgleader.grace() AS g)`
	}
	sent := jobclock.Now()
	var db time.Time
	var maxTTL pgtype.Interval
	err := r.p.with(ctx, func(conn DB, _ *pgconn.PgConn) error {
		return conn.QueryRow(ctx, query, exec, r.job.Name, r.sched.desc, nextArg).Scan(&db, &maxTTL)
	})
	if err != nil {
		return sqlError("job_schedule", err)
	}
	r.read(sent, db)
	if maxTTL.Valid {
		limit := time.Duration(maxTTL.Microseconds)*time.Microsecond + time.Duration(maxTTL.Days)*24*time.Hour
		if maxTTL.Months == 0 && r.spec.TTL > limit {
			return invalidf("job %q: Spec.TTL %v exceeds the database's max_ttl %v: use a shorter TTL, "+
				"or raise the limit with pgleader.set_max_ttl (it is also the grace after a failover)", r.job.Name, r.spec.TTL, limit)
		}
	}
	return nil
}

func (r *jobRunner) loop(ctx context.Context) error {
	backoff := r.spec.CampaignEvery
	// The first reading of the clock; errors that retrying cannot cure end
	// RunJob here.
	for {
		err := r.schedule(ctx, time.Time{})
		if err == nil {
			break
		}
		if Permanent(err) {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		r.log.Warn("pgleader: job: cannot reach the database; retrying", "job", r.job.Name, "err", err)
		if !wait.Sleep(ctx, backoff) {
			return nil
		}
		backoff = min(2*backoff, r.spec.TTL/2)
	}
	if r.job.AtLeastOnce {
		if err := r.retryLeft(ctx); err != nil {
			if Permanent(err) {
				return err
			}
			r.log.Warn("pgleader: job: cannot read the runs left running; going on", "job", r.job.Name, "err", err)
		}
	}
	now := r.now()
	pending := r.sched.Next(now)
	if latest := r.catchUp(now); !latest.IsZero() {
		pending = latest
	}
	for ctx.Err() == nil {
		if pending.IsZero() {
			r.log.Info("pgleader: job: its schedule has no instant left", "job", r.job.Name)
			<-ctx.Done()
			return nil
		}
		if err := r.schedule(ctx, pending); err != nil {
			if Permanent(err) {
				return err
			}
			if ctx.Err() != nil {
				return nil
			}
			r.log.Warn("pgleader: job: cannot record its schedule; going on", "job", r.job.Name, "err", err)
		}
		if !r.sleepUntil(ctx, pending) {
			return nil
		}
		if err := r.attempt(ctx, pending); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		if r.job.AtLeastOnce {
			// A run left running by a runner that died since (the lease
			// then lapses) is taken over here, whatever its instant.
			if err := r.retryLeft(ctx); err != nil {
				if Permanent(err) {
					return err
				}
				r.log.Warn("pgleader: job: cannot read the runs left running; going on", "job", r.job.Name, "err", err)
			}
			if ctx.Err() != nil {
				return nil
			}
		}
		now := r.now()
		next := r.sched.Next(pending)
		if !next.IsZero() && !next.After(now) {
			// Instants went by during the run: run the latest of them if it
			// may still start, else wait for the next.
			latest := r.sched.Latest(now, next)
			if r.job.Missed == MissedRunLatest || now.Sub(latest) <= r.startWithin() {
				if latest.After(next) {
					r.observe(ObserveJobSkipped, next, true, 0, nil)
				}
				next = latest
			} else {
				r.observe(ObserveJobSkipped, latest, true, 0, nil)
				next = r.sched.Next(now)
			}
		}
		pending = next
	}
	return nil
}

// catchUp returns the instant a starting runner tries first if it is one
// that passed: the latest, if it may still start or the policy is
// MissedRunLatest (job_claim then says whether it was run).
func (r *jobRunner) catchUp(now time.Time) time.Time {
	since := now.Add(-r.startWithin())
	if r.job.Missed == MissedRunLatest {
		since = now.Add(-31 * 24 * time.Hour)
		if r.sched.every > 0 {
			since = now.Add(-r.sched.every)
		}
	}
	return r.sched.Latest(now, since)
}

// sleepUntil waits until the database clock reaches t.
func (r *jobRunner) sleepUntil(ctx context.Context, t time.Time) bool {
	return wait.Sleep(ctx, t.Sub(r.now()))
}

// attempt tries the instant until it ran here, was run elsewhere, or may no
// longer start; it returns only errors that end RunJob.
func (r *jobRunner) attempt(ctx context.Context, instant time.Time) error {
	retryUntil := r.retryUntil(instant)
	startBy := instant.Add(r.startWithin())
	if r.job.Missed == MissedRunLatest {
		startBy = r.sched.Next(instant)
	}
	if retryUntil.After(startBy) {
		startBy = retryUntil
	}
	backoff := r.spec.CampaignEvery
	for ctx.Err() == nil {
		r.instant, r.claimed, r.run = instant, "", JobRun{}
		err := r.el.RunOnce(ctx)
		switch r.claimed {
		case "run", "retry":
			// The function ran (lead recorded its end and observed it).
			return nil
		case "skip":
			r.observe(ObserveJobSkipped, instant, false, 0, nil)
			return nil
		case "early":
			// This replica's estimate of the database clock was early; the
			// claim read it again.
			if !wait.Sleep(ctx, max(instant.Sub(r.now()), MinInterval)) {
				return nil
			}
			continue
		}
		switch {
		case err == nil:
		case errors.Is(err, ErrHeld):
			if !r.job.AtLeastOnce {
				// Another runner holds the job: it runs this instant (or
				// the run before, past this instant's start).
				r.observe(ObserveJobSkipped, instant, false, 0, nil)
				return nil
			}
			// At least once: look again once the holder's lease could have
			// lapsed, to take over a run it left (at once if the holder
			// already let it go), but not past the next instant: a run left
			// later is taken over after an instant (retryLeft).
			pause := MinInterval
			switch l, lerr := r.p.Lease(ctx, r.job.Name); {
			case lerr != nil:
				r.log.Warn("pgleader: job: cannot read the job's lease; trying again shortly", "job", r.job.Name, "instant", instant, "err", lerr)
			case l.Held():
				pause = min(l.Remaining()+MinInterval, r.spec.TTL)
			}
			giveUp := startBy
			if next := r.sched.Next(instant); !next.IsZero() && next.Before(giveUp) && next.After(r.now()) {
				giveUp = next
			}
			if r.now().Add(pause).After(giveUp) {
				r.observe(ObserveJobSkipped, instant, false, 0, nil)
				return nil
			}
			if !wait.Sleep(ctx, pause) {
				return nil
			}
			continue
		case Permanent(err):
			return err
		default:
			if ctx.Err() != nil {
				return nil
			}
			r.log.Warn("pgleader: job: campaign failed; retrying", "job", r.job.Name, "instant", instant, "err", err)
		}
		if r.now().Add(backoff).After(startBy) {
			r.observe(ObserveJobSkipped, instant, true, 0, err)
			return nil
		}
		if !wait.Sleep(ctx, backoff) {
			return nil
		}
		backoff = min(2*backoff, r.spec.TTL/2)
	}
	return nil
}

// retryUntil is when the run of instant may no longer be taken over (zero
// unless AtLeastOnce): RetryWithin after it, by default the next instant or
// two TTLs after it, whichever is later, so that a dead runner's lease can
// lapse before the time is up.
func (r *jobRunner) retryUntil(instant time.Time) time.Time {
	if !r.job.AtLeastOnce {
		return time.Time{}
	}
	if r.job.RetryWithin > 0 {
		return instant.Add(r.job.RetryWithin)
	}
	until := instant.Add(2 * r.spec.TTL)
	if next := r.sched.Next(instant); next.After(until) {
		until = next
	}
	return until
}

// retryLeft attempts, oldest first, the runs left running that may still be
// taken over (AtLeastOnce), when nobody holds the job's lease: a run left
// running then has no live term. RunJob calls it when it starts (a runner
// replacing one that died in a run takes it over, even if later instants
// went by) and after each instant (a runner that died while the others
// were on other instants), one statement each time.
func (r *jobRunner) retryLeft(ctx context.Context) error {
	var instants []time.Time
	err := r.p.with(ctx, func(conn DB, _ *pgconn.PgConn) error {
		return conn.QueryRow(ctx, `SELECT coalesce(array_agg(r.instant ORDER BY r.instant), '{}')
			FROM pgleader.job_runs($1, 1000) AS r
			WHERE r.state = 'running' AND (SELECT l.holder FROM pgleader.lease($1) AS l) IS NULL`,
			exec, r.job.Name).Scan(&instants)
	})
	if err != nil {
		return sqlError("job_runs", err)
	}
	for _, instant := range instants {
		if ctx.Err() != nil || !r.retryUntil(instant).After(r.now()) {
			continue
		}
		if err := r.attempt(ctx, instant); err != nil {
			return err
		}
	}
	return nil
}

// claim is the term's Claim hook: it claims the instant's run.
func (r *jobRunner) claim(ctx context.Context, t *Term) (bool, error) {
	var fence pgtype.Text
	var retryUntil pgtype.Timestamptz
	if until := r.retryUntil(r.instant); !until.IsZero() {
		retryUntil = pgtype.Timestamptz{Time: until, Valid: true}
	}
	if r.job.Fence != "" {
		fence = pgtype.Text{String: r.job.Fence, Valid: true}
	}
	sent := jobclock.Now()
	var outcome string
	var db time.Time
	var attempt pgtype.Int4
	err := r.p.with(ctx, func(conn DB, _ *pgconn.PgConn) error {
		return conn.QueryRow(ctx, `SELECT outcome, db_now, attempt FROM pgleader.job_claim($1, $2, $3, $4, $5, $6)`, exec,
			r.job.Name, r.instant, t.Owner(), t.Token(), retryUntil, fence).Scan(&outcome, &db, &attempt)
	})
	if err != nil {
		return false, sqlError("job_claim", err)
	}
	r.read(sent, db)
	r.claimed = outcome
	switch outcome {
	case "run", "retry":
		r.run = JobRun{Job: r.job.Name, Instant: r.instant, Attempt: int(attempt.Int32), Token: t.Token()}
		return true, nil
	}
	return false, nil
}

// lead runs the job's function in the term and records its end.
func (r *jobRunner) lead(ctx context.Context, t *Term) error {
	run := r.run
	started := time.Now()
	err := r.job.Run(ctx, t, run)
	took := time.Since(started)
	if err != nil && !t.Live() {
		// The term ended under the function: its run is left running, for
		// a retry (AtLeastOnce) or as the record that it started.
		r.log.Warn("pgleader: job: the run's term ended before it finished; its end is not recorded",
			"job", run.Job, "instant", run.Instant, "token", run.Token, "reason", t.Reason(), "err", err)
		r.observe(ObserveJobRun, run.Instant, false, took, err)
		return err
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.spec.ReleaseTimeout+r.spec.RenewEvery)
	defer cancel()
	var msg pgtype.Text
	if err != nil {
		msg = pgtype.Text{String: strings.ToValidUTF8(err.Error(), "?"), Valid: true}
	}
	var recorded bool
	ferr := r.p.with(fctx, func(conn DB, _ *pgconn.PgConn) error {
		return conn.QueryRow(fctx, `SELECT pgleader.job_finish($1, $2, $3, $4, $5, $6, $7)`, exec,
			run.Job, run.Instant, t.Owner(), run.Token, err == nil, msg, r.job.KeepRuns).Scan(&recorded)
	})
	switch {
	case ferr != nil:
		r.log.Warn("pgleader: job: could not record the run's end", "job", run.Job, "instant", run.Instant, "err", sqlError("job_finish", ferr))
	case !recorded:
		r.log.Warn("pgleader: job: the run was taken over by a later term before its end was recorded",
			"job", run.Job, "instant", run.Instant, "token", run.Token)
	}
	r.observe(ObserveJobRun, run.Instant, false, took, err)
	return err
}

// JobStatuses reads the jobs the database knows (or the one named job),
// each with its last run.
func (p *Postgres) JobStatuses(ctx context.Context, job string) ([]JobStatus, error) {
	var arg pgtype.Text
	if job != "" {
		arg = pgtype.Text{String: job, Valid: true}
	}
	var out []JobStatus
	err := p.with(ctx, func(db DB, _ *pgconn.PgConn) error {
		out = nil
		q, err := rowQuerier(db)
		if err != nil {
			return err
		}
		rows, err := q.Query(ctx, `SELECT job, schedule, next_at, role, instant, state, owner, token, attempt, started_at,
			finished_at, error, db_now FROM pgleader.job_status($1)`, exec, arg)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var s JobStatus
			var next, instant, started, finished pgtype.Timestamptz
			var state, owner, msg pgtype.Text
			var token pgtype.Int8
			var attempt pgtype.Int4
			if err := rows.Scan(&s.Job, &s.Schedule, &next, &s.Role, &instant, &state, &owner, &token, &attempt,
				&started, &finished, &msg, &s.Now); err != nil {
				return err
			}
			s.NextAt = next.Time
			s.Last = JobRunRecord{Instant: instant.Time, State: state.String, Owner: owner.String, Token: token.Int64,
				Attempt: int(attempt.Int32), StartedAt: started.Time, FinishedAt: finished.Time, Error: msg.String}
			out = append(out, s)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, sqlError("job_status", err)
	}
	return out, nil
}
