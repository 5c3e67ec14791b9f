-- Sliding-window quota contracts (rules §3, RWTH): labels of the SQL objects, SQLSTATEs,
-- nothing written on error, the states the submit check reads, and a parallel plan whose
-- workers really ran.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(63);

-- ---- objects and their labels ----
SELECT has_composite('hpcacct', 'quota', 'composite type hpcacct.quota');
SELECT is((SELECT array_agg(attname::text || ' ' || format_type(atttypid, atttypmod) ORDER BY attnum)
           FROM pg_attribute WHERE attrelid = 'hpcacct.quota'::regclass AND attnum > 0 AND NOT attisdropped),
          ARRAY['monthly double precision', 'remaining_prev double precision', 'consumed_current double precision',
                'consumable_pct double precision', 'consumable double precision', 'state text'],
          'hpcacct.quota has the fields of the issue');
SELECT is_aggregate('hpcacct', 'window_quota', ARRAY['date', 'double precision', 'double precision', 'date'],
                    'hpcacct.window_quota(date, float8, float8, date) is an aggregate');
SELECT is((SELECT proparallel FROM pg_proc WHERE oid = 'hpcacct.window_quota(date, float8, float8, date)'::regprocedure),
          's'::"char", 'the aggregate is PARALLEL SAFE');
SELECT ok((SELECT aggcombinefn <> 0 AND aggserialfn <> 0 AND aggdeserialfn <> 0 AND aggtranstype = 'internal'::regtype
           FROM pg_aggregate WHERE aggfnoid = 'hpcacct.window_quota(date, float8, float8, date)'::regprocedure),
          'internal state with combine, serial and deserial functions');
SELECT isnt_strict('hpcacct_internal', 'window_quota_transfn', ARRAY['internal', 'date', 'double precision', 'double precision', 'date'],
                   'the transition function is not strict: NULL arguments reach it and are refused');
SELECT is_empty($$SELECT p.oid::regprocedure FROM pg_proc p
                  WHERE p.pronamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace)
                    AND (p.proname LIKE 'window_quota%' OR p.proname = 'add_quota_period')
                    AND (obj_description(p.oid, 'pg_proc') IS NULL OR (p.prokind = 'f' AND p.proname <> 'add_quota_period'
                                                                        AND p.proparallel <> 's'))$$,
                'every window-quota function has a comment; all but add_quota_period are PARALLEL SAFE');
SELECT is_empty($$SELECT p.oid::regprocedure FROM pg_proc p
                  WHERE p.pronamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace)
                    AND (p.proname LIKE 'window_quota%' OR p.proname = 'add_quota_period')
                    AND p.prokind = 'f' AND p.prolang <> (SELECT oid FROM pg_language WHERE lanname = 'c')
                    AND p.prosqlbody IS NULL  -- a body parsed at creation binds its names then
                    AND NOT coalesce('search_path=pg_catalog, pg_temp' = ANY(p.proconfig), false)$$,
                'SQL and PL/pgSQL functions pin search_path to pg_catalog, pg_temp or have a body parsed at creation');
SELECT volatility_is('hpcacct', 'window_quota_usage', ARRAY['text', 'date'], 'stable', 'window_quota_usage is STABLE');
SELECT is((SELECT p.prorows FROM pg_proc p WHERE p.oid = 'hpcacct.window_quota_usage(text, date)'::regprocedure),
          1::real, 'window_quota_usage(account) is estimated at the one row it returns');
SELECT volatility_is('hpcacct', 'window_quota_state', ARRAY['text', 'date'], 'stable', 'window_quota_state is STABLE');
SELECT volatility_is('hpcacct', 'add_quota_period', ARRAY['text', 'date', 'date', 'double precision', 'text', 'text'],
                     'volatile', 'add_quota_period is VOLATILE');
SELECT has_view('hpcacct', 'window_quota_usage', 'view hpcacct.window_quota_usage');
SELECT ok((SELECT 'hpcacct.quota_period'::regclass = ANY (extconfig) AND 'hpcacct.monthly_allowance'::regclass = ANY (extconfig)
           FROM pg_extension WHERE extname = 'hpcacct'),
          'quota_period and monthly_allowance are dumped by pg_dump');

