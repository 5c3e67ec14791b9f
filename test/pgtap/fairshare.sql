-- Fair share and usage reports (rules §5): labels of the SQL objects, SQLSTATEs, the decay
-- aggregates in forced parallel plans, and the reports and fairshare() agreeing with a plain
-- SQL recomputation on generated data (jobs re-rated, moved and deleted; rates changing
-- mid-year; pools starting in April and in January; allocations over one and two years).
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(53);

-- ---- objects and their labels ----
SELECT is_aggregate('hpcacct', 'decayed_usage', ARRAY['timestamp with time zone', 'double precision',
                    'timestamp with time zone', 'interval'], 'decayed_usage, half-life form, is an aggregate');
SELECT is_aggregate('hpcacct', 'decayed_usage', ARRAY['timestamp with time zone', 'double precision',
                    'timestamp with time zone', 'interval', 'double precision', 'integer'],
                    'decayed_usage, interval form, is an aggregate');
SELECT is((SELECT count(*) FROM pg_aggregate a JOIN pg_proc p ON p.oid = a.aggfnoid
           WHERE p.pronamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace) AND p.proname = 'decayed_usage'
             AND p.proparallel = 's' AND a.aggcombinefn <> 0 AND a.aggserialfn <> 0 AND a.aggdeserialfn <> 0
             AND a.aggtranstype = 'internal'::regtype),
          2::bigint, 'both aggregates: PARALLEL SAFE, internal state with combine, serial and deserial functions');
SELECT isnt_strict('hpcacct_internal', 'decayed_usage_transfn',
                   ARRAY['internal', 'timestamp with time zone', 'double precision', 'timestamp with time zone', 'interval'],
                   'the transition function is not strict: NULL arguments reach it and are refused');
SELECT isnt_strict('hpcacct_internal', 'decayed_usage_periods_transfn',
                   ARRAY['internal', 'timestamp with time zone', 'double precision', 'timestamp with time zone', 'interval',
                         'double precision', 'integer'],
                   'the interval-form transition function is not strict either');
CREATE TEMP VIEW fs_objects AS
    SELECT p.oid, p.proname, p.prokind, p.prolang, p.proparallel, p.provolatile, p.proconfig
    FROM pg_proc p
    WHERE p.pronamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace)
      AND (p.proname LIKE 'decayed_usage%' OR p.proname LIKE 'fairshare%' OR p.proname LIKE 'usage_by_%'
           OR p.proname IN ('year_start_month', 'allocation_year', 'year_allocations'));
SELECT is((SELECT count(*) FROM fs_objects), 22::bigint, 'the fair-share area has 22 functions and aggregates');
SELECT is_empty($$SELECT oid::regprocedure FROM fs_objects WHERE obj_description(oid, 'pg_proc') IS NULL$$,
                'every fair-share function and aggregate has a comment');
SELECT is_empty($$SELECT oid::regprocedure FROM fs_objects
                  WHERE proparallel <> 's'$$,
                'all are PARALLEL SAFE');
SELECT is_empty($$SELECT oid::regprocedure FROM fs_objects
                  WHERE prokind = 'f' AND prolang <> (SELECT oid FROM pg_language WHERE lanname = 'c')
                    AND NOT coalesce('search_path=pg_catalog, pg_temp' = ANY(proconfig), false)$$,
                'SQL and PL/pgSQL functions pin search_path to pg_catalog, pg_temp');
SELECT is_empty($$SELECT p.oid::regprocedure FROM pg_proc p
                  WHERE p.oid IN ('hpcacct.charges_ended_by(timestamptz, date, date, boolean)'::regprocedure,
                                  'hpcacct.fairshare_all(timestamptz)'::regprocedure)
                    AND NOT coalesce('jit=off' = ANY(p.proconfig), false)$$,
                'charges_ended_by and fairshare_all run without JIT (their generic plans cost far above jit_above_cost)');
SELECT is((SELECT p.proconfig FROM pg_proc p WHERE p.oid = 'hpcacct.year_usage(integer, timestamptz, boolean)'::regprocedure),
          NULL, 'year_usage has no SET clause, which would stop the reports from inlining it');
SELECT is_empty($$SELECT oid::regprocedure FROM fs_objects
                  WHERE prokind = 'f'
                    AND prolang <> (SELECT oid FROM pg_language WHERE lanname = 'c') AND provolatile <> 's'$$,
                'the reports and fairshare() are STABLE');
SELECT is_empty($$SELECT c.oid::regclass FROM pg_class c
                  WHERE c.relnamespace = 'hpcacct'::regnamespace
                    AND c.relname IN ('pool', 'fairshare_user',
                                      'usage_by_resource', 'usage_by_account', 'usage_by_submitter', 'usage_by_month')
                    AND obj_description(c.oid, 'pg_class') IS NULL$$,
                'the tables and views have comments');
SELECT is((SELECT count(*) FROM pg_extension e, unnest(e.extconfig) AS t(oid)
           WHERE e.extname = 'hpcacct' AND t.oid IN ('hpcacct.setting'::regclass, 'hpcacct.pool'::regclass,
                                                    'hpcacct.fairshare_user'::regclass)),
          3::bigint, 'the site''s settings and fair-share tables are dumped by pg_dump');

