-- Enforcement (issue 15): one submit decision for every policy, holds and releases of queued
-- jobs, the association state for Slurm, and the submit role.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(75);

INSERT INTO setting VALUES ('timezone', 'UTC') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO resource (cluster, partition, node, bundle, rate, unit)
VALUES ('enf', 'cpu', 'cpu=16', 'cpu=1', 1, 'NPL'),
       ('enfw', 'cpu', 'cpu=16', 'cpu=1', 1, 'core-hours'),
       ('enfg', 'cpu', 'cpu=16', 'cpu=1', 1, 'hours');
SELECT add_user('eu', '2024-01-05');                      -- personal account eu, Q1-Q3 2024
INSERT INTO account (name, kind) VALUES
    ('e_bank', 'project'), ('e_future', 'project'), ('e_old', 'project'), ('e_rwth', 'project'),
    ('e_staff', 'special'), ('e_genci', 'project'), ('e_both', 'project'), ('e_none', 'project');
SELECT add_member(a, 'eu', 'admin')
FROM unnest(ARRAY['e_bank', 'e_future', 'e_old', 'e_rwth', 'e_staff', 'e_genci', 'e_both', 'e_none']) AS a;
SELECT deposit('e_bank', '2024-04-01', 1000);
SELECT deposit('e_future', '2024-10-01', 1000);            -- only a future quarter
SELECT deposit('e_old', '2024-01-01', 1000);               -- only a past quarter
SELECT add_quota_period('e_rwth', '2024-01-01', '2024-12-31', 100, 'enfw', 'core-hours');
SELECT add_quota_period('e_both', '2024-01-01', '2024-12-31', 100, 'enfw', 'core-hours');
SELECT deposit('e_both', '2024-04-01', 1000);
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('e_genci', 'grant', 1200, 'hours', 'enfg', '2024-01-01', '2024-12-31');

-- Which rules bind each account, derived from what it has.
SELECT is(account_policies('e_bank'), ARRAY['bank'], 'an account with deposits is bound by the bank');
SELECT is(account_policies('e_rwth'), ARRAY['window_quota'], 'an account with only quota periods by the window');
SELECT is(account_policies('e_staff'), '{}'::text[], 'a special account by nothing');
SELECT is(account_policies('e_genci'), ARRAY['regulation'], 'an account with a grant by GENCI''s rules');
SELECT is(account_policies('e_both'), ARRAY['bank', 'window_quota'], 'a site may combine them');
SELECT is(account_policies('e_none'), ARRAY['bank'], 'a project with nothing yet by the bank, as before');
SELECT is(account_policies('eu'), ARRAY['bank'], 'a personal account by the bank');
SELECT throws_ok($$SELECT account_policies('nosuch')$$, '42704', NULL, 'an unknown account is an error (42704), not NULL');
SELECT throws_ok($$UPDATE hpcacct.account SET policies = '{bank,fairshare}' WHERE name = 'e_none'$$, '23514', NULL,
                 'an unknown policy is refused');
SELECT throws_ok($$UPDATE hpcacct.account SET policies = ARRAY['bank', NULL] WHERE name = 'e_none'$$, '23514', NULL,
                 'a NULL policy is refused');

-- The submit decision, one reason per refusal (Q2 2024).
CREATE TEMP TABLE d AS
SELECT x.account, c.ok, c.reason, c.message
FROM unnest(ARRAY['e_bank', 'e_future', 'e_old', 'e_rwth', 'e_staff', 'e_genci', 'e_both', 'e_none', 'nosuch']) AS x(account)
CROSS JOIN LATERAL check_submit('eu', x.account, '2024-05-10') c;
SELECT is((SELECT ok FROM d WHERE account = 'e_bank'), true, 'an active project with a positive balance is accepted');
SELECT is((SELECT reason FROM d WHERE account = 'e_rwth'), NULL, 'an RWTH account without a bank is accepted');
SELECT is((SELECT ok FROM d WHERE account = 'e_staff'), true, 'a staff account without deposits is accepted');
SELECT is((SELECT reason FROM d WHERE account = 'e_future'), 'account_inactive',
          'a project whose only allocation is in a later quarter is refused');
SELECT matches((SELECT message FROM d WHERE account = 'e_future'), '2024-10-01',
               'and its message says when its allocation begins');
SELECT is((SELECT reason FROM d WHERE account = 'e_old'), 'account_expired', 'an expired project is refused');
SELECT is((SELECT reason FROM d WHERE account = 'e_none'), 'account_expired',
          'a project without any allocation is refused, as before');
