-- pgleader's schema, version 19: session-bound leases (issue 30; the design
-- is docs/model.md, "Session-bound leases"). Opt-in: nothing that version
-- 18 had changes, and a term is bound only by the functions below, which
-- only an Elector with Options.SessionBound calls.
--
-- A bound term is held on one database session, its holder's lease
-- connection, which also holds a session-level advisory lock on the key
-- (two int4s: 'pgle', hashtext(key)). While that lock is held by the bound
-- backend, the term is an ordinary one. Once the backend is gone (its
-- process died and the server closed the session, or the session was
-- terminated), a campaign on the same server run, outside the grace, lapses
-- the term at once instead of waiting for its expiry: the decision is the
-- database's, under the lease row's lock, from its own lock table. Waiting
-- candidates block on the advisory lock, so the end wakes them.
--
-- A binding names its term by (key, token, holder, acquired_at) and the
-- server run (pg_postmaster_start_time()), so a binding left behind by an
-- earlier term, a deleted and recreated row, a restarted server or a
-- failover to a standby never lapses anything. A binding's backend is told
-- by its pid holding the key's lock: a pid is not reused while its process
-- lives, and a new backend with the same pid would have to hold the same
-- key's lock in the same database, which only a term's winner takes.

CREATE TABLE pgleader.lease_binding (
    key           text        NOT NULL PRIMARY KEY REFERENCES pgleader.lease (key) ON DELETE CASCADE,
    token         bigint      NOT NULL,
    holder        text        NOT NULL,
    acquired_at   timestamptz NOT NULL,
    pid           integer     NOT NULL,
    backend_start timestamptz,
    server_start  timestamptz NOT NULL,
    bound_at      timestamptz NOT NULL
);
COMMENT ON TABLE pgleader.lease_binding IS
    'pgleader session-bound terms: the backend (pid, on the server run server_start) whose session holds the term (key, token, holder, acquired_at) and the key''s advisory lock.';

-- _binding_lock is the advisory lock key of p_key's binding: two int4s,
-- 'pgle' and the key's hash. Two keys with the same hash share a lock; then
-- only one of their terms can be bound at a time, and a candidate of the
-- other may wake for nothing: neither costs safety.
CREATE FUNCTION pgleader._binding_lock(p_key text, OUT classid integer, OUT objid integer)
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pgleader, pg_temp AS $$
    SELECT 1885826149, hashtext(p_key)
$$;

-- _binding_held reports whether backend p_pid holds p_key's binding lock
-- in this database.
CREATE FUNCTION pgleader._binding_held(p_key text, p_pid integer)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgleader, pg_temp AS $$
    SELECT EXISTS (
        SELECT 1
          FROM pg_catalog.pg_locks AS k, pgleader._binding_lock(p_key) AS b
         WHERE k.locktype = 'advisory' AND k.granted AND k.pid = p_pid
           AND k.database = (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = current_database())
           AND k.classid = b.classid::oid AND k.objid = b.objid::oid AND k.objsubid = 2)
$$;

-- bind_refusal says why this session cannot hold a bound term of TTL
-- p_ttl, or NULL if it can: the server must not end it for not hearing from
-- its client sooner than a TTL after the last statement it heard (the
-- early take-over would then come before the expiry while the holder
-- lives). TCP keepalives (idle + interval x count), tcp_user_timeout and
-- idle_session_timeout must each be off or at least p_ttl. Over a Unix
-- socket keepalives do not apply. It reads the calling session's settings.
CREATE FUNCTION pgleader.bind_refusal(p_ttl interval)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    ttl_ms double precision := extract(epoch FROM p_ttl) * 1000;
    ka_idle integer;
    ka_interval integer;
    ka_count integer;
    user_timeout integer;
    idle_timeout integer;
