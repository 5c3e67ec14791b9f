-- The charge rollup (sql/install/47_rollup.sql): it always equals the ledger's charges split
-- by month, through inserts, re-rating, deletion, compaction and changes of the time zone and
-- half-life it depends on; the reports that read it agree with the ledger read job by job.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(51);

-- ---- objects ----
SELECT has_table('hpcacct', 'charge_rollup', 'the charge rollup table exists');
SELECT has_trigger('hpcacct', 'ledger', 'ledger_roll_up', 'the ledger rolls up its charges');
SELECT is((SELECT count(*) FROM pg_extension e, unnest(e.extconfig) AS t(oid)
           WHERE e.extname = 'hpcacct' AND t.oid = 'hpcacct.charge_rollup'::regclass),
          0::bigint, 'the rollup is not dumped: a restored ledger rolls itself up again');
SELECT ok(NOT has_function_privilege('public', 'hpcacct.rebuild_rollup()', 'EXECUTE')
          AND NOT has_function_privilege('public', 'hpcacct.compact_rollup()', 'EXECUTE'),
          'rebuild_rollup() and compact_rollup() are not for PUBLIC');

-- ---- a site: jobs inside a month, across month ends, of zero length ----
INSERT INTO setting VALUES ('timezone', 'Europe/Berlin') ON CONFLICT (name) DO UPDATE SET value = excluded.value;
INSERT INTO account (name) SELECT 'rua' || a FROM generate_series(0, 3) AS a;
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, valid) VALUES
    ('ruc', 'cpu', 'cpu=32,node=1', 'cpu=1', 1.0, 'core-hours', tstzrange('-infinity', '2026-03-01 00:00+01')),
    ('ruc', 'cpu', 'cpu=32,node=1', 'cpu=1', 1.5, 'core-hours', tstzrange('2026-03-01 00:00+01', 'infinity')),
    ('ruc', 'gpu', 'cpu=8,gres/gpu=4,node=1', 'gres/gpu=1', 1.0, 'gpu-hours', '[-infinity,infinity)');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres)
SELECT 'ruc', 'r' || i, 'rua' || (i % 4), 'ruu' || (i % 7), CASE WHEN i % 5 = 0 THEN 'gpu' ELSE 'cpu' END,
       s, s + (i % 97) * interval '37 minutes' + CASE WHEN i % 11 = 0 THEN interval '3 days' ELSE interval '0' END,
       (CASE WHEN i % 5 = 0 THEN 'cpu=8,gres/gpu=' || (1 + i % 4) ELSE 'cpu=' || (1 + i % 32) END)::tres
FROM generate_series(1, 600) AS i
CROSS JOIN LATERAL (SELECT timestamptz '2025-12-20 00:00+01' + i * interval '7 hours 13 minutes' AS s) t;
-- a job ending exactly at a regulation boundary (the 16th, 00:00): ended by it
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres) VALUES
    ('ruc', 'edge1', 'rua2', 'ruu2', 'cpu', '2026-03-15 20:00+01', '2026-03-16 00:00+01', 'cpu=8');

-- the rollup against the ledger split by month (hpcacct.charge_by_month), exactly
CREATE TEMP VIEW rollup_vs_ledger AS
    SELECT coalesce(r.account, l.account) AS account, coalesce(r.month, l.month) AS month,
           r.amount AS rolled, l.amount AS ledger
    FROM (SELECT account, month, sum(amount) AS amount FROM charge_rollup GROUP BY 1, 2) r
    FULL JOIN (SELECT account, month, sum(amount) AS amount FROM charge_by_month GROUP BY 1, 2) l
      ON l.account = r.account AND l.month = r.month
    WHERE r.amount IS DISTINCT FROM l.amount;

