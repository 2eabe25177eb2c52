-- pgleader, version 3: safety at the edges.
--
-- * The lease operations send no notification: a commit that notifies takes
--   a cluster-wide lock and fails if the notification queue is full, so a
--   hint could fail or serialize the lease operation it describes. Callers
--   send the hint with pgleader.notify, in a transaction of its own, after
--   the operation committed.
-- * acquire and advance never report a win that no row records, even when
--   the row is deleted while they wait for its lock.
-- * Floors above 2^62 - 1 are refused, and so are fence tokens above it, so
--   no input can exhaust a key's tokens and every fence can serve as a floor.
-- * The fence trigger refuses updates once its column was renamed away,
--   instead of letting them all through; installing it works on
--   PostgreSQL 13 (no CREATE OR REPLACE TRIGGER).
-- * Every function pins its search_path, so a caller's search_path cannot
--   change what a function calls or reads.
-- * grant_usage gives an application role what it needs.

DROP FUNCTION pgleader._notify(text, text, interval);

-- _check_floor raises 22023 unless p_floor is 0 to 2^62 - 1. The limit
-- leaves 2^62 tokens above every floor.
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

-- acquire takes the lease for p_owner if it is free or expired, drawing the
-- next token: one more than the larger of the key's counter and p_floor (at
-- most 2^62 - 1), so it also does advance's work in the same statement. If
-- another term holds the lease, nothing changes and the holder, its token and
-- its expiry are returned with acquired = false, so the caller can wait
-- until then. A failed acquire never consumes a token. It sends no
-- notification; see notify.
--
-- The row is locked FOR UPDATE before the expiry is read: that lock conflicts
-- with the FOR KEY SHARE lock a lease-guarded write transaction holds, so a
-- new term cannot begin while a guarded write of the old term is open.
CREATE OR REPLACE FUNCTION pgleader.acquire(p_key text, p_owner text, p_ttl interval, p_floor bigint DEFAULT 0)
RETURNS TABLE (acquired boolean, holder text, token bigint, expires_at timestamptz, db_now timestamptz)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    r pgleader.lease%ROWTYPE;
    t timestamptz;
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, p_ttl, true, true);
    PERFORM pgleader._check_floor(p_floor);

    r := pgleader._lock_row(p_key);
    t := clock_timestamp();

    IF r.holder IS NOT NULL AND r.expires_at > t THEN
        RETURN QUERY SELECT false, r.holder, r.token, r.expires_at, t;
        RETURN;
    END IF;
    IF r.token = 9223372036854775807 THEN
        RAISE EXCEPTION 'pgleader: key % has no token left: its counter is at %, the largest bigint', to_json(p_key), r.token
            USING ERRCODE = '22003',
                  HINT = 'No pgleader function sets a counter this high; it was set by hand. Tokens never go down: use another key.';
    END IF;

    UPDATE pgleader.lease AS l
       SET holder = p_owner, token = greatest(l.token, p_floor) + 1,
           acquired_at = t, renewed_at = t, expires_at = t + p_ttl
     WHERE l.key = p_key
    RETURNING l.token, l.expires_at INTO r.token, r.expires_at;

    RETURN QUERY SELECT true, p_owner, r.token, r.expires_at, t;
END
$$;

-- renew extends the lease of the term (p_key, p_owner, p_token) to
-- clock_timestamp() + p_ttl, if that term still holds it unexpired. It
-- returns the new expiry, or NULL if the term no longer holds the lease.
-- It updates only non-key columns, so it takes FOR NO KEY UPDATE and passes
-- the holder's own open lease-guarded transactions.
CREATE OR REPLACE FUNCTION pgleader.renew(p_key text, p_owner text, p_token bigint, p_ttl interval)
RETURNS timestamptz
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    e timestamptz;
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, p_ttl, true, true);

    UPDATE pgleader.lease AS l
       SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() + p_ttl
     WHERE l.key = p_key AND l.holder = p_owner AND l.token = p_token
       AND l.expires_at > clock_timestamp()
    RETURNING l.expires_at INTO e;
    RETURN e;
END
$$;

-- release frees the lease if the term (p_key, p_owner, p_token) still holds
-- it. It returns whether the row still named that term. It sends no
-- notification; see notify.
CREATE OR REPLACE FUNCTION pgleader.release(p_key text, p_owner text, p_token bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, NULL, true, false);

    UPDATE pgleader.lease AS l
       SET holder = NULL, acquired_at = NULL, renewed_at = NULL, expires_at = NULL
     WHERE l.key = p_key AND l.holder = p_owner AND l.token = p_token;
    RETURN FOUND;
END
$$;

