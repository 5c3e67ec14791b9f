-- The roles a site hands out, attacked as a hostile user of the site would, with real login
-- roles (session_user): a plain member and a project administrator through the portal role,
-- the loader (ingest), the submit check, the auditor, the mail sender (hpcacct_notify, as
-- hpcacct-notify connects; pgTAP mail_role has its writes), a federation's replication role (as the README creates it) and a
-- login with no role. Each tries to read another project's rows through functions (set-returning
-- ones and error messages too), to write what it should not (directly, through a view, through
-- a SECURITY DEFINER function with crafted arguments or a temporary table shadowing a name), to
-- manage another project's members, to become owner or superuser, and to make one call do
-- unbounded work. Every refusal is an error with a named SQLSTATE, and nothing is written (a
-- fingerprint of the tables, compared at the end). Then what a site's own relations in the
-- schema show portal users after setup_roles(), and whether a portal user's open transaction
-- holds the scheduled runs up (two sessions through dblink, in a scratch database).
-- privileges, privacy, delegation and security cover the per-relation reads and the charging
-- trigger; this file does not repeat them.
BEGIN;
SET search_path = hpcacct, public;
SET client_min_messages = warning;
SELECT plan(137);

CALL setup_roles();
CREATE ROLE ra_member LOGIN IN ROLE hpcacct_portal;   -- a plain member of ra_a
CREATE ROLE ra_pa LOGIN IN ROLE hpcacct_portal;       -- administers ra_a
CREATE ROLE ra_bob LOGIN IN ROLE hpcacct_portal;      -- administers ra_b, the project attacked
CREATE ROLE ra_ingest LOGIN IN ROLE hpcacct_ingest;
CREATE ROLE ra_submit LOGIN IN ROLE hpcacct_submit;
CREATE ROLE ra_portal_submit LOGIN IN ROLE hpcacct_portal, hpcacct_submit;
CREATE ROLE ra_submit_noinherit NOINHERIT IN ROLE hpcacct_submit;  -- a group whose members must SET ROLE
CREATE ROLE ra_portal_setrole LOGIN IN ROLE hpcacct_portal, ra_submit_noinherit;
CREATE ROLE ra_audit LOGIN IN ROLE hpcacct_auditor;
CREATE ROLE ra_mailer LOGIN IN ROLE hpcacct_notify;   -- hpcacct-notify's login
CREATE ROLE ra_repl LOGIN REPLICATION;                -- "A replication role narrower than postgres"
GRANT USAGE ON SCHEMA hpcacct TO ra_repl;
GRANT SELECT ON ALL TABLES IN SCHEMA hpcacct TO ra_repl;
CREATE ROLE ra_nobody LOGIN;

INSERT INTO setting VALUES ('timezone', 'UTC') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('rac', 'cpu', 'cpu=16', 'cpu=1', 1, 'NPL');
INSERT INTO account (name) VALUES ('ra_a'), ('ra_b');
SELECT add_user(u, '2024-01-05') FROM unnest(ARRAY['ra_member', 'ra_pa', 'ra_bob', 'ra_new']) AS u;
SELECT add_member('ra_a', 'ra_pa', 'admin'), add_member('ra_a', 'ra_member'), add_member('ra_b', 'ra_bob', 'admin');
UPDATE hpc_user SET default_account = 'ra_a' WHERE username = 'ra_pa';
SELECT deposit('ra_a', '2024-01-01', 1000), deposit('ra_b', '2024-01-01', 2000);
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('ra_a', 'grant', 100, 'NPL', 'rac', '2024-01-01', '2024-12-31'),
       ('ra_b', 'grant', 300, 'NPL', 'rac', '2024-01-01', '2024-12-31');
INSERT INTO job VALUES
    ('rac', 'a1', 'ra_a', 'ra_pa', 'cpu', NULL, '2024-02-01 00:00+00', '2024-02-01 05:00+00', 'cpu=4', 'COMPLETED'),
    ('rac', 'b1', 'ra_b', 'ra_bob', 'cpu', NULL, '2024-02-01 00:00+00', '2024-02-01 05:00+00', 'cpu=8', 'COMPLETED');
SELECT add_quota_period('ra_a', '2024-01-01', '2024-06-30', 100, NULL, 'NPL'),
       add_quota_period('ra_b', '2024-01-01', '2024-06-30', 100, NULL, 'NPL');
INSERT INTO contact (username, email) VALUES ('ra_bob', 'bob@home.example'), ('ra_member', 'member@home.example');

-- Every table's rows, as the owner sees them: compared at the end, nothing may have changed.
\ir include/fingerprint.psql
CREATE TEMP TABLE ra_before AS SELECT pg_temp.fingerprint() AS fingerprint;
-- what the owner sees of ra_b, so that "nothing" below is nothing hidden, not nothing there
SELECT ok((SELECT sum(amount) FROM hpcacct_internal.charges_to_day_end('ra_b', NULL, NULL, '2024-02-01', '2024-02-03'))
          > 0, 'setup: ra_b was charged on 1 February');
SELECT ok(hpcacct_internal.administers('ra_bob', 'ra_b'), 'setup: ra_bob administers ra_b');