BEGIN
    IF p_ttl IS NULL OR p_ttl <= interval '0' THEN
        RAISE EXCEPTION 'pgleader: ttl must be positive, got %', p_ttl USING ERRCODE = '22023';
    END IF;
    -- One read of the settings (each setting read on its own cost a scan).
    SELECT coalesce(max(nullif(s.setting, '')::integer) FILTER (WHERE s.name = 'tcp_keepalives_idle'), 0),
           coalesce(max(nullif(s.setting, '')::integer) FILTER (WHERE s.name = 'tcp_keepalives_interval'), 0),
           coalesce(max(nullif(s.setting, '')::integer) FILTER (WHERE s.name = 'tcp_keepalives_count'), 0),
           coalesce(max(nullif(s.setting, '')::integer) FILTER (WHERE s.name = 'tcp_user_timeout'), 0),
           coalesce(max(nullif(s.setting, '')::integer) FILTER (WHERE s.name = 'idle_session_timeout'), 0)
      INTO ka_idle, ka_interval, ka_count, user_timeout, idle_timeout
      FROM pg_catalog.pg_settings AS s
     WHERE s.name IN ('tcp_keepalives_idle', 'tcp_keepalives_interval', 'tcp_keepalives_count',
                      'tcp_user_timeout', 'idle_session_timeout');
    IF inet_client_addr() IS NOT NULL AND ka_idle > 0
       AND (ka_idle + ka_interval * greatest(ka_count, 1)) * 1000.0 < ttl_ms THEN
        RETURN format('the server ends this session after %s s without an answer to its TCP keepalives '
                      '(tcp_keepalives_idle %s + tcp_keepalives_interval %s x tcp_keepalives_count %s), less than the TTL %s',
                      ka_idle + ka_interval * greatest(ka_count, 1), ka_idle, ka_interval, ka_count, p_ttl);
    END IF;
    IF inet_client_addr() IS NOT NULL AND user_timeout > 0 AND user_timeout < ttl_ms THEN
        RETURN format('the server ends this session after tcp_user_timeout = %s ms without an acknowledgement, less than the TTL %s',
                      user_timeout, p_ttl);
    END IF;
    IF idle_timeout > 0 AND idle_timeout < ttl_ms THEN
        RETURN format('the server ends this session after idle_session_timeout = %s ms idle, less than the TTL %s',
                      idle_timeout, p_ttl);
    END IF;
    RETURN NULL;
END
$$;

-- _bind binds the term (p_key, p_token), which the caller has just won,
-- renewed or confirmed on this session, to this session: it takes the
-- key's binding lock unless this session holds it already (a candidate
-- that waited on it), and records the binding. It binds nothing, and
-- returns false, when the session cannot hold a bound term of TTL p_ttl
-- (bind_refusal) or another session holds the lock (a candidate woken by
-- the last holder's release: this term then stays an ordinary one until a
-- renewal finds the lock free).
CREATE FUNCTION pgleader._bind(p_key text, p_token bigint, p_ttl interval)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    r pgleader.lease%ROWTYPE;
    lk record;
BEGIN
    IF pgleader.bind_refusal(p_ttl) IS NOT NULL THEN
        RETURN false;
    END IF;
    SELECT * INTO r FROM pgleader.lease AS l WHERE l.key = p_key AND l.token = p_token AND l.holder IS NOT NULL;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    lk := pgleader._binding_lock(p_key);
    IF NOT pgleader._binding_held(p_key, pg_backend_pid())
       AND NOT pg_try_advisory_lock(lk.classid, lk.objid) THEN
        RETURN false;
    END IF;
    INSERT INTO pgleader.lease_binding AS b (key, token, holder, acquired_at, pid, backend_start, server_start, bound_at)
    VALUES (p_key, p_token, r.holder, r.acquired_at, pg_backend_pid(),
            (SELECT a.backend_start FROM pg_catalog.pg_stat_activity AS a WHERE a.pid = pg_backend_pid()),
            pg_postmaster_start_time(), clock_timestamp())
    ON CONFLICT (key) DO UPDATE
       SET token = excluded.token, holder = excluded.holder, acquired_at = excluded.acquired_at, pid = excluded.pid,
           backend_start = excluded.backend_start, server_start = excluded.server_start, bound_at = excluded.bound_at;
    RETURN true;
END
$$;

