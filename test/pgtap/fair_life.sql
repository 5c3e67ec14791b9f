-- An LQCD allocation year (1 July) lived step by step: two pools (the CPU pool's year from
-- 1 April), uneven members, a K20 weight and its change, an allocation used up in March, a
-- supplement, jobs across the year's start, a job loaded late, compaction between steps, a
-- changed half-life, the interval decay, UTC and America/Chicago, the live year, the portal,
-- a re-rating. Fair share is checked against the README's formulas computed here by hand
-- from the ledger; the reports against figures worked out in the comments.
BEGIN;
SET search_path = public, hpcacct;
SET client_min_messages = warning;
SELECT plan(52);

INSERT INTO setting VALUES ('timezone', 'UTC') ON CONFLICT (name) DO UPDATE SET value = excluded.value;
-- the GPU pool's year starts 1 July (LQCD), the CPU pool's 1 April (as Compute Canada's)
INSERT INTO pool (name, year_start_month) VALUES ('lq-gpu', 7), ('lq-cpu', 4);
INSERT INTO account (name) VALUES ('lq-a'), ('lq-b'), ('lq-c');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, pool) VALUES
    ('lq', 'k20', 'gres/gpu=4', 'gres/gpu=1', 2, 'GPU-hours', 'lq-gpu'),
    ('lq', 'c2050', 'gres/gpu=4', 'gres/gpu=1', 1, 'GPU-hours', 'lq-gpu'),
    ('lq', 'cpu', 'cpu=64', 'cpu=1', 1, 'core-hours', 'lq-cpu');
-- from 1 April 2024 a new reference: a K20 hour costs 1.5
UPDATE resource SET valid = '[-infinity,2024-04-01 00:00+00)' WHERE partition = 'k20';
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, pool, valid) VALUES
    ('lq', 'k20', 'gres/gpu=4', 'gres/gpu=1', 1.5, 'GPU-hours', 'lq-gpu', '[2024-04-01 00:00+00,infinity)');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until) VALUES
    ('lq-a', 'grant', 1800, 'GPU-hours', 'lq-gpu', '2023-07-01', '2024-06-30'),
    ('lq-b', 'grant',  900, 'GPU-hours', 'lq-gpu', '2023-07-01', '2024-06-30'),
    ('lq-c', 'grant',  300, 'GPU-hours', 'lq-gpu', '2023-07-01', '2024-06-30'),
    ('lq-a', 'grant', 20000, 'core-hours', 'lq-cpu', '2023-07-01', '2024-06-30'),
    ('lq-b', 'grant', 10000, 'core-hours', 'lq-cpu', '2023-07-01', '2024-06-30');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    -- across the year's start: 96 GPU-h, half in 2023-24
    ('lq', 'y0', 'lq-a', 'alice', 'c2050', '2023-06-30 12:00+00', '2023-07-01 12:00+00', 'gres/gpu=4', 'COMPLETED'),
    ('lq', 'j1', 'lq-a', 'alice', 'k20',   '2023-09-01 00:00+00', '2023-09-02 00:00+00', 'gres/gpu=4', 'COMPLETED'),  -- 192
    ('lq', 'j2', 'lq-a', 'bob',   'c2050', '2024-02-20 00:00+00', '2024-02-21 00:00+00', 'gres/gpu=4', 'COMPLETED'),  -- 96
    ('lq', 'j3', 'lq-c', 'dave',  'k20',   '2024-03-05 00:00+00', '2024-03-06 00:00+00', 'gres/gpu=4', 'COMPLETED'),  -- 192
    ('lq', 'j4', 'lq-c', 'dave',  'k20',   '2024-03-10 00:00+00', '2024-03-11 00:00+00', 'gres/gpu=3', 'COMPLETED'),  -- 144
    ('lq', 'j5', 'lq-b', 'carol', 'c2050', '2024-03-01 00:00+00', '2024-03-02 00:00+00', 'gres/gpu=2', 'COMPLETED'),  -- 48
    ('lq', 'c1', 'lq-a', 'alice', 'cpu',   '2024-03-01 00:00+00', '2024-03-02 00:00+00', 'cpu=32', 'COMPLETED'),      -- 768
    ('lq', 'c2', 'lq-b', 'carol', 'cpu',   '2024-03-02 00:00+00', '2024-03-03 00:00+00', 'cpu=16', 'COMPLETED');      -- 384

