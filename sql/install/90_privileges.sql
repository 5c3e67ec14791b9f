-- ---------------------------------------------------------------------------------------
-- Privileges and row-level security.
--
-- Six roles, created by CALL hpcacct.setup_roles() (or by the site, with these names):
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
--                   it reads, for every account;
--   hpcacct_notify  the mail sender (hpcacct-notify): EXECUTE on outbox_claim, outbox_sending,
--                   outbox_result and outbox_next_due, SELECT on what they read, UPDATE of a
--                   delivery's state; no account's figures.
-- Administrative functions and procedures are not executable by PUBLIC.
-- ---------------------------------------------------------------------------------------

-- The charging trigger books the ledger for whoever inserts jobs (hpcacct_ingest has no
-- right on the ledger itself). Its search_path is pinned and everything it calls qualified.
ALTER FUNCTION hpcacct_internal.charge_jobs() SECURITY DEFINER;

-- Views run with the privileges and row-level security of the role that queries them. Only
-- the extension's own views and tables: the schema may hold a job table that a dropped
-- hpcacct left (DROP EXTENSION keeps it, the site's data) or a site's own objects.
DO $$
DECLARE
    v regclass;
BEGIN
    FOR v IN SELECT c.oid FROM pg_catalog.pg_class c JOIN pg_catalog.pg_depend d
                 ON d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e'
             WHERE c.relnamespace = '@extschema@'::regnamespace AND c.relkind = 'v' LOOP
        EXECUTE pg_catalog.format('ALTER VIEW %s SET (security_invoker = true)', v);
    END LOOP;
END
$$;

SELECT count(*) FILTER (WHERE hpcacct_internal.protect_table(c.oid)) AS protected_tables
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_depend d
    ON d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e'
WHERE c.relnamespace = '@extschema@'::regnamespace AND c.relkind = 'r';

-- quarter_log's rows about one user (default_reset: the default project they had) are that
-- user's: hpc_user shows a default project to its user alone.
ALTER POLICY member_rows ON @extschema@.quarter_log
    USING ((SELECT hpcacct_internal.sees_all_accounts('@extschema@.quarter_log')) OR username = pg_catalog.session_user()
           OR (username IS NULL AND account = ANY ((SELECT hpcacct_internal.visible_accounts())::text[])));

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
        -- once: in the WHERE clause it ran for each of the table's rows (3.3 s at 15 000)
        mine constant text[] := CASE WHEN NOT sees_all THEN hpcacct_internal.visible_accounts() END;
    BEGIN
        IF NOT pg_catalog.isfinite(instant) THEN
            RAISE EXCEPTION 'fairshare: at must be finite, not %', instant USING ERRCODE = 'datetime_field_overflow';
        END IF;
        IF NOT sees_all AND instant <> pg_catalog.now() THEN
            RAISE EXCEPTION 'fairshare() at % is for administrators: others see the present only', instant
                USING ERRCODE = 'insufficient_privilege', HINT = 'Call hpcacct.fairshare() without an argument.';
        END IF;
        RETURN QUERY
            SELECT f.pool, f.unit, f.account, f.submitter, f.allocation,
                   CASE WHEN sees_all THEN f.share END, f.usage,
                   CASE WHEN sees_all THEN f.norm_usage END, f.year_usage, f.exhausted, f.factor
            FROM @extschema@.fairshare_all(instant) f
            WHERE sees_all OR f.account = ANY (mine);
    END
    $$;
COMMENT ON FUNCTION @extschema@.fairshare(timestamptz) IS
    'Fair-share table per pool, account and user (see fairshare_all); at NULL means now. Administrators and auditors '
    'see every row at any instant; others their accounts'' rows, now only, without share and norm_usage';

