-- Privileges and row-level security: a portal user sees only their accounts' rows in every
-- table and view; non-administrators cannot run administrative functions; the ingestion role
-- can load jobs and nothing else; SECURITY DEFINER functions pin their search_path.
BEGIN;
SET search_path = public, hpcacct;

-- Every table and view of the schema that has an account column: each gets a leak test.
CREATE TEMP TABLE relations_with_account AS
    SELECT c.oid::regclass AS relation
    FROM pg_class c
    WHERE c.relnamespace = 'hpcacct'::regnamespace AND c.relkind IN ('r', 'v')
      AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'account'
                  AND NOT a.attisdropped)
      -- staged sacct lines: a portal user cannot read them at all (pgTAP loader)
      AND c.relname NOT IN ('sacct_staging', 'sacctmgr_staging')
    ORDER BY 1;
GRANT SELECT ON relations_with_account TO PUBLIC;
SELECT plan((SELECT count(*)::int FROM relations_with_account) + 36);

CALL setup_roles();
CREATE ROLE hp_alice LOGIN IN ROLE hpcacct_portal;
CREATE ROLE hp_bob LOGIN IN ROLE hpcacct_portal;
CREATE ROLE hp_loader LOGIN IN ROLE hpcacct_ingest;
CREATE ROLE hp_staff LOGIN IN ROLE hpcacct_admin;

-- Two projects with data of every kind: jobs, deposits, grants, regulation, quotas, queue.
INSERT INTO setting VALUES ('timezone', 'UTC') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO resource (cluster, partition, node, bundle, rate, unit)
VALUES ('privc', 'cpu', 'cpu=16', 'cpu=1', 1, 'NPL');
INSERT INTO account (name) VALUES ('priv_a'), ('priv_b');
SELECT add_user('hp_alice', '2024-01-05'), add_user('hp_bob', '2024-01-05');
SELECT add_member('priv_a', 'hp_alice', 'admin'), add_member('priv_b', 'hp_bob', 'admin');
SELECT deposit('priv_a', '2024-01-01', 1000), deposit('priv_b', '2024-01-01', 1000);
INSERT INTO job VALUES
    ('privc', 'a1', 'priv_a', 'hp_alice', 'cpu', NULL, '2024-02-01 00:00+00', '2024-02-01 05:00+00', 'cpu=4', 'COMPLETED'),
    ('privc', 'b1', 'priv_b', 'hp_bob', 'cpu', NULL, '2024-02-01 00:00+00', '2024-02-01 05:00+00', 'cpu=8', 'COMPLETED');
INSERT INTO regulation_machine (machine, monthly_threshold) VALUES ('privc', 100);
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('priv_a', 'grant', 12000, 'NPL', 'privc', '2024-01-01', '2024-12-31'),
       ('priv_b', 'grant', 12000, 'NPL', 'privc', '2024-01-01', '2024-12-31');
CALL regulate('2024-03-15');
INSERT INTO exoneration (account, machine, year, reason, received)
VALUES ('priv_b', 'privc', 2024, 'justification', '2024-05-20');
SELECT add_quota_period('priv_a', '2024-01-01', '2024-06-30', 100, NULL, 'NPL'),
       add_quota_period('priv_b', '2024-01-01', '2024-06-30', 100, NULL, 'NPL');
INSERT INTO pending_job (cluster, jobid, username, account) VALUES ('privc', 'q1', 'hp_bob', 'priv_b');
CALL open_quarter('2024-04-01');

-- hp_alice, through the portal role.
SET SESSION AUTHORIZATION hp_alice;
CREATE FUNCTION pg_temp.foreign_rows(relation regclass) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    EXECUTE format('SELECT count(*) FROM %s WHERE account IS NOT NULL AND account NOT IN (''priv_a'', ''hp_alice'')',
                   relation) INTO n;
    RETURN n;
END $$;
SELECT is(pg_temp.foreign_rows(relation), 0::bigint, format('%s shows hp_alice no other account''s rows', relation))
FROM relations_with_account;
SELECT cmp_ok((SELECT count(*) FROM hpcacct.ledger WHERE account = 'priv_a'), '>', 0::bigint,
              'hp_alice sees her project''s ledger');
SELECT cmp_ok((SELECT count(*) FROM hpcacct.quarter_balances WHERE account = 'priv_a'), '>', 0::bigint,
              'hp_alice sees her project''s balances');
SELECT is((SELECT array_agg(name ORDER BY name) FROM hpcacct.account), ARRAY['hp_alice', 'priv_a'],
          'hp_alice sees her two accounts and no other');
SELECT is((SELECT array_agg(username) FROM hpcacct.hpc_user), ARRAY['hp_alice'], 'and only her own user row');
SELECT throws_ok($$SELECT hpcacct.balance('priv_b', '2024-02-15')$$, '42704',
                 'account "priv_b" does not exist or is not visible to you',
                 'balance() of another project is the error of an unknown one: it reveals nothing, and is no 0');
