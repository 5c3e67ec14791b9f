-- Sliding-window quotas (rules §3, RWTH): the aggregate, allowances, consumption from the
-- ledger, the r_wlm_usage view, bad input, and a parallel plan.
SET search_path = public, hpcacct;
\set SHOW_CONTEXT never

-- SQLSTATE and message of a statement that fails (its subtransaction is rolled back).
CREATE FUNCTION pg_temp.try(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

-- The aggregate over consecutive months from first_month: allowance[i] and consumed[i].
CREATE FUNCTION pg_temp.quota_of(first_month date, allowance float8[], consumed float8[], at date)
    RETURNS hpcacct.quota LANGUAGE sql AS $$
    SELECT hpcacct.window_quota((first_month + (i - 1) * interval '1 month')::date, allowance[i], consumed[i], at)
    FROM pg_catalog.generate_subscripts(allowance, 1) AS i
$$;

-- ===== rules §3's figures, with the aggregate =====
-- 50 000 a month; January 0, February 70 000: March may use 80 000 (= 3 x 50 000 - 70 000).
SELECT (pg_temp.quota_of('2012-01-01', '{50000,50000,50000,50000}', '{0,70000,0,0}', '2012-03-01')).*;
-- February 120 000: March may use 30 000, all of them borrowed from April.
SELECT (pg_temp.quota_of('2012-01-01', '{50000,50000,50000,50000}', '{0,120000,0,0}', '2012-03-01')).*;
-- r_wlm_usage's example (period 01.01.2012-30.06.2012, 1 000 a month, previous month 800
-- used, current 0): remaining 200, 120 %, 2 200 core-h. Any day names its month.
SELECT (pg_temp.quota_of('2012-01-01', '{1000,1000,1000,1000,1000,1000}', '{1000,1000,800,0,0,0}', '2012-04-17')).*;

