-- Reverts 0025_set_session.up.sql: the functions of session-bound set
-- members and their bindings go (a bound member's keys lapse at their
-- expiry, as an unbound member's), and _app_functions is version 24's
-- again. Member locks that bound sessions hold stay with those sessions
-- until they end.

DROP FUNCTION pgleader.set_wake(text, text, text[]);
DROP FUNCTION pgleader.wait_member(text, text, interval);
DROP FUNCTION pgleader.set_bind(text, text, interval, text[]);
DROP FUNCTION pgleader._member_held(text, text, text, integer);
DROP FUNCTION pgleader._member_mine(text, text, text);
DROP FUNCTION pgleader._member_lock(text, text, text);
ALTER TABLE pgleader.set_member DROP COLUMN pid, DROP COLUMN server_start, DROP COLUMN bound_at;

CREATE OR REPLACE FUNCTION pgleader._app_functions()
RETURNS SETOF regprocedure
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pgleader, pg_temp AS $$
    SELECT p.oid::regprocedure
      FROM pg_catalog.pg_proc AS p
     WHERE p.pronamespace = 'pgleader'::regnamespace
       AND p.proname = ANY (ARRAY[
           'acquire', 'acquire_many', 'advance', 'bind_refusal', 'campaign', 'campaign_bound', 'candidates',
           'fence_claim', 'fence_floor',
           'fence_trigger', 'fence_write', 'grace', 'hand_off', 'hint_handoff', 'holds', 'install_fence_trigger',
           'job_claim', 'job_finish', 'job_runs', 'job_schedule', 'job_status',
           'lease', 'lease_guard', 'leases', 'notify', 'release', 'release_many', 'renew', 'renew_bound', 'renew_many',
           'renew_term', 'resign', 'set_acquire', 'set_release', 'set_renew', 'set_status', 'set_tick',
           'take', 'transfer', 'unbind', 'wait_session', 'withdraw'])
$$;
