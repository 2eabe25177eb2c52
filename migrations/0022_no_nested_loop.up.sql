-- pgleader's schema, version 22: a campaign never walks the lease table
-- once per key.
--
-- acquire_many (and so set_acquire) finds the free rows by a join of the
-- keys it is sent with the lease table, which the planner may run as a
-- nested loop that reads the whole table for each key. It did, with
-- statistics taken while every lease was held (about one free row
-- expected): on the development VM, a campaign for 33,333 keys of a table
-- of 100,000 rows, after the leases of a third of them lapsed, ran for more
-- than four minutes instead of a third of a second, past every deadline.
-- set_acquire's confirmation of the terms handed to the caller is such a
-- join too. Now neither function plans a nested loop: every join is a hash
-- or merge join (turned on for them even where a session turned them off),
-- whose cost grows with the keys sent and the table, never with their
-- product. The same campaign then takes 0.2 to 0.4 s whatever the
-- statistics. The price: a campaign of a few keys reads the lease table
-- through (a few milliseconds per 10,000 rows) where it probed the index.
-- Nothing else changes: the functions' bodies, signatures and grants.

ALTER FUNCTION pgleader.acquire_many(text[], text, interval, integer, bigint[]) SET enable_nestloop = off;
ALTER FUNCTION pgleader.acquire_many(text[], text, interval, integer, bigint[]) SET enable_hashjoin = on;
ALTER FUNCTION pgleader.acquire_many(text[], text, interval, integer, bigint[]) SET enable_mergejoin = on;
ALTER FUNCTION pgleader.set_acquire(text, text, text[], interval, integer, integer, bigint[], integer, text[]) SET enable_nestloop = off;
ALTER FUNCTION pgleader.set_acquire(text, text, text[], interval, integer, integer, bigint[], integer, text[]) SET enable_hashjoin = on;
ALTER FUNCTION pgleader.set_acquire(text, text, text[], interval, integer, integer, bigint[], integer, text[]) SET enable_mergejoin = on;
