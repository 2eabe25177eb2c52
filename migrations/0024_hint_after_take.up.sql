-- pgleader's schema, version 24: a hand-off's hint names the successor
-- even when the successor took the lease before the hint was built.
--
-- HandOff sends hand_off and hint_handoff in one write, as two statements:
-- the hint reads the row hand_off committed. Between the two, the
-- successor can take the lease (its own campaign finds the row handed to
-- it), which clears handed_off; version 1's hint then said "release <key>"
-- although the lease had gone straight to the successor, and every
-- candidate that heard it campaigned against a held lease. Seen once in a
-- loaded CI run (TestApplicationRoleRunsTheReadme on PostgreSQL 15 heard
-- "release digest-publisher" where it waited for pod-b's name).
--
-- Now the hint names the row's holder as a hand-off when the row moved
-- past the ended term to a holder and is still handed off, or its holder's
-- term is live: taken by the successor, or, where hand_off found no
-- successor and released, won by a campaign in between (then too the
-- lease is held, and a candidate has nothing to campaign for). "release
-- <key>" is left for a row with no live holder above the ended term.

CREATE OR REPLACE FUNCTION pgleader.hint_handoff(p_key text, p_ended bigint)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgleader, pg_temp AS $$
BEGIN
    PERFORM pgleader._check_args(p_key, NULL, NULL, false, false);
    PERFORM pg_notify('pgleader', CASE
        WHEN l.holder IS NOT NULL AND l.token > p_ended
             AND (l.handed_off OR l.expires_at > clock_timestamp())
        THEN 'handoff ' || octet_length(l.holder) || ' ' || l.holder || ' ' || p_key
        ELSE 'release ' || p_key END)
      FROM (SELECT 1) AS one LEFT JOIN pgleader.lease AS l ON l.key = p_key;
END
$$;
