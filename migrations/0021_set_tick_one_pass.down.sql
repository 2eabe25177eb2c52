-- Reverts 0021_set_tick_one_pass.up.sql: set_tick is version 15's again,
-- set_renew with a short answer (which locks the rows, reads the clock and
-- renews them in renew_many). Its grants are unchanged (CREATE OR REPLACE
-- keeps them).

CREATE OR REPLACE FUNCTION pgleader.set_tick(p_set text, p_owner text, p_keys text[], p_tokens bigint[], p_ttl interval,
                                             p_held integer)
RETURNS TABLE (lost text[], resign text[], expires_at timestamptz, members text[], member_held integer[],
               member_expires_at timestamptz[], handed integer, db_now timestamptz)
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
    SELECT (SELECT coalesce(array_agg(d.k), '{}')
              FROM (SELECT u.k FROM unnest(p_keys) AS u(k)
                    EXCEPT ALL
                    SELECT r.k FROM unnest(s.renewed) AS r(k)) AS d),
           s.resign,
           (SELECT min(x.e) FROM unnest(s.expires_at) AS x(e)),
           s.members, s.member_held, s.member_expires_at, s.handed, s.db_now
      FROM pgleader.set_renew(p_set, p_owner, p_keys, p_tokens, p_ttl, p_held) AS s
$$;
