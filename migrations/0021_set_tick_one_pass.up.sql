-- pgleader's schema, version 21: a set's tick in one pass over its rows.
-- set_tick answers as before and renews the same terms, but a tick whose
-- terms are all live and not near their expiry now costs one UPDATE of
-- their rows, where version 20 paid for three passes over them (a
-- statement that locked them, the UPDATE, and a comparison of the keys
-- asked with the keys renewed) and checked its keys (sorted, for
-- distinctness) before it began. At 33,333 held keys of 100,000 on the
-- development VM that was 250 ms against 120 ms for a plain UPDATE of the
-- rows (docs/sets.md, issue 27).
--
-- Version 20's rule stays: a lease that lapsed while the tick waited for
-- its row's lock is not renewed. The one pass keeps it by a window w
-- (a second, or a quarter of the TTL if that is shorter): it reads the
-- clock t0, renews only the terms whose lease expires after t0 + w, and
-- reads the clock again when its UPDATE is done. Every row was locked
-- before that second reading, so if it is not past t0 + w, no term it
-- renewed had lapsed when its row was locked. If it is past (the UPDATE
-- waited, or the machine is slow), the pass is undone (a subtransaction
-- rolled back) and the tick falls back to version 20's renew_many for
-- every key. The terms the pass left alone (near their expiry, a stale
-- token, lost, or anything during the grace after a failover) go to
-- renew_many too, which locks, reads the clock, and renews what is live;
-- only then are the keys checked, and an error leaves nothing changed.
-- renew_many and set_renew are unchanged.

CREATE OR REPLACE FUNCTION pgleader.set_tick(p_set text, p_owner text, p_keys text[], p_tokens bigint[], p_ttl interval,
                                             p_held integer)
RETURNS TABLE (lost text[], resign text[], expires_at timestamptz, members text[], member_held integer[],
               member_expires_at timestamptz[], handed integer, db_now timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
#variable_conflict use_column
DECLARE
    c name := pgleader._caller();
    t0 timestamptz := clock_timestamp();
    g record;
    w interval;
    n integer := 0;
    rs text[] := '{}';
    e timestamptz;
    rk text[];
    rt bigint[];
    got text[];
    e2 timestamptz;
    rs2 text[];
    gone text[] := '{}';
    t timestamptz;
    h integer;
BEGIN
    PERFORM pgleader._check_args(p_set, p_owner, p_ttl, true, true);
    IF p_held IS NULL OR p_held < 0 THEN
        RAISE EXCEPTION 'pgleader: held must be zero or positive, got %', coalesce(p_held::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    IF p_keys IS NULL OR array_ndims(p_keys) > 1 OR p_tokens IS NULL OR array_ndims(p_tokens) > 1
       OR cardinality(p_tokens) <> cardinality(p_keys) THEN
        PERFORM pgleader._check_keys(p_keys, p_tokens, true);
    END IF;
    g := pgleader._grace();
    PERFORM pgleader._check_ttl(p_ttl, g.max_ttl);
    w := least(interval '1 second', p_ttl / 4);

    -- The one pass. During the grace it renews nothing: a term is then
    -- judged by its expiry on the clock read after its lock (renew_many).
    IF cardinality(p_keys) > 0 AND t0 >= g.grace_until THEN
        BEGIN
            WITH r AS (
                UPDATE pgleader.lease AS l
                   SET renewed_at = t0, expires_at = t0 + p_ttl, role = coalesce(l.role, c)
                  FROM unnest(p_keys, p_tokens) AS u(k, tok)
                 WHERE l.key = u.k AND l.holder = p_owner AND l.token = u.tok AND u.tok > 0
                   AND l.expires_at > t0 + w
                   AND (l.role = c OR pgleader._own(l.role, false))
                RETURNING l.key, coalesce(l.resign_token = u.tok, false) AS resign
            )
            SELECT count(*)::integer, coalesce(array_agg(r.key) FILTER (WHERE r.resign), '{}') INTO n, rs FROM r;
            IF clock_timestamp() > t0 + w THEN
                RAISE EXCEPTION 'pgleader: set_tick''s pass outlasted its window' USING ERRCODE = 'PL021';
            END IF;
        EXCEPTION WHEN SQLSTATE 'PL021' THEN
            n := 0;
            rs := '{}';
        END;
        IF n > 0 THEN
            e := t0 + p_ttl;
        END IF;
    END IF;

    IF n < cardinality(p_keys) THEN
        PERFORM pgleader._check_keys(p_keys, p_tokens, true);
        IF n = 0 THEN
            rk := p_keys;
            rt := p_tokens;
        ELSE
            SELECT coalesce(array_agg(u.k), '{}'), coalesce(array_agg(u.tok), '{}') INTO rk, rt
              FROM unnest(p_keys, p_tokens) AS u(k, tok)
             WHERE NOT EXISTS (SELECT FROM pgleader.lease AS l
                                WHERE l.key = u.k AND l.holder = p_owner AND l.token = u.tok
                                  AND l.renewed_at = t0 AND l.expires_at = t0 + p_ttl);
        END IF;
        SELECT coalesce(array_agg(r.key), '{}'), min(r.expires_at), coalesce(array_agg(r.key) FILTER (WHERE r.resign), '{}')
          INTO got, e2, rs2
          FROM pgleader.renew_many(p_owner, rk, rt, p_ttl) AS r;
        SELECT coalesce(array_agg(d.k), '{}') INTO gone
          FROM (SELECT u.k FROM unnest(rk) AS u(k) EXCEPT ALL SELECT r.k FROM unnest(got) AS r(k)) AS d;
        rs := rs || rs2;
        e := least(e, e2);
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
    SELECT gone, rs, e, coalesce(array_agg(s.owner ORDER BY s.owner), '{}'), coalesce(array_agg(s.held ORDER BY s.owner), '{}'),
           coalesce(array_agg(s.expires_at ORDER BY s.owner), '{}'), h, t
      FROM pgleader.set_member AS s
     WHERE s.set_name = p_set AND s.role = c AND s.expires_at > t;
END
$$;
