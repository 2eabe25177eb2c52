package pgleader_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/pgleader/pgleadertest"
)

type observations struct {
	mu  sync.Mutex
	all []pgleader.Observation
}

func (o *observations) Observe(ob pgleader.Observation) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.all = append(o.all, ob)
}

func (o *observations) kinds() []pgleader.ObservationKind {
	o.mu.Lock()
	defer o.mu.Unlock()
	var ks []pgleader.ObservationKind
	for _, ob := range o.all {
		ks = append(ks, ob.Kind)
	}
	return ks
}

func TestObserver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := pgleadertest.NewBackend()
		b.SetLatency(10 * time.Millisecond)
		var obs observations
		refuse := true
		claim := func(context.Context, *pgleader.Term) (bool, error) {
			r := refuse
			refuse = false
			return !r, nil
		}
		var rec recorder
		r := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "a", Lead: rec.body(3*time.Second, false), Claim: claim, Observer: &obs})
		time.Sleep(5 * time.Second)
		r.stop(t)

		// A refused term was never started: it has its own observation.
		k := pgleader.ObserveTermStarted
		want := []pgleader.ObservationKind{
			pgleader.ObserveClaimRefused, pgleader.ObserveTermEnding, pgleader.ObserveTermEnded, // token 1, refused
			k, pgleader.ObserveRenewed, pgleader.ObserveTermEnding, pgleader.ObserveTermEnded, // token 2 renews at +2s, finishes at +3s
			k, pgleader.ObserveTermEnding, pgleader.ObserveTermEnded, // token 3, stopped
		}
		got := obs.kinds()
		if len(got) != len(want) {
			t.Fatalf("observations %v, want %v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("observation %d is %v, want %v (all: %v)", i, got[i], want[i], got)
			}
		}
		reasons := []pgleader.EndReason{obs.all[1].Reason, obs.all[5].Reason, obs.all[8].Reason}
		if reasons[0] != pgleader.ReasonRefused || reasons[1] != pgleader.ReasonFinished || reasons[2] != pgleader.ReasonStopped {
			t.Errorf("reasons = %v", reasons)
		}
		if ob := obs.all[4]; ob.Took != 10*time.Millisecond || ob.Err != nil || ob.Token != 2 || ob.Key != "k" || ob.Owner != "a" {
			t.Errorf("renew observation = %+v", ob)
		}
	})
}

func TestCheckAndHealthHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := pgleadertest.NewBackend()
		r := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "a", Lead: idle})
		time.Sleep(time.Second)
		if err := r.el.Check(); err != nil {
			t.Fatalf("healthy leader: %v", err)
		}
		b.SetFailure(errors.New("connection refused"))
		time.Sleep(1400 * time.Millisecond) // the renewal at 2s failed; late after 2.5s
		if err := r.el.Check(); err != nil {
			t.Fatalf("at 2.4s, one failed renewal, not yet late: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
		if err := r.el.Check(); !errors.Is(err, pgleader.ErrRenewLate) || !r.el.Status().Leading {
			t.Fatalf("at 2.6s, still leading with failing renewals: %v, want ErrRenewLate", err)
		}
		w := httptest.NewRecorder()
		pgleader.HealthHandler(r.el).ServeHTTP(w, httptest.NewRequest("GET", "/healthz", nil))
		var body []map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != 503 || len(body) != 1 || body[0]["error"] == nil {
			t.Fatalf("health = %d %s, %v", w.Code, w.Body, err)
		}
		b.SetFailure(nil)
		time.Sleep(10 * time.Second) // ended as expiring, then leads again
		w = httptest.NewRecorder()
		pgleader.HealthHandler(r.el).ServeHTTP(w, httptest.NewRequest("GET", "/healthz", nil))
		if w.Code != 200 {
			t.Fatalf("health after recovery = %d %s", w.Code, w.Body)
		}
		r.stop(t)
	})
}