-- The SECURITY DEFINER functions each role may execute: the rest runs with the caller's
-- rights and row-level security. A new one a role can reach must be attacked here too.
SELECT set_eq($$SELECT p.pronamespace::regnamespace || '.' || p.proname FROM pg_proc p
                WHERE p.pronamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace) AND p.prosecdef
                  AND has_function_privilege('hpcacct_portal', p.oid, 'EXECUTE')$$,
              ARRAY['hpcacct_internal.visible_accounts', 'hpcacct.fairshare', 'hpcacct.add_member', 'hpcacct.remove_member'],
              'a portal user reaches four SECURITY DEFINER functions: visible_accounts, fairshare, add_member, remove_member');
SELECT set_eq($$SELECT p.pronamespace::regnamespace || '.' || p.proname FROM pg_proc p
                WHERE p.pronamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace) AND p.prosecdef
                  AND has_function_privilege('hpcacct_ingest', p.oid, 'EXECUTE')$$,
              ARRAY['hpcacct_internal.visible_accounts', 'hpcacct.fairshare', 'hpcacct.load_sacct', 'hpcacct.sacct_window_start'],
              'the loader reaches visible_accounts, fairshare, load_sacct and sacct_window_start');
SELECT set_eq($$SELECT p.pronamespace::regnamespace || '.' || p.proname FROM pg_proc p
                WHERE p.pronamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace) AND p.prosecdef
                  AND (has_function_privilege('hpcacct_submit', p.oid, 'EXECUTE')
                       OR has_function_privilege('hpcacct_auditor', p.oid, 'EXECUTE'))$$,
              ARRAY['hpcacct_internal.visible_accounts', 'hpcacct.fairshare'],
              'the submit check and the auditor reach only visible_accounts and fairshare');
SELECT set_eq($$SELECT p.pronamespace::regnamespace || '.' || p.proname FROM pg_proc p
                WHERE p.pronamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace) AND p.prosecdef
                  AND has_function_privilege('hpcacct_notify', p.oid, 'EXECUTE')$$,
              ARRAY['hpcacct_internal.visible_accounts', 'hpcacct.fairshare', 'hpcacct_internal.outbox_analyze'],
              'the mail sender reaches only visible_accounts, fairshare and outbox_analyze, which analyzes the deliveries '
              'after many were written or changed (its four functions run with its rights)');

-- ---- a plain member of ra_a, through the portal role ----
SET SESSION AUTHORIZATION ra_member;
-- another project's figures: the same 42704 as for an account that does not exist
SELECT throws_ok($$SELECT hpcacct.balance('ra_b', '2024-02-15')$$, '42704',
                 'account "ra_b" does not exist or is not visible to you', 'balance() of another project: 42704');
SELECT throws_ok($$SELECT hpcacct.balance('ra_nowhere', '2024-02-15')$$, '42704',
                 'account "ra_nowhere" does not exist or is not visible to you',
                 'the same error as for an account that does not exist');
SELECT throws_ok($$SELECT * FROM hpcacct.allocation_status('ra_b', 'rac', '2024-02-15')$$, '42704', NULL,
                 'allocation_status() of another project: 42704');
SELECT throws_ok($$SELECT * FROM hpcacct.window_quota_usage('ra_b', '2024-02-15')$$, '42704', NULL,
                 'window_quota_usage() of another project: 42704');
SELECT throws_ok($$SELECT hpcacct.window_quota_state('ra_b', '2024-02-15')$$, '42704', NULL,
                 'window_quota_state(): 42704');
SELECT throws_ok($$SELECT * FROM hpcacct.regulation_year('ra_b', 'rac', 2024, 'NPL')$$, '42704', NULL,
                 'regulation_year(): 42704');
SELECT throws_ok($$SELECT hpcacct.consumption_before('ra_b', 'rac', '2024-03-01')$$, '42704', NULL,
                 'consumption_before(): 42704');
SELECT throws_ok($$SELECT * FROM hpcacct.account_policies('ra_b')$$, '42704', NULL, 'account_policies(): 42704');
SELECT throws_ok($$SELECT hpcacct.account_month('ra_b', '2024-02-01')$$, '42704', NULL,
                 'account_month() (a statement''s data): 42704');
SELECT throws_ok($$SELECT hpcacct.statement_html('ra_b', '2024-02-01')$$, '42704', NULL,
                 'statement_html(): 42704');
SELECT throws_ok($$SELECT * FROM hpcacct.r_wlm_usage('ra_b', '2024-02-15')$$, '42704', NULL, 'r_wlm_usage(): 42704');
SELECT throws_ok($$SELECT hpcacct.personal_allotment('ra_bob')$$, '42704', NULL,
                 'personal_allotment() of another user''s personal account: 42704');
SELECT throws_ok($$SELECT * FROM hpcacct_internal.balances_at_end(ARRAY['ra_a', 'ra_b'], '2024-02-01')$$, '42704', NULL,
                 'an internal helper over several accounts, one of them another project''s: 42704');
