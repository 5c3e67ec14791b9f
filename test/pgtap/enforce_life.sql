-- Slurm enforcement over a year (2024), as a site lives it, site time zone Europe/Berlin:
-- accounts under each policy and under several at once (bank + window_quota, regulation +
-- bank), a special account, one whose policies are '{}' by hand and one bound by the bank
-- alone despite a quota period; p_bank's deposits running out and topped up, a quarter start
-- at local midnight, its expiry and a later quarter booked ahead (inactive); p_wq's window low,
-- blocked, low, blocked by the period, then a new period; p_reg's GENCI grant used up, a
-- supplement, a second machine; a member removed; dan's personal account expired then
-- deleted; default projects set and falling back. At each step check_submit() (reason and
-- message), account_verdict(), slurm_associations() (state, reason), recheck_queued() (which
-- jobs are held or released, and why) and the owners' and members' messages tell one story:
-- the README's table computed by hand for that day. The sync's part (holds placed, lifted) is
-- played by pg_temp.sync(), as hpcacct-slurm-sync records it.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(74);

INSERT INTO setting VALUES ('timezone', 'Europe/Berlin') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO resource (cluster, partition, node, bundle, rate, unit)
VALUES ('lb', 'p', 'cpu=16', 'cpu=1', 1, 'NPL'),
       ('lw', 'p', 'cpu=16', 'cpu=1', 1, 'core-hours'),
       ('lg', 'p', 'cpu=16', 'cpu=1', 1, 'hours');
INSERT INTO balance_threshold VALUES (0, 'negative');

-- a job of `cores` cores for `hours` hours, local start (site time zone)
CREATE FUNCTION pg_temp.job(cl text, id text, acct text, usr text, s timestamp, hours numeric, cores int DEFAULT 16)
RETURNS void LANGUAGE sql AS $$
    INSERT INTO hpcacct.job VALUES (cl, id, acct, usr, 'p', NULL, s AT TIME ZONE 'Europe/Berlin',
                                    (s + hours * interval '1 hour') AT TIME ZONE 'Europe/Berlin',
                                    ('cpu=' || cores)::hpcacct.tres, 'COMPLETED');
$$;
-- one line per account at a day: policies, check_submit of a member (reason), verdict, association
CREATE FUNCTION pg_temp.story(d date) RETURNS TABLE (account text, policies text[], submit text, verdict text,
                                                     assoc text, assoc_reason text)
LANGUAGE sql AS $$
    SELECT s.account, s.policies,
           coalesce((hpcacct.check_submit((SELECT min(m.username) FROM hpcacct.membership m WHERE m.account = s.account),
                                          s.account, d)).reason, 'ok'),
           coalesce((hpcacct.account_verdict(s.account, d)).reason, 'ok'), s.state, s.reason
    FROM hpcacct.slurm_associations(d) s
    ORDER BY 1
$$;

SELECT add_user(u, '2024-01-02') FROM unnest(ARRAY['ann', 'bob', 'cid', 'dan', 'eve']) u;
INSERT INTO account (name, kind) VALUES
    ('p_bank', 'project'), ('p_wq', 'project'), ('p_wqbank', 'project'), ('p_reg', 'project'),
    ('p_regbank', 'project'), ('s_staff', 'special'), ('p_free', 'project'), ('p_nowin', 'project');
SELECT add_member('p_bank', 'ann', 'admin'), add_member('p_bank', 'eve');
SELECT add_member('p_wq', 'bob', 'admin'), add_member('p_wqbank', 'bob', 'admin');
SELECT add_member('p_reg', 'cid', 'admin'), add_member('p_regbank', 'cid', 'admin');
SELECT add_member('s_staff', 'ann', 'admin'), add_member('p_free', 'ann', 'admin'), add_member('p_nowin', 'bob', 'admin');
SELECT deposit('p_bank', '2024-01-01', 1000), deposit('p_bank', '2024-04-01', 10);
SELECT add_quota_period('p_wq', '2024-01-01', '2024-06-30', 100, 'lw'),
       add_quota_period('p_wq', '2024-07-01', '2024-12-31', 100, 'lw');
