-- Reverts 0011_seams.up.sql: the functions as versions 4 to 10 left them.

-- _grace, as in version 8.
CREATE OR REPLACE FUNCTION pgleader._grace(OUT grace_until timestamptz, OUT max_ttl interval, OUT max_clock_offset interval)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
BEGIN
    SELECT s.max_ttl, s.max_clock_offset INTO max_ttl, max_clock_offset FROM pgleader.settings AS s;
    IF NOT FOUND THEN
        max_ttl := interval '10 minutes';
        max_clock_offset := interval '1 second';
    END IF;
    SELECT e.grace_until INTO grace_until FROM pgleader.server_epoch AS e;
    IF NOT FOUND THEN
        INSERT INTO pgleader.server_epoch AS e (noticed_at, grace_until)
        VALUES (clock_timestamp(), clock_timestamp() + max_ttl)
        ON CONFLICT (only_row) DO NOTHING;
        IF FOUND THEN
            PERFORM pgleader._epoch_bump();
        END IF;
        SELECT e.grace_until INTO STRICT grace_until FROM pgleader.server_epoch AS e;
    END IF;
END
$$;

-- lease_guard, as in version 4.
CREATE OR REPLACE FUNCTION pgleader.lease_guard(p_key text, p_token bigint)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    r pgleader.lease%ROWTYPE;
    g record;
    t timestamptz;
    why text;
