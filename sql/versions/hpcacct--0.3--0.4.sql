-- hpcacct 0.3 -> 0.4: security (issue 20), the sacct loader (issue 14), the first hour (issue 18).
-- Every change here is also in sql/install/.
\echo Use "ALTER EXTENSION hpcacct UPDATE TO '0.4'" to load this file. \quit

-- first hour (issue 18) ---

-- NULL arguments: errors with named SQLSTATEs or today as the default day

CREATE OR REPLACE FUNCTION @extschema@.require_account(account text, caller text) RETURNS text
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
COMMENT ON FUNCTION @extschema@.require_account(text, text) IS
    'An account argument: NULL is an error (22004), an unknown or invisible account too (42704)';

CREATE OR REPLACE FUNCTION @extschema@.day_or_today(day date, caller text) RETURNS date
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
COMMENT ON FUNCTION @extschema@.day_or_today(date, text) IS
    'A day argument: NULL means today in the site time zone; an infinite day is an error (22008)';

CREATE OR REPLACE FUNCTION @extschema@.balance(account text, at date DEFAULT @extschema@.site_today())
    RETURNS numeric
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        quarter constant date := @extschema@.quarter_start(@extschema@.day_or_today(at, 'balance'));
        bank_unit constant text := @extschema@.setting_value('bank_unit');
    BEGIN
        PERFORM @extschema@.require_account(account, 'balance');
        RETURN round(coalesce((SELECT sum(l.amount) FROM @extschema@.ledger l
                               WHERE l.account = balance.account AND l.kind IN ('deposit', 'transfer', 'refund')
                                 AND l.unit = bank_unit
                                 AND l.valid_from >= quarter AND l.valid_from < quarter + interval '3 months'), 0)
                     - coalesce((SELECT sum(c.amount) FROM @extschema@.charge_rollup c
                                 WHERE c.account = balance.account AND c.unit = bank_unit
                                   AND c.month >= quarter AND c.month < quarter + interval '3 months'), 0), 6);
    END
    $$;
COMMENT ON FUNCTION @extschema@.balance(text, date) IS
    'Balance of an account in the quarter containing at (default and NULL: today in the site time zone): '
    'deposits + transfers + refunds - charges; an unknown or invisible account is an error (42704)';

CREATE OR REPLACE FUNCTION @extschema@.account_state(account text, at date DEFAULT @extschema@.site_today())
    RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT CASE
            WHEN a.name IS NULL THEN NULL
            WHEN a.deleted_in IS NOT NULL AND a.deleted_in <= d.day THEN 'deleted'
            WHEN EXISTS (SELECT 1 FROM @extschema@.ledger l
                         WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer')
                           AND l.unit = (SELECT @extschema@.setting_value('bank_unit'))
                           AND l.valid_from >= @extschema@.quarter_start(d.day)
                         GROUP BY @extschema@.quarter_start(l.valid_from)
                         HAVING sum(l.amount) > 0) THEN 'active'
            ELSE 'expired'
        END
        FROM (SELECT @extschema@.day_or_today(account_state.at, 'account_state') AS day) d
        LEFT JOIN @extschema@.account a ON a.name = account_state.account
    $$;
COMMENT ON FUNCTION @extschema@.account_state(text, date) IS
    'active (an allocation this quarter or later), expired, or deleted, at a day (NULL: today in the site '
    'time zone); NULL for an unknown account';

CREATE OR REPLACE FUNCTION @extschema@.require_bank_account(account text) RETURNS void
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF account IS NULL THEN
            RAISE EXCEPTION 'account must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF NOT EXISTS (SELECT 1 FROM @extschema@.account a WHERE a.name = account) THEN
            RAISE EXCEPTION 'unknown account "%"', account USING ERRCODE = 'undefined_object';
        END IF;
        IF EXISTS (SELECT 1 FROM @extschema@.account a WHERE a.name = account AND a.deleted_in IS NOT NULL) THEN
            RAISE EXCEPTION 'account "%" has been deleted', account
                USING ERRCODE = 'HA002', HINT = 'Deleted personal accounts cannot be reactivated.';
        END IF;
    END
    $$;
COMMENT ON FUNCTION @extschema@.require_bank_account(text) IS 'Raises unless the account exists and is not deleted';

CREATE OR REPLACE FUNCTION @extschema@.require_amount(amount numeric) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF amount IS NULL THEN
            RAISE EXCEPTION 'amount must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF amount = 'NaN' OR amount <= 0 THEN
            RAISE EXCEPTION 'amount must be a positive number, not %', coalesce(amount::text, 'NULL')
                USING ERRCODE = 'numeric_value_out_of_range';
        END IF;
    END
    $$;
COMMENT ON FUNCTION @extschema@.require_amount(numeric) IS 'Raises unless the amount is a positive number';

CREATE OR REPLACE FUNCTION @extschema@.book_allocation(account text, kind text, quarter date, amount numeric, note text)
    RETURNS bigint
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        q constant date := @extschema@.quarter_start(quarter);
        entry bigint;
    BEGIN
        IF quarter IS NULL THEN
            RAISE EXCEPTION 'quarter must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF NOT isfinite(quarter) THEN
            RAISE EXCEPTION 'quarter must be a finite date' USING ERRCODE = 'datetime_field_overflow';
        END IF;
        INSERT INTO @extschema@.ledger (account, kind, amount, unit, valid_from, valid_until, note)
        VALUES (account, kind, amount, @extschema@.setting_value('bank_unit'), q, (q + interval '3 months')::date - 1, note)
        RETURNING entry_id INTO entry;
        RETURN entry;
    END
    $$;
COMMENT ON FUNCTION @extschema@.book_allocation(text, text, date, numeric, text) IS
    'Books a bank entry valid for the quarter containing a day (internal helper)';

