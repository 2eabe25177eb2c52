-- pgleader's schema, version 15: sets of 100,000 keys. A replica's tick
-- writes its member row every time, with an expiry taken before its leases
-- are renewed (the row lapses no later than any of them), and answers with
-- every member's expiry and the number of terms handed to the replica that
-- wait for its confirmation; so a replica at its share need not campaign
-- to learn that a member died or handed it keys. set_acquire takes the
-- number of keys its caller knows (it may send only part of them) and
-- confirms every term handed to its caller, found by a partial index on
-- the holders of handed-off rows, and set_release ends 33,000 terms in a
-- few hundred milliseconds, not minutes. Functions whose result or arguments
-- change are dropped and created again, and granted again at the end, as
-- in version 14.

CREATE INDEX lease_handed_holder ON pgleader.lease (holder) WHERE handed_off;

DROP FUNCTION pgleader.set_tick(text, text, text[], bigint[], interval, integer);
DROP FUNCTION pgleader.set_renew(text, text, text[], bigint[], interval, integer);
DROP FUNCTION pgleader.set_acquire(text, text, text[], interval, integer, integer, bigint[]);

-- set_renew is a replica's renewal tick for a set: renew_many of the keys
-- it holds, and its membership, in one statement. The member row is
-- written at every tick, with held and an expiry of p_ttl from before the
-- renewals, so it expires no later than the leases renewed with it: the
-- keys of a replica that died are free no sooner than its membership is
-- gone, and the others count the right share when they take them. It
-- returns the keys renewed and their expiries (a key not among them is
-- lost), the keys renewed whose terms were asked to end, the live members
-- of the caller's role with their held counts and expiries, the number of
-- unexpired terms handed to p_owner and not yet confirmed, and the
-- database clock, in one row.
CREATE FUNCTION pgleader.set_renew(p_set text, p_owner text, p_keys text[], p_tokens bigint[], p_ttl interval, p_held integer)
RETURNS TABLE(renewed text[], expires_at timestamptz[], resign text[], members text[], member_held integer[],
              member_expires_at timestamptz[], handed integer, db_now timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
#variable_conflict use_column
DECLARE
    k text[] := '{}';
    e timestamptz[] := '{}';
    rs text[] := '{}';
    t0 timestamptz := clock_timestamp();
    t timestamptz;
    h integer;
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
    VALUES (p_set, c, p_owner, p_held, t, t0 + p_ttl)
    ON CONFLICT (set_name, role, owner) DO UPDATE
       SET held = excluded.held, expires_at = excluded.expires_at,
           joined_at = CASE WHEN s.expires_at <= t THEN t ELSE s.joined_at END;
    SELECT count(*) INTO h FROM pgleader.lease AS l
     WHERE l.handed_off AND l.holder = p_owner AND l.expires_at > t AND (l.role = c OR pgleader._own(l.role, false));
    RETURN QUERY
    SELECT k, e, rs, coalesce(array_agg(s.owner ORDER BY s.owner), '{}'), coalesce(array_agg(s.held ORDER BY s.owner), '{}'),
           coalesce(array_agg(s.expires_at ORDER BY s.owner), '{}'), h, t
      FROM pgleader.set_member AS s
     WHERE s.set_name = p_set AND s.role = c AND s.expires_at > t;
END
$$;

-- set_tick is set_renew with a short answer, for a tick that renews
-- thousands of keys: instead of every key renewed with its expiry, the keys
-- of p_keys it did not renew (lost) and the earliest expiry it set (NULL if
-- none); each renewed key's lease expires no sooner than that. Keys are
-- distinct (set_renew checks), so EXCEPT finds the lost ones with one hash,
-- not a scan per key.
CREATE FUNCTION pgleader.set_tick(p_set text, p_owner text, p_keys text[], p_tokens bigint[], p_ttl interval,
                                  p_held integer)
RETURNS TABLE (lost text[], resign text[], expires_at timestamptz, members text[], member_held integer[],
               member_expires_at timestamptz[], handed integer, db_now timestamptz)
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
    SELECT (SELECT coalesce(array_agg(d.k), '{}')
              FROM (SELECT u.k FROM unnest(p_keys) AS u(k)
                    EXCEPT ALL
                    SELECT r.k FROM unnest(s.renewed) AS r(k)) AS d),
           s.resign,
           (SELECT min(x.e) FROM unnest(s.expires_at) AS x(e)),
           s.members, s.member_held, s.member_expires_at, s.handed, s.db_now
      FROM pgleader.set_renew(p_set, p_owner, p_keys, p_tokens, p_ttl, p_held) AS s
$$;

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

-- set_release is version 14's, reworked for 33,000 keys (it took 107 s:
-- the planner, which cannot size the CTEs, rescanned the dealing for every
-- key). The hand-offs are counted out to the members first (member by
-- member, each key to the one holding fewest: a member's n-th key raises it
-- to held + n + 1, and the k lowest levels win), then each member's part is
-- one UPDATE whose term comes from one _term call, and every term of
-- p_keys still held by p_owner after that is freed by one more. A term
-- that no longer holds its lease is neither handed off nor freed.
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
    hk text[] := '{}';
    ht bigint[] := '{}';
    m record;
    a integer := 1;
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
    IF t >= g.grace_until AND p_hand_off IS NOT NULL THEN
        SELECT coalesce(array_agg(u.k ORDER BY u.k), '{}'), coalesce(array_agg(u.tok ORDER BY u.k), '{}') INTO hk, ht
          FROM unnest(p_keys, p_tokens, p_hand_off) AS u(k, tok, h) WHERE u.h;
    END IF;
    FOR m IN
        SELECT w.owner, w.expires_at, count(*)::integer AS n
          FROM (SELECT s.owner, least(s.expires_at, t + g.max_ttl) AS expires_at
                  FROM pgleader.set_member AS s, generate_series(0, cardinality(hk) - 1) AS i
                 WHERE s.set_name = p_set AND s.role = c AND s.owner <> p_owner AND s.expires_at > t
                 ORDER BY s.held + i, s.owner
                 LIMIT cardinality(hk)) AS w
         GROUP BY w.owner, w.expires_at
         ORDER BY w.owner
    LOOP
        RETURN QUERY
        UPDATE pgleader.lease AS l
           SET token = l.token + 1,
               (holder, acquired_at, renewed_at, expires_at, value, priority, handed_off, resign_token, transfer_to)
                 = (SELECT * FROM pgleader._term(m.owner, t, m.expires_at, NULL, 0, true))
          FROM unnest(hk[a:a + m.n - 1], ht[a:a + m.n - 1]) AS u(k, tok)
         WHERE l.key = u.k AND l.holder = p_owner AND l.token = u.tok AND l.token < 9223372036854775807
           AND (l.role = c OR pgleader._own(l.role, false))
        RETURNING l.key, l.holder;
        a := a + m.n;
    END LOOP;
    RETURN QUERY
    UPDATE pgleader.lease AS l
       SET (holder, acquired_at, renewed_at, expires_at, value, priority, handed_off, resign_token, transfer_to)
             = (SELECT * FROM pgleader._term())
      FROM unnest(p_keys, p_tokens) AS u(k, tok)
     WHERE l.key = u.k AND l.holder = p_owner AND l.token = u.tok
       AND (l.role = c OR pgleader._own(l.role, false))
    RETURNING l.key, NULL::text;
END
$$;

REVOKE ALL ON FUNCTION pgleader.set_renew(text, text, text[], bigint[], interval, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgleader.set_tick(text, text, text[], bigint[], interval, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgleader.set_acquire(text, text, text[], interval, integer, integer, bigint[], integer) FROM PUBLIC;

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