-- ---- SQLSTATEs ----
SELECT throws_ok($$SELECT hpcacct.decayed_usage(NULL, 1, now(), '1 day')$$, '22004', NULL, 'NULL ts');
SELECT throws_ok($$SELECT hpcacct.decayed_usage(now(), -1, now(), '1 day')$$, '22003', NULL, 'negative amount');
SELECT throws_ok($$SELECT hpcacct.decayed_usage(now(), 'NaN', now(), '1 day')$$, '22003', NULL, 'NaN amount');
SELECT throws_ok($$SELECT hpcacct.decayed_usage(now(), 1, now(), '0 days')$$, '22023', NULL, 'zero half-life');
SELECT throws_ok($$SELECT hpcacct.decayed_usage(now(), 1, now(), '1 mon')$$, '22023', NULL, 'half-life with a month');
SELECT throws_ok($$SELECT hpcacct.decayed_usage(now(), 1, 'infinity', '1 day')$$, '22008', NULL, 'infinite at');
SELECT throws_ok($$SELECT hpcacct.decayed_usage(now(), 1, now(), '5 days', 2, 3)$$, '22003', NULL, 'decay above 1');
SELECT throws_ok($$SELECT hpcacct.decayed_usage(now(), 1, now(), '5 days', 0.5, 0)$$, '22023', NULL, 'depth 0');
SELECT throws_ok($$INSERT INTO hpcacct.setting VALUES ('half_life', 'soon')$$, '22023', NULL,
                 'a malformed setting');
SELECT throws_ok($$INSERT INTO hpcacct.pool VALUES ('x', 0)$$, '23514', NULL, 'a start month out of range');

-- ---- the aggregates in forced parallel plans ----
CREATE TABLE fs_rows AS
SELECT i % 50 AS grp,
       timestamptz '2024-03-15 00:00+00' - ((i * 7919) % 5000000) * interval '1 second'
           + CASE WHEN i % 97 = 0 THEN interval '3 days' ELSE interval '0' END AS ts,  -- some after `at`
       ((i::bigint * 104729) % 10000) / 7.0::float8 AS amount
FROM generate_series(1, 200000) AS i;
ANALYZE fs_rows;

