-- pgleader, version 13: the functions are the only door.
--
-- Until now grant_usage gave an application role SELECT, INSERT and UPDATE
-- on the tables and EXECUTE on every function: such a role could lower a
-- fence or a counter, stretch an expiry past max_ttl, or end another
-- service's term with the values lease() shows. From this version:
--
-- * The tables belong to the schema's owner and no other role has any
--   privilege on them. The functions an application calls run as the owner
--   (SECURITY DEFINER, search_path pinned, every argument checked as
--   before); the internal helpers (_…), the setters and the grant functions
--   are executable by the owner alone; grant_usage grants USAGE on the
--   schema and EXECUTE on the application's functions, nothing else.
-- * A key belongs to the role that first acquired it (lease.role), a fence
--   resource to the role that first claimed it (fence.role), and a set's
--   membership is kept per role (set_member.role). A role acts only on its
--   own keys and resources; the schema's owner acts on all of them; a role
--   given grant_steer may also resign, transfer and advance other roles'
--   keys. Replicas under one role trust one another, as before.
-- * The caller is the role the session runs as: SET ROLE's role, or the
--   session's user. A SECURITY DEFINER function does not change either, so
--   _caller() reads them there; no role can name itself as another without
--   PostgreSQL letting it SET ROLE to it.

-- Who calls. current_setting('role') is the role of SET ROLE ('none' when
-- none was set); PostgreSQL lets a session set only a role its user may
-- become. These helpers are PL/pgSQL, whose plans a session keeps: a SQL
-- function that cannot be inlined is planned again in every statement.
CREATE FUNCTION pgleader._caller()
RETURNS name
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pgleader, pg_temp AS $$
BEGIN
    RETURN coalesce(nullif(current_setting('role'), 'none'), session_user)::name;
END
$$;

-- Roles that may steer other roles' keys (resign, transfer, advance).
CREATE TABLE pgleader.steerer (
    role       name        PRIMARY KEY,
    granted_at timestamptz NOT NULL
);

-- Whether the caller may act on keys that are not its own: the schema's
-- owner (and its members, superusers included) always; a steer role when
-- p_steer.
CREATE FUNCTION pgleader._privileged(p_steer boolean)
RETURNS boolean
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    c name := pgleader._caller();
BEGIN
    IF pg_has_role(c, (SELECT n.nspowner FROM pg_catalog.pg_namespace AS n WHERE n.nspname = 'pgleader'), 'USAGE') THEN
        RETURN true;
    END IF;
    RETURN p_steer AND EXISTS (SELECT 1 FROM pgleader.steerer AS s
                                 JOIN pg_catalog.pg_roles AS ro ON ro.rolname = s.role
                                WHERE pg_has_role(c, ro.oid, 'USAGE'));
END
$$;

-- Whether the caller may act on a key or resource of p_role (NULL: nobody's
-- yet): its own, a role it is a member of (it could SET ROLE to it anyway),
-- or any when _privileged.
CREATE FUNCTION pgleader._own(p_role text, p_steer boolean)
RETURNS boolean
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    c name;
BEGIN
    IF p_role IS NULL THEN
        RETURN true;
    END IF;
    c := pgleader._caller();
    IF p_role = c THEN
        RETURN true;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles AS ro WHERE ro.rolname = p_role AND pg_has_role(c, ro.oid, 'USAGE')) THEN
        RETURN true;
    END IF;
    RETURN pgleader._privileged(p_steer);
END
$$;

