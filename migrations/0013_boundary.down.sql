-- Reverts 0013_boundary.up.sql: the functions as version 12 left them, every
-- function executable by PUBLIC again (_epoch_bump excepted), no record of
-- roles in the rows. Privileges granted on the tables before version 13 are
-- not given back: run grant_usage of version 12 again for each role.

CREATE OR REPLACE FUNCTION pgleader._lock_settings()
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
DECLARE
    k record := pgleader._settings_lock();
BEGIN
    FOR i IN 1..500 LOOP
        IF pg_try_advisory_xact_lock(k.classid, k.objid) THEN
            RETURN;
        END IF;
        PERFORM pg_sleep(0.01);
    END LOOP;
    RAISE EXCEPTION 'pgleader: the settings are in use by lease operations whose transactions stayed open for 5 seconds'
        USING ERRCODE = '55P03',
              HINT = 'A lease operation (acquire, renew, a set''s tick, …) inside a long transaction holds them until it ends. Retry, or end that transaction (see pg_locks, locktype advisory, classid 1885826148).';
END
$function$;

CREATE OR REPLACE FUNCTION pgleader._check_args(p_key text, p_owner text, p_ttl interval, p_need_owner boolean, p_need_ttl boolean)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
BEGIN
    IF p_key IS NULL OR p_key = '' THEN
        RAISE EXCEPTION 'pgleader: key must not be empty' USING ERRCODE = '22023';
    END IF;
    IF octet_length(p_key) > 200 THEN
        RAISE EXCEPTION 'pgleader: key is % bytes; the limit is 200', octet_length(p_key) USING ERRCODE = '22023';
    END IF;
    IF p_need_owner THEN
        IF p_owner IS NULL OR p_owner = '' THEN
            RAISE EXCEPTION 'pgleader: owner must not be empty' USING ERRCODE = '22023';
        END IF;
        IF octet_length(p_owner) > 200 THEN
            RAISE EXCEPTION 'pgleader: owner is % bytes; the limit is 200', octet_length(p_owner) USING ERRCODE = '22023';
        END IF;
    END IF;
    IF p_need_ttl AND (p_ttl IS NULL OR p_ttl <= interval '0') THEN
        RAISE EXCEPTION 'pgleader: ttl must be positive, got %', p_ttl USING ERRCODE = '22023';
    END IF;
END
$function$;

CREATE OR REPLACE FUNCTION pgleader._check_candidate(p_candidate interval, p_priority integer)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
BEGIN
    IF p_candidate IS NOT NULL AND p_candidate < interval '1 microsecond' THEN
        RAISE EXCEPTION 'pgleader: candidate ttl must be at least 1 microsecond, got %', p_candidate USING ERRCODE = '22023';
    END IF;
    IF p_priority IS NULL THEN
        RAISE EXCEPTION 'pgleader: priority must not be NULL' USING ERRCODE = '22023';
    END IF;
END
$function$;

CREATE OR REPLACE FUNCTION pgleader._fence_take(p_resource text, p_token bigint, p_claim boolean)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
DECLARE
    stored bigint;
BEGIN
    PERFORM pgleader._fence_check(p_resource, p_token, true);

    INSERT INTO pgleader.fence AS f (resource, token, updated_at)
    VALUES (p_resource, p_token, clock_timestamp())
    ON CONFLICT (resource) DO NOTHING;
    IF FOUND THEN
        RETURN; -- a new resource; the uncommitted row is this transaction's alone
    END IF;

    SELECT f.token INTO stored FROM pgleader.fence AS f WHERE f.resource = p_resource FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgleader: guard row of resource % was deleted concurrently', to_json(p_resource)
            USING ERRCODE = '40001';
    END IF;
    IF stored > p_token OR (p_claim AND stored = p_token) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PF001',
            MESSAGE = format('pgleader: resource %s fenced: %s, stored fence is %s', to_json(p_resource),
                CASE WHEN p_claim THEN format('claim of token %s refused', p_token)
                     ELSE format('token %s is stale', p_token) END,
                stored),
            DETAIL = format('%s token %s, stored fence %s',
                CASE WHEN p_claim THEN 'claim' ELSE 'stale' END, p_token, stored),
            HINT = 'A newer term (or another holder of this token) took the resource; roll back and stop writing as this term.';
    END IF;
    IF stored < p_token THEN
        UPDATE pgleader.fence AS f SET token = p_token, updated_at = clock_timestamp()
         WHERE f.resource = p_resource;
    END IF;
