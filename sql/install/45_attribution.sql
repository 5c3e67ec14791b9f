-- ---------------------------------------------------------------------------------------
-- Attribution of charges to periods (rules §0): a job's charge counts in the days, months
-- and quarters in which it ran, pro rata by wall-clock time, in the site's time zone.
-- ---------------------------------------------------------------------------------------

CREATE FUNCTION @extschema@.site_timezone() RETURNS text
    LANGUAGE plpgsql STABLE PARALLEL SAFE  -- plan kept for the session, as setting_value()'s
    SET search_path = pg_catalog, pg_temp
    AS $$ BEGIN RETURN @extschema@.setting_value('timezone'); END $$;
COMMENT ON FUNCTION @extschema@.site_timezone() IS
    'The site''s time zone (setting timezone): days, months and quarters of reports are its';

-- The local time of an instant as the days and months (site time zone) count it: they begin at
-- PostgreSQL's instants of their midnights. Where a midnight comes twice (America/Havana,
-- 1 Nov 2026) PostgreSQL's is the second, and an instant of the first pass, local date D, is
-- still in the day before: the last microsecond of D - 1. Otherwise at AT TIME ZONE tz.
-- Its date and month are the day and month whose [start, next start) holds the instant.
CREATE FUNCTION hpcacct_internal.local_time(at timestamptz, tz text) RETURNS timestamp
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN at < pg_catalog.date_trunc('day', at AT TIME ZONE tz) AT TIME ZONE tz
                THEN pg_catalog.date_trunc('day', at AT TIME ZONE tz) - interval '1 microsecond'
                ELSE at AT TIME ZONE tz END;
COMMENT ON FUNCTION hpcacct_internal.local_time(timestamptz, text) IS
    'Local time of an instant in a time zone, an instant before PostgreSQL''s instant of its date''s midnight (one '
    'that came twice) as the last microsecond of the day before: its date and month hold the instant';

CREATE FUNCTION @extschema@.site_today() RETURNS date
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN hpcacct_internal.local_time(pg_catalog.now(), @extschema@.site_timezone())::date;
COMMENT ON FUNCTION @extschema@.site_today() IS 'Today in the site''s time zone (as local_time() counts days)';

-- The day a function with a day argument means: a NULL day is today in the site's time zone
-- (the argument's documented default); an infinite one is 22008.
CREATE FUNCTION hpcacct_internal.day_or_today(day date, caller text) RETURNS date
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF day IS NULL THEN
            RETURN @extschema@.site_today();
        END IF;
        IF NOT pg_catalog.isfinite(day) THEN
            RAISE EXCEPTION '%: % is not a finite date', caller, day USING ERRCODE = 'datetime_field_overflow';
        END IF;
        RETURN day;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.day_or_today(date, text) IS
    'A day argument: NULL means today in the site time zone; an infinite day is an error (22008)';

-- An account argument of a report: NULL is 22004; an account that does not exist, or that
-- row-level security hides from the caller, is 42704 — the same error for both, so that a
-- portal user learns nothing of accounts that are not theirs — never an empty answer or 0.
CREATE FUNCTION hpcacct_internal.require_account(account text, caller text) RETURNS text
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF account IS NULL THEN
            RAISE EXCEPTION '%: account must not be NULL', caller USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF NOT EXISTS (SELECT 1 FROM @extschema@.account a WHERE a.name = require_account.account) THEN
            RAISE EXCEPTION 'account "%" does not exist or is not visible to you', account
                USING ERRCODE = 'undefined_object',
                      HINT = 'Accounts are rows of hpcacct.account; a portal user sees only those they are a member of.';
        END IF;
        RETURN account;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.require_account(text, text) IS
    'An account argument: NULL is an error (22004), an unknown or invisible account too (42704)';

-- Fraction of [job_start, job_end) that lies in [period_start, period_end). A job of zero
-- length counts wholly in the period where it starts; NULL in, NULL out; an infinite job
-- start or end is 22008; a period's bound may be infinite (a period that misses the job,
-- e.g. one from infinity, gives 0 without subtracting). A SQL-standard body (parsed
-- once, at creation) without SET options, so that the planner inlines it.
CREATE FUNCTION @extschema@.period_share(job_start timestamptz, job_end timestamptz,
                                         period_start timestamptz, period_end timestamptz)
    RETURNS numeric
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE
        WHEN job_start IS NULL OR job_end IS NULL OR period_start IS NULL OR period_end IS NULL THEN NULL
        WHEN NOT (pg_catalog.isfinite(job_start)
                  OR hpcacct_internal.refuse_argument(job_start, 'period_share', 'job_start'))
          OR NOT (pg_catalog.isfinite(job_end)
                  OR hpcacct_internal.refuse_argument(job_end, 'period_share', 'job_end')) THEN NULL
        WHEN job_end <= job_start THEN
            CASE WHEN job_start >= period_start AND job_start < period_end THEN 1 ELSE 0 END
        WHEN period_start >= job_end OR period_end <= job_start THEN 0
        ELSE
            GREATEST(0, pg_catalog.date_part('epoch', LEAST(job_end, period_end)
                                                                 - GREATEST(job_start, period_start))::numeric)
            / pg_catalog.date_part('epoch', job_end - job_start)::numeric
    END;
