-- ---------------------------------------------------------------------------------------
-- Row-level security helpers, which parts from 40_jobs on use: what the session user may
-- see, and the policies of a table.
-- ---------------------------------------------------------------------------------------

-- The accounts the session's user is a member of. SECURITY DEFINER so that policies can ask
-- without membership's own policy recursing.
CREATE FUNCTION hpcacct_internal.visible_accounts() RETURNS text[]
    LANGUAGE sql STABLE SECURITY DEFINER PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT coalesce(pg_catalog.array_agg(m.account), '{}')
        FROM @extschema@.membership m WHERE m.username = pg_catalog.session_user()
    $$;
COMMENT ON FUNCTION hpcacct_internal.visible_accounts() IS
    'Accounts the session user is a member of: what row-level security lets a portal role see';

-- Whether the current role sees every row of a table: superusers; roles with REPLICATION, which
-- may decode every change of the database anyway (a federation's initial copy read through its
-- role would otherwise copy no account's rows); and roles with the privileges of hpcacct_admin,
-- hpcacct_auditor (who reads everything and may change nothing) or hpcacct_submit (the
-- scheduler's submit check decides for every account) on a table that role may read. So a login
-- that is both a portal user and the submit check reads every account's ledger, as the submit
-- check does, but only its own jobs and address, as a portal user does; and a member who must
-- SET ROLE (privileges, not mere membership) sees every row only once it has.
-- PL/pgSQL, which keeps its plan for the session: every query on a protected table calls it
-- once, and a SQL function would be parsed and planned again each time (for the submit
-- role, five times per check_submit).
CREATE FUNCTION hpcacct_internal.sees_all_accounts(target regclass) RETURNS boolean
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        RETURN EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                       WHERE r.rolname IN ('hpcacct_admin', 'hpcacct_auditor', 'hpcacct_submit')
                         AND pg_catalog.pg_has_role(pg_catalog.current_user(), r.oid, 'USAGE')
                         AND pg_catalog.has_table_privilege(r.oid, target, 'SELECT'))
               OR coalesce((SELECT r.rolsuper OR r.rolreplication FROM pg_catalog.pg_roles r
                            WHERE r.rolname = pg_catalog.current_user()), false);
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.sees_all_accounts(regclass) IS
    'True for superusers, roles with REPLICATION, and roles with the privileges of hpcacct_admin, hpcacct_auditor or '
    'hpcacct_submit where that role may read the table: they see every account''s rows of it';

-- Row-level security on a table that names an account (or a user): reading is restricted,
-- writing is governed by the table privileges alone. The functions are called through
-- scalar subqueries, so that a query evaluates them once, not per row. Tables without such
-- a column (resources, settings, machines, pools) are reference data and left alone.
CREATE FUNCTION hpcacct_internal.protect_table(target regclass) RETURNS boolean
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        has_account boolean;
        has_username boolean;
        visible text;
    BEGIN
        SELECT bool_or(a.attname = 'account'), bool_or(a.attname = 'username')
        INTO has_account, has_username
        FROM pg_catalog.pg_attribute a
        WHERE a.attrelid = target AND a.attnum > 0 AND NOT a.attisdropped;
        visible := CASE
            WHEN target = '@extschema@.account'::regclass
                THEN 'name = ANY ((SELECT hpcacct_internal.visible_accounts())::text[])'
            WHEN has_account AND has_username
                THEN 'account = ANY ((SELECT hpcacct_internal.visible_accounts())::text[]) OR username = session_user'
            WHEN has_account
                THEN 'account = ANY ((SELECT hpcacct_internal.visible_accounts())::text[])'
            WHEN has_username
                THEN 'username = session_user'
        END;
        IF visible IS NULL THEN
            RETURN false;
        END IF;
        EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', target);
        EXECUTE format('CREATE POLICY member_rows ON %s FOR SELECT USING ((SELECT hpcacct_internal.sees_all_accounts(%L)) OR %s)',
                       target, target::text, visible);
        EXECUTE format('CREATE POLICY insert_rows ON %s FOR INSERT WITH CHECK (true)', target);
        EXECUTE format('CREATE POLICY update_rows ON %s FOR UPDATE USING (true) WITH CHECK (true)', target);
        EXECUTE format('CREATE POLICY delete_rows ON %s FOR DELETE USING (true)', target);
        RETURN true;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.protect_table(regclass) IS
    'Row-level security for a table with an account or username column: portal users see their accounts'' rows';
REVOKE EXECUTE ON FUNCTION hpcacct_internal.protect_table(regclass) FROM PUBLIC;
