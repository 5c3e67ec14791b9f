-- make bench: allocations of every kind, sized from what each account actually used (times
-- a random factor, so that some under-use, some over-use), once the jobs are charged; then
-- a few corrections (re-rated and deleted jobs, whose reversals the ledger books).
SET client_min_messages = warning;
SET search_path = public, hpcacct;

-- Corrections: 0.5 % of the jobs ran 10 % shorter than first recorded, 0.1 % are deleted.
UPDATE job SET "end" = start + ("end" - start) * 0.9 WHERE bench.u(jobid::bigint, 40) < 0.005;
DELETE FROM job WHERE bench.u(jobid::bigint, 41) < 0.001;

-- Charges per account, pool, unit and local day of the job's start: the basis of every size.
CREATE TEMP TABLE used AS
SELECT l.account, coalesce(r.pool, r.cluster) AS pool, l.unit,
       (l.job_start AT TIME ZONE 'Europe/Berlin')::date AS day, sum(l.amount) AS amount
FROM ledger l JOIN resource r USING (resource_id)
WHERE l.kind = 'charge'
GROUP BY 1, 2, 3, 4;
CREATE INDEX ON used (account, day);
ANALYZE used;

-- Share of a period [a, b) covered by the site's three years (to project partial periods).
CREATE FUNCTION pg_temp.covered(a date, b date) RETURNS float8 LANGUAGE sql STABLE
    RETURN greatest(0.05, (least(b, (SELECT anchor FROM bench.site)) - greatest(a, (SELECT (t0 AT TIME ZONE 'Europe/Berlin')::date FROM bench.site)))::float8 / (b - a));

-- ---- GENCI: per account and calendar year, grants, second sessions, supplements, retractions.
WITH years AS (
    SELECT y, make_date(y, 1, 1) AS jan1
    FROM bench.site s, generate_series(extract(year FROM s.t0 AT TIME ZONE 'Europe/Berlin')::integer,
                                       extract(year FROM s.anchor)::integer) AS y
), base AS (
    SELECT a.n, a.name, a.grp AS machine, y.y, y.jan1,
           greatest(1000, coalesce((SELECT sum(u.amount) FROM used u WHERE u.account = a.name
                                    AND u.day >= y.jan1 AND u.day < make_date(y.y + 1, 1, 1)), 0)
                          / pg_temp.covered(y.jan1, make_date(y.y + 1, 1, 1)) * (0.6 + bench.u(a.n * 10000 + y.y, 20))) AS x
    FROM bench.acct a CROSS JOIN years y
    WHERE a.centre = 'genci'
)
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until, note)
SELECT b.name, e.kind, round(e.amount), 'hours', b.machine, e.f, e.u, e.note
FROM base b
CROSS JOIN LATERAL (
    SELECT bench.u(b.n * 10000 + b.y, 21) < 0.5 AS two_sessions,
           make_date(b.y, 9, 1) + floor(bench.u(b.n * 10000 + b.y, 24) * 60)::integer AS supplement_from,
           make_date(b.y, 3 + floor(bench.u(b.n * 10000 + b.y, 25) * 8)::integer, 15) AS retraction_from
) o
CROSS JOIN LATERAL (VALUES
    ('grant', CASE WHEN o.two_sessions THEN 0.7 * b.x ELSE b.x END, b.jan1, make_date(b.y, 12, 31), 'first session'),
    ('grant', CASE WHEN o.two_sessions THEN 0.3 * b.x END, make_date(b.y, 7, 1), make_date(b.y, 12, 31), 'second session'),
    ('supplement', CASE WHEN bench.u(b.n * 10000 + b.y, 22) < 0.2 THEN 0.1 * b.x END,
                   o.supplement_from, make_date(b.y, 12, 31), 'supplement'),
    ('retraction', CASE WHEN bench.u(b.n * 10000 + b.y, 23) < 0.1 THEN -0.05 * b.x END,
                   o.retraction_from, make_date(b.y, 12, 31), 'retraction by the committee')
) AS e(kind, amount, f, u, note)
WHERE e.amount IS NOT NULL;