COMMENT ON FUNCTION @extschema@.period_share(timestamptz, timestamptz, timestamptz, timestamptz) IS
    'Fraction of a job''s wall-clock time [job_start, job_end) inside [period_start, period_end); '
    'NULL in, NULL out; an infinite job start or end is an error (22008); an infinite period bound is no bound';

-- Every charge (and reversal) split by calendar month of the site's time zone.
CREATE VIEW @extschema@.charge_by_month AS
    SELECT l.entry_id, l.account, r.cluster, r.partition, coalesce(r.pool, r.cluster) AS pool, l.unit, l.submitter,
           m.month::date AS month,
           l.amount * @extschema@.period_share(l.job_start, l.job_end,
                                               m.month AT TIME ZONE z.tz,
                                               (m.month + interval '1 month') AT TIME ZONE z.tz) AS amount,
           l.core_hours * @extschema@.period_share(l.job_start, l.job_end,
                                                   m.month AT TIME ZONE z.tz,
                                                   (m.month + interval '1 month') AT TIME ZONE z.tz) AS core_hours,
           l.job_start, l.job_end
    FROM @extschema@.ledger l
    JOIN @extschema@.resource r USING (resource_id)
    CROSS JOIN (SELECT (SELECT @extschema@.site_timezone()) AS tz) z  -- once per query
    CROSS JOIN LATERAL pg_catalog.generate_series(
        -- (the months as local_time() counts them: where a midnight comes twice, from PostgreSQL's)
        pg_catalog.date_trunc('month', hpcacct_internal.local_time(l.job_start, z.tz)),
        pg_catalog.date_trunc('month', hpcacct_internal.local_time(l.job_end, z.tz)),
        interval '1 month') AS m(month)
    WHERE l.kind = 'charge'
      AND (m.month < hpcacct_internal.local_time(l.job_end, z.tz) OR l.job_end = l.job_start);
COMMENT ON VIEW @extschema@.charge_by_month IS
    'Charges (and their raw core-hours) split pro rata over the calendar months (site time zone) in which the jobs ran';

-- An account's charges from the start of first_day to the end of each day up to last_day
-- (site time zone), on one machine or pool and in one unit (NULL: any), for the daily charts:
-- the job-by-job sum of amount x period_share(job, first_day, end of the day), in one pass.
-- A job that ended by a day's end counts its share from first_day on from that day (whole:
-- the same numeric as at any later day); a job running across a day's end counts its share
-- up to it, for each day it runs across. The same exact numerics, summed in another order.
-- A NULL account is 22004, a NULL or infinite first or last day 22004 or 22008.
CREATE FUNCTION hpcacct_internal.charges_to_day_end(account text, pool text, unit text, first_day date, last_day date)
    RETURNS TABLE (day date, amount numeric)
    LANGUAGE sql STABLE PARALLEL SAFE
