-- The catalog of the schema pgleader that the migrations in this directory
-- build, as PostgreSQL 13 to 18 report it: every table (with its columns,
-- constraints, indexes, triggers and comments), every function with its full
-- definition, and who may use what ("grants: none" means only the owner,
-- the role that migrated). Generated; do not edit. TestSchemaSnapshot fails
-- when a freshly migrated database differs from it; after a change to the
-- migrations, regenerate it with
--
--	make schema    (go test ./migrations -run '^TestSchemaSnapshot$' -update)
--
-- and review the difference with the migration.

-- schema pgleader; grants: none

-- table pgleader.candidate; grants: none
--   comment pgleader candidates: replicas waiting for a key, each until its expires_at; the lease is handed to the best live one.
--   column key text NOT NULL
--   column owner text NOT NULL
--   column priority integer NOT NULL DEFAULT 0
--   column value text
--   column registered_at timestamp with time zone NOT NULL
--   column expires_at timestamp with time zone NOT NULL
--   constraint candidate_key_length CHECK (((octet_length(key) >= 1) AND (octet_length(key) <= 200)))
--   constraint candidate_owner_length CHECK (((octet_length(owner) >= 1) AND (octet_length(owner) <= 200)))
--   constraint candidate_pkey PRIMARY KEY (key, owner)
--   constraint candidate_value_length CHECK (((value IS NULL) OR (octet_length(value) <= 1024)))
--   CREATE UNIQUE INDEX candidate_pkey ON pgleader.candidate USING btree (key, owner)

-- table pgleader.fence; grants: none
--   comment pgleader fences: one guard row per resource; token is the highest token that took it and never decreases.
--   column resource text NOT NULL
--   column token bigint NOT NULL
--   column updated_at timestamp with time zone NOT NULL
--   column role text
--   constraint fence_pkey PRIMARY KEY (resource)
--   constraint fence_resource_length CHECK (((octet_length(resource) >= 1) AND (octet_length(resource) <= 200)))
--   constraint fence_token_positive CHECK ((token >= 1))
--   CREATE UNIQUE INDEX fence_pkey ON pgleader.fence USING btree (resource)

-- table pgleader.job; grants: none
--   comment pgleader scheduled jobs: a job's schedule, as its runners describe it, and the next instant they will run.
--   column name text NOT NULL
--   column schedule text NOT NULL
--   column next_at timestamp with time zone
--   column updated_at timestamp with time zone NOT NULL
--   column role text NOT NULL
--   constraint job_name_length CHECK (((octet_length(name) >= 1) AND (octet_length(name) <= 200)))
--   constraint job_pkey PRIMARY KEY (name)
--   constraint job_schedule_length CHECK (((octet_length(schedule) >= 1) AND (octet_length(schedule) <= 200)))
--   CREATE UNIQUE INDEX job_pkey ON pgleader.job USING btree (name)

-- table pgleader.job_run; grants: none
--   comment pgleader scheduled runs: one row per job and scheduled instant, claimed by the term (owner, token) that runs it; state running until it records done or failed.
--   column job text NOT NULL
--   column instant timestamp with time zone NOT NULL
--   column state text NOT NULL
--   column owner text NOT NULL
--   column token bigint NOT NULL
--   column attempt integer NOT NULL DEFAULT 1
--   column started_at timestamp with time zone NOT NULL
--   column finished_at timestamp with time zone
--   column error text
--   constraint job_run_attempt CHECK ((attempt >= 1))
--   constraint job_run_error_length CHECK (((error IS NULL) OR (octet_length(error) <= 1024)))
--   constraint job_run_pkey PRIMARY KEY (job, instant)
--   constraint job_run_state CHECK ((state = ANY (ARRAY['running'::text, 'done'::text, 'failed'::text])))
--   CREATE UNIQUE INDEX job_run_pkey ON pgleader.job_run USING btree (job, instant)

-- table pgleader.lease WITH (fillfactor=50); grants: none
--   comment pgleader leases: one row per key; token is the key's fencing counter and never decreases.
--   column key text NOT NULL
--   column holder text
--   column token bigint NOT NULL DEFAULT pgleader._epoch_base()
--   column acquired_at timestamp with time zone
--   column renewed_at timestamp with time zone
--   column expires_at timestamp with time zone
--   column value text
--   column resign_token bigint
--   column priority integer NOT NULL DEFAULT 0
--   column handed_off boolean NOT NULL DEFAULT false
--   column transfer_to text
--   column token_min bigint
--     comment pgleader: the next token drawn for this key exceeds token_min (set for a lease held across a failover). Do not edit.
--   column role text
--   constraint lease_held_has_expiry CHECK (((holder IS NULL) OR (expires_at IS NOT NULL)))
--   constraint lease_holder_length CHECK (((holder IS NULL) OR ((octet_length(holder) >= 1) AND (octet_length(holder) <= 200))))
--   constraint lease_key_length CHECK (((octet_length(key) >= 1) AND (octet_length(key) <= 200)))
--   constraint lease_pkey PRIMARY KEY (key)
--   constraint lease_token_nonnegative CHECK ((token >= 0))
--   constraint lease_transfer_to_length CHECK (((transfer_to IS NULL) OR ((octet_length(transfer_to) >= 1) AND (octet_length(transfer_to) <= 200))))
--   constraint lease_value_length CHECK (((value IS NULL) OR (octet_length(value) <= 1024)))
--   CREATE INDEX lease_handed_holder ON pgleader.lease USING btree (holder) WHERE handed_off
--   CREATE UNIQUE INDEX lease_pkey ON pgleader.lease USING btree (key)
--   CREATE TRIGGER lease_draw BEFORE UPDATE OF token ON pgleader.lease FOR EACH ROW WHEN (((new.token IS DISTINCT FROM old.token) AND ((old.token_min IS NOT NULL) OR (new.token >= '4611686018427387904'::bigint) OR ((new.token & '1099511627775'::bigint) = 0)))) EXECUTE FUNCTION pgleader._lease_draw()

-- table pgleader.lease_binding; grants: none
--   comment pgleader session-bound terms: the backend (pid, on the server run server_start) whose session holds the term (key, token, holder, acquired_at) and the key's advisory lock.
--   column key text NOT NULL
--   column token bigint NOT NULL
--   column holder text NOT NULL
--   column acquired_at timestamp with time zone NOT NULL
--   column pid integer NOT NULL
--   column backend_start timestamp with time zone
--   column server_start timestamp with time zone NOT NULL
--   column bound_at timestamp with time zone NOT NULL
--   constraint lease_binding_key_fkey FOREIGN KEY (key) REFERENCES pgleader.lease(key) ON DELETE CASCADE
--   constraint lease_binding_pkey PRIMARY KEY (key)
--   CREATE UNIQUE INDEX lease_binding_pkey ON pgleader.lease_binding USING btree (key)

