package pgleader

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

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
)

// Observation is one event of an Elector, for metrics.
type Observation struct {
	Kind   ObservationKind
	Key    string
	Owner  string
	Token  int64
	Reason EndReason     // for TermEnding and TermEnded
	Took   time.Duration // for Renewed: the renewal's round trip
	Err    error         // for Renewed and ClaimRefused
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

// ErrRenewLate is matched by Check's error when a leading term's last
// successful acquire or renew is older than it should be.
var ErrRenewLate = errors.New("pgleader: renewals are late")

// renewLate is how long after the last successful acquire or renew was
// sent a live term's renewals are late: one retry after the planned one.
func (s Spec) renewLate() time.Duration {
	return s.RenewEvery + min(s.CampaignEvery, s.RenewEvery)
}

// Check reports whether the elector is healthy: nil unless it leads and its
// last successful acquire or renew was sent more than RenewEvery +
// min(CampaignEvery, RenewEvery) ago, one retry later than planned. A
// replica that does not lead is healthy; use Status to tell leading. Check
// is safe for concurrent use.
func (e *Elector) Check() error {
	st := e.Status()
	if !st.Leading {
		return nil
	}
	if since := time.Since(st.LastRenewSent); since > e.spec.renewLate() {
		return fmt.Errorf("%w: key %q token %d last renewed %v ago (expected every %v); last error: %v",
			ErrRenewLate, st.Key, st.Token, since.Round(time.Millisecond), e.spec.RenewEvery, st.LastError)
	}
	return nil
}

// HealthHandler returns an http.Handler that answers 200 when every elector
// passes Check and 503 otherwise, with a JSON body describing each: key,
// owner, leading, token and the check's error.
func HealthHandler(electors ...*Elector) http.Handler {
	type entry struct {
		Key     string `json:"key"`
		Owner   string `json:"owner"`
		Leading bool   `json:"leading"`
		Token   int64  `json:"token,omitempty"`
		Error   string `json:"error,omitempty"`
	}
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		code := http.StatusOK
		out := make([]entry, 0, len(electors))
		for _, el := range electors {
			st := el.Status()
			en := entry{Key: st.Key, Owner: st.Owner, Leading: st.Leading}
			if st.Leading {
				en.Token = st.Token
			}
			if err := el.Check(); err != nil {
				en.Error, code = err.Error(), http.StatusServiceUnavailable
			}
			out = append(out, en)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(out)
	})
}
