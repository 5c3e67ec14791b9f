-- hpcacct 0.2 -> 0.3: performance (issue 7). Every change here is also in sql/install/.
\echo Use "ALTER EXTENSION hpcacct UPDATE TO '0.3'" to load this file. \quit

-- perf-procedures ------------------------------------------------------------------------

-- check_submit(): account_state() and balance() inline, quota only with a quota period
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
                         - coalesce((SELECT sum(l.amount * @extschema@.period_share(l.job_start, l.job_end, q.starts, q.ends))
                                     FROM @extschema@.ledger l
                                     WHERE l.account = chosen AND l.kind = 'charge' AND l.unit = bank_unit
                                       AND l.job_end >= q.starts AND l.job_start < q.ends), 0), 6)
            INTO current_balance
            FROM (SELECT z.quarter, z.quarter::timestamp AT TIME ZONE z.tz AS starts,
                         (z.quarter + interval '3 months') AT TIME ZONE z.tz AS ends
                  FROM (SELECT @extschema@.quarter_start(at) AS quarter,
                               coalesce((SELECT s.value FROM @extschema@.setting s WHERE s.name = 'timezone'),
                                        @extschema@.site_timezone()) AS tz) z) q;
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

-- regulate(): every account's figures in one set-based statement, not allocation_status() per account
CREATE OR REPLACE PROCEDURE @extschema@.regulate(d date)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        kind_of_run text;
        as_of       date;
        y_start     date;
        y_end       date;
        today       date;
        tz          text;
        already     bigint;
        n_ok        integer := 0;
        n_warning   integer := 0;
        n_retracted integer := 0;
        n_exonerated integer := 0;
    BEGIN
        IF d IS NULL THEN
            RAISE EXCEPTION 'regulation date must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF NOT isfinite(d) THEN
            RAISE EXCEPTION 'regulation date must be a finite date' USING ERRCODE = 'datetime_field_overflow';
        END IF;
        today := @extschema@.site_today();
        IF d > today THEN
            RAISE EXCEPTION 'regulation date % is in the future', d
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = format('Today is %s in the site time zone.', today),
                      HINT = 'Consumption up to the end of that day is not known yet.';
        END IF;

        kind_of_run := @extschema@.regulation_run(d);
        IF kind_of_run IS NULL THEN
            RAISE NOTICE 'hpcacct.regulate: % is not a regulation date, nothing to do', d
                USING HINT = 'Monthly regulation runs on the 15th, annual regulation on 1 May (warning) and 1 June (retraction).';
            RETURN;
        END IF;

        -- Serializes regulation runs (readers are not blocked): a second run of the same
        -- date waits for the first to commit and then finds its rows in the log.
        LOCK TABLE @extschema@.regulation_log IN SHARE ROW EXCLUSIVE MODE;

        y_start := make_date(EXTRACT(year FROM d)::integer, 1, 1);
        y_end := make_date(EXTRACT(year FROM d)::integer, 12, 31);
        as_of := CASE WHEN kind_of_run = 'monthly' THEN d ELSE d - 1 END;
        tz := @extschema@.site_timezone();
        SELECT count(*) INTO already FROM @extschema@.regulation_log g WHERE g.run_date = d AND g.run = kind_of_run;

        -- Every account's allocation_status(account, machine, as_of) at once: the events in one
        -- pass over the allocations, consumption in one pass over the charges. Consumption
        -- is computed as consumption_before() does, charge by charge, and summed exactly
        -- (numeric): a charge wholly inside the period counts its amount, a charge across
        -- one of its ends its share before the end minus its share before the start.
        WITH events AS (
            SELECT l.account, l.cluster AS machine, s.monthly_threshold, s.annual_warning_percent,
                   s.annual_retraction_percent,
                   coalesce(sum(l.amount), 0) AS alloc,
                   coalesce(sum(l.amount) FILTER (WHERE l.kind <> 'retraction'), 0) AS granted,
                   coalesce(@extschema@.tmc(l.valid_from, l.valid_until, l.amount::float8, as_of, s.month_convention), 0) AS tmc,
                   coalesce(@extschema@.tc(l.valid_from, l.valid_until, l.amount::float8, as_of, s.month_convention)
                            - @extschema@.tc(l.valid_from, l.valid_until, l.amount::float8, y_start - 1, s.month_convention),
                            0) AS tc
            FROM @extschema@.ledger l
            JOIN @extschema@.machine_setting s ON s.machine = l.cluster
            WHERE l.kind IN ('grant', 'supplement', 'retraction') AND l.cluster IS NOT NULL
              AND l.valid_from <= as_of AND l.valid_until >= y_start
            GROUP BY l.account, l.cluster, s.machine
        ), bounds AS (
            SELECT y_start::timestamp AT TIME ZONE tz AS b1, (as_of + 1)::timestamp AT TIME ZONE tz AS b2
        ), per_resource AS (
            SELECT l.account, l.resource_id,
                   sum(CASE WHEN l.job_start >= b.b1 AND l.job_end <= b.b2 THEN l.amount
                            ELSE l.amount * @extschema@.period_share(l.job_start, l.job_end, '-infinity', b.b2)
                                 - CASE WHEN l.job_start < b.b1
                                        THEN l.amount * @extschema@.period_share(l.job_start, l.job_end, '-infinity', b.b1)
                                        ELSE 0 END
                       END) AS amount
            FROM @extschema@.ledger l, bounds b
            WHERE l.kind = 'charge' AND l.job_start < b.b2 AND l.job_end >= b.b1
            GROUP BY l.account, l.resource_id
        ), used AS (
            SELECT p.account, coalesce(r.pool, r.cluster) AS machine, sum(p.amount) AS amount
            FROM per_resource p
            JOIN @extschema@.resource r USING (resource_id)
            GROUP BY 1, 2
        ), figures AS (
            SELECT e.*, coalesce(u.amount, 0)::float8 AS consumption
            FROM events e
            LEFT JOIN used u ON u.account = e.account AND u.machine = e.machine
            WHERE (e.granted >= e.monthly_threshold) = (kind_of_run = 'monthly')
              AND NOT EXISTS (SELECT 1 FROM @extschema@.regulation_log g
                              WHERE g.account = e.account AND g.machine = e.machine
                                AND g.run_date = d AND g.run = kind_of_run)
        ), annual AS (
            SELECT f.*, CASE WHEN kind_of_run <> 'monthly' AND f.alloc > 0
                             THEN 100 * f.consumption / f.alloc::float8 END AS used
            FROM figures f
        ), outcome AS MATERIALIZED (
            SELECT a.*, x.result,
                   CASE WHEN x.result <> 'retraction' THEN 0
                        WHEN kind_of_run = 'monthly' THEN round(a.tmc::numeric, 6)
                        ELSE round(greatest(0, least(a.annual_retraction_percent / 100 * a.alloc,
                                                     a.alloc - a.consumption::numeric)), 6)
                   END::numeric(20, 6) AS hours
            FROM annual a
            CROSS JOIN LATERAL (
                SELECT CASE
                    WHEN kind_of_run = 'monthly' THEN @extschema@.regulation_status(a.consumption, a.tc, a.tmc)
                    WHEN a.used < a.annual_warning_percent THEN
                        CASE WHEN EXISTS (SELECT 1 FROM @extschema@.exoneration x
                                          WHERE x.account = a.account AND x.machine = a.machine
                                            AND x.year = EXTRACT(year FROM d)) THEN 'exonerated'
                             WHEN kind_of_run = 'annual_warning' THEN 'warning'
                             ELSE 'retraction' END
                    ELSE 'ok'
                END AS result
            ) x
        ), booked AS (
            INSERT INTO @extschema@.ledger (account, kind, amount, unit, cluster, valid_from, valid_until, note)
            SELECT o.account, 'retraction', -o.hours,
                   (SELECT l.unit
                    FROM @extschema@.ledger l
                    WHERE l.account = o.account AND l.cluster = o.machine
                      AND l.kind IN ('grant', 'supplement', 'retraction') AND l.valid_from <= as_of
                    ORDER BY l.valid_from DESC, l.entry_id DESC
                    LIMIT 1),
                   o.machine, d, y_end,
                   format('hpcacct.regulate(%s): %s regulation', d,
                          CASE WHEN kind_of_run = 'monthly' THEN 'monthly' ELSE 'annual' END)
            FROM outcome o
            WHERE o.hours > 0
            ORDER BY o.machine, o.account
            RETURNING entry_id, account, cluster
        ), logged AS (
            -- A plain INSERT: should a concurrent run slip past the lock (e.g. under
            -- REPEATABLE READ), the unique key makes it fail rather than book twice.
            INSERT INTO @extschema@.regulation_log (run_date, run, account, machine, figures_at, outcome, alloc,
                                                    granted, consumption, tc, tmc, delta, used_percent,
                                                    retracted, entry_id)
            SELECT d, kind_of_run, o.account, o.machine, as_of, o.result, o.alloc, o.granted, o.consumption,
                   o.tc, o.tmc, o.consumption - o.tc, o.used, o.hours, b.entry_id
            FROM outcome o
            LEFT JOIN booked b ON b.account = o.account AND b.cluster = o.machine
            ORDER BY o.machine, o.account
            RETURNING outcome
        )
        SELECT count(*) FILTER (WHERE g.outcome = 'ok'), count(*) FILTER (WHERE g.outcome = 'warning'),
               count(*) FILTER (WHERE g.outcome = 'retraction'), count(*) FILTER (WHERE g.outcome = 'exonerated')
        INTO n_ok, n_warning, n_retracted, n_exonerated
        FROM logged g;

        RAISE NOTICE 'hpcacct.regulate(%): % run: % ok, % warning, % retraction, % exonerated, % already recorded',
            d, kind_of_run, n_ok, n_warning, n_retracted, n_exonerated, already;
    END
    $$;

