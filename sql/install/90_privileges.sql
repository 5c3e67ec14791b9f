-- ---------------------------------------------------------------------------------------
-- Privileges and row-level security.
--
-- Four roles, created by CALL hpcacct.setup_roles() (or by the site, with these names):
--   hpcacct_admin   runs the centre: every table, every function and procedure;
--   hpcacct_ingest  loads jobs: INSERT into hpcacct.job; INSERT into hpcacct.sacct_staging and
--                   load_sacct() (the sacct loader); nothing else (the charging trigger and
--                   load_sacct() book with the extension owner's rights);
--   hpcacct_portal  reads every table and view, but sees only the rows of accounts its
--                   session user is a member of (row-level security); a project
--                   administrator among them manages the members of their projects
--                   (add_member, remove_member);
--   hpcacct_auditor reads every table and view with every account's rows, changes nothing;
--   hpcacct_submit  the scheduler's submit check: EXECUTE on check_submit and SELECT on what
--                   it reads, for every account.
-- Administrative functions and procedures are not executable by PUBLIC.
-- ---------------------------------------------------------------------------------------

-- The accounts the session's user is a member of. SECURITY DEFINER so that policies can ask
-- without membership's own policy recursing.
CREATE FUNCTION @extschema@.visible_accounts() RETURNS text[]
    LANGUAGE sql STABLE SECURITY DEFINER PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT coalesce(pg_catalog.array_agg(m.account), '{}')
        FROM @extschema@.membership m WHERE m.username = pg_catalog.session_user()
    $$;
COMMENT ON FUNCTION @extschema@.visible_accounts() IS
    'Accounts the session user is a member of: what row-level security lets a portal role see';

-- Whether the current role sees every row: superusers and members of hpcacct_admin or of
-- hpcacct_auditor (who reads everything and may change nothing), and hpcacct_submit (the
-- scheduler's submit check decides for every account, and holds SELECT only on what that needs).
-- PL/pgSQL, which keeps its plan for the session: every query on a protected table calls it
-- once, and a SQL function would be parsed and planned again each time (for the submit
-- role, five times per check_submit).
CREATE FUNCTION @extschema@.sees_all_accounts() RETURNS boolean
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        RETURN EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                       WHERE r.rolname IN ('hpcacct_admin', 'hpcacct_auditor', 'hpcacct_submit')
                         AND pg_catalog.pg_has_role(pg_catalog.current_user(), r.oid, 'MEMBER'))
               OR coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = pg_catalog.current_user()),
                           false);
    END
    $$;
COMMENT ON FUNCTION @extschema@.sees_all_accounts() IS
    'True for superusers and members of hpcacct_admin, hpcacct_auditor or hpcacct_submit, who see every account''s rows';

-- The charging trigger books the ledger for whoever inserts jobs (hpcacct_ingest has no
-- right on the ledger itself). Its search_path is pinned and everything it calls qualified.
ALTER FUNCTION @extschema@.charge_jobs() SECURITY DEFINER;

-- Views run with the privileges and row-level security of the role that queries them.
DO $$
DECLARE
    v regclass;
BEGIN
    FOR v IN SELECT c.oid FROM pg_catalog.pg_class c
             WHERE c.relnamespace = '@extschema@'::regnamespace AND c.relkind = 'v' LOOP
        EXECUTE pg_catalog.format('ALTER VIEW %s SET (security_invoker = true)', v);
    END LOOP;
END
$$;

-- Row-level security on a table that names an account (or a user): reading is restricted,
-- writing is governed by the table privileges alone. The functions are called through
-- scalar subqueries, so that a query evaluates them once, not per row. Tables without such
-- a column (resources, settings, machines, pools) are reference data and left alone.
CREATE FUNCTION @extschema@.protect_table(target regclass) RETURNS boolean
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
                THEN 'name = ANY ((SELECT @extschema@.visible_accounts())::text[])'
            WHEN has_account AND has_username
                THEN 'account = ANY ((SELECT @extschema@.visible_accounts())::text[]) OR username = session_user'
            WHEN has_account
                THEN 'account = ANY ((SELECT @extschema@.visible_accounts())::text[])'
            WHEN has_username
                THEN 'username = session_user'
        END;
        IF visible IS NULL THEN
            RETURN false;
        END IF;
        EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', target);
        EXECUTE format('CREATE POLICY member_rows ON %s FOR SELECT USING ((SELECT @extschema@.sees_all_accounts()) OR %s)',
                       target, visible);
        EXECUTE format('CREATE POLICY insert_rows ON %s FOR INSERT WITH CHECK (true)', target);
        EXECUTE format('CREATE POLICY update_rows ON %s FOR UPDATE USING (true) WITH CHECK (true)', target);
        EXECUTE format('CREATE POLICY delete_rows ON %s FOR DELETE USING (true)', target);
        RETURN true;
    END
    $$;