CREATE OR REPLACE FUNCTION @extschema@.check_submit(username text, account text DEFAULT NULL,
                                         at date DEFAULT @extschema@.site_today())
    RETURNS @extschema@.submit_decision
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        chosen text := account;
        bank_unit text;
        state text;
        is_member boolean;
        current_balance numeric;
        reason text;
        message text;
    BEGIN
        -- A NULL user is an error, a NULL day is today in the site's time zone (as the default).
        IF username IS NULL THEN
            RAISE EXCEPTION 'check_submit: username must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        at := @extschema@.day_or_today(at, 'check_submit');
        -- account_state() and balance() inline: plpgsql keeps the plans of its statements,
        -- SQL functions are planned again at every call.
        IF chosen IS NULL THEN
            SELECT coalesce(u.default_account, u.username) INTO chosen
            FROM @extschema@.hpc_user u WHERE u.username = check_submit.username;
            IF NOT FOUND THEN
                RETURN ROW(false, NULL, 'unknown_user',
                           format('user %s is not known to the accounting system', username))::@extschema@.submit_decision;
            END IF;
        END IF;
        -- setting_value() without the cost of the settings view when the site has set it
        bank_unit := coalesce((SELECT s.value FROM @extschema@.setting s WHERE s.name = 'bank_unit'),
                              @extschema@.setting_value('bank_unit'));
        SELECT CASE
                   WHEN a.deleted_in IS NOT NULL AND a.deleted_in <= at THEN 'deleted'
                   WHEN EXISTS (SELECT 1 FROM @extschema@.ledger l
                                WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer')
                                  AND l.unit = bank_unit
                                  AND l.valid_from >= @extschema@.quarter_start(at)
                                GROUP BY @extschema@.quarter_start(l.valid_from)
                                HAVING sum(l.amount) > 0) THEN 'active'
                   ELSE 'expired'
               END,
               EXISTS (SELECT 1 FROM @extschema@.membership m
                       WHERE m.account = a.name AND m.username = check_submit.username)
        INTO state, is_member
        FROM @extschema@.account a
        WHERE a.name = chosen;
        IF state IS NULL THEN
            reason := 'unknown_account'; message := format('account %s does not exist', chosen);
        ELSIF state = 'deleted' THEN
            reason := 'account_deleted'; message := format('account %s has been deleted', chosen);
        ELSIF NOT is_member THEN
            reason := 'no_access'; message := format('user %s has no access to account %s', username, chosen);
        ELSIF state = 'expired' THEN
            reason := 'account_expired';
            message := format('account %s has no allocation for this or a later quarter', chosen);
        ELSE
            SELECT round(coalesce((SELECT sum(l.amount) FROM @extschema@.ledger l
                                   WHERE l.account = chosen AND l.kind IN ('deposit', 'transfer', 'refund')
                                     AND l.unit = bank_unit
                                     AND l.valid_from >= q.quarter AND l.valid_from < q.quarter + interval '3 months'), 0)
                         - coalesce((SELECT sum(c.amount) FROM @extschema@.charge_rollup c
                                     WHERE c.account = chosen AND c.unit = bank_unit
                                       AND c.month >= q.quarter AND c.month < q.quarter + interval '3 months'), 0), 6)
            INTO current_balance
            FROM (SELECT @extschema@.quarter_start(at) AS quarter) q;
            IF current_balance < 0 THEN
                reason := 'negative_balance';
                message := format('account %s has a negative balance (%s %s) this quarter', chosen,
                                  current_balance, bank_unit);
            -- window_quota_state() is NULL without a quota period: ask only when there is one
            ELSIF EXISTS (SELECT 1 FROM @extschema@.quota_period p WHERE p.account = chosen)
                  AND @extschema@.window_quota_state(chosen, at) = 'blocked' THEN
                reason := 'quota_blocked';
                message := format('account %s has exceeded its sliding-window quota', chosen);
            END IF;
        END IF;
        RETURN ROW(reason IS NULL, chosen, reason, message)::@extschema@.submit_decision;
    END
    $$;
COMMENT ON FUNCTION @extschema@.check_submit(text, text, date) IS
    'Submit check: resolves the default project, refuses unknown/deleted/expired accounts, no access, '
    'negative balance and a blocked sliding-window quota';

CREATE OR REPLACE FUNCTION @extschema@.window_quota_usage(
        account text,
        at date DEFAULT @extschema@.site_today())
    RETURNS TABLE (account text, period_start date, period_end date, month date, state text,
                   monthly float8, remaining_prev float8, consumed_current float8,
                   consumable_pct float8, consumable float8, cluster text, unit text)
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT @extschema@.require_account($1, 'window_quota_usage'), @extschema@.day_or_today($2, 'window_quota_usage');
        WITH d AS MATERIALIZED (
            SELECT @extschema@.day_or_today($2, 'window_quota_usage') AS day
        ), period AS (
            SELECT p.account, p.period_start, p.period_end, p.cluster, p.unit, d.day
            FROM @extschema@.quota_period p, d
            WHERE p.account = $1
            ORDER BY CASE WHEN d.day BETWEEN p.period_start AND p.period_end THEN 0
                          WHEN p.period_end < d.day THEN 1 ELSE 2 END,
                     CASE WHEN p.period_end < d.day THEN d.day - p.period_end ELSE p.period_start - d.day END
            LIMIT 1
        ), consumed AS (
            SELECT c.month, sum(c.amount) AS amount
            FROM period p
            JOIN @extschema@.charge_rollup c
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
            SELECT @extschema@.window_quota(m.month, coalesce(a.allowance, 0), coalesce(c.amount, 0)::float8, p.day) AS q
            FROM (SELECT g.month::date AS month
                  FROM pg_catalog.generate_series(p.period_start::timestamp, p.period_end::timestamp,
                                                  interval '1 month') AS g(month)) m
            LEFT JOIN @extschema@.monthly_allowance a ON a.account = p.account AND a.month = m.month
            LEFT JOIN consumed c ON c.month = m.month
        ) w
    $$;