-- Half of the machines' yearly grants are regulated monthly, half annually.
UPDATE regulation_machine s
SET monthly_threshold = (
    SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY g.granted)
    FROM (SELECT sum(l.amount) AS granted FROM ledger l
          WHERE l.pool = s.machine AND l.kind IN ('grant', 'supplement')
          GROUP BY l.account, extract(year FROM l.valid_from)) g);

-- ---- HLRN: quarterly deposits (one project in ten has none from this quarter on: expired),
-- transfers between quarters, refunds; personal accounts get their 2 500 NPL per quarter
-- (one user in five not for this quarter and the previous one).
WITH quarters AS (
    SELECT q::date AS q
    FROM bench.site s,
         generate_series(date_trunc('quarter', s.t0 AT TIME ZONE 'Europe/Berlin'),
                         date_trunc('quarter', s.anchor::timestamp) + interval '6 months', interval '3 months') AS q
), base AS (
    SELECT a.n, a.name, qq.q, row_number() OVER (PARTITION BY a.n ORDER BY qq.q) AS qi,
           coalesce((SELECT sum(u.amount) FROM used u WHERE u.account = a.name AND u.day >= qq.q
                     AND u.day < (qq.q + interval '3 months')::date)
                    / pg_temp.covered(qq.q, (qq.q + interval '3 months')::date), 0) AS quarter_use,
           (SELECT sum(u.amount) FROM used u WHERE u.account = a.name) / 12 AS avg_use
    FROM bench.acct a CROSS JOIN quarters qq
    WHERE a.centre = 'hlrn'
      AND NOT (bench.u(a.n, 30) < 0.1 AND qq.q >= date_trunc('quarter', (SELECT anchor FROM bench.site)::timestamp))
), deposit AS (
    SELECT b.*, round(greatest(100, CASE WHEN b.q >= date_trunc('quarter', (SELECT anchor FROM bench.site)::timestamp)
                                         THEN coalesce(b.avg_use, 0) ELSE b.quarter_use END)
                      * (0.6 + 0.9 * bench.u(b.n * 1000 + b.qi, 31))) AS amount
    FROM base b
)
INSERT INTO ledger (account, kind, amount, unit, valid_from, valid_until, note)
SELECT d.name, e.kind, e.amount, 'NPL', e.q, (e.q + interval '3 months')::date - 1, e.note
FROM deposit d
CROSS JOIN LATERAL (VALUES
    ('deposit', d.amount, d.q, 'Scientific Board grant'),
    ('transfer', CASE WHEN bench.u(d.n * 1000 + d.qi, 32) < 0.05 THEN -round(d.amount * 0.1) END, d.q, 'moved to the next quarter'),
    ('transfer', CASE WHEN bench.u(d.n * 1000 + d.qi, 32) < 0.05 THEN round(d.amount * 0.1) END,
                 (d.q + interval '3 months')::date, 'moved from the previous quarter'),
    ('refund', CASE WHEN bench.u(d.n * 1000 + d.qi, 33) < 0.02 THEN 50 END, d.q, 'failed job')
) AS e(kind, amount, q, note)
WHERE e.amount IS NOT NULL;

INSERT INTO ledger (account, kind, amount, unit, valid_from, valid_until, note)
SELECT a.name, 'deposit', 2500, 'NPL', q::date, (q + interval '3 months')::date - 1, 'personal allotment'
FROM bench.acct a, bench.site s,
     generate_series(date_trunc('quarter', s.t0 AT TIME ZONE 'Europe/Berlin'),
                     date_trunc('quarter', s.anchor::timestamp) + interval '6 months', interval '3 months') AS q
WHERE a.centre = 'hlrnp'
  AND NOT (bench.u(a.n, 34) < 0.2 AND q >= date_trunc('quarter', s.anchor::timestamp) - interval '3 months');