-- The README's formulas by hand: half-life decay of each charge dated at its end, shares of
-- the allocations valid at `at`, factor 2^(-U/S), times exhausted_factor once the year's allocation is used.
CREATE TEMP TABLE hand_at (at timestamptz);
-- one charge's weight: 2^(-age / half_life), or (decay = interval) period_decay^i in period i
-- (periods of 24-hour days), i < depth
CREATE FUNCTION pg_temp.weight(at timestamptz, ended timestamptz) RETURNS float8 LANGUAGE sql AS $$
    SELECT CASE WHEN hpcacct.setting_value('decay') = 'half_life'
                THEN 2 ^ (-extract(epoch FROM at - ended)::float8 / extract(epoch FROM hpcacct.setting_value('half_life')::interval)::float8)
                WHEN i < hpcacct.setting_value('depth')::integer
                THEN hpcacct.setting_value('period_decay')::float8 ^ i
                ELSE 0 END
    FROM (SELECT greatest(ceil(extract(epoch FROM at - ended) / extract(epoch FROM hpcacct.setting_value('period')::interval)) - 1, 0) AS i) p
$$;
CREATE FUNCTION pg_temp.hand(at timestamptz) RETURNS TABLE (pool text, account text, alloc numeric, share float8,
                                                             usage float8, norm float8, exhausted boolean, factor float8)
LANGUAGE sql AS $$
    WITH y AS (  -- each pool's allocation year (its first month, site time zone) containing at
        SELECT p.pool, f.first, (f.first + interval '1 year')::date - 1 AS last
        FROM (SELECT DISTINCT coalesce(r.pool, r.cluster) AS pool FROM hpcacct.resource r) p
        CROSS JOIN LATERAL (SELECT coalesce((SELECT q.year_start_month FROM hpcacct.pool q WHERE q.name = p.pool), 1) AS m) m
        CROSS JOIN LATERAL (
            SELECT make_date(extract(year FROM (at AT TIME ZONE hpcacct.site_timezone()) - make_interval(months => m.m - 1))::integer,
                             m.m, 1) AS first) f
    ), al AS (
        SELECT l.pool, l.account, sum(l.amount) AS alloc FROM hpcacct.ledger l
        WHERE l.kind <> 'charge' AND (at AT TIME ZONE hpcacct.site_timezone())::date BETWEEN l.valid_from AND l.valid_until
        GROUP BY 1, 2
    ), yal AS (
        SELECT l.pool, l.account, sum(l.amount * (least(l.valid_until, y.last) + 1 - greatest(l.valid_from, y.first))
                                       / (l.valid_until + 1 - l.valid_from)) AS alloc
        FROM hpcacct.ledger l JOIN y USING (pool) WHERE l.kind <> 'charge' AND l.valid_from <= y.last AND l.valid_until >= y.first
        GROUP BY 1, 2
    ), us AS (
        SELECT coalesce(r.pool, r.cluster) AS pool, l.account,
               sum(l.amount::float8 * pg_temp.weight(at, l.job_end)) AS usage,
               sum(l.amount * hpcacct.period_share(l.job_start, l.job_end, y.first::timestamp AT TIME ZONE hpcacct.site_timezone(), at)) AS year_usage
        FROM hpcacct.ledger l JOIN hpcacct.resource r USING (resource_id) JOIN y ON y.pool = coalesce(r.pool, r.cluster)
        WHERE l.kind = 'charge' AND l.job_end <= at GROUP BY 1, 2
    ), x AS (
        SELECT pool, account, coalesce(al.alloc, 0) AS alloc,
               coalesce((al.alloc / nullif(sum(al.alloc) OVER w, 0))::float8, 0) AS share,
               coalesce(us.usage, 0) AS usage, coalesce(us.usage, 0) / sum(us.usage) OVER w AS norm,
               coalesce(us.year_usage, 0) >= yal.alloc AND yal.alloc > 0 AS exhausted
        FROM al FULL JOIN us USING (pool, account) LEFT JOIN yal USING (pool, account)
        WINDOW w AS (PARTITION BY pool)
    )
    SELECT x.pool, x.account, x.alloc, x.share, x.usage, x.norm, coalesce(x.exhausted, false),
           CASE WHEN x.share = 0 THEN 0 ELSE 2 ^ (-x.norm / x.share) END
           * CASE WHEN x.exhausted THEN hpcacct.setting_value('exhausted_factor')::float8 ELSE 1 END
    FROM x WHERE x.alloc > 0 OR x.usage > 0
