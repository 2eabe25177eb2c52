-- Reverts 0009_fillfactor.up.sql: the default fillfactor.

ALTER TABLE pgleader.lease RESET (fillfactor);