SELECT add_quota_period('p_wqbank', '2024-01-01', '2024-12-31', 100, 'lw');
SELECT deposit('p_wqbank', q, 1000) FROM unnest(ARRAY[date '2024-01-01', '2024-04-01', '2024-07-01', '2024-10-01']) q;
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until) VALUES
    ('p_reg', 'grant', 1200, 'hours', 'lg', '2024-01-01', '2024-12-31'),
    ('p_regbank', 'grant', 1200, 'hours', 'lg', '2024-01-01', '2024-12-31');
SELECT deposit('p_regbank', q, 1000) FROM unnest(ARRAY[date '2024-01-01', '2024-04-01', '2024-07-01', '2024-10-01']) q;
SELECT deposit('p_free', '2024-01-01', 10);
UPDATE account SET policies = '{}' WHERE name = 'p_free';
-- p_nowin has a quota period, but the site binds it by the bank alone
SELECT add_quota_period('p_nowin', '2024-01-01', '2024-12-31', 100, 'lw');
SELECT deposit('p_nowin', q, 1000) FROM unnest(ARRAY[date '2024-01-01', '2024-04-01', '2024-07-01', '2024-10-01']) q;
UPDATE account SET policies = '{bank}' WHERE name = 'p_nowin';

-- the sync's part, as hpcacct-slurm-sync does it: holds placed, then hpcacct's holds lifted
CREATE FUNCTION pg_temp.sync() RETURNS void LANGUAGE sql AS $$
    UPDATE hpcacct.pending_job SET sync_hold = 'release' WHERE held AND sync_hold IS NULL;
    SELECT set_config('hpcacct.sync_lifted', 'on', true);
    UPDATE hpcacct.pending_job SET sync_hold = NULL WHERE NOT held AND sync_hold IS NOT NULL;
    SELECT set_config('hpcacct.sync_lifted', 'off', true);
$$;
SELECT set_default_project('eve', 'p_bank'), set_default_project('cid', 'p_reg'), set_default_project('bob', 'p_wq');

-- 10 January: every account may run; none is blocked or low.
SELECT results_eq($$SELECT account, submit, verdict, assoc FROM pg_temp.story('2024-01-10')$$,
                  $$SELECT a, 'ok', 'ok', 'normal' FROM unnest(ARRAY['ann', 'bob', 'cid', 'dan', 'eve', 'p_bank', 'p_free',
                        'p_nowin', 'p_reg', 'p_regbank', 'p_wq', 'p_wqbank', 's_staff']) a ORDER BY 1$$,
                  '10 January: every account accepted, every association normal');
SELECT results_eq($$SELECT account, policies FROM pg_temp.story('2024-01-10') WHERE account LIKE 'p\_%' OR account LIKE 's\_%'$$,
                  $$VALUES ('p_bank', '{bank}'::text[]), ('p_free', '{}'), ('p_nowin', '{bank}'), ('p_reg', '{regulation}'),
                           ('p_regbank', '{bank,regulation}'), ('p_wq', '{window_quota}'), ('p_wqbank', '{bank,window_quota}'),
                           ('s_staff', '{}')$$,
                  'the policies as the README derives them (p_free''s and p_nowin''s set by hand)');
SELECT is(ARRAY[(check_submit('eve', NULL, '2024-01-10')).account, (check_submit('cid', NULL, '2024-01-10')).account,
                (check_submit('ann', NULL, '2024-01-10')).account],
          ARRAY['p_bank', 'p_reg', 'ann'], 'without -A: the default project, else the personal account');

