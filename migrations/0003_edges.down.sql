-- Reverts 0003_edges.up.sql: the functions of versions 1 and 2, exactly as
-- they were, and none of version 3's. The lease operations notify again.
-- Grants made by grant_usage stay.

DROP FUNCTION pgleader.grant_usage(name, regclass);
DROP FUNCTION pgleader.notify(text, text, interval);
ALTER FUNCTION pgleader._check_args(text, text, interval, boolean, boolean) RESET search_path;
ALTER FUNCTION pgleader.lease(text) RESET search_path;
ALTER FUNCTION pgleader.holds(text, bigint) RESET search_path;
ALTER FUNCTION pgleader._fence_take(text, bigint, boolean) RESET search_path;
ALTER FUNCTION pgleader.fence_claim(text, bigint) RESET search_path;
ALTER FUNCTION pgleader.fence_write(text, bigint) RESET search_path;
ALTER FUNCTION pgleader.fence_floor(text) RESET search_path;
ALTER FUNCTION pgleader.lease_guard(text, bigint) RESET search_path;

CREATE FUNCTION pgleader._notify(p_event text, p_key text, p_ttl interval)
RETURNS void
LANGUAGE sql AS $$
    SELECT pg_notify('pgleader',
        p_event || ' ' || coalesce(floor(extract(epoch FROM p_ttl) * 1000000)::bigint, 0) || ' ' || p_key)
$$;

CREATE OR REPLACE FUNCTION pgleader.acquire(p_key text, p_owner text, p_ttl interval, p_floor bigint DEFAULT 0)
RETURNS TABLE (acquired boolean, holder text, token bigint, expires_at timestamptz, db_now timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    r pgleader.lease%ROWTYPE;
    t timestamptz;
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, p_ttl, true, true);
    IF p_floor IS NULL OR p_floor < 0 THEN
        RAISE EXCEPTION 'pgleader: floor must be zero or positive, got %', p_floor USING ERRCODE = '22023';
    END IF;

    INSERT INTO pgleader.lease AS l (key) VALUES (p_key) ON CONFLICT (key) DO NOTHING;
    SELECT * INTO r FROM pgleader.lease AS l WHERE l.key = p_key FOR UPDATE;
    t := clock_timestamp();

    IF r.holder IS NOT NULL AND r.expires_at > t THEN
        RETURN QUERY SELECT false, r.holder, r.token, r.expires_at, t;
        RETURN;
    END IF;

    UPDATE pgleader.lease AS l
       SET holder = p_owner, token = greatest(l.token, p_floor) + 1,
           acquired_at = t, renewed_at = t, expires_at = t + p_ttl
     WHERE l.key = p_key
    RETURNING l.token, l.expires_at INTO r.token, r.expires_at;

    PERFORM pgleader._notify('acquire', p_key, p_ttl);
    RETURN QUERY SELECT true, p_owner, r.token, r.expires_at, t;
END
$$;

CREATE OR REPLACE FUNCTION pgleader.renew(p_key text, p_owner text, p_token bigint, p_ttl interval)
RETURNS timestamptz
LANGUAGE plpgsql AS $$
DECLARE
    e timestamptz;
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, p_ttl, true, true);

    UPDATE pgleader.lease AS l
       SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() + p_ttl
     WHERE l.key = p_key AND l.holder = p_owner AND l.token = p_token
       AND l.expires_at > clock_timestamp()
    RETURNING l.expires_at INTO e;
    IF e IS NOT NULL THEN
        PERFORM pgleader._notify('renew', p_key, p_ttl);
    END IF;
    RETURN e;
END
$$;

CREATE OR REPLACE FUNCTION pgleader.release(p_key text, p_owner text, p_token bigint)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, NULL, true, false);

    UPDATE pgleader.lease AS l
       SET holder = NULL, acquired_at = NULL, renewed_at = NULL, expires_at = NULL
     WHERE l.key = p_key AND l.holder = p_owner AND l.token = p_token;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pgleader._notify('release', p_key, NULL);
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION pgleader.advance(p_key text, p_floor bigint)
RETURNS TABLE (advanced boolean, token bigint)
LANGUAGE plpgsql AS $$
DECLARE
    r pgleader.lease%ROWTYPE;
BEGIN
    PERFORM pgleader._check_args(p_key, NULL, NULL, false, false);
    IF p_floor IS NULL OR p_floor < 0 THEN
        RAISE EXCEPTION 'pgleader: floor must be zero or positive, got %', p_floor USING ERRCODE = '22023';
    END IF;

    INSERT INTO pgleader.lease AS l (key) VALUES (p_key) ON CONFLICT (key) DO NOTHING;
    SELECT * INTO r FROM pgleader.lease AS l WHERE l.key = p_key FOR UPDATE;

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

CREATE OR REPLACE FUNCTION pgleader._fence_check(p_resource text, p_token bigint, p_need_token boolean)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
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
END
$$;

CREATE OR REPLACE FUNCTION pgleader.fence_trigger()
RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    col text := TG_ARGV[0];
    stored bigint := (to_jsonb(OLD) ->> col)::bigint;
    token bigint := (to_jsonb(NEW) ->> col)::bigint;
BEGIN
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

CREATE OR REPLACE FUNCTION pgleader.install_fence_trigger(p_table regclass, p_column name)
RETURNS name
LANGUAGE plpgsql AS $$
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
    -- DROP and CREATE rather than CREATE OR REPLACE TRIGGER, which is new
    -- in PostgreSQL 14; this function runs in the caller's transaction.
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

DROP FUNCTION pgleader._lock_row(text);
DROP FUNCTION pgleader._check_floor(bigint);
