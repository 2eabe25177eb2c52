package chaos

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/pgleader"
)

// ReplicaConfig is one replica incarnation: who it is, its two paths to
// the database, and how it behaves. In process mode it is handed to the
// child as JSON.
type ReplicaConfig struct {
	// Index is the replica's number; Owner its incarnation's owner name.
	Index int
	Owner string
	// AppName prefixes the application_name of its connections:
	// AppName+"-lease" on the lease path, AppName+"-store" on the store path.
	AppName string
	// URL is the database; its host and port are replaced by LeaseAddr for
	// the elector's pool and StoreAddr for the store's.
	URL                  string
	LeaseAddr, StoreAddr string
	Spec                 pgleader.Spec
	// Keys, if not empty, makes the replica run a pgleader.Set named
	// Spec.Key over these keys, with one body per key it wins, instead of
	// an Elector for Spec.Key.
	Keys []string `json:",omitempty"`
	// Floor sets the FenceFloor hook (FenceFloors for a set); PollOnly
	// turns LISTEN off (a set never listens).
	Floor, PollOnly bool
	// Broken writes without the fence condition (checker self-test only).
	Broken bool
	// UnitEvery is the pause between units of the body.
	UnitEvery time.Duration
	// Verbose sends the elector's logs to standard error.
	Verbose bool
	// SessionBound sets pgleader.Options.SessionBound, or a set's
	// SetOptions.SessionBound.
	SessionBound bool `json:",omitempty"`
}

// replica is one running incarnation: an elector (or a set) on its lease
// pool and the publisher body on its store pool.
type replica struct {
	cfg   ReplicaConfig
	sink  Sink
	gates *gates
	store store
	// termOf returns the database time of the winning acquire of key's
	// term with token, as the recorder saw it.
	termOf func(key string, token int64) time.Time
}

// runReplica runs one incarnation until ctx is cancelled: it opens its
// pools, campaigns, publishes while it leads, and closes its pools.
func runReplica(ctx context.Context, cfg ReplicaConfig, sink Sink, g *gates) error {
	leasePool, err := openPool(ctx, cfg.URL, cfg.LeaseAddr, cfg.AppName+"-lease", cfg.Spec.TTL)
	if err != nil {
		return err
	}
	defer leasePool.Close()
	storePool, err := openPool(ctx, cfg.URL, cfg.StoreAddr, cfg.AppName+"-store", cfg.Spec.TTL)
	if err != nil {
		return err
	}
	defer storePool.Close()

	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if cfg.Verbose {
		logger = slog.New(slog.NewTextHandler(stderr, nil)).With("replica", cfg.Index)
	}
	opts := []pgleader.PostgresOption{pgleader.WithLogger(logger)}
	if cfg.PollOnly {
		opts = append(opts, pgleader.PollOnly())
	}
	r := &replica{cfg: cfg, sink: sink, gates: g, store: store{db: storePool, broken: cfg.Broken}}
	if len(cfg.Keys) > 0 {
		return r.runSet(ctx, pgleader.NewPostgres(leasePool, opts...), logger)
	}
	rec := &recorder{pg: pgleader.NewPostgres(leasePool, opts...), sink: sink, replica: cfg.Index,
		key: cfg.Spec.Key, owner: cfg.Owner, ttl: cfg.Spec.TTL, gate: g.loop}
	r.termOf = func(_ string, token int64) time.Time { return rec.term(token) }
	o := pgleader.Options{Owner: cfg.Owner, Lead: r.lead, Claim: r.claim, Logger: logger,
		Observer: pgleader.ObserverFunc(r.observe), SessionBound: cfg.SessionBound}
	start := Event{Kind: KindStart, Replica: cfg.Index, Owner: cfg.Owner}
	if cfg.SessionBound {
		// Its campaigns, renewals and releases run on a connection of
		// the elector's own, past rec: rec sees them through the hook.
		defer watchBound(cfg.Owner, rec)()
		start.Detail = startSessionBound
	}
	spec := cfg.Spec
	if cfg.Floor {
		o.FenceFloor = r.floor
	} else {
		spec.RequireFenceAdvance = false // New refuses it without a floor
	}
	el, err := pgleader.New(rec, spec, o)
	if err != nil {
		return err
	}
	sink.Record(start)
	return el.Run(ctx)
}

