-- Reverts 0004_grace.up.sql: acquire, renew, advance and lease_guard as in
-- version 3, without the grace, the TTL limit or the settings.

DROP FUNCTION pgleader.grace();
DROP FUNCTION pgleader.set_max_clock_offset(interval);
DROP FUNCTION pgleader.set_max_ttl(interval);

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

CREATE OR REPLACE FUNCTION pgleader.lease_guard(p_key text, p_token bigint)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
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

DROP FUNCTION pgleader._check_ttl(interval, interval);
DROP FUNCTION pgleader._grace();
DROP TABLE pgleader.server_epoch;
DROP TABLE pgleader.settings;
