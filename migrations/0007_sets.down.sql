-- Reverts 0007_sets.up.sql.

DROP FUNCTION pgleader.set_status(text, text[]);
DROP FUNCTION pgleader.set_release(text, text, text[], bigint[], boolean);
DROP FUNCTION pgleader.set_renew(text, text, text[], bigint[], interval, integer);
DROP FUNCTION pgleader.set_acquire(text, text, text[], interval, integer, integer, bigint[]);
DROP FUNCTION pgleader.release_many(text, text[], bigint[]);
DROP FUNCTION pgleader.renew_many(text, text[], bigint[], interval);
DROP FUNCTION pgleader.acquire_many(text[], text, interval, integer, bigint[]);
DROP FUNCTION pgleader._check_keys(text[], bigint[], boolean);
DROP TABLE pgleader.set_member;
