-- A portal built page by page from the README, on the sample site (test/notify/sample_site.sql),
-- as its logins see it: carol (a member, and nip00042's administrator), bob, dave (no account)
-- and an auditor. Each page is the query a portal developer writes from the README; each
-- check compares what a login sees with what the administrator sees of that login's accounts
-- (nobody else's rows, none of their own missing), and the errors a page meets carry a
-- SQLSTATE and a hint the portal can show.
BEGIN;
SET client_min_messages = warning;
\o /dev/null
\ir ../notify/sample_site.sql
\o
SET search_path = public, hpcacct;
SELECT plan(33);

CALL setup_roles();
CREATE ROLE carol LOGIN IN ROLE hpcacct_portal;
CREATE ROLE bob LOGIN IN ROLE hpcacct_portal;
CREATE ROLE dave LOGIN IN ROLE hpcacct_portal;
CREATE ROLE pl_audit LOGIN IN ROLE hpcacct_auditor;
SELECT add_user('dave', '2025-04-01');

-- the SQLSTATE and hint of a statement's error, as a portal shows them ('ok' when it succeeds)
CREATE FUNCTION public.pl_error(statement text) RETURNS text LANGUAGE plpgsql AS $$
    DECLARE
        state text;
        hint text;
    BEGIN
        EXECUTE statement;
        RETURN 'ok';
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, hint = PG_EXCEPTION_HINT;
        RETURN state || CASE WHEN coalesce(hint, '') = '' THEN ' without a hint' ELSE ' with a hint' END;
    END $$;

-- what each login's pages must show, read as the administrator
CREATE TEMP TABLE expected_accounts AS
    SELECT username, array_agg(account ORDER BY account) AS accounts FROM membership GROUP BY username;
CREATE TEMP TABLE expected_jobs AS
    SELECT jobid, "user", "end" FROM job WHERE account = 'nip00042' AND "end" >= '2025-05-01' AND "end" < '2025-06-01';
CREATE TEMP TABLE expected_fairshare AS SELECT DISTINCT account FROM fairshare_all(now());
GRANT SELECT ON expected_accounts, expected_jobs, expected_fairshare TO PUBLIC;
INSERT INTO pending_job (cluster, jobid, username, account) VALUES
    ('hlrn', 'q-carol', 'carol', 'nip00042'), ('hlrn', 'q-carol-default', 'carol', NULL),
    ('hlrn', 'q-alice', 'alice', 'nip00042'), ('hlrn', 'q-bob', 'bob', NULL);
-- today's check holds them all: nip00042 has no allocation now, carol and bob (users as the
-- sample site and the account sync make them) have neither a default project nor a personal account
SELECT is((SELECT count(*) FROM recheck_queued()), 4::bigint, 'setup: the check holds the four jobs');

-- ---- carol: "my accounts" ----
SET SESSION AUTHORIZATION carol;
SELECT is((SELECT array_agg(a ->> 'account' ORDER BY a ->> 'account')
           FROM jsonb_array_elements(my_accounts('2025-05-20') -> 'accounts') a),
          (SELECT accounts FROM expected_accounts WHERE username = 'carol'),
          'my accounts: my_accounts() lists exactly carol''s memberships');
SELECT is((SELECT array_agg(DISTINCT account ORDER BY account) FROM fairshare()),
          (SELECT array_agg(a ORDER BY a) FROM unnest((SELECT accounts FROM expected_accounts WHERE username = 'carol')) a
           WHERE a IN (SELECT account FROM expected_fairshare)),
          'my accounts: fairshare() shows carol''s accounts that have a fair share, no other');
SELECT ok((SELECT bool_and(share IS NULL AND norm_usage IS NULL) FROM fairshare()),
          'my accounts: without share and norm_usage');
SELECT is((SELECT array_agg(DISTINCT account ORDER BY account) FROM window_quota_usage), ARRAY['rwth0042'],
          'my accounts: window_quota_usage shows her one quota account');
SELECT is((SELECT array_agg(DISTINCT account ORDER BY account) FROM usage_by_account(NULL, '2025-05-20')),
          ARRAY['def-smith', 'nip00042', 'rwth0042'], 'my accounts: the projection (usage_by_account) of hers only');

-- ---- an account's jobs this month, newest first, paged ----
SELECT results_eq($$SELECT jobid, "user", "end" FROM job
                    WHERE account = 'nip00042' AND "end" >= '2025-05-01' AND "end" < '2025-06-01'
                    ORDER BY "end" DESC, jobid DESC LIMIT 5$$,
                  $$SELECT jobid, "user", "end" FROM expected_jobs ORDER BY "end" DESC, jobid DESC LIMIT 5$$,
                  'jobs: carol''s first page of nip00042''s May jobs, alice''s included');
SELECT results_eq($$SELECT jobid FROM job
                    WHERE account = 'nip00042' AND "end" >= '2025-05-01' AND "end" < '2025-06-01'
                    ORDER BY "end" DESC, jobid DESC LIMIT 5 OFFSET 5$$,
                  $$SELECT jobid FROM expected_jobs ORDER BY "end" DESC, jobid DESC LIMIT 5 OFFSET 5$$,
                  'jobs: and the second');
SELECT results_eq($$SELECT jobid FROM job
                    WHERE account = 'nip00042' AND "end" >= '2025-05-01' AND "end" < '2025-06-01'
                      AND ("end", jobid) < (SELECT "end", jobid FROM expected_jobs ORDER BY "end" DESC, jobid DESC OFFSET 4 LIMIT 1)
                    ORDER BY "end" DESC, jobid DESC LIMIT 5$$,
                  $$SELECT jobid FROM expected_jobs ORDER BY "end" DESC, jobid DESC LIMIT 5 OFFSET 5$$,
                  'jobs: the second page after the first''s last row (keyset) is the same');
SELECT is((SELECT sum(amount) FROM charge_by_month WHERE account = 'nip00042' AND month = '2025-05-01'),
          (account_month('nip00042', '2025-05-01') #>> '{charges,total,NPL}')::numeric,
          'jobs: the month''s charges (charge_by_month) add up to the statement''s total');
SELECT is_empty($$SELECT 1 FROM job WHERE account = 'gen7001'$$, 'jobs: none of an account she is not in');

-- ---- my statements ----
SELECT is((SELECT array_agg(a ORDER BY a) FROM statement_accounts('2025-05-01') a),
          ARRAY['def-smith', 'nip00042', 'rwth0042'], 'statements: statement_accounts() names her accounts');
SELECT is(pl_error($$SELECT account_month('gen7001', '2025-05-01')$$), '42704 with a hint',
          'statements: another account is 42704, as if it did not exist, with a hint');
SELECT is(pl_error($$SELECT statement_html('nip00042', '2999-01-01')$$), '22023 with a hint',
          'statements: a month to come is 22023, with a hint');
SELECT is(pl_error($$SELECT account_month('nip00042', NULL)$$), '22004 with a hint',
          'statements: no month (an empty form field) is 22004, with a hint');
SELECT is(pl_error($$SELECT my_accounts(NULL)$$), '22004 with a hint',
          'my accounts: no day is 22004, with a hint');

-- ---- members of my project, with add and remove ----
SELECT results_eq($$SELECT username, role FROM membership WHERE account = 'nip00042' ORDER BY username$$,
                  $$VALUES ('alice'::text, 'member'::text), ('carol', 'admin')$$, 'members: nip00042''s two');
SELECT is(pl_error($$SELECT add_member('nip00042', 'dave')$$), 'ok', 'members: carol adds dave');
SELECT is(pl_error($$SELECT remove_member('nip00042', 'dave')$$), 'ok', 'members: and removes him');
SELECT is(pl_error($$SELECT add_member('nip00042', 'nobody')$$), '42704 with a hint',
          'members: an unknown user is 42704, with a hint');
SELECT is(pl_error($$SELECT remove_member('nip00042', 'dave')$$), '42704 with a hint',
          'members: removing a user who is not a member is 42704, with a hint');
SELECT is(pl_error($$SELECT add_member('nip00042', 'dave', 'owner')$$), '22023 with a hint',
          'members: a role other than member or admin is 22023, with a hint');
SELECT is(pl_error($$SELECT add_member('nip00042', 'dave', 'member', 'alice')$$), '42501 with a hint',
          'members: acting for another user is 42501, with a hint');
SELECT is(pl_error($$SELECT add_member('rwth0042', 'dave')$$), '42501 with a hint',
          'members: a project she is a plain member of is 42501, with a hint');
SELECT is(pl_error($$SELECT remove_member('nip00042', 'carol')$$), 'HA003 with a hint',
          'members: removing its last administrator is HA003, with a hint');

-- ---- why is my job held ----
SELECT results_eq($$SELECT jobid, held, hold_reason LIKE 'account nip00042 has no allocation %' FROM pending_job ORDER BY jobid$$,
                  $$VALUES ('q-alice'::text, true, true), ('q-carol', true, true), ('q-carol-default', true, false)$$,
                  'held: her own jobs (one without an account) and those queued on her project, not bob''s that named none');
SELECT is((SELECT hold_reason FROM pending_job WHERE jobid = 'q-carol-default'),
          'user carol has no default project and no personal account: submit with an account (sbatch -A)',
          'held: the reason of her job that named no account');
SELECT is((SELECT array_agg(figures ->> 'jobid' ORDER BY figures ->> 'jobid') FROM outbox WHERE topic = 'job_held'),
          ARRAY['q-alice', 'q-carol', 'q-carol-default'], 'held: the messages about the jobs she sees');
SELECT is((SELECT substring(body FROM '\(account [^)]*\)') FROM outbox WHERE topic = 'job_held' AND figures ->> 'jobid' = 'q-carol-default'),
          '(account default)', 'held: its message names no account, as carol has none (not "account carol, your default")');
RESET SESSION AUTHORIZATION;

-- ---- bob and dave ----
SET SESSION AUTHORIZATION bob;
SELECT is((SELECT array_agg(jobid ORDER BY jobid) FROM pending_job), ARRAY['q-bob'],
          'held: bob sees his job, not carol''s that named no account');
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION dave;
SELECT is((SELECT array_agg(a ->> 'account') FROM jsonb_array_elements(my_accounts('2025-05-20') -> 'accounts') a),
          ARRAY['dave'], 'dave, removed again, sees his personal account only');
RESET SESSION AUTHORIZATION;

-- ---- the auditor reads every account and changes nothing ----
SET SESSION AUTHORIZATION pl_audit;
SELECT is((SELECT count(*) FROM jsonb_array_elements(my_accounts('2025-05-20') -> 'accounts')),
          (SELECT count(*) FROM account WHERE deleted_in IS NULL), 'auditor: my_accounts() has every account');
SELECT is(pl_error($$SELECT add_member('nip00042', 'dave')$$), '42501 without a hint',
          'auditor: adds no member (42501: permission denied)');
RESET SESSION AUTHORIZATION;

SELECT * FROM finish();
ROLLBACK;
