-- GENCI / IDRIS theoretical consumption and regulation: every figure of rules §2.
SET search_path = public, hpcacct;
\set SHOW_CONTEXT never
-- Everything below runs in one transaction that is rolled back at the end (ON_ERROR_ROLLBACK
-- keeps it alive past the expected errors), and the identity sequences it advances are
-- restored, so that the tests after this one find the database as it was.
SELECT last_value, is_called FROM hpcacct.ledger_entry_id_seq \gset ledger_seq_
SELECT last_value, is_called FROM hpcacct.resource_resource_id_seq \gset resource_seq_
SELECT count(*) AS rows FROM hpcacct.ledger \gset ledger_at_start_
\set ON_ERROR_ROLLBACK on
BEGIN;
INSERT INTO setting VALUES ('timezone', 'Europe/Paris') ON CONFLICT (name) DO UPDATE SET value = excluded.value;

-- Status boundaries, with delta = consumption - tc.
SELECT consumption, tc, tmc, consumption - tc AS delta, regulation_status(consumption, tc, tmc)
FROM (VALUES (0, 99.5, 100), (0, 100, 100), (50, 150, 100), (0, 199.5, 100), (0, 200, 100),
             (300, 500, 100), (1000, 500, 100), (0, 1000, 0)) AS v(consumption, tc, tmc);
SELECT regulation_status(NULL, 1, 1) IS NULL AS null_gives_null;
SELECT regulation_status('NaN', 1, 1);

-- Regulation dates: the 15th (monthly), 1 May (annual warning), 1 June (annual retraction).
SELECT d, regulation_run(d)
FROM (VALUES (date '2024-01-15'), ('2024-02-14'), ('2024-05-01'), ('2024-05-15'), ('2024-06-01'),
             ('2024-07-01'), ('2024-12-15')) AS v(d);

INSERT INTO regulation_machine (machine, monthly_threshold, description) VALUES
    ('turing', 5000000, 'IDRIS Turing (IBM Blue Gene/Q)'),
    ('ada', 1000000, 'IDRIS Ada (IBM x3750)');
SELECT * FROM regulation_machine WHERE machine IN ('ada', 'turing') ORDER BY machine;

-- ===== Project P of the document (2024, Ada) =====
INSERT INTO account (name) VALUES ('P');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until, note) VALUES
    ('P', 'grant',      1200000, 'hours', 'ada', '2024-01-01', '2024-12-31', 'first DARI session'),
    ('P', 'retraction', -100000, 'hours', 'ada', '2024-03-15', '2024-12-31', 'retraction of 15 March'),
    ('P', 'grant',       400000, 'hours', 'ada', '2024-07-01', '2024-12-31', 'second DARI session'),
    ('P', 'supplement',  100000, 'hours', 'ada', '2024-11-16', '2024-12-31', 'supplement requested on 15 November');

-- The document's table: 100 000 / 89 474 / 156 140 / 222 807, and TC(31 Dec) = 1 600 000.
SELECT first_day, last_day, round(alloc) AS alloc, round(tmc::numeric) AS tmc, round(tc::numeric, 6) AS tc
FROM regulation_year('P', 'ada', 2024);

-- The same through the aggregates, as a portal would write it.
SELECT d, round(tmc(valid_from, valid_until, amount, d)::numeric, 3) AS tmc,
          round(tc(valid_from, valid_until, amount, d)::numeric, 3) AS tc
FROM ledger
CROSS JOIN (VALUES (date '2024-01-15'), ('2024-03-14'), ('2024-03-15'), ('2024-06-30'), ('2024-07-01'),
                   ('2024-11-15'), ('2024-11-16'), ('2024-12-31'), ('2025-01-01')) AS v(d)
WHERE account = 'P' AND kind IN ('grant', 'supplement', 'retraction')
GROUP BY d ORDER BY d;

-- The 'day' convention: exact fractions of months; the year still adds up to the allocation.
SELECT first_day, last_day, round(alloc) AS alloc, round(tmc::numeric, 3) AS tmc, round(tc::numeric, 3) AS tc
FROM regulation_year('P', 'ada', 2024, 'day');
SELECT round(tc(valid_from, valid_until, amount, '2024-12-31', 'day')::numeric, 6) AS tc_day,
       round(tmc(valid_from, valid_until, amount, '2024-03-15', 'half_month')::numeric, 6) AS tmc_half_month
FROM ledger WHERE account = 'P';

-- No row: NULL, as sum() gives.
SELECT tmc(valid_from, valid_until, amount, '2024-06-01') AS tmc, tc(valid_from, valid_until, amount, '2024-06-01') AS tc
FROM ledger WHERE false;

