-- Reverts 0014_set_handoff.up.sql: version 1's renew_many, set_renew,
-- set_tick, set_acquire and set_release, granted again to the roles that
-- could execute the application's functions. A term handed to a member and
-- not yet confirmed stays handed_off until it expires; version 1 never
-- confirms it.

DROP FUNCTION pgleader.set_tick(text, text, text[], bigint[], interval, integer);
DROP FUNCTION pgleader.set_renew(text, text, text[], bigint[], interval, integer);
DROP FUNCTION pgleader.renew_many(text, text[], bigint[], interval);
DROP FUNCTION pgleader.set_release(text, text, text[], bigint[], boolean, boolean[]);
DROP FUNCTION pgleader.set_acquire(text, text, text[], interval, integer, integer, bigint[]);

CREATE FUNCTION pgleader.renew_many(p_owner text, p_keys text[], p_tokens bigint[], p_ttl interval)
RETURNS TABLE(key text, expires_at timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
#variable_conflict use_column
DECLARE
    g record;
    c name := pgleader._caller();
BEGIN
    PERFORM pgleader._check_args('-', p_owner, p_ttl, true, true);
    PERFORM pgleader._check_keys(p_keys, p_tokens, true);
    g := pgleader._grace();
    PERFORM pgleader._check_ttl(p_ttl, g.max_ttl);

    RETURN QUERY
    UPDATE pgleader.lease AS l
       SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() + p_ttl, role = coalesce(l.role, c)
      FROM unnest(p_keys, p_tokens) AS u(k, tok)
     WHERE l.key = u.k AND l.holder = p_owner AND l.token = u.tok
       AND l.expires_at > clock_timestamp()
       AND (clock_timestamp() >= g.grace_until OR l.expires_at > clock_timestamp() + g.max_clock_offset)
       AND (l.role = c OR pgleader._own(l.role, false))
    RETURNING l.key, l.expires_at;
END
$$;

CREATE FUNCTION pgleader.set_acquire(p_set text, p_owner text, p_keys text[], p_ttl interval, p_held integer,
                                                p_extra integer DEFAULT 0, p_floors bigint[] DEFAULT NULL)
RETURNS TABLE(keys text[], tokens bigint[], expires_at timestamptz[], members integer, db_now timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
#variable_conflict use_column
DECLARE
    m integer;
    n integer;
    lim integer;
    c name := pgleader._caller();
BEGIN
    PERFORM pgleader._check_args(p_set, p_owner, p_ttl, true, true);
    PERFORM pgleader._check_keys(p_keys, NULL, false);
    IF p_held IS NULL OR p_held < 0 OR p_extra IS NULL OR p_extra < 0 THEN
        RAISE EXCEPTION 'pgleader: held and extra must be zero or positive, got % and %',
            coalesce(p_held::text, 'NULL'), coalesce(p_extra::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    SELECT count(*) INTO m FROM pgleader.set_member AS s
     WHERE s.set_name = p_set AND s.role = c AND (s.expires_at > clock_timestamp() OR s.owner = p_owner);
    IF NOT EXISTS (SELECT 1 FROM pgleader.set_member AS s WHERE s.set_name = p_set AND s.role = c AND s.owner = p_owner) THEN
        m := m + 1;
    END IF;
    n := p_held + cardinality(p_keys);
    lim := least(greatest((n + m - 1) / m - p_held, 0) + p_extra, cardinality(p_keys));
    RETURN QUERY
    SELECT coalesce(array_agg(a.key ORDER BY a.key), '{}'), coalesce(array_agg(a.token ORDER BY a.key), '{}'),
           coalesce(array_agg(a.expires_at ORDER BY a.key), '{}'), m, clock_timestamp()
      FROM pgleader.acquire_many(p_keys, p_owner, p_ttl, lim, p_floors) AS a;
END
$$;

CREATE FUNCTION pgleader.set_renew(p_set text, p_owner text, p_keys text[], p_tokens bigint[], p_ttl interval, p_held integer)
RETURNS TABLE(renewed text[], expires_at timestamptz[], members text[], member_held integer[], db_now timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
#variable_conflict use_column
DECLARE
    k text[];
    e timestamptz[];
    t timestamptz;
    c name := pgleader._caller();
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
    INSERT INTO pgleader.set_member AS s (set_name, role, owner, held, joined_at, expires_at)
    VALUES (p_set, c, p_owner, p_held, t, t + p_ttl)
    ON CONFLICT (set_name, role, owner) DO UPDATE
       SET held = excluded.held, expires_at = excluded.expires_at,
           joined_at = CASE WHEN s.expires_at <= t THEN t ELSE s.joined_at END
     WHERE s.held <> excluded.held OR s.expires_at < t + p_ttl / 2;
    RETURN QUERY
    SELECT k, e, coalesce(array_agg(s.owner ORDER BY s.owner), '{}'), coalesce(array_agg(s.held ORDER BY s.owner), '{}'), t
      FROM pgleader.set_member AS s
     WHERE s.set_name = p_set AND s.role = c AND s.expires_at > t;
END
$$;

CREATE FUNCTION pgleader.set_tick(p_set text, p_owner text, p_keys text[], p_tokens bigint[], p_ttl interval,
                                  p_held integer)
RETURNS TABLE (lost text[], expires_at timestamptz, members text[], member_held integer[], db_now timestamptz)
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
    SELECT (SELECT coalesce(array_agg(d.k), '{}')
              FROM (SELECT u.k FROM unnest(p_keys) AS u(k)
                    EXCEPT ALL
                    SELECT r.k FROM unnest(s.renewed) AS r(k)) AS d),
           (SELECT min(x.e) FROM unnest(s.expires_at) AS x(e)),
           s.members, s.member_held, s.db_now
      FROM pgleader.set_renew(p_set, p_owner, p_keys, p_tokens, p_ttl, p_held) AS s
$$;

CREATE FUNCTION pgleader.set_release(p_set text, p_owner text, p_keys text[], p_tokens bigint[], p_leave boolean)
RETURNS TABLE(key text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
#variable_conflict use_column
DECLARE
    c name := pgleader._caller();
BEGIN
    PERFORM pgleader._check_args(p_set, p_owner, NULL, true, false);
    PERFORM pgleader._check_keys(p_keys, p_tokens, true);
    IF p_leave IS NULL THEN
        RAISE EXCEPTION 'pgleader: leave must not be NULL' USING ERRCODE = '22023';
    END IF;
    IF p_leave THEN
        DELETE FROM pgleader.set_member AS s
         WHERE s.set_name = p_set AND s.role = c
           AND (s.owner = p_owner OR s.expires_at < clock_timestamp() - interval '1 hour');
    END IF;
    RETURN QUERY SELECT * FROM pgleader.release_many(p_owner, p_keys, p_tokens);
END
$$;

REVOKE ALL ON FUNCTION pgleader.renew_many(text, text[], bigint[], interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgleader.set_renew(text, text, text[], bigint[], interval, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgleader.set_tick(text, text, text[], bigint[], interval, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgleader.set_release(text, text, text[], bigint[], boolean) FROM PUBLIC;
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