SELECT is(hpcacct.account_state('ra_b', '2024-02-15'), hpcacct.account_state('ra_nowhere', '2024-02-15'),
          'account_state() of another project answers as for an account that does not exist');
SELECT is((hpcacct.check_submit('ra_bob', 'ra_b', '2024-02-15')).reason, 'unknown_account',
          'check_submit() for another project''s member: unknown_account, as for an account that does not exist');
SELECT is((hpcacct.check_submit('ra_pa', NULL, '2024-02-15')).account, NULL,
          'check_submit() without an account does not resolve another user''s default project');
-- set-returning functions over every account: ra_a and ra_member only
SELECT is((SELECT count(*) FROM hpcacct.bank_ledger('2024-01-01', '2024-12-31') WHERE account NOT IN ('ra_a', 'ra_member')),
          0::bigint, 'bank_ledger(): no other account''s entry');
SELECT is((SELECT count(*) FROM hpcacct.charges_ended_by('2024-12-01', '2024-01-01', '2024-12-31', true)
           WHERE account NOT IN ('ra_a', 'ra_member')), 0::bigint, 'charges_ended_by(): no other account''s charge');
SELECT is((SELECT count(*) FROM hpcacct.year_usage(2024, '2024-03-01', true) WHERE account NOT IN ('ra_a', 'ra_member')),
          0::bigint, 'year_usage(): none');
SELECT is((SELECT count(*) FROM hpcacct.year_allocations(2024, '2024-03-01') WHERE account NOT IN ('ra_a', 'ra_member')),
          0::bigint, 'year_allocations(): none');
SELECT is((SELECT count(*) FROM hpcacct.usage_by_account(2024, '2024-03-01') WHERE account NOT IN ('ra_a', 'ra_member')),
          0::bigint, 'usage_by_account(): none');
SELECT is((SELECT count(*) FROM hpcacct.slurm_associations('2024-02-15') WHERE account NOT IN ('ra_a', 'ra_member')),
          0::bigint, 'slurm_associations(): none');
SELECT is((SELECT count(*) FROM hpcacct.statement_accounts('2024-02-01') a WHERE a NOT IN ('ra_a', 'ra_member')),
          0::bigint, 'statement_accounts(): none');
SELECT is((SELECT count(*) FROM hpcacct.fairshare() WHERE account NOT IN ('ra_a', 'ra_member')), 0::bigint,
          'fairshare(): none');
SELECT ok(hpcacct.my_accounts('2024-02-15')::text NOT LIKE '%ra_b%', 'my_accounts() names no other account');
SELECT is((SELECT sum(amount) FROM hpcacct_internal.charges_to_day_end('ra_b', NULL, NULL, '2024-02-01', '2024-02-03')),
          0::numeric, 'the daily charts'' helper, asked for ra_b, adds up nothing (row-level security)');
SELECT is_empty($$SELECT * FROM hpcacct_internal.allocation_events('ra_b', 'rac', '2024-01-01', '2024-12-31')$$,
                'allocation_events() of ra_b: no row');
SELECT is((SELECT count(*) FROM hpcacct_internal.charge_rollup_exact WHERE account NOT IN ('ra_a', 'ra_member')),
          0::bigint, 'the internal rollup views: no other account''s row');
SELECT is(hpcacct_internal.administers('ra_bob', 'ra_b'), false,
          'administers() does not tell who administers another project');
-- writes
SELECT throws_ok($$INSERT INTO hpcacct.ledger (account, kind, amount, unit, valid_from, valid_until)
                   VALUES ('ra_a', 'deposit', 1000000, 'NPL', '2024-01-01', '2024-03-31')$$, '42501', NULL,
                 'a member cannot book a deposit in the ledger');
SELECT throws_ok($$DELETE FROM hpcacct.ledger WHERE account = 'ra_a'$$, '42501', NULL, 'nor delete charges');
SELECT throws_ok($$UPDATE hpcacct.ledger SET amount = 0 WHERE account = 'ra_a'$$, '42501', NULL, 'nor re-rate them');
SELECT throws_ok($$INSERT INTO hpcacct.setting (name, value) VALUES ('require_membership', 'off')$$, '42501', NULL,
                 'nor write a setting');
SELECT throws_ok($$INSERT INTO hpcacct.settings (name, value) VALUES ('require_membership', 'off')$$, '55000', NULL,
                 'nor through the view settings (not updatable: 55000)');
SELECT throws_ok($$INSERT INTO hpcacct.membership (account, username, role) VALUES ('ra_b', 'ra_member', 'admin')$$,
                 '42501', NULL, 'nor make herself a member of another project');
SELECT throws_ok($$UPDATE hpcacct.hpc_user SET default_account = 'ra_b' WHERE username = 'ra_member'$$, '42501', NULL,
                 'nor change her user row');
SELECT throws_ok($$INSERT INTO hpcacct.contact (username, email) VALUES ('ra_bob', 'attacker@example.org')
                   ON CONFLICT (username) DO UPDATE SET email = excluded.email$$, '42501', NULL,
                 'nor take over another person''s address by an upsert');