-- regulation_report: set-based, not allocation_status() per account and month
CREATE OR REPLACE VIEW @extschema@.regulation_report AS
    WITH cfg AS MATERIALIZED (
        SELECT (SELECT @extschema@.site_timezone()) AS tz, (SELECT @extschema@.site_today()) AS today
    ), events AS MATERIALIZED (
        SELECT l.account, l.cluster AS machine, l.kind, l.amount, l.valid_from, l.valid_until
        FROM @extschema@.ledger l
        WHERE l.kind IN ('grant', 'supplement', 'retraction') AND l.cluster IS NOT NULL
    ), months AS MATERIALIZED (
        SELECT a.account, a.machine, m.month::date AS month, m.month::date + 14 AS as_of,
               EXTRACT(year FROM m.month)::integer AS year, EXTRACT(month FROM m.month)::integer AS month_of_year,
               s.monthly_threshold, s.month_convention
        FROM (SELECT e.account, e.machine, min(e.valid_from) AS first_day, max(e.valid_until) AS last_day
              FROM events e GROUP BY e.account, e.machine) a
        JOIN @extschema@.machine_setting s ON s.machine = a.machine
        CROSS JOIN cfg
        CROSS JOIN LATERAL pg_catalog.generate_series(pg_catalog.date_trunc('month', a.first_day::timestamp),
                                                      pg_catalog.date_trunc('month', a.last_day::timestamp),
                                                      interval '1 month') AS m(month)
        WHERE m.month::date + 14 <= cfg.today
    ), bounds AS MATERIALIZED (
        -- The instants consumption is taken before, in order: 1 January and the 16th (the day
        -- after the 15th) of every month of the report's years, 13 a year.
        SELECT y.first_year, pg_catalog.array_agg(d.day::timestamp AT TIME ZONE cfg.tz ORDER BY d.day) AS at
        FROM (SELECT min(m.year) AS first_year, max(m.year) AS last_year FROM months m) y
        CROSS JOIN cfg
        CROSS JOIN LATERAL (
            SELECT pg_catalog.make_date(g.year, greatest(k.k, 1), CASE WHEN k.k = 0 THEN 1 ELSE 16 END) AS day
            FROM pg_catalog.generate_series(y.first_year, y.last_year) AS g(year),
                 pg_catalog.generate_series(0, 12) AS k(k)
        ) d
        GROUP BY y.first_year
    ), status AS (  -- allocation_status() of each row: the events
        SELECT m.account, m.machine, m.month, m.as_of, m.monthly_threshold,
               -- where the day after as_of and 1 January are in bounds.at
               (m.year - b.first_year) * 13 + 1 + m.month_of_year AS j_end, (m.year - b.first_year) * 13 + 1 AS j_start,
               coalesce(sum(e.amount), 0) AS alloc,
               coalesce(sum(e.amount) FILTER (WHERE e.kind <> 'retraction'), 0) AS granted,
               coalesce(@extschema@.tmc(e.valid_from, e.valid_until, e.amount::float8, m.as_of, m.month_convention)
                            FILTER (WHERE e.account IS NOT NULL), 0) AS tmc,
               coalesce(@extschema@.tc(e.valid_from, e.valid_until, e.amount::float8, m.as_of, m.month_convention)
                            FILTER (WHERE e.account IS NOT NULL)
                        - @extschema@.tc(e.valid_from, e.valid_until, e.amount::float8,
                                         pg_catalog.make_date(m.year, 1, 1) - 1, m.month_convention)
                            FILTER (WHERE e.account IS NOT NULL), 0) AS tc
        FROM months m
        CROSS JOIN bounds b
        LEFT JOIN events e ON e.account = m.account AND e.machine = m.machine
                          AND e.valid_from <= m.as_of AND e.valid_until >= pg_catalog.make_date(m.year, 1, 1)
        GROUP BY m.account, m.machine, m.month, m.as_of, m.monthly_threshold, b.first_year, m.year, m.month_of_year
    ), charges AS (
        -- consumption_before(account, machine, at[j]) for every j, summed exactly as it sums:
        -- a charge ended by at[j] counts its amount from its first such j on ("whole"), a
        -- charge running across at[j] its share before at[j] ("part").
        SELECT x.account, x.resource_id, CASE WHEN x.j = x.ws THEN x.we + 1 ELSE x.j END AS j,
               sum(x.amount) FILTER (WHERE x.j = x.ws) AS whole,
               sum(x.amount * @extschema@.period_share(x.job_start, x.job_end, '-infinity', x.at[x.j]))
                   FILTER (WHERE x.j > x.ws) AS part
        FROM (SELECT l.account, l.resource_id, l.amount, l.job_start, l.job_end, w.ws, w.we, b.at,
                     pg_catalog.generate_series(w.ws, w.we) AS j
              FROM @extschema@.ledger l
              CROSS JOIN bounds b
              CROSS JOIN LATERAL (  -- at[ws] <= job_start < at[ws + 1]; at[we] < job_end <= at[we + 1]
                  SELECT pg_catalog.width_bucket(l.job_start, b.at) AS ws,
                         pg_catalog.width_bucket(CASE WHEN l.job_end > l.job_start
                                                      THEN l.job_end - interval '1 microsecond'
                                                      ELSE l.job_start END, b.at) AS we
              ) w
              WHERE l.kind = 'charge'
                AND l.resource_id IN (SELECT r.resource_id FROM @extschema@.resource r
                                      JOIN @extschema@.machine_setting s ON s.machine = coalesce(r.pool, r.cluster))) x
        GROUP BY 1, 2, 3
    ), before AS (
        SELECT c.account, coalesce(r.pool, r.cluster) AS machine, c.j, sum(c.whole) AS whole, sum(c.part) AS part
        FROM charges c
        JOIN @extschema@.resource r USING (resource_id)
        GROUP BY 1, 2, 3
    ), grid AS (  -- consumption_before(account, machine, at[j]) for every account, machine and j
        SELECT p.account, p.machine, j.j,
               coalesce(sum(bf.whole) OVER (PARTITION BY p.account, p.machine ORDER BY j.j), 0)
               + coalesce(bf.part, 0) AS amount
        FROM (SELECT DISTINCT m.account, m.machine FROM months m) p
        CROSS JOIN bounds b
        CROSS JOIN LATERAL pg_catalog.generate_series(1, pg_catalog.array_length(b.at, 1)) AS j(j)
        LEFT JOIN before bf ON bf.account = p.account AND bf.machine = p.machine AND bf.j = j.j
    )
    SELECT st.account, st.machine, st.month, st.as_of,
           CASE WHEN st.granted >= st.monthly_threshold THEN 'monthly' ELSE 'annual' END AS regulation,
           st.alloc, st.tmc, st.tc, u.consumption, u.consumption - st.tc AS delta,
           CASE WHEN st.granted >= st.monthly_threshold
                THEN @extschema@.regulation_status(u.consumption, st.tc, st.tmc) END AS status,
           g.outcome AS logged_outcome, g.retracted
    FROM status st
    JOIN grid g_end ON g_end.account = st.account AND g_end.machine = st.machine AND g_end.j = st.j_end
    JOIN grid g_start ON g_start.account = st.account AND g_start.machine = st.machine AND g_start.j = st.j_start
    CROSS JOIN LATERAL (SELECT (g_end.amount - g_start.amount)::float8 AS consumption) u
    LEFT JOIN @extschema@.regulation_log g
      ON g.account = st.account AND g.machine = st.machine AND g.run_date = st.as_of AND g.run = 'monthly';
