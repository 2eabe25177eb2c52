-- pgleader's schema, version 26: set_bind and set_wake name the terms they
-- lapse (key, holder, token and acquisition) and the instant they lapsed
-- them, besides counting them. A Set logs them, and the fault-injection
-- checker (internal/chaos) ends those terms there when a failover lost the
-- lapse from the lease table's audit; version 25 answered only a count.
-- Their arguments and everything else they do are version 25's.

DROP FUNCTION pgleader.set_wake(text, text, text[]);
DROP FUNCTION pgleader.set_bind(text, text, interval, text[]);

-- set_bind binds the calling session to p_owner's membership of p_set: it
-- takes the member lock (unless this session holds it), records the
-- session in the member's row (creating the row as a tick would, holding
-- nothing, if there is none) and answers bound. If the row names an
-- earlier session of the member on this server run that has ended, it
-- first lapses, outside the grace, the keys among p_keys (the set's keys)
-- the member acquired since that binding, as a watcher's wake would
-- (lapsed counts them; lapsed_keys, lapsed_tokens and lapsed_acquired name
-- their terms, and lapsed_at is the expiry they were given, NULL when none
-- was lapsed): the caller ended those terms when that session
-- ended, and a watcher that was not waiting on the lock at that instant
-- would otherwise leave them to their expiry. It binds nothing when the
-- server could end this session sooner than p_ttl after it last heard from
-- the client (refusal says why: see bind_refusal), or when another session
-- holds the lock (a live earlier session of the same member, or a watcher
-- that was just granted it: the caller tries again later).
CREATE FUNCTION pgleader.set_bind(p_set text, p_owner text, p_ttl interval, p_keys text[] DEFAULT NULL)
RETURNS TABLE(bound boolean, refusal text, lapsed integer, lapsed_keys text[], lapsed_tokens bigint[],
              lapsed_acquired timestamptz[], lapsed_at timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp
SET enable_nestloop = off
SET enable_hashjoin = on
SET enable_mergejoin = on
SET jit = off AS $$
#variable_conflict use_column
DECLARE
    c name := pgleader._caller();
    why text;
    lk record;
    t timestamptz;
    g record;
    old pgleader.set_member%ROWTYPE;
    n integer := 0;
    ks text[] := '{}';
    toks bigint[] := '{}';
    acq timestamptz[] := '{}';
BEGIN
    PERFORM pgleader._check_args(p_set, p_owner, p_ttl, true, true);
    IF p_keys IS NOT NULL THEN
        PERFORM pgleader._check_keys(p_keys, NULL, false);
    END IF;
    g := pgleader._grace();
    PERFORM pgleader._check_ttl(p_ttl, g.max_ttl);
    why := pgleader.bind_refusal(p_ttl);
    IF why IS NOT NULL THEN
        RETURN QUERY SELECT false, why, 0, ks, toks, acq, NULL::timestamptz;
        RETURN;
    END IF;
    lk := pgleader._member_lock(p_set, c, p_owner);
    IF NOT pgleader._member_mine(p_set, c, p_owner) AND NOT pg_try_advisory_lock(lk.classid, lk.objid) THEN
        RETURN QUERY SELECT false, NULL::text, 0, ks, toks, acq, NULL::timestamptz;
        RETURN;
    END IF;
    SELECT * INTO old FROM pgleader.set_member AS s
     WHERE s.set_name = p_set AND s.role = c AND s.owner = p_owner
       FOR UPDATE;
    t := clock_timestamp();
    IF FOUND AND p_keys IS NOT NULL AND old.pid IS NOT NULL AND old.pid <> pg_backend_pid()
       AND old.server_start = pg_postmaster_start_time() AND t >= g.grace_until
       AND NOT pgleader._member_held(p_set, c, p_owner, old.pid) THEN
        WITH gone AS (
            UPDATE pgleader.lease AS l
               SET expires_at = t
              FROM unnest(p_keys) AS u(k)
             WHERE l.key = u.k AND l.holder = p_owner AND l.acquired_at >= old.bound_at AND l.expires_at > t
               AND (l.role = c OR pgleader._own(l.role, false))
            RETURNING l.key AS k, l.token AS tok, l.acquired_at AS a
        )
        SELECT count(*)::integer, coalesce(array_agg(g.k ORDER BY g.k), '{}'), coalesce(array_agg(g.tok ORDER BY g.k), '{}'),
               coalesce(array_agg(g.a ORDER BY g.k), '{}')
          INTO n, ks, toks, acq FROM gone AS g;
    END IF;
    INSERT INTO pgleader.set_member AS s (set_name, role, owner, held, joined_at, expires_at, pid, server_start, bound_at)
    VALUES (p_set, c, p_owner, 0, t, t + p_ttl, pg_backend_pid(), pg_postmaster_start_time(), t)
    ON CONFLICT (set_name, role, owner) DO UPDATE
       SET pid = excluded.pid, server_start = excluded.server_start, bound_at = excluded.bound_at;
    RETURN QUERY SELECT true, NULL::text, n, ks, toks, acq, CASE WHEN n > 0 THEN t END;
END
$$;


-- set_wake is a watcher's step. Of the caller's role's members of p_set
-- other than p_owner, dead are those bound on this server run whose bound
-- session ended (its pid no longer holds their member lock). Outside the
-- grace, and when p_keys is not NULL, it lapses (expiry set to now) every
-- key among p_keys that a dead member holds and acquired at or after its
-- binding, then unbinds the dead members and ends their membership (their
-- row's expiry set to now): lapsed counts the keys, lapsed_keys,
-- lapsed_holders, lapsed_tokens and lapsed_acquired name their terms, and
-- lapsed_at is the expiry they were given (NULL when none was lapsed). p_keys are the set's
-- keys the caller does not hold: a key is lapsed only for a set that names
-- it. Then, unless it names dead members without having been sent keys
-- (the caller calls again with them), it lets go of every member lock of
-- the set this session holds (granted to wait_member): a dead member's new
-- session cannot bind before its keys are lapsed. It answers, in watch,
-- the live bound member that follows p_owner in owner order (round the
-- ring), NULL if none: the caller waits on it next.
CREATE FUNCTION pgleader.set_wake(p_set text, p_owner text, p_keys text[])
RETURNS TABLE(lapsed integer, dead text[], watch text, lapsed_keys text[], lapsed_holders text[],
              lapsed_tokens bigint[], lapsed_acquired timestamptz[], lapsed_at timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp
SET enable_nestloop = off
SET enable_hashjoin = on
SET enable_mergejoin = on
SET jit = off AS $$
#variable_conflict use_column
DECLARE
    c name := pgleader._caller();
    g record;
    t timestamptz;
    d text[];
    n integer := 0;
    ks text[] := '{}';
    hs text[] := '{}';
    toks bigint[] := '{}';
    acq timestamptz[] := '{}';
    m record;
    lk record;
    nxt text;
BEGIN
    PERFORM pgleader._check_args(p_set, p_owner, NULL, true, false);
    IF p_keys IS NOT NULL THEN
        PERFORM pgleader._check_keys(p_keys, NULL, false);
    END IF;
    g := pgleader._grace();
    -- The dead members' rows are locked as they are read (a locked row is
    -- read again, and checked again, once its lock is granted), so that a
    -- set_bind of a new session of theirs comes before this read or after
    -- the lapse.
    SELECT coalesce(array_agg(x.owner ORDER BY x.owner), '{}') INTO d
      FROM (SELECT s.owner FROM pgleader.set_member AS s
             WHERE s.set_name = p_set AND s.role = c AND s.owner <> p_owner AND s.pid IS NOT NULL
               AND s.server_start = pg_postmaster_start_time()
               AND NOT pgleader._member_held(p_set, c, s.owner, s.pid)
             ORDER BY s.owner
               FOR UPDATE OF s) AS x;
    t := clock_timestamp();
    IF p_keys IS NOT NULL AND cardinality(d) > 0 AND t >= g.grace_until THEN
        WITH gone AS (
            UPDATE pgleader.lease AS l
               SET expires_at = t
              FROM unnest(p_keys) AS u(k), pgleader.set_member AS s
             WHERE l.key = u.k AND s.set_name = p_set AND s.role = c AND s.owner = ANY (d)
               AND l.holder = s.owner AND l.acquired_at >= s.bound_at AND l.expires_at > t
               AND (l.role = c OR pgleader._own(l.role, false))
            RETURNING l.key AS k, l.holder AS h, l.token AS tok, l.acquired_at AS a
        )
        SELECT count(*)::integer, coalesce(array_agg(g.k ORDER BY g.k), '{}'), coalesce(array_agg(g.h ORDER BY g.k), '{}'),
               coalesce(array_agg(g.tok ORDER BY g.k), '{}'), coalesce(array_agg(g.a ORDER BY g.k), '{}')
          INTO n, ks, hs, toks, acq FROM gone AS g;
        UPDATE pgleader.set_member AS s
           SET pid = NULL, server_start = NULL, bound_at = NULL, expires_at = least(s.expires_at, t)
         WHERE s.set_name = p_set AND s.role = c AND s.owner = ANY (d);
    END IF;
    FOR m IN SELECT s.owner FROM pgleader.set_member AS s
              WHERE s.set_name = p_set AND s.role = c AND (p_keys IS NOT NULL OR cardinality(d) = 0) LOOP
        lk := pgleader._member_lock(p_set, c, m.owner);
        WHILE pgleader._member_mine(p_set, c, m.owner) LOOP
            PERFORM pg_advisory_unlock(lk.classid, lk.objid);
        END LOOP;
    END LOOP;
    SELECT x.owner INTO nxt
      FROM (SELECT s.owner FROM pgleader.set_member AS s
             WHERE s.set_name = p_set AND s.role = c AND s.owner <> p_owner AND s.pid IS NOT NULL
               AND s.server_start = pg_postmaster_start_time()
               AND pgleader._member_held(p_set, c, s.owner, s.pid)) AS x
     ORDER BY x.owner <= p_owner, x.owner
     LIMIT 1;
    RETURN QUERY SELECT n, d, nxt, ks, hs, toks, acq, CASE WHEN n > 0 THEN t END;
END
$$;


REVOKE ALL ON FUNCTION pgleader.set_bind(text, text, interval, text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgleader.set_wake(text, text, text[]) FROM PUBLIC;

-- The roles granted the application's functions get these two again: a
-- dropped function's grants went with it.
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