CREATE FUNCTION pgleader._refuse(p_what text, p_name text, p_role text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'pgleader: % belongs to role %; role % may not %', p_name, quote_ident(p_role),
            quote_ident(pgleader._caller()), p_what
        USING ERRCODE = '42501',
              HINT = 'A key or fence belongs to the role that first acquired or claimed it. Use one of your own, or ask the schema''s owner (or a role given pgleader.grant_steer) to steer it.';
END
$$;

-- Raises 42501 unless the caller may act on p_key (a key without a row is
-- nobody's).
CREATE FUNCTION pgleader._check_key_role(p_key text, p_what text, p_steer boolean)
RETURNS void
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    rl text;
BEGIN
    SELECT l.role INTO rl FROM pgleader.lease AS l WHERE l.key = p_key;
    IF NOT pgleader._own(rl, p_steer) THEN
        PERFORM pgleader._refuse(p_what, 'key ' || to_json(p_key)::text, rl);
    END IF;
END
$$;

-- TTLs in hours, minutes and seconds only. PostgreSQL compares intervals
-- counting a month as 30 days and a day as 24 hours, but adds them to a
-- timestamp by the calendar and the session's time zone: '1000 years
-- -360000 days 9 minutes' compared below max_ttl and still gave a term
-- 5242 days. _check_args, as in version 3, and: a TTL with a day, month or
-- year part is refused.
CREATE OR REPLACE FUNCTION pgleader._check_args(p_key text, p_owner text, p_ttl interval, p_need_owner boolean, p_need_ttl boolean)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pgleader, pg_temp AS $$
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
    IF p_need_ttl AND (date_part('year', p_ttl) <> 0 OR date_part('month', p_ttl) <> 0 OR date_part('day', p_ttl) <> 0) THEN
        RAISE EXCEPTION 'pgleader: ttl must be given in hours, minutes and seconds, not days, months or years, got %', p_ttl
            USING ERRCODE = '22023';
    END IF;
END
$$;

-- _check_candidate, as in version 6, and: the candidate interval too.
CREATE OR REPLACE FUNCTION pgleader._check_candidate(p_candidate interval, p_priority integer)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pgleader, pg_temp AS $$
BEGIN
    IF p_candidate IS NOT NULL AND p_candidate < interval '1 microsecond' THEN
        RAISE EXCEPTION 'pgleader: candidate ttl must be at least 1 microsecond, got %', p_candidate USING ERRCODE = '22023';
    END IF;
    IF date_part('year', p_candidate) <> 0 OR date_part('month', p_candidate) <> 0 OR date_part('day', p_candidate) <> 0 THEN
        RAISE EXCEPTION 'pgleader: candidate ttl must be given in hours, minutes and seconds, not days, months or years, got %', p_candidate
            USING ERRCODE = '22023';
    END IF;
    IF p_priority IS NULL THEN
        RAISE EXCEPTION 'pgleader: priority must not be NULL' USING ERRCODE = '22023';
    END IF;
END
$$;

-- The tables: ownership recorded in the rows, by the role's name (text, not
-- name: a lease row stays small, so its renewals stay on its page). A
-- renamed role loses its keys until the owner renames them too.
ALTER TABLE pgleader.lease ADD COLUMN role text;
ALTER TABLE pgleader.fence ADD COLUMN role text;
-- Memberships last one TTL and are renewed on every tick: start them again.
DELETE FROM pgleader.set_member;
ALTER TABLE pgleader.set_member ADD COLUMN role text NOT NULL;
ALTER TABLE pgleader.set_member DROP CONSTRAINT set_member_pkey;
ALTER TABLE pgleader.set_member ADD PRIMARY KEY (set_name, role, owner);

-- The settings' shared lock: any role that can connect can take an
-- advisory lock, so a lease operation no longer waits for it. When it is
-- taken exclusively (by a setter, or by a session that should not), the
-- operation reads the settings row FOR SHARE instead, which waits only for
-- a setter's own row lock: a setter locks the row before it checks the
-- live terms, so the operation commits before that check or reads the new
-- value, as with the advisory lock. Only roles with a privilege on the
-- table can lock the row, and now only the owner has one.
CREATE OR REPLACE FUNCTION pgleader._grace(OUT grace_until timestamptz, OUT max_ttl interval, OUT max_clock_offset interval)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    k record := pgleader._settings_lock();
BEGIN
    IF pg_try_advisory_xact_lock_shared(k.classid, k.objid)
       AND current_setting('transaction_isolation') = 'read committed' THEN
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
$$;

-- _lock_settings, as in version 11, and: the settings row too. A lease
-- operation that found the advisory lock taken holds the row FOR SHARE
-- until its transaction ends; a setter queued for that row would hold the
-- advisory lock meanwhile, and every lease operation would read the row
-- instead, for as long as that transaction lasts. So a setter tries for the
-- row as it does for the advisory lock, NOWAIT, within the same 5 seconds,
-- and then gives up (55P03).
CREATE OR REPLACE FUNCTION pgleader._lock_settings()
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    k record := pgleader._settings_lock();
    have_advisory boolean := false;
BEGIN
    FOR i IN 1..500 LOOP
        IF NOT have_advisory THEN
            have_advisory := pg_try_advisory_xact_lock(k.classid, k.objid);
        END IF;
        IF have_advisory THEN
            BEGIN
                PERFORM 1 FROM pgleader.settings AS s FOR UPDATE NOWAIT;
                RETURN;
            EXCEPTION WHEN lock_not_available THEN
                NULL; -- a lease operation's transaction still reads the row
            END;
        END IF;
        PERFORM pg_sleep(0.01);
    END LOOP;
    RAISE EXCEPTION 'pgleader: the settings are in use by lease operations whose transactions stayed open for 5 seconds'
        USING ERRCODE = '55P03',
              HINT = 'A lease operation (acquire, renew, a set''s tick, …) inside a long transaction holds them until it ends. Retry, or end that transaction (see pg_locks: locktype advisory, classid 1885826148, or a row lock on pgleader.settings).';
END
$$;

-- campaign, as in version 11, and: only on the caller's keys, checked on the
-- locked row (a refusal ends the statement, and the lock with it); a win
-- records the caller as the key's role if it had none.
CREATE OR REPLACE FUNCTION pgleader.campaign(p_key text, p_owner text, p_ttl interval, p_floor bigint, p_value text,
                                             p_priority integer, p_candidate interval)
RETURNS TABLE(acquired boolean, holder text, token bigint, expires_at timestamptz, db_now timestamptz, value text, acquired_at timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
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
    IF NOT pgleader._own(r.role, false) THEN
        PERFORM pgleader._refuse('acquire it', 'key ' || to_json(p_key)::text, r.role);
    END IF;
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
           value = p_value, resign_token = NULL, priority = p_priority, handed_off = false, transfer_to = NULL,
           role = coalesce(l.role, pgleader._caller())
     WHERE l.key = p_key
    RETURNING l.token, l.expires_at INTO r.token, r.expires_at;
    DELETE FROM pgleader.candidate AS c WHERE c.key = p_key AND (c.owner = p_owner OR c.expires_at <= t);

    RETURN QUERY SELECT true, p_owner, r.token, r.expires_at, t, p_value, t;
END
$$;

-- acquire_many, as in version 11, and: refuses keys of another role (42501)
-- before it takes any; a win records the caller as the key's role.
CREATE OR REPLACE FUNCTION pgleader.acquire_many(p_keys text[], p_owner text, p_ttl interval, p_limit integer,
                                                 p_floors bigint[] DEFAULT NULL)
RETURNS TABLE(key text, token bigint, expires_at timestamptz, db_now timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
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
    SELECT l.key, l.role INTO bad FROM pgleader.lease AS l
     WHERE l.key = ANY (p_keys) AND l.role <> c AND NOT pgleader._own(l.role, false) LIMIT 1;
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
           AND (l.role = c OR pgleader._own(l.role, false))
         ORDER BY l.key
         LIMIT p_limit
           FOR UPDATE OF l SKIP LOCKED
    ), won AS (
        UPDATE pgleader.lease AS l
           SET holder = p_owner, token = greatest(l.token, k.f) + 1,
               acquired_at = t, renewed_at = t, expires_at = t + p_ttl,
               value = NULL, priority = 0, handed_off = false, transfer_to = NULL, resign_token = NULL,
               role = coalesce(l.role, c)
          FROM locked AS k
         WHERE l.key = k.key AND (l.holder IS NULL OR l.expires_at <= t)
        RETURNING l.key, l.token, l.expires_at
    )
    SELECT won.key, won.token, won.expires_at, t FROM won ORDER BY won.key;
END
$$;

-- advance, as in version 8, and: only by the key's role, a steer role or the
-- owner, checked on the locked row. A row it creates belongs to nobody until
-- an acquire wins it.
CREATE OR REPLACE FUNCTION pgleader.advance(p_key text, p_floor bigint)
RETURNS TABLE(advanced boolean, token bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    r pgleader.lease%ROWTYPE;
    g record;
BEGIN
    PERFORM pgleader._check_args(p_key, NULL, NULL, false, false);
    PERFORM pgleader._check_floor(p_floor);
    g := pgleader._grace();

    r := pgleader._lock_row(p_key);
    IF NOT pgleader._own(r.role, true) THEN
        PERFORM pgleader._refuse('advance it', 'key ' || to_json(p_key)::text, r.role);
    END IF;

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
$$;

-- hand_off, as in version 6, and: only on the caller's keys, checked on the
-- locked row (and, when the term does not hold it, on the key's row, so
-- that another role's key is refused whatever the term named).
CREATE OR REPLACE FUNCTION pgleader.hand_off(p_key text, p_owner text, p_token bigint, p_to text DEFAULT NULL)
RETURNS TABLE(released boolean, successor text, token bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
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
    IF FOUND AND NOT pgleader._own(r.role, false) THEN
        PERFORM pgleader._refuse('hand it off', 'key ' || to_json(p_key)::text, r.role);
    END IF;
    IF NOT FOUND THEN
        PERFORM pgleader._check_key_role(p_key, 'hand it off', false);
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
$$;

-- take, as in version 11, and: only on the caller's keys.
CREATE OR REPLACE FUNCTION pgleader.take(p_key text, p_owner text, p_ttl interval)
RETURNS TABLE(acquired boolean, holder text, token bigint, expires_at timestamptz, db_now timestamptz, value text, acquired_at timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    c name := pgleader._caller();
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
       AND (l.role = c OR pgleader._own(l.role, false))
    RETURNING l.* INTO r;
    IF FOUND THEN
        DELETE FROM pgleader.candidate AS c WHERE c.key = p_key AND c.owner = p_owner;
        RETURN QUERY SELECT true, p_owner, r.token, r.expires_at, t, r.value, r.acquired_at;
        RETURN;
    END IF;
    SELECT * INTO r FROM pgleader.lease AS l WHERE l.key = p_key;
    IF NOT pgleader._own(r.role, false) THEN
        PERFORM pgleader._refuse('take it', 'key ' || to_json(p_key)::text, r.role);
    END IF;
    IF r.holder IS NOT NULL AND r.expires_at > t THEN
        RETURN QUERY SELECT false, r.holder, r.token, r.expires_at, t, r.value, r.acquired_at;
    ELSE
        RETURN QUERY SELECT false, NULL::text, coalesce(r.token, 0::bigint), NULL::timestamptz, t, NULL::text, NULL::timestamptz;
    END IF;
END
$$;

-- take with keep, as in version 11, and: only on the caller's keys.
CREATE OR REPLACE FUNCTION pgleader.take(p_key text, p_owner text, p_ttl interval, p_keep interval)
RETURNS TABLE(acquired boolean, holder text, token bigint, expires_at timestamptz, db_now timestamptz, value text, acquired_at timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
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
    IF NOT pgleader._own(r.role, false) THEN
        PERFORM pgleader._refuse('take it', 'key ' || to_json(p_key)::text, r.role);
    END IF;
    IF r.holder = p_owner AND r.handed_off AND r.expires_at > t AND r.expires_at >= t + p_keep
       AND t >= g.grace_until THEN
        RETURN QUERY SELECT true, p_owner, r.token, r.expires_at, t, r.value, r.acquired_at;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM pgleader.take(p_key, p_owner, p_ttl);
END
$$;

-- renew_term, as in version 10, and: only on the caller's keys; a renewal
-- of a term held across the upgrade to version 13 makes its key the
-- renewing role's (the holder renews within RenewEvery).
CREATE OR REPLACE FUNCTION pgleader.renew_term(p_key text, p_owner text, p_token bigint, p_ttl interval)
RETURNS TABLE(expires_at timestamptz, resign boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    c name := pgleader._caller();
    g record;
    e timestamptz;
    rs boolean;
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, p_ttl, true, true);
    g := pgleader._grace();
    PERFORM pgleader._check_ttl(p_ttl, g.max_ttl);

    UPDATE pgleader.lease AS l
       SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() + p_ttl, handed_off = false,
           role = coalesce(l.role, c)
     WHERE l.key = p_key AND l.holder = p_owner AND l.token = p_token
       AND l.expires_at > clock_timestamp()
       AND (clock_timestamp() >= g.grace_until OR l.expires_at > clock_timestamp() + g.max_clock_offset)
       AND (l.role = c OR pgleader._own(l.role, false))
    RETURNING l.expires_at, coalesce(l.resign_token = p_token, false) INTO e, rs;
    IF NOT FOUND THEN
        PERFORM pgleader._check_key_role(p_key, 'renew it', false);
    END IF;
    RETURN QUERY SELECT e, coalesce(rs, false);
END
$$;

-- renew_term with min_term, as in version 10, and: only on the caller's keys.
CREATE OR REPLACE FUNCTION pgleader.renew_term(p_key text, p_owner text, p_token bigint, p_ttl interval, p_min_term interval)
RETURNS TABLE(expires_at timestamptz, resign boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    c name := pgleader._caller();
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
       SET renewed_at = t, expires_at = t + p_ttl, handed_off = false, role = coalesce(l.role, c)
     WHERE l.key = p_key AND l.holder = p_owner AND l.token = p_token
       AND l.expires_at > t
       AND (t >= g.grace_until OR l.expires_at > t + g.max_clock_offset)
       AND (l.role = c OR pgleader._own(l.role, false))
    RETURNING l.expires_at,
              coalesce(l.resign_token = p_token, false)
              OR (p_min_term IS NOT NULL AND t - l.acquired_at >= p_min_term
                  AND EXISTS (SELECT 1 FROM pgleader.candidate AS c
                               WHERE c.key = p_key AND c.owner <> p_owner
                                 AND c.expires_at > t AND c.priority > l.priority))
      INTO e, rs;
    IF NOT FOUND THEN
        PERFORM pgleader._check_key_role(p_key, 'renew it', false);
    END IF;
    RETURN QUERY SELECT e, coalesce(rs, false);
END
$$;

-- release, as in version 6, and: only on the caller's keys.
CREATE OR REPLACE FUNCTION pgleader.release(p_key text, p_owner text, p_token bigint)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    c name := pgleader._caller();
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, NULL, true, false);

    UPDATE pgleader.lease AS l
       SET holder = NULL, acquired_at = NULL, renewed_at = NULL, expires_at = NULL,
           value = NULL, resign_token = NULL, handed_off = false, transfer_to = NULL
     WHERE l.key = p_key AND l.holder = p_owner AND l.token = p_token
       AND (l.role = c OR pgleader._own(l.role, false));
    IF FOUND THEN
        RETURN true;
    END IF;
    PERFORM pgleader._check_key_role(p_key, 'release it', false);
    RETURN false;
END
$$;

-- release_many, as in version 7, and: only the caller's keys (others are
-- not released and not returned).
CREATE OR REPLACE FUNCTION pgleader.release_many(p_owner text, p_keys text[], p_tokens bigint[])
RETURNS TABLE(key text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
#variable_conflict use_column
DECLARE
    c name := pgleader._caller();
BEGIN
    PERFORM pgleader._check_args('-', p_owner, NULL, true, false);
    PERFORM pgleader._check_keys(p_keys, p_tokens, true);

    RETURN QUERY
    UPDATE pgleader.lease AS l
       SET holder = NULL, acquired_at = NULL, renewed_at = NULL, expires_at = NULL,
           value = NULL, resign_token = NULL, handed_off = false, transfer_to = NULL
      FROM unnest(p_keys, p_tokens) AS u(k, tok)
     WHERE l.key = u.k AND l.holder = p_owner AND l.token = u.tok
       AND (l.role = c OR pgleader._own(l.role, false))
    RETURNING l.key;
END
$$;

-- renew_many, as in version 7, and: only the caller's keys (others are not
-- renewed and not returned); as renew_term, it claims a key with no role.
CREATE OR REPLACE FUNCTION pgleader.renew_many(p_owner text, p_keys text[], p_tokens bigint[], p_ttl interval)
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

-- resign, as in version 5, and: only by the key's role, a steer role or the
-- owner.
CREATE OR REPLACE FUNCTION pgleader.resign(p_key text, p_token bigint DEFAULT NULL)
RETURNS TABLE(resigned boolean, holder text, token bigint, detail text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    h text;
    k bigint;
BEGIN
    PERFORM pgleader._check_args(p_key, NULL, NULL, false, false);
    IF p_token IS NOT NULL AND p_token < 1 THEN
        RAISE EXCEPTION 'pgleader: token must be positive, got %', p_token USING ERRCODE = '22023';
    END IF;
    PERFORM pgleader._check_key_role(p_key, 'resign its term', true);

    UPDATE pgleader.lease AS l
       SET resign_token = l.token
     WHERE l.key = p_key AND l.holder IS NOT NULL AND l.expires_at > clock_timestamp()
       AND (p_token IS NULL OR l.token = p_token)
       AND pgleader._own(l.role, true)
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
$$;

-- transfer, as in version 6, and: only by the key's role, a steer role or
-- the owner.
CREATE OR REPLACE FUNCTION pgleader.transfer(p_key text, p_to text)
RETURNS TABLE(transferring boolean, holder text, token bigint, detail text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    r pgleader.lease%ROWTYPE;
    t timestamptz;
BEGIN
    PERFORM pgleader._check_args(p_key, p_to, NULL, true, false);
    PERFORM pgleader._check_key_role(p_key, 'transfer it', true);

    SELECT * INTO r FROM pgleader.lease AS l WHERE l.key = p_key FOR UPDATE;
    t := clock_timestamp();
    IF NOT FOUND OR r.holder IS NULL OR r.expires_at <= t THEN
        RETURN QUERY SELECT false, NULL::text, coalesce(r.token, 0::bigint), 'nobody holds the lease'::text;
        RETURN;
    END IF;
    IF NOT pgleader._own(r.role, true) THEN
        PERFORM pgleader._refuse('transfer it', 'key ' || to_json(p_key)::text, r.role);
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
$$;

-- withdraw, as in version 6, and: only on the caller's keys.
CREATE OR REPLACE FUNCTION pgleader.withdraw(p_key text, p_owner text)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, NULL, true, false);
    PERFORM pgleader._check_key_role(p_key, 'withdraw its candidates', false);
    DELETE FROM pgleader.candidate AS c WHERE c.key = p_key AND c.owner = p_owner;
    RETURN FOUND;
END
$$;

-- lease_guard, as in version 11, and: only on the caller's keys, checked on
-- the locked row. A refusal (42501) ends the caller's statement, and the
-- lock with it.
CREATE OR REPLACE FUNCTION pgleader.lease_guard(p_key text, p_token bigint)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
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
    IF FOUND AND NOT pgleader._own(r.role, false) THEN
        PERFORM pgleader._refuse('guard a transaction with it', 'key ' || to_json(p_key)::text, r.role);
    END IF;
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
$$;

-- _fence_take, as in version 3, and: a resource belongs to the role that
-- first claimed it, checked on the locked row (a refusal ends the caller's
-- statement, and the lock with it).
CREATE OR REPLACE FUNCTION pgleader._fence_take(p_resource text, p_token bigint, p_claim boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    stored bigint;
    rl text;
BEGIN
    PERFORM pgleader._fence_check(p_resource, p_token, true);

    INSERT INTO pgleader.fence AS f (resource, token, updated_at, role)
    VALUES (p_resource, p_token, clock_timestamp(), pgleader._caller())
    ON CONFLICT (resource) DO NOTHING;
    IF FOUND THEN
        RETURN; -- a new resource; the uncommitted row is this transaction's alone
    END IF;

    SELECT f.token, f.role INTO stored, rl FROM pgleader.fence AS f WHERE f.resource = p_resource FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgleader: guard row of resource % was deleted concurrently', to_json(p_resource)
            USING ERRCODE = '40001';
    END IF;
    IF NOT pgleader._own(rl, false) THEN
        PERFORM pgleader._refuse(CASE WHEN p_claim THEN 'claim it' ELSE 'write under it' END,
            'resource ' || to_json(p_resource)::text, rl);
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
    IF stored < p_token OR rl IS NULL THEN
        UPDATE pgleader.fence AS f
           SET token = greatest(f.token, p_token), updated_at = clock_timestamp(), role = coalesce(f.role, pgleader._caller())
         WHERE f.resource = p_resource;
    END IF;
END
$$;

-- set_acquire, as in version 7, and: a set's members are counted per role.
CREATE OR REPLACE FUNCTION pgleader.set_acquire(p_set text, p_owner text, p_keys text[], p_ttl interval, p_held integer,
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

-- set_renew, as in version 7, and: the membership is the caller's role's.
CREATE OR REPLACE FUNCTION pgleader.set_renew(p_set text, p_owner text, p_keys text[], p_tokens bigint[], p_ttl interval, p_held integer)
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

-- set_release, as in version 7, and: leaves only the caller's role's
-- membership.
CREATE OR REPLACE FUNCTION pgleader.set_release(p_set text, p_owner text, p_keys text[], p_tokens bigint[], p_leave boolean)
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

-- set_status, as in version 7, and: the members of the caller's role; the
-- schema's owner and steer roles also see the members of the roles that
-- own the keys they name.
CREATE OR REPLACE FUNCTION pgleader.set_status(p_set text, p_keys text[] DEFAULT NULL)
RETURNS TABLE(owner text, member boolean, member_held integer, member_expires_at timestamptz, leases integer, db_now timestamptz)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
#variable_conflict use_column
DECLARE
    c name := pgleader._caller();
    all_roles boolean := pgleader._privileged(true);
BEGIN
    PERFORM pgleader._check_args(p_set, NULL, NULL, false, false);
    RETURN QUERY
    WITH m AS (
        SELECT s.owner, sum(s.held)::integer AS held, max(s.expires_at) AS expires_at FROM pgleader.set_member AS s
         WHERE s.set_name = p_set AND s.expires_at > clock_timestamp()
           AND (s.role = c
                OR (all_roles AND s.role IN (SELECT l.role FROM pgleader.lease AS l WHERE l.key = ANY (p_keys))))
         GROUP BY s.owner
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

-- Every lease, for status: the same columns as lease(key), the key and its
-- role first; p_prefix narrows it to keys that start with it.
CREATE FUNCTION pgleader.leases(p_prefix text DEFAULT '')
RETURNS TABLE(key text, role text, holder text, token bigint, acquired_at timestamptz, renewed_at timestamptz,
              expires_at timestamptz, db_now timestamptz, value text)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
#variable_conflict use_column
DECLARE
    t timestamptz := clock_timestamp();
BEGIN
    IF p_prefix IS NULL THEN
        RAISE EXCEPTION 'pgleader: prefix must not be NULL (use '''' for every key)' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
        SELECT l.key, l.role,
               CASE WHEN l.expires_at > t THEN l.holder END,
               l.token,
               CASE WHEN l.expires_at > t THEN l.acquired_at END,
               CASE WHEN l.expires_at > t THEN l.renewed_at END,
               CASE WHEN l.expires_at > t THEN l.expires_at END,
               t,
               CASE WHEN l.expires_at > t THEN l.value END
          FROM pgleader.lease AS l
         WHERE starts_with(l.key, p_prefix)
         ORDER BY l.key;
END
$$;

-- The hand-off's hint, sent after hand_off committed, from the row it left:
-- "handoff" when the row is handed off above the ended term's token, else
-- "release". A hint only, as every notification: anyone may send one.
CREATE FUNCTION pgleader.hint_handoff(p_key text, p_ended bigint)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
BEGIN
    PERFORM pgleader._check_args(p_key, NULL, NULL, false, false);
    PERFORM pg_notify('pgleader', CASE
        WHEN l.holder IS NOT NULL AND l.handed_off AND l.token > p_ended
        THEN 'handoff ' || octet_length(l.holder) || ' ' || l.holder || ' ' || p_key
        ELSE 'release 0 ' || p_key END)
      FROM (SELECT 1) AS one LEFT JOIN pgleader.lease AS l ON l.key = p_key;
END
$$;

-- The application's functions that read or write the tables run as the
-- owner; their bodies check every argument and the caller's role.
ALTER FUNCTION pgleader.acquire(text, text, interval, bigint, text) SECURITY DEFINER;
ALTER FUNCTION pgleader.renew(text, text, bigint, interval) SECURITY DEFINER;
ALTER FUNCTION pgleader.set_tick(text, text, text[], bigint[], interval, integer) SECURITY DEFINER;
ALTER FUNCTION pgleader.fence_claim(text, bigint) SECURITY DEFINER;
ALTER FUNCTION pgleader.fence_write(text, bigint) SECURITY DEFINER;
ALTER FUNCTION pgleader.fence_floor(text) SECURITY DEFINER;
ALTER FUNCTION pgleader.lease(text) SECURITY DEFINER;
ALTER FUNCTION pgleader.holds(text, bigint) SECURITY DEFINER;
ALTER FUNCTION pgleader.candidates(text) SECURITY DEFINER;
ALTER FUNCTION pgleader.grace() SECURITY DEFINER;
ALTER FUNCTION pgleader.notify(text, text, interval) SECURITY DEFINER;

-- The functions an application role may execute. install_fence_trigger and
-- fence_trigger run as the caller: they act on the application's own table.
CREATE FUNCTION pgleader._app_functions()
RETURNS SETOF regprocedure
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pgleader, pg_temp AS $$
    SELECT p.oid::regprocedure
      FROM pg_catalog.pg_proc AS p
     WHERE p.pronamespace = 'pgleader'::regnamespace
       AND p.proname = ANY (ARRAY[
           'acquire', 'acquire_many', 'advance', 'campaign', 'candidates', 'fence_claim', 'fence_floor',
           'fence_trigger', 'fence_write', 'grace', 'hand_off', 'hint_handoff', 'holds', 'install_fence_trigger',
           'lease', 'lease_guard', 'leases', 'notify', 'release', 'release_many', 'renew', 'renew_many',
           'renew_term', 'resign', 'set_acquire', 'set_release', 'set_renew', 'set_status', 'set_tick',
           'take', 'transfer', 'withdraw'])
$$;

-- grant_usage: USAGE on the schema and EXECUTE on the application's
-- functions; no privilege on any table. Also takes back what an earlier
-- version granted beyond that.
CREATE OR REPLACE FUNCTION pgleader.grant_usage(p_role name, p_history regclass DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    owner oid;
    f regprocedure;
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
    IF p_role <> pg_get_userbyid(owner) THEN
        EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA pgleader FROM %I', p_role);
        EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA pgleader FROM %I', p_role);
    END IF;
    FOR f IN SELECT * FROM pgleader._app_functions() LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', f, p_role);
    END LOOP;
    IF p_history IS NOT NULL THEN
        EXECUTE format('GRANT SELECT ON TABLE %s TO %I', p_history, p_role);
    END IF;
END
$$;

-- grant_steer: grant_usage, and: the role may resign, transfer and advance
-- every role's keys (pgleader grant --steer).
CREATE FUNCTION pgleader.grant_steer(p_role name)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
BEGIN
    PERFORM pgleader.grant_usage(p_role);
    INSERT INTO pgleader.steerer AS s (role, granted_at) VALUES (p_role, clock_timestamp())
    ON CONFLICT (role) DO NOTHING;
END
$$;

-- Nothing but the owner touches a table; nothing but the owner executes a
-- function not meant for applications. Roles granted by earlier versions
-- keep exactly what grant_usage grants now.
DO $$
DECLARE
    r name;
    f regprocedure;
    granted name[];
BEGIN
    SELECT coalesce(array_agg(DISTINCT pg_get_userbyid(a.grantee)), '{}') INTO granted
      FROM pg_catalog.pg_proc AS p, aclexplode(p.proacl) AS a
     WHERE p.oid = 'pgleader.acquire(text, text, interval, bigint, text)'::regprocedure
       AND a.grantee <> 0 AND a.grantee <> p.proowner AND a.privilege_type = 'EXECUTE';
    FOR r IN SELECT DISTINCT pg_get_userbyid(a.grantee)
               FROM pg_catalog.pg_class AS c, aclexplode(c.relacl) AS a
              WHERE c.relnamespace = 'pgleader'::regnamespace AND a.grantee <> 0 AND a.grantee <> c.relowner
             UNION
             SELECT DISTINCT pg_get_userbyid(a.grantee)
               FROM pg_catalog.pg_proc AS p, aclexplode(p.proacl) AS a
              WHERE p.pronamespace = 'pgleader'::regnamespace AND a.grantee <> 0 AND a.grantee <> p.proowner
    LOOP
        EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA pgleader FROM %I', r);
        EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA pgleader FROM %I', r);
    END LOOP;
    REVOKE ALL ON ALL TABLES IN SCHEMA pgleader FROM PUBLIC;
    REVOKE ALL ON ALL FUNCTIONS IN SCHEMA pgleader FROM PUBLIC;
    -- The rows already there: with one granted role, it is the only role
    -- but the owner that can have written them, so they are its own. With
    -- none, or several, they belong to nobody until a role acquires (or
    -- renews, or writes under) them.
    IF cardinality(granted) = 1 THEN
        UPDATE pgleader.lease AS l SET role = granted[1] WHERE l.role IS NULL;
        UPDATE pgleader.fence AS f SET role = granted[1] WHERE f.role IS NULL;
    END IF;
    FOREACH r IN ARRAY granted LOOP
        FOR f IN SELECT * FROM pgleader._app_functions() LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', f, r);
        END LOOP;
    END LOOP;
END
$$;