-- table pgleader.server_epoch UNLOGGED; grants: none
--   comment pgleader: when this server began granting on its own (UNLOGGED: emptied by crash recovery, empty on a standby). Do not edit.
--   column only_row boolean NOT NULL DEFAULT true
--   column noticed_at timestamp with time zone NOT NULL
--   column grace_until timestamp with time zone NOT NULL
--   constraint server_epoch_only_row_check CHECK (only_row)
--   constraint server_epoch_pkey PRIMARY KEY (only_row)
--   CREATE UNIQUE INDEX server_epoch_pkey ON pgleader.server_epoch USING btree (only_row)

-- table pgleader.set_member; grants: none
--   comment pgleader set membership: the replicas campaigning for a set, until expires_at, and how many of its keys each held at its last renewal.
--   column set_name text NOT NULL
--   column owner text NOT NULL
--   column held integer NOT NULL DEFAULT 0
--   column joined_at timestamp with time zone NOT NULL
--   column expires_at timestamp with time zone NOT NULL
--   column role text NOT NULL
--   column pid integer
--     comment pgleader: the backend whose session binds this member (set_bind), on the server run server_start, since bound_at; NULL: not bound. Do not edit.
--   column server_start timestamp with time zone
--   column bound_at timestamp with time zone
--   constraint set_member_held_check CHECK ((held >= 0))
--   constraint set_member_name_length CHECK (((octet_length(set_name) >= 1) AND (octet_length(set_name) <= 200)))
--   constraint set_member_owner_length CHECK (((octet_length(owner) >= 1) AND (octet_length(owner) <= 200)))
--   constraint set_member_pkey PRIMARY KEY (set_name, role, owner)
--   CREATE UNIQUE INDEX set_member_pkey ON pgleader.set_member USING btree (set_name, role, owner)

-- table pgleader.settings; grants: none
--   comment pgleader settings: max_ttl bounds every lease TTL and is the grace after crash recovery or promotion; max_clock_offset bounds the offset between the clocks of a primary and its standbys.
--   column only_row boolean NOT NULL DEFAULT true
--   column max_ttl interval NOT NULL
--   column max_clock_offset interval NOT NULL
--   column epoch bigint NOT NULL DEFAULT 0
--     comment pgleader token epoch: every key's tokens are at least epoch * 2^40; raised by one by each server that starts after crash recovery or promotion. 4194304: no epoch left. Do not edit.
--   constraint settings_epoch_range CHECK (((epoch >= 0) AND (epoch <= 4194304)))
--   constraint settings_max_clock_offset_check CHECK (((max_clock_offset >= '00:00:00'::interval) AND (max_clock_offset <= '01:00:00'::interval)))
--   constraint settings_max_ttl_check CHECK (((max_ttl >= '00:00:00.1'::interval) AND (max_ttl <= '24:00:00'::interval)))
--   constraint settings_only_row_check CHECK (only_row)
--   constraint settings_pkey PRIMARY KEY (only_row)
--   CREATE UNIQUE INDEX settings_pkey ON pgleader.settings USING btree (only_row)

-- table pgleader.steerer; grants: none
--   column role name NOT NULL
--   column granted_at timestamp with time zone NOT NULL
--   constraint steerer_pkey PRIMARY KEY (role)
--   CREATE UNIQUE INDEX steerer_pkey ON pgleader.steerer USING btree (role)

-- function pgleader._app_functions(); grants: none
CREATE OR REPLACE FUNCTION pgleader._app_functions()
 RETURNS SETOF regprocedure
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
    SELECT p.oid::regprocedure
      FROM pg_catalog.pg_proc AS p
     WHERE p.pronamespace = 'pgleader'::regnamespace
       AND p.proname = ANY (ARRAY[
           'acquire', 'acquire_many', 'advance', 'bind_refusal', 'campaign', 'campaign_bound', 'candidates',
           'fence_claim', 'fence_floor',
           'fence_trigger', 'fence_write', 'grace', 'hand_off', 'hint_handoff', 'holds', 'install_fence_trigger',
           'job_claim', 'job_finish', 'job_runs', 'job_schedule', 'job_status',
           'lease', 'lease_guard', 'leases', 'notify', 'release', 'release_many', 'renew', 'renew_bound', 'renew_many',
           'renew_term', 'resign', 'set_acquire', 'set_bind', 'set_release', 'set_renew', 'set_status', 'set_tick',
           'set_wake', 'take', 'transfer', 'unbind', 'wait_member', 'wait_session', 'withdraw'])
$function$;

-- function pgleader._bind(text,bigint,interval); grants: none
CREATE OR REPLACE FUNCTION pgleader._bind(p_key text, p_token bigint, p_ttl interval)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader._binding_held(text,integer); grants: none
CREATE OR REPLACE FUNCTION pgleader._binding_held(p_key text, p_pid integer)
 RETURNS boolean
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
    SELECT EXISTS (
        SELECT 1
          FROM pg_catalog.pg_locks AS k, pgleader._binding_lock(p_key) AS b
         WHERE k.locktype = 'advisory' AND k.granted AND k.pid = p_pid
           AND k.database = (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = current_database())
           AND k.classid = b.classid::oid AND k.objid = b.objid::oid AND k.objsubid = 2)
$function$;

-- function pgleader._binding_lock(text); grants: none
CREATE OR REPLACE FUNCTION pgleader._binding_lock(p_key text, OUT classid integer, OUT objid integer)
 RETURNS record
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
    SELECT 1885826149, hashtext(p_key)
$function$;

-- function pgleader._bound_to(text,bigint,text,timestamp with time zone); grants: none
CREATE OR REPLACE FUNCTION pgleader._bound_to(p_key text, p_token bigint, p_holder text, p_acquired_at timestamp with time zone)
 RETURNS integer
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
    SELECT b.pid
      FROM pgleader.lease_binding AS b
     WHERE b.key = p_key AND b.token = p_token AND b.holder = p_holder AND b.acquired_at = p_acquired_at
       AND b.server_start = pg_postmaster_start_time()
$function$;