$$;
CREATE FUNCTION pg_temp.got(at timestamptz) RETURNS TABLE (pool text, account text, alloc numeric, share float8,
                                                            usage float8, norm float8, exhausted boolean, factor float8)
LANGUAGE sql AS $$
    SELECT f.pool, f.account, f.allocation, f.share, f.usage, f.norm_usage, f.exhausted, f.factor
    FROM hpcacct.fairshare_all(at) f WHERE f.submitter IS NULL
$$;
-- users: the account's share split by fairshare_user.shares (1 each by default) among its users
-- with charges and those listed; usage over the pool's total
CREATE FUNCTION pg_temp.hand_users(at timestamptz) RETURNS TABLE (pool text, account text, submitter text, share float8,
                                                                   usage float8, norm float8, factor float8)
LANGUAGE sql AS $$
    WITH a AS (SELECT * FROM pg_temp.hand(at)),
    us AS (
        SELECT coalesce(r.pool, r.cluster) AS pool, l.account, l.submitter,
               sum(l.amount::float8 * pg_temp.weight(at, l.job_end)) AS usage
        FROM hpcacct.ledger l JOIN hpcacct.resource r USING (resource_id)
        WHERE l.kind = 'charge' AND l.job_end <= at GROUP BY 1, 2, 3 HAVING sum(l.amount) > 0
    ), m AS (
        SELECT us.pool, us.account, us.submitter FROM us
        UNION SELECT a.pool, a.account, f.submitter FROM a JOIN hpcacct.fairshare_user f USING (account)
    ), s AS (
        SELECT m.*, coalesce(f.shares, 1) AS shares, sum(coalesce(f.shares, 1)) OVER (PARTITION BY m.pool, m.account) AS total
        FROM m LEFT JOIN hpcacct.fairshare_user f USING (account, submitter)
    )
    SELECT s.pool, s.account, s.submitter, a.share * s.shares / s.total, coalesce(us.usage, 0),
           coalesce(us.usage, 0) / (SELECT sum(a2.usage) FROM a a2 WHERE a2.pool = s.pool),
           CASE WHEN a.share = 0 OR s.shares = 0 THEN 0
                ELSE 2 ^ (-(coalesce(us.usage, 0) / (SELECT sum(a2.usage) FROM a a2 WHERE a2.pool = s.pool)) / (a.share * s.shares / s.total)) END
           * CASE WHEN a.exhausted THEN hpcacct.setting_value('exhausted_factor')::float8 ELSE 1 END
    FROM s JOIN a USING (pool, account) LEFT JOIN us USING (pool, account, submitter)
$$;
-- compared to 1e-9 relative
CREATE FUNCTION pg_temp.r(x float8) RETURNS text LANGUAGE sql AS $$
    SELECT CASE WHEN x = 0 THEN '0'
                ELSE round((x / 10 ^ floor(log(abs(x))))::numeric, 9) || 'e' || floor(log(abs(x))) END
$$;
-- fairshare_all() per account at an instant against the README's formula by hand, compared as above
CREATE FUNCTION pg_temp.by_hand(at timestamptz, what text) RETURNS text LANGUAGE sql AS $f$
    SELECT results_eq(format($$SELECT pool, account, alloc, pg_temp.r(share), pg_temp.r(usage), pg_temp.r(norm), exhausted,
                                      pg_temp.r(factor) FROM pg_temp.got(%L) ORDER BY 1, 2$$, at),
                      format($$SELECT pool, account, alloc, pg_temp.r(share), pg_temp.r(usage), pg_temp.r(norm), exhausted,
                                      pg_temp.r(factor) FROM pg_temp.hand(%L) ORDER BY 1, 2$$, at),
                      what)
$f$;

-- Step 1: 15 March 2024, lq-c has used 336 of its 300 GPU-h
SELECT pg_temp.by_hand('2024-03-15 00:00+00', '15 March: fairshare_all() is the README''s formula by hand (both pools, lq-c exhausted)');
SELECT is((SELECT exhausted FROM pg_temp.got('2024-03-15 00:00+00') WHERE account = 'lq-c'), true, 'lq-c used up its year in March');
INSERT INTO setting VALUES ('exhausted_factor', '0.05') ON CONFLICT (name) DO UPDATE SET value = excluded.value;
SELECT is((SELECT pg_temp.r(factor) FROM pg_temp.got('2024-03-15 00:00+00') WHERE account = 'lq-c'),
          (SELECT pg_temp.r(factor) FROM pg_temp.hand('2024-03-15 00:00+00') WHERE account = 'lq-c'),
          'a site''s exhausted_factor of 0.05 applies');