COMMENT ON FUNCTION @extschema@.window_quota_usage(text, date) IS
    'r_wlm_usage -q of an account for the month containing at (default and NULL: today in the site time zone): '
    'period, state, monthly, remaining of previous month, consumed, consumable %, consumable';

CREATE OR REPLACE FUNCTION @extschema@.window_quota_state(
        account text,
        at date DEFAULT @extschema@.site_today())
    RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$ SELECT u.state FROM @extschema@.window_quota_usage($1, $2) u $$;
COMMENT ON FUNCTION @extschema@.window_quota_state(text, date) IS
    'Sliding-window state of an account at a date (default and NULL: today, site time zone): normal, '
    'low_priority, blocked; NULL without a quota period; errors as window_quota_usage';

-- One bank, one allocation: the bank's deposits (no cluster) count in every pool of their unit

CREATE OR REPLACE FUNCTION @extschema@.year_allocations(for_year integer, at timestamptz)
    RETURNS TABLE (pool text, unit text, account text, allocation numeric)
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        WITH allocations AS MATERIALIZED (
            SELECT coalesce(l.cluster, u.pool) AS pool, l.unit, l.account, l.amount, l.valid_from, l.valid_until
            FROM @extschema@.ledger l
            LEFT JOIN (SELECT DISTINCT r.unit, coalesce(r.pool, r.cluster) AS pool FROM @extschema@.resource r) u
              ON l.cluster IS NULL AND u.unit = l.unit
            WHERE l.kind <> 'charge' AND coalesce(l.cluster, u.pool) IS NOT NULL
        ), years AS MATERIALIZED (
            SELECT p.pool, y.first_day, y.last_day
            FROM (SELECT DISTINCT a.pool FROM allocations a) p
            CROSS JOIN LATERAL @extschema@.allocation_year(p.pool, $1, $2) y
        )
        SELECT a.pool, a.unit, a.account,
               sum(a.amount * greatest(0, least(a.valid_until, y.last_day) + 1 - greatest(a.valid_from, y.first_day))
                   / (a.valid_until + 1 - a.valid_from))
        FROM allocations a
        JOIN years y ON y.pool = a.pool
        WHERE a.valid_from <= y.last_day AND a.valid_until >= y.first_day
        GROUP BY a.pool, a.unit, a.account
    $$;
COMMENT ON FUNCTION @extschema@.year_allocations(integer, timestamptz) IS
    'Allocation of each account in each pool (ledger cluster; without one, every pool charged in its unit) '
    'and unit for the allocation year, allocation rows pro rata by their days of validity inside it';

