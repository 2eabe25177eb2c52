-- Back to version 5: no candidates, hand-off, transfer or preferred leaders.
-- Grants made on pgleader.candidate go with it.

DROP FUNCTION pgleader.acquire(text, text, interval, bigint, text);
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

CREATE OR REPLACE FUNCTION pgleader.grant_usage(p_role name, p_history regclass DEFAULT NULL)
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

DROP FUNCTION pgleader.withdraw(text, text);
DROP FUNCTION pgleader.candidates(text);
DROP FUNCTION pgleader.transfer(text, text);
DROP FUNCTION pgleader.renew_term(text, text, bigint, interval, interval);
DROP FUNCTION pgleader.hand_off(text, text, bigint, text);
DROP FUNCTION pgleader.take(text, text, interval);
DROP FUNCTION pgleader.campaign(text, text, interval, bigint, text, integer, interval);
DROP FUNCTION pgleader._check_candidate(interval, integer);
DROP TABLE pgleader.candidate;

ALTER TABLE pgleader.lease
    DROP CONSTRAINT lease_transfer_to_length,
    DROP COLUMN transfer_to,
    DROP COLUMN handed_off,
    DROP COLUMN priority;