SELECT is((SELECT reason FROM d WHERE account = 'nosuch'), 'unknown_account', 'an unknown account is refused');
SELECT is((SELECT ok FROM d WHERE account = 'e_genci'), true, 'a GENCI project with a valid grant is accepted');
SELECT is((check_submit('ghost', NULL, '2024-05-10')).reason, 'unknown_user', 'an unknown user without -A');
SELECT is((check_submit('ghost', 'e_bank', '2024-05-10')).reason, 'no_access', 'a non-member');
-- a user with no personal account (as sync_slurm_accounts() adds them), without -A: a reason of
-- its own, whose words do not blame an account the user did not give
INSERT INTO hpc_user (username) VALUES ('synced');
SELECT is((check_submit('synced', NULL, '2024-05-10')).reason, 'no_default_project',
          'a user without a personal account, without -A (it was unknown_account, with another reason''s words)');
SELECT is((SELECT c.message FROM check_submit('synced', NULL, '2024-05-10') c),
          (SELECT hpcacct_internal.refusal_message(c.reason, c.account, 'synced', NULL)
           FROM check_submit('synced', NULL, '2024-05-10') c),
          'its message is its reason''s, as refusal_message() words it');
SELECT is((check_submit('synced', NULL, '2024-05-10')).message,
          'user synced has no default project and no personal account: submit with an account (sbatch -A)',
          'is told to name an account');
SELECT is(account_state('e_future', '2024-05-10'), 'inactive', 'account_state: inactive before its quarter');
SELECT is(account_state('e_future', '2024-10-02'), 'active', 'and active in it');
SELECT is(account_state('e_old', '2024-05-10'), 'expired', 'account_state: expired');
INSERT INTO job VALUES ('enf', 'f1', 'e_future', 'eu', 'cpu', NULL, '2024-05-01 00:00+00', '2024-05-01 01:00+00',
                        'cpu=1', 'COMPLETED');              -- a charge in Q2, before its allocation
SELECT results_eq($$SELECT quarter, state FROM quarter_balances WHERE account = 'e_future' ORDER BY quarter$$,
                  $$VALUES (date '2024-04-01', 'inactive'), (date '2024-10-01', 'active')$$,
                  'quarter_balances: inactive in a quarter before the allocation, active in its quarter');

-- An explicit list replaces the derived one: a special account under the bank is refused.
UPDATE account SET policies = '{bank}' WHERE name = 'e_staff';
SELECT is((check_submit('eu', 'e_staff', '2024-05-10')).reason, 'account_expired',
          'a special account the site puts under the bank is checked by it');
UPDATE account SET policies = NULL WHERE name = 'e_staff';

-- The window's blocked state refuses, low priority does not; the bank's balance is its own rule.
INSERT INTO job VALUES ('enfw', 'w1', 'e_rwth', 'eu', 'cpu', NULL, '2024-05-01 00:00+00', '2024-05-01 06:00+00',
                        'cpu=16', 'COMPLETED');          -- 96 core-hours: over 100 + 100 + 100 - 96 > 0 still normal
SELECT is(window_quota_state('e_rwth', '2024-05-10'), 'normal', 'the window: normal after 96 of 100');
INSERT INTO job VALUES ('enfw', 'w2', 'e_rwth', 'eu', 'cpu', NULL, '2024-05-02 00:00+00', '2024-05-02 14:00+00',
                        'cpu=16', 'COMPLETED');          -- 224 more: 320 used, consumable <= 0
SELECT is(window_quota_state('e_rwth', '2024-05-10'), 'low_priority', 'low priority past the consumable');
SELECT is((check_submit('eu', 'e_rwth', '2024-05-10')).ok, true, 'low priority still accepts submissions');
SELECT is((SELECT state FROM slurm_associations('2024-05-10') WHERE account = 'e_rwth'), 'low_priority',
          'and the association should get the low QOS');
INSERT INTO job VALUES ('enfw', 'w3', 'e_rwth', 'eu', 'cpu', NULL, '2024-05-03 00:00+00', '2024-05-04 10:00+00',
                        'cpu=16', 'COMPLETED');          -- 544 more: 864 > 6 x 100
SELECT is((check_submit('eu', 'e_rwth', '2024-05-10')).reason, 'quota_blocked',
          'blocked: C(m) > 6 A(m) is what refuses an RWTH account');
SELECT matches((check_submit('eu', 'e_rwth', '2024-05-10')).message, '864(\.0+)? core-hours used this month',
               'its message gives the month''s use');
