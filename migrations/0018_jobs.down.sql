-- Reverts 0018_jobs.up.sql: the scheduled jobs' functions and tables go,
-- with every recorded run, and _app_functions is version 17's again.

DROP FUNCTION pgleader.job_runs(text, integer);
DROP FUNCTION pgleader.job_status(text);
DROP FUNCTION pgleader.job_finish(text, timestamptz, text, bigint, boolean, text, integer);
DROP FUNCTION pgleader.job_claim(text, timestamptz, text, bigint, timestamptz, text);
DROP FUNCTION pgleader.job_schedule(text, text, timestamptz);
DROP TABLE pgleader.job_run;
DROP TABLE pgleader.job;

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
           'lease', 'lease_guard', 'leases', 'notify', 'release', 'release_many', 'renew', 'renew_many',
           'renew_term', 'resign', 'set_acquire', 'set_release', 'set_renew', 'set_status', 'set_tick',
           'take', 'transfer', 'withdraw'])
$$;
