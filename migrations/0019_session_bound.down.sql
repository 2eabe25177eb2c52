-- Reverts 0019_session_bound.up.sql: the session-bound functions and the
-- bindings go (a bound term becomes an ordinary one, which lapses at its
-- expiry), and _app_functions is version 18's again. Advisory locks that
-- bound sessions hold stay with those sessions until they end.

DROP FUNCTION pgleader.unbind(text);
DROP FUNCTION pgleader.wait_session(text, interval);
DROP FUNCTION pgleader.renew_bound(text, text, bigint, interval, interval);
DROP FUNCTION pgleader.campaign_bound(text, text, interval, bigint, text, integer, interval);
DROP FUNCTION pgleader._bound_to(text, bigint, text, timestamptz);
DROP FUNCTION pgleader._bind(text, bigint, interval);
DROP FUNCTION pgleader.bind_refusal(interval);
DROP FUNCTION pgleader._binding_held(text, integer);
DROP FUNCTION pgleader._binding_lock(text);
DROP TABLE pgleader.lease_binding;

CREATE OR REPLACE FUNCTION pgleader._app_functions()
RETURNS SETOF regprocedure
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pgleader, pg_temp AS $$
    SELECT p.oid::regprocedure
      FROM pg_catalog.pg_proc AS p
     WHERE p.pronamespace = 'pgleader'::regnamespace
       AND p.proname = ANY (ARRAY[
           'acquire', 'acquire_many', 'advance', 'campaign', 'candidates', 'fence_claim', 'fence_floor',
           'fence_trigger', 'fence_write', 'grace', 'hand_off', 'hint_handoff', 'holds', 'install_fence_trigger',
           'job_claim', 'job_finish', 'job_runs', 'job_schedule', 'job_status',
           'lease', 'lease_guard', 'leases', 'notify', 'release', 'release_many', 'renew', 'renew_many',
           'renew_term', 'resign', 'set_acquire', 'set_release', 'set_renew', 'set_status', 'set_tick',
           'take', 'transfer', 'withdraw'])
$$;
