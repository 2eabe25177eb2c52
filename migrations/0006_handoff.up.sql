-- pgleader, version 6: candidates in the database, hand-off, transfer and
-- preferred leaders.
--
-- A waiting candidate registers itself for a key (owner, priority, value,
-- an expiry) in pgleader.candidate by the statement it already sends at each
-- expiry it read (campaign). A candidate that stops refreshing its row is
-- passed over once its expiry is past; nobody has to delete it.
--
-- A leader that steps down calls hand_off instead of release: in the same
-- statement, under the lease row's lock, the lease passes to the best live
-- candidate (highest priority, then the longest waiting) with token + 1 and
-- the candidate's own expiry as the term's first bound, and the term is
-- marked handed_off. It is one durable write. The successor believes it only
-- when the database says so: take (or campaign) confirms a term handed to its
-- owner and extends it to TTL from that statement, so its timeline counts
-- from when it sent the check. A successor that never checks costs what a
-- crash costs: the lease expires at its candidate expiry. Without a live
-- candidate, during the failover grace (0004), or when the token counter has
-- no room left, hand_off is release.
--
-- transfer asks the holder to end its term and hand off to a named
-- candidate; renew_term with a minimum term asks a holder to do the same for
-- a candidate of higher priority than its own.

ALTER TABLE pgleader.lease
    ADD COLUMN priority integer NOT NULL DEFAULT 0,
    ADD COLUMN handed_off boolean NOT NULL DEFAULT false,
    ADD COLUMN transfer_to text,
    ADD CONSTRAINT lease_transfer_to_length CHECK (transfer_to IS NULL OR octet_length(transfer_to) BETWEEN 1 AND 200);

CREATE TABLE pgleader.candidate (
    key           text        NOT NULL,
    owner         text        NOT NULL,
    priority      integer     NOT NULL DEFAULT 0,
    value         text,
    registered_at timestamptz NOT NULL,
    expires_at    timestamptz NOT NULL,
    PRIMARY KEY (key, owner),
    CONSTRAINT candidate_key_length CHECK (octet_length(key) BETWEEN 1 AND 200),
    CONSTRAINT candidate_owner_length CHECK (octet_length(owner) BETWEEN 1 AND 200),
    CONSTRAINT candidate_value_length CHECK (value IS NULL OR octet_length(value) <= 1024)
);

COMMENT ON TABLE pgleader.candidate IS
    'pgleader candidates: replicas waiting for a key, each until its expires_at; the lease is handed to the best live one.';

-- Roles that may already use the lease table get the candidate table too.
DO $$
DECLARE
    r name;
BEGIN
    FOR r IN SELECT DISTINCT g.grantee FROM information_schema.role_table_grants AS g
              WHERE g.table_schema = 'pgleader' AND g.table_name = 'lease' AND g.privilege_type = 'UPDATE'
                AND g.grantee <> current_user AND g.grantee <> 'PUBLIC'
    LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE pgleader.candidate TO %I', r);
    END LOOP;
END
$$;