SELECT is((hpcacct.check_submit('hp_bob', 'priv_b', '2024-02-15')).reason, 'unknown_account',
          'check_submit() cannot see another project');
SELECT throws_ok($$SELECT * FROM hpcacct.window_quota_usage('priv_b', '2024-02-15')$$, '42704',
                 'account "priv_b" does not exist or is not visible to you',
                 'window_quota_usage() of another project is the error of an unknown one');
SELECT throws_ok($$SELECT * FROM hpcacct.allocation_status('priv_b', 'privc', '2024-03-15')$$, '42704',
                 'account "priv_b" does not exist or is not visible to you',
                 'allocation_status() of another project is the error of an unknown one, not zeros and ok');
SELECT is((SELECT granted FROM hpcacct.allocation_status('priv_a', 'privc', '2024-03-15')), 12000.000000,
          'allocation_status() of her own project');
SELECT is_empty($$SELECT account FROM hpcacct.fairshare() WHERE account NOT IN ('hp_alice', 'priv_a')$$,
                'fairshare() shows hp_alice only her accounts');
SELECT is((SELECT count(*) FROM hpcacct.fairshare() WHERE share IS NOT NULL OR norm_usage IS NOT NULL), 0::bigint,
          'without the fractions of the pool''s totals (share, norm_usage)');
SELECT throws_ok($$SELECT hpcacct.deposit('priv_a', '2024-04-01', 10)$$, '42501', NULL, 'a portal user cannot deposit');
SELECT throws_ok($$CALL hpcacct.regulate('2024-04-15')$$, '42501', NULL, 'nor run regulate()');
SELECT throws_ok($$CALL hpcacct.open_quarter('2024-07-01')$$, '42501', NULL, 'nor open_quarter()');
SELECT throws_ok($$SELECT hpcacct.add_member('priv_b', 'hp_alice')$$, '42501', NULL,
                 'nor change the members of a project she does not administer (pgTAP delegation: her own, she can)');
SELECT throws_ok($$INSERT INTO hpcacct.job VALUES ('privc', 'x', 'priv_a', 'hp_alice', 'cpu', NULL,
                   '2024-02-01', '2024-02-02', 'cpu=1', 'COMPLETED')$$, '42501', NULL, 'nor insert jobs');
CREATE TEMP TABLE forged_jobs AS SELECT * FROM hpcacct.job WITH NO DATA;
SELECT throws_ok($$CREATE TRIGGER forge AFTER DELETE ON forged_jobs REFERENCING OLD TABLE AS old_jobs
                   FOR EACH STATEMENT EXECUTE FUNCTION hpcacct_internal.charge_jobs()$$, '42501', NULL,
                 'nor attach the charging trigger to a table of her own (it could reverse others'' charges)');
SELECT throws_ok($$INSERT INTO hpcacct.ledger (account, kind, amount, unit, valid_from, valid_until)
                   VALUES ('priv_a', 'deposit', 1, 'NPL', '2024-01-01', '2024-03-31')$$, '42501', NULL,
                 'nor write the ledger');
RESET SESSION AUTHORIZATION;

-- hp_loader, the ingestion role: loads jobs, which are charged; reads nothing.
SET SESSION AUTHORIZATION hp_loader;
SELECT lives_ok($$INSERT INTO hpcacct.job VALUES ('privc', 'a2', 'priv_a', 'hp_alice', 'cpu', NULL,
                  '2024-02-02 00:00+00', '2024-02-02 01:00+00', 'cpu=2', 'COMPLETED')$$,
                'the ingestion role loads a job');
SELECT throws_ok($$INSERT INTO hpcacct.job VALUES ('privc', 'a2', 'priv_a', 'hp_alice', 'cpu', NULL,
                  '2024-02-02 00:00+00', '2024-02-02 01:00+00', 'cpu=2', 'COMPLETED')$$, '23505', NULL,
                 'loading the same job again is 23505 (its hint says how to skip repeated jobs)');
SELECT lives_ok($$INSERT INTO hpcacct.job VALUES ('privc', 'a2', 'priv_a', 'hp_alice', 'cpu', NULL,
                  '2024-02-02 00:00+00', '2024-02-02 01:00+00', 'cpu=2', 'COMPLETED') ON CONFLICT DO NOTHING$$,
                'and what the hint says works with the ingestion role''s rights: ON CONFLICT DO NOTHING');
SELECT throws_ok($$SELECT count(*) FROM hpcacct.ledger$$, '42501', NULL, 'but cannot read the ledger');
SELECT throws_ok($$SELECT count(*) FROM hpcacct.job$$, '42501', NULL, 'nor the jobs');
SELECT throws_ok($$SELECT hpcacct.deposit('priv_a', '2024-04-01', 10)$$, '42501', NULL, 'nor deposit');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT amount FROM ledger WHERE cluster = 'privc' AND jobid = 'a2'), 2.000000,
          'the loaded job was charged through the trigger');

