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

-- hpcacct_notify: the mail sender (hpcacct-notify) and nothing else. It leases due deliveries
-- and records their outcome (the four sender functions, which run with its rights); it reads
-- the delivery rows, the messages' subjects and bodies and the users' display names, which
-- outbox_claim returns, and the settings; it writes only a delivery's state, lease, attempts
-- and error. Row-level security lets it see every delivery (the policies sender_rows).
CREATE FUNCTION hpcacct_internal.grant_notify_role() RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        GRANT USAGE ON SCHEMA @extschema@, hpcacct_internal TO hpcacct_notify;
        GRANT SELECT ON @extschema@.outbox_recipient, @extschema@.setting, @extschema@.settings TO hpcacct_notify;
        GRANT SELECT (message_id, subject, body, created_at) ON @extschema@.outbox TO hpcacct_notify;
        GRANT SELECT (username, display_name) ON @extschema@.contact TO hpcacct_notify;
        GRANT UPDATE (state, attempts, next_attempt, lease_owner, lease_until, last_error, delivered_at)
            ON @extschema@.outbox_recipient TO hpcacct_notify;
        GRANT EXECUTE ON FUNCTION @extschema@.outbox_claim(text, interval, integer), @extschema@.outbox_next_due(),
                                  @extschema@.outbox_sending(text, bigint),
                                  @extschema@.outbox_result(text, bigint, text, text, interval, interval),
                                  hpcacct_internal.outbox_analyze(bigint)
            TO hpcacct_notify;
    END
    $$;
REVOKE EXECUTE ON FUNCTION hpcacct_internal.grant_notify_role() FROM PUBLIC;
COMMENT ON FUNCTION hpcacct_internal.grant_notify_role() IS
    'Grants hpcacct_notify what hpcacct-notify''s queries need (called by setup_roles)';

-- Creates the six roles if they do not exist yet and grants them their privileges. Run it
-- after create_job_table(), and again after adding tables of your own to the schema: portal
-- users get those that filter rows by the session user (below) and no other.
CREATE PROCEDURE @extschema@.setup_roles()
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        r record;
        rel record;
    BEGIN
        FOR r IN SELECT * FROM (VALUES
            ('hpcacct_admin', 'hpcacct: administers the site: every table, function and procedure of the extension'),
            ('hpcacct_ingest', 'hpcacct: the loader: inserts jobs, COPYs into sacct_staging and runs load_sacct()'),
            ('hpcacct_portal', 'hpcacct: a portal user: reads their own accounts'' rows; a project administrator '
                               'also manages the members of their projects'),
            ('hpcacct_auditor', 'hpcacct: reads every account''s rows and figures and changes nothing'),
            ('hpcacct_submit', 'hpcacct: the Slurm submit check: runs check_submit() for any user and account'),
            ('hpcacct_notify', 'hpcacct: the mail sender: leases the outbox''s deliveries and records their outcome')
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
        -- a portal user reads what filters rows by the session user: tables with row-level
        -- security or without an account or user column (reference data), and views that run
        -- as their caller. Nothing else in the schema, a site's own relations included: a view
        -- that runs as its owner, a materialized view, or a table of accounts' or users' rows
        -- without row-level security (the loader's staging tables: COPY refuses it) would show
        -- every account's rows. Those are not granted, an earlier grant is revoked, and a
        -- warning names them.
        FOR rel IN
            SELECT c.oid::regclass AS oid,
                   CASE WHEN c.relkind = 'v' THEN coalesce('security_invoker=true' = ANY (c.reloptions), false)
                        WHEN c.relkind IN ('r', 'p', 'f') THEN c.relrowsecurity OR NOT EXISTS (
                            SELECT 1 FROM pg_catalog.pg_attribute a
                            WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                              AND a.attname IN ('account', 'username', 'user'))
                        ELSE false END AS filtered
            FROM pg_catalog.pg_class c
            WHERE c.relnamespace = '@extschema@'::regnamespace AND c.relkind IN ('r', 'p', 'f', 'v', 'm')
            ORDER BY c.relname
        LOOP
            IF rel.filtered THEN
                EXECUTE pg_catalog.format('GRANT SELECT ON %s TO hpcacct_portal', rel.oid);
            ELSE
                EXECUTE pg_catalog.format('REVOKE SELECT ON %s FROM hpcacct_portal', rel.oid);
                IF rel.oid NOT IN ('@extschema@.sacct_staging'::regclass, '@extschema@.sacctmgr_staging'::regclass) THEN
                    RAISE WARNING 'setup_roles: hpcacct_portal is not granted SELECT on %: it would show every account''s rows',
                                  rel.oid
                        USING HINT = 'Give a table row-level security (SELECT hpcacct_internal.protect_table(''table'')), '
                                     'make a view security_invoker, or move the relation out of the schema; then CALL '
                                     'hpcacct.setup_roles() again.';
                END IF;
            END IF;
        END LOOP;
        -- project administrators manage their projects' members from a portal (the functions
        -- check that the session user administers the account)
        GRANT EXECUTE ON FUNCTION @extschema@.add_member(text, text, text, text),
                                  @extschema@.remove_member(text, text, text) TO hpcacct_portal;
        -- the auditor reads every table (row-level security lets it see every account) and
        -- the fair share of every account; it writes nothing and runs no administrative function
        GRANT SELECT ON ALL TABLES IN SCHEMA @extschema@ TO hpcacct_auditor;
        GRANT EXECUTE ON FUNCTION @extschema@.fairshare_all(timestamptz) TO hpcacct_auditor;
        PERFORM hpcacct_internal.grant_submit_role();
        PERFORM hpcacct_internal.grant_notify_role();
        -- a portal user keeps their own contact row (its policy admits no other)
        GRANT INSERT (username, email, display_name, notify), UPDATE (email, display_name, notify)
            ON @extschema@.contact TO hpcacct_portal;
    END
    $$;
REVOKE EXECUTE ON PROCEDURE @extschema@.setup_roles() FROM PUBLIC;
COMMENT ON PROCEDURE @extschema@.setup_roles() IS
    'Creates hpcacct_admin, hpcacct_ingest, hpcacct_portal, hpcacct_auditor, hpcacct_submit and hpcacct_notify if '
    'missing and grants their privileges';