-- function pgleader._caller(); grants: none
CREATE OR REPLACE FUNCTION pgleader._caller()
 RETURNS name
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
BEGIN
    RETURN coalesce(nullif(current_setting('role'), 'none'), session_user)::name;
END
$function$;

-- function pgleader._check_args(text,text,interval,boolean,boolean); grants: none
CREATE OR REPLACE FUNCTION pgleader._check_args(p_key text, p_owner text, p_ttl interval, p_need_owner boolean, p_need_ttl boolean)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader._check_candidate(interval,integer); grants: none
CREATE OR REPLACE FUNCTION pgleader._check_candidate(p_candidate interval, p_priority integer)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader._check_floor(bigint); grants: none
CREATE OR REPLACE FUNCTION pgleader._check_floor(p_floor bigint)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
BEGIN
    IF p_floor IS NULL OR p_floor < 0 THEN
        RAISE EXCEPTION 'pgleader: floor must be zero or positive, got %', p_floor USING ERRCODE = '22023';
    END IF;
    IF p_floor > 4611686018427387903 THEN
        RAISE EXCEPTION 'pgleader: floor % is above the limit 4611686018427387903 (2^62 - 1)', p_floor
            USING ERRCODE = '22023';
    END IF;
END
$function$;

-- function pgleader._check_floors(bigint[],integer); grants: none
CREATE OR REPLACE FUNCTION pgleader._check_floors(p_floors bigint[], p_count integer)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader._check_key_role(text,text,boolean); grants: none
CREATE OR REPLACE FUNCTION pgleader._check_key_role(p_key text, p_what text, p_steer boolean)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
DECLARE
    rl text;
BEGIN
    SELECT l.role INTO rl FROM pgleader.lease AS l WHERE l.key = p_key;
    IF NOT pgleader._own(rl, p_steer) THEN
        PERFORM pgleader._refuse(p_what, 'key ' || to_json(p_key)::text, rl);
    END IF;
END
$function$;

-- function pgleader._check_keys(text[],bigint[],boolean); grants: none
CREATE OR REPLACE FUNCTION pgleader._check_keys(p_keys text[], p_tokens bigint[], p_need_tokens boolean)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader._check_ttl(interval,interval); grants: none
CREATE OR REPLACE FUNCTION pgleader._check_ttl(p_ttl interval, p_max_ttl interval)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
BEGIN
    IF p_ttl > p_max_ttl THEN
        RAISE EXCEPTION 'pgleader: ttl % exceeds max_ttl %', p_ttl, p_max_ttl
            USING ERRCODE = '22023',
                  HINT = 'Use a shorter TTL, or raise the limit with pgleader.set_max_ttl (it is also the grace after a failover).';
    END IF;
END
$function$;

-- function pgleader._check_value(text); grants: none
CREATE OR REPLACE FUNCTION pgleader._check_value(p_value text)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
BEGIN
    IF octet_length(p_value) > 1024 THEN
        RAISE EXCEPTION 'pgleader: value is % bytes; the limit is 1024', octet_length(p_value) USING ERRCODE = '22023';
    END IF;
END
$function$;

-- function pgleader._epoch(); grants: none
CREATE OR REPLACE FUNCTION pgleader._epoch()
 RETURNS bigint
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
    SELECT coalesce((SELECT s.epoch FROM pgleader.settings AS s), 0)
$function$;

-- function pgleader._epoch_base(); grants: none
CREATE OR REPLACE FUNCTION pgleader._epoch_base()
 RETURNS bigint
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
    SELECT pgleader._epoch() << 40
$function$;

-- function pgleader._epoch_bump(); grants: none
CREATE OR REPLACE FUNCTION pgleader._epoch_bump()
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader._fence_check(text,bigint,boolean); grants: none
CREATE OR REPLACE FUNCTION pgleader._fence_check(p_resource text, p_token bigint, p_need_token boolean)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader._fence_take(text,bigint,boolean); grants: none
CREATE OR REPLACE FUNCTION pgleader._fence_take(p_resource text, p_token bigint, p_claim boolean)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader._grace(); grants: none
CREATE OR REPLACE FUNCTION pgleader._grace(OUT grace_until timestamp with time zone, OUT max_ttl interval, OUT max_clock_offset interval)
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader._grace_peek(); grants: none
CREATE OR REPLACE FUNCTION pgleader._grace_peek(OUT grace_until timestamp with time zone, OUT max_ttl interval, OUT max_clock_offset interval)
 RETURNS record
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader._lease_draw(); grants: none
CREATE OR REPLACE FUNCTION pgleader._lease_draw()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader._lock_row(text); grants: none
CREATE OR REPLACE FUNCTION pgleader._lock_row(p_key text)
 RETURNS pgleader.lease
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader._lock_settings(); grants: none
CREATE OR REPLACE FUNCTION pgleader._lock_settings()
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader._member_held(text,text,text,integer); grants: none
CREATE OR REPLACE FUNCTION pgleader._member_held(p_set text, p_role text, p_owner text, p_pid integer)
 RETURNS boolean
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
    SELECT p_pid IS NOT NULL AND p_pid <> pg_backend_pid() AND EXISTS (
        SELECT 1
          FROM pg_catalog.pg_locks AS k, pgleader._member_lock(p_set, p_role, p_owner) AS b
         WHERE k.locktype = 'advisory' AND k.granted AND k.pid = p_pid
           AND k.database = (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = current_database())
           AND k.classid = b.classid::oid AND k.objid = b.objid::oid AND k.objsubid = 2)
$function$;

-- function pgleader._member_lock(text,text,text); grants: none
CREATE OR REPLACE FUNCTION pgleader._member_lock(p_set text, p_role text, p_owner text, OUT classid integer, OUT objid integer)
 RETURNS record
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
    SELECT 1885826163, hashtext(octet_length(p_set) || ':' || p_set || octet_length(p_role) || ':' || p_role || p_owner)
$function$;

-- function pgleader._member_mine(text,text,text); grants: none
CREATE OR REPLACE FUNCTION pgleader._member_mine(p_set text, p_role text, p_owner text)
 RETURNS boolean
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
    SELECT EXISTS (
        SELECT 1
          FROM pg_catalog.pg_locks AS k, pgleader._member_lock(p_set, p_role, p_owner) AS b
         WHERE k.locktype = 'advisory' AND k.granted AND k.pid = pg_backend_pid()
           AND k.classid = b.classid::oid AND k.objid = b.objid::oid AND k.objsubid = 2)