END
$function$;

CREATE OR REPLACE FUNCTION pgleader._grace(OUT grace_until timestamp with time zone, OUT max_ttl interval, OUT max_clock_offset interval)
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
DECLARE
    k record := pgleader._settings_lock();
BEGIN
    PERFORM pg_advisory_xact_lock_shared(k.classid, k.objid);
    IF current_setting('transaction_isolation') = 'read committed' THEN
        SELECT s.max_ttl, s.max_clock_offset INTO max_ttl, max_clock_offset FROM pgleader.settings AS s;
    ELSE
        SELECT s.max_ttl, s.max_clock_offset INTO max_ttl, max_clock_offset FROM pgleader.settings AS s FOR SHARE;
    END IF;
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
$function$;

CREATE OR REPLACE FUNCTION pgleader.acquire_many(p_keys text[], p_owner text, p_ttl interval, p_limit integer, p_floors bigint[] DEFAULT NULL::bigint[])
 RETURNS TABLE(key text, token bigint, expires_at timestamp with time zone, db_now timestamp with time zone)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
               acquired_at = t, renewed_at = t, expires_at = t + p_ttl,
               value = NULL, priority = 0, handed_off = false, transfer_to = NULL, resign_token = NULL
          FROM locked AS k
         WHERE l.key = k.key AND (l.holder IS NULL OR l.expires_at <= t)
        RETURNING l.key, l.token, l.expires_at
    )
    SELECT won.key, won.token, won.expires_at, t FROM won ORDER BY won.key;
END
$function$;

CREATE OR REPLACE FUNCTION pgleader.advance(p_key text, p_floor bigint)
 RETURNS TABLE(advanced boolean, token bigint)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
DECLARE
    r pgleader.lease%ROWTYPE;
    g record;
BEGIN
    PERFORM pgleader._check_args(p_key, NULL, NULL, false, false);
    PERFORM pgleader._check_floor(p_floor);
    g := pgleader._grace();

    r := pgleader._lock_row(p_key);

    IF (r.holder IS NOT NULL AND r.expires_at > clock_timestamp()) OR clock_timestamp() < g.grace_until THEN
        RETURN QUERY SELECT false, r.token;
        RETURN;
    END IF;

    UPDATE pgleader.lease AS l
       SET token = greatest(l.token, p_floor),
           holder = NULL, acquired_at = NULL, renewed_at = NULL, expires_at = NULL,
           value = NULL, resign_token = NULL, handed_off = false, transfer_to = NULL
     WHERE l.key = p_key
    RETURNING l.token INTO r.token;
    RETURN QUERY SELECT true, r.token;
END
$function$;

CREATE OR REPLACE FUNCTION pgleader.campaign(p_key text, p_owner text, p_ttl interval, p_floor bigint, p_value text, p_priority integer, p_candidate interval)
 RETURNS TABLE(acquired boolean, holder text, token bigint, expires_at timestamp with time zone, db_now timestamp with time zone, value text, acquired_at timestamp with time zone)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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

    IF r.holder = p_owner AND r.handed_off AND r.expires_at > t AND t >= g.grace_until THEN
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
$function$;

CREATE OR REPLACE FUNCTION pgleader.grant_usage(p_role name, p_history regclass DEFAULT NULL::regclass)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
DECLARE
    owner oid;