CREATE FUNCTION pg_temp.plan_of(query text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    result text;
BEGIN
    EXECUTE 'EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, FORMAT JSON) ' || query INTO result;
    RETURN result;
END
$$;
CREATE FUNCTION pg_temp.workers_launched(query text) RETURNS integer LANGUAGE sql AS $$
    SELECT coalesce(sum(m[1]::integer), 0)::integer
    FROM regexp_matches(pg_temp.plan_of(query), '"Workers Launched": ([0-9]+)', 'g') AS m
$$;

SET LOCAL parallel_setup_cost = 0;
SET LOCAL parallel_tuple_cost = 0;
SET LOCAL min_parallel_table_scan_size = 0;
SET LOCAL max_parallel_workers_per_gather = 2;
SELECT matches(pg_temp.plan_of($$SELECT grp, hpcacct.decayed_usage(ts, amount, '2024-03-15 00:00+00', '7 days')
                                 FROM fs_rows GROUP BY grp$$),
               '"Partial Mode": "Partial"', 'half-life, grouped: the plan has a Partial Aggregate');
SELECT cmp_ok(pg_temp.workers_launched($$SELECT grp, hpcacct.decayed_usage(ts, amount, '2024-03-15 00:00+00', '7 days')
                                         FROM fs_rows GROUP BY grp$$),
              '>', 0, 'half-life, grouped: workers ran (states serialized, deserialized, combined)');
SELECT cmp_ok(pg_temp.workers_launched($$SELECT hpcacct.decayed_usage(ts, amount, '2024-03-15 00:00+00', '5 days', 0.8, 8)
                                         FROM fs_rows$$),
              '>', 0, 'interval form: workers ran');
-- The same at top level (a query calling pgTAP functions cannot run in parallel), kept in
-- psql variables: per group, the values in text form.
SELECT string_agg(grp || '=' || u, ',' ORDER BY grp) AS hl_parallel
FROM (SELECT grp, hpcacct.decayed_usage(ts, amount, '2024-03-15 00:00+00', '7 days') AS u FROM fs_rows GROUP BY grp) s \gset
SELECT string_agg(grp || '=' || u, ',' ORDER BY grp) AS iv_parallel
FROM (SELECT grp, hpcacct.decayed_usage(ts, amount, '2024-03-15 00:00+00', '5 days', 0.8, 8) AS u
      FROM fs_rows GROUP BY grp) s \gset
SELECT hpcacct.decayed_usage(ts, amount, '2024-03-15 00:00+00', '7 days') AS hl_single FROM fs_rows \gset

SET LOCAL max_parallel_workers_per_gather = 0;
SELECT is(pg_temp.workers_launched($$SELECT hpcacct.decayed_usage(ts, amount, '2024-03-15 00:00+00', '7 days')
                                     FROM fs_rows$$),
          0, 'serial: no workers');
-- Compensated sums: parallel and serial agree to 1e-12 relative (the order of additions differs).
CREATE FUNCTION pg_temp.close(a text, b text) RETURNS boolean LANGUAGE sql AS $$
    SELECT count(*) = 50 AND bool_and(abs(x.v - y.v) <= 1e-12 * greatest(abs(x.v), 1))
    FROM (SELECT split_part(e, '=', 1) AS g, split_part(e, '=', 2)::float8 AS v
          FROM unnest(string_to_array(a, ',')) AS e) x
    JOIN (SELECT split_part(e, '=', 1) AS g, split_part(e, '=', 2)::float8 AS v
          FROM unnest(string_to_array(b, ',')) AS e) y USING (g)
$$;
SELECT ok(pg_temp.close(:'hl_parallel',
                        (SELECT string_agg(grp || '=' || u, ',' ORDER BY grp)
                         FROM (SELECT grp, hpcacct.decayed_usage(ts, amount, '2024-03-15 00:00+00', '7 days') AS u
                               FROM fs_rows GROUP BY grp) s)),
          'half-life, grouped: the parallel result equals the serial one');
SELECT ok(pg_temp.close(:'iv_parallel',
                        (SELECT string_agg(grp || '=' || u, ',' ORDER BY grp)
                         FROM (SELECT grp, hpcacct.decayed_usage(ts, amount, '2024-03-15 00:00+00', '5 days', 0.8, 8) AS u
                               FROM fs_rows GROUP BY grp) s)),
          'interval form, grouped: the parallel result equals the serial one');
-- ... and both equal the formulas written out in plain SQL.
SELECT ok(pg_temp.close(:'hl_parallel',
                        (SELECT string_agg(grp || '=' || u, ',' ORDER BY grp)
                         FROM (SELECT grp, sum(CASE WHEN ts <= '2024-03-15 00:00+00'
                                                    THEN amount * power(2, -extract(epoch FROM '2024-03-15 00:00+00' - ts)::float8
                                                                           / 604800) ELSE 0 END) AS u
                               FROM fs_rows GROUP BY grp) s)),
          'half-life: equals sum of amount x 2^(-(at - ts) / half_life), rows after at left out');
SELECT ok(pg_temp.close(:'iv_parallel',
                        (SELECT string_agg(grp || '=' || u, ',' ORDER BY grp)
                         FROM (SELECT grp, sum(CASE WHEN ts <= '2024-03-15 00:00+00' AND i < 8
                                                    THEN amount * power(0.8, i) ELSE 0 END) AS u
                               FROM (SELECT grp, amount, ts,
                                            floor(extract(epoch FROM '2024-03-15 00:00+00' - ts) / 432000)::int AS i
                                     FROM fs_rows) r
                               GROUP BY grp) s)),
          'interval form: equals sum of 0.8^i x usage of period i = floor((at - ts) / 5 days), i < 8');
SELECT ok(abs(:hl_single - (SELECT hpcacct.decayed_usage(ts, amount, '2024-03-15 00:00+00', '7 days') FROM fs_rows))
              <= 1e-12 * :hl_single,
          'one group: the parallel result equals the serial one');

-- ---- generated data: a Compute Canada-like site ----
INSERT INTO setting VALUES ('timezone', 'America/Toronto') ON CONFLICT (name) DO UPDATE SET value = excluded.value;
INSERT INTO pool (name, year_start_month) VALUES ('fsc-cedar', 4), ('fsc-cedar-gpu', 4), ('fsc-graham', 4);
-- fsc-graham-gpu is not listed: its year starts in January.
INSERT INTO account (name) SELECT 'fsa' || a FROM generate_series(0, 5) AS a;
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, pool, valid) VALUES
    ('fsc-cedar', 'cpu', 'cpu=48,mem=192G', 'cpu=1,mem=4G', 1, 'core-equivalent-hours', NULL, '[-infinity,infinity)'),
    ('fsc-cedar', 'gpu', 'cpu=24,mem=128000M,gres/gpu=4', 'gres/gpu=1,cpu=6,mem=32000M', 1, 'GPU-equivalent-hours',
     'fsc-cedar-gpu', '[-infinity,infinity)'),
    ('fsc-graham', 'cpu', 'cpu=32,mem=128G', 'cpu=1,mem=4G', 1, 'core-equivalent-hours', NULL,
     '[-infinity,2024-04-01 00:00-04)'),
    ('fsc-graham', 'cpu', 'cpu=32,mem=128G', 'cpu=1,mem=4G', 1.25, 'core-equivalent-hours', NULL,
     '[2024-04-01 00:00-04,infinity)'),
    ('fsc-graham', 'gpu', 'cpu=32,mem=128000M,gres/gpu=2', 'gres/gpu=1,cpu=16,mem=64000M', 2, 'GPU-equivalent-hours',
     'fsc-graham-gpu', '[-infinity,infinity)');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres)
SELECT CASE WHEN i % 4 < 2 THEN 'fsc-cedar' ELSE 'fsc-graham' END, 'g' || i, 'fsa' || (i * 7 % 6), 'fsu' || (i * 11 % 9),
       CASE WHEN i % 2 = 0 THEN 'cpu' ELSE 'gpu' END, s.start,
       s.start + ((i * 104729) % 4320 + 1) * interval '1 minute',
       (CASE WHEN i % 2 = 0 THEN 'cpu=' || (1 + i % 16) || ',mem=' || (2 + i % 7) * (1 + i % 16) || 'G'
             ELSE 'gres/gpu=' || (1 + i % 4) || ',cpu=' || (1 + i % 24) || ',mem=' || (8 + i % 90) || 'G' END)::tres