$function$;

-- function pgleader._own(text,boolean); grants: none
CREATE OR REPLACE FUNCTION pgleader._own(p_role text, p_steer boolean)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader._privileged(boolean); grants: none
CREATE OR REPLACE FUNCTION pgleader._privileged(p_steer boolean)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader._refuse(text,text,text); grants: none
CREATE OR REPLACE FUNCTION pgleader._refuse(p_what text, p_name text, p_role text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
BEGIN
    RAISE EXCEPTION 'pgleader: % belongs to role %; role % may not %', p_name, quote_ident(p_role),
            quote_ident(pgleader._caller()), p_what
        USING ERRCODE = '42501',
              HINT = 'A key or fence belongs to the role that first acquired or claimed it. Use one of your own, or ask the schema''s owner (or a role given pgleader.grant_steer) to steer it.';
END
$function$;

-- function pgleader._settings_lock(); grants: none
CREATE OR REPLACE FUNCTION pgleader._settings_lock(OUT classid integer, OUT objid integer)
 RETURNS record
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
    SELECT 1885826148, 1
$function$;

-- function pgleader._take_free(text[],text,interval,integer,bigint[]); grants: none
CREATE OR REPLACE FUNCTION pgleader._take_free(p_keys text[], p_owner text, p_ttl interval, p_limit integer, p_floors bigint[])
 RETURNS TABLE(key text, token bigint, expires_at timestamp with time zone, db_now timestamp with time zone)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
 SET enable_nestloop TO 'off'
 SET enable_hashjoin TO 'on'
 SET enable_mergejoin TO 'on'
 SET jit TO 'off'
 SET work_mem TO '32MB'
AS $function$
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
$function$;

-- function pgleader._term(text,timestamp with time zone,timestamp with time zone,text,integer,boolean); grants: none
CREATE OR REPLACE FUNCTION pgleader._term(p_holder text DEFAULT NULL::text, p_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_value text DEFAULT NULL::text, p_priority integer DEFAULT 0, p_handed_off boolean DEFAULT false)
 RETURNS TABLE(holder text, acquired_at timestamp with time zone, renewed_at timestamp with time zone, expires_at timestamp with time zone, value text, priority integer, handed_off boolean, resign_token bigint, transfer_to text)
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
    SELECT p_holder,
           CASE WHEN p_holder IS NOT NULL THEN p_at END,
           CASE WHEN p_holder IS NOT NULL THEN p_at END,
           CASE WHEN p_holder IS NOT NULL THEN p_expires_at END,
           CASE WHEN p_holder IS NOT NULL THEN p_value END,
           CASE WHEN p_holder IS NOT NULL THEN p_priority ELSE 0 END,
           p_holder IS NOT NULL AND p_handed_off,
           NULL::bigint,
           NULL::text
$function$;

-- function pgleader.acquire(text,text,interval,bigint,text); grants: none
CREATE OR REPLACE FUNCTION pgleader.acquire(p_key text, p_owner text, p_ttl interval, p_floor bigint DEFAULT 0, p_value text DEFAULT NULL::text)
 RETURNS TABLE(acquired boolean, holder text, token bigint, expires_at timestamp with time zone, db_now timestamp with time zone, value text)
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
    SELECT c.acquired, c.holder, c.token, c.expires_at, c.db_now, c.value
      FROM pgleader.campaign(p_key, p_owner, p_ttl, p_floor, p_value, 0, NULL) AS c
$function$;

-- function pgleader.acquire_many(text[],text,interval,integer,bigint[]); grants: none
CREATE OR REPLACE FUNCTION pgleader.acquire_many(p_keys text[], p_owner text, p_ttl interval, p_limit integer, p_floors bigint[] DEFAULT NULL::bigint[])
 RETURNS TABLE(key text, token bigint, expires_at timestamp with time zone, db_now timestamp with time zone)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
 SET enable_nestloop TO 'off'
 SET enable_hashjoin TO 'on'
 SET enable_mergejoin TO 'on'
 SET jit TO 'off'
AS $function$
BEGIN
    PERFORM pgleader._check_args('-', p_owner, p_ttl, true, true);
    PERFORM pgleader._check_keys(p_keys, NULL, false);
    IF p_limit IS NULL OR p_limit < 0 THEN
        RAISE EXCEPTION 'pgleader: limit must be zero or positive, got %', coalesce(p_limit::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    PERFORM pgleader._check_floors(p_floors, cardinality(p_keys));
    RETURN QUERY SELECT * FROM pgleader._take_free(p_keys, p_owner, p_ttl, p_limit, p_floors);
END
$function$;

-- function pgleader.advance(text,bigint); grants: none
CREATE OR REPLACE FUNCTION pgleader.advance(p_key text, p_floor bigint)
 RETURNS TABLE(advanced boolean, token bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader.bind_refusal(interval); grants: none
CREATE OR REPLACE FUNCTION pgleader.bind_refusal(p_ttl interval)
 RETURNS text
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader.campaign(text,text,interval,bigint,text,integer,interval); grants: none
CREATE OR REPLACE FUNCTION pgleader.campaign(p_key text, p_owner text, p_ttl interval, p_floor bigint, p_value text, p_priority integer, p_candidate interval)
 RETURNS TABLE(acquired boolean, holder text, token bigint, expires_at timestamp with time zone, db_now timestamp with time zone, value text, acquired_at timestamp with time zone)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader.campaign_bound(text,text,interval,bigint,text,integer,interval); grants: none
CREATE OR REPLACE FUNCTION pgleader.campaign_bound(p_key text, p_owner text, p_ttl interval, p_floor bigint, p_value text, p_priority integer, p_candidate interval)
 RETURNS TABLE(acquired boolean, holder text, token bigint, expires_at timestamp with time zone, db_now timestamp with time zone, value text, acquired_at timestamp with time zone, bound boolean, holder_bound boolean, lapsed boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader.candidates(text); grants: none
CREATE OR REPLACE FUNCTION pgleader.candidates(p_key text)
 RETURNS TABLE(owner text, priority integer, registered_at timestamp with time zone, expires_at timestamp with time zone, value text, db_now timestamp with time zone)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader.fence_claim(text,bigint); grants: none
CREATE OR REPLACE FUNCTION pgleader.fence_claim(p_resource text, p_token bigint)
 RETURNS void
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
    SELECT pgleader._fence_take(p_resource, p_token, true)
$function$;

-- function pgleader.fence_floor(text); grants: none
CREATE OR REPLACE FUNCTION pgleader.fence_floor(p_resource text)
 RETURNS bigint
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
BEGIN
    PERFORM pgleader._fence_check(p_resource, NULL, false);
    RETURN coalesce((SELECT f.token FROM pgleader.fence AS f WHERE f.resource = p_resource), 0);
END
$function$;

-- function pgleader.fence_trigger(); grants: none
CREATE OR REPLACE FUNCTION pgleader.fence_trigger()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader.fence_write(text,bigint); grants: none
CREATE OR REPLACE FUNCTION pgleader.fence_write(p_resource text, p_token bigint)
 RETURNS void
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
    SELECT pgleader._fence_take(p_resource, p_token, false)
$function$;

-- function pgleader.grace(); grants: none
CREATE OR REPLACE FUNCTION pgleader.grace()
 RETURNS TABLE(in_grace boolean, grace_until timestamp with time zone, max_ttl interval, max_clock_offset interval, db_now timestamp with time zone)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
DECLARE
    g record;
    t timestamptz;
BEGIN
    g := pgleader._grace();
    t := clock_timestamp();
    RETURN QUERY SELECT t < g.grace_until, g.grace_until, g.max_ttl, g.max_clock_offset, t;
END
$function$;

-- function pgleader.grant_steer(name); grants: none
CREATE OR REPLACE FUNCTION pgleader.grant_steer(p_role name)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
BEGIN
    PERFORM pgleader.grant_usage(p_role);
    INSERT INTO pgleader.steerer AS s (role, granted_at) VALUES (p_role, clock_timestamp())
    ON CONFLICT (role) DO NOTHING;
END
$function$;

-- function pgleader.grant_usage(name,regclass); grants: none
CREATE OR REPLACE FUNCTION pgleader.grant_usage(p_role name, p_history regclass DEFAULT NULL::regclass)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader.hand_off(text,text,bigint,text); grants: none
CREATE OR REPLACE FUNCTION pgleader.hand_off(p_key text, p_owner text, p_token bigint, p_to text DEFAULT NULL::text)
 RETURNS TABLE(released boolean, successor text, token bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader.hint_handoff(text,bigint); grants: none
CREATE OR REPLACE FUNCTION pgleader.hint_handoff(p_key text, p_ended bigint)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
BEGIN
    PERFORM pgleader._check_args(p_key, NULL, NULL, false, false);
    PERFORM pg_notify('pgleader', CASE
        WHEN l.holder IS NOT NULL AND l.token > p_ended
             AND (l.handed_off OR l.expires_at > clock_timestamp())
        THEN 'handoff ' || octet_length(l.holder) || ' ' || l.holder || ' ' || p_key
        ELSE 'release ' || p_key END)
      FROM (SELECT 1) AS one LEFT JOIN pgleader.lease AS l ON l.key = p_key;
END
$function$;

-- function pgleader.holds(text,bigint); grants: none
CREATE OR REPLACE FUNCTION pgleader.holds(p_key text, p_token bigint)
 RETURNS boolean
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
    SELECT EXISTS (
        SELECT 1 FROM pgleader.lease AS l
         WHERE l.key = p_key AND l.token = p_token
           AND l.holder IS NOT NULL AND l.expires_at > clock_timestamp())
$function$;

-- function pgleader.install_fence_trigger(regclass,name); grants: none
CREATE OR REPLACE FUNCTION pgleader.install_fence_trigger(p_table regclass, p_column name)
 RETURNS name
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader.job_claim(text,timestamp with time zone,text,bigint,timestamp with time zone,text); grants: none
CREATE OR REPLACE FUNCTION pgleader.job_claim(p_job text, p_instant timestamp with time zone, p_owner text, p_token bigint, p_retry_until timestamp with time zone DEFAULT NULL::timestamp with time zone, p_fence text DEFAULT NULL::text)
 RETURNS TABLE(outcome text, db_now timestamp with time zone, state text, owner text, token bigint, attempt integer, started_at timestamp with time zone)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    t timestamptz := clock_timestamp();
    c name := pgleader._caller();
    r pgleader.job_run;
    result text;
    inserted boolean := false;
    locked boolean := false;
BEGIN
    PERFORM pgleader._check_args(p_job, p_owner, NULL, true, false);
    IF p_instant IS NULL OR p_token IS NULL THEN
        RAISE EXCEPTION 'pgleader: instant and token must not be NULL' USING ERRCODE = '22023';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pgleader.lease AS l
                    WHERE l.key = p_job AND l.holder = p_owner AND l.token = p_token
                      AND NOT l.handed_off AND l.expires_at > t
                      AND (l.role = c OR pgleader._own(l.role, false))) THEN
        -- Another role's key is refused as such; a term of one's own that
        -- ended is only lost.
        PERFORM pgleader._check_key_role(p_job, 'claim its runs', false);
        RETURN QUERY SELECT 'lost'::text, t, NULL::text, NULL::text, NULL::bigint, NULL::integer, NULL::timestamptz;
        RETURN;
    END IF;
    IF t < p_instant THEN
        RETURN QUERY SELECT 'early'::text, t, NULL::text, NULL::text, NULL::bigint, NULL::integer, NULL::timestamptz;
        RETURN;
    END IF;
    -- A run is never inserted for an instant older than one recorded: such
    -- an instant was passed over, or its run was deleted by job_finish's
    -- keep, and running it now could run it twice.
    IF NOT EXISTS (SELECT 1 FROM pgleader.job_run AS jr WHERE jr.job = p_job AND jr.instant > p_instant) THEN
        INSERT INTO pgleader.job_run AS jr (job, instant, state, owner, token, attempt, started_at)
        VALUES (p_job, p_instant, 'running', p_owner, p_token, 1, t)
        ON CONFLICT (job, instant) DO NOTHING
        RETURNING * INTO r;
        inserted := FOUND;
    END IF;
    IF NOT inserted THEN
        SELECT * INTO r FROM pgleader.job_run AS jr WHERE jr.job = p_job AND jr.instant = p_instant FOR UPDATE;
        locked := FOUND;
    END IF;
    IF inserted OR locked THEN
        PERFORM FROM pgleader.lease AS l WHERE l.key = p_job FOR KEY SHARE;
        t := clock_timestamp();
        IF NOT EXISTS (SELECT 1 FROM pgleader.lease AS l
                        WHERE l.key = p_job AND l.holder = p_owner AND l.token = p_token
                          AND NOT l.handed_off AND l.expires_at > t
                          AND (l.role = c OR pgleader._own(l.role, false))) THEN
            IF inserted THEN
                DELETE FROM pgleader.job_run AS jr WHERE jr.job = p_job AND jr.instant = p_instant;
            END IF;
            RETURN QUERY SELECT 'lost'::text, t, NULL::text, NULL::text, NULL::bigint, NULL::integer, NULL::timestamptz;
            RETURN;
        END IF;
    END IF;
    IF inserted THEN
        result := 'run';
    ELSE
        IF NOT locked THEN
            result := 'skip';
        ELSIF r.state = 'running' AND r.token = p_token AND r.owner = p_owner THEN
            result := 'run';
        ELSIF r.state = 'running' AND r.token < p_token AND p_retry_until IS NOT NULL AND t <= p_retry_until THEN
            UPDATE pgleader.job_run AS jr
               SET owner = p_owner, token = p_token, attempt = jr.attempt + 1, started_at = t
             WHERE jr.job = p_job AND jr.instant = p_instant
            RETURNING * INTO r;
            result := 'retry';
        ELSE
            result := 'skip';
        END IF;
    END IF;
    IF result IN ('run', 'retry') AND p_fence IS NOT NULL THEN
        PERFORM pgleader._fence_take(p_fence, p_token, false);
    END IF;
    RETURN QUERY SELECT result, t, r.state, r.owner, r.token, r.attempt, r.started_at;
END
$function$;

-- function pgleader.job_finish(text,timestamp with time zone,text,bigint,boolean,text,integer); grants: none
CREATE OR REPLACE FUNCTION pgleader.job_finish(p_job text, p_instant timestamp with time zone, p_owner text, p_token bigint, p_ok boolean, p_error text DEFAULT NULL::text, p_keep integer DEFAULT 1000)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
DECLARE
    oldest timestamptz;
BEGIN
    PERFORM pgleader._check_args(p_job, p_owner, NULL, true, false);
    PERFORM pgleader._check_key_role(p_job, 'record its runs', false);
    IF p_keep IS NULL OR p_keep < 1 THEN
        RAISE EXCEPTION 'pgleader: keep must be at least 1, got %', p_keep USING ERRCODE = '22023';
    END IF;
    UPDATE pgleader.job_run AS jr
       SET state = CASE WHEN p_ok THEN 'done' ELSE 'failed' END,
           finished_at = clock_timestamp(),
           error = CASE WHEN p_ok THEN NULL
                        ELSE left(coalesce(p_error, 'failed'), 256) END
     WHERE jr.job = p_job AND jr.instant = p_instant AND jr.owner = p_owner AND jr.token = p_token
       AND jr.state = 'running';
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    SELECT jr.instant INTO oldest FROM pgleader.job_run AS jr
     WHERE jr.job = p_job ORDER BY jr.instant DESC OFFSET p_keep - 1 LIMIT 1;
    IF oldest IS NOT NULL THEN
        DELETE FROM pgleader.job_run AS jr WHERE jr.job = p_job AND jr.instant < oldest;
    END IF;
    RETURN true;
END
$function$;

-- function pgleader.job_runs(text,integer); grants: none
CREATE OR REPLACE FUNCTION pgleader.job_runs(p_job text, p_limit integer DEFAULT 100)
 RETURNS TABLE(instant timestamp with time zone, state text, owner text, token bigint, attempt integer, started_at timestamp with time zone, finished_at timestamp with time zone, error text)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
    SELECT jr.instant, jr.state, jr.owner, jr.token, jr.attempt, jr.started_at, jr.finished_at, jr.error
      FROM pgleader.job_run AS jr
     WHERE jr.job = p_job
     ORDER BY jr.instant DESC
     LIMIT greatest(p_limit, 0)
$function$;

-- function pgleader.job_schedule(text,text,timestamp with time zone); grants: none
CREATE OR REPLACE FUNCTION pgleader.job_schedule(p_job text, p_schedule text, p_next timestamp with time zone)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
DECLARE
    t timestamptz := clock_timestamp();
    rl text;
BEGIN
    PERFORM pgleader._check_args(p_job, NULL, NULL, false, false);
    IF p_schedule IS NULL OR p_schedule = '' OR octet_length(p_schedule) > 200 THEN
        RAISE EXCEPTION 'pgleader: a job''s schedule must be 1 to 200 bytes' USING ERRCODE = '22023';
    END IF;
    INSERT INTO pgleader.job AS j (name, schedule, next_at, updated_at, role)
    VALUES (p_job, p_schedule, p_next, t, pgleader._caller())
    ON CONFLICT (name) DO NOTHING;
    IF FOUND THEN
        RETURN t;
    END IF;
    SELECT j.role INTO rl FROM pgleader.job AS j WHERE j.name = p_job;
    IF NOT pgleader._own(rl, false) THEN
        PERFORM pgleader._refuse('schedule it', 'job ' || to_json(p_job)::text, rl);
    END IF;
    UPDATE pgleader.job AS j
       SET schedule = p_schedule, next_at = p_next, updated_at = t
     WHERE j.name = p_job
       AND (j.schedule IS DISTINCT FROM p_schedule OR j.next_at IS DISTINCT FROM p_next);
    RETURN t;
END
$function$;

-- function pgleader.job_status(text); grants: none
CREATE OR REPLACE FUNCTION pgleader.job_status(p_job text DEFAULT NULL::text)
 RETURNS TABLE(job text, schedule text, next_at timestamp with time zone, role text, instant timestamp with time zone, state text, owner text, token bigint, attempt integer, started_at timestamp with time zone, finished_at timestamp with time zone, error text, db_now timestamp with time zone)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
    SELECT j.name, j.schedule, j.next_at, j.role, r.instant, r.state, r.owner, r.token, r.attempt,
           r.started_at, r.finished_at, r.error, clock_timestamp()
      FROM pgleader.job AS j
      LEFT JOIN LATERAL (SELECT * FROM pgleader.job_run AS jr
                          WHERE jr.job = j.name ORDER BY jr.instant DESC LIMIT 1) AS r ON true
     WHERE p_job IS NULL OR j.name = p_job
     ORDER BY j.name
$function$;

-- function pgleader.lease(text); grants: none
CREATE OR REPLACE FUNCTION pgleader.lease(p_key text)
 RETURNS TABLE(holder text, token bigint, acquired_at timestamp with time zone, renewed_at timestamp with time zone, expires_at timestamp with time zone, db_now timestamp with time zone, value text)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader.lease_guard(text,bigint); grants: none
CREATE OR REPLACE FUNCTION pgleader.lease_guard(p_key text, p_token bigint)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader.leases(text); grants: none
CREATE OR REPLACE FUNCTION pgleader.leases(p_prefix text DEFAULT ''::text)
 RETURNS TABLE(key text, role text, holder text, token bigint, acquired_at timestamp with time zone, renewed_at timestamp with time zone, expires_at timestamp with time zone, db_now timestamp with time zone, value text)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader.notify(text,text); grants: none
CREATE OR REPLACE FUNCTION pgleader.notify(p_event text, p_key text)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
BEGIN
    IF p_event IS NULL OR p_event NOT IN ('acquire', 'release') THEN
        RAISE EXCEPTION 'pgleader: event must be acquire or release, got %', coalesce(to_json(p_event)::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    PERFORM pgleader._check_args(p_key, NULL, NULL, false, false);
    PERFORM pg_notify('pgleader', p_event || ' ' || p_key);
END
$function$;

-- function pgleader.release(text,text,bigint); grants: none
CREATE OR REPLACE FUNCTION pgleader.release(p_key text, p_owner text, p_token bigint)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader.release_many(text,text[],bigint[]); grants: none
CREATE OR REPLACE FUNCTION pgleader.release_many(p_owner text, p_keys text[], p_tokens bigint[])
 RETURNS TABLE(key text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
 SET enable_nestloop TO 'off'
 SET enable_hashjoin TO 'on'
 SET enable_mergejoin TO 'on'
 SET jit TO 'off'
AS $function$
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
$function$;

-- function pgleader.renew(text,text,bigint,interval); grants: none
CREATE OR REPLACE FUNCTION pgleader.renew(p_key text, p_owner text, p_token bigint, p_ttl interval)
 RETURNS timestamp with time zone
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
    SELECT r.expires_at FROM pgleader.renew_term(p_key, p_owner, p_token, p_ttl) AS r
$function$;

-- function pgleader.renew_bound(text,text,bigint,interval,interval); grants: none
CREATE OR REPLACE FUNCTION pgleader.renew_bound(p_key text, p_owner text, p_token bigint, p_ttl interval, p_min_term interval)
 RETURNS TABLE(expires_at timestamp with time zone, resign boolean, bound boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader.renew_many(text,text[],bigint[],interval); grants: none
CREATE OR REPLACE FUNCTION pgleader.renew_many(p_owner text, p_keys text[], p_tokens bigint[], p_ttl interval)
 RETURNS TABLE(key text, expires_at timestamp with time zone, resign boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
 SET enable_nestloop TO 'off'
 SET enable_hashjoin TO 'on'
 SET enable_mergejoin TO 'on'
 SET jit TO 'off'
AS $function$
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

    PERFORM FROM pgleader.lease AS l, unnest(p_keys, p_tokens) AS u(k, tok)
     WHERE l.key = u.k AND l.holder = p_owner AND l.token = u.tok
       FOR NO KEY UPDATE OF l;
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
$function$;

-- function pgleader.renew_term(text,text,bigint,interval); grants: none
CREATE OR REPLACE FUNCTION pgleader.renew_term(p_key text, p_owner text, p_token bigint, p_ttl interval)
 RETURNS TABLE(expires_at timestamp with time zone, resign boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
DECLARE
    c name := pgleader._caller();
    g record;
    e timestamptz;
    rs boolean;
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, p_ttl, true, true);
    g := pgleader._grace();
    PERFORM pgleader._check_ttl(p_ttl, g.max_ttl);

    PERFORM FROM pgleader.lease AS l WHERE l.key = p_key AND l.holder = p_owner AND l.token = p_token FOR NO KEY UPDATE;
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
$function$;

-- function pgleader.renew_term(text,text,bigint,interval,interval); grants: none
CREATE OR REPLACE FUNCTION pgleader.renew_term(p_key text, p_owner text, p_token bigint, p_ttl interval, p_min_term interval)
 RETURNS TABLE(expires_at timestamp with time zone, resign boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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

    PERFORM FROM pgleader.lease AS l WHERE l.key = p_key AND l.holder = p_owner AND l.token = p_token FOR NO KEY UPDATE;
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
$function$;

-- function pgleader.resign(text,bigint); grants: none
CREATE OR REPLACE FUNCTION pgleader.resign(p_key text, p_token bigint DEFAULT NULL::bigint)
 RETURNS TABLE(resigned boolean, holder text, token bigint, detail text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader.set_acquire(text,text,text[],interval,integer,integer,bigint[],integer,text[]); grants: none
CREATE OR REPLACE FUNCTION pgleader.set_acquire(p_set text, p_owner text, p_keys text[], p_ttl interval, p_held integer, p_extra integer DEFAULT 0, p_floors bigint[] DEFAULT NULL::bigint[], p_total integer DEFAULT NULL::integer, p_confirm text[] DEFAULT NULL::text[])
 RETURNS TABLE(keys text[], tokens bigint[], expires_at timestamp with time zone[], acquired_at timestamp with time zone[], members integer, db_now timestamp with time zone)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
 SET enable_nestloop TO 'off'
 SET enable_hashjoin TO 'on'
 SET enable_mergejoin TO 'on'
 SET jit TO 'off'
AS $function$
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
$function$;

-- function pgleader.set_bind(text,text,interval,text[]); grants: none
CREATE OR REPLACE FUNCTION pgleader.set_bind(p_set text, p_owner text, p_ttl interval, p_keys text[] DEFAULT NULL::text[])
 RETURNS TABLE(bound boolean, refusal text, lapsed integer, lapsed_keys text[], lapsed_tokens bigint[], lapsed_acquired timestamp with time zone[], lapsed_at timestamp with time zone)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
 SET enable_nestloop TO 'off'
 SET enable_hashjoin TO 'on'
 SET enable_mergejoin TO 'on'
 SET jit TO 'off'
AS $function$
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
$function$;

-- function pgleader.set_max_clock_offset(interval); grants: none
CREATE OR REPLACE FUNCTION pgleader.set_max_clock_offset(p_offset interval)
 RETURNS interval
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader.set_max_ttl(interval); grants: none
CREATE OR REPLACE FUNCTION pgleader.set_max_ttl(p_max_ttl interval)
 RETURNS interval
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader.set_release(text,text,text[],bigint[],boolean,boolean[]); grants: none
CREATE OR REPLACE FUNCTION pgleader.set_release(p_set text, p_owner text, p_keys text[], p_tokens bigint[], p_leave boolean, p_hand_off boolean[] DEFAULT NULL::boolean[])
 RETURNS TABLE(key text, successor text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
 SET enable_nestloop TO 'off'
 SET enable_hashjoin TO 'on'
 SET enable_mergejoin TO 'on'
 SET jit TO 'off'
AS $function$
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
$function$;

-- function pgleader.set_renew(text,text,text[],bigint[],interval,integer); grants: none
CREATE OR REPLACE FUNCTION pgleader.set_renew(p_set text, p_owner text, p_keys text[], p_tokens bigint[], p_ttl interval, p_held integer)
 RETURNS TABLE(renewed text[], expires_at timestamp with time zone[], resign text[], members text[], member_held integer[], member_expires_at timestamp with time zone[], handed integer, db_now timestamp with time zone)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
 SET enable_nestloop TO 'off'
 SET enable_hashjoin TO 'on'
 SET enable_mergejoin TO 'on'
 SET jit TO 'off'
AS $function$
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
$function$;

-- function pgleader.set_status(text,text[]); grants: none
CREATE OR REPLACE FUNCTION pgleader.set_status(p_set text, p_keys text[] DEFAULT NULL::text[])
 RETURNS TABLE(owner text, member boolean, member_held integer, member_expires_at timestamp with time zone, leases integer, db_now timestamp with time zone)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
 SET enable_nestloop TO 'off'
 SET enable_hashjoin TO 'on'
 SET enable_mergejoin TO 'on'
 SET jit TO 'off'
AS $function$
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
$function$;

-- function pgleader.set_tick(text,text,text[],bigint[],interval,integer); grants: none
CREATE OR REPLACE FUNCTION pgleader.set_tick(p_set text, p_owner text, p_keys text[], p_tokens bigint[], p_ttl interval, p_held integer)
 RETURNS TABLE(lost text[], resign text[], expires_at timestamp with time zone, members text[], member_held integer[], member_expires_at timestamp with time zone[], handed integer, db_now timestamp with time zone)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
 SET enable_nestloop TO 'off'
 SET enable_hashjoin TO 'on'
 SET enable_mergejoin TO 'on'
 SET jit TO 'off'
AS $function$
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
$function$;

-- function pgleader.set_wake(text,text,text[]); grants: none
CREATE OR REPLACE FUNCTION pgleader.set_wake(p_set text, p_owner text, p_keys text[])
 RETURNS TABLE(lapsed integer, dead text[], watch text, lapsed_keys text[], lapsed_holders text[], lapsed_tokens bigint[], lapsed_acquired timestamp with time zone[], lapsed_at timestamp with time zone)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
 SET enable_nestloop TO 'off'
 SET enable_hashjoin TO 'on'
 SET enable_mergejoin TO 'on'
 SET jit TO 'off'
AS $function$
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
$function$;

-- function pgleader.take(text,text,interval); grants: none
CREATE OR REPLACE FUNCTION pgleader.take(p_key text, p_owner text, p_ttl interval)
 RETURNS TABLE(acquired boolean, holder text, token bigint, expires_at timestamp with time zone, db_now timestamp with time zone, value text, acquired_at timestamp with time zone)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
DECLARE
    c name := pgleader._caller();
    r pgleader.lease%ROWTYPE;
    g record;
    t timestamptz;
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, p_ttl, true, true);
    g := pgleader._grace();
    PERFORM pgleader._check_ttl(p_ttl, g.max_ttl);

    PERFORM FROM pgleader.lease AS l WHERE l.key = p_key AND l.holder = p_owner AND l.handed_off FOR NO KEY UPDATE;
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
$function$;

-- function pgleader.take(text,text,interval,interval); grants: none
CREATE OR REPLACE FUNCTION pgleader.take(p_key text, p_owner text, p_ttl interval, p_keep interval)
 RETURNS TABLE(acquired boolean, holder text, token bigint, expires_at timestamp with time zone, db_now timestamp with time zone, value text, acquired_at timestamp with time zone)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader.transfer(text,text); grants: none
CREATE OR REPLACE FUNCTION pgleader.transfer(p_key text, p_to text)
 RETURNS TABLE(transferring boolean, holder text, token bigint, detail text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader.unbind(text); grants: none
CREATE OR REPLACE FUNCTION pgleader.unbind(p_key text)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
DECLARE
    lk record := pgleader._binding_lock(p_key);
BEGIN
    PERFORM pgleader._check_args(p_key, NULL, NULL, false, false);
    PERFORM pgleader._check_key_role(p_key, 'unbind it', false);
    WHILE pgleader._binding_held(p_key, pg_backend_pid()) LOOP
        PERFORM pg_advisory_unlock(lk.classid, lk.objid);
    END LOOP;
END
$function$;

-- function pgleader.wait_member(text,text,interval); grants: none
CREATE OR REPLACE FUNCTION pgleader.wait_member(p_set text, p_member text, p_timeout interval)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
DECLARE
    lk record;
    ms bigint;
BEGIN
    PERFORM pgleader._check_args(p_set, p_member, NULL, true, false);
    IF p_timeout IS NULL OR p_timeout <= interval '0' THEN
        RAISE EXCEPTION 'pgleader: timeout must be positive, got %', coalesce(p_timeout::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    lk := pgleader._member_lock(p_set, pgleader._caller(), p_member);
    ms := greatest(1, ceil(extract(epoch FROM p_timeout) * 1000))::bigint;
    PERFORM set_config('lock_timeout', ms::text, true);
    PERFORM pg_advisory_lock(lk.classid, lk.objid);
    RETURN true;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END
$function$;

-- function pgleader.wait_session(text,interval); grants: none
CREATE OR REPLACE FUNCTION pgleader.wait_session(p_key text, p_timeout interval)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
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
$function$;

-- function pgleader.withdraw(text,text); grants: none
CREATE OR REPLACE FUNCTION pgleader.withdraw(p_key text, p_owner text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgleader', 'pg_temp'
AS $function$
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, NULL, true, false);
    PERFORM pgleader._check_key_role(p_key, 'withdraw its candidates', false);
    DELETE FROM pgleader.candidate AS c WHERE c.key = p_key AND c.owner = p_owner;
    RETURN FOUND;
END
$function$;