COMMENT ON FUNCTION @extschema@.protect_table(regclass) IS
    'Row-level security for a table with an account or username column: portal users see their accounts'' rows';

SELECT count(*) FILTER (WHERE @extschema@.protect_table(c.oid)) AS protected_tables
FROM pg_catalog.pg_class c
WHERE c.relnamespace = '@extschema@'::regnamespace AND c.relkind = 'r';

-- hpcacct_submit: the scheduler's submit check (job_submit.lua) and nothing else. It reads
-- the tables check_submit reads, for every account (sees_all_accounts), and writes nothing.
CREATE FUNCTION @extschema@.grant_submit_role() RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        GRANT USAGE ON SCHEMA @extschema@ TO hpcacct_submit;
        GRANT SELECT ON @extschema@.account, @extschema@.hpc_user, @extschema@.membership, @extschema@.ledger,
                        @extschema@.charge_rollup, @extschema@.setting, @extschema@.settings, @extschema@.resource,
                        @extschema@.quota_period, @extschema@.monthly_allowance, @extschema@.machine_setting
            TO hpcacct_submit;
        GRANT EXECUTE ON FUNCTION @extschema@.check_submit(text, text, date) TO hpcacct_submit;
    END
    $$;
REVOKE EXECUTE ON FUNCTION @extschema@.grant_submit_role() FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.grant_submit_role() IS
    'Grants hpcacct_submit what check_submit reads (called by setup_roles)';

-- Creates the four roles if they do not exist yet and grants them their privileges. Run it
-- after create_job_table(), and again after adding tables of your own to the schema.
CREATE PROCEDURE @extschema@.setup_roles()
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        r record;
    BEGIN
        FOR r IN SELECT * FROM (VALUES
            ('hpcacct_admin', 'hpcacct: administers the site: every table, function and procedure of the extension'),
            ('hpcacct_ingest', 'hpcacct: the loader: inserts jobs, COPYs into sacct_staging and runs load_sacct()'),
            ('hpcacct_portal', 'hpcacct: a portal user: reads their own accounts'' rows; a project administrator '
                               'also manages the members of their projects'),
            ('hpcacct_auditor', 'hpcacct: reads every account''s rows and figures and changes nothing'),
            ('hpcacct_submit', 'hpcacct: the Slurm submit check: runs check_submit() for any user and account')
        ) AS v(name, description) LOOP
            IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles x WHERE x.rolname = r.name) THEN
                EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', r.name);
            END IF;
            EXECUTE pg_catalog.format('COMMENT ON ROLE %I IS %L', r.name, r.description);
        END LOOP;
        GRANT USAGE ON SCHEMA @extschema@ TO hpcacct_admin, hpcacct_ingest, hpcacct_portal, hpcacct_auditor;
        GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA @extschema@ TO hpcacct_admin;
        GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA @extschema@ TO hpcacct_admin;
        GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA @extschema@ TO hpcacct_admin;
        GRANT EXECUTE ON ALL PROCEDURES IN SCHEMA @extschema@ TO hpcacct_admin;
        IF pg_catalog.to_regclass('@extschema@.job') IS NOT NULL THEN
            GRANT INSERT ON @extschema@.job TO hpcacct_ingest;
        END IF;
        -- the sacct loader (95_sacct.sql): COPY into the staging table, then load_sacct()
        GRANT INSERT ON @extschema@.sacct_staging TO hpcacct_ingest;
        GRANT EXECUTE ON FUNCTION @extschema@.load_sacct(timestamptz, text[]),
                                  @extschema@.sacct_window_start(text, interval) TO hpcacct_ingest;
        GRANT SELECT ON ALL TABLES IN SCHEMA @extschema@ TO hpcacct_portal;
        -- staged lines are every account's, and not behind row-level security (COPY refuses it)
        REVOKE SELECT ON @extschema@.sacct_staging, @extschema@.sacctmgr_staging FROM hpcacct_portal;
        -- project administrators manage their projects' members from a portal (the functions
        -- check that the session user administers the account)
        GRANT EXECUTE ON FUNCTION @extschema@.add_member(text, text, text, text),
                                  @extschema@.remove_member(text, text, text) TO hpcacct_portal;
        -- the auditor reads every table (row-level security lets it see every account) and
        -- the fair share of every account; it writes nothing and runs no administrative function
        GRANT SELECT ON ALL TABLES IN SCHEMA @extschema@ TO hpcacct_auditor;
        GRANT EXECUTE ON FUNCTION @extschema@.fairshare_all(timestamptz) TO hpcacct_auditor;
        PERFORM @extschema@.grant_submit_role();
        -- a portal user keeps their own contact row (its policy admits no other)
        GRANT INSERT (username, email, display_name, notify), UPDATE (email, display_name, notify)
            ON @extschema@.contact TO hpcacct_portal;
    END
    $$;
