-- pgleader's schema, version 17: the statements of a set of 100,000 keys
-- cost less (issue 27). Two changes a caller sees: set_acquire takes at
-- most 10,000 keys a call, and set_renew's member rows count the terms
-- handed to the member; the rest is timing.
--
-- * lease_draw runs only for the draws it can act on. Before, every change
--   of a token ran it (a PL/pgSQL call and a read of the epoch per row: a
--   third of the cost of handing off or acquiring 33,000 keys). It acts
--   when the row carries token_min, when the new token is a multiple of
--   2^40 (the first token of an epoch's range) or at least 2^62 (the range
--   of no epoch); and so that it still refuses every draw once no epoch is
--   left, _epoch_bump now marks every row with token_min when it reaches
--   that point.
-- * renew_many reads the clock once: every term it renews expires at the
--   same instant, the one its statement began at (no later than before),
--   so a set's keys lapse together with its member row.
-- * set_acquire finds the terms handed to the caller through the partial
--   index of handed rows, then keeps those among its keys (a hashed set
--   operation), instead of probing the index once per key it was given.
-- * set_release does not look for terms to free when it handed every one.
-- * set_acquire takes at most 10,000 keys a call, and acquire_many inserts
--   rows for at most as many new keys as it may take (or 1,000): at a cold start of
--   100,000 keys, a campaign's statement took 4 s, most of a term's first
--   TTL, inserting rows other replicas were inserting too.
-- * acquire_many and set_acquire are written so that no plan can cost more
--   than the keys given times the rows they find: the keys drive index
--   lookups, in the order of their own position, and the handed terms to
--   confirm are found before they are updated. Before, with statistics
--   that did not yet describe a set's 100,000 new rows, the planner walked
--   the lease table in key order for a LIMIT and compared every row with
--   every key given, and a campaign ran for seconds past its deadline.
-- * set_renew counts the terms handed to the member and not yet confirmed
--   in the held it records: they are its keys (it confirms them at its next
--   campaign), and the others, who count what is free from the members'
--   rows, campaigned for 66,000 keys they could not take.

-- _epoch_bump moves the cluster to the next epoch and raises every key's
-- counter above the tokens the previous epoch could draw. _grace calls it
-- in the one transaction that fills server_epoch, so it runs once per
-- crash recovery or promotion, and before any term of the new server can
-- be granted (the grace has just begun). Rows another transaction has
-- locked are waited for; on a new server only a pgleader function that
-- found server_epoch filled (so after this transaction) locks them, or a
-- release, which holds its lock for its own statement only. Only the
-- schema's owner may call it: any other role could spend the epochs. With
-- no epoch left it marks every row with token_min, so that lease_draw runs
-- (and refuses) at the next draw of any key.
CREATE OR REPLACE FUNCTION pgleader._epoch_bump()
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    e bigint;
    base bigint;
    t timestamptz;
BEGIN
    -- The new epoch must not be lost by a crash after tokens of it were
    -- handed out: flush this commit even where synchronous_commit = off.
    IF current_setting('synchronous_commit') = 'off' THEN
        PERFORM set_config('synchronous_commit', 'local', true);
    END IF;
    UPDATE pgleader.settings AS s SET epoch = least(s.epoch + 1, 4194304) RETURNING s.epoch INTO e;
    IF NOT FOUND THEN
        -- The settings row was deleted by hand: start it again, above every
        -- counter this server has.
        SELECT least(coalesce(max(l.token) >> 40, 0) + 1, 4194304) INTO e FROM pgleader.lease AS l;
        INSERT INTO pgleader.settings (max_ttl, max_clock_offset, epoch) VALUES (interval '10 minutes', interval '1 second', e);
    END IF;
    IF e >= 4194304 THEN
        UPDATE pgleader.lease AS l SET token_min = greatest(l.token, 1) WHERE l.token_min IS NULL;
        RAISE WARNING 'pgleader: no token epoch left: this server draws no token (22003 at every draw)';
        RETURN e;
    END IF;
    base := e << 40;
    t := clock_timestamp();
    -- A lease a live term holds keeps its token (its holder renews it) and
    -- records token_min for its next draw. Every other lease is free: its
    -- counter moves up, and the row says it is free, as advance does, so it
    -- never shows its old holder with a token it never drew.
    WITH b AS (
        SELECT x.key,
               x.holder IS NOT NULL AND x.expires_at > t AS held,
               CASE WHEN greatest(x.token, coalesce(x.token_min, 0)) < base THEN base
                    WHEN greatest(x.token, coalesce(x.token_min, 0)) > 9223372036854775807 - 1099511627776 THEN 9223372036854775807
                    ELSE greatest(x.token, coalesce(x.token_min, 0)) + 1099511627776 END AS next
          FROM pgleader.lease AS x
    ), kept AS (
        UPDATE pgleader.lease AS l SET token_min = b.next FROM b WHERE l.key = b.key AND b.held
    )
    UPDATE pgleader.lease AS l
       SET token = b.next,
           (holder, acquired_at, renewed_at, expires_at, value, priority, handed_off, resign_token, transfer_to)
             = (SELECT * FROM pgleader._term())
      FROM b
     WHERE l.key = b.key AND NOT b.held;
    RETURN e;
