package jobtest

import "time"

// Ended is when the run of an instant recorded its end (nil while it runs).
type Ended struct {
	Instant    time.Time
	FinishedAt *time.Time
}

// releaseLag is how long after a run records its end its term may still
// hold the job's lease (the term releases it after job_finish), or the
// runners that found it held may come late to the next instant: on a
// machine busy with two test suites and a chaos cluster, 250 ms was too
// little for either (a release after job_finish and a next campaign came
// later than that, and the instant after a run's end was passed over by
// every runner, no term drawn for it). An instant further from every run's
// end must have a run.
const releaseLag = 1500 * time.Millisecond

// PassedOver splits missing, instants of a job that have no run, into
// those the runners passed over while the run of an earlier instant, other
// than the run of except, still held the job (it ended less than
// releaseLag before, or has not ended), and the others, which it returns.
// On a loaded machine a run can end a second late, and the runners
// campaigning at the next instant find the job held and pass it over
// (Missed: skip): an instant missed by the policy, not lost.
func PassedOver(runs []Ended, missing []time.Time, except time.Time) (rest []time.Time, busy int) {
	for _, at := range missing {
		held := false
		for _, r := range runs {
			if r.Instant.Before(at) && !r.Instant.Equal(except) &&
				(r.FinishedAt == nil || r.FinishedAt.After(at.Add(-releaseLag))) {
				held = true
				break
			}
		}
		if held {
			busy++
		} else {
			rest = append(rest, at)
		}
	}
	return rest, busy
}