-- Bad events are errors, not silently skipped rows.
SELECT tmc(f, u, a, d) FROM (VALUES (NULL::date, date '2024-12-31', 1::float8, date '2024-06-01')) AS v(f, u, a, d);
SELECT tc(f, u, a, d) FROM (VALUES (date '2024-01-01', date '2024-12-31', NULL::float8, date '2024-06-01')) AS v(f, u, a, d);
SELECT tc(f, u, a, d) FROM (VALUES (date '2024-01-01', date '2024-12-31', 1::float8, NULL::date)) AS v(f, u, a, d);
SELECT tmc(f, u, a, d) FROM (VALUES (date '2024-05-01', date '2024-04-30', 1::float8, date '2024-06-01')) AS v(f, u, a, d);
SELECT tmc(f, u, a, d) FROM (VALUES (date '2024-12-28', date '2024-12-31', 1::float8, date '2024-06-01')) AS v(f, u, a, d);
SELECT tmc(f, u, a, d, 'day') FROM (VALUES (date '2024-12-28', date '2024-12-31', 1::float8, date '2024-12-30')) AS v(f, u, a, d);
SELECT tc(f, u, a, d) FROM (VALUES (date '2024-01-01', date '2024-12-31', 'NaN'::float8, date '2024-06-01')) AS v(f, u, a, d);
SELECT tc(f, u, a, d) FROM (VALUES (date '2024-01-01', date '2024-12-31', '-Infinity'::float8, date '2024-06-01')) AS v(f, u, a, d);
SELECT tc(f, u, a, d, 'months') FROM (VALUES (date '2024-01-01', date '2024-12-31', 1::float8, date '2024-06-01')) AS v(f, u, a, d);
SELECT tc(f, u, a, d, NULL) FROM (VALUES (date '2024-01-01', date '2024-12-31', 1::float8, date '2024-06-01')) AS v(f, u, a, d);
SELECT tc(f, u, a, d) FROM (VALUES (date '2024-01-01', date 'infinity', 1::float8, date '2024-06-01')) AS v(f, u, a, d);
SELECT tc(f, u, a, d) FROM (VALUES (date '1200-01-01', date '2024-12-31', 1::float8, date '2024-06-01')) AS v(f, u, a, d);
SELECT * FROM regulation_year('nobody', 'ada', 2024);

-- ===== The aggregates in a parallel plan give the serial result =====
-- (Compensated sums of 200 000 rows: the order of the rows changes at most the last bit, far
-- below the cents compared here.)
CREATE TABLE genci_events AS
SELECT date '2023-07-01' + ((i * 7919) % 540)::integer AS f,
       date '2023-07-01' + ((i * 7919) % 540 + 40 + (i * 104729) % 400)::integer AS u,
       (CASE WHEN i % 5 = 0 THEN -1 ELSE 1 END) * (1000 + (i * 31337) % 900000)::float8 / 7 AS a
FROM generate_series(1::bigint, 200000) AS i;
ANALYZE genci_events;
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET max_parallel_workers_per_gather = 2;
EXPLAIN (COSTS OFF)
SELECT tmc(f, u, a, '2024-06-15'), tc(f, u, a, '2024-06-15'), tc(f, u, a, '2024-06-15', 'day') FROM genci_events;
SELECT round(tmc(f, u, a, '2024-06-15')::numeric, 2) AS tmc, round(tc(f, u, a, '2024-06-15')::numeric, 2) AS tc,
       round(tc(f, u, a, '2024-06-15', 'day')::numeric, 2) AS tc_day
FROM genci_events \gset parallel_
SET max_parallel_workers_per_gather = 0;
EXPLAIN (COSTS OFF)
SELECT tmc(f, u, a, '2024-06-15'), tc(f, u, a, '2024-06-15'), tc(f, u, a, '2024-06-15', 'day') FROM genci_events;
SELECT round(tmc(f, u, a, '2024-06-15')::numeric, 2) AS tmc, round(tc(f, u, a, '2024-06-15')::numeric, 2) AS tc,
       round(tc(f, u, a, '2024-06-15', 'day')::numeric, 2) AS tc_day
FROM genci_events \gset serial_
SELECT :'serial_tmc' AS tmc, :'serial_tc' AS tc, :'serial_tc_day' AS tc_day,
       :'parallel_tmc' = :'serial_tmc' AS same_tmc, :'parallel_tc' = :'serial_tc' AS same_tc,
       :'parallel_tc_day' = :'serial_tc_day' AS same_tc_day;
RESET max_parallel_workers_per_gather;
RESET parallel_setup_cost;
RESET parallel_tuple_cost;
RESET min_parallel_table_scan_size;

-- ===== Regulation on Ada in 2025 =====
-- Z consumes nothing; C consumes a little more than its TMC; S, E, F and U are below the
-- 1 M threshold (annual regulation): S, E and F consume nothing, U 43 % by April. E sends a
-- justification in May; F declared a second-half start in January.
INSERT INTO account (name) VALUES ('Z'), ('C'), ('S'), ('E'), ('F'), ('U');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES
    ('ada', 'cpu', 'cpu=32,mem=128G,node=1', 'cpu=1', 1, 'hours');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until, note)
