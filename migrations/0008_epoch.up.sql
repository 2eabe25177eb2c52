-- pgleader, version 8: tokens keep growing across a failover (design rules
-- 4 and 5).
--
-- The grace (version 4) keeps a new server from granting a term while a
-- term the old one granted may be live. It does not stop the new server
-- from drawing a token again: after an asynchronous failover, or crash
-- recovery with synchronous_commit = off, the rows that recorded the last
-- tokens may be lost, and the new server's counter is where its copy left
-- it. A store in this database rolls back with those rows, so a write of
-- the old term, delayed past the grace, would be accepted after the new
-- term with the same token had claimed (fence <= token).
--
-- So tokens are drawn in epochs. settings.epoch (replicated) is this
-- cluster's epoch e; a key's tokens in epoch e lie in [e * 2^40, (e+1) * 2^40).
-- The server that notices it is new (in _grace, the transaction that fills
-- server_epoch and starts the grace) moves to epoch e+1 and, in the same
-- transaction, raises every key's counter to at least (e+1) * 2^40: every
-- token it draws is then above every token the old server drew in epoch e.
-- * A key whose lease is held by a term the new server knows keeps its
--   token (its holder renews it); its next draw must exceed token_min,
--   which the trigger lease_draw applies to whatever function draws.
-- * A row created later (a key whose row was lost) starts at the epoch's
--   base: token's default is _epoch_base().
-- * A key above the epoch's range (a floor or advance put it there) has its
--   counter raised by 2^40 instead.
-- * Within an epoch a key draws fewer than 2^40 tokens: the draw that
--   would reach the next epoch's range by counting is refused (22003), so
--   it cannot collide with a later server's tokens.
-- * Epochs 0 to 2^22 - 1 end at 2^62 - 1, MaxFloor and sqlfence.MaxToken.
--   After epoch 2^22 - 1 a new server draws nothing (22003): 4194304
--   failovers, not reachable in practice.
-- A fresh install is in epoch 0 and counts from 1 as before; so does an
-- upgraded one (its counters are below 2^40).

ALTER TABLE pgleader.settings
    ADD COLUMN epoch bigint NOT NULL DEFAULT 0 CONSTRAINT settings_epoch_range CHECK (epoch BETWEEN 0 AND 4194304);

COMMENT ON COLUMN pgleader.settings.epoch IS
    'pgleader token epoch: every key''s tokens are at least epoch * 2^40; raised by one by each server that starts after crash recovery or promotion. 4194304: no epoch left. Do not edit.';

ALTER TABLE pgleader.lease ADD COLUMN token_min bigint;

COMMENT ON COLUMN pgleader.lease.token_min IS
    'pgleader: the next token drawn for this key exceeds token_min (set for a lease held across a failover). Do not edit.';

-- _epoch is settings.epoch (0 without a settings row).
CREATE FUNCTION pgleader._epoch()
RETURNS bigint
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
    SELECT coalesce((SELECT s.epoch FROM pgleader.settings AS s), 0)
$$;

-- _epoch_base is the first counter of the current epoch: new rows start
-- there.
CREATE FUNCTION pgleader._epoch_base()
RETURNS bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgleader, pg_temp AS $$
    SELECT pgleader._epoch() << 40
$$;

ALTER TABLE pgleader.lease ALTER COLUMN token SET DEFAULT pgleader._epoch_base();

-- _epoch_bump moves the cluster to the next epoch and raises every key's
-- counter above the tokens the previous epoch could draw. _grace calls it
-- in the one transaction that fills server_epoch, so it runs once per
-- crash recovery or promotion, and before any term of the new server can
-- be granted (the grace has just begun). Rows another transaction has
-- locked are waited for; on a new server only a pgleader function that
-- found server_epoch filled (so after this transaction) locks them, or a
-- release, which holds its lock for its own statement only.
CREATE FUNCTION pgleader._epoch_bump()
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    e bigint;
    base bigint;
