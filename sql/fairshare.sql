-- Fair share and usage reports (rules §5): decayed usage against hand-computed values, the
-- fair-share factor, LQCD generation weights, allocation years and projections, and the
-- README's worked example. Data lives in transactions that are rolled back, so the ledger
-- of the shared regression database is left as it was.
SET search_path = public, hpcacct;
\set SHOW_CONTEXT never
-- Readable output. The session's time zone is not the site's: reports follow the site's.
SET DateStyle = 'ISO, YMD';
SET IntervalStyle = 'postgres';
SET TimeZone = 'UTC';

-- Runs a statement and shows its SQLSTATE and message (or that it succeeded).
CREATE FUNCTION pg_temp.error_of(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- ---- decayed_usage(ts, amount, at, half_life): Σ amount × 2^(−(at − ts)/half_life) ----

-- 10 at `at` (10), 8 one half-life before (4), 8 two before (2), 16 three before (2): 18.
SELECT decayed_usage(ts, amount, '2024-03-15 00:00+00', '7 days') AS usage
FROM (VALUES ('2024-03-15 00:00+00'::timestamptz, 10::float8), ('2024-03-08 00:00+00', 8),
             ('2024-03-01 00:00+00', 8), ('2024-02-23 00:00+00', 16)) AS v(ts, amount);

-- Half a half-life: 100 / √2 = 70.71067811865475...; one day of a 7-day half-life:
-- 2^(−1/7) = 0.90572366426390...; 36 hours of a 12-hour half-life: 1000 / 8 = 125.
SELECT round(decayed_usage('2024-03-11 12:00+00', 100, '2024-03-15 00:00+00', '7 days')::numeric, 12) AS half,
       round(decayed_usage('2024-03-14 00:00+00', 1, '2024-03-15 00:00+00', '7 days')::numeric, 12) AS one_day,
       decayed_usage('2024-03-13 12:00+00', 1000, '2024-03-15 00:00+00', '12 hours') AS three_halvings;

-- A row after `at` has not happened yet: it counts 0 (not NULL); no rows at all: NULL.
SELECT decayed_usage('2024-03-15 00:00:01+00', 100, '2024-03-15 00:00+00', '7 days') AS after_at,
       (SELECT decayed_usage(now(), 1, now(), '1 day') WHERE false) AS no_rows;

-- ---- decayed_usage(ts, amount, at, period, decay, depth): Maui periods ----

-- Periods end at `at`: period 0 is (at − 5 days, at], period 1 (at − 10 days, at − 5 days]...
-- 10 and 20 in period 0, 40 exactly 5 days before (period 1: × 0.5), 80 12 days before
-- (period 2: × 0.25), 1 000 15 days before (period 3, beyond depth 3), 7 after `at`:
-- 10 + 20 + 20 + 20 = 70.
SELECT decayed_usage(ts, amount, '2024-03-15 00:00+00', '5 days', 0.5, 3) AS usage
FROM (VALUES ('2024-03-15 00:00+00'::timestamptz, 10::float8), ('2024-03-10 00:00:01+00', 20),
             ('2024-03-10 00:00+00', 40), ('2024-03-03 00:00+00', 80), ('2024-02-29 00:00+00', 1000),
             ('2024-03-15 00:00:01+00', 7)) AS v(ts, amount);

-- 100 in each of 9 periods, decay 0.8, depth 8 (the defaults): period 8 is left out and
-- 100 × (1 + 0.8 + 0.64 + 0.512 + 0.4096 + 0.32768 + 0.262144 + 0.2097152) = 416.11392.
SELECT round(decayed_usage(timestamptz '2024-03-15 00:00+00' - i * interval '5 days' - interval '1 hour', 100,
                           '2024-03-15 00:00+00', '5 days', 0.8, 8)::numeric, 9) AS usage
FROM generate_series(0, 8) AS i;

-- ---- errors: named SQLSTATEs ----
SELECT pg_temp.error_of(statement) FROM (VALUES
    ($$SELECT decayed_usage(NULL, 1, now(), '1 day')$$),
    ($$SELECT decayed_usage(now(), NULL, now(), '1 day')$$),
    ($$SELECT decayed_usage(now(), 1, NULL, '1 day')$$),
    ($$SELECT decayed_usage(now(), 1, now(), NULL)$$),
    ($$SELECT decayed_usage(now(), -1, now(), '1 day')$$),
    ($$SELECT decayed_usage(now(), 'NaN', now(), '1 day')$$),
    ($$SELECT decayed_usage(now(), 'Infinity', now(), '1 day')$$),
    ($$SELECT decayed_usage(now(), 1e16, now(), '1 day')$$),
    ($$SELECT decayed_usage(now(), 1, now(), '0 days')$$),
    ($$SELECT decayed_usage(now(), 1, now(), '-7 days')$$),
    ($$SELECT decayed_usage(now(), 1, now(), '1 month')$$),
    ($$SELECT decayed_usage('infinity', 1, now(), '1 day')$$),
    ($$SELECT decayed_usage(now(), 1, '-infinity', '1 day')$$),
    ($$SELECT decayed_usage(now(), 1, now() + i * interval '1 hour', '1 day') FROM generate_series(1, 2) i$$),
    ($$SELECT decayed_usage(now(), 1, now(), i * interval '1 day') FROM generate_series(1, 2) i$$),
    ($$SELECT decayed_usage(now(), 1, now(), '5 days', NULL, 3)$$),
    ($$SELECT decayed_usage(now(), 1, now(), '5 days', 1.5, 3)$$),
    ($$SELECT decayed_usage(now(), 1, now(), '5 days', -0.5, 3)$$),
    ($$SELECT decayed_usage(now(), 1, now(), '5 days', 0.5, 0)$$),
    ($$SELECT decayed_usage(now(), 1, now(), '0 days', 0.5, 3)$$),
    ($$SELECT decayed_usage(now(), 1, now(), '5 days', 0.5, i) FROM generate_series(1, 2) i$$)
) AS t(statement);

-- ---- the factor 2^(−usage/share) ----
SELECT usage, share, fairshare_factor(usage, share) AS factor
FROM (VALUES (0::float8, 0.5::float8), (0.5, 0.5), (1, 0.5), (0.25, 0.5), (0.3, 0)) AS v(usage, share);
SELECT pg_temp.error_of($$SELECT fairshare_factor(-0.1, 0.5)$$), pg_temp.error_of($$SELECT fairshare_factor(0.1, 'NaN')$$);

-- ---- settings ----
SELECT name, value, source FROM settings
WHERE name IN ('decay', 'half_life', 'period', 'period_decay', 'depth', 'exhausted_factor', 'year_start_month', 'hours_per_year')
ORDER BY name;
SELECT pg_temp.error_of(statement) FROM (VALUES
    ($$INSERT INTO hpcacct.setting VALUES ('colour', 'blue')$$),
    ($$INSERT INTO hpcacct.setting VALUES ('decay', 'exponential')$$),
    ($$INSERT INTO hpcacct.setting VALUES ('half_life', '1 month')$$),
    ($$INSERT INTO hpcacct.setting VALUES ('half_life', 'a week')$$),
    ($$INSERT INTO hpcacct.setting VALUES ('period', '-5 days')$$),
    ($$INSERT INTO hpcacct.setting VALUES ('period_decay', '1.2')$$),
    ($$INSERT INTO hpcacct.setting VALUES ('depth', '0')$$),
    ($$INSERT INTO hpcacct.setting VALUES ('exhausted_factor', 'NaN')$$),
    ($$INSERT INTO hpcacct.setting VALUES ('year_start_month', '13')$$),
    ($$INSERT INTO hpcacct.setting VALUES ('hours_per_year', 'Infinity')$$)
) AS t(statement);

-- ---- allocation years ----
BEGIN;
INSERT INTO setting VALUES ('timezone', 'Europe/Berlin') ON CONFLICT (name) DO UPDATE SET value = excluded.value;
INSERT INTO pool (name, year_start_month, description) VALUES
    ('fs-cc', 4, 'Compute Canada: from 1 April'), ('fs-lqcd', 7, 'Fermilab LQCD: from 1 July');
-- The year an instant falls in is the site's (Europe/Berlin here; the session is in UTC):
-- 23:59 on 31 March in Berlin is still in Compute Canada's 2023 year. Pools without a row in
-- hpcacct.pool start in January (setting year_start_month).
SELECT pool, at, y.year, y.first_day, y.last_day, y.starts, y.ends, y.elapsed, y.length, y.state
FROM (VALUES ('fs-cc', timestamptz '2024-03-31 23:59+02'), ('fs-cc', '2024-04-01 00:00+02'),
             ('fs-lqcd', '2024-03-15 00:00+01'), ('fs-lqcd', '2024-07-01 00:00+02'),
             ('fs-other', '2024-12-31 12:00+01')) AS v(pool, at)
CROSS JOIN LATERAL allocation_year(pool, NULL, at) AS y
ORDER BY pool, at;
-- A named year, seen before, during and after it; DST changes cancel over a year.
SELECT at, y.year, y.first_day, y.last_day, y.elapsed, y.length, y.state
FROM (VALUES (timestamptz '2023-01-01 00:00+00'), ('2024-10-01 00:00+02'), ('2026-01-01 00:00+00')) AS v(at)
CROSS JOIN LATERAL allocation_year('fs-cc', 2024, at) AS y
ORDER BY at;
ROLLBACK;

-- ---- Fermilab LQCD: generation weights are rates with validity ranges ----
-- 2013-14: the C2050 is the reference (weight 1), a K20 hour costs 2 GPU-hours.
-- From 2014-15 the K20 is the reference: weight 1, and a C2050 hour costs 0.5.
BEGIN;
INSERT INTO setting VALUES ('timezone', 'America/Chicago') ON CONFLICT (name) DO UPDATE SET value = excluded.value;
INSERT INTO pool (name, year_start_month, description) VALUES ('lqcd-gpu', 7, 'LQCD GPU-hours, year from 1 July');
INSERT INTO account (name) VALUES ('lqcd-weights');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, pool, valid, description) VALUES
    ('lqgpu', 'c2050', 'cpu=8,gres/gpu=4', 'gres/gpu=1', 1,   'GPU-hours', 'lqcd-gpu', '[2013-07-01 00:00-05,2014-07-01 00:00-05)', 'C2050, reference 2013-14'),
    ('lqgpu', 'k20',   'cpu=8,gres/gpu=4', 'gres/gpu=1', 2,   'GPU-hours', 'lqcd-gpu', '[2013-07-01 00:00-05,2014-07-01 00:00-05)', 'K20, twice a C2050'),
    ('lqgpu', 'c2050', 'cpu=8,gres/gpu=4', 'gres/gpu=1', 0.5, 'GPU-hours', 'lqcd-gpu', '[2014-07-01 00:00-05,infinity)', 'C2050, half a K20'),
    ('lqgpu', 'k20',   'cpu=8,gres/gpu=4', 'gres/gpu=1', 1,   'GPU-hours', 'lqcd-gpu', '[2014-07-01 00:00-05,infinity)', 'K20, reference from 2014-15');
