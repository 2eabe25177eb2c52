-- pgleader lease schema, version 1.
--
-- One row per key. The token column is the key's counter: while the lease is
-- held it is the current term's token; while the lease is free it is the last
-- token issued. It only ever grows, so it survives release and expiry. Every
-- expiry decision reads clock_timestamp(), the database clock at the moment
-- the statement runs, never now() (the start of the surrounding transaction).

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

CREATE TABLE pgleader.lease (
    key         text        PRIMARY KEY,
    holder      text,
    token       bigint      NOT NULL DEFAULT 0,
    acquired_at timestamptz,
    renewed_at  timestamptz,
    expires_at  timestamptz,
    CONSTRAINT lease_key_length CHECK (octet_length(key) BETWEEN 1 AND 200),
    CONSTRAINT lease_holder_length CHECK (holder IS NULL OR octet_length(holder) BETWEEN 1 AND 200),
    CONSTRAINT lease_token_nonnegative CHECK (token >= 0),
    CONSTRAINT lease_held_has_expiry CHECK (holder IS NULL OR expires_at IS NOT NULL)
);

COMMENT ON TABLE pgleader.lease IS
    'pgleader leases: one row per key; token is the key''s fencing counter and never decreases.';

-- _check_args raises invalid_parameter_value (22023) for arguments every
-- operation refuses, so psql and other drivers get the same errors as Go.
CREATE FUNCTION pgleader._check_args(p_key text, p_owner text, p_ttl interval, p_need_owner boolean, p_need_ttl boolean)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
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
END
$$;

-- _notify tells candidates listening on the channel 'pgleader' what happened
-- to a key's lease. The payload is "<event> <ttl in microseconds> <key>",
-- the key last so it may hold spaces; it is delivered when the transaction
-- commits. A candidate that hears "acquire" or "renew" can sleep for the TTL
-- instead of polling, and one that hears "release" can campaign at once.
CREATE FUNCTION pgleader._notify(p_event text, p_key text, p_ttl interval)
RETURNS void
LANGUAGE sql AS $$
    SELECT pg_notify('pgleader',
        p_event || ' ' || coalesce(floor(extract(epoch FROM p_ttl) * 1000000)::bigint, 0) || ' ' || p_key)
$$;

-- acquire takes the lease for p_owner if it is free or expired, drawing the
-- next token: one more than the larger of the key's counter and p_floor, so
-- it also does advance's work in the same statement. If another term holds
-- the lease, nothing changes and the holder, its token and its expiry are
-- returned with acquired = false, so the caller can wait until then. A
-- failed acquire never consumes a token.
--
-- The row is locked FOR UPDATE before the expiry is read: that lock conflicts
-- with the FOR KEY SHARE lock a lease-guarded write transaction holds, so a
-- new term cannot begin while a guarded write of the old term is open.
CREATE FUNCTION pgleader.acquire(p_key text, p_owner text, p_ttl interval, p_floor bigint DEFAULT 0)
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

-- renew extends the lease of the term (p_key, p_owner, p_token) to
-- clock_timestamp() + p_ttl, if that term still holds it unexpired. It
-- returns the new expiry, or NULL if the term no longer holds the lease.
-- A successful renewal notifies candidates of the new TTL.
-- It updates only non-key columns, so it takes FOR NO KEY UPDATE and passes
-- the holder's own open lease-guarded transactions.
CREATE FUNCTION pgleader.renew(p_key text, p_owner text, p_token bigint, p_ttl interval)
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

-- release frees the lease if the term (p_key, p_owner, p_token) still holds
-- it, and notifies waiting candidates so they can campaign at once. It returns whether the row still named that term.
CREATE FUNCTION pgleader.release(p_key text, p_owner text, p_token bigint)
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

-- advance moves the key's token counter up to at least p_floor while the
-- lease is free (or expired), so the next acquire draws at least p_floor + 1.
-- It never lowers the counter and changes nothing while a term holds the
-- lease. It returns whether the lease was free, and the counter afterwards.
CREATE FUNCTION pgleader.advance(p_key text, p_floor bigint)
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

-- lease reads a key's row with the database clock. holder is NULL when the
-- lease is free or has expired; token is then the last token issued. A key
-- never seen returns one row with token 0.
CREATE FUNCTION pgleader.lease(p_key text)
RETURNS TABLE (holder text, token bigint, acquired_at timestamptz, renewed_at timestamptz, expires_at timestamptz, db_now timestamptz)
LANGUAGE plpgsql STABLE AS $$
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
               t
          FROM (SELECT 1) AS one
          LEFT JOIN pgleader.lease AS l ON l.key = p_key;
END
$$;

-- holds reports whether the term (p_key, p_token) holds an unexpired lease
-- right now on the database clock. It takes no lock; sqlfence's lease-guarded
-- transactions lock the row themselves.
CREATE FUNCTION pgleader.holds(p_key text, p_token bigint)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1 FROM pgleader.lease AS l
         WHERE l.key = p_key AND l.token = p_token
           AND l.holder IS NOT NULL AND l.expires_at > clock_timestamp())
$$;