SELECT throws_ok($$INSERT INTO hpcacct.job VALUES ('rac', 'x1', 'ra_b', 'ra_bob', 'cpu', NULL, '2024-02-02 00:00+00',
                   '2024-02-02 01:00+00', 'cpu=1', 'COMPLETED')$$, '42501', NULL, 'nor load a job');
SELECT throws_ok($$SELECT nextval('hpcacct.ledger_entry_id_seq')$$, '42501', NULL, 'nor draw ledger ids');
SELECT throws_ok($$SELECT hpcacct.rebuild_rollup()$$, '42501', NULL, 'nor rebuild the rollups');
SELECT throws_ok($$SELECT hpcacct.add_member('ra_a', 'ra_member', 'admin')$$, '42501', NULL,
                 'nor make herself an administrator of her own project');
SELECT throws_ok($$SELECT hpcacct_internal.run_alone('rollup')$$, '42501', NULL, 'nor take a run''s lock');
-- objects where the extension looks names up
SELECT throws_ok($$CREATE TABLE hpcacct.membership_x (account text)$$, '42501', NULL,
                 'she cannot create objects in schema hpcacct');
SELECT throws_ok($$CREATE FUNCTION hpcacct_internal.session_user() RETURNS name LANGUAGE sql AS 'SELECT ''ra_bob''::name'$$,
                 '42501', NULL, 'nor in hpcacct_internal');
SELECT throws_ok($$CREATE TABLE public.membership (account text)$$, '42501', NULL, 'nor in public');
-- owner or superuser
SELECT throws_ok($$ALTER ROLE ra_member SUPERUSER$$, '42501', NULL, 'she cannot make herself superuser');
SELECT throws_ok($$GRANT hpcacct_admin TO ra_member$$, '42501', NULL, 'nor grant herself hpcacct_admin');
SELECT throws_ok($$ALTER FUNCTION hpcacct.fairshare(timestamptz) OWNER TO ra_member$$, '42501', NULL,
                 'nor take over a SECURITY DEFINER function');
SELECT throws_ok($$ALTER EXTENSION hpcacct UPDATE$$, '42501', NULL, 'nor update the extension');
SELECT throws_ok($$SET session_replication_role = replica$$, '42501', NULL,
                 'nor turn the ledger''s triggers off (session_replication_role)');
-- one call, unbounded work: refused with a named SQLSTATE
SELECT throws_ok($$SELECT * FROM hpcacct.year_usage(2147483647, now(), true)$$, '22008', NULL,
                 'a year of 2^31 - 1 is refused before any work');
SELECT throws_ok($$SELECT * FROM hpcacct.regulation_year('ra_a', 'rac', -2147483648, 'NPL')$$, '22008', NULL,
                 'regulation_year() of year -2^31 too');
SELECT throws_ok($$SELECT * FROM hpcacct_internal.charges_to_day_end('ra_a', NULL, NULL, '4713-01-01 BC', '5874897-12-31')$$,
                 '22008', NULL, 'the daily helper over every representable day is refused');
SELECT cmp_ok(length(hpcacct_internal.svg_chart('t', 'u', ARRAY['a', 'b'], '[]'::jsonb, 2147483647, 2147483647)), '<', 10000,
              'a chart 2^31 - 1 points wide and high is a few lines of SVG, not 2^31 of anything');
RESET SESSION AUTHORIZATION;

-- ---- a project administrator of ra_a, with temporary relations shadowing the extension's ----
SET SESSION AUTHORIZATION ra_pa;
CREATE TEMP TABLE membership (account text, username text, role text);
INSERT INTO membership VALUES ('ra_b', 'ra_pa', 'admin');
CREATE TEMP TABLE account (name text, kind text, deleted_in date);
INSERT INTO account VALUES ('ra_b', 'project', NULL);
CREATE TEMP TABLE hpc_user (username text, default_account text);
INSERT INTO hpc_user VALUES ('ra_pa', 'ra_b');
CREATE TEMP VIEW pg_roles AS SELECT 'hpcacct_admin'::name AS rolname, true AS rolsuper, oid FROM pg_catalog.pg_roles;
SET search_path = pg_temp, hpcacct, public;
SELECT throws_ok($$SELECT hpcacct.add_member('ra_b', 'ra_pa', 'admin')$$, '42501', NULL,
                 'a temporary membership table naming her ra_b''s administrator does not let her into ra_b');
SELECT throws_ok($$SELECT hpcacct.remove_member('ra_b', 'ra_bob')$$, '42501', NULL,
                 'nor remove ra_b''s administrator');
SELECT throws_ok($$SELECT hpcacct.add_member('ra_b', 'ra_pa', 'admin', 'ra_bob')$$, '42501', NULL,
                 'nor act for ra_bob through by_user');
SELECT throws_ok($$SELECT * FROM hpcacct.fairshare(now() - interval '1 day')$$, '42501', NULL,
                 'a temporary pg_roles making her an administrator does not open fairshare(at) either');
SELECT is((SELECT count(*) FROM hpcacct.fairshare() WHERE account = 'ra_b'), 0::bigint,
          'nor another project''s fair share');
SELECT is((SELECT array_agg(a ORDER BY a) FROM unnest(hpcacct_internal.visible_accounts()) a), ARRAY['ra_a', 'ra_pa'],
          'visible_accounts() reads the real membership');