-- ---- the aggregate refuses bad rows ----
SELECT throws_ok($$SELECT hpcacct.window_quota(NULL, 1, 1, '2012-01-01')$$, '22004', NULL, 'NULL month');
SELECT throws_ok($$SELECT hpcacct.window_quota('2012-01-01', NULL, 1, '2012-01-01')$$, '22004', NULL, 'NULL allowance');
SELECT throws_ok($$SELECT hpcacct.window_quota('2012-01-01', 1, NULL, '2012-01-01')$$, '22004', NULL, 'NULL consumed');
SELECT throws_ok($$SELECT hpcacct.window_quota('2012-01-01', 1, 1, NULL)$$, '22004', NULL, 'NULL at');
SELECT throws_ok($$SELECT hpcacct.window_quota('2012-01-01', -0.5, 1, '2012-01-01')$$, '22003', NULL, 'negative allowance');
SELECT throws_ok($$SELECT hpcacct.window_quota('2012-01-01', 1, '-Infinity', '2012-01-01')$$, '22003', NULL,
                 'infinite consumption');
SELECT throws_ok($$SELECT hpcacct.window_quota('2012-01-01', 'NaN', 1, '2012-01-01')$$, '22003', NULL, 'NaN allowance');
SELECT throws_ok($$SELECT hpcacct.window_quota('2012-01-01', 1e16, 1, '2012-01-01')$$, '22003', NULL, 'allowance above 2^53');
SELECT throws_ok($$SELECT hpcacct.window_quota('infinity', 1, 1, '2012-01-01')$$, '22008', NULL, 'infinite month');
SELECT throws_ok($$SELECT hpcacct.window_quota(m, 1, 1, m) FROM unnest('{2012-01-01,2012-03-01}'::date[]) m$$,
                 '22023', NULL, 'rows naming different months at');
SELECT lives_ok($$SELECT hpcacct.window_quota('2012-01-01', 9007199254740992, 0, '2012-01-01')$$, '2^53 is accepted');

-- ---- figures and states ----
SELECT is((SELECT hpcacct.window_quota(m::date, 1000, CASE WHEN m = '2012-03-01' THEN 800 ELSE 0 END, '2012-04-01')
           FROM generate_series(timestamp '2012-01-01', '2012-06-01', '1 month') AS m),
          (1000, 200, 0, 120, 2200, 'normal')::hpcacct.quota, 'r_wlm_usage example: 200, 120 %, 2 200');
SELECT is((SELECT (hpcacct.window_quota(m::date, 1000, CASE WHEN m = '2012-03-01' THEN 3500 ELSE 0 END, '2012-04-01')).consumable_pct
           FROM generate_series(timestamp '2012-01-01', '2012-06-01', '1 month') AS m),
          -101::float8, 'below -100 % shows -101');
SELECT is((SELECT hpcacct.window_quota(m, 1, 1, m) FROM unnest('{}'::date[]) m), NULL, 'no rows: NULL');

-- ---- tables: bad rows are refused, nothing is written ----
INSERT INTO hpcacct.setting VALUES ('timezone', 'Europe/Berlin') ON CONFLICT (name) DO UPDATE SET value = excluded.value;
INSERT INTO hpcacct.account (name) VALUES ('wq_a'), ('wq_b'), ('wq_c'), ('wq_d');
INSERT INTO hpcacct.resource (cluster, partition, node, bundle, rate, unit) VALUES
    ('wqc', 'cpu', 'cpu=48', 'cpu=1', 1, 'core-hours');
SELECT lives_ok($$SELECT hpcacct.add_quota_period('wq_a', '2012-01-01', '2012-06-30', 1000, 'wqc')$$, 'a valid period');
CREATE FUNCTION pg_temp.quota_rows() RETURNS bigint LANGUAGE sql
    AS 'SELECT (SELECT count(*) FROM hpcacct.quota_period) + (SELECT count(*) FROM hpcacct.monthly_allowance)';
SELECT is(pg_temp.quota_rows(), 7::bigint, 'one period with six months');
SELECT throws_ok($$SELECT hpcacct.add_quota_period('nobody', '2012-01-01', '2012-06-30', 1000)$$, '42704', NULL,
                 'unknown account');
SELECT throws_ok($$SELECT hpcacct.add_quota_period('wq_b', '2012-01-02', '2012-06-30', 1000)$$, '23514', NULL,
                 'period not starting on the first');
SELECT throws_ok($$SELECT hpcacct.add_quota_period('wq_b', '2012-01-01', '2012-02-28', 1000)$$, '23514', NULL,
                 'period not ending on the last day (2012 is a leap year)');
SELECT throws_ok($$SELECT hpcacct.add_quota_period('wq_b', '2012-01-01', 'infinity', 1000)$$, '23514', NULL,
                 'infinite period');
SELECT throws_ok($$SELECT hpcacct.add_quota_period('wq_a', '2012-06-01', '2012-12-31', 1000)$$, '23P01', NULL,
                 'overlapping periods of one account');
