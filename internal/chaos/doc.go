// Package chaos tries to break pgleader's safety by fault injection, and
// checks a run's history for the properties pgleader promises.
//
// # The harness
//
// A [Harness] runs replicas of the recipe's publisher against one database:
// goroutines with their own pools, or child processes (the program
// re-executes itself; see [ReplicaMain]) that write their history as JSON
// lines to standard output. Each replica reaches PostgreSQL by two paths,
// each through its own loopback proxy (package internal/tcpproxy): the
// lease path carries the elector's statements and its LISTEN connection,
// the store path the body's claim and writes. A partition can so hit the
// lease alone, which is what makes a broken yield visible: with the yield a
// leader whose renewals fail stops writing at Y, before its lease expires;
// without it (internal/hook.NoYield) it writes past the expiry.
//
// The body is the recipe's: one fenced unit at a time, Live checked before
// each, stopping at the first write that is refused or fails. A unit is one
// statement that updates the digest row only if its fence is not higher
// than the term's token (sqlfence's column fence) and inserts (owner, token,
// term, seq, clock_timestamp()) into chaos_log, so only accepted units are
// logged. Claim and FenceFloor use [sqlfence.Column].
//
// In set mode (HarnessConfig.SetKeys), each replica runs a pgleader.Set
// over the run's keys instead of an Elector for one key, and every key it
// wins runs the same body on that key's own digest row. Its FenceFloors
// hook reads every key's fence in one statement. A wipe deletes every
// key's lease row; "the leader" a fault aims at is the replica holding the
// most keys.
//
// With HarnessConfig.SessionBound (pgleader-chaos -session-bound), every
// replica's Elector runs with pgleader.Options.SessionBound. Its
// campaigns, renewals and releases then run on a connection of its own,
// which the recorder does not wrap: internal/hook.Bound holds them at the
// replica's gate while it is paused and records them. That connection
// carries pgleader's application_name, so kill-backends also terminates
// every connection through the path's proxy, found by the client port the
// server sees. In set mode the option is the set's
// (SetOptions.SessionBound): each replica's bound session and watch are
// two connections of the set's own, through the lease path's proxy; the
// lease audit shows the keys a watch lapsed, as it shows a campaign's.
//
// # The history
//
// Every replica records its acquires, renewals, releases, claims and writes
// with tokens, local times and the database's times (a wrapper around
// pgleader.Postgres records the lease operations), and the harness records
// faults, wipes and heals. A trigger on pgleader.lease records every change
// of the lease row in chaos_lease_audit, in the changing transaction, so
// the checker also knows of renewals whose answer a replica never got.
//
// # The faults
//
// A [Scheduler] draws faults from a seed: stop and crash (restarted
// later), pg_terminate_backend of a replica's connections, partitions of a
// path (drop, blackhole, delay, slow drip), pauses past the lease (gates in
// goroutine mode, SIGSTOP in process mode; "in a unit" catches the body
// between its Live check and its write), lease wipes, a zombie (the leader
// paused inside a unit while its lease is wiped), and, with a [Cluster] of
// the run's own, restarts of PostgreSQL; with a [Replicated] cluster,
// failovers: replication cut, the primary killed, the standby promoted,
// every proxy moved to it (the server's grace, docs/ha.md, then holds new
// terms back), and a new standby built that the next failover waits for.
// It injects them in phases, heals everything between phases, and waits
// for a leader to write again.
//
// # The properties
//
// [Check] verifies, on the database's clock, for each key on its own (the
// history's events, the log and the lease audit carry their key; the
// harness's events concern every key):
//
//  1. No two terms' lease intervals overlap. A term is identified by its
//     owner, token and acquisition time (tokens restart after a wipe
//     without the fence floor); its interval runs from its acquisition to
//     the earliest of its last expiry, its release and a wipe of its row.
//     1b: no accepted unit of a term committed after the term's expiry or
//     release, unless a pause between the body's Live check and the write's
//     send accounts for the lateness (pgleader's documented limit).
//  2. In commit order (the log's id order, because the digest row's lock is
//     held from the fenced update to commit), tokens never decrease, and no
//     two terms of one token both write.
//  3. Every acknowledged unit is in the log, and each term's units are
//     contiguous from 1.
//  4. After every heal, a unit is accepted within TTL + CampaignEvery
//     (after a crash restart or a failover, once the server's grace is
//     over); with a set, YieldGrace + ReleaseTimeout + CampaignEvery more
//     (RecoveryBound).
//
// With SessionBound (a start event says so), a campaign may lapse a term
// whose session ended before its expiry (the lease audit shows the expiry
// cut short; a won acquire reports it too): property 1 ends that term's
// lease there, and checks belief instead (see checkLapses). The holder
// believed it led until its term began to end or its process crashed; an
// overlap of that belief with the next term is excused only as the one
// exception to P1 that docs/model.md names, a holder whose session was
// terminated (kill-backends on its lease path) or reset by the proxy (a
// drop, or a blackhole's heal) while its process lived; it is counted
// apart. Any other overlap is a violation of property 1.
//
// After a failover, the checker excuses the rows that asynchronous
// replication loses, and only those: an acknowledged unit or a won term
// that a failed-over server committed after everything that survived from
// it. It checks them still: lost units for 1b, 2 (in the lost server's own
// history) and 3's numbering, lost terms for 1 (see failover.go). A release
// whose answer never came, and whose commit the lost rows may have held,
// may have ended its term from its send: the term then ends as late as the
// release may have committed without overlapping the next term.
//
// The checker is shown to fail: its tests break the store (a write without
// the fence condition) and the yield (hook.NoYield), and feed it
// hand-written histories that break each property.
package chaos
