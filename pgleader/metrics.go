package pgleader

import "time"

// ObservationKind says what an Observation reports.
type ObservationKind int

// The kinds of observations.
const (
	// ObserveTermStarted: this replica won a term and its Claim passed
	// (or it has none): the body is about to run. A term whose claim is
	// refused is reported by ObserveClaimRefused instead, and a term whose
	// acquire was answered after its yield instant by neither; both are
	// then reported ending and ended.
	ObserveTermStarted ObservationKind = iota + 1
	// ObserveTermEnding: the term began to end (Live turned false), with
	// its Reason.
	ObserveTermEnding
	// ObserveTermEnded: the term is over and its lease released or given
	// up, with its Reason.
	ObserveTermEnded
	// ObserveRenewed: a renewal returned, after Latency; Err is nil if it
	// extended the lease.
	ObserveRenewed
	// ObserveClaimRefused: the Claim hook refused the term's token, or
	// failed (Err).
	ObserveClaimRefused
	// ObserveJobRun: a scheduled run of a job ([RunJob]) ran here and
	// ended, at Instant, after Took; Err is the job function's error (nil:
	// done).
	ObserveJobRun
	// ObserveJobSkipped: this runner did not run the job's Instant: another
	// runner ran it or runs it, or (Missed) this runner passed it over —
	// it was busy with an earlier run, started late, or could not reach the
	// database in time (Err then says why) — and another runner may or may
	// not have run it: the job's runs (pgleader.job_run) say which.
	ObserveJobSkipped
)

// Observation is one event of an Elector, for metrics.
type Observation struct {
	Kind   ObservationKind
	Key    string
	Owner  string
	Token  int64
	Reason EndReason     // for TermEnding and TermEnded
	Took   time.Duration // for Renewed: the renewal's round trip; for JobRun: the run's
	Err    error         // for Renewed, ClaimRefused, JobRun and JobSkipped
	// For JobRun and JobSkipped: the scheduled instant, and whether this
	// runner passed it over (see ObserveJobSkipped).
	Instant time.Time
	Missed  bool
}

// Observer receives an Elector's observations. Observe is called
// synchronously from the elector's goroutines, so it must be quick and must
// not block; it may be called concurrently for different electors.
type Observer interface {
	Observe(Observation)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Observation)

// Observe calls f(o).
func (f ObserverFunc) Observe(o Observation) { f(o) }

func (e *Elector) observe(o Observation) {
	if e.opts.Observer == nil {
		return
	}
	o.Key, o.Owner = e.spec.Key, e.opts.Owner
	e.opts.Observer.Observe(o)
}
