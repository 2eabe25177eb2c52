-- pgleader, version 5: the leader's value, and resigning a term from outside.
--
-- A term may publish a value with its lease (at most 1024 bytes), e.g. the
-- leader's address, so followers can forward requests to it: acquire takes
-- it, lease and a losing acquire return it, release clears it.
--
-- resign asks the term holding a key to end: it marks the row, and the
-- holder learns at its next renewal (renew_term reports it), at most
-- RenewEvery later, and ends its term gracefully (yield, then release).
-- Nothing is forced: a holder that never renews again loses the lease at
-- its expiry, as always.

ALTER TABLE pgleader.lease
    ADD COLUMN value text,
    ADD COLUMN resign_token bigint,
    ADD CONSTRAINT lease_value_length CHECK (value IS NULL OR octet_length(value) <= 1024);

-- _check_value raises 22023 for a value over 1024 bytes.
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

-- acquire, as in version 4, and: the winning term publishes p_value with
-- its lease; a losing acquire returns the holder's value too.
DROP FUNCTION pgleader.acquire(text, text, interval, bigint);
CREATE FUNCTION pgleader.acquire(p_key text, p_owner text, p_ttl interval, p_floor bigint DEFAULT 0, p_value text DEFAULT NULL)
RETURNS TABLE (acquired boolean, holder text, token bigint, expires_at timestamptz, db_now timestamptz, value text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    r pgleader.lease%ROWTYPE;
    g record;
    t timestamptz;
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, p_ttl, true, true);
    PERFORM pgleader._check_floor(p_floor);
    PERFORM pgleader._check_value(p_value);
    g := pgleader._grace();
    PERFORM pgleader._check_ttl(p_ttl, g.max_ttl);

    r := pgleader._lock_row(p_key);
    t := clock_timestamp();

    IF r.holder IS NOT NULL AND r.expires_at > t THEN
        RETURN QUERY SELECT false, r.holder, r.token, r.expires_at, t, r.value;
        RETURN;
    END IF;
    IF t < g.grace_until THEN
        RETURN QUERY SELECT false, 'pgleader.grace'::text, r.token, g.grace_until, t, NULL::text;
        RETURN;
    END IF;
    IF r.token = 9223372036854775807 THEN
        RAISE EXCEPTION 'pgleader: key % has no token left: its counter is at %, the largest bigint', to_json(p_key), r.token
            USING ERRCODE = '22003',
                  HINT = 'No pgleader function sets a counter this high; it was set by hand. Tokens never go down: use another key.';
    END IF;

    UPDATE pgleader.lease AS l
       SET holder = p_owner, token = greatest(l.token, p_floor) + 1,
           acquired_at = t, renewed_at = t, expires_at = t + p_ttl,
           value = p_value, resign_token = NULL
     WHERE l.key = p_key
    RETURNING l.token, l.expires_at INTO r.token, r.expires_at;

    RETURN QUERY SELECT true, p_owner, r.token, r.expires_at, t, p_value;
END
$$;

-- renew_term is renew, and also reports whether the term was asked to
-- resign (see resign). expires_at is NULL when the term no longer holds the
-- lease.
CREATE FUNCTION pgleader.renew_term(p_key text, p_owner text, p_token bigint, p_ttl interval)
RETURNS TABLE (expires_at timestamptz, resign boolean)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    g record;
    e timestamptz;
    rs boolean;
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, p_ttl, true, true);
    g := pgleader._grace();
    PERFORM pgleader._check_ttl(p_ttl, g.max_ttl);

    UPDATE pgleader.lease AS l
       SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() + p_ttl
     WHERE l.key = p_key AND l.holder = p_owner AND l.token = p_token
       AND l.expires_at > clock_timestamp()
       AND (clock_timestamp() >= g.grace_until OR l.expires_at > clock_timestamp() + g.max_clock_offset)
    RETURNING l.expires_at, coalesce(l.resign_token = p_token, false) INTO e, rs;
    RETURN QUERY SELECT e, coalesce(rs, false);
END
$$;

-- renew, as in version 4: renew_term's expiry.
CREATE OR REPLACE FUNCTION pgleader.renew(p_key text, p_owner text, p_token bigint, p_ttl interval)
RETURNS timestamptz
LANGUAGE sql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
    SELECT r.expires_at FROM pgleader.renew_term(p_key, p_owner, p_token, p_ttl) AS r
$$;

-- release, as in version 3, and: it clears the value and any resignation.
CREATE OR REPLACE FUNCTION pgleader.release(p_key text, p_owner text, p_token bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, NULL, true, false);

    UPDATE pgleader.lease AS l
       SET holder = NULL, acquired_at = NULL, renewed_at = NULL, expires_at = NULL,
           value = NULL, resign_token = NULL
     WHERE l.key = p_key AND l.holder = p_owner AND l.token = p_token;
    RETURN FOUND;
END
$$;

-- resign asks the term that holds p_key's lease (only if its token is
-- p_token, when given) to end. The holder learns at its next renewal and
-- ends its term gracefully. resigned is false, with the reason in detail,
-- when nobody holds the lease or another term than p_token does; holder and
-- token name the term asked (or the one holding the lease now).
CREATE FUNCTION pgleader.resign(p_key text, p_token bigint DEFAULT NULL)
RETURNS TABLE (resigned boolean, holder text, token bigint, detail text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    h text;
    k bigint;
BEGIN
    PERFORM pgleader._check_args(p_key, NULL, NULL, false, false);
    IF p_token IS NOT NULL AND p_token < 1 THEN
        RAISE EXCEPTION 'pgleader: token must be positive, got %', p_token USING ERRCODE = '22023';
    END IF;

    UPDATE pgleader.lease AS l
       SET resign_token = l.token
     WHERE l.key = p_key AND l.holder IS NOT NULL AND l.expires_at > clock_timestamp()
       AND (p_token IS NULL OR l.token = p_token)
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

-- lease, as in version 1, and: value is the holding term's value.
DROP FUNCTION pgleader.lease(text);
CREATE FUNCTION pgleader.lease(p_key text)
RETURNS TABLE (holder text, token bigint, acquired_at timestamptz, renewed_at timestamptz, expires_at timestamptz, db_now timestamptz, value text)
LANGUAGE plpgsql STABLE
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
