-- ---------------------------------------------------------------------------------------
-- Sliding-window quotas (rules §3, RWTH): monthly allowances within an accounting period,
-- consumption from the job charges, and the figures of RWTH's `r_wlm_usage -q`.
-- ---------------------------------------------------------------------------------------

-- What the aggregate returns for the month `at` (field names as in rules §3).
CREATE TYPE @extschema@.quota AS (
    monthly          float8,  -- A(at)
    remaining_prev   float8,  -- A(at-1) - C(at-1)
    consumed_current float8,  -- C(at)
    consumable_pct   float8,  -- (A(at-1) + A(at) - C(at-1) - C(at)) / A(at) x 100, -101 below -100; NULL if A(at) = 0
    consumable       float8,  -- A(at-1) + A(at) + A(at+1) - C(at-1) - C(at)
    state            text     -- normal, low_priority or blocked
);
COMMENT ON TYPE @extschema@.quota IS
    'Sliding-window quota of one month: monthly, remaining_prev, consumed_current, consumable_pct, consumable, state';

-- Support functions of the aggregate. The state is `internal` (the core's flat 88-byte
-- State in the aggregate context; see src/pg/window_quota.cpp for why), so the combine
-- function must not be strict, and the transition function is not strict so that a NULL
-- argument is an error (22004) rather than a month silently left out.
CREATE FUNCTION hpcacct_internal.window_quota_transfn(internal, date, float8, float8, date) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_window_quota_transfn' LANGUAGE c IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.window_quota_transfn(internal, date, float8, float8, date) IS
    'Transition function of hpcacct.window_quota: adds one month row to the state';
CREATE FUNCTION hpcacct_internal.window_quota_combinefn(internal, internal) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_window_quota_combinefn' LANGUAGE c IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.window_quota_combinefn(internal, internal) IS
    'Combine function of hpcacct.window_quota: merges two partial states';
CREATE FUNCTION hpcacct_internal.window_quota_serialfn(internal) RETURNS bytea
    AS 'MODULE_PATHNAME', 'hpcacct_window_quota_serialfn' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.window_quota_serialfn(internal) IS
    'Serial function of hpcacct.window_quota: the 88 bytes of a partial state';
CREATE FUNCTION hpcacct_internal.window_quota_deserialfn(bytea, internal) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_window_quota_deserialfn' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.window_quota_deserialfn(bytea, internal) IS
    'Deserial function of hpcacct.window_quota: checks the size and the validity of a partial state';
CREATE FUNCTION hpcacct_internal.window_quota_finalfn(internal) RETURNS @extschema@.quota
    AS 'MODULE_PATHNAME', 'hpcacct_window_quota_finalfn' LANGUAGE c IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.window_quota_finalfn(internal) IS
    'Final function of hpcacct.window_quota: the quota of month at, NULL without rows';

CREATE AGGREGATE @extschema@.window_quota(month date, allowance float8, consumed float8, at date) (
    SFUNC = hpcacct_internal.window_quota_transfn,
    STYPE = internal,
    SSPACE = 88,
    FINALFUNC = hpcacct_internal.window_quota_finalfn,
    COMBINEFUNC = hpcacct_internal.window_quota_combinefn,
    SERIALFUNC = hpcacct_internal.window_quota_serialfn,
    DESERIALFUNC = hpcacct_internal.window_quota_deserialfn,
    PARALLEL = SAFE
);
COMMENT ON AGGREGATE @extschema@.window_quota(date, float8, float8, date) IS
    'RWTH sliding-window quota of the month containing at, over one row per month of an accounting period '
    '(the period runs from its first to its last month; rows of one month add up; NULL arguments are an error)';

