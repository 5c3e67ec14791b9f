-- make demo, RWTH sliding-window quotas (rules §3): CLAIX projects with monthly allowances,
-- their jobs, and what `r_wlm_usage -q` shows them. The demo's "today" is 15 May 2024 (a
-- function argument), so that its output does not change with the day it runs; the view
-- hpcacct.window_quota_usage shows the same for the real current month.
\pset footer off
SET search_path = public, hpcacct;

INSERT INTO resource (cluster, partition, node, bundle, rate, unit, exclusive, description) VALUES
    ('claix', 'c18m', 'cpu=48,mem=192G,node=1', 'cpu=1', 1, 'core-hours', false, 'CLAIX-2018 MPI nodes'),
    ('claix', 'jara', 'cpu=48,mem=192G,node=1', 'cpu=1', 1, 'core-hours', true,  'CLAIX-2018 JARA nodes (exclusive)');
INSERT INTO account (name, kind, description) VALUES
    ('rwth0123', 'project', 'steady user'),
    ('rwth0456', 'project', 'allowance growing month by month'),
    ('jara0042', 'project', 'JARA project, heavy April'),
    ('thes0815', 'project', 'thesis project, too much in May'),
    ('rwth0007', 'project', 'between two periods');

-- Accounting periods (whole months) and monthly allowances in core-hours on CLAIX.
\o /dev/null
SELECT add_quota_period('rwth0123', '2024-01-01', '2024-06-30', 10000, 'claix');
SELECT add_quota_period('rwth0456', '2024-01-01', '2024-06-30', 2000, 'claix');
UPDATE monthly_allowance SET allowance = CASE WHEN month < '2024-05-01' THEN 4000 ELSE 8000 END
WHERE account = 'rwth0456' AND month >= '2024-03-01';
SELECT add_quota_period('jara0042', '2024-01-01', '2024-12-31', 50000, 'claix');
SELECT add_quota_period('thes0815', '2024-03-01', '2024-08-31', 500, 'claix');
SELECT add_quota_period('rwth0007', '2023-07-01', '2023-12-31', 1000, 'claix');
SELECT add_quota_period('rwth0007', '2024-07-01', '2024-12-31', 1000, 'claix');
\o

-- Jobs up to the demo's today (all end before 15 May 2024), times in Berlin.
INSERT INTO job (cluster, jobid, account, "user", partition, submit, start, "end", alloctres, state)
SELECT 'claix', 'rwth-' || j.n, j.account, j."user", j.partition, j.start - interval '5 minutes', j.start,
       j.start + j.hours * interval '1 hour', j.alloctres::tres, 'COMPLETED'
FROM (
    -- rwth0123: one 12-core job a day from 06:00, 20 to 28 hours (some run past midnight)
    SELECT 'a' || d AS n, 'rwth0123' AS account, 'ab123456' AS "user", 'c18m' AS partition,
           (date '2024-01-01' + d + time '06:00') AT TIME ZONE 'Europe/Berlin' AS start,
           20 + d % 9 AS hours, 'cpu=12,mem=48G,node=1' AS alloctres
    FROM generate_series(0, 133) AS d
    UNION ALL
    -- rwth0456: a 16-core job every other day, 10 hours
    SELECT 'b' || d, 'rwth0456', 'cd654321', 'c18m',
           (date '2024-01-02' + d + time '09:00') AT TIME ZONE 'Europe/Berlin', 10, 'cpu=16,mem=64G,node=1'
    FROM generate_series(0, 130, 2) AS d
    UNION ALL
    -- rwth0456: 64 cores from 30 April 20:00 to 1 May 08:00: 4 hours in April, 8 in May
    SELECT 'b-boundary', 'rwth0456', 'cd654321', 'c18m',
           timestamp '2024-04-30 20:00' AT TIME ZONE 'Europe/Berlin', 12, 'cpu=64,mem=256G,node=2'
    UNION ALL
    -- jara0042: two exclusive nodes for 48 hours every fourth day until March, then four nodes
    -- around the clock from April (one task per node: charged 48 cores per node)
    SELECT 'c' || d, 'jara0042', 'ef112233', 'jara',
           (date '2024-01-01' + d + time '00:00') AT TIME ZONE 'Europe/Berlin', 48, 'cpu=2,node=2'
    FROM generate_series(0, 88, 4) AS d
    UNION ALL
    SELECT 'd' || d, 'jara0042', 'ef112233', 'jara',
           (date '2024-04-01' + d + time '00:00') AT TIME ZONE 'Europe/Berlin', 24, 'cpu=4,node=4'
    FROM generate_series(0, 43) AS d
    UNION ALL
    -- thes0815: a little in March and April, then three 48-core jobs of 25 hours in May
    SELECT 'e' || d, 'thes0815', 'gh445566', 'c18m',
           (date '2024-03-04' + d + time '10:00') AT TIME ZONE 'Europe/Berlin', 6, 'cpu=8,mem=16G,node=1'
    FROM generate_series(0, 56, 7) AS d
    UNION ALL
    SELECT 'f' || d, 'thes0815', 'gh445566', 'c18m',
           (date '2024-05-06' + d + time '08:00') AT TIME ZONE 'Europe/Berlin', 25, 'cpu=48,mem=180G,node=1'
    FROM generate_series(0, 4, 2) AS d
    UNION ALL
    -- rwth0007: its 2023 period
    SELECT 'g' || d, 'rwth0007', 'ij778899', 'c18m',
           (date '2023-07-03' + d + time '08:00') AT TIME ZONE 'Europe/Berlin', 8, 'cpu=24,mem=96G,node=1'
    FROM generate_series(0, 170, 10) AS d
) j;

