-- The README's portal examples on the sample site (test/notify/sample_site.sql), as its
-- portal users see them: r_wlm_usage for bob, my_accounts() for carol, account_month() of
-- nip00042 and the core-years of def-smith's statement.
BEGIN;
SET client_min_messages = warning;
\o /dev/null
\ir ../notify/sample_site.sql
\o
SET search_path = public, hpcacct;
SELECT plan(15);

CALL setup_roles();
CREATE ROLE bob LOGIN IN ROLE hpcacct_portal;
CREATE ROLE carol LOGIN IN ROLE hpcacct_portal;

SET SESSION AUTHORIZATION bob;
SELECT results_eq($$SELECT account, month, state, monthly, remaining_prev, consumed_current, consumable_pct, consumable
                    FROM hpcacct.r_wlm_usage(NULL, '2025-04-10')$$,
                  $$VALUES ('rwth0042'::text, date '2025-04-01', 'normal'::text, 50000::float8, -10000::float8, 40000::float8,
                            0::float8, 50000::float8)$$,
                  'bob''s r_wlm_usage on 10 April 2025, as the README prints it');
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION carol;
SELECT is(hpcacct.my_accounts('2025-05-20'), $$
{"at": "2025-05-20", "user": "carol", "accounts": [
  {"kind": "project", "role": "member", "account": "def-smith", "description": "Default allocation, Smith lab",
   "this_month": {"core-equivalent-hours": 15600.000000}},
  {"kind": "project", "role": "admin", "account": "nip00042", "description": "Ocean models",
   "bank": {"unit": "NPL", "state": "active", "balance": 23377.600000, "quarter": "2025-04-01"},
   "this_month": {"NPL": 2750.400000}},
  {"kind": "project", "role": "member", "account": "rwth0042", "description": "Open-use project",
   "quota": {"unit": "core-hours", "state": "normal", "monthly": 50000, "consumed": 20000, "consumable": 90000,
             "consumable_pct": 80, "remaining_prev": 10000},
   "this_month": {"core-hours": 20000.000000}}]}
$$::jsonb, 'carol''s my_accounts() on 20 May 2025, as the README prints it');

