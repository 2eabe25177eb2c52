-- pgleader's schema, version 27: a set's campaign does less work for the
-- same answer. What set_acquire and acquire_many answer, lock, create and
-- take is version 26's.
--
--   - The rows acquire_many creates for keys never seen took their first
--     token from the column's default, pgleader._epoch_base(), evaluated
--     once per row: about 22 us a row on the development VM, 225 of the
--     300 ms that the insert of 10,000 rows took. The insert now reads the
--     base once per statement (an uncorrelated subquery, with the
--     statement's snapshot, as the default had).
--   - set_acquire checked its keys (each named once, none empty or too
--     long) and acquire_many, which it calls, checked them again: 9 to 21
--     ms each for 50,000 keys. Both now check them once and call
--     _take_free, acquire_many's work without the checks.
--   - A campaign that sends no key (it only confirms handed terms) still
--     ran the role check's join, which read the whole lease table: 11 to
--     13 ms a call at 100,000 leases, 1 to 2.5 ms without it (psql, one
--     session, no term handed to the caller). It now skips it.
--   - set_acquire looked for terms handed to the caller among all the keys
--     it was sent and all it was asked to confirm, even when the caller had
--     no handed term at all: a Set's first campaign sends every key of the
--     set to confirm (100,000 at 100,000 keys, beside the 33,333 of its
--     part). It now first asks the index of handed rows whether the caller
--     has any.
--   - A row no role has taken yet (role NULL) is the caller's to take
--     without calling _own for it; the sort of the keys sent no longer
--     spills to disk (_take_free runs with work_mem = 32MB).
--
-- BenchmarkSetAcquire (migrations/take_bench_test.go) times both versions
-- in one run: a member's first campaign at a cold start of 100,000 keys,
-- taking 10,000, 400 to 472 ms at version 26, 151 to 169 ms at 27 (three
-- runs); a survivor's take of 10,000 of a dead member's 33,333 keys, 162
-- to 178 ms against 155 to 170 ms; and in three later runs a campaign that
-- only confirms, sending the 66,666 keys the caller does not hold and
-- finding no term handed to it, 27 to 31 ms against 10 to 13 ms.

-- _check_floors checks p_floors: NULL, or one valid floor per key.
CREATE FUNCTION pgleader._check_floors(p_floors bigint[], p_count integer)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    f bigint;
BEGIN
    IF p_floors IS NULL THEN
        RETURN;
    END IF;
    IF array_ndims(p_floors) > 1 OR cardinality(p_floors) <> p_count THEN
        RAISE EXCEPTION 'pgleader: floors must be an array of one floor per key (% keys, % floors)',
            p_count, cardinality(p_floors) USING ERRCODE = '22023';
    END IF;
    FOREACH f IN ARRAY p_floors LOOP
        PERFORM pgleader._check_floor(f);
    END LOOP;
END
$$;

-- _take_free is acquire_many after its arguments were checked (by
-- acquire_many or set_acquire): it refuses keys of another role, creates
-- rows for keys never seen, and takes at most p_limit free keys, in key
-- order, skipping rows another transaction holds locked.
CREATE FUNCTION pgleader._take_free(p_keys text[], p_owner text, p_ttl interval, p_limit integer, p_floors bigint[])
RETURNS TABLE(key text, token bigint, expires_at timestamptz, db_now timestamptz)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp
SET enable_nestloop = off
SET enable_hashjoin = on
SET enable_mergejoin = on
SET jit = off
SET work_mem = '32MB' AS $$
#variable_conflict use_column
DECLARE
    g record;
    t timestamptz;
    c name := pgleader._caller();
    bad record;
BEGIN
    -- No key, no refusal: with none (a campaign that only confirms) the
    -- join would still read the whole lease table.
    IF cardinality(p_keys) > 0 THEN
        SELECT l.key, l.role INTO bad FROM unnest(p_keys) AS u(k) JOIN pgleader.lease AS l ON l.key = u.k
         WHERE l.role <> c AND NOT pgleader._own(l.role, false) LIMIT 1;
        IF FOUND THEN
            PERFORM pgleader._refuse('acquire it', 'key ' || to_json(bad.key)::text, bad.role);
        END IF;
    END IF;
    g := pgleader._grace();
    PERFORM pgleader._check_ttl(p_ttl, g.max_ttl);
    IF p_limit = 0 OR cardinality(p_keys) = 0 OR clock_timestamp() < g.grace_until THEN
        RETURN;
    END IF;

    -- Rows for keys never seen, inserted in key order so that concurrent
    -- inserts of the same keys wait in one order.
    -- Not many more than it may take: the keys it takes, the first free
    -- ones in key order, are among the free rows and the first p_limit new
    -- ones. (At least 1,000, so that replicas starting together on a small
    -- set do not all insert the same few keys and wait on each other.)
    -- Each new row's first token is the epoch's base, read once for the
    -- statement (the column's default reads it for every row: about 22 us
    -- a row on the development VM).
    INSERT INTO pgleader.lease AS l (key, token)
    SELECT u.k, (SELECT pgleader._epoch_base()) FROM unnest(p_keys) AS u(k)
     WHERE NOT EXISTS (SELECT 1 FROM pgleader.lease AS x WHERE x.key = u.k)
     ORDER BY u.k
     LIMIT greatest(p_limit, 1000)
    ON CONFLICT (key) DO NOTHING;

    t := clock_timestamp();
    RETURN QUERY
    WITH want AS (
        -- In key order, by a rank the planner cannot take from the lease
        -- table's index: ordered by l.key, a LIMIT could walk the whole
        -- table comparing each row with every key.
        SELECT u.k, coalesce(u.f, 0) AS f, row_number() OVER (ORDER BY u.k) AS i
          FROM unnest(p_keys, p_floors) AS u(k, f) WHERE u.k IS NOT NULL
    ), locked AS (
        SELECT l.key, w.f
          FROM want AS w JOIN pgleader.lease AS l ON l.key = w.k
         WHERE (l.holder IS NULL OR l.expires_at <= t) AND l.token < 9223372036854775807
           AND (l.role IS NULL OR l.role = c OR pgleader._own(l.role, false))
         ORDER BY w.i
         LIMIT p_limit
           FOR UPDATE OF l SKIP LOCKED
    ), won AS (
        UPDATE pgleader.lease AS l
           SET token = greatest(l.token, k.f) + 1, role = coalesce(l.role, c),
               (holder, acquired_at, renewed_at, expires_at, value, priority, handed_off, resign_token, transfer_to)
                 = (SELECT * FROM pgleader._term(p_owner, t, t + p_ttl))
          FROM locked AS k
         WHERE l.key = k.key AND (l.holder IS NULL OR l.expires_at <= t)
        RETURNING l.key, l.token, l.expires_at
    )
    SELECT won.key, won.token, won.expires_at, t FROM won ORDER BY won.key;
END
$$;

CREATE OR REPLACE FUNCTION pgleader.acquire_many(p_keys text[], p_owner text, p_ttl interval, p_limit integer, p_floors bigint[] DEFAULT NULL)
RETURNS TABLE(key text, token bigint, expires_at timestamptz, db_now timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp
SET enable_nestloop = off
SET enable_hashjoin = on
SET enable_mergejoin = on
SET jit = off AS $$
BEGIN
    PERFORM pgleader._check_args('-', p_owner, p_ttl, true, true);
    PERFORM pgleader._check_keys(p_keys, NULL, false);
    IF p_limit IS NULL OR p_limit < 0 THEN
        RAISE EXCEPTION 'pgleader: limit must be zero or positive, got %', coalesce(p_limit::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    PERFORM pgleader._check_floors(p_floors, cardinality(p_keys));
    RETURN QUERY SELECT * FROM pgleader._take_free(p_keys, p_owner, p_ttl, p_limit, p_floors);
END
$$;

CREATE OR REPLACE FUNCTION pgleader.set_acquire(p_set text, p_owner text, p_keys text[], p_ttl interval, p_held integer,
    p_extra integer DEFAULT 0, p_floors bigint[] DEFAULT NULL, p_total integer DEFAULT NULL, p_confirm text[] DEFAULT NULL)
RETURNS TABLE(keys text[], tokens bigint[], expires_at timestamptz[], acquired_at timestamptz[], members integer, db_now timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp
SET enable_nestloop = off
SET enable_hashjoin = on
SET enable_mergejoin = on
SET jit = off AS $$
#variable_conflict use_column
DECLARE
    m integer;
    n integer;
    lim integer;
    g record;
    t timestamptz;
    ck text[] := '{}';
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
    PERFORM pgleader._check_floors(p_floors, cardinality(p_keys));
    g := pgleader._grace();
    PERFORM pgleader._check_ttl(p_ttl, g.max_ttl);
    t := clock_timestamp();
    -- The terms to confirm first, then their rows, key by key: a join of
    -- the two in one statement could be planned as a nested loop over both.
    -- Only when the caller has a handed term at all (the index of handed
    -- rows answers that without reading the keys sent).
    IF EXISTS (SELECT 1 FROM pgleader.lease AS x WHERE x.handed_off AND x.holder = p_owner) THEN
        SELECT coalesce(array_agg(q.key), '{}') INTO ck FROM (
            SELECT x.key FROM pgleader.lease AS x
             WHERE x.handed_off AND x.holder = p_owner AND x.expires_at > t AND t >= g.grace_until
            INTERSECT
            SELECT u.k FROM unnest(p_keys || coalesce(p_confirm, '{}')) AS u(k)) AS q;
    END IF;
    IF cardinality(ck) > 0 THEN
        PERFORM FROM pgleader.lease AS l, unnest(ck) AS u(k)
         WHERE l.key = u.k AND l.handed_off AND l.holder = p_owner
           FOR NO KEY UPDATE OF l;
        t := clock_timestamp();
    END IF;
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
              FROM pgleader._take_free(p_keys, p_owner, p_ttl, lim, p_floors) AS a
            UNION ALL
            SELECT u.k, u.tok, u.e, u.a FROM unnest(ck, ct, ce, ca) AS u(k, tok, e, a)) AS w;
END
$$;

REVOKE ALL ON FUNCTION pgleader._check_floors(bigint[], integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgleader._take_free(text[], text, interval, integer, bigint[]) FROM PUBLIC;