CREATE OR REPLACE FUNCTION @extschema@.fairshare_all(at timestamptz DEFAULT pg_catalog.now())
    RETURNS TABLE (pool text, unit text, account text, submitter text, allocation numeric, share float8,
                   usage float8, norm_usage float8, year_usage numeric, exhausted boolean, factor float8)
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        WITH cfg AS MATERIALIZED (
            SELECT $1 AS at,
                   ($1 AT TIME ZONE z.tz)::date AS day,
                   z.tz,
                   pg_catalog.date_trunc('month', $1 AT TIME ZONE z.tz) AS at_month,
                   @extschema@.fairshare_setting_value('decay') AS form,
                   @extschema@.fairshare_setting_value('half_life')::interval AS half_life,
                   @extschema@.fairshare_setting_value('period')::interval AS period,
                   @extschema@.fairshare_setting_value('period_decay')::float8 AS decay,
                   @extschema@.fairshare_setting_value('depth')::integer AS depth,
                   @extschema@.fairshare_setting_value('exhausted_factor')::float8 AS penalty
            FROM (SELECT @extschema@.site_timezone() AS tz) z
        ), recent AS MATERIALIZED (
            -- the jobs read from the ledger: those that ended in the month of `at` (half-life;
            -- earlier ones are in the rollup), or in the counted periods (interval)
            SELECT cfg.*,
                   CASE cfg.form WHEN 'half_life' THEN cfg.at_month AT TIME ZONE cfg.tz
                                 ELSE cfg.at - cfg.depth * cfg.period END AS since
            FROM cfg
        ), factors AS MATERIALIZED (
            -- half-life: how much the rollup's decayed sums of each month decay until `at`,
            -- by month number (year * 12 + month - 1) from the rollup's first month on
            SELECT f.first_index,
                   pg_catalog.array_agg(2 ^ (-pg_catalog.date_part('epoch', cfg.at - (m.month + interval '1 month')
                                                                              AT TIME ZONE cfg.tz)
                                             / pg_catalog.date_part('epoch', cfg.half_life)) ORDER BY m.month) AS factor
            FROM cfg
            CROSS JOIN (SELECT min(c.end_month) AS first_month,
                               (pg_catalog.date_part('year', min(c.end_month)) * 12
                                + pg_catalog.date_part('month', min(c.end_month)) - 1)::integer AS first_index
                        FROM @extschema@.charge_rollup c) f
            CROSS JOIN LATERAL pg_catalog.generate_series(f.first_month, cfg.at_month - interval '1 month',
                                                          interval '1 month') AS m(month)
            WHERE cfg.form = 'half_life'
            GROUP BY f.first_index
        ), base AS MATERIALIZED (
            -- fairshare_base serves `at` when everything in it ended before the month of `at`
            -- (one compaction wrote it: the latest month folded is every row's, as in usage_base)
            SELECT coalesce((SELECT max(b.through) FROM @extschema@.fairshare_base b) < cfg.at_month, true) AS usable
            FROM cfg
        ), alloc AS (
            -- as in year_allocations: a row without a cluster (the quarterly bank's deposits,
            -- transfers, refunds) is credit for every pool charged in its unit
            SELECT coalesce(l.cluster, u.pool) AS pool, l.unit, l.account, greatest(sum(l.amount), 0) AS allocation
            FROM @extschema@.ledger l
            CROSS JOIN cfg
            LEFT JOIN (SELECT DISTINCT r.unit, coalesce(r.pool, r.cluster) AS pool FROM @extschema@.resource r) u
              ON l.cluster IS NULL AND u.unit = l.unit
            WHERE l.kind <> 'charge' AND coalesce(l.cluster, u.pool) IS NOT NULL
              AND cfg.day BETWEEN l.valid_from AND l.valid_until
            GROUP BY coalesce(l.cluster, u.pool), l.unit, l.account
        ), jobs AS (
            -- the charges and reversals themselves: a reversal decays exactly as the charge it
            -- cancels (same end, same amount) and is subtracted, so a re-rated job counts its
            -- new charge and a deleted one nothing, without grouping the ledger by job
            SELECT l.resource_id, l.unit, l.account, l.submitter, l.job_end,
                   abs(l.amount)::float8 AS amount, l.amount < 0 AS reversal, l.amount AS net
            FROM recent w
            JOIN @extschema@.ledger l ON l.job_end >= w.since AND l.job_end <= w.at
            WHERE l.kind = 'charge'
        ), decayed AS (
            -- usage: decayed (a sum of floats: never below 0); net: exact, what makes a user count
            SELECT d.pool, d.unit, d.account, d.submitter, greatest(sum(d.usage), 0) AS usage, sum(d.net) AS net
            FROM (
                SELECT coalesce(r.pool, r.cluster) AS pool, g.unit, g.account, g.submitter, g.usage, g.net
                FROM (  -- per resource first, its pool looked up once per group
                    SELECT j.resource_id, j.unit, j.account, j.submitter,
                           coalesce(@extschema@.decayed_usage(j.job_end, j.amount, cfg.at, cfg.half_life)
                                        FILTER (WHERE cfg.form = 'half_life' AND NOT j.reversal),
                                    @extschema@.decayed_usage(j.job_end, j.amount, cfg.at, cfg.period, cfg.decay,
                                                              cfg.depth)
                                        FILTER (WHERE cfg.form = 'interval' AND NOT j.reversal), 0)
                           - coalesce(@extschema@.decayed_usage(j.job_end, j.amount, cfg.at, cfg.half_life)
                                          FILTER (WHERE cfg.form = 'half_life' AND j.reversal),
                                      @extschema@.decayed_usage(j.job_end, j.amount, cfg.at, cfg.period, cfg.decay,
                                                                cfg.depth)
                                          FILTER (WHERE cfg.form = 'interval' AND j.reversal), 0) AS usage,
                           sum(j.net) AS net
                    FROM jobs j CROSS JOIN cfg
                    GROUP BY j.resource_id, j.unit, j.account, j.submitter
                ) g
                JOIN @extschema@.resource r USING (resource_id)
                UNION ALL
                -- half-life: the rollup's sums for the jobs that ended before the month of `at`,
                -- decayed from the end of the month they ended in to `at`; the rows folded into
                -- fairshare_base are read from there when it was folded before that month
                SELECT coalesce(r.pool, r.cluster), c.unit, c.account, c.submitter,
                       sum(c.decayed * (SELECT f.factor FROM factors f)[
                               (pg_catalog.date_part('year', c.end_month) * 12 + pg_catalog.date_part('month', c.end_month))::integer
                               - (SELECT f.first_index FROM factors f)]),
                       sum(c.job_amount)
                FROM (SELECT c.* FROM @extschema@.charge_rollup c WHERE NOT c.folded  -- its partial index
                      UNION ALL
                      SELECT c.* FROM @extschema@.charge_rollup c WHERE c.folded AND NOT (SELECT b.usable FROM base b)) c
                JOIN @extschema@.resource r USING (resource_id)
                WHERE c.end_month < (SELECT cfg.at_month FROM cfg) AND (SELECT cfg.form FROM cfg) = 'half_life'
                GROUP BY coalesce(r.pool, r.cluster), c.unit, c.account, c.submitter
                UNION ALL
                SELECT coalesce(r.pool, r.cluster), b.unit, b.account, b.submitter,
                       sum(b.decayed * 2 ^ (-pg_catalog.date_part('epoch', cfg.at - (b.through + interval '1 month')::timestamp
                                                                                 AT TIME ZONE cfg.tz)
                                            / pg_catalog.date_part('epoch', cfg.half_life))),
                       sum(b.job_amount)
                FROM @extschema@.fairshare_base b
                JOIN @extschema@.resource r USING (resource_id)
                CROSS JOIN cfg
                WHERE cfg.form = 'half_life' AND (SELECT u.usable FROM base u)
                GROUP BY coalesce(r.pool, r.cluster), b.unit, b.account, b.submitter
            ) d
            GROUP BY d.pool, d.unit, d.account, d.submitter
        ), account_usage AS (
            SELECT d.pool, d.unit, d.account, sum(d.usage) AS usage
            FROM decayed d
            GROUP BY d.pool, d.unit, d.account
        ), accounts AS (
            SELECT coalesce(a.pool, u.pool) AS pool, coalesce(a.unit, u.unit) AS unit,
                   coalesce(a.account, u.account) AS account,
                   coalesce(a.allocation, 0) AS allocation, coalesce(u.usage, 0) AS usage
            FROM alloc a
            FULL JOIN account_usage u ON u.pool = a.pool AND u.unit = a.unit AND u.account = a.account
            WHERE coalesce(a.allocation, 0) > 0 OR coalesce(u.usage, 0) > 0
        ), shares AS (
            SELECT a.pool, a.unit, a.account, a.allocation, a.usage,
                   CASE WHEN sum(a.allocation) OVER w > 0
                        THEN (a.allocation / sum(a.allocation) OVER w)::float8 ELSE 0 END AS share,
                   CASE WHEN sum(a.usage) OVER w > 0 THEN a.usage / sum(a.usage) OVER w ELSE 0 END AS norm_usage,
                   sum(a.usage) OVER w AS pool_usage,
                   y.usage AS year_usage,
                   coalesce(y.allocation > 0 AND y.usage >= y.allocation, false) AS exhausted
            FROM accounts a
            LEFT JOIN @extschema@.usage_by_account(NULL, $1) y
              ON y.pool = a.pool AND y.unit = a.unit AND y.account = a.account
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
                  FROM shares s2 JOIN @extschema@.fairshare_user f2 ON f2.account = s2.account) m
              ON m.pool = s.pool AND m.unit = s.unit AND m.account = s.account
            LEFT JOIN decayed d
              ON d.pool = s.pool AND d.unit = s.unit AND d.account = s.account AND d.submitter = m.submitter
            LEFT JOIN @extschema@.fairshare_user f ON f.account = s.account AND f.submitter = m.submitter
        ), users AS (
            SELECT m.pool, m.unit, m.account, m.submitter, m.usage, m.exhausted,
                   CASE WHEN m.account_shares > 0 THEN m.account_share * m.shares / m.account_shares ELSE 0 END
                       AS share,
                   CASE WHEN m.pool_usage > 0 THEN m.usage / m.pool_usage ELSE 0 END AS norm_usage
            FROM members m
        )
        SELECT s.pool, s.unit, s.account, NULL::text, s.allocation, s.share, s.usage, s.norm_usage,
               s.year_usage, s.exhausted,
               @extschema@.fairshare_factor(s.norm_usage, s.share) * CASE WHEN s.exhausted THEN cfg.penalty ELSE 1 END
        FROM shares s CROSS JOIN cfg
        UNION ALL
        SELECT u.pool, u.unit, u.account, u.submitter, NULL, u.share, u.usage, u.norm_usage, NULL, u.exhausted,
               @extschema@.fairshare_factor(u.norm_usage, u.share) * CASE WHEN u.exhausted THEN cfg.penalty ELSE 1 END
        FROM users u CROSS JOIN cfg
        ORDER BY 1, 2, 3, 4 NULLS FIRST
    $$;
