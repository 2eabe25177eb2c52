-- pgleader's schema, version 1: leases with fencing tokens on the database
-- clock, the fences that check those tokens, and the functions that are the
-- only way an application reaches either.
--
-- The file reads top to bottom: the tables, then the functions grouped by
-- purpose (argument checks; who calls; settings, the failover grace and
-- token epochs; terms; hand-off; sets; fences; privileges). Each function
-- says what it does; docs/sql.md says how to call them, and
-- migrations/schema.sql is the catalog this file builds.
--
-- Rules every function keeps:
-- * Every expiry decision reads clock_timestamp(), the database clock when
--   the statement runs, never now() (the start of the caller's
--   transaction).
-- * A key's token only grows: it is drawn from the row, under its lock, and
--   no input can exhaust it (floors and fence tokens stop at 2^62 - 1).
-- * Bad arguments raise 22023 and change nothing; every function pins its
--   search_path, so a caller's search_path cannot change what it calls.
-- * When a lease changes hands, the row's term columns come from _term and
--   nowhere else: a new term carries nothing of the one before it, a freed
--   lease nothing of any.
-- * A new term starts only after the row is locked FOR UPDATE: that lock
--   conflicts with the FOR KEY SHARE a lease-guarded transaction holds, so
--   no new term begins while a guarded write of the old one is open.
--   Renewals update non-key columns only (FOR NO KEY UPDATE) and pass the
--   holder's own guarded transactions.
-- * The lease operations send no notification (a commit that notifies takes
--   a cluster-wide lock and fails when the queue is full): callers send
--   hints with notify and hint_handoff after the operation committed.
-- * Applications reach the tables only through the functions: the tables
--   belong to the schema's owner, the application's functions run as the
--   owner (SECURITY DEFINER) and check the caller's role, and grant_usage
--   grants EXECUTE on those functions and nothing else.
--
-- Error codes: 22023 bad argument, 22003 no token left, 42501 another
-- role's key or resource, 55P03 settings in use, 55000 max_ttl below a live
-- term's TTL, PF001 fenced, PF002 lease guard refused, PF003 not a live
-- candidate.

-- A schema "pgleader" that another role owns is not adopted: its owner could
-- drop or replace what is created in it.
DO $$
DECLARE
    owner name;
BEGIN
    SELECT pg_catalog.pg_get_userbyid(n.nspowner) INTO owner
      FROM pg_catalog.pg_namespace AS n WHERE n.nspname = 'pgleader';
    IF FOUND AND owner <> current_user THEN
        RAISE EXCEPTION 'pgleader: the schema "pgleader" already exists and is owned by %, not by %', owner, current_user
            USING ERRCODE = '42501',
                  HINT = 'Migrate as the role that owns the schema, or drop or rename the schema first.';
    END IF;
END
$$;

CREATE SCHEMA IF NOT EXISTS pgleader;

------------------------------------------------------------------------------
-- Tables
------------------------------------------------------------------------------

-- The settings, one row. max_ttl bounds every TTL and every candidate
-- registration, and is how long a server that took over grants no new
-- term (the grace); max_clock_offset bounds the offset between the clocks
-- of a primary and the standbys that may take over from it. epoch is the
-- cluster's token epoch: a key's tokens in epoch e lie in
-- [e * 2^40, (e + 1) * 2^40). It is replicated; server_epoch is not.
CREATE TABLE pgleader.settings (
    only_row         boolean  PRIMARY KEY DEFAULT true CHECK (only_row),
    max_ttl          interval NOT NULL CHECK (max_ttl BETWEEN interval '100 milliseconds' AND interval '24 hours'),
    max_clock_offset interval NOT NULL CHECK (max_clock_offset BETWEEN interval '0' AND interval '1 hour'),
    epoch            bigint   NOT NULL DEFAULT 0 CONSTRAINT settings_epoch_range CHECK (epoch BETWEEN 0 AND 4194304)
);

COMMENT ON TABLE pgleader.settings IS
    'pgleader settings: max_ttl bounds every lease TTL and is the grace after crash recovery or promotion; max_clock_offset bounds the offset between the clocks of a primary and its standbys.';
COMMENT ON COLUMN pgleader.settings.epoch IS
    'pgleader token epoch: every key''s tokens are at least epoch * 2^40; raised by one by each server that starts after crash recovery or promotion. 4194304: no epoch left. Do not edit.';

-- 10 minutes: no TTL this project's tests, examples or CLI use is longer.
-- Lower it to the longest TTL you use: it is how long a promoted or
-- recovered server grants no new term.
INSERT INTO pgleader.settings (max_ttl, max_clock_offset) VALUES (interval '10 minutes', interval '1 second');

-- When this server began granting on its own. A lease is only as durable as
-- its last committed row: after an asynchronous failover, or crash recovery
-- with synchronous_commit = off, the rows of a live term may be lost. This
-- table is UNLOGGED, so PostgreSQL empties it in crash recovery and a
-- standby has it empty; the first lease operation that finds it empty
-- starts the grace (see _grace). The migration fills it on the server it
-- runs on, so a fresh install has no grace.
CREATE UNLOGGED TABLE pgleader.server_epoch (
    only_row    boolean     PRIMARY KEY DEFAULT true CHECK (only_row),
    noticed_at  timestamptz NOT NULL,
    grace_until timestamptz NOT NULL
);

COMMENT ON TABLE pgleader.server_epoch IS
    'pgleader: when this server began granting on its own (UNLOGGED: emptied by crash recovery, empty on a standby). Do not edit.';

INSERT INTO pgleader.server_epoch (noticed_at, grace_until) VALUES (clock_timestamp(), clock_timestamp());

-- _epoch is settings.epoch (0 without a settings row).
CREATE FUNCTION pgleader._epoch()
RETURNS bigint
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
    SELECT coalesce((SELECT s.epoch FROM pgleader.settings AS s), 0)
$$;

-- _epoch_base is the first counter of the current epoch: a lease row
-- created now starts there.
CREATE FUNCTION pgleader._epoch_base()
RETURNS bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgleader, pg_temp AS $$
    SELECT pgleader._epoch() << 40
$$;