-- _check_candidate raises 22023 for a bad candidate TTL or priority.
CREATE FUNCTION pgleader._check_candidate(p_candidate interval, p_priority integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgleader, pg_temp AS $$
BEGIN
    IF p_candidate IS NOT NULL AND p_candidate < interval '1 microsecond' THEN
        RAISE EXCEPTION 'pgleader: candidate ttl must be at least 1 microsecond, got %', p_candidate USING ERRCODE = '22023';
    END IF;
    IF p_priority IS NULL THEN
        RAISE EXCEPTION 'pgleader: priority must not be NULL' USING ERRCODE = '22023';
    END IF;
END
$$;

-- campaign is acquire (version 5) for a candidate, and also:
-- * if the lease is held by p_owner in a term handed to it and not yet
--   confirmed, it confirms that term as take does (acquired = true);
-- * if another term holds the lease (or the server is in its grace) and
--   p_candidate is not NULL, it registers p_owner as a candidate with
--   p_priority and p_value until p_candidate from now (at most max_ttl);
-- * a term it wins carries p_priority, and p_owner's candidate row goes.
-- acquired_at is the term's start: for a confirmed term, the hand-off's.
CREATE FUNCTION pgleader.campaign(p_key text, p_owner text, p_ttl interval, p_floor bigint, p_value text,
                                  p_priority integer, p_candidate interval)
RETURNS TABLE (acquired boolean, holder text, token bigint, expires_at timestamptz, db_now timestamptz, value text, acquired_at timestamptz)
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
    PERFORM pgleader._check_candidate(p_candidate, p_priority);
    g := pgleader._grace();
    PERFORM pgleader._check_ttl(p_ttl, g.max_ttl);

    r := pgleader._lock_row(p_key);
    t := clock_timestamp();

    IF r.holder = p_owner AND r.handed_off AND r.expires_at > t
       AND (t >= g.grace_until OR r.expires_at > t + g.max_clock_offset) THEN
        UPDATE pgleader.lease AS l
           SET renewed_at = t, expires_at = t + p_ttl, handed_off = false
         WHERE l.key = p_key
        RETURNING l.token, l.expires_at, l.value INTO r.token, r.expires_at, r.value;
        DELETE FROM pgleader.candidate AS c WHERE c.key = p_key AND c.owner = p_owner;
        RETURN QUERY SELECT true, p_owner, r.token, r.expires_at, t, r.value, r.acquired_at;
        RETURN;
    END IF;
    IF (r.holder IS NOT NULL AND r.expires_at > t) OR t < g.grace_until THEN
        IF p_candidate IS NOT NULL AND r.holder IS DISTINCT FROM p_owner THEN
            INSERT INTO pgleader.candidate AS c (key, owner, priority, value, registered_at, expires_at)
            VALUES (p_key, p_owner, p_priority, p_value, t, t + least(p_candidate, g.max_ttl))
            ON CONFLICT (key, owner) DO UPDATE
               SET priority = excluded.priority, value = excluded.value, expires_at = excluded.expires_at,
                   registered_at = CASE WHEN c.expires_at > t THEN c.registered_at ELSE excluded.registered_at END;
        END IF;
        IF r.holder IS NOT NULL AND r.expires_at > t THEN
            RETURN QUERY SELECT false, r.holder, r.token, r.expires_at, t, r.value, r.acquired_at;
        ELSE
            RETURN QUERY SELECT false, 'pgleader.grace'::text, r.token, g.grace_until, t, NULL::text, NULL::timestamptz;
        END IF;
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
           value = p_value, resign_token = NULL, priority = p_priority, handed_off = false, transfer_to = NULL
     WHERE l.key = p_key
    RETURNING l.token, l.expires_at INTO r.token, r.expires_at;
    DELETE FROM pgleader.candidate AS c WHERE c.key = p_key AND (c.owner = p_owner OR c.expires_at <= t);

    RETURN QUERY SELECT true, p_owner, r.token, r.expires_at, t, p_value, t;
END
$$;

-- take confirms a term handed to p_owner (see hand_off): if p_owner holds
-- the lease unexpired in a handed-off term not yet confirmed, it extends the
-- lease to p_ttl from now, as a renewal would (with the same rule during the
-- grace), and returns acquired = true. Otherwise it changes nothing and
-- returns the lease as it is (holder NULL when free). It never grants a free
-- lease: a hint that names a candidate makes it look, not lead.
CREATE FUNCTION pgleader.take(p_key text, p_owner text, p_ttl interval)
RETURNS TABLE (acquired boolean, holder text, token bigint, expires_at timestamptz, db_now timestamptz, value text, acquired_at timestamptz)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    r pgleader.lease%ROWTYPE;
    g record;
    t timestamptz;
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, p_ttl, true, true);
    g := pgleader._grace();
    PERFORM pgleader._check_ttl(p_ttl, g.max_ttl);

    t := clock_timestamp();
    UPDATE pgleader.lease AS l
       SET renewed_at = t, expires_at = t + p_ttl, handed_off = false
     WHERE l.key = p_key AND l.holder = p_owner AND l.handed_off AND l.expires_at > t
       AND (t >= g.grace_until OR l.expires_at > t + g.max_clock_offset)
    RETURNING l.* INTO r;
    IF FOUND THEN
        DELETE FROM pgleader.candidate AS c WHERE c.key = p_key AND c.owner = p_owner;
        RETURN QUERY SELECT true, p_owner, r.token, r.expires_at, t, r.value, r.acquired_at;
        RETURN;
    END IF;
    SELECT * INTO r FROM pgleader.lease AS l WHERE l.key = p_key;
    IF r.holder IS NOT NULL AND r.expires_at > t THEN
        RETURN QUERY SELECT false, r.holder, r.token, r.expires_at, t, r.value, r.acquired_at;
    ELSE
        RETURN QUERY SELECT false, NULL::text, coalesce(r.token, 0::bigint), NULL::timestamptz, t, NULL::text, NULL::timestamptz;
    END IF;