-- the consumption rollup against consumption before each boundary, job by job, exactly
CREATE TEMP VIEW consumption_vs_ledger AS
    SELECT a.account, b.boundary, c.amount AS rolled, l.amount AS ledger
    FROM (SELECT DISTINCT account FROM ledger WHERE kind = 'charge') a
    CROSS JOIN (SELECT make_date(y, greatest(k, 1), CASE WHEN k = 0 THEN 1 ELSE 16 END) AS boundary
                FROM generate_series(2025, 2027) AS y, generate_series(0, 12) AS k) b  -- 1 January, the 16ths
    CROSS JOIN LATERAL (SELECT coalesce(sum(c.ended) FILTER (WHERE c.boundary <= b.boundary), 0)
                               + coalesce(sum(c.running) FILTER (WHERE c.boundary = b.boundary), 0) AS amount
                        FROM consumption_rollup c WHERE c.account = a.account) c
    CROSS JOIN LATERAL (SELECT coalesce(sum(l.amount * period_share(l.job_start, l.job_end, '-infinity',
                                                                    b.boundary::timestamp AT TIME ZONE site_timezone())), 0) AS amount
                        FROM ledger l WHERE l.kind = 'charge' AND l.account = a.account
                          AND l.job_start < b.boundary::timestamp AT TIME ZONE site_timezone()) l
    WHERE c.amount <> l.amount;

SELECT is_empty('SELECT * FROM rollup_vs_ledger', 'after charging: the rollup equals the ledger per account and month');
SELECT is_empty('SELECT * FROM consumption_vs_ledger',
                'after charging: consumption before every 1 January and 16th from the consumption rollup is exact');
SELECT ok(EXISTS (SELECT 1 FROM consumption_rollup WHERE running <> 0),
          'some jobs run across a boundary (a share before it)');
SELECT ok((SELECT count(DISTINCT month) FROM charge_rollup) >= 5, 'the jobs count in several months');
SELECT ok(EXISTS (SELECT 1 FROM charge_rollup WHERE month < end_month),
          'jobs across a month end count in both months');

UPDATE job SET "end" = "end" + interval '9 hours' WHERE jobid IN ('r11', 'r22', 'r33', 'r100');  -- re-rated
DELETE FROM job WHERE jobid IN ('r44', 'r55', 'r300');
SELECT is_empty('SELECT * FROM rollup_vs_ledger', 'after re-rating and deleting jobs: still equal');
SELECT is((SELECT sum(amount) FROM charge_rollup), (SELECT sum(amount) FROM ledger WHERE kind = 'charge'),
          'the rollup''s total is the ledger''s total of charges');

-- ---- compaction: exact and idempotent ----
CREATE TEMP TABLE before_compaction AS
    SELECT account, resource_id, unit, submitter, month, end_month, sum(amount) AS amount, sum(decayed) AS decayed
    FROM charge_rollup GROUP BY 1, 2, 3, 4, 5, 6;
SELECT ok((SELECT count(*) FROM charge_rollup) > (SELECT count(*) FROM before_compaction),
          'reversals left delta rows to merge');
SELECT is(compact_rollup(), (SELECT count(*) FROM before_compaction), 'compact_rollup() merges one row per group');
SELECT is_empty($$SELECT account, resource_id, unit, submitter, month, end_month, amount FROM charge_rollup
                  EXCEPT SELECT account, resource_id, unit, submitter, month, end_month, amount FROM before_compaction$$,
                'the merged rows hold the same sums');
CREATE TEMP TABLE after_compaction AS SELECT * FROM charge_rollup;
SELECT is(compact_rollup(), 0::bigint, 'a second compaction merges nothing ...');
SELECT set_eq('SELECT * FROM charge_rollup', 'SELECT * FROM after_compaction', '... changes nothing');

-- ---- the time zone and the half-life rebuild it ----
UPDATE setting SET value = 'America/Vancouver' WHERE name = 'timezone';
SELECT is_empty('SELECT * FROM rollup_vs_ledger', 'after a change of time zone: rebuilt, months of the new zone');
SELECT ok(EXISTS (SELECT 1 FROM after_compaction a
                  WHERE NOT EXISTS (SELECT 1 FROM charge_rollup r WHERE r.account = a.account AND r.month = a.month
                                      AND r.resource_id = a.resource_id AND r.submitter = a.submitter
                                      AND r.amount = a.amount)),
          'the months moved with the zone');

-- fairshare() from the rollup against decayed_usage() over the jobs, in the month's middle;
-- jobs of that month re-rated and deleted: the ledger's reversals in the latest month
UPDATE job SET "end" = "end" + interval '2 hours' WHERE jobid IN ('r480', 'r481');
DELETE FROM job WHERE jobid = 'r483';
SELECT is((SELECT count(*) FROM ledger WHERE kind = 'charge' AND amount < 0
           AND job_end BETWEEN '2026-05-01 00:00-07' AND '2026-05-17 12:00+02'), 3::bigint,
          'three reversals in the month of the fair-share instant');