SELECT is((SELECT state FROM slurm_associations('2024-05-10') WHERE account = 'e_rwth'), 'blocked',
          'and the association should refuse submissions');
SELECT is((check_submit('eu', 'e_rwth', '2024-07-10')).ok, true, 'two months later the window accepts again');

-- GENCI: retractions count; an allocation used up refuses; none valid refuses.
INSERT INTO job VALUES ('enfg', 'g1', 'e_genci', 'eu', 'cpu', NULL, '2024-02-01 00:00+00', '2024-02-03 12:00+00',
                        'cpu=16', 'COMPLETED');          -- 960 hours of 1 200
SELECT is((check_submit('eu', 'e_genci', '2024-05-10')).ok, true, '960 of 1 200 hours used: accepted');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('e_genci', 'retraction', -300, 'hours', 'enfg', '2024-03-15', '2024-12-31');
SELECT is((check_submit('eu', 'e_genci', '2024-05-10')).reason, 'allocation_exhausted',
          'a retraction of 300 leaves 900 < 960 used: refused');
SELECT is((check_submit('eu', 'e_genci', '2025-02-01')).reason, 'no_allocation', 'no grant valid next year: refused');
-- a machine where only a retraction is still valid (its grant ended in June) is used up,
-- though the year's consumption (none) is under Alloc (900)
INSERT INTO account (name) VALUES ('e_ret');
INSERT INTO membership (account, username) VALUES ('e_ret', 'eu');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until) VALUES
    ('e_ret', 'grant', 1000, 'hours', 'enfg', '2024-01-01', '2024-06-30'),
    ('e_ret', 'retraction', -100, 'hours', 'enfg', '2024-06-15', '2024-12-31');
SELECT is((check_submit('eu', 'e_ret', '2024-05-10')).ok, true, 'with its grant valid: accepted');
SELECT is((check_submit('eu', 'e_ret', '2024-09-01')).reason, 'allocation_exhausted',
          'with only a retraction valid: allocation_exhausted');

-- A project whose only allocation is later triggers no personal top-up at the quarter start.
SELECT add_user('fu', '2023-01-05');                        -- allotment Q1-Q3 2023 only
SELECT add_member('e_future', 'fu');
CALL open_quarter('2024-04-01');
SELECT is((SELECT count(*) FROM quarter_log WHERE account = 'fu' AND action = 'top_up' AND quarter = '2024-04-01'),
          0::bigint, 'no top-up for members of a project that is not active yet');
CALL open_quarter('2024-10-01');
SELECT is((SELECT count(*) FROM quarter_log WHERE account = 'fu' AND action = 'top_up' AND quarter = '2024-10-01'),
          3::bigint, 'in the project''s first quarter its members are topped up (Q4 to Q2)');

-- Holds and releases: a job of an account that runs negative is held, and released after a deposit.
INSERT INTO pending_job (cluster, jobid, username, account) VALUES
    ('enf', 'p1', 'eu', 'e_bank'), ('enf', 'p2', 'eu', 'e_staff'), ('enf', 'p3', 'eu', 'e_future');
SELECT results_eq($$SELECT jobid, reason FROM recheck_queued('2024-05-10')$$,
                  $$VALUES ('p3'::text, 'account_inactive'::text)$$, 'recheck holds the job of an inactive account');
INSERT INTO job VALUES ('enf', 'n1', 'e_bank', 'eu', 'cpu', NULL, '2024-05-01 00:00+00', '2024-05-04 00:00+00',
                        'cpu=16', 'COMPLETED');          -- 1 152 NPL of 1 000
SELECT results_eq($$SELECT jobid, reason FROM recheck_queued('2024-05-10')$$,
                  $$VALUES ('p1'::text, 'negative_balance'::text)$$, 'and the job of an account that ran negative');
SELECT is((SELECT held FROM pending_job WHERE jobid = 'p1'), true, 'p1 is marked held');
SELECT matches((SELECT hold_reason FROM pending_job WHERE jobid = 'p1'), 'negative balance',
               'with the reason a user can act on');
SELECT is_empty($$SELECT * FROM recheck_queued('2024-05-10')$$, 'a second recheck changes nothing');
SELECT deposit('e_bank', '2024-04-01', 500);
SELECT results_eq($$SELECT jobid, reason, message FROM recheck_queued('2024-05-10')$$,
                  $$VALUES ('p1'::text, NULL::text, 'released: account e_bank is valid again'::text)$$,
                  'after a deposit the job is released');