SET search_path = hpcacct, public;
DROP VIEW pg_temp.pg_roles;
DROP TABLE pg_temp.membership, pg_temp.account, pg_temp.hpc_user;
-- crafted names: an unknown, a case or a blank variant is refused as another project is
SELECT throws_ok($$SELECT hpcacct.add_member('RA_A', 'ra_pa', 'admin')$$, '42501', NULL,
                 'an account name in another case is not her project');
SELECT throws_ok($$SELECT hpcacct.add_member('ra_a ', 'ra_new')$$, '42501', NULL, 'nor one with a trailing blank');
SELECT throws_ok($$SELECT hpcacct.remove_member('ra_b', 'ra_nobody_there')$$, '42501',
                 'user "ra_pa" is not an administrator of account "ra_b"',
                 'removing a non-member of ra_b says only that she does not administer ra_b');
SELECT throws_ok($$INSERT INTO hpcacct.membership (account, username, role) VALUES ('ra_a', 'ra_new', 'member')$$,
                 '42501', NULL, 'she changes her project''s members through add_member() only, not the table');
SELECT throws_ok($$SELECT hpcacct.deposit('ra_a', '2024-04-01', 1000)$$, '42501', NULL,
                 'she cannot deposit into her project');
SELECT throws_ok($$SELECT hpcacct.rerate(1, 0, '2024-01-01', 'free')$$, '42501', NULL, 'nor re-rate its charges');
SELECT lives_ok($$SELECT hpcacct.add_member('ra_a', 'ra_new')$$, 'she does add a member to her own project');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT array_agg(username || ':' || role ORDER BY username) FROM membership WHERE account = 'ra_b'),
          ARRAY['ra_bob:admin'], 'ra_b''s members are as they were');
SELECT lives_ok($$SELECT remove_member('ra_a', 'ra_new')$$, '(ra_new removed again, for the fingerprint)');

-- ---- the loader ----
SET SESSION AUTHORIZATION ra_ingest;
SELECT throws_ok($$SELECT count(*) FROM hpcacct.ledger$$, '42501', NULL, 'the loader cannot read the ledger');
SELECT throws_ok($$SELECT count(*) FROM hpcacct.job$$, '42501', NULL, 'nor the jobs');
SELECT throws_ok($$INSERT INTO hpcacct.job VALUES ('rac', 'x2', 'ra_a', 'ra_pa', 'cpu', NULL, '2024-02-02 00:00+00',
                   '2024-02-02 01:00+00', 'cpu=1', 'COMPLETED') RETURNING account, "user"$$, '42501', NULL,
                 'nor read back what it inserts (RETURNING)');
SELECT throws_ok($$INSERT INTO hpcacct.job VALUES ('rac', 'b1', 'ra_b', 'ra_bob', 'cpu', NULL, '2024-02-01 00:00+00',
                   '2024-02-01 05:00+00', 'cpu=0', 'COMPLETED')
                   ON CONFLICT (cluster, jobid, submit) DO UPDATE SET alloctres = excluded.alloctres$$, '42501', NULL,
                 'nor re-rate a loaded job to 0 by an upsert');
SELECT throws_ok($$UPDATE hpcacct.job SET alloctres = 'cpu=0'$$, '42501', NULL, 'nor update jobs');
SELECT throws_ok($$DELETE FROM hpcacct.job$$, '42501', NULL, 'nor delete them (which would reverse their charges)');
SELECT throws_ok($$TRUNCATE hpcacct.job$$, '42501', NULL, 'nor truncate them');
SELECT throws_ok($$INSERT INTO hpcacct.job VALUES ('rac', 'x3', 'ra_a', 'ra_pa', 'cpu', NULL, '2024-02-02 00:00+00',
                   '2024-02-02 01:00+00', 'cpu=-100', 'COMPLETED')$$, '22003', NULL,
                 'a negative TRES, which would credit the account, is refused');
SELECT throws_ok($$INSERT INTO hpcacct.ledger (account, kind, amount, unit, valid_from, valid_until)
                   VALUES ('ra_a', 'deposit', 1, 'NPL', '2024-01-01', '2024-03-31')$$, '42501', NULL,
                 'the loader cannot book a deposit');
SELECT throws_ok($$SELECT count(*) FROM hpcacct.sacct_quarantine$$, '42501', NULL,
                 'nor read the quarantined lines');
SELECT throws_ok($$DELETE FROM hpcacct.sacct_staging$$, '42501', NULL, 'nor delete staged lines');
SELECT throws_ok($$SELECT hpcacct.balance('ra_b', '2024-02-15')$$, '42501', NULL, 'nor read a balance');
SELECT is_empty($$SELECT * FROM hpcacct.fairshare()$$, 'fairshare() shows the loader nothing');
SELECT throws_ok($$SELECT hpcacct.add_member('ra_b', 'ra_new')$$, '42501', NULL, 'nor manage members');
RESET SESSION AUTHORIZATION;