-- The lease: one row per key. token is the key's counter: while a term
-- holds the lease it is that term's token; while the lease is free it is
-- the last token issued. It only grows, so it survives release and expiry;
-- every draw passes the trigger lease_draw (the token epochs), and a row
-- created after a failover starts at the epoch's base. token_min, when set,
-- is a floor the key's next draw must exceed (a term held across a failover
-- keeps its token).
--
-- The term's columns: holder (NULL when free), acquired_at, renewed_at,
-- expires_at, value (published with the term, at most 1024 bytes),
-- priority (the candidate priority it was won with), handed_off (a term
-- handed to its holder and not yet confirmed), resign_token (the term was
-- asked to end) and transfer_to (the candidate it should hand off to);
-- whenever the lease changes hands they are set together, by _term. A
-- lease whose expires_at has passed is free, whatever holder says.
--
-- role is the role the key belongs to: the first role that won a term of
-- it. Half of each page is kept free, so a renewal's new row version stays
-- on its page (a heap-only update) and the index is not touched.
CREATE TABLE pgleader.lease (
    key          text        PRIMARY KEY,
    holder       text,
    token        bigint      NOT NULL DEFAULT pgleader._epoch_base(),
    acquired_at  timestamptz,
    renewed_at   timestamptz,
    expires_at   timestamptz,
    value        text,
    resign_token bigint,
    priority     integer     NOT NULL DEFAULT 0,
    handed_off   boolean     NOT NULL DEFAULT false,
    transfer_to  text,
    token_min    bigint,
    role         text,
    CONSTRAINT lease_key_length CHECK (octet_length(key) BETWEEN 1 AND 200),
    CONSTRAINT lease_holder_length CHECK (holder IS NULL OR octet_length(holder) BETWEEN 1 AND 200),
    CONSTRAINT lease_token_nonnegative CHECK (token >= 0),
    CONSTRAINT lease_held_has_expiry CHECK (holder IS NULL OR expires_at IS NOT NULL),
    CONSTRAINT lease_value_length CHECK (value IS NULL OR octet_length(value) <= 1024),
    CONSTRAINT lease_transfer_to_length CHECK (transfer_to IS NULL OR octet_length(transfer_to) BETWEEN 1 AND 200)
) WITH (fillfactor = 50);

COMMENT ON TABLE pgleader.lease IS
    'pgleader leases: one row per key; token is the key''s fencing counter and never decreases.';
COMMENT ON COLUMN pgleader.lease.token_min IS
    'pgleader: the next token drawn for this key exceeds token_min (set for a lease held across a failover). Do not edit.';

-- Candidates waiting for a key, each registered (by campaign) until its
-- expires_at; a candidate that stops refreshing its row is passed over, and
-- nobody has to delete it. hand_off passes the lease to the best live one.
CREATE TABLE pgleader.candidate (
    key           text        NOT NULL,
    owner         text        NOT NULL,
    priority      integer     NOT NULL DEFAULT 0,
    value         text,
    registered_at timestamptz NOT NULL,
    expires_at    timestamptz NOT NULL,
    PRIMARY KEY (key, owner),
    CONSTRAINT candidate_key_length CHECK (octet_length(key) BETWEEN 1 AND 200),
    CONSTRAINT candidate_owner_length CHECK (octet_length(owner) BETWEEN 1 AND 200),
    CONSTRAINT candidate_value_length CHECK (value IS NULL OR octet_length(value) <= 1024)
);

COMMENT ON TABLE pgleader.candidate IS
    'pgleader candidates: replicas waiting for a key, each until its expires_at; the lease is handed to the best live one.';

-- The replicas campaigning for a set, per role, each until its expires_at,
-- with how many of the set's keys it held at its last renewal, so every
-- replica can compute its fair share ceil(keys / live members).
CREATE TABLE pgleader.set_member (
    set_name   text        NOT NULL,
    owner      text        NOT NULL,
    held       integer     NOT NULL DEFAULT 0 CHECK (held >= 0),
    joined_at  timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    role       text        NOT NULL,
    PRIMARY KEY (set_name, role, owner),
    CONSTRAINT set_member_name_length CHECK (octet_length(set_name) BETWEEN 1 AND 200),
    CONSTRAINT set_member_owner_length CHECK (octet_length(owner) BETWEEN 1 AND 200)
);

COMMENT ON TABLE pgleader.set_member IS
    'pgleader set membership: the replicas campaigning for a set, until expires_at, and how many of its keys each held at its last renewal.';

-- One guard row per fenced resource: the highest token that took it, and
-- the role the resource belongs to (the first that claimed it).
CREATE TABLE pgleader.fence (
    resource   text        PRIMARY KEY,
    token      bigint      NOT NULL,
    updated_at timestamptz NOT NULL,
    role       text,
    CONSTRAINT fence_resource_length CHECK (octet_length(resource) BETWEEN 1 AND 200),
    CONSTRAINT fence_token_positive CHECK (token >= 1)
);

COMMENT ON TABLE pgleader.fence IS
    'pgleader fences: one guard row per resource; token is the highest token that took it and never decreases.';

-- Roles that may steer other roles' keys (resign, transfer, advance); see
-- grant_steer.
CREATE TABLE pgleader.steerer (
    role       name        PRIMARY KEY,
    granted_at timestamptz NOT NULL
);

------------------------------------------------------------------------------
-- Argument checks: each raises invalid_parameter_value (22023), so psql and
-- other drivers get the same errors as Go.
------------------------------------------------------------------------------

-- _check_args checks a key (1 to 200 bytes), an owner when p_need_owner (1
-- to 200 bytes) and a TTL when p_need_ttl: positive, and in hours, minutes
-- and seconds only. PostgreSQL compares intervals counting a month as 30
-- days and a day as 24 hours, but adds them to a timestamp by the calendar
-- and the session's time zone: '1000 years -360000 days 9 minutes' compared
-- below max_ttl and still gave a term 5242 days.
CREATE FUNCTION pgleader._check_args(p_key text, p_owner text, p_ttl interval, p_need_owner boolean, p_need_ttl boolean)
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

