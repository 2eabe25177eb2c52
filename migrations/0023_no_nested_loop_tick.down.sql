-- Reverts 0023_no_nested_loop_tick.up.sql: a set's ticks, renewals,
-- releases and status plan as the session's settings say again, and
-- every function JITs as the session's settings say.

ALTER FUNCTION pgleader.renew_many(text, text[], bigint[], interval) RESET enable_nestloop;
ALTER FUNCTION pgleader.renew_many(text, text[], bigint[], interval) RESET enable_hashjoin;
ALTER FUNCTION pgleader.renew_many(text, text[], bigint[], interval) RESET enable_mergejoin;
ALTER FUNCTION pgleader.renew_many(text, text[], bigint[], interval) RESET jit;
ALTER FUNCTION pgleader.release_many(text, text[], bigint[]) RESET enable_nestloop;
ALTER FUNCTION pgleader.release_many(text, text[], bigint[]) RESET enable_hashjoin;
ALTER FUNCTION pgleader.release_many(text, text[], bigint[]) RESET enable_mergejoin;
ALTER FUNCTION pgleader.release_many(text, text[], bigint[]) RESET jit;
ALTER FUNCTION pgleader.set_tick(text, text, text[], bigint[], interval, integer) RESET enable_nestloop;
ALTER FUNCTION pgleader.set_tick(text, text, text[], bigint[], interval, integer) RESET enable_hashjoin;
ALTER FUNCTION pgleader.set_tick(text, text, text[], bigint[], interval, integer) RESET enable_mergejoin;
ALTER FUNCTION pgleader.set_tick(text, text, text[], bigint[], interval, integer) RESET jit;
ALTER FUNCTION pgleader.set_renew(text, text, text[], bigint[], interval, integer) RESET enable_nestloop;
ALTER FUNCTION pgleader.set_renew(text, text, text[], bigint[], interval, integer) RESET enable_hashjoin;
ALTER FUNCTION pgleader.set_renew(text, text, text[], bigint[], interval, integer) RESET enable_mergejoin;
ALTER FUNCTION pgleader.set_renew(text, text, text[], bigint[], interval, integer) RESET jit;
ALTER FUNCTION pgleader.set_release(text, text, text[], bigint[], boolean, boolean[]) RESET enable_nestloop;
ALTER FUNCTION pgleader.set_release(text, text, text[], bigint[], boolean, boolean[]) RESET enable_hashjoin;
ALTER FUNCTION pgleader.set_release(text, text, text[], bigint[], boolean, boolean[]) RESET enable_mergejoin;
ALTER FUNCTION pgleader.set_release(text, text, text[], bigint[], boolean, boolean[]) RESET jit;
ALTER FUNCTION pgleader.set_status(text, text[]) RESET enable_nestloop;
ALTER FUNCTION pgleader.set_status(text, text[]) RESET enable_hashjoin;
ALTER FUNCTION pgleader.set_status(text, text[]) RESET enable_mergejoin;
ALTER FUNCTION pgleader.set_status(text, text[]) RESET jit;
ALTER FUNCTION pgleader.acquire_many(text[], text, interval, integer, bigint[]) RESET jit;
ALTER FUNCTION pgleader.set_acquire(text, text, text[], interval, integer, integer, bigint[], integer, text[]) RESET jit;