END
$$;

-- hand_off ends the term (p_key, p_owner, p_token) and, in the same
-- statement, hands the lease to the best live candidate other than p_owner:
-- p_to if given (or the transfer target the row names) and live, else the
-- one of highest priority, then the longest registered. The successor's term
-- draws token + 1, carries its candidate row's priority and value, is marked
-- handed_off, and expires at its candidate expiry until it confirms it
-- (take). With no live candidate, during the server's grace, or with no
-- token left, it releases the lease as release does. released is whether the
-- row still named the term; successor is the owner it was handed to, or NULL.
-- It sends no notification: after it commits, send the hint
-- pg_notify('pgleader', 'handoff <bytes of successor> <successor> <key>'), or a
-- release hint (pgleader.notify) when successor is NULL.
CREATE FUNCTION pgleader.hand_off(p_key text, p_owner text, p_token bigint, p_to text DEFAULT NULL)
RETURNS TABLE (released boolean, successor text, token bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    r pgleader.lease%ROWTYPE;
    c pgleader.candidate%ROWTYPE;
    g record;
    t timestamptz;
    target text;
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, NULL, true, false);
    IF p_to IS NOT NULL THEN
        PERFORM pgleader._check_args(p_key, p_to, NULL, true, false);
    END IF;
    g := pgleader._grace();

    SELECT * INTO r FROM pgleader.lease AS l
     WHERE l.key = p_key AND l.holder = p_owner AND l.token = p_token FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT false, NULL::text, coalesce((SELECT l.token FROM pgleader.lease AS l WHERE l.key = p_key), 0::bigint);
        RETURN;
    END IF;
    t := clock_timestamp();
    target := coalesce(p_to, r.transfer_to);

    IF t >= g.grace_until AND r.token < 9223372036854775807 THEN
        SELECT * INTO c FROM pgleader.candidate AS k
         WHERE k.key = p_key AND k.owner <> p_owner AND k.expires_at > t
         ORDER BY k.owner IS NOT DISTINCT FROM target DESC, k.priority DESC, k.registered_at, k.owner
         LIMIT 1
         FOR UPDATE;
        IF FOUND THEN
            UPDATE pgleader.lease AS l
               SET holder = c.owner, token = l.token + 1,
                   acquired_at = t, renewed_at = t, expires_at = least(c.expires_at, t + g.max_ttl),
                   value = c.value, priority = c.priority, resign_token = NULL,
                   handed_off = true, transfer_to = NULL
             WHERE l.key = p_key
            RETURNING l.token INTO r.token;
            DELETE FROM pgleader.candidate AS k
             WHERE k.key = p_key AND (k.owner = c.owner OR k.owner = p_owner OR k.expires_at <= t);
            RETURN QUERY SELECT true, c.owner, r.token;
            RETURN;
        END IF;
    END IF;

    UPDATE pgleader.lease AS l
       SET holder = NULL, acquired_at = NULL, renewed_at = NULL, expires_at = NULL,
           value = NULL, resign_token = NULL, handed_off = false, transfer_to = NULL
     WHERE l.key = p_key;
    DELETE FROM pgleader.candidate AS k WHERE k.key = p_key AND (k.owner = p_owner OR k.expires_at <= t);
    RETURN QUERY SELECT true, NULL::text, r.token;
END
$$;

-- release, as in version 5, and: it clears the hand-off and transfer marks.
CREATE OR REPLACE FUNCTION pgleader.release(p_key text, p_owner text, p_token bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, NULL, true, false);

    UPDATE pgleader.lease AS l
       SET holder = NULL, acquired_at = NULL, renewed_at = NULL, expires_at = NULL,
           value = NULL, resign_token = NULL, handed_off = false, transfer_to = NULL
     WHERE l.key = p_key AND l.holder = p_owner AND l.token = p_token;
    RETURN FOUND;
END
$$;

-- renew_term with a minimum term: as the 4-argument form, and it also
-- reports resign = true when a live candidate of higher priority than the
-- term's waits and the term has lasted p_min_term (on the database clock).
-- The holder then ends its term and hands off, and the best candidate — the
-- preferred one — takes over. NULL p_min_term never asks.
CREATE FUNCTION pgleader.renew_term(p_key text, p_owner text, p_token bigint, p_ttl interval, p_min_term interval)
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

