-- GENCI regulation's contract: SQLSTATEs, nothing written on error, idempotency, the
-- annual regulation with and without exoneration, parallel aggregates, pg_cron.
BEGIN;
SET search_path = public, hpcacct;
SET client_min_messages = warning;
SELECT plan(99);

INSERT INTO hpcacct.setting VALUES ('timezone', 'Europe/Paris') ON CONFLICT (name) DO UPDATE SET value = excluded.value;
INSERT INTO regulation_machine (machine, monthly_threshold) VALUES ('ada', 1000000), ('turing', 5000000);
INSERT INTO account (name) VALUES ('Z'), ('C'), ('T'), ('S'), ('E'), ('F'), ('U');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('ada', 'cpu', 'cpu=32', 'cpu=1', 1, 'hours');
-- Z consumes nothing; C consumes 140 cores all year; T sits exactly at the threshold.
-- S, E, F and U are annual: S, E, F consume nothing, U 43 % by April.
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
SELECT account, 'grant', amount, 'hours', 'ada', '2025-01-01', '2025-12-31'
FROM (VALUES ('Z', 1200000), ('C', 1200000), ('T', 1000000), ('S', 500000), ('E', 500000), ('F', 500000),
             ('U', 500000)) AS v(account, amount);
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
SELECT 'ada', 'c' || m, 'C', 'carol', 'cpu',
       (date '2025-01-01' + (m - 1) * interval '1 month')::timestamp AT TIME ZONE 'Europe/Paris',
       (date '2025-01-01' + m * interval '1 month')::timestamp AT TIME ZONE 'Europe/Paris', 'cpu=140'::hpcacct.tres, 'COMPLETED'
FROM generate_series(1, 12) AS m
UNION ALL
SELECT 'ada', 'u1', 'U', 'ursula', 'cpu', '2025-01-01 00:00 Europe/Paris', '2025-04-01 00:00 Europe/Paris',
       'cpu=100', 'COMPLETED';
INSERT INTO exoneration (account, machine, year, reason, received)
VALUES ('F', 'ada', 2025, 'second_half_start', '2025-01-20');

CREATE FUNCTION pg_temp.ledger_rows() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM hpcacct.ledger';
CREATE FUNCTION pg_temp.log_rows() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM hpcacct.regulation_log';
CREATE FUNCTION pg_temp.outcome(who text, d date) RETURNS text LANGUAGE sql
    AS 'SELECT outcome FROM hpcacct.regulation_log WHERE account = who AND run_date = d';

-- ---- The aggregates ----
SELECT is_aggregate('hpcacct', 'tmc', ARRAY['date', 'date', 'double precision', 'date'], 'tmc/4 is an aggregate');
SELECT is_aggregate('hpcacct', 'tmc', ARRAY['date', 'date', 'double precision', 'date', 'text'], 'tmc/5 is an aggregate');
SELECT is_aggregate('hpcacct', 'tc', ARRAY['date', 'date', 'double precision', 'date'], 'tc/4 is an aggregate');
SELECT is_aggregate('hpcacct', 'tc', ARRAY['date', 'date', 'double precision', 'date', 'text'], 'tc/5 is an aggregate');
SELECT is((SELECT count(*) FROM pg_aggregate a JOIN pg_proc p ON p.oid = a.aggfnoid
           WHERE p.pronamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace) AND p.proname IN ('tmc', 'tc')
             AND p.proparallel = 's' AND a.aggcombinefn <> 0 AND a.aggserialfn <> 0 AND a.aggdeserialfn <> 0),
          4::bigint, 'all four are PARALLEL SAFE with combine, serialize and deserialize functions');

CREATE FUNCTION pg_temp.agg(expr text, f text, u text, a text, d text) RETURNS text LANGUAGE sql AS $$
    SELECT format('SELECT %s FROM (VALUES (%s::date, %s::date, %s::float8, %s::date)) AS v(f, u, a, d)', expr, f, u, a, d)
$$;
SELECT throws_ok(pg_temp.agg('hpcacct.tmc(f, u, a, d)', 'NULL', '''2025-12-31''', '1', '''2025-06-01'''),
                 '22004', 'hpcacct.tmc: valid_from must not be NULL', 'NULL valid_from');