FROM generate_series(1, 4000) AS i
CROSS JOIN LATERAL (SELECT timestamptz '2023-01-01 00:00-05' + ((i * 7919) % 1000000) * interval '61 seconds' AS start) s;
-- Re-rated, moved and deleted jobs leave reversals in the ledger.
UPDATE job SET "end" = "end" + interval '90 minutes' WHERE jobid LIKE 'g%' AND substr(jobid, 2)::int % 10 = 3;
UPDATE job SET account = 'fsa0', "user" = 'fsu0' WHERE jobid LIKE 'g%' AND substr(jobid, 2)::int % 10 = 7;
DELETE FROM job WHERE jobid LIKE 'g%' AND substr(jobid, 2)::int % 10 = 9;
-- Allocations: a grant per account, pool and year; supplements, retractions, a two-year grant.
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
SELECT 'fsa' || a, 'grant', 1000 * (1 + (a + p.n) % 5) * CASE WHEN p.unit LIKE 'GPU%' THEN 0.1 ELSE 1 END, p.unit, p.pool,
       make_date(y, p.m, 1), (make_date(y, p.m, 1) + interval '1 year')::date - 1
FROM generate_series(0, 5) AS a, generate_series(2023, 2024) AS y,
     (VALUES (0, 'fsc-cedar', 'core-equivalent-hours', 4), (1, 'fsc-cedar-gpu', 'GPU-equivalent-hours', 4),
             (2, 'fsc-graham', 'core-equivalent-hours', 4), (3, 'fsc-graham-gpu', 'GPU-equivalent-hours', 1))
         AS p(n, pool, unit, m)
WHERE (a + p.n + y) % 7 <> 0;
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until) VALUES
    ('fsa1', 'supplement', 777, 'core-equivalent-hours', 'fsc-cedar', '2024-09-16', '2025-03-31'),
    ('fsa2', 'retraction', -500, 'core-equivalent-hours', 'fsc-graham', '2024-06-15', '2025-03-31'),
    ('fsa3', 'grant', 5000, 'GPU-equivalent-hours', 'fsc-graham-gpu', '2023-07-01', '2025-06-30'),
    ('fsa4', 'transfer', -200, 'GPU-equivalent-hours', 'fsc-cedar-gpu', '2024-04-01', '2025-03-31'),
    ('fsa5', 'transfer', 200, 'GPU-equivalent-hours', 'fsc-cedar-gpu', '2024-04-01', '2025-03-31');
INSERT INTO fairshare_user VALUES ('fsa2', 'fsu4', 2), ('fsa2', 'fsu5', 0), ('fsa3', 'fsu-new', 1);

-- Each job's current charge, straight from the job table (not from the ledger), and the
-- allocation years written out for at = 15 November 2024, 10:00 in Toronto.
CREATE TEMP TABLE fs_jobs AS
SELECT coalesce(r.pool, r.cluster) AS pool, r.unit, r.cluster, r.partition, r.rate, j.account, j."user" AS submitter,
       j.start, j."end",
       round(charge(j.alloctres, j."end" - j.start, r.bundle, r.rate, CASE WHEN r.exclusive THEN r.node END)::numeric, 6)
           AS amount
FROM job j JOIN resource r ON r.cluster = j.cluster AND r.partition = j.partition AND r.valid @> j.start
WHERE j.cluster LIKE 'fsc-%';
CREATE TEMP TABLE fs_years AS
SELECT v.pool, v.y, v.first_day, (v.first_day + interval '1 year')::date - 1 AS last_day,
       v.first_day::timestamp AT TIME ZONE 'America/Toronto' AS ys,
       (v.first_day + interval '1 year')::timestamp AT TIME ZONE 'America/Toronto' AS ye
FROM (VALUES ('fsc-cedar', 2024, date '2024-04-01'), ('fsc-cedar-gpu', 2024, date '2024-04-01'),
             ('fsc-graham', 2024, date '2024-04-01'), ('fsc-graham-gpu', 2024, date '2024-01-01'),
             ('fsc-cedar', 2023, date '2023-04-01'), ('fsc-cedar-gpu', 2023, date '2023-04-01'),
             ('fsc-graham', 2023, date '2023-04-01'), ('fsc-graham-gpu', 2023, date '2023-01-01')) AS v(pool, y, first_day);
\set at '''2024-11-15 10:00-05'''
-- Jobs pro rata inside [year start, min(at, year end)), jobs ended by at.
CREATE TEMP TABLE fs_pieces AS
SELECT y.y, j.*, y.ys, y.ye,
       j.amount * extract(epoch FROM least(j."end", y.ye, :at) - greatest(j.start, y.ys))
                / extract(epoch FROM j."end" - j.start) AS part
