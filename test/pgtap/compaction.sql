-- Incremental compaction (sql/install/47_rollup.sql, hpcacct_internal.fold_rollup() behind compact_rollup()):
-- folding month after month, with re-ratings and deletions after each fold, ends in the same
-- rollups and bases as a rebuild from the ledger folded once: numerics exactly, decayed sums
-- within 1e-12 relative (float8 rounding of the monthly rescaling). Also after a change of the
-- time zone and of the half-life; a re-run changes nothing and rewrites no folded row.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(20);

-- ---- a site: jobs inside a month, across month ends, of several users ----
INSERT INTO setting VALUES ('timezone', 'Europe/Berlin') ON CONFLICT (name) DO UPDATE SET value = excluded.value;
INSERT INTO account (name) SELECT 'cpa' || a FROM generate_series(0, 3) AS a;
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, valid) VALUES
    ('cpc', 'cpu', 'cpu=32,node=1', 'cpu=1', 1.0, 'core-hours', '[-infinity,infinity)'),
    ('cpc', 'gpu', 'cpu=8,gres/gpu=4,node=1', 'gres/gpu=1', 1.0, 'gpu-hours', '[-infinity,infinity)');
CREATE FUNCTION pg_temp.add_jobs(first integer, last integer) RETURNS void LANGUAGE sql AS $$
    INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres)
    SELECT 'cpc', 'c' || i, 'cpa' || (i % 4), 'cpu' || (i % 5), CASE WHEN i % 6 = 0 THEN 'gpu' ELSE 'cpu' END,
           s, s + (i % 89) * interval '41 minutes' + CASE WHEN i % 13 = 0 THEN interval '4 days' ELSE interval '0' END,
           (CASE WHEN i % 6 = 0 THEN 'cpu=8,gres/gpu=' || (1 + i % 4) ELSE 'cpu=' || (1 + i % 32) END)::tres
    FROM generate_series(first, last) AS i
    CROSS JOIN LATERAL (SELECT timestamptz '2025-12-10 00:00+01' + i * interval '6 hours 47 minutes' AS s) t
$$;
SELECT pg_temp.add_jobs(1, 400);  -- December 2025 to early April 2026

-- a snapshot of both rollups and both bases, one row per table and group
CREATE TEMP TABLE snap (label text, tbl text, key text, nums numeric[], decayed float8);
CREATE FUNCTION pg_temp.snapshot(label text) RETURNS bigint LANGUAGE sql AS $$
    DELETE FROM snap WHERE snap.label = $1;
    INSERT INTO snap
    SELECT $1, 'charge_rollup', concat_ws('|', account, resource_id, unit, submitter, month, end_month, folded),
           ARRAY[amount, job_amount], decayed
    FROM charge_rollup
    UNION ALL
    SELECT $1, 'fairshare_base', concat_ws('|', account, resource_id, unit, submitter, through), ARRAY[job_amount],
           decayed
    FROM fairshare_base
    UNION ALL
    SELECT $1, 'usage_base', concat_ws('|', account, resource_id, unit, month), ARRAY[amount], NULL
    FROM usage_base
    UNION ALL  -- its rows keep the month of the fold that last added to them; the latest is the base's
    SELECT $1, 'usage_base through', 'latest', ARRAY[extract(epoch FROM max(through))], NULL
    FROM usage_base
    UNION ALL
    SELECT $1, 'consumption_rollup', concat_ws('|', account, resource_id, boundary, merged), ARRAY[ended, running], NULL
    FROM consumption_rollup;
    SELECT count(*) FROM snap WHERE snap.label = $1;
$$;
-- the groups where two snapshots differ: a missing row, a numeric not equal, a decayed sum
-- off by more than `tolerance` relative
CREATE FUNCTION pg_temp.differences(a text, b text, tolerance float8) RETURNS bigint LANGUAGE sql AS $$
    SELECT count(*)
    FROM (SELECT * FROM snap WHERE label = a) x
    FULL JOIN (SELECT * FROM snap WHERE label = b) y ON y.tbl = x.tbl AND y.key = x.key
    WHERE x.key IS NULL OR y.key IS NULL OR x.nums <> y.nums
       OR NOT (x.decayed IS NOT DISTINCT FROM y.decayed
               OR abs(x.decayed - y.decayed) <= tolerance * greatest(abs(x.decayed), abs(y.decayed)))