-- February: p_bank's 1 000 NPL run out (1 120 charged: -120), queued jobs are held; a deposit of 200 releases them.
SELECT pg_temp.job('lb', 'b1', 'p_bank', 'ann', '2024-02-01 10:00', 70);
INSERT INTO pending_job (cluster, jobid, username, account) VALUES
    ('lb', 'q1', 'ann', 'p_bank'), ('lb', 'q2', 'eve', NULL), ('lb', 'q3', 'ann', 's_staff');
SELECT is(check_submit('ann', 'p_bank', '2024-02-10'),
          ROW(false, 'p_bank', 'negative_balance',
              'account p_bank has a negative balance this quarter (-120.00 NPL): ask for a transfer or a deposit, or submit with another account')::submit_decision,
          '10 February: p_bank refused, its balance in the message');
SELECT is(account_verdict('p_bank', '2024-02-10'), check_submit('ann', 'p_bank', '2024-02-10'),
          'account_verdict says the same');
SELECT results_eq($$SELECT state, reason, message FROM slurm_associations('2024-02-10') WHERE account = 'p_bank'$$,
                  $$SELECT 'blocked', c.reason, c.message FROM check_submit('ann', 'p_bank', '2024-02-10') c$$,
                  'the association is blocked, with the same reason and message');
SELECT results_eq($$SELECT jobid, reason, message FROM recheck_queued('2024-02-10')$$,
                  $$VALUES ('q1', 'negative_balance', (check_submit('ann', 'p_bank', '2024-02-10')).message),
                           ('q2', 'negative_balance', (check_submit('ann', 'p_bank', '2024-02-10')).message)$$,
                  'recheck holds the two jobs of p_bank (q2 by eve''s default project), not the staff job');
SELECT results_eq($$SELECT figures ->> 'jobid', job_owner, account, figures ->> 'reason' FROM outbox WHERE topic = 'job_held' ORDER BY 1$$,
                  $$VALUES ('q1', 'ann', 'p_bank', (check_submit('ann', 'p_bank', '2024-02-10')).message),
                           ('q2', 'eve', 'p_bank', (check_submit('ann', 'p_bank', '2024-02-10')).message)$$,
                  'each owner is told, with the reason check_submit gives');
-- the hold is an administrator's: the owner cannot release it (README, Holds and releases)
SELECT ok((SELECT bool_and(body !~ 'release the job' AND body ~ 'released\s+at the next check')
           FROM outbox WHERE topic = 'job_held'),
          'and is not told to release the job, which Slurm refuses, but that the next check releases it');
SELECT pg_temp.sync();
SELECT deposit('p_bank', '2024-01-01', 200);
SELECT is((check_submit('ann', 'p_bank', '2024-02-12')).ok, true, '12 February: after a deposit of 200 (80 left), accepted');
SELECT results_eq($$SELECT jobid, reason, message FROM recheck_queued('2024-02-12')$$,
                  $$VALUES ('q1', NULL, 'released: account p_bank is valid again'), ('q2', NULL, 'released: account p_bank is valid again')$$,
                  'and both jobs released');
SELECT pg_temp.sync();
SELECT results_eq($$SELECT figures ->> 'jobid', job_owner FROM outbox WHERE topic = 'job_released' ORDER BY 1$$,
                  $$VALUES ('q1', 'ann'), ('q2', 'eve')$$, 'each owner is told of the release once the sync lifts the hold');

-- 20 February: eve leaves p_bank. Her default project falls back to her personal account.
SELECT remove_member('p_bank', 'eve');
INSERT INTO pending_job (cluster, jobid, username, account) VALUES ('lb', 'q4', 'eve', 'p_bank');
SELECT is(check_submit('eve', 'p_bank', '2024-02-20'),
          ROW(false, 'p_bank', 'no_access', 'user eve is not a member of account p_bank: ask one of its project '
              'administrators to add you, or submit with another account')::submit_decision, 'a removed member is refused');
SELECT is(check_submit('eve', NULL, '2024-02-20'), ROW(true, 'eve', NULL, NULL)::submit_decision,
          'without -A her jobs go to her personal account');
