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

-- Sites that ran setup_roles() before: its roles get what setup_roles() grants on the new
-- objects of this section.
DO $do$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'hpcacct_admin') THEN
        GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA @extschema@ TO hpcacct_admin;
    END IF;
END
$do$;