-- hp_staff, an administrator without superuser rights: sees and runs everything.
SET SESSION AUTHORIZATION hp_staff;
SELECT is((SELECT count(DISTINCT account) FROM hpcacct.ledger WHERE account IN ('priv_a', 'priv_b')), 2::bigint,
          'an administrator sees every account');
SELECT lives_ok($$SELECT hpcacct.deposit('priv_b', '2024-04-01', 10)$$, 'and deposits');
SELECT lives_ok($$CALL hpcacct.regulate('2024-04-15')$$, 'and runs regulate()');
SELECT throws_ok($$UPDATE hpcacct.ledger SET note = 'x' WHERE account = 'priv_a'$$, 'HA001', NULL,
                 'but does not update the ledger (HA001)');
SELECT throws_ok($$TRUNCATE hpcacct.ledger CASCADE$$, '42501', NULL,
                 'nor truncate it: not granted (42501; a superuser gets HA001)');
RESET SESSION AUTHORIZATION;

-- Functions that run with their owner's rights pin their search_path; every SQL or PL/pgSQL
-- function either pins it or has a body parsed at creation, so no caller's search_path can
-- change what it calls.
SELECT is((SELECT count(*) FROM pg_proc p
           WHERE p.pronamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace) AND p.prosecdef
             AND NOT coalesce(p.proconfig @> ARRAY['search_path=pg_catalog, pg_temp'], false)),
          0::bigint, 'every SECURITY DEFINER function pins search_path');
-- A procedure that commits, or calls an internal procedure that does, cannot have a SET
-- clause: it pins the path with set_config() first thing and after every COMMIT instead (the
-- federation's set-up procedures), checked below.
SELECT is((SELECT count(*) FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
           WHERE p.pronamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace) AND l.lanname IN ('sql', 'plpgsql')
             AND p.prosqlbody IS NULL
             AND NOT coalesce(p.proconfig @> ARRAY['search_path=pg_catalog, pg_temp'], false)
             AND NOT (p.prokind = 'p' AND p.prosrc ~ '\m(COMMIT;|CALL hpcacct_internal\.)')),
          0::bigint, 'every SQL and PL/pgSQL function is immune to the caller''s search_path');
SELECT is((SELECT count(*) FROM pg_proc p
           WHERE p.pronamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace) AND p.prokind = 'p' AND p.prosrc ~ '\m(COMMIT;|CALL hpcacct_internal\.)'
             AND (p.prosrc !~ '^\s*(DECLARE\s+([a-z_]+\s+[a-z0-9_.]+;\s*)*)?BEGIN\s+PERFORM pg_catalog\.set_config\(''search_path'', ''pg_catalog, pg_temp'', true\);'
                  OR (SELECT count(*) FROM regexp_matches(p.prosrc, 'COMMIT;\s+PERFORM pg_catalog\.set_config\(''search_path'', ''pg_catalog, pg_temp'', true\);', 'g'))
                     <> (SELECT count(*) FROM regexp_matches(p.prosrc, '\mCOMMIT;', 'g'))
                  OR pg_catalog.has_function_privilege('public', p.oid, 'EXECUTE'))),
          0::bigint, 'every procedure that commits pins search_path first and after every COMMIT, and is not for PUBLIC');
SELECT cmp_ok((SELECT count(*) FROM pg_proc p
               WHERE p.pronamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace) AND p.prokind = 'p' AND p.prosrc ~ '\mCOMMIT;'),
              '>=', 3::bigint, 'the federation''s three set-up procedures are among them (the check is not vacuous)');
SELECT is((SELECT string_agg(p.proname, ',' ORDER BY p.proname) FROM pg_proc p
           WHERE p.pronamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace) AND p.prosecdef),
          'add_member,charge_jobs,contact_follow,fairshare,fold_rollup,last_run_day,load_sacct,outbox_analyze,outbox_withdraw_member,'
          'rebuild_rollup,remove_member,roll_up_charges,roll_up_pending,run_alone,run_in_order,sacct_window_start,visible_accounts',
          'exactly these seventeen functions run with the owner''s rights (charging, visible_accounts, fairshare, the '
          'contact trigger that moves a portal user''s own pending deliveries, the membership trigger that withdraws a '
          'leaving member''s at a portal''s commit, last_run_day, which reads run_day for '
          'outbox_prune, outbox_analyze, which analyzes the deliveries after many were written or changed, the '
          'portal''s member management, the sacct loader, the rollups'' writers, run_alone, which locks a row '
          'of run_lock for the runs that must not overlap, and run_in_order, which keeps the last day of the runs '
          'that go in date order in run_day)');
SELECT is((SELECT count(*) FROM pg_class c
           WHERE c.relnamespace = 'hpcacct'::regnamespace AND c.relkind = 'v'
             AND NOT coalesce(c.reloptions @> ARRAY['security_invoker=true'], false)),
          0::bigint, 'every view checks the querying role''s privileges and row-level security');

SELECT * FROM finish();
ROLLBACK;