FROM fs_jobs j JOIN fs_years y USING (pool)
WHERE j."end" <= :at AND j."end" > y.ys AND j.start < least(y.ye, :at);
CREATE TEMP TABLE fs_alloc AS
SELECT y.y, l.pool, l.unit, l.account,
       sum(l.amount * (least(l.valid_until, y.last_day) - greatest(l.valid_from, y.first_day) + 1)
           / (l.valid_until - l.valid_from + 1)) AS allocation
FROM ledger l JOIN fs_years y ON y.pool = l.pool
WHERE l.kind <> 'charge' AND l.valid_from <= y.last_day AND l.valid_until >= y.first_day
GROUP BY y.y, l.pool, l.unit, l.account;
CREATE TEMP TABLE fs_expected_account AS
SELECT coalesce(a.pool, u.pool) AS pool, coalesce(a.unit, u.unit) AS unit, coalesce(a.account, u.account) AS account,
       coalesce(a.y, u.y) AS y, coalesce(a.allocation, 0) AS allocation, coalesce(u.usage, 0) AS usage
FROM (SELECT * FROM fs_alloc) a
FULL JOIN (SELECT y, pool, unit, account, sum(part) AS usage FROM fs_pieces GROUP BY y, pool, unit, account) u
  ON u.y = a.y AND u.pool = a.pool AND u.unit = a.unit AND u.account = a.account;

-- Differences beyond the last rounded digit.
CREATE FUNCTION pg_temp.off(a numeric, b numeric, tolerance numeric DEFAULT 0.000002) RETURNS boolean
    LANGUAGE sql IMMUTABLE AS $$ SELECT (a IS NULL) <> (b IS NULL) OR abs(a - b) > tolerance $$;

SELECT cmp_ok((SELECT count(*) FROM fs_pieces WHERE y = 2024), '>', 500::bigint, 'the current years have usage to check');
SELECT is_empty($$
    SELECT e.pool, e.unit, e.account
    FROM (SELECT * FROM fs_expected_account WHERE y = 2024) e
    FULL JOIN (SELECT * FROM hpcacct.usage_by_account(NULL, '2024-11-15 10:00-05') WHERE pool LIKE 'fsc-%') r
      USING (pool, unit, account)
    JOIN fs_years y ON y.pool = coalesce(e.pool, r.pool) AND y.y = 2024
    CROSS JOIN LATERAL (SELECT e.usage * extract(epoch FROM y.ye - y.ys)
                               / extract(epoch FROM timestamptz '2024-11-15 10:00-05' - y.ys) AS projected) p
    WHERE e.pool IS NULL OR r.pool IS NULL OR r.year <> 2024 OR r.first_day <> y.first_day
       OR pg_temp.off(r.allocation, e.allocation) OR pg_temp.off(r.usage, e.usage)
       OR pg_temp.off(r.usage_years, e.usage / 8760)
       OR pg_temp.off(r.utilization_pct, CASE WHEN e.allocation > 0 THEN e.usage * 100 / e.allocation END, 0.01)
       OR pg_temp.off(r.projected_usage, p.projected)
       OR pg_temp.off(r.projected_utilization_pct, CASE WHEN e.allocation > 0 THEN p.projected * 100 / e.allocation END, 0.01)
       OR pg_temp.off(r.overuse, greatest(e.usage - greatest(e.allocation, 0), 0))$$,
    'usage_by_account, current year: allocation, usage, utilization, projection and overuse as recomputed');
SELECT is_empty($$
    SELECT e.pool, e.unit, e.account
    FROM (SELECT * FROM fs_expected_account WHERE y = 2023) e
    FULL JOIN (SELECT * FROM hpcacct.usage_by_account(2023, '2024-11-15 10:00-05') WHERE pool LIKE 'fsc-%') r
      USING (pool, unit, account)
    WHERE e.pool IS NULL OR r.pool IS NULL OR r.year <> 2023
       OR pg_temp.off(r.allocation, e.allocation) OR pg_temp.off(r.usage, e.usage)
       OR r.projected_usage IS NOT NULL OR r.projected_utilization_pct IS NOT NULL$$,
    'usage_by_account, past year: allocation and usage as recomputed, no projection');
SELECT is_empty($$
    SELECT e.pool, e.cluster, e.partition
    FROM (SELECT pool, unit, cluster, partition, sum(part) AS usage, sum(part / rate::numeric) AS hours
          FROM fs_pieces WHERE y = 2024 GROUP BY pool, unit, cluster, partition) e
    FULL JOIN (SELECT * FROM hpcacct.usage_by_resource(NULL, '2024-11-15 10:00-05') WHERE pool LIKE 'fsc-%') r
      USING (pool, unit, cluster, partition)
    JOIN fs_years y ON y.pool = coalesce(e.pool, r.pool) AND y.y = 2024
    WHERE e.pool IS NULL OR r.pool IS NULL OR pg_temp.off(r.usage, e.usage)
       OR pg_temp.off(r.equivalent_hours, e.hours)
       OR pg_temp.off(r.projected_usage, e.usage * extract(epoch FROM y.ye - y.ys)
                                         / extract(epoch FROM timestamptz '2024-11-15 10:00-05' - y.ys))$$,
    'usage_by_resource: usage, unweighted equivalent-hours (rates change mid-year) and projection as recomputed');