SELECT results_eq($$SELECT jobid, reason FROM recheck_queued('2024-02-20')$$, $$VALUES ('q4', 'no_access')$$,
                  'recheck holds her job on p_bank, not the one without an account');
SELECT pg_temp.sync();

-- The window (p_wq, 100 a month, January to June): 320 used in February.
SELECT pg_temp.job('lw', 'w1', 'p_wq', 'bob', '2024-02-05 10:00', 20);
SELECT results_eq($$SELECT submit, verdict, assoc FROM pg_temp.story('2024-02-20') WHERE account = 'p_wq'$$,
                  $$VALUES ('ok', 'ok', 'low_priority')$$,
                  '20 February: consumable 300 - 320 < 0: low priority, accepted, the low QOS');
SELECT is(notify_scan('2024-02-20'), 1, 'its members are told of low priority');
SELECT pg_temp.job('lw', 'w2', 'p_wq', 'bob', '2024-03-04 10:00', 45);    -- 720 in March > 6 x 100
INSERT INTO pending_job (cluster, jobid, username, account) VALUES ('lw', 'q5', 'bob', 'p_wq');
SELECT results_eq($$SELECT submit, verdict, assoc, assoc_reason FROM pg_temp.story('2024-03-10') WHERE account = 'p_wq'$$,
                  $$VALUES ('quota_blocked', 'quota_blocked', 'blocked', 'quota_blocked')$$,
                  '10 March: C(March) = 720 > 600: blocked');
SELECT is((check_submit('bob', 'p_wq', '2024-03-10')).message,
          'account p_wq is blocked by its sliding-window quota (720 core-hours used this month, monthly allowance 100): '
          'submit with another account', 'its message gives the month''s use and allowance');
SELECT results_eq($$SELECT jobid, reason FROM recheck_queued('2024-03-10')$$, $$VALUES ('q5', 'quota_blocked')$$,
                  'its queued job is held');
SELECT pg_temp.sync();
SELECT is(notify_scan('2024-03-10'), 1, 'its members are told it is blocked');

-- The quarter start, midnight in Berlin: a job on p_bank from 31 March 23:30 to 1 April 01:30 (local)
-- charges 8 NPL to Q1 (80 - 8 = 72) and 24 to Q2 (10 - 24 = -14). In UTC it would all be Q1's.
SELECT pg_temp.job('lb', 'b2', 'p_bank', 'ann', '2024-03-31 23:30', 2);
SELECT is((check_submit('ann', 'p_bank', '2024-03-31')).ok, true, '31 March: p_bank has 72 NPL left');
SELECT is(check_submit('ann', 'p_bank', '2024-04-01'),
          ROW(false, 'p_bank', 'negative_balance',
              'account p_bank has a negative balance this quarter (-14.00 NPL): ask for a transfer or a deposit, or submit with another account')::submit_decision,
          '1 April: the 1.5 hours after midnight local time make Q2 negative');
CALL open_quarter('2024-04-01');
SELECT is(ARRAY[(check_submit('eve', NULL, '2024-04-01')).account, (check_submit('cid', NULL, '2024-04-01')).account,
                (check_submit('bob', NULL, '2024-04-01')).account],
          ARRAY['eve', 'p_reg', 'p_wq'],
          'the quarter start keeps default projects that do not expire (GENCI''s p_reg, RWTH''s p_wq)');
SELECT results_eq($$SELECT submit, verdict, assoc FROM pg_temp.story('2024-04-01') WHERE account = 'p_wq'$$,
                  $$VALUES ('ok', 'ok', 'low_priority')$$,
                  '1 April: C(April) = 0, period 1 040 <= 1 200, consumable 300 - 720 < 0: low priority again');
SELECT results_eq($$SELECT jobid, reason FROM recheck_queued('2024-04-01')$$,
                  $$VALUES ('q1', 'negative_balance'), ('q5', NULL)$$,
                  'recheck holds p_bank''s job again and releases p_wq''s');
