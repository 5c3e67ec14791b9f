-- hpcacct 0.2 -> 0.3: performance (issue 7). Every change here is also in sql/install/.
\echo Use "ALTER EXTENSION hpcacct UPDATE TO '0.3'" to load this file. \quit
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
    decayed     float8 NOT NULL
);
CREATE INDEX charge_rollup_account ON @extschema@.charge_rollup (account, month);
COMMENT ON TABLE @extschema@.charge_rollup IS
    'Charges (and reversals) summed per account, resource, unit, submitter, month counted in and month ended in; '
    'maintained with the ledger, derived from it';
COMMENT ON COLUMN @extschema@.charge_rollup.month IS
    'First day of the month (site time zone) the amount counts in: charges are split pro rata by wall-clock time';
COMMENT ON COLUMN @extschema@.charge_rollup.end_month IS 'First day of the month (site time zone) the jobs ended in';
COMMENT ON COLUMN @extschema@.charge_rollup.decayed IS
    'Sum of amount x 2^(-(end of end_month - job_end) / half_life) of the jobs, on their first month''s row: '
    'fairshare() scales it to any later instant';

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
            INSERT INTO @extschema@.charge_rollup (account, resource_id, unit, submitter, month, end_month, amount, decayed)
            SELECT s.account, s.resource_id, s.unit, s.submitter, s.month, s.end_month, sum(s.amount), sum(s.decayed)
            FROM (
                SELECT e.account, e.resource_id, e.unit, e.submitter, e.first_month::date AS month,
                       e.last_month::date AS end_month, e.amount, e.decayed
                FROM entries e
                WHERE e.first_month = e.last_month
                UNION ALL
                SELECT e.account, e.resource_id, e.unit, e.submitter, m.month::date, e.last_month::date,
                       e.amount * @extschema@.period_share(e.job_start, e.job_end, m.month AT TIME ZONE e.tz,
                                                           (m.month + interval '1 month') AT TIME ZONE e.tz),
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

CREATE FUNCTION @extschema@.roll_up_charges() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        EXECUTE @extschema@.rollup_insert_sql('new_entries');
        RETURN NULL;
    END
    $$;
COMMENT ON FUNCTION @extschema@.roll_up_charges() IS
    'Statement trigger of hpcacct.ledger: adds the rollup rows of the statement''s charges';
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
        DELETE FROM @extschema@.charge_rollup;
        EXECUTE @extschema@.rollup_insert_sql('@extschema@.ledger');
        GET DIAGNOSTICS rows_added = ROW_COUNT;
        RETURN rows_added;
    END
    $$;
COMMENT ON FUNCTION @extschema@.rebuild_rollup() IS
    'Recomputes hpcacct.charge_rollup from the ledger (automatic when the time zone or half-life changes); '
    'returns its rows';

-- Merges the delta rows into one row per group. Exact (sums of the same numerics) and
-- idempotent; safe next to loaders (it moves only the rows it sees). Run it daily (pg_cron).
CREATE FUNCTION @extschema@.compact_rollup() RETURNS bigint
    LANGUAGE sql
    SET search_path = pg_catalog, pg_temp
    AS $$
        WITH moved AS (
            DELETE FROM @extschema@.charge_rollup
            RETURNING account, resource_id, unit, submitter, month, end_month, amount, decayed
        ), merged AS (
            INSERT INTO @extschema@.charge_rollup (account, resource_id, unit, submitter, month, end_month, amount, decayed)
            SELECT account, resource_id, unit, submitter, month, end_month, sum(amount), sum(decayed)
            FROM moved
            GROUP BY account, resource_id, unit, submitter, month, end_month
            RETURNING 1
        )
        SELECT count(*) FROM merged
    $$;
COMMENT ON FUNCTION @extschema@.compact_rollup() IS
    'Merges the charge rollup''s delta rows into one per group (exact, idempotent); returns the rows left';

-- Charges of the jobs that ended by `at`, per account, resource, submitter and month counted
-- in, for the months from_month to to_month: the rollup for the jobs that ended before the
-- month of `at`, the ledger (its job_end index) for those that ended in it. Not grouped.
CREATE FUNCTION @extschema@.charges_ended_by(at timestamptz, from_month date, to_month date)
    RETURNS TABLE (account text, resource_id bigint, unit text, submitter text, month date, amount numeric)
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        WITH z AS MATERIALIZED (
            SELECT t.tz, pg_catalog.date_trunc('month', $1 AT TIME ZONE t.tz) AS at_month
            FROM (SELECT @extschema@.site_timezone() AS tz) t
        )
        SELECT r.account, r.resource_id, r.unit, r.submitter, r.month, r.amount
        FROM @extschema@.charge_rollup r, z
        WHERE r.end_month < z.at_month AND r.month BETWEEN $2 AND $3
        UNION ALL
        SELECT l.account, l.resource_id, l.unit, l.submitter, m.month::date,
               l.amount * @extschema@.period_share(l.job_start, l.job_end, m.month AT TIME ZONE z.tz,
                                                   (m.month + interval '1 month') AT TIME ZONE z.tz)
        FROM @extschema@.ledger l, z
        CROSS JOIN LATERAL pg_catalog.generate_series(pg_catalog.date_trunc('month', l.job_start AT TIME ZONE z.tz),
                                                      z.at_month, interval '1 month') AS m(month)
        WHERE l.kind = 'charge' AND l.job_end >= z.at_month AT TIME ZONE z.tz AND l.job_end <= $1
          AND (m.month < l.job_end AT TIME ZONE z.tz OR l.job_end = l.job_start)
          AND m.month BETWEEN $2 AND $3
    $$;
COMMENT ON FUNCTION @extschema@.charges_ended_by(timestamptz, date, date) IS
    'Charges of the jobs that ended by at, per account, resource, unit, submitter and month counted in '
    '(from_month to to_month), from the rollup and the ledger''s latest month; rows to be summed';

-- Months depend on the site's time zone: changing it rebuilds the rollup. (Not dumped: a
-- restore of the ledger rolls its rows up again, and a restored time zone rebuilds them.)
CREATE FUNCTION @extschema@.rebuild_rollup_trigger() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM @extschema@.rebuild_rollup();
        RETURN NULL;
    END
    $$;
