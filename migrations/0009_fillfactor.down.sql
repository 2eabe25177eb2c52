-- Reverts 0009_fillfactor.up.sql: the default fillfactor, no set_tick.

ALTER TABLE pgleader.lease RESET (fillfactor);

DROP FUNCTION pgleader.set_tick(text, text, text[], bigint[], interval, integer);