SELECT pg_temp.sync();
SELECT is(notify_scan('2024-04-01'), 2, 'p_wq''s members are told of low priority, p_bank''s administrator of the negative balance');

SELECT pg_temp.job('lw', 'w3', 'p_wq', 'bob', '2024-04-02 10:00', 13);   -- 208: the period's 1 248 > 1 200
SELECT results_eq(format($$SELECT submit, assoc FROM pg_temp.story(%L) WHERE account = 'p_wq'$$, d),
                  $$VALUES ('quota_blocked', 'blocked')$$, format('%s: blocked by the period''s use', d))
FROM unnest(ARRAY[date '2024-04-10', '2024-06-30']) d;
SELECT results_eq($$SELECT jobid, reason FROM recheck_queued('2024-04-10')$$, $$VALUES ('q5', 'quota_blocked')$$,
                  'held again');
SELECT pg_temp.sync();
SELECT is(notify_scan('2024-04-10'), 1, 'its members are told it is blocked again');

-- bank + window (p_wqbank, 100 core-hours a month, 1 000 NPL a quarter): the window low, the
-- bank fine: low priority; the window blocked and the bank negative: the bank's reason first.
SELECT pg_temp.job('lw', 'x1', 'p_wqbank', 'bob', '2024-04-15 10:00', 20);   -- 320 core-hours in April
SELECT results_eq($$SELECT submit, verdict, assoc FROM pg_temp.story('2024-04-20') WHERE account = 'p_wqbank'$$,
                  $$VALUES ('ok', 'ok', 'low_priority')$$, '20 April: p_wqbank low priority, accepted');
SELECT pg_temp.job('lw', 'x2', 'p_wqbank', 'bob', '2024-04-16 10:00', 40);   -- 640 more: 960 > 600
SELECT pg_temp.job('lb', 'x3', 'p_wqbank', 'bob', '2024-04-16 10:00', 70);   -- 1 120 NPL of 1 000
SELECT results_eq($$SELECT submit, verdict, assoc, assoc_reason FROM pg_temp.story('2024-04-20') WHERE account = 'p_wqbank'$$,
                  $$VALUES ('negative_balance', 'negative_balance', 'blocked', 'negative_balance')$$,
                  'blocked by both: the bank''s reason, as the README orders them');
SELECT deposit('p_wqbank', '2024-04-01', 200);
SELECT results_eq($$SELECT submit, verdict, assoc, assoc_reason FROM pg_temp.story('2024-04-21') WHERE account = 'p_wqbank'$$,
                  $$VALUES ('quota_blocked', 'quota_blocked', 'blocked', 'quota_blocked')$$,
                  'after a deposit: the window''s');
SELECT results_eq($$SELECT submit, verdict, assoc FROM pg_temp.story('2024-05-01') WHERE account = 'p_wqbank'$$,
                  $$VALUES ('ok', 'ok', 'low_priority')$$,
                  '1 May: C(May) = 0, consumable 300 - 960 < 0: low priority again');

-- GENCI: p_reg's 1 200 hours used by a job ending 16 May 13:00; a supplement of 400 from 1 June.
SELECT pg_temp.job('lg', 'g1', 'p_reg', 'cid', '2024-05-13 10:00', 75);
INSERT INTO pending_job (cluster, jobid, username, account) VALUES ('lg', 'q6', 'cid', 'p_reg'), ('lg', 'q7', 'cid', NULL);
SELECT is((check_submit('cid', 'p_reg', '2024-05-15')).ok, true, '15 May: the job has not ended');
SELECT is(check_submit('cid', 'p_reg', '2024-05-16'),
          ROW(false, 'p_reg', 'allocation_exhausted', 'account p_reg has used up its allocation (after retractions): '
              'ask for a supplement, or submit with another account')::submit_decision, '16 May: used up');
SELECT results_eq($$SELECT jobid, reason FROM recheck_queued('2024-05-16')$$,
                  $$VALUES ('q6', 'allocation_exhausted'), ('q7', 'allocation_exhausted')$$,
                  'both of cid''s queued jobs are held (q7 by his default project)');
