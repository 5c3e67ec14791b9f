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
-- ---- perf-ingest-reports: the charge rollup; charging checks only when a job is not charged;
-- the ledger's per-account charge indexes give way to the rollup and a BRIN index on job_end.
DROP INDEX @extschema@.ledger_account;
DROP INDEX @extschema@.ledger_account_job_end;
CREATE INDEX ledger_allocation_account ON @extschema@.ledger (account) WHERE kind <> 'charge';
-- Charges by end, for the latest month of the reports (earlier ones are in charge_rollup).
-- The ledger is appended in about time order: a BRIN index is small and nearly free to keep.
CREATE INDEX ledger_job_end ON @extschema@.ledger USING brin (job_end);

CREATE OR REPLACE FUNCTION @extschema@.charge_jobs() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $fn$
    DECLARE
        col      text[];
        relevant text;
        changed_old text;
        changed_new text;
        problem  record;
        unknown_accounts bigint;
        charged  bigint;
        jobs     bigint;
    BEGIN
        IF TG_WHEN <> 'AFTER' OR TG_LEVEL <> 'STATEMENT' THEN
            RAISE EXCEPTION 'hpcacct.charge_jobs() must run AFTER ... FOR EACH STATEMENT'
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Attach it with hpcacct.attach_charging(table).';
        END IF;
        col := @extschema@.job_columns(TG_RELID, TG_ARGV);
        relevant := format('%s::text AS cluster, %s::text AS jobid, %s::text AS account, %s::text AS submitter, '
                           '%s::text AS partition, %s::timestamptz AS job_start, %s::timestamptz AS job_end, '
                           '%s::@extschema@.tres AS alloctres',
                           VARIADIC col);
        IF TG_OP = 'UPDATE' THEN
            changed_old := format('(SELECT %1$s FROM old_jobs EXCEPT SELECT %1$s FROM new_jobs)', relevant);
            changed_new := format('(SELECT %1$s FROM new_jobs EXCEPT SELECT %1$s FROM old_jobs)', relevant);
        ELSIF TG_OP = 'DELETE' THEN
            changed_old := format('(SELECT %s FROM old_jobs)', relevant);
        ELSE
            changed_new := format('(SELECT %s FROM new_jobs)', relevant);
        END IF;

        IF changed_old IS NOT NULL THEN
            EXECUTE format($q$
                INSERT INTO @extschema@.ledger (account, kind, amount, unit, resource_id, cluster, jobid,
                                                submitter, job_start, job_end, note)
                SELECT l.account, 'charge', -sum(l.amount), l.unit, l.resource_id, l.cluster, l.jobid,
                       l.submitter, l.job_start, l.job_end, %L
                FROM @extschema@.ledger l
                WHERE l.kind = 'charge'
                  AND (l.cluster, l.jobid) IN (SELECT o.cluster, o.jobid FROM %s o)
                GROUP BY l.account, l.unit, l.resource_id, l.cluster, l.jobid, l.submitter, l.job_start, l.job_end
                HAVING sum(l.amount) <> 0
                $q$, 'reversal: job ' || lower(TG_OP) || 'd', changed_old);
        END IF;

        IF changed_new IS NOT NULL THEN
            -- Charge every job that can be charged; only when some cannot, find out why. (The
            -- accounts are checked first, once each: joined per job, the planner, blind to the
            -- transition table's size, would scan the accounts once per job.)
            EXECUTE format($q$
                SELECT count(*) FROM (SELECT DISTINCT j.account FROM %s j) j
                WHERE NOT EXISTS (SELECT 1 FROM @extschema@.account a WHERE a.name = j.account)
                $q$, changed_new) INTO unknown_accounts;
            IF unknown_accounts = 0 THEN
                EXECUTE format($q$
                    INSERT INTO @extschema@.ledger (account, kind, amount, unit, resource_id, cluster, jobid,
                                                    submitter, job_start, job_end)
                    SELECT j.account, 'charge',
                           round(@extschema@.charge(j.alloctres, j.job_end - j.job_start, r.bundle, r.rate,
                                                    CASE WHEN r.exclusive THEN r.node END)::numeric, 6),
                           r.unit, r.resource_id, j.cluster, j.jobid, j.submitter, j.job_start, j.job_end
                    FROM %s j
                    JOIN @extschema@.resource r
                      ON r.cluster = j.cluster AND r.partition = j.partition AND r.valid @> j.job_start
                    WHERE j.jobid IS NOT NULL AND j.account IS NOT NULL AND j.alloctres IS NOT NULL
                      AND j.job_end >= j.job_start
                    $q$, changed_new);
                GET DIAGNOSTICS charged = ROW_COUNT;
                EXECUTE format('SELECT count(*) FROM %s j', changed_new) INTO jobs;
            END IF;
            IF unknown_accounts > 0 OR charged <> jobs THEN
                EXECUTE format($q$
                    SELECT * FROM (
                        SELECT j.cluster, j.jobid, j.account, j.partition, j.job_start,
                               CASE
                                   WHEN j.cluster IS NULL OR j.jobid IS NULL OR j.account IS NULL
                                        OR j.partition IS NULL OR j.alloctres IS NULL THEN 'missing'
                                   WHEN j.job_start IS NULL OR j.job_end IS NULL THEN 'no_times'
                                   WHEN j.job_end < j.job_start THEN 'end_before_start'
                                   WHEN NOT EXISTS (SELECT 1 FROM @extschema@.account a WHERE a.name = j.account)
                                       THEN 'unknown_account'
                                   WHEN NOT EXISTS (SELECT 1 FROM @extschema@.resource r
                                                    WHERE r.cluster = j.cluster AND r.partition = j.partition
                                                      AND r.valid @> j.job_start)
                                       THEN 'unknown_resource'
                               END AS problem
                        FROM %s j) checked
                    WHERE problem IS NOT NULL
                    LIMIT 1
                    $q$, changed_new) INTO problem;

                IF problem.problem = 'missing' THEN
                    RAISE EXCEPTION 'job %/% lacks a cluster, jobid, account, partition or alloctres', problem.cluster, problem.jobid
                        USING ERRCODE = 'null_value_not_allowed';
                ELSIF problem.problem = 'no_times' THEN
                    RAISE EXCEPTION 'job %/% has no start or end time', problem.cluster, problem.jobid
                        USING ERRCODE = 'null_value_not_allowed',
                              HINT = 'Only finished jobs are charged; load jobs once they have ended.';
                ELSIF problem.problem = 'end_before_start' THEN
                    RAISE EXCEPTION 'job %/% ends before it starts', problem.cluster, problem.jobid
                        USING ERRCODE = 'invalid_parameter_value';
                ELSIF problem.problem = 'unknown_account' THEN
                    RAISE EXCEPTION 'unknown account "%" (job %/%)', problem.account, problem.cluster, problem.jobid
                        USING ERRCODE = 'undefined_object', HINT = 'Add it to hpcacct.account first.';
                ELSIF problem.problem = 'unknown_resource' THEN
                    RAISE EXCEPTION 'no resource for cluster "%" partition "%" at % (job %/%)',
                                    problem.cluster, problem.partition, problem.job_start, problem.cluster, problem.jobid
                        USING ERRCODE = 'undefined_object',
                              HINT = 'Add a row to hpcacct.resource whose validity contains the job''s start.';
                END IF;
                RAISE EXCEPTION 'charged % of % jobs, and no job is invalid', charged, jobs
                    USING ERRCODE = 'internal_error';
            END IF;
        END IF;
        RETURN NULL;
    END
    $fn$;
COMMENT ON FUNCTION @extschema@.charge_jobs() IS
    'Statement trigger charging jobs into hpcacct.ledger; arguments map roles to columns (role=column)';

-- ---------------------------------------------------------------------------------------
-- The charge rollup: the ledger's charges summed per account, resource, submitter, month
-- they count in (pro rata by wall-clock time, site time zone) and month the jobs ended in.
-- A statement trigger on the ledger appends the rollup rows of every statement's charges
-- in the same transaction, so the rollup is always the ledger's sum; reports read
-- thousands of rollup rows instead of millions of ledger rows. Rows are deltas (one per
-- group and statement, never updated, so concurrent loaders do not lock each other);
-- compact_rollup() merges them, rebuild_rollup() recomputes everything from the ledger.
-- ---------------------------------------------------------------------------------------

CREATE TABLE @extschema@.charge_rollup (
    account     text NOT NULL,
    resource_id bigint NOT NULL,
    unit        text NOT NULL,
    submitter   text,
    month       date NOT NULL,
    end_month   date NOT NULL,
    amount      numeric NOT NULL,
    job_amount  numeric NOT NULL,
    decayed     float8 NOT NULL,
    folded      boolean NOT NULL DEFAULT false
);
CREATE INDEX charge_rollup_account ON @extschema@.charge_rollup (account, month);
-- The rows not yet folded (the current month's, late reversals): what reports read next to the bases.
CREATE INDEX charge_rollup_unfolded ON @extschema@.charge_rollup (end_month) WHERE NOT folded;
COMMENT ON TABLE @extschema@.charge_rollup IS
    'Charges (and reversals) summed per account, resource, unit, submitter, month counted in and month ended in; '
    'maintained with the ledger, derived from it';
COMMENT ON COLUMN @extschema@.charge_rollup.month IS
    'First day of the month (site time zone) the amount counts in: charges are split pro rata by wall-clock time';
COMMENT ON COLUMN @extschema@.charge_rollup.end_month IS 'First day of the month (site time zone) the jobs ended in';
COMMENT ON COLUMN @extschema@.charge_rollup.job_amount IS
    'Sum of the jobs'' whole amounts, on their first month''s row: what they charged, whatever month they ran in';
COMMENT ON COLUMN @extschema@.charge_rollup.decayed IS
    'Sum of amount x 2^(-(end of end_month - job_end) / half_life) of the jobs, on their first month''s row: '
    'fairshare() scales it to any later instant';
COMMENT ON COLUMN @extschema@.charge_rollup.folded IS
    'Its decayed sum is in hpcacct.fairshare_base and its amount in hpcacct.usage_base (set by compact_rollup(); '
    'new rows are not)';

-- The half-life fair share needs every month's decayed sum, scaled to `at`. compact_rollup()
-- folds the months up to the one before the current into one row per account, resource,
-- unit and submitter, decayed to the end of that month (`through`), so that fairshare()
-- reads one row per user for the past and the rollup only for what came since.
CREATE TABLE @extschema@.fairshare_base (
    account     text NOT NULL,
    resource_id bigint NOT NULL,
    unit        text NOT NULL,
    submitter   text,
    through     date NOT NULL,
    decayed     float8 NOT NULL,
    job_amount  numeric NOT NULL
);
COMMENT ON TABLE @extschema@.fairshare_base IS
    'The folded rows of charge_rollup per account, resource, unit and submitter: decayed sums to the end of the '
    'month `through`, whole amounts; written by compact_rollup(), emptied by rebuild_rollup()';
COMMENT ON COLUMN @extschema@.fairshare_base.through IS
    'First day of the last month folded in (site time zone); decayed is scaled to the end of that month';

-- The same folded rows without the submitter, per month counted in: the usage per account
-- and per resource (and the fair share's year usage) read about a quarter of the rows.
CREATE TABLE @extschema@.usage_base (
    account     text NOT NULL,
    resource_id bigint NOT NULL,
    unit        text NOT NULL,
    month       date NOT NULL,
    through     date NOT NULL,
    amount      numeric NOT NULL
);
CREATE INDEX usage_base_through ON @extschema@.usage_base (through);
COMMENT ON TABLE @extschema@.usage_base IS
    'The folded rows of charge_rollup per account, resource, unit and month counted in (their amounts); '
    'written by compact_rollup(), emptied by rebuild_rollup()';
COMMENT ON COLUMN @extschema@.usage_base.through IS
    'First day of the last month folded in (site time zone): the jobs in it ended before the next month';

-- The consumption rollup, for GENCI's regulation report: consumption before an instant
-- (consumption_before()) at the instants the report needs, 1 January and the 16th of each
-- month at 00:00 (the day after the 15th), site time zone. Per account, resource and such
-- boundary: the whole amounts of the jobs that ended by it (and after the boundary before),
-- and the share before it of the jobs running across it. Consumption before boundary b is
-- the sum of `ended` up to b plus `running` at b: exactly consumption_before()'s numerics.
CREATE TABLE @extschema@.consumption_rollup (
    account     text NOT NULL,
    resource_id bigint NOT NULL,
    boundary    date NOT NULL,
    ended       numeric NOT NULL,
    running     numeric NOT NULL
);
COMMENT ON TABLE @extschema@.consumption_rollup IS
    'Charges per account, resource and regulation boundary (1 January, the 16th of each month): amounts of the '
    'jobs ended by it, shares before it of the jobs running across it; maintained with the ledger, derived from it';
COMMENT ON COLUMN @extschema@.consumption_rollup.boundary IS
    '1 January or the 16th of a month, at 00:00 in the site time zone';

-- The first regulation boundary strictly after a local time. Inlined (SQL-standard body).
CREATE FUNCTION @extschema@.regulation_boundary_after(local_time timestamp) RETURNS date
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE
        WHEN local_time < pg_catalog.date_trunc('month', local_time) + interval '15 days'
            THEN (pg_catalog.date_trunc('month', local_time) + interval '15 days')::date
        WHEN pg_catalog.date_part('month', local_time) = 12
            THEN (pg_catalog.date_trunc('month', local_time) + interval '1 month')::date
        ELSE (pg_catalog.date_trunc('month', local_time) + interval '1 month 15 days')::date
    END;
COMMENT ON FUNCTION @extschema@.regulation_boundary_after(timestamp) IS
    'First regulation boundary (1 January, or the 16th of a month, at 00:00) strictly after a local time';

-- The rollup rows of the charges in `source` (a table or a parenthesized query with the
-- ledger's columns), as one INSERT statement's text: the trigger runs it over its
-- transition table, rebuild_rollup() over the whole ledger. A job inside one month (almost
-- all) takes the short branch without splitting.
CREATE FUNCTION @extschema@.rollup_insert_sql(source text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT pg_catalog.format($q$
            WITH z AS MATERIALIZED (  -- once per statement
                SELECT @extschema@.site_timezone() AS tz,
                       pg_catalog.date_part('epoch', @extschema@.fairshare_setting_value('half_life')::interval)
                           AS half_life
            ), entries AS (
                SELECT e.account, e.resource_id, e.unit, e.submitter, e.job_start, e.job_end, e.amount, z.tz,
                       pg_catalog.date_trunc('month', e.job_start AT TIME ZONE z.tz) AS first_month,
                       pg_catalog.date_trunc('month', e.job_end AT TIME ZONE z.tz) AS last_month,
                       e.amount::float8 * 2 ^ (-pg_catalog.date_part('epoch',
                           (pg_catalog.date_trunc('month', e.job_end AT TIME ZONE z.tz) + interval '1 month')
                               AT TIME ZONE z.tz - e.job_end) / z.half_life) AS decayed
                FROM %s e, z
                WHERE e.kind = 'charge'
            )
            INSERT INTO @extschema@.charge_rollup (account, resource_id, unit, submitter, month, end_month, amount,
                                                   job_amount, decayed)
            SELECT s.account, s.resource_id, s.unit, s.submitter, s.month, s.end_month, sum(s.amount),
                   sum(s.job_amount), sum(s.decayed)
            FROM (
                SELECT e.account, e.resource_id, e.unit, e.submitter, e.first_month::date AS month,
                       e.last_month::date AS end_month, e.amount, e.amount AS job_amount, e.decayed
                FROM entries e
                WHERE e.first_month = e.last_month
                UNION ALL
                SELECT e.account, e.resource_id, e.unit, e.submitter, m.month::date, e.last_month::date,
                       e.amount * @extschema@.period_share(e.job_start, e.job_end, m.month AT TIME ZONE e.tz,
                                                           (m.month + interval '1 month') AT TIME ZONE e.tz),
                       CASE WHEN m.month = e.first_month THEN e.amount ELSE 0 END,
                       CASE WHEN m.month = e.first_month THEN e.decayed ELSE 0 END
                FROM entries e
                CROSS JOIN LATERAL pg_catalog.generate_series(e.first_month, e.last_month, interval '1 month') AS m(month)
                WHERE e.first_month <> e.last_month AND m.month < e.job_end AT TIME ZONE e.tz
            ) s
            GROUP BY s.account, s.resource_id, s.unit, s.submitter, s.month, s.end_month
            $q$, source)
    $$;
COMMENT ON FUNCTION @extschema@.rollup_insert_sql(text) IS
    'The INSERT statement adding the charge rollup rows of the ledger rows in a table or query';

-- The same for the consumption rollup. A job that crosses no boundary (almost all) gives
-- one row; one that runs across boundaries also a share before each of them.
CREATE FUNCTION @extschema@.consumption_rollup_insert_sql(source text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT pg_catalog.format($q$
            WITH z AS MATERIALIZED (
                SELECT @extschema@.site_timezone() AS tz
            ), entries AS (
                SELECT e.account, e.resource_id, e.job_start, e.job_end, e.amount, z.tz,
                       -- ended by: the first boundary at or after the end (a job of zero length:
                       -- after its start, where it counts)
                       @extschema@.regulation_boundary_after(
                           CASE WHEN e.job_end > e.job_start THEN (e.job_end AT TIME ZONE z.tz) - interval '1 microsecond'
                                ELSE e.job_start AT TIME ZONE z.tz END) AS ended_by,
                       @extschema@.regulation_boundary_after(e.job_start AT TIME ZONE z.tz) AS first_after_start
                FROM %s e, z
                WHERE e.kind = 'charge'
            )
            INSERT INTO @extschema@.consumption_rollup (account, resource_id, boundary, ended, running)
            SELECT s.account, s.resource_id, s.boundary, sum(s.ended), sum(s.running)
            FROM (
                SELECT e.account, e.resource_id, e.ended_by AS boundary, e.amount AS ended, 0 AS running
                FROM entries e
                UNION ALL
                -- the boundaries from the first after the start up to the one it ended by
                SELECT e.account, e.resource_id, b.boundary, 0,
                       e.amount * @extschema@.period_share(e.job_start, e.job_end, '-infinity',
                                                           b.boundary::timestamp AT TIME ZONE e.tz)
                FROM entries e
                CROSS JOIN LATERAL pg_catalog.generate_series(
                    pg_catalog.date_trunc('month', e.first_after_start::timestamp), e.ended_by::timestamp,
                    interval '1 month') AS m(month)
                CROSS JOIN LATERAL (VALUES ((m.month + interval '15 days')::date),
                                           (CASE WHEN pg_catalog.date_part('month', m.month) = 1
                                                 THEN m.month::date END)) AS b(boundary)
                WHERE e.first_after_start < e.ended_by
                  AND b.boundary >= e.first_after_start AND b.boundary < e.ended_by
            ) s
            GROUP BY s.account, s.resource_id, s.boundary
            $q$, source)
    $$;
COMMENT ON FUNCTION @extschema@.consumption_rollup_insert_sql(text) IS
    'The INSERT statement adding the consumption rollup rows of the ledger rows in a table or query';

-- The trigger runs those statements as static SQL, so that PL/pgSQL keeps their plans: a
-- loader inserting one job per statement does not plan them again for every job. Their text
-- is pasted in from the two *_insert_sql('new_entries') when the function is created.
DO $do$
BEGIN
    EXECUTE pg_catalog.format(
        'CREATE FUNCTION @extschema@.roll_up_charges() RETURNS trigger LANGUAGE plpgsql '
        'SET search_path = pg_catalog, pg_temp AS %L',
        pg_catalog.format(E'\n    BEGIN\n'
                          '        IF NOT EXISTS (SELECT 1 FROM new_entries e WHERE e.kind = ''charge'') THEN\n'
                          '            RETURN NULL;\n'
                          '        END IF;\n'
                          '%s;\n'
                          '%s;\n'
                          '        RETURN NULL;\n'
                          '    END\n    ', @extschema@.rollup_insert_sql('new_entries'),
                          @extschema@.consumption_rollup_insert_sql('new_entries')));
END
$do$;
COMMENT ON FUNCTION @extschema@.roll_up_charges() IS
    'Statement trigger of hpcacct.ledger: adds the charge and consumption rollup rows of the statement''s charges';
CREATE TRIGGER ledger_roll_up AFTER INSERT ON @extschema@.ledger
    REFERENCING NEW TABLE AS new_entries
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.roll_up_charges();

-- Recomputes the rollup from the ledger: after a change of the site's time zone or the
-- fair-share half-life, which its months and decay depend on.
CREATE FUNCTION @extschema@.rebuild_rollup() RETURNS bigint
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        rows_added bigint;
    BEGIN
        LOCK TABLE @extschema@.ledger IN SHARE MODE;  -- no charge is booked meanwhile
        PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('hpcacct.charge_rollup'));  -- no compaction meanwhile
        DELETE FROM @extschema@.fairshare_base;
        DELETE FROM @extschema@.usage_base;
        DELETE FROM @extschema@.charge_rollup;
        EXECUTE @extschema@.rollup_insert_sql('@extschema@.ledger');
        GET DIAGNOSTICS rows_added = ROW_COUNT;
        DELETE FROM @extschema@.consumption_rollup;
        EXECUTE @extschema@.consumption_rollup_insert_sql('@extschema@.ledger');
        RETURN rows_added;
    END
    $$;
COMMENT ON FUNCTION @extschema@.rebuild_rollup() IS
    'Recomputes hpcacct.charge_rollup and hpcacct.consumption_rollup from the ledger (automatic when the time zone '
    'or half-life changes); returns the rows of charge_rollup';

-- Merges the delta rows into one row per group and folds the months up to the one before
-- the current into fairshare_base (decayed sums) and usage_base (amounts without the
-- submitter), both recomputed each time. Exact (sums of the same numerics) and idempotent;
-- safe next to loaders (it moves only the rows it sees; rows added meanwhile stay unfolded
-- and are read as they are). Compactions wait for each other. Run it daily (pg_cron).
CREATE FUNCTION @extschema@.compact_rollup() RETURNS bigint
    LANGUAGE sql
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('hpcacct.charge_rollup'));
        WITH moved_consumption AS (
            DELETE FROM @extschema@.consumption_rollup
            RETURNING account, resource_id, boundary, ended, running
        ), merged_consumption AS (
            INSERT INTO @extschema@.consumption_rollup (account, resource_id, boundary, ended, running)
            SELECT account, resource_id, boundary, sum(ended), sum(running)
            FROM moved_consumption
            GROUP BY account, resource_id, boundary
        ), cfg AS MATERIALIZED (
            SELECT z.tz, (pg_catalog.date_trunc('month', pg_catalog.now() AT TIME ZONE z.tz) - interval '1 month')::date
                             AS through,
                   pg_catalog.date_part('epoch', @extschema@.fairshare_setting_value('half_life')::interval) AS half_life
            FROM (SELECT @extschema@.site_timezone() AS tz) z
        ), moved AS (
            DELETE FROM @extschema@.charge_rollup
            RETURNING account, resource_id, unit, submitter, month, end_month, amount, job_amount, decayed
        ), groups AS MATERIALIZED (
            SELECT account, resource_id, unit, submitter, month, end_month, sum(amount) AS amount,
                   sum(job_amount) AS job_amount, sum(decayed) AS decayed
            FROM moved
            GROUP BY account, resource_id, unit, submitter, month, end_month
        ), merged AS (
            INSERT INTO @extschema@.charge_rollup (account, resource_id, unit, submitter, month, end_month, amount,
                                                   job_amount, decayed, folded)
            SELECT g.account, g.resource_id, g.unit, g.submitter, g.month, g.end_month, g.amount, g.job_amount,
                   g.decayed, g.end_month <= cfg.through
            FROM groups g, cfg
            RETURNING 1
        ), old_base AS (
            DELETE FROM @extschema@.fairshare_base RETURNING 1
        ), new_base AS (
            INSERT INTO @extschema@.fairshare_base (account, resource_id, unit, submitter, through, decayed, job_amount)
            SELECT g.account, g.resource_id, g.unit, g.submitter, cfg.through,
                   sum(g.decayed * 2 ^ (-pg_catalog.date_part('epoch',
                                            (cfg.through + interval '1 month')::timestamp AT TIME ZONE cfg.tz
                                            - (g.end_month + interval '1 month')::timestamp AT TIME ZONE cfg.tz)
                                        / cfg.half_life)),
                   sum(g.job_amount)
            FROM groups g, cfg
            WHERE g.end_month <= cfg.through
            GROUP BY g.account, g.resource_id, g.unit, g.submitter, cfg.through
        ), old_usage_base AS (
            DELETE FROM @extschema@.usage_base RETURNING 1
        ), new_usage_base AS (
            INSERT INTO @extschema@.usage_base (account, resource_id, unit, month, through, amount)
            SELECT g.account, g.resource_id, g.unit, g.month, cfg.through, sum(g.amount)
            FROM groups g, cfg
            WHERE g.end_month <= cfg.through
            GROUP BY g.account, g.resource_id, g.unit, g.month, cfg.through
        )
        SELECT count(*) FROM merged
    $$;
COMMENT ON FUNCTION @extschema@.compact_rollup() IS
    'Merges the delta rows of the charge and consumption rollups into one per group (exact, idempotent) and folds '
    'past months into fairshare_base and usage_base; returns the rows left in charge_rollup';

-- Charges of the jobs that ended by `at`, per account, resource, submitter and month counted
-- in, for the months from_month to to_month: the rollup for the jobs that ended before the
-- month of `at`, the ledger (its job_end index) for those that ended in it. When no charge
-- of that month ends after `at` (a report of today, as portals ask), the rollup's rows of
-- that month are exactly those jobs and the ledger is not read. Without per_submitter
-- (submitter NULL), the months folded into usage_base are read from there when they all
-- ended before the month of `at`, and only the rollup rows not folded. Not grouped.
CREATE FUNCTION @extschema@.charges_ended_by(at timestamptz, from_month date, to_month date, per_submitter boolean)
    RETURNS TABLE (account text, resource_id bigint, unit text, submitter text, month date, amount numeric)
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        WITH z AS MATERIALIZED (
            SELECT t.tz, t.at_month,
                   NOT EXISTS (SELECT 1 FROM @extschema@.ledger l
                               WHERE l.kind = 'charge' AND l.job_end > $1
                                 AND l.job_end < (t.at_month + interval '1 month') AT TIME ZONE t.tz) AS month_complete,
                   -- one compaction wrote the base: the latest month folded is every row's
                   NOT $4 AND coalesce((SELECT max(b.through) FROM @extschema@.usage_base b) < t.at_month, true)
                       AS from_base
            FROM (SELECT s.tz, pg_catalog.date_trunc('month', $1 AT TIME ZONE s.tz) AS at_month
                  FROM (SELECT @extschema@.site_timezone() AS tz) s) t
        )
        SELECT b.account, b.resource_id, b.unit, NULL::text, b.month, b.amount
        FROM @extschema@.usage_base b, z
        WHERE z.from_base AND b.month BETWEEN $2 AND $3
        UNION ALL
        SELECT r.account, r.resource_id, r.unit, CASE WHEN $4 THEN r.submitter END, r.month, r.amount
        FROM @extschema@.charge_rollup r, z
        WHERE NOT z.from_base
          AND (r.end_month < z.at_month OR (z.month_complete AND r.end_month = z.at_month))
          AND r.month BETWEEN $2 AND $3
        UNION ALL
        -- the same rows as above, but only those not folded: a branch of its own, so that the
        -- planner can read them through the partial index charge_rollup_unfolded
        SELECT r.account, r.resource_id, r.unit, NULL, r.month, r.amount
        FROM @extschema@.charge_rollup r, z
        WHERE z.from_base AND NOT r.folded
          AND (r.end_month < z.at_month OR (z.month_complete AND r.end_month = z.at_month))
          AND r.month BETWEEN $2 AND $3
        UNION ALL
        SELECT l.account, l.resource_id, l.unit, CASE WHEN $4 THEN l.submitter END, m.month::date,
               l.amount * @extschema@.period_share(l.job_start, l.job_end, m.month AT TIME ZONE z.tz,
                                                   (m.month + interval '1 month') AT TIME ZONE z.tz)
        FROM @extschema@.ledger l, z
        CROSS JOIN LATERAL pg_catalog.generate_series(pg_catalog.date_trunc('month', l.job_start AT TIME ZONE z.tz),
                                                      z.at_month, interval '1 month') AS m(month)
        WHERE NOT z.month_complete
          AND l.kind = 'charge' AND l.job_end >= z.at_month AT TIME ZONE z.tz AND l.job_end <= $1
          AND (m.month < l.job_end AT TIME ZONE z.tz OR l.job_end = l.job_start)
          AND m.month BETWEEN $2 AND $3
    $$;
COMMENT ON FUNCTION @extschema@.charges_ended_by(timestamptz, date, date, boolean) IS
    'Charges of the jobs that ended by at, per account, resource, unit, submitter (or not: NULL) and month counted in '
    '(from_month to to_month), from the rollup (and usage_base) and the ledger''s latest month; rows to be summed';

-- Consumption of an account in a pool (by default, a cluster) up to an instant: charges
-- pro rata before it. Jobs that ended before the instant's month count whole (the rollup's
-- job_amount); the others, read from the ledger, by their share before the instant. The sum
-- is exactly the job-by-job one (numeric addition is exact, a whole share is exactly 1).
CREATE OR REPLACE FUNCTION @extschema@.consumption_before(account text, pool text, before timestamptz)
    RETURNS numeric
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        WITH z AS MATERIALIZED (
            SELECT t.tz, pg_catalog.date_trunc('month', $3 AT TIME ZONE t.tz) AS month
            FROM (SELECT @extschema@.site_timezone() AS tz) t
        )
        SELECT coalesce((SELECT sum(c.job_amount)
                         FROM @extschema@.charge_rollup c
                         JOIN @extschema@.resource r USING (resource_id), z
                         WHERE c.account = $1 AND coalesce(r.pool, r.cluster) = $2 AND c.end_month < z.month), 0)
             + coalesce((SELECT sum(l.amount * @extschema@.period_share(l.job_start, l.job_end, '-infinity', $3))
                         FROM @extschema@.ledger l
                         JOIN @extschema@.resource r USING (resource_id), z
                         WHERE l.kind = 'charge' AND l.account = $1 AND coalesce(r.pool, r.cluster) = $2
                           AND l.job_end >= z.month AT TIME ZONE z.tz AND l.job_start < $3), 0)
    $$;
COMMENT ON FUNCTION @extschema@.consumption_before(text, text, timestamptz) IS
    'Charges of an account in a pool (or cluster) for the part of its jobs that ran before an instant';

-- Months depend on the site's time zone, decayed sums on the fair-share half-life: a row
-- trigger on each settings table rebuilds the rollup when the row of the setting named by
-- its argument is added, changed or removed. (Not dumped: a restore of the ledger rolls its
-- rows up again, and a restored time zone rebuilds them.)
CREATE FUNCTION @extschema@.rebuild_rollup_trigger() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        setting constant text := TG_ARGV[0];
        changed boolean;
    BEGIN
        changed := CASE TG_OP
                       WHEN 'INSERT' THEN NEW.name = setting
                       WHEN 'DELETE' THEN OLD.name = setting
                       ELSE setting IN (NEW.name, OLD.name) AND NEW IS DISTINCT FROM OLD
                   END;
        IF changed THEN
            PERFORM @extschema@.rebuild_rollup();
        END IF;
        RETURN NULL;
    END
    $$;
COMMENT ON FUNCTION @extschema@.rebuild_rollup_trigger() IS
    'Trigger of a settings table: rebuilds the charge rollup when the setting named by its argument changes';
CREATE TRIGGER setting_rebuilds_rollup AFTER INSERT OR UPDATE OR DELETE ON @extschema@.setting
    FOR EACH ROW EXECUTE FUNCTION @extschema@.rebuild_rollup_trigger('timezone');
-- the rollup of the charges booked so far
SELECT @extschema@.rebuild_rollup();

-- regulation_report: set-based, not allocation_status() per account and month; consumption
-- from the consumption rollup
CREATE OR REPLACE VIEW @extschema@.regulation_report AS
    WITH cfg AS MATERIALIZED (
        SELECT (SELECT @extschema@.site_today()) AS today
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
        -- The instants consumption is taken before, numbered j = 1, 2, ... in order: 1 January
        -- and the 16th (the day after the 15th) of every month of the report's years, 13 a year
        -- (the boundaries of consumption_rollup).
        SELECT min(m.year) AS first_year, (max(m.year) - min(m.year) + 1) * 13 AS count
        FROM months m
    ), status AS (  -- allocation_status() of each row: the events
        SELECT m.account, m.machine, m.month, m.as_of, m.monthly_threshold,
               -- the numbers of the day after as_of and of 1 January
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
    ), before AS (
        -- consumption_before(account, machine, instant j) for every j, from the consumption
        -- rollup, summed exactly as consumption_before() sums: a job ended by instant j counts
        -- its amount from there on ("whole", j with the rows of earlier boundaries), a job
        -- running across instant j its share before it ("part")
        SELECT c.account, c.machine, greatest(c.j, 1) AS j, sum(c.ended) AS whole,
               sum(c.running) FILTER (WHERE c.j >= 1) AS part
        FROM (SELECT c.account, coalesce(r.pool, r.cluster) AS machine, c.ended, c.running,
                     -- the boundary's number (1 January: k = 0; the 16th of month k)
                     (pg_catalog.date_part('year', c.boundary)::integer - b.first_year) * 13 + 1
                     + CASE WHEN pg_catalog.date_part('day', c.boundary) = 1 THEN 0
                            ELSE pg_catalog.date_part('month', c.boundary)::integer END AS j
              FROM @extschema@.consumption_rollup c
              JOIN @extschema@.resource r USING (resource_id)
              JOIN @extschema@.machine_setting s ON s.machine = coalesce(r.pool, r.cluster)
              CROSS JOIN bounds b) c
        WHERE c.j <= (SELECT b.count FROM bounds b)
        GROUP BY 1, 2, 3
    ), grid AS (  -- consumption_before(account, machine, instant j) for every account, machine and j
        SELECT p.account, p.machine, j.j,
               coalesce(sum(bf.whole) OVER (PARTITION BY p.account, p.machine ORDER BY j.j), 0)
               + coalesce(bf.part, 0) AS amount
        FROM (SELECT DISTINCT m.account, m.machine FROM months m) p
        CROSS JOIN bounds b
        CROSS JOIN LATERAL pg_catalog.generate_series(1, b.count) AS j(j)
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

-- The same charges from the rollup: per resource, account, submitter (unless not
-- per_submitter: NULL, and fewer rows to read) and month of each pool's allocation year,
-- jobs that ended by `at` (what the usage reports read).
CREATE FUNCTION @extschema@.year_usage(for_year integer, at timestamptz, per_submitter boolean)
    RETURNS TABLE (pool text, unit text, cluster text, partition text, account text, submitter text,
                   rate float8, month date, amount numeric, year integer, first_day date, last_day date,
                   elapsed interval, length interval, state text)
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        WITH years AS MATERIALIZED (
            SELECT p.pool, y.*
            FROM (SELECT DISTINCT coalesce(r.pool, r.cluster) AS pool FROM @extschema@.resource r) p
            CROSS JOIN LATERAL @extschema@.allocation_year(p.pool, $1, $2) y
        )
        SELECT y.pool, c.unit, r.cluster, r.partition, c.account, c.submitter, r.rate, c.month, c.amount,
               y.year, y.first_day, y.last_day, y.elapsed, y.length, y.state
        FROM @extschema@.charges_ended_by($2, (SELECT min(first_day) FROM years),
                                          (SELECT max(last_day) FROM years), $3) c
        JOIN @extschema@.resource r USING (resource_id)
        JOIN years y ON y.pool = coalesce(r.pool, r.cluster)
        WHERE c.month BETWEEN y.first_day AND y.last_day
    $$;
COMMENT ON FUNCTION @extschema@.year_usage(integer, timestamptz, boolean) IS
    'Charges per resource, account, submitter (or not: NULL) and month of each pool''s allocation year (named, or '
    'containing at), jobs ended by at, from the charge rollup; the building block of the usage reports';
-- Usage by resource (cluster and partition) for the allocation year.
CREATE OR REPLACE FUNCTION @extschema@.usage_by_resource(for_year integer DEFAULT NULL, at timestamptz DEFAULT pg_catalog.now())
    RETURNS TABLE (pool text, unit text, cluster text, partition text, year integer, first_day date, last_day date,
                   equivalent_hours numeric, usage numeric, usage_years numeric,
                   projected_usage numeric, projected_years numeric)
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT u.pool, u.unit, u.cluster, u.partition, u.year, u.first_day, u.last_day,
               round(u.hours, 6), round(u.usage, 6), round(u.usage / h.hours, 6),
               round(u.projected, 6), round(u.projected / h.hours, 6)
        FROM (
            SELECT c.pool, c.unit, c.cluster, c.partition, c.year AS year, c.first_day, c.last_day,
                   sum(c.usage / nullif(c.rate, 0)::numeric) AS hours, sum(c.usage) AS usage,
                   CASE WHEN c.state = 'current' AND c.elapsed > interval '0'
                        THEN sum(c.usage) * pg_catalog.date_part('epoch', c.length)::numeric
                             / pg_catalog.date_part('epoch', c.elapsed)::numeric END AS projected
            FROM (  -- per rate first: one division per rate
                SELECT y.pool, y.unit, y.cluster, y.partition, y.rate, y.year, y.first_day, y.last_day, y.state,
                       y.elapsed, y.length, sum(y.amount) AS usage
                FROM @extschema@.year_usage($1, $2, false) y
                GROUP BY y.pool, y.unit, y.cluster, y.partition, y.rate, y.year, y.first_day, y.last_day, y.state,
                         y.elapsed, y.length
            ) c
            GROUP BY c.pool, c.unit, c.cluster, c.partition, c.year, c.first_day, c.last_day, c.state,
                     c.elapsed, c.length
            HAVING sum(c.usage) <> 0  -- only reversed charges: nothing to show
        ) u
        CROSS JOIN (SELECT (SELECT @extschema@.fairshare_setting_value('hours_per_year'))::numeric AS hours) h
    $$;
COMMENT ON FUNCTION @extschema@.usage_by_resource(integer, timestamptz) IS
    'Usage per cluster and partition in each pool''s allocation year (named, or containing at) up to at: '
    'equivalent-hours (unweighted), usage in the unit and in unit-years, projection for the current year';
-- Usage by account (project) and pool for the allocation year, against the allocation.
CREATE OR REPLACE FUNCTION @extschema@.usage_by_account(for_year integer DEFAULT NULL, at timestamptz DEFAULT pg_catalog.now())
    RETURNS TABLE (pool text, unit text, account text, year integer, first_day date, last_day date,
                   allocation numeric, allocation_years numeric, usage numeric, usage_years numeric,
                   utilization_pct numeric, projected_usage numeric, projected_years numeric,
                   projected_utilization_pct numeric, overuse numeric)
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        WITH used AS (
            SELECT c.pool, c.unit, c.account, sum(c.amount) AS usage
            FROM @extschema@.year_usage($1, $2, false) c
            GROUP BY c.pool, c.unit, c.account
        ), acct AS (
            SELECT coalesce(a.pool, u.pool) AS pool, coalesce(a.unit, u.unit) AS unit,
                   coalesce(a.account, u.account) AS account,
                   coalesce(a.allocation, 0) AS allocation, coalesce(u.usage, 0) AS usage
            FROM @extschema@.year_allocations($1, $2) a
            FULL JOIN used u ON u.pool = a.pool AND u.unit = a.unit AND u.account = a.account
            WHERE a.pool IS NOT NULL OR u.usage <> 0  -- an allocation, or usage that was not all reversed
        ), years AS MATERIALIZED (
            SELECT p.pool, y.*
            FROM (SELECT DISTINCT r.pool FROM acct r) p
            CROSS JOIN LATERAL @extschema@.allocation_year(p.pool, $1, $2) y
        )
        SELECT r.pool, r.unit, r.account, y.year, y.first_day, y.last_day,
               round(r.allocation, 6), round(r.allocation / h.hours, 6),
               round(r.usage, 6), round(r.usage / h.hours, 6),
               CASE WHEN r.allocation > 0 THEN round(r.usage * 100 / r.allocation, 2) END,
               round(p.projected, 6), round(p.projected / h.hours, 6),
               CASE WHEN r.allocation > 0 THEN round(p.projected * 100 / r.allocation, 2) END,
               round(greatest(r.usage - greatest(r.allocation, 0), 0), 6)
        FROM acct r
        JOIN years y ON y.pool = r.pool
        CROSS JOIN LATERAL (
            SELECT CASE WHEN y.state = 'current' AND y.elapsed > interval '0'
                        THEN r.usage * pg_catalog.date_part('epoch', y.length)::numeric
                             / pg_catalog.date_part('epoch', y.elapsed)::numeric END AS projected
        ) p
        CROSS JOIN (SELECT (SELECT @extschema@.fairshare_setting_value('hours_per_year'))::numeric AS hours) h
    $$;
COMMENT ON FUNCTION @extschema@.usage_by_account(integer, timestamptz) IS
    'Allocation and usage per account and pool in the allocation year (named, or containing at) up to at: '
    'unit and unit-years, utilization %, projection and projected utilization for the current year, overuse';
-- Usage by submitter inside each account and pool for the allocation year.
CREATE OR REPLACE FUNCTION @extschema@.usage_by_submitter(for_year integer DEFAULT NULL, at timestamptz DEFAULT pg_catalog.now())
    RETURNS TABLE (pool text, unit text, account text, submitter text, year integer, first_day date, last_day date,
                   usage numeric, usage_years numeric, account_pct numeric,
                   projected_usage numeric, projected_years numeric)
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT u.pool, u.unit, u.account, u.submitter, u.year, u.first_day, u.last_day,
               round(u.usage, 6), round(u.usage / h.hours, 6),
               round(u.usage * 100 / nullif(sum(u.usage) OVER (PARTITION BY u.pool, u.unit, u.account), 0), 2),
               round(u.projected, 6), round(u.projected / h.hours, 6)
        FROM (
            SELECT c.pool, c.unit, c.account, c.submitter, c.year AS year, c.first_day, c.last_day,
                   sum(c.amount) AS usage,
                   CASE WHEN c.state = 'current' AND c.elapsed > interval '0'
                        THEN sum(c.amount) * pg_catalog.date_part('epoch', c.length)::numeric
                             / pg_catalog.date_part('epoch', c.elapsed)::numeric END AS projected
            FROM @extschema@.year_usage($1, $2, true) c
            GROUP BY c.pool, c.unit, c.account, c.submitter, c.year, c.first_day, c.last_day, c.state,
                     c.elapsed, c.length
            HAVING sum(c.amount) <> 0
        ) u
        CROSS JOIN (SELECT (SELECT @extschema@.fairshare_setting_value('hours_per_year'))::numeric AS hours) h
    $$;
COMMENT ON FUNCTION @extschema@.usage_by_submitter(integer, timestamptz) IS
    'Usage per submitter (the job''s user) inside each account and pool in the allocation year up to at: '
    'unit, unit-years, share of the account''s usage, projection for the current year';
-- Monthly breakdown: usage per calendar month (site time zone) of the allocation year up to
-- `at`, per resource, account and submitter (group further as needed).
CREATE OR REPLACE FUNCTION @extschema@.usage_by_month(for_year integer DEFAULT NULL, at timestamptz DEFAULT pg_catalog.now())
    RETURNS TABLE (pool text, unit text, cluster text, partition text, account text, submitter text,
                   year integer, month date, usage numeric, usage_years numeric)
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT m.pool, m.unit, m.cluster, m.partition, m.account, m.submitter, m.year, m.month,
               round(m.usage, 6), round(m.usage / h.hours, 6)
        FROM (
            SELECT c.pool, c.unit, c.cluster, c.partition, c.account, c.submitter, c.year, c.month,
                   sum(c.amount) AS usage
            FROM @extschema@.year_usage($1, $2, true) c
            GROUP BY c.pool, c.unit, c.cluster, c.partition, c.account, c.submitter, c.year, c.month
            HAVING sum(c.amount) <> 0
        ) m
        CROSS JOIN (SELECT (SELECT @extschema@.fairshare_setting_value('hours_per_year'))::numeric AS hours) h
    $$;
COMMENT ON FUNCTION @extschema@.usage_by_month(integer, timestamptz) IS
    'Usage per calendar month (site time zone) of the allocation year up to at, per pool, resource, account '
    'and submitter, pro rata by wall-clock time';
-- Per pool (and unit) and account, and per user inside each account:
--   share       = account's allocation valid at `at` / the pool's total (users: the account's
--                 share divided by their shares, equal by default)
--   usage       = decayed usage at `at` (setting decay: half_life or interval); each job's
--                 net charge dated at its end, jobs that ended after `at` not counted
--   norm_usage  = usage / the pool's total decayed usage
--   factor      = 2^(-norm_usage / share), times exhausted_factor when the account's usage in
--                 the allocation year containing `at` has reached its allocation for it
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
            SELECT l.cluster AS pool, l.unit, l.account, greatest(sum(l.amount), 0) AS allocation
            FROM @extschema@.ledger l, cfg
            WHERE l.kind <> 'charge' AND l.cluster IS NOT NULL AND cfg.day BETWEEN l.valid_from AND l.valid_until
            GROUP BY l.cluster, l.unit, l.account
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
-- The rollup's decayed sums depend on the half-life: changing it rebuilds them.
CREATE TRIGGER fairshare_setting_rebuilds_rollup AFTER INSERT OR UPDATE OR DELETE ON @extschema@.fairshare_setting
    FOR EACH ROW EXECUTE FUNCTION @extschema@.rebuild_rollup_trigger('half_life');

CREATE OR REPLACE FUNCTION @extschema@.window_quota_usage(
        account text,
        at date DEFAULT @extschema@.site_today())
    RETURNS TABLE (account text, period_start date, period_end date, month date, state text,
                   monthly float8, remaining_prev float8, consumed_current float8,
                   consumable_pct float8, consumable float8, cluster text, unit text)
    LANGUAGE sql STABLE STRICT PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        WITH period AS (
            SELECT p.account, p.period_start, p.period_end, p.cluster, p.unit
            FROM @extschema@.quota_period p
            WHERE p.account = $1
            ORDER BY CASE WHEN $2 BETWEEN p.period_start AND p.period_end THEN 0
                          WHEN p.period_end < $2 THEN 1 ELSE 2 END,
                     CASE WHEN p.period_end < $2 THEN $2 - p.period_end ELSE p.period_start - $2 END
            LIMIT 1
        ), consumed AS (
            SELECT c.month, sum(c.amount) AS amount
            FROM period p
            JOIN @extschema@.charge_rollup c
              ON c.account = $1 AND c.unit = p.unit
             AND c.month >= p.period_start AND c.month <= p.period_end
             AND c.month <= $2
            JOIN @extschema@.resource r
              ON r.resource_id = c.resource_id AND (p.cluster IS NULL OR r.cluster = p.cluster)
            GROUP BY c.month
        )
        SELECT p.account, p.period_start, p.period_end, pg_catalog.date_trunc('month', $2::timestamp)::date,
               (w.q).state, (w.q).monthly, (w.q).remaining_prev, (w.q).consumed_current,
               (w.q).consumable_pct, (w.q).consumable, p.cluster, p.unit
        FROM period p
        CROSS JOIN LATERAL (
            SELECT @extschema@.window_quota(m.month, coalesce(a.allowance, 0), coalesce(c.amount, 0)::float8, $2) AS q
            FROM (SELECT g.month::date AS month
                  FROM pg_catalog.generate_series(p.period_start::timestamp, p.period_end::timestamp,
                                                  interval '1 month') AS g(month)) m
            LEFT JOIN @extschema@.monthly_allowance a ON a.account = p.account AND a.month = m.month
            LEFT JOIN consumed c ON c.month = m.month
        ) w
    $$;
COMMENT ON FUNCTION @extschema@.window_quota_usage(text, date) IS
    'r_wlm_usage -q of an account for the month containing at (default: today in the site time zone): '
    'period, state, monthly, remaining of previous month, consumed, consumable %, consumable';

CREATE OR REPLACE FUNCTION @extschema@.balance(account text, at date DEFAULT @extschema@.site_today())
    RETURNS numeric
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        WITH q AS (
            SELECT @extschema@.quarter_start(at) AS quarter, @extschema@.setting_value('bank_unit') AS unit
        )
        SELECT round(coalesce((SELECT sum(l.amount) FROM @extschema@.ledger l, q
                               WHERE l.account = balance.account AND l.kind IN ('deposit', 'transfer', 'refund')
                                 AND l.unit = q.unit
                                 AND l.valid_from >= q.quarter AND l.valid_from < q.quarter + interval '3 months'), 0)
                   - coalesce((SELECT sum(c.amount) FROM @extschema@.charge_rollup c, q
                               WHERE c.account = balance.account AND c.unit = q.unit
                                 AND c.month >= q.quarter AND c.month < q.quarter + interval '3 months'), 0), 6)
    $$;
COMMENT ON FUNCTION @extschema@.balance(text, date) IS
    'Balance of an account in the quarter containing at (default today): deposits + transfers + refunds - charges';
CREATE OR REPLACE VIEW @extschema@.quarter_balances AS
    WITH entries AS (  -- bank_entry, with the charges from the rollup
        SELECT l.account, l.kind, @extschema@.quarter_start(l.valid_from) AS quarter, l.amount
        FROM @extschema@.ledger l
        WHERE l.kind IN ('deposit', 'transfer', 'refund')
          AND l.unit = (SELECT @extschema@.setting_value('bank_unit'))
        UNION ALL
        SELECT c.account, 'charge', @extschema@.quarter_start(c.month), sum(c.amount)
        FROM @extschema@.charge_rollup c
        WHERE c.unit = (SELECT @extschema@.setting_value('bank_unit'))
        GROUP BY c.account, @extschema@.quarter_start(c.month)
    ), per_quarter AS (
        SELECT e.account, e.quarter,
               @extschema@.quarter_balance(e.kind, e.quarter, e.amount::float8, e.quarter) AS b
        FROM entries e
        GROUP BY e.account, e.quarter
    )
    SELECT p.account, a.kind AS account_kind, p.quarter,
           (p.b).deposits, (p.b).charges, (p.b).transfers, (p.b).refunds, (p.b).balance,
           CASE
               WHEN a.deleted_in IS NOT NULL AND a.deleted_in <= p.quarter THEN 'deleted'
               WHEN bool_or((p.b).deposits + (p.b).transfers > 0)
                        OVER (PARTITION BY p.account ORDER BY p.quarter DESC ROWS UNBOUNDED PRECEDING)
                   THEN 'active'
               ELSE 'expired'
           END AS state
    FROM per_quarter p
    JOIN @extschema@.account a ON a.name = p.account;
COMMENT ON VIEW @extschema@.quarter_balances IS
    'Per account and quarter: deposits, charges, transfers, refunds, balance, state (active/expired/deleted)';
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

SELECT @extschema@.protect_table('@extschema@.charge_rollup');
SELECT @extschema@.protect_table('@extschema@.consumption_rollup');
SELECT @extschema@.protect_table('@extschema@.fairshare_base');
SELECT @extschema@.protect_table('@extschema@.usage_base');
ALTER FUNCTION @extschema@.charge_jobs() SECURITY DEFINER;  -- as 90_privileges.sql: CREATE OR REPLACE reset it
ALTER VIEW @extschema@.quarter_balances SET (security_invoker = true);
REVOKE EXECUTE ON FUNCTION @extschema@.rebuild_rollup(), @extschema@.compact_rollup() FROM PUBLIC;
-- Sites that ran setup_roles() before: its roles get the new table and functions as
-- setup_roles() grants them (portal reports read the rollup, administrators write it).
DO $do$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'hpcacct_admin') THEN
        GRANT SELECT, INSERT, UPDATE, DELETE ON @extschema@.charge_rollup, @extschema@.consumption_rollup,
            @extschema@.fairshare_base, @extschema@.usage_base TO hpcacct_admin;
        GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA @extschema@ TO hpcacct_admin;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'hpcacct_portal') THEN
        GRANT SELECT ON @extschema@.charge_rollup, @extschema@.consumption_rollup, @extschema@.fairshare_base,
            @extschema@.usage_base TO hpcacct_portal;
    END IF;
END
$do$;
-- end of perf-ingest-reports

-- ---- settings read through PL/pgSQL (plans kept for the session)
CREATE OR REPLACE FUNCTION @extschema@.setting_value(name text) RETURNS text
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$ BEGIN RETURN (SELECT s.value FROM @extschema@.settings s WHERE s.name = setting_value.name); END $$;
CREATE OR REPLACE FUNCTION @extschema@.site_timezone() RETURNS text
    LANGUAGE plpgsql STABLE PARALLEL SAFE  -- plan kept for the session, as setting_value()'s
    SET search_path = pg_catalog, pg_temp
    AS $$ BEGIN RETURN @extschema@.setting_value('timezone'); END $$;
CREATE OR REPLACE FUNCTION @extschema@.fairshare_setting_value(name text) RETURNS text
    LANGUAGE plpgsql STABLE PARALLEL SAFE  -- plan kept for the session, as setting_value()'s
    SET search_path = pg_catalog, pg_temp
    AS $$ BEGIN RETURN (SELECT s.value FROM @extschema@.fairshare_settings s WHERE s.name = $1); END $$;

-- ---- the time zone's description: an unset timezone follows the TimeZone a session starts with
CREATE OR REPLACE FUNCTION @extschema@.setting_catalog()
    RETURNS TABLE (name text, default_value text, description text)
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        VALUES ('timezone', NULL::text,
                'Time zone of the site''s days, months and quarters (default: the TimeZone a session starts with, '
                'which a client can send when it connects: set it)'),
               ('bank_unit', 'NPL', 'Unit of the quarterly bank (HLRN): entries in other units do not count'),
               ('personal_allotment', '2500',
                'Credits a personal account is topped up to per quarter (HLRN: 2500 NPL; at most double per account)')
    $$;
