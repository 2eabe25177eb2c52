-- Reverts 0008_epoch.up.sql: _grace as in version 4, no token epochs.

DROP TRIGGER lease_draw ON pgleader.lease;
DROP FUNCTION pgleader._lease_draw();

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
        SELECT e.grace_until INTO STRICT grace_until FROM pgleader.server_epoch AS e;
    END IF;
END
$$;

DROP FUNCTION pgleader._epoch_bump();
ALTER TABLE pgleader.lease ALTER COLUMN token SET DEFAULT 0;
DROP FUNCTION pgleader._epoch_base();
DROP FUNCTION pgleader._epoch();
ALTER TABLE pgleader.lease DROP COLUMN token_min;
ALTER TABLE pgleader.settings DROP COLUMN epoch;