-- the README cuts the bank's days to two
SELECT is((SELECT jsonb_set(d, '{bank,days}', (SELECT jsonb_agg(e.day ORDER BY e.n)
                                                FROM jsonb_array_elements(d #> '{bank,days}') WITH ORDINALITY e(day, n)
                                                WHERE e.n <= 2))
           FROM (SELECT hpcacct.account_month('nip00042', '2025-05-01') AS d) m), $$
{"account": "nip00042", "kind": "project", "description": "Ocean models", "month": "2025-05",
 "figures_at": "2025-05-31", "time_zone": "UTC",
 "charges": {"total": {"NPL": 3328.000000},
             "by_resource": [{"cluster": "hlrn", "partition": "mpp1", "unit": "NPL", "amount": 3328.000000}],
             "by_submitter": [{"cluster": "hlrn", "partition": "mpp1", "unit": "NPL", "submitter": "alice", "amount": 848.000000},
                              {"cluster": "hlrn", "partition": "mpp1", "unit": "NPL", "submitter": "carol", "amount": 2480.000000}]},
 "usage_by_resource": [{"pool": "hlrn", "cluster": "hlrn", "partition": "mpp1", "unit": "NPL", "year_start": "2025-01-01",
                        "year_end": "2025-12-31", "usage": 7200.000000, "usage_years": 0.821918,
                        "equivalent_hours": 86400.000000, "core_hours": 86400.000000, "core_years": 9.863014,
                        "projected_usage": 17403.973510}],
 "bank": {"quarter": "2025-04-01", "unit": "NPL", "allocation": 30000.000000, "balance": 22800.000000, "state": "active",
          "days": [["2025-04-01", 30000.00], ["2025-04-02", 30000.00]]}}
$$::jsonb, 'nip00042''s account_month() for May 2025, as the README prints it');
RESET SESSION AUTHORIZATION;

-- A portal user is a login named as the user: row-level security reads the session user, so a
-- portal that connects as one shared login and switches with SET ROLE sees no account.
CREATE ROLE portal_app LOGIN IN ROLE hpcacct_portal;
GRANT carol TO portal_app;
SET SESSION AUTHORIZATION portal_app;
SET ROLE carol;
SELECT is(hpcacct.my_accounts('2025-05-20') -> 'accounts', '[]'::jsonb,
          'a shared login after SET ROLE carol: my_accounts() shows no account');
SELECT is((SELECT count(*) FROM hpcacct.ledger), 0::bigint, 'and it reads no ledger row');
RESET ROLE;
RESET SESSION AUTHORIZATION;

-- def-smith in October 2025: Cedar's 121 200 core-equivalent-hours are 13.836 core-equivalent
-- years, its jobs' 93 360 raw core-hours 10.658 core-years
SELECT results_eq($$SELECT (x ->> 'usage')::numeric, round((x ->> 'usage_years')::numeric, 3),
                           (x ->> 'core_hours')::numeric, round((x ->> 'core_years')::numeric, 3)
                    FROM jsonb_array_elements(hpcacct.account_month('def-smith', '2025-10-01') -> 'usage_by_resource') x
                    WHERE x ->> 'cluster' = 'cedar'$$,
                  $$VALUES (121200::numeric, 13.836::numeric, 93360::numeric, 10.658::numeric)$$,
                  'def-smith''s Cedar usage in October 2025, as the README gives it');
SELECT matches(hpcacct.statement_html('def-smith', '2025-10-01'), '13\.836', 'and its statement prints 13.836');

-- "Who hears about an account": a portal user writes their own contact row, naming
-- themselves (the grant is INSERT of username, email, display_name, notify; UPDATE of the
-- last three): without the username the row is no one's, and row-level security refuses it.
INSERT INTO hpcacct.hpc_user (username) VALUES ('newbie');
CREATE ROLE newbie LOGIN IN ROLE hpcacct_portal;
SET SESSION AUTHORIZATION newbie;
SELECT throws_ok($$INSERT INTO hpcacct.contact (email) VALUES ('newbie@lab.example')$$, '42501', NULL,
                 'a portal user''s contact row without username is refused (42501)');
SELECT lives_ok($$INSERT INTO hpcacct.contact (username, email) VALUES (session_user, 'newbie@lab.example')$$,
                'naming themselves, as the README says, it is written');
SELECT throws_ok($$UPDATE hpcacct.contact SET username = 'carol'$$, '42501', NULL,
                 'and the username is not the portal''s to change (42501)');
RESET SESSION AUTHORIZATION;
-- "The other pages": the index for the jobs page is added by the job table's owner, the
-- superuser who ran create_job_table(); the staff's login may not (not the owner).
CREATE ROLE staff_login LOGIN IN ROLE hpcacct_admin;
SET SESSION AUTHORIZATION staff_login;
SELECT throws_ok($$CREATE INDEX ON hpcacct.job (account, "end")$$, '42501', NULL,
                 'an hpcacct_admin login cannot add the jobs page''s index (42501: not the owner)');
RESET SESSION AUTHORIZATION;
SELECT lives_ok($$CREATE INDEX ON hpcacct.job (account, "end")$$, 'the job table''s owner can');
-- "a project's members: changed with add_member()/remove_member()": carol, nip00042's
-- administrator, removes alice from her portal. The trigger that withdraws alice's pending
-- messages about the account is deferred: it runs when the portal's transaction commits, as
-- the portal login (SET CONSTRAINTS … IMMEDIATE runs it here, as a commit would).
SELECT hpcacct.outbox_add('balance_low', 'readme/portal', 'nip00042', 'low', 'low', '{}', true);
SET SESSION AUTHORIZATION carol;
SELECT lives_ok($$SELECT hpcacct.remove_member('nip00042', 'alice')$$, 'carol removes alice from nip00042');
SELECT lives_ok($$SET CONSTRAINTS hpcacct.outbox_withdraw_member IMMEDIATE$$,
                'and the removal commits from her portal login (its deferred trigger runs)');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT r.state FROM hpcacct.outbox_recipient r JOIN hpcacct.outbox m USING (message_id)
           WHERE m.decision_key = 'readme/portal' AND r.username = 'alice'), 'withdrawn',
          'alice''s pending message about nip00042 is withdrawn');
SELECT * FROM finish();
ROLLBACK;