-- ===== Edges of the period =====
-- First month: nothing is transferred into it (remaining_prev 0).
SELECT (pg_temp.quota_of('2012-01-01', '{1000,1000,1000,1000,1000,1000}', '{300,0,0,0,0,0}', '2012-01-01')).*;
-- Last month: nothing is borrowed past it (consumable = 1000 + 1000 - 500 - 100).
SELECT (pg_temp.quota_of('2012-01-01', '{1000,1000,1000,1000,1000,1000}', '{0,0,0,0,500,100}', '2012-06-01')).*;
-- A one-month period: neither transfer nor borrowing; used up, it is low_priority.
SELECT (pg_temp.quota_of('2012-05-01', '{1000}', '{300}', '2012-05-01')).*;
SELECT (pg_temp.quota_of('2012-05-01', '{1000}', '{1000}', '2012-05-01')).*;
-- A two-month period: January borrows from February; February has what January left.
SELECT (pg_temp.quota_of('2012-01-01', '{1000,1000}', '{1500,0}', '2012-01-01')).*;
SELECT (pg_temp.quota_of('2012-01-01', '{1000,1000}', '{1500,0}', '2012-02-01')).*;
-- A month outside the period has no quota: figures 0, percentage NULL, low_priority ...
SELECT at, (pg_temp.quota_of('2012-03-01', '{1000,1000,1000}', '{0,200,400}', at)).*
FROM unnest('{2012-02-01,2012-06-01,2013-03-01}'::date[]) AS at;
-- ... also after a period overdrawn twice over (the period's rules end with it).
SELECT (pg_temp.quota_of('2012-03-01', '{1000,1000,1000}', '{0,3000,3001}', '2012-06-01')).*;

-- ===== Allowance of zero =====
-- A month without allowance: percentage NULL (undefined), neighbours lend to it ...
SELECT (pg_temp.quota_of('2012-01-01', '{1000,0,1000}', '{0,0,0}', '2012-02-01')).*;
-- ... but any use in it exceeds 6 x 0: blocked.
SELECT (pg_temp.quota_of('2012-01-01', '{1000,0,1000}', '{0,10,0}', '2012-02-01')).*;
-- A period without any allowance: nothing to consume, low_priority.
SELECT (pg_temp.quota_of('2012-01-01', '{0,0,0}', '{0,0,0}', '2012-02-01')).*;

-- ===== Over quota =====
-- Combined use of the previous and current month beyond the three months' allowance:
-- (1000 + 1000 - 3500) / 1000 = -150 %, shown as -101; low_priority.
SELECT (pg_temp.quota_of('2012-01-01', '{1000,1000,1000,1000,1000,1000}', '{0,0,3500,0,0,0}', '2012-04-01')).*;
-- Exactly -100 % is shown as is; consumable 0 is low_priority already.
SELECT (pg_temp.quota_of('2012-01-01', '{50000,50000,50000,50000}', '{0,120000,30000,0}', '2012-03-01')).*;
-- Blocked once the month uses more than 6 x its allowance (6 000 is not more) ...
SELECT c AS march, (pg_temp.quota_of('2012-01-01', '{1000,1000,1000,1000,1000,1000,1000,1000,1000,1000,1000,1000}',
                                    ARRAY[0, 0, c, 0, 0, 0, 0, 0, 0, 0, 0, 0], '2012-03-01')).*
FROM unnest('{6000,6001}'::float8[]) AS c;
-- ... or the period more than 2 x the period's allowance (6 000 of 3 000 is not more),
-- even with quota left in the month.
SELECT feb, (pg_temp.quota_of('2012-01-01', '{1000,1000,1000}', ARRAY[5000, feb, 0], '2012-03-01')).*
FROM unnest('{1000,1001}'::float8[]) AS feb;

-- ===== Aggregation =====
-- Rows of one month add up, in any order; no rows give NULL, as sum() does.
SELECT (window_quota(month, allowance, consumed, '2012-02-01')).*
FROM (VALUES ('2012-03-01'::date, 1000::float8, 0::float8), ('2012-01-01', 600, 100), ('2012-02-01', 1000, 0),
             ('2012-01-01', 400, 700)) AS v(month, allowance, consumed);
SELECT window_quota(month, 1, 1, month) IS NULL AS no_rows_is_null
FROM unnest('{2012-01-01,2012-02-01}'::date[]) AS month WHERE false;

-- ===== Bad input: each refused with its SQLSTATE =====
SELECT pg_temp.try($$SELECT window_quota(NULL, 1, 1, '2012-01-01')$$) AS null_month;
SELECT pg_temp.try($$SELECT window_quota('2012-01-01', NULL, 1, '2012-01-01')$$) AS null_allowance;
SELECT pg_temp.try($$SELECT window_quota('2012-01-01', 1, NULL, '2012-01-01')$$) AS null_consumed;
SELECT pg_temp.try($$SELECT window_quota('2012-01-01', 1, 1, NULL)$$) AS null_at;
SELECT pg_temp.try($$SELECT window_quota('2012-01-01', -1, 1, '2012-01-01')$$) AS negative_allowance;
SELECT pg_temp.try($$SELECT window_quota('2012-01-01', 1, 'NaN', '2012-01-01')$$) AS nan_consumed;
SELECT pg_temp.try($$SELECT window_quota('2012-01-01', 'Infinity', 1, '2012-01-01')$$) AS infinite_allowance;
SELECT pg_temp.try($$SELECT window_quota('2012-01-01', 1, 1e300, '2012-01-01')$$) AS huge_consumed;
SELECT pg_temp.try($$SELECT window_quota('infinity', 1, 1, '2012-01-01')$$) AS infinite_month;
SELECT pg_temp.try($$SELECT window_quota('2012-01-01', 1, 1, '-infinity')$$) AS infinite_at;
SELECT pg_temp.try($$SELECT window_quota(month, 1, 1, month)
                     FROM unnest('{2012-01-01,2012-02-01}'::date[]) AS month$$) AS two_different_at;
-- The support functions take `internal`: SQL cannot call them outside the aggregate.
SELECT pg_temp.try($$SELECT hpcacct_internal.window_quota_transfn(NULL::internal, '2012-01-01', 1, 1, '2012-01-01')$$) AS transfn_alone;

-- ===== Through the tables: allowances, charges, the r_wlm_usage figures =====
-- The site time zone decides months; this test sets it and restores it at the end.
CREATE TEMP TABLE saved_setting AS SELECT * FROM setting WHERE name = 'timezone';
DELETE FROM setting WHERE name = 'timezone';
INSERT INTO setting VALUES ('timezone', 'Europe/Berlin');

INSERT INTO account (name) VALUES ('wq_spec1'), ('wq_spec2'), ('wq_rwlm'), ('wq_boundary'), ('wq_blocked'), ('wq_now');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES
    ('claix', 'c18m', 'cpu=48,mem=192G,node=1', 'cpu=1', 1, 'core-hours'),
    ('claix', 'c18g', 'cpu=48,mem=192G,gres/gpu=2,node=1', 'gres/gpu=1', 1, 'GPU-hours'),
    ('jureca', 'batch', 'cpu=48,mem=96G,node=1', 'cpu=1', 1, 'core-hours');

-- Periods of whole months; wq_rwlm counts charges on every cluster, the others on claix.
SELECT add_quota_period('wq_spec1', '2012-01-01', '2012-04-30', 50000, 'claix');
SELECT add_quota_period('wq_spec2', '2012-01-01', '2012-04-30', 50000, 'claix');
SELECT add_quota_period('wq_rwlm', '2012-01-01', '2012-06-30', 1000);
SELECT add_quota_period('wq_boundary', '2012-03-01', '2012-05-31', 1000, 'claix');
SELECT add_quota_period('wq_blocked', '2012-01-01', '2012-03-31', 1000, 'claix');
SELECT account, period_start, period_end, cluster, unit, count(*) AS months, sum(allowance) AS allowance
FROM quota_period JOIN monthly_allowance USING (account, period_start, period_end)
WHERE account LIKE 'wq\_%' GROUP BY 1, 2, 3, 4, 5 ORDER BY 1;

-- Jobs (Berlin is UTC+1 until 25 March 2012, UTC+2 after), charged 1 core-h per core-hour.
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres) VALUES
    -- wq_spec1: 70 000 core-h in February (1 000 cores, 70 h)
    ('claix', 'wq101', 'wq_spec1', 'u1', 'c18m', '2012-02-10 00:00+01', '2012-02-12 22:00+01', 'cpu=1000'),
    -- wq_spec2: 120 000 core-h in February
    ('claix', 'wq201', 'wq_spec2', 'u2', 'c18m', '2012-02-01 00:00+01', '2012-02-06 00:00+01', 'cpu=1000'),
    -- wq_rwlm: January 1 000, February 600 on claix + 400 on jureca, March 800; a GPU job in
    -- March is charged in GPU-hours and does not count against core-hours
    ('claix', 'wq301', 'wq_rwlm', 'u3', 'c18m', '2012-01-10 08:00+01', '2012-01-10 18:00+01', 'cpu=100'),
    ('claix', 'wq302', 'wq_rwlm', 'u3', 'c18m', '2012-02-10 08:00+01', '2012-02-10 14:00+01', 'cpu=100'),
    ('jureca', 'wq303', 'wq_rwlm', 'u3', 'batch', '2012-02-11 08:00+01', '2012-02-11 12:00+01', 'cpu=100'),
    ('claix', 'wq304', 'wq_rwlm', 'u3', 'c18m', '2012-03-10 08:00+01', '2012-03-10 18:00+01', 'cpu=80'),
    ('claix', 'wq305', 'wq_rwlm', 'u3', 'c18g', '2012-03-11 08:00+01', '2012-03-11 18:00+01', 'gres/gpu=2'),
    -- wq_boundary: 2 000 core-h from 31 March 22:00 to 1 April 02:00, half in each month; a job
    -- before its period and one on another cluster do not count
    ('claix', 'wq401', 'wq_boundary', 'u4', 'c18m', '2012-03-31 22:00+02', '2012-04-01 02:00+02', 'cpu=500'),
    ('claix', 'wq402', 'wq_boundary', 'u4', 'c18m', '2012-02-10 00:00+01', '2012-02-10 10:00+01', 'cpu=500'),
    ('jureca', 'wq403', 'wq_boundary', 'u4', 'batch', '2012-04-10 00:00+02', '2012-04-10 03:00+02', 'cpu=100'),
    -- wq_blocked: 7 000 core-h in February, more than 6 x 1 000
    ('claix', 'wq501', 'wq_blocked', 'u5', 'c18m', '2012-02-10 00:00+01', '2012-02-10 10:00+01', 'cpu=700');

