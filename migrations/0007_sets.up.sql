-- pgleader, version 7: sets of keys, shared evenly by the replicas that
-- campaign for them (issue 16).
--
-- A set is a name and the keys its replicas campaign for; each key keeps its
-- own lease row, token and timeline, exactly as a key of an Elector. What a
-- set adds is batching and spread:
--
-- * acquire_many, renew_many and release_many do the lease operations for
--   many keys in one statement, each key with the same rules as acquire,
--   renew and release of versions 3 and 4 (the row locked FOR UPDATE before
--   its expiry is read, the failover grace and max_ttl of _grace and
--   _check_ttl, floors checked by _check_floor, tokens drawn from the row).
-- * set_member records which replicas campaign for a set, with an expiry,
--   and how many of its keys each holds, so every replica can compute its
--   fair share ceil(keys / live members).
-- * set_acquire, set_renew and set_release are what a replica sends: one
--   statement per campaign, per renewal tick and per release batch. Adding
--   or removing keys needs no statement: the keys are arguments.
--
-- Nothing here notifies. Every win is a row: a key is reported won only by
-- the UPDATE that wrote the row naming the owner and the token.

CREATE TABLE pgleader.set_member (
    set_name   text        NOT NULL,
    owner      text        NOT NULL,
    held       integer     NOT NULL DEFAULT 0 CHECK (held >= 0),
    joined_at  timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (set_name, owner),
    CONSTRAINT set_member_name_length CHECK (octet_length(set_name) BETWEEN 1 AND 200),
    CONSTRAINT set_member_owner_length CHECK (octet_length(owner) BETWEEN 1 AND 200)
);

COMMENT ON TABLE pgleader.set_member IS
    'pgleader set membership: the replicas campaigning for a set, until expires_at, and how many of its keys each held at its last renewal.';

-- _check_keys raises 22023 unless p_keys is a one-dimensional array of
-- distinct keys, each as _check_args requires (not NULL, 1 to 200 bytes),
-- and, when p_need_tokens, p_tokens holds one positive token per key.
CREATE FUNCTION pgleader._check_keys(p_keys text[], p_tokens bigint[], p_need_tokens boolean)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgleader, pg_temp AS $$
#variable_conflict use_column
DECLARE
    bad text;