-- ---- the submit check ----
SET SESSION AUTHORIZATION ra_submit;
SELECT is((hpcacct.check_submit('ra_bob', 'ra_b', '2024-02-15')).ok, true, 'the submit check decides for any account');
SELECT throws_ok($$SELECT count(*) FROM hpcacct.contact$$, '42501', NULL, 'it cannot read addresses');
SELECT throws_ok($$SELECT count(*) FROM hpcacct.outbox$$, '42501', NULL, 'nor messages');
SELECT throws_ok($$SELECT count(*) FROM hpcacct.job$$, '42501', NULL, 'nor jobs');
SELECT throws_ok($$UPDATE hpcacct.account SET description = 'x'$$, '42501', NULL, 'nor change an account');
SELECT throws_ok($$SELECT * FROM hpcacct.recheck_queued('2024-02-15')$$, '42501', NULL, 'nor hold queued jobs');
SELECT throws_ok($$SELECT * FROM hpcacct.fairshare_all(now())$$, '42501', NULL, 'nor read every fair share');
SELECT throws_ok($$SELECT * FROM hpcacct.fairshare(now() - interval '1 day')$$, '42501', NULL,
                 'nor fair share at an instant of its choosing');
RESET SESSION AUTHORIZATION;

-- ---- a login that is both a portal user and the submit check, and one that may only SET ROLE
-- to the submit check: each role's rows, never more than either role alone reads ----
SET SESSION AUTHORIZATION ra_portal_submit;
SELECT is((hpcacct.check_submit('ra_bob', 'ra_b', '2024-02-15')).ok, true,
          'a portal user who is also the submit check still decides for any account');
SELECT is((SELECT count(*) FROM hpcacct.ledger WHERE account = 'ra_b') > 0, true,
          'and reads the ledger of every account, as the submit check alone does');
SELECT is((SELECT string_agg(username, ',') FROM hpcacct.contact), NULL,
          'but no other person''s address (the submit check reads none, the portal only its own)');
SELECT is((SELECT string_agg(jobid, ',') FROM hpcacct.job), NULL, 'nor another person''s jobs');
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION ra_portal_setrole;
SELECT is((SELECT string_agg(username, ',') FROM hpcacct.contact), NULL,
          'a portal user who may only SET ROLE to the submit check reads no other person''s address');
SELECT is((SELECT count(*) FROM hpcacct.ledger WHERE account = 'ra_b'), 0::bigint,
          'nor another account''s ledger');
SET ROLE hpcacct_submit;
SELECT is((SELECT count(*) FROM hpcacct.ledger WHERE account = 'ra_b') > 0, true,
          'until it sets the role, and reads what the submit check reads');
RESET ROLE;
RESET SESSION AUTHORIZATION;

-- ---- the auditor ----
SET SESSION AUTHORIZATION ra_audit;
SELECT throws_ok($$UPDATE hpcacct.contact SET email = 'auditor@example.org'$$, '42501', NULL,
                 'the auditor cannot redirect a person''s mail');
SELECT throws_ok($$SELECT * FROM hpcacct.outbox_claim('ra_audit', '1 hour', 10)$$, '42501', NULL,
                 'nor claim deliveries');
SELECT throws_ok($$SELECT hpcacct.notify_scan('2024-02-15')$$, '42501', NULL, 'nor scan for messages');
SELECT throws_ok($$DELETE FROM hpcacct.sacct_staging$$, '42501', NULL, 'nor delete staged lines');
SELECT throws_ok($$SELECT hpcacct.load_sacct()$$, '42501', NULL, 'nor load');
SELECT throws_ok($$SET session_replication_role = replica$$, '42501', NULL, 'nor turn triggers off');
RESET SESSION AUTHORIZATION;

-- ---- the mail sender (hpcacct_notify): no owner's rights ----
SET SESSION AUTHORIZATION ra_mailer;
SELECT throws_ok($$UPDATE hpcacct.ledger SET amount = 0 WHERE account = 'ra_b'$$, '42501', NULL,
                 'the sender''s login cannot re-rate charges');
SELECT throws_ok($$DELETE FROM hpcacct.ledger WHERE account = 'ra_b'$$, '42501', NULL, 'nor delete them');
SELECT throws_ok($$TRUNCATE hpcacct.ledger$$, '42501', NULL, 'nor truncate the ledger');
SELECT throws_ok($$ALTER TABLE hpcacct.ledger DISABLE TRIGGER USER$$, '42501', NULL, 'nor disable its triggers');
SELECT throws_ok($$ALTER TABLE hpcacct.ledger OWNER TO ra_mailer$$, '42501', NULL, 'nor take it over');
SELECT throws_ok($$ALTER ROLE ra_mailer SUPERUSER$$, '42501', NULL, 'nor become superuser');
SELECT throws_ok($$CREATE TABLE hpcacct.mailer_table (account text)$$, '42501', NULL,
                 'nor create objects in schema hpcacct');
RESET SESSION AUTHORIZATION;

-- ---- a federation's replication role, created as the README says ----
SET SESSION AUTHORIZATION ra_repl;
SELECT throws_ok($$INSERT INTO hpcacct.ledger (account, kind, amount, unit, valid_from, valid_until)
                   VALUES ('ra_a', 'deposit', 1, 'NPL', '2024-01-01', '2024-03-31')$$, '42501', NULL,
                 'the replication role reads the ledger and cannot write it');