COMMENT ON FUNCTION @extschema@.fairshare_all(timestamptz) IS
    'Fair share at at per pool and account (submitter NULL) and per user inside it: allocation valid at at, '
    'target share, decayed and normalized usage, usage in the allocation year, exhausted flag, '
    'factor 2^(-norm_usage / share) (times setting exhausted_factor when the year''s allocation is used up)';

-- Charged resources may only be closed; accounts with entries stay; rerate() (sql/install/48_rerate.sql)

-- ---------------------------------------------------------------------------------------
-- Resources that charged jobs, accounts that have ledger entries, and re-rating.
--
-- A job is charged at the resource row valid at its start, and the ledger names that row.
-- Editing the row afterwards (its rate, bundle, node, unit, pool, or the start of its
-- validity) would change what the ledger's charges mean without re-rating any of them, so a
-- row with charges may only be closed: the end of its validity moved, never before the start
-- of a job it still charges. Re-rating charged jobs is an explicit, logged operation,
-- rerate(), that books reversals and new charges through the ledger.
-- ---------------------------------------------------------------------------------------

-- The latest start of the jobs a resource row still charges (whose charges on it do not net
-- to zero: a job of zero length costs nothing at any rate); NULL when there is none.
CREATE FUNCTION @extschema@.last_charged_start(resource_id bigint) RETURNS timestamptz
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT max(j.job_start)
        FROM (SELECT l.job_start
              FROM @extschema@.ledger l
              WHERE l.kind = 'charge' AND l.resource_id = last_charged_start.resource_id
              GROUP BY l.cluster, l.jobid, l.job_start
              HAVING sum(l.amount) <> 0) j
    $$;
COMMENT ON FUNCTION @extschema@.last_charged_start(bigint) IS
    'Latest start of the jobs a resource row still charges (NULL: none)';

