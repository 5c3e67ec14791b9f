-- Statements and portal pages (issue 16): bad input is refused with a named SQLSTATE, a
-- portal user gets their own accounts only, and the figures agree with the reports.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(44);

CALL setup_roles();
CREATE ROLE s_alice LOGIN IN ROLE hpcacct_portal;
CREATE ROLE s_bob LOGIN IN ROLE hpcacct_portal;
INSERT INTO setting VALUES ('timezone', 'UTC') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO hpc_user (username) VALUES ('s_alice'), ('s_bob');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('s_c', 'p', 'cpu=16', 'cpu=1', 1, 'NPL');
INSERT INTO account (name) VALUES ('s_a'), ('s_b');
INSERT INTO membership VALUES ('s_a', 's_alice', 'admin'), ('s_b', 's_bob', 'admin'), ('s_a', 's_bob', 'member');
SELECT deposit('s_a', '2024-04-01', 1000), deposit('s_b', '2024-04-01', 1000);
SELECT add_quota_period('s_a', '2024-01-01', '2024-06-30', 100, 's_c', 'NPL');
INSERT INTO regulation_machine (machine, monthly_threshold) VALUES ('s_c', 100);
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('s_a', 'grant', 1200, 'NPL', 's_c', '2024-01-01', '2024-12-31');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('s_g', 'k20', 'gres/gpu=4', 'gres/gpu=1', 2, 'NPL');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
VALUES ('s_g', 'g1', 's_a', 's_alice', 'k20', '2024-04-10 00:00+00', '2024-04-10 03:00+00', 'gres/gpu=2', 'COMPLETED');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    ('s_c', 'j1', 's_a', 's_alice', 'p', '2024-05-10 00:00+00', '2024-05-10 10:00+00', 'cpu=4', 'COMPLETED'),
    ('s_c', 'j2', 's_a', 's_bob', 'p', '2024-05-31 22:00+00', '2024-06-01 02:00+00', 'cpu=8', 'COMPLETED'),
    ('s_c', 'j3', 's_b', 's_bob', 'p', '2024-05-11 00:00+00', '2024-05-11 10:00+00', 'cpu=2', 'COMPLETED');

SELECT throws_ok($$SELECT hpcacct.statement_html('nobody', '2024-05-01')$$, '42704', NULL, 'an unknown account');
SELECT throws_ok($$SELECT hpcacct.account_month('s_a', NULL)$$, '22004', NULL, 'a NULL month');
SELECT throws_ok($$SELECT hpcacct.account_month(NULL, '2024-05-01')$$, '22004', NULL, 'a NULL account');
SELECT throws_ok($$SELECT hpcacct.account_month('s_a', 'infinity')$$, '22008', NULL, 'an infinite month');
SELECT throws_ok($$SELECT hpcacct.account_month('s_a', '2999-01-01')$$, '22023', NULL, 'a month that has not begun');
SELECT throws_ok($$SELECT hpcacct.my_accounts(NULL)$$, '22004', NULL, 'my_accounts(NULL)');
SELECT throws_ok($$SELECT hpcacct_internal.svg_chart('t', 'u', '{}', '[]')$$, '22023', NULL, 'a chart without labels');

CREATE TEMP TABLE m AS SELECT account_month('s_a', '2024-05-20') AS d;
SELECT is((SELECT d -> 'charges' -> 'total' ->> 'NPL' FROM m)::numeric, 56::numeric,
          'May''s charges: 40 + the May half of 4 hours on 8 cores (16)');
SELECT is((SELECT sum((x ->> 'amount')::numeric) FROM m, jsonb_array_elements(d -> 'charges' -> 'by_submitter') x),
          56::numeric, 'by submitter adds up to the total');
SELECT is((SELECT x ->> 'amount' FROM m, jsonb_array_elements(d -> 'charges' -> 'by_submitter') x
           WHERE x ->> 'submitter' = 's_bob')::numeric, 16::numeric, 's_bob''s part is the May half of his job');
SELECT is((SELECT x ->> 'usage' || ' / ' || (x ->> 'equivalent_hours') FROM m, jsonb_array_elements(d -> 'usage_by_resource') x
           WHERE x ->> 'cluster' = 's_g'), '12.000000 / 6.000000',
          'usage by resource: 6 GPU-hours at weight 2 are 12, shown beside the unweighted 6');
-- balance() is the whole quarter's: the June half of j2 (16) is not spent at the end of May
SELECT is((SELECT (d -> 'bank' ->> 'balance')::numeric FROM m), balance('s_a', '2024-05-31') + 16,
          'the bank balance is the one at the end of May: balance() without the June half of j2');
SELECT is((SELECT (d -> 'bank' ->> 'balance')::numeric FROM m), (SELECT (d -> 'bank' -> 'days' -> -1 ->> 1)::numeric FROM m),
          'and the chart''s last day shows it');
SELECT is((account_month('s_a', '2024-06-01') -> 'bank' ->> 'balance')::numeric, balance('s_a', '2024-06-30'),
          'at the end of the quarter it is balance()');