CREATE TEMP VIEW decay_check AS
    SELECT f.account, f.usage, d.usage AS expected
    FROM fairshare_all('2026-05-17 12:00+02') f
    JOIN (SELECT account, decayed_usage(job_end, amount, '2026-05-17 12:00+02',
                                        (SELECT value::interval FROM settings WHERE name = 'half_life')) AS usage
          FROM (SELECT l.account, l.job_end, sum(l.amount)::float8 AS amount FROM ledger l
                WHERE l.kind = 'charge' AND l.unit = 'core-hours' AND l.job_end <= '2026-05-17 12:00+02'
                GROUP BY l.cluster, l.jobid, l.account, l.job_start, l.job_end HAVING sum(l.amount) > 0) j
          GROUP BY account) d ON d.account = f.account
    WHERE f.submitter IS NULL AND f.unit = 'core-hours';
SELECT is((SELECT count(*) FROM decay_check), 4::bigint, 'every account has decayed usage');
SELECT is_empty('SELECT * FROM decay_check WHERE abs(usage - expected) > 1e-9 * expected',
                'fairshare() usage equals decayed_usage() over the jobs (half-life 7 days)');
INSERT INTO setting VALUES ('half_life', '2 days');
SELECT is_empty('SELECT * FROM decay_check WHERE abs(usage - expected) > 1e-9 * expected',
                'after a change of half-life: rebuilt, still equal (2 days)');
DELETE FROM setting WHERE name = 'half_life';
SELECT is_empty('SELECT * FROM decay_check WHERE abs(usage - expected) > 1e-9 * expected',
                'after the half-life setting is removed: rebuilt for the default (7 days), still equal');

-- compaction folds the past months into fairshare_base; fairshare() at an instant after them
-- reads it, before them the rollup's months; rows added after the fold are read as they are
CREATE FUNCTION pg_temp.decay_mismatches(at timestamptz) RETURNS bigint LANGUAGE sql AS $$
    SELECT count(*)
    FROM (SELECT * FROM fairshare_all(at) WHERE submitter IS NULL AND unit = 'core-hours') f
    FULL JOIN (SELECT account, decayed_usage(job_end, amount, at,
                                             (SELECT value::interval FROM settings WHERE name = 'half_life'))
                                 AS usage
               FROM (SELECT l.account, l.job_end, sum(l.amount)::float8 AS amount FROM ledger l
                     WHERE l.kind = 'charge' AND l.unit = 'core-hours' AND l.job_end <= at
                     GROUP BY l.cluster, l.jobid, l.account, l.job_start, l.job_end HAVING sum(l.amount) > 0) j
               GROUP BY account) d ON d.account = f.account
    WHERE f.account IS NULL OR d.account IS NULL OR NOT abs(f.usage - d.usage) <= 1e-9 * d.usage
$$;
SELECT compact_rollup() AS compacted \gset
SELECT ok(EXISTS (SELECT 1 FROM fairshare_base) AND NOT EXISTS (SELECT 1 FROM charge_rollup WHERE NOT folded)
          AND (SELECT max(through) FROM fairshare_base) = date_trunc('month', now() AT TIME ZONE site_timezone()) - interval '1 month',
          'compaction folds every month up to the previous one into fairshare_base');
SELECT is(pg_temp.decay_mismatches(now()), 0::bigint,
          'fairshare() now, from fairshare_base: usage equals decayed_usage() over the jobs');
SELECT is(pg_temp.decay_mismatches('2026-05-17 12:00+02'), 0::bigint,
          'fairshare() at an instant inside the folded months, from the rollup: still equal');

-- usage_base: the same folded months without the submitter, which the reports per account
-- and per resource read; compared with the ledger's charges, job by job, each attributed pro
-- rata by wall-clock time to its pool's allocation year up to `at` (jobs ended by `at`)
CREATE FUNCTION pg_temp.year_charges(for_year integer, at timestamptz)
    RETURNS TABLE (pool text, unit text, cluster text, partition text, account text, rate float8, amount numeric)
    LANGUAGE sql STABLE AS $$
    WITH years AS MATERIALIZED (
        SELECT p.pool, y.starts, y.upto
        FROM (SELECT DISTINCT coalesce(r.pool, r.cluster) AS pool FROM hpcacct.resource r) p
        CROSS JOIN LATERAL hpcacct.allocation_year(p.pool, for_year, at) y
    )
    SELECT y.pool, l.unit, r.cluster, r.partition, l.account, r.rate,
           l.amount * hpcacct.period_share(l.job_start, l.job_end, y.starts, y.upto)
    FROM hpcacct.ledger l
    JOIN hpcacct.resource r USING (resource_id)
    JOIN years y ON y.pool = coalesce(r.pool, r.cluster)
    WHERE l.kind = 'charge' AND l.job_end <= at
      AND l.job_end > y.starts AND l.job_start < y.upto AND l.job_end > l.job_start