COMMENT ON FUNCTION @extschema@.rebuild_rollup_trigger() IS
    'Trigger: rebuilds the charge rollup after a change of a setting it depends on';
CREATE TRIGGER setting_insert_rebuilds_rollup AFTER INSERT ON @extschema@.setting
    FOR EACH ROW WHEN (NEW.name = 'timezone') EXECUTE FUNCTION @extschema@.rebuild_rollup_trigger();
CREATE TRIGGER setting_update_rebuilds_rollup AFTER UPDATE ON @extschema@.setting
    FOR EACH ROW WHEN ('timezone' IN (NEW.name, OLD.name) AND NEW IS DISTINCT FROM OLD)
    EXECUTE FUNCTION @extschema@.rebuild_rollup_trigger();
CREATE TRIGGER setting_delete_rebuilds_rollup AFTER DELETE ON @extschema@.setting
    FOR EACH ROW WHEN (OLD.name = 'timezone') EXECUTE FUNCTION @extschema@.rebuild_rollup_trigger();
-- the rollup of the charges booked so far
SELECT @extschema@.rebuild_rollup();

CREATE OR REPLACE FUNCTION @extschema@.year_usage(for_year integer, at timestamptz)
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
                                          (SELECT max(last_day) FROM years)) c
        JOIN @extschema@.resource r USING (resource_id)
        JOIN years y ON y.pool = coalesce(r.pool, r.cluster)
        WHERE c.month BETWEEN y.first_day AND y.last_day
    $$;
COMMENT ON FUNCTION @extschema@.year_usage(integer, timestamptz) IS
    'Charges per resource, account, submitter and month of each pool''s allocation year (named, or containing at), '
    'jobs ended by at, from the charge rollup; the building block of the usage reports';
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
                   sum(c.amount / nullif(c.rate, 0)::numeric) AS hours, sum(c.amount) AS usage,
                   CASE WHEN c.state = 'current' AND c.elapsed > interval '0'
                        THEN sum(c.amount) * pg_catalog.date_part('epoch', c.length)::numeric
                             / pg_catalog.date_part('epoch', c.elapsed)::numeric END AS projected
            FROM @extschema@.year_usage($1, $2) c
            GROUP BY c.pool, c.unit, c.cluster, c.partition, c.year, c.first_day, c.last_day, c.state,
                     c.elapsed, c.length
            HAVING sum(c.amount) <> 0  -- only reversed charges: nothing to show
        ) u
        CROSS JOIN (SELECT (SELECT @extschema@.fairshare_setting_value('hours_per_year'))::numeric AS hours) h
    $$;
COMMENT ON FUNCTION @extschema@.usage_by_resource(integer, timestamptz) IS
    'Usage per cluster and partition in each pool''s allocation year (named, or containing at) up to at: '
    'equivalent-hours (unweighted), usage in the unit and in unit-years, projection for the current year';
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
            FROM @extschema@.year_usage($1, $2) c
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
            FROM @extschema@.year_usage($1, $2) c
            GROUP BY c.pool, c.unit, c.account, c.submitter, c.year, c.first_day, c.last_day, c.state,
                     c.elapsed, c.length
            HAVING sum(c.amount) <> 0
        ) u
        CROSS JOIN (SELECT (SELECT @extschema@.fairshare_setting_value('hours_per_year'))::numeric AS hours) h
    $$;
COMMENT ON FUNCTION @extschema@.usage_by_submitter(integer, timestamptz) IS
    'Usage per submitter (the job''s user) inside each account and pool in the allocation year up to at: '
    'unit, unit-years, share of the account''s usage, projection for the current year';
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
            FROM @extschema@.year_usage($1, $2) c
            GROUP BY c.pool, c.unit, c.cluster, c.partition, c.account, c.submitter, c.year, c.month
            HAVING sum(c.amount) <> 0
        ) m
        CROSS JOIN (SELECT (SELECT @extschema@.fairshare_setting_value('hours_per_year'))::numeric AS hours) h
    $$;