-- The job across the month boundary is split between March and April (site time zone).
SELECT month, cluster, unit, amount FROM charge_by_month WHERE account = 'wq_boundary' ORDER BY month, cluster;

-- rules §3 through SQL: 80 000 and 30 000 in March, and r_wlm_usage's 200 / 120 % / 2 200.
SELECT * FROM window_quota_usage('wq_spec1', '2012-03-15');
SELECT * FROM window_quota_usage('wq_spec2', '2012-03-15');
SELECT * FROM window_quota_usage('wq_rwlm', '2012-04-10');

-- wq_rwlm month by month, from before its period to after it (the period shown is the one
-- containing the month, else the latest before it, else the first after it).
SELECT u.month, u.period_start, u.period_end, u.state, u.monthly, u.remaining_prev, u.consumed_current,
       u.consumable_pct, u.consumable
FROM generate_series(date '2011-12-01', date '2012-07-01', interval '1 month') AS g(at)
CROSS JOIN LATERAL window_quota_usage('wq_rwlm', g.at::date) u
ORDER BY u.month;

-- wq_boundary: the boundary job counts 1 000 in March and 1 000 in April; the February job and
-- the jureca job count nowhere.
SELECT u.month, u.state, u.monthly, u.remaining_prev, u.consumed_current, u.consumable_pct, u.consumable
FROM unnest('{2012-03-20,2012-04-20,2012-05-10}'::date[]) AS at
CROSS JOIN LATERAL window_quota_usage('wq_boundary', at) u
ORDER BY u.month;

