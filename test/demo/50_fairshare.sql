-- make demo, part 5: Compute Canada's group usage (rules §5) for the sample site of part 1 —
-- allocation years from 1 April, usage by resource, by project and by submitter with
-- projections, the monthly breakdown — and the fair-share table. Everything is seen on
-- 1 October 2024 (site time zone), so the output does not change from run to run.
\pset footer off
SET search_path = public, hpcacct;
\set at '''2024-10-01 00:00+02'''

-- Compute Canada's allocation year starts on 1 April, on every cluster.
INSERT INTO pool (name, year_start_month, description) VALUES
    ('beluga', 4, 'Compute Canada: Béluga'), ('cedar', 4, 'Compute Canada: Cedar'),
    ('graham', 4, 'Compute Canada: Graham'), ('niagara', 4, 'Compute Canada: Niagara');

-- Allocations for 2023-24 and 2024-25 as ledger grants: core-years and GPU-years, booked in
-- hours (× 8 760). A resource's pool is its cluster, split by unit, so CPU and GPU
-- allocations of one cluster are separate pools (Compute Canada keeps them apart).
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until, note)
SELECT a.account, 'grant', a.years * 8760, a.unit, a.pool,
       make_date(y, 4, 1), make_date(y + 1, 3, 31), format('%s %s-years for %s-%s', a.years, a.kind, y, y + 1)
FROM (VALUES ('rrg-jones', 'cedar', 'core-equivalent-hours', 'core', 5.0),
             ('rpp-lee', 'cedar', 'core-equivalent-hours', 'core', 4.0),
             ('def-smith', 'cedar', 'core-equivalent-hours', 'core', 2.0),
             ('rrg-jones', 'graham', 'core-equivalent-hours', 'core', 6.0),
             ('rpp-lee', 'graham', 'core-equivalent-hours', 'core', 2.0),
             ('def-smith', 'graham', 'core-equivalent-hours', 'core', 2.0),
             ('rrg-jones', 'niagara', 'core-equivalent-hours', 'core', 5.0),
             ('rpp-lee', 'niagara', 'core-equivalent-hours', 'core', 5.0),
             ('def-smith', 'niagara', 'core-equivalent-hours', 'core', 1.0),
             ('rrg-jones', 'cedar', 'GPU-equivalent-hours', 'GPU', 2.0),
             ('rpp-lee', 'cedar', 'GPU-equivalent-hours', 'GPU', 1.0),
             ('def-smith', 'cedar', 'GPU-equivalent-hours', 'GPU', 0.5),
             ('rrg-jones', 'graham', 'GPU-equivalent-hours', 'GPU', 3.0),
             ('rpp-lee', 'graham', 'GPU-equivalent-hours', 'GPU', 2.0),
             ('def-smith', 'graham', 'GPU-equivalent-hours', 'GPU', 1.0),
             ('rrg-jones', 'beluga', 'GPU-equivalent-hours', 'GPU', 0.5),
             ('rpp-lee', 'beluga', 'GPU-equivalent-hours', 'GPU', 0.5),
             ('def-smith', 'beluga', 'GPU-equivalent-hours', 'GPU', 0.25)) AS a(account, pool, unit, kind, years)
CROSS JOIN generate_series(2023, 2024) AS y;

\echo
\echo '== Compute Canada: allocation years on 1 October 2024 (hpcacct.pool, allocation_year) =='
SELECT p.name AS pool, y.year, y.first_day, y.last_day, y.elapsed, y.length, y.state
FROM pool p CROSS JOIN LATERAL allocation_year(p.name, NULL, :at) y
WHERE p.name IN ('beluga', 'cedar', 'graham', 'niagara')
ORDER BY p.name;

\echo
\echo '== By compute resource, 2024-25 to date: usage in core-/GPU-years and projected (usage_by_resource) =='
SELECT cluster, partition, unit, round(usage, 1) AS usage_hours, round(usage_years, 3) AS usage_years,
       round(projected_years, 3) AS projected_years
FROM usage_by_resource(NULL, :at)
WHERE pool IN ('beluga', 'cedar', 'graham', 'niagara')
ORDER BY cluster, unit DESC, partition;

\echo
\echo '== By resource allocation project, 2024-25 to date (usage_by_account): overuse is shown, never refused =='
SELECT account, pool AS resource, CASE WHEN unit LIKE 'GPU%' THEN 'GPU' ELSE 'CPU' END AS kind,
       round(allocation_years, 2) AS allocated_years, round(usage_years, 3) AS used_years,
       utilization_pct, round(projected_years, 3) AS projected_years, projected_utilization_pct,
       round(overuse / 8760, 3) AS overuse_years
FROM usage_by_account(NULL, :at)
WHERE pool IN ('beluga', 'cedar', 'graham', 'niagara')
ORDER BY account, pool, unit DESC;

\echo
\echo '== By submitter: rrg-jones on Cedar CPU, 2024-25 to date (usage_by_submitter) =='
SELECT submitter, round(usage, 1) AS core_hours, round(usage_years, 3) AS core_years, account_pct AS pct_of_project,
       round(projected_years, 3) AS projected_years
FROM usage_by_submitter(NULL, :at)
WHERE account = 'rrg-jones' AND pool = 'cedar' AND unit = 'core-equivalent-hours'
ORDER BY usage DESC, submitter;

\echo
\echo '== Monthly breakdown: rrg-jones on Cedar CPU, 2024-25 to date (usage_by_month) =='
SELECT to_char(month, 'YYYY-MM') AS month, round(sum(usage), 1) AS core_hours, round(sum(usage_years), 3) AS core_years
FROM usage_by_month(NULL, :at)
WHERE account = 'rrg-jones' AND pool = 'cedar' AND unit = 'core-equivalent-hours'
GROUP BY month ORDER BY month;

\echo
\echo '== The past year 2023-24 (jobs from January 2024 on): no projection (usage_by_account(2023, ...)) =='
SELECT account, pool AS resource, CASE WHEN unit LIKE 'GPU%' THEN 'GPU' ELSE 'CPU' END AS kind,
       round(allocation_years, 2) AS allocated_years, round(usage_years, 3) AS used_years, utilization_pct,
       projected_years
FROM usage_by_account(2023, :at)
WHERE pool IN ('beluga', 'cedar', 'graham', 'niagara')
ORDER BY account, pool, unit DESC;

\echo
\echo '== Fair share on 1 October 2024: half-life 7 days; factor 2^(-usage/share), x 0.01 once the year''s allocation is used up =='
SELECT pool, CASE WHEN unit LIKE 'GPU%' THEN 'GPU' ELSE 'CPU' END AS kind, account,
       round(share::numeric, 4) AS share, round(usage::numeric, 1) AS decayed_usage,
       round(norm_usage::numeric, 4) AS norm_usage, exhausted, round(factor::numeric, 4) AS factor
FROM fairshare(:at)
WHERE pool IN ('beluga', 'cedar', 'graham', 'niagara') AND submitter IS NULL
ORDER BY pool, unit DESC, account;

\echo
\echo '== Fair share inside the projects on Cedar CPU: users share their project equally =='
SELECT account, submitter, round(share::numeric, 4) AS share, round(usage::numeric, 1) AS decayed_usage,
       round(factor::numeric, 4) AS factor
FROM fairshare(:at)
WHERE pool = 'cedar' AND unit = 'core-equivalent-hours' AND submitter IS NOT NULL
ORDER BY account, submitter;
