-- pgleader, version 12: only the schema's owner moves the token epoch.
--
-- _epoch_bump moves the cluster to the next token epoch. It is meant to
-- run once per crash recovery or promotion, from _grace (SECURITY DEFINER,
-- so it runs as the owner). Until now every role could also call it
-- directly (PUBLIC's default EXECUTE, and grant_usage's EXECUTE on every
-- function): an application role could spend the 2^22 epochs in a loop, and
-- at the last one every key's draw fails. EXECUTE on it now belongs to the
-- owner alone; a lease operation's notice still moves the epoch, through
-- _grace. (The rest of the privilege boundary is issue 25.)

REVOKE EXECUTE ON FUNCTION pgleader._epoch_bump() FROM PUBLIC;

-- Roles that grant_usage gave EXECUTE on every function lose it on this one.
DO $$
DECLARE
    r name;
BEGIN
    FOR r IN SELECT DISTINCT g.grantee FROM information_schema.role_routine_grants AS g
              WHERE g.routine_schema = 'pgleader' AND g.routine_name = '_epoch_bump'
                AND g.privilege_type = 'EXECUTE' AND g.grantee <> 'PUBLIC'
                AND g.grantee <> (SELECT pg_get_userbyid(n.nspowner) FROM pg_catalog.pg_namespace AS n WHERE n.nspname = 'pgleader')
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION pgleader._epoch_bump() FROM %I', r);
    END LOOP;
END
$$;

-- grant_usage, as in version 7, and: not EXECUTE on _epoch_bump.
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
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE pgleader.set_member TO %I', p_role);
    EXECUTE format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA pgleader TO %I', p_role);
    IF p_role <> pg_get_userbyid(owner) THEN
        EXECUTE format('REVOKE EXECUTE ON FUNCTION pgleader._epoch_bump() FROM %I', p_role);
    END IF;
    IF p_history IS NOT NULL THEN
        EXECUTE format('GRANT SELECT ON TABLE %s TO %I', p_history, p_role);
    END IF;
END
$$;