-- wq_blocked: January is normal (as of then); February uses 7 000 > 6 x 1 000 and is blocked;
-- March stays blocked because the period's 7 000 exceed 2 x 3 000; April, after the period,
-- has no quota: low_priority.
SELECT at, window_quota_state('wq_blocked', at) AS state
FROM unnest('{2012-01-15,2012-02-15,2012-03-15,2012-04-15}'::date[]) AS at;

-- No quota period: no row, and no state (no window rule applies). An unknown account and a
-- NULL account are errors (42704, 22004), not an empty answer; a NULL day is today.
INSERT INTO account (name) VALUES ('wq_none');
SELECT count(*) AS rows_without_period FROM window_quota_usage('wq_none', '2012-03-01');
SELECT window_quota_state('wq_none', '2012-03-01') IS NULL AS no_state;
SELECT count(*) FROM window_quota_usage('nobody', '2012-03-01');
SELECT window_quota_state(NULL, '2012-03-01');
SELECT window_quota_state('wq_spec1', NULL) IS NOT DISTINCT FROM window_quota_state('wq_spec1') AS null_date_is_today;

-- ===== The view, for the current month =====
-- wq_now's period runs from two months before the current month to three after it; it
-- used 800 of its 1 000 last month: the r_wlm_usage example again, live.
SELECT add_quota_period('wq_now', (t.month - interval '2 months')::date,
                        (t.month + interval '3 months' - interval '1 day')::date, 1000, 'claix')
FROM (SELECT date_trunc('month', now() AT TIME ZONE site_timezone()) AS month) t;
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres)
SELECT 'claix', 'wq901', 'wq_now', 'u9', 'c18m', s.start, s.start + interval '8 hours', 'cpu=100'
FROM (SELECT (date_trunc('month', now() AT TIME ZONE site_timezone()) - interval '1 month' + interval '9 days')
             AT TIME ZONE site_timezone() AS start) s;
SELECT account, month = date_trunc('month', now() AT TIME ZONE site_timezone())::date AS current_month,
       period_end - period_start AS days_in_period, state, monthly, remaining_prev, consumed_current,
       consumable_pct, consumable
FROM window_quota_usage WHERE account = 'wq_now';