$$;
-- one row per group in every table (a snapshot's keys are distinct)
CREATE FUNCTION pg_temp.duplicates(a text) RETURNS bigint LANGUAGE sql AS $$
    SELECT count(*) - count(DISTINCT (tbl, key)) FROM snap WHERE label = a
$$;
-- the same state rebuilt from the ledger and folded at once, into snapshot `label`
CREATE FUNCTION pg_temp.rebuilt(through_month date, label text) RETURNS bigint LANGUAGE sql AS $$
    SELECT rebuild_rollup();
    SELECT hpcacct_internal.fold_rollup(through_month);
    SELECT pg_temp.snapshot(label);
$$;

-- ---- folding month after month, the ledger changing in between ----
SELECT ok(hpcacct_internal.fold_rollup('2026-01-01') > 0, 'a first fold merges the new rows');
UPDATE job SET "end" = "end" + interval '3 hours' WHERE jobid IN ('c5', 'c17', 'c40');  -- re-rated: folded months
DELETE FROM job WHERE jobid IN ('c9', 'c30');
SELECT ok(EXISTS (SELECT 1 FROM charge_rollup WHERE NOT folded AND end_month <= '2026-01-01'),
          'late reversals of folded months are new rows');
SELECT hpcacct_internal.fold_rollup('2026-01-01') AS folded \gset
SELECT ok(NOT EXISTS (SELECT 1 FROM charge_rollup WHERE NOT folded AND end_month <= '2026-01-01')
          AND pg_temp.snapshot('step') > 0 AND pg_temp.duplicates('step') = 0,
          'the same month again: the late rows are added to the folded rows, one row per group');
-- two months on: the base decays by them
SELECT hpcacct_internal.fold_rollup('2026-03-01') AS folded \gset
SELECT is((SELECT array_agg(DISTINCT through) FROM fairshare_base), ARRAY[date '2026-03-01'],
          'the base moves to the new month, every row');
SELECT pg_temp.add_jobs(401, 640);  -- April to June
UPDATE job SET "end" = "end" + interval '1 day' WHERE jobid IN ('c3', 'c150', 'c260', 'c420');
DELETE FROM job WHERE jobid IN ('c200', 'c330', 'c450');
SELECT hpcacct_internal.fold_rollup('2026-04-01') AS folded \gset
UPDATE job SET "end" = "end" + interval '2 hours' WHERE jobid IN ('c8', 'c380');
SELECT hpcacct_internal.fold_rollup('2026-05-01') AS folded \gset
SELECT pg_temp.snapshot('incremental') AS rows \gset

-- a re-run changes nothing, and rewrites no folded row
CREATE TEMP TABLE folded_rows AS SELECT ctid AS place FROM charge_rollup WHERE folded;
SELECT hpcacct_internal.fold_rollup('2026-05-01') AS folded \gset
SELECT pg_temp.snapshot('re-run') AS rows \gset
SELECT is(pg_temp.differences('incremental', 're-run', 0), 0::bigint, 'a re-run changes nothing, to the bit');
SELECT set_eq('SELECT ctid AS place FROM charge_rollup WHERE folded', 'SELECT place FROM folded_rows',
              'and rewrites no folded row');
SELECT hpcacct_internal.fold_rollup('2026-02-01') AS folded \gset
SELECT pg_temp.snapshot('earlier') AS rows \gset
SELECT is(pg_temp.differences('incremental', 'earlier', 0), 0::bigint,
          'an earlier month changes nothing either: the base does not move back');

-- against a rebuild from the ledger folded at once
SELECT ok(pg_temp.snapshot('incremental') > 0 AND pg_temp.duplicates('incremental') = 0,
          'incremental: one row per group in each table');
SELECT ok(EXISTS (SELECT 1 FROM charge_rollup WHERE NOT folded) AND EXISTS (SELECT 1 FROM charge_rollup WHERE folded),
          'months folded and not (June)');
SELECT pg_temp.rebuilt('2026-05-01', 'rebuilt') AS rows \gset
SELECT is(pg_temp.differences('incremental', 'rebuilt', 1e-12), 0::bigint,
          'incremental folds equal a rebuild folded at once (numerics exactly, decayed sums within 1e-12)');
SELECT ok((SELECT count(*) FROM snap WHERE label = 'rebuilt' AND tbl = 'fairshare_base') > 8
          AND EXISTS (SELECT 1 FROM charge_rollup WHERE folded AND month < end_month),
          'the comparison covers the base''s groups and jobs across month ends');
SAVEPOINT tampered;
UPDATE fairshare_base SET decayed = decayed * (1 + 1e-11) WHERE account = 'cpa1';
SELECT pg_temp.snapshot('tampered') AS rows \gset
SELECT ok(pg_temp.differences('tampered', 'rebuilt', 1e-12) > 0, 'a decayed sum off by 1e-11 is caught');
ROLLBACK TO SAVEPOINT tampered;
SELECT compact_rollup() AS folded \gset
SELECT is((SELECT array_agg(DISTINCT through) FROM fairshare_base),
          ARRAY[(date_trunc('month', now() AT TIME ZONE site_timezone()) - interval '1 month')::date],
          'compact_rollup() folds up to the month before the current');

-- ---- after a change of time zone: rebuilt, then folded incrementally again ----
UPDATE setting SET value = 'America/Vancouver' WHERE name = 'timezone';
SELECT ok(NOT EXISTS (SELECT 1 FROM fairshare_base) AND NOT EXISTS (SELECT 1 FROM charge_rollup WHERE folded),
          'a change of time zone empties the bases');
SELECT hpcacct_internal.fold_rollup('2026-02-01') AS folded \gset
UPDATE job SET "end" = "end" + interval '7 hours' WHERE jobid IN ('c12', 'c100', 'c310');
DELETE FROM job WHERE jobid = 'c111';
SELECT hpcacct_internal.fold_rollup('2026-03-01') AS folded \gset
SELECT hpcacct_internal.fold_rollup('2026-05-01') AS folded \gset
SELECT pg_temp.snapshot('tz incremental') AS rows \gset
SELECT pg_temp.rebuilt('2026-05-01', 'tz rebuilt') AS rows \gset
SELECT is(pg_temp.differences('tz incremental', 'tz rebuilt', 1e-12), 0::bigint,
          'after a change of time zone: incremental folds equal a rebuild');

-- ---- after a change of half-life ----
INSERT INTO setting VALUES ('half_life', '2 days');
SELECT hpcacct_internal.fold_rollup('2026-01-01') AS folded \gset
SELECT hpcacct_internal.fold_rollup('2026-02-01') AS folded \gset
UPDATE job SET "end" = "end" + interval '5 hours' WHERE jobid IN ('c20', 'c210');
SELECT hpcacct_internal.fold_rollup('2026-04-01') AS folded \gset
SELECT hpcacct_internal.fold_rollup('2026-05-01') AS folded \gset
SELECT pg_temp.snapshot('hl incremental') AS rows \gset
SELECT pg_temp.rebuilt('2026-05-01', 'hl rebuilt') AS rows \gset
SELECT is(pg_temp.differences('hl incremental', 'hl rebuilt', 1e-12), 0::bigint,
          'after a change of half-life (2 days): incremental folds equal a rebuild');
SELECT ok((SELECT count(DISTINCT decayed) FROM snap WHERE label = 'hl rebuilt' AND tbl = 'fairshare_base') > 8,
          'with decayed sums that are not all alike');

-- ---- bad input ----
SELECT throws_ok($$SELECT hpcacct_internal.fold_rollup(NULL)$$, '22004', NULL, 'a NULL month is an error');
SELECT throws_ok($$SELECT hpcacct_internal.fold_rollup('2026-03-15')$$, '22023', NULL, 'a day other than the first is an error');
SELECT throws_ok($$SELECT hpcacct_internal.fold_rollup(date_trunc('month', now() AT TIME ZONE site_timezone())::date)$$, '22023', NULL,
                 'the current month cannot be folded');

SELECT * FROM finish();
ROLLBACK;