SELECT is((SELECT (x -> 'bank' ->> 'balance')::numeric FROM jsonb_array_elements(my_accounts('2024-05-31') -> 'accounts') x
           WHERE x ->> 'account' = 's_a'), 932::numeric, 'my_accounts() on 31 May: the balance then, as the statement''s');
-- this month's charges are those up to the end of the day, as the balance beside them
SELECT is((SELECT x -> 'this_month' ->> 'NPL' FROM jsonb_array_elements(my_accounts('2024-05-10') -> 'accounts') x
           WHERE x ->> 'account' = 's_a')::numeric, 40::numeric, 'my_accounts() on 10 May: j1''s 40, not j2 of 31 May');
SELECT is((SELECT (x -> 'bank' ->> 'balance')::numeric FROM jsonb_array_elements(my_accounts('2024-05-10') -> 'accounts') x
           WHERE x ->> 'account' = 's_a'), 948::numeric, 'and the balance on 10 May has spent the same 40 (and April''s 12)');
SELECT is((SELECT x -> 'this_month' ->> 'NPL' FROM jsonb_array_elements(my_accounts('2024-05-31') -> 'accounts') x
           WHERE x ->> 'account' = 's_a')::numeric, 56::numeric, 'my_accounts() on 31 May: the month''s 56, as the statement''s total');
SELECT is((SELECT (d -> 'window_quota' -> -1 ->> 'consumable')::float8 FROM m),
          (SELECT consumable FROM window_quota_usage('s_a', '2024-05-31')), 'the window quota is window_quota_usage()');
SELECT is((SELECT (d -> 'regulation' -> 0 ->> 'alloc')::numeric FROM m),
          (SELECT alloc FROM allocation_status('s_a', 's_c', '2024-05-31')), 'the GENCI figures are allocation_status()');
SELECT is((SELECT jsonb_array_length(d -> 'regulation' -> 0 -> 'days') FROM m), 152, 'a point per day from 1 January to 31 May');
SELECT is((SELECT d -> 'regulation' -> 0 -> 'days' -> -1 ->> 3 FROM m)::numeric, 56::numeric,
          'consumption at the end of May on the chart');

