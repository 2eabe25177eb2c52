-- pgleader's schema, version 23: no statement of a set's ticks, renewals,
-- releases or status walks the lease table once per key (version 22 did
-- this for campaigns).
--
-- set_tick, set_renew, renew_many, set_release, release_many and
-- set_status join the keys they are sent with the lease table, and with
-- statistics that expect about one row of the caller's (taken before the
-- caller held its keys: a member that restarts under a new owner name,
-- after the last ANALYZE) the planner reads the table once and the keys
-- once per row it finds: the product of the two. On the development VM, a
-- member's first tick of the 5,000 keys it had just taken, with statistics
-- taken while another owner held all of them, ran for 5.2 and 6.4 s (25
-- million rows removed by the join's filter), longer than a TTL; with
-- these settings, 29 to 113 ms. Now these functions plan no nested loop
-- either: every join is a hash or merge join, whose cost grows with the
-- keys sent and the table, never with their product. The price: a call
-- with a few keys reads the lease table through where it probed the index
-- (on the VM, a tick of a 3-key set in a table of 100,000 leases: 10 to 14
-- ms instead of 0.3 to 0.4 ms).
--
-- And these functions and version 22's two run with jit = off. Where no
-- other join can do, the planner still plans a nested loop (a cross join
-- with generate_series, in set_release's dealing of keys to successors),
-- and on PostgreSQL 13 to 17 a turned-off method adds its cost penalty to
-- the plan's cost, far past the costs at which JIT compiles the plan: a
-- release of 4 keys then spent 276 ms compiling, past the Go backend's
-- deadline for it. These statements read a few rows per key; compiling
-- them never pays.
--
-- Nothing else changes: the functions' bodies, signatures and grants.

ALTER FUNCTION pgleader.renew_many(text, text[], bigint[], interval) SET enable_nestloop = off;
ALTER FUNCTION pgleader.renew_many(text, text[], bigint[], interval) SET enable_hashjoin = on;
ALTER FUNCTION pgleader.renew_many(text, text[], bigint[], interval) SET enable_mergejoin = on;
ALTER FUNCTION pgleader.renew_many(text, text[], bigint[], interval) SET jit = off;
ALTER FUNCTION pgleader.release_many(text, text[], bigint[]) SET enable_nestloop = off;
ALTER FUNCTION pgleader.release_many(text, text[], bigint[]) SET enable_hashjoin = on;
ALTER FUNCTION pgleader.release_many(text, text[], bigint[]) SET enable_mergejoin = on;
ALTER FUNCTION pgleader.release_many(text, text[], bigint[]) SET jit = off;
ALTER FUNCTION pgleader.set_tick(text, text, text[], bigint[], interval, integer) SET enable_nestloop = off;
ALTER FUNCTION pgleader.set_tick(text, text, text[], bigint[], interval, integer) SET enable_hashjoin = on;
ALTER FUNCTION pgleader.set_tick(text, text, text[], bigint[], interval, integer) SET enable_mergejoin = on;
ALTER FUNCTION pgleader.set_tick(text, text, text[], bigint[], interval, integer) SET jit = off;
ALTER FUNCTION pgleader.set_renew(text, text, text[], bigint[], interval, integer) SET enable_nestloop = off;
ALTER FUNCTION pgleader.set_renew(text, text, text[], bigint[], interval, integer) SET enable_hashjoin = on;
ALTER FUNCTION pgleader.set_renew(text, text, text[], bigint[], interval, integer) SET enable_mergejoin = on;
ALTER FUNCTION pgleader.set_renew(text, text, text[], bigint[], interval, integer) SET jit = off;
ALTER FUNCTION pgleader.set_release(text, text, text[], bigint[], boolean, boolean[]) SET enable_nestloop = off;
ALTER FUNCTION pgleader.set_release(text, text, text[], bigint[], boolean, boolean[]) SET enable_hashjoin = on;
ALTER FUNCTION pgleader.set_release(text, text, text[], bigint[], boolean, boolean[]) SET enable_mergejoin = on;
ALTER FUNCTION pgleader.set_release(text, text, text[], bigint[], boolean, boolean[]) SET jit = off;
ALTER FUNCTION pgleader.set_status(text, text[]) SET enable_nestloop = off;
ALTER FUNCTION pgleader.set_status(text, text[]) SET enable_hashjoin = on;
ALTER FUNCTION pgleader.set_status(text, text[]) SET enable_mergejoin = on;
ALTER FUNCTION pgleader.set_status(text, text[]) SET jit = off;
ALTER FUNCTION pgleader.acquire_many(text[], text, interval, integer, bigint[]) SET jit = off;
ALTER FUNCTION pgleader.set_acquire(text, text, text[], interval, integer, integer, bigint[], integer, text[]) SET jit = off;