BEGIN
    IF p_keys IS NULL OR array_ndims(p_keys) > 1 THEN
        RAISE EXCEPTION 'pgleader: keys must be a one-dimensional array, not %', coalesce(p_keys::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    SELECT u.k INTO bad FROM unnest(p_keys) AS u(k)
     WHERE u.k IS NULL OR u.k = '' OR octet_length(u.k) > 200 LIMIT 1;
    IF FOUND THEN
        PERFORM pgleader._check_args(bad, NULL, NULL, false, false);
    END IF;
    IF (SELECT count(DISTINCT u.k) FROM unnest(p_keys) AS u(k)) <> cardinality(p_keys) THEN
        RAISE EXCEPTION 'pgleader: keys must be distinct' USING ERRCODE = '22023';
    END IF;
    IF p_need_tokens THEN
        IF p_tokens IS NULL OR array_ndims(p_tokens) > 1 OR cardinality(p_tokens) <> cardinality(p_keys) THEN
            RAISE EXCEPTION 'pgleader: tokens must be an array of one token per key (% keys, % tokens)',
                cardinality(p_keys), coalesce(cardinality(p_tokens)::text, 'NULL') USING ERRCODE = '22023';
        END IF;
        IF EXISTS (SELECT 1 FROM unnest(p_tokens) AS u(t) WHERE u.t IS NULL OR u.t < 1) THEN
            RAISE EXCEPTION 'pgleader: tokens must be positive' USING ERRCODE = '22023';
        END IF;
    END IF;
END
$$;

-- acquire_many takes, for p_owner, up to p_limit of p_keys whose lease is
-- free or expired, each drawing its next token (one more than the larger of
-- its counter and its floor, p_floors[i] for p_keys[i] when p_floors is
-- given), and returns one row per key won. Keys held by another term, and
-- rows another transaction has locked (an acquire, a renewal, a guarded
-- write of the holder), are skipped, not waited for: rows are locked FOR
-- UPDATE in key order with SKIP LOCKED, so concurrent calls never deadlock
-- and never wait on each other. The expiry is read after the lock, on
-- clock_timestamp(). During the server's grace (version 4) it takes
-- nothing. A key whose counter is at the largest bigint (set by hand) is
-- never taken. A failed acquire consumes no token.
CREATE FUNCTION pgleader.acquire_many(p_keys text[], p_owner text, p_ttl interval, p_limit integer,
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

-- renew_many extends, to clock_timestamp() + p_ttl, the lease of each term
-- (p_keys[i], p_owner, p_tokens[i]) that still holds it unexpired, with
-- renew's rule during the grace, and returns a row for each key it renewed,
-- with the new expiry: a key it does not return is lost. Like renew it
-- takes FOR NO KEY UPDATE, so it passes the holder's own open
-- lease-guarded transactions. (Rows only for what changed: joining the
-- input back costs a nested loop the planner cannot size for an array.)
CREATE FUNCTION pgleader.renew_many(p_owner text, p_keys text[], p_tokens bigint[], p_ttl interval)
RETURNS TABLE (key text, expires_at timestamptz)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
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
$$;

-- release_many frees the lease of each term (p_keys[i], p_owner,
-- p_tokens[i]) that still holds it, and returns a row for each key it
-- released.
CREATE FUNCTION pgleader.release_many(p_owner text, p_keys text[], p_tokens bigint[])
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

-- set_acquire is a replica's campaign for a set: it counts the set's live
-- members (p_owner included), computes p_owner's share ceil(n / members) of
-- the n = p_held + cardinality(p_keys) keys it knows, and takes up to
-- share - p_held + p_extra of p_keys (the set's keys it does not hold) with
-- acquire_many. p_extra lets the replica the others agree on take keys
-- nobody else will (see docs/sets.md). It returns the keys won, their
-- tokens and expiries, the number of live members, and the database clock,
-- in one row.
CREATE FUNCTION pgleader.set_acquire(p_set text, p_owner text, p_keys text[], p_ttl interval,
                                     p_held integer, p_extra integer DEFAULT 0, p_floors bigint[] DEFAULT NULL)
RETURNS TABLE (keys text[], tokens bigint[], expires_at timestamptz[], members integer, db_now timestamptz)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
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
$$;

-- set_renew is a replica's renewal tick for a set: renew_many of the keys
-- it holds, and its membership, in one statement. The member row is written
-- when the replica joins, when p_held changed, and when less than half of
-- p_ttl is left of it, so a healthy replica writes it about once per p_ttl/2.
-- A member row expires no later than the leases renewed with it, so the
-- keys of a replica that died are free no sooner than its membership is
-- gone, and the others count the right share when they take them. It
-- returns the keys renewed and their expiries (a key not among them is
-- lost), the live members with their held counts, and the database clock,
-- in one row.
CREATE FUNCTION pgleader.set_renew(p_set text, p_owner text, p_keys text[], p_tokens bigint[], p_ttl interval,
                                   p_held integer)
RETURNS TABLE (renewed text[], expires_at timestamptz[], members text[], member_held integer[], db_now timestamptz)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
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
$$;

-- set_release is release_many, returning the keys released, and, when
-- p_leave, removes p_owner from the set's members in the same statement, so
-- the others count their new share at their next campaign. Member rows of
-- the set expired over an hour ago are deleted too.
CREATE FUNCTION pgleader.set_release(p_set text, p_owner text, p_keys text[], p_tokens bigint[], p_leave boolean)
RETURNS TABLE (key text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
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
$$;

-- set_status reports a set for operators: each live member with the keys
-- it held at its last renewal, and, for p_keys, how many are held by a
-- live lease, per holder. It changes nothing.
CREATE FUNCTION pgleader.set_status(p_set text, p_keys text[] DEFAULT NULL)
RETURNS TABLE (owner text, member boolean, member_held integer, member_expires_at timestamptz, leases integer, db_now timestamptz)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgleader, pg_temp AS $$
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
$$;

-- grant_usage, as in version 6, and: the set members table, whose rows a
-- replica inserts, updates and deletes.
CREATE OR REPLACE FUNCTION pgleader.grant_usage(p_role name, p_history regclass DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
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
    IF p_history IS NOT NULL THEN
        EXECUTE format('GRANT SELECT ON TABLE %s TO %I', p_history, p_role);
    END IF;
END
$$;
