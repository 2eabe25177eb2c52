-- pgleader, version 9: room on each page of the lease table for the next
-- version of its rows.
--
-- Every acquire, renewal and release writes a new version of a lease row.
-- With PostgreSQL's default fillfactor (100) the table's pages are full, so
-- the new version goes to another page and lease_pkey gets a new entry each
-- time. With half of each page kept free the new version stays on its page
-- (a heap-only tuple update), the index is not touched, and the dead
-- versions are pruned in place. A set's renewal of 10,000 keys (set_renew)
-- on one test server: 44-54 ms with 0.6% of the updates heap-only and the
-- table at 7 MB, against 26-33 ms, 99% heap-only and 1.9 MB with this.
--
-- The setting shapes pages written from now on. To apply it to the rows an
-- existing installation has, run VACUUM FULL pgleader.lease at a quiet
-- moment (it locks the table briefly); nothing else needs it.

ALTER TABLE pgleader.lease SET (fillfactor = 50);
