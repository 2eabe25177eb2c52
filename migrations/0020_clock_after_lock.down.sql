-- Reverts 0020_clock_after_lock.up.sql: renew_term (both forms), take (the
-- 3-argument form), renew_many, set_acquire and job_claim are version 19's
-- again, which judge a lease's expiry on a clock read before a wait for a
-- row lock. Their grants are unchanged (CREATE OR REPLACE keeps them).

CREATE OR REPLACE FUNCTION pgleader.renew_term(p_key text, p_owner text, p_token bigint, p_ttl interval)
RETURNS TABLE(expires_at timestamptz, resign boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    c name := pgleader._caller();
    g record;
    e timestamptz;
    rs boolean;
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, p_ttl, true, true);
    g := pgleader._grace();
    PERFORM pgleader._check_ttl(p_ttl, g.max_ttl);

    UPDATE pgleader.lease AS l
       SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() + p_ttl, handed_off = false,
           role = coalesce(l.role, c)
     WHERE l.key = p_key AND l.holder = p_owner AND l.token = p_token
       AND l.expires_at > clock_timestamp()
       AND (clock_timestamp() >= g.grace_until OR l.expires_at > clock_timestamp() + g.max_clock_offset)
       AND (l.role = c OR pgleader._own(l.role, false))
    RETURNING l.expires_at, coalesce(l.resign_token = p_token, false) INTO e, rs;
    IF NOT FOUND THEN
        PERFORM pgleader._check_key_role(p_key, 'renew it', false);
    END IF;
    RETURN QUERY SELECT e, coalesce(rs, false);
END
$$;

CREATE OR REPLACE FUNCTION pgleader.renew_term(p_key text, p_owner text, p_token bigint, p_ttl interval, p_min_term interval)
RETURNS TABLE(expires_at timestamptz, resign boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    c name := pgleader._caller();
    g record;
    t timestamptz;
    e timestamptz;
    rs boolean;
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, p_ttl, true, true);
    IF p_min_term < interval '0' THEN
        RAISE EXCEPTION 'pgleader: min_term must not be negative, got %', p_min_term USING ERRCODE = '22023';
    END IF;
    g := pgleader._grace();
    PERFORM pgleader._check_ttl(p_ttl, g.max_ttl);
    t := clock_timestamp();

    UPDATE pgleader.lease AS l
       SET renewed_at = t, expires_at = t + p_ttl, handed_off = false, role = coalesce(l.role, c)
     WHERE l.key = p_key AND l.holder = p_owner AND l.token = p_token
       AND l.expires_at > t
       AND (t >= g.grace_until OR l.expires_at > t + g.max_clock_offset)
       AND (l.role = c OR pgleader._own(l.role, false))
    RETURNING l.expires_at,
              coalesce(l.resign_token = p_token, false)
              OR (p_min_term IS NOT NULL AND t - l.acquired_at >= p_min_term
                  AND EXISTS (SELECT 1 FROM pgleader.candidate AS c
                               WHERE c.key = p_key AND c.owner <> p_owner
                                 AND c.expires_at > t AND c.priority > l.priority))
      INTO e, rs;
    IF NOT FOUND THEN
        PERFORM pgleader._check_key_role(p_key, 'renew it', false);
    END IF;
    RETURN QUERY SELECT e, coalesce(rs, false);
END
$$;

CREATE OR REPLACE FUNCTION pgleader.take(p_key text, p_owner text, p_ttl interval)
RETURNS TABLE(acquired boolean, holder text, token bigint, expires_at timestamptz, db_now timestamptz, value text, acquired_at timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    c name := pgleader._caller();
    r pgleader.lease%ROWTYPE;
    g record;
    t timestamptz;
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, p_ttl, true, true);
    g := pgleader._grace();
    PERFORM pgleader._check_ttl(p_ttl, g.max_ttl);

    t := clock_timestamp();
    UPDATE pgleader.lease AS l
       SET renewed_at = t, expires_at = t + p_ttl, handed_off = false
     WHERE l.key = p_key AND l.holder = p_owner AND l.handed_off AND l.expires_at > t
       AND t >= g.grace_until
       AND (l.role = c OR pgleader._own(l.role, false))
    RETURNING l.* INTO r;
    IF FOUND THEN
        DELETE FROM pgleader.candidate AS c WHERE c.key = p_key AND c.owner = p_owner;
        RETURN QUERY SELECT true, p_owner, r.token, r.expires_at, t, r.value, r.acquired_at;
        RETURN;
    END IF;
    SELECT * INTO r FROM pgleader.lease AS l WHERE l.key = p_key;
    IF NOT pgleader._own(r.role, false) THEN
        PERFORM pgleader._refuse('take it', 'key ' || to_json(p_key)::text, r.role);
    END IF;
    IF r.holder IS NOT NULL AND r.expires_at > t THEN
        RETURN QUERY SELECT false, r.holder, r.token, r.expires_at, t, r.value, r.acquired_at;
    ELSE
        RETURN QUERY SELECT false, NULL::text, coalesce(r.token, 0::bigint), NULL::timestamptz, t, NULL::text, NULL::timestamptz;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION pgleader.renew_many(p_owner text, p_keys text[], p_tokens bigint[], p_ttl interval)
