-- Reverts 0016_set_confirm_own.up.sql: version 15's set_acquire, granted
-- again.

DROP FUNCTION pgleader.set_acquire(text, text, text[], interval, integer, integer, bigint[], integer, text[]);

-- set_acquire is a replica's campaign for a set. It first confirms every
-- term handed to p_owner (by set_release) and not yet confirmed: renewed to
-- p_ttl from now, no longer handed_off, returned as won with the token it
-- was handed; never during the grace. Then it counts the set's live
-- members of the caller's role (p_owner included), computes p_owner's share
-- ceil(n / members) of the n = p_total keys it knows (p_held +
-- cardinality(p_keys) when NULL: p_keys may be only part of the keys it
-- does not hold), and takes up to share - p_held - (terms confirmed) +
-- p_extra of p_keys with acquire_many. p_extra lets the replica the others
-- agree on take keys nobody else will (see docs/sets.md). It returns the
-- keys won, their tokens, expiries and acquired_at (a confirmed term's:
-- its hand-off), the number of live members, and the database clock, in
-- one row.
CREATE FUNCTION pgleader.set_acquire(p_set text, p_owner text, p_keys text[], p_ttl interval, p_held integer,
                                     p_extra integer DEFAULT 0, p_floors bigint[] DEFAULT NULL,
                                     p_total integer DEFAULT NULL)
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
    WITH confirmed AS (
        UPDATE pgleader.lease AS l
           SET renewed_at = t, expires_at = t + p_ttl, handed_off = false
         WHERE l.handed_off AND l.holder = p_owner AND l.expires_at > t
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
    lim := least(greatest((n + m - 1) / m - p_held - cardinality(ck), 0) + p_extra, cardinality(p_keys));
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

REVOKE ALL ON FUNCTION pgleader.set_acquire(text, text, text[], interval, integer, integer, bigint[], integer) FROM PUBLIC;

-- The roles granted the application's functions get the new one too.
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
