-- The quarterly bank's contract: SQLSTATEs, the aggregate in a parallel plan, open_quarter
-- idempotent and schedulable with pg_cron.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(41);

INSERT INTO setting VALUES ('timezone', 'UTC');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit)
VALUES ('c', 'p', 'cpu=16', 'cpu=1', 1, 'NPL');
SELECT add_user('u1', '2024-01-10');
INSERT INTO account (name) VALUES ('proj');
SELECT add_member('proj', 'u1', 'admin');

SELECT throws_ok($$SELECT hpcacct.deposit('nobody', '2024-01-01', 1)$$, '42704', NULL, 'deposit to an unknown account');
SELECT throws_ok($$SELECT hpcacct.deposit('proj', '2024-01-01', -1)$$, '22003', NULL, 'negative deposit');
SELECT throws_ok($$SELECT hpcacct.deposit('proj', '2024-01-01', 'NaN')$$, '22003', NULL, 'NaN deposit');
SELECT throws_ok($$SELECT hpcacct.deposit('proj', '2024-01-01', 0.0000004)$$, '22003',
                 'amount must be a positive number below 10^14 at the ledger''s 6 decimals, not 0.0000004',
                 'a deposit that rounds to 0 at 6 decimals is refused as an amount, not by a ledger constraint');
SELECT throws_ok($$SELECT hpcacct.transfer('proj', '2024-01-01', 'proj', '2024-04-01', 0.0000001)$$, '22003', NULL,
                 'a transfer that rounds to 0 too');
SELECT throws_ok($$SELECT hpcacct.deposit('proj', NULL, 1)$$, '22004', NULL, 'deposit without a quarter');
SELECT throws_ok($$SELECT hpcacct.add_member('proj', 'ghost')$$, '42704', NULL, 'unknown user');
SELECT throws_ok($$SELECT hpcacct.add_member('proj', 'u1', 'member', 'ghost')$$, '42501', NULL,
                 'only administrators add members');
SELECT throws_ok($$SELECT hpcacct.remove_member('proj', 'u1')$$, 'HA003', NULL, 'the last administrator stays');
SELECT throws_ok($$SELECT hpcacct.add_member('proj', 'u1', 'member')$$, 'HA003', NULL,
                 'nor is the last administrator made a plain member by add_member()');
SELECT is((SELECT role FROM hpcacct.membership WHERE account = 'proj' AND username = 'u1'), 'admin',
          'u1 still administers proj');
-- a plain member leaves an account that has no administrator (staff set it up without one)
SAVEPOINT no_admin;
INSERT INTO account (name) VALUES ('proj_noadmin');
INSERT INTO membership VALUES ('proj_noadmin', 'u1', 'member');
SELECT lives_ok($$SELECT hpcacct.remove_member('proj_noadmin', 'u1')$$,
                'a plain member is not the last administrator: removed from an account without one');
ROLLBACK TO SAVEPOINT no_admin;
SELECT throws_ok($$UPDATE hpcacct.account SET personal_allotment = 6000 WHERE name = 'u1'$$, '22003', NULL,
                 'allotment above double the default');
SELECT throws_ok($$INSERT INTO hpcacct.setting VALUES ('personal_allotment', '-5')$$, '22023', NULL,
                 'a negative default allotment');
SELECT throws_ok($$INSERT INTO hpcacct.setting VALUES ('colour', 'blue')$$, '42704', NULL, 'an unknown setting');
SELECT throws_ok($$INSERT INTO hpcacct.setting VALUES ('bank_unit', '')$$, '22023', NULL,
                 'an empty bank unit (no deposit or charge could be in it)');
SELECT throws_ok($$SELECT hpcacct.quarter_balance('deposit', '2024-01-01', 1, NULL)$$, '22004', NULL,
                 'NULL at in the aggregate');
SELECT throws_ok($$SELECT hpcacct.quarter_balance('bonus', '2024-01-01', 1, '2024-01-01')$$, '22023', NULL,
                 'an unknown entry kind');

-- Exact balances: awkward amounts (tenths that float8 cannot hold, 16 significant digits, a
-- millionth, a charge split pro rata across a month) give the ledger's own digits, in
-- balance() and quarter_balances alike.
INSERT INTO account (name) VALUES ('odd');
INSERT INTO ledger (account, kind, amount, unit, valid_from, valid_until) VALUES
    ('odd', 'deposit', 0.1, 'NPL', '2024-10-01', '2024-12-31'),
    ('odd', 'deposit', 0.2, 'NPL', '2024-10-01', '2024-12-31'),
    ('odd', 'deposit', 9999999999.999999, 'NPL', '2024-10-01', '2024-12-31'),
    ('odd', 'transfer', -0.000001, 'NPL', '2024-11-15', '2024-12-31'),
    ('odd', 'refund', 0.000003, 'NPL', '2024-12-31', '2024-12-31');