SELECT pg_temp.sync();
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('p_reg', 'supplement', 400, 'hours', 'lg', '2024-06-01', '2024-12-31');
SELECT is((check_submit('cid', 'p_reg', '2024-05-31')).reason, 'allocation_exhausted', '31 May: the supplement is not valid yet');
SELECT is((check_submit('cid', 'p_reg', '2024-06-01')).ok, true, '1 June: it is');
SELECT results_eq($$SELECT jobid, reason FROM recheck_queued('2024-06-01')$$, $$VALUES ('q6', NULL), ('q7', NULL)$$,
                  'and the jobs are released');
SELECT pg_temp.sync();

-- regulation + bank: the bank is checked first.
SELECT pg_temp.job('lg', 'g2', 'p_regbank', 'cid', '2024-06-03 10:00', 75);   -- 1 200 hours
SELECT pg_temp.job('lb', 'b3', 'p_regbank', 'cid', '2024-06-03 10:00', 70);   -- 1 120 NPL of 1 000
SELECT results_eq($$SELECT submit, verdict, assoc, assoc_reason FROM pg_temp.story('2024-06-10') WHERE account = 'p_regbank'$$,
                  $$VALUES ('negative_balance', 'negative_balance', 'blocked', 'negative_balance')$$,
                  '10 June: p_regbank negative and used up: the bank''s reason');
SELECT deposit('p_regbank', '2024-04-01', 500);
SELECT results_eq($$SELECT submit, verdict, assoc, assoc_reason FROM pg_temp.story('2024-06-11') WHERE account = 'p_regbank'$$,
                  $$VALUES ('allocation_exhausted', 'allocation_exhausted', 'blocked', 'allocation_exhausted')$$,
                  '11 June, after a deposit: GENCI''s reason');

-- A policy-free account (p_free, '{}' by hand) with a negative balance: accepted, normal; and
-- p_nowin, whose window would be blocked (720 core-hours in June > 6 x 100), bound by the bank only.
SELECT deposit('p_free', '2024-04-01', 10);
SELECT pg_temp.job('lb', 'f1', 'p_free', 'ann', '2024-06-03 10:00', 2);      -- 32 NPL of 10
SELECT pg_temp.job('lw', 'n1', 'p_nowin', 'bob', '2024-06-03 10:00', 45);    -- 720 core-hours
SELECT results_eq($$SELECT account, submit, verdict, assoc FROM pg_temp.story('2024-06-12')
                    WHERE account IN ('p_free', 'p_nowin', 's_staff')$$,
                  $$VALUES ('p_free', 'ok', 'ok', 'normal'), ('p_nowin', 'ok', 'ok', 'normal'), ('s_staff', 'ok', 'ok', 'normal')$$,
                  '12 June: p_free (negative), p_nowin (window over) and s_staff (no deposit) accepted, normal');
SELECT lives_ok($$SELECT notify_scan('2024-06-12')$$, 'the scan of 12 June');
SELECT is((SELECT array_agg(topic || ': ' || subject ORDER BY message_id) FROM outbox WHERE account IN ('p_free', 'p_nowin')),
          NULL, 'nobody is told that jobs of p_free or p_nowin are refused, or that p_nowin is blocked or low');

-- ann makes p_bank her default project in June; it expires at midnight on 1 July (no Q3
-- allocation). From that day her jobs without -A go to her personal account (§4), before
-- open_quarter() runs (pg_cron at 12:05 UTC, 14:05 in Berlin) as after.
SELECT set_default_project('ann', 'p_bank');
SELECT is((check_submit('ann', NULL, '2024-06-30')).reason, 'negative_balance', '30 June: her default project, still negative');
SELECT is(check_submit('ann', NULL, '2024-07-01'), ROW(true, 'ann', NULL, NULL)::submit_decision,
          '1 July, before the quarter start''s run: her personal account, as the run will record');