DELETE FROM setting WHERE name = 'exhausted_factor';
-- alice holds 3 shares of lq-a, bob 1; erin is listed before her first job
INSERT INTO fairshare_user VALUES ('lq-a', 'alice', 3), ('lq-a', 'bob', 1), ('lq-b', 'erin', 1);
SELECT results_eq($$SELECT pool, account, submitter, pg_temp.r(share) AS s, pg_temp.r(usage) AS u, pg_temp.r(norm_usage) AS n, pg_temp.r(factor) AS f
                    FROM fairshare_all('2024-03-15 00:00+00') WHERE submitter IS NOT NULL ORDER BY 1, 2, 3$$,
                  $$SELECT pool, account, submitter, pg_temp.r(share) AS s, pg_temp.r(usage) AS u, pg_temp.r(norm) AS n, pg_temp.r(factor) AS f
                    FROM pg_temp.hand_users('2024-03-15 00:00+00') ORDER BY 1, 2, 3$$,
                  '15 March: the users'' factors by hand (uneven shares, a listed user without jobs)');
-- the Maui form: periods of 5 days decaying by 0.8, 8 of them
INSERT INTO setting VALUES ('decay', 'interval') ON CONFLICT (name) DO UPDATE SET value = excluded.value;
SELECT pg_temp.by_hand('2024-03-15 00:00+00', '15 March, decay = interval: by hand');
SELECT pg_temp.by_hand('2024-03-05 00:00+00', '5 March, decay = interval: by hand');
DELETE FROM setting WHERE name = 'decay';

SELECT results_eq($$SELECT account, allocation, usage, utilization_pct, projected_usage
                    FROM usage_by_account(NULL, '2024-03-15 00:00+00') WHERE pool = 'lq-gpu' ORDER BY 1$$,
                  $$VALUES ('lq-a'::text, 1800.000000, 336.000000, 18.67, round(336 * 366 / 258.0, 6)),
                           ('lq-b', 900.000000, 48.000000, 5.33, round(48 * 366 / 258.0, 6)),
                           ('lq-c', 300.000000, 336.000000, 112.00, round(336 * 366 / 258.0, 6))$$,
                  'usage_by_account: usage, utilization and projection over 258 of 366 days');
SELECT results_eq($$SELECT account, submitter, usage, account_pct FROM usage_by_submitter(NULL, '2024-03-15 00:00+00')
                    WHERE pool = 'lq-gpu' ORDER BY 1, 2$$,
                  $$VALUES ('lq-a'::text, 'alice'::text, 240.000000, 71.43), ('lq-a', 'bob', 96.000000, 28.57),
                           ('lq-b', 'carol', 48.000000, 100.00), ('lq-c', 'dave', 336.000000, 100.00)$$,
                  'usage_by_submitter: alice has half of the job across the year''s start and the K20 job at rate 2');
SELECT results_eq($$SELECT month, sum(usage) FROM usage_by_month(NULL, '2024-03-15 00:00+00')
                    WHERE pool = 'lq-gpu' GROUP BY 1 ORDER BY 1$$,
                  $$VALUES ('2023-07-01'::date, 48.000000), ('2023-09-01', 192.000000), ('2024-02-01', 96.000000),
                           ('2024-03-01', 384.000000)$$,
                  'usage_by_month: the months of the year, July holding the year''s half of y0');
SELECT is((SELECT usage FROM usage_by_account(2022, '2024-03-15 00:00+00') WHERE account = 'lq-a' AND pool = 'lq-gpu'),
          48.000000, 'the other half of y0 is in 2022-23');

-- Step 2: compaction does not change the fair share
CREATE TEMP TABLE before AS SELECT * FROM fairshare_all('2024-03-15 00:00+00');
SELECT ok(compact_rollup() >= 0, 'compact_rollup() runs');
SELECT set_eq($$SELECT pool, account, submitter, pg_temp.r(share) AS s, pg_temp.r(usage) AS u, pg_temp.r(norm_usage) AS n, exhausted, pg_temp.r(factor) AS f
                FROM fairshare_all('2024-03-15 00:00+00')$$,
              $$SELECT pool, account, submitter, pg_temp.r(share) AS s, pg_temp.r(usage) AS u, pg_temp.r(norm_usage) AS n, exhausted, pg_temp.r(factor) AS f
                FROM before$$,
              'fair share with and without compaction agree');

