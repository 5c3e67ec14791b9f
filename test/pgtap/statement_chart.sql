-- account_month()'s daily charts: every day's point is the figure of that day's end, as the
-- reports give it (allocation_status() for the GENCI chart, balance at the end of the day for
-- the bank's), and the day-by-day sum over the ledger, in a time zone with a DST change:
-- jobs across several days, ending at midnight, of no length, begun before the year or the
-- quarter, re-rated (a reversal and a new charge), and running past the statement's month.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(25);

INSERT INTO setting VALUES ('timezone', 'Europe/Berlin') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO setting VALUES ('bank_unit', 'NPL') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('sc_c', 'p', 'cpu=16', 'cpu=1', 1, 'NPL');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('sc_h', 'p', 'cpu=16', 'cpu=1', 3, 'core-h');
INSERT INTO account (name) VALUES ('sc_a');
SELECT deposit('sc_a', '2024-01-01', 5000), deposit('sc_a', '2024-04-01', 5000);
INSERT INTO regulation_machine (machine, monthly_threshold) VALUES ('sc_c', 100);
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('sc_a', 'grant', 9000, 'NPL', 'sc_c', '2024-01-01', '2024-12-31'),
       ('sc_a', 'supplement', 700, 'NPL', 'sc_c', '2024-03-10', '2024-12-31');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    -- begun in the old year, and in the old quarter
    ('sc_c', 'y', 'sc_a', 'u', 'p', '2023-12-30 20:00+01', '2024-01-02 04:00+01', 'cpu=2', 'COMPLETED'),
    ('sc_c', 'q', 'sc_a', 'u', 'p', '2024-03-29 12:00+01', '2024-04-03 12:00+02', 'cpu=3', 'COMPLETED'),
    -- across the DST change (31 March 2024, a day of 23 hours)
    ('sc_c', 'dst', 'sc_a', 'u', 'p', '2024-03-30 22:30+01', '2024-04-01 01:15+02', 'cpu=4', 'COMPLETED'),
    -- ending at midnight, beginning at midnight, of no length at midnight and at noon
    ('sc_c', 'm1', 'sc_a', 'u', 'p', '2024-04-10 18:00+02', '2024-04-11 00:00+02', 'cpu=1', 'COMPLETED'),
    ('sc_c', 'm2', 'sc_a', 'u', 'p', '2024-04-12 00:00+02', '2024-04-12 07:00+02', 'cpu=5', 'COMPLETED'),
    ('sc_c', 'z1', 'sc_a', 'u', 'p', '2024-04-13 00:00+02', '2024-04-13 00:00+02', 'cpu=1', 'COMPLETED'),
    ('sc_c', 'z2', 'sc_a', 'u', 'p', '2024-04-14 12:00+02', '2024-04-14 12:00+02', 'cpu=1', 'COMPLETED'),
    -- ten days long, and one running past the end of April
    ('sc_c', 'long', 'sc_a', 'u', 'p', '2024-04-15 09:00+02', '2024-04-25 21:00+02', 'cpu=1', 'COMPLETED'),
    ('sc_c', 'past', 'sc_a', 'u', 'p', '2024-04-29 13:00+02', '2024-05-03 02:00+02', 'cpu=2', 'COMPLETED'),
    -- on the other machine, in another unit: on neither chart
    ('sc_h', 'h', 'sc_a', 'u', 'p', '2024-04-05 00:00+02', '2024-04-06 00:00+02', 'cpu=1', 'COMPLETED'),
    ('sc_h', 'h0', 'sc_a', 'u', 'p', '2024-03-05 00:00+01', '2024-03-05 10:00+01', 'cpu=1', 'COMPLETED');
-- the other machine's allocation year begins in April
INSERT INTO pool (name, year_start_month) VALUES ('sc_h', 4);
-- re-rated: a reversal and a new charge of the same job
UPDATE job SET alloctres = 'cpu=6' WHERE jobid = 'long';

CREATE TEMP TABLE d AS SELECT account_month('sc_a', '2024-04-01') AS d;
CREATE TEMP TABLE genci AS
SELECT (p ->> 0)::date AS day, (p ->> 1)::numeric AS tc, (p ->> 2)::numeric AS tmc, (p ->> 3)::numeric AS consumption
FROM d, jsonb_array_elements(d -> 'regulation' -> 0 -> 'days') p;
CREATE TEMP TABLE bank AS
SELECT (p ->> 0)::date AS day, (p ->> 1)::numeric AS balance FROM d, jsonb_array_elements(d -> 'bank' -> 'days') p;

SELECT is((SELECT count(*) FROM ledger WHERE jobid = 'long' AND kind = 'charge'), 3::bigint,
          'setup: the re-rated job has its charge, a reversal and a new charge');
SELECT is((SELECT count(*) || ' ' || to_char(min(day), 'YYYY-MM-DD') || ' ' || to_char(max(day), 'YYYY-MM-DD') FROM genci),
          '121 2024-01-01 2024-04-30',
          'the GENCI chart has a point per day from 1 January to 30 April');
SELECT is((SELECT count(*) || ' ' || to_char(min(day), 'YYYY-MM-DD') || ' ' || to_char(max(day), 'YYYY-MM-DD') FROM bank),
          '30 2024-04-01 2024-04-30',
          'the bank chart has a point per day of the quarter up to 30 April');
SELECT is((SELECT count(*) FROM genci g CROSS JOIN LATERAL allocation_status('sc_a', 'sc_c', g.day) s
           WHERE g.consumption IS DISTINCT FROM round(s.consumption::numeric, 2)
              OR g.tc IS DISTINCT FROM round(s.tc::numeric, 2) OR g.tmc IS DISTINCT FROM round(s.tmc::numeric, 2)),
          0::bigint, 'every day of the GENCI chart is allocation_status() at that day''s end');
SELECT is((SELECT count(*) FROM bank b
           WHERE b.balance IS DISTINCT FROM round(hpcacct_internal.balance_at_end('sc_a', b.day), 2)),
          0::bigint, 'every day of the bank chart is the balance at that day''s end');
-- the same sums written out day by day, job by job (exact numerics)
SELECT is((SELECT count(*) FROM genci g
           WHERE g.consumption IS DISTINCT FROM round(
               (SELECT coalesce(sum(l.amount * period_share(l.job_start, l.job_end, '2024-01-01 00:00+01',
                                                            (g.day + 1)::timestamp AT TIME ZONE 'Europe/Berlin')), 0)
                FROM ledger l WHERE l.account = 'sc_a' AND l.kind = 'charge' AND l.cluster = 'sc_c'), 2)),
          0::bigint, 'every day of the GENCI chart is the job-by-job sum from 1 January');
SELECT is((SELECT count(*) FROM bank b
           WHERE b.balance IS DISTINCT FROM 5000 - round(
               (SELECT coalesce(sum(l.amount * period_share(l.job_start, l.job_end, '2024-04-01 00:00+02',
                                                            (b.day + 1)::timestamp AT TIME ZONE 'Europe/Berlin')), 0)
                FROM ledger l WHERE l.account = 'sc_a' AND l.kind = 'charge' AND l.unit = 'NPL'), 2)),
          0::bigint, 'every day of the bank chart is the deposits less the job-by-job sum from 1 April');
-- figures checked by hand: 31 March has 23 hours, so the DST job's 25.75 hours on 4 cores
-- are 1.5 h on 30 March, 23 h on the 31st and 1.25 h on 1 April
SELECT is((SELECT consumption FROM genci WHERE day = '2024-03-31') - (SELECT consumption FROM genci WHERE day = '2024-03-30'),
          (4 * 23 + 3 * 23)::numeric, '31 March adds its 23 hours of the DST job (4 cores) and of q (3 cores)');
SELECT is((SELECT consumption FROM genci WHERE day = '2024-01-01'), (2 * 24)::numeric,
          '1 January counts the old year''s job from midnight only');
SELECT is((SELECT balance FROM bank WHERE day = '2024-04-30'),
          5000 - (3 * 60 + 4 * 1.25 + 6 + 5 * 7 + 0 + 0 + 6 * 252 + 2 * 35)::numeric,
          'the bank on 30 April: the quarter''s deposit less q''s April 60 hours, the DST job''s 1.25, m1, m2, z1, z2, '
          'long at 6 cores (its first charge reversed) and past''s April 35 hours');

-- usage by resource: each pool's allocation year containing the month
SELECT is((SELECT x ->> 'year_start' || ' ' || (x ->> 'usage') FROM jsonb_array_elements(account_month('sc_a', '2024-03-01') -> 'usage_by_resource') x
           WHERE x ->> 'pool' = 'sc_h'), '2023-04-01 30.000000', 'March: sc_h''s year from April 2023, h0''s 10 hours at rate 3');
SELECT is((SELECT x ->> 'year_start' || ' ' || (x ->> 'usage') || ' ' || (x ->> 'projected_usage')
           FROM d, jsonb_array_elements(d -> 'usage_by_resource') x WHERE x ->> 'pool' = 'sc_h'),
          (SELECT to_char(first_day, 'YYYY-MM-DD') || ' ' || round(usage, 6) || ' ' || round(projected_usage, 6)
           FROM usage_by_resource(NULL, '2024-05-01 00:00 Europe/Berlin') WHERE pool = 'sc_h'),
          'April: sc_h''s new year, as usage_by_resource() at the end of April');

-- the days of a chart are finite and given
SELECT throws_ok($$SELECT * FROM hpcacct_internal.charges_to_day_end('sc_a', NULL, NULL, '-infinity', '2024-04-30')$$,
                 '22008', NULL, 'a first day of -infinity is 22008, not a series without end');
SELECT throws_ok($$SELECT * FROM hpcacct_internal.charges_to_day_end('sc_a', NULL, NULL, '2024-04-01', 'infinity')$$,
                 '22008', NULL, 'a last day of infinity is 22008');
SELECT throws_ok($$SELECT * FROM hpcacct_internal.charges_to_day_end('sc_a', NULL, NULL, NULL, '2024-04-30')$$,
                 '22004', NULL, 'a NULL first day is 22004');
SELECT throws_ok($$SELECT * FROM hpcacct_internal.charges_to_day_end(NULL, NULL, NULL, '2024-04-01', '2024-04-30')$$,
                 '22004', NULL, 'a NULL account is 22004, not a month of zeros');

-- several accounts' balances at the end of a day in one pass (my_accounts()): a second account
-- with a job across days and one across the quarter's end, each account once however often
-- it is named, each day of the quarter the deposits less the job-by-job sum
INSERT INTO account (name) VALUES ('sc_b');
SELECT deposit('sc_b', '2024-04-01', 1000);
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    ('sc_c', 'b1', 'sc_b', 'u', 'p', '2024-04-18 12:00+02', '2024-04-22 12:00+02', 'cpu=2', 'COMPLETED'),
    ('sc_c', 'b2', 'sc_b', 'u', 'p', '2024-06-29 00:00+02', '2024-07-02 00:00+02', 'cpu=1', 'COMPLETED');
CREATE TEMP TABLE both_days AS
SELECT g.day::date AS day, b.account, b.balance
FROM generate_series('2024-04-01'::date, '2024-06-30', interval '1 day') g(day),
     hpcacct_internal.balances_at_end(ARRAY['sc_a', 'sc_b', 'sc_a'], g.day::date) b;
SELECT is((SELECT count(*) || ' ' || count(DISTINCT (day, account)) FROM both_days), '182 182',
          'balances_at_end(): each account once a day, though sc_a is named twice');
SELECT is((SELECT count(*) FROM both_days b
           WHERE b.balance IS DISTINCT FROM
                 (SELECT sum(l.amount) FROM ledger l WHERE l.account = b.account AND l.kind = 'deposit')
                 - (SELECT round(coalesce(sum(l.amount * period_share(l.job_start, l.job_end, '2024-04-01 00:00+02',
                                                                      (b.day + 1)::timestamp AT TIME ZONE 'Europe/Berlin')), 0), 6)
                    FROM ledger l WHERE l.account = b.account AND l.kind = 'charge' AND l.unit = 'NPL')
                 - CASE b.account WHEN 'sc_a' THEN 5000 ELSE 0 END),
          0::bigint, 'balances_at_end(): every day of the quarter, each account''s deposits less the job-by-job sum (to 6 decimals)');
SELECT is((SELECT balance FROM both_days WHERE account = 'sc_b' AND day = '2024-06-30'),
          1000 - (2 * 96 + 1 * 48)::numeric, 'sc_b on 30 June: b1''s 96 hours on 2 cores and b2''s 48 hours up to midnight');
SELECT is((SELECT string_agg(x ->> 'account' || ' ' || (x -> 'bank' ->> 'balance') || ' ' || (x -> 'this_month' ->> 'NPL'), ', '
                             ORDER BY x ->> 'account')
           FROM jsonb_array_elements(my_accounts('2024-04-20') -> 'accounts') x WHERE x ->> 'account' LIKE 'sc\_%'),
          (SELECT string_agg(b.account || ' ' || b.balance || ' ' || (SELECT round(sum(l.amount * period_share(l.job_start, l.job_end,
                                                                                      '2024-04-01 00:00+02', '2024-04-21 00:00+02')), 6)
                                                                      FROM ledger l WHERE l.account = b.account AND l.kind = 'charge'
                                                                        AND l.unit = 'NPL'), ', ' ORDER BY b.account)
           FROM both_days b WHERE b.day = '2024-04-20'),
          'my_accounts() on 20 April: both accounts'' balances at the end of the day, and April''s charges up to it');
SELECT throws_ok($$SELECT * FROM hpcacct_internal.balances_at_end(ARRAY[NULL], '2024-04-20')$$,
                 '22004', NULL, 'balances_at_end() of a NULL account is 22004');
SELECT throws_ok($$SELECT hpcacct_internal.balance_at_end('sc_a', NULL)$$,
                 '22004', NULL, 'balance_at_end(): a NULL day is 22004, not the whole quarter''s balance');

-- A zone whose midnight can come twice: in Havana, 1 November 2026 begins at 00:00 CDT, and
-- the clocks go back from 01:00 CDT to 00:00 CST; PostgreSQL takes '2026-11-01 00:00' for
-- the second (05:00 UTC). A job begun at 00:30 CDT (04:30 UTC) ran half an hour before that
-- instant: the reports count it on 31 October (allocation_status(), the balance at the end
-- of the day), and so must the charts. One of no length at 04:40 UTC (booked by hand).
INSERT INTO setting VALUES ('timezone', 'America/Havana') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('sc_v', 'p', 'cpu=64', 'cpu=1', 1, 'NPL');
INSERT INTO account (name) VALUES ('sc_w');
SELECT deposit('sc_w', '2026-10-01', 5000);
INSERT INTO regulation_machine (machine, monthly_threshold) VALUES ('sc_v', 100);
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('sc_w', 'grant', 9000, 'NPL', 'sc_v', '2026-01-01', '2026-12-31');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    ('sc_v', 'amb', 'sc_w', 'u', 'p', '2026-11-01 04:30+00', '2026-11-01 05:30+00', 'cpu=60', 'COMPLETED');
INSERT INTO ledger (account, kind, amount, unit, resource_id, cluster, jobid, submitter, job_start, job_end, note)
SELECT 'sc_w', 'charge', 7, 'NPL', resource_id, 'sc_v', 'zero', 'u', '2026-11-01 04:40+00', '2026-11-01 04:40+00', 'by hand'
FROM resource WHERE cluster = 'sc_v';
CREATE TEMP TABLE dv AS SELECT account_month('sc_w', '2026-10-01') AS d;
SELECT is((SELECT array_agg(c.amount ORDER BY c.day)
           FROM hpcacct_internal.charges_to_day_end('sc_w', 'sc_v', NULL, '2026-10-30', '2026-11-01') c),
          (SELECT array_agg((SELECT sum(l.amount * period_share(l.job_start, l.job_end, '2026-10-30'::timestamp AT TIME ZONE 'America/Havana',
                                                                (g.day::date + 1)::timestamp AT TIME ZONE 'America/Havana'))
                             FROM ledger l WHERE l.account = 'sc_w' AND l.kind = 'charge') ORDER BY g.day)
           FROM generate_series('2026-10-30'::date, '2026-11-01', interval '1 day') g(day)),
          'a midnight that comes twice: each day is the job-by-job sum up to its end (31 October: 30 + 7)');
SELECT is((SELECT array[(p ->> 3)::numeric, (dv.d -> 'bank' -> 'days' -> -1 ->> 1)::numeric]
           FROM dv, jsonb_array_elements(dv.d -> 'regulation' -> 0 -> 'days') p WHERE p ->> 0 = '2026-10-31'),
          (SELECT array[round(s.consumption::numeric, 2), round(hpcacct_internal.balance_at_end('sc_w', '2026-10-31'), 2)]
           FROM allocation_status('sc_w', 'sc_v', '2026-10-31') s),
          'October''s page: the charts'' 31 October is allocation_status() and the balance at that day''s end (37, 4963)');

SELECT is((SELECT array_agg(x ORDER BY x)::text FROM (
               SELECT to_char(c.month, 'YYYY-MM-DD') || ' ' || round(sum(c.amount), 6) AS x FROM charge_by_month c WHERE c.account = 'sc_w' GROUP BY c.month
               HAVING sum(c.amount) <> 0) t),
          '{"2026-10-01 37.000000","2026-11-01 30.000000"}',
          'charge_by_month: the half hour before November''s first instant, and the job of no length, in October');

SELECT * FROM finish();
ROLLBACK;