-- An account's accounting periods. Within one, each month has an allowance (a row of
-- monthly_allowance; a month without a row has none). Consumption is the account's charges
-- in `unit`, on `cluster` or, when it is NULL, on every cluster.
CREATE TABLE @extschema@.quota_period (
    account      text NOT NULL REFERENCES @extschema@.account,
    period_start date NOT NULL,
    period_end   date NOT NULL,
    cluster      text,
    unit         text NOT NULL DEFAULT 'core-hours',
    note         text,
    PRIMARY KEY (account, period_start),
    UNIQUE (account, period_start, period_end),
    CONSTRAINT quota_period_finite CHECK (pg_catalog.isfinite(period_start) AND pg_catalog.isfinite(period_end)),
    CONSTRAINT quota_period_whole_months CHECK (
        pg_catalog.date_part('day', period_start::timestamp) = 1
        AND pg_catalog.date_part('day', (period_end + 1)::timestamp) = 1),
    CONSTRAINT quota_period_not_empty CHECK (period_end >= period_start),
    CONSTRAINT quota_period_cluster_named CHECK (cluster <> ''),  -- NULL: every cluster
    CONSTRAINT quota_period_unit_named CHECK (unit <> ''),
    CONSTRAINT quota_period_no_overlap
        EXCLUDE USING gist (account WITH =, pg_catalog.daterange(period_start, period_end, '[]') WITH &&)
);
COMMENT ON TABLE @extschema@.quota_period IS
    'Accounting periods with a sliding-window quota (RWTH): whole months, first day to last day, never overlapping per account';
COMMENT ON COLUMN @extschema@.quota_period.period_end IS 'Last day of the period (inclusive), e.g. 2012-06-30';
COMMENT ON COLUMN @extschema@.quota_period.cluster IS 'Charges on this cluster count; NULL: charges on every cluster';
COMMENT ON COLUMN @extschema@.quota_period.unit IS 'Charges in this unit count (the allowance''s unit)';

-- The allowance of each month of a period. The composite foreign key repeats the period's
-- bounds so that "month inside the period" is a plain CHECK, kept true by ON UPDATE CASCADE
-- when a period is shortened or moved (the CHECK then refuses the change).
CREATE TABLE @extschema@.monthly_allowance (
    account      text NOT NULL,
    period_start date NOT NULL,
    period_end   date NOT NULL,
    month        date NOT NULL,
    allowance    float8 NOT NULL,
    PRIMARY KEY (account, month),
    FOREIGN KEY (account, period_start, period_end)
        REFERENCES @extschema@.quota_period (account, period_start, period_end) ON UPDATE CASCADE ON DELETE CASCADE,
    CONSTRAINT monthly_allowance_first_of_month CHECK (pg_catalog.date_part('day', month::timestamp) = 1),
    CONSTRAINT monthly_allowance_in_period CHECK (month >= period_start AND month <= period_end),
    -- 'NaN' sorts above 'Infinity' in PostgreSQL, so this refuses NaN too; 2^53 as the core.
    CONSTRAINT monthly_allowance_amount CHECK (allowance >= 0 AND allowance <= 9007199254740992)
);
COMMENT ON TABLE @extschema@.monthly_allowance IS
    'Allowance of each month of a quota period (core-hours or the period''s unit); a month without a row has 0';

SELECT pg_catalog.pg_extension_config_dump('@extschema@.quota_period', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.monthly_allowance', '');

-- A period with the same allowance in every month (change single months in
-- monthly_allowance afterwards).
CREATE FUNCTION @extschema@.add_quota_period(account text, period_start date, period_end date,
                                             monthly_allowance float8, cluster text DEFAULT NULL,
                                             unit text DEFAULT 'core-hours')
    RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        missing text := CASE WHEN $2 IS NULL THEN 'period_start' WHEN $3 IS NULL THEN 'period_end'
                             WHEN $4 IS NULL THEN 'monthly_allowance' WHEN $6 IS NULL THEN 'unit' END;
    BEGIN
        PERFORM hpcacct_internal.require_account($1, 'add_quota_period');
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'add_quota_period: % must not be NULL', missing USING ERRCODE = 'null_value_not_allowed';
        END IF;
        -- said here in the caller's terms (the tables' constraints would refuse them too)
        IF NOT ($4 >= 0 AND $4 <= 9007199254740992) THEN  -- NaN fails it too
            RAISE EXCEPTION 'add_quota_period: monthly_allowance must be a number from 0 to 2^53, not %', $4
                USING ERRCODE = 'numeric_value_out_of_range';
        ELSIF $5 = '' THEN
            RAISE EXCEPTION 'add_quota_period: cluster must not be empty (NULL: every cluster)'
                USING ERRCODE = 'invalid_parameter_value';
        ELSIF $6 = '' THEN
            RAISE EXCEPTION 'add_quota_period: unit must not be empty' USING ERRCODE = 'invalid_parameter_value';
        ELSIF $3 < $2 THEN
            RAISE EXCEPTION 'add_quota_period: period_end % is before period_start %',
                pg_catalog.to_char($3, 'YYYY-MM-DD'), pg_catalog.to_char($2, 'YYYY-MM-DD')
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        INSERT INTO @extschema@.quota_period (account, period_start, period_end, cluster, unit)
        VALUES ($1, $2, $3, $5, $6);
        INSERT INTO @extschema@.monthly_allowance (account, period_start, period_end, month, allowance)
        SELECT $1, $2, $3, m.month::date, $4
        FROM pg_catalog.generate_series($2::timestamp, $3::timestamp, interval '1 month') AS m(month);
    END
    $$;