SELECT is((SELECT held FROM pending_job WHERE jobid = 'p1'), false, 'and marked not held');
SELECT is((SELECT hold_reason FROM pending_job WHERE jobid = 'p1'), NULL, 'without a reason');
SELECT is_empty($$SELECT * FROM recheck_queued('2024-05-10')$$, 'a second recheck releases nothing again');
-- The reason everyone reads (hold_comment, the held job's comment in Slurm): the same refusal
-- without the account's figures, and with every word of it.
SELECT is((SELECT hold_comment FROM pending_job WHERE jobid = 'p3'),
          'account e_future has no allocation for this quarter: ask staff to move allocation into this quarter, '
          'or submit with another account',
          'the comment of an inactive account''s job leaves out when its allocation begins');
SELECT matches((SELECT hold_reason FROM pending_job WHERE jobid = 'p3'), 'its allocation begins on 2024-10-01: ',
               'which its owner reads in hold_reason');
SELECT is((SELECT hold_comment FROM pending_job WHERE jobid = 'p1'), NULL, 'a released job has no comment');
INSERT INTO hpc_user (username) VALUES ('e_nodef');             -- no default project, no personal account
INSERT INTO account (name, kind, deleted_in) VALUES ('e_past', 'project', NULL), ('e_gone', 'personal', '2024-01-01');
SELECT add_member('e_past', 'eu');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('e_past', 'grant', 100, 'hours', 'enfg', '2023-01-01', '2023-12-31');   -- no grant valid in 2024
INSERT INTO pending_job (cluster, jobid, username, account) VALUES
    ('enf', 'c1', 'eu', 'e_bank'), ('enf', 'c2', 'eu', 'e_rwth'), ('enf', 'c3', 'eu', 'e_genci'),
    ('enf', 'c4', 'eu', 'e_old'), ('enf', 'c5', 'e_nodef', NULL), ('enf', 'c6', 'e_nodef', 'e_bank'),
    ('enf', 'c7', 'e_unknown', NULL), ('enf', 'c8', 'eu', 'e_nosuch'), ('enf', 'c9', 'eu', 'e_past'),
    ('enf', 'd1', 'eu', 'e_gone');
INSERT INTO job VALUES ('enf', 'n2', 'e_bank', 'eu', 'cpu', NULL, '2024-05-05 00:00+00', '2024-05-06 00:00+00',
                        'cpu=16', 'COMPLETED');          -- e_bank negative again
SELECT is((SELECT count(*) FROM recheck_queued('2024-05-10')), 11::bigint, 'the ten jobs are held, and p1 again');
SELECT results_eq($$SELECT jobid, hold_comment, hold_reason FROM pending_job WHERE jobid ~ '^[cd][0-9]$'
                     AND held ORDER BY jobid$$,
                  $$SELECT c.jobid, c.comment, (check_submit(c.username, c.account, '2024-05-10')).message
                    FROM (SELECT 'c1', 'eu', 'e_bank', 'account e_bank has a negative balance this quarter: ask for a transfer or a deposit, or submit with another account'
                          UNION ALL SELECT 'c2', 'eu', 'e_rwth', 'account e_rwth is blocked by its sliding-window quota: submit with another account'
                          UNION ALL SELECT 'c3', 'eu', 'e_genci', 'account e_genci has used up its allocation (after retractions): ask for a supplement, or submit with another account'
                          UNION ALL SELECT 'c4', 'eu', 'e_old', 'account e_old has no allocation for this or a later quarter: ask for a new allocation, or submit with another account (sbatch -A)'
                          UNION ALL SELECT 'c5', 'e_nodef', NULL, 'user e_nodef has no default project and no personal account: submit with an account (sbatch -A)'
                          UNION ALL SELECT 'c6', 'e_nodef', 'e_bank', 'user e_nodef is not a member of account e_bank: ask one of its project administrators to add you, or submit with another account'
                          UNION ALL SELECT 'c7', 'e_unknown', NULL, 'user e_unknown is not known to the accounting system: submit with an account (sbatch -A) or ask support to register you'
                          UNION ALL SELECT 'c8', 'eu', 'e_nosuch', 'account e_nosuch does not exist: check the account you gave (sbatch -A)'
                          UNION ALL SELECT 'c9', 'eu', 'e_past', 'account e_past has no allocation valid: submit with another account'
                          UNION ALL SELECT 'd1', 'eu', 'e_gone', 'account e_gone has been deleted and cannot be used again')
                         AS c(jobid, username, account, comment)
                    ORDER BY 1$$,
                  'each held job''s comment is its owner''s message without the figures, its parenthesised words kept');
SELECT results_eq($$SELECT p.jobid, p.hold_comment FROM pending_job p WHERE p.jobid ~ '^[cd][0-9]$' ORDER BY 1$$,
                  $$SELECT p.jobid, hpcacct_internal.refusal_message(c.reason, c.account, p.username, NULL)
                    FROM pending_job p CROSS JOIN LATERAL check_submit(p.username, p.account, '2024-05-10') c
                    WHERE p.jobid ~ '^[cd][0-9]$' ORDER BY 1$$,
                  'each comment is the refusal_message() of check_submit''s reason, a job without -A''s too');
SELECT ok((SELECT bool_and(hold_reason <> hold_comment) FROM pending_job WHERE jobid IN ('c1', 'c2', 'c9')),
          'while the owner''s message has the balance, the quota''s use and the day checked');
SELECT is(hpcacct_internal.refusal_message('negative_balance', E'a\nb (c)', NULL, NULL),
          E'account a\nb (c) has a negative balance this quarter: ask for a transfer or a deposit, or submit with another account',
          'an account name with parentheses is kept whole');
DELETE FROM pending_job WHERE jobid ~ '^[cd][0-9]$';
DELETE FROM job WHERE jobid = 'n2';
SELECT throws_ok($$SELECT * FROM hpcacct.check_submit('eu', 'e_bank', 'infinity')$$, '22008', NULL,
                 'an infinite day is refused');
SELECT throws_ok($$SELECT * FROM hpcacct.check_submit('nobody-at-all', NULL, 'infinity')$$, '22008',
                 'check_submit: infinity is not a finite date', 'also for a user it does not know (it answered unknown_user)');
SELECT throws_ok($$SELECT * FROM hpcacct.account_verdict('e_bank', 'infinity')$$, '22008',
                 'account_verdict: infinity is not a finite date', 'account_verdict() names itself, not check_submit');
SELECT throws_ok($$SELECT * FROM hpcacct.slurm_associations('-infinity')$$, '22008',
                 'slurm_associations: -infinity is not a finite date', 'and slurm_associations() itself');
SELECT throws_ok($$SELECT * FROM hpcacct.check_submit(NULL, 'e_bank')$$, '22004', NULL, 'a NULL user is refused');
SELECT is(check_submit('eu', 'e_old', NULL), check_submit('eu', 'e_old'), 'a NULL day is today');

-- The submit role sees every account, reads, and writes nothing.
CALL setup_roles();
CREATE ROLE hp_slurm LOGIN IN ROLE hpcacct_submit;
SET SESSION AUTHORIZATION hp_slurm;
SELECT is((hpcacct.check_submit('eu', 'e_future', '2024-05-10')).reason, 'account_inactive',
          'hpcacct_submit sees accounts it is no member of');
SELECT is((hpcacct.check_submit('eu', 'e_rwth', '2024-05-10')).reason, 'quota_blocked',
          'and reads what the window needs');
SELECT is((hpcacct.check_submit('eu', 'e_genci', '2024-05-10')).reason, 'allocation_exhausted',
          'and what GENCI''s rules need');
SELECT throws_ok($$SELECT hpcacct.deposit('e_bank', '2024-04-01', 1)$$, '42501', NULL,
                 'hpcacct_submit cannot deposit');
SELECT throws_ok($$INSERT INTO hpcacct.pending_job (cluster, jobid, username) VALUES ('x', 'y', 'z')$$, '42501', NULL,
                 'nor write a table');
RESET SESSION AUTHORIZATION;

-- A queued job is named by its cluster and job id: an empty one is refused by a named
-- constraint (23514), as the loader quarantines a line without them, nothing written.
SELECT throws_ok($$INSERT INTO hpcacct.pending_job (cluster, jobid, username) VALUES ('', 'e1', 'eu')$$,
                 '23514', 'new row for relation "pending_job" violates check constraint "pending_job_cluster_named"',
                 'a queued job with an empty cluster is refused (pending_job_cluster_named)');
SELECT throws_ok($$INSERT INTO hpcacct.pending_job (cluster, jobid, username) VALUES ('ec', '', 'eu')$$,
                 '23514', 'new row for relation "pending_job" violates check constraint "pending_job_jobid_named"',
                 'an empty job id too (pending_job_jobid_named)');
SELECT is((SELECT count(*) FROM hpcacct.pending_job WHERE '' IN (cluster, jobid)), 0::bigint,
          'the refused jobs wrote nothing');

SELECT * FROM finish();
ROLLBACK;