INSERT INTO job VALUES ('c', 'odd1', 'odd', 'u1', 'p', NULL, '2024-10-31 23:59:53+00', '2024-11-01 00:00:06+00',
                        'cpu=1', 'COMPLETED');
SELECT is(balance('odd', '2024-11-20')::text,
          (sum(amount) FILTER (WHERE kind <> 'charge') - round(sum(amount) FILTER (WHERE kind = 'charge'), 6))::text,
          'balance() is the ledger''s exact sum (10000000000.29639 less the charge)')
FROM ledger WHERE account = 'odd';
SELECT is((SELECT balance::text FROM quarter_balances WHERE account = 'odd' AND quarter = '2024-10-01'),
          balance('odd', '2024-10-01')::text, 'quarter_balances gives the same digits');
SELECT is((SELECT (quarter_balance(kind, day, amount, '2024-10-01')).charges FROM bank_ledger('2024-10-01', '2025-01-01')
           WHERE account = 'odd'),
          (SELECT round(sum(amount), 6) FROM charge_rollup WHERE account = 'odd'),
          'the charge split over two months counts once, rounded once');
SELECT throws_ok($$SELECT hpcacct.quarter_balance(k, '2024-01-01', a, '2024-01-01')
                   FROM (VALUES ('deposit', 9000000000000), ('deposit', 9000000000000)) v(k, a)$$,
                 '22003', NULL, 'a sum beyond the exact range is an error, not a rounded balance');
SELECT throws_ok($$SELECT hpcacct.quarter_balance('refund', '2024-01-01', 1e13, '2024-01-01')$$,
                 '22003', NULL, 'so is an amount beyond it');

-- open_quarter twice is open_quarter once.
SELECT deposit('proj', '2024-04-01', 1000);
CALL open_quarter('2024-04-01');
CREATE TEMP TABLE after_first AS SELECT * FROM ledger;
CREATE TEMP TABLE log_first AS SELECT quarter, account, action, target_quarter, amount FROM quarter_log;
CALL open_quarter('2024-04-15');
SELECT set_eq('SELECT entry_id, amount FROM ledger', 'SELECT entry_id, amount FROM after_first',
              'a second open_quarter books nothing');
SELECT set_eq('SELECT quarter, account, action, target_quarter, amount FROM quarter_log',
              'SELECT * FROM log_first', 'and logs nothing new');
SELECT is((SELECT sum(amount) FROM ledger WHERE account = 'u1' AND kind = 'deposit' AND valid_from = '2024-07-01'),
          2500.000000, 'the personal account holds exactly one allotment for Q3');

-- Quarters open in order and not before they begin: a run of Q1 after Q2 expired and then
-- deleted, for good, a personal account that Q2 had topped up; a future quarter's run
-- expired accounts ahead of time. Both are 22023 and write nothing.
CREATE TEMP TABLE quarter_counts AS
    SELECT (SELECT count(*) FROM ledger) AS ledger_rows, (SELECT count(*) FROM quarter_log) AS log_rows;
SELECT throws_ok($$CALL hpcacct.open_quarter('2024-01-01')$$, '22023',
                 'open_quarter: the quarter of 2024-01-01 comes before the quarter 2024-04-01 opened already',
                 'a quarter before one opened already is refused');
SELECT throws_ok(format('CALL hpcacct.open_quarter(%L)', hpcacct.site_today() + 100), '22023', NULL,
                 'a quarter that has not begun is refused');
SELECT row_eq($$SELECT (SELECT count(*) FROM hpcacct.ledger), (SELECT count(*) FROM hpcacct.quarter_log)$$,
              (SELECT ROW(ledger_rows, log_rows) FROM quarter_counts), 'neither wrote anything');

-- The scheduled command of the README's pg_cron recipe runs.
SELECT isnt(cron.schedule('hpcacct-open-quarter', '5 12 1 1,4,7,10 *', $$CALL hpcacct.open_quarter(hpcacct.site_today())$$),
            NULL::bigint, 'open_quarter can be scheduled with pg_cron');
SELECT lives_ok((SELECT command FROM cron.job WHERE jobname = 'hpcacct-open-quarter'),
                'the scheduled command runs');
SELECT ok(cron.unschedule('hpcacct-open-quarter'), 'and can be unscheduled');