$$;
CREATE FUNCTION pg_temp.usage_mismatches(at timestamptz) RETURNS bigint LANGUAGE sql AS $$
    WITH account_usage AS (
        SELECT pool, unit, account, usage FROM usage_by_account(2026, at)
    ), account_expected AS (
        SELECT pool, unit, account, round(sum(amount), 6) AS usage FROM pg_temp.year_charges(2026, at)
        GROUP BY 1, 2, 3 HAVING sum(amount) <> 0
    ), resource_usage AS (
        SELECT pool, unit, cluster, partition, usage, equivalent_hours FROM usage_by_resource(2026, at)
    ), resource_expected AS (
        SELECT pool, unit, cluster, partition, round(sum(amount), 6) AS usage,
               round(sum(amount / rate::numeric), 6) AS equivalent_hours
        FROM pg_temp.year_charges(2026, at) GROUP BY 1, 2, 3, 4 HAVING sum(amount) <> 0
    )
    SELECT (SELECT count(*) FROM account_usage a FULL JOIN account_expected e USING (pool, unit, account)
            WHERE a.usage IS DISTINCT FROM e.usage)
         + (SELECT count(*) FROM resource_usage r FULL JOIN resource_expected e USING (pool, unit, cluster, partition)
            WHERE r.usage IS DISTINCT FROM e.usage
               OR NOT abs(r.equivalent_hours - e.equivalent_hours) <= 0.000001)
$$;
SELECT set_eq('SELECT account, resource_id, unit, month, through, amount FROM usage_base',
              $$SELECT account, resource_id, unit, month,
                       (date_trunc('month', now() AT TIME ZONE site_timezone()) - interval '1 month')::date, sum(amount)
                FROM charge_rollup WHERE folded GROUP BY 1, 2, 3, 4$$,
              'compaction folds the same months into usage_base, per account, resource and month, without the submitter');
SELECT ok((SELECT count(*) FROM usage_base) < (SELECT count(*) FROM charge_rollup WHERE folded),
          'and it has fewer rows than the rollup''s');
SELECT is(pg_temp.usage_mismatches(now()), 0::bigint,
          'usage_by_account and usage_by_resource now, from usage_base: equal to the ledger''s charges');
SAVEPOINT tampered;
UPDATE usage_base SET amount = amount + 1 WHERE month = '2026-03-01';
SELECT ok(pg_temp.usage_mismatches(now()) > 0, 'they do read usage_base (altered, they disagree)');
ROLLBACK TO SAVEPOINT tampered;
SELECT is(pg_temp.usage_mismatches('2026-05-17 12:00+02'), 0::bigint,
          'at an instant inside the folded months they read the rollup: still equal');
UPDATE job SET "end" = "end" + interval '5 hours' WHERE jobid IN ('r100', 'r250');  -- re-rated after the fold
DELETE FROM job WHERE jobid = 'r260';
SELECT ok(EXISTS (SELECT 1 FROM charge_rollup WHERE NOT folded AND end_month < '2026-07-01'),
          'late reversals of folded months stay unfolded');
SELECT is(pg_temp.decay_mismatches(now()), 0::bigint, 'and fairshare() now counts them');
SELECT is(pg_temp.usage_mismatches(now()), 0::bigint, 'so do the usage reports, next to usage_base');
SELECT compact_rollup() AS compacted \gset
SELECT ok(pg_temp.decay_mismatches(now()) = 0 AND NOT EXISTS (SELECT 1 FROM charge_rollup WHERE NOT folded),
          'the next compaction folds them too, fairshare() unchanged');
SELECT is(pg_temp.usage_mismatches(now()), 0::bigint, 'and the usage reports unchanged');
SELECT rebuild_rollup() AS rebuilt \gset
SELECT ok(NOT EXISTS (SELECT 1 FROM usage_base) AND pg_temp.usage_mismatches(now()) = 0,
          'rebuild_rollup() empties usage_base; the reports read the rollup alone, still equal');
