-- pgleader, version 10: a handed-off term is believed on a read.
--
-- A successor checks a hand-off hint with take. Until now take always
-- confirmed the term by a write (its expiry extended to TTL from the check),
-- so the successor learned it leads only after a durable commit of its own.
-- take with p_keep answers from a read when the handed-off term has at
-- least p_keep left: the term's first bound is then the one hand_off gave it
-- (the successor's candidate expiry), counted from when the check was sent,
-- and nothing is written. The term's first renewal confirms it: renew_term
-- now clears handed_off. A term with less than p_keep left is confirmed by
-- a write, as before.

-- take with p_keep: as the 3-argument form, except that a term handed to
-- p_owner, unexpired and with at least p_keep left (and, during the server's
-- grace, more than max_clock_offset left, as for a renewal) is reported as
-- acquired without a write: its expiry stays the hand-off's and handed_off
-- stays true until the holder renews.
CREATE FUNCTION pgleader.take(p_key text, p_owner text, p_ttl interval, p_keep interval)
RETURNS TABLE (acquired boolean, holder text, token bigint, expires_at timestamptz, db_now timestamptz, value text, acquired_at timestamptz)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
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
    IF r.holder = p_owner AND r.handed_off AND r.expires_at > t AND r.expires_at >= t + p_keep
       AND (t >= g.grace_until OR r.expires_at > t + g.max_clock_offset) THEN
        RETURN QUERY SELECT true, p_owner, r.token, r.expires_at, t, r.value, r.acquired_at;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM pgleader.take(p_key, p_owner, p_ttl);
END
$$;

-- renew_term, as in version 5, and: a renewal confirms a handed-off term.
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
       SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() + p_ttl, handed_off = false
     WHERE l.key = p_key AND l.holder = p_owner AND l.token = p_token
       AND l.expires_at > clock_timestamp()
       AND (clock_timestamp() >= g.grace_until OR l.expires_at > clock_timestamp() + g.max_clock_offset)
    RETURNING l.expires_at, coalesce(l.resign_token = p_token, false) INTO e, rs;
    RETURN QUERY SELECT e, coalesce(rs, false);
END
$$;

-- renew_term with a minimum term, as in version 6, and: a renewal confirms
-- a handed-off term.
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
       SET renewed_at = t, expires_at = t + p_ttl, handed_off = false
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
