// Package speedup switches off, on one pgleader.Postgres, the mechanisms
// that only make a hand-off faster, so that cmd/pgleader-bench can measure
// what each saves. Nothing else uses it: a Postgres it was not given to runs
// with every mechanism.
package speedup

// Mechanisms names the mechanisms; a true field is one switched off.
type Mechanisms struct {
	// Rehearsal: the hand-off run and rolled back on the lease connection
	// soon after a term starts, and on a LISTEN session when it starts.
	Rehearsal bool
	// Linger: the lease and LISTEN connections stay open 100 ms after
	// their last user lets go. Off, they close at once.
	Linger bool
}

// Off switches off, on backend (a *pgleader.Postgres), the mechanisms set in
// m. Call it before backend is used. Package pgleader sets it.
var Off func(backend any, m Mechanisms)