COMMENT ON FUNCTION @extschema@.add_quota_period(text, date, date, float8, text, text) IS
    'Adds an accounting period (first day to last day of whole months) with the same allowance in every month '
    '(0 to 2^53: 22003 otherwise; an empty cluster or unit, or an end before the start: 22023)';
REVOKE EXECUTE ON FUNCTION @extschema@.add_quota_period(text, date, date, float8, text, text) FROM PUBLIC;

-- An account's charges in a unit, on a cluster (NULL: every cluster), in the part of a day's
-- month after that day's end (site time zone), pro rata (a job running across that midnight
-- for its part after it): what a month's figures count that the end of the day did not see.
-- charges_after_day_end()'s, for one account and the month. A NULL account, unit or day is 22004.
CREATE FUNCTION hpcacct_internal.charges_after_day(account text, unit text, cluster text, day date) RETURNS numeric
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM hpcacct_internal.refuse_argument(x.value, 'charges_after_day', x.arg)
        FROM (VALUES ('account', $1), ('unit', $2), ('day', $4::text)) x(arg, value)
        WHERE x.value IS NULL;
        RETURN coalesce((SELECT c.amount
                         FROM hpcacct_internal.charges_after_day_end(
                                  ARRAY[$1], $2, $3, $4,
                                  (pg_catalog.date_trunc('month', $4::timestamp) + interval '1 month')::date) c), 0);
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.charges_after_day(text, text, text, date) IS
    'An account''s charges in a unit, on a cluster (NULL: every one), in the rest of a day''s month after the day''s end, pro rata';

-- The sliding-window quota of one account in the month containing `at`, with r_wlm_usage's
-- figures, as of that month: consumption of later months is not counted (for the current
-- month there is none; for a past month, the state is the one the account had then). With
-- to_day_end, as of the end of the day `at` (site time zone): the month's charges after it
-- are not counted either, a job running across that midnight counts for its part before it
-- (as balances_at_end()); notify_scan() tells a past day's state so. The
-- period is the account's one containing `at`, else its latest one before, else its first
-- one after (outside its period an account has no quota: low_priority, figures 0). No row
-- when the account has no quota period. A NULL `at` is today in the site's time zone; a NULL
-- account is 22004, one that does not exist or that the caller may not see 42704 (checked
-- first, whatever the query then reads), a NULL to_day_end 22004. PL/pgSQL, so that a session
-- keeps the query's plan (a submit filter asks at every submission; an SQL function with SET
-- is planned at each call); window_quota_usage() below is its public name, inlined into its
-- callers.
CREATE FUNCTION hpcacct_internal.window_quota_usage_rows(quota_account text, at date, to_day_end boolean)
    RETURNS TABLE (account text, period_start date, period_end date, month date, state text,
                   monthly float8, remaining_prev float8, consumed_current float8,
                   consumable_pct float8, consumable float8, cluster text, unit text)
    LANGUAGE plpgsql STABLE PARALLEL SAFE ROWS 1  -- one period's row, or none
    SET search_path = pg_catalog, pg_temp
    AS $$
    #variable_conflict use_column
    BEGIN
        PERFORM hpcacct_internal.require_account($1, 'window_quota_usage'),
                hpcacct_internal.day_or_today($2, 'window_quota_usage');
        IF $3 IS NULL THEN
            PERFORM hpcacct_internal.refuse_argument($3, 'window_quota_usage', 'to_day_end');
        END IF;
        RETURN QUERY
        WITH d AS MATERIALIZED (
            SELECT hpcacct_internal.day_or_today($2, 'window_quota_usage') AS day
        ), period AS (
            SELECT p.account, p.period_start, p.period_end, p.cluster, p.unit, d.day,
                   -- to_day_end: the month's charges after the day, to take out (a function call:
                   -- the plan kept for window_quota_usage() reads no ledger)
                   CASE WHEN $3 THEN hpcacct_internal.charges_after_day(p.account, p.unit, p.cluster, d.day) ELSE 0 END
                       AS after_day
            FROM @extschema@.quota_period p, d
            WHERE p.account = $1
            ORDER BY CASE WHEN d.day BETWEEN p.period_start AND p.period_end THEN 0
                          WHEN p.period_end < d.day THEN 1 ELSE 2 END,
                     CASE WHEN p.period_end < d.day THEN d.day - p.period_end ELSE p.period_start - d.day END
            LIMIT 1
        ), consumed AS (
            SELECT c.month, sum(c.amount) AS amount
            FROM period p
            JOIN hpcacct_internal.charge_rollup_exact c
              ON c.account = $1 AND c.unit = p.unit
             AND c.month >= p.period_start AND c.month <= p.period_end
             AND c.month <= p.day
            JOIN @extschema@.resource r
              ON r.resource_id = c.resource_id AND (p.cluster IS NULL OR r.cluster = p.cluster)
            GROUP BY c.month
        )
        SELECT p.account, p.period_start, p.period_end, pg_catalog.date_trunc('month', p.day::timestamp)::date,
               (w.q).state, (w.q).monthly, (w.q).remaining_prev, (w.q).consumed_current,
               (w.q).consumable_pct, (w.q).consumable, p.cluster, p.unit
        FROM period p
        CROSS JOIN LATERAL (
            SELECT @extschema@.window_quota(
                       m.month, coalesce(a.allowance, 0),
                       (coalesce(c.amount, 0)
                        - CASE WHEN m.month = pg_catalog.date_trunc('month', p.day::timestamp)::date THEN p.after_day ELSE 0 END)::float8,
                       p.day) AS q
            FROM (SELECT g.month::date AS month
                  FROM pg_catalog.generate_series(p.period_start::timestamp, p.period_end::timestamp,
                                                  interval '1 month') AS g(month)) m
            LEFT JOIN @extschema@.monthly_allowance a ON a.account = p.account AND a.month = m.month
            LEFT JOIN consumed c ON c.month = m.month
        ) w;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.window_quota_usage_rows(text, date, boolean) IS
    'The rows of hpcacct.window_quota_usage(); to_day_end: as of the end of the day at (notify_scan())';