SELECT throws_ok($$UPDATE hpcacct.contact SET email = 'repl@example.org'$$, '42501', NULL, 'nor any table');
SELECT throws_ok($$CALL hpcacct.federation_resync(0)$$, '42501', NULL, 'nor run the federation''s procedures');
SELECT throws_ok($$SELECT * FROM hpcacct.fairshare(now() - interval '1 day')$$, '42501', NULL,
                 'nor fair share at another instant');
SELECT throws_ok($$SET session_replication_role = replica$$, '42501', NULL, 'nor set a replica session itself');
RESET SESSION AUTHORIZATION;

-- ---- a login with no hpcacct role ----
SET SESSION AUTHORIZATION ra_nobody;
SELECT throws_ok($$SELECT * FROM hpcacct.fairshare()$$, '42501', NULL, 'a login without a role reaches no function');
SELECT throws_ok($$SELECT hpcacct_internal.visible_accounts()$$, '42501', NULL, 'not even an internal one');
SELECT throws_ok($$SELECT count(*) FROM hpcacct.resource$$, '42501', NULL, 'nor reference data');
RESET SESSION AUTHORIZATION;

-- ---- a site's own relations in the schema, after setup_roles() ----
-- 99_roles.sql says to run setup_roles() again after adding tables of one's own to the schema.
-- A site view owned by the superuser runs as its owner, and a table without row-level
-- security shows every row: neither may reach a portal user, even one granted it before.
CREATE VIEW hpcacct.site_totals AS SELECT account, sum(amount) AS amount FROM hpcacct.ledger GROUP BY account;
CREATE TABLE hpcacct.site_notes (account text, note text);
INSERT INTO hpcacct.site_notes VALUES ('ra_b', 'note about ra_b');
CREATE VIEW hpcacct.site_invoker WITH (security_invoker = true) AS
    SELECT account, sum(amount) AS amount FROM hpcacct.ledger GROUP BY account;
GRANT SELECT ON hpcacct.site_totals, hpcacct.site_notes TO hpcacct_portal;  -- what setup_roles() granted before 0.4
CALL setup_roles();
SET SESSION AUTHORIZATION ra_member;
SELECT throws_ok($$SELECT * FROM hpcacct.site_totals$$, '42501', NULL,
                 'a site''s view in the schema that runs as its owner is not granted to portal users');
SELECT throws_ok($$SELECT * FROM hpcacct.site_notes$$, '42501', NULL,
                 'nor a site''s table with an account column and no row-level security');
SELECT is((SELECT array_agg(account ORDER BY account) FROM hpcacct.site_invoker), ARRAY['ra_a', 'ra_member'],
          'a security_invoker view is, and shows her accounts only');
RESET SESSION AUTHORIZATION;
SELECT ok(has_table_privilege('ra_audit', 'hpcacct.site_notes', 'SELECT'), 'the auditor still reads every table');
DROP VIEW hpcacct.site_totals, hpcacct.site_invoker;
DROP TABLE hpcacct.site_notes;

-- ---- row locks a portal user holds across the quarter start (dblink, a scratch database) ----
-- open_quarter() resets default projects that point to an expired account. A portal user
-- administers their personal account and may add any user to it: the membership's foreign key
-- takes FOR KEY SHARE on that user's hpc_user row until the portal user's transaction ends.
-- The quarter's run must not wait for it (lock_timeout: 55P03 if it does). A login of the
-- scratch database's own, granted add_member() and remove_member() as hpcacct_portal is
-- (the roles of this file are not committed, so other sessions cannot see them).
\set scratch hpcacct_role_attack
\set adm ra_adm
\ir include/scratch_db.psql
SELECT dblink_exec('ra_adm', 'DROP ROLE IF EXISTS ra_lock_pa');
SELECT dblink_exec('ra_adm', 'CREATE ROLE ra_lock_pa LOGIN');
SELECT dblink_connect('ra_setup', :'srv' || ' dbname=hpcacct_role_attack');
SELECT dblink_exec('ra_setup', $s$
    SET client_min_messages = warning;
    CREATE EXTENSION hpcacct CASCADE;
    SET search_path = public, hpcacct;
    GRANT USAGE ON SCHEMA hpcacct, hpcacct_internal TO ra_lock_pa;
    GRANT EXECUTE ON FUNCTION add_member(text, text, text, text), remove_member(text, text, text) TO ra_lock_pa;
    INSERT INTO setting VALUES ('timezone', 'UTC');
    -- lk_old's allocation ends with March: from 1 April it is expired, and the defaults naming it stale
    INSERT INTO account (name) VALUES ('lk_old');
    SELECT deposit('lk_old', '2024-01-01', 10);
    SELECT add_user(u, '2024-01-05') FROM unnest(ARRAY['ra_lock_pa', 'lk_u1', 'lk_u2']) AS u;
    SELECT add_member('lk_old', 'ra_lock_pa', 'admin'), add_member('lk_old', 'lk_u1'), add_member('lk_old', 'lk_u2');
    UPDATE hpc_user SET default_account = 'lk_old' WHERE username IN ('lk_u1', 'lk_u2');
    INSERT INTO hpc_user (username) VALUES ('lk_new');
$s$);
SELECT dblink_connect('ra_pa', :'srv' || ' dbname=hpcacct_role_attack user=ra_lock_pa');
SELECT dblink_connect('ra_run', :'srv' || ' dbname=hpcacct_role_attack');
SELECT dblink_exec('ra_run', 'SET lock_timeout = ''2s''');
SELECT dblink_exec('ra_run', 'SET client_min_messages = warning');
-- the project's administrator removes a member whose default is the project (remove_member()
-- resets it, as the run would), and keeps the transaction open
SELECT dblink_exec('ra_pa', 'BEGIN');
SELECT * FROM dblink('ra_pa', $$SELECT hpcacct.remove_member('lk_old', 'lk_u1')::text$$) AS t(removed text);
SELECT todo('remove_member() holds the removed member''s hpc_user row (FOR NO KEY UPDATE) until its transaction ends', 1);
SELECT is((SELECT o FROM dblink('ra_run', $$SELECT public.outcome('CALL hpcacct.open_quarter(''2024-04-01'')')$$) AS t(o text)),
          'ok', 'open_quarter() does not wait for a project administrator''s open remove_member()');