BEGIN
    -- The new epoch must not be lost by a crash after tokens of it were
    -- handed out: flush this commit even where synchronous_commit = off.
    IF current_setting('synchronous_commit') = 'off' THEN
        PERFORM set_config('synchronous_commit', 'local', true);
    END IF;
    UPDATE pgleader.settings AS s SET epoch = least(s.epoch + 1, 4194304) RETURNING s.epoch INTO e;
    IF NOT FOUND THEN
        -- The settings row was deleted by hand: start it again, above every
        -- counter this server has.
        SELECT least(coalesce(max(l.token) >> 40, 0) + 1, 4194304) INTO e FROM pgleader.lease AS l;
        INSERT INTO pgleader.settings (max_ttl, max_clock_offset, epoch) VALUES (interval '10 minutes', interval '1 second', e);
    END IF;
    IF e >= 4194304 THEN
        RAISE WARNING 'pgleader: no token epoch left: this server draws no token (22003 at every draw)';
        RETURN e;
    END IF;
    base := e << 40;
    UPDATE pgleader.lease AS l
       SET token = CASE WHEN b.held THEN l.token ELSE b.next END,
           token_min = CASE WHEN b.held THEN b.next END,
           -- A lease that is not held is free: say so, as advance does, so
           -- the row never shows its old holder with a token it never drew.
           holder = CASE WHEN b.held THEN l.holder END,
           acquired_at = CASE WHEN b.held THEN l.acquired_at END,
           renewed_at = CASE WHEN b.held THEN l.renewed_at END,
           expires_at = CASE WHEN b.held THEN l.expires_at END,
           value = CASE WHEN b.held THEN l.value END,
           resign_token = CASE WHEN b.held THEN l.resign_token END
      FROM (SELECT x.key,
                   x.holder IS NOT NULL AND x.expires_at > clock_timestamp() AS held,
                   CASE WHEN greatest(x.token, coalesce(x.token_min, 0)) < base THEN base
                        WHEN greatest(x.token, coalesce(x.token_min, 0)) > 9223372036854775807 - 1099511627776 THEN 9223372036854775807
                        ELSE greatest(x.token, coalesce(x.token_min, 0)) + 1099511627776 END AS next
              FROM pgleader.lease AS x) AS b
     WHERE l.key = b.key;
    RETURN e;
END
$$;

-- _grace, as in version 4, and: the transaction that notices the server is
-- new (it inserts server_epoch's row) also moves to the next token epoch.
-- A concurrent notice waits for that insert and inserts nothing.
CREATE OR REPLACE FUNCTION pgleader._grace(OUT grace_until timestamptz, OUT max_ttl interval, OUT max_clock_offset interval)
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
        IF FOUND THEN
            PERFORM pgleader._epoch_bump();
        END IF;
        SELECT e.grace_until INTO STRICT grace_until FROM pgleader.server_epoch AS e;
    END IF;
END
$$;

-- _lease_draw is the trigger lease_draw: every change of a key's counter
-- (acquire, acquire_many, advance, a hand-off, whatever function draws)
-- passes here. It raises the counter above token_min when a failover left
-- one, and refuses (22003) the draw that would count into the next epoch's
-- range, and every draw once no epoch is left.
CREATE FUNCTION pgleader._lease_draw()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pgleader, pg_temp AS $$
DECLARE
    e bigint := pgleader._epoch();
    was bigint := greatest(OLD.token, coalesce(OLD.token_min, 0));
BEGIN
    IF e >= 4194304 THEN
        RAISE EXCEPTION 'pgleader: no token epoch left: key % cannot draw a token', to_json(NEW.key)
            USING ERRCODE = '22003',
                  HINT = 'This cluster failed over 4194304 times; its tokens are used up. Recreate the schema and move every fence to a new resource.';
    END IF;
    IF OLD.token_min IS NOT NULL THEN
        NEW.token := greatest(NEW.token, least(OLD.token_min, 9223372036854775806) + 1);
        NEW.token_min := NULL;
    END IF;
    IF NEW.token = (e + 1) << 40 AND NEW.token = was + 1 THEN
        RAISE EXCEPTION 'pgleader: key % has drawn every token of epoch %: its counter is at %', to_json(NEW.key), e, was
            USING ERRCODE = '22003',
                  HINT = format('A key draws fewer than 2^40 tokens per epoch, so that a server after a failover draws above them. Advance the key to %s or higher (pgleader.advance), or use another key.', (e + 1) << 40);
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER lease_draw BEFORE UPDATE OF token ON pgleader.lease
    FOR EACH ROW WHEN (NEW.token IS DISTINCT FROM OLD.token)
    EXECUTE FUNCTION pgleader._lease_draw();
