-- The quarterly bank (HLRN, rules §4): deposits per quarter, balances, transfers, the
-- quarter-start run and submit checks.
SET search_path = public, hpcacct;
\set SHOW_CONTEXT never
INSERT INTO setting VALUES ('timezone', 'Europe/Berlin') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;

INSERT INTO resource (cluster, partition, node, bundle, rate, unit, exclusive)
VALUES ('hlrn3', 'mpp1', 'cpu=24', 'cpu=1', 1.0 / 12, 'NPL', true);

-- Users get a personal account named after them with 2 500 NPL for the quarter they are
-- created in and the two following ones.
SELECT add_user('ana', '2024-01-15'), add_user('ben', '2024-01-20'), add_user('cleo', '2024-02-01');
SELECT name, kind FROM account WHERE name IN ('ana', 'ben', 'cleo') ORDER BY name;
SELECT account, quarter, deposits, balance, state FROM quarter_balances
WHERE account = 'cleo' ORDER BY quarter;

-- A project: ana administers it and adds ben; ben is not an administrator.
INSERT INTO account (name, kind) VALUES ('nip00001', 'project');
SELECT add_member('nip00001', 'ana', 'admin');
SELECT add_member('nip00001', 'ben', 'member', by_user => 'ana');
SELECT add_member('nip00001', 'cleo', 'member', by_user => 'ben');          -- refused
SELECT remove_member('nip00001', 'ana');                                   -- last admin: refused
SELECT account, username, role FROM membership WHERE account = 'nip00001' ORDER BY username;
SELECT deposit('nip00001', '2024-01-01', 10000) > 0 AS deposited_q1,
       deposit('nip00001', '2024-04-01', 10000) > 0 AS deposited_q2;
SELECT set_default_project('ben', 'nip00001');
SELECT set_default_project('ana', 'nip00001');
SELECT set_default_project('cleo', 'nip00001');                             -- not a member

-- A job from 31 March 20:00 to 1 April 02:00 (Berlin) on one XC30 node: 6 h x 2 NPL = 12 NPL,
-- 8 in the first quarter and 4 in the second.
INSERT INTO job VALUES ('hlrn3', '1', 'nip00001', 'ben', 'mpp1', NULL,
                        '2024-03-31 20:00+02', '2024-04-01 02:00+02', 'cpu=24,node=1', 'COMPLETED');
SELECT quarter, round(amount, 6) AS amount FROM bank_entry WHERE kind = 'charge' AND account = 'nip00001' ORDER BY quarter;
-- Credits do not carry over: the first quarter's 9 992 NPL left are not in the second.
SELECT account, quarter, deposits, charges, transfers, refunds, balance, state
FROM quarter_balances WHERE account = 'nip00001' ORDER BY quarter;
SELECT balance('nip00001', '2024-02-15') AS q1, balance('nip00001', '2024-05-15') AS q2;

-- Staff move allocation between quarters and accounts; a refund gives credit back.
SELECT transfer('nip00001', '2024-04-01', 'nip00001', '2024-07-01', 3000, 'moved to Q3 on request');
SELECT transfer('nip00001', '2024-04-01', 'ana', '2024-04-01', 500);
SELECT refund('nip00001', '2024-04-01', 4, 'node failure') > 0 AS refunded;
SELECT account, quarter, deposits, charges, transfers, refunds, balance, state
FROM quarter_balances WHERE account IN ('nip00001', 'ana') ORDER BY account, quarter;

-- The aggregate directly, and its bad input.
SELECT (quarter_balance(kind, quarter, amount, '2024-05-20')).*
FROM bank_entry WHERE account = 'nip00001';
SELECT quarter_balance('grant', '2024-01-01', 1, '2024-01-01');
SELECT quarter_balance('deposit', NULL, 1, '2024-01-01');
SELECT quarter_balance('deposit', '2024-01-01', 'NaN', '2024-01-01');
SELECT quarter_balance(kind, quarter, amount, day)
FROM (VALUES ('deposit', date '2024-01-01', 1.0, date '2024-01-01'),
             ('deposit', date '2024-04-01', 1.0, date '2024-04-01')) AS v(kind, quarter, amount, day);
SELECT quarter_balance('deposit', 'infinity', 1, '2024-01-01');

-- Bad bank operations write nothing.
SELECT count(*) AS ledger_rows FROM ledger \gset
SELECT deposit('nobody', '2024-01-01', 100);
SELECT deposit('nip00001', '2024-01-01', -100);
SELECT deposit('nip00001', '2024-01-01', 'NaN');
SELECT deposit('nip00001', 'infinity', 100);
SELECT transfer('nip00001', '2024-04-01', 'nip00001', '2024-04-15', 10);
SELECT count(*) = :ledger_rows AS nothing_written FROM ledger;