SELECT is_empty($$
    SELECT e.pool, e.account, e.submitter
    FROM (SELECT pool, unit, account, submitter, sum(part) AS usage,
                 sum(part) * 100 / nullif(sum(sum(part)) OVER (PARTITION BY pool, unit, account), 0) AS pct
          FROM fs_pieces WHERE y = 2024
          GROUP BY pool, unit, account, submitter) e
    FULL JOIN (SELECT * FROM hpcacct.usage_by_submitter(NULL, '2024-11-15 10:00-05') WHERE pool LIKE 'fsc-%') r
      USING (pool, unit, account, submitter)
    WHERE e.pool IS NULL OR r.pool IS NULL OR pg_temp.off(r.usage, e.usage)
       OR pg_temp.off(r.account_pct, e.pct, 0.01)$$,
    'usage_by_submitter: usage and share of the account as recomputed');
SELECT is_empty($$
    WITH months AS (
        SELECT p.*, m.month, m.month::timestamp AT TIME ZONE 'America/Toronto' AS ms,
               (m.month + interval '1 month')::timestamp AT TIME ZONE 'America/Toronto' AS me
        FROM fs_pieces p
        CROSS JOIN LATERAL (SELECT (date '2022-12-01' + k * interval '1 month')::date AS month
                            FROM generate_series(0, 30) AS k) m
        WHERE p.y = 2024
    )
    SELECT e.pool, e.account, e.month
    FROM (SELECT pool, unit, cluster, partition, account, submitter, month,
                 sum(amount * extract(epoch FROM least("end", ye, me, timestamptz '2024-11-15 10:00-05')
                                                 - greatest(start, ys, ms))
                            / extract(epoch FROM "end" - start)) AS usage
          FROM months WHERE least("end", ye, me, timestamptz '2024-11-15 10:00-05') > greatest(start, ys, ms)
          GROUP BY pool, unit, cluster, partition, account, submitter, month) e
    FULL JOIN (SELECT * FROM hpcacct.usage_by_month(NULL, '2024-11-15 10:00-05') WHERE pool LIKE 'fsc-%') r
      USING (pool, unit, cluster, partition, account, submitter, month)
    WHERE e.pool IS NULL OR r.pool IS NULL OR pg_temp.off(r.usage, e.usage)$$,
    'usage_by_month: each month''s usage as recomputed');
SELECT is_empty($$
    SELECT pool, unit, account
    FROM (SELECT pool, unit, account, sum(usage) AS usage FROM hpcacct.usage_by_month(NULL, '2024-11-15 10:00-05')
          WHERE pool LIKE 'fsc-%' GROUP BY pool, unit, account) m
    JOIN hpcacct.usage_by_account(NULL, '2024-11-15 10:00-05') a USING (pool, unit, account)
    WHERE abs(m.usage - a.usage) > 0.0001$$,
    'the months add up to the year''s usage');
SELECT results_eq($$SELECT * FROM hpcacct.usage_by_account WHERE pool LIKE 'fsc-%' ORDER BY pool, unit, account$$,
                  $$SELECT * FROM hpcacct.usage_by_account(NULL, now()) WHERE pool LIKE 'fsc-%' ORDER BY pool, unit, account$$,
                  'the view usage_by_account is the current year');
SELECT results_eq($$SELECT * FROM hpcacct.usage_by_month WHERE pool LIKE 'fsc-%'
                    ORDER BY pool, unit, cluster, partition, account, submitter, month$$,
                  $$SELECT * FROM hpcacct.usage_by_month(NULL, now()) WHERE pool LIKE 'fsc-%'
                    ORDER BY pool, unit, cluster, partition, account, submitter, month$$,
                  'the view usage_by_month is the current year');

