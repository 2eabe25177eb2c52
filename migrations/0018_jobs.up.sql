-- pgleader's schema, version 18: scheduled jobs (issue 29). A scheduled run
-- of a job (its name and its scheduled instant on the database clock) is a
-- row that the term holding the job's lease claims with its token, so that
-- of any number of replicas exactly one runs each instant. Nothing that
-- version 17 had changes, except that _app_functions lists the new
-- functions and the roles granted the application's functions get them.
--
-- A job's lease is the lease of the key named like the job: acquiring it
-- is the same acquire as any key's, with the same owner, token and role
-- rules. job_claim is conditional on holding that lease, so a run is only
-- ever claimed by a live term, and a retry (at least once) only by a term
-- with a higher token than the run's: a term that began after the first
-- attempt's term ended.

CREATE TABLE pgleader.job (
    name       text        NOT NULL PRIMARY KEY,
    schedule   text        NOT NULL,
    next_at    timestamptz,
    updated_at timestamptz NOT NULL,
    role       text        NOT NULL,
    CONSTRAINT job_name_length CHECK (octet_length(name) BETWEEN 1 AND 200),
    CONSTRAINT job_schedule_length CHECK (octet_length(schedule) BETWEEN 1 AND 200)
);
COMMENT ON TABLE pgleader.job IS
    'pgleader scheduled jobs: a job''s schedule, as its runners describe it, and the next instant they will run.';

CREATE TABLE pgleader.job_run (
    job         text        NOT NULL,
    instant     timestamptz NOT NULL,
    state       text        NOT NULL,
    owner       text        NOT NULL,
    token       bigint      NOT NULL,
    attempt     integer     NOT NULL DEFAULT 1,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz,
    error       text,
    CONSTRAINT job_run_pkey PRIMARY KEY (job, instant),
    CONSTRAINT job_run_state CHECK (state IN ('running', 'done', 'failed')),
    CONSTRAINT job_run_attempt CHECK (attempt >= 1),
    CONSTRAINT job_run_error_length CHECK (error IS NULL OR octet_length(error) <= 1024)
);
COMMENT ON TABLE pgleader.job_run IS
    'pgleader scheduled runs: one row per job and scheduled instant, claimed by the term (owner, token) that runs it; state running until it records done or failed.';