-- Submit checks in the second quarter.
SELECT u.username, u.account, c.*
FROM (VALUES ('ana', NULL), ('ben', NULL), ('ben', 'ben'), ('cleo', 'nip00001'), ('cleo', 'nosuch'),
             ('dora', NULL)) AS u(username, account)
CROSS JOIN LATERAL check_submit(u.username, u.account, '2024-05-02') c;

-- A large job drives the project negative: submission is refused, queued jobs are held.
INSERT INTO job VALUES ('hlrn3', '2', 'nip00001', 'ana', 'mpp1', NULL,
                        '2024-05-01 00:00+02', '2024-05-11 00:00+02', 'cpu=24,node=100', 'COMPLETED');
SELECT balance('nip00001', '2024-05-15');
SELECT * FROM check_submit('ben', NULL, '2024-05-15');
INSERT INTO pending_job (cluster, jobid, username, account) VALUES
    ('hlrn3', '10', 'ben', NULL), ('hlrn3', '11', 'ben', 'ben'), ('hlrn3', '12', 'cleo', 'nip00001');
SELECT * FROM recheck_queued('2024-05-15');
SELECT cluster, jobid, held, hold_reason FROM pending_job ORDER BY jobid;

-- Quarter starts. ben's allotment was doubled on request (more than double is refused).
UPDATE account SET personal_allotment = 5000 WHERE name = 'ben';
UPDATE account SET personal_allotment = 5001 WHERE name = 'ana';
-- Q3 2024: the project is active (Q3 got the transfer), so ana and ben are topped up for
-- Q3, Q4 and Q1 2025: ana to 2 500 (Q3 was deposited at creation: nothing to add there),
-- ben to 5 000 (2 500 more in Q3). cleo is in no active project and is not touched.
CALL open_quarter('2024-07-01');
SELECT quarter, account, action, target_quarter, amount, username FROM quarter_log
WHERE account IN ('ana', 'ben', 'cleo', 'nip00001') ORDER BY 1, 2, 3, 4;
-- A second run changes nothing.
SELECT count(*) AS ledger_rows FROM ledger \gset
CALL open_quarter('2024-07-01');
SELECT count(*) = :ledger_rows AS second_run_changed_nothing FROM ledger;
SELECT account, quarter, deposits, balance FROM quarter_balances
WHERE account IN ('ana', 'ben') AND quarter >= '2024-07-01' ORDER BY account, quarter;
CALL open_quarter('2024-10-01');
-- Q4: the project has no allocation for Q4 or later: it expired, ben's default is reset and
-- nobody is topped up; cleo (created Q1, allotment Q1-Q3) expires.
SELECT quarter, account, action, target_quarter, amount, username FROM quarter_log
WHERE quarter = '2024-10-01' AND account IN ('ana', 'ben', 'cleo', 'nip00001') ORDER BY 1, 2, 3, 4;
SELECT username, default_account FROM hpc_user WHERE username IN ('ana', 'ben', 'cleo') ORDER BY username;
SELECT * FROM check_submit('ben', NULL, '2024-10-02');
-- Q1 2025: cleo, expired in the previous quarter, is deleted for good; ana and ben still
-- hold the allotments deposited in Q3 and stay.
CALL open_quarter('2025-01-01');
CALL open_quarter('2025-04-01');
SELECT quarter, account, action FROM quarter_log
WHERE quarter >= '2025-01-01' AND account IN ('ana', 'ben', 'cleo', 'nip00001') ORDER BY 1, 2, 3;
SELECT name, deleted_in FROM account WHERE name IN ('ana', 'ben', 'cleo') ORDER BY name;
SELECT * FROM check_submit('cleo', NULL, '2025-04-02');
SELECT deposit('cleo', '2025-04-01', 100);                                  -- deleted: refused
-- The project is reactivated by a new allocation: inactive until the allocation's quarter
-- (submissions refused, no top-ups for its members), active in it, expired after.
SELECT deposit('nip00001', '2025-07-01', 20000) > 0 AS deposited;
SELECT account_state('nip00001', '2025-04-02'), account_state('nip00001', '2025-07-02'),
       account_state('nip00001', '2025-10-01');

-- A blocked sliding-window quota refuses submission too.
INSERT INTO account (name, kind) VALUES ('rwth0001', 'project');
SELECT add_member('rwth0001', 'ana');
SELECT deposit('rwth0001', '2025-07-01', 100000) > 0 AS deposited;
SELECT add_quota_period('rwth0001', '2025-07-01', '2025-12-31', 10, NULL, 'NPL');
INSERT INTO job VALUES ('hlrn3', '3', 'rwth0001', 'ana', 'mpp1', NULL,
                        '2025-07-02 00:00+02', '2025-07-04 00:00+02', 'cpu=24,node=1', 'COMPLETED');
-- 96 NPL in July > 6 x 10: blocked, although the bank balance is positive.
SELECT state, monthly, consumed_current FROM window_quota_usage('rwth0001', '2025-07-10');
SELECT * FROM check_submit('ana', 'rwth0001', '2025-07-10');