-- 1 July: a new window period; p_bank has no allocation from Q3 on.
CALL open_quarter('2024-07-01');
SELECT is(check_submit('ann', NULL, '2024-07-01'), ROW(true, 'ann', NULL, NULL)::submit_decision,
          'and after it');
SELECT results_eq($$SELECT account, submit, assoc FROM pg_temp.story('2024-07-01') WHERE account IN ('p_bank', 'p_wq')$$,
                  $$VALUES ('p_bank', 'account_expired', 'blocked'), ('p_wq', 'ok', 'normal')$$,
                  '1 July: p_bank expired; p_wq in its new period normal');
SELECT results_eq($$SELECT jobid, reason FROM recheck_queued('2024-07-01')$$, $$VALUES ('q5', NULL)$$,
                  'p_wq''s job released');
SELECT lives_ok($$SELECT notify_scan('2024-07-01')$$, 'the scan of 1 July');
SELECT results_eq($$SELECT figures ->> 'at', figures ->> 'state' FROM outbox WHERE topic = 'quota_state' AND account = 'p_wq'
                    ORDER BY message_id$$,
                  $$VALUES ('2024-02-20', 'low_priority'), ('2024-03-10', 'blocked'), ('2024-04-01', 'low_priority'),
                           ('2024-04-10', 'blocked'), ('2024-07-01', 'normal')$$,
                  'p_wq''s members were told each change of the window, the day it changed');
SELECT matches((SELECT body FROM outbox WHERE topic = 'quota_state' AND account = 'p_wq' ORDER BY message_id DESC LIMIT 1),
               'The accounting period began on 2024-07-01: jobs run with normal priority',
               'the last one: the new period');