-- advance moves the key's token counter up to at least p_floor (at most
-- 2^62 - 1) while the lease is free (or expired), so the next acquire draws
-- at least p_floor + 1. It never lowers the counter and changes nothing
-- while a term holds the lease. It returns whether the lease was free, and
-- the counter afterwards.
CREATE OR REPLACE FUNCTION pgleader.advance(p_key text, p_floor bigint)
RETURNS TABLE (advanced boolean, token bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    r pgleader.lease%ROWTYPE;
BEGIN
    PERFORM pgleader._check_args(p_key, NULL, NULL, false, false);
    PERFORM pgleader._check_floor(p_floor);

    r := pgleader._lock_row(p_key);

    IF r.holder IS NOT NULL AND r.expires_at > clock_timestamp() THEN
        RETURN QUERY SELECT false, r.token;
        RETURN;
    END IF;

    UPDATE pgleader.lease AS l
       SET token = greatest(l.token, p_floor),
           holder = NULL, acquired_at = NULL, renewed_at = NULL, expires_at = NULL
     WHERE l.key = p_key
    RETURNING l.token INTO r.token;
    RETURN QUERY SELECT true, r.token;
END
$$;

-- notify sends a hint on the channel 'pgleader' that a key's lease was
-- acquired (p_event 'acquire', with its TTL) or released ('release'). The
-- payload is "<event> <ttl in microseconds, 0 when NULL> <key>", the key last
-- so it may hold spaces; it is delivered when the transaction commits.
--
-- It is a hint only: anyone who can connect can notify this channel, and a
-- listener must read the lease before it believes anything. Call it in its
-- own transaction, after the lease operation committed, and ignore its
-- failure: a commit that notifies takes a cluster-wide lock and fails when
-- the notification queue is full, which must never fail or delay a lease
-- operation.
CREATE FUNCTION pgleader.notify(p_event text, p_key text, p_ttl interval DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
BEGIN
    IF p_event IS NULL OR p_event NOT IN ('acquire', 'release') THEN
        RAISE EXCEPTION 'pgleader: event must be acquire or release, got %', coalesce(to_json(p_event)::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    PERFORM pgleader._check_args(p_key, NULL, NULL, false, false);
    IF p_ttl < interval '0' THEN
        RAISE EXCEPTION 'pgleader: ttl must not be negative, got %', p_ttl USING ERRCODE = '22023';
    END IF;
    PERFORM pg_notify('pgleader',
        p_event || ' ' || coalesce(floor(extract(epoch FROM p_ttl) * 1000000)::bigint, 0) || ' ' || p_key);
END
$$;

-- _fence_check now also refuses tokens above 2^62 - 1: a fence is read back
-- as a lease's floor, and floors stop there.
CREATE OR REPLACE FUNCTION pgleader._fence_check(p_resource text, p_token bigint, p_need_token boolean)
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

-- fence_trigger refuses an UPDATE that lowers the fence column named by its
-- argument (or sets it to NULL), raising PF001 with the table in the error's
-- schema and table fields. If the table no longer has that column (it was
-- renamed), it refuses every update it is called for with 42703 rather
-- than read a NULL and let them through: install the trigger again on the
-- new name. install_fence_trigger attaches it.
CREATE OR REPLACE FUNCTION pgleader.fence_trigger()
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
-- REPLACE TRIGGER).
CREATE OR REPLACE FUNCTION pgleader.install_fence_trigger(p_table regclass, p_column name)
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

-- grant_usage gives p_role what an application needs to use pgleader
-- without owning it: USAGE on the schema; SELECT, INSERT and UPDATE on the
-- tables lease and fence; EXECUTE on every function in the schema (which
-- PUBLIC has by default, unless an administrator revoked it); and, when
-- p_history is given, SELECT on that migration history table (normally
-- public.pgleader_schema_migrations), so that migrations.Up run by p_role on
-- an up-to-date database succeeds without trying to create it. Installing a
-- fence trigger also needs the table's owner. It is idempotent; only a
-- member of the schema's owning role may call it.
CREATE FUNCTION pgleader.grant_usage(p_role name, p_history regclass DEFAULT NULL)
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
    EXECUTE format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA pgleader TO %I', p_role);
    IF p_history IS NOT NULL THEN
        EXECUTE format('GRANT SELECT ON TABLE %s TO %I', p_history, p_role);
    END IF;
END
$$;

ALTER FUNCTION pgleader._check_args(text, text, interval, boolean, boolean) SET search_path = pg_catalog, pgleader, pg_temp;
ALTER FUNCTION pgleader.lease(text) SET search_path = pg_catalog, pgleader, pg_temp;
ALTER FUNCTION pgleader.holds(text, bigint) SET search_path = pg_catalog, pgleader, pg_temp;
ALTER FUNCTION pgleader._fence_take(text, bigint, boolean) SET search_path = pg_catalog, pgleader, pg_temp;
ALTER FUNCTION pgleader.fence_claim(text, bigint) SET search_path = pg_catalog, pgleader, pg_temp;
ALTER FUNCTION pgleader.fence_write(text, bigint) SET search_path = pg_catalog, pgleader, pg_temp;
ALTER FUNCTION pgleader.fence_floor(text) SET search_path = pg_catalog, pgleader, pg_temp;
ALTER FUNCTION pgleader.lease_guard(text, bigint) SET search_path = pg_catalog, pgleader, pg_temp;