SELECT throws_ok(pg_temp.agg('hpcacct.tc(f, u, a, d)', '''2025-01-01''', 'NULL', '1', '''2025-06-01'''),
                 '22004', NULL, 'NULL valid_until');
SELECT throws_ok(pg_temp.agg('hpcacct.tc(f, u, a, d)', '''2025-01-01''', '''2025-12-31''', 'NULL', '''2025-06-01'''),
                 '22004', NULL, 'NULL amount');
SELECT throws_ok(pg_temp.agg('hpcacct.tmc(f, u, a, d)', '''2025-01-01''', '''2025-12-31''', '1', 'NULL'),
                 '22004', NULL, 'NULL date');
SELECT throws_ok(pg_temp.agg('hpcacct.tmc(f, u, a, d, NULL)', '''2025-01-01''', '''2025-12-31''', '1', '''2025-06-01'''),
                 '22004', NULL, 'NULL convention');
SELECT throws_ok(pg_temp.agg('hpcacct.tc(f, u, a, d)', '''2025-05-01''', '''2025-04-30''', '1', '''2025-06-01'''),
                 '22023', NULL, 'inverted window');
SELECT throws_ok(pg_temp.agg('hpcacct.tc(f, u, a, d)', '''2025-12-28''', '''2025-12-31''', '1', '''2025-06-01'''),
                 '22023', NULL, 'window the half_month convention makes empty, even when it contributes nothing');
SELECT throws_ok(pg_temp.agg('hpcacct.tmc(f, u, a, d, ''weeks'')', '''2025-01-01''', '''2025-12-31''', '1', '''2025-06-01'''),
                 '22023', NULL, 'unknown month convention');
SELECT throws_ok(pg_temp.agg('hpcacct.tmc(f, u, a, d)', '''2025-01-01''', '''2025-12-31''', '''NaN''', '''2025-06-01'''),
                 '22003', NULL, 'NaN amount');
SELECT throws_ok(pg_temp.agg('hpcacct.tc(f, u, a, d)', '''2025-01-01''', '''2025-12-31''', '''Infinity''', '''2025-06-01'''),
                 '22003', NULL, 'infinite amount');
SELECT throws_ok(pg_temp.agg('hpcacct.tc(f, u, a, d)', '''-infinity''', '''2025-12-31''', '1', '''2025-06-01'''),
                 '22008', NULL, 'infinite date');
