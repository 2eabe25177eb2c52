-- Reverts 0022_no_nested_loop.up.sql: acquire_many and set_acquire plan as
-- the session's settings say again.

ALTER FUNCTION pgleader.acquire_many(text[], text, interval, integer, bigint[]) RESET enable_nestloop;
ALTER FUNCTION pgleader.acquire_many(text[], text, interval, integer, bigint[]) RESET enable_hashjoin;
ALTER FUNCTION pgleader.acquire_many(text[], text, interval, integer, bigint[]) RESET enable_mergejoin;
ALTER FUNCTION pgleader.set_acquire(text, text, text[], interval, integer, integer, bigint[], integer, text[]) RESET enable_nestloop;
ALTER FUNCTION pgleader.set_acquire(text, text, text[], interval, integer, integer, bigint[], integer, text[]) RESET enable_hashjoin;
ALTER FUNCTION pgleader.set_acquire(text, text, text[], interval, integer, integer, bigint[], integer, text[]) RESET enable_mergejoin;