\echo
\echo '== RWTH: accounting periods and monthly allowances (core-hours on CLAIX) =='
SELECT p.account, to_char(p.period_start, 'DD.MM.YYYY') AS start, to_char(p.period_end, 'DD.MM.YYYY') AS "end",
       string_agg(to_char(a.month, 'Mon') || ' ' || a.allowance, ', ' ORDER BY a.month) AS allowances
FROM quota_period p JOIN monthly_allowance a USING (account, period_start, period_end)
GROUP BY p.account, p.period_start, p.period_end
ORDER BY p.account, p.period_start;

\echo
\echo '== Consumption per month (core-hours, pro rata across month ends, Europe/Berlin) =='
SELECT to_char(month, 'YYYY-MM') AS month,
       round(sum(amount) FILTER (WHERE account = 'rwth0123')) AS rwth0123,
       round(sum(amount) FILTER (WHERE account = 'rwth0456')) AS rwth0456,
       round(sum(amount) FILTER (WHERE account = 'jara0042')) AS jara0042,
       round(sum(amount) FILTER (WHERE account = 'thes0815')) AS thes0815,
       round(sum(amount) FILTER (WHERE account = 'rwth0007')) AS rwth0007
FROM charge_by_month WHERE cluster = 'claix'
GROUP BY month ORDER BY month;

\echo
\echo '== The job from 30 April 20:00 to 1 May 08:00 counts in both months =='
SELECT l.jobid, to_char(c.month, 'YYYY-MM') AS month, round(c.amount, 2) AS core_hours
FROM charge_by_month c JOIN ledger l USING (entry_id)
WHERE l.jobid = 'rwth-b-boundary' ORDER BY c.month;

\echo
\echo '== r_wlm_usage -p <project> -q, on 15 May 2024 (hpcacct.window_quota_usage(account, date)) =='
\x on
SELECT u.account AS "Group:",
       to_char(u.period_start, 'DD.MM.YYYY') AS "Start of Accounting Period:",
       to_char(u.period_end, 'DD.MM.YYYY') AS "End of Accounting Period:",
       u.state AS "State of project:",
       round(u.monthly) AS "monthly (core-h):",
       round(u.remaining_prev) AS "Remaining core-h of prev. month:",
       round(u.consumed_current) AS "Consumed core-h act. month:",
       coalesce(round(u.consumable_pct)::text, '-') AS "Consumable core-h (%):",
       round(u.consumable) AS "Consumable core-h:"
FROM (VALUES ('rwth0123'), ('rwth0456'), ('jara0042'), ('thes0815'), ('rwth0007')) AS a(account)
CROSS JOIN LATERAL window_quota_usage(a.account, '2024-05-15') u;
\x off

\echo
\echo '== Month by month, as each month saw it (window_quota_usage at the 15th) =='
SELECT u.account, to_char(u.month, 'YYYY-MM') AS month, u.state, round(u.monthly) AS monthly,
       round(u.remaining_prev) AS remaining_prev, round(u.consumed_current) AS consumed,
       round(u.consumable_pct) AS "consumable_%", round(u.consumable) AS consumable
FROM (VALUES ('rwth0456'), ('jara0042'), ('thes0815')) AS a(account)
CROSS JOIN generate_series(timestamp '2024-01-15', '2024-05-15', interval '1 month') AS g(at)
CROSS JOIN LATERAL window_quota_usage(a.account, g.at::date) u
ORDER BY u.account, u.month;

\echo
\echo '== What a submit check sees on 15 May 2024 (hpcacct.window_quota_state) =='
SELECT a.account, window_quota_state(a.account, '2024-05-15') AS state,
       CASE window_quota_state(a.account, '2024-05-15')
           WHEN 'normal' THEN 'accepted'
           WHEN 'low_priority' THEN 'accepted, runs when no other project waits'
           WHEN 'blocked' THEN 'refused'
           ELSE 'no window quota' END AS submission
FROM (VALUES ('rwth0123'), ('rwth0456'), ('jara0042'), ('thes0815'), ('rwth0007'), ('nip00001')) AS a(account);

\echo
\echo '== The live view hpcacct.window_quota_usage (today: every sample period has ended, no quota) =='
SELECT account, to_char(period_start, 'DD.MM.YYYY') AS start, to_char(period_end, 'DD.MM.YYYY') AS "end",
       state, monthly, remaining_prev, consumed_current, consumable_pct, consumable
FROM window_quota_usage
WHERE account IN ('rwth0123', 'rwth0456', 'jara0042', 'thes0815', 'rwth0007')
ORDER BY account;
