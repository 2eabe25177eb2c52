-- pgleader fencing, version 2 (package sqlfence).
--
-- A refused fence raises SQLSTATE PF001 and a refused lease guard PF002, so
-- the caller's transaction is aborted and cannot commit even if the caller
-- forgets to look at the error. Bad arguments raise 22023, as in version 1.
-- The DETAIL of PF001 is machine-readable: '<claim|stale> token <n>, stored
-- fence <n>'.

-- One guard row per resource: the highest token that took it.
CREATE TABLE pgleader.fence (
    resource   text        PRIMARY KEY,
    token      bigint      NOT NULL,
    updated_at timestamptz NOT NULL,
    CONSTRAINT fence_resource_length CHECK (octet_length(resource) BETWEEN 1 AND 200),
    CONSTRAINT fence_token_positive CHECK (token >= 1)
);

COMMENT ON TABLE pgleader.fence IS
    'pgleader fences: one guard row per resource; token is the highest token that took it and never decreases.';

CREATE FUNCTION pgleader._fence_check(p_resource text, p_token bigint, p_need_token boolean)
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

-- _fence_take locks p_resource's guard row until the transaction ends and
-- raises its token to p_token, or raises PF001 if the stored token is higher
-- (or, for a claim, equal). Every write the transaction makes after it then
-- commits only if no newer term took the resource first: a newer term's take
-- waits for this row lock, and a term that took it later is refused here.
CREATE FUNCTION pgleader._fence_take(p_resource text, p_token bigint, p_claim boolean)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    stored bigint;
BEGIN
    PERFORM pgleader._fence_check(p_resource, p_token, true);

    INSERT INTO pgleader.fence AS f (resource, token, updated_at)
    VALUES (p_resource, p_token, clock_timestamp())
    ON CONFLICT (resource) DO NOTHING;
    IF FOUND THEN
        RETURN; -- a new resource; the uncommitted row is this transaction's alone
    END IF;

    SELECT f.token INTO stored FROM pgleader.fence AS f WHERE f.resource = p_resource FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgleader: guard row of resource % was deleted concurrently', to_json(p_resource)
            USING ERRCODE = '40001';
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
    IF stored < p_token THEN
        UPDATE pgleader.fence AS f SET token = p_token, updated_at = clock_timestamp()
         WHERE f.resource = p_resource;
    END IF;
END
$$;

-- fence_claim is a term's first take of a resource: the stored token must be
-- strictly lower than p_token, so of two holders of one token exactly one
-- claims. See _fence_take.
CREATE FUNCTION pgleader.fence_claim(p_resource text, p_token bigint)
RETURNS void
LANGUAGE sql AS $$
    SELECT pgleader._fence_take(p_resource, p_token, true)
$$;

-- fence_write is every later take: the stored token may equal p_token.
CREATE FUNCTION pgleader.fence_write(p_resource text, p_token bigint)
RETURNS void
LANGUAGE sql AS $$
    SELECT pgleader._fence_take(p_resource, p_token, false)
$$;

-- fence_floor is the highest token that took p_resource, 0 if none did.
CREATE FUNCTION pgleader.fence_floor(p_resource text)
RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
BEGIN
    PERFORM pgleader._fence_check(p_resource, NULL, false);
    RETURN coalesce((SELECT f.token FROM pgleader.fence AS f WHERE f.resource = p_resource), 0);
END
$$;

-- lease_guard raises PF002 unless the term (p_key, p_token) holds an
-- unexpired lease on the database clock. Before reading the clock it locks
-- the lease row FOR KEY SHARE until the transaction ends: acquire and advance
-- lock the row FOR UPDATE, so no new term can begin until this transaction
-- has committed or rolled back, while renew and release (FOR NO KEY UPDATE)
-- pass.
CREATE FUNCTION pgleader.lease_guard(p_key text, p_token bigint)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    r pgleader.lease%ROWTYPE;
    t timestamptz;
    why text;
BEGIN
    PERFORM pgleader._check_args(p_key, NULL, NULL, false, false);
    IF p_token IS NULL OR p_token < 1 THEN
        RAISE EXCEPTION 'pgleader: token must be positive, got %', coalesce(p_token::text, 'NULL') USING ERRCODE = '22023';
    END IF;

    SELECT * INTO r FROM pgleader.lease AS l WHERE l.key = p_key FOR KEY SHARE;
    t := clock_timestamp();

    why := CASE
        WHEN r.key IS NULL THEN 'the key has no lease'
        WHEN r.token <> p_token THEN format('the lease is at token %s', r.token)
        WHEN r.holder IS NULL THEN 'the lease was released'
        WHEN r.expires_at <= t THEN format('the lease expired at %s; the database clock is %s', r.expires_at, t)
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
-- schema and table fields. install_fence_trigger attaches it.
CREATE FUNCTION pgleader.fence_trigger()
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

-- install_fence_trigger makes p_table refuse any UPDATE that lowers p_column
-- (an integer column) or sets it to NULL, whatever statement or trigger
-- makes the change. It is idempotent and returns the trigger's name:
-- pgleader_fence_<column>, or pgleader_fence_<md5 of column> when that would
-- be longer than 63 bytes. The trigger is an AFTER ROW trigger whose WHEN
-- clause compares the old and new values, so an update that keeps or raises
-- the fence queues nothing.
CREATE FUNCTION pgleader.install_fence_trigger(p_table regclass, p_column name)
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