BEGIN
    IF p_role IS NULL OR p_role = '' THEN
        RAISE EXCEPTION 'pgleader: role must not be empty' USING ERRCODE = '22023';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles AS r WHERE r.rolname = p_role) THEN
        RAISE EXCEPTION 'pgleader: role % does not exist', quote_ident(p_role) USING ERRCODE = '42704';
    END IF;
    SELECT n.nspowner INTO owner FROM pg_catalog.pg_namespace AS n WHERE n.nspname = 'pgleader';
    IF NOT pg_has_role(current_user, owner, 'USAGE') THEN
        RAISE EXCEPTION 'pgleader: only the owner of the schema pgleader (%) may grant its use, not %',
            quote_ident(pg_get_userbyid(owner)), quote_ident(current_user) USING ERRCODE = '42501';
    END IF;
    EXECUTE format('GRANT USAGE ON SCHEMA pgleader TO %I', p_role);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE ON TABLE pgleader.lease, pgleader.fence TO %I', p_role);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE pgleader.candidate TO %I', p_role);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE pgleader.set_member TO %I', p_role);
    EXECUTE format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA pgleader TO %I', p_role);
    IF p_role <> pg_get_userbyid(owner) THEN
        EXECUTE format('REVOKE EXECUTE ON FUNCTION pgleader._epoch_bump() FROM %I', p_role);
    END IF;
    IF p_history IS NOT NULL THEN
        EXECUTE format('GRANT SELECT ON TABLE %s TO %I', p_history, p_role);
    END IF;
END
$function$;

CREATE OR REPLACE FUNCTION pgleader.hand_off(p_key text, p_owner text, p_token bigint, p_to text DEFAULT NULL::text)
 RETURNS TABLE(released boolean, successor text, token bigint)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
DECLARE
    r pgleader.lease%ROWTYPE;
    c pgleader.candidate%ROWTYPE;
    g record;
    t timestamptz;
    target text;
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, NULL, true, false);
    IF p_to IS NOT NULL THEN
        PERFORM pgleader._check_args(p_key, p_to, NULL, true, false);
    END IF;
    g := pgleader._grace();

    SELECT * INTO r FROM pgleader.lease AS l
     WHERE l.key = p_key AND l.holder = p_owner AND l.token = p_token FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT false, NULL::text, coalesce((SELECT l.token FROM pgleader.lease AS l WHERE l.key = p_key), 0::bigint);
        RETURN;
    END IF;
    t := clock_timestamp();
    target := coalesce(p_to, r.transfer_to);

    IF t >= g.grace_until AND r.token < 9223372036854775807 THEN
        SELECT * INTO c FROM pgleader.candidate AS k
         WHERE k.key = p_key AND k.owner <> p_owner AND k.expires_at > t
         ORDER BY k.owner IS NOT DISTINCT FROM target DESC, k.priority DESC, k.registered_at, k.owner
         LIMIT 1
         FOR UPDATE;
        IF FOUND THEN
            UPDATE pgleader.lease AS l
               SET holder = c.owner, token = l.token + 1,
                   acquired_at = t, renewed_at = t, expires_at = least(c.expires_at, t + g.max_ttl),
                   value = c.value, priority = c.priority, resign_token = NULL,
                   handed_off = true, transfer_to = NULL
             WHERE l.key = p_key
            RETURNING l.token INTO r.token;
            DELETE FROM pgleader.candidate AS k
             WHERE k.key = p_key AND (k.owner = c.owner OR k.owner = p_owner OR k.expires_at <= t);
            RETURN QUERY SELECT true, c.owner, r.token;
            RETURN;
        END IF;
    END IF;

    UPDATE pgleader.lease AS l
       SET holder = NULL, acquired_at = NULL, renewed_at = NULL, expires_at = NULL,
           value = NULL, resign_token = NULL, handed_off = false, transfer_to = NULL
     WHERE l.key = p_key;
    DELETE FROM pgleader.candidate AS k WHERE k.key = p_key AND (k.owner = p_owner OR k.expires_at <= t);
    RETURN QUERY SELECT true, NULL::text, r.token;
END
$function$;

CREATE OR REPLACE FUNCTION pgleader.lease_guard(p_key text, p_token bigint)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
    g := pgleader._grace_peek();

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
$function$;

CREATE OR REPLACE FUNCTION pgleader.release(p_key text, p_owner text, p_token bigint)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, NULL, true, false);

    UPDATE pgleader.lease AS l
       SET holder = NULL, acquired_at = NULL, renewed_at = NULL, expires_at = NULL,
           value = NULL, resign_token = NULL, handed_off = false, transfer_to = NULL
     WHERE l.key = p_key AND l.holder = p_owner AND l.token = p_token;
    RETURN FOUND;
