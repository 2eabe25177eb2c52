-- pgleader, version 4: a new server earns its trust (design rule 5).
--
-- A lease is only as durable as its last committed row. After an
-- asynchronous failover, or crash recovery with synchronous_commit = off,
-- the server may have lost rows that the previous server (or its own past)
-- acknowledged: a grant, a renewal, a release. Granting on what is left
-- could start a second term while a term only the lost rows recorded is
-- still live, and could draw that term's token again.
--
-- So after crash recovery or promotion the server grants no new term until
-- max_ttl has passed on its own clock from the moment it first noticed:
-- every term the previous server may have granted had at most max_ttl to
-- run from its last renewal, which came before the notice. The server
-- notices by an UNLOGGED table, server_epoch: PostgreSQL empties it in
-- crash recovery and a standby has it empty (unlogged tables are not
-- replicated), while a clean restart keeps it. The migration fills it on
-- the server it runs on, so a fresh install has no grace.
--
-- During the grace, acquire answers acquired = false with the holder
-- 'pgleader.grace' and expires_at = the grace's end (unless a term still
-- holds the lease), and advance changes nothing. The holder of a term the
-- server knows may go on renewing it; see renew for the clock offset that
-- renewal must leave room for.
--
-- acquire and renew refuse a TTL above max_ttl (22023), so max_ttl bounds
-- every term the grace must outlast. set_max_ttl and set_max_clock_offset
-- change the settings.

CREATE TABLE pgleader.settings (
    only_row         boolean  PRIMARY KEY DEFAULT true CHECK (only_row),
    max_ttl          interval NOT NULL CHECK (max_ttl BETWEEN interval '100 milliseconds' AND interval '24 hours'),
    max_clock_offset interval NOT NULL CHECK (max_clock_offset BETWEEN interval '0' AND interval '1 hour')
);

COMMENT ON TABLE pgleader.settings IS
    'pgleader settings: max_ttl bounds every lease TTL and is the grace after crash recovery or promotion; max_clock_offset bounds the offset between the clocks of a primary and its standbys.';

-- 10 minutes: no TTL this project's tests, examples or CLI use is longer.
-- Lower it to the longest TTL you use: it is how long a promoted or
-- recovered server grants no new term.
INSERT INTO pgleader.settings (max_ttl, max_clock_offset) VALUES (interval '10 minutes', interval '1 second');

CREATE UNLOGGED TABLE pgleader.server_epoch (
    only_row    boolean     PRIMARY KEY DEFAULT true CHECK (only_row),
    noticed_at  timestamptz NOT NULL,
    grace_until timestamptz NOT NULL
);

COMMENT ON TABLE pgleader.server_epoch IS
    'pgleader: when this server began granting on its own (UNLOGGED: emptied by crash recovery, empty on a standby). Do not edit.';

INSERT INTO pgleader.server_epoch (noticed_at, grace_until) VALUES (clock_timestamp(), clock_timestamp());

-- _grace returns the settings and this server's grace, noticing it first if
-- server_epoch is empty: the grace then runs max_ttl from now. It is
-- SECURITY DEFINER so that an application role needs no privilege on the
-- two tables; it reads and writes nothing else.
CREATE FUNCTION pgleader._grace(OUT grace_until timestamptz, OUT max_ttl interval, OUT max_clock_offset interval)
LANGUAGE plpgsql
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
        INSERT INTO pgleader.server_epoch AS e (noticed_at, grace_until)
        VALUES (clock_timestamp(), clock_timestamp() + max_ttl)
        ON CONFLICT (only_row) DO NOTHING;
        SELECT e.grace_until INTO STRICT grace_until FROM pgleader.server_epoch AS e;
    END IF;
END
$$;


-- _check_ttl raises 22023 if p_ttl exceeds max_ttl.
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