-- the site halves the decay after compaction: the rollup is rebuilt
INSERT INTO setting VALUES ('half_life', '14 days') ON CONFLICT (name) DO UPDATE SET value = excluded.value;
SELECT pg_temp.by_hand('2024-03-15 00:00+00', '15 March, half-life 14 days after compaction: by hand');
SELECT ok(compact_rollup() >= 0, 'compact_rollup() with the new half-life');
SELECT pg_temp.by_hand(now(), 'now, half-life 14 days, from the compacted base: by hand');
UPDATE setting SET value = '7 days' WHERE name = 'half_life';
SELECT ok(compact_rollup() >= 0, 'compact_rollup() with the old half-life again');

-- Step 3: a supplement for lq-c from 15 March; a job of lq-b ended 12 March loaded late
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until) VALUES
    ('lq-c', 'supplement', 300, 'GPU-hours', 'lq-gpu', '2024-03-15', '2024-06-30');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    ('lq', 'late', 'lq-b', 'carol', 'k20', '2024-03-11 00:00+00', '2024-03-12 00:00+00', 'gres/gpu=4', 'COMPLETED');  -- 192
SELECT pg_temp.by_hand('2024-03-20 00:00+00', '20 March: the supplement lifts lq-c''s exhaustion, the late job counts (by hand)');
SELECT ok(compact_rollup() >= 0, 'compact_rollup() runs again');
SELECT pg_temp.by_hand('2024-04-10 00:00+00', '10 April after compaction: by hand');
SELECT results_eq($$SELECT account, allocation, usage, utilization_pct FROM usage_by_account(NULL, '2024-04-10 00:00+00')
                    WHERE pool = 'lq-gpu' ORDER BY 1$$,
                  $$VALUES ('lq-a'::text, 1800.000000, 336.000000, 18.67), ('lq-b', 900.000000, 240.000000, 26.67),
                           ('lq-c', 600.000000, 336.000000, 56.00)$$,
                  'usage_by_account after the supplement and the late job');

-- a K20 job at the new rate: 96 K20-hours for 144 GPU-h
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    ('lq', 'j6', 'lq-a', 'alice', 'k20', '2024-04-20 00:00+00', '2024-04-21 00:00+00', 'gres/gpu=4', 'COMPLETED');
SELECT results_eq($$SELECT partition, equivalent_hours, usage, projected_usage FROM usage_by_resource(NULL, '2024-05-01 00:00+00')
                    WHERE pool = 'lq-gpu' ORDER BY 1$$,
                  $$VALUES ('c2050'::text, 192.000000, 192.000000, round(192 * 366 / 305.0, 6)),
                           ('k20', 456.000000, 864.000000, round(864 * 366 / 305.0, 6))$$,
                  'usage_by_resource: K20 hours at rates 2 and 1.5, unweighted beside weighted');
SELECT pg_temp.by_hand('2024-04-25 00:00+00', '25 April (the rollup''s April scaled back to it): by hand');
SELECT pg_temp.by_hand('2024-04-20 12:00+00', '20 April, before j6 ended (April read from the ledger): by hand');
SELECT pg_temp.by_hand('2024-04-21 00:00+00', 'the instant j6 ended: by hand');
SELECT pg_temp.by_hand('2024-04-01 00:00+00', '1 April 00:00: by hand');
SELECT pg_temp.by_hand('2024-05-01 00:00+00', '1 May: by hand');

-- Step 4: a new year starts 1 July: the previous year's usage no longer counts toward exhaustion
SELECT is((SELECT exhausted FROM fairshare_all('2024-07-02 00:00+00') WHERE account = 'lq-c' AND submitter IS NULL),
          false, 'a new allocation year: lq-c is not exhausted');
SELECT is((SELECT usage FROM usage_by_account(NULL, '2024-07-02 00:00+00') WHERE account = 'lq-a' AND pool = 'lq-gpu'),
          NULL, 'no usage of lq-a in 2024-25 yet');
