-- make bench: the hand-written references of the reports — what an administrator would write
-- in plain SQL for the same rows: one set-based pass over the ledger, no per-account function
-- calls, plain sum() where the extension uses its aggregates. Each returns the same columns as
-- the view it is measured against, and `make bench` checks that both return the same rows.
SET client_min_messages = warning;

-- ---- aggregates: the rules written as SQL over bench.agg_rows (correctness only) ---------

-- A day boundary in months under the half_month convention: month index + the elapsed days
-- of the month rounded to the nearest half month, ties upward (rules §2).
CREATE FUNCTION bench.half_months(d date, elapsed_days integer) RETURNS float8
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN (extract(year FROM d) * 12 + extract(month FROM d) - 1)::float8
           + floor((4 * elapsed_days + extract(day FROM date_trunc('month', d) + interval '1 month - 1 day'))::float8
                   / (2 * extract(day FROM date_trunc('month', d) + interval '1 month - 1 day'))::float8) / 2;

-- 2^-x as the core computes it, 0 where PostgreSQL's power() would raise an underflow.
CREATE FUNCTION bench.exp2neg(x float8) RETURNS float8
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN x > 1074 THEN 0 ELSE power(2::float8, -x) END;

CREATE FUNCTION bench.tc_row(f date, u date, amount float8, at date) RETURNS float8
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE
        WHEN at < f THEN 0
        WHEN NOT (at < u) THEN amount
        ELSE amount * ((bench.half_months(at, extract(day FROM at)::integer) - bench.half_months(f, extract(day FROM f)::integer - 1))
                       / (bench.half_months(u, extract(day FROM u)::integer) - bench.half_months(f, extract(day FROM f)::integer - 1)))
    END;
CREATE FUNCTION bench.tmc_row(f date, u date, amount float8, at date) RETURNS float8
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE
        WHEN at < f OR u < at THEN 0
        ELSE amount / (bench.half_months(u, extract(day FROM u)::integer) - bench.half_months(f, extract(day FROM f)::integer - 1))
    END;

-- window_quota's figures from the per-month sums of a group (rules §3).
CREATE FUNCTION bench.quota_figures(a_prev float8, a_cur float8, a_next float8, c_prev float8, c_cur float8,
                                    total_a float8, total_c float8,
                                    OUT monthly float8, OUT remaining_prev float8, OUT consumed_current float8,
                                    OUT consumable_pct float8, OUT consumable float8, OUT state text)
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
        SELECT a_cur, a_prev - c_prev, c_cur,
               CASE WHEN a_cur > 0 THEN
                   CASE WHEN (a_prev + a_cur - c_prev - c_cur) * 100 / a_cur < -100 THEN -101
                        ELSE (a_prev + a_cur - c_prev - c_cur) * 100 / a_cur END END,
               a_prev + a_cur + a_next - c_prev - c_cur,
               CASE WHEN c_cur > 6 * a_cur OR total_c > 2 * total_a THEN 'blocked'
                    WHEN a_prev + a_cur + a_next - c_prev - c_cur > 0 THEN 'normal'
                    ELSE 'low_priority' END
    $$;

-- ---- reports -----------------------------------------------------------------------------

-- regulation_report: per account, machine and month, the figures at the 15th. Consumption in
-- one pass: every charge split into half months (1st-15th, 16th-end, site time zone), then
-- summed from 1 January to the 16th 00:00 of each report month.
CREATE VIEW bench.regulation_report_hand AS
WITH cfg AS MATERIALIZED (
    SELECT hpcacct.site_timezone() AS tz, hpcacct.site_today() AS today
), ev AS MATERIALIZED (
    SELECT l.entry_id, l.account, l.pool AS machine, l.kind, l.amount, l.valid_from, l.valid_until
    FROM hpcacct.ledger l
    WHERE l.kind IN ('grant', 'supplement', 'retraction') AND l.pool IS NOT NULL
), rm AS MATERIALIZED (
    SELECT am.account, am.machine, m::date AS month, m::date + 14 AS as_of,
           make_date(extract(year FROM m)::integer, 1, 1) AS year_start,
           s.monthly_threshold, s.month_convention AS conv
    FROM (SELECT e.account, e.machine, min(e.valid_from) AS first_day, max(e.valid_until) AS last_day
          FROM ev e GROUP BY e.account, e.machine) am
    JOIN hpcacct.regulation_machine s ON s.machine = am.machine
    CROSS JOIN cfg
    CROSS JOIN LATERAL generate_series(date_trunc('month', am.first_day::timestamp),
                                       date_trunc('month', am.last_day::timestamp), interval '1 month') AS m
    WHERE m::date + 14 <= cfg.today
), st AS (
    SELECT rm.account, rm.machine, rm.month, rm.as_of, rm.monthly_threshold,
           coalesce(sum(e.amount), 0) AS alloc,
           coalesce(sum(e.amount) FILTER (WHERE e.kind <> 'retraction'), 0) AS granted,
           coalesce(hpcacct.tmc(e.valid_from, e.valid_until, e.amount::float8, rm.as_of, rm.conv)
                        FILTER (WHERE e.account IS NOT NULL), 0) AS tmc,
           coalesce(hpcacct.tc(e.valid_from, e.valid_until, e.amount::float8, rm.as_of, rm.conv)
                        FILTER (WHERE e.account IS NOT NULL)
                    - hpcacct.tc(e.valid_from, e.valid_until, e.amount::float8, rm.year_start - 1, rm.conv)
                        FILTER (WHERE e.account IS NOT NULL), 0) AS tc
    FROM rm
    LEFT JOIN ev e ON e.account = rm.account AND e.machine = rm.machine
                  AND e.valid_from <= rm.as_of AND e.valid_until >= rm.year_start
                  -- on a run's day, the figures it decided on: without its own retraction
                  AND e.entry_id NOT IN (SELECT g.entry_id FROM hpcacct.regulation_log g
                                         WHERE g.entry_id IS NOT NULL AND g.run_date = rm.as_of)
    GROUP BY rm.account, rm.machine, rm.month, rm.as_of, rm.monthly_threshold
), half AS (  -- charges per account, machine and half month (its first day, local)
    SELECT l.account, coalesce(r.pool, r.cluster) AS machine, h.first_day,
           sum(l.amount * hpcacct.period_share(l.job_start, l.job_end, h.first_day::timestamp AT TIME ZONE cfg.tz,
                                                h.next_day::timestamp AT TIME ZONE cfg.tz)) AS amount
    FROM hpcacct.ledger l
    JOIN hpcacct.resource r USING (resource_id)
    CROSS JOIN cfg
    CROSS JOIN LATERAL (
        SELECT make_date(k / 24, k / 2 % 12 + 1, CASE WHEN k % 2 = 0 THEN 1 ELSE 16 END) AS first_day,
               make_date((k + 1) / 24, (k + 1) / 2 % 12 + 1, CASE WHEN (k + 1) % 2 = 0 THEN 1 ELSE 16 END) AS next_day
        FROM generate_series(
            ((extract(year FROM l.job_start AT TIME ZONE cfg.tz) * 12 + extract(month FROM l.job_start AT TIME ZONE cfg.tz) - 1) * 2
             + CASE WHEN extract(day FROM l.job_start AT TIME ZONE cfg.tz) >= 16 THEN 1 ELSE 0 END)::integer,
            ((extract(year FROM l.job_end AT TIME ZONE cfg.tz) * 12 + extract(month FROM l.job_end AT TIME ZONE cfg.tz) - 1) * 2
             + CASE WHEN extract(day FROM l.job_end AT TIME ZONE cfg.tz) >= 16 THEN 1 ELSE 0 END)::integer) AS k
    ) h
    WHERE l.kind = 'charge'
      AND coalesce(r.pool, r.cluster) IN (SELECT s.machine FROM hpcacct.regulation_machine s)
      AND (h.first_day::timestamp AT TIME ZONE cfg.tz < l.job_end OR l.job_end = l.job_start)
    GROUP BY 1, 2, 3
), used AS (
    SELECT rm.account, rm.machine, rm.month, coalesce(sum(h.amount), 0)::float8 AS consumption
    FROM rm
    LEFT JOIN half h ON h.account = rm.account AND h.machine = rm.machine
                    AND h.first_day >= rm.year_start AND h.first_day <= rm.as_of
    GROUP BY rm.account, rm.machine, rm.month
), figures AS (  -- st and used side by side, merged by grouping rather than a three-key join
    SELECT x.account, x.machine, x.month, max(x.as_of) AS as_of, max(x.monthly_threshold) AS monthly_threshold,
           sum(x.alloc) AS alloc, sum(x.granted) AS granted, sum(x.tmc) AS tmc, sum(x.tc) AS tc,
           sum(x.consumption) AS consumption
    FROM (SELECT st.account, st.machine, st.month, st.as_of, st.monthly_threshold, st.alloc, st.granted, st.tmc, st.tc,
                 NULL::float8 AS consumption
          FROM st
          UNION ALL
          SELECT u.account, u.machine, u.month, NULL, NULL, NULL, NULL, NULL, NULL, u.consumption FROM used u) x
    GROUP BY x.account, x.machine, x.month
)
SELECT f.account, f.machine, f.month, f.as_of,
       CASE WHEN f.granted >= f.monthly_threshold THEN 'monthly' ELSE 'annual' END AS regulation,
       f.alloc, f.tmc, f.tc, f.consumption, f.consumption - f.tc AS delta,
       CASE WHEN f.granted >= f.monthly_threshold THEN
           CASE WHEN NOT (f.tmc > 0) OR f.consumption - f.tc > -f.tmc THEN 'ok'
                WHEN f.consumption - f.tc > -2 * f.tmc THEN 'warning'
                ELSE 'retraction' END
       END AS status,
       g.outcome AS logged_outcome, g.retracted