SELECT compact_rollup() AS compacted \gset

-- Maui periods: the rollup's months are not read; a user whose only job ended before the
-- counted periods is not listed, as in decayed_usage() over the jobs
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres) VALUES
    ('ruc', 'old1', 'rua1', 'ruold', 'cpu', '2026-02-02 10:00+01', '2026-02-02 20:00+01', 'cpu=4');
INSERT INTO setting VALUES ('decay', 'interval'), ('period', '1 day'), ('period_decay', '0.5'), ('depth', '3');
SELECT set_eq($$SELECT account, submitter FROM fairshare_all('2026-05-17 12:00+02') WHERE submitter IS NOT NULL$$,
              $$SELECT account, submitter FROM ledger WHERE kind = 'charge'
                AND job_end > timestamptz '2026-05-17 12:00+02' - interval '3 days' AND job_end <= '2026-05-17 12:00+02'
                GROUP BY 1, 2 HAVING sum(amount) > 0$$,
              'interval decay: the users are those with a job in the counted periods');
SELECT is_empty($$
    SELECT f.account, f.submitter, f.usage, e.usage
    FROM fairshare_all('2026-05-17 12:00+02') f
    JOIN (SELECT account, submitter,
                 decayed_usage(job_end, amount, '2026-05-17 12:00+02', '1 day', 0.5, 3) AS usage
          FROM (SELECT l.account, l.submitter, l.job_end, sum(l.amount)::float8 AS amount FROM ledger l
                WHERE l.kind = 'charge' AND l.job_end <= '2026-05-17 12:00+02'
                GROUP BY l.cluster, l.jobid, l.account, l.submitter, l.job_start, l.job_end
                HAVING sum(l.amount) > 0) j
          GROUP BY 1, 2) e USING (account, submitter)
    WHERE abs(f.usage - e.usage) > 1e-9 * e.usage$$,
    'interval decay: each user''s usage equals decayed_usage() over the jobs');
DELETE FROM setting WHERE name IN ('decay', 'period', 'period_decay', 'depth');
SELECT ok(EXISTS (SELECT 1 FROM fairshare_all('2026-05-17 12:00+02') WHERE submitter = 'ruold' AND usage > 0),
          'half-life decay: that user is listed, with their decayed usage');

-- ---- a report mid-month, some jobs ending after `at`: rollup + ledger against the ledger alone ----
SELECT is_empty($$
    SELECT account, usage FROM usage_by_account(2026, '2026-02-10 09:30-08') WHERE unit = 'core-hours'
    EXCEPT
    SELECT account, round(sum(amount), 6) FROM pg_temp.year_charges(2026, '2026-02-10 09:30-08')
    WHERE unit = 'core-hours' GROUP BY account$$,
    'usage_by_account in the middle of a month equals the ledger''s charges summed');
SELECT ok((SELECT count(*) FROM ledger WHERE kind = 'charge' AND job_end > '2026-02-10 09:30-08'
             AND job_start < '2026-02-10 09:30-08') > 0,
          'and some jobs were still running at that instant (not counted)');
SELECT ok((SELECT count(*) FROM ledger WHERE kind = 'charge' AND job_end > '2026-02-10 09:30-08'
             AND job_end < '2026-03-01 00:00-08') > 0,
          'some of them end later in that month (the ledger is read for it)');