SELECT results_eq($$SELECT account, usage, utilization_pct, projected_usage FROM usage_by_account(2023, '2024-07-02 00:00+00')
                    WHERE pool = 'lq-gpu' ORDER BY 1$$,
                  $$VALUES ('lq-a'::text, 480.000000, 26.67, NULL::numeric), ('lq-b', 240.000000, 26.67, NULL),
                           ('lq-c', 336.000000, 56.00, NULL)$$,
                  'the past year: final usage and utilization, no projection');

-- The portal: the statement of February and the first page on 15 March show the reports' figures
SELECT results_eq($$SELECT x ->> 'pool', sum((x ->> 'usage')::numeric), sum((x ->> 'projected_usage')::numeric)
                    FROM jsonb_array_elements(account_month('lq-a', '2024-02-01') -> 'usage_by_resource') x GROUP BY 1 ORDER BY 1$$,
                  $$SELECT pool, usage, projected_usage FROM usage_by_account(NULL, '2024-03-01 00:00+00')
                    WHERE account = 'lq-a' AND usage > 0 ORDER BY 1$$,
                  'account_month(): the year''s usage and projection at the end of February as usage_by_account');
SELECT results_eq($$SELECT a ->> 'account', (a -> 'this_month' ->> 'GPU-hours')::numeric
                    FROM jsonb_array_elements(my_accounts('2024-03-15') -> 'accounts') a
                    WHERE a -> 'this_month' ? 'GPU-hours' ORDER BY 1$$,
                  $$SELECT account, sum(usage) FROM usage_by_month(NULL, '2024-03-16 00:00+00')
                    WHERE pool = 'lq-gpu' AND month = '2024-03-01' GROUP BY 1 ORDER BY 1$$,
                  'my_accounts(): this month''s GPU-hours as usage_by_month');

-- The same year at Fermilab's own time zone: the year starts 1 July 00:00 Central time; on
-- 1 March 00:00 CST 244 days and an hour have elapsed (clocks went back on 5 November)
UPDATE setting SET value = 'America/Chicago' WHERE name = 'timezone';
SELECT pg_temp.by_hand('2024-03-15 00:00 America/Chicago', 'Chicago, 15 March: fairshare_all() by hand');
-- y0 has 7 of its 24 hours after 1 July 00:00 CDT (05:00 UTC): 28 GPU-h
SELECT results_eq($$SELECT usage, projected_usage FROM usage_by_account(NULL, '2024-03-01 00:00 America/Chicago')
                    WHERE account = 'lq-a' AND pool = 'lq-gpu'$$,
                  $$VALUES (316.000000, round(316 * 8784 / 5857.0, 6))$$,
                  'Chicago: usage_by_account projects over 5 857 of 8 784 hours');
SELECT results_eq($$SELECT x ->> 'pool', sum((x ->> 'usage')::numeric), sum((x ->> 'projected_usage')::numeric)
                    FROM jsonb_array_elements(account_month('lq-a', '2024-02-01') -> 'usage_by_resource') x
                    WHERE x ->> 'pool' = 'lq-gpu' GROUP BY 1$$,
                  $$SELECT pool, usage, projected_usage FROM usage_by_account(NULL, '2024-03-01 00:00 America/Chicago')
                    WHERE account = 'lq-a' AND pool = 'lq-gpu'$$,
                  'Chicago: account_month() as usage_by_account at the end of February (GPU: no job across its end)');
SELECT results_eq($$SELECT a ->> 'account', (a -> 'this_month' ->> 'GPU-hours')::numeric
                    FROM jsonb_array_elements(my_accounts('2024-03-15') -> 'accounts') a
                    WHERE a -> 'this_month' ? 'GPU-hours' ORDER BY 1$$,
                  $$SELECT account, sum(usage) FROM usage_by_month(NULL, '2024-03-16 00:00 America/Chicago')
                    WHERE pool = 'lq-gpu' AND month = '2024-03-01' GROUP BY 1 ORDER BY 1$$,
                  'Chicago: my_accounts() this month as usage_by_month');