-- (q1's hold of 1 April told ann nothing new here: in one transaction, now() is the same, and so
-- is the key of each hold of a job; a site's rechecks are transactions of their own)
SELECT is((SELECT hold_reason FROM pending_job WHERE jobid = 'q1'), (check_submit('ann', 'p_bank', '2024-07-01')).message,
          'q1 stays held, with the new reason');
SELECT is((SELECT figures ->> 'reason' FROM outbox WHERE topic = 'job_held' AND figures ->> 'jobid' = 'q1'
           ORDER BY message_id DESC LIMIT 1),
          (check_submit('ann', 'p_bank', '2024-07-01')).message,
          'and ann is told the new reason (her last message said: ask for a transfer or a deposit)');
SELECT is((SELECT count(*) FROM outbox WHERE topic = 'job_held' AND figures ->> 'jobid' = 'q4'), 1::bigint,
          'eve, whose job''s reason did not change, is not told again');
SELECT pg_temp.sync();

-- 15 August: staff book 500 NPL for p_bank in Q4: inactive until then, its job held still
-- (the day its allocation begins is the owner's to read, not the comment's).
SELECT deposit('p_bank', '2024-10-01', 500);
SELECT is(check_submit('ann', 'p_bank', '2024-08-15'),
          ROW(false, 'p_bank', 'account_inactive', 'account p_bank has no allocation for this quarter; its allocation '
              'begins on 2024-10-01: ask staff to move allocation into this quarter, or submit with another account')::submit_decision,
          '15 August: p_bank inactive, the message names the day its allocation begins');
SELECT results_eq($$SELECT state, reason FROM slurm_associations('2024-08-15') WHERE account = 'p_bank'$$,
                  $$VALUES ('blocked', 'account_inactive')$$, 'its association blocked');
SELECT is_empty($$SELECT * FROM recheck_queued('2024-08-15')$$, 'recheck changes no hold');
SELECT results_eq($$SELECT hold_reason, hold_comment FROM pending_job WHERE jobid = 'q1'$$,
                  $$SELECT (check_submit('ann', 'p_bank', '2024-08-15')).message,
                           'account p_bank has no allocation for this quarter: ask staff to move allocation into this '
                           'quarter, or submit with another account'$$,
                  'q1 held for the new reason; its comment without the day');

-- dan, a member of no project: expired in Q4, deleted in Q1 2025.
CALL open_quarter('2024-10-01');
SELECT results_eq($$SELECT jobid, reason FROM recheck_queued('2024-10-01')$$,
                  $$VALUES ('q1', NULL), ('q2', 'account_expired')$$,
                  '1 October: q1 released (p_bank active); q2, eve''s job without -A, held: her personal account expired');
SELECT results_eq($$SELECT account, submit, assoc FROM pg_temp.story('2024-10-01') WHERE account IN ('eve', 'p_bank')$$,
                  $$VALUES ('eve', 'account_expired', 'blocked'), ('p_bank', 'ok', 'normal')$$, 'as the associations say');
SELECT is((check_submit('dan', NULL, '2024-10-01')).reason, 'account_expired', '1 October: dan''s account expired');
CALL open_quarter('2025-01-01');
SELECT is((check_submit('dan', NULL, '2024-12-31')).reason, 'account_expired', '31 December: still expired');
SELECT is(check_submit('dan', NULL, '2025-01-01'),
          ROW(false, 'dan', 'account_deleted', 'account dan has been deleted and cannot be used again')::submit_decision,
          '1 January 2025: deleted');
SELECT results_eq($$SELECT state, reason FROM slurm_associations('2025-01-01') WHERE account = 'dan'$$,
                  $$VALUES ('blocked', 'account_deleted')$$, 'its association blocked');
SELECT results_eq($$SELECT topic FROM outbox WHERE account = 'dan' ORDER BY message_id$$,
                  $$VALUES ('account_expired'), ('account_deleted')$$, 'dan is told of both');
SELECT is((check_submit('cid', 'p_reg', '2025-01-01')).reason, 'no_allocation', 'p_reg: no grant valid in 2025');

-- GENCI on two machines: p_reg's 1 600 hours on lg used up in August; a grant of 100 on lg2
-- from 1 September. check_submit() does not know the job's machine: accepted while one has hours.
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('lg2', 'p', 'cpu=16', 'cpu=1', 1, 'hours');
SELECT pg_temp.job('lg', 'g3', 'p_reg', 'cid', '2024-08-05 10:00', 25);     -- 400 hours: 1 600 of 1 600
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('p_reg', 'grant', 100, 'hours', 'lg2', '2024-09-01', '2024-12-31');
SELECT results_eq($$SELECT submit, assoc, assoc_reason FROM pg_temp.story('2024-08-31') WHERE account = 'p_reg'$$,
                  $$VALUES ('allocation_exhausted', 'blocked', 'allocation_exhausted')$$,
                  '31 August: lg used up, lg2''s grant not valid yet');
SELECT results_eq($$SELECT submit, assoc FROM pg_temp.story('2024-09-01') WHERE account = 'p_reg'$$,
                  $$VALUES ('ok', 'normal')$$, '1 September: lg2 has hours');

-- Today is the site's day whatever the session's time zone: the defaults of check_submit()
-- (the job_submit/lua script passes no day), recheck_queued() and the view the sync reads.
SET LOCAL TimeZone = 'Pacific/Kiritimati';
SELECT is(site_today(), (now() AT TIME ZONE 'Europe/Berlin')::date, 'site_today() is Berlin''s day in a UTC+14 session');
SELECT results_eq($$SELECT * FROM slurm_association$$,
                  $$SELECT * FROM slurm_associations((now() AT TIME ZONE 'Europe/Berlin')::date)$$,
                  'the view slurm_association is slurm_associations() of Berlin''s day');
SELECT is(check_submit('cid', 'p_reg'), check_submit('cid', 'p_reg', (now() AT TIME ZONE 'Europe/Berlin')::date),
          'check_submit() without a day checks Berlin''s');
RESET TimeZone;

SELECT * FROM finish();
ROLLBACK;
