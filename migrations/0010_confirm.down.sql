-- Reverts 0010_confirm.up.sql: take confirms by a write only, and a renewal
-- leaves handed_off as it is.

DROP FUNCTION pgleader.take(text, text, interval, interval);

-- renew_term, as in version 5.
CREATE OR REPLACE FUNCTION pgleader.renew_term(p_key text, p_owner text, p_token bigint, p_ttl interval)
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

-- renew_term with a minimum term, as in version 6.
CREATE OR REPLACE FUNCTION pgleader.renew_term(p_key text, p_owner text, p_token bigint, p_ttl interval, p_min_term interval)
RETURNS TABLE (expires_at timestamptz, resign boolean)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
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
       SET renewed_at = t, expires_at = t + p_ttl
     WHERE l.key = p_key AND l.holder = p_owner AND l.token = p_token
       AND l.expires_at > t
       AND (t >= g.grace_until OR l.expires_at > t + g.max_clock_offset)
    RETURNING l.expires_at,
              coalesce(l.resign_token = p_token, false)
              OR (p_min_term IS NOT NULL AND t - l.acquired_at >= p_min_term
                  AND EXISTS (SELECT 1 FROM pgleader.candidate AS c
                               WHERE c.key = p_key AND c.owner <> p_owner
                                 AND c.expires_at > t AND c.priority > l.priority))
      INTO e, rs;
    RETURN QUERY SELECT e, coalesce(rs, false);
END
$$;
