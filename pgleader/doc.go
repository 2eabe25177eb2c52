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
// and its context has stopped before the lease could lapse.
//
// # How a term ends
//
// Every term ends with one [EndReason]:
//
//	stopped   Run's context was cancelled. Ending closes at once, the body is
//	          cancelled YieldGrace later (or at C if sooner), and the lease is
//	          released, within ReleaseTimeout, as soon as the body returns.
//	          A body that returns only once its context is cancelled may
//	          have sent a statement that has not run yet (pgx returns at
//	          once on cancellation), so its lease is released ReleaseTimeout
//	          after the cancellation: such a statement then commits while the
//	          lease is still held, as it would in a term that expires.
//	expiring  Renewals kept failing (database unreachable or slow) until Y.
//	          Ending closes at Y, the body is cancelled at C, and release is
//	          attempted best-effort. This happens even if the database never
//	          answers again.
//	lost      A renewal found the lease no longer this term's: it expired and
//	          was taken, or its row was wiped. Ending closes and the body is
//	          cancelled at once; nothing is released.
//	finished  The body returned, with or without an error. The lease is
//	          released and the replica campaigns again after CampaignEvery.
//	refused   The Claim hook refused the token (or failed). The body never
//	          runs; the lease is released at once and the next campaign draws
//	          a higher token.
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
// # How candidates wait
//
// A candidate that finds the lease held learns the holder's expiry from the
// database (as time remaining on the database clock, so the two clocks need
// not agree) and sleeps until then, never longer than TTL. Renewals are not
// announced: a candidate of a healthy leader reads the lease once per
// expiry it read, one statement every TTL - RenewEvery to TTL, and one
// whose leader crashed campaigns at the expiry.
//
// With a backend that is a [Watcher] — [Postgres] is, through LISTEN/NOTIFY
// on one connection per backend — a release also wakes candidates at once,
// with no random back-off. A notification is a hint and nothing more: any
// role that can connect can send one on the channel. So an event only ever
// makes a candidate look sooner, never wait longer and never believe
// anything it has not read; acquire and renew events (sent by replicas of
// earlier versions) are ignored; every payload field is checked; and after a
// release event that proved false (the same term still held the lease), the
// next is heeded no sooner than CampaignEvery later, so a flood of forged
// events costs what polling would. The notification itself is sent after
// the release committed, in a transaction of its own, so it can never fail
// or slow the release.
//
// Whenever notifications cannot be relied on — the LISTEN connection is down
// or reconnecting, the backend is behind pgbouncer in transaction mode
// (detected by a probe notification on a channel of its own that never
// arrives; the probe is tried again later, from 30s up to every 10 minutes),
// [PollOnly] was given, or the backend is not a Watcher — candidates poll
// every CampaignEvery, less up to 10% jitter. After a reconnect they look
// once at once, since a release may have been missed.
//
// # Hand-off, transfer and preferred leaders
//
// With a backend that is a [Handoffer] ([Postgres] is, from schema version
// 6), a listening candidate registers itself, with Options.Priority and
// Options.Value, through the campaign it sends anyway. A term that ends as
// stopped, resigned or finished then hands the lease to the best live
// candidate in the statement that ends it: one write, the next token, the
// candidate's own expiry as the first bound. The successor hears a hint and
// confirms with the database ([CandidateWatcher], on its awake LISTEN
// connection) before it leads; its timeline counts from that check's send.
// A successor that never confirms costs what a crash costs. [Elector.Transfer]
// and [Postgres.Transfer] hand off to a chosen candidate; a candidate of
// higher priority makes a leader whose term lasted Options.MinTerm step down
// for it. Options.NoHandOff turns it off.
//
// # A term born late, a schema gone
//
// A campaign's acquire is bounded by the yield instant of the term it would
// start. If an answer still arrives after it (a backend that ignored the
// context), the term is released at once and neither Claim nor Lead runs:
// it ends as [ReasonExpiring] without ever being reported started. A
// renewal that finds the pgleader schema gone ([ErrNotMigrated]: dropped or
// migrated down under a live term) ends the term at once as [ReasonLost]
// rather than retrying until the yield instant. When the schema comes back
// empty, token counters restart; the fence floor ([Options.FenceFloor]) is
// what keeps the next tokens above what the store has seen.
//
// # What happens when leadership is lost
//
// The lease guarantees that at no instant of the database's clock do two
// terms of a key hold it. It cannot stop a paused process from finishing the
// unit it was paused in: that is what the token is for. Fence every write
// the body makes, not only the first, and a stale term's writes are refused
// by the store (package sqlfence).
//
// Run never exits on a database error: it logs, backs off (doubling
// CampaignEvery up to TTL/2, with jitter) and campaigns again.
//
// # Steering and observing
//
// [Observe] follows a key's leader without campaigning: the holder, its
// token and the value it published ([Options.Value], e.g. its address for
// followers that forward requests), pushed by notification and verified by
// a read. [Elector.StepDown] ends the live term gracefully without stopping
// Run; pgleader.resign in SQL, [Postgres.Resign] and the CLI's resign ask a
// term from outside to do the same at its next renewal; both end it as
// [ReasonResigned]. [Elector.Status] tells campaigning, waiting (and until
// when), backing off and leading apart, and whether the backend listens,
// so a caller can wait until a replica is ready. [Do] (and
// [Elector.RunOnce]) runs a one-shot job under the lease, returning
// [ErrHeld] at once when another replica holds it.
//
// # Connections
//
// A [Postgres] backend over a pool uses, while any of its Electors runs,
// one connection of its own for lease operations (application_name
// "pgleader lease"), so a body that holds every connection of the pool
// cannot starve its renewals; and, while any of its Electors waits, one
// LISTEN connection ("pgleader listen"). Lease statements run in pgx's
// exec mode (unprepared, one round trip), so they work through pgbouncer in
// transaction mode with pgx's default settings; a body's own statements
// through such a pooler need default_query_exec_mode=exec (or
// QueryExecModeExec) on its pool. Logs of the backend and, by default, of
// its Electors go to [WithLogger]'s logger.
//
// # Testing bodies
//
// Package pgleadertest has an in-memory [Backend] with switches for an
// outage, a hang, lost lease data and a backend that cannot advance. It uses
// time.Now, so under testing/synctest timing tests are exact.
package pgleader