-- A deleted personal account takes no credit and no new member (HA002); its members can
-- still be removed.
INSERT INTO hpc_user (username) VALUES ('gone');
INSERT INTO account (name, kind, deleted_in) VALUES ('gone', 'personal', '2024-01-01');
INSERT INTO membership VALUES ('gone', 'gone', 'admin'), ('gone', 'u1', 'member');
SELECT throws_ok($$SELECT hpcacct.deposit('gone', '2024-04-01', 10)$$, 'HA002', NULL, 'no deposit on a deleted account');
SELECT throws_ok($$SELECT hpcacct.add_member('gone', 'u1', 'admin')$$, 'HA002', NULL, 'nor a member change by add_member()');
SELECT lives_ok($$SELECT hpcacct.remove_member('gone', 'u1')$$, 'but remove_member() still removes its members');

-- The aggregate in a parallel plan gives the serial result.
INSERT INTO account (name) SELECT 'bulk' || i FROM generate_series(1, 40) AS i;
INSERT INTO ledger (account, kind, amount, unit, valid_from, valid_until)
SELECT 'bulk' || (i % 40 + 1), 'deposit', 1 + (i % 97) * 0.25, 'NPL',
       date '2024-01-01' + (i % 4) * interval '3 months', date '2024-03-31' + (i % 4) * interval '3 months'
FROM generate_series(1, 40000) AS i;
INSERT INTO job
SELECT 'c', 'bulk' || i, 'bulk' || (i % 40 + 1), 'u', 'p', NULL,
       timestamptz '2024-01-01' + (i % 350) * interval '1 day',
       timestamptz '2024-01-01' + (i % 350) * interval '1 day' + (1 + i % 30) * interval '1 hour',
       ('cpu=' || (1 + i % 16))::tres, 'COMPLETED'
FROM generate_series(1, 40000) AS i;
ANALYZE ledger;
-- a plain table: temporary ones are never scanned in parallel
CREATE TABLE entries AS SELECT * FROM bank_entry;
ANALYZE entries;
CREATE TEMP TABLE serial AS
    SELECT account, (quarter_balance(kind, quarter, amount, '2024-05-05')).* FROM entries GROUP BY account;
SET LOCAL parallel_setup_cost = 0;
SET LOCAL parallel_tuple_cost = 0;
SET LOCAL min_parallel_table_scan_size = 0;
SET LOCAL max_parallel_workers_per_gather = 2;
CREATE FUNCTION pg_temp.plan_of(query text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    plan text;
BEGIN
    EXECUTE 'EXPLAIN (FORMAT JSON) ' || query INTO plan;
    RETURN plan;
END $$;
SELECT matches(pg_temp.plan_of($$SELECT account, (quarter_balance(kind, quarter, amount, '2024-05-05')).*
                                  FROM entries GROUP BY account$$),
               '"Partial Mode": "Partial"', 'the plan has a partial aggregate');
SELECT matches(pg_temp.plan_of($$SELECT account, (quarter_balance(kind, quarter, amount, '2024-05-05')).*
                                  FROM entries GROUP BY account$$),
               '"Workers Planned": 2', 'run by parallel workers');
SELECT results_eq(
    $$SELECT account, (quarter_balance(kind, quarter, amount, '2024-05-05')).* FROM entries
      GROUP BY account ORDER BY account$$,
    $$SELECT * FROM serial ORDER BY account$$,
    'parallel and serial quarter balances agree');
SELECT results_eq(
    $$SELECT account, quarter, balance::text FROM quarter_balances WHERE account LIKE 'bulk%' ORDER BY 1, 2$$,
    $$SELECT q.account, q.quarter, hpcacct.balance(q.account, q.quarter)::text FROM quarter_balances q
      WHERE q.account LIKE 'bulk%' ORDER BY 1, 2$$,
    'quarter_balances and balance() give the same digits for every account and quarter');

-- A bank read on this site is costed below jit_above_cost: rollup_pending, empty and analyzed
-- when the extension is created, is estimated empty (never analyzed, the planner took it for
-- 10 pages, costed bank_state() at 2 million, and default jit compiled every balance() and
-- check_submit() call: 0.8 s each, this file's run took 150 s).
SELECT cmp_ok((pg_temp.plan_of($$SELECT * FROM hpcacct.bank_state('bulk1', '2024-04-01')$$)::json
               -> 0 -> 'Plan' ->> 'Total Cost')::float8,
              '<', current_setting('jit_above_cost')::float8, 'bank_state() is costed below jit_above_cost');
-- bank_state()'s argument check is costed 1: at PL/pgSQL's default of 100, a PL/pgSQL loop
-- calling bank_state() as check_submit does (500 accounts, 5000 jobs) was replanned at every
-- call: 10 times slower than before the check.
SELECT is((SELECT p.procost FROM pg_proc p
           WHERE p.oid = 'hpcacct_internal.refuse_argument(anyelement, text, text)'::regprocedure), 1::real,
          'refuse_argument() is costed 1, so that the generic plans of bank_state()''s callers stay cheap');

SELECT * FROM finish();
ROLLBACK;
