package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/pgleader/pgleader/pgleader"
)

// This file is the set mode: each replica runs a pgleader.Set over the
// run's keys instead of an Elector for one key. Every key it wins runs the
// same body as an elector's term (claim, then fenced units on that key's
// digest row), and every event carries its key, so the checker verifies
// each key's history on its own.

// SetKeys returns the n keys of a set named name: name-00, name-01, ….
func SetKeys(name string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%02d", name, i)
	}
	return keys
}

// runSet runs the replica's set until ctx is cancelled.
func (r *replica) runSet(ctx context.Context, pg *pgleader.Postgres, logger *slog.Logger) error {
	cfg := r.cfg
	rec := &setRecorder{pg: pg, sink: r.sink, replica: cfg.Index, owner: cfg.Owner, ttl: cfg.Spec.TTL,
		gate: r.gates.loop, won: map[string]Event{}}
	r.termOf = rec.term
	o := pgleader.SetOptions{Owner: cfg.Owner, Lead: r.lead, Claim: r.claim, Logger: logger,
		Observer: pgleader.ObserverFunc(r.observe), SessionBound: cfg.SessionBound}
	spec := cfg.Spec
	if cfg.Floor {
		o.FenceFloors = r.floors
	} else {
		spec.RequireFenceAdvance = false // NewSet refuses it without floors
	}
	set, err := pgleader.NewSet(rec, spec, cfg.Keys, o)
	if err != nil {
		return err
	}
	start := Event{Kind: KindStart, Replica: cfg.Index, Owner: cfg.Owner}
	if cfg.SessionBound {
		// Its bound session and its watch run on connections of the
		// set's own (one each), past rec: the lease audit shows their
		// lapses, the hook reports them too (watchSetLapses: the audit
		// may lose them in a failover), and the observer each term's
		// end of belief.
		start.Detail = startSessionBound
	}
	r.sink.Record(start)
	if cfg.SessionBound {
		defer watchSetLapses(cfg.Owner, rec)()
	}
	return set.Run(ctx)
}

// floors is the FenceFloors hook: each key's fence, read on the store path
// in one statement.
func (r *replica) floors(ctx context.Context, keys []string) ([]int64, error) {
	if err := r.gates.loop.wait(); err != nil {
		return nil, err
	}
	return r.store.floors(ctx, keys)
}

// setRecorder wraps the PostgreSQL backend of a set as recorder does an
// elector's: it holds each statement at the loop gate and records, per key,
// each acquire won, each renewal and each release, with the database's
// times. A campaign's keys that were not won are not recorded (the checker
// uses only won acquires), nor is a failed campaign's every key: one event
// without a key records it.
type setRecorder struct {
	pg      *pgleader.Postgres
	sink    Sink
	replica int
	owner   string
	ttl     time.Duration
	gate    *gate

	mu  sync.Mutex
	won map[string]Event // each key's last winning acquire
}

var _ pgleader.SetBackend = (*setRecorder)(nil)

// Abilities implements pgleader.SetBackend.
func (r *setRecorder) Abilities() pgleader.Abilities { return r.pg.Abilities() }

func (r *setRecorder) event(kind Kind, key string, sent time.Time, err error) Event {
	e := Event{Kind: kind, Replica: r.replica, Key: key, Owner: r.owner, Sent: sent, Result: OK}
	if err != nil {
		e.Result, e.Err = Failed, err.Error()
	}
	return e
}

// term returns the database time of the winning acquire of key's term with
// token.
func (r *setRecorder) term(key string, token int64) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w, ok := r.won[key]; ok && w.Token == token {
		return w.Term
	}
	return time.Time{}
}

// AcquireSet implements pgleader.SetBackend. A won key's term is
// identified by its acquisition time on the database clock
// (Lease.AcquiredAt: for a term handed to this member, the hand-off's), as
// the lease audit records it.
func (r *setRecorder) AcquireSet(ctx context.Context, set, owner string, keys []string, floors []int64, ttl time.Duration, held, extra, total int, confirm []string) ([]pgleader.Lease, int, error) {
	if err := r.gate.wait(); err != nil {
		return nil, 0, err
	}
	sent := time.Now()
	won, members, err := r.pg.AcquireSet(ctx, set, owner, keys, floors, ttl, held, extra, total, confirm)
	if err != nil {
		r.sink.Record(r.event(KindAcquire, "", sent, err))
		return won, members, err
	}
	for _, l := range won {
		e := r.event(KindAcquire, l.Key, sent, nil)
		e.Token, e.DB, e.Expires, e.Term = l.Token, l.Now, l.ExpiresAt, l.AcquiredAt
		r.mu.Lock()
		r.won[l.Key] = e
		r.mu.Unlock()
		r.sink.Record(e)
	}
	return won, members, nil
}

// RenewSet implements pgleader.SetBackend: one renew event per key.
func (r *setRecorder) RenewSet(ctx context.Context, set, owner string, keys []string, tokens []int64, ttl time.Duration, held int) (pgleader.SetRenewal, error) {
	if err := r.gate.wait(); err != nil {
		return pgleader.SetRenewal{}, err
	}
	sent := time.Now()
	ans, err := r.pg.RenewSet(ctx, set, owner, keys, tokens, ttl, held)
	expires := ans.Expires
	for i, k := range keys {
		e := r.event(KindRenew, k, sent, err)
		e.Token, e.Term = tokens[i], r.term(k, tokens[i])
		switch {
		case err != nil:
		case expires[i].IsZero():
			e.Result = Lost
		default:
			e.Expires, e.DB = expires[i], expires[i].Add(-ttl)
		}
		r.sink.Record(e)
	}
	return ans, err
}

// ReleaseSet implements pgleader.SetBackend: one release event per key (a
// term handed to another member ends as one released does; its successor's
// term is recorded when its campaign confirms it).
func (r *setRecorder) ReleaseSet(ctx context.Context, set, owner string, keys []string, tokens []int64, handOff []bool, leave bool) ([]bool, error) {
	if err := r.gate.wait(); err != nil {
		return nil, err
	}
	sent := time.Now()
	released, err := r.pg.ReleaseSet(ctx, set, owner, keys, tokens, handOff, leave)
	for i, k := range keys {
		e := r.event(KindRelease, k, sent, err)
		e.Token, e.Term = tokens[i], r.term(k, tokens[i])
		if err == nil && !released[i] {
			e.Result = Refused
		}
		r.sink.Record(e)
	}
	return released, err
}