-- One row per account with a quota period; each equals the function for today, and the
-- aggregate over the tables computed here from scratch.
SELECT count(*) AS accounts FROM window_quota_usage WHERE account LIKE 'wq\_%';
SELECT v.account,
       v IS NOT DISTINCT FROM f AS equals_function,
       (v.state, v.monthly, v.remaining_prev, v.consumed_current, v.consumable_pct, v.consumable)
           IS NOT DISTINCT FROM ((r.q).state, (r.q).monthly, (r.q).remaining_prev, (r.q).consumed_current,
                                 (r.q).consumable_pct, (r.q).consumable) AS equals_aggregate
FROM window_quota_usage v
CROSS JOIN LATERAL window_quota_usage(v.account, (now() AT TIME ZONE site_timezone())::date) f
CROSS JOIN LATERAL (
    SELECT window_quota(a.month, a.allowance,
                        coalesce((SELECT sum(c.amount) FROM charge_by_month c
                                  WHERE c.account = v.account AND c.cluster IS NOT DISTINCT FROM coalesce(v.cluster, c.cluster)
                                    AND c.unit = v.unit AND c.month = a.month AND a.month <= v.month), 0)::float8,
                        v.month) AS q
    FROM monthly_allowance a
    WHERE a.account = v.account AND a.period_start = v.period_start) r
WHERE v.account LIKE 'wq\_%'
ORDER BY v.account;

-- ===== Bad allowances and periods: refused with a SQLSTATE, nothing written =====
SELECT (SELECT count(*) FROM quota_period) AS periods_before, (SELECT count(*) FROM monthly_allowance) AS months_before \gset
SELECT pg_temp.try($$SELECT add_quota_period('nobody', '2013-01-01', '2013-03-31', 1000)$$) AS unknown_account;
SELECT pg_temp.try($$SELECT add_quota_period('wq_spec1', '2013-01-15', '2013-03-31', 1000)$$) AS start_mid_month;
SELECT pg_temp.try($$SELECT add_quota_period('wq_spec1', '2013-01-01', '2013-03-30', 1000)$$) AS end_mid_month;
SELECT pg_temp.try($$SELECT add_quota_period('wq_spec1', '2013-06-01', '2013-01-31', 1000)$$) AS end_before_start;
SELECT pg_temp.try($$SELECT add_quota_period('wq_spec1', '-infinity', '2013-01-31', 1000)$$) AS infinite_start;
SELECT pg_temp.try($$SELECT add_quota_period('wq_spec1', '2012-04-01', '2012-09-30', 1000)$$) AS overlapping;
SELECT pg_temp.try($$SELECT add_quota_period('wq_spec1', '2013-01-01', '2013-03-31', -1)$$) AS negative_allowance;
SELECT pg_temp.try($$SELECT add_quota_period('wq_spec1', '2013-01-01', '2013-03-31', 'NaN')$$) AS nan_allowance;
SELECT pg_temp.try($$SELECT add_quota_period('wq_spec1', '2013-01-01', '2013-03-31', 'Infinity')$$) AS infinite_allowance;
SELECT pg_temp.try($$SELECT add_quota_period('wq_spec1', '2013-01-01', '2013-03-31', NULL)$$) AS null_allowance;
SELECT pg_temp.try($$INSERT INTO monthly_allowance VALUES ('wq_rwlm', '2012-01-01', '2012-06-30', '2012-07-01', 5)$$)
    AS month_after_period;
SELECT pg_temp.try($$INSERT INTO monthly_allowance VALUES ('wq_rwlm', '2012-01-01', '2012-06-30', '2012-03-15', 5)$$)
    AS month_not_first_day;
SELECT pg_temp.try($$INSERT INTO monthly_allowance VALUES ('wq_spec1', '2012-01-01', '2012-06-30', '2012-05-01', 5)$$)
    AS no_such_period;
SELECT pg_temp.try($$INSERT INTO monthly_allowance VALUES ('wq_rwlm', '2012-01-01', '2012-06-30', '2012-02-01', 5)$$)
    AS month_twice;
SELECT pg_temp.try($$UPDATE monthly_allowance SET allowance = -5 WHERE account = 'wq_rwlm'$$) AS negative_update;
-- Shortening a period that still has allowances past its new end.
SELECT pg_temp.try($$UPDATE quota_period SET period_end = '2012-03-31' WHERE account = 'wq_rwlm'$$) AS shortened;
SELECT (SELECT count(*) FROM quota_period) - :periods_before AS periods_added,
       (SELECT count(*) FROM monthly_allowance) - :months_before AS months_added;