SELECT account, 'grant', amount, 'hours', 'ada', '2025-01-01', '2025-12-31', 'first DARI session'
FROM (VALUES ('Z', 1200000), ('C', 1200000), ('S', 500000), ('E', 500000), ('F', 500000), ('U', 500000)) AS v(account, amount);
INSERT INTO exoneration (account, machine, year, reason, received, note)
VALUES ('F', 'ada', 2025, 'second_half_start', '2025-01-20', 'starts in July, agreed by GENCI');
-- C: 140 cores all month long, every month; U: 100 cores from January to March.
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
SELECT 'ada', 'c' || m, 'C', 'carol', 'cpu',
       (date '2025-01-01' + (m - 1) * interval '1 month')::timestamp AT TIME ZONE 'Europe/Paris',
       (date '2025-01-01' + m * interval '1 month')::timestamp AT TIME ZONE 'Europe/Paris',
       'cpu=140', 'COMPLETED'
FROM generate_series(1, 12) AS m;
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    ('ada', 'u1', 'U', 'ursula', 'cpu', '2025-01-01 00:00 Europe/Paris', '2025-04-01 00:00 Europe/Paris', 'cpu=100', 'COMPLETED');

-- Monthly regulation of Z and C. Z: ok on 15 January, warning on 15 February, retraction
-- of TMC = 100 000 on 15 March, from the formulas alone.
CALL regulate('2025-01-15');
CALL regulate('2025-02-15');
CALL regulate('2025-03-15');
SELECT run_date, account, outcome, round(alloc) AS alloc, round(consumption::numeric) AS consumption,
       round(tc::numeric) AS tc, round(tmc::numeric) AS tmc, round(delta::numeric) AS delta, retracted
FROM regulation_log WHERE run = 'monthly' ORDER BY run_date, account;
SELECT account, kind, amount, unit, pool, valid_from, valid_until, note
FROM ledger WHERE kind = 'retraction' AND account = 'Z';

-- The retraction changes Z's TMC from 15 March on: the document's first two rows.
SELECT first_day, last_day, round(alloc) AS alloc, round(tmc::numeric) AS tmc, round(tc::numeric) AS tc
FROM regulation_year('Z', 'ada', 2025);

-- Idempotent: the same date again changes nothing.
SELECT count(*) AS ledger_rows FROM ledger \gset before_
SELECT count(*) AS log_rows, sum(retracted) AS retracted FROM regulation_log \gset before_
CALL regulate('2025-03-15');
SELECT (SELECT count(*) FROM ledger) = :before_ledger_rows AS same_ledger,
       (SELECT count(*) FROM regulation_log) = :before_log_rows AS same_log,
       (SELECT sum(retracted) FROM regulation_log) = :before_retracted AS same_retracted;

-- Any other date is a no-op with a notice.
CALL regulate('2025-03-16');
SELECT count(*) = :before_log_rows AS nothing_logged FROM regulation_log;

-- Bad dates are errors; nothing is written.
CALL regulate(NULL);
CALL regulate('infinity');
\set VERBOSITY terse
CALL regulate('2999-01-15');
\set VERBOSITY default
SELECT (SELECT count(*) FROM ledger) = :before_ledger_rows AS same_ledger,
       (SELECT count(*) FROM regulation_log) = :before_log_rows AS same_log;

-- Annual regulation: warning on 1 May (figures at the end of 30 April) ...
CALL regulate('2025-05-01');
-- ... E sends its justification in May ...
INSERT INTO exoneration (account, machine, year, reason, received)
VALUES ('E', 'ada', 2025, 'justification', '2025-05-20');
-- ... which must arrive by 31 May:
INSERT INTO exoneration (account, machine, year, reason, received)
VALUES ('S', 'ada', 2025, 'justification', '2025-06-02');
-- ... and 40 % of the allocation is retracted on 1 June from S, not from E or F.
CALL regulate('2025-06-01');
CALL regulate('2025-06-01');
SELECT run_date, run, account, outcome, figures_at, round(alloc) AS alloc, round(consumption::numeric) AS consumption,
       round(used_percent::numeric, 2) AS used_percent, retracted
FROM regulation_log WHERE run <> 'monthly' ORDER BY run_date, account;
SELECT account, kind, amount, valid_from, valid_until, note
FROM ledger WHERE kind = 'retraction' AND pool = 'ada' AND account <> 'P' ORDER BY entry_id;

-- Where Z and C stand at a date, and the monthly report.
SELECT * FROM allocation_status('Z', 'ada', '2025-02-15');
SELECT account, month, as_of, regulation, round(alloc) AS alloc, round(tmc::numeric) AS tmc, round(tc::numeric) AS tc,
       round(consumption::numeric) AS consumption, round(delta::numeric) AS delta, status, logged_outcome, retracted
FROM regulation_report
WHERE machine = 'ada' AND account IN ('Z', 'C', 'S') AND month < '2025-07-01'
ORDER BY account, month;

ROLLBACK;
\set ON_ERROR_ROLLBACK off
SELECT setval('hpcacct.ledger_entry_id_seq', :ledger_seq_last_value, :'ledger_seq_is_called'::boolean) AS ledger_seq,
       setval('hpcacct.resource_resource_id_seq', :resource_seq_last_value, :'resource_seq_is_called'::boolean) AS resource_seq
\gset restored_
SELECT count(*) = :ledger_at_start_rows AS ledger_as_before FROM ledger;
