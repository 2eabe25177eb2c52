package pgleader

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

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

// Check reports whether the set is healthy: nil unless it holds keys and its
// last successful renewal tick was sent more than RenewEvery +
// min(CampaignEvery, RenewEvery) ago.
func (s *Set) Check() error {
	st := s.Status()
	if st.Held == 0 {
		return nil
	}
	if since := time.Since(st.LastRenewSent); since > s.spec.renewLate() {
		return fmt.Errorf("%w: set %q (%d keys held) last renewed %v ago (expected every %v); last error: %v",
			ErrRenewLate, st.Name, st.Held, since.Round(time.Millisecond), s.spec.RenewEvery, st.LastError)
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