-- transfer asks the term holding p_key to end and hand off to p_to, which
-- must be a live candidate of the key (else PF003, and nothing changes).
-- The holder learns at its next renewal, as for resign, ends its term
-- gracefully and hands the lease to p_to if p_to is still a live candidate
-- then (else to the best one). transferring is false, with the reason in
-- detail, when nobody holds the lease or p_to already does.
CREATE FUNCTION pgleader.transfer(p_key text, p_to text)
RETURNS TABLE (transferring boolean, holder text, token bigint, detail text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    r pgleader.lease%ROWTYPE;
    t timestamptz;
BEGIN
    PERFORM pgleader._check_args(p_key, p_to, NULL, true, false);

    SELECT * INTO r FROM pgleader.lease AS l WHERE l.key = p_key FOR UPDATE;
    t := clock_timestamp();
    IF NOT FOUND OR r.holder IS NULL OR r.expires_at <= t THEN
        RETURN QUERY SELECT false, NULL::text, coalesce(r.token, 0::bigint), 'nobody holds the lease'::text;
        RETURN;
    END IF;
    IF r.holder = p_to THEN
        RETURN QUERY SELECT false, r.holder, r.token, format('%s already holds the lease', p_to);
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pgleader.candidate AS c WHERE c.key = p_key AND c.owner = p_to AND c.expires_at > t) THEN
        RAISE EXCEPTION 'pgleader: % is not a live candidate of key %', to_json(p_to), to_json(p_key)
            USING ERRCODE = 'PF003',
                  HINT = 'List the candidates with pgleader.candidates(key) or pgleader status; a candidate registers while it waits and listens.';
    END IF;

    UPDATE pgleader.lease AS l SET resign_token = l.token, transfer_to = p_to WHERE l.key = p_key;
    RETURN QUERY SELECT true, r.holder, r.token,
        format('term %s of %s will end at its next renewal and hand off to %s', r.token, r.holder, p_to);
END
$$;

-- candidates lists p_key's live candidates, the best first.
CREATE FUNCTION pgleader.candidates(p_key text)
RETURNS TABLE (owner text, priority integer, registered_at timestamptz, expires_at timestamptz, value text, db_now timestamptz)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    t timestamptz := clock_timestamp();
BEGIN
    PERFORM pgleader._check_args(p_key, NULL, NULL, false, false);
    RETURN QUERY
        SELECT c.owner, c.priority, c.registered_at, c.expires_at, c.value, t
          FROM pgleader.candidate AS c
         WHERE c.key = p_key AND c.expires_at > t
         ORDER BY c.priority DESC, c.registered_at, c.owner;
END
$$;

-- withdraw removes p_owner's candidate row for p_key; a candidate that stops
-- calls it so that no term is handed to it.
CREATE FUNCTION pgleader.withdraw(p_key text, p_owner text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
BEGIN
    PERFORM pgleader._check_args(p_key, p_owner, NULL, true, false);
    DELETE FROM pgleader.candidate AS c WHERE c.key = p_key AND c.owner = p_owner;
    RETURN FOUND;
END
$$;

-- grant_usage, as in version 3, and: the candidate table.
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
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE pgleader.candidate TO %I', p_role);
    EXECUTE format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA pgleader TO %I', p_role);
    IF p_history IS NOT NULL THEN
        EXECUTE format('GRANT SELECT ON TABLE %s TO %I', p_history, p_role);
    END IF;
END
$$;

-- acquire, as in version 5: campaign without a candidate row, at priority 0.
CREATE OR REPLACE FUNCTION pgleader.acquire(p_key text, p_owner text, p_ttl interval, p_floor bigint DEFAULT 0, p_value text DEFAULT NULL)
RETURNS TABLE (acquired boolean, holder text, token bigint, expires_at timestamptz, db_now timestamptz, value text)
LANGUAGE sql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
    SELECT c.acquired, c.holder, c.token, c.expires_at, c.db_now, c.value
      FROM pgleader.campaign(p_key, p_owner, p_ttl, p_floor, p_value, 0, NULL) AS c
$$;

-- advance, as in version 4, and: it clears the hand-off and transfer marks.
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
           holder = NULL, acquired_at = NULL, renewed_at = NULL, expires_at = NULL,
           value = NULL, resign_token = NULL, handed_off = false, transfer_to = NULL
     WHERE l.key = p_key
    RETURNING l.token INTO r.token;
    RETURN QUERY SELECT true, r.token;
END
$$;
