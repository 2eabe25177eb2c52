-- Reverts 0002_fence.up.sql. CASCADE on fence_trigger also drops the fence
-- triggers install_fence_trigger attached to application tables: without the
-- function they could not fire.
DROP FUNCTION pgleader.install_fence_trigger(regclass, name);
DROP FUNCTION pgleader.fence_trigger() CASCADE;
DROP FUNCTION pgleader.lease_guard(text, bigint);
DROP FUNCTION pgleader.fence_floor(text);
DROP FUNCTION pgleader.fence_write(text, bigint);
DROP FUNCTION pgleader.fence_claim(text, bigint);
DROP FUNCTION pgleader._fence_take(text, bigint, boolean);
DROP FUNCTION pgleader._fence_check(text, bigint, boolean);
DROP TABLE pgleader.fence;