SELECT results_eq($$SELECT pool, account, submitter, month, usage FROM usage_by_month(NULL, '2024-03-15 00:00 America/Chicago')
                    WHERE account = 'lq-a' ORDER BY 1, 2, 3, 4$$,
                  $$VALUES ('lq-cpu'::text, 'lq-a'::text, 'alice'::text, '2024-02-01'::date, 192.000000),
                           ('lq-cpu', 'lq-a', 'alice', '2024-03-01', 576.000000),
                           ('lq-gpu', 'lq-a', 'alice', '2023-07-01', 28.000000),
                           ('lq-gpu', 'lq-a', 'alice', '2023-08-01', 40.000000),
                           ('lq-gpu', 'lq-a', 'alice', '2023-09-01', 152.000000),
                           ('lq-gpu', 'lq-a', 'bob', '2024-02-01', 96.000000)$$,
                  'Chicago: usage_by_month splits at local midnights (c1: 6 h in February, j1: 5 h in August, y0: 7 h in the year)');
SELECT results_eq($$SELECT account, submitter, usage, projected_usage FROM usage_by_submitter(NULL, '2024-03-15 00:00 America/Chicago')
                    WHERE account = 'lq-a' ORDER BY 1, 2$$,
                  $$VALUES ('lq-a'::text, 'alice'::text, 768.000000, round(768 * 8784 / 8376.0, 6)),
                           ('lq-a', 'alice', 220.000000, round(220 * 366 / 258.0, 6)),
                           ('lq-a', 'bob', 96.000000, round(96 * 366 / 258.0, 6))$$,
                  'Chicago: usage_by_submitter over 258 of 366 days in the GPU pool, 349 of 366 in the CPU pool (from 1 April)');
SELECT is((SELECT usage FROM usage_by_account(2022, '2024-03-15 00:00 America/Chicago') WHERE account = 'lq-a' AND pool = 'lq-gpu'),
          68.000000, 'Chicago: y0''s 17 hours before 1 July 00:00 CDT are in 2022-23');
INSERT INTO setting VALUES ('decay', 'interval') ON CONFLICT (name) DO UPDATE SET value = excluded.value;
SELECT pg_temp.by_hand('2024-03-15 00:00 America/Chicago', 'Chicago, decay = interval across the change to daylight time: by hand');
DELETE FROM setting WHERE name = 'decay';
SELECT ok(compact_rollup() >= 0, 'compact_rollup() under Chicago time');
SELECT pg_temp.by_hand('2024-03-15 00:00 America/Chicago', 'Chicago, 15 March after compaction: by hand');

-- The live year: grants for the year containing today, jobs of last month (folded) and of
-- this one, one of last month loaded after the compaction; fairshare_all(now()) reads the
-- compacted base
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
SELECT g.a, 'grant', g.x, 'GPU-hours', 'lq-gpu', y.first_day, y.last_day
FROM allocation_year('lq-gpu') y, (VALUES ('lq-a', 1800), ('lq-b', 900), ('lq-c', 300)) AS g(a, x);
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
SELECT 'lq', j.id, j.a, j.u, j.p, j.s, j.s + interval '10 hours', 'gres/gpu=4', 'COMPLETED'
FROM (VALUES ('n1', 'lq-a', 'alice', 'k20', date_trunc('month', now()) - interval '20 days'),
             ('n2', 'lq-a', 'bob', 'c2050', date_trunc('month', now()) - interval '3 days'),
             ('n3', 'lq-c', 'dave', 'k20', date_trunc('month', now()) - interval '10 days'),
             ('n4', 'lq-b', 'carol', 'c2050', now() - interval '1 hour' - interval '10 hours')) AS j(id, a, u, p, s)
WHERE j.s + interval '10 hours' <= now();
CREATE TEMP TABLE live_before AS SELECT * FROM fairshare_all(now());
SELECT ok(compact_rollup() >= 0, 'compact_rollup() folds last month');
SELECT set_eq($$SELECT pool, account, submitter, pg_temp.r(share) AS s, pg_temp.r(usage) AS u, pg_temp.r(norm_usage) AS n, exhausted, pg_temp.r(factor) AS f
                FROM fairshare_all(now())$$,
              $$SELECT pool, account, submitter, pg_temp.r(share) AS s, pg_temp.r(usage) AS u, pg_temp.r(norm_usage) AS n, exhausted, pg_temp.r(factor) AS f
                FROM live_before$$,
              'now: fair share from the compacted base as before the compaction');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    ('lq', 'n5', 'lq-b', 'carol', 'k20', date_trunc('month', now()) - interval '5 days',
     date_trunc('month', now()) - interval '4 days', 'gres/gpu=2', 'COMPLETED');