-- ---- fairshare(at) against the formula in plain SQL ----
CREATE FUNCTION pg_temp.expected_fairshare(weight_sql text, penalty float8) RETURNS TABLE (
    pool text, unit text, account text, submitter text, share float8, usage float8, norm float8,
    exhausted boolean, factor float8)
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY EXECUTE format($q$
    WITH w AS (
        SELECT j.pool, j.unit, j.account, j.submitter, j.amount::float8 * (%s) AS u
        FROM fs_jobs j CROSS JOIN (SELECT timestamptz '2024-11-15 10:00-05' AS at) c
        WHERE j."end" <= c.at
    ), alloc AS (
        SELECT l.pool, l.unit, l.account, greatest(sum(l.amount), 0) AS allocation
        FROM hpcacct.ledger l
        WHERE l.kind <> 'charge' AND l.pool LIKE 'fsc-%%' AND date '2024-11-15' BETWEEN l.valid_from AND l.valid_until
        GROUP BY 1, 2, 3
    ), acc AS (
        SELECT coalesce(a.pool, u.pool) AS pool, coalesce(a.unit, u.unit) AS unit, coalesce(a.account, u.account) AS account,
               coalesce(a.allocation, 0) AS allocation, coalesce(u.u, 0) AS u
        FROM alloc a FULL JOIN (SELECT w.pool, w.unit, w.account, sum(w.u) AS u FROM w GROUP BY 1, 2, 3) u
          ON u.pool = a.pool AND u.unit = a.unit AND u.account = a.account
        WHERE coalesce(a.allocation, 0) > 0 OR coalesce(u.u, 0) > 0
    ), s AS (
        SELECT acc.*,
               coalesce(acc.allocation / nullif(sum(acc.allocation) OVER p, 0), 0)::float8 AS share,
               coalesce(acc.u / nullif(sum(acc.u) OVER p, 0), 0) AS norm, sum(acc.u) OVER p AS total,
               coalesce((SELECT e.allocation > 0 AND e.usage >= e.allocation FROM fs_expected_account e
                         WHERE e.y = 2024 AND e.pool = acc.pool AND e.unit = acc.unit AND e.account = acc.account), false)
                   AS exhausted
        FROM acc WINDOW p AS (PARTITION BY acc.pool, acc.unit)
    ), m AS (
        SELECT s.pool, s.unit, s.account, x.submitter, coalesce(uu.u, 0) AS u, s.total, s.exhausted,
               s.share * coalesce(f.shares, 1)
                   / nullif(sum(coalesce(f.shares, 1)) OVER (PARTITION BY s.pool, s.unit, s.account), 0) AS share
        FROM s
        JOIN (SELECT w.pool, w.unit, w.account, w.submitter FROM w GROUP BY 1, 2, 3, 4 HAVING sum(w.u) > 0
              UNION SELECT s.pool, s.unit, f.account, f.submitter FROM s JOIN hpcacct.fairshare_user f USING (account)) x
          USING (pool, unit, account)
        LEFT JOIN (SELECT w.pool, w.unit, w.account, w.submitter, sum(w.u) AS u FROM w GROUP BY 1, 2, 3, 4) uu
          USING (pool, unit, account, submitter)
        LEFT JOIN hpcacct.fairshare_user f USING (account, submitter)
    )
    SELECT s.pool, s.unit, s.account, NULL::text, s.share, s.u, s.norm, s.exhausted,
           CASE WHEN s.share = 0 THEN 0 ELSE power(2, -s.norm / s.share) END
           * CASE WHEN s.exhausted THEN %s ELSE 1 END
    FROM s
    UNION ALL
    SELECT m.pool, m.unit, m.account, m.submitter, coalesce(m.share, 0), m.u, coalesce(m.u / nullif(m.total, 0), 0),
           m.exhausted,
           CASE WHEN coalesce(m.share, 0) = 0 THEN 0 ELSE power(2, -coalesce(m.u / nullif(m.total, 0), 0) / m.share) END
           * CASE WHEN m.exhausted THEN %s ELSE 1 END
    FROM m
    $q$, weight_sql, penalty, penalty);
END
$$;

CREATE FUNCTION pg_temp.fairshare_mismatches(weight_sql text, penalty float8 DEFAULT 0.01) RETURNS bigint
LANGUAGE sql AS $$
    SELECT count(*)
    FROM pg_temp.expected_fairshare(weight_sql, penalty) e
    FULL JOIN (SELECT * FROM hpcacct.fairshare('2024-11-15 10:00-05') WHERE pool LIKE 'fsc-%') r
      ON r.pool = e.pool AND r.unit = e.unit AND r.account = e.account
     AND r.submitter IS NOT DISTINCT FROM e.submitter
    WHERE e.pool IS NULL OR r.pool IS NULL OR r.exhausted <> e.exhausted
       OR abs(r.share - e.share) > 1e-12 OR abs(r.usage - e.usage) > 1e-9 * greatest(e.usage, 1)
       OR abs(r.norm_usage - e.norm) > 1e-12 OR abs(r.factor - e.factor) > 1e-12
$$;

SELECT cmp_ok((SELECT count(*) FROM hpcacct.fairshare('2024-11-15 10:00-05') WHERE pool LIKE 'fsc-%' AND submitter IS NOT NULL),
              '>', 40::bigint, 'fairshare has user rows to check');
SELECT ok((SELECT bool_or(exhausted) AND NOT bool_and(exhausted)
           FROM hpcacct.fairshare('2024-11-15 10:00-05') WHERE pool LIKE 'fsc-%'),
          'some accounts have used up their allocation, some have not');
SELECT is(pg_temp.fairshare_mismatches('power(2, -extract(epoch FROM c.at - j."end")::float8 / 604800)'), 0::bigint,
          'fairshare, half-life 7 days: shares, decayed and normalized usage, exhaustion and factors as recomputed');
INSERT INTO setting VALUES ('decay', 'interval'), ('period', '3 days'), ('period_decay', '0.7'), ('depth', '20'),
                           ('exhausted_factor', '0.05');