END
$function$;

CREATE OR REPLACE FUNCTION pgleader.release_many(p_owner text, p_keys text[], p_tokens bigint[])
 RETURNS TABLE(key text)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
    PERFORM pgleader._check_args('-', p_owner, NULL, true, false);
    PERFORM pgleader._check_keys(p_keys, p_tokens, true);

    RETURN QUERY
    UPDATE pgleader.lease AS l
       SET holder = NULL, acquired_at = NULL, renewed_at = NULL, expires_at = NULL,
           value = NULL, resign_token = NULL, handed_off = false, transfer_to = NULL
      FROM unnest(p_keys, p_tokens) AS u(k, tok)
     WHERE l.key = u.k AND l.holder = p_owner AND l.token = u.tok
    RETURNING l.key;
END
$function$;

CREATE OR REPLACE FUNCTION pgleader.renew_many(p_owner text, p_keys text[], p_tokens bigint[], p_ttl interval)
 RETURNS TABLE(key text, expires_at timestamp with time zone)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    g record;
BEGIN
    PERFORM pgleader._check_args('-', p_owner, p_ttl, true, true);
    PERFORM pgleader._check_keys(p_keys, p_tokens, true);
    g := pgleader._grace();
    PERFORM pgleader._check_ttl(p_ttl, g.max_ttl);

    RETURN QUERY
    UPDATE pgleader.lease AS l
       SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() + p_ttl
      FROM unnest(p_keys, p_tokens) AS u(k, tok)
     WHERE l.key = u.k AND l.holder = p_owner AND l.token = u.tok
       AND l.expires_at > clock_timestamp()
       AND (clock_timestamp() >= g.grace_until OR l.expires_at > clock_timestamp() + g.max_clock_offset)
    RETURNING l.key, l.expires_at;
END
$function$;

CREATE OR REPLACE FUNCTION pgleader.renew_term(p_key text, p_owner text, p_token bigint, p_ttl interval)
 RETURNS TABLE(expires_at timestamp with time zone, resign boolean)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
DECLARE
    g record;
    e timestamptz;
    rs boolean;
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, p_ttl, true, true);
    g := pgleader._grace();
    PERFORM pgleader._check_ttl(p_ttl, g.max_ttl);

    UPDATE pgleader.lease AS l
       SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() + p_ttl, handed_off = false
     WHERE l.key = p_key AND l.holder = p_owner AND l.token = p_token
       AND l.expires_at > clock_timestamp()
       AND (clock_timestamp() >= g.grace_until OR l.expires_at > clock_timestamp() + g.max_clock_offset)
    RETURNING l.expires_at, coalesce(l.resign_token = p_token, false) INTO e, rs;
    RETURN QUERY SELECT e, coalesce(rs, false);
END
$function$;

CREATE OR REPLACE FUNCTION pgleader.renew_term(p_key text, p_owner text, p_token bigint, p_ttl interval, p_min_term interval)
 RETURNS TABLE(expires_at timestamp with time zone, resign boolean)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
DECLARE
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
       SET renewed_at = t, expires_at = t + p_ttl, handed_off = false
     WHERE l.key = p_key AND l.holder = p_owner AND l.token = p_token
       AND l.expires_at > t
       AND (t >= g.grace_until OR l.expires_at > t + g.max_clock_offset)
    RETURNING l.expires_at,
              coalesce(l.resign_token = p_token, false)
              OR (p_min_term IS NOT NULL AND t - l.acquired_at >= p_min_term
                  AND EXISTS (SELECT 1 FROM pgleader.candidate AS c
                               WHERE c.key = p_key AND c.owner <> p_owner
                                 AND c.expires_at > t AND c.priority > l.priority))
      INTO e, rs;
    RETURN QUERY SELECT e, coalesce(rs, false);
END
$function$;

CREATE OR REPLACE FUNCTION pgleader.resign(p_key text, p_token bigint DEFAULT NULL::bigint)
 RETURNS TABLE(resigned boolean, holder text, token bigint, detail text)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