RETURNS TABLE(key text, expires_at timestamptz, resign boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
#variable_conflict use_column
DECLARE
    g record;
    t timestamptz;
    c name := pgleader._caller();
BEGIN
    PERFORM pgleader._check_args('-', p_owner, p_ttl, true, true);
    PERFORM pgleader._check_keys(p_keys, p_tokens, true);
    g := pgleader._grace();
    PERFORM pgleader._check_ttl(p_ttl, g.max_ttl);
    t := clock_timestamp();

    RETURN QUERY
    UPDATE pgleader.lease AS l
       SET renewed_at = t, expires_at = t + p_ttl, role = coalesce(l.role, c)
      FROM unnest(p_keys, p_tokens) AS u(k, tok)
     WHERE l.key = u.k AND l.holder = p_owner AND l.token = u.tok
       AND l.expires_at > t
       AND (t >= g.grace_until OR l.expires_at > t + g.max_clock_offset)
       AND (l.role = c OR pgleader._own(l.role, false))
    RETURNING l.key, l.expires_at, coalesce(l.resign_token = u.tok, false);
END
$$;

CREATE OR REPLACE FUNCTION pgleader.set_acquire(p_set text, p_owner text, p_keys text[], p_ttl interval, p_held integer,
                                                p_extra integer DEFAULT 0, p_floors bigint[] DEFAULT NULL,
                                                p_total integer DEFAULT NULL, p_confirm text[] DEFAULT NULL)
RETURNS TABLE(keys text[], tokens bigint[], expires_at timestamptz[], acquired_at timestamptz[], members integer,
              db_now timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
#variable_conflict use_column
DECLARE
    m integer;
    n integer;
    lim integer;
    g record;
    t timestamptz;
    ck text[];
    ct bigint[];
    ce timestamptz[];
    ca timestamptz[];
    c name := pgleader._caller();
BEGIN
    PERFORM pgleader._check_args(p_set, p_owner, p_ttl, true, true);
    PERFORM pgleader._check_keys(p_keys, NULL, false);
    IF p_held IS NULL OR p_held < 0 OR p_extra IS NULL OR p_extra < 0 THEN
        RAISE EXCEPTION 'pgleader: held and extra must be zero or positive, got % and %',
            coalesce(p_held::text, 'NULL'), coalesce(p_extra::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    IF p_total < p_held + cardinality(p_keys) THEN
        RAISE EXCEPTION 'pgleader: total must be at least held + the keys given (%), got %',
            p_held + cardinality(p_keys), p_total USING ERRCODE = '22023';
    END IF;
    g := pgleader._grace();
    PERFORM pgleader._check_ttl(p_ttl, g.max_ttl);
    t := clock_timestamp();
    -- The terms to confirm first, then their rows, key by key: a join of
    -- the two in one statement could be planned as a nested loop over both.
    SELECT coalesce(array_agg(q.key), '{}') INTO ck FROM (
        SELECT x.key FROM pgleader.lease AS x
         WHERE x.handed_off AND x.holder = p_owner AND x.expires_at > t AND t >= g.grace_until
        INTERSECT
        SELECT u.k FROM unnest(p_keys || coalesce(p_confirm, '{}')) AS u(k)) AS q;
    WITH confirmed AS (
        UPDATE pgleader.lease AS l
           SET renewed_at = t, expires_at = t + p_ttl, handed_off = false
          FROM unnest(ck) AS u(k)
         WHERE l.key = u.k AND l.handed_off AND l.holder = p_owner AND l.expires_at > t
           AND t >= g.grace_until AND (l.role = c OR pgleader._own(l.role, false))
        RETURNING l.key, l.token, l.expires_at, l.acquired_at
    )
    SELECT coalesce(array_agg(f.key), '{}'), coalesce(array_agg(f.token), '{}'), coalesce(array_agg(f.expires_at), '{}'),
           coalesce(array_agg(f.acquired_at), '{}')
      INTO ck, ct, ce, ca FROM confirmed AS f;

    SELECT count(*) INTO m FROM pgleader.set_member AS s
     WHERE s.set_name = p_set AND s.role = c AND (s.expires_at > clock_timestamp() OR s.owner = p_owner);
    IF NOT EXISTS (SELECT 1 FROM pgleader.set_member AS s WHERE s.set_name = p_set AND s.role = c AND s.owner = p_owner) THEN
        m := m + 1;
    END IF;
    n := coalesce(p_total, p_held + cardinality(p_keys));
    lim := least(greatest((n + m - 1) / m - p_held - cardinality(ck), 0) + p_extra, cardinality(p_keys), 10000);
    RETURN QUERY
    SELECT coalesce(array_agg(w.key ORDER BY w.key), '{}'), coalesce(array_agg(w.token ORDER BY w.key), '{}'),
           coalesce(array_agg(w.expires_at ORDER BY w.key), '{}'), coalesce(array_agg(w.acquired_at ORDER BY w.key), '{}'),
           m, clock_timestamp()
      FROM (SELECT a.key, a.token, a.expires_at, a.db_now AS acquired_at
              FROM pgleader.acquire_many(p_keys, p_owner, p_ttl, lim, p_floors) AS a
            UNION ALL
            SELECT u.k, u.tok, u.e, u.a FROM unnest(ck, ct, ce, ca) AS u(k, tok, e, a)) AS w;
END
$$;

CREATE OR REPLACE FUNCTION pgleader.job_claim(p_job text, p_instant timestamptz, p_owner text, p_token bigint,
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