SELECT throws_ok($$SELECT hpcacct.add_quota_period('wq_b', '2012-01-01', '2012-06-30', -1)$$, '22003',
                 'add_quota_period: monthly_allowance must be a number from 0 to 2^53, not -1', 'negative allowance');
SELECT throws_ok($$SELECT hpcacct.add_quota_period('wq_b', '2012-01-01', '2012-06-30', 'NaN')$$, '22003',
                 'add_quota_period: monthly_allowance must be a number from 0 to 2^53, not NaN', 'NaN allowance');
SELECT throws_ok($$SELECT hpcacct.add_quota_period('wq_b', '2012-06-01', '2012-01-31', 1000)$$, '22023',
                 'add_quota_period: period_end 2012-01-31 is before period_start 2012-06-01', 'a period that ends before it starts');
SELECT throws_ok($$INSERT INTO hpcacct.monthly_allowance VALUES ('wq_a', '2012-01-01', '2012-06-30', '2012-08-01', 1)$$,
                 '23514', NULL, 'month outside the period');
SELECT throws_ok($$INSERT INTO hpcacct.monthly_allowance VALUES ('wq_a', '2012-01-01', '2012-12-31', '2012-08-01', 1)$$,
                 '23503', NULL, 'allowance of a period that does not exist');
SELECT throws_ok($$UPDATE hpcacct.quota_period SET period_start = '2012-02-01' WHERE account = 'wq_a'$$,
                 '23514', NULL, 'a period cannot lose months that have an allowance');
SELECT throws_ok($$SELECT hpcacct.add_quota_period('wq_b', '2012-01-01', '2012-06-30', 1000, '')$$, '22023',
                 'add_quota_period: cluster must not be empty (NULL: every cluster)',
                 'an empty cluster (no charge would ever count)');
SELECT throws_ok($$SELECT hpcacct.add_quota_period('wq_b', '2012-01-01', '2012-06-30', 1000, NULL, '')$$, '22023',
                 'add_quota_period: unit must not be empty', 'an empty unit');
SELECT is(pg_temp.quota_rows(), 7::bigint, 'nothing was written by the refused statements');

-- ---- states for the submit check, from the ledger ----
SELECT hpcacct.add_quota_period('wq_b', '2012-01-01', '2012-06-30', 1000, 'wqc');
SELECT hpcacct.add_quota_period('wq_c', '2012-01-01', '2012-06-30', 1000);
INSERT INTO hpcacct.job (cluster, jobid, account, "user", partition, start, "end", alloctres) VALUES
    -- wq_b: 2 500 in February: March has 3 000 - 2 500 = 500 left
    ('wqc', 'b1', 'wq_b', 'u', 'cpu', '2012-02-10 00:00+01', '2012-02-10 10:00+01', 'cpu=250'),
    -- wq_c: 3 000 in February: nothing left in March
    ('wqc', 'c1', 'wq_c', 'u', 'cpu', '2012-02-10 00:00+01', '2012-02-10 10:00+01', 'cpu=300'),
    -- wq_a: 6 500 in March (> 6 x 1 000)
    ('wqc', 'a1', 'wq_a', 'u', 'cpu', '2012-03-10 00:00+01', '2012-03-10 10:00+01', 'cpu=650');
SELECT is(hpcacct.window_quota_state('wq_b', '2012-03-05'), 'normal', 'quota left: normal');
SELECT is(hpcacct.window_quota_state('wq_c', '2012-03-05'), 'low_priority', 'quota used up: low_priority');
SELECT is(hpcacct.window_quota_state('wq_a', '2012-03-05'), 'blocked', 'more than 6 x the monthly allowance: blocked');
SELECT is(hpcacct.window_quota_state('wq_a', '2012-02-05'), 'normal', 'as of February, wq_a was normal');
SELECT is(hpcacct.window_quota_state('wq_d', '2012-03-05'), NULL, 'no quota period: NULL');
SELECT is((SELECT consumable FROM hpcacct.window_quota_usage('wq_b', '2012-03-05')), 500::float8,
          'consumable from the ledger');
SELECT is((SELECT count(*) FROM hpcacct.window_quota_usage WHERE account LIKE 'wq\_%'), 3::bigint,
          'the view has one row per account with a quota period');

-- A hostile search_path changes nothing.
CREATE SCHEMA wq_evil;
CREATE TABLE wq_evil.quota_period (account text, period_start date, period_end date, cluster text, unit text);
CREATE VIEW wq_evil.charge_by_month AS SELECT 'wq_b'::text AS account, 'wqc'::text AS cluster,
    'core-hours'::text AS unit, date '2012-03-01' AS month, 1e9::numeric AS amount;