-- raw core-hours beside the charged units (Compute Canada's raw core-years)
SAVEPOINT core_hours;
SELECT is((SELECT core_hours FROM ledger WHERE jobid = 'j1'), 40::numeric, 'a charge keeps its raw core-hours: 4 cores for 10 hours');
CREATE TEMP VIEW usage_s_c AS SELECT x FROM jsonb_array_elements(account_month('s_a', '2024-05-20') -> 'usage_by_resource') x
                              WHERE x ->> 'cluster' = 's_c' AND x ->> 'partition' = 'p';
SELECT is((SELECT (x ->> 'core_hours') || ' ' || (x ->> 'core_years') || ' ' || (x ->> 'usage_years') FROM usage_s_c),
          '56.000000 0.006393 0.006393', 'the year''s raw core-hours and core-years (40 + the May half of 32), beside the unit-years');
SELECT is((SELECT x ->> 'core_hours' || ' ' || (x ->> 'equivalent_hours') FROM m, jsonb_array_elements(d -> 'usage_by_resource') x
           WHERE x ->> 'cluster' = 's_g'), '0.000000 6.000000', 'a GPU job without cores: 0 raw core-hours, 6 GPU-hours');
UPDATE job SET alloctres = 'cpu=6' WHERE jobid = 'j1';
SELECT is((SELECT sum(core_hours) || ' in ' || count(*) FROM ledger WHERE jobid = 'j1'), '60.000000 in 3',
          'a changed job: the reversal takes its core-hours back, the new charge books 6 x 10');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('s_c', 'free', 'cpu=16', 'cpu=1', 0, 'NPL');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
VALUES ('s_c', 'f1', 's_a', 's_alice', 'free', '2024-05-10 00:00+00', '2024-05-10 05:00+00', 'cpu=2', 'COMPLETED');
DELETE FROM job WHERE jobid = 'f1';
SELECT is((SELECT sum(core_hours) || ' ' || sum(amount) || ' in ' || count(*) FROM ledger WHERE jobid = 'f1'),
          '0.000000 0.000000 in 2', 'a deleted job of a free partition (rate 0): its 10 core-hours are taken back');
SELECT rerate((SELECT resource_id FROM resource WHERE cluster = 's_c' AND partition = 'p'), 2, '2024-05-01');
SELECT is((SELECT sum(core_hours) || ' ' || sum(amount) FROM ledger WHERE jobid = 'j1'), '60.000000 120.000000',
          're-rated at twice the rate: the charge doubles, the raw core-hours do not');
SELECT is((SELECT x ->> 'core_hours' FROM usage_s_c), '76.000000', 'the statement''s figures follow');
INSERT INTO ledger (account, kind, amount, unit, resource_id, cluster, jobid, submitter, job_start, job_end)
SELECT 's_a', 'charge', 5, 'NPL', resource_id, 's_c', 'old1', 's_alice', '2024-05-12 00:00+00', '2024-05-12 01:00+00'
FROM resource WHERE cluster = 's_c' AND partition = 'p' AND valid @> timestamptz '2024-05-12 00:00+00';
SELECT is((SELECT x ->> 'core_years' FROM usage_s_c), NULL, 'a charge without its cores (booked before 0.4): core-years unknown');
SELECT ok(statement_html('s_a', '2024-05-01') ~ '<th>core-years \(raw\)</th>.*<td class="n">n/a</td>',
          'the statement says n/a under core-years (raw)');
INSERT INTO ledger (account, kind, amount, unit, resource_id, cluster, jobid, submitter, job_start, job_end)
SELECT 's_a', 'charge', -5, 'NPL', resource_id, 's_c', 'old1', 's_alice', '2024-05-12 00:00+00', '2024-05-12 01:00+00'
FROM resource WHERE cluster = 's_c' AND partition = 'p' AND valid @> timestamptz '2024-05-12 00:00+00';
SELECT is((SELECT x ->> 'core_hours' FROM usage_s_c), '76.000000', 'once that charge is reversed, the core-hours are known again');
ROLLBACK TO SAVEPOINT core_hours;

-- figures of any size are printed, not masked with '#' (a bank of 2 000 000 000 core-seconds)
SAVEPOINT large;
SELECT deposit('s_b', '2024-04-01', 1999999000);
SELECT ok(statement_html('s_b', '2024-05-01') ~ '<td class="n">2,000,000,000.00 NPL</td><td class="n">1,999,999,980.00 NPL</td>',
          'a bank allocation and balance of 2 000 000 000 are printed in full');
ROLLBACK TO SAVEPOINT large;

-- the projection counts wall-clock time, as usage_by_resource() does: in Berlin, April 2024
-- has had 121 days less the hour of the DST change (12 x 8 784 / 2 903, not 12 x 366 / 121)
SAVEPOINT berlin;
UPDATE setting SET value = 'Europe/Berlin' WHERE name = 'timezone';
SELECT is((SELECT (x ->> 'projected_usage')::numeric FROM jsonb_array_elements(account_month('s_a', '2024-04-01') -> 'usage_by_resource') x
           WHERE x ->> 'cluster' = 's_g'),
          (SELECT round(projected_usage, 6) FROM usage_by_resource(2024, '2024-05-01 00:00 Europe/Berlin') WHERE cluster = 's_g'),
          'Europe/Berlin: the April statement''s projection is usage_by_resource()''s at the end of April (36.310024)');
ROLLBACK TO SAVEPOINT berlin;

SELECT is((SELECT array_agg(a ORDER BY a) FROM statement_accounts('2024-05-01') a WHERE a LIKE 's\_%'), ARRAY['s_a', 's_b'],
          'the statements of May: the accounts with charges or allocations in it');
SELECT is((SELECT array_agg(a ORDER BY a) FROM statement_accounts('2024-02-01') a WHERE a LIKE 's\_%'), ARRAY['s_a'],
          'February: the account with a grant and a quota, not the one without anything');
SELECT throws_ok($$SELECT hpcacct.statement_accounts('2999-01-01')$$, '22023', NULL, 'statement_accounts of a month to come');

SET SESSION AUTHORIZATION s_alice;
SELECT is((SELECT array_agg(a) FROM hpcacct.statement_accounts('2024-05-01') a), ARRAY['s_a'],
          's_alice''s statements: her account only');
SELECT is((SELECT array_agg(x ->> 'account') FROM jsonb_array_elements(hpcacct.my_accounts('2024-05-20') -> 'accounts') x),
          ARRAY['s_a'], 's_alice''s first page lists her account only');
SELECT is((SELECT x ->> 'role' FROM jsonb_array_elements(hpcacct.my_accounts('2024-05-20') -> 'accounts') x), 'admin',
          'with her role');
SELECT throws_ok($$SELECT hpcacct.account_month('s_b', '2024-05-01')$$, '42704', NULL,
                 's_alice cannot read s_b''s month: it is unknown to her');
SELECT ok(hpcacct.statement_html('s_a', '2024-05-01') ~ 'Statement of account <bdi>s_a</bdi>', 's_alice gets her statement');
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION s_bob;
SELECT is((SELECT array_agg(x ->> 'account' ORDER BY x ->> 'account')
           FROM jsonb_array_elements(hpcacct.my_accounts('2024-05-20') -> 'accounts') x),
          ARRAY['s_a', 's_b'], 's_bob sees both his accounts');
SELECT is((SELECT hpcacct.account_month('s_a', '2024-05-01') -> 'charges' -> 'total' ->> 'NPL')::numeric, 56::numeric,
          'and, as a member, all of s_a''s charges');
RESET SESSION AUTHORIZATION;

SELECT * FROM finish();
ROLLBACK;