BEGIN
    PERFORM pgleader._check_args(p_key, NULL, NULL, false, false);
    IF p_token IS NULL OR p_token < 1 THEN
        RAISE EXCEPTION 'pgleader: token must be positive, got %', coalesce(p_token::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    g := pgleader._grace();

    SELECT * INTO r FROM pgleader.lease AS l WHERE l.key = p_key FOR KEY SHARE;
    t := clock_timestamp();

    why := CASE
        WHEN r.key IS NULL THEN 'the key has no lease'
        WHEN r.token <> p_token THEN format('the lease is at token %s', r.token)
        WHEN r.holder IS NULL THEN 'the lease was released'
        WHEN r.expires_at <= t THEN format('the lease expired at %s; the database clock is %s', r.expires_at, t)
        WHEN t < g.grace_until AND r.expires_at <= t + g.max_clock_offset THEN
            format('the server is in its grace until %s and the lease expires at %s, within max_clock_offset %s',
                g.grace_until, r.expires_at, g.max_clock_offset)
    END;
    IF why IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PF002',
            MESSAGE = format('pgleader: lease %s is not held by token %s', to_json(p_key), p_token),
            DETAIL = why,
            HINT = 'This term has ended; roll back and stop writing as this term.';
    END IF;
END
$$;

-- set_max_ttl, as in version 4.
CREATE OR REPLACE FUNCTION pgleader.set_max_ttl(p_max_ttl interval)
RETURNS interval
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    old interval;
    k text;
    longest interval;
BEGIN
    IF p_max_ttl IS NULL OR p_max_ttl < interval '100 milliseconds' OR p_max_ttl > interval '24 hours' THEN
        RAISE EXCEPTION 'pgleader: max_ttl must be between 100 milliseconds and 24 hours, got %', coalesce(p_max_ttl::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    SELECT l.key, l.expires_at - l.renewed_at INTO k, longest
      FROM pgleader.lease AS l
     WHERE l.holder IS NOT NULL AND l.expires_at > clock_timestamp()
     ORDER BY l.expires_at - l.renewed_at DESC LIMIT 1;
    IF longest > p_max_ttl THEN
        RAISE EXCEPTION 'pgleader: max_ttl % is below the TTL % of the term holding key %', p_max_ttl, longest, to_json(k)
            USING ERRCODE = '55000',
                  HINT = 'Stop using the longer TTL and wait for that term to end, then lower max_ttl.';
    END IF;
    SELECT s.max_ttl INTO old FROM pgleader.settings AS s FOR UPDATE;
    UPDATE pgleader.settings AS s SET max_ttl = p_max_ttl;
    RETURN old;
END
$$;

-- set_max_clock_offset, as in version 4.
CREATE OR REPLACE FUNCTION pgleader.set_max_clock_offset(p_offset interval)
RETURNS interval
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    old interval;
BEGIN
    IF p_offset IS NULL OR p_offset < interval '0' OR p_offset > interval '1 hour' THEN
        RAISE EXCEPTION 'pgleader: max_clock_offset must be between 0 and 1 hour, got %', coalesce(p_offset::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    SELECT s.max_clock_offset INTO old FROM pgleader.settings AS s FOR UPDATE;
    UPDATE pgleader.settings AS s SET max_clock_offset = p_offset;
    RETURN old;
END
$$;

-- campaign, as in version 6.
CREATE OR REPLACE FUNCTION pgleader.campaign(p_key text, p_owner text, p_ttl interval, p_floor bigint, p_value text,
                                  p_priority integer, p_candidate interval)
RETURNS TABLE (acquired boolean, holder text, token bigint, expires_at timestamptz, db_now timestamptz, value text, acquired_at timestamptz)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    r pgleader.lease%ROWTYPE;
    g record;
    t timestamptz;
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, p_ttl, true, true);
    PERFORM pgleader._check_floor(p_floor);
    PERFORM pgleader._check_value(p_value);
    PERFORM pgleader._check_candidate(p_candidate, p_priority);
    g := pgleader._grace();
    PERFORM pgleader._check_ttl(p_ttl, g.max_ttl);

    r := pgleader._lock_row(p_key);
    t := clock_timestamp();

    IF r.holder = p_owner AND r.handed_off AND r.expires_at > t
       AND (t >= g.grace_until OR r.expires_at > t + g.max_clock_offset) THEN
        UPDATE pgleader.lease AS l
           SET renewed_at = t, expires_at = t + p_ttl, handed_off = false
         WHERE l.key = p_key
        RETURNING l.token, l.expires_at, l.value INTO r.token, r.expires_at, r.value;
        DELETE FROM pgleader.candidate AS c WHERE c.key = p_key AND c.owner = p_owner;
        RETURN QUERY SELECT true, p_owner, r.token, r.expires_at, t, r.value, r.acquired_at;
        RETURN;
    END IF;
    IF (r.holder IS NOT NULL AND r.expires_at > t) OR t < g.grace_until THEN
        IF p_candidate IS NOT NULL AND r.holder IS DISTINCT FROM p_owner THEN
            INSERT INTO pgleader.candidate AS c (key, owner, priority, value, registered_at, expires_at)
            VALUES (p_key, p_owner, p_priority, p_value, t, t + least(p_candidate, g.max_ttl))
            ON CONFLICT (key, owner) DO UPDATE
               SET priority = excluded.priority, value = excluded.value, expires_at = excluded.expires_at,
                   registered_at = CASE WHEN c.expires_at > t THEN c.registered_at ELSE excluded.registered_at END;
        END IF;
        IF r.holder IS NOT NULL AND r.expires_at > t THEN
            RETURN QUERY SELECT false, r.holder, r.token, r.expires_at, t, r.value, r.acquired_at;
        ELSE
            RETURN QUERY SELECT false, 'pgleader.grace'::text, r.token, g.grace_until, t, NULL::text, NULL::timestamptz;
        END IF;
        RETURN;
    END IF;
    IF r.token = 9223372036854775807 THEN
        RAISE EXCEPTION 'pgleader: key % has no token left: its counter is at %, the largest bigint', to_json(p_key), r.token
            USING ERRCODE = '22003',
                  HINT = 'No pgleader function sets a counter this high; it was set by hand. Tokens never go down: use another key.';
    END IF;

    UPDATE pgleader.lease AS l
       SET holder = p_owner, token = greatest(l.token, p_floor) + 1,
           acquired_at = t, renewed_at = t, expires_at = t + p_ttl,
           value = p_value, resign_token = NULL, priority = p_priority, handed_off = false, transfer_to = NULL
     WHERE l.key = p_key
    RETURNING l.token, l.expires_at INTO r.token, r.expires_at;
    DELETE FROM pgleader.candidate AS c WHERE c.key = p_key AND (c.owner = p_owner OR c.expires_at <= t);

    RETURN QUERY SELECT true, p_owner, r.token, r.expires_at, t, p_value, t;
END
$$;

-- take, as in version 6.
CREATE OR REPLACE FUNCTION pgleader.take(p_key text, p_owner text, p_ttl interval)
RETURNS TABLE (acquired boolean, holder text, token bigint, expires_at timestamptz, db_now timestamptz, value text, acquired_at timestamptz)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
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
       AND (t >= g.grace_until OR l.expires_at > t + g.max_clock_offset)
    RETURNING l.* INTO r;
    IF FOUND THEN
        DELETE FROM pgleader.candidate AS c WHERE c.key = p_key AND c.owner = p_owner;
        RETURN QUERY SELECT true, p_owner, r.token, r.expires_at, t, r.value, r.acquired_at;
        RETURN;
    END IF;
    SELECT * INTO r FROM pgleader.lease AS l WHERE l.key = p_key;
    IF r.holder IS NOT NULL AND r.expires_at > t THEN
        RETURN QUERY SELECT false, r.holder, r.token, r.expires_at, t, r.value, r.acquired_at;
    ELSE
        RETURN QUERY SELECT false, NULL::text, coalesce(r.token, 0::bigint), NULL::timestamptz, t, NULL::text, NULL::timestamptz;
    END IF;
END
$$;

-- take with p_keep, as in version 10.
CREATE OR REPLACE FUNCTION pgleader.take(p_key text, p_owner text, p_ttl interval, p_keep interval)
RETURNS TABLE (acquired boolean, holder text, token bigint, expires_at timestamptz, db_now timestamptz, value text, acquired_at timestamptz)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    r pgleader.lease%ROWTYPE;
    g record;
    t timestamptz;
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, p_ttl, true, true);
    IF p_keep IS NULL OR p_keep < interval '0' THEN
        RAISE EXCEPTION 'pgleader: keep must be 0 or more, got %', coalesce(p_keep::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    g := pgleader._grace();
    PERFORM pgleader._check_ttl(p_ttl, g.max_ttl);

    t := clock_timestamp();
    SELECT * INTO r FROM pgleader.lease AS l WHERE l.key = p_key;
    IF r.holder = p_owner AND r.handed_off AND r.expires_at > t AND r.expires_at >= t + p_keep
       AND (t >= g.grace_until OR r.expires_at > t + g.max_clock_offset) THEN
        RETURN QUERY SELECT true, p_owner, r.token, r.expires_at, t, r.value, r.acquired_at;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM pgleader.take(p_key, p_owner, p_ttl);
END
$$;

-- acquire_many, as in version 7.
CREATE OR REPLACE FUNCTION pgleader.acquire_many(p_keys text[], p_owner text, p_ttl interval, p_limit integer,
                                      p_floors bigint[] DEFAULT NULL)
RETURNS TABLE (key text, token bigint, expires_at timestamptz, db_now timestamptz)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
#variable_conflict use_column
DECLARE
    g record;
    t timestamptz;
    f bigint;
BEGIN
    PERFORM pgleader._check_args('-', p_owner, p_ttl, true, true);
    PERFORM pgleader._check_keys(p_keys, NULL, false);
    IF p_limit IS NULL OR p_limit < 0 THEN
        RAISE EXCEPTION 'pgleader: limit must be zero or positive, got %', coalesce(p_limit::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    IF p_floors IS NOT NULL THEN
        IF array_ndims(p_floors) > 1 OR cardinality(p_floors) <> cardinality(p_keys) THEN
            RAISE EXCEPTION 'pgleader: floors must be an array of one floor per key (% keys, % floors)',
                cardinality(p_keys), cardinality(p_floors) USING ERRCODE = '22023';
        END IF;
        FOREACH f IN ARRAY p_floors LOOP
            PERFORM pgleader._check_floor(f);
        END LOOP;
    END IF;
    g := pgleader._grace();
    PERFORM pgleader._check_ttl(p_ttl, g.max_ttl);
    IF p_limit = 0 OR cardinality(p_keys) = 0 OR clock_timestamp() < g.grace_until THEN
        RETURN;
    END IF;

    -- Rows for keys never seen, inserted in key order so that concurrent
    -- inserts of the same keys wait in one order.
    INSERT INTO pgleader.lease AS l (key)
    SELECT u.k FROM unnest(p_keys) AS u(k)
     WHERE NOT EXISTS (SELECT 1 FROM pgleader.lease AS x WHERE x.key = u.k)
     ORDER BY u.k
    ON CONFLICT (key) DO NOTHING;

    t := clock_timestamp();
    RETURN QUERY
    WITH want AS (
        SELECT u.k, coalesce(u.f, 0) AS f FROM unnest(p_keys, p_floors) AS u(k, f) WHERE u.k IS NOT NULL
    ), locked AS (
        SELECT l.key, w.f
          FROM pgleader.lease AS l JOIN want AS w ON w.k = l.key
         WHERE (l.holder IS NULL OR l.expires_at <= t) AND l.token < 9223372036854775807
         ORDER BY l.key
         LIMIT p_limit
           FOR UPDATE OF l SKIP LOCKED
    ), won AS (
        UPDATE pgleader.lease AS l
           SET holder = p_owner, token = greatest(l.token, k.f) + 1,
               acquired_at = t, renewed_at = t, expires_at = t + p_ttl
          FROM locked AS k
         WHERE l.key = k.key AND (l.holder IS NULL OR l.expires_at <= t)
        RETURNING l.key, l.token, l.expires_at
    )
    SELECT won.key, won.token, won.expires_at, t FROM won ORDER BY won.key;
END
$$;

-- release_many, as in version 7.
CREATE OR REPLACE FUNCTION pgleader.release_many(p_owner text, p_keys text[], p_tokens bigint[])
RETURNS TABLE (key text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
#variable_conflict use_column
BEGIN
    PERFORM pgleader._check_args('-', p_owner, NULL, true, false);
    PERFORM pgleader._check_keys(p_keys, p_tokens, true);

    RETURN QUERY
    UPDATE pgleader.lease AS l
       SET holder = NULL, acquired_at = NULL, renewed_at = NULL, expires_at = NULL
      FROM unnest(p_keys, p_tokens) AS u(k, tok)
     WHERE l.key = u.k AND l.holder = p_owner AND l.token = u.tok
    RETURNING l.key;
END
$$;

DROP FUNCTION pgleader._lock_settings();
DROP FUNCTION pgleader._grace_peek();
DROP FUNCTION pgleader._settings_lock();