DECLARE
    h text;
    k bigint;
BEGIN
    PERFORM pgleader._check_args(p_key, NULL, NULL, false, false);
    IF p_token IS NOT NULL AND p_token < 1 THEN
        RAISE EXCEPTION 'pgleader: token must be positive, got %', p_token USING ERRCODE = '22023';
    END IF;

    UPDATE pgleader.lease AS l
       SET resign_token = l.token
     WHERE l.key = p_key AND l.holder IS NOT NULL AND l.expires_at > clock_timestamp()
       AND (p_token IS NULL OR l.token = p_token)
    RETURNING l.holder, l.token INTO h, k;
    IF FOUND THEN
        RETURN QUERY SELECT true, h, k, format('term %s of %s will end at its next renewal', k, h);
        RETURN;
    END IF;

    SELECT CASE WHEN l.expires_at > clock_timestamp() THEN l.holder END, l.token INTO h, k
      FROM pgleader.lease AS l WHERE l.key = p_key;
    IF h IS NULL THEN
        RETURN QUERY SELECT false, NULL::text, coalesce(k, 0::bigint), 'nobody holds the lease'::text;
    ELSE
        RETURN QUERY SELECT false, h, k, format('the lease is held by token %s, not %s', k, p_token);
    END IF;
END
$function$;

CREATE OR REPLACE FUNCTION pgleader.set_acquire(p_set text, p_owner text, p_keys text[], p_ttl interval, p_held integer, p_extra integer DEFAULT 0, p_floors bigint[] DEFAULT NULL::bigint[])
 RETURNS TABLE(keys text[], tokens bigint[], expires_at timestamp with time zone[], members integer, db_now timestamp with time zone)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    m integer;
    n integer;
    lim integer;