-- _bound_to returns the pid of the backend that the term (p_key, p_token,
-- p_holder, p_acquired_at) is bound to on this server run, or NULL if it is
-- not bound (or bound on an earlier server run, or before a deleted row was
-- recreated).
CREATE FUNCTION pgleader._bound_to(p_key text, p_token bigint, p_holder text, p_acquired_at timestamptz)
RETURNS integer
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgleader, pg_temp AS $$
    SELECT b.pid
      FROM pgleader.lease_binding AS b
     WHERE b.key = p_key AND b.token = p_token AND b.holder = p_holder AND b.acquired_at = p_acquired_at
       AND b.server_start = pg_postmaster_start_time()
$$;

-- campaign_bound is campaign on a session-bound candidate's session. First,
-- under the lease row's lock, a term bound to a backend that is gone is
-- lapsed (its expiry set to now), on the running server and outside the
-- grace only; then campaign decides as ever. A term won (or a handed-off
-- term confirmed) is bound to this session when it can be (see _bind);
-- bound says whether it was. A campaign that did not win lets go of the
-- binding lock if this session held it (it waited on it). holder_bound
-- says whether the term that holds the lease is bound to a live backend:
-- the caller then waits on the binding lock, else for the expiry.
CREATE FUNCTION pgleader.campaign_bound(p_key text, p_owner text, p_ttl interval, p_floor bigint, p_value text,
                                        p_priority integer, p_candidate interval)
RETURNS TABLE(acquired boolean, holder text, token bigint, expires_at timestamptz, db_now timestamptz, value text,
              acquired_at timestamptz, bound boolean, holder_bound boolean, lapsed boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    r pgleader.lease%ROWTYPE;
    c record;
    g record;
    t timestamptz;
    pid integer;
    lk record;
    did_lapse boolean := false;
    is_bound boolean := false;
    held_bound boolean := false;
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, p_ttl, true, true);
    g := pgleader._grace();
    r := pgleader._lock_row(p_key);
    t := clock_timestamp();
    IF r.holder IS NOT NULL AND r.expires_at > t AND t >= g.grace_until AND pgleader._own(r.role, false) THEN
        pid := pgleader._bound_to(r.key, r.token, r.holder, r.acquired_at);
        IF pid IS NOT NULL AND NOT pgleader._binding_held(p_key, pid) THEN
            UPDATE pgleader.lease AS l SET expires_at = t WHERE l.key = p_key;
            did_lapse := true;
        END IF;
    END IF;

    SELECT * INTO c FROM pgleader.campaign(p_key, p_owner, p_ttl, p_floor, p_value, p_priority, p_candidate) AS x;
    IF c.acquired THEN
        is_bound := pgleader._bind(p_key, c.token, p_ttl);
    ELSE
        IF pgleader._binding_held(p_key, pg_backend_pid()) THEN
            lk := pgleader._binding_lock(p_key);
            PERFORM pg_advisory_unlock(lk.classid, lk.objid);
        END IF;
        SELECT * INTO r FROM pgleader.lease AS l WHERE l.key = p_key;
        pid := pgleader._bound_to(r.key, r.token, r.holder, r.acquired_at);
        held_bound := c.holder = r.holder AND pid IS NOT NULL AND pgleader._binding_held(p_key, pid);
    END IF;
    RETURN QUERY SELECT c.acquired, c.holder, c.token, c.expires_at, c.db_now, c.value, c.acquired_at,
                        is_bound, held_bound, did_lapse;
END
$$;