-- job_schedule records the job's schedule and the next instant its runner
-- waits for (p_next, NULL if none), and returns the database clock, which
-- the runner waits by. A job belongs to the role that first scheduled it.
CREATE FUNCTION pgleader.job_schedule(p_job text, p_schedule text, p_next timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp
AS $$
DECLARE
    t timestamptz := clock_timestamp();
    rl text;
BEGIN
    PERFORM pgleader._check_args(p_job, NULL, NULL, false, false);
    IF p_schedule IS NULL OR p_schedule = '' OR octet_length(p_schedule) > 200 THEN
        RAISE EXCEPTION 'pgleader: a job''s schedule must be 1 to 200 bytes' USING ERRCODE = '22023';
    END IF;
    INSERT INTO pgleader.job AS j (name, schedule, next_at, updated_at, role)
    VALUES (p_job, p_schedule, p_next, t, pgleader._caller())
    ON CONFLICT (name) DO NOTHING;
    IF FOUND THEN
        RETURN t;
    END IF;
    SELECT j.role INTO rl FROM pgleader.job AS j WHERE j.name = p_job;
    IF NOT pgleader._own(rl, false) THEN
        PERFORM pgleader._refuse('schedule it', 'job ' || to_json(p_job)::text, rl);
    END IF;
    UPDATE pgleader.job AS j
       SET schedule = p_schedule, next_at = p_next, updated_at = t
     WHERE j.name = p_job
       AND (j.schedule IS DISTINCT FROM p_schedule OR j.next_at IS DISTINCT FROM p_next);
    RETURN t;
END
$$;

-- job_claim claims the run of p_job at p_instant for the term (p_owner,
-- p_token), which must hold the lease of the key p_job unexpired; the key
-- must be the caller's role's (else 42501). Outcomes:
--   lost   the term does not hold the lease (nothing changed);
--   early  the instant has not come yet on the database clock;
--   run    no run of that instant existed: this term's is recorded, running
--          (also when this term had already claimed it);
--   retry  p_retry_until is given and not past, and the run was left
--          running by an earlier term (lower token): this term takes it
--          over, attempt + 1;
--   skip   another term ran, runs or ran out of time for it, or a later
--          instant has a run (an instant older than a recorded run is never
--          run for the first time: its run may have been deleted).
-- With p_fence, the claim also takes that fence resource with the token (as
-- fence_write), so a retry's claim refuses the earlier attempt's fenced
-- writes from that moment. It returns the outcome, the database clock and
-- the run's row as it stands.
CREATE FUNCTION pgleader.job_claim(p_job text, p_instant timestamptz, p_owner text, p_token bigint,
                                   p_retry_until timestamptz DEFAULT NULL, p_fence text DEFAULT NULL)
RETURNS TABLE(outcome text, db_now timestamptz, state text, owner text, token bigint, attempt integer,
              started_at timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    t timestamptz := clock_timestamp();
    c name := pgleader._caller();
    r pgleader.job_run;
    result text;
    inserted boolean := false;
BEGIN
    PERFORM pgleader._check_args(p_job, p_owner, NULL, true, false);
    IF p_instant IS NULL OR p_token IS NULL THEN
        RAISE EXCEPTION 'pgleader: instant and token must not be NULL' USING ERRCODE = '22023';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pgleader.lease AS l
                    WHERE l.key = p_job AND l.holder = p_owner AND l.token = p_token
                      AND NOT l.handed_off AND l.expires_at > t
                      AND (l.role = c OR pgleader._own(l.role, false))) THEN
        -- Another role's key is refused as such; a term of one's own that
        -- ended is only lost.
        PERFORM pgleader._check_key_role(p_job, 'claim its runs', false);
        RETURN QUERY SELECT 'lost'::text, t, NULL::text, NULL::text, NULL::bigint, NULL::integer, NULL::timestamptz;
        RETURN;
    END IF;
    IF t < p_instant THEN
        RETURN QUERY SELECT 'early'::text, t, NULL::text, NULL::text, NULL::bigint, NULL::integer, NULL::timestamptz;
        RETURN;
    END IF;
    -- A run is never inserted for an instant older than one recorded: such
    -- an instant was passed over, or its run was deleted by job_finish's
    -- keep, and running it now could run it twice.
    IF NOT EXISTS (SELECT 1 FROM pgleader.job_run AS jr WHERE jr.job = p_job AND jr.instant > p_instant) THEN
        INSERT INTO pgleader.job_run AS jr (job, instant, state, owner, token, attempt, started_at)
        VALUES (p_job, p_instant, 'running', p_owner, p_token, 1, t)
        ON CONFLICT (job, instant) DO NOTHING
        RETURNING * INTO r;
        inserted := FOUND;
    END IF;
    IF inserted THEN
        result := 'run';
    ELSE
        SELECT * INTO r FROM pgleader.job_run AS jr WHERE jr.job = p_job AND jr.instant = p_instant FOR UPDATE;
        IF NOT FOUND THEN
            result := 'skip';
        ELSIF r.state = 'running' AND r.token = p_token AND r.owner = p_owner THEN
            result := 'run';
        ELSIF r.state = 'running' AND r.token < p_token AND p_retry_until IS NOT NULL AND t <= p_retry_until THEN
            UPDATE pgleader.job_run AS jr
               SET owner = p_owner, token = p_token, attempt = jr.attempt + 1, started_at = t
             WHERE jr.job = p_job AND jr.instant = p_instant
            RETURNING * INTO r;
            result := 'retry';
        ELSE
            result := 'skip';
        END IF;
    END IF;
    IF result IN ('run', 'retry') AND p_fence IS NOT NULL THEN
        PERFORM pgleader._fence_take(p_fence, p_token, false);
    END IF;
    RETURN QUERY SELECT result, t, r.state, r.owner, r.token, r.attempt, r.started_at;
END
$$;

-- job_finish records the end of the run of p_job at p_instant claimed by
-- (p_owner, p_token): done if p_ok, else failed with p_error (cut to 256
-- characters). It reports whether the run was still this term's to record (a
-- retry by a later term takes it away). The job's key must be the
-- caller's role's (else 42501). It then keeps the job's p_keep
-- newest runs and deletes older ones.
CREATE FUNCTION pgleader.job_finish(p_job text, p_instant timestamptz, p_owner text, p_token bigint,
                                    p_ok boolean, p_error text DEFAULT NULL, p_keep integer DEFAULT 1000)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp
AS $$
DECLARE
    oldest timestamptz;
BEGIN
    PERFORM pgleader._check_args(p_job, p_owner, NULL, true, false);
    PERFORM pgleader._check_key_role(p_job, 'record its runs', false);
    IF p_keep IS NULL OR p_keep < 1 THEN
        RAISE EXCEPTION 'pgleader: keep must be at least 1, got %', p_keep USING ERRCODE = '22023';
    END IF;
    UPDATE pgleader.job_run AS jr
       SET state = CASE WHEN p_ok THEN 'done' ELSE 'failed' END,
           finished_at = clock_timestamp(),
           error = CASE WHEN p_ok THEN NULL
                        ELSE left(coalesce(p_error, 'failed'), 256) END
     WHERE jr.job = p_job AND jr.instant = p_instant AND jr.owner = p_owner AND jr.token = p_token
       AND jr.state = 'running';
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    SELECT jr.instant INTO oldest FROM pgleader.job_run AS jr
     WHERE jr.job = p_job ORDER BY jr.instant DESC OFFSET p_keep - 1 LIMIT 1;
    IF oldest IS NOT NULL THEN
        DELETE FROM pgleader.job_run AS jr WHERE jr.job = p_job AND jr.instant < oldest;
    END IF;
    RETURN true;
END
$$;

-- job_status lists the jobs (or the one named p_job) with their schedule,
-- next instant and last run, and the database clock.
CREATE FUNCTION pgleader.job_status(p_job text DEFAULT NULL)
RETURNS TABLE(job text, schedule text, next_at timestamptz, role text, instant timestamptz, state text,
              owner text, token bigint, attempt integer, started_at timestamptz, finished_at timestamptz,
              error text, db_now timestamptz)
LANGUAGE sql
STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp
AS $$
    SELECT j.name, j.schedule, j.next_at, j.role, r.instant, r.state, r.owner, r.token, r.attempt,
           r.started_at, r.finished_at, r.error, clock_timestamp()
      FROM pgleader.job AS j
      LEFT JOIN LATERAL (SELECT * FROM pgleader.job_run AS jr
                          WHERE jr.job = j.name ORDER BY jr.instant DESC LIMIT 1) AS r ON true
     WHERE p_job IS NULL OR j.name = p_job
     ORDER BY j.name
$$;

-- job_runs lists p_job's runs, newest first, at most p_limit.
CREATE FUNCTION pgleader.job_runs(p_job text, p_limit integer DEFAULT 100)
RETURNS TABLE(instant timestamptz, state text, owner text, token bigint, attempt integer,
              started_at timestamptz, finished_at timestamptz, error text)
LANGUAGE sql
STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp
AS $$
    SELECT jr.instant, jr.state, jr.owner, jr.token, jr.attempt, jr.started_at, jr.finished_at, jr.error
      FROM pgleader.job_run AS jr
     WHERE jr.job = p_job
     ORDER BY jr.instant DESC
     LIMIT greatest(p_limit, 0)
$$;

REVOKE ALL ON FUNCTION pgleader.job_schedule(text, text, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgleader.job_claim(text, timestamptz, text, bigint, timestamptz, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgleader.job_finish(text, timestamptz, text, bigint, boolean, text, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgleader.job_status(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgleader.job_runs(text, integer) FROM PUBLIC;

-- _app_functions lists the functions an application role may execute: the
-- new ones too.
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

-- The roles granted the application's functions get the new ones too.
DO $$
DECLARE
    r name;
    f regprocedure;
BEGIN
    FOR r IN SELECT DISTINCT pg_catalog.pg_get_userbyid(a.grantee)
               FROM pg_catalog.pg_proc AS p, pg_catalog.aclexplode(p.proacl) AS a
              WHERE p.oid = 'pgleader.lease(text)'::regprocedure AND a.privilege_type = 'EXECUTE'
                AND a.grantee <> 0 AND a.grantee <> p.proowner LOOP
        FOR f IN SELECT * FROM pgleader._app_functions() LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', f, r);
        END LOOP;
    END LOOP;
END
$$;
