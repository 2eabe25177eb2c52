-- Reverts 0024_hint_after_take.up.sql: a hand-off's hint names a
-- successor only while the row is still handed off, as version 1 built it.

CREATE OR REPLACE FUNCTION pgleader.hint_handoff(p_key text, p_ended bigint)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
BEGIN
    PERFORM pgleader._check_args(p_key, NULL, NULL, false, false);
    PERFORM pg_notify('pgleader', CASE
        WHEN l.holder IS NOT NULL AND l.handed_off AND l.token > p_ended
        THEN 'handoff ' || octet_length(l.holder) || ' ' || l.holder || ' ' || p_key
        ELSE 'release ' || p_key END)
      FROM (SELECT 1) AS one LEFT JOIN pgleader.lease AS l ON l.key = p_key;
END
$$;