BEGIN ATOMIC
    WITH z AS (
        SELECT @extschema@.site_timezone() AS tz
    ), charged AS (
        -- (the days as local_time() counts them: where a midnight comes twice, from PostgreSQL's)
        SELECT l.amount, l.job_start, l.job_end,
               hpcacct_internal.local_time(l.job_start, z.tz)::date AS start_day,
               hpcacct_internal.local_time(l.job_end, z.tz)::date AS end_day,
               charges_to_day_end.first_day::timestamp AT TIME ZONE z.tz AS period_start
        FROM @extschema@.ledger l
        JOIN @extschema@.resource r ON r.resource_id = l.resource_id
        CROSS JOIN z
        WHERE l.account = charges_to_day_end.account AND l.kind = 'charge'
          AND (charges_to_day_end.pool IS NULL OR coalesce(r.pool, r.cluster) = charges_to_day_end.pool)
          AND (charges_to_day_end.unit IS NULL OR l.unit = charges_to_day_end.unit)
          AND l.job_start < (charges_to_day_end.last_day + 1)::timestamp AT TIME ZONE z.tz
          -- (the instant once, as a parameter: the ledger's BRIN index reads only the period's part)
          AND l.job_end >= (SELECT charges_to_day_end.first_day::timestamp AT TIME ZONE @extschema@.site_timezone())
    ), ended AS (
        SELECT c.end_day AS day, sum(c.amount * @extschema@.period_share(c.job_start, c.job_end, c.period_start, 'infinity'))
                   AS amount
        FROM charged c
        GROUP BY c.end_day
    ), running AS (
        SELECT d.day::date AS day,
               sum(c.amount * @extschema@.period_share(c.job_start, c.job_end, c.period_start,
                                                       (d.day::date + 1)::timestamp AT TIME ZONE z.tz)) AS amount
        FROM charged c
        CROSS JOIN z
        -- (days as timestamps: a series of dates would step in the session's TimeZone, whose
        -- skipped days, e.g. Pacific/Apia's 30 December 2011, it would leave out)
        CROSS JOIN LATERAL pg_catalog.generate_series(greatest(c.start_day, charges_to_day_end.first_day)::timestamp,
                                                      least(c.end_day - 1, charges_to_day_end.last_day)::timestamp,
                                                      interval '1 day') d(day)
        GROUP BY d.day::date
    )
    SELECT g.day::date, coalesce(sum(e.amount) OVER (ORDER BY g.day), 0) + coalesce(r.amount, 0)
    FROM pg_catalog.generate_series(
        CASE WHEN (charges_to_day_end.account IS NOT NULL
                   OR hpcacct_internal.refuse_argument(charges_to_day_end.account, 'charges_to_day_end', 'account'))
                  AND (pg_catalog.isfinite(charges_to_day_end.first_day)
                       OR hpcacct_internal.refuse_argument(charges_to_day_end.first_day, 'charges_to_day_end', 'first_day'))
             THEN charges_to_day_end.first_day::timestamp END,
        CASE WHEN pg_catalog.isfinite(charges_to_day_end.last_day)
                  OR hpcacct_internal.refuse_argument(charges_to_day_end.last_day, 'charges_to_day_end', 'last_day')
             THEN charges_to_day_end.last_day::timestamp END,
        interval '1 day') g(day)
    LEFT JOIN ended e ON e.day = g.day::date
    LEFT JOIN running r ON r.day = g.day::date
    ORDER BY g.day;
END;
COMMENT ON FUNCTION hpcacct_internal.charges_to_day_end(text, text, text, date, date) IS
    'An account''s charges from the start of first_day to the end of each day up to last_day (site time zone), '
    'on a machine or pool and in a unit (NULL: any): the daily charts'' figures';

-- The one definition of an account's charges after a day's end: in a unit, on a cluster (NULL:
-- every cluster), after the end of `day` (site time zone) up to the start of period_end (the
-- first day after the period: the month's, the quarter's), pro rata by period_share() for a job
-- running across either midnight. One row per given account with such charges, unrounded.
-- Callers: charges_after_day() (the window quota's month), balances_at_end() (the bank's
-- quarter). A NULL accounts, unit, day or period_end is 22004. An SQL-standard body without
-- SET options, inlined into its callers' plans: a PL/pgSQL one, called once per quota account,
-- made a past day's notify_scan() 8 % and my_accounts() 6 % slower at 200 000 jobs. The
-- instants and the unit as scalar subqueries, computed once (in a filter, for every row): the
-- ledger's BRIN index on job_end reads only what ended after the day's end. The price: this
-- query alone, for 1 000 accounts, takes 3.0 ms where balances_at_end()'s own took 2.2 ms
-- (6.6 against 4.0 ms a month before the quarter's end), 1-4 % of balances_at_end().
CREATE FUNCTION hpcacct_internal.charges_after_day_end(accounts text[], unit text, cluster text, day date,
                                                       period_end date)
    RETURNS TABLE (account text, amount numeric)
    LANGUAGE sql STABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT l.account,
           sum(l.amount * @extschema@.period_share(
                   l.job_start, l.job_end,
                   (SELECT (charges_after_day_end.day + 1)::timestamp AT TIME ZONE @extschema@.site_timezone()),
                   (SELECT charges_after_day_end.period_end::timestamp AT TIME ZONE @extschema@.site_timezone())))
    FROM @extschema@.ledger l
    JOIN (SELECT DISTINCT u.account FROM pg_catalog.unnest(charges_after_day_end.accounts) AS u(account)) a
      ON a.account = l.account
    WHERE (charges_after_day_end.accounts IS NOT NULL
           OR hpcacct_internal.refuse_argument(charges_after_day_end.accounts, 'charges_after_day_end', 'accounts'))
      AND (charges_after_day_end.unit IS NOT NULL
           OR hpcacct_internal.refuse_argument(charges_after_day_end.unit, 'charges_after_day_end', 'unit'))
      AND (charges_after_day_end.day IS NOT NULL
           OR hpcacct_internal.refuse_argument(charges_after_day_end.day, 'charges_after_day_end', 'day'))
      AND (charges_after_day_end.period_end IS NOT NULL
           OR hpcacct_internal.refuse_argument(charges_after_day_end.period_end, 'charges_after_day_end', 'period_end'))
      AND l.kind = 'charge' AND l.unit = (SELECT charges_after_day_end.unit)
      AND ((SELECT charges_after_day_end.cluster) IS NULL
           OR l.resource_id IN (SELECT r.resource_id FROM @extschema@.resource r WHERE r.cluster = charges_after_day_end.cluster))
      AND l.job_end >= (SELECT (charges_after_day_end.day + 1)::timestamp AT TIME ZONE @extschema@.site_timezone())
      -- (bounded on both sides: the plan, made before the instant is known, estimates a narrow
      -- range, and on a large ledger reads the BRIN index rather than the whole table)
      AND l.job_end <= 'infinity'
      AND l.job_start < (SELECT charges_after_day_end.period_end::timestamp AT TIME ZONE @extschema@.site_timezone())
    GROUP BY l.account;
END;
COMMENT ON FUNCTION hpcacct_internal.charges_after_day_end(text[], text, text, date, date) IS
    'Accounts'' charges in a unit, on a cluster (NULL: every one), after a day''s end up to a period''s end, pro rata';