-- One GPU for one hour on each, in January 2014 and January 2015.
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres) VALUES
    ('lqgpu', 'w1', 'lqcd-weights', 'ann', 'k20',   '2014-01-10 10:00-06', '2014-01-10 11:00-06', 'cpu=2,gres/gpu=1'),
    ('lqgpu', 'w2', 'lqcd-weights', 'ann', 'c2050', '2014-01-10 10:00-06', '2014-01-10 11:00-06', 'cpu=2,gres/gpu=1'),
    ('lqgpu', 'w3', 'lqcd-weights', 'ann', 'k20',   '2015-01-10 10:00-06', '2015-01-10 11:00-06', 'cpu=2,gres/gpu=1'),
    ('lqgpu', 'w4', 'lqcd-weights', 'ann', 'c2050', '2015-01-10 10:00-06', '2015-01-10 11:00-06', 'cpu=2,gres/gpu=1');
-- A K20 hour: 2 GPU-hours in 2013-14, 1 in 2014-15; a C2050 hour: 1, then 0.5.
SELECT l.jobid, r.partition, l.job_start, l.amount, l.unit FROM ledger l JOIN resource r USING (resource_id)
WHERE l.account = 'lqcd-weights' ORDER BY l.jobid;
-- Allocation consumption includes the weights (usage); the portal's unnormalized hours are
-- equivalent_hours. Past years: no projection.
SELECT * FROM usage_by_resource(2013, '2015-07-01 00:00-05') WHERE pool = 'lqcd-gpu' ORDER BY partition;
SELECT * FROM usage_by_resource(2014, '2015-07-01 00:00-05') WHERE pool = 'lqcd-gpu' ORDER BY partition;
-- The current year on 15 January 2015 at noon in Chicago: 198 days and 13 hours (the end of
-- daylight saving time added one) = 4 765 of the year's 8 760 hours have elapsed, so 1 GPU-hour
-- projects to 1 × 8760 / 4765 = 1.838405 GPU-hours, 0.5 to 0.919203.
SELECT * FROM usage_by_resource(NULL, '2015-01-15 12:00-06') WHERE pool = 'lqcd-gpu' ORDER BY partition;
ROLLBACK;