-- _check_floor accepts a floor from 0 to 2^62 - 1. The limit leaves 2^62
-- tokens above every floor.
CREATE FUNCTION pgleader._check_floor(p_floor bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgleader, pg_temp AS $$
BEGIN
    IF p_floor IS NULL OR p_floor < 0 THEN
        RAISE EXCEPTION 'pgleader: floor must be zero or positive, got %', p_floor USING ERRCODE = '22023';
    END IF;
    IF p_floor > 4611686018427387903 THEN
        RAISE EXCEPTION 'pgleader: floor % is above the limit 4611686018427387903 (2^62 - 1)', p_floor
            USING ERRCODE = '22023';
    END IF;
END
$$;

-- _check_value accepts a value of at most 1024 bytes.
CREATE FUNCTION pgleader._check_value(p_value text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgleader, pg_temp AS $$
BEGIN
    IF octet_length(p_value) > 1024 THEN
        RAISE EXCEPTION 'pgleader: value is % bytes; the limit is 1024', octet_length(p_value) USING ERRCODE = '22023';
    END IF;
END
$$;

-- _check_ttl refuses a TTL above max_ttl.
CREATE FUNCTION pgleader._check_ttl(p_ttl interval, p_max_ttl interval)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgleader, pg_temp AS $$
BEGIN
    IF p_ttl > p_max_ttl THEN
        RAISE EXCEPTION 'pgleader: ttl % exceeds max_ttl %', p_ttl, p_max_ttl
            USING ERRCODE = '22023',
                  HINT = 'Use a shorter TTL, or raise the limit with pgleader.set_max_ttl (it is also the grace after a failover).';
    END IF;
END
$$;

-- _check_candidate checks a candidate registration: its interval (at least
-- 1 microsecond, no day, month or year part, as for a TTL) and priority.
CREATE FUNCTION pgleader._check_candidate(p_candidate interval, p_priority integer)
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

-- _check_keys accepts a one-dimensional array of distinct keys, each as
-- _check_args requires, and, when p_need_tokens, p_tokens with one positive
-- token per key.
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

-- _fence_check checks a resource (1 to 200 bytes) and, when p_need_token, a
-- token from 1 to 2^62 - 1: a fence is read back as a lease's floor, and
-- floors stop there.
CREATE FUNCTION pgleader._fence_check(p_resource text, p_token bigint, p_need_token boolean)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgleader, pg_temp AS $$
BEGIN
    IF p_resource IS NULL OR p_resource = '' THEN
        RAISE EXCEPTION 'pgleader: resource must not be empty' USING ERRCODE = '22023';
    END IF;
    IF octet_length(p_resource) > 200 THEN
        RAISE EXCEPTION 'pgleader: resource is % bytes; the limit is 200', octet_length(p_resource) USING ERRCODE = '22023';
    END IF;
    IF p_need_token AND (p_token IS NULL OR p_token < 1) THEN
        RAISE EXCEPTION 'pgleader: token must be positive, got %', coalesce(p_token::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    IF p_need_token AND p_token > 4611686018427387903 THEN
        RAISE EXCEPTION 'pgleader: token % is above the limit 4611686018427387903 (2^62 - 1)', p_token USING ERRCODE = '22023';
    END IF;
END
$$;

------------------------------------------------------------------------------
-- Who calls. A key belongs to the role that first won a term of it
-- (lease.role), a fence resource to the role that first claimed it
-- (fence.role), and a set's membership is kept per role. A role acts only
-- on its own keys and resources; the schema's owner acts on all of them; a
-- role given grant_steer may also resign, transfer and advance other
-- roles' keys. Replicas under one role trust one another.
--
-- These helpers are PL/pgSQL, whose plans a session keeps: a SQL function
-- that cannot be inlined is planned again in every statement.
------------------------------------------------------------------------------

-- _caller is the role the session runs as: SET ROLE's role ('none' when
-- none was set), else the session's user. A SECURITY DEFINER function
-- changes neither, and PostgreSQL lets a session SET ROLE only to a role
-- its user may become, so no role can name itself as another.
CREATE FUNCTION pgleader._caller()
RETURNS name
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pgleader, pg_temp AS $$
BEGIN
    RETURN coalesce(nullif(current_setting('role'), 'none'), session_user)::name;
END
$$;

-- _privileged reports whether the caller may act on keys that are not its
-- own: the schema's owner (and its members, superusers included) always; a
-- steer role when p_steer.
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

-- _own reports whether the caller may act on a key or resource of p_role
-- (NULL: nobody's yet): its own, a role it is a member of (it could SET ROLE
-- to it anyway), or any when _privileged.
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

-- _refuse raises 42501: p_name belongs to p_role, and the caller may not
-- p_what.
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

-- _check_key_role raises 42501 unless the caller may act on p_key (a key
-- without a row is nobody's).
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

------------------------------------------------------------------------------
-- Settings, the failover grace and token epochs.
--
-- After crash recovery or promotion the server grants no new term until
-- max_ttl has passed on its own clock from the moment it first noticed:
-- every term the previous server may have granted had at most max_ttl to
-- run from its last renewal, which came before the notice. During the grace
-- a lease operation grants nothing (acquire answers the holder
-- 'pgleader.grace' and the grace's end), advance changes nothing, and a
-- term the server knows is renewed only while its expiry is more than
-- max_clock_offset away: a row the previous server stamped is judged here
-- on another clock.
--
-- The grace keeps a new server from granting a term while an old one may
-- be live; token epochs keep it from drawing an old token again. The server
-- that notices it is new moves the cluster to the next epoch and raises
-- every key's counter to at least the new epoch's base, in the same
-- transaction, so every token it draws is above every token the old server
-- drew; a key whose lease a known term holds keeps its token and records
-- token_min for its next draw. Within an epoch a key draws fewer than 2^40
-- tokens; epochs 0 to 2^22 - 1 end at 2^62 - 1. After epoch 2^22 - 1 a new
-- server draws nothing (22003): 4194304 failovers, not reachable in
-- practice.
--
-- A lease operation holds the settings for its transaction, shared, so no
-- setter commits between its reading them and its commit; setters take
-- them exclusively.
------------------------------------------------------------------------------

-- _settings_lock is the advisory lock key (two int4s: 'pgld', 1) that
-- serializes the settings with the lease operations reading them.
CREATE FUNCTION pgleader._settings_lock(OUT classid integer, OUT objid integer)
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pgleader, pg_temp AS $$
    SELECT 1885826148, 1
$$;

-- _grace returns the settings and this server's grace, noticing a new
-- server first if server_epoch is empty: the grace then runs max_ttl from
-- now, and the transaction that inserts server_epoch's row also moves to
-- the next token epoch (a concurrent notice waits for that insert and
-- inserts nothing). It holds the settings shared for the transaction: the
-- advisory lock when it can take it (in READ COMMITTED), else the settings
-- row FOR SHARE, which waits only for a setter's own row lock. Any role
-- that can connect can take an advisory lock, so a lease operation does
-- not wait for it; and outside READ COMMITTED the snapshot may predate a
-- setter's commit, which FOR SHARE turns into a serialization error.
CREATE FUNCTION pgleader._grace(OUT grace_until timestamptz, OUT max_ttl interval, OUT max_clock_offset interval)
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

-- _grace_peek is _grace for a caller inside an application's transaction
-- (lease_guard): it neither notices a new server nor holds the settings.
-- Noticing writes server_epoch and every lease row; inside a long
-- transaction that would hold every row lock until it commits. On a server
-- that has not noticed yet the grace runs max_ttl from now, which ends no
-- later than the real one.
CREATE FUNCTION pgleader._grace_peek(OUT grace_until timestamptz, OUT max_ttl interval, OUT max_clock_offset interval)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
BEGIN
    SELECT s.max_ttl, s.max_clock_offset INTO max_ttl, max_clock_offset FROM pgleader.settings AS s;
    IF NOT FOUND THEN
        max_ttl := interval '10 minutes';
        max_clock_offset := interval '1 second';
    END IF;
    SELECT e.grace_until INTO grace_until FROM pgleader.server_epoch AS e;
    IF NOT FOUND THEN
        grace_until := clock_timestamp() + max_ttl;
    END IF;
END
$$;

-- _epoch_bump moves the cluster to the next epoch and raises every key's
-- counter above the tokens the previous epoch could draw. _grace calls it
-- in the one transaction that fills server_epoch, so it runs once per
-- crash recovery or promotion, and before any term of the new server can
-- be granted (the grace has just begun). Rows another transaction has
-- locked are waited for; on a new server only a pgleader function that
-- found server_epoch filled (so after this transaction) locks them, or a
-- release, which holds its lock for its own statement only. Only the
-- schema's owner may call it: any other role could spend the epochs.
CREATE FUNCTION pgleader._epoch_bump()
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

-- _lease_draw is the trigger lease_draw: every change of a key's counter,
-- whatever function draws, passes here. It raises the counter above
-- token_min when a failover left one, and refuses (22003) the draw that
-- would count into the next epoch's range, and every draw once no epoch is
-- left.
CREATE FUNCTION pgleader._lease_draw()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    e bigint := pgleader._epoch();
    was bigint := greatest(OLD.token, coalesce(OLD.token_min, 0));
BEGIN
    IF e >= 4194304 THEN
        RAISE EXCEPTION 'pgleader: no token epoch left: key % cannot draw a token', to_json(NEW.key)
            USING ERRCODE = '22003',
                  HINT = 'This cluster failed over 4194304 times; its tokens are used up. Recreate the schema and move every fence to a new resource.';
    END IF;
    IF OLD.token_min IS NOT NULL THEN
        NEW.token := greatest(NEW.token, least(OLD.token_min, 9223372036854775806) + 1);
        NEW.token_min := NULL;
    END IF;
    IF NEW.token = (e + 1) << 40 AND NEW.token = was + 1 THEN
        RAISE EXCEPTION 'pgleader: key % has drawn every token of epoch %: its counter is at %', to_json(NEW.key), e, was
            USING ERRCODE = '22003',
                  HINT = format('A key draws fewer than 2^40 tokens per epoch, so that a server after a failover draws above them. Advance the key to %s or higher (pgleader.advance), or use another key.', (e + 1) << 40);
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER lease_draw BEFORE UPDATE OF token ON pgleader.lease
    FOR EACH ROW WHEN (NEW.token IS DISTINCT FROM OLD.token)
    EXECUTE FUNCTION pgleader._lease_draw();

-- _lock_settings takes the settings exclusively for a setter: the advisory
-- lock, then the settings row FOR UPDATE NOWAIT. A lease operation that
-- found the advisory lock taken holds the row FOR SHARE until its
-- transaction ends; a setter queued for that row would hold the advisory
-- lock meanwhile, and every lease operation would read the row instead. So
-- it tries for both without queueing, for 5 seconds, then fails with 55P03.
CREATE FUNCTION pgleader._lock_settings()
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

-- set_max_ttl sets max_ttl (100 ms to 24 h) and returns the previous value.
-- It refuses a value below the TTL of a term that holds a lease now (55000),
-- since the grace must outlast every term, and it holds the settings while
-- it checks those terms and writes. Raise it before using a longer TTL, and
-- let the standbys replay the change first: a standby promoted without it
-- would keep the old, shorter grace. The schema's owner only.
CREATE FUNCTION pgleader.set_max_ttl(p_max_ttl interval)
RETURNS interval
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    old interval;
    k text;
    longest interval;
BEGIN
    IF p_max_ttl IS NULL OR p_max_ttl < interval '100 milliseconds' OR p_max_ttl > interval '24 hours' THEN
        RAISE EXCEPTION 'pgleader: max_ttl must be between 100 milliseconds and 24 hours, got %', coalesce(p_max_ttl::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    PERFORM pgleader._lock_settings();
    SELECT s.max_ttl INTO old FROM pgleader.settings AS s FOR UPDATE;
    SELECT l.key, l.expires_at - l.renewed_at INTO k, longest
      FROM pgleader.lease AS l
     WHERE l.holder IS NOT NULL AND l.expires_at > clock_timestamp()
     ORDER BY l.expires_at - l.renewed_at DESC LIMIT 1;
    IF longest > p_max_ttl THEN
        RAISE EXCEPTION 'pgleader: max_ttl % is below the TTL % of the term holding key %', p_max_ttl, longest, to_json(k)
            USING ERRCODE = '55000',
                  HINT = 'Stop using the longer TTL and wait for that term to end, then lower max_ttl.';
    END IF;
    UPDATE pgleader.settings AS s SET max_ttl = p_max_ttl;
    RETURN old;
END
$$;

-- set_max_clock_offset sets max_clock_offset (0 to 1 hour), the largest
-- offset between the clocks of this server and any server it may take over
-- from, and returns the previous value. The schema's owner only.
CREATE FUNCTION pgleader.set_max_clock_offset(p_offset interval)
RETURNS interval
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    old interval;
BEGIN
    IF p_offset IS NULL OR p_offset < interval '0' OR p_offset > interval '1 hour' THEN
        RAISE EXCEPTION 'pgleader: max_clock_offset must be between 0 and 1 hour, got %', coalesce(p_offset::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    PERFORM pgleader._lock_settings();
    SELECT s.max_clock_offset INTO old FROM pgleader.settings AS s FOR UPDATE;
    UPDATE pgleader.settings AS s SET max_clock_offset = p_offset;
    RETURN old;
END
$$;

-- grace reports this server's grace (noticing it, as every lease operation
-- does) and the settings: in_grace is whether new terms wait until
-- grace_until.
CREATE FUNCTION pgleader.grace()
RETURNS TABLE (in_grace boolean, grace_until timestamptz, max_ttl interval, max_clock_offset interval, db_now timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    g record;
    t timestamptz;
BEGIN
    g := pgleader._grace();
    t := clock_timestamp();
    RETURN QUERY SELECT t < g.grace_until, g.grace_until, g.max_ttl, g.max_clock_offset, t;
END
$$;

------------------------------------------------------------------------------
-- Terms: acquire, renew, release, advance, resign, read.
------------------------------------------------------------------------------

-- _term is the rule for a lease row when the lease changes hands, in one
-- place: every function that gives a key a new term or frees it sets the
-- row's term columns to what _term returns, and to nothing else. A new term
-- (p_holder given) starts at p_at, expires at p_expires_at, and has only
-- what it was won or handed off with: p_value, p_priority, p_handed_off
-- (true for a hand-off not yet confirmed); no resignation request, no
-- transfer target. A freed lease (p_holder NULL) has no term at all: every
-- column empty, priority 0, handed_off false. The key's own columns (key,
-- token, token_min, role) are the caller's to set. Called with constant
-- arguments as an uncorrelated subquery, it runs once per statement, however
-- many rows the statement changes.
CREATE FUNCTION pgleader._term(p_holder text DEFAULT NULL, p_at timestamptz DEFAULT NULL,
                               p_expires_at timestamptz DEFAULT NULL, p_value text DEFAULT NULL,
                               p_priority integer DEFAULT 0, p_handed_off boolean DEFAULT false)
RETURNS TABLE (holder text, acquired_at timestamptz, renewed_at timestamptz, expires_at timestamptz,
               value text, priority integer, handed_off boolean, resign_token bigint, transfer_to text)
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pgleader, pg_temp AS $$
    SELECT p_holder,
           CASE WHEN p_holder IS NOT NULL THEN p_at END,
           CASE WHEN p_holder IS NOT NULL THEN p_at END,
           CASE WHEN p_holder IS NOT NULL THEN p_expires_at END,
           CASE WHEN p_holder IS NOT NULL THEN p_value END,
           CASE WHEN p_holder IS NOT NULL THEN p_priority ELSE 0 END,
           p_holder IS NOT NULL AND p_handed_off,
           NULL::bigint,
           NULL::text
$$;

-- _lock_row returns p_key's lease row, created if missing, locked FOR
-- UPDATE. A row deleted while this waited for its lock is created again, a
-- few times at most, so the caller never decides on a row that is gone.
CREATE FUNCTION pgleader._lock_row(p_key text)
RETURNS pgleader.lease
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    r pgleader.lease%ROWTYPE;
BEGIN
    FOR attempt IN 1..3 LOOP
        INSERT INTO pgleader.lease AS l (key) VALUES (p_key) ON CONFLICT (key) DO NOTHING;
        SELECT * INTO r FROM pgleader.lease AS l WHERE l.key = p_key FOR UPDATE;
        IF FOUND THEN
            RETURN r;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'pgleader: the lease row of key % was deleted concurrently 3 times', to_json(p_key)
        USING ERRCODE = '40001', HINT = 'Nothing changed; try again.';
END
$$;

-- campaign takes the lease for p_owner if it is free or expired, drawing
-- the next token: one more than the larger of the key's counter and p_floor
-- (at most 2^62 - 1), so it also does advance's work in the same statement.
-- The term publishes p_value and carries p_priority, and p_owner's
-- candidate row goes. Also:
-- * if p_owner holds the lease in a term handed to it and not yet
--   confirmed, it confirms that term as take does (acquired = true), but
--   never during the grace;
-- * if another term holds the lease (or the server is in its grace),
--   nothing changes but, when p_candidate is not NULL, p_owner's candidate
--   row: registered with p_priority and p_value until p_candidate from now
--   (at most max_ttl). It returns the holder, its token, expiry and value
--   (or 'pgleader.grace' and the grace's end), so the caller can wait.
-- A failed campaign never consumes a token. Only on the caller's keys,
-- checked on the locked row; a win makes a key with no role the caller's.
-- acquired_at is the term's start: for a confirmed term, the hand-off's.
CREATE FUNCTION pgleader.campaign(p_key text, p_owner text, p_ttl interval, p_floor bigint, p_value text,
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
       SET token = greatest(l.token, p_floor) + 1, role = coalesce(l.role, pgleader._caller()),
           (holder, acquired_at, renewed_at, expires_at, value, priority, handed_off, resign_token, transfer_to)
             = (SELECT * FROM pgleader._term(p_owner, t, t + p_ttl, p_value, p_priority))
     WHERE l.key = p_key
    RETURNING l.token, l.expires_at INTO r.token, r.expires_at;
    DELETE FROM pgleader.candidate AS c WHERE c.key = p_key AND (c.owner = p_owner OR c.expires_at <= t);

    RETURN QUERY SELECT true, p_owner, r.token, r.expires_at, t, p_value, t;
END
$$;

-- acquire is campaign without a candidate row, at priority 0.
CREATE FUNCTION pgleader.acquire(p_key text, p_owner text, p_ttl interval, p_floor bigint DEFAULT 0, p_value text DEFAULT NULL)
RETURNS TABLE (acquired boolean, holder text, token bigint, expires_at timestamptz, db_now timestamptz, value text)
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
    SELECT c.acquired, c.holder, c.token, c.expires_at, c.db_now, c.value
      FROM pgleader.campaign(p_key, p_owner, p_ttl, p_floor, p_value, 0, NULL) AS c
$$;

-- renew_term extends the lease of the term (p_key, p_owner, p_token) to
-- clock_timestamp() + p_ttl, if that term still holds it unexpired (during
-- the grace, more than max_clock_offset from its expiry). expires_at is
-- NULL when the term no longer holds the lease; resign is whether the term
-- was asked to end (resign, transfer). A renewal confirms a handed-off
-- term. Only on the caller's keys; a renewal makes a key with no role the
-- renewing role's.
CREATE FUNCTION pgleader.renew_term(p_key text, p_owner text, p_token bigint, p_ttl interval)
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

-- renew_term with a minimum term also reports resign = true when a live
-- candidate of higher priority than the term's waits and the term has
-- lasted p_min_term (on the database clock): the holder then hands off to
-- the preferred candidate. NULL p_min_term never asks.
CREATE FUNCTION pgleader.renew_term(p_key text, p_owner text, p_token bigint, p_ttl interval, p_min_term interval)
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

-- renew is renew_term's expiry.
CREATE FUNCTION pgleader.renew(p_key text, p_owner text, p_token bigint, p_ttl interval)
RETURNS timestamptz
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
    SELECT r.expires_at FROM pgleader.renew_term(p_key, p_owner, p_token, p_ttl) AS r
$$;

-- release frees the lease if the term (p_key, p_owner, p_token) still holds
-- it, and returns whether the row still named that term. Only on the
-- caller's keys.
CREATE FUNCTION pgleader.release(p_key text, p_owner text, p_token bigint)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    c name := pgleader._caller();
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, NULL, true, false);

    UPDATE pgleader.lease AS l
       SET (holder, acquired_at, renewed_at, expires_at, value, priority, handed_off, resign_token, transfer_to)
             = (SELECT * FROM pgleader._term())
     WHERE l.key = p_key AND l.holder = p_owner AND l.token = p_token
       AND (l.role = c OR pgleader._own(l.role, false));
    IF FOUND THEN
        RETURN true;
    END IF;
    PERFORM pgleader._check_key_role(p_key, 'release it', false);
    RETURN false;
END
$$;

-- advance moves the key's counter up to at least p_floor (at most
-- 2^62 - 1) while the lease is free (or expired), so the next acquire
-- draws at least p_floor + 1. It never lowers the counter and changes
-- nothing while a term holds the lease or during the grace. It returns
-- whether the lease was free, and the counter afterwards. Only by the key's
-- role, a steer role or the owner, checked on the locked row; a row it
-- creates belongs to nobody until an acquire wins it.
CREATE FUNCTION pgleader.advance(p_key text, p_floor bigint)
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
           (holder, acquired_at, renewed_at, expires_at, value, priority, handed_off, resign_token, transfer_to)
             = (SELECT * FROM pgleader._term())
     WHERE l.key = p_key
    RETURNING l.token INTO r.token;
    RETURN QUERY SELECT true, r.token;
END
$$;

-- resign asks the term that holds p_key's lease (only if its token is
-- p_token, when given) to end. The holder learns at its next renewal
-- (renew_term reports it) and ends its term gracefully; one that never
-- renews again loses the lease at its expiry, as always. resigned is false,
-- with the reason in detail, when nobody holds the lease or another term
-- than p_token does. Only by the key's role, a steer role or the owner.
CREATE FUNCTION pgleader.resign(p_key text, p_token bigint DEFAULT NULL)
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

-- lease reads a key's row with the database clock. holder, the times and
-- value are NULL when the lease is free or has expired; token is then the
-- last token issued. A key never seen returns one row with token 0.
CREATE FUNCTION pgleader.lease(p_key text)
RETURNS TABLE (holder text, token bigint, acquired_at timestamptz, renewed_at timestamptz, expires_at timestamptz, db_now timestamptz, value text)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    t timestamptz := clock_timestamp();
BEGIN
    PERFORM pgleader._check_args(p_key, NULL, NULL, false, false);
    RETURN QUERY
        SELECT CASE WHEN l.expires_at > t THEN l.holder END,
               coalesce(l.token, 0),
               CASE WHEN l.expires_at > t THEN l.acquired_at END,
               CASE WHEN l.expires_at > t THEN l.renewed_at END,
               CASE WHEN l.expires_at > t THEN l.expires_at END,
               t,
               CASE WHEN l.expires_at > t THEN l.value END
          FROM (SELECT 1) AS one
          LEFT JOIN pgleader.lease AS l ON l.key = p_key;
END
$$;

-- holds reports whether the term (p_key, p_token) holds an unexpired lease
-- right now on the database clock. It takes no lock.
CREATE FUNCTION pgleader.holds(p_key text, p_token bigint)
RETURNS boolean
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
    SELECT EXISTS (
        SELECT 1 FROM pgleader.lease AS l
         WHERE l.key = p_key AND l.token = p_token
           AND l.holder IS NOT NULL AND l.expires_at > clock_timestamp())
$$;

-- leases is every lease, for status: the columns of lease(key), the key
-- and its role first; p_prefix narrows it to keys that start with it.
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

-- notify sends a hint on the channel 'pgleader' that a key's lease was
-- acquired (p_event 'acquire') or released ('release'). The payload is
-- "<event> <key>", the key last so it may hold spaces; it is delivered when
-- the transaction commits.
--
-- It is a hint only: anyone who can connect can notify this channel, and a
-- listener must read the lease before it believes anything. Call it in its
-- own transaction, after the lease operation committed, and ignore its
-- failure: a commit that notifies takes a cluster-wide lock and fails when
-- the notification queue is full, which must never fail or delay a lease
-- operation.
CREATE FUNCTION pgleader.notify(p_event text, p_key text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
BEGIN
    IF p_event IS NULL OR p_event NOT IN ('acquire', 'release') THEN
        RAISE EXCEPTION 'pgleader: event must be acquire or release, got %', coalesce(to_json(p_event)::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    PERFORM pgleader._check_args(p_key, NULL, NULL, false, false);
    PERFORM pg_notify('pgleader', p_event || ' ' || p_key);
END
$$;

------------------------------------------------------------------------------
-- Hand-off. A leader that steps down calls hand_off instead of release: in
-- one statement, under the lease row's lock, the lease passes to the best
-- live candidate with token + 1, marked handed_off. The successor believes
-- it only when the database says so (take, or campaign), and its timeline
-- counts from when it sent that check. A successor that never checks costs
-- what a crash costs: the lease expires at its candidate expiry.
--
-- A handed-off term is never confirmed during the failover grace: hand_off
-- releases during the grace, so a row marked handed_off that a server sees
-- in its grace was written by the server before it, and the rows after it
-- may be lost (the term may have been confirmed, led and handed on by the
-- very owner it names). Such a row expires before the grace ends.
------------------------------------------------------------------------------

-- take confirms a term handed to p_owner: if p_owner holds the lease
-- unexpired in a handed-off term (and the grace is over), it extends the
-- lease to p_ttl from now, as a renewal would, and returns acquired = true.
-- Otherwise it changes nothing and returns the lease as it is (holder NULL
-- when free). It never grants a free lease: a hint that names a candidate
-- makes it look, not lead. Only on the caller's keys.
CREATE FUNCTION pgleader.take(p_key text, p_owner text, p_ttl interval)
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

-- take with p_keep answers from a read when the handed-off term has at
-- least p_keep left: it returns acquired = true without a write, the term
-- keeps the hand-off's expiry (counted from when the check was sent) and
-- stays handed_off until its holder renews it. A term with less left is
-- confirmed by a write, as the 3-argument form does.
CREATE FUNCTION pgleader.take(p_key text, p_owner text, p_ttl interval, p_keep interval)
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

-- hand_off ends the term (p_key, p_owner, p_token) and, in the same
-- statement, hands the lease to the best live candidate other than p_owner:
-- p_to if given (or the transfer target the row names) and live, else the
-- one of highest priority, then the longest registered. The successor's
-- term draws token + 1, carries its candidate row's priority and value, is
-- marked handed_off, and expires at its candidate expiry (at most max_ttl
-- away) until it confirms it. With no live candidate, during the grace, or
-- with no token left, it releases the lease as release does. released is
-- whether the row still named the term; successor is the owner it was
-- handed to, or NULL. Only on the caller's keys, checked on the locked row
-- (and, when the term does not hold it, on the key's row, so that another
-- role's key is refused whatever the term named). It sends no
-- notification: after it commits, call hint_handoff.
CREATE FUNCTION pgleader.hand_off(p_key text, p_owner text, p_token bigint, p_to text DEFAULT NULL)
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
               SET token = l.token + 1,
                   (holder, acquired_at, renewed_at, expires_at, value, priority, handed_off, resign_token, transfer_to)
                     = (SELECT * FROM pgleader._term(c.owner, t, least(c.expires_at, t + g.max_ttl), c.value, c.priority, true))
             WHERE l.key = p_key
            RETURNING l.token INTO r.token;
            DELETE FROM pgleader.candidate AS k
             WHERE k.key = p_key AND (k.owner = c.owner OR k.owner = p_owner OR k.expires_at <= t);
            RETURN QUERY SELECT true, c.owner, r.token;
            RETURN;
        END IF;
    END IF;

    UPDATE pgleader.lease AS l
       SET (holder, acquired_at, renewed_at, expires_at, value, priority, handed_off, resign_token, transfer_to)
             = (SELECT * FROM pgleader._term())
     WHERE l.key = p_key;
    DELETE FROM pgleader.candidate AS k WHERE k.key = p_key AND (k.owner = p_owner OR k.expires_at <= t);
    RETURN QUERY SELECT true, NULL::text, r.token;
END
$$;

-- hint_handoff sends the hand-off's hint, after hand_off committed, from
-- the row it left: "handoff <bytes of successor> <successor> <key>" when the
-- row is handed off above the ended term's token p_ended, else "release
-- <key>". A hint only, as every notification: anyone may send one.
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
        ELSE 'release ' || p_key END)
      FROM (SELECT 1) AS one LEFT JOIN pgleader.lease AS l ON l.key = p_key;
END
$$;

-- transfer asks the term holding p_key to end and hand off to p_to, which
-- must be a live candidate of the key (else PF003, and nothing changes).
-- The holder learns at its next renewal, as for resign, ends its term
-- gracefully and hands the lease to p_to if p_to is still a live candidate
-- then (else to the best one). transferring is false, with the reason in
-- detail, when nobody holds the lease or p_to already does. Only by the
-- key's role, a steer role or the owner.
CREATE FUNCTION pgleader.transfer(p_key text, p_to text)
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

-- candidates lists p_key's live candidates, the best first.
CREATE FUNCTION pgleader.candidates(p_key text)
RETURNS TABLE (owner text, priority integer, registered_at timestamptz, expires_at timestamptz, value text, db_now timestamptz)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    t timestamptz := clock_timestamp();
BEGIN
    PERFORM pgleader._check_args(p_key, NULL, NULL, false, false);
    RETURN QUERY
        SELECT c.owner, c.priority, c.registered_at, c.expires_at, c.value, t
          FROM pgleader.candidate AS c
         WHERE c.key = p_key AND c.expires_at > t
         ORDER BY c.priority DESC, c.registered_at, c.owner;
END
$$;

-- withdraw removes p_owner's candidate row for p_key; a candidate that stops
-- calls it so that no term is handed to it. Only on the caller's keys.
CREATE FUNCTION pgleader.withdraw(p_key text, p_owner text)
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

------------------------------------------------------------------------------
-- Sets: many keys, shared evenly by the replicas that campaign for them.
-- Each key keeps its own lease row, token and timeline, with the rules of
-- the single-key functions; a set adds batching (one statement per
-- campaign, renewal tick and release batch) and spread (set_member). A set's
-- terms carry nothing of an elector's: no value, priority 0. Nothing here
-- notifies, and a key is reported won only by the UPDATE that wrote the
-- row naming the owner and the token.
------------------------------------------------------------------------------

-- acquire_many takes, for p_owner, up to p_limit of p_keys whose lease is
-- free or expired, each drawing its next token (one more than the larger of
-- its counter and its floor, p_floors[i] for p_keys[i] when p_floors is
-- given), and returns one row per key won. Keys held by another term, and
-- rows another transaction has locked (an acquire, a renewal, a guarded
-- write of the holder), are skipped, not waited for: rows are locked FOR
-- UPDATE in key order with SKIP LOCKED, so concurrent calls never deadlock
-- and never wait on each other. The expiry is read after the lock, on
-- clock_timestamp(). During the grace it takes nothing. A key whose counter
-- is at the largest bigint (set by hand) is never taken. It refuses keys of
-- another role (42501) before it takes any; a win makes a key with no role
-- the caller's.
CREATE FUNCTION pgleader.acquire_many(p_keys text[], p_owner text, p_ttl interval, p_limit integer,
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

-- renew_many extends, to clock_timestamp() + p_ttl, the lease of each term
-- (p_keys[i], p_owner, p_tokens[i]) that still holds it unexpired, with
-- renew's rule during the grace, and returns a row for each key it renewed,
-- with the new expiry: a key it does not return is lost (another role's
-- keys too). (Rows only for what changed: joining the input back costs a
-- nested loop the planner cannot size for an array.)
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

-- release_many frees the lease of each term (p_keys[i], p_owner,
-- p_tokens[i]) that still holds it, and returns a row for each key it
-- released; another role's keys are neither released nor returned.
CREATE FUNCTION pgleader.release_many(p_owner text, p_keys text[], p_tokens bigint[])
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
       SET (holder, acquired_at, renewed_at, expires_at, value, priority, handed_off, resign_token, transfer_to)
             = (SELECT * FROM pgleader._term())
      FROM unnest(p_keys, p_tokens) AS u(k, tok)
     WHERE l.key = u.k AND l.holder = p_owner AND l.token = u.tok
       AND (l.role = c OR pgleader._own(l.role, false))
    RETURNING l.key;
END
$$;

-- set_acquire is a replica's campaign for a set: it counts the set's live
-- members of the caller's role (p_owner included), computes p_owner's share
-- ceil(n / members) of the n = p_held + cardinality(p_keys) keys it knows,
-- and takes up to share - p_held + p_extra of p_keys (the set's keys it
-- does not hold) with acquire_many. p_extra lets the replica the others
-- agree on take keys nobody else will (see docs/sets.md). It returns the
-- keys won, their tokens and expiries, the number of live members, and the
-- database clock, in one row.
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

-- set_renew is a replica's renewal tick for a set: renew_many of the keys
-- it holds, and its membership, in one statement. The member row is written
-- when the replica joins, when p_held changed, and when less than half of
-- p_ttl is left of it, so a healthy replica writes it about once per
-- p_ttl/2. A member row expires no later than the leases renewed with it,
-- so the keys of a replica that died are free no sooner than its
-- membership is gone, and the others count the right share when they take
-- them. It returns the keys renewed and their expiries (a key not among
-- them is lost), the live members of the caller's role with their held
-- counts, and the database clock, in one row.
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

-- set_tick is set_renew with a short answer, for a tick that renews
-- thousands of keys: instead of every key renewed with its expiry, the keys
-- of p_keys it did not renew (lost) and the earliest expiry it set (NULL if
-- none); each renewed key's lease expires no sooner than that. Keys are
-- distinct (set_renew checks), so EXCEPT finds the lost ones with one hash,
-- not a scan per key.
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

-- set_release is release_many, returning the keys released, and, when
-- p_leave, removes p_owner from the caller's role's members of the set in
-- the same statement, so the others count their new share at their next
-- campaign. Member rows of the set expired over an hour ago go too.
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

-- set_status reports a set for operators: each live member with the keys
-- it held at its last renewal, and, for p_keys, how many are held by a live
-- lease, per holder. A role sees its own members; the schema's owner and
-- steer roles also see the members of the roles that own the keys they
-- name. It changes nothing.
CREATE FUNCTION pgleader.set_status(p_set text, p_keys text[] DEFAULT NULL)
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

------------------------------------------------------------------------------
-- Fences (package sqlfence). A refused fence raises PF001 and a refused
-- lease guard PF002, so the caller's transaction is aborted and cannot
-- commit even if the caller forgets to look at the error. The DETAIL of
-- PF001 is machine-readable: '<claim|stale> token <n>, stored fence <n>'.
------------------------------------------------------------------------------

-- _fence_take locks p_resource's guard row until the transaction ends and
-- raises its token to p_token, or raises PF001 if the stored token is
-- higher (or, for a claim, equal). Every write the transaction makes after
-- it then commits only if no newer term took the resource first: a newer
-- term's take waits for this row lock, and a term that took it later is
-- refused here. A resource belongs to the role that first claimed it,
-- checked on the locked row (a refusal ends the caller's statement, and the
-- lock with it).
CREATE FUNCTION pgleader._fence_take(p_resource text, p_token bigint, p_claim boolean)
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

-- fence_claim is a term's first take of a resource: the stored token must be
-- strictly lower than p_token, so of two holders of one token exactly one
-- claims.
CREATE FUNCTION pgleader.fence_claim(p_resource text, p_token bigint)
RETURNS void
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
    SELECT pgleader._fence_take(p_resource, p_token, true)
$$;

-- fence_write is every later take: the stored token may equal p_token.
CREATE FUNCTION pgleader.fence_write(p_resource text, p_token bigint)
RETURNS void
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
    SELECT pgleader._fence_take(p_resource, p_token, false)
$$;

-- fence_floor is the highest token that took p_resource, 0 if none did.
CREATE FUNCTION pgleader.fence_floor(p_resource text)
RETURNS bigint
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
BEGIN
    PERFORM pgleader._fence_check(p_resource, NULL, false);
    RETURN coalesce((SELECT f.token FROM pgleader.fence AS f WHERE f.resource = p_resource), 0);
END
$$;

-- lease_guard raises PF002 unless the term (p_key, p_token) holds an
-- unexpired lease on the database clock (during the grace, more than
-- max_clock_offset from its expiry, as for a renewal). Before reading the
-- clock it locks the lease row FOR KEY SHARE until the transaction ends:
-- a new term locks the row FOR UPDATE, so none can begin until this
-- transaction has committed or rolled back, while renewals and release
-- (FOR NO KEY UPDATE) pass. It runs inside the application's transaction,
-- so it reads the grace with _grace_peek. Only on the caller's keys,
-- checked on the locked row.
CREATE FUNCTION pgleader.lease_guard(p_key text, p_token bigint)
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

-- fence_trigger refuses an UPDATE that lowers the fence column named by its
-- argument (or sets it to NULL), raising PF001 with the table in the error's
-- schema and table fields. If the table no longer has that column (it was
-- renamed), it refuses every update it is called for with 42703 rather
-- than read a NULL and let them through: install the trigger again on the
-- new name. It runs as the caller: it acts on the application's table.
CREATE FUNCTION pgleader.fence_trigger()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    col text := TG_ARGV[0];
    old_row jsonb := to_jsonb(OLD);
    stored bigint;
    token bigint;
BEGIN
    IF NOT old_row ? col THEN
        RAISE EXCEPTION USING
            ERRCODE = '42703',
            MESSAGE = format('pgleader: table %s has no column %s, which its fence trigger %s guards',
                format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME), to_json(col), to_json(TG_NAME)),
            HINT = 'The fence column was renamed: install the fence trigger again on its new name with pgleader.install_fence_trigger, and drop this one.',
            SCHEMA = TG_TABLE_SCHEMA,
            TABLE = TG_TABLE_NAME;
    END IF;
    stored := (old_row ->> col)::bigint;
    token := (to_jsonb(NEW) ->> col)::bigint;
    IF stored IS NULL OR token >= stored THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION USING
        ERRCODE = 'PF001',
        MESSAGE = format('pgleader: table %s fenced: token %s is stale, stored fence is %s (column %s)',
            format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME), coalesce(token::text, 'NULL'), stored, quote_ident(col)),
        DETAIL = format('stale token %s, stored fence %s', coalesce(token::text, 'NULL'), stored),
        HINT = 'An update must not lower the fence column: a newer term has written this row.',
        SCHEMA = TG_TABLE_SCHEMA,
        TABLE = TG_TABLE_NAME,
        COLUMN = col;
END
$$;

-- install_fence_trigger makes p_table refuse any UPDATE that lowers p_column
-- (an integer column) or sets it to NULL, whatever statement or trigger
-- makes the change. It is idempotent and returns the trigger's name:
-- pgleader_fence_<column>, or pgleader_fence_<md5 of column> when that would
-- be longer than 63 bytes. The trigger is an AFTER ROW trigger whose WHEN
-- clause compares the old and new values, so an update that keeps or raises
-- the fence queues nothing. An existing trigger of that name is dropped and
-- created again in the same transaction (PostgreSQL 13 has no CREATE OR
-- REPLACE TRIGGER). It runs as the caller, who must own p_table.
CREATE FUNCTION pgleader.install_fence_trigger(p_table regclass, p_column name)
RETURNS name
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    typ regtype;
    trg text;
BEGIN
    IF p_table IS NULL THEN
        RAISE EXCEPTION 'pgleader: table must not be NULL' USING ERRCODE = '22023';
    END IF;
    IF p_column IS NULL OR p_column = '' THEN
        RAISE EXCEPTION 'pgleader: column must not be empty' USING ERRCODE = '22023';
    END IF;
    SELECT a.atttypid::regtype INTO typ
      FROM pg_catalog.pg_attribute AS a
     WHERE a.attrelid = p_table AND a.attname = p_column AND a.attnum > 0 AND NOT a.attisdropped;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgleader: table % has no column %', p_table, quote_ident(p_column) USING ERRCODE = '42703';
    END IF;
    IF typ NOT IN ('smallint'::regtype, 'integer'::regtype, 'bigint'::regtype) THEN
        RAISE EXCEPTION 'pgleader: fence column % of table % is %, not an integer type', quote_ident(p_column), p_table, typ
            USING ERRCODE = '42804';
    END IF;

    trg := 'pgleader_fence_' || p_column;
    IF octet_length(trg) > 63 THEN
        trg := 'pgleader_fence_' || md5(p_column);
    END IF;
    -- p_table prints schema-qualified whenever the pinned search_path would
    -- not find it, so the statements name the caller's table.
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_trigger AS tg WHERE tg.tgrelid = p_table AND tg.tgname = trg) THEN
        EXECUTE format('DROP TRIGGER %I ON %s', trg, p_table);
    END IF;
    EXECUTE format(
        'CREATE TRIGGER %I AFTER UPDATE ON %s FOR EACH ROW'
        ' WHEN (OLD.%I IS NOT NULL AND (NEW.%I >= OLD.%I) IS NOT TRUE)'
        ' EXECUTE FUNCTION pgleader.fence_trigger(%L)',
        trg, p_table, p_column, p_column, p_column, p_column);
    RETURN trg;
END
$$;

------------------------------------------------------------------------------
-- Privileges. The tables belong to the schema's owner and no other role
-- has any privilege on them; the functions an application calls run as the
-- owner and check every argument and the caller's role; the helpers (_…),
-- the setters and the grant functions are the owner's alone.
------------------------------------------------------------------------------

-- _app_functions lists the functions an application role may execute.
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

-- grant_usage gives p_role what an application needs to use pgleader
-- without owning it: USAGE on the schema and EXECUTE on the application's
-- functions, no privilege on any table (and it takes back anything else
-- the role was given in the schema); and, when p_history is given, SELECT
-- on that migration history table (normally
-- public.pgleader_schema_migrations), so that migrations.Up run by p_role
-- on an up-to-date database succeeds without trying to create it.
-- Installing a fence trigger also needs the table's owner. It is
-- idempotent; only a member of the schema's owning role may call it.
CREATE FUNCTION pgleader.grant_usage(p_role name, p_history regclass DEFAULT NULL)
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

-- grant_steer is grant_usage, and: the role may resign, transfer and
-- advance every role's keys (pgleader grant --steer).
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

REVOKE ALL ON ALL TABLES IN SCHEMA pgleader FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA pgleader FROM PUBLIC;
