-- Back to version 4: no value, no resign.

DROP FUNCTION pgleader.resign(text, bigint);

DROP FUNCTION pgleader.lease(text);
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
ALTER FUNCTION pgleader.lease(text) SET search_path = pg_catalog, pgleader, pg_temp;

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

DROP FUNCTION pgleader.renew_term(text, text, bigint, interval);

DROP FUNCTION pgleader.acquire(text, text, interval, bigint, text);
CREATE FUNCTION pgleader.acquire(p_key text, p_owner text, p_ttl interval, p_floor bigint DEFAULT 0)
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

DROP FUNCTION pgleader._check_value(text);

ALTER TABLE pgleader.lease
    DROP CONSTRAINT lease_value_length,
    DROP COLUMN resign_token,
    DROP COLUMN value;