// openPool opens a pool on url through the proxy at addr.
func openPool(ctx context.Context, url, addr, app string, ttl time.Duration) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	host, port, err := splitAddr(addr)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = host, port, nil
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	// A connection attempt into a blackhole gives up like one to a dead host.
	cfg.ConnConfig.ConnectTimeout = ttl
	cfg.MaxConns = 4
	return pgxpool.NewWithConfig(ctx, cfg)
}

func (r *replica) event(kind Kind, t *pgleader.Term) Event {
	return Event{Kind: kind, Replica: r.cfg.Index, Key: t.Key(), Owner: r.cfg.Owner, Token: t.Token(), Term: r.termOf(t.Key(), t.Token())}
}

// floor is the FenceFloor hook: the store's fence, read on the store path.
func (r *replica) floor(ctx context.Context) (int64, error) {
	if err := r.gates.loop.wait(); err != nil {
		return 0, err
	}
	return r.store.floor(ctx, r.cfg.Spec.Key)
}

// claim is the Claim hook: the recipe's claim through sqlfence.
func (r *replica) claim(ctx context.Context, t *pgleader.Term) (bool, error) {
	if err := r.gates.unit.wait(); err != nil {
		return false, err
	}
	e := r.event(KindClaim, t)
	e.Sent = time.Now()
	ok, err := r.store.claim(ctx, t.Key(), t.Token())
	switch {
	case err != nil:
		e.Result, e.Err = Failed, err.Error()
	case ok:
		e.Result = OK
	default:
		e.Result = Refused
	}
	r.sink.Record(e)
	return ok, err
}

// lead is the publisher body: one fenced unit at a time, Live checked
// before each, stopping at the first write that is refused or fails.
func (r *replica) lead(ctx context.Context, t *pgleader.Term) error {
	for seq := 1; ; seq++ {
		if err := r.gates.unit.wait(); err != nil {
			return err
		}
		if !t.Live() {
			return nil
		}
		e := r.event(KindWrite, t)
		e.Seq, e.Checked = seq, time.Now()
		if err := r.gates.write.wait(); err != nil {
			return err
		}
		e.Sent = time.Now()
		id, at, server, ok, err := r.store.write(ctx, t.Key(), r.cfg.Owner, t.Token(), e.Term, seq)
		r.gates.written()
		switch {
		case err != nil:
			e.Result, e.Err = Failed, err.Error()
		case ok:
			e.Result, e.ID, e.DB, e.Server = OK, id, at, server
		default:
			e.Result = Refused
		}
		r.sink.Record(e)
		if !ok {
			return err
		}
		select {
		case <-t.Ending():
		case <-time.After(r.cfg.UnitEvery):
		}
	}
}

func (r *replica) observe(o pgleader.Observation) {
	kind := KindTermEnd
	switch o.Kind {
	case pgleader.ObserveTermEnded:
	case pgleader.ObserveTermEnding:
		if !r.cfg.SessionBound {
			return
		}
		kind = KindTermEnding
	default:
		return
	}
	key := o.Key
	if key == "" || len(r.cfg.Keys) == 0 {
		key = r.cfg.Spec.Key
	}
	r.sink.Record(Event{Kind: kind, Replica: r.cfg.Index, Key: key, Owner: r.cfg.Owner, Token: o.Token,
		Term: r.termOf(key, o.Token), Detail: o.Reason.String()})
}

func ownerName(index, incarnation int) string { return fmt.Sprintf("r%d.%d", index, incarnation) }