COMMENT ON FUNCTION @extschema@.usage_by_month(integer, timestamptz) IS
    'Usage per calendar month (site time zone) of the allocation year up to at, per pool, resource, account '
    'and submitter, pro rata by wall-clock time';
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
        ), factors AS (
            -- half-life: how much the rollup's decayed sums of each month decay until `at`
            SELECT m.month::date AS end_month,
                   2 ^ (-pg_catalog.date_part('epoch', cfg.at - (m.month + interval '1 month') AT TIME ZONE cfg.tz)
                        / pg_catalog.date_part('epoch', cfg.half_life)) AS factor
            FROM cfg
            CROSS JOIN LATERAL pg_catalog.generate_series(
                (SELECT min(c.end_month) FROM @extschema@.charge_rollup c), cfg.at_month - interval '1 month',
                interval '1 month') AS m(month)
            WHERE cfg.form = 'half_life'
        ), alloc AS (
            SELECT l.cluster AS pool, l.unit, l.account, greatest(sum(l.amount), 0) AS allocation
            FROM @extschema@.ledger l, cfg
            WHERE l.kind <> 'charge' AND l.cluster IS NOT NULL AND cfg.day BETWEEN l.valid_from AND l.valid_until
            GROUP BY l.cluster, l.unit, l.account
        ), jobs AS (
            -- each job's net charge (a re-rated job: the new charge; a deleted one: nothing)
            SELECT coalesce(r.pool, r.cluster) AS pool, l.unit, l.account, l.submitter, l.job_end,
                   sum(l.amount)::float8 AS amount
            FROM recent w
            JOIN @extschema@.ledger l ON l.job_end >= w.since AND l.job_end <= w.at
            JOIN @extschema@.resource r USING (resource_id)
            WHERE l.kind = 'charge'
            GROUP BY l.cluster, l.jobid, coalesce(r.pool, r.cluster), l.unit, l.account, l.submitter,
                     l.job_start, l.job_end
            HAVING sum(l.amount) > 0
        ), decayed AS (
            SELECT d.pool, d.unit, d.account, d.submitter, sum(d.usage) AS usage
            FROM (
                SELECT j.pool, j.unit, j.account, j.submitter,
                       coalesce(@extschema@.decayed_usage(j.job_end, j.amount, cfg.at, cfg.half_life)
                                    FILTER (WHERE cfg.form = 'half_life'),
                                @extschema@.decayed_usage(j.job_end, j.amount, cfg.at, cfg.period, cfg.decay,
                                                          cfg.depth)
                                    FILTER (WHERE cfg.form = 'interval')) AS usage
                FROM jobs j CROSS JOIN cfg
                GROUP BY j.pool, j.unit, j.account, j.submitter
                UNION ALL
                -- half-life: the rollup's sums for the jobs that ended before the month of `at`,
                -- decayed from the end of the month they ended in to `at`
                SELECT coalesce(r.pool, r.cluster), c.unit, c.account, c.submitter, sum(c.decayed * f.factor)
                FROM @extschema@.charge_rollup c
                JOIN factors f USING (end_month)
                JOIN @extschema@.resource r USING (resource_id)
                GROUP BY coalesce(r.pool, r.cluster), c.unit, c.account, c.submitter
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
            JOIN (SELECT d.pool, d.unit, d.account, d.submitter FROM decayed d WHERE d.usage > 0
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
CREATE TRIGGER fairshare_setting_insert_rebuilds_rollup AFTER INSERT ON @extschema@.fairshare_setting
    FOR EACH ROW WHEN (NEW.name = 'half_life') EXECUTE FUNCTION @extschema@.rebuild_rollup_trigger();
CREATE TRIGGER fairshare_setting_update_rebuilds_rollup AFTER UPDATE ON @extschema@.fairshare_setting
    FOR EACH ROW WHEN ('half_life' IN (NEW.name, OLD.name) AND NEW IS DISTINCT FROM OLD)
    EXECUTE FUNCTION @extschema@.rebuild_rollup_trigger();
CREATE TRIGGER fairshare_setting_delete_rebuilds_rollup AFTER DELETE ON @extschema@.fairshare_setting
    FOR EACH ROW WHEN (OLD.name = 'half_life') EXECUTE FUNCTION @extschema@.rebuild_rollup_trigger();

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

SELECT @extschema@.protect_table('@extschema@.charge_rollup');
ALTER FUNCTION @extschema@.charge_jobs() SECURITY DEFINER;  -- as 90_privileges.sql: CREATE OR REPLACE reset it
ALTER VIEW @extschema@.quarter_balances SET (security_invoker = true);
REVOKE EXECUTE ON FUNCTION @extschema@.rebuild_rollup(), @extschema@.compact_rollup() FROM PUBLIC;
-- end of perf-ingest-reports