SET LOCAL search_path = wq_evil, public;
SELECT is(hpcacct.window_quota_state('wq_b', '2012-03-05'), 'normal', 'same state under a hostile search_path');
SET LOCAL search_path = public, hpcacct;

-- ---- a parallel plan: workers ran, and the result equals the serial one ----
CREATE TABLE wq_parallel AS
SELECT 'p' || a AS account, (date '2012-01-01' + (m - 1) * interval '1 month')::date AS month,
       (500 * (1 + a % 4))::float8 AS allowance, ((a * 53 + m * 17) % 3000)::float8 AS consumed
FROM generate_series(1, 36) AS m, generate_series(1, 2000) AS a
ORDER BY m, a;
ANALYZE wq_parallel;

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
SELECT matches(pg_temp.plan_of($$SELECT account, hpcacct.window_quota(month, allowance, consumed, '2013-06-01')
                                 FROM wq_parallel GROUP BY account$$),
               '"Partial Mode": "Partial"', 'grouped: the plan has a Partial Aggregate');
SELECT cmp_ok(pg_temp.workers_launched($$SELECT account, hpcacct.window_quota(month, allowance, consumed, '2013-06-01')
                                         FROM wq_parallel GROUP BY account$$),
              '>', 0, 'grouped: parallel workers ran (so states were serialized, deserialized and combined)');
SELECT cmp_ok(pg_temp.workers_launched($$SELECT hpcacct.window_quota(month, allowance, consumed, '2013-06-01')::text
                                         FROM wq_parallel$$),
              '>', 0, 'one group: parallel workers ran');
-- The same queries at top level (psql), results kept in psql variables.
SELECT md5(string_agg(account || ' ' || q::text, ',' ORDER BY account)) AS grouped_parallel,
       count(DISTINCT (q).state) AS states
FROM (SELECT account, hpcacct.window_quota(month, allowance, consumed, '2013-06-01') AS q
      FROM wq_parallel GROUP BY account) s \gset
SELECT hpcacct.window_quota(month, allowance, consumed, '2013-06-01')::text AS single_parallel FROM wq_parallel \gset
SELECT cmp_ok(pg_temp.workers_launched($$SELECT md5(string_agg(account || ' ' || q::text, ',' ORDER BY account)),
                                                count(DISTINCT (q).state)
                                         FROM (SELECT account, hpcacct.window_quota(month, allowance, consumed, '2013-06-01') AS q
                                               FROM wq_parallel GROUP BY account) s$$),
              '>', 0, 'the checksum query runs in parallel too');

SET LOCAL max_parallel_workers_per_gather = 0;
SELECT is(pg_temp.workers_launched($$SELECT hpcacct.window_quota(month, allowance, consumed, '2013-06-01')::text
                                     FROM wq_parallel$$),
          0, 'serial: no workers');
SELECT is((SELECT md5(string_agg(account || ' ' || q::text, ',' ORDER BY account))
           FROM (SELECT account, hpcacct.window_quota(month, allowance, consumed, '2013-06-01') AS q
                 FROM wq_parallel GROUP BY account) s),
          :'grouped_parallel', 'grouped: the parallel result equals the serial one');
SELECT is((SELECT hpcacct.window_quota(month, allowance, consumed, '2013-06-01')::text FROM wq_parallel),
          :'single_parallel', 'one group: the parallel result equals the serial one');
SELECT is(:states::bigint, 3::bigint, 'the parallel data set has all three states');

-- A period written directly names no empty cluster or unit, as add_quota_period() refuses them
-- (22023): a named constraint each (23514), nothing written.
SELECT throws_ok($$INSERT INTO hpcacct.quota_period (account, period_start, period_end, cluster, unit)
                   VALUES ('wq_b', '2030-01-01', '2030-06-30', '', 'core-hours')$$,
                 '23514', 'new row for relation "quota_period" violates check constraint "quota_period_cluster_named"',
                 'a period with an empty cluster is refused (quota_period_cluster_named; NULL is every cluster)');
SELECT throws_ok($$INSERT INTO hpcacct.quota_period (account, period_start, period_end, cluster, unit)
                   VALUES ('wq_b', '2030-01-01', '2030-06-30', NULL, '')$$,
                 '23514', 'new row for relation "quota_period" violates check constraint "quota_period_unit_named"',
                 'a period with an empty unit is refused (quota_period_unit_named)');
SELECT is((SELECT count(*) FROM hpcacct.quota_period WHERE period_start = '2030-01-01'), 0::bigint,
          'the refused periods wrote nothing');

SELECT * FROM finish();
ROLLBACK;
