package pgleader

import (
	"context"
	"log/slog"
	"time"
)

// Options are the parts of an Elector that are not timing.
type Options struct {
	// Owner identifies this replica (pod name, host:pid); unique among the
	// running replicas. Default: hostname:pid:random.
	Owner string
	// Lead is the body, run for each term this replica wins, after Claim.
	// Its context is cancelled at the term's cancel instant (see Spec). It
	// should check t.Live() between units of work and return when the term
	// ends; when it returns the term ends as finished. Required.
	Lead func(ctx context.Context, t *Term) error
	// Claim, if set, runs after acquisition and before Lead. It returns
	// false if the fenced store already saw this token or a higher one; the
	// term then ends as refused. An error ends it as refused too.
	Claim func(ctx context.Context, t *Term) (bool, error)
	// FenceFloor, if set, returns the store's highest fence. Before a
	// campaign the key's token counter is advanced to it while the lease is
	// free, so after the lease data was lost the first term draws floor+1.
	// It is read before every campaign except one at the expiry of a term
	// the last campaign found holding the lease: that campaign reuses the
	// floor read last (see docs/model.md, "Hand-off").
	FenceFloor func(ctx context.Context) (int64, error)
	// Logger receives the elector's logs, each with key and owner, and
	// token where a term is concerned. Default: the backend's logger if it
	// has one (NewPostgres's WithLogger), else slog.Default().
	Logger *slog.Logger
	// Value, if set, is published with each term's lease (at most
	// MaxValueLen bytes), e.g. this replica's address so followers can
	// forward requests to the leader: [Observe], [Postgres.Lease], SQL's
	// pgleader.lease(key) and the CLI's status read it. It needs a backend
	// that keeps values (Abilities.Values); New refuses it otherwise.
	Value string
	// Observer, if set, receives the elector's observations for metrics:
	// terms started and ended, renewals and their latency, refused claims.
	Observer Observer

	// Priority ranks this replica as a candidate when its backend keeps
	// candidates (Abilities.Candidates): a leader hands off to the live
	// candidate of highest priority, and a leader whose term has lasted
	// MinTerm steps down (at
	// its next renewal) when a candidate of higher priority than its own
	// waits. Default 0; with equal priorities nobody is pre-empted.
	Priority int32
	// MinTerm is how long a term lasts at least before a candidate of
	// higher priority makes it step down, so that leadership does not
	// flap. Default: the Spec's TTL.
	MinTerm time.Duration
	// NoHandOff turns hand-off off: the elector neither registers as a
	// candidate nor hands the lease to one when its term ends, and
	// releases instead. Hand-off is on by default with a backend that
	// keeps candidates; it needs a listening [Watcher] for the
	// candidate's side.
	NoHandOff bool
	// CancelOnStop cancels the body's context as soon as a term ends
	// stopped or resigned, instead of YieldGrace later: for a body that
	// watches only ctx.Done(), not t.Ending(). Such a body returns only once
	// cancelled, and a statement it had sent may still run, so its lease is
	// handed off ReleaseTimeout after the cancellation: a hand-off then
	// takes ReleaseTimeout rather than YieldGrace + ReleaseTimeout. The
	// trade-off: the body gets no grace to finish the unit of work it is
	// in. A body that watches Ending and returns nil hands off at once
	// either way (docs/model.md, "Bodies that watch only ctx").
	CancelOnStop bool
	// SessionBound binds each term to the database session of the
	// elector's own lease connection (schema version 19), so that when
	// that session ends — most often because the leader's process died —
	// a waiting candidate takes the lease at once instead of at its expiry
	// (docs/ha.md, "Session-bound leases"). The candidates must set it too:
	// they wait on the holder's session. Between renewals the leader keeps
	// a read pending on its connection, and a session that ends while the
	// process lives (pg_terminate_backend, a proxy's reset) ends its term
	// as lost at once; until it learns, a successor may already lead: the
	// one exception to "one leader at a time" this option makes, while the
	// fence still refuses the old term's writes. It needs the PostgreSQL
	// backend over a pool (or with ListenWith) connected to PostgreSQL
	// directly, and a server that does not end idle sessions sooner than
	// the TTL; Run refuses it otherwise ([Permanent]). Through a pooler
	// in session mode Run falls back to the TTL (no term is bound, and a
	// warning is logged); through one in transaction mode it refuses.
	// Off by default.
	SessionBound bool
}

// SetOptions are the parts of a Set that are not timing.
type SetOptions struct {
	// Owner identifies this replica; unique among the running replicas of
	// the set. Default: hostname:pid:random.
	Owner string
	// Lead is the body, run for each key this replica wins, with that key's
	// Term, after Claim. It follows the same rules as Options.Lead. A body
	// that panics ends its own term (as finished, with the panic as its
	// error) and no other. Required.
	Lead func(ctx context.Context, t *Term) error
	// Claim, if set, runs after acquisition and before Lead, as
	// Options.Claim.
	Claim func(ctx context.Context, t *Term) (bool, error)
	// FenceFloors, if set, returns the store's highest fence for each of
	// keys (floors[i] for keys[i]). It is called once per campaign with the
	// keys the campaign asks for, and each key that is won draws a token
	// above its floor.
	FenceFloors func(ctx context.Context, keys []string) (floors []int64, err error)
	// Logger receives the set's logs, with set and owner, and key and token
	// where a term is concerned. Default: the backend's logger if it has
	// one, else slog.Default().
	Logger *slog.Logger
	// Observer, if set, receives an observation per term started, ending
	// and ended (with the term's key), and one ObserveRenewed per renewal
	// tick (with the set's name as Key).
	Observer Observer
	// NoHandOff turns hand-off off: a term that ends stopped, resigned or
	// finished releases its lease instead of handing it to another live
	// member of the set (see docs/sets.md).
	NoHandOff bool
	// CancelOnStop cancels each body's context as soon as its term ends
	// stopped or resigned, as Options.CancelOnStop.
	CancelOnStop bool
	// SessionBound binds this member to a database session of its own
	// (schema version 25), one per member whatever the number of keys, so
	// that when that session ends — most often because the member's
	// process died — another member lapses the keys it held and the
	// members take them at once instead of at their expiry (docs/sets.md,
	// "Session-bound members"). Every member of the set should set it: the
	// members watch each other in a ring, each on one more connection of
	// its own. The member keeps a read pending on its bound session, and a
	// session that ends while the process lives (pg_terminate_backend, a
	// proxy's reset) ends all its terms as lost at once; until it learns,
	// another member may already lead some of its keys: the one exception
	// to "one leader per key" this option makes, while the fence still
	// refuses the old terms' writes. It needs the PostgreSQL backend over
	// a pool (or with ListenWith) connected to PostgreSQL directly, and a
	// server that does not end idle sessions sooner than the TTL; Run
	// refuses it otherwise ([Permanent]). Through a pooler in session mode
	// Run falls back to the TTL (nothing is bound, and a warning is
	// logged); through one in transaction mode it refuses. Off by default.
	SessionBound bool
}