-- BEFORE INSERT, UPDATE or DELETE of a resource row: the overlap of two rates and the
-- deletion of a charged row get an error with a hint (the exclusion constraint and the
-- ledger's foreign key stay the guarantees); a charged row may only be closed.
CREATE FUNCTION @extschema@.check_resource_change() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        other record;
        charged boolean;
        last_start timestamptz;
    BEGIN
        IF TG_OP IN ('UPDATE', 'DELETE') THEN
            charged := EXISTS (SELECT 1 FROM @extschema@.ledger l
                               WHERE l.kind = 'charge' AND l.resource_id = OLD.resource_id);
        END IF;
        IF TG_OP = 'DELETE' THEN
            IF charged THEN
                RAISE EXCEPTION 'resource % (%/%) has charged jobs and cannot be deleted',
                                OLD.resource_id, OLD.cluster, OLD.partition
                    USING ERRCODE = 'foreign_key_violation',
                          HINT = format('The ledger''s charges name it. To stop charging at it, close it: UPDATE hpcacct.resource '
                                        'SET valid = tstzrange(lower(valid), <end>) WHERE resource_id = %s.',
                                        OLD.resource_id);
            END IF;
            RETURN OLD;
        END IF;

        IF TG_OP = 'UPDATE' AND charged THEN
            -- (tres compared in canonical text: its operators are not on this search_path)
            IF (NEW.resource_id, NEW.cluster, NEW.partition, NEW.node::text, NEW.bundle::text, NEW.rate, NEW.unit,
                NEW.pool, NEW.exclusive, lower(NEW.valid), lower_inc(NEW.valid))
               IS DISTINCT FROM
               (OLD.resource_id, OLD.cluster, OLD.partition, OLD.node::text, OLD.bundle::text, OLD.rate, OLD.unit,
                OLD.pool, OLD.exclusive, lower(OLD.valid), lower_inc(OLD.valid)) THEN
                RAISE EXCEPTION 'resource % (%/%) has charged jobs: only the end of its validity can change',
                                OLD.resource_id, OLD.cluster, OLD.partition
                    USING ERRCODE = 'HA004',
                          DETAIL = 'Its rate, bundle, node, unit, pool, exclusive flag and the start of its validity '
                                   'are what the ledger''s charges were computed from.',
                          HINT = format('For jobs from a date on, re-rate them: SELECT hpcacct.rerate(%s, <new rate>, <from>) '
                                        '(closes this row, adds the new one, books reversals and new charges). For future '
                                        'jobs only, close this row at <from> and insert a new one from <from>.',
                                        OLD.resource_id);
            END IF;
            last_start := @extschema@.last_charged_start(OLD.resource_id);
            IF last_start IS NOT NULL AND NOT NEW.valid @> last_start THEN
                RAISE EXCEPTION 'resource % (%/%) cannot be closed at %: it charged a job that started at %',
                                OLD.resource_id, OLD.cluster, OLD.partition, upper(NEW.valid), last_start
                    USING ERRCODE = 'HA004',
                          HINT = format('Close it after %s, or re-rate the jobs from <from> on: '
                                        'SELECT hpcacct.rerate(%s, <new rate>, <from>).', last_start, OLD.resource_id);
            END IF;
        END IF;

        -- Two rates for one cluster and partition at the same time (the exclusion constraint
        -- would refuse it too, without saying what to do).
        SELECT r.resource_id, r.valid INTO other
        FROM @extschema@.resource r
        WHERE r.cluster = NEW.cluster AND r.partition = NEW.partition AND r.valid && NEW.valid
          AND r.resource_id IS DISTINCT FROM NEW.resource_id
        LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'a rate for %/% over % overlaps resource % (valid %)',
                            NEW.cluster, NEW.partition, NEW.valid, other.resource_id, other.valid
                USING ERRCODE = 'exclusion_violation', CONSTRAINT = 'resource_one_rate_at_a_time',
                      HINT = format('One rate at a time: close resource %s where the new rate starts '
                                    '(UPDATE hpcacct.resource SET valid = tstzrange(lower(valid), <start>) WHERE resource_id = %s), '
                                    'then insert the new row valid from <start>; to re-rate jobs already charged, '
                                    'use hpcacct.rerate().', other.resource_id, other.resource_id);
        END IF;
        RETURN NEW;
    END
    $$;
COMMENT ON FUNCTION @extschema@.check_resource_change() IS
    'Trigger: a charged resource row may only be closed (HA004), not deleted; overlapping rates get a hint';
CREATE TRIGGER check_resource_change BEFORE INSERT OR UPDATE OR DELETE ON @extschema@.resource
    FOR EACH ROW EXECUTE FUNCTION @extschema@.check_resource_change();

-- BEFORE DELETE of an account: one the ledger names stays (the ledger is append-only).
CREATE FUNCTION @extschema@.check_account_delete() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF EXISTS (SELECT 1 FROM @extschema@.ledger l WHERE l.account = OLD.name) THEN
            RAISE EXCEPTION 'account "%" has ledger entries and cannot be deleted', OLD.name
                USING ERRCODE = 'foreign_key_violation',
                      HINT = 'The ledger is append-only, so its accounts stay. To end an account''s use, stop '
                             'allocating to it (without an allocation for the current quarter check_submit refuses '
                             'it as account_expired) and remove its members with hpcacct.remove_member().';
        END IF;
        RETURN OLD;
    END
    $$;
COMMENT ON FUNCTION @extschema@.check_account_delete() IS
    'Trigger: an account with ledger entries cannot be deleted; says what to do instead';
CREATE TRIGGER check_account_delete BEFORE DELETE ON @extschema@.account
    FOR EACH ROW EXECUTE FUNCTION @extschema@.check_account_delete();

-- Every re-rating: who, when, which rows, from when, and what it moved.
CREATE TABLE @extschema@.rerate_log (
    rerate_id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    rerated_at      timestamptz NOT NULL DEFAULT pg_catalog.statement_timestamp(),
    rerated_by      text NOT NULL DEFAULT pg_catalog.session_user(),
    old_resource_id bigint NOT NULL REFERENCES @extschema@.resource,
    new_resource_id bigint NOT NULL REFERENCES @extschema@.resource,
    old_rate        float8 NOT NULL,
    new_rate        float8 NOT NULL,
    effective_from  timestamptz NOT NULL,
    jobs            bigint NOT NULL,
    amount_before   numeric NOT NULL,
    amount_after    numeric NOT NULL,
    note            text
);
COMMENT ON TABLE @extschema@.rerate_log IS
    'Re-ratings (rerate()): the closed and the new resource row, the rates, from when, jobs and amounts moved';
SELECT pg_catalog.pg_extension_config_dump('@extschema@.rerate_log', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.rerate_log_rerate_id_seq', '');

-- Re-rates the jobs that resource row `resource_id` charges and that started at or after
-- `effective_from`: closes the row at effective_from, adds a row with the new rate from then
-- to the old row's end (the same cluster, partition, node, bundle, unit, pool and flag), and
-- books, per job, a reversal of its charge and a new charge at the new rate, i.e. the old
-- charge × new rate / old rate, rounded to 6 decimals like every charge. Returns the new
-- row's id; the operation is a row of rerate_log. Charging statements running meanwhile wait
-- (the ledger is locked until the transaction ends), so no job is charged at the closed rate.
CREATE FUNCTION @extschema@.rerate(resource_id bigint, new_rate float8, effective_from timestamptz,
                                   note text DEFAULT NULL)
    RETURNS bigint
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        was @extschema@.resource%ROWTYPE;
        new_id bigint;
        reversals bigint[];
        moved bigint;
        before_sum numeric;
        after_sum numeric;
        label constant text := 're-rated: resource ' || resource_id || ' from ' || effective_from;
    BEGIN
        IF resource_id IS NULL OR new_rate IS NULL OR effective_from IS NULL THEN
            RAISE EXCEPTION 'rerate: resource_id, new_rate and effective_from must not be NULL'
                USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF new_rate = 'NaN' OR new_rate < 0 OR new_rate = 'Infinity' THEN
            RAISE EXCEPTION 'rerate: the rate must be a finite, non-negative number, not %', new_rate
                USING ERRCODE = 'numeric_value_out_of_range';
        END IF;
        -- No charging while the rows change hands: charging inserts into the ledger.
        LOCK TABLE @extschema@.ledger IN EXCLUSIVE MODE;
        SELECT r.* INTO was FROM @extschema@.resource r WHERE r.resource_id = rerate.resource_id FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'rerate: no resource %', resource_id USING ERRCODE = 'undefined_object';
        END IF;
        IF NOT (was.valid @> effective_from) OR effective_from = lower(was.valid) THEN
            RAISE EXCEPTION 'rerate: % is not inside resource %''s validity % after its start', effective_from,
                            resource_id, was.valid
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Re-rate from an instant after the row''s start and before its end; jobs are charged at '
                             'the row valid at their start.';
        END IF;
        IF was.rate = 0 THEN
            RAISE EXCEPTION 'rerate: resource % has rate 0: its charges cannot be scaled to a new rate', resource_id
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Close the row, add one with the rate, and load its jobs again (DELETE and INSERT re-charge them).';
        END IF;
        IF new_rate = was.rate THEN
            RAISE EXCEPTION 'rerate: resource % already has rate %', resource_id, new_rate
                USING ERRCODE = 'invalid_parameter_value';
        END IF;

        -- Reversals first, per job that started from effective_from on, of its net charge here:
        -- the row then charges nothing from effective_from on and may be closed.
        WITH moved AS (
            SELECT l.account, l.unit, l.cluster, l.jobid, l.submitter, l.job_start, l.job_end, sum(l.amount) AS amount
            FROM @extschema@.ledger l
            WHERE l.kind = 'charge' AND l.resource_id = rerate.resource_id AND l.job_start >= effective_from
            GROUP BY l.account, l.unit, l.cluster, l.jobid, l.submitter, l.job_start, l.job_end
            HAVING sum(l.amount) <> 0
        ), reversed AS (
            INSERT INTO @extschema@.ledger (account, kind, amount, unit, resource_id, cluster, jobid, submitter,
                                            job_start, job_end, note)
            SELECT m.account, 'charge', -m.amount, m.unit, rerate.resource_id, m.cluster, m.jobid, m.submitter,
                   m.job_start, m.job_end, 'reversal: ' || label
            FROM moved m
            RETURNING entry_id
        )
        SELECT coalesce(pg_catalog.array_agg(r.entry_id), '{}') INTO reversals FROM reversed r;
        UPDATE @extschema@.resource r SET valid = pg_catalog.tstzrange(lower(was.valid), effective_from,
                                                                       CASE WHEN lower_inc(was.valid) THEN '[)' ELSE '()' END)
        WHERE r.resource_id = rerate.resource_id;
        INSERT INTO @extschema@.resource (cluster, partition, node, bundle, rate, unit, pool, exclusive, valid, description)
        VALUES (was.cluster, was.partition, was.node, was.bundle, new_rate, was.unit, was.pool, was.exclusive,
                pg_catalog.tstzrange(effective_from, upper(was.valid), CASE WHEN upper_inc(was.valid) THEN '[]' ELSE '[)' END),
                was.description)
        RETURNING resource.resource_id INTO new_id;
        -- The new charges: each reversed amount at the new rate.
        WITH charged AS (
            INSERT INTO @extschema@.ledger (account, kind, amount, unit, resource_id, cluster, jobid, submitter,
                                            job_start, job_end, note)
            SELECT l.account, 'charge', round(-l.amount * (new_rate::numeric / was.rate::numeric), 6), l.unit, new_id,
                   l.cluster, l.jobid, l.submitter, l.job_start, l.job_end, label
            FROM @extschema@.ledger l
            WHERE l.entry_id = ANY (reversals)
            RETURNING amount
        )
        SELECT count(*), coalesce(sum(c.amount), 0) INTO moved, after_sum FROM charged c;
        SELECT coalesce(-sum(l.amount), 0) INTO before_sum FROM @extschema@.ledger l WHERE l.entry_id = ANY (reversals);
        INSERT INTO @extschema@.rerate_log (old_resource_id, new_resource_id, old_rate, new_rate, effective_from,
                                            jobs, amount_before, amount_after, note)
        VALUES (resource_id, new_id, was.rate, new_rate, effective_from, moved, before_sum, after_sum, note);
        RETURN new_id;
    END
    $$;
COMMENT ON FUNCTION @extschema@.rerate(bigint, float8, timestamptz, text) IS
    'Re-rates the jobs a resource row charged from an instant on: closes the row, adds one with the new rate, '
    'books reversals and new charges; logged in rerate_log; returns the new row''s id';
REVOKE EXECUTE ON FUNCTION @extschema@.rerate(bigint, float8, timestamptz, text) FROM PUBLIC;

-- Project administrators manage their members from a portal; a read-only auditor role

CREATE OR REPLACE FUNCTION @extschema@.require_member_manager(account text, by_user text) RETURNS void
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                   WHERE (r.rolname = 'hpcacct_admin' AND pg_catalog.pg_has_role(pg_catalog.session_user(), r.oid, 'MEMBER'))
                      OR (r.rolname = pg_catalog.session_user() AND r.rolsuper)) THEN
            PERFORM @extschema@.require_admin(account, by_user);
            RETURN;
        END IF;
        IF by_user IS NOT NULL AND by_user <> pg_catalog.session_user() THEN
            RAISE EXCEPTION 'user "%" cannot act for user "%"', pg_catalog.session_user(), by_user
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        IF account IS NULL OR NOT EXISTS (
            SELECT 1 FROM @extschema@.membership m
            WHERE m.account = require_member_manager.account AND m.username = pg_catalog.session_user()
              AND m.role = 'admin') THEN
            RAISE EXCEPTION 'user "%" is not an administrator of account "%"', pg_catalog.session_user(), account
                USING ERRCODE = 'insufficient_privilege',
                      HINT = 'A project''s administrators manage its members; ask one of them, or the centre''s staff.';
        END IF;
    END
    $$;
COMMENT ON FUNCTION @extschema@.require_member_manager(text, text) IS
    'Raises 42501 unless the session user is staff or administers the account (a portal user acts as itself)';

CREATE OR REPLACE FUNCTION @extschema@.add_member(account text, username text, role text DEFAULT 'member',
                                       by_user text DEFAULT NULL)
    RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM @extschema@.require_member_manager(account, by_user);
        PERFORM @extschema@.require_bank_account(account);
        IF NOT EXISTS (SELECT 1 FROM @extschema@.hpc_user u WHERE u.username = add_member.username) THEN
            RAISE EXCEPTION 'unknown user "%"', username USING ERRCODE = 'undefined_object';
        END IF;
        PERFORM @extschema@.require_admin(account, by_user);
        INSERT INTO @extschema@.membership (account, username, role) VALUES (account, username, role)
        ON CONFLICT ON CONSTRAINT membership_pkey DO UPDATE SET role = EXCLUDED.role;
    END
    $$;
COMMENT ON FUNCTION @extschema@.add_member(text, text, text, text) IS
    'Grants a user access to an account as member or admin; a portal user must administer the account, '
    'staff may name the administrator in by_user (NULL: staff acting directly)';

CREATE OR REPLACE FUNCTION @extschema@.remove_member(account text, username text, by_user text DEFAULT NULL)
    RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM @extschema@.require_member_manager(account, by_user);
        IF NOT EXISTS (SELECT 1 FROM @extschema@.membership m
                       WHERE m.account = remove_member.account AND m.username = remove_member.username) THEN
            RAISE EXCEPTION 'user "%" is not a member of account "%"', username, account
                USING ERRCODE = 'undefined_object';
        END IF;
        IF NOT EXISTS (SELECT 1 FROM @extschema@.membership m
                       WHERE m.account = remove_member.account AND m.username <> remove_member.username
                         AND m.role = 'admin') THEN
            RAISE EXCEPTION 'user "%" is the last administrator of account "%"', username, account
                USING ERRCODE = 'HA003', HINT = 'Make another member an administrator first.';
        END IF;
        DELETE FROM @extschema@.membership m WHERE m.account = remove_member.account AND m.username = remove_member.username;
        UPDATE @extschema@.hpc_user u SET default_account = NULL
        WHERE u.username = remove_member.username AND u.default_account = remove_member.account;
    END
    $$;
COMMENT ON FUNCTION @extschema@.remove_member(text, text, text) IS
    'Removes a user''s access to an account (not its last administrator); resets their default project if it was this; '
    'a portal user must administer the account';

CREATE OR REPLACE FUNCTION @extschema@.sees_all_accounts() RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                       WHERE r.rolname IN ('hpcacct_admin', 'hpcacct_auditor')
                         AND pg_catalog.pg_has_role(pg_catalog.current_user(), r.oid, 'MEMBER'))
               OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = pg_catalog.current_user())
    $$;