SELECT is(pg_temp.fairshare_mismatches(
              'CASE WHEN floor(extract(epoch FROM c.at - j."end") / 259200) < 20
                    THEN power(0.7, floor(extract(epoch FROM c.at - j."end") / 259200)) ELSE 0 END', 0.05),
          0::bigint, 'fairshare, 3-day periods x 0.7 over 20, exhausted x 0.05: as recomputed');
DELETE FROM setting WHERE name IN ('decay', 'period', 'period_decay', 'depth', 'exhausted_factor');

-- ---- the month of `at` in closed form against the job-by-job sum ----
-- An hour after the last charge ends, no charge of that month ends after `at`: fairshare()
-- scales the rollup's decayed sums of the month back from its end instead of reading the
-- jobs. It must agree with the decayed_usage aggregate over the ledger, job by job, within
-- 1e-12 of the decayed sum of the charges and reversals' magnitudes (README).
CREATE TEMP TABLE fs_closed_at AS
SELECT max(l.job_end) + interval '1 hour' AS at FROM hpcacct.ledger l WHERE l.kind = 'charge';
CREATE TEMP TABLE fs_job_by_job AS
SELECT coalesce(r.pool, r.cluster) AS pool, l.unit, l.account, l.submitter,
       coalesce(hpcacct.decayed_usage(l.job_end, l.amount::float8, c.at, '7 days') FILTER (WHERE l.amount >= 0), 0)
       - coalesce(hpcacct.decayed_usage(l.job_end, -l.amount::float8, c.at, '7 days') FILTER (WHERE l.amount < 0), 0)
           AS usage,
       hpcacct.decayed_usage(l.job_end, abs(l.amount)::float8, c.at, '7 days') AS magnitude
FROM hpcacct.ledger l JOIN hpcacct.resource r USING (resource_id) CROSS JOIN fs_closed_at c
WHERE l.kind = 'charge' AND l.job_end <= c.at
GROUP BY 1, 2, 3, 4;
CREATE TEMP TABLE fs_closed AS
SELECT f.* FROM fs_closed_at c, hpcacct.fairshare_all(c.at) f WHERE f.submitter IS NOT NULL;
SELECT cmp_ok((SELECT count(*) FROM fs_closed f JOIN fs_job_by_job e USING (pool, unit, account, submitter)
               WHERE e.usage > 0),
              '>', 30::bigint, 'closed form: users with usage to compare');
SELECT is_empty($$
    SELECT f.pool, f.account, f.submitter, f.usage, e.usage
    FROM fs_closed f JOIN fs_job_by_job e USING (pool, unit, account, submitter)
    WHERE abs(f.usage - greatest(e.usage, 0)) > 1e-12 * e.magnitude$$,
    'closed form: each user''s decayed usage is the job-by-job sum within 1e-12');
-- A charge of the same month ending after `at` makes fairshare() read the month's jobs: the
-- same figures within 1e-12 (the new job does not count).
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres)
SELECT 'fsc-cedar', 'g-late', 'fsa1', 'fsu1', 'cpu', c.at - interval '1 hour', c.at + interval '1 minute', 'cpu=4,mem=8G'
FROM fs_closed_at c;
SELECT is_empty($$
    SELECT f.pool, f.account, f.submitter, f.usage, g.usage
    FROM fs_closed f
    FULL JOIN (SELECT g.* FROM fs_closed_at c, hpcacct.fairshare_all(c.at) g WHERE g.submitter IS NOT NULL) g
      USING (pool, unit, account, submitter)
    WHERE g.pool IS NULL OR f.pool IS NULL OR abs(f.usage - g.usage) > 1e-12 * greatest(f.usage, 1e-300)
       OR abs(f.factor - g.factor) > 1e-12$$,
    'closed form and the month read job by job: the same users and figures within 1e-12');
DELETE FROM job WHERE jobid = 'g-late';

-- A hostile search_path changes nothing.
SELECT md5(string_agg(f::text, ',' ORDER BY f::text)) AS fs_safe
FROM hpcacct.fairshare('2024-11-15 10:00-05') f WHERE pool LIKE 'fsc-%' \gset
CREATE SCHEMA fs_evil;
CREATE FUNCTION fs_evil.round(x numeric, y integer) RETURNS numeric LANGUAGE sql AS 'SELECT 0::numeric';
SET LOCAL search_path = fs_evil, public;
SELECT is((SELECT md5(string_agg(f::text, ',' ORDER BY f::text)) FROM hpcacct.fairshare('2024-11-15 10:00-05') f
           WHERE pool LIKE 'fsc-%'),
          :'fs_safe', 'fairshare under a hostile search_path gives the same table');
SELECT is((SELECT count(*) FROM hpcacct.usage_by_account(NULL, '2024-11-15 10:00-05') WHERE pool LIKE 'fsc-%'
           AND usage > 0), (SELECT count(*) FROM fs_expected_account WHERE y = 2024 AND usage > 0),
          'usage_by_account under a hostile search_path: the same accounts have usage');
SET LOCAL search_path = public, hpcacct;

-- ---- One definition of the projection to the year's end ----
SELECT is(hpcacct_internal.projected_usage(10, 'current', interval '1 day', interval '4 days'), 40::numeric,
          'projected_usage(): usage x length / elapsed in the current year');
SELECT is(ARRAY[hpcacct_internal.projected_usage(10, 'past', interval '4 days', interval '4 days'),
                hpcacct_internal.projected_usage(10, 'future', interval '0', interval '4 days'),
                hpcacct_internal.projected_usage(10, 'current', interval '0', interval '4 days')],
          ARRAY[NULL, NULL, NULL]::numeric[], 'projected_usage(): none in a past or future year, nor before time elapsed');

SELECT * FROM finish();
ROLLBACK;
