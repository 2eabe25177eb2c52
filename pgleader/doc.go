// Package pgleader runs a unit of work on exactly one replica at a time,
// with PostgreSQL holding the lease and fencing the leader's writes.
//
// A lease is one row per key in the schema "pgleader" (see package
// migrations): the holder, an expiry on the database clock, and a fencing
// token that grows with every new holder. Acquire, renew, release and
// advance are single SQL function calls that PostgreSQL decides on its own
// clock; the Go loop in [Elector] only schedules them.
//
// # Quick start
//
//	if err := migrations.Up(ctx, pool); err != nil { ... }
//	el, err := pgleader.New(pgleader.NewPostgres(pool),
//		pgleader.Spec{Key: "digest-publisher", RequireFenceAdvance: true},
//		pgleader.Options{Owner: podName, Lead: publish, Claim: claim, FenceFloor: floor})
//	if err != nil { ... }
//	err = el.Run(ctx) // campaigns until ctx is cancelled
//
// The body checks [Term.Live] between units of work and passes
// [Term.Token] with every write to the store, which refuses a token lower
// than one it has seen (package sqlfence).
//
// # Terms and tokens
//
// A term is one holder's generation of a key's lease. Its token is greater
// than every token issued before for that key, across release, expiry and
// restarts; a failed campaign consumes none, so on a fresh database a key's
// first term draws 1 and the next 2. Renewals extend a term; they never
// change its token.
//
// # The timeline of a term
//
// Let s be the local monotonic instant at which the last successful acquire
// or renew was sent. The database's expiry is at least s + TTL on its own
// clock, so locally the term keeps a safe margin:
//
//	 s           s+RenewEvery            Y             C             S            s+TTL
//	-|-----------|-----------------------|-------------|-------------|------------|--> local time
//	 |<--------->|                       |<YieldGrace->|<--Release-->|<--Margin-->|
//	 sent        next renewal            Live false,   body's ctx    safe end     database expiry
//	                                     Ending closed cancelled     of the lease is at least here
//
//	S = s + TTL - Margin         safe end: the lease is certainly still held
//	C = S - ReleaseTimeout       the body's context is cancelled
//	Y = C - YieldGrace           the term starts ending: Live turns false, Ending closes
//
// Each successful renewal moves s, and so Y, C and S, later. Spec requires
// RenewEvery + YieldGrace + ReleaseTimeout + Margin < TTL, so a healthy term
// renews before it would be told to yield, and a body that honours Ending
// and its context has stopped before the lease could lapse. One state
// machine, in internal/lifecycle, decides these instants and the ends below
// for an [Elector] and a [Set] alike; its TestTimeline checks them event by
// event.
//
// # How a term ends
//
// Every term ends with one [EndReason]:
//
//	stopped   Run's context was cancelled. Ending closes at once, the body is
//	          cancelled YieldGrace later (or at C if sooner), and the lease is
//	          released, or handed to a waiting replica, once the body returns.
//	resigned  The term was asked to end: Elector.StepDown, a transfer, a
//	          waiting replica of higher priority, or pgleader.resign from
//	          outside. As stopped, but Run goes on.
//	expiring  Renewals kept failing (database unreachable or slow) until Y.
//	          Ending closes at Y, the body is cancelled at C, and release is
//	          attempted best-effort, even if the database never answers again.
//	lost      A renewal found the lease no longer this term's: it expired and
//	          was taken, or its row or the schema is gone. Ending closes and
//	          the body is cancelled at once; nothing is released.
//	finished  The body returned, with or without an error. The lease is
//	          released, or handed off, and the replica campaigns again.
//	refused   The Claim hook refused the token (or failed). The body never
//	          runs; the lease is released at once and the next campaign draws
//	          a higher token.
//
// A body that returns only once its context is cancelled, or returns an
// error, may have sent a statement that has not run yet (pgx returns at once
// on cancellation; a broken connection fails at the client while the server
// commits). So its lease is released ReleaseTimeout after the cancellation,
// or after it returned the error: no later than S, and such a statement then
// commits while the lease is still held, as it would in a term that expires.
//
// # Claim and fence floor
//
// Claim runs after acquisition and before the body. It is where the fenced
// store settles two holders of one token, which can only happen after the
// lease data was lost: exactly one finds the store's fence lower. FenceFloor
// reads the store's fence before each campaign, and the key's token counter
// is advanced past it while the lease is free, so after a loss the first
// term draws floor+1 at once instead of being refused floor times.
// Spec.RequireFenceAdvance makes New fail for a backend that cannot advance.
//
// # What happens when leadership is lost
//
// The lease guarantees that at no instant of the database's clock do two
// terms of a key hold it. It cannot stop a paused process from finishing the
// unit it was paused in: that is what the token is for. Fence every write
// the body makes, not only the first, and a stale term's writes are refused
// by the store (package sqlfence).
//
// # Further reading
//
// In the repository's docs directory: model.md explains the model and why
// it is shaped so, how candidates wait (notifications are hints), hand-off,
// transfer and preferred leaders, and the edges of a term; elector.md covers
// an Elector's errors, connections and poolers, steering and observing,
// one-shot jobs and testing bodies; sets.md covers [Set].
package pgleader