CREATE TEMP TABLE live_at AS SELECT now() AS at;
SELECT pg_temp.by_hand(now(), 'now, from the compacted base and a late job: by hand');
SELECT results_eq($$SELECT pool, account, submitter, pg_temp.r(share) AS s, pg_temp.r(usage) AS u, pg_temp.r(norm_usage) AS n, pg_temp.r(factor) AS f
                    FROM fairshare_all(now()) WHERE submitter IS NOT NULL ORDER BY 1, 2, 3$$,
                  $$SELECT pool, account, submitter, pg_temp.r(share) AS s, pg_temp.r(usage) AS u, pg_temp.r(norm) AS n, pg_temp.r(factor) AS f
                    FROM pg_temp.hand_users(now()) ORDER BY 1, 2, 3$$,
                  'now: the users'' factors by hand');

-- The portal: alice sees her accounts' rows of fairshare() now, with fairshare_all()'s figures,
-- and this month's charges in my_accounts() as usage_by_month has them
CALL setup_roles();
CREATE ROLE alice LOGIN IN ROLE hpcacct_portal;
INSERT INTO hpc_user (username) VALUES ('alice');
INSERT INTO membership VALUES ('lq-a', 'alice', 'admin'), ('lq-b', 'alice', 'member');
CREATE TEMP TABLE all_now AS SELECT * FROM fairshare_all(now());
CREATE TEMP TABLE month_now AS
    SELECT account, sum(usage) AS usage FROM usage_by_month(NULL, now())
    WHERE pool = 'lq-gpu' AND month = date_trunc('month', now() AT TIME ZONE site_timezone()) GROUP BY 1;
GRANT SELECT ON all_now, month_now TO alice;
SET SESSION AUTHORIZATION alice;
SELECT results_eq($$SELECT pool, account, submitter, allocation, share, usage, norm_usage, year_usage, exhausted, factor
                    FROM hpcacct.fairshare() ORDER BY 1, 2, 3 NULLS FIRST$$,
                  $$SELECT pool, account, submitter, allocation, NULL::float8, usage, NULL::float8, year_usage, exhausted, factor
                    FROM all_now WHERE account IN ('lq-a', 'lq-b') ORDER BY 1, 2, 3 NULLS FIRST$$,
                  'portal: alice''s fairshare() is fairshare_all()''s rows of her accounts');
SELECT results_eq($$SELECT a ->> 'account', (a -> 'this_month' ->> 'GPU-hours')::numeric
                    FROM jsonb_array_elements(hpcacct.my_accounts() -> 'accounts') a
                    WHERE a -> 'this_month' ? 'GPU-hours' ORDER BY 1$$,
                  $$SELECT account, usage FROM month_now ORDER BY 1$$,
                  'portal: my_accounts() this month as usage_by_month');
RESET SESSION AUTHORIZATION;

-- The C2050's weight revised to 1.25 from 1 February 2024, after compaction: reversals and new
-- charges at the old jobs' ends
SELECT ok(rerate(resource_id, 1.25, '2024-02-01 00:00 America/Chicago') > 0, 'rerate() the C2050 from 1 February')
FROM resource WHERE partition = 'c2050';
SELECT is((SELECT usage FROM usage_by_account(NULL, '2024-03-15 00:00 America/Chicago') WHERE account = 'lq-a' AND pool = 'lq-gpu'),
          340.000000, 'after re-rating: lq-a used 28 + 192 + 120 GPU-h by 15 March');
SELECT pg_temp.by_hand('2024-03-15 00:00 America/Chicago', 'after re-rating, 15 March: by hand');
SELECT pg_temp.by_hand(now(), 'after re-rating, now: by hand');
SELECT results_eq($$SELECT pool, account, submitter, pg_temp.r(share) AS s, pg_temp.r(usage) AS u, pg_temp.r(norm_usage) AS n, pg_temp.r(factor) AS f
                    FROM fairshare_all(now()) WHERE submitter IS NOT NULL ORDER BY 1, 2, 3$$,
                  $$SELECT pool, account, submitter, pg_temp.r(share) AS s, pg_temp.r(usage) AS u, pg_temp.r(norm) AS n, pg_temp.r(factor) AS f
                    FROM pg_temp.hand_users(now()) ORDER BY 1, 2, 3$$,
                  'after re-rating, now: the users by hand');

SELECT * FROM finish();
ROLLBACK;