END
$$;

-- A server already past its last epoch: mark its rows now.
UPDATE pgleader.lease AS l SET token_min = greatest(l.token, 1)
 WHERE l.token_min IS NULL AND (SELECT pgleader._epoch()) >= 4194304;

-- lease_draw: only the draws _lease_draw can act on (see above; the
-- function re-checks each condition).
DROP TRIGGER lease_draw ON pgleader.lease;
CREATE TRIGGER lease_draw BEFORE UPDATE OF token ON pgleader.lease
    FOR EACH ROW WHEN (NEW.token IS DISTINCT FROM OLD.token
                       AND (OLD.token_min IS NOT NULL
                            OR NEW.token >= 4611686018427387904
                            OR (NEW.token & 1099511627775) = 0))
    EXECUTE FUNCTION pgleader._lease_draw();

-- renew_many extends, to t + p_ttl where t is the instant the statement
-- read the clock, the lease of each term (p_keys[i], p_owner, p_tokens[i])
-- that still holds it unexpired at t, with renew's rule during the grace,
-- and returns a row for each key it renewed, with the new expiry and
-- whether the term was asked to end (its resign_token is the term's
-- token): a key it does not return is lost (another role's keys too).
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

-- set_acquire is version 16's; the terms handed to p_owner are found by
-- the partial index lease_handed_holder first, kept if among p_keys or
-- p_confirm, and then confirmed key by key; and it takes at most 10,000
-- keys a call, so that its statement stays short (a Set campaigns again
-- at once after a campaign that won).
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

-- set_release is version 15's, and skips the freeing statement when every
-- term was handed off.
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
    handed integer := 0;
    n integer;
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
        GET DIAGNOSTICS n = ROW_COUNT;
        handed := handed + n;
        a := a + m.n;
    END LOOP;
    IF handed < cardinality(p_keys) THEN
        RETURN QUERY
        UPDATE pgleader.lease AS l
           SET (holder, acquired_at, renewed_at, expires_at, value, priority, handed_off, resign_token, transfer_to)
                 = (SELECT * FROM pgleader._term())
          FROM unnest(p_keys, p_tokens) AS u(k, tok)
         WHERE l.key = u.k AND l.holder = p_owner AND l.token = u.tok
           AND (l.role = c OR pgleader._own(l.role, false))
        RETURNING l.key, NULL::text;
    END IF;
END
$$;

-- set_renew is version 15's; the held it records counts the terms handed
-- to p_owner and not yet confirmed (the handed it returns).
CREATE OR REPLACE FUNCTION pgleader.set_renew(p_set text, p_owner text, p_keys text[], p_tokens bigint[], p_ttl interval, p_held integer)
 RETURNS TABLE(renewed text[], expires_at timestamp with time zone[], resign text[], members text[], member_held integer[], member_expires_at timestamp with time zone[], handed integer, db_now timestamp with time zone)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $$
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
    SELECT count(*) INTO h FROM pgleader.lease AS l
     WHERE l.handed_off AND l.holder = p_owner AND l.expires_at > t AND (l.role = c OR pgleader._own(l.role, false));
    INSERT INTO pgleader.set_member AS s (set_name, role, owner, held, joined_at, expires_at)
    VALUES (p_set, c, p_owner, p_held + h, t, t0 + p_ttl)
    ON CONFLICT (set_name, role, owner) DO UPDATE
       SET held = excluded.held, expires_at = excluded.expires_at,
           joined_at = CASE WHEN s.expires_at <= t THEN t ELSE s.joined_at END;
    RETURN QUERY
    SELECT k, e, rs, coalesce(array_agg(s.owner ORDER BY s.owner), '{}'), coalesce(array_agg(s.held ORDER BY s.owner), '{}'),
           coalesce(array_agg(s.expires_at ORDER BY s.owner), '{}'), h, t
      FROM pgleader.set_member AS s
     WHERE s.set_name = p_set AND s.role = c AND s.expires_at > t;
END
$$;


-- acquire_many is version 1's, with plans that cost no more than the keys
-- given times the rows found (see above), and it inserts rows for at most
-- p_limit new keys (or 1,000).
CREATE OR REPLACE FUNCTION pgleader.acquire_many(p_keys text[], p_owner text, p_ttl interval, p_limit integer, p_floors bigint[] DEFAULT NULL::bigint[])
 RETURNS TABLE(key text, token bigint, expires_at timestamp with time zone, db_now timestamp with time zone)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $$
#variable_conflict use_column
DECLARE
    g record;
    t timestamptz;
    f bigint;
    c name := pgleader._caller();
    bad record;
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
    SELECT l.key, l.role INTO bad FROM unnest(p_keys) AS u(k) JOIN pgleader.lease AS l ON l.key = u.k
     WHERE l.role <> c AND NOT pgleader._own(l.role, false) LIMIT 1;
    IF FOUND THEN
        PERFORM pgleader._refuse('acquire it', 'key ' || to_json(bad.key)::text, bad.role);
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
    INSERT INTO pgleader.lease AS l (key)
    SELECT u.k FROM unnest(p_keys) AS u(k)
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
           AND (l.role = c OR pgleader._own(l.role, false))
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

