-- ---------------------------------------------------------------------------------------
-- The roles (90_privileges.sql describes them): last, since they are granted what every
-- part before defines.
-- ---------------------------------------------------------------------------------------

-- hpcacct_submit: the scheduler's submit check (job_submit.lua) and nothing else. It reads
-- the tables check_submit reads, for every account (sees_all_accounts), and writes nothing.
CREATE FUNCTION hpcacct_internal.grant_submit_role() RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        GRANT USAGE ON SCHEMA @extschema@, hpcacct_internal TO hpcacct_submit;
        GRANT SELECT ON @extschema@.account, @extschema@.hpc_user, @extschema@.membership, @extschema@.ledger,
                        @extschema@.charge_rollup, @extschema@.consumption_rollup, @extschema@.rollup_pending, @extschema@.setting,
                        @extschema@.settings, @extschema@.resource,
                        @extschema@.quota_period, @extschema@.monthly_allowance, @extschema@.regulation_machine
            TO hpcacct_submit;
        GRANT EXECUTE ON FUNCTION @extschema@.check_submit(text, text, date) TO hpcacct_submit;
    END
    $$;
REVOKE EXECUTE ON FUNCTION hpcacct_internal.grant_submit_role() FROM PUBLIC;
COMMENT ON FUNCTION hpcacct_internal.grant_submit_role() IS
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
        GRANT USAGE ON SCHEMA @extschema@, hpcacct_internal TO hpcacct_admin, hpcacct_ingest, hpcacct_portal, hpcacct_auditor;
        GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA @extschema@ TO hpcacct_admin;
        -- the rollups are the ledger's sums: written by the functions that compute them, which run
        -- as the owner (the ledger's trigger, rebuild_rollup, roll_up_pending, compact_rollup)
        REVOKE INSERT, UPDATE, DELETE ON @extschema@.charge_rollup, @extschema@.consumption_rollup,
                                         @extschema@.fairshare_base, @extschema@.usage_base, @extschema@.rollup_pending
            FROM hpcacct_admin;
        GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA @extschema@ TO hpcacct_admin;
        GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA @extschema@, hpcacct_internal TO hpcacct_admin;
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
        PERFORM hpcacct_internal.grant_submit_role();
        -- a portal user keeps their own contact row (its policy admits no other)
        GRANT INSERT (username, email, display_name, notify), UPDATE (email, display_name, notify)
            ON @extschema@.contact TO hpcacct_portal;
    END
    $$;
REVOKE EXECUTE ON PROCEDURE @extschema@.setup_roles() FROM PUBLIC;
COMMENT ON PROCEDURE @extschema@.setup_roles() IS
    'Creates hpcacct_admin, hpcacct_ingest, hpcacct_portal, hpcacct_auditor and hpcacct_submit if missing and grants '
    'their privileges';