-- ---- RWTH: consecutive quota periods of 6 or 12 months (one account in ten between two
-- periods today), allowances from the account's average month, some months changed.
CREATE TEMP TABLE periods AS
WITH base AS (
    SELECT a.n, a.name, CASE WHEN bench.u(a.n, 35) < 0.5 THEN 6 ELSE 12 END AS len,
           (date_trunc('month', s.t0 AT TIME ZONE 'Europe/Berlin')
            - floor(bench.u(a.n, 36) * 6) * interval '1 month')::date AS first,
           s.anchor,
           greatest(10, coalesce((SELECT sum(u.amount) FROM used u WHERE u.account = a.name), 0) / 36) AS monthly
    FROM bench.acct a, bench.site s WHERE a.centre = 'rwth'
)
SELECT b.n, b.name, (b.first + i * b.len * interval '1 month')::date AS period_start,
       (b.first + (i + 1) * b.len * interval '1 month')::date - 1 AS period_end,
       b.monthly * (0.5 + 1.5 * bench.u(b.n * 100 + i, 37)) AS allowance
FROM base b
CROSS JOIN LATERAL generate_series(0, 60) AS i
WHERE b.first + i * b.len * interval '1 month' <= b.anchor + interval '6 months'
  AND NOT (bench.u(b.n, 38) < 0.1
           AND b.anchor BETWEEN (b.first + i * b.len * interval '1 month')::date
                            AND (b.first + (i + 1) * b.len * interval '1 month')::date - 1);
INSERT INTO quota_period (account, period_start, period_end, cluster, unit)
SELECT name, period_start, period_end, 'claix', 'core-hours' FROM periods;
INSERT INTO monthly_allowance (account, period_start, period_end, month, allowance)
SELECT p.name, p.period_start, p.period_end, m::date,
       round((p.allowance * CASE WHEN bench.u(p.n * 1000 + extract(epoch FROM m)::bigint % 100000, 39) < 0.2
                                 THEN 0.5 + bench.u(p.n * 1000 + extract(epoch FROM m)::bigint % 100000, 40) ELSE 1 END)::numeric)::float8
FROM periods p, generate_series(p.period_start::timestamp, p.period_end::timestamp, interval '1 month') AS m;

-- ---- Fair-share pools: allocation years from 1 April (Cedar) and 1 July (LQCD), a grant
-- per account, pool and unit it used, a supplement for one in ten.
WITH pools (centre, pool, unit, m) AS (
    VALUES ('cc', 'cedar', 'core-equivalent-hours', 4), ('cc', 'cedar', 'GPU-equivalent-hours', 4),
           ('lqcd', 'lqcd-cpu', 'core-hours', 7), ('lqcd', 'lqcd-gpu', 'GPU-hours', 7)
), years AS (
    SELECT p.*, make_date(y, p.m, 1) AS first_day, (make_date(y, p.m, 1) + interval '1 year')::date AS next_first
    FROM pools p, bench.site s,
         generate_series(extract(year FROM s.t0)::integer - 1, extract(year FROM s.anchor)::integer) AS y
    WHERE make_date(y, p.m, 1) <= s.anchor AND (make_date(y, p.m, 1) + interval '1 year')::date > (s.t0 AT TIME ZONE 'Europe/Berlin')::date
), base AS (
    SELECT a.n, a.name, y.pool, y.unit, y.first_day, y.next_first,
           (SELECT sum(u.amount) FROM used u WHERE u.account = a.name AND u.pool = y.pool AND u.unit = y.unit
              AND u.day >= y.first_day AND u.day < y.next_first) / pg_temp.covered(y.first_day, y.next_first)
           * (0.6 + 0.9 * bench.u(a.n * 10000 + extract(year FROM y.first_day)::integer * 10 + length(y.unit), 41)) AS x
    FROM bench.acct a JOIN years y ON y.centre = a.centre
)
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until, note)
SELECT b.name, e.kind, round(e.amount), b.unit, b.pool, b.first_day, b.next_first - 1, e.note
FROM base b
CROSS JOIN LATERAL (VALUES
    ('grant', b.x, 'resource allocation competition'),
    ('supplement', CASE WHEN bench.u(b.n * 10000 + extract(year FROM b.first_day)::integer * 10 + length(b.unit), 42) < 0.1
                        THEN 0.2 * b.x END, 'supplement')
) AS e(kind, amount, note)
WHERE e.amount >= 1;

ANALYZE;