FROM figures f
LEFT JOIN hpcacct.regulation_log g
  ON g.account = f.account AND g.machine = f.machine AND g.run_date = f.as_of AND g.run = 'monthly';

-- window_quota_usage (r_wlm_usage -q for every account): the period shown, its months'
-- allowances and charges (one pass over the accounts' charges), the rule in SQL.
CREATE VIEW bench.window_quota_usage_hand AS
WITH cfg AS MATERIALIZED (
    SELECT hpcacct.site_timezone() AS tz, hpcacct.site_today() AS today,
           date_trunc('month', hpcacct.site_today())::date AS this_month
), per AS MATERIALIZED (
    SELECT DISTINCT ON (p.account) p.account, p.period_start, p.period_end, p.cluster, p.unit
    FROM hpcacct.quota_period p CROSS JOIN cfg
    ORDER BY p.account,
             CASE WHEN cfg.today BETWEEN p.period_start AND p.period_end THEN 0
                  WHEN p.period_end < cfg.today THEN 1 ELSE 2 END,
             CASE WHEN p.period_end < cfg.today THEN cfg.today - p.period_end ELSE p.period_start - cfg.today END
), used AS (
    SELECT p.account, m.month::date AS month,
           sum(l.amount * hpcacct.period_share(l.job_start, l.job_end, m.month AT TIME ZONE cfg.tz,
                                                (m.month + interval '1 month') AT TIME ZONE cfg.tz)) AS amount
    FROM per p
    CROSS JOIN cfg
    JOIN hpcacct.ledger l
      ON l.account = p.account AND l.kind = 'charge' AND l.unit = p.unit
     AND l.job_end >= p.period_start::timestamp AT TIME ZONE cfg.tz
     AND l.job_start < (p.period_end + 1)::timestamp AT TIME ZONE cfg.tz
    JOIN hpcacct.resource r ON r.resource_id = l.resource_id AND (p.cluster IS NULL OR r.cluster = p.cluster)
    CROSS JOIN LATERAL generate_series(date_trunc('month', l.job_start AT TIME ZONE cfg.tz),
                                       date_trunc('month', l.job_end AT TIME ZONE cfg.tz), interval '1 month') AS m(month)
    WHERE (m.month < l.job_end AT TIME ZONE cfg.tz OR l.job_end = l.job_start)
      AND m.month >= p.period_start AND m.month <= p.period_end AND m.month <= cfg.today
    GROUP BY p.account, m.month
), months AS (
    SELECT p.account, m::date AS month, coalesce(a.allowance, 0) AS a, coalesce(u.amount, 0)::float8 AS c
    FROM per p
    CROSS JOIN LATERAL generate_series(p.period_start::timestamp, p.period_end::timestamp, interval '1 month') AS m
    LEFT JOIN hpcacct.monthly_allowance a ON a.account = p.account AND a.month = m::date
    LEFT JOIN used u ON u.account = p.account AND u.month = m::date
), sums AS (
    SELECT m.account,
           bool_or(m.month = cfg.this_month) AS inside,
           coalesce(sum(m.a) FILTER (WHERE m.month = cfg.this_month - interval '1 month'), 0) AS a_prev,
           coalesce(sum(m.a) FILTER (WHERE m.month = cfg.this_month), 0) AS a_cur,
           coalesce(sum(m.a) FILTER (WHERE m.month = cfg.this_month + interval '1 month'), 0) AS a_next,
           coalesce(sum(m.c) FILTER (WHERE m.month = cfg.this_month - interval '1 month'), 0) AS c_prev,
           coalesce(sum(m.c) FILTER (WHERE m.month = cfg.this_month), 0) AS c_cur,
           sum(m.a) AS total_a, sum(m.c) AS total_c
    FROM months m CROSS JOIN cfg
    GROUP BY m.account
)
SELECT p.account, p.period_start, p.period_end, cfg.this_month AS month, f.state, f.monthly, f.remaining_prev,
       f.consumed_current, f.consumable_pct, f.consumable, p.cluster, p.unit
FROM per p
JOIN sums s USING (account)
CROSS JOIN cfg
CROSS JOIN LATERAL bench.quota_figures(
    CASE WHEN s.inside THEN s.a_prev ELSE 0 END, CASE WHEN s.inside THEN s.a_cur ELSE 0 END,
    CASE WHEN s.inside THEN s.a_next ELSE 0 END, CASE WHEN s.inside THEN s.c_prev ELSE 0 END,
    CASE WHEN s.inside THEN s.c_cur ELSE 0 END, s.total_a,
    CASE WHEN s.inside THEN s.total_c ELSE 0 END) f;  -- no blocking outside the period

-- quarter_balances: bank entries per account and quarter with sum() ... FILTER.
CREATE VIEW bench.quarter_balances_hand AS
WITH cfg AS MATERIALIZED (
    SELECT hpcacct.site_timezone() AS tz, hpcacct.setting_value('bank_unit') AS unit
), e AS (
    SELECT l.account, l.kind, date_trunc('quarter', l.valid_from::timestamp)::date AS quarter, l.amount
    FROM hpcacct.ledger l, cfg
    WHERE l.kind IN ('deposit', 'transfer', 'refund') AND l.unit = cfg.unit
    UNION ALL
    SELECT l.account, 'charge', q.quarter::date,
           l.amount * hpcacct.period_share(l.job_start, l.job_end, q.quarter AT TIME ZONE cfg.tz,
                                           (q.quarter + interval '3 months') AT TIME ZONE cfg.tz)
    FROM hpcacct.ledger l
    CROSS JOIN cfg
    CROSS JOIN LATERAL generate_series(date_trunc('quarter', l.job_start AT TIME ZONE cfg.tz),
                                       date_trunc('quarter', l.job_end AT TIME ZONE cfg.tz),
                                       interval '3 months') AS q(quarter)
    WHERE l.kind = 'charge' AND l.unit = cfg.unit
      AND (q.quarter < l.job_end AT TIME ZONE cfg.tz OR l.job_end = l.job_start)
), pq AS (
    SELECT e.account, e.quarter,
           round(coalesce(sum(e.amount) FILTER (WHERE e.kind = 'deposit'), 0), 6)::float8 AS deposits,
           round(coalesce(sum(e.amount) FILTER (WHERE e.kind = 'charge'), 0), 6)::float8 AS charges,
           round(coalesce(sum(e.amount) FILTER (WHERE e.kind = 'transfer'), 0), 6)::float8 AS transfers,
           round(coalesce(sum(e.amount) FILTER (WHERE e.kind = 'refund'), 0), 6)::float8 AS refunds,
           round(coalesce(sum(e.amount) FILTER (WHERE e.kind <> 'charge'), 0)
                 - coalesce(sum(e.amount) FILTER (WHERE e.kind = 'charge'), 0), 6)::float8 AS balance
    FROM e
    GROUP BY e.account, e.quarter
)
SELECT p.account, a.kind AS account_kind, p.quarter, p.deposits, p.charges, p.transfers, p.refunds, p.balance,
       CASE WHEN a.deleted_in IS NOT NULL AND a.deleted_in <= p.quarter THEN 'deleted'
            WHEN bool_or(p.deposits + p.transfers > 0)
                     OVER (PARTITION BY p.account ORDER BY p.quarter DESC ROWS UNBOUNDED PRECEDING) THEN 'active'
            ELSE 'expired' END AS state
FROM pq p
JOIN hpcacct.account a ON a.name = p.account;

-- ---- usage reports and fair share (allocation years per pool, at now()) -----------------

-- A pool's allocation year containing `at`, as hpcacct.allocation_year computes it, inlinable
-- (the site time zone and the default first month are passed in, looked up once per query).
CREATE FUNCTION bench.pool_year(pool text, at timestamptz, tz text, default_month integer)
    RETURNS TABLE (year integer, first_day date, last_day date, starts timestamptz, ends timestamptz,
                   upto timestamptz, elapsed interval, length interval, state text)
    LANGUAGE sql STABLE
    AS $$
        SELECT y.year, y.first_day, (y.first_day + interval '1 year')::date - 1, y.starts, y.ends,
               greatest(y.starts, least(at, y.ends)), greatest(y.starts, least(at, y.ends)) - y.starts,
               y.ends - y.starts,
               CASE WHEN at >= y.ends THEN 'past' WHEN at < y.starts THEN 'future' ELSE 'current' END
        FROM (SELECT d.year, d.first_day, d.first_day::timestamp AT TIME ZONE tz AS starts,
                     (d.first_day + interval '1 year') AT TIME ZONE tz AS ends
              FROM (SELECT c.year, make_date(c.year, c.m, 1) AS first_day
                    FROM (SELECT b.m, extract(year FROM b.today)::integer
                                      - CASE WHEN extract(month FROM b.today) < b.m THEN 1 ELSE 0 END AS year
                          FROM (SELECT coalesce((SELECT p.year_start_month FROM hpcacct.pool p WHERE p.name = pool),
                                                default_month) AS m,
                                       (at AT TIME ZONE tz)::date AS today) b) c) d) y
    $$;

-- Each pool's current allocation year is computed once (a materialized CTE), not per row.
CREATE VIEW bench.year_charges_hand AS
WITH s AS MATERIALIZED (
    SELECT hpcacct.site_timezone() AS tz, hpcacct.setting_value('year_start_month')::integer AS m
), years AS MATERIALIZED (
    SELECT p.pool, y.*
    FROM (SELECT DISTINCT coalesce(r.pool, r.cluster) AS pool FROM hpcacct.resource r) p
    CROSS JOIN s
    CROSS JOIN LATERAL bench.pool_year(p.pool, now(), s.tz, s.m) y
)
SELECT y.pool, l.unit, r.cluster, r.partition, l.account, l.submitter, r.rate, l.job_start, l.job_end,
       l.amount AS charged, l.amount * hpcacct.period_share(l.job_start, l.job_end, y.starts, y.upto) AS amount,
       y.year, y.first_day, y.last_day, y.starts, y.upto, y.elapsed, y.length, y.state
FROM hpcacct.ledger l
JOIN hpcacct.resource r USING (resource_id)
JOIN years y ON y.pool = coalesce(r.pool, r.cluster)
WHERE l.kind = 'charge' AND l.job_end <= now()
  AND l.job_end > y.starts AND l.job_start < y.upto AND l.job_end > l.job_start;

CREATE VIEW bench.usage_by_resource_hand AS
SELECT u.pool, u.unit, u.cluster, u.partition, u.year, u.first_day, u.last_day,
       round(u.hours, 6) AS equivalent_hours, round(u.usage, 6) AS usage, round(u.usage / h.hours, 6) AS usage_years,
       round(u.projected, 6) AS projected_usage, round(u.projected / h.hours, 6) AS projected_years
FROM (
    SELECT c.pool, c.unit, c.cluster, c.partition, c.year, c.first_day, c.last_day,
           sum(c.amount / nullif(c.rate, 0)::numeric) AS hours, sum(c.amount) AS usage,
           CASE WHEN c.state = 'current' AND c.elapsed > interval '0'
                THEN sum(c.amount) * date_part('epoch', c.length)::numeric / date_part('epoch', c.elapsed)::numeric
           END AS projected
    FROM bench.year_charges_hand c
    GROUP BY c.pool, c.unit, c.cluster, c.partition, c.year, c.first_day, c.last_day, c.state, c.elapsed, c.length
    HAVING sum(c.amount) <> 0
) u
CROSS JOIN (SELECT (SELECT hpcacct.setting_value('hours_per_year'))::numeric AS hours) h;  -- once per query

CREATE VIEW bench.usage_by_account_hand AS
WITH s AS MATERIALIZED (
    SELECT hpcacct.site_timezone() AS tz, hpcacct.setting_value('year_start_month')::integer AS m
), years AS MATERIALIZED (
    SELECT p.pool, y.*
    FROM (SELECT coalesce(r.pool, r.cluster) AS pool FROM hpcacct.resource r
          UNION
          SELECT l.pool FROM hpcacct.ledger l WHERE l.kind <> 'charge' AND l.pool IS NOT NULL) p
    CROSS JOIN s
    CROSS JOIN LATERAL bench.pool_year(p.pool, now(), s.tz, s.m) y
), used AS (
    SELECT c.pool, c.unit, c.account, sum(c.amount) AS usage
    FROM bench.year_charges_hand c
    GROUP BY c.pool, c.unit, c.account
), pooled AS (
    -- an allocation row without a pool (the bank's) counts in every pool charged in its unit
    SELECT l.pool, l.unit, l.account, l.amount, l.valid_from, l.valid_until
    FROM hpcacct.ledger l WHERE l.kind <> 'charge' AND l.pool IS NOT NULL
    UNION ALL
    SELECT p.pool, l.unit, l.account, l.amount, l.valid_from, l.valid_until
    FROM hpcacct.ledger l
    JOIN (SELECT DISTINCT r.unit, coalesce(r.pool, r.cluster) AS pool FROM hpcacct.resource r) p ON p.unit = l.unit
    WHERE l.kind <> 'charge' AND l.pool IS NULL
), alloc AS (
    SELECT l.pool, l.unit, l.account,
           sum(l.amount * greatest(0, least(l.valid_until, y.last_day) + 1 - greatest(l.valid_from, y.first_day))
               / (l.valid_until + 1 - l.valid_from)) AS allocation
    FROM pooled l
    JOIN years y ON y.pool = l.pool
    WHERE l.valid_from <= y.last_day AND l.valid_until >= y.first_day
    GROUP BY l.pool, l.unit, l.account
), acct AS (
    SELECT coalesce(a.pool, u.pool) AS pool, coalesce(a.unit, u.unit) AS unit, coalesce(a.account, u.account) AS account,
           coalesce(a.allocation, 0) AS allocation, coalesce(u.usage, 0) AS usage
    FROM alloc a
    FULL JOIN used u ON u.pool = a.pool AND u.unit = a.unit AND u.account = a.account
    WHERE a.pool IS NOT NULL OR u.usage <> 0
)
SELECT r.pool, r.unit, r.account, y.year, y.first_day, y.last_day,
       round(r.allocation, 6) AS allocation, round(r.allocation / h.hours, 6) AS allocation_years,
       round(r.usage, 6) AS usage, round(r.usage / h.hours, 6) AS usage_years,
       CASE WHEN r.allocation > 0 THEN round(r.usage * 100 / r.allocation, 2) END AS utilization_pct,
       round(p.projected, 6) AS projected_usage, round(p.projected / h.hours, 6) AS projected_years,
       CASE WHEN r.allocation > 0 THEN round(p.projected * 100 / r.allocation, 2) END AS projected_utilization_pct,
       round(greatest(r.usage - greatest(r.allocation, 0), 0), 6) AS overuse
FROM acct r
JOIN years y ON y.pool = r.pool
CROSS JOIN LATERAL (
    SELECT CASE WHEN y.state = 'current' AND y.elapsed > interval '0'
                THEN r.usage * date_part('epoch', y.length)::numeric / date_part('epoch', y.elapsed)::numeric END AS projected
) p
CROSS JOIN (SELECT (SELECT hpcacct.setting_value('hours_per_year'))::numeric AS hours) h;  -- once per query

CREATE VIEW bench.usage_by_submitter_hand AS
SELECT u.pool, u.unit, u.account, u.submitter, u.year, u.first_day, u.last_day,
       round(u.usage, 6) AS usage, round(u.usage / h.hours, 6) AS usage_years,
       round(u.usage * 100 / nullif(sum(u.usage) OVER (PARTITION BY u.pool, u.unit, u.account), 0), 2) AS account_pct,
       round(u.projected, 6) AS projected_usage, round(u.projected / h.hours, 6) AS projected_years
FROM (
    SELECT c.pool, c.unit, c.account, c.submitter, c.year, c.first_day, c.last_day, sum(c.amount) AS usage,
           CASE WHEN c.state = 'current' AND c.elapsed > interval '0'
                THEN sum(c.amount) * date_part('epoch', c.length)::numeric / date_part('epoch', c.elapsed)::numeric
           END AS projected
    FROM bench.year_charges_hand c
    GROUP BY c.pool, c.unit, c.account, c.submitter, c.year, c.first_day, c.last_day, c.state, c.elapsed, c.length
    HAVING sum(c.amount) <> 0
) u
CROSS JOIN (SELECT (SELECT hpcacct.setting_value('hours_per_year'))::numeric AS hours) h;  -- once per query

CREATE VIEW bench.usage_by_month_hand AS
SELECT m.pool, m.unit, m.cluster, m.partition, m.account, m.submitter, m.year, m.month,
       round(m.usage, 6) AS usage, round(m.usage / h.hours, 6) AS usage_years
FROM (
    SELECT c.pool, c.unit, c.cluster, c.partition, c.account, c.submitter, c.year, g.month,
           sum(c.charged * hpcacct.period_share(c.job_start, c.job_end, greatest(c.starts, g.month_start),
                                                least(c.upto, g.month_end))) AS usage
    FROM bench.year_charges_hand c
    CROSS JOIN (SELECT (SELECT hpcacct.site_timezone()) AS tz) z  -- an initplan: once per query
    CROSS JOIN LATERAL (
        SELECT (c.first_day + i * interval '1 month')::date AS month,
               (c.first_day + i * interval '1 month') AT TIME ZONE z.tz AS month_start,
               (c.first_day + (i + 1) * interval '1 month') AT TIME ZONE z.tz AS month_end
        FROM generate_series(0, 11) AS i
    ) g
    WHERE g.month_start < least(c.job_end, c.upto) AND g.month_end > greatest(c.job_start, c.starts)
    GROUP BY c.pool, c.unit, c.cluster, c.partition, c.account, c.submitter, c.year, g.month
    HAVING sum(c.charged * hpcacct.period_share(c.job_start, c.job_end, greatest(c.starts, g.month_start),
                                                 least(c.upto, g.month_end))) <> 0
) m
CROSS JOIN (SELECT (SELECT hpcacct.setting_value('hours_per_year'))::numeric AS hours) h;  -- once per query

-- fairshare(): decayed usage summed row by row (a reversal carries its charge's end, so the
-- two cancel) instead of grouping the ledger by job first; weights and factor in SQL.
CREATE VIEW bench.fairshare_hand AS
WITH cfg AS MATERIALIZED (
    SELECT now() AS at,
           (now() AT TIME ZONE hpcacct.site_timezone())::date AS day,
           hpcacct.setting_value('decay') AS form,
           hpcacct.setting_value('half_life')::interval AS half_life,
           hpcacct.setting_value('period')::interval AS period,
           hpcacct.setting_value('period_decay')::float8 AS decay,
           hpcacct.setting_value('depth')::integer AS depth,
           hpcacct.setting_value('exhausted_factor')::float8 AS penalty
), alloc AS (
    SELECT p.pool, p.unit, p.account, greatest(sum(p.amount), 0) AS allocation
    FROM (SELECT l.pool, l.unit, l.account, l.amount
          FROM hpcacct.ledger l, cfg
          WHERE l.kind <> 'charge' AND l.pool IS NOT NULL AND cfg.day BETWEEN l.valid_from AND l.valid_until
          UNION ALL  -- the bank's rows, without a pool: every pool charged in their unit
          SELECT u.pool, l.unit, l.account, l.amount
          FROM hpcacct.ledger l
          CROSS JOIN cfg
          JOIN (SELECT DISTINCT r.unit, coalesce(r.pool, r.cluster) AS pool FROM hpcacct.resource r) u ON u.unit = l.unit
          WHERE l.kind <> 'charge' AND l.pool IS NULL AND cfg.day BETWEEN l.valid_from AND l.valid_until) p
    GROUP BY p.pool, p.unit, p.account
), decayed AS (
    SELECT coalesce(r.pool, r.cluster) AS pool, l.unit, l.account, l.submitter,
           sum(l.amount::float8 * CASE WHEN cfg.form = 'half_life'
                   THEN bench.exp2neg((extract(epoch FROM cfg.at - l.job_end) / extract(epoch FROM cfg.half_life))::float8)
                   ELSE power(cfg.decay, floor(extract(epoch FROM cfg.at - l.job_end) / extract(epoch FROM cfg.period))::float8)
               END) AS usage,
           sum(l.amount) AS net
    FROM hpcacct.ledger l
    JOIN hpcacct.resource r USING (resource_id)
    CROSS JOIN cfg
    WHERE l.kind = 'charge' AND l.job_end <= cfg.at
      AND (cfg.form = 'half_life' OR l.job_end > cfg.at - cfg.depth * cfg.period)
    GROUP BY 1, 2, 3, 4
), account_usage AS (
    SELECT d.pool, d.unit, d.account, sum(d.usage) FILTER (WHERE d.net > 0) AS usage
    FROM decayed d
    GROUP BY 1, 2, 3
    HAVING sum(d.net) > 0
), accounts AS (
    SELECT coalesce(a.pool, u.pool) AS pool, coalesce(a.unit, u.unit) AS unit, coalesce(a.account, u.account) AS account,
           coalesce(a.allocation, 0) AS allocation, coalesce(u.usage, 0) AS usage
    FROM alloc a
    FULL JOIN account_usage u ON u.pool = a.pool AND u.unit = a.unit AND u.account = a.account
    WHERE coalesce(a.allocation, 0) > 0 OR coalesce(u.usage, 0) > 0
), shares AS (
    SELECT a.pool, a.unit, a.account, a.allocation, a.usage,
           CASE WHEN sum(a.allocation) OVER w > 0 THEN (a.allocation / sum(a.allocation) OVER w)::float8 ELSE 0 END AS share,
           CASE WHEN sum(a.usage) OVER w > 0 THEN a.usage / sum(a.usage) OVER w ELSE 0 END AS norm_usage,
           sum(a.usage) OVER w AS pool_usage,
           y.usage AS year_usage,
           coalesce(y.allocation > 0 AND y.usage >= y.allocation, false) AS exhausted
    FROM accounts a
    LEFT JOIN bench.usage_by_account_hand y ON y.pool = a.pool AND y.unit = a.unit AND y.account = a.account
    WINDOW w AS (PARTITION BY a.pool, a.unit)
), members AS (
    SELECT s.pool, s.unit, s.account, m.submitter, coalesce(d.usage, 0) AS usage,
           coalesce(f.shares, 1) AS shares,
           sum(coalesce(f.shares, 1)) OVER (PARTITION BY s.pool, s.unit, s.account) AS account_shares,
           s.share AS account_share, s.pool_usage, s.exhausted
    FROM shares s
    JOIN (SELECT d.pool, d.unit, d.account, d.submitter FROM decayed d WHERE d.net > 0
          UNION
          SELECT s2.pool, s2.unit, s2.account, f2.submitter
          FROM shares s2 JOIN hpcacct.fairshare_user f2 ON f2.account = s2.account) m
      ON m.pool = s.pool AND m.unit = s.unit AND m.account = s.account
    LEFT JOIN decayed d
      ON d.pool = s.pool AND d.unit = s.unit AND d.account = s.account AND d.submitter = m.submitter AND d.net > 0
    LEFT JOIN hpcacct.fairshare_user f ON f.account = s.account AND f.submitter = m.submitter
), users AS (
    SELECT m.pool, m.unit, m.account, m.submitter, m.usage, m.exhausted,
           CASE WHEN m.account_shares > 0 THEN m.account_share * m.shares / m.account_shares ELSE 0 END AS share,
           CASE WHEN m.pool_usage > 0 THEN m.usage / m.pool_usage ELSE 0 END AS norm_usage
    FROM members m
)
SELECT s.pool, s.unit, s.account, NULL::text AS submitter, s.allocation, s.share, s.usage, s.norm_usage,
       s.year_usage, s.exhausted,
       CASE WHEN s.share > 0 THEN bench.exp2neg(s.norm_usage / s.share) ELSE 0 END
       * CASE WHEN s.exhausted THEN cfg.penalty ELSE 1 END AS factor
FROM shares s CROSS JOIN cfg
UNION ALL
SELECT u.pool, u.unit, u.account, u.submitter, NULL, u.share, u.usage, u.norm_usage, NULL, u.exhausted,
       CASE WHEN u.share > 0 THEN bench.exp2neg(u.norm_usage / u.share) ELSE 0 END
       * CASE WHEN u.exhausted THEN cfg.penalty ELSE 1 END
FROM users u CROSS JOIN cfg;

-- ---- check_submit ------------------------------------------------------------------------

-- Calls to make: every HLRN user with their default, with a project they are a member of, with
-- a project they may not be, plus unknown users and accounts.
CREATE TABLE bench.submit_sample AS
SELECT (row_number() OVER (ORDER BY x.username, x.account NULLS FIRST, x.o))::integer AS i, x.username, x.account,
       s.anchor AS at
FROM (SELECT a.name AS username, NULL::text AS account, 1 AS o FROM bench.acct a WHERE a.centre = 'hlrnp'
      UNION ALL
      SELECT m.username, m.project, 2 FROM bench.member m WHERE m.j <= 1
      UNION ALL
      SELECT a.name, 'nip' || lpad(((a.k * 37) % 200 + 1)::text, 4, '0'), 3 FROM bench.acct a WHERE a.centre = 'hlrnp'
      UNION ALL
      SELECT 'nobody' || i, NULL, 4 FROM generate_series(1, 20) AS i
      UNION ALL
      SELECT 'hbk' || lpad(i::text, 4, '0'), 'nosuch' || i, 5 FROM generate_series(1, 20) AS i) x
CROSS JOIN bench.site s;
ALTER TABLE bench.submit_sample ADD PRIMARY KEY (i);

-- The same decision in one statement (inlined into the caller's plan): the account is
-- resolved once (a materialized CTE), then state, membership and balance are subqueries that
-- run only as far as the CASE needs them.
CREATE FUNCTION bench.submit_decision_hand(user_name text, account_name text, at date)
    RETURNS TABLE (ok boolean, account text, reason text, message text)
    LANGUAGE sql STABLE
    AS $$
        WITH c AS MATERIALIZED (
            SELECT coalesce($2, (SELECT coalesce(h.default_account, h.username) FROM hpcacct.hpc_user h
                                 WHERE h.username = $1)) AS chosen,
                   t.unit, date_trunc('quarter', $3::timestamp)::date AS q,
                   date_trunc('quarter', $3::timestamp) AT TIME ZONE t.tz AS starts,
                   (date_trunc('quarter', $3::timestamp) + interval '3 months') AT TIME ZONE t.tz AS ends
            FROM (SELECT coalesce((SELECT s.value FROM hpcacct.setting s WHERE s.name = 'bank_unit'),
                                  hpcacct.setting_value('bank_unit')) AS unit,
                         coalesce((SELECT s.value FROM hpcacct.setting s WHERE s.name = 'timezone'),
                                  hpcacct.site_timezone()) AS tz) t
        ), b AS MATERIALIZED (  -- computed only when the CASE below reaches it
            SELECT round(coalesce((SELECT sum(l.amount) FROM hpcacct.ledger l
                                   WHERE l.account = c.chosen AND l.kind IN ('deposit', 'transfer', 'refund')
                                     AND l.unit = c.unit AND l.valid_from >= c.q
                                     AND l.valid_from < c.q + interval '3 months'), 0)
                         - coalesce((SELECT sum(l.amount * hpcacct.period_share(l.job_start, l.job_end, c.starts, c.ends))
                                     FROM hpcacct.ledger l
                                     WHERE l.account = c.chosen AND l.kind = 'charge' AND l.unit = c.unit
                                       AND l.job_end >= c.starts AND l.job_start < c.ends), 0), 6) AS balance
            FROM c
        ), x AS MATERIALIZED (
            SELECT c.*, n.next_q,
                   CASE WHEN c.chosen IS NULL THEN 'unknown_user'
                        WHEN a.name IS NULL AND $2 IS NULL THEN 'no_default_project'
                        WHEN a.name IS NULL THEN 'unknown_account'
                        WHEN a.deleted_in IS NOT NULL AND a.deleted_in <= $3 THEN 'account_deleted'
                        WHEN NOT EXISTS (SELECT 1 FROM hpcacct.membership m WHERE m.account = c.chosen AND m.username = $1)
                            THEN 'no_access'
                        WHEN NOT p.bank THEN NULL
                        WHEN n.next_q IS NULL THEN 'account_expired'
                        WHEN n.next_q > c.q THEN 'account_inactive'
                        WHEN (SELECT b.balance FROM b) < 0 THEN 'negative_balance'
                   END AS bank_reason,
                   p.quota
            FROM c
            LEFT JOIN hpcacct.account a ON a.name = c.chosen
            -- the policies: the account's list, or derived (special: none; window with a quota
            -- period; bank with bank entries, for personal accounts, or when nothing else binds).
            -- The sample holds HLRN users and projects: GENCI's rule is not in this reference.
            LEFT JOIN LATERAL (
                SELECT coalesce('bank' = ANY (a.policies),
                                a.kind <> 'special'
                                AND (a.kind = 'personal'
                                     OR NOT (d.quota OR d.genci)
                                     OR EXISTS (SELECT 1 FROM hpcacct.ledger l
                                                WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer', 'refund')
                                                  AND l.unit = c.unit))) AS bank,
                       coalesce('window_quota' = ANY (a.policies), a.kind <> 'special' AND d.quota) AS quota
                FROM (SELECT EXISTS (SELECT 1 FROM hpcacct.quota_period q WHERE q.account = a.name) AS quota,
                             EXISTS (SELECT 1 FROM hpcacct.ledger l
                                     WHERE l.account = a.name AND l.kind IN ('grant', 'supplement')) AS genci) d
            ) p ON true
            LEFT JOIN LATERAL (   -- the first quarter from this one on with an allocation
                SELECT min(s.quarter) AS next_q
                FROM (SELECT date_trunc('quarter', l.valid_from::timestamp)::date AS quarter
                      FROM hpcacct.ledger l
                      WHERE l.account = c.chosen AND l.kind IN ('deposit', 'transfer') AND l.unit = c.unit
                        AND l.valid_from >= c.q
                      GROUP BY 1
                      HAVING sum(l.amount) > 0) s
            ) n ON true
        ), y AS (
            SELECT x.*,
                   coalesce(x.bank_reason,
                            CASE WHEN x.bank_reason IS NULL AND x.quota
                                      AND hpcacct.window_quota_state(x.chosen, $3) = 'blocked' THEN 'quota_blocked' END)
                       AS reason
            FROM x
        )
        SELECT y.reason IS NULL, y.chosen, y.reason,
               CASE y.reason
                   WHEN 'unknown_user' THEN format('user %s is not known to the accounting system: submit with an '
                                                   'account (sbatch -A) or ask support to register you', $1)
                   WHEN 'no_default_project' THEN format('user %s has no default project and no personal account: '
                                                         'submit with an account (sbatch -A)', $1)
                   WHEN 'unknown_account' THEN format('account %s does not exist: check the account you gave (sbatch -A)',
                                                      y.chosen)
                   WHEN 'account_deleted' THEN format('account %s has been deleted and cannot be used again', y.chosen)
                   WHEN 'no_access' THEN format('user %s is not a member of account %s: ask one of its project '
                                                'administrators to add you, or submit with another account', $1, y.chosen)
                   WHEN 'account_expired' THEN format('account %s has no allocation for this or a later quarter: ask '
                                                      'for a new allocation, or submit with another account (sbatch -A)',
                                                      y.chosen)
                   WHEN 'account_inactive' THEN format('account %s has no allocation for this quarter; its allocation '
                                                       'begins on %s: ask staff to move allocation into this quarter, '
                                                       'or submit with another account', y.chosen, y.next_q)
                   WHEN 'negative_balance' THEN format('account %s has a negative balance this quarter (%s %s): ask for '
                                                       'a transfer or a deposit, or submit with another account',
                                                       y.chosen, hpcacct_internal.ledger_figure((SELECT b.balance FROM b)), y.unit)
                   WHEN 'quota_blocked' THEN
                       (SELECT format('account %s is blocked by its sliding-window quota (%s %s used this month, '
                                      'monthly allowance %s): submit with another account', y.chosen,
                                      hpcacct_internal.notify_number(u.consumed_current::numeric), u.unit,
                                      hpcacct_internal.notify_number(u.monthly::numeric))
                        FROM hpcacct.window_quota_usage(y.chosen, $3) u)
               END
        FROM y
    $$;

-- With no account named, a default project that has expired (under the bank) or been deleted
-- is the personal account from that day on: the decision again for the personal account, and
-- without one, no_default_project.
CREATE FUNCTION bench.check_submit_hand(user_name text, account_name text, at date)
    RETURNS TABLE (ok boolean, account text, reason text, message text)
    LANGUAGE sql STABLE
    AS $$
        SELECT r.*
        FROM bench.submit_decision_hand($1, $2, $3) d
        CROSS JOIN LATERAL (SELECT coalesce($2 IS NULL AND d.reason IN ('account_expired', 'account_deleted')
                                            AND d.account <> $1, false) AS personal) f
        CROSS JOIN LATERAL (
            SELECT d.ok, d.account, d.reason, d.message WHERE NOT f.personal
            UNION ALL
            SELECT p.ok, p.account,
                   CASE WHEN p.reason = 'unknown_account' THEN 'no_default_project' ELSE p.reason END,
                   CASE WHEN p.reason = 'unknown_account'
                        THEN format('user %s has no default project and no personal account: submit with an '
                                    'account (sbatch -A)', $1)
                        ELSE p.message END
            FROM bench.submit_decision_hand($1, $1, $3) p WHERE f.personal
        ) r
    $$;

-- GENCI and RWTH projects: each project's principal investigator (a member, site.sql)
-- submitting to it, on the site's today and on the 15th of the month before, whose next day is
-- a regulation boundary (check_submit then reads the consumption rollup's exact figures). The
-- RWTH decision is window_quota_usage()'s state, which the window_quota_usage view's check
-- compares with hand-written SQL: timed only.
CREATE TABLE bench.submit_sample_project AS
SELECT a.centre, (row_number() OVER (PARTITION BY a.centre ORDER BY a.n, d.at))::integer AS i,
       'pi_' || a.name AS username, a.name AS account, d.at
FROM bench.acct a
CROSS JOIN (SELECT s.anchor FROM bench.site s
            UNION ALL
            SELECT (date_trunc('month', s.anchor) - interval '1 month')::date + 14 FROM bench.site s) AS d(at)
WHERE a.centre IN ('genci', 'rwth');
ALTER TABLE bench.submit_sample_project ADD PRIMARY KEY (centre, i);

-- GENCI's rule for a submit, job by job, for the whole GENCI sample at once (one pass over
-- the charges): an account is open while one of the machines it has a grant or supplement
-- valid on at that day has a consumption this year, up to the end of the day (site time zone),
-- below its allocation (not TMC > 0: a retraction on 15 December makes TMC negative). Each
-- charge counts by its share inside the period, summed in numeric; Alloc as allocation_status()
-- reads it.
CREATE FUNCTION bench.check_submit_genci_all()
    RETURNS TABLE (i integer, ok boolean, account text, reason text)
    LANGUAGE sql STABLE
    AS $$
        WITH s AS MATERIALIZED (
            SELECT s.i, s.account, s.at,
                   make_date(extract(year FROM s.at)::integer, 1, 1) AS year_start,
                   make_date(extract(year FROM s.at)::integer, 1, 1)::timestamp AT TIME ZONE hpcacct.site_timezone() AS b1,
                   (s.at + 1)::timestamp AT TIME ZONE hpcacct.site_timezone() AS b2
            FROM bench.submit_sample_project s WHERE s.centre = 'genci'
        ), machines AS (
            SELECT DISTINCT s.i, l.pool AS machine
            FROM s JOIN hpcacct.ledger l ON l.account = s.account
            WHERE l.kind IN ('grant', 'supplement', 'retraction') AND l.valid_from <= s.at AND l.valid_until >= s.at
        ), allocations AS (
            SELECT m.i, m.machine, sum(l.amount) AS alloc,
                   coalesce(hpcacct.tmc(l.valid_from, l.valid_until, l.amount::float8, s.at,
                                        coalesce(r.month_convention, 'half_month')), 0) AS tmc,
                   bool_or(l.kind IN ('grant', 'supplement') AND l.valid_from <= s.at AND l.valid_until >= s.at) AS granted_now
            FROM machines m JOIN s USING (i)
            JOIN hpcacct.ledger l ON l.account = s.account AND l.pool = m.machine
            LEFT JOIN hpcacct.regulation_machine r ON r.machine = m.machine
            WHERE l.kind IN ('grant', 'supplement', 'retraction') AND l.valid_from <= s.at AND l.valid_until >= s.year_start
            GROUP BY m.i, m.machine, s.at, r.month_convention
        ), used AS (
            SELECT s.i, coalesce(r.pool, r.cluster) AS machine,
                   sum(l.amount * hpcacct.period_share(l.job_start, l.job_end, s.b1, s.b2))::float8 AS consumption
            FROM hpcacct.ledger l
            JOIN hpcacct.resource r USING (resource_id)
            JOIN s ON s.account = l.account AND l.job_start < s.b2 AND l.job_end >= s.b1
            WHERE l.kind = 'charge'
            GROUP BY 1, 2
        )
        SELECT s.i, count(a.machine) FILTER (WHERE a.granted_now AND coalesce(u.consumption, 0) < a.alloc) > 0, s.account,
               CASE WHEN count(a.machine) = 0 THEN 'no_allocation'
                    WHEN count(a.machine) FILTER (WHERE a.granted_now AND coalesce(u.consumption, 0) < a.alloc) = 0
                        THEN 'allocation_exhausted'
               END
        FROM s
        LEFT JOIN allocations a ON a.i = s.i
        LEFT JOIN used u ON u.i = a.i AND u.machine = a.machine
        GROUP BY s.i, s.account
    $$;

-- ---- the portal page's daily charts (account_month()) -------------------------------------
-- An account's charges from the start of first_day to the end of each day, written as the
-- page first had it: for every day, the job-by-job sum over the ledger.
CREATE FUNCTION bench.charges_to_day_end_hand(account text, pool text, unit text, first_day date, last_day date)
    RETURNS TABLE (day date, amount numeric)
    LANGUAGE plpgsql STABLE
    AS $$
    DECLARE
        tz text := hpcacct.site_timezone();
    BEGIN
        RETURN QUERY
        SELECT g.day::date,
               (SELECT coalesce(sum(l.amount * hpcacct.period_share(l.job_start, l.job_end, $4::timestamp AT TIME ZONE tz,
                                                                    (g.day::date + 1)::timestamp AT TIME ZONE tz)), 0)
                FROM hpcacct.ledger l JOIN hpcacct.resource r USING (resource_id)
                WHERE l.account = $1 AND l.kind = 'charge'
                  AND ($2 IS NULL OR coalesce(r.pool, r.cluster) = $2) AND ($3 IS NULL OR l.unit = $3)
                  AND l.job_start < (g.day::date + 1)::timestamp AT TIME ZONE tz
                  AND l.job_end >= $4::timestamp AT TIME ZONE tz)
        FROM generate_series($4, $5, interval '1 day') g(day)
        ORDER BY 1;
    END
    $$;

-- ---- the portal's first page (my_accounts()) ------------------------------------------------
-- The page as it first had it: the month's charges read from the ledger once per account.
CREATE FUNCTION bench.my_accounts_per_account(at date)
    RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        bank_unit text := hpcacct.setting_value('bank_unit');
        tz constant text := hpcacct.site_timezone();
        month_start timestamptz;  -- instants as parameters: the ledger's BRIN index on job_end reads from them
        day_end timestamptz;
        result jsonb;
    BEGIN
        IF at IS NULL THEN
            RAISE EXCEPTION 'a date is needed' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF NOT isfinite(at) THEN
            RAISE EXCEPTION 'the date must be finite' USING ERRCODE = 'datetime_field_overflow';
        END IF;
        month_start := date_trunc('month', at)::timestamp AT TIME ZONE tz;
        day_end := (at + 1)::timestamp AT TIME ZONE tz;
        SELECT jsonb_build_object('user', session_user, 'at', at, 'accounts', coalesce(jsonb_agg(x.item ORDER BY x.name), '[]'))
        INTO result
        FROM (SELECT a.name,
                     jsonb_strip_nulls(jsonb_build_object(
                         'account', a.name, 'kind', a.kind, 'description', a.description,
                         'role', (SELECT m.role FROM hpcacct.membership m WHERE m.account = a.name AND m.username = session_user),
                         'bank', CASE WHEN EXISTS (SELECT 1 FROM hpcacct.ledger l
                                                   WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer') AND l.unit = bank_unit)
                                      THEN jsonb_build_object('state', hpcacct.account_state(a.name, at),
                                                              'balance', hpcacct_internal.balance_at_end(a.name, at), 'unit', bank_unit,
                                                              'quarter', hpcacct.quarter_start(at)) END,
                         'quota', (SELECT jsonb_build_object('state', u.state, 'monthly', u.monthly,
                                                             'remaining_prev', u.remaining_prev, 'consumed', u.consumed_current,
                                                             'consumable_pct', u.consumable_pct, 'consumable', u.consumable,
                                                             'unit', u.unit)
                                   FROM hpcacct.window_quota_usage(a.name, at) u
                                   WHERE EXISTS (SELECT 1 FROM hpcacct.quota_period p WHERE p.account = a.name)),
                         'regulation', (SELECT jsonb_agg(jsonb_build_object('machine', s.machine, 'alloc', st.alloc,
                                                                            'tmc', round(st.tmc::numeric, 2), 'tc', round(st.tc::numeric, 2),
                                                                            'consumption', round(st.consumption::numeric, 2),
                                                                            'delta', round(st.delta::numeric, 2), 'status', st.status)
                                                         ORDER BY s.machine)
                                        FROM hpcacct.regulation_machine s
                                        CROSS JOIN LATERAL hpcacct.allocation_status(a.name, s.machine, at) st
                                        WHERE EXISTS (SELECT 1 FROM hpcacct_internal.allocation_events(
                                                                        a.name, s.machine, date_trunc('year', at)::date, at))),
                         -- the month's charges up to the end of at (pro rata, as charge_by_month and
                         -- the balance): a past day does not count the rest of its month
                         'this_month', (SELECT jsonb_object_agg(t.unit, t.amount)
                                        FROM (SELECT l.unit, round(sum(l.amount * hpcacct.period_share(l.job_start, l.job_end,
                                                                                                           month_start, day_end)), 6) AS amount
                                              FROM hpcacct.ledger l
                                              WHERE l.account = a.name AND l.kind = 'charge'
                                                AND l.job_start < day_end AND (l.job_end > month_start OR l.job_start >= month_start)
                                                -- (implied, as job_end >= job_start: the bound the BRIN index reads by)
                                                AND l.job_end >= month_start
                                              GROUP BY l.unit) t))) AS item
              FROM hpcacct.account a
              WHERE a.deleted_in IS NULL OR a.deleted_in > at) x;
        RETURN result;
    END
    $$;