ALTER VIEW @extschema@.regulation_report SET (security_invoker = true);  -- CREATE OR REPLACE resets it

-- open_quarter(): top-ups in one statement, account_state() inline
CREATE OR REPLACE PROCEDURE @extschema@.open_quarter(q date)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        this_quarter constant date := @extschema@.quarter_start(q);
        previous_quarter constant date := (@extschema@.quarter_start(q) - interval '3 months')::date;
    BEGIN
        IF q IS NULL OR NOT isfinite(q) THEN
            RAISE EXCEPTION 'open_quarter needs a finite date' USING ERRCODE = 'datetime_field_overflow';
        END IF;
        -- one run at a time
        PERFORM pg_advisory_xact_lock(pg_catalog.hashtext('hpcacct.open_quarter'));

        -- top_up() of the personal accounts of members of active projects (account_state()
        -- inline), for this and the two following quarters, in one statement
        WITH cfg AS MATERIALIZED (
            SELECT @extschema@.setting_value('bank_unit') AS unit
        ), active AS (
            SELECT p.name
            FROM @extschema@.account p, cfg
            WHERE p.kind = 'project' AND NOT (p.deleted_in IS NOT NULL AND p.deleted_in <= this_quarter)
              AND EXISTS (SELECT 1 FROM @extschema@.ledger l
                          WHERE l.account = p.name AND l.kind IN ('deposit', 'transfer') AND l.unit = cfg.unit
                            AND l.valid_from >= this_quarter
                          GROUP BY @extschema@.quarter_start(l.valid_from)
                          HAVING sum(l.amount) > 0)
        ), missing AS MATERIALIZED (
            SELECT a.name, t.target,
                   coalesce(a.personal_allotment,
                            (SELECT @extschema@.setting_value('personal_allotment')::numeric))
                   - coalesce((SELECT sum(l.amount) FROM @extschema@.ledger l
                               WHERE l.account = a.name AND l.kind = 'deposit' AND l.valid_from = t.target
                                 AND l.unit = cfg.unit), 0) AS amount
            FROM @extschema@.account a
            CROSS JOIN cfg
            CROSS JOIN LATERAL (SELECT (this_quarter + i * interval '3 months')::date AS target
                                FROM pg_catalog.generate_series(0, 2) AS i) t
            WHERE a.kind = 'personal' AND a.deleted_in IS NULL
              AND EXISTS (SELECT 1 FROM @extschema@.membership m JOIN active p ON p.name = m.account
                          WHERE m.username = a.name)
        ), booked AS (
            INSERT INTO @extschema@.ledger (account, kind, amount, unit, valid_from, valid_until, note)
            SELECT m.name, 'deposit', m.amount, cfg.unit, m.target, (m.target + interval '3 months')::date - 1,
                   'personal allotment'
            FROM missing m, cfg
            WHERE m.amount > 0
            ORDER BY m.name, m.target
        )
        INSERT INTO @extschema@.quarter_log (quarter, account, action, target_quarter, amount)
        SELECT this_quarter, m.name, 'top_up', m.target, m.amount
        FROM missing m
        WHERE m.amount > 0
        ORDER BY m.name, m.target
        ON CONFLICT ON CONSTRAINT quarter_log_once
        DO UPDATE SET amount = @extschema@.quarter_log.amount + EXCLUDED.amount;

        -- expire personal accounts without an allocation for this quarter
        INSERT INTO @extschema@.quarter_log (quarter, account, action, target_quarter)
        SELECT this_quarter, a.name, 'expired', this_quarter
        FROM @extschema@.account a
        WHERE a.kind = 'personal' AND a.deleted_in IS NULL
          AND NOT EXISTS (SELECT 1 FROM @extschema@.ledger l
                          WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer')
                            AND l.unit = (SELECT @extschema@.setting_value('bank_unit')) AND l.valid_from = this_quarter
                          HAVING sum(l.amount) > 0)
        ON CONFLICT DO NOTHING;

        -- delete those that expired in the previous quarter as well
        WITH deleted AS (
            UPDATE @extschema@.account a SET deleted_in = this_quarter
            WHERE a.kind = 'personal' AND a.deleted_in IS NULL
              AND EXISTS (SELECT 1 FROM @extschema@.quarter_log g
                          WHERE g.account = a.name AND g.action = 'expired' AND g.quarter = this_quarter)
              AND EXISTS (SELECT 1 FROM @extschema@.quarter_log g
                          WHERE g.account = a.name AND g.action = 'expired' AND g.quarter = previous_quarter)
            RETURNING a.name
        )
        INSERT INTO @extschema@.quarter_log (quarter, account, action, target_quarter)
        SELECT this_quarter, d.name, 'deleted', this_quarter FROM deleted d
        ON CONFLICT DO NOTHING;

        -- default projects that point to expired or deleted accounts fall back to the personal one
        WITH stale AS (
            SELECT u.username, u.default_account
            FROM @extschema@.hpc_user u
            WHERE u.default_account IS NOT NULL
              -- account_state(u.default_account, this_quarter) IN ('expired', 'deleted'), inline
              AND EXISTS (SELECT 1 FROM @extschema@.account a
                          WHERE a.name = u.default_account
                            AND ((a.deleted_in IS NOT NULL AND a.deleted_in <= this_quarter)
                                 OR NOT EXISTS (SELECT 1 FROM @extschema@.ledger l
                                                WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer')
                                                  AND l.unit = (SELECT @extschema@.setting_value('bank_unit'))
                                                  AND l.valid_from >= this_quarter
                                                GROUP BY @extschema@.quarter_start(l.valid_from)
                                                HAVING sum(l.amount) > 0)))
            FOR UPDATE
        ), reset AS (
            UPDATE @extschema@.hpc_user u SET default_account = NULL
            FROM stale s
            WHERE u.username = s.username
            RETURNING s.username, s.default_account AS old_default
        )
        INSERT INTO @extschema@.quarter_log (quarter, account, action, target_quarter, username)
        SELECT this_quarter, r.old_default, 'default_reset', this_quarter, r.username FROM reset r
        ON CONFLICT DO NOTHING;
    END
    $$;