-- acquire, as in version 3, and: it refuses a TTL above max_ttl, and during
-- this server's grace it grants nothing, answering acquired = false with
-- the holding term if one holds the lease, else the holder 'pgleader.grace'
-- and expires_at = the grace's end.
CREATE OR REPLACE FUNCTION pgleader.acquire(p_key text, p_owner text, p_ttl interval, p_floor bigint DEFAULT 0)
RETURNS TABLE (acquired boolean, holder text, token bigint, expires_at timestamptz, db_now timestamptz)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    r pgleader.lease%ROWTYPE;
    g record;
    t timestamptz;
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, p_ttl, true, true);
    PERFORM pgleader._check_floor(p_floor);
    g := pgleader._grace();
    PERFORM pgleader._check_ttl(p_ttl, g.max_ttl);

    r := pgleader._lock_row(p_key);
    t := clock_timestamp();

    IF r.holder IS NOT NULL AND r.expires_at > t THEN
        RETURN QUERY SELECT false, r.holder, r.token, r.expires_at, t;
        RETURN;
    END IF;
    IF t < g.grace_until THEN
        RETURN QUERY SELECT false, 'pgleader.grace'::text, r.token, g.grace_until, t;
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

-- renew, as in version 3, and: it refuses a TTL above max_ttl, and during
-- this server's grace it extends a term only while the term's expiry is
-- more than max_clock_offset away. A row the previous server stamped is
-- judged here on another clock: if this clock runs behind, the term may
-- already have ended there, and another been granted, in rows that were
-- lost. Its own renewals (stamped here, TTL ahead) pass at once.
CREATE OR REPLACE FUNCTION pgleader.renew(p_key text, p_owner text, p_token bigint, p_ttl interval)
RETURNS timestamptz
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    g record;
    e timestamptz;
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, p_ttl, true, true);
    g := pgleader._grace();
    PERFORM pgleader._check_ttl(p_ttl, g.max_ttl);

    UPDATE pgleader.lease AS l
       SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() + p_ttl
     WHERE l.key = p_key AND l.holder = p_owner AND l.token = p_token
       AND l.expires_at > clock_timestamp()
       AND (clock_timestamp() >= g.grace_until OR l.expires_at > clock_timestamp() + g.max_clock_offset)
    RETURNING l.expires_at INTO e;
    RETURN e;
END
$$;

-- advance, as in version 3, and: during this server's grace the lease is
-- not free, so it changes nothing and returns advanced = false.
CREATE OR REPLACE FUNCTION pgleader.advance(p_key text, p_floor bigint)
RETURNS TABLE (advanced boolean, token bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    r pgleader.lease%ROWTYPE;
    g record;
BEGIN
    PERFORM pgleader._check_args(p_key, NULL, NULL, false, false);
    PERFORM pgleader._check_floor(p_floor);
    g := pgleader._grace();

    r := pgleader._lock_row(p_key);

    IF (r.holder IS NOT NULL AND r.expires_at > clock_timestamp()) OR clock_timestamp() < g.grace_until THEN
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

-- lease_guard, as in version 2, and: during this server's grace a term's
-- lease must be more than max_clock_offset from its expiry, as for renew.
CREATE OR REPLACE FUNCTION pgleader.lease_guard(p_key text, p_token bigint)
RETURNS void
LANGUAGE plpgsql
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
    g := pgleader._grace();

    SELECT * INTO r FROM pgleader.lease AS l WHERE l.key = p_key FOR KEY SHARE;
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

-- set_max_ttl sets max_ttl (100 ms to 24 h) and returns the previous value.
-- It refuses a value below the TTL of a term that holds a lease now (55000),
-- since the grace must outlast every term. Raise it before using a longer
-- TTL, and let the standbys replay the change first: a standby promoted
-- without it would keep the old, shorter grace. Only a role that may
-- update pgleader.settings (the schema's owner) can call it.
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
    SELECT l.key, l.expires_at - l.renewed_at INTO k, longest
      FROM pgleader.lease AS l
     WHERE l.holder IS NOT NULL AND l.expires_at > clock_timestamp()
     ORDER BY l.expires_at - l.renewed_at DESC LIMIT 1;
    IF longest > p_max_ttl THEN
        RAISE EXCEPTION 'pgleader: max_ttl % is below the TTL % of the term holding key %', p_max_ttl, longest, to_json(k)
            USING ERRCODE = '55000',
                  HINT = 'Stop using the longer TTL and wait for that term to end, then lower max_ttl.';
    END IF;
    SELECT s.max_ttl INTO old FROM pgleader.settings AS s FOR UPDATE;
    UPDATE pgleader.settings AS s SET max_ttl = p_max_ttl;
    RETURN old;
END
$$;

-- set_max_clock_offset sets max_clock_offset (0 to 1 hour), the largest
-- offset between the clocks of this server and any server it may take over
-- from, and returns the previous value.
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