REVOKE EXECUTE ON PROCEDURE @extschema@.setup_roles() FROM PUBLIC;
COMMENT ON PROCEDURE @extschema@.setup_roles() IS
    'Creates hpcacct_admin, hpcacct_ingest, hpcacct_portal, hpcacct_auditor and hpcacct_submit if missing and grants '
    'their privileges';

-- A share is an account's fraction of its pool, so computing one account's factor needs
-- every account's usage, which row-level security hides from a portal user. fairshare()
-- therefore computes as the owner (fairshare_all) and returns every row to superusers and
-- members of hpcacct_admin or hpcacct_auditor. Anyone else gets the rows of the accounts the session user is a
-- member of, at the present instant only, without share and norm_usage: those two are
-- fractions of the pool's totals, and at instants of one's choosing they would give away
-- the other accounts' grants and the times their jobs ended. The factor remains: at the
-- present it tells the ratio of the pool's allocation to its decayed usage, no account's.
CREATE FUNCTION @extschema@.fairshare(at timestamptz DEFAULT pg_catalog.now())
    RETURNS TABLE (pool text, unit text, account text, submitter text, allocation numeric, share float8,
                   usage float8, norm_usage float8, year_usage numeric, exhausted boolean, factor float8)
    LANGUAGE plpgsql STABLE SECURITY DEFINER PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        instant constant timestamptz := coalesce(fairshare.at, pg_catalog.now());
        sees_all constant boolean := EXISTS (
            SELECT 1 FROM pg_catalog.pg_roles r
            WHERE (r.rolname IN ('hpcacct_admin', 'hpcacct_auditor')
                   AND pg_catalog.pg_has_role(pg_catalog.session_user(), r.oid, 'MEMBER'))
               OR (r.rolname = pg_catalog.session_user() AND r.rolsuper));
    BEGIN
        IF NOT sees_all AND instant <> pg_catalog.now() THEN
            RAISE EXCEPTION 'fairshare() at % is for administrators: others see the present only', instant
                USING ERRCODE = 'insufficient_privilege', HINT = 'Call hpcacct.fairshare() without an argument.';
        END IF;
        RETURN QUERY
            SELECT f.pool, f.unit, f.account, f.submitter, f.allocation,
                   CASE WHEN sees_all THEN f.share END, f.usage,
                   CASE WHEN sees_all THEN f.norm_usage END, f.year_usage, f.exhausted, f.factor
            FROM @extschema@.fairshare_all(instant) f
            WHERE sees_all OR f.account = ANY (@extschema@.visible_accounts());
    END
    $$;
COMMENT ON FUNCTION @extschema@.fairshare(timestamptz) IS
    'Fair-share table per pool, account and user (see fairshare_all); at NULL means now. Administrators and auditors '
    'see every row at any instant; others their accounts'' rows, now only, without share and norm_usage';

-- Administrative functions: not for PUBLIC (setup_roles grants them to hpcacct_admin).
-- charge_jobs() among them: it writes the ledger with the owner's rights, so whoever may
-- attach it to a table of their own could book or reverse charges of any account.
REVOKE EXECUTE ON FUNCTION
    @extschema@.deposit(text, date, numeric, text),
    @extschema@.refund(text, date, numeric, text),
    @extschema@.transfer(text, date, text, date, numeric, text),
    @extschema@.top_up(text, date, numeric),
    @extschema@.book_allocation(text, text, date, numeric, text),
    @extschema@.add_user(text, date),
    @extschema@.add_member(text, text, text, text),
    @extschema@.remove_member(text, text, text),
    @extschema@.set_default_project(text, text),
    @extschema@.recheck_queued(date),
    @extschema@.attach_charging(regclass, text[]),
    @extschema@.charge_jobs(),
    @extschema@.create_job_table(text),
    @extschema@.protect_table(regclass),
    @extschema@.fairshare_all(timestamptz),
    @extschema@.add_quota_period(text, date, date, float8, text, text),
    @extschema@.rebuild_rollup(),
    @extschema@.compact_rollup(),
    @extschema@.fold_rollup(date)
    FROM PUBLIC;
REVOKE EXECUTE ON PROCEDURE @extschema@.open_quarter(date), @extschema@.regulate(date) FROM PUBLIC;