-- and the account sync (every 10 minutes), staging the membership she is removing
SELECT dblink_exec('ra_run', $$INSERT INTO hpcacct.sacctmgr_staging VALUES ('lkc', 'lk_old', 'lk_u1')$$);
SELECT is((SELECT o FROM dblink('ra_run', $$SELECT public.outcome('SELECT hpcacct.sync_slurm_accounts()')$$) AS t(o text)),
          'ok', 'sync_slurm_accounts() does not wait for a project administrator''s open remove_member()');
SELECT dblink_exec('ra_pa', 'ROLLBACK');
SELECT is((SELECT o FROM dblink('ra_run', $$SELECT public.outcome('SELECT hpcacct.sync_slurm_accounts()')$$) AS t(o text)),
          'ok', 'once that transaction ended, the sync runs again');
-- she adds a member Slurm associates with the project too, and keeps the transaction open: the
-- sync's insert of that membership waits to learn whether hers commits
SELECT dblink_exec('ra_pa', 'BEGIN');
SELECT * FROM dblink('ra_pa', $$SELECT hpcacct.add_member('lk_old', 'lk_new')::text$$) AS t(added text);
SELECT dblink_exec('ra_run', $$INSERT INTO hpcacct.sacctmgr_staging VALUES ('lkc', 'lk_old', 'lk_new')$$);
SELECT todo('an open add_member() holds up the sync''s insert of the same membership (README, trust model)', 1);
SELECT is((SELECT o FROM dblink('ra_run', $$SELECT public.outcome('SELECT hpcacct.sync_slurm_accounts()')$$) AS t(o text)),
          'ok', 'sync_slurm_accounts() does not wait for a project administrator''s open add_member()');
SELECT dblink_exec('ra_pa', 'ROLLBACK');
SELECT is((SELECT o FROM dblink('ra_run', $$SELECT public.outcome('SELECT hpcacct.sync_slurm_accounts()')$$) AS t(o text))
          || (SELECT ':' || n FROM dblink('ra_run', $$SELECT count(*) FROM hpcacct.membership
                                                     WHERE account = 'lk_old' AND username = 'lk_new'$$) AS t(n bigint)),
          'ok:1', 'the next sync adds the membership her rolled-back transaction did not');
-- any portal user adds a user whose default is stale to their own personal account
SELECT dblink_exec('ra_pa', 'BEGIN');
SELECT * FROM dblink('ra_pa', $$SELECT hpcacct.add_member('ra_lock_pa', 'lk_u2')::text$$) AS t(added text);
SELECT is((SELECT o FROM dblink('ra_run', $$SELECT public.outcome('CALL hpcacct.open_quarter(''2024-04-01'')')$$) AS t(o text)),
          'ok', 'open_quarter() does not wait for a portal user who added a member and keeps the transaction open');
SELECT dblink_exec('ra_pa', 'ROLLBACK');
SELECT is((SELECT d FROM dblink('ra_run', $$SELECT string_agg(username || ':' || coalesce(default_account, '-'), ',' ORDER BY username)
                                            FROM hpcacct.hpc_user WHERE username LIKE 'lk_u%'$$) AS t(d text)),
          'lk_u1:-,lk_u2:-', 'and resets both stale defaults');
SELECT dblink_disconnect('ra_pa'), dblink_disconnect('ra_run'), dblink_disconnect('ra_setup');
SELECT dblink_exec('ra_adm', 'DROP DATABASE hpcacct_role_attack');
SELECT dblink_exec('ra_adm', 'DROP ROLE ra_lock_pa');
SELECT dblink_disconnect('ra_adm');

SELECT is(pg_temp.fingerprint(), (SELECT fingerprint FROM ra_before), 'no attack wrote anything');

SELECT * FROM finish();
ROLLBACK;