SELECT sum(allowance) AS wq_rwlm_allowance FROM monthly_allowance WHERE account = 'wq_rwlm';
-- Without those months it can be shortened, and its allowances follow (ON UPDATE CASCADE).
BEGIN;
DELETE FROM monthly_allowance WHERE account = 'wq_rwlm' AND month > '2012-03-31';
UPDATE quota_period SET period_end = '2012-03-31' WHERE account = 'wq_rwlm';
SELECT DISTINCT period_start, period_end FROM monthly_allowance WHERE account = 'wq_rwlm';
ROLLBACK;

-- ===== A parallel plan gives the serial result =====
-- 500 accounts x 24 months, stored month by month so that each account's rows are spread
-- over the whole table (and over the workers). Whole numbers: sums are exact in any order.
CREATE TABLE wq_months AS
SELECT 'p' || lpad(a::text, 4, '0') AS account, (date '2012-01-01' + (m - 1) * interval '1 month')::date AS month,
       (1000 * (1 + a % 3))::float8 AS allowance,
       (CASE WHEN a % 97 = 0 AND m = 7 THEN 20000 ELSE (a * 37 + m * 101) % 2500 END)::float8 AS consumed
FROM generate_series(1, 24) AS m, generate_series(1, 500) AS a
ORDER BY m, a;
ANALYZE wq_months;

SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET max_parallel_workers_per_gather = 2;
EXPLAIN (COSTS OFF)
SELECT (q).state, count(*), md5(string_agg(account || ' ' || q::text, ',' ORDER BY account))
FROM (SELECT account, window_quota(month, allowance, consumed, '2012-07-01') AS q FROM wq_months GROUP BY account) s
GROUP BY 1 ORDER BY 1;
SELECT (q).state, count(*), md5(string_agg(account || ' ' || q::text, ',' ORDER BY account))
FROM (SELECT account, window_quota(month, allowance, consumed, '2012-07-01') AS q FROM wq_months GROUP BY account) s
GROUP BY 1 ORDER BY 1;
-- One group over the whole table: every month's rows add up ...
EXPLAIN (COSTS OFF) SELECT (window_quota(month, allowance, consumed, '2013-01-01')).* FROM wq_months;
SELECT (window_quota(month, allowance, consumed, '2013-01-01')).* FROM wq_months;
-- ... to the figures plain sums give (December 2012, January and February 2013).
SELECT sum(allowance) FILTER (WHERE month = '2013-01-01') AS monthly,
       sum(allowance - consumed) FILTER (WHERE month = '2012-12-01') AS remaining_prev,
       sum(consumed) FILTER (WHERE month = '2013-01-01') AS consumed_current,
       sum(allowance - consumed) FILTER (WHERE month IN ('2012-12-01', '2013-01-01')) * 100
           / sum(allowance) FILTER (WHERE month = '2013-01-01') AS consumable_pct,
       sum(allowance) FILTER (WHERE month BETWEEN '2012-12-01' AND '2013-02-01')
           - sum(consumed) FILTER (WHERE month IN ('2012-12-01', '2013-01-01')) AS consumable,
       sum(consumed) AS period_consumed, sum(allowance) AS period_allowance
FROM wq_months;

SET max_parallel_workers_per_gather = 0;
SELECT (q).state, count(*), md5(string_agg(account || ' ' || q::text, ',' ORDER BY account))
FROM (SELECT account, window_quota(month, allowance, consumed, '2012-07-01') AS q FROM wq_months GROUP BY account) s
GROUP BY 1 ORDER BY 1;
SELECT (window_quota(month, allowance, consumed, '2013-01-01')).* FROM wq_months;
RESET parallel_setup_cost;
RESET parallel_tuple_cost;
RESET min_parallel_table_scan_size;
RESET max_parallel_workers_per_gather;
DROP TABLE wq_months;

-- Restore the site time zone.
DELETE FROM setting WHERE name = 'timezone';
INSERT INTO setting SELECT * FROM saved_setting;