-- ---- The README's worked example ----
-- A GPU pool with allocations of 1 800, 900 and 300 GPU-hours for the LQCD year 2023-24
-- (1 July to 30 June), seen on 15 March 2024 at 00:00 UTC, half-life 7 days (the default):
--   lattice ran 1 200 GPU-hours that ended 7 days before  -> decayed 600
--   hadron  ran   400 GPU-hours that ended 14 days before -> decayed 100
--   nuclear ran   300 GPU-hours that ended at that instant -> decayed 300
BEGIN;
INSERT INTO setting VALUES ('timezone', 'UTC') ON CONFLICT (name) DO UPDATE SET value = excluded.value;
INSERT INTO pool (name, year_start_month) VALUES ('gpu', 7);
INSERT INTO account (name) VALUES ('lattice'), ('hadron'), ('nuclear');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, pool) VALUES
    ('example', 'k20', 'cpu=16,gres/gpu=100', 'gres/gpu=1', 1, 'GPU-hours', 'gpu');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until, note) VALUES
    ('lattice', 'grant', 1800, 'GPU-hours', 'gpu', '2023-07-01', '2024-06-30', 'allocation 2023-24'),
    ('hadron',  'grant',  900, 'GPU-hours', 'gpu', '2023-07-01', '2024-06-30', 'allocation 2023-24'),
    ('nuclear', 'grant',  300, 'GPU-hours', 'gpu', '2023-07-01', '2024-06-30', 'allocation 2023-24');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres) VALUES
    ('example', 'x1', 'lattice', 'alice', 'k20', '2024-03-07 12:00+00', '2024-03-08 00:00+00', 'cpu=16,gres/gpu=100'),
    ('example', 'x2', 'hadron',  'carol', 'k20', '2024-02-29 14:00+00', '2024-03-01 00:00+00', 'cpu=8,gres/gpu=40'),
    ('example', 'x3', 'nuclear', 'dave',  'k20', '2024-03-14 14:00+00', '2024-03-15 00:00+00', 'cpu=8,gres/gpu=30');