-- ---- a report when every charge of the month has ended (as today's): the rollup alone ----
CREATE TEMP TABLE last_end AS SELECT max(job_end) AS at FROM ledger WHERE kind = 'charge';
SELECT ok((SELECT count(*) FROM charge_rollup, last_end
           WHERE end_month = date_trunc('month', last_end.at AT TIME ZONE 'America/Vancouver')) > 0,
          'the month of the last job''s end has rollup rows');
SELECT is_empty($$
    SELECT account, usage FROM last_end, usage_by_account(2026, last_end.at) WHERE unit = 'core-hours'
    EXCEPT
    SELECT account, round(sum(amount), 6) FROM last_end, pg_temp.year_charges(2026, last_end.at)
    WHERE unit = 'core-hours' GROUP BY account$$,
    'usage_by_account at the last job''s end equals the ledger''s charges summed');

-- ---- consumption_before(): rollup + ledger, exactly the job-by-job sum ----
CREATE TEMP TABLE instants AS
    SELECT a.account, i.at
    FROM (SELECT 'rua' || n AS account FROM generate_series(0, 3) AS n) a
    CROSS JOIN (VALUES (timestamptz '2026-02-10 09:30-08'), ('2026-03-01 00:00-08'), ('2026-01-01 00:00+01'),
                       ('2026-06-30 23:59-07'), ('2025-12-01 00:00-08'),
                       -- regulation boundaries (Vancouver): read from the consumption rollup
                       ('2026-01-01 00:00-08'), ('2026-01-16 00:00-08'), ('2026-03-16 00:00-07'),
                       ('2025-12-16 00:00-08')) AS i(at)
    UNION ALL  -- and every 61 h 17 min for eight months: each day of the half-months, both DST changes
    SELECT a.account, i.at
    FROM (SELECT 'rua' || n AS account FROM generate_series(0, 3) AS n) a
    CROSS JOIN generate_series(timestamptz '2025-11-20 00:00-08', '2026-07-20 00:00-07', '61 hours 17 minutes') AS i(at);
-- a job that ends at a boundary, one that starts at it, one across it (Vancouver)
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres) VALUES
    ('ruc', 'b16a', 'rua2', 'rub', 'cpu', '2026-04-14 08:00-07', '2026-04-16 00:00-07', 'cpu=8'),
    ('ruc', 'b16b', 'rua2', 'rub', 'cpu', '2026-04-16 00:00-07', '2026-04-17 03:00-07', 'cpu=8'),
    ('ruc', 'b16c', 'rua3', 'rub', 'cpu', '2026-04-15 20:00-07', '2026-04-16 06:00-07', 'cpu=8');
SELECT is_empty($$
    SELECT i.account, i.at, consumption_before(i.account, 'ruc', i.at) AS fast,
           (SELECT coalesce(sum(l.amount * period_share(l.job_start, l.job_end, '-infinity', i.at)), 0)
            FROM ledger l WHERE l.kind = 'charge' AND l.account = i.account AND l.job_start < i.at) AS slow
    FROM instants i
    WHERE consumption_before(i.account, 'ruc', i.at)
          <> (SELECT coalesce(sum(l.amount * period_share(l.job_start, l.job_end, '-infinity', i.at)), 0)
              FROM ledger l WHERE l.kind = 'charge' AND l.account = i.account AND l.job_start < i.at)$$,
    'consumption_before() equals the job-by-job sum exactly, mid-month, at month starts and boundaries, before any job');
SELECT ok((SELECT count(DISTINCT consumption_before(i.account, 'ruc', i.at)) FROM instants i) > 100,
          'and it is not trivially the same number');

-- ---- the regulation report reads the consumption rollup ----
SELECT is_empty('SELECT * FROM consumption_vs_ledger',
                'after re-rating, deletion, compaction and a change of time zone: consumption still exact');
INSERT INTO regulation_machine (machine, monthly_threshold) VALUES ('ruc', 100);
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
SELECT 'rua' || a, 'grant', 5000, 'core-hours', 'ruc', '2026-01-01', '2026-12-31' FROM generate_series(0, 3) AS a;
SELECT ok((SELECT count(*) FROM regulation_report WHERE machine = 'ruc' AND consumption > 0) >= 20,
          'the regulation report has months with consumption');
SELECT is_empty($$
    SELECT r.account, r.month, r.consumption
    FROM regulation_report r
    CROSS JOIN (SELECT site_timezone() AS tz) z
    WHERE r.machine = 'ruc'
      AND r.consumption <> (consumption_before(r.account, 'ruc', (r.as_of + 1)::timestamp AT TIME ZONE z.tz)
                            - consumption_before(r.account, 'ruc', date_trunc('year', r.month)::timestamp AT TIME ZONE z.tz))::float8$$,
    'regulation_report: each month''s consumption is consumption_before() at the 16th minus at 1 January');

-- ---- a portal user sees only their accounts' rollup rows ----
SELECT is((SELECT count(*) FROM pg_class
           WHERE relrowsecurity AND oid IN ('hpcacct.charge_rollup'::regclass, 'hpcacct.consumption_rollup'::regclass,
                                            'hpcacct.fairshare_base'::regclass, 'hpcacct.usage_base'::regclass)),
          4::bigint, 'row-level security is on for both rollups and both bases');

SELECT * FROM finish();
ROLLBACK;