-- TMC and TC are of one date and one convention: rows naming several are refused, as the
-- other aggregates refuse several "at" (they summed each row's figure at its own date).
SELECT throws_ok($$SELECT hpcacct.tmc('2024-01-01', '2024-12-31', 1200, d)
                   FROM (VALUES ('2024-01-01'::date), ('2024-05-01')) AS v(d)$$,
                 '22023', 'every row of tmc or tc must name the same date "at"', 'tmc with two dates "at"');
SELECT throws_ok($$SELECT hpcacct.tc('2024-01-01', '2024-12-31', 1200, d)
                   FROM (VALUES ('2024-01-01'::date), ('2024-05-01')) AS v(d)$$,
                 '22023', NULL, 'tc with two dates "at"');
SELECT throws_ok($$SELECT hpcacct.tc('2024-01-01', '2024-12-31', 1200, '2024-05-01', c)
                   FROM (VALUES ('day'), ('half_month')) AS v(c)$$,
                 '22023', 'every row of tmc or tc must name the same month convention', 'tc with two conventions');
SELECT is((SELECT hpcacct.tc('2024-01-01', '2024-12-31', 1200, d, 'day') FROM (VALUES ('2024-12-31'::date), ('2024-12-31')) AS v(d)),
          2400::float8, 'rows naming the same date and convention are summed');
SELECT throws_ok($$SELECT hpcacct.regulation_status('NaN', 0, 1)$$, '22003', NULL, 'regulation_status of NaN');
SELECT is(hpcacct.regulation_status(0, 200, 100), 'retraction', 'delta = -2 TMC is a retraction');
SELECT is((SELECT round(hpcacct.tc(f, u, a, d)::numeric, 6)
           FROM (VALUES ('2025-01-01'::date, '2025-12-31'::date, 1200000::float8), ('2025-07-01', '2025-12-31', 400000))
                AS v(f, u, a), (VALUES ('2025-12-31'::date)) AS w(d)),
          1600000.000000, 'TC at the end of the windows is the whole allocation');
-- As a window function, too (running TMC/TC by event date).
SELECT is((SELECT array_agg(round(t::numeric) ORDER BY f)
           FROM (SELECT f, hpcacct.tmc(f, u, a, '2025-08-01') OVER (ORDER BY f) AS t
                 FROM (VALUES ('2025-01-01'::date, '2025-12-31'::date, 1200000::float8),
                              ('2025-07-01', '2025-12-31', 600000)) AS v(f, u, a)) s),
          ARRAY[100000, 200000]::numeric[], 'tmc works as a window aggregate');

-- A parallel plan that really runs workers gives the serial result.
CREATE TABLE regulation_events AS
SELECT date '2024-07-01' + (i % 500)::integer AS f, date '2024-07-01' + (i % 500 + 45 + i % 365)::integer AS u,
       (1000 + i % 77777)::float8 / 3 AS a
FROM generate_series(1, 150000) AS i;
ANALYZE regulation_events;
CREATE FUNCTION pg_temp.explain_json(query text) RETURNS json LANGUAGE plpgsql AS $$
DECLARE plan json;
BEGIN
    EXECUTE 'EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, FORMAT JSON) ' || query INTO plan;
    RETURN plan;
END $$;
SET LOCAL parallel_setup_cost = 0;
SET LOCAL parallel_tuple_cost = 0;
SET LOCAL min_parallel_table_scan_size = 0;
SET LOCAL max_parallel_workers_per_gather = 2;
SELECT cmp_ok((pg_temp.explain_json($$SELECT hpcacct.tc(f, u, a, '2025-03-15') FROM regulation_events$$)
               -> 0 -> 'Plan' -> 'Plans' -> 0 ->> 'Workers Launched')::integer, '>', 0,
              'the parallel plan launches workers');
SELECT hpcacct.tc(f, u, a, '2025-03-15') AS tc, hpcacct.tmc(f, u, a, '2025-03-15', 'day') AS tmc
FROM regulation_events \gset parallel_
SET LOCAL max_parallel_workers_per_gather = 0;
-- Compensated sums: the order of the rows may change the last bit only.
SELECT ok(abs(hpcacct.tc(f, u, a, '2025-03-15') - :'parallel_tc'::float8) <= 1e-12 * abs(:'parallel_tc'::float8)
          AND abs(hpcacct.tmc(f, u, a, '2025-03-15', 'day') - :'parallel_tmc'::float8) <= 1e-12 * abs(:'parallel_tmc'::float8)
          AND :'parallel_tc'::float8 > 0,
          'serial and parallel results are equal')
FROM regulation_events;
RESET max_parallel_workers_per_gather;

-- ---- Settings and exonerations are checked, and dumped with the extension ----
SELECT is((SELECT count(*) FROM pg_extension e, unnest(e.extconfig) AS c(oid)
           WHERE e.extname = 'hpcacct'
             AND c.oid IN ('hpcacct.regulation_machine'::regclass, 'hpcacct.exoneration'::regclass,
                           'hpcacct.regulation_log'::regclass, 'hpcacct.regulation_log_log_id_seq'::regclass)),
          4::bigint, 'settings, exonerations and the regulation log are marked for pg_dump');
SELECT throws_ok($$INSERT INTO hpcacct.regulation_machine (machine, monthly_threshold) VALUES ('x', -1)$$,
                 '23514', NULL, 'negative threshold');
SELECT throws_ok($$INSERT INTO hpcacct.regulation_machine (machine, monthly_threshold, annual_retraction_percent) VALUES ('x', 1, 120)$$,
                 '23514', NULL, 'percentage above 100');
SELECT throws_ok($$INSERT INTO hpcacct.regulation_machine (machine, monthly_threshold, month_convention) VALUES ('x', 1, 'week')$$,
                 '23514', NULL, 'unknown month convention');
SELECT throws_ok($$INSERT INTO hpcacct.exoneration VALUES ('S', 'ada', 2025, 'justification', '2025-06-01')$$,
                 '23514', NULL, 'a justification must arrive by 31 May');
SELECT throws_ok($$INSERT INTO hpcacct.exoneration VALUES ('S', 'ada', 2025, 'second_half_start', '2025-02-01')$$,
                 '23514', NULL, 'a second-half start must be agreed by 31 January');
SELECT throws_ok($$INSERT INTO hpcacct.exoneration VALUES ('S', 'jean-zay', 2025, 'justification', '2025-05-01')$$,
                 '23503', NULL, 'exoneration on an unknown machine');

-- ---- regulate(): bad dates are errors and write nothing ----
CREATE TEMP TABLE counts_before AS SELECT pg_temp.ledger_rows() AS ledger_rows, pg_temp.log_rows() AS log_rows;
SELECT throws_ok($$CALL hpcacct.regulate(NULL)$$, '22004', NULL, 'NULL date');
SELECT throws_ok($$CALL hpcacct.regulate('infinity')$$, '22008', NULL, 'infinite date');
SELECT throws_ok($$CALL hpcacct.regulate('2999-01-15')$$, '22023', NULL, 'a date in the future');
SELECT lives_ok($$CALL hpcacct.regulate('2025-01-16')$$, 'another date is a no-op');
SELECT row_eq('SELECT pg_temp.ledger_rows(), pg_temp.log_rows()',
              (SELECT ROW(ledger_rows, log_rows) FROM counts_before), 'nothing was written');

-- ---- Monthly regulation of a project that consumes nothing (rules §2) ----
CALL hpcacct.regulate('2025-01-15');
CALL hpcacct.regulate('2025-02-15');
CALL hpcacct.regulate('2025-03-15');
SELECT is(pg_temp.outcome('Z', '2025-01-15'), 'ok', 'Z: no retraction on 15 January');
SELECT is(pg_temp.outcome('Z', '2025-02-15'), 'warning', 'Z: first warning on 15 February');
SELECT is(pg_temp.outcome('Z', '2025-03-15'), 'retraction', 'Z: first retraction on 15 March');
SELECT is(pg_temp.outcome('C', '2025-03-15'), 'ok', 'C, which consumes regularly, is ok');
SELECT is(pg_temp.outcome('T', '2025-01-15'), 'ok', 'an allocation exactly at the threshold is regulated monthly');
SELECT is((SELECT count(*) FROM hpcacct.regulation_log WHERE account IN ('S', 'E', 'F', 'U')), 0::bigint,
          'accounts below the threshold are not in the monthly runs');
SELECT row_eq($$SELECT l.kind, l.amount, l.unit, l.pool, l.valid_from, l.valid_until
               FROM hpcacct.ledger l JOIN hpcacct.regulation_log g USING (entry_id)
               WHERE g.account = 'Z' AND g.run_date = '2025-03-15'$$,
              ROW('retraction'::text, -100000.000000::numeric, 'hours'::text, 'ada'::text, '2025-03-15'::date, '2025-12-31'::date),
              'the retraction is -TMC(d), effective d, valid to the end of the year, linked from the log');
SELECT is((SELECT round(tmc::numeric) FROM hpcacct.allocation_status('Z', 'ada', '2025-03-15')), 89474::numeric,
          'the retraction changes TMC from that day on');
SELECT is((SELECT count(*) FROM pg_locks
           WHERE relation = 'hpcacct.regulation_log'::regclass AND mode = 'ShareRowExclusiveLock'
             AND pid = pg_backend_pid() AND granted), 1::bigint,
          'a run holds the lock that serializes runs until its transaction ends');

-- ---- Idempotency ----
CREATE TEMP TABLE ledger_before AS SELECT * FROM hpcacct.ledger;
CREATE TEMP TABLE log_before AS SELECT * FROM hpcacct.regulation_log;
CALL hpcacct.regulate('2025-03-15');
CALL hpcacct.regulate('2025-01-15');
CALL hpcacct.regulate('2025-02-15');
SELECT set_eq('SELECT * FROM hpcacct.ledger', 'SELECT * FROM ledger_before', 'running again changes no ledger row');
SELECT set_eq('SELECT * FROM hpcacct.regulation_log', 'SELECT * FROM log_before', 'running again changes no log row');
SELECT is((SELECT count(*) FROM hpcacct.ledger WHERE kind = 'retraction' AND account = 'Z'), 1::bigint, 'Z retracted once');
SELECT results_eq(
    $$SELECT g.account, g.run_date, g.outcome FROM hpcacct.regulation_log g ORDER BY 1, 2$$,
    $$SELECT r.account, r.as_of, r.status FROM hpcacct.regulation_report r
      JOIN hpcacct.regulation_log g ON g.account = r.account AND g.run_date = r.as_of ORDER BY 1, 2$$,
    'the monthly report shows the status the runs logged');

-- ---- Runs of a year go in date order ----
-- 15 March 2024 missed, 15 April run: a late 15 March retracted again on top of the April
-- retraction, which had decided without it (200 000 instead of 189 474 in date order).
-- H's allocation starts in May: the runs before are not its, and run again they stay no-ops.
INSERT INTO account (name) VALUES ('O'), ('A'), ('H');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('O', 'grant', 1200000, 'hours', 'ada', '2024-01-01', '2024-12-31'),
       ('A', 'grant', 300000, 'hours', 'ada', '2024-01-01', '2024-12-31'),
       ('H', 'grant', 1200000, 'hours', 'ada', '2024-05-01', '2024-12-31');
CALL hpcacct.regulate('2024-02-15');
CALL hpcacct.regulate('2024-04-15');
CALL hpcacct.regulate('2024-05-15');
CALL hpcacct.regulate('2024-06-01');
CREATE TEMP TABLE counts_in_order AS SELECT pg_temp.ledger_rows() AS ledger_rows, pg_temp.log_rows() AS log_rows;
SELECT throws_ok($$CALL hpcacct.regulate('2024-03-15')$$, '22023',
                 'regulate: 2024-03-15 comes before the run of 2024-04-15, made already',
                 'a monthly date missed before a later run is refused');
SELECT throws_ok($$CALL hpcacct.regulate('2024-05-01')$$, '22023',
                 'regulate: 2024-05-01 comes before the run of 2024-06-01, made already',
                 'the annual warning after the annual retraction is refused');
SELECT row_eq('SELECT pg_temp.ledger_rows(), pg_temp.log_rows()',
              (SELECT ROW(ledger_rows, log_rows) FROM counts_in_order), 'neither wrote anything');
SELECT lives_ok($$CALL hpcacct.regulate('2024-02-15')$$, 'a date run already may run again after a later one');
SELECT row_eq('SELECT pg_temp.ledger_rows(), pg_temp.log_rows()',
              (SELECT ROW(ledger_rows, log_rows) FROM counts_in_order), 'and changes nothing');
SELECT is((SELECT sum(-amount) FROM hpcacct.ledger WHERE account = 'O' AND kind = 'retraction' AND valid_from < '2024-05-01'),
          100000.000000, 'O: the April retraction only');

-- ---- Annual regulation, with and without exoneration ----
CALL hpcacct.regulate('2025-05-01');
SELECT is(pg_temp.outcome('S', '2025-05-01'), 'warning', 'S (0 %) is warned on 1 May');
SELECT is(pg_temp.outcome('E', '2025-05-01'), 'warning', 'E (0 %) is warned on 1 May');
SELECT is(pg_temp.outcome('F', '2025-05-01'), 'exonerated', 'F (second-half start agreed in January) is not warned');
SELECT is(pg_temp.outcome('U', '2025-05-01'), 'ok', 'U (43 %) is ok');
SELECT is((SELECT count(*) FROM hpcacct.regulation_log WHERE run_date = '2025-05-01' AND account IN ('Z', 'C', 'T')),
          0::bigint, 'accounts at or above the threshold are not in the annual runs');
INSERT INTO exoneration (account, machine, year, reason, received) VALUES ('E', 'ada', 2025, 'justification', '2025-05-28');
CALL hpcacct.regulate('2025-06-01');
CALL hpcacct.regulate('2025-06-01');
SELECT is(pg_temp.outcome('S', '2025-06-01'), 'retraction', 'S loses hours on 1 June');
SELECT row_eq($$SELECT l.amount, l.valid_from, l.valid_until, g.retracted, g.figures_at
               FROM hpcacct.ledger l JOIN hpcacct.regulation_log g USING (entry_id)
               WHERE g.account = 'S' AND g.run_date = '2025-06-01'$$,
              ROW(-200000.000000::numeric, '2025-06-01'::date, '2025-12-31'::date, 200000.000000::numeric, '2025-05-31'::date),
              'S: 40 % of its allocation, from 1 June to 31 December, measured over January to May');
SELECT is(pg_temp.outcome('E', '2025-06-01'), 'exonerated', 'E, justified in May, keeps its hours');
SELECT is(pg_temp.outcome('F', '2025-06-01'), 'exonerated', 'F keeps its hours');
SELECT is(pg_temp.outcome('U', '2025-06-01'), 'ok', 'U keeps its hours');
SELECT is((SELECT count(*) FROM hpcacct.ledger WHERE kind = 'retraction' AND account = 'S'), 1::bigint,
          'the annual retraction is booked once');

-- ---- A bad allocation event stops the whole run: nothing is written ----
-- (a window the convention makes empty is refused when booked, calendar_edges.sql; one that
-- got past the check, as a row booked with the trigger off, still stops the run)
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('C', 'grant', 1200000, 'hours', 'ada', '2023-01-01', '2023-12-31');
SELECT throws_ok($$INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
                   VALUES ('Z', 'grant', 2000000, 'hours', 'ada', '2023-03-01', '2023-03-05')$$, '22023', NULL,
                 'an allocation window the convention makes empty is refused when booked');
ALTER TABLE ledger DISABLE TRIGGER ledger_check_window;
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('Z', 'grant', 2000000, 'hours', 'ada', '2023-03-01', '2023-03-05');
ALTER TABLE ledger ENABLE TRIGGER ledger_check_window;
CREATE TEMP TABLE counts_before_bad AS SELECT pg_temp.ledger_rows() AS ledger_rows, pg_temp.log_rows() AS log_rows;
SELECT throws_ok($$CALL hpcacct.regulate('2023-03-15')$$, '22023', NULL,
                 'an allocation window the convention makes empty is an error');
SELECT row_eq('SELECT pg_temp.ledger_rows(), pg_temp.log_rows()',
              (SELECT ROW(ledger_rows, log_rows) FROM counts_before_bad),
              'nothing was written, not even for the account that came first (C)');

-- ---- The allocation year ----
SELECT throws_ok($$SELECT * FROM hpcacct.regulation_year('nobody', 'ada', 2025)$$, '42704',
                 'account "nobody" does not exist or is not visible to you',
                 'unknown account, in the words of every report (the same for one row-level security hides)');
SELECT throws_ok($$SELECT * FROM hpcacct.regulation_year('Z', 'ada', NULL)$$, '22004', NULL, 'NULL year');
SELECT throws_ok($$SELECT * FROM hpcacct.regulation_year('Z', 'ada', 0)$$, '22008', NULL, 'year out of range');
SELECT throws_ok($$SELECT * FROM hpcacct.regulation_year('Z', 'ada', 2025, 'bogus')$$, '22023',
                 'invalid month convention "bogus"', 'an unknown convention');
SELECT throws_ok($$SELECT * FROM hpcacct.regulation_year('Z', 'no-events-here', 2025, 'bogus')$$, '22023',
                 'invalid month convention "bogus"', 'an unknown convention, on a machine without events too (it printed a row)');
-- a misspelt machine is an error, not a machine with nothing on it (zeros, status ok)
SELECT throws_ok($$SELECT * FROM hpcacct.regulation_year('Z', 'adaa', 2025)$$, '42704',
                 'regulation_year: unknown machine "adaa"', 'regulation_year() of an unknown machine');
SELECT throws_ok($$SELECT * FROM hpcacct.allocation_status('Z', 'adaa', '2025-03-15')$$, '42704',
                 'allocation_status: unknown machine "adaa"', 'allocation_status() of an unknown machine');
SELECT throws_ok($$SELECT hpcacct.consumption_before('Z', 'adaa', '2025-03-15')$$, '42704',
                 'consumption_before: unknown machine "adaa"', 'consumption_before() of an unknown machine');
-- a machine that an allocation names but no resource charges to yet is one, with nothing consumed
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('Z', 'grant', 5000, 'hours', 'vega', '2025-01-01', '2025-12-31');
SELECT is((SELECT (s.alloc, s.consumption)::text FROM hpcacct.allocation_status('Z', 'vega', '2025-03-15') s),
          '(5000.000000,0)', 'allocation_status() of a machine with an allocation and no resource yet');
SELECT results_eq($$SELECT first_day, round(tmc::numeric) FROM hpcacct.regulation_year('Z', 'ada', 2025)$$,
                  $$VALUES ('2025-01-01'::date, 100000::numeric), ('2025-03-15', 89474)$$,
                  'Z''s year: the retraction of 15 March as in the document');

-- ---- pg_cron ----
SELECT cmp_ok(cron.schedule('hpcacct-regulate', '17 * * * *', $$CALL hpcacct.regulate(hpcacct.site_today() - 1)$$), '>', 0::bigint,
              'pg_cron schedules the regulation of yesterday every hour');
SELECT is((SELECT format('%s | %s | %s', schedule, command, database) FROM cron.job WHERE jobname = 'hpcacct-regulate'),
          format('17 * * * * | CALL hpcacct.regulate(hpcacct.site_today() - 1) | %s', current_database()),
          'the job is in cron.job for this database');
SELECT lives_ok((SELECT command FROM cron.job WHERE jobname = 'hpcacct-regulate'), 'the scheduled command runs today');
SELECT lives_ok((SELECT replace(command, 'hpcacct.site_today()', '''2025-04-16''::date') FROM cron.job
                 WHERE jobname = 'hpcacct-regulate'),
                'the scheduled command run on a 16th');
SELECT is((SELECT count(*) FROM hpcacct.regulation_log WHERE run_date = '2025-04-15'), 3::bigint,
          'it regulated the three monthly accounts');
SELECT ok(cron.unschedule('hpcacct-regulate'), 'unscheduled');

-- ---- A monthly run reads the consumption rollup: jobs across 1 January and the 16th ----
-- x1 runs 6 of its 12 hours in 2025, x2 4 of its 12 hours before 16 February 00:00 (Paris),
-- x3 is inside: 32 cores x (6 + 4 + 24) h = 1 088 h, as consumption_before() counts job by job.
INSERT INTO account (name) VALUES ('X');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('X', 'grant', 1200000, 'hours', 'ada', '2025-01-01', '2025-12-31');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    ('ada', 'x1', 'X', 'xavier', 'cpu', '2024-12-31 18:00 Europe/Paris', '2025-01-01 06:00 Europe/Paris', 'cpu=32', 'COMPLETED'),
    ('ada', 'x2', 'X', 'xavier', 'cpu', '2025-02-15 20:00 Europe/Paris', '2025-02-16 08:00 Europe/Paris', 'cpu=32', 'COMPLETED'),
    ('ada', 'x3', 'X', 'xavier', 'cpu', '2025-02-01 00:00 Europe/Paris', '2025-02-02 00:00 Europe/Paris', 'cpu=32', 'COMPLETED');
CALL hpcacct.regulate('2025-02-15');
SELECT is((SELECT consumption FROM hpcacct.regulation_log WHERE account = 'X' AND run_date = '2025-02-15'), 1088::float8,
          'monthly run: the shares after 1 January and before the 16th of jobs across them, from the rollup');
SELECT is((SELECT (g.consumption, g.outcome)::text FROM hpcacct.regulation_log g
           WHERE g.account = 'X' AND g.run_date = '2025-02-15'),
          (SELECT (s.consumption, s.status)::text FROM hpcacct.allocation_status('X', 'ada', '2025-02-15') s),
          'monthly run: the consumption and outcome of allocation_status(), which sums job by job');
-- its consumption is read once per bound: the planner, pulling the CTE up, used to copy the
-- expression into each of the three places that use it (six calls per status)
SET LOCAL track_functions = 'all';
CREATE TEMP TABLE consumption_calls AS
    SELECT pg_stat_get_xact_function_calls('hpcacct_internal.consumptions_before(text[], text[], timestamptz)'::regprocedure) AS n;
DO $$ BEGIN PERFORM * FROM hpcacct.allocation_status('X', 'ada', '2025-02-20'); END $$;
SELECT is(pg_stat_get_xact_function_calls('hpcacct_internal.consumptions_before(text[], text[], timestamptz)'::regprocedure)
          - (SELECT coalesce(n, 0) FROM consumption_calls), 2::bigint,
          'allocation_status() reads the consumption twice: up to the day and up to 1 January');

-- ---- One definition of an account's allocation events on a machine in a period ----
SELECT is((SELECT array_agg(e.kind || ' ' || e.amount || ' ' || e.valid_from || '..' || e.valid_until ORDER BY e.valid_from)
           FROM hpcacct_internal.allocation_events('Z', 'ada', '2025-02-01', '2025-03-15') e),
          ARRAY['grant 1200000.000000 2025-01-01..2025-12-31', 'retraction -100000.000000 2025-03-15..2025-12-31'],
          'allocation_events(): the grant and the retraction valid in the period (not the one from 15 April)');
SELECT is((SELECT count(*) FROM hpcacct_internal.allocation_events('Z', 'ada', '2026-01-01', '2026-12-31'))
          + (SELECT count(*) FROM hpcacct_internal.allocation_events('Z', 'turing', '2025-01-01', '2025-12-31'))
          + (SELECT count(*) FROM hpcacct_internal.allocation_events('C', 'ada', '2024-01-01', '2024-12-31')),
          0::bigint, 'allocation_events(): none in a period the validity misses, on another machine');
SELECT is((SELECT array_agg(p.proname::text ORDER BY p.proname) FROM pg_proc p
           WHERE p.pronamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace)
             AND p.prosrc ~ 'l\.pool = [a-z_$0-9.]+\s+AND l\.kind IN \(''grant'', ''supplement'', ''retraction''\)\s+AND l\.valid_from <= [a-z_$0-9.]+\s+AND l\.valid_until >='),
          NULL::text[], 'no function writes the events query out instead of calling allocation_events()');

-- At a federation's centre a run waits for every site's link (its charges): a subscription
-- to a site with no apply worker (here disabled, never connected) stops it, writing nothing.
SET client_min_messages = error;
CREATE SUBSCRIPTION hpcacct_fed_s2c_7 CONNECTION 'host=/nonexistent dbname=none' PUBLICATION none
    WITH (connect = false, enabled = false, slot_name = NONE);
CREATE TEMP TABLE log_before_link AS SELECT count(*) AS n FROM hpcacct.regulation_log;
SELECT throws_ok($$CALL hpcacct.regulate('2025-07-15')$$, '55000', NULL,
                 'regulate() while the link from a site is not connected is refused (55000)');
SELECT is((SELECT count(*) FROM hpcacct.regulation_log), (SELECT n FROM log_before_link), 'and logs nothing');
DROP SUBSCRIPTION hpcacct_fed_s2c_7;
SET client_min_messages = warning;
SELECT lives_ok($$CALL hpcacct.regulate('2025-07-15')$$, 'without it the run goes on');

-- At a federation's site a run is refused: it would decide on the site's charges alone, and its
-- retractions, booked with the site's ids, reach the centre, which regulates every site itself.
INSERT INTO hpcacct.federation_node (site, role) VALUES (3, 'site');
CREATE TEMP TABLE ledger_at_site AS SELECT count(*) AS n FROM hpcacct.ledger;
SELECT throws_ok($$CALL hpcacct.regulate('2025-08-15')$$, 'HA013', NULL, 'regulate() at a federation site is refused (HA013)');
SELECT is((SELECT count(*) FROM hpcacct.ledger), (SELECT n FROM ledger_at_site), 'and books nothing');
SELECT throws_ok($$CALL hpcacct.open_quarter('2025-07-01')$$, 'HA013', NULL, 'so is open_quarter()');
DELETE FROM hpcacct.federation_node;

SELECT * FROM finish();
ROLLBACK;