-- bob belongs to lattice but has not run yet: listed, he gets his equal share.
INSERT INTO fairshare_user (account, submitter) VALUES ('lattice', 'bob');

-- shares 0.6, 0.3, 0.1; normalized usage 0.6, 0.1, 0.3; factors 2^(−0.6/0.6) = 0.5,
-- 2^(−0.1/0.3) = 0.793701, 2^(−0.3/0.1) = 0.125. nuclear has used its 300: × 0.01 = 0.00125.
-- Inside lattice, alice and bob share 0.6 equally (0.3 each): alice 2^(−0.6/0.3) = 0.25, bob 1.
SELECT pool, account, submitter, allocation, share, usage, norm_usage, year_usage, exhausted,
       round(factor::numeric, 6) AS factor
FROM fairshare('2024-03-15 00:00+00') WHERE pool = 'gpu' ORDER BY account, submitter NULLS FIRST;

-- The same with Maui periods of 5 days decaying by 0.5: 7 days before is period 1 (× 0.5),
-- 14 days before period 2 (× 0.25): the same figures.
INSERT INTO setting VALUES ('decay', 'interval'), ('period_decay', '0.5');
SELECT account, submitter, usage, round(factor::numeric, 6) AS factor
FROM fairshare('2024-03-15 00:00+00') WHERE pool = 'gpu' ORDER BY account, submitter NULLS FIRST;
-- With depth 2, hadron's job (period 2) no longer counts: its usage is 0, factor 1;
-- lattice now has 600 of 900, nuclear 300 of 900.
INSERT INTO setting VALUES ('depth', '2');
SELECT account, submitter, usage, round(norm_usage::numeric, 6) AS norm_usage, round(factor::numeric, 6) AS factor
FROM fairshare('2024-03-15 00:00+00') WHERE pool = 'gpu' ORDER BY account, submitter NULLS FIRST;
DELETE FROM setting WHERE name IN ('decay', 'period_decay', 'depth');