CREATE FUNCTION @extschema@.window_quota_usage(
        account text,
        at date DEFAULT @extschema@.site_today())
    RETURNS TABLE (account text, period_start date, period_end date, month date, state text,
                   monthly float8, remaining_prev float8, consumed_current float8,
                   consumable_pct float8, consumable float8, cluster text, unit text)
    LANGUAGE sql STABLE PARALLEL SAFE ROWS 1
    BEGIN ATOMIC
        SELECT * FROM hpcacct_internal.window_quota_usage_rows(window_quota_usage.account, window_quota_usage.at, false);
    END;
COMMENT ON FUNCTION @extschema@.window_quota_usage(text, date) IS
    'r_wlm_usage -q of an account for the month containing at (default and NULL: today in the site time zone): '
    'period, state, monthly, remaining of previous month, consumed, consumable %, consumable';

-- r_wlm_usage -q for every account with a quota period, this month (site time zone).
CREATE VIEW @extschema@.window_quota_usage AS
    SELECT u.account, u.period_start, u.period_end, u.month, u.state, u.monthly, u.remaining_prev,
           u.consumed_current, u.consumable_pct, u.consumable, u.cluster, u.unit
    FROM (SELECT DISTINCT p.account FROM @extschema@.quota_period p) a
    CROSS JOIN LATERAL @extschema@.window_quota_usage(
        a.account, @extschema@.site_today()) u;
COMMENT ON VIEW @extschema@.window_quota_usage IS
    'Sliding-window quota of every account with a quota period for the current month (site time zone), '
    'in r_wlm_usage -q''s terms';

-- For submit checks (HLRN issue): normal, low_priority (runs, counts) or blocked (refuse the
-- submission); NULL when the account has no quota period, i.e. no window rule applies.
CREATE FUNCTION @extschema@.window_quota_state(
        account text,
        at date DEFAULT @extschema@.site_today())
    RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$ SELECT u.state FROM @extschema@.window_quota_usage($1, $2) u $$;
COMMENT ON FUNCTION @extschema@.window_quota_state(text, date) IS
    'Sliding-window state of an account at a date (default and NULL: today, site time zone): normal, '
    'low_priority, blocked; NULL without a quota period; errors as window_quota_usage';
