//go:build unix

package main

import (
	"context"
	"flag"
	"strconv"
	"strings"
	"time"

	"github.com/pgleader/pgleader/pgleader"
)

// jobFlags are run's flags for a scheduled job (--every, --cron and those
// that only mean something with one of them).
type jobFlags struct {
	every       time.Duration
	cron        string
	atLeastOnce bool
	retryWithin time.Duration
	missed      string
	startWithin time.Duration

	schedule string // as the job's status shows it, once job has checked it
}

func defineJobFlags(fs *flag.FlagSet) *jobFlags {
	f := &jobFlags{}
	fs.DurationVar(&f.every, "every", 0, "run COMMAND once at each multiple of this `duration` since the Unix epoch, on the database clock (at least 1s), on one replica, instead of while holding the lease")
	fs.StringVar(&f.cron, "cron", "", "run COMMAND once at each instant of this cron `expression` (five fields or @hourly, @daily, ...; UTC unless it begins with CRON_TZ=Area/City), on one replica")
	fs.BoolVar(&f.atLeastOnce, "at-least-once", false, "with --every or --cron: a run that did not record its end (its pgleader died, was cut off or stopped) is run again by another replica, as attempt 2, 3, ...")
	fs.DurationVar(&f.retryWithin, "retry-within", 0, "with --at-least-once: how long after its instant a run may be taken over (default until the next instant)")
	fs.StringVar(&f.missed, "missed", "skip", "with --every or --cron: an instant no replica reached in time is skipped (`skip`), or the latest such instant is run once (latest)")
	fs.DurationVar(&f.startWithin, "start-within", 0, "with --every or --cron and --missed skip: how late after its instant a run may still start (default 1m or the schedule's period, whichever is shorter)")
	return f
}

// leaseOnly are run's flags that do not go with --every or --cron, and why.
var leaseOnly = []struct{ flag, why string }{
	{"exit-with-child", "a scheduled command runs once per instant and pgleader goes on to the next"},
	{"value", "a job's terms publish no value"},
	{"priority", "a job's replicas do not wait as candidates"},
	{"health-addr", "a job's replica leads only while a run lasts"},
	{"session-bound", "a job's terms last a run; a run left by a dead replica is handled by the job's policy (--at-least-once)"},
}

// scheduled reports whether the command line asks for a scheduled job.
func (f *jobFlags) scheduled(fs *flag.FlagSet) bool {
	return given(fs, "every") || given(fs, "cron")
}

// job checks the job flags given on fs and returns the job they describe,
// named key, without its timing, owner and function. Any breach of the
// rules is bad usage.
func (f *jobFlags) job(fs *flag.FlagSet, key string) (pgleader.Job, error) {
	if !f.scheduled(fs) {
		for _, name := range []string{"at-least-once", "retry-within", "missed", "start-within"} {
			if given(fs, name) {
				return pgleader.Job{}, usagef("run", "--%s needs --every or --cron", name)
			}
		}
		return pgleader.Job{}, nil
	}
	if given(fs, "every") && given(fs, "cron") {
		return pgleader.Job{}, usagef("run", "--every and --cron are exclusive: give one schedule")
	}
	for _, o := range leaseOnly {
		if given(fs, o.flag) {
			return pgleader.Job{}, usagef("run", "--%s does not go with --every or --cron: %s", o.flag, o.why)
		}
	}
	if err := refuseEmpty(fs, "cron"); err != nil {
		return pgleader.Job{}, err
	}
	if given(fs, "every") && f.every < time.Second {
		return pgleader.Job{}, usagef("run", "--every must be at least 1s, got %v", f.every)
	}
	sched, err := pgleader.ParseSchedule(f.every, f.cron)
	if err != nil {
		return pgleader.Job{}, usagef("run", "--cron: %s", strings.TrimPrefix(err.Error(), pgleader.ErrInvalid.Error()+": "))
	}
	f.schedule = sched.String()
	job := pgleader.Job{Name: key, Every: f.every, Cron: f.cron, AtLeastOnce: f.atLeastOnce,
		RetryWithin: f.retryWithin, StartWithin: f.startWithin}
	switch f.missed {
	case "skip":
		job.Missed = pgleader.MissedSkip
	case "latest":
		job.Missed = pgleader.MissedRunLatest
	default:
		return pgleader.Job{}, usagef("run", "--missed must be skip or latest, got %q", f.missed)
	}
	switch {
	case f.retryWithin < 0:
		return pgleader.Job{}, usagef("run", "--retry-within must not be negative, got %v", f.retryWithin)
	case f.startWithin < 0:
		return pgleader.Job{}, usagef("run", "--start-within must not be negative, got %v", f.startWithin)
	case given(fs, "retry-within") && !f.atLeastOnce:
		return pgleader.Job{}, usagef("run", "--retry-within needs --at-least-once")
	case given(fs, "start-within") && job.Missed == pgleader.MissedRunLatest:
		return pgleader.Job{}, usagef("run", "--start-within goes with --missed skip, not latest (which runs the latest instant however late)")
	}
	return job, nil
}

// runJob is the job's function: it runs the command for one scheduled
// run, in the run's term, as lead does for a term of its own, with the
// instant and the attempt added to its environment. A status other than 0
// records the run failed.
func (s *supervisor) runJob(ctx context.Context, t *pgleader.Term, r pgleader.JobRun) error {
	instant := r.Instant.UTC().Format(time.RFC3339Nano)
	log := s.log.With("key", t.Key(), "owner", t.Owner(), "token", t.Token(), "instant", instant, "attempt", r.Attempt)
	return s.execute(ctx, t, log, "PGLEADER_INSTANT="+instant, "PGLEADER_ATTEMPT="+strconv.Itoa(r.Attempt))
}

// observeJob logs the instants this replica passed over without trying
// them: it was busy with an earlier instant, or could not reach the
// database in time. Another replica may have run them.
func (s *supervisor) observeJob(o pgleader.Observation) {
	if o.Kind != pgleader.ObserveJobSkipped || !o.Missed {
		return
	}
	attrs := []any{"key", o.Key, "owner", o.Owner, "instant", o.Instant.UTC().Format(time.RFC3339Nano)}
	if o.Err != nil {
		attrs = append(attrs, "err", o.Err)
	}
	s.log.Info("scheduled instant passed over: this replica was busy or cut off (another may have run it)", attrs...)
}