BEGIN
    PERFORM pgleader._check_args(p_set, p_owner, p_ttl, true, true);
    PERFORM pgleader._check_keys(p_keys, NULL, false);
    IF p_held IS NULL OR p_held < 0 OR p_extra IS NULL OR p_extra < 0 THEN
        RAISE EXCEPTION 'pgleader: held and extra must be zero or positive, got % and %',
            coalesce(p_held::text, 'NULL'), coalesce(p_extra::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    SELECT count(*) INTO m FROM pgleader.set_member AS s
     WHERE s.set_name = p_set AND (s.expires_at > clock_timestamp() OR s.owner = p_owner);
    IF NOT EXISTS (SELECT 1 FROM pgleader.set_member AS s WHERE s.set_name = p_set AND s.owner = p_owner) THEN
        m := m + 1;
    END IF;
    n := p_held + cardinality(p_keys);
    lim := least(greatest((n + m - 1) / m - p_held, 0) + p_extra, cardinality(p_keys));
    RETURN QUERY
    SELECT coalesce(array_agg(a.key ORDER BY a.key), '{}'), coalesce(array_agg(a.token ORDER BY a.key), '{}'),
           coalesce(array_agg(a.expires_at ORDER BY a.key), '{}'), m, clock_timestamp()
      FROM pgleader.acquire_many(p_keys, p_owner, p_ttl, lim, p_floors) AS a;
END
$function$;

CREATE OR REPLACE FUNCTION pgleader.set_release(p_set text, p_owner text, p_keys text[], p_tokens bigint[], p_leave boolean)
 RETURNS TABLE(key text)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
    PERFORM pgleader._check_args(p_set, p_owner, NULL, true, false);
    PERFORM pgleader._check_keys(p_keys, p_tokens, true);
    IF p_leave IS NULL THEN
        RAISE EXCEPTION 'pgleader: leave must not be NULL' USING ERRCODE = '22023';
    END IF;
    IF p_leave THEN
        DELETE FROM pgleader.set_member AS s
         WHERE s.set_name = p_set AND (s.owner = p_owner OR s.expires_at < clock_timestamp() - interval '1 hour');
    END IF;
    RETURN QUERY SELECT * FROM pgleader.release_many(p_owner, p_keys, p_tokens);
END
$function$;

CREATE OR REPLACE FUNCTION pgleader.set_renew(p_set text, p_owner text, p_keys text[], p_tokens bigint[], p_ttl interval, p_held integer)
 RETURNS TABLE(renewed text[], expires_at timestamp with time zone[], members text[], member_held integer[], db_now timestamp with time zone)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    k text[];
    e timestamptz[];
    t timestamptz;
BEGIN
    PERFORM pgleader._check_args(p_set, p_owner, p_ttl, true, true);
    IF p_held IS NULL OR p_held < 0 THEN
        RAISE EXCEPTION 'pgleader: held must be zero or positive, got %', coalesce(p_held::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    IF cardinality(p_keys) > 0 THEN
        SELECT coalesce(array_agg(r.key), '{}'), coalesce(array_agg(r.expires_at), '{}') INTO k, e
          FROM pgleader.renew_many(p_owner, p_keys, p_tokens, p_ttl) AS r;
    ELSE
        PERFORM pgleader._check_keys(p_keys, p_tokens, true);
        PERFORM pgleader._check_ttl(p_ttl, (pgleader._grace()).max_ttl);
        k := '{}';
        e := '{}';
    END IF;
    t := clock_timestamp();
    INSERT INTO pgleader.set_member AS s (set_name, owner, held, joined_at, expires_at)
    VALUES (p_set, p_owner, p_held, t, t + p_ttl)
    ON CONFLICT (set_name, owner) DO UPDATE
       SET held = excluded.held, expires_at = excluded.expires_at,
           joined_at = CASE WHEN s.expires_at <= t THEN t ELSE s.joined_at END
     WHERE s.held <> excluded.held OR s.expires_at < t + p_ttl / 2;
    RETURN QUERY
    SELECT k, e, coalesce(array_agg(s.owner ORDER BY s.owner), '{}'), coalesce(array_agg(s.held ORDER BY s.owner), '{}'), t
      FROM pgleader.set_member AS s
     WHERE s.set_name = p_set AND s.expires_at > t;
END
$function$;

CREATE OR REPLACE FUNCTION pgleader.set_status(p_set text, p_keys text[] DEFAULT NULL::text[])
 RETURNS TABLE(owner text, member boolean, member_held integer, member_expires_at timestamp with time zone, leases integer, db_now timestamp with time zone)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
    PERFORM pgleader._check_args(p_set, NULL, NULL, false, false);
    RETURN QUERY
    WITH m AS (
        SELECT s.owner, s.held, s.expires_at FROM pgleader.set_member AS s
         WHERE s.set_name = p_set AND s.expires_at > clock_timestamp()
    ), h AS (
        SELECT coalesce(l.holder, '') AS holder, count(*)::integer AS n
          FROM unnest(coalesce(p_keys, '{}')) AS u(k)
          LEFT JOIN pgleader.lease AS l ON l.key = u.k AND l.holder IS NOT NULL AND l.expires_at > clock_timestamp()
         GROUP BY 1
    )
    SELECT coalesce(m.owner, h.holder), m.owner IS NOT NULL, m.held, m.expires_at, coalesce(h.n, 0), clock_timestamp()
      FROM m FULL JOIN h ON h.holder = m.owner
     ORDER BY 2 DESC, 1;
END
$function$;

CREATE OR REPLACE FUNCTION pgleader.take(p_key text, p_owner text, p_ttl interval)
 RETURNS TABLE(acquired boolean, holder text, token bigint, expires_at timestamp with time zone, db_now timestamp with time zone, value text, acquired_at timestamp with time zone)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
       AND t >= g.grace_until
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
$function$;

CREATE OR REPLACE FUNCTION pgleader.take(p_key text, p_owner text, p_ttl interval, p_keep interval)
 RETURNS TABLE(acquired boolean, holder text, token bigint, expires_at timestamp with time zone, db_now timestamp with time zone, value text, acquired_at timestamp with time zone)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
       AND t >= g.grace_until THEN
        RETURN QUERY SELECT true, p_owner, r.token, r.expires_at, t, r.value, r.acquired_at;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM pgleader.take(p_key, p_owner, p_ttl);
END
$function$;

CREATE OR REPLACE FUNCTION pgleader.transfer(p_key text, p_to text)
 RETURNS TABLE(transferring boolean, holder text, token bigint, detail text)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
DECLARE
    r pgleader.lease%ROWTYPE;
    t timestamptz;
BEGIN
    PERFORM pgleader._check_args(p_key, p_to, NULL, true, false);

    SELECT * INTO r FROM pgleader.lease AS l WHERE l.key = p_key FOR UPDATE;
    t := clock_timestamp();
    IF NOT FOUND OR r.holder IS NULL OR r.expires_at <= t THEN
        RETURN QUERY SELECT false, NULL::text, coalesce(r.token, 0::bigint), 'nobody holds the lease'::text;
        RETURN;
    END IF;
    IF r.holder = p_to THEN
        RETURN QUERY SELECT false, r.holder, r.token, format('%s already holds the lease', p_to);
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pgleader.candidate AS c WHERE c.key = p_key AND c.owner = p_to AND c.expires_at > t) THEN
        RAISE EXCEPTION 'pgleader: % is not a live candidate of key %', to_json(p_to), to_json(p_key)
            USING ERRCODE = 'PF003',
                  HINT = 'List the candidates with pgleader.candidates(key) or pgleader status; a candidate registers while it waits and listens.';
    END IF;

    UPDATE pgleader.lease AS l SET resign_token = l.token, transfer_to = p_to WHERE l.key = p_key;
    RETURN QUERY SELECT true, r.holder, r.token,
        format('term %s of %s will end at its next renewal and hand off to %s', r.token, r.holder, p_to);
END
$function$;

CREATE OR REPLACE FUNCTION pgleader.withdraw(p_key text, p_owner text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, NULL, true, false);
    DELETE FROM pgleader.candidate AS c WHERE c.key = p_key AND c.owner = p_owner;
    RETURN FOUND;
END
$function$;

ALTER FUNCTION pgleader.acquire(text, text, interval, bigint, text) SECURITY INVOKER;
ALTER FUNCTION pgleader.renew(text, text, bigint, interval) SECURITY INVOKER;
ALTER FUNCTION pgleader.set_tick(text, text, text[], bigint[], interval, integer) SECURITY INVOKER;
ALTER FUNCTION pgleader.fence_claim(text, bigint) SECURITY INVOKER;
ALTER FUNCTION pgleader.fence_write(text, bigint) SECURITY INVOKER;
ALTER FUNCTION pgleader.fence_floor(text) SECURITY INVOKER;
ALTER FUNCTION pgleader.lease(text) SECURITY INVOKER;
ALTER FUNCTION pgleader.holds(text, bigint) SECURITY INVOKER;
ALTER FUNCTION pgleader.candidates(text) SECURITY INVOKER;
ALTER FUNCTION pgleader.grace() SECURITY INVOKER;
ALTER FUNCTION pgleader.notify(text, text, interval) SECURITY INVOKER;

DROP FUNCTION pgleader.grant_steer(name);
DROP FUNCTION pgleader._app_functions();
DROP FUNCTION pgleader.hint_handoff(text, bigint);
DROP FUNCTION pgleader.leases(text);
DROP FUNCTION pgleader._check_key_role(text, text, boolean);
DROP FUNCTION pgleader._refuse(text, text, text);
DROP FUNCTION pgleader._own(text, boolean);
DROP FUNCTION pgleader._privileged(boolean);
DROP TABLE pgleader.steerer;
DROP FUNCTION pgleader._caller();

DELETE FROM pgleader.set_member;
ALTER TABLE pgleader.set_member DROP CONSTRAINT set_member_pkey;
ALTER TABLE pgleader.set_member DROP COLUMN role;
ALTER TABLE pgleader.set_member ADD PRIMARY KEY (set_name, owner);
ALTER TABLE pgleader.fence DROP COLUMN role;
ALTER TABLE pgleader.lease DROP COLUMN role;

GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA pgleader TO PUBLIC;
REVOKE EXECUTE ON FUNCTION pgleader._epoch_bump() FROM PUBLIC;
