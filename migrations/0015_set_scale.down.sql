-- Reverts 0015_set_scale.up.sql: version 14's set_renew, set_tick,
-- set_acquire and set_release, granted again, and no index on handed-off
-- holders.

DROP FUNCTION pgleader.set_tick(text, text, text[], bigint[], interval, integer);
DROP FUNCTION pgleader.set_renew(text, text, text[], bigint[], interval, integer);
DROP FUNCTION pgleader.set_acquire(text, text, text[], interval, integer, integer, bigint[], integer);
DROP INDEX pgleader.lease_handed_holder;

CREATE FUNCTION pgleader.set_renew(p_set text, p_owner text, p_keys text[], p_tokens bigint[], p_ttl interval, p_held integer)
RETURNS TABLE(renewed text[], expires_at timestamptz[], resign text[], members text[], member_held integer[], db_now timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
#variable_conflict use_column
DECLARE
    k text[] := '{}';
    e timestamptz[] := '{}';
    rs text[] := '{}';
    t timestamptz;
    c name := pgleader._caller();
BEGIN
    PERFORM pgleader._check_args(p_set, p_owner, p_ttl, true, true);
    IF p_held IS NULL OR p_held < 0 THEN
        RAISE EXCEPTION 'pgleader: held must be zero or positive, got %', coalesce(p_held::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    IF cardinality(p_keys) > 0 THEN
        SELECT coalesce(array_agg(r.key), '{}'), coalesce(array_agg(r.expires_at), '{}'),
               coalesce(array_agg(r.key) FILTER (WHERE r.resign), '{}') INTO k, e, rs
          FROM pgleader.renew_many(p_owner, p_keys, p_tokens, p_ttl) AS r;
    ELSE
        PERFORM pgleader._check_keys(p_keys, p_tokens, true);
        PERFORM pgleader._check_ttl(p_ttl, (pgleader._grace()).max_ttl);
    END IF;
    t := clock_timestamp();
    INSERT INTO pgleader.set_member AS s (set_name, role, owner, held, joined_at, expires_at)
    VALUES (p_set, c, p_owner, p_held, t, t + p_ttl)
    ON CONFLICT (set_name, role, owner) DO UPDATE
       SET held = excluded.held, expires_at = excluded.expires_at,
           joined_at = CASE WHEN s.expires_at <= t THEN t ELSE s.joined_at END
     WHERE s.held <> excluded.held OR s.expires_at < t + p_ttl / 2;
    RETURN QUERY
    SELECT k, e, rs, coalesce(array_agg(s.owner ORDER BY s.owner), '{}'), coalesce(array_agg(s.held ORDER BY s.owner), '{}'), t
      FROM pgleader.set_member AS s
     WHERE s.set_name = p_set AND s.role = c AND s.expires_at > t;
END
$$;

CREATE FUNCTION pgleader.set_tick(p_set text, p_owner text, p_keys text[], p_tokens bigint[], p_ttl interval,
                                  p_held integer)
RETURNS TABLE (lost text[], resign text[], expires_at timestamptz, members text[], member_held integer[], db_now timestamptz)
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
    SELECT (SELECT coalesce(array_agg(d.k), '{}')
              FROM (SELECT u.k FROM unnest(p_keys) AS u(k)
                    EXCEPT ALL
                    SELECT r.k FROM unnest(s.renewed) AS r(k)) AS d),
           s.resign,
           (SELECT min(x.e) FROM unnest(s.expires_at) AS x(e)),
           s.members, s.member_held, s.db_now
      FROM pgleader.set_renew(p_set, p_owner, p_keys, p_tokens, p_ttl, p_held) AS s
$$;

CREATE FUNCTION pgleader.set_acquire(p_set text, p_owner text, p_keys text[], p_ttl interval, p_held integer,
                                                p_extra integer DEFAULT 0, p_floors bigint[] DEFAULT NULL)
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
    g := pgleader._grace();
    PERFORM pgleader._check_ttl(p_ttl, g.max_ttl);
    t := clock_timestamp();
    WITH confirmed AS (
        UPDATE pgleader.lease AS l
           SET renewed_at = t, expires_at = t + p_ttl, handed_off = false
         WHERE l.key = ANY (p_keys) AND l.holder = p_owner AND l.handed_off AND l.expires_at > t
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
    n := p_held + cardinality(p_keys);
    lim := least(greatest((n + m - 1) / m - p_held - cardinality(ck), 0) + p_extra, cardinality(p_keys) - cardinality(ck));
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

CREATE OR REPLACE FUNCTION pgleader.set_release(p_set text, p_owner text, p_keys text[], p_tokens bigint[], p_leave boolean,
                                     p_hand_off boolean[] DEFAULT NULL)
RETURNS TABLE(key text, successor text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
#variable_conflict use_column
DECLARE
    c name := pgleader._caller();
    g record;
    t timestamptz;
BEGIN
    PERFORM pgleader._check_args(p_set, p_owner, NULL, true, false);
    PERFORM pgleader._check_keys(p_keys, p_tokens, true);
    IF p_leave IS NULL THEN
        RAISE EXCEPTION 'pgleader: leave must not be NULL' USING ERRCODE = '22023';
    END IF;
    IF p_hand_off IS NOT NULL AND (array_ndims(p_hand_off) > 1 OR cardinality(p_hand_off) <> cardinality(p_keys)) THEN
        RAISE EXCEPTION 'pgleader: hand_off must be an array of one flag per key (% keys, % flags)',
            cardinality(p_keys), cardinality(p_hand_off) USING ERRCODE = '22023';
    END IF;
    IF p_leave THEN
        DELETE FROM pgleader.set_member AS s
         WHERE s.set_name = p_set AND s.role = c
           AND (s.owner = p_owner OR s.expires_at < clock_timestamp() - interval '1 hour');
    END IF;
    g := pgleader._grace();
    t := clock_timestamp();
    RETURN QUERY
    WITH ending AS (
        SELECT l.key, coalesce(u.h, false) AND t >= g.grace_until AND l.token < 9223372036854775807 AS h
          FROM pgleader.lease AS l
          JOIN unnest(p_keys, p_tokens, coalesce(p_hand_off, '{}')) AS u(k, tok, h) ON u.k = l.key
         WHERE l.holder = p_owner AND l.token = u.tok AND (l.role = c OR pgleader._own(l.role, false))
         ORDER BY l.key
           FOR UPDATE OF l
    ), slot AS (
        -- Member m's n-th key (from 0) raises it to held + n + 1: taking
        -- the slots in order of that level deals each key to the fewest.
        SELECT s.owner, least(s.expires_at, t + g.max_ttl) AS expires_at,
               row_number() OVER (ORDER BY s.held + n, s.owner) AS j
          FROM pgleader.set_member AS s,
               generate_series(0, (SELECT count(*) FROM ending AS e WHERE e.h) - 1) AS n
         WHERE s.set_name = p_set AND s.role = c AND s.owner <> p_owner AND s.expires_at > t
    ), dealt AS (
        SELECT e.key, row_number() OVER (ORDER BY e.key) AS j FROM ending AS e WHERE e.h
    ), handed AS (
        UPDATE pgleader.lease AS l
           SET token = l.token + 1,
               (holder, acquired_at, renewed_at, expires_at, value, priority, handed_off, resign_token, transfer_to)
                 = (SELECT * FROM pgleader._term(s.owner, t, s.expires_at, NULL, 0, true))
          FROM dealt AS d JOIN slot AS s ON s.j = d.j
         WHERE l.key = d.key
        RETURNING l.key, l.holder
    ), freed AS (
        UPDATE pgleader.lease AS l
           SET (holder, acquired_at, renewed_at, expires_at, value, priority, handed_off, resign_token, transfer_to)
                 = (SELECT * FROM pgleader._term())
          FROM ending AS e
         WHERE l.key = e.key AND NOT EXISTS (SELECT 1 FROM handed AS h WHERE h.key = e.key)
        RETURNING l.key
    )
    SELECT h.key, h.holder FROM handed AS h
    UNION ALL
    SELECT f.key, NULL::text FROM freed AS f;
END
$$;

REVOKE ALL ON FUNCTION pgleader.set_renew(text, text, text[], bigint[], interval, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgleader.set_tick(text, text, text[], bigint[], interval, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgleader.set_acquire(text, text, text[], interval, integer, integer, bigint[]) FROM PUBLIC;

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