-- A day earlier nuclear's job had not ended: it does not count yet, and nuclear is not
-- exhausted; lattice's job ended 6 days before: 1200 × 2^(−6/7).
SELECT account, submitter, round(usage::numeric, 6) AS usage, year_usage, exhausted, round(factor::numeric, 6) AS factor
FROM fairshare('2024-03-14 00:00+00') WHERE pool = 'gpu' ORDER BY account, submitter NULLS FIRST;

-- Usage by account: 258 of the year's 366 days have elapsed (1 July 2023 to 15 March 2024;
-- a downtime would not change that), so the projection is usage × 366 / 258:
--   lattice 1 200 → 1 702.325581 (94.57 % of 1 800), hadron 400 → 567.441860 (63.05 %),
--   nuclear 300 → 425.581395 (141.86 %: overuse is shown, never refused).
-- Years: GPU-hours / 8 760.
SELECT * FROM usage_by_account(NULL, '2024-03-15 00:00+00') WHERE pool = 'gpu' ORDER BY account;
SELECT * FROM usage_by_submitter(NULL, '2024-03-15 00:00+00') WHERE pool = 'gpu' ORDER BY account, submitter;
SELECT * FROM usage_by_month(NULL, '2024-03-15 00:00+00') WHERE pool = 'gpu' ORDER BY month, account;
-- After the year: no projection; nuclear has overused by 100.
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres) VALUES
    ('example', 'x4', 'nuclear', 'dave', 'k20', '2024-06-30 20:00+00', '2024-07-01 04:00+00', 'cpu=8,gres/gpu=25');
SELECT account, year, allocation, usage, utilization_pct, projected_usage, projected_utilization_pct, overuse
FROM usage_by_account(2023, '2024-08-01 00:00+00') WHERE pool = 'gpu' ORDER BY account;
-- x4 ran 4 hours in each year: 100 GPU-hours in June (2023-24), 100 in July (2024-25).
SELECT account, month, usage FROM usage_by_month(2024, '2024-08-01 00:00+00') WHERE pool = 'gpu' ORDER BY month;
-- A grant valid for two years counts pro rata by days in each: 731 GPU-hours over 366 + 365
-- days are 366 in 2023-24 and 365 in 2024-25; a retraction inside 2023-24 counts there whole.
-- hadron: 900 + 366 − 100 = 1 166 in 2023-24, 365 in 2024-25.
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until) VALUES
    ('hadron', 'supplement', 731, 'GPU-hours', 'gpu', '2023-07-01', '2025-06-30'),
    ('hadron', 'retraction', -100, 'GPU-hours', 'gpu', '2024-01-01', '2024-06-30');
SELECT account, year, allocation FROM usage_by_account(2023, '2024-08-01 00:00+00') WHERE pool = 'gpu' AND account = 'hadron'
UNION ALL
SELECT account, year, allocation FROM usage_by_account(2024, '2024-08-01 00:00+00') WHERE pool = 'gpu' AND account = 'hadron';
ROLLBACK;