COMMENT ON FUNCTION @extschema@.sees_all_accounts() IS
    'True for superusers and members of hpcacct_admin or hpcacct_auditor, who see every account''s rows';

CREATE OR REPLACE PROCEDURE @extschema@.setup_roles()
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        role_name text;
    BEGIN
        FOREACH role_name IN ARRAY ARRAY['hpcacct_admin', 'hpcacct_ingest', 'hpcacct_portal', 'hpcacct_auditor'] LOOP
            IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = role_name) THEN
                EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', role_name);
            END IF;
        END LOOP;
        GRANT USAGE ON SCHEMA @extschema@ TO hpcacct_admin, hpcacct_ingest, hpcacct_portal, hpcacct_auditor;
        GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA @extschema@ TO hpcacct_admin;
        GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA @extschema@ TO hpcacct_admin;
        GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA @extschema@ TO hpcacct_admin;
        GRANT EXECUTE ON ALL PROCEDURES IN SCHEMA @extschema@ TO hpcacct_admin;
        IF pg_catalog.to_regclass('@extschema@.job') IS NOT NULL THEN
            GRANT INSERT ON @extschema@.job TO hpcacct_ingest;
        END IF;
        GRANT SELECT ON ALL TABLES IN SCHEMA @extschema@ TO hpcacct_portal;
        -- project administrators manage their projects' members from a portal (the functions
        -- check that the session user administers the account)
        GRANT EXECUTE ON FUNCTION @extschema@.add_member(text, text, text, text),
                                  @extschema@.remove_member(text, text, text) TO hpcacct_portal;
        -- the auditor reads every table (row-level security lets it see every account) and
        -- the fair share of every account; it writes nothing and runs no administrative function
        GRANT SELECT ON ALL TABLES IN SCHEMA @extschema@ TO hpcacct_auditor;
        GRANT EXECUTE ON FUNCTION @extschema@.fairshare_all(timestamptz) TO hpcacct_auditor;
    END
    $$;
REVOKE EXECUTE ON PROCEDURE @extschema@.setup_roles() FROM PUBLIC;
COMMENT ON PROCEDURE @extschema@.setup_roles() IS
    'Creates hpcacct_admin, hpcacct_ingest, hpcacct_portal and hpcacct_auditor if missing and grants their privileges';

-- Sites that use setup_roles()' roles get what it grants now, on the new objects of this
-- section, to portal users (members of their projects) and to the new hpcacct_auditor.
DO $do$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'hpcacct_admin') THEN
        CALL @extschema@.setup_roles();
    END IF;
END
$do$;