-- renew_bound is renew_term on a session-bound holder's session. A term
-- bound to another backend, or on an earlier server run, is not renewed
-- (expires_at NULL): its session ended, and with it the term. A renewed
-- term not bound yet is bound when it can be (see _bind).
CREATE FUNCTION pgleader.renew_bound(p_key text, p_owner text, p_token bigint, p_ttl interval, p_min_term interval)
RETURNS TABLE(expires_at timestamptz, resign boolean, bound boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    b pgleader.lease_binding%ROWTYPE;
    x record;
BEGIN
    SELECT * INTO b FROM pgleader.lease_binding AS lb WHERE lb.key = p_key AND lb.token = p_token AND lb.holder = p_owner;
    IF FOUND AND (b.pid <> pg_backend_pid() OR b.server_start <> pg_postmaster_start_time()) THEN
        PERFORM pgleader._check_key_role(p_key, 'renew it', false);
        RETURN QUERY SELECT NULL::timestamptz, false, false;
        RETURN;
    END IF;
    SELECT * INTO x FROM pgleader.renew_term(p_key, p_owner, p_token, p_ttl, p_min_term) AS rt;
    IF x.expires_at IS NULL THEN
        RETURN QUERY SELECT NULL::timestamptz, false, false;
        RETURN;
    END IF;
    RETURN QUERY SELECT x.expires_at, x.resign, b.pid IS NOT NULL OR pgleader._bind(p_key, p_token, p_ttl);
END
$$;

-- wait_session waits up to p_timeout for p_key's binding lock, and reports
-- whether this session took it: the bound holder's session ended, or it
-- released the lease. The caller campaigns next (campaign_bound lets go of
-- the lock if it does not win).
CREATE FUNCTION pgleader.wait_session(p_key text, p_timeout interval)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    lk record := pgleader._binding_lock(p_key);
    ms bigint := greatest(1, ceil(extract(epoch FROM p_timeout) * 1000))::bigint;
BEGIN
    PERFORM pgleader._check_args(p_key, NULL, NULL, false, false);
    PERFORM pgleader._check_key_role(p_key, 'wait for its holder''s session', false);
    IF pgleader._binding_held(p_key, pg_backend_pid()) THEN
        RETURN true;
    END IF;
    PERFORM set_config('lock_timeout', ms::text, true);
    PERFORM pg_advisory_lock(lk.classid, lk.objid);
    RETURN true;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END
$$;

-- unbind lets go of p_key's binding lock if this session holds it, after
-- the term it bound was released or handed off.
CREATE FUNCTION pgleader.unbind(p_key text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    lk record := pgleader._binding_lock(p_key);
BEGIN
    PERFORM pgleader._check_args(p_key, NULL, NULL, false, false);
    PERFORM pgleader._check_key_role(p_key, 'unbind it', false);
    WHILE pgleader._binding_held(p_key, pg_backend_pid()) LOOP
        PERFORM pg_advisory_unlock(lk.classid, lk.objid);
    END LOOP;
END
$$;

REVOKE ALL ON FUNCTION pgleader.bind_refusal(interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgleader.campaign_bound(text, text, interval, bigint, text, integer, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgleader.renew_bound(text, text, bigint, interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgleader.wait_session(text, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgleader.unbind(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgleader._binding_lock(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgleader._binding_held(text, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgleader._bind(text, bigint, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgleader._bound_to(text, bigint, text, timestamptz) FROM PUBLIC;

-- _app_functions lists the functions an application role may execute: the
-- new ones too.
CREATE OR REPLACE FUNCTION pgleader._app_functions()
RETURNS SETOF regprocedure
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pgleader, pg_temp AS $$
    SELECT p.oid::regprocedure
      FROM pg_catalog.pg_proc AS p
     WHERE p.pronamespace = 'pgleader'::regnamespace
       AND p.proname = ANY (ARRAY[
           'acquire', 'acquire_many', 'advance', 'bind_refusal', 'campaign', 'campaign_bound', 'candidates',
           'fence_claim', 'fence_floor',
           'fence_trigger', 'fence_write', 'grace', 'hand_off', 'hint_handoff', 'holds', 'install_fence_trigger',
           'job_claim', 'job_finish', 'job_runs', 'job_schedule', 'job_status',
           'lease', 'lease_guard', 'leases', 'notify', 'release', 'release_many', 'renew', 'renew_bound', 'renew_many',
           'renew_term', 'resign', 'set_acquire', 'set_release', 'set_renew', 'set_status', 'set_tick',
           'take', 'transfer', 'unbind', 'wait_session', 'withdraw'])
$$;

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
