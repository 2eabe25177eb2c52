-- Reverts 0001_pgleader.up.sql: drops the schema pgleader with every lease,
-- token counter and fence in it. CASCADE also drops the fence triggers
-- install_fence_trigger attached to application tables (without
-- pgleader.fence_trigger they could not fire); the tables stay.
DROP SCHEMA IF EXISTS pgleader CASCADE;
