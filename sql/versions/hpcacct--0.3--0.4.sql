-- hpcacct 0.3 -> 0.4: security (issue 20), the sacct loader (issue 14), the first hour (issue 18),
-- enforcement (issue 15), notifications (issue 16), federation (issue 17).
-- Every change here is also in sql/install/.
\echo Use "ALTER EXTENSION hpcacct UPDATE TO '0.4'" to load this file. \quit

-- security (issue 20) ------------------------------------------------------------------

-- settings: max_job_length, require_membership
-- setting_catalog() is defined here once, as 0.4 has it, with every setting the sections below
-- add (a SQL-standard body, which the final block cannot carry; no SET option: it is inlined).
CREATE OR REPLACE FUNCTION @extschema@.setting_catalog ()
    RETURNS TABLE (name text, default_value text, description text)
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
BEGIN ATOMIC
        SELECT v.name, v.default_value, v.description FROM (VALUES ('timezone', NULL::text,
                'Time zone of the site''s days, months and quarters (default: the TimeZone a session starts with, '
                'which a client can send when it connects: set it)'),
               ('bank_unit', 'NPL', 'Unit of the quarterly bank (HLRN): entries in other units do not count'),
               ('personal_allotment', '2500',
                'Credits a personal account is topped up to per quarter (HLRN: 2500 NPL; at most double per account)'),
               ('max_job_length', '366 days',
                'Longest run a job may claim (end - start); a longer one is refused (HA004), so no job can flood '
                'the rollups with months it never ran in'),
               ('require_membership', 'off',
                'on: a job is charged only when its user is a member of its account (HA005); off: the job table '
                'is trusted, as Slurm''s own associations already checked it'),
               ('expiry_warning_days', '14',
                'Days before the end of a bank account''s last quarter with an allocation that notify_scan() warns '
                'its managers and members that it runs out (0 to 92; 0: no warning)'),
               -- fair share and usage reports (rules §5)
               ('decay', 'half_life', 'Decay of usage in fairshare(): half_life (Slurm) or interval (Maui periods)'),
               ('half_life', '7 days', 'Half-life of usage for decay = half_life (an interval without months)'),
               ('period', '5 days', 'Fair-share period for decay = interval (LQCD: 5 days; an interval without months)'),
               ('period_decay', '0.8', 'Weight of each older period for decay = interval, between 0 and 1'),
               ('depth', '8', 'Number of periods counted for decay = interval, at least 1'),
               ('exhausted_factor', '0.01',
                'The fair-share factor of an account whose allocation for the year is used up is multiplied by this'),
               ('year_start_month', '1', 'First month of the allocation year for pools not in hpcacct.pool'),
               ('hours_per_year', '8760', 'Hours in a core-year or GPU-year (365 days of 24 hours)'),
               ('rollup', 'immediate',
                'immediate: each statement that books charges rolls them up; deferred: it records their entry ids '
                'in rollup_pending, roll_up_pending() rolls them up (run it every minute), reports stay exact'))
            AS v(name, default_value, description);
END;
COMMENT ON FUNCTION @extschema@.setting_catalog() IS 'Every setting with its default and meaning';
CREATE OR REPLACE FUNCTION @extschema@.check_setting() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        max_length interval;
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM @extschema@.setting_catalog() c WHERE c.name = NEW.name) THEN
            RAISE EXCEPTION 'unknown setting "%"', NEW.name
                USING ERRCODE = 'undefined_object', HINT = 'See hpcacct.settings for the settings there are.';
        END IF;
        IF NEW.name = 'timezone'
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_names z WHERE z.name = NEW.value)
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_abbrevs z WHERE z.abbrev = NEW.value) THEN
            RAISE EXCEPTION 'unknown time zone "%"', NEW.value
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Use a name from pg_timezone_names, e.g. Europe/Berlin.';
        END IF;
        IF NEW.name = 'max_job_length' THEN
            BEGIN
                max_length := NEW.value::interval;
            EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR interval_field_overflow THEN
                max_length := NULL;
            END;
            IF max_length IS NULL OR max_length <= interval '0' OR pg_catalog.date_part('month', max_length) <> 0
               OR pg_catalog.date_part('year', max_length) <> 0 THEN
                RAISE EXCEPTION 'max_job_length must be a positive interval in days or hours, not "%"', NEW.value
                    USING ERRCODE = 'invalid_parameter_value', HINT = 'E.g. ''30 days''.';
            END IF;
        END IF;
        IF NEW.name = 'require_membership' AND lower(NEW.value) NOT IN ('on', 'off', 'true', 'false') THEN
            RAISE EXCEPTION 'require_membership must be on or off, not "%"', NEW.value
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF NEW.name = 'personal_allotment'
           AND (NEW.value !~ '^[0-9]+(\.[0-9]+)?$' OR NEW.value::numeric <= 0) THEN
            RAISE EXCEPTION 'personal_allotment must be a positive number, not "%"', NEW.value
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN NEW;
    END
    $$;
COMMENT ON FUNCTION @extschema@.check_setting() IS 'Trigger: only known settings, with values of the right kind';

-- charging reads only built-in column types, bounds a job's length, optionally requires membership
CREATE OR REPLACE FUNCTION @extschema@.job_columns(job_table regclass, mapping text[]) RETURNS text[]
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        roles   constant text[] := ARRAY['cluster', 'jobid', 'account', 'user', 'partition', 'start', 'end', 'alloctres'];
        columns text[] := roles;
        pair    text;
        role    text;
        column_name text;
        column_type oid;
        position integer;
    BEGIN
        FOREACH pair IN ARRAY coalesce(mapping, '{}') LOOP
            role := split_part(pair, '=', 1);
            column_name := substr(pair, length(role) + 2);
            position := array_position(roles, role);
            IF strpos(pair, '=') = 0 OR position IS NULL OR column_name = '' THEN
                RAISE EXCEPTION 'invalid job column mapping "%"', pair
                    USING ERRCODE = 'invalid_parameter_value',
                          HINT = format('Use role=column with a role among %s.', array_to_string(roles, ', '));
            END IF;
            columns[position] := column_name;
        END LOOP;
        FOR position IN 1 .. array_length(roles, 1) LOOP
            SELECT a.atttypid INTO column_type
            FROM pg_catalog.pg_attribute a
            WHERE a.attrelid = job_table AND a.attname = columns[position] AND a.attnum > 0 AND NOT a.attisdropped;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'column "%" of % (the job''s %) does not exist', columns[position], job_table, roles[position]
                    USING ERRCODE = 'undefined_column',
                          HINT = format('Name it in the trigger arguments, e.g. ''%s=my_column''.', roles[position]);
            END IF;
            -- Charging casts these columns while it runs as the extension's owner: a type
            -- with a cast or output function of its own would run its author's code with
            -- those rights. Only built-in types (and tres) are read, checked at every firing.
            IF NOT column_type = ANY (CASE
                    WHEN roles[position] IN ('start', 'end')
                        THEN ARRAY['timestamptz', 'timestamp']::regtype[]
                    WHEN roles[position] = 'alloctres'
                        THEN ARRAY['@extschema@.tres', 'text', 'varchar']::regtype[]
                    ELSE ARRAY['text', 'varchar', 'bpchar', 'name', 'int2', 'int4', 'int8', 'numeric']::regtype[]
                END) THEN
                RAISE EXCEPTION 'column "%" of % (the job''s %) has type %, which charging does not read',
                                columns[position], job_table, roles[position], column_type::regtype
                    USING ERRCODE = 'datatype_mismatch',
                          DETAIL = 'Charging runs with the extension owner''s rights and reads only built-in types: '
                                   'text or integers for names and ids, timestamptz or timestamp for times, '
                                   'tres or text for alloctres.',
                          HINT = 'Change the column to one of these types.';
            END IF;
            columns[position] := quote_ident(columns[position]);
        END LOOP;
        RETURN columns;
    END
    $$;
COMMENT ON FUNCTION @extschema@.job_columns(regclass, text[]) IS 'The columns charging reads from a job table, checked, from role=column pairs';
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
        max_length  interval;
        need_member boolean;
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
            max_length := @extschema@.setting_value('max_job_length')::interval;
            need_member := @extschema@.setting_value('require_membership')::boolean;
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
                      AND j.job_end >= j.job_start AND j.job_end - j.job_start <= $1
                      AND (NOT $2 OR EXISTS (SELECT 1 FROM @extschema@.membership m
                                             WHERE m.account = j.account AND m.username = j.submitter))
                    $q$, changed_new) USING max_length, need_member;
                GET DIAGNOSTICS charged = ROW_COUNT;
                EXECUTE format('SELECT count(*) FROM %s j', changed_new) INTO jobs;
            END IF;
            IF unknown_accounts > 0 OR charged <> jobs THEN
                EXECUTE format($q$
                    SELECT * FROM (
                        SELECT j.cluster, j.jobid, j.account, j.submitter, j.partition, j.job_start,
                               CASE
                                   WHEN j.cluster IS NULL OR j.jobid IS NULL OR j.account IS NULL
                                        OR j.partition IS NULL OR j.alloctres IS NULL THEN 'missing'
                                   WHEN j.job_start IS NULL OR j.job_end IS NULL THEN 'no_times'
                                   WHEN j.job_end < j.job_start THEN 'end_before_start'
                                   WHEN j.job_end - j.job_start > $1 THEN 'too_long'
                                   WHEN NOT EXISTS (SELECT 1 FROM @extschema@.account a WHERE a.name = j.account)
                                       THEN 'unknown_account'
                                   WHEN $2 AND NOT EXISTS (SELECT 1 FROM @extschema@.membership m
                                                           WHERE m.account = j.account AND m.username = j.submitter)
                                       THEN 'not_member'
                                   WHEN NOT EXISTS (SELECT 1 FROM @extschema@.resource r
                                                    WHERE r.cluster = j.cluster AND r.partition = j.partition
                                                      AND r.valid @> j.job_start)
                                       THEN 'unknown_resource'
                               END AS problem
                        FROM %s j) checked
                    WHERE problem IS NOT NULL
                    LIMIT 1
                    $q$, changed_new) INTO problem USING max_length, need_member;

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
                ELSIF problem.problem = 'too_long' THEN
                    RAISE EXCEPTION 'job %/% claims to have run longer than max_job_length (%)', problem.cluster,
                                    problem.jobid, max_length
                        USING ERRCODE = 'HA004',
                              HINT = 'Correct its start or end; a site with longer jobs raises the setting max_job_length.';
                ELSIF problem.problem = 'not_member' THEN
                    RAISE EXCEPTION 'user "%" is not a member of account "%" (job %/%)', problem.submitter,
                                    problem.account, problem.cluster, problem.jobid
                        USING ERRCODE = 'HA005',
                              HINT = 'Add the membership with hpcacct.add_member(), or set require_membership off.';
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
ALTER FUNCTION @extschema@.charge_jobs() SECURITY DEFINER;  -- as 90_privileges.sql: CREATE OR REPLACE reset it

-- fair share: old charges decay to 0, never to an underflow error
CREATE FUNCTION @extschema@.decay_weight(ts timestamptz, at timestamptz, half_life interval) RETURNS float8
    AS 'MODULE_PATHNAME', 'hpcacct_decay_weight' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.decay_weight(timestamptz, timestamptz, interval) IS
    'Half-life decay weight 2^(-(at - ts) / half_life); 0 for ts after at and for ages past float8''s range';
CREATE OR REPLACE FUNCTION @extschema@.rollup_insert_sql(source text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT pg_catalog.format($q$
            WITH z AS MATERIALIZED (  -- once per statement
                SELECT @extschema@.site_timezone() AS tz,
                       @extschema@.fairshare_setting_value('half_life')::interval AS half_life
            ), entries AS (
                SELECT e.account, e.resource_id, e.unit, e.submitter, e.job_start, e.job_end, e.amount, z.tz,
                       pg_catalog.date_trunc('month', e.job_start AT TIME ZONE z.tz) AS first_month,
                       pg_catalog.date_trunc('month', e.job_end AT TIME ZONE z.tz) AS last_month,
                       e.amount::float8 * @extschema@.decay_weight(e.job_end,
                           (pg_catalog.date_trunc('month', e.job_end AT TIME ZONE z.tz) + interval '1 month')
                               AT TIME ZONE z.tz, z.half_life) AS decayed
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
CREATE OR REPLACE FUNCTION @extschema@.compact_rollup() RETURNS bigint
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
                   @extschema@.fairshare_setting_value('half_life')::interval AS half_life
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
                   sum(g.decayed * @extschema@.decay_weight(
                                            (g.end_month + interval '1 month')::timestamp AT TIME ZONE cfg.tz,
                                            (cfg.through + interval '1 month')::timestamp AT TIME ZONE cfg.tz,
                                            cfg.half_life)),
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
                   pg_catalog.array_agg(@extschema@.decay_weight((m.month + interval '1 month') AT TIME ZONE cfg.tz,
                                                                 cfg.at, cfg.half_life) ORDER BY m.month) AS factor
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
                       sum(b.decayed * @extschema@.decay_weight((b.through + interval '1 month')::timestamp AT TIME ZONE cfg.tz,
                                                                cfg.at, cfg.half_life)),
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
-- the ledger trigger's function is generated from rollup_insert_sql(): generate it again
DO $do$
BEGIN
    EXECUTE pg_catalog.format(
        'CREATE OR REPLACE FUNCTION @extschema@.roll_up_charges() RETURNS trigger LANGUAGE plpgsql '
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

-- fair share: a portal user gets the present only, without the pool's fractions
CREATE OR REPLACE FUNCTION @extschema@.fairshare(at timestamptz DEFAULT pg_catalog.now())
    RETURNS TABLE (pool text, unit text, account text, submitter text, allocation numeric, share float8,
                   usage float8, norm_usage float8, year_usage numeric, exhausted boolean, factor float8)
    LANGUAGE plpgsql STABLE SECURITY DEFINER PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        instant constant timestamptz := coalesce(fairshare.at, pg_catalog.now());
        sees_all constant boolean := EXISTS (
            SELECT 1 FROM pg_catalog.pg_roles r
            WHERE (r.rolname = 'hpcacct_admin' AND pg_catalog.pg_has_role(pg_catalog.session_user(), r.oid, 'MEMBER'))
               OR (r.rolname = pg_catalog.session_user() AND r.rolsuper));
    BEGIN
        IF NOT sees_all AND instant <> pg_catalog.now() THEN
            RAISE EXCEPTION 'fairshare() at % is for administrators: others see the present only', instant
                USING ERRCODE = 'insufficient_privilege', HINT = 'Call hpcacct.fairshare() without an argument.';
        END IF;
        RETURN QUERY
            SELECT f.pool, f.unit, f.account, f.submitter, f.allocation,
                   CASE WHEN sees_all THEN f.share END, f.usage,
                   CASE WHEN sees_all THEN f.norm_usage END, f.year_usage, f.exhausted, f.factor
            FROM @extschema@.fairshare_all(instant) f
            WHERE sees_all OR f.account = ANY (@extschema@.visible_accounts());
    END
    $$;
COMMENT ON FUNCTION @extschema@.fairshare(timestamptz) IS
    'Fair-share table per pool, account and user (see fairshare_all); at NULL means now. Administrators see every '
    'row at any instant; others their accounts'' rows, now only, without share and norm_usage';

-- personal top-ups booked once per account, quarter and level
CREATE UNIQUE INDEX ledger_top_up_once ON @extschema@.ledger (account, valid_from, note)
    WHERE kind = 'deposit' AND note LIKE 'personal allotment up to %';
CREATE FUNCTION @extschema@.top_up_note(target numeric) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN 'personal allotment up to ' || pg_catalog.trim_scale(target)::text;
COMMENT ON FUNCTION @extschema@.top_up_note(numeric) IS 'Ledger note of a personal top-up to a level (its once-only key)';
CREATE OR REPLACE FUNCTION @extschema@.top_up(account text, quarter date, target numeric) RETURNS numeric
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    #variable_conflict use_column
    DECLARE
        q constant date := @extschema@.quarter_start(quarter);
        bank_unit constant text := @extschema@.setting_value('bank_unit');
        booked numeric;
    BEGIN
        IF quarter IS NULL OR target IS NULL THEN
            RAISE EXCEPTION 'top_up needs a quarter and a target' USING ERRCODE = 'null_value_not_allowed';
        ELSIF NOT isfinite(quarter) THEN
            RAISE EXCEPTION 'quarter must be a finite date' USING ERRCODE = 'datetime_field_overflow';
        END IF;
        INSERT INTO @extschema@.ledger (account, kind, amount, unit, valid_from, valid_until, note)
        SELECT top_up.account, 'deposit', target - coalesce(sum(l.amount), 0), bank_unit, q,
               (q + interval '3 months')::date - 1, @extschema@.top_up_note(target)
        FROM @extschema@.ledger l
        WHERE l.account = top_up.account AND l.kind = 'deposit' AND l.valid_from = q AND l.unit = bank_unit
        HAVING target - coalesce(sum(l.amount), 0) > 0
        ON CONFLICT (account, valid_from, note) WHERE kind = 'deposit' AND note LIKE 'personal allotment up to %'
        DO NOTHING
        RETURNING amount INTO booked;
        RETURN coalesce(booked, 0);
    END
    $$;
COMMENT ON FUNCTION @extschema@.top_up(text, date, numeric) IS
    'Deposits what an account lacks to reach a target in a quarter; returns the amount deposited';
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
            SELECT a.name, t.target, lv.level,
                   lv.level - coalesce((SELECT sum(l.amount) FROM @extschema@.ledger l
                                        WHERE l.account = a.name AND l.kind = 'deposit' AND l.valid_from = t.target
                                          AND l.unit = cfg.unit), 0) AS amount
            FROM @extschema@.account a
            CROSS JOIN LATERAL (SELECT coalesce(a.personal_allotment,
                                                (SELECT @extschema@.setting_value('personal_allotment')::numeric))
                                           AS level) lv
            CROSS JOIN cfg
            CROSS JOIN LATERAL (SELECT (this_quarter + i * interval '3 months')::date AS target
                                FROM pg_catalog.generate_series(0, 2) AS i) t
            WHERE a.kind = 'personal' AND a.deleted_in IS NULL
              AND EXISTS (SELECT 1 FROM @extschema@.membership m JOIN active p ON p.name = m.account
                          WHERE m.username = a.name)
        ), booked AS (
            INSERT INTO @extschema@.ledger (account, kind, amount, unit, valid_from, valid_until, note)
            SELECT m.name, 'deposit', m.amount, cfg.unit, m.target, (m.target + interval '3 months')::date - 1,
                   @extschema@.top_up_note(m.level)
            FROM missing m, cfg
            WHERE m.amount > 0
            ORDER BY m.name, m.target
            ON CONFLICT (account, valid_from, note) WHERE kind = 'deposit' AND note LIKE 'personal allotment up to %'
            DO NOTHING
            RETURNING account, valid_from, amount
        )
        INSERT INTO @extschema@.quarter_log (quarter, account, action, target_quarter, amount)
        SELECT this_quarter, b.account, 'top_up', b.valid_from, b.amount
        FROM booked b
        ORDER BY b.account, b.valid_from
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
COMMENT ON PROCEDURE @extschema@.open_quarter(date) IS
    'Quarter start (HLRN): top up personal accounts, expire and delete them, reset default projects; idempotent';
DO $do$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'hpcacct_admin') THEN
        GRANT EXECUTE ON FUNCTION @extschema@.decay_weight(timestamptz, timestamptz, interval),
                                  @extschema@.top_up_note(numeric) TO hpcacct_admin;
    END IF;
END
$do$;
-- end of security (issue 20)

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
                    USING ERRCODE = 'HA006',
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
                    USING ERRCODE = 'HA006',
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
    'Trigger: a charged resource row may only be closed (HA006), not deleted; overlapping rates get a hint';
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

-- enforcement (issue 15) ---
-- the policies that bind an account; an account is active only with an allocation for the
-- current quarter (inactive with one only later); one submit decision for every policy;
-- releases of queued jobs; the association state for Slurm; the role hpcacct_submit.
ALTER TABLE @extschema@.account
    ADD COLUMN policies text[] CHECK (policies OPERATOR(pg_catalog.<@) ARRAY['bank', 'window_quota', 'genci']
                                      AND pg_catalog.array_position(policies, NULL) IS NULL);
COMMENT ON COLUMN @extschema@.account.policies IS
    'Submit rules that bind the account: bank, window_quota, genci; {} none (staff); NULL derived (account_policies)';
CREATE OR REPLACE FUNCTION @extschema@.account_state(account text, at date DEFAULT @extschema@.site_today())
    RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT CASE
            WHEN a.name IS NULL THEN NULL
            WHEN a.deleted_in IS NOT NULL AND a.deleted_in <= at THEN 'deleted'
            ELSE (SELECT CASE WHEN bool_or(s.quarter = @extschema@.quarter_start(at)) THEN 'active'
                              WHEN count(*) > 0 THEN 'inactive'
                              ELSE 'expired' END
                  FROM (SELECT @extschema@.quarter_start(l.valid_from) AS quarter
                        FROM @extschema@.ledger l
                        WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer')
                          AND l.unit = (SELECT @extschema@.setting_value('bank_unit'))
                          AND l.valid_from >= @extschema@.quarter_start(at)
                        GROUP BY 1
                        HAVING sum(l.amount) > 0) s)
        END
        FROM (SELECT 1) one
        LEFT JOIN @extschema@.account a ON a.name = account_state.account
    $$;
COMMENT ON FUNCTION @extschema@.account_state(text, date) IS
    'active (an allocation this quarter), inactive (none this quarter, one later), expired (none this quarter or '
    'later), or deleted; NULL for an unknown account';
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

        -- top_up() of the personal accounts of members of projects active in this quarter
        -- (account_state() inline: an allocation for q, not only for a later quarter), for
        -- this and the two following quarters, in one statement
        WITH cfg AS MATERIALIZED (
            SELECT @extschema@.setting_value('bank_unit') AS unit
        ), active AS (
            SELECT p.name
            FROM @extschema@.account p, cfg
            WHERE p.kind = 'project' AND NOT (p.deleted_in IS NOT NULL AND p.deleted_in <= this_quarter)
              AND EXISTS (SELECT 1 FROM @extschema@.ledger l
                          WHERE l.account = p.name AND l.kind IN ('deposit', 'transfer') AND l.unit = cfg.unit
                            AND l.valid_from >= this_quarter AND l.valid_from < this_quarter + interval '3 months'
                          HAVING sum(l.amount) > 0)
        ), missing AS MATERIALIZED (
            SELECT a.name, t.target, lv.level,
                   lv.level - coalesce((SELECT sum(l.amount) FROM @extschema@.ledger l
                                        WHERE l.account = a.name AND l.kind = 'deposit' AND l.valid_from = t.target
                                          AND l.unit = cfg.unit), 0) AS amount
            FROM @extschema@.account a
            CROSS JOIN LATERAL (SELECT coalesce(a.personal_allotment,
                                                (SELECT @extschema@.setting_value('personal_allotment')::numeric))
                                           AS level) lv
            CROSS JOIN cfg
            CROSS JOIN LATERAL (SELECT (this_quarter + i * interval '3 months')::date AS target
                                FROM pg_catalog.generate_series(0, 2) AS i) t
            WHERE a.kind = 'personal' AND a.deleted_in IS NULL
              AND EXISTS (SELECT 1 FROM @extschema@.membership m JOIN active p ON p.name = m.account
                          WHERE m.username = a.name)
        ), booked AS (
            INSERT INTO @extschema@.ledger (account, kind, amount, unit, valid_from, valid_until, note)
            SELECT m.name, 'deposit', m.amount, cfg.unit, m.target, (m.target + interval '3 months')::date - 1,
                   @extschema@.top_up_note(m.level)
            FROM missing m, cfg
            WHERE m.amount > 0
            ORDER BY m.name, m.target
            ON CONFLICT (account, valid_from, note) WHERE kind = 'deposit' AND note LIKE 'personal allotment up to %'
            DO NOTHING
            RETURNING account, valid_from, amount
        )
        INSERT INTO @extschema@.quarter_log (quarter, account, action, target_quarter, amount)
        SELECT this_quarter, b.account, 'top_up', b.valid_from, b.amount
        FROM booked b
        ORDER BY b.account, b.valid_from
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
COMMENT ON PROCEDURE @extschema@.open_quarter(date) IS
    'Quarter start (HLRN): top up personal accounts, expire and delete them, reset default projects; idempotent';
CREATE OR REPLACE FUNCTION @extschema@.sees_all_accounts() RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                       WHERE r.rolname IN ('hpcacct_admin', 'hpcacct_submit')
                         AND pg_catalog.pg_has_role(pg_catalog.current_user(), r.oid, 'MEMBER'))
               OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = pg_catalog.current_user())
    $$;
COMMENT ON FUNCTION @extschema@.sees_all_accounts() IS
    'True for superusers and members of hpcacct_admin or hpcacct_submit, who see every account''s rows';
CREATE OR REPLACE PROCEDURE @extschema@.setup_roles()
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        role_name text;
    BEGIN
        FOREACH role_name IN ARRAY ARRAY['hpcacct_admin', 'hpcacct_ingest', 'hpcacct_portal', 'hpcacct_submit'] LOOP
            IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = role_name) THEN
                EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', role_name);
            END IF;
        END LOOP;
        GRANT USAGE ON SCHEMA @extschema@ TO hpcacct_admin, hpcacct_ingest, hpcacct_portal;
        GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA @extschema@ TO hpcacct_admin;
        GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA @extschema@ TO hpcacct_admin;
        GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA @extschema@ TO hpcacct_admin;
        GRANT EXECUTE ON ALL PROCEDURES IN SCHEMA @extschema@ TO hpcacct_admin;
        IF pg_catalog.to_regclass('@extschema@.job') IS NOT NULL THEN
            GRANT INSERT ON @extschema@.job TO hpcacct_ingest;
        END IF;
        GRANT SELECT ON ALL TABLES IN SCHEMA @extschema@ TO hpcacct_portal;
        PERFORM @extschema@.grant_submit_role();
    END
    $$;
CREATE OR REPLACE VIEW @extschema@.quarter_balances WITH (security_invoker = true) AS
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
               WHEN (p.b).deposits + (p.b).transfers > 0 THEN 'active'
               WHEN bool_or((p.b).deposits + (p.b).transfers > 0)
                        OVER (PARTITION BY p.account ORDER BY p.quarter DESC ROWS UNBOUNDED PRECEDING)
                   THEN 'inactive'
               ELSE 'expired'
           END AS state
    FROM per_quarter p
    JOIN @extschema@.account a ON a.name = p.account;
COMMENT ON VIEW @extschema@.quarter_balances IS
    'Per account and quarter: deposits, charges, transfers, refunds, balance, state (active/inactive/expired/deleted)';
CREATE OR REPLACE FUNCTION @extschema@.bank_unit() RETURNS text
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        RETURN coalesce((SELECT s.value FROM @extschema@.setting s WHERE s.name = 'bank_unit'),
                        (SELECT c.default_value FROM @extschema@.setting_catalog() c WHERE c.name = 'bank_unit'));
    END
    $$;
COMMENT ON FUNCTION @extschema@.bank_unit() IS 'The setting bank_unit (cheaply: what setting_value(''bank_unit'') gives)';
CREATE OR REPLACE FUNCTION @extschema@.account_policies(account text) RETURNS text[]
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        a record;
        has_quota boolean;
        has_genci boolean;
        has_bank boolean;
    BEGIN
        SELECT x.name, x.kind, x.policies INTO a FROM @extschema@.account x WHERE x.name = account_policies.account;
        IF NOT FOUND THEN
            RETURN NULL;
        ELSIF a.policies IS NOT NULL THEN
            RETURN a.policies;
        ELSIF a.kind = 'special' THEN
            RETURN '{}'::text[];
        END IF;
        has_quota := EXISTS (SELECT 1 FROM @extschema@.quota_period p WHERE p.account = a.name);
        has_genci := EXISTS (SELECT 1 FROM @extschema@.ledger l
                             WHERE l.account = a.name AND l.kind IN ('grant', 'supplement'));
        IF a.kind = 'personal' OR NOT (has_quota OR has_genci) THEN
            has_bank := true;
        ELSE
            has_bank := EXISTS (SELECT 1 FROM @extschema@.ledger l
                                WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer', 'refund')
                                  AND l.unit = @extschema@.bank_unit());
        END IF;
        RETURN pg_catalog.array_remove(ARRAY[CASE WHEN has_bank THEN 'bank' END,
                                             CASE WHEN has_quota THEN 'window_quota' END,
                                             CASE WHEN has_genci THEN 'genci' END], NULL);
    END
    $$;
COMMENT ON FUNCTION @extschema@.account_policies(text) IS
    'Submit rules binding an account: account.policies, or derived (special: none; window_quota with a quota period; '
    'genci with a grant; bank with bank entries, for personal accounts, or when nothing else binds it)';
CREATE OR REPLACE FUNCTION @extschema@.account_verdict(account text, at date DEFAULT @extschema@.site_today())
    RETURNS @extschema@.submit_decision
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        q date;
        a record;
        pol text[];
        bank_unit text;
        next_quarter date;
        current_active boolean;
        current_balance numeric;
        wq record;
        machines integer;
        open_machines integer;
        reason text;
        message text;
    BEGIN
        -- a NULL day is today in the site's time zone (the default), an infinite one 22008
        at := coalesce(at, @extschema@.site_today());
        IF NOT isfinite(at) THEN
            RAISE EXCEPTION 'a submit check needs a finite day, not %', at USING ERRCODE = 'datetime_field_overflow';
        END IF;
        q := @extschema@.quarter_start(at);
        SELECT x.name, x.deleted_in INTO a FROM @extschema@.account x WHERE x.name = account_verdict.account;
        IF NOT FOUND THEN
            RETURN ROW(false, account, 'unknown_account',
                       format('account %s does not exist: check the account you gave (sbatch -A)', account))::@extschema@.submit_decision;
        ELSIF a.deleted_in IS NOT NULL AND a.deleted_in <= at THEN
            RETURN ROW(false, account, 'account_deleted',
                       format('account %s has been deleted and cannot be used again', account))::@extschema@.submit_decision;
        END IF;
        pol := @extschema@.account_policies(account);

        IF 'bank' = ANY (pol) THEN
            bank_unit := @extschema@.bank_unit();
            SELECT bool_or(s.quarter = q), min(s.quarter) FILTER (WHERE s.quarter > q)
            INTO current_active, next_quarter
            FROM (SELECT @extschema@.quarter_start(l.valid_from) AS quarter
                  FROM @extschema@.ledger l
                  WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer') AND l.unit = bank_unit
                    AND l.valid_from >= q
                  GROUP BY 1
                  HAVING sum(l.amount) > 0) s;
            IF NOT coalesce(current_active, false) AND next_quarter IS NULL THEN
                RETURN ROW(false, account, 'account_expired',
                           format('account %s has no allocation for this or a later quarter: ask for a new '
                                  'allocation, or submit with another account (sbatch -A)', account))::@extschema@.submit_decision;
            ELSIF NOT coalesce(current_active, false) THEN
                RETURN ROW(false, account, 'account_inactive',
                           format('account %s has no allocation for this quarter; its allocation begins on %s: '
                                  'ask staff to move allocation into this quarter, or submit with another account',
                                  account, next_quarter))::@extschema@.submit_decision;
            END IF;
            SELECT round(coalesce((SELECT sum(l.amount) FROM @extschema@.ledger l
                                   WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer', 'refund')
                                     AND l.unit = bank_unit
                                     AND l.valid_from >= q AND l.valid_from < q + interval '3 months'), 0)
                         - coalesce((SELECT sum(c.amount) FROM @extschema@.charge_rollup c
                                     WHERE c.account = a.name AND c.unit = bank_unit
                                       AND c.month >= q AND c.month < q + interval '3 months'), 0), 6)
            INTO current_balance;
            IF current_balance < 0 THEN
                RETURN ROW(false, account, 'negative_balance',
                           format('account %s has a negative balance this quarter (%s %s): ask for a transfer '
                                  'or a deposit, or submit with another account',
                                  account, pg_catalog.trim_scale(current_balance), bank_unit))::@extschema@.submit_decision;
            END IF;
        END IF;

        IF 'window_quota' = ANY (pol) THEN
            SELECT u.state, u.monthly, u.consumed_current, u.unit INTO wq
            FROM @extschema@.window_quota_usage(a.name, at) u;
            IF wq.state = 'blocked' THEN
                RETURN ROW(false, account, 'quota_blocked',
                           format('account %s is blocked by its sliding-window quota (%s %s used this month, '
                                  'monthly allowance %s): submit with another account',
                                  account, round(wq.consumed_current::numeric, 2), wq.unit,
                                  round(wq.monthly::numeric, 2)))::@extschema@.submit_decision;
            END IF;
        END IF;

        IF 'genci' = ANY (pol) THEN
            SELECT count(*), count(*) FILTER (WHERE s.tmc > 0 AND s.consumption < s.alloc)
            INTO machines, open_machines
            FROM (SELECT DISTINCT l.cluster FROM @extschema@.ledger l
                  WHERE l.account = a.name AND l.kind IN ('grant', 'supplement', 'retraction')
                    AND l.valid_from <= at AND l.valid_until >= at) m
            CROSS JOIN LATERAL @extschema@.allocation_status(a.name, m.cluster, at) s;
            IF machines = 0 THEN
                RETURN ROW(false, account, 'no_allocation',
                           format('account %s has no allocation valid on %s: submit with another account', account, at))::@extschema@.submit_decision;
            ELSIF open_machines = 0 THEN
                RETURN ROW(false, account, 'allocation_exhausted',
                           format('account %s has used up its allocation (after retractions): ask for a supplement, '
                                  'or submit with another account', account))::@extschema@.submit_decision;
            END IF;
        END IF;

        RETURN ROW(true, account, NULL::text, NULL::text)::@extschema@.submit_decision;
    END
    $$;
COMMENT ON FUNCTION @extschema@.account_verdict(text, date) IS
    'What an account''s state allows at a day under the policies that bind it: ok, or one reason and a message';
CREATE OR REPLACE FUNCTION @extschema@.check_submit(username text, account text DEFAULT NULL,
                                         at date DEFAULT @extschema@.site_today())
    RETURNS @extschema@.submit_decision
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        chosen text := account;
        verdict @extschema@.submit_decision;
    BEGIN
        IF username IS NULL THEN
            RAISE EXCEPTION 'check_submit: username must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF chosen IS NULL THEN
            SELECT coalesce(u.default_account, u.username) INTO chosen
            FROM @extschema@.hpc_user u WHERE u.username = check_submit.username;
            IF NOT FOUND THEN
                RETURN ROW(false, NULL::text, 'unknown_user',
                           format('user %s is not known to the accounting system: submit with an account '
                                  '(sbatch -A) or ask support to register you', username))::@extschema@.submit_decision;
            END IF;
        END IF;
        verdict := @extschema@.account_verdict(chosen, at);
        IF verdict.reason IN ('unknown_account', 'account_deleted') THEN
            RETURN verdict;
        END IF;
        IF NOT EXISTS (SELECT 1 FROM @extschema@.membership m
                       WHERE m.account = chosen AND m.username = check_submit.username) THEN
            RETURN ROW(false, chosen, 'no_access',
                       format('user %s is not a member of account %s: ask one of its project administrators '
                              'to add you, or submit with another account', username, chosen))::@extschema@.submit_decision;
        END IF;
        RETURN verdict;
    END
    $$;
COMMENT ON FUNCTION @extschema@.check_submit(text, text, date) IS
    'Submit check under the account''s policies: resolves the default project; refuses unknown_user, unknown_account, '
    'account_deleted, no_access, account_expired, account_inactive, negative_balance, quota_blocked, no_allocation, '
    'allocation_exhausted, with a message';
CREATE OR REPLACE FUNCTION @extschema@.recheck_queued(at date DEFAULT @extschema@.site_today())
    RETURNS TABLE (cluster text, jobid text, reason text, message text)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        RETURN QUERY
        WITH checked AS (
            SELECT p.cluster, p.jobid, p.held AS was_held, c.ok, c.account, c.reason, c.message
            FROM @extschema@.pending_job p
            CROSS JOIN LATERAL @extschema@.check_submit(p.username, p.account, at) c
            FOR UPDATE OF p
        ), updated AS (
            UPDATE @extschema@.pending_job p
            SET held = NOT c.ok, hold_reason = CASE WHEN c.ok THEN NULL ELSE c.message END,
                checked_at = pg_catalog.now()
            FROM checked c
            WHERE p.cluster = c.cluster AND p.jobid = c.jobid
            RETURNING p.cluster, p.jobid, c.was_held, c.ok, c.account, c.reason, c.message
        )
        SELECT u.cluster, u.jobid, u.reason,
               CASE WHEN u.ok THEN format('released: account %s is valid again', u.account) ELSE u.message END
        FROM updated u
        WHERE u.was_held = u.ok   -- held and now valid, or not held and now invalid
        ORDER BY 1, 2;
    END
    $$;
COMMENT ON FUNCTION @extschema@.recheck_queued(date) IS
    'Holds queued jobs whose account became invalid and releases those whose account is valid again; '
    'returns the changes (releases with reason NULL)';
CREATE OR REPLACE FUNCTION @extschema@.slurm_associations(at date DEFAULT @extschema@.site_today())
    RETURNS TABLE (account text, policies text[], state text, reason text, message text)
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT a.name, v.pol,
               CASE WHEN NOT (v.d).ok THEN 'blocked'
                    WHEN 'window_quota' = ANY (v.pol)
                         AND @extschema@.window_quota_state(a.name, $1) = 'low_priority' THEN 'low_priority'
                    ELSE 'normal' END,
               (v.d).reason, (v.d).message
        FROM @extschema@.account a
        CROSS JOIN LATERAL (SELECT @extschema@.account_policies(a.name) AS pol,
                                   @extschema@.account_verdict(a.name, $1) AS d) v
        ORDER BY a.name
    $$;
COMMENT ON FUNCTION @extschema@.slurm_associations(date) IS
    'The state each account''s Slurm association should have at a day: blocked (no submission), low_priority '
    '(a low QOS), normal; with the reason and message of a block';
CREATE OR REPLACE FUNCTION @extschema@.grant_submit_role() RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        GRANT USAGE ON SCHEMA @extschema@ TO hpcacct_submit;
        GRANT SELECT ON @extschema@.account, @extschema@.hpc_user, @extschema@.membership, @extschema@.ledger,
                        @extschema@.charge_rollup, @extschema@.setting, @extschema@.settings, @extschema@.resource,
                        @extschema@.quota_period, @extschema@.monthly_allowance, @extschema@.machine_setting
            TO hpcacct_submit;
        GRANT EXECUTE ON FUNCTION @extschema@.check_submit(text, text, date) TO hpcacct_submit;
    END
    $$;
CREATE VIEW @extschema@.slurm_association WITH (security_invoker = true) AS
    SELECT s.account, s.policies, s.state, s.reason, s.message
    FROM @extschema@.slurm_associations((SELECT @extschema@.site_today())) s;
COMMENT ON VIEW @extschema@.slurm_association IS
    'slurm_associations() today (site time zone): what hpcacct-slurm-sync applies';
REVOKE EXECUTE ON FUNCTION @extschema@.grant_submit_role() FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.grant_submit_role() IS
    'Grants hpcacct_submit what check_submit reads (called by setup_roles)';
COMMENT ON PROCEDURE @extschema@.setup_roles() IS
    'Creates hpcacct_admin, hpcacct_ingest, hpcacct_portal and hpcacct_submit if missing and grants their privileges';
-- what setup_roles() would grant on the new objects, when the site ran it
DO $do$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'hpcacct_admin') THEN
        GRANT EXECUTE ON FUNCTION @extschema@.bank_unit(), @extschema@.account_policies(text), @extschema@.account_verdict(text, date),
                                  @extschema@.slurm_associations(date), @extschema@.grant_submit_role()
            TO hpcacct_admin;
        GRANT SELECT, INSERT, UPDATE, DELETE ON @extschema@.slurm_association TO hpcacct_admin;
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'hpcacct_submit') THEN
            CREATE ROLE hpcacct_submit NOLOGIN;
        END IF;
        PERFORM @extschema@.grant_submit_role();
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'hpcacct_portal') THEN
        GRANT SELECT ON @extschema@.slurm_association TO hpcacct_portal;
    END IF;
END
$do$;
-- end of enforcement (issue 15)

-- federation (issue 17) ---
-- One central database and one per cluster site, joined by logical replication: the same
-- objects as sql/install/95_federation.sql.
-- This database's place in a federation: one row, written by federation_publish() (the
-- centre, site 0) or federation_join() (a cluster site). Not replicated.
CREATE TABLE @extschema@.federation_node (
    only_row  boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    site      integer NOT NULL CHECK (site BETWEEN 0 AND 32767),
    role      text NOT NULL CHECK (role IN ('centre', 'site')),
    joined_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT federation_node_centre_is_0 CHECK ((role = 'centre') = (site = 0))
);
COMMENT ON TABLE @extschema@.federation_node IS
    'This database''s place in a federation (one row): the centre (site 0) or a cluster site; not replicated';

-- At the centre: the cluster sites it publishes to.
CREATE TABLE @extschema@.federation_site (
    site     integer PRIMARY KEY CHECK (site BETWEEN 1 AND 32767),
    name     text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9_]{1,40}$'),
    added_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE @extschema@.federation_site IS
    'At the centre: the cluster sites of the federation, by number (1 to 32767) and name';

SELECT pg_catalog.pg_extension_config_dump('@extschema@.federation_node', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.federation_site', '');

-- The ledger ids a site books: [site * 2^48, (site + 1) * 2^48), the centre's from 1.
CREATE FUNCTION @extschema@.federation_id_range(site integer) RETURNS int8range
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN pg_catalog.int8range(CASE WHEN site = 0 THEN 1 ELSE site::bigint * 281474976710656 END,
                                (site::bigint + 1) * 281474976710656);
COMMENT ON FUNCTION @extschema@.federation_id_range(integer) IS
    'The ledger entry ids a federation site books: [site * 2^48, (site + 1) * 2^48); the centre (0) from 1';

-- The site that booked a ledger row, from its id.
CREATE FUNCTION @extschema@.federation_origin(entry_id bigint) RETURNS integer
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN (entry_id / 281474976710656)::integer;
COMMENT ON FUNCTION @extschema@.federation_origin(bigint) IS
    'The federation site (0: the centre) that booked the ledger row with this id';

-- The tables the centre publishes to every site as they are (inserts, updates, deletes):
-- the reference data charging, the loader (load_sacct: slurm_account_map), check_submit and
-- the site's reports read. The ledger is published apart, per site, with a row filter;
-- rollups are derived where they are read; logs of scheduled runs (regulation_log,
-- quarter_log) stay at the centre, which runs them, and so do the notifications' tables
-- (contacts, outbox): the centre sends them; jobs, pending jobs and the loader's own tables
-- (staging, quarantine, watermarks) stay at their site. Names are cast when it is called:
-- some of the tables are created after this file.
CREATE FUNCTION @extschema@.federation_reference_tables() RETURNS regclass[]
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT ARRAY['@extschema@.setting', '@extschema@.account', '@extschema@.resource',
                     '@extschema@.hpc_user', '@extschema@.membership', '@extschema@.machine_setting',
                     '@extschema@.exoneration', '@extschema@.quota_period', '@extschema@.monthly_allowance',
                     '@extschema@.fairshare_setting', '@extschema@.pool', '@extschema@.fairshare_user',
                     '@extschema@.slurm_account_map']::text[]::regclass[]
    $$;
COMMENT ON FUNCTION @extschema@.federation_reference_tables() IS
    'The reference tables the centre publishes to every site (written at the centre only)';

-- The rollups of replicated charges. Logical replication applies rows one by one with
-- session_replication_role = replica, which fires neither the statement trigger
-- ledger_roll_up nor any ordinary trigger. So a BEFORE row trigger enabled for replica
-- sessions only (ENABLE REPLICA) holds each received charge back in a temporary table of the
-- applying session, pg_temp.hpcacct_received (created on its first use), and a deferred
-- constraint trigger on that table, fired once at the commit of the
-- received transaction, inserts them all into the ledger in one statement and rolls them up
-- with the statement trigger's own statements. So every row is rolled up exactly once: by
-- ledger_roll_up when booked here, by this pair when received. Set-based because row by row
-- is slow: the apply worker builds a fresh executor state for every row it applies, and so
-- parses and compiles the ledger's CHECK constraints again for each one (43 % of the
-- centre's apply), and a row-by-row rollup applied about 5 300 rows/s here. Temporary, not
-- a shared table: each apply worker sees only its own rows, and can truncate the table when
-- the dead versions of the rows it deleted fill more than 8 pages (later scans read them;
-- autovacuum does not clean temporary tables). Truncated then, at the first charge of a
-- transaction, not at every commit (ON COMMIT DELETE ROWS): that truncation, its file system
-- calls and the rebuild of the TOAST index, took a third of a one-job transaction's apply.
-- Other ledger rows (deposits, grants, ...) are applied as they come.
CREATE FUNCTION @extschema@.note_replicated_charge() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        first boolean;
    BEGIN
        -- other kinds, and the held charges roll_up_received() inserts (a trigger's statement), go in
        IF NEW.kind <> 'charge' OR pg_catalog.pg_trigger_depth() > 1 THEN
            RETURN NEW;
        END IF;
        first := pg_catalog.current_setting('hpcacct.received_pending', true) IS DISTINCT FROM 'on';
        IF first THEN
            PERFORM pg_catalog.set_config('hpcacct.received_pending', 'on', true);
            IF pg_catalog.to_regclass('pg_temp.hpcacct_received') IS NULL THEN
                CREATE TEMPORARY TABLE hpcacct_received (
                    entry                @extschema@.ledger NOT NULL,
                    first_in_transaction boolean NOT NULL
                );
                CREATE CONSTRAINT TRIGGER hpcacct_received_roll_up AFTER INSERT ON pg_temp.hpcacct_received
                    DEFERRABLE INITIALLY DEFERRED
                    FOR EACH ROW WHEN (NEW.first_in_transaction) EXECUTE FUNCTION @extschema@.roll_up_received();
                -- written in replica sessions only: fire there
                ALTER TABLE pg_temp.hpcacct_received ENABLE ALWAYS TRIGGER hpcacct_received_roll_up;
            ELSIF pg_catalog.pg_relation_size('pg_temp.hpcacct_received') > 8 * 8192 THEN
                TRUNCATE pg_temp.hpcacct_received;  -- empty: only dead rows of earlier transactions
            END IF;
        END IF;
        INSERT INTO pg_temp.hpcacct_received (entry, first_in_transaction) VALUES (NEW, first);
        RETURN NULL;
    END
    $$;
COMMENT ON FUNCTION @extschema@.note_replicated_charge() IS
    'Row trigger of hpcacct.ledger for replicated rows (enabled for replica sessions only): holds received charges '
    'back until commit';
-- federation_prepare creates its trigger, ledger_roll_up_replicated, when this database joins a
-- federation, not before: a BEFORE INSERT row trigger, even one that does not fire, makes COPY
-- into the ledger (a restore) insert row by row instead of in batches.

-- Fires at commit for the first charge held in the transaction only (its WHEN clause), and
-- lowers the transaction's flag hpcacct.received_pending. Without JIT: the table is never
-- analyzed, the planner guesses thousands of rows, and compiling the plan cost 14 ms per
-- received transaction.
DO $do$
DECLARE
    received constant text := '(SELECT (r.entry).* FROM pg_temp.hpcacct_received r)';
BEGIN
    EXECUTE pg_catalog.format(
        'CREATE FUNCTION @extschema@.roll_up_received() RETURNS trigger LANGUAGE plpgsql '
        'SET search_path = pg_catalog, pg_temp SET jit = off AS %L',
        pg_catalog.format(E'\n    BEGIN\n'
                          '        PERFORM pg_catalog.set_config(''hpcacct.received_pending'', ''off'', true);\n'
                          '        INSERT INTO @extschema@.ledger OVERRIDING SYSTEM VALUE\n'
                          '        SELECT (r.entry).* FROM pg_temp.hpcacct_received r ORDER BY (r.entry).entry_id;\n'
                          '%s;\n'
                          '%s;\n'
                          '        DELETE FROM pg_temp.hpcacct_received;\n'
                          '        RETURN NULL;\n'
                          '    END\n    ',
                          @extschema@.rollup_insert_sql(received), @extschema@.consumption_rollup_insert_sql(received)));
END
$do$;
COMMENT ON FUNCTION @extschema@.roll_up_received() IS
    'Deferred trigger of pg_temp.hpcacct_received: inserts the charges held in the transaction into the ledger and '
    'rolls them up, once';

-- At a site, reference data is the centre's: a row written there would not reach the
-- centre or the other sites, and the centre's own row of that key would later stop the
-- site's replication on a conflict. A row trigger on each reference table refuses writes
-- from the site's own sessions (HA013); rows applied by replication (replica sessions) pass.
-- federation_prepare creates the triggers at a site (also on tables a later version adds).
CREATE FUNCTION @extschema@.federation_refuse_local_write() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        RAISE EXCEPTION '% is written at the federation''s centre, not at a site', TG_TABLE_NAME
            USING ERRCODE = 'HA013',
                  HINT = 'Make the change in the central database; it reaches every site by replication.';
    END
    $$;
COMMENT ON FUNCTION @extschema@.federation_refuse_local_write() IS
    'Trigger of the reference tables at a federation site: refuses writes of the site''s own sessions (HA013)';

-- Makes this database the centre (site 0) or site `site`: checks that it can be, records
-- it, narrows the ledger's id sequence to the site's range, and enables for replication the
-- triggers that must fire for replicated rows. Idempotent. Called by the procedures below.
CREATE FUNCTION @extschema@.federation_prepare(site integer, role text) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        node   @extschema@.federation_node;
        ids    constant int8range := @extschema@.federation_id_range(site);
        seq    constant text := pg_catalog.pg_get_serial_sequence('@extschema@.ledger', 'entry_id');
        stray  bigint;
        filled boolean;
        tab    regclass;
    BEGIN
        IF site IS NULL OR role IS NULL THEN
            RAISE EXCEPTION 'site and role must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF role NOT IN ('centre', 'site') OR (role = 'centre') <> (site = 0) OR site NOT BETWEEN 0 AND 32767 THEN
            RAISE EXCEPTION 'invalid federation site % for role %', site, role
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'The centre is site 0; cluster sites are numbered 1 to 32767.';
        END IF;
        SELECT * INTO node FROM @extschema@.federation_node;
        IF FOUND AND (node.site <> site OR node.role <> role) THEN
            RAISE EXCEPTION 'this database is already federation % %, not % %', node.role, node.site, role, site
                USING ERRCODE = 'HA010', HINT = 'A database has one place in a federation.';
        END IF;
        IF NOT FOUND THEN
            -- ids booked before: they must lie in the range, or they would collide with another site's
            SELECT count(*) INTO stray FROM @extschema@.ledger l WHERE NOT ids @> l.entry_id;
            IF stray > 0 THEN
                RAISE EXCEPTION 'the ledger holds % entries outside site %''s id range %', stray, site, ids
                    USING ERRCODE = 'HA011',
                          HINT = CASE WHEN role = 'centre' THEN 'An existing database can become the centre only.'
                                      ELSE 'A site joins with an empty ledger.' END;
            END IF;
            IF role = 'site' THEN
                -- reference data comes from the centre; rows of its own would conflict with the copy
                FOREACH tab IN ARRAY @extschema@.federation_reference_tables() LOOP
                    EXECUTE pg_catalog.format('SELECT EXISTS (SELECT 1 FROM %s)', tab) INTO filled;
                    IF filled THEN
                        RAISE EXCEPTION 'a joining site must not hold reference data: % has rows', tab
                            USING ERRCODE = 'HA012',
                                  HINT = 'Accounts, users, resources and settings are written at the centre; '
                                         'join with the extension freshly created.';
                    END IF;
                END LOOP;
            END IF;
            INSERT INTO @extschema@.federation_node (site, role) VALUES (site, role);
        END IF;

        -- the ledger's ids: this site's range only (a sequence never wraps: it stops at the end)
        IF EXISTS (SELECT 1 FROM @extschema@.ledger l
                   WHERE l.entry_id >= pg_catalog.lower(ids) AND l.entry_id < pg_catalog.upper(ids)) THEN
            EXECUTE pg_catalog.format('ALTER SEQUENCE %s MINVALUE %s MAXVALUE %s START WITH %s', seq,
                                      pg_catalog.lower(ids), pg_catalog.upper(ids) - 1, pg_catalog.lower(ids));
        ELSE
            EXECUTE pg_catalog.format('ALTER SEQUENCE %s MINVALUE %s MAXVALUE %s START WITH %s RESTART WITH %s', seq,
                                      pg_catalog.lower(ids), pg_catalog.upper(ids) - 1, pg_catalog.lower(ids),
                                      pg_catalog.lower(ids));
        END IF;

        -- triggers that must fire for rows received: the rollups of replicated charges, and a
        -- rebuild of the rollups when the time zone or half-life they depend on changes
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                       WHERE t.tgrelid = '@extschema@.ledger'::regclass AND t.tgname = 'ledger_roll_up_replicated') THEN
            CREATE TRIGGER ledger_roll_up_replicated BEFORE INSERT ON @extschema@.ledger
                FOR EACH ROW EXECUTE FUNCTION @extschema@.note_replicated_charge();
        END IF;
        ALTER TABLE @extschema@.ledger ENABLE REPLICA TRIGGER ledger_roll_up_replicated;
        ALTER TABLE @extschema@.setting ENABLE ALWAYS TRIGGER setting_rebuilds_rollup;
        ALTER TABLE @extschema@.fairshare_setting ENABLE ALWAYS TRIGGER fairshare_setting_rebuilds_rollup;
        -- at a site, the reference tables are written by replication only
        IF role = 'site' THEN
            FOREACH tab IN ARRAY @extschema@.federation_reference_tables() LOOP
                IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                               WHERE t.tgrelid = tab AND t.tgname = 'federation_centre_only') THEN
                    EXECUTE pg_catalog.format('CREATE TRIGGER federation_centre_only BEFORE INSERT OR UPDATE OR DELETE '
                                              'ON %s FOR EACH ROW EXECUTE FUNCTION '
                                              '@extschema@.federation_refuse_local_write()', tab);
                END IF;
            END LOOP;
        END IF;
    END
    $$;
REVOKE EXECUTE ON FUNCTION @extschema@.federation_prepare(integer, text) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.federation_prepare(integer, text) IS
    'Makes this database the federation centre (0) or a site: records it, narrows the ledger ids to its range, '
    'enables the triggers replicated rows need; idempotent';

-- Whether a logical replication slot exists in this cluster.
CREATE FUNCTION @extschema@.federation_slot_exists(slot text) RETURNS boolean
    LANGUAGE sql STABLE STRICT
    SET search_path = pg_catalog, pg_temp
    AS $$ SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots s WHERE s.slot_name = slot) $$;
COMMENT ON FUNCTION @extschema@.federation_slot_exists(text) IS 'Whether a replication slot of that name exists';

-- The procedures below create publications, replication slots and subscriptions. A slot
-- cannot be created in a transaction that has written anything, and CREATE SUBSCRIPTION
-- cannot create its slot on the publisher from inside a function or transaction block. So
-- each slot is created by the side that publishes, right after a COMMIT, and subscriptions
-- are created with create_slot = false on the slot made for them. That makes them
-- procedures: CALL them as a superuser, outside a transaction block. PostgreSQL forbids
-- COMMIT in a procedure with a SET clause, so instead of SET search_path each pins it with
-- set_config(…, true) first thing and again after every COMMIT (which ends the setting),
-- before any operator is resolved; pgTAP `privileges` checks that they do.

-- At the centre: publish to site `site` (number 1..32767) named `name`. Creates the
-- publication of the reference tables (shared by every site), the publication of the ledger
-- rows site `site` receives (every origin but its own) and the slot its subscription will
-- use. Idempotent. Then, at the site: federation_join(); and again at the centre:
-- federation_subscribe(), which subscribes to the site's charges.
CREATE PROCEDURE @extschema@.federation_publish(site integer, name text)
    LANGUAGE plpgsql
    AS $$
    DECLARE
        ids    int8range;
        pub    text;
        known  @extschema@.federation_site;
        tables text;
    BEGIN
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        IF site IS NULL OR name IS NULL THEN
            RAISE EXCEPTION 'site and name must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF site NOT BETWEEN 1 AND 32767 OR name !~ '^[a-z0-9_]{1,40}$' THEN
            RAISE EXCEPTION 'invalid site % "%"', site, name
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Sites are numbered 1 to 32767 and named with 1 to 40 of a-z, 0-9 and _.';
        END IF;
        PERFORM @extschema@.federation_prepare(0, 'centre');
        SELECT * INTO known FROM @extschema@.federation_site s WHERE s.site = federation_publish.site OR s.name = federation_publish.name;
        IF FOUND AND (known.site <> federation_publish.site OR known.name <> federation_publish.name) THEN
            RAISE EXCEPTION 'site % "%" conflicts with site % "%"', site, name, known.site, known.name
                USING ERRCODE = 'unique_violation';
        END IF;
        INSERT INTO @extschema@.federation_site (site, name) VALUES (site, name) ON CONFLICT DO NOTHING;

        SELECT pg_catalog.string_agg(t::text, ', ') INTO tables
        FROM pg_catalog.unnest(@extschema@.federation_reference_tables()) t;
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication p WHERE p.pubname = 'hpcacct_fed_reference') THEN
            EXECUTE pg_catalog.format('CREATE PUBLICATION hpcacct_fed_reference FOR TABLE %s '
                                      'WITH (publish = ''insert, update, delete'')', tables);
        ELSE
            EXECUTE pg_catalog.format('ALTER PUBLICATION hpcacct_fed_reference SET TABLE %s', tables);
        END IF;

        ids := @extschema@.federation_id_range(site);
        pub := 'hpcacct_fed_c2s_' || site;
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication p WHERE p.pubname = pub) THEN
            EXECUTE pg_catalog.format('CREATE PUBLICATION %I FOR TABLE @extschema@.ledger '
                                      'WHERE (entry_id < %s OR entry_id >= %s) WITH (publish = ''insert'')',
                                      pub, pg_catalog.lower(ids), pg_catalog.upper(ids));
        END IF;
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        IF NOT @extschema@.federation_slot_exists(pub) THEN
            PERFORM pg_catalog.pg_create_logical_replication_slot(pub, 'pgoutput');
        END IF;
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    END
    $$;
REVOKE EXECUTE ON PROCEDURE @extschema@.federation_publish(integer, text) FROM PUBLIC;
COMMENT ON PROCEDURE @extschema@.federation_publish(integer, text) IS
    'At the centre: publish reference data and the other sites'' ledger rows to site N, with its slot; idempotent';

-- At site `site`: join the federation whose centre is reached with `centre_conninfo`
-- (after federation_publish(site, …) there). Checks that this database may join (empty
-- reference tables and ledger, HA012 / HA011), numbers its ledger from site * 2^48,
-- publishes its own ledger rows and creates the slot the centre will subscribe with, then
-- subscribes to the centre. Idempotent: a second call updates the connection string.
CREATE PROCEDURE @extschema@.federation_join(site integer, centre_conninfo text)
    LANGUAGE plpgsql
    AS $$
    DECLARE
        ids  int8range;
        pub  text;
        sub  text;
        missing text;
    BEGIN
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        IF site IS NULL OR centre_conninfo IS NULL THEN
            RAISE EXCEPTION 'site and centre_conninfo must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        pub := 'hpcacct_fed_s2c_' || site;
        sub := 'hpcacct_fed_c2s_' || site;
        IF site NOT BETWEEN 1 AND 32767 THEN
            RAISE EXCEPTION 'invalid site %', site
                USING ERRCODE = 'invalid_parameter_value', HINT = 'Sites are numbered 1 to 32767; the centre is 0.';
        END IF;
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_subscription s
                   WHERE s.subname = sub AND s.subdbid = (SELECT d.oid FROM pg_catalog.pg_database d
                                                          WHERE d.datname = pg_catalog.current_database())) THEN
            -- joined before: the checks of an empty site no longer apply
            PERFORM @extschema@.federation_prepare(site, 'site');
            EXECUTE pg_catalog.format('ALTER SUBSCRIPTION %I CONNECTION %L', sub, centre_conninfo);
            EXECUTE pg_catalog.format('ALTER SUBSCRIPTION %I ENABLE', sub);
            -- reference tables a later version added reach the site only after a refresh,
            -- which PostgreSQL does not allow inside a procedure: say so
            SELECT pg_catalog.string_agg(t::text, ', ') INTO missing
            FROM pg_catalog.unnest(@extschema@.federation_reference_tables()) t
            WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_subscription_rel r
                              JOIN pg_catalog.pg_subscription s ON s.oid = r.srsubid
                              WHERE s.subname = sub AND r.srrelid = t);
            IF missing IS NOT NULL THEN
                RAISE WARNING 'this site does not receive %', missing
                    USING HINT = pg_catalog.format('After CALL hpcacct.federation_publish(%s, ...) at the centre, run '
                                                   'ALTER SUBSCRIPTION %I REFRESH PUBLICATION here.', site, sub);
            END IF;
            RETURN;
        END IF;
        PERFORM @extschema@.federation_prepare(site, 'site');
        ids := @extschema@.federation_id_range(site);
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication p WHERE p.pubname = pub) THEN
            EXECUTE pg_catalog.format('CREATE PUBLICATION %I FOR TABLE @extschema@.ledger '
                                      'WHERE (entry_id >= %s AND entry_id < %s) WITH (publish = ''insert'')',
                                      pub, pg_catalog.lower(ids), pg_catalog.upper(ids));
        END IF;
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        IF NOT @extschema@.federation_slot_exists(pub) THEN
            PERFORM pg_catalog.pg_create_logical_replication_slot(pub, 'pgoutput');
        END IF;
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        -- the centre made the slot for this subscription in federation_publish()
        EXECUTE pg_catalog.format('CREATE SUBSCRIPTION %I CONNECTION %L PUBLICATION hpcacct_fed_reference, %I '
                                  'WITH (create_slot = false, slot_name = %L, copy_data = true)',
                                  sub, centre_conninfo, sub, sub);
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    END
    $$;
REVOKE EXECUTE ON PROCEDURE @extschema@.federation_join(integer, text) FROM PUBLIC;
COMMENT ON PROCEDURE @extschema@.federation_join(integer, text) IS
    'At a cluster site: join the federation (ledger ids from site * 2^48, publish own charges, subscribe to the '
    'centre); idempotent';

-- At the centre, after federation_join() at the site: subscribe to site `site`'s own ledger
-- rows (its charges), reached with `site_conninfo`, on the slot the site created. Idempotent.
CREATE PROCEDURE @extschema@.federation_subscribe(site integer, site_conninfo text)
    LANGUAGE plpgsql
    AS $$
    DECLARE
        sub text;
    BEGIN
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        IF site IS NULL OR site_conninfo IS NULL THEN
            RAISE EXCEPTION 'site and site_conninfo must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        sub := 'hpcacct_fed_s2c_' || site;
        IF NOT EXISTS (SELECT 1 FROM @extschema@.federation_site s WHERE s.site = federation_subscribe.site)
           OR NOT EXISTS (SELECT 1 FROM @extschema@.federation_node n WHERE n.role = 'centre') THEN
            RAISE EXCEPTION 'site % is not published from this database', site
                USING ERRCODE = 'undefined_object', HINT = 'Run CALL hpcacct.federation_publish(site, name) first.';
        END IF;
        PERFORM @extschema@.federation_prepare(0, 'centre');
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_subscription s
                   WHERE s.subname = sub AND s.subdbid = (SELECT d.oid FROM pg_catalog.pg_database d
                                                          WHERE d.datname = pg_catalog.current_database())) THEN
            EXECUTE pg_catalog.format('ALTER SUBSCRIPTION %I CONNECTION %L', sub, site_conninfo);
            EXECUTE pg_catalog.format('ALTER SUBSCRIPTION %I SET (synchronous_commit = local)', sub);
            EXECUTE pg_catalog.format('ALTER SUBSCRIPTION %I ENABLE', sub);
            RETURN;
        END IF;
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        -- synchronous_commit = local: the centre relays what it applies to the other sites, and
        -- a walsender sends only flushed WAL; applied asynchronously (the default), a site's
        -- charge waited for the WAL writer (up to 3 x wal_writer_delay) before it went on
        EXECUTE pg_catalog.format('CREATE SUBSCRIPTION %I CONNECTION %L PUBLICATION %I '
                                  'WITH (create_slot = false, slot_name = %L, copy_data = true, '
                                  'synchronous_commit = local)',
                                  sub, site_conninfo, sub, sub);
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    END
    $$;
REVOKE EXECUTE ON PROCEDURE @extschema@.federation_subscribe(integer, text) FROM PUBLIC;
COMMENT ON PROCEDURE @extschema@.federation_subscribe(integer, text) IS
    'At the centre: subscribe to a site''s charges (after federation_join there); idempotent';

-- Per link of this database: the site at the other end, whether rows come in ('from') or go
-- out ('to'), whether the link is connected, the last ledger row here that the site booked
-- (for incoming links), the lag of the last row the receiver confirmed (outgoing links, from
-- the sending side) and the WAL not yet confirmed by the receiver, in bytes: rows pending
-- are somewhere in it (the exact count is only known at the other end).
CREATE VIEW @extschema@.federation_status WITH (security_invoker = true) AS
    WITH links AS (
        SELECT (pg_catalog.regexp_match(s.subname, '^hpcacct_fed_(c2s|s2c)_([0-9]+)$'))[2]::integer AS link_site,
               s.subname AS link, 'from' AS direction, s.subenabled AS enabled
        FROM pg_catalog.pg_subscription s
        WHERE s.subname ~ '^hpcacct_fed_(c2s|s2c)_[0-9]+$'
          AND s.subdbid = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
        UNION ALL
        SELECT (pg_catalog.regexp_match(r.slot_name::text, '^hpcacct_fed_(c2s|s2c)_([0-9]+)$'))[2]::integer,
               r.slot_name::text, 'to', true
        FROM pg_catalog.pg_replication_slots r
        WHERE r.slot_name ~ '^hpcacct_fed_(c2s|s2c)_[0-9]+$' AND r.database = pg_catalog.current_database()
    )
    SELECT CASE WHEN k.link ~ '^hpcacct_fed_c2s_' AND n.role = 'site' THEN 0 ELSE k.link_site END AS site,
           k.direction, k.link, k.enabled,
           CASE WHEN k.direction = 'from'
                THEN EXISTS (SELECT 1 FROM pg_catalog.pg_stat_subscription st
                             WHERE st.subname = k.link AND st.relid IS NULL AND st.pid IS NOT NULL)
                ELSE EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots r WHERE r.slot_name = k.link AND r.active)
           END AS connected,
           last.entry_id AS last_entry_id, last.booked_at AS last_booked_at,
           CASE WHEN k.direction = 'from'
                THEN (SELECT st.last_msg_receipt_time FROM pg_catalog.pg_stat_subscription st
                      WHERE st.subname = k.link AND st.relid IS NULL) END AS last_message_at,
           CASE WHEN k.direction = 'to'
                THEN (SELECT pg_catalog.max(sr.replay_lag) FROM pg_catalog.pg_stat_replication sr
                      WHERE sr.application_name = k.link) END AS lag,
           CASE WHEN k.direction = 'to'
                THEN (SELECT pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), r.confirmed_flush_lsn)
                      FROM pg_catalog.pg_replication_slots r WHERE r.slot_name = k.link) END AS pending_wal_bytes
    FROM links k
    LEFT JOIN @extschema@.federation_node n ON true
    LEFT JOIN LATERAL (
        SELECT @extschema@.federation_id_range(
                   CASE WHEN k.link ~ '^hpcacct_fed_c2s_' AND n.role = 'site' THEN 0 ELSE k.link_site END) AS ids
    ) r ON true
    LEFT JOIN LATERAL (
        SELECT l.entry_id, l.booked_at FROM @extschema@.ledger l
        WHERE k.direction = 'from'
          AND l.entry_id >= pg_catalog.lower(r.ids) AND l.entry_id < pg_catalog.upper(r.ids)
        ORDER BY l.entry_id DESC LIMIT 1
    ) last ON true;
COMMENT ON VIEW @extschema@.federation_status IS
    'Per federation link of this database: the site at the other end, direction, connected, the last ledger row '
    'received from it, the lag and unconfirmed WAL of outgoing links';
-- what setup_roles() grants, on the objects above
DO $do$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'hpcacct_admin') THEN
        GRANT SELECT, INSERT, UPDATE, DELETE ON @extschema@.federation_node, @extschema@.federation_site,
                                                @extschema@.federation_status
            TO hpcacct_admin;
        GRANT EXECUTE ON FUNCTION @extschema@.federation_id_range(integer), @extschema@.federation_origin(bigint),
                                  @extschema@.federation_reference_tables(), @extschema@.note_replicated_charge(),
                                  @extschema@.roll_up_received(), @extschema@.federation_prepare(integer, text),
                                  @extschema@.federation_slot_exists(text), @extschema@.federation_refuse_local_write()
            TO hpcacct_admin;
        GRANT EXECUTE ON PROCEDURE @extschema@.federation_publish(integer, text),
                                   @extschema@.federation_join(integer, text),
                                   @extschema@.federation_subscribe(integer, text)
            TO hpcacct_admin;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'hpcacct_portal') THEN
        GRANT SELECT ON @extschema@.federation_node, @extschema@.federation_site, @extschema@.federation_status
            TO hpcacct_portal;
    END IF;
END
$do$;
-- end of federation (issue 17)

-- notifications (issue 16) ---------------------------------------------------------------
-- The objects of sql/install/95_notify.sql, as they are there.
-- ---- contacts --------------------------------------------------------------------------

CREATE TABLE @extschema@.contact (
    username     text PRIMARY KEY REFERENCES @extschema@.hpc_user,
    email        text NOT NULL,
    display_name text,
    notify       boolean NOT NULL DEFAULT true,
    updated_at   timestamptz NOT NULL DEFAULT pg_catalog.statement_timestamp(),
    -- an address as SMTP takes it in RCPT TO: no spaces, controls, brackets or separators,
    -- so that no value can add a header or a recipient
    CONSTRAINT contact_email CHECK (email ~ '^[^@[:space:][:cntrl:]<>(),;:"\\]+@[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$'
                                    AND pg_catalog.length(email) <= 254),
    CONSTRAINT contact_display_name CHECK (display_name !~ '[[:cntrl:]]' AND pg_catalog.length(display_name) <= 200)
);
COMMENT ON TABLE @extschema@.contact IS
    'E-mail address of a user; notify = false silences them. A portal user reads and changes only their own row';

-- A portal user sees and changes only their own row; administrators see and change every row.
ALTER TABLE @extschema@.contact ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_contact ON @extschema@.contact
    USING ((SELECT @extschema@.sees_all_accounts()) OR username = pg_catalog.session_user())
    WITH CHECK ((SELECT @extschema@.sees_all_accounts()) OR username = pg_catalog.session_user());

-- Who hears about an account: its managers (membership role admin: HLRN's project
-- administrators, GENCI's project manager, the PI; a personal account's owner) and its
-- members, with the addresses of those who have a contact and have not silenced it.
CREATE VIEW @extschema@.account_recipient AS
    SELECT m.account, m.username, CASE m.role WHEN 'admin' THEN 'manager' ELSE 'member' END AS role,
           c.email, c.display_name
    FROM @extschema@.membership m
    JOIN @extschema@.contact c ON c.username = m.username
    WHERE c.notify;
COMMENT ON VIEW @extschema@.account_recipient IS
    'Per account: the managers (membership admins) and members with an e-mail address who receive notifications';

-- ---- the outbox ------------------------------------------------------------------------

CREATE TABLE @extschema@.outbox (
    message_id   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic        text NOT NULL CHECK (topic IN ('regulation_warning', 'regulation_retraction', 'annual_warning',
                                                'annual_retraction', 'quota_state', 'account_expired',
                                                'account_deleted', 'job_held', 'job_released', 'balance_low')),
    -- the decision the message is about: one message per topic and decision, whatever re-runs
    decision_key text NOT NULL,
    -- the account it is about (NULL: a job held for an account that does not exist)
    account      text REFERENCES @extschema@.account,
    subject      text NOT NULL CHECK (subject !~ '[[:cntrl:]]'),
    body         text NOT NULL,
    figures      jsonb NOT NULL DEFAULT '{}',
    -- the users it is for (the account's managers, maybe its members, named users): those
    -- with a contact get a delivery each
    addressed_to text[] NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL DEFAULT pg_catalog.statement_timestamp(),
    CONSTRAINT outbox_once UNIQUE (topic, decision_key)
);
COMMENT ON TABLE @extschema@.outbox IS
    'Messages about decisions, written in the deciding transaction; one per topic and decision (decision_key)';

-- One row per message and recipient: the delivery record. States: pending (to send, from
-- next_attempt on; a sender may hold a lease on it), sending (a sender committed to finish
-- the SMTP transaction: the server may have it), delivered, failed (refused for good), and
-- uncertain (a sender stopped while sending: it is never sent again automatically).
CREATE TABLE @extschema@.outbox_recipient (
    recipient_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id   bigint NOT NULL REFERENCES @extschema@.outbox,
    username     text NOT NULL,
    address      text NOT NULL,
    state        text NOT NULL DEFAULT 'pending'
                 CHECK (state IN ('pending', 'sending', 'delivered', 'failed', 'uncertain')),
    attempts     integer NOT NULL DEFAULT 0,
    next_attempt timestamptz NOT NULL DEFAULT pg_catalog.statement_timestamp(),
    lease_owner  text,
    lease_until  timestamptz,
    last_error   text,
    delivered_at timestamptz,
    UNIQUE (message_id, address)
);
CREATE INDEX outbox_recipient_due ON @extschema@.outbox_recipient (next_attempt) WHERE state IN ('pending', 'sending');
COMMENT ON TABLE @extschema@.outbox_recipient IS
    'Delivery record per message and recipient: pending, sending, delivered, failed or uncertain, with attempts and lease';

SELECT pg_catalog.pg_extension_config_dump('@extschema@.contact', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.outbox', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.outbox_message_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.outbox_recipient', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.outbox_recipient_recipient_id_seq', '');

-- Writes messages and their recipients, one per decision: those whose (topic, decision_key)
-- has a message already are skipped. messages is a jsonb array of {topic, decision_key,
-- account, subject, body, figures, to_members, also}; the recipients of each are the
-- account's managers, its members too when to_members, and the users named in also, those
-- with a contact that is not silenced. One set-based statement for all, and one NOTIFY
-- hpcacct_outbox (delivered at commit) when anything was written. Returns the new ids.
CREATE FUNCTION @extschema@.outbox_add_all(messages jsonb) RETURNS SETOF bigint
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        ids bigint[];
    BEGIN
        -- set-based and index-driven: each message's users are found by its account (membership's
        -- key) and carried in its row, so no step joins the new messages to the input
        WITH written AS (
            INSERT INTO @extschema@.outbox (topic, decision_key, account, subject, body, figures, addressed_to)
            SELECT m.topic, m.decision_key, m.account, m.subject, m.body, coalesce(m.figures, '{}'),
                   ARRAY(SELECT u.username FROM pg_catalog.unnest(coalesce(m.also, '{}')) AS u(username)
                         UNION
                         SELECT ms.username FROM @extschema@.membership ms
                         WHERE ms.account = m.account AND (ms.role = 'admin' OR coalesce(m.to_members, false))
                         ORDER BY 1)
            FROM pg_catalog.jsonb_to_recordset(coalesce(messages, '[]')) AS m(topic text, decision_key text, account text,
                                                                             subject text, body text, figures jsonb,
                                                                             to_members boolean, also text[])
            ORDER BY m.topic, m.decision_key
            ON CONFLICT ON CONSTRAINT outbox_once DO NOTHING
            RETURNING message_id, addressed_to
        ), recipients AS (
            INSERT INTO @extschema@.outbox_recipient (message_id, username, address)
            SELECT DISTINCT ON (w.message_id, c.email) w.message_id, c.username, c.email
            FROM written w
            CROSS JOIN LATERAL pg_catalog.unnest(w.addressed_to) AS u(username)
            JOIN @extschema@.contact c ON c.username = u.username AND c.notify
            ORDER BY w.message_id, c.email, c.username
        )
        SELECT pg_catalog.array_agg(w.message_id ORDER BY w.message_id) INTO ids FROM written w;
        IF ids IS NOT NULL THEN
            PERFORM pg_catalog.pg_notify('hpcacct_outbox', pg_catalog.array_length(ids, 1)::text);
            RETURN QUERY SELECT pg_catalog.unnest(ids);
        END IF;
    END
    $$;
COMMENT ON FUNCTION @extschema@.outbox_add_all(jsonb) IS
    'Writes messages about decisions and their recipients (managers, members if asked, named users), each decision '
    'once, in one statement; one NOTIFY hpcacct_outbox';

-- One message: outbox_add_all of one. Returns its id, NULL when the decision had one already.
CREATE FUNCTION @extschema@.outbox_add(topic text, decision_key text, account text, subject text, body text,
                                       figures jsonb, to_members boolean DEFAULT false,
                                       also text[] DEFAULT '{}')
    RETURNS bigint
    LANGUAGE sql
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT id
        FROM @extschema@.outbox_add_all(pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object(
                 'topic', $1, 'decision_key', $2, 'account', $3, 'subject', $4, 'body', $5, 'figures', $6,
                 'to_members', $7, 'also', pg_catalog.to_jsonb($8)))) AS id
    $$;
COMMENT ON FUNCTION @extschema@.outbox_add(text, text, text, text, text, jsonb, boolean, text[]) IS
    'Writes a message about a decision and its recipients (managers, members if asked, named users) once; NOTIFY hpcacct_outbox';

-- Numbers in messages: whole units with a thin grouping, as the documents print them.
-- (A body parsed at creation, without a SET clause: it is inlined into the messages' queries.)
CREATE FUNCTION @extschema@.notify_number(x numeric) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN x IS NULL THEN 'n/a'
                ELSE pg_catalog.replace(pg_catalog.btrim(pg_catalog.to_char(pg_catalog.round(x), 'S999,999,999,999,990')), '+', '')
           END;
COMMENT ON FUNCTION @extschema@.notify_number(numeric) IS 'A figure as messages print it: rounded, thousands separated by commas';

-- ---- GENCI: regulation outcomes ------------------------------------------------------------

CREATE FUNCTION @extschema@.notify_regulation() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM @extschema@.outbox_add_all(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
            'topic', x.topic, 'decision_key', pg_catalog.concat_ws('/', r.account, r.machine, r.run_date, r.run),
            'account', r.account,
            'subject', pg_catalog.format('[hpcacct] %s on %s: %s (%s)', r.account, r.machine,
                                         CASE x.topic WHEN 'regulation_warning' THEN 'under-consumption warning'
                                                      WHEN 'regulation_retraction' THEN 'hours retracted'
                                                      WHEN 'annual_warning' THEN 'annual under-consumption warning'
                                                      ELSE 'annual retraction' END, r.run_date),
            'body', E'Dear project manager,\n\n' || CASE x.topic
                WHEN 'regulation_warning' THEN pg_catalog.format(
                    E'On %s project %s had consumed %s hours on %s, against a theoretical consumption TC of %s hours:\n'
                    'an under-consumption of %s hours, between one and two theoretical monthly consumptions\n'
                    '(TMC = %s hours). No hours are retracted now; should the under-consumption reach twice the TMC\n'
                    'on a later 15th, a TMC of hours will be retracted from the allocation.',
                    r.figures_at, r.account, @extschema@.notify_number(r.consumption::numeric), r.machine,
                    @extschema@.notify_number(r.tc::numeric), @extschema@.notify_number(-r.delta::numeric),
                    @extschema@.notify_number(r.tmc::numeric))
                WHEN 'regulation_retraction' THEN pg_catalog.format(
                    E'On %s project %s had consumed %s hours on %s, against a theoretical consumption TC of %s hours:\n'
                    'an under-consumption of %s hours, at least twice the theoretical monthly consumption\n'
                    '(TMC = %s hours). %s hours (one TMC) are retracted from the allocation, effective %s and\n'
                    'valid until 31 December: the allocation goes from %s to %s hours.',
                    r.figures_at, r.account, @extschema@.notify_number(r.consumption::numeric), r.machine,
                    @extschema@.notify_number(r.tc::numeric), @extschema@.notify_number(-r.delta::numeric),
                    @extschema@.notify_number(r.tmc::numeric), @extschema@.notify_number(r.retracted),
                    r.run_date, @extschema@.notify_number(r.alloc), @extschema@.notify_number(r.alloc - r.retracted))
                WHEN 'annual_warning' THEN pg_catalog.format(
                    E'By the end of %s project %s had used %s of its %s hours on %s (%s %%), less than the %s %%\n'
                    'expected in the first five months. Unless a justification reaches GENCI before the end of May,\n'
                    'up to %s %% of the annual allocation may be retracted after May.',
                    r.figures_at, r.account, @extschema@.notify_number(r.consumption::numeric),
                    @extschema@.notify_number(r.alloc), r.machine, pg_catalog.round(r.used_percent::numeric, 1),
                    s.annual_warning_percent, s.annual_retraction_percent)
                ELSE pg_catalog.format(
                    E'By the end of %s project %s had used %s of its %s hours on %s (%s %%), less than %s %%,\n'
                    'and it was not exonerated. %s hours are retracted from the allocation, effective %s: it goes\n'
                    'from %s to %s hours.',
                    r.figures_at, r.account, @extschema@.notify_number(r.consumption::numeric),
                    @extschema@.notify_number(r.alloc), r.machine, pg_catalog.round(r.used_percent::numeric, 1),
                    s.annual_warning_percent, @extschema@.notify_number(r.retracted), r.run_date,
                    @extschema@.notify_number(r.alloc), @extschema@.notify_number(r.alloc - r.retracted))
            END || E'\n\n'
            || pg_catalog.format(E'Figures at the end of %s:\n  Alloc        %s\n  TMC          %s\n  TC           %s\n'
                                 '  consumption  %s\n  delta        %s\n  retracted    %s\n',
                                 r.figures_at, @extschema@.notify_number(r.alloc), @extschema@.notify_number(r.tmc::numeric),
                                 @extschema@.notify_number(r.tc::numeric), @extschema@.notify_number(r.consumption::numeric),
                                 @extschema@.notify_number(r.delta::numeric), @extschema@.notify_number(r.retracted)),
            'figures', pg_catalog.jsonb_build_object('run_date', r.run_date, 'run', r.run, 'machine', r.machine,
                                                     'figures_at', r.figures_at, 'alloc', r.alloc, 'tmc', r.tmc, 'tc', r.tc,
                                                     'consumption', r.consumption, 'delta', r.delta,
                                                     'used_percent', r.used_percent, 'retracted', r.retracted))))
        FROM new_rows r
        JOIN @extschema@.machine_setting s ON s.machine = r.machine
        CROSS JOIN LATERAL (SELECT CASE r.run WHEN 'monthly' THEN 'regulation_' || r.outcome ELSE r.run END AS topic) x
        WHERE (r.run = 'monthly' AND r.outcome IN ('warning', 'retraction'))
           OR (r.run = 'annual_warning' AND r.outcome = 'warning')
           OR (r.run = 'annual_retraction' AND r.outcome = 'retraction');
        RETURN NULL;
    END
    $$;
COMMENT ON FUNCTION @extschema@.notify_regulation() IS
    'Trigger: a regulation warning or retraction logged by regulate() writes its message to the project managers';
CREATE TRIGGER notify_regulation AFTER INSERT ON @extschema@.regulation_log
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.notify_regulation();

-- ---- HLRN: expiry and deletion of personal accounts (open_quarter) ----------------------

CREATE FUNCTION @extschema@.notify_quarter() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM @extschema@.outbox_add_all(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
            'topic', 'account_' || r.action, 'decision_key', pg_catalog.concat_ws('/', r.account, r.quarter),
            'account', r.account, 'also', pg_catalog.jsonb_build_array(r.account),
            'subject', pg_catalog.format('[hpcacct] account %s %s (%s)', r.account,
                                         CASE r.action WHEN 'expired' THEN 'has expired' ELSE 'is deleted' END, r.quarter),
            'body', CASE r.action
                WHEN 'expired' THEN pg_catalog.format(
                    E'Dear %s,\n\nyour personal account %s holds no allocation for the quarter starting %s, so it\n'
                    'has expired: you can still log in and work interactively, but you cannot submit batch jobs.\n'
                    'A personal account that is still expired at the next quarter start (%s) is deleted, and\n'
                    'with it the files of the login. Join an active project or ask your consultant for an\n'
                    'allocation to keep it.\n', r.account, r.account, r.quarter,
                    (r.quarter + interval '3 months')::date)
                ELSE pg_catalog.format(
                    E'Dear %s,\n\nyour personal account %s expired in the previous quarter and still holds no\n'
                    'allocation on %s: it is deleted. The login is closed and its files on disk and tape are\n'
                    'deleted.\n', r.account, r.account, r.quarter)
            END,
            'figures', pg_catalog.jsonb_build_object('quarter', r.quarter, 'action', r.action))))
        FROM new_rows r
        -- an account that expired the quarter before is deleted by the same run: one notice, the deletion
        WHERE r.action = 'deleted'
           OR (r.action = 'expired'
               AND NOT EXISTS (SELECT 1 FROM @extschema@.quarter_log p
                               WHERE p.account = r.account AND p.action = 'expired'
                                 AND p.quarter = (r.quarter - interval '3 months')::date));
        RETURN NULL;
    END
    $$;
COMMENT ON FUNCTION @extschema@.notify_quarter() IS
    'Trigger: an expiry or deletion logged by open_quarter() writes its message to the account''s owner';
CREATE TRIGGER notify_quarter AFTER INSERT ON @extschema@.quarter_log
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.notify_quarter();

-- ---- HLRN: a queued job held (recheck_queued), or released -----------------------------

CREATE FUNCTION @extschema@.notify_hold() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM @extschema@.outbox_add_all(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
            'topic', CASE WHEN n.held THEN 'job_held' ELSE 'job_released' END,
            'decision_key', pg_catalog.concat_ws('/', n.cluster, n.jobid, CASE WHEN n.held THEN 'held' ELSE 'released' END,
                                                 coalesce(n.checked_at, pg_catalog.statement_timestamp())),
            -- NULL when the job names an account that does not exist
            'account', (SELECT a.name FROM @extschema@.account a WHERE a.name = coalesce(n.account, n.username)),
            'also', pg_catalog.jsonb_build_array(n.username),
            'subject', pg_catalog.format('[hpcacct] job %s on %s %s', n.jobid, n.cluster,
                                         CASE WHEN n.held THEN 'is held' ELSE 'is released' END),
            'body', CASE WHEN n.held THEN pg_catalog.format(
                    E'Dear %s,\n\nyour queued job %s on %s (account %s) has been put on hold: %s.\n'
                    'Correct the reason (e.g. choose another account) and release the job, or ask the\n'
                    'project administrator for an allocation.\n',
                    n.username, n.jobid, n.cluster, coalesce(n.account, 'default'), coalesce(n.hold_reason, 'no reason given'))
                 ELSE pg_catalog.format(E'Dear %s,\n\nyour queued job %s on %s (account %s) is no longer held.\n',
                    n.username, n.jobid, n.cluster, coalesce(n.account, 'default'))
            END,
            'figures', pg_catalog.jsonb_build_object('cluster', n.cluster, 'jobid', n.jobid, 'reason', n.hold_reason))))
        FROM new_rows n
        JOIN old_rows o ON o.cluster = n.cluster AND o.jobid = n.jobid
        WHERE n.held IS DISTINCT FROM o.held;
        RETURN NULL;
    END
    $$;
COMMENT ON FUNCTION @extschema@.notify_hold() IS
    'Trigger: a queued job put on hold (or released) writes its message to the job''s owner';
CREATE TRIGGER notify_hold AFTER UPDATE ON @extschema@.pending_job
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.notify_hold();

-- ---- RWTH: sliding-window quota states; HLRN: a balance below a threshold ----------------
--
-- No procedure records these: the quota state follows from the charges of every job, and a
-- balance from every charge. notify_scan(at) compares them with what was last notified and
-- writes a message for each change, in its own transaction (schedule it, e.g. hourly).

-- The quota state each account was last told of (none yet: normal).
CREATE TABLE @extschema@.quota_state_notified (
    account     text PRIMARY KEY REFERENCES @extschema@.account,
    state       text NOT NULL CHECK (state IN ('normal', 'low_priority', 'blocked')),
    since       date NOT NULL,
    notified_at timestamptz NOT NULL DEFAULT pg_catalog.statement_timestamp()
);
COMMENT ON TABLE @extschema@.quota_state_notified IS
    'Sliding-window quota state each account was last notified of (notify_scan); no row: normal';

-- Site thresholds: when an account's balance in a quarter falls below this percentage of the
-- quarter's allocation (deposits, transfers and refunds), its managers are told, once per
-- account, quarter and threshold. 0 means a negative balance (jobs are refused).
CREATE TABLE @extschema@.balance_threshold (
    percent numeric PRIMARY KEY CHECK (percent >= 0 AND percent < 100),
    note    text
);
COMMENT ON TABLE @extschema@.balance_threshold IS
    'Balance thresholds (percent of the quarter''s allocation left; 0: negative) whose crossing notifies the managers';

SELECT pg_catalog.pg_extension_config_dump('@extschema@.quota_state_notified', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.balance_threshold', '');

CREATE FUNCTION @extschema@.notify_scan(at date DEFAULT @extschema@.site_today()) RETURNS integer
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        r record;
        q date;
        written integer := 0;
        id bigint;
        bank_unit text;
    BEGIN
        IF at IS NULL THEN
            RAISE EXCEPTION 'notify_scan needs a date' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF NOT pg_catalog.isfinite(at) THEN
            RAISE EXCEPTION 'notify_scan needs a finite date' USING ERRCODE = 'datetime_field_overflow';
        END IF;
        -- one scan at a time: a second one waits and then finds the states notified
        LOCK TABLE @extschema@.quota_state_notified IN SHARE ROW EXCLUSIVE MODE;

        -- quota states: entry into low_priority and blocked, and back
        FOR r IN SELECT u.*, coalesce(n.state, 'normal') AS old_state
                 FROM (SELECT DISTINCT p.account FROM @extschema@.quota_period p) a
                 CROSS JOIN LATERAL @extschema@.window_quota_usage(a.account, at) u
                 LEFT JOIN @extschema@.quota_state_notified n ON n.account = u.account
                 WHERE u.state IS DISTINCT FROM coalesce(n.state, 'normal')
                 ORDER BY u.account LOOP
            id := @extschema@.outbox_add(
                'quota_state', pg_catalog.concat_ws('/', r.account, at, r.old_state, r.state), r.account,
                pg_catalog.format('[hpcacct] %s: quota state %s (%s)', r.account, pg_catalog.replace(r.state, '_', ' '), at),
                pg_catalog.format(E'Dear members of %s,\n\nthe core-hour quota of %s is now in state "%s" (before: "%s").\n%s\n\n'
                                  'Accounting period:            %s to %s\n'
                                  'Monthly allowance:            %s %s\n'
                                  'Remaining of previous month:  %s\n'
                                  'Consumed this month:          %s\n'
                                  'Consumable (%%):               %s\n'
                                  'Consumable:                   %s\n',
                                  r.account, r.account, r.state, r.old_state,
                                  CASE r.state
                                      WHEN 'low_priority' THEN E'The quota of the three-month window is used up: jobs still run, and count, but only\nwhen no other project with quota left is waiting (low-priority mode).'
                                      WHEN 'blocked' THEN E'The monthly quota was exceeded six times or the period''s quota twice: no new job can\nbe submitted.'
                                      ELSE E'The quota of the three-month window is no longer used up: jobs run with normal priority.'
                                  END,
                                  r.period_start, r.period_end,
                                  @extschema@.notify_number(r.monthly::numeric), r.unit,
                                  @extschema@.notify_number(r.remaining_prev::numeric),
                                  @extschema@.notify_number(r.consumed_current::numeric),
                                  @extschema@.notify_number(r.consumable_pct::numeric),
                                  @extschema@.notify_number(r.consumable::numeric)),
                pg_catalog.jsonb_build_object('at', at, 'state', r.state, 'previous_state', r.old_state,
                                              'monthly', r.monthly, 'remaining_prev', r.remaining_prev,
                                              'consumed_current', r.consumed_current,
                                              'consumable_pct', r.consumable_pct, 'consumable', r.consumable,
                                              'unit', r.unit),
                true);
            written := written + (id IS NOT NULL)::integer;
            INSERT INTO @extschema@.quota_state_notified AS n (account, state, since)
            VALUES (r.account, r.state, at)
            ON CONFLICT (account) DO UPDATE
                SET state = EXCLUDED.state, since = EXCLUDED.since, notified_at = pg_catalog.statement_timestamp();
        END LOOP;

        -- balances below a threshold, once per account, quarter and threshold
        q := @extschema@.quarter_start(at);
        bank_unit := @extschema@.setting_value('bank_unit');
        FOR r IN WITH alloc AS (
                     SELECT l.account, sum(l.amount) AS amount
                     FROM @extschema@.ledger l
                     WHERE l.kind IN ('deposit', 'transfer', 'refund') AND l.unit = bank_unit
                       AND l.valid_from >= q AND l.valid_from < q + interval '3 months'
                     GROUP BY l.account
                     HAVING sum(l.amount) > 0
                 )
                 SELECT a.account, a.amount AS alloc, b.balance, t.percent
                 FROM alloc a
                 CROSS JOIN LATERAL (SELECT @extschema@.balance(a.account, at) AS balance) b
                 JOIN @extschema@.balance_threshold t
                   ON (t.percent = 0 AND b.balance < 0) OR (t.percent > 0 AND b.balance < a.amount * t.percent / 100)
                 ORDER BY a.account, t.percent LOOP
            id := @extschema@.outbox_add(
                'balance_low', pg_catalog.concat_ws('/', r.account, q, r.percent), r.account,
                pg_catalog.format('[hpcacct] %s: %s', r.account,
                                  CASE WHEN r.percent = 0 THEN 'balance negative, jobs are refused'
                                       ELSE pg_catalog.format('less than %s %% of the quarter''s credits left', r.percent) END),
                pg_catalog.format(E'Dear project administrator,\n\naccount %s holds %s %s of the %s %s of the quarter starting %s (%s %%).\n%s\n',
                                  r.account, @extschema@.notify_number(r.balance), bank_unit,
                                  @extschema@.notify_number(r.alloc), bank_unit, q,
                                  pg_catalog.round(100 * r.balance / r.alloc, 1),
                                  CASE WHEN r.percent = 0
                                       THEN 'The balance is negative: new jobs and queued jobs of the account are refused.'
                                       ELSE pg_catalog.format('That is below the threshold of %s %%.', r.percent) END),
                pg_catalog.jsonb_build_object('quarter', q, 'balance', r.balance, 'allocation', r.alloc,
                                              'threshold_percent', r.percent, 'unit', bank_unit));
            written := written + (id IS NOT NULL)::integer;
        END LOOP;
        RETURN written;
    END
    $$;
COMMENT ON FUNCTION @extschema@.notify_scan(date) IS
    'Writes messages for sliding-window quota state changes since the last notified one and for quarter balances '
    'below a site threshold (once per account, quarter and threshold); returns how many';

-- ---- the sender's protocol ----------------------------------------------------------------
--
-- 1. outbox_claim: recipients whose delivery is due, under a lease of the calling sender;
--    deliveries a sender left in 'sending' after its lease ran out become 'uncertain'.
-- 2. outbox_sending, committed before the SMTP server is told the message is complete (the
--    final dot): from here on the server may have it, so it is never sent again by itself.
--    It fails (false) when the lease was lost to another sender.
-- 3. outbox_result: delivered, retry (with back-off), failed or uncertain.

CREATE FUNCTION @extschema@.outbox_claim(worker text, lease interval DEFAULT '5 minutes', batch integer DEFAULT 50)
    RETURNS TABLE (recipient_id bigint, message_id bigint, address text, display_name text, subject text,
                   body text, created_at timestamptz, attempts integer)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF worker IS NULL OR lease IS NULL OR batch IS NULL THEN
            RAISE EXCEPTION 'outbox_claim needs a worker, a lease and a batch size' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF lease <= interval '0' OR batch < 1 THEN
            RAISE EXCEPTION 'outbox_claim needs a positive lease and batch size' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        UPDATE @extschema@.outbox_recipient r
        SET state = 'uncertain', lease_owner = NULL, lease_until = NULL,
            last_error = pg_catalog.format('sender %s stopped while sending (lease until %s): not sent again',
                                           r.lease_owner, r.lease_until)
        WHERE r.state = 'sending' AND r.lease_until < pg_catalog.clock_timestamp();
        RETURN QUERY
        WITH due AS (
            SELECT r.recipient_id
            FROM @extschema@.outbox_recipient r
            WHERE r.state = 'pending' AND r.next_attempt <= pg_catalog.clock_timestamp()
              AND (r.lease_until IS NULL OR r.lease_until < pg_catalog.clock_timestamp())
            ORDER BY r.next_attempt, r.recipient_id
            LIMIT batch
            FOR UPDATE SKIP LOCKED
        ), claimed AS (
            UPDATE @extschema@.outbox_recipient r
            SET lease_owner = worker, lease_until = pg_catalog.clock_timestamp() + lease, attempts = r.attempts + 1
            FROM due
            WHERE r.recipient_id = due.recipient_id
            RETURNING r.*
        )
        SELECT c.recipient_id, c.message_id, c.address, k.display_name, m.subject, m.body, m.created_at, c.attempts
        FROM claimed c
        JOIN @extschema@.outbox m ON m.message_id = c.message_id
        LEFT JOIN @extschema@.contact k ON k.username = c.username
        ORDER BY c.recipient_id;
    END
    $$;
COMMENT ON FUNCTION @extschema@.outbox_claim(text, interval, integer) IS
    'Sender: leases up to batch due deliveries to worker; marks deliveries left in sending past their lease uncertain';

CREATE FUNCTION @extschema@.outbox_sending(worker text, recipient bigint) RETURNS boolean
    LANGUAGE sql
    SET search_path = pg_catalog, pg_temp
    AS $$
        WITH s AS (
            UPDATE @extschema@.outbox_recipient r SET state = 'sending'
            WHERE r.recipient_id = recipient AND r.state = 'pending' AND r.lease_owner = worker
              AND r.lease_until > pg_catalog.clock_timestamp()
            RETURNING 1
        )
        SELECT EXISTS (SELECT 1 FROM s)
    $$;
COMMENT ON FUNCTION @extschema@.outbox_sending(text, bigint) IS
    'Sender: records that the SMTP transaction is about to complete; false when worker no longer holds the lease';

CREATE FUNCTION @extschema@.outbox_result(worker text, recipient bigint, outcome text, error text DEFAULT NULL,
                                          retry_base interval DEFAULT '1 minute',
                                          retry_max interval DEFAULT '1 hour')
    RETURNS boolean
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        done boolean;
    BEGIN
        IF outcome IS NULL OR outcome NOT IN ('delivered', 'retry', 'failed', 'uncertain') THEN
            RAISE EXCEPTION 'unknown delivery outcome "%"', outcome
                USING ERRCODE = 'invalid_parameter_value', HINT = 'Use delivered, retry, failed or uncertain.';
        END IF;
        UPDATE @extschema@.outbox_recipient r
        SET state = CASE outcome WHEN 'retry' THEN 'pending' ELSE outcome END,
            next_attempt = CASE WHEN outcome = 'retry'
                                THEN pg_catalog.clock_timestamp()
                                     + least(retry_max, retry_base * pg_catalog.power(2, least(greatest(r.attempts - 1, 0), 30)))
                                ELSE r.next_attempt END,
            delivered_at = CASE WHEN outcome = 'delivered' THEN pg_catalog.clock_timestamp() END,
            last_error = error, lease_owner = NULL, lease_until = NULL
        WHERE r.recipient_id = recipient AND r.lease_owner = worker AND r.state IN ('pending', 'sending')
        RETURNING true INTO done;
        RETURN coalesce(done, false);
    END
    $$;
COMMENT ON FUNCTION @extschema@.outbox_result(text, bigint, text, text, interval, interval) IS
    'Sender: records a delivery''s outcome (delivered, retry after base * 2^(attempts-1) up to max, failed, uncertain)';

-- What a site watches: every message with its deliveries.
CREATE VIEW @extschema@.outbox_status AS
    SELECT m.message_id, m.topic, m.account, m.subject, m.created_at,
           r.recipient_id, r.username, r.address, coalesce(r.state, 'no_recipient') AS state, r.attempts,
           r.next_attempt, r.last_error, r.delivered_at
    FROM @extschema@.outbox m
    LEFT JOIN @extschema@.outbox_recipient r ON r.message_id = m.message_id;
COMMENT ON VIEW @extschema@.outbox_status IS
    'Messages with their deliveries; state no_recipient for a message nobody with an address was to receive';

REVOKE EXECUTE ON FUNCTION
    @extschema@.outbox_add_all(jsonb),
    @extschema@.outbox_add(text, text, text, text, text, jsonb, boolean, text[]),
    @extschema@.notify_scan(date),
    @extschema@.outbox_claim(text, interval, integer),
    @extschema@.outbox_sending(text, bigint),
    @extschema@.outbox_result(text, bigint, text, text, interval, interval)
    FROM PUBLIC;

-- Row-level security as for every table naming an account or a user (protect_table): portal
-- users see their accounts' messages, their own deliveries and their accounts' quota states.
-- contact has its own policy above (reading and writing one's own row only).
SELECT @extschema@.protect_table(t)
FROM pg_catalog.unnest(ARRAY['@extschema@.outbox', '@extschema@.outbox_recipient',
                             '@extschema@.quota_state_notified']::regclass[]) AS t;
ALTER VIEW @extschema@.account_recipient SET (security_invoker = true);
ALTER VIEW @extschema@.outbox_status SET (security_invoker = true);

-- updated_at follows every change of a contact
CREATE FUNCTION @extschema@.contact_touch() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        NEW.updated_at := pg_catalog.statement_timestamp();
        RETURN NEW;
    END
    $$;
COMMENT ON FUNCTION @extschema@.contact_touch() IS 'Trigger: sets contact.updated_at on every change';
CREATE TRIGGER contact_touch BEFORE UPDATE ON @extschema@.contact
    FOR EACH ROW EXECUTE FUNCTION @extschema@.contact_touch();

-- setup_roles() grants a portal user their own contact row
CREATE OR REPLACE PROCEDURE @extschema@.setup_roles()
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        role_name text;
    BEGIN
        FOREACH role_name IN ARRAY ARRAY['hpcacct_admin', 'hpcacct_ingest', 'hpcacct_portal'] LOOP
            IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = role_name) THEN
                EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', role_name);
            END IF;
        END LOOP;
        GRANT USAGE ON SCHEMA @extschema@ TO hpcacct_admin, hpcacct_ingest, hpcacct_portal;
        GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA @extschema@ TO hpcacct_admin;
        GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA @extschema@ TO hpcacct_admin;
        GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA @extschema@ TO hpcacct_admin;
        GRANT EXECUTE ON ALL PROCEDURES IN SCHEMA @extschema@ TO hpcacct_admin;
        IF pg_catalog.to_regclass('@extschema@.job') IS NOT NULL THEN
            GRANT INSERT ON @extschema@.job TO hpcacct_ingest;
        END IF;
        GRANT SELECT ON ALL TABLES IN SCHEMA @extschema@ TO hpcacct_portal;
        -- a portal user keeps their own contact row (its policy admits no other)
        GRANT INSERT (username, email, display_name, notify), UPDATE (email, display_name, notify)
            ON @extschema@.contact TO hpcacct_portal;
    END
    $$;

-- the site's roles get on the new objects what setup_roles() gives them
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'hpcacct_admin') THEN
        GRANT SELECT, INSERT, UPDATE, DELETE ON @extschema@.contact, @extschema@.outbox, @extschema@.outbox_recipient,
            @extschema@.quota_state_notified, @extschema@.balance_threshold TO hpcacct_admin;
        GRANT SELECT, INSERT, UPDATE, DELETE ON @extschema@.account_recipient, @extschema@.outbox_status TO hpcacct_admin;
        GRANT USAGE, SELECT, UPDATE ON SEQUENCE @extschema@.outbox_message_id_seq,
            @extschema@.outbox_recipient_recipient_id_seq TO hpcacct_admin;
        GRANT EXECUTE ON FUNCTION
            @extschema@.outbox_add_all(jsonb),
            @extschema@.outbox_add(text, text, text, text, text, jsonb, boolean, text[]),
            @extschema@.notify_number(numeric),
            @extschema@.notify_regulation(), @extschema@.notify_quarter(), @extschema@.notify_hold(),
            @extschema@.notify_scan(date), @extschema@.contact_touch(),
            @extschema@.outbox_claim(text, interval, integer),
            @extschema@.outbox_sending(text, bigint),
            @extschema@.outbox_result(text, bigint, text, text, interval, interval)
            TO hpcacct_admin;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'hpcacct_portal') THEN
        GRANT SELECT ON @extschema@.contact, @extschema@.outbox, @extschema@.outbox_recipient,
            @extschema@.quota_state_notified, @extschema@.balance_threshold,
            @extschema@.account_recipient, @extschema@.outbox_status TO hpcacct_portal;
        GRANT INSERT (username, email, display_name, notify), UPDATE (email, display_name, notify)
            ON @extschema@.contact TO hpcacct_portal;
    END IF;
END
$$;
-- end of notifications (issue 16)

-- statements and portal pages (issue 16) -------------------------------------------------
-- The objects of sql/install/96_statement.sql, as they are there.
CREATE FUNCTION @extschema@.html_escape(s text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(
                   s, '&', '&amp;'), '<', '&lt;'), '>', '&gt;'), '"', '&quot;'), '''', '&#39;')
    $$;
COMMENT ON FUNCTION @extschema@.html_escape(text) IS 'Text escaped for HTML and SVG (& < > " '')';

-- An SVG chart over one x axis of labels (an empty label draws no tick). series is a jsonb
-- array of {"name", "kind": "line" | "dashed" | "bar" | "band", "color", "values": [...]}
-- (a band has "lower" and "upper" instead of "values"); null values are gaps. Each series is
-- one element of class "series" with its name in data-series.
CREATE FUNCTION @extschema@.svg_chart(title text, unit text, labels text[], series jsonb,
                                      width integer DEFAULT 760, height integer DEFAULT 300)
    RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        n integer := coalesce(pg_catalog.array_length(labels, 1), 0);
        left_x constant float8 := 78;
        top_y constant float8 := 34;
        plot_w float8 := width - left_x - 16;
        plot_h float8 := height - top_y - 58;
        lo float8;
        hi float8;
        step float8;
        mag float8;
        svg text;
        s jsonb;
        k integer := 0;
        bars integer;
        bar_i integer := 0;
        pts text;
        i integer;
        v float8;
        tick float8;
        legend_x float8 := left_x;
    BEGIN
        IF n = 0 OR series IS NULL OR pg_catalog.jsonb_typeof(series) <> 'array' THEN
            RAISE EXCEPTION 'svg_chart needs labels and an array of series' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        SELECT least(0, min(x)), max(x) INTO lo, hi
        FROM (SELECT (e.value #>> '{}')::float8 AS x
              FROM pg_catalog.jsonb_array_elements(series) ser,
                   LATERAL pg_catalog.jsonb_array_elements(coalesce(ser.value -> 'values', '[]') || coalesce(ser.value -> 'lower', '[]')
                                                           || coalesce(ser.value -> 'upper', '[]')) e
              WHERE pg_catalog.jsonb_typeof(e.value) = 'number') t;
        IF hi IS NULL OR hi <= lo THEN
            hi := lo + 1;
        END IF;
        -- a round step: 1, 2 or 5 times a power of ten, about five of them
        mag := power(10, floor(log((hi - lo) / 5)));
        step := CASE WHEN (hi - lo) / 5 <= mag THEN mag WHEN (hi - lo) / 5 <= 2 * mag THEN 2 * mag
                     WHEN (hi - lo) / 5 <= 5 * mag THEN 5 * mag ELSE 10 * mag END;
        lo := floor(lo / step) * step;
        hi := ceil(hi / step) * step;
        svg := format('<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="%s" height="%s" viewBox="0 0 %s %s" '
                      'role="img" aria-label="%s">', width, height, width, height, @extschema@.html_escape(title))
            || format('<rect x="0" y="0" width="%s" height="%s" fill="#ffffff"/>', width, height)
            || format('<text x="%s" y="20" font-family="sans-serif" font-size="14" font-weight="bold">%s</text>',
                      left_x, @extschema@.html_escape(title))
            || format('<text x="12" y="%s" font-family="sans-serif" font-size="11" transform="rotate(-90 12 %s)" '
                      'text-anchor="middle">%s</text>', top_y + plot_h / 2, top_y + plot_h / 2, @extschema@.html_escape(unit));
        -- grid and y labels
        tick := lo;
        WHILE tick <= hi + step / 2 LOOP
            svg := svg || format('<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#dddddd"/>',
                                 left_x, round((top_y + plot_h - (tick - lo) / (hi - lo) * plot_h)::numeric, 1),
                                 left_x + plot_w, round((top_y + plot_h - (tick - lo) / (hi - lo) * plot_h)::numeric, 1))
                       || format('<text x="%s" y="%s" font-family="sans-serif" font-size="10" text-anchor="end">%s</text>',
                                 left_x - 4, round((top_y + plot_h - (tick - lo) / (hi - lo) * plot_h + 3)::numeric, 1),
                                 @extschema@.notify_number(tick::numeric));
            tick := tick + step;
        END LOOP;
        svg := svg || format('<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#333333"/>', left_x, top_y, left_x, top_y + plot_h)
                   || format('<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#333333"/>', left_x,
                             round((top_y + plot_h - (0 - lo) / (hi - lo) * plot_h)::numeric, 1), left_x + plot_w,
                             round((top_y + plot_h - (0 - lo) / (hi - lo) * plot_h)::numeric, 1));
        -- x labels
        FOR i IN 1 .. n LOOP
            CONTINUE WHEN coalesce(labels[i], '') = '';
            svg := svg || format('<text x="%s" y="%s" font-family="sans-serif" font-size="10" text-anchor="middle">%s</text>',
                                 round((left_x + (i - 0.5) * plot_w / n)::numeric, 1), top_y + plot_h + 14,
                                 @extschema@.html_escape(labels[i]));
        END LOOP;
        SELECT count(*) INTO bars FROM jsonb_array_elements(series) e WHERE e.value ->> 'kind' = 'bar';
        FOR s IN SELECT e.value FROM jsonb_array_elements(series) e LOOP
            k := k + 1;
            IF s ->> 'kind' = 'bar' THEN
                svg := svg || format('<g class="series" data-series="%s" fill="%s">', @extschema@.html_escape(s ->> 'name'),
                                     @extschema@.html_escape(coalesce(s ->> 'color', '#1f77b4')));
                FOR i IN 1 .. n LOOP
                    v := (s -> 'values' ->> (i - 1))::float8;
                    CONTINUE WHEN v IS NULL;
                    svg := svg || format('<rect x="%s" y="%s" width="%s" height="%s"/>',
                        round((left_x + (i - 1) * plot_w / n + plot_w / n * (0.15 + 0.7 * bar_i / bars))::numeric, 1),
                        round((top_y + plot_h - (greatest(v, 0) - lo) / (hi - lo) * plot_h)::numeric, 1),
                        round((plot_w / n * 0.7 / bars)::numeric, 1),
                        round((abs(v) / (hi - lo) * plot_h)::numeric, 1));
                END LOOP;
                svg := svg || '</g>';
                bar_i := bar_i + 1;
            ELSIF s ->> 'kind' = 'band' THEN
                SELECT string_agg(format('%s,%s', round((left_x + (j - 0.5) * plot_w / n)::numeric, 1),
                                         round((top_y + plot_h - ((s -> 'upper' ->> (j - 1))::float8 - lo) / (hi - lo) * plot_h)::numeric, 1)),
                                  ' ' ORDER BY j)
                       || ' ' ||
                       string_agg(format('%s,%s', round((left_x + (j - 0.5) * plot_w / n)::numeric, 1),
                                         round((top_y + plot_h - ((s -> 'lower' ->> (j - 1))::float8 - lo) / (hi - lo) * plot_h)::numeric, 1)),
                                  ' ' ORDER BY j DESC)
                INTO pts
                FROM generate_series(1, n) j
                WHERE s -> 'upper' ->> (j - 1) IS NOT NULL AND s -> 'lower' ->> (j - 1) IS NOT NULL;
                svg := svg || format('<polygon class="series" data-series="%s" points="%s" fill="%s" fill-opacity="0.18" stroke="none"/>',
                                     @extschema@.html_escape(s ->> 'name'), coalesce(pts, ''),
                                     @extschema@.html_escape(coalesce(s ->> 'color', '#2ca02c')));
            ELSE
                SELECT string_agg(format('%s,%s', round((left_x + (j - 0.5) * plot_w / n)::numeric, 1),
                                         round((top_y + plot_h - ((s -> 'values' ->> (j - 1))::float8 - lo) / (hi - lo) * plot_h)::numeric, 1)),
                                  ' ' ORDER BY j)
                INTO pts
                FROM generate_series(1, n) j
                WHERE s -> 'values' ->> (j - 1) IS NOT NULL;
                svg := svg || format('<polyline class="series" data-series="%s" points="%s" fill="none" stroke="%s" stroke-width="2"%s/>',
                                     @extschema@.html_escape(s ->> 'name'), coalesce(pts, ''),
                                     @extschema@.html_escape(coalesce(s ->> 'color', '#1f77b4')),
                                     CASE WHEN s ->> 'kind' = 'dashed' THEN ' stroke-dasharray="6 4"' ELSE '' END);
            END IF;
            -- legend
            svg := svg || format('<rect x="%s" y="%s" width="12" height="12" fill="%s"%s/>', legend_x, height - 20,
                                 @extschema@.html_escape(coalesce(s ->> 'color', '#1f77b4')),
                                 CASE WHEN s ->> 'kind' = 'band' THEN ' fill-opacity="0.3"' ELSE '' END)
                       || format('<text x="%s" y="%s" font-family="sans-serif" font-size="11">%s</text>', legend_x + 16,
                                 height - 10, @extschema@.html_escape(s ->> 'name'));
            legend_x := legend_x + 26 + 6.5 * length(s ->> 'name');
        END LOOP;
        RETURN svg || '</svg>';
    END
    $$;
COMMENT ON FUNCTION @extschema@.svg_chart(text, text, text[], jsonb, integer, integer) IS
    'An inline SVG chart: line, dashed, bar and band series over labelled x positions; one element of class series each';

-- The account an account_month or statement is for, as the caller may see it; 42704 when it
-- does not exist or row-level security hides it (the same error, so nothing is given away).
CREATE FUNCTION @extschema@.visible_account(account text) RETURNS @extschema@.account
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        a @extschema@.account;
    BEGIN
        IF account IS NULL THEN
            RAISE EXCEPTION 'an account is needed' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        SELECT * INTO a FROM @extschema@.account x WHERE x.name = visible_account.account;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'unknown account "%"', account USING ERRCODE = 'undefined_object';
        END IF;
        RETURN a;
    END
    $$;
COMMENT ON FUNCTION @extschema@.visible_account(text) IS
    'The account row if it exists and the caller may see it, else 42704';

-- Everything one account's month page needs. Figures are taken at the end of the month (or
-- now, for the current month). Sections appear when the account has data of their kind.
CREATE FUNCTION @extschema@.account_month(account text, month date)
    RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        a @extschema@.account := @extschema@.visible_account(account);
        m date;
        m_end date;
        tz text := @extschema@.site_timezone();
        upto date;
        y_start date;
        q date;
        result jsonb;
        section jsonb;
        sections jsonb := '{}';
        bank_unit text := @extschema@.setting_value('bank_unit');
    BEGIN
        IF month IS NULL THEN
            RAISE EXCEPTION 'a month is needed' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF NOT isfinite(month) THEN
            RAISE EXCEPTION 'the month must be a finite date' USING ERRCODE = 'datetime_field_overflow';
        END IF;
        m := date_trunc('month', month)::date;
        m_end := (m + interval '1 month')::date - 1;
        upto := least(m_end, @extschema@.site_today());
        IF upto < m THEN
            RAISE EXCEPTION 'month % has not begun', to_char(m, 'YYYY-MM')
                USING ERRCODE = 'invalid_parameter_value', DETAIL = format('Today is %s in the site time zone.', @extschema@.site_today());
        END IF;
        y_start := date_trunc('year', m)::date;

        -- the month's charges by resource and submitter
        SELECT jsonb_build_object(
                   'by_resource', coalesce(jsonb_agg(jsonb_build_object('cluster', r.cluster, 'partition', r.partition,
                                                                        'unit', r.unit, 'amount', r.amount)
                                                     ORDER BY r.cluster, r.partition, r.unit)
                                           FILTER (WHERE r.g = 1), '[]'),
                   'by_submitter', coalesce(jsonb_agg(jsonb_build_object('cluster', r.cluster, 'partition', r.partition,
                                                                         'unit', r.unit, 'submitter', r.submitter,
                                                                         'amount', r.amount)
                                                      ORDER BY r.cluster, r.partition, r.unit, r.submitter)
                                            FILTER (WHERE r.g = 0), '[]'),
                   'total', coalesce(jsonb_object_agg(r.unit, r.amount) FILTER (WHERE r.g = 7), '{}'))
        INTO section
        FROM (SELECT c.cluster, c.partition, c.unit, c.submitter, round(sum(c.amount), 6) AS amount,
                     GROUPING(c.cluster, c.partition, c.submitter) AS g
              FROM @extschema@.charge_by_month c
              WHERE c.account = a.name AND c.month = m
              GROUP BY GROUPING SETS ((c.cluster, c.partition, c.unit, c.submitter), (c.cluster, c.partition, c.unit), (c.unit))) r;
        sections := sections || jsonb_build_object('charges', section);

        -- usage this year by resource, with the projection to the year's end
        SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'pool', u.pool, 'cluster', u.cluster, 'partition', u.partition, 'unit', u.unit,
                   'year_start', u.first_day, 'year_end', u.last_day, 'usage', round(u.usage, 6),
                   'equivalent_hours', round(u.hours, 6),
                   'projected_usage', CASE WHEN u.elapsed > 0 THEN round(u.usage * u.year_days / u.elapsed, 6) END)
                   ORDER BY u.pool, u.cluster, u.partition), '[]')
        INTO section
        FROM (SELECT c.pool, c.cluster, c.partition, c.unit, y.first_day, y.last_day,
                     sum(c.amount) AS usage, sum(c.amount / nullif(r.rate, 0)::numeric) AS hours,
                     (y.last_day - y.first_day + 1)::numeric AS year_days,
                     (upto - y.first_day + 1)::numeric AS elapsed
              FROM @extschema@.charge_by_month c
              JOIN @extschema@.ledger l ON l.entry_id = c.entry_id
              JOIN @extschema@.resource r ON r.resource_id = l.resource_id
              CROSS JOIN LATERAL (
                  SELECT s.first_day, (s.first_day + interval '1 year')::date - 1 AS last_day
                  FROM (SELECT make_date(EXTRACT(year FROM m)::integer - CASE WHEN EXTRACT(month FROM m) < sm.start_month THEN 1 ELSE 0 END,
                                         sm.start_month, 1) AS first_day
                        FROM (SELECT @extschema@.year_start_month(c.pool) AS start_month) sm) s) y
              WHERE c.account = a.name AND c.month >= y.first_day AND c.month <= m
              GROUP BY c.pool, c.cluster, c.partition, c.unit, y.first_day, y.last_day, upto) u;
        sections := sections || jsonb_build_object('usage_by_resource', section);

        -- GENCI: per machine with allocation events this year, the status at the end of the
        -- month (allocation_status) and the days of the year for the chart
        SELECT jsonb_agg(jsonb_build_object(
                   'machine', s.machine, 'alloc', st.alloc, 'tmc', st.tmc, 'tc', st.tc, 'consumption', st.consumption,
                   'delta', st.delta, 'status', st.status,
                   'days', (SELECT jsonb_agg(jsonb_build_array(dd.day, round(dd.tc::numeric, 2), round(dd.tmc::numeric, 2),
                                                               round(dd.consumption, 2)) ORDER BY dd.day)
                            FROM (SELECT g.day::date AS day,
                                         (SELECT coalesce(@extschema@.tc(l.valid_from, l.valid_until, l.amount::float8, g.day::date, s.month_convention)
                                                          - @extschema@.tc(l.valid_from, l.valid_until, l.amount::float8, y_start - 1, s.month_convention), 0)
                                          FROM @extschema@.ledger l
                                          WHERE l.account = a.name AND l.cluster = s.machine AND l.kind IN ('grant', 'supplement', 'retraction')
                                            AND l.valid_from <= g.day AND l.valid_until >= y_start) AS tc,
                                         (SELECT coalesce(@extschema@.tmc(l.valid_from, l.valid_until, l.amount::float8, g.day::date, s.month_convention), 0)
                                          FROM @extschema@.ledger l
                                          WHERE l.account = a.name AND l.cluster = s.machine AND l.kind IN ('grant', 'supplement', 'retraction')
                                            AND l.valid_from <= g.day AND l.valid_until >= y_start) AS tmc,
                                         (SELECT coalesce(sum(l.amount * @extschema@.period_share(l.job_start, l.job_end,
                                                                  y_start::timestamp AT TIME ZONE tz, (g.day::date + 1)::timestamp AT TIME ZONE tz)), 0)
                                          FROM @extschema@.ledger l JOIN @extschema@.resource r USING (resource_id)
                                          WHERE l.account = a.name AND l.kind = 'charge' AND coalesce(r.pool, r.cluster) = s.machine
                                            AND l.job_start < (g.day::date + 1)::timestamp AT TIME ZONE tz
                                            AND l.job_end >= y_start::timestamp AT TIME ZONE tz) AS consumption
                                  FROM generate_series(y_start, upto, interval '1 day') g(day)) dd))
               ORDER BY s.machine)
        INTO section
        FROM @extschema@.machine_setting s
        CROSS JOIN LATERAL @extschema@.allocation_status(a.name, s.machine, upto) st
        WHERE EXISTS (SELECT 1 FROM @extschema@.ledger l
                      WHERE l.account = a.name AND l.cluster = s.machine AND l.kind IN ('grant', 'supplement', 'retraction')
                        AND l.valid_from <= upto AND l.valid_until >= y_start);
        IF section IS NOT NULL THEN
            sections := sections || jsonb_build_object('regulation', section);
        END IF;

        -- RWTH: the window quota of each month of the period up to this one
        SELECT jsonb_agg(jsonb_build_object('month', u.month, 'state', u.state, 'monthly', u.monthly,
                                            'remaining_prev', u.remaining_prev, 'consumed', u.consumed_current,
                                            'consumable_pct', u.consumable_pct, 'consumable', u.consumable,
                                            'unit', u.unit, 'period_start', u.period_start, 'period_end', u.period_end)
                         ORDER BY u.month)
        INTO section
        FROM @extschema@.quota_period p
        CROSS JOIN LATERAL generate_series(p.period_start, least(p.period_end, upto), interval '1 month') g(mon)
        CROSS JOIN LATERAL @extschema@.window_quota_usage(a.name, CASE WHEN g.mon::date = m THEN upto
                                                                         ELSE (g.mon + interval '1 month')::date - 1 END) u
        WHERE p.account = a.name AND p.period_start <= upto AND p.period_end >= y_start;
        IF section IS NOT NULL THEN
            sections := sections || jsonb_build_object('window_quota', section);
        END IF;

        -- HLRN: the quarter's allocation and the balance at the end of each day of it so far
        q := @extschema@.quarter_start(m);
        SELECT jsonb_build_object(
                   'quarter', q, 'unit', bank_unit, 'allocation', al.amount, 'state', @extschema@.account_state(a.name, upto),
                   'balance', @extschema@.balance(a.name, upto),
                   'days', (SELECT jsonb_agg(jsonb_build_array(g.day::date,
                                round(al.amount - coalesce((SELECT sum(l.amount * @extschema@.period_share(l.job_start, l.job_end,
                                                                        q::timestamp AT TIME ZONE tz, (g.day::date + 1)::timestamp AT TIME ZONE tz))
                                                            FROM @extschema@.ledger l
                                                            WHERE l.account = a.name AND l.kind = 'charge' AND l.unit = bank_unit
                                                              AND l.job_start < (g.day::date + 1)::timestamp AT TIME ZONE tz
                                                              AND l.job_end >= q::timestamp AT TIME ZONE tz), 0), 2))
                                              ORDER BY g.day)
                            FROM generate_series(q, upto, interval '1 day') g(day)))
        INTO section
        FROM (SELECT sum(l.amount) AS amount
              FROM @extschema@.ledger l
              WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer', 'refund') AND l.unit = bank_unit
                AND l.valid_from >= q AND l.valid_from < q + interval '3 months') al
        WHERE al.amount IS NOT NULL;
        IF section IS NOT NULL THEN
            sections := sections || jsonb_build_object('bank', section);
        END IF;

        RETURN jsonb_build_object('account', a.name, 'kind', a.kind, 'description', a.description,
                                  'month', to_char(m, 'YYYY-MM'), 'figures_at', upto, 'time_zone', tz)
               || sections;
    END
    $$;
COMMENT ON FUNCTION @extschema@.account_month(text, date) IS
    'Portal page of one account''s month as jsonb: charges by resource and submitter, usage by resource with the '
    'year''s projection, GENCI regulation, RWTH window quota and HLRN bank figures where the account has them';

-- The portal's first page: every account the caller may see, with what it stands at.
CREATE FUNCTION @extschema@.my_accounts(at date DEFAULT @extschema@.site_today())
    RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        bank_unit text := @extschema@.setting_value('bank_unit');
        result jsonb;
    BEGIN
        IF at IS NULL THEN
            RAISE EXCEPTION 'a date is needed' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF NOT isfinite(at) THEN
            RAISE EXCEPTION 'the date must be finite' USING ERRCODE = 'datetime_field_overflow';
        END IF;
        SELECT jsonb_build_object('user', session_user, 'at', at, 'accounts', coalesce(jsonb_agg(x.item ORDER BY x.name), '[]'))
        INTO result
        FROM (SELECT a.name,
                     jsonb_strip_nulls(jsonb_build_object(
                         'account', a.name, 'kind', a.kind, 'description', a.description,
                         'role', (SELECT m.role FROM @extschema@.membership m WHERE m.account = a.name AND m.username = session_user),
                         'bank', CASE WHEN EXISTS (SELECT 1 FROM @extschema@.ledger l
                                                   WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer') AND l.unit = bank_unit)
                                      THEN jsonb_build_object('state', @extschema@.account_state(a.name, at),
                                                              'balance', @extschema@.balance(a.name, at), 'unit', bank_unit,
                                                              'quarter', @extschema@.quarter_start(at)) END,
                         'quota', (SELECT jsonb_build_object('state', u.state, 'monthly', u.monthly,
                                                             'remaining_prev', u.remaining_prev, 'consumed', u.consumed_current,
                                                             'consumable_pct', u.consumable_pct, 'consumable', u.consumable,
                                                             'unit', u.unit)
                                   FROM @extschema@.window_quota_usage(a.name, at) u
                                   WHERE EXISTS (SELECT 1 FROM @extschema@.quota_period p WHERE p.account = a.name)),
                         'regulation', (SELECT jsonb_agg(jsonb_build_object('machine', s.machine, 'alloc', st.alloc,
                                                                            'tmc', round(st.tmc::numeric, 2), 'tc', round(st.tc::numeric, 2),
                                                                            'consumption', round(st.consumption::numeric, 2),
                                                                            'delta', round(st.delta::numeric, 2), 'status', st.status)
                                                         ORDER BY s.machine)
                                        FROM @extschema@.machine_setting s
                                        CROSS JOIN LATERAL @extschema@.allocation_status(a.name, s.machine, at) st
                                        WHERE EXISTS (SELECT 1 FROM @extschema@.ledger l
                                                      WHERE l.account = a.name AND l.cluster = s.machine
                                                        AND l.kind IN ('grant', 'supplement', 'retraction')
                                                        AND l.valid_from <= at
                                                        AND l.valid_until >= date_trunc('year', at)::date)),
                         'this_month', (SELECT jsonb_object_agg(t.unit, t.amount)
                                        FROM (SELECT c.unit, round(sum(c.amount), 6) AS amount
                                              FROM @extschema@.charge_by_month c
                                              WHERE c.account = a.name AND c.month = date_trunc('month', at)::date
                                              GROUP BY c.unit) t))) AS item
              FROM @extschema@.account a
              WHERE a.deleted_in IS NULL OR a.deleted_in > at) x;
        RETURN result;
    END
    $$;
COMMENT ON FUNCTION @extschema@.my_accounts(date) IS
    'Portal first page as jsonb: the caller''s accounts (row-level security) with role, bank balance and state, '
    'window quota, GENCI status per machine and this month''s charges';

-- An account's monthly statement: one self-contained HTML page (no script, no external
-- resource) with inline SVG charts, rendered from account_month().
CREATE FUNCTION @extschema@.statement_html(account text, month date)
    RETURNS text
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        d jsonb := @extschema@.account_month(account, month);
        h text;
        sec jsonb;
        r jsonb;
        labels text[];
        series jsonb;
        rows text;
        e text;
    BEGIN
        h := '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
             || format('<title>Statement %s %s</title>', @extschema@.html_escape(d ->> 'account'), d ->> 'month')
             || '<style>body{font-family:sans-serif;margin:24px;color:#222;background:#fff}'
                'h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ccc}'
                'table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}'
                'td.n{text-align:right}.meta{color:#555;font-size:13px}.chart{display:block;margin:8px 0}</style></head><body>'
             || format('<h1>Statement of account %s &mdash; %s</h1>', @extschema@.html_escape(d ->> 'account'),
                       to_char((d ->> 'month' || '-01')::date, 'FMMonth YYYY'))
             || format('<p class="meta">%s account%s. Figures at the end of %s (%s).</p>',
                       @extschema@.html_escape(initcap(d ->> 'kind')),
                       CASE WHEN d ->> 'description' IS NOT NULL THEN ': ' || @extschema@.html_escape(d ->> 'description') ELSE '' END,
                       d ->> 'figures_at', @extschema@.html_escape(d ->> 'time_zone'));

        -- the month's charges
        h := h || '<h2>Charges this month</h2>';
        IF jsonb_array_length(d -> 'charges' -> 'by_submitter') = 0 THEN
            h := h || '<p>No charges.</p>';
        ELSE
            SELECT string_agg(format('<tr><td>%s</td><td>%s</td><td>%s</td><td class="n">%s</td><td>%s</td></tr>',
                                     @extschema@.html_escape(x ->> 'cluster'), @extschema@.html_escape(x ->> 'partition'),
                                     @extschema@.html_escape(x ->> 'submitter'),
                                     to_char((x ->> 'amount')::numeric, 'FM999,999,999,990.00'), @extschema@.html_escape(x ->> 'unit')),
                              '' ORDER BY ord)
            INTO rows FROM jsonb_array_elements(d -> 'charges' -> 'by_submitter') WITH ORDINALITY t(x, ord);
            h := h || '<table class="charges"><tr><th>cluster</th><th>partition</th><th>submitter</th><th>amount</th><th>unit</th></tr>'
                   || rows;
            SELECT string_agg(format('<tr><th colspan="3">total</th><td class="n">%s</td><td>%s</td></tr>',
                                     to_char(t.value::numeric, 'FM999,999,999,990.00'), @extschema@.html_escape(t.key)), '' ORDER BY t.key)
            INTO rows FROM jsonb_each_text(d -> 'charges' -> 'total') t;
            h := h || coalesce(rows, '') || '</table>';
        END IF;

        -- GENCI: consumption against TC(d) with the TMC bands, per machine
        FOR sec IN SELECT x FROM jsonb_array_elements(coalesce(d -> 'regulation', '[]')) x LOOP
            SELECT array_agg(CASE WHEN EXTRACT(day FROM (x ->> 0)::date) = 1 THEN to_char((x ->> 0)::date, 'Mon') ELSE '' END ORDER BY ord),
                   jsonb_build_array(
                       jsonb_build_object('name', 'TC ± TMC', 'kind', 'band', 'color', '#2ca02c',
                                          'lower', jsonb_agg((x ->> 1)::numeric - (x ->> 2)::numeric ORDER BY ord),
                                          'upper', jsonb_agg((x ->> 1)::numeric + (x ->> 2)::numeric ORDER BY ord)),
                       jsonb_build_object('name', 'TC − 2·TMC (retraction)', 'kind', 'dashed', 'color', '#d62728',
                                          'values', jsonb_agg((x ->> 1)::numeric - 2 * (x ->> 2)::numeric ORDER BY ord)),
                       jsonb_build_object('name', 'TC(d)', 'kind', 'line', 'color', '#555555',
                                          'values', jsonb_agg((x ->> 1)::numeric ORDER BY ord)),
                       jsonb_build_object('name', 'consumption', 'kind', 'line', 'color', '#1f77b4',
                                          'values', jsonb_agg((x ->> 3)::numeric ORDER BY ord)))
            INTO labels, series
            FROM jsonb_array_elements(sec -> 'days') WITH ORDINALITY t(x, ord);
            h := h || format('<h2>Regulation on %s (GENCI)</h2>', @extschema@.html_escape(sec ->> 'machine'))
                   || @extschema@.svg_chart(format('Consumption against theoretical consumption on %s', sec ->> 'machine'),
                                            'hours', labels, series)
                   || format('<table class="regulation"><tr><th>Alloc</th><th>TMC</th><th>TC</th><th>consumption</th><th>&Delta;</th><th>status</th></tr>'
                             '<tr><td class="n">%s</td><td class="n">%s</td><td class="n">%s</td><td class="n">%s</td><td class="n">%s</td><td>%s</td></tr></table>',
                             @extschema@.notify_number((sec ->> 'alloc')::numeric), @extschema@.notify_number((sec ->> 'tmc')::numeric),
                             @extschema@.notify_number((sec ->> 'tc')::numeric), @extschema@.notify_number((sec ->> 'consumption')::numeric),
                             @extschema@.notify_number((sec ->> 'delta')::numeric), @extschema@.html_escape(sec ->> 'status'));
        END LOOP;

        -- RWTH: the three-month window per month
        IF d ? 'window_quota' THEN
            SELECT array_agg(to_char((x ->> 'month')::date, 'Mon YY') ORDER BY ord),
                   jsonb_build_array(
                       jsonb_build_object('name', 'consumed', 'kind', 'bar', 'color', '#1f77b4',
                                          'values', jsonb_agg((x ->> 'consumed')::numeric ORDER BY ord)),
                       jsonb_build_object('name', 'monthly allowance', 'kind', 'dashed', 'color', '#555555',
                                          'values', jsonb_agg((x ->> 'monthly')::numeric ORDER BY ord)),
                       jsonb_build_object('name', 'consumable (3-month window)', 'kind', 'line', 'color', '#ff7f0e',
                                          'values', jsonb_agg((x ->> 'consumable')::numeric ORDER BY ord)))
            INTO labels, series
            FROM jsonb_array_elements(d -> 'window_quota') WITH ORDINALITY t(x, ord);
            r := d -> 'window_quota' -> -1;
            h := h || '<h2>Core-hour quota (RWTH)</h2>'
                   || @extschema@.svg_chart('Sliding-window quota per month', r ->> 'unit', labels, series)
                   || format('<table class="quota"><tr><th>Accounting period</th><td>%s to %s</td></tr>'
                             '<tr><th>State</th><td>%s</td></tr><tr><th>Monthly</th><td class="n">%s</td></tr>'
                             '<tr><th>Remaining of previous month</th><td class="n">%s</td></tr>'
                             '<tr><th>Consumed this month</th><td class="n">%s</td></tr>'
                             '<tr><th>Consumable (%%)</th><td class="n">%s</td></tr><tr><th>Consumable</th><td class="n">%s</td></tr></table>',
                             r ->> 'period_start', r ->> 'period_end', @extschema@.html_escape(r ->> 'state'),
                             @extschema@.notify_number((r ->> 'monthly')::numeric), @extschema@.notify_number((r ->> 'remaining_prev')::numeric),
                             @extschema@.notify_number((r ->> 'consumed')::numeric), @extschema@.notify_number((r ->> 'consumable_pct')::numeric),
                             @extschema@.notify_number((r ->> 'consumable')::numeric));
        END IF;

        -- HLRN: the quarter's balance
        IF d ? 'bank' THEN
            sec := d -> 'bank';
            SELECT array_agg(CASE WHEN EXTRACT(day FROM (x ->> 0)::date) IN (1, 15) THEN to_char((x ->> 0)::date, 'DD Mon') ELSE '' END ORDER BY ord),
                   jsonb_build_array(
                       jsonb_build_object('name', 'allocation', 'kind', 'dashed', 'color', '#555555',
                                          'values', jsonb_agg((sec ->> 'allocation')::numeric ORDER BY ord)),
                       jsonb_build_object('name', 'balance', 'kind', 'line', 'color', '#1f77b4',
                                          'values', jsonb_agg((x ->> 1)::numeric ORDER BY ord)))
            INTO labels, series
            FROM jsonb_array_elements(sec -> 'days') WITH ORDINALITY t(x, ord);
            h := h || format('<h2>Quarter starting %s (HLRN bank)</h2>', sec ->> 'quarter')
                   || @extschema@.svg_chart('Balance of the quarter', sec ->> 'unit', labels, series)
                   || format('<table class="bank"><tr><th>allocation</th><th>balance</th><th>state</th></tr>'
                             '<tr><td class="n">%s %s</td><td class="n">%s %s</td><td>%s</td></tr></table>',
                             to_char((sec ->> 'allocation')::numeric, 'FM999,999,990.00'), @extschema@.html_escape(sec ->> 'unit'),
                             to_char((sec ->> 'balance')::numeric, 'FM999,999,990.00'), @extschema@.html_escape(sec ->> 'unit'),
                             @extschema@.html_escape(sec ->> 'state'));
        END IF;

        -- usage by resource this allocation year, with the projection
        IF jsonb_array_length(d -> 'usage_by_resource') > 0 THEN
            SELECT array_agg((x ->> 'cluster') || '/' || (x ->> 'partition') ORDER BY ord),
                   jsonb_build_array(
                       jsonb_build_object('name', 'usage to date', 'kind', 'bar', 'color', '#1f77b4',
                                          'values', jsonb_agg((x ->> 'usage')::numeric ORDER BY ord)),
                       jsonb_build_object('name', 'projected for the year', 'kind', 'bar', 'color', '#aec7e8',
                                          'values', jsonb_agg((x ->> 'projected_usage')::numeric ORDER BY ord))),
                   string_agg(format('<tr><td>%s</td><td>%s</td><td>%s to %s</td><td class="n">%s</td><td class="n">%s</td><td class="n">%s</td><td>%s</td></tr>',
                                     @extschema@.html_escape(x ->> 'cluster'), @extschema@.html_escape(x ->> 'partition'),
                                     x ->> 'year_start', x ->> 'year_end',
                                     to_char((x ->> 'equivalent_hours')::numeric, 'FM999,999,999,990.00'),
                                     to_char((x ->> 'usage')::numeric, 'FM999,999,999,990.00'),
                                     coalesce(to_char((x ->> 'projected_usage')::numeric, 'FM999,999,999,990.00'), ''),
                                     @extschema@.html_escape(x ->> 'unit')), '' ORDER BY ord)
            INTO labels, series, rows
            FROM jsonb_array_elements(d -> 'usage_by_resource') WITH ORDINALITY t(x, ord);
            h := h || '<h2>Usage by resource this allocation year</h2>'
                   || @extschema@.svg_chart('Usage to date and projected for the year', 'charged units', labels, series)
                   || '<table class="usage"><tr><th>cluster</th><th>partition</th><th>year</th><th>equivalent-hours (unweighted)</th>'
                      '<th>usage to date</th><th>projected</th><th>unit</th></tr>'
                   || rows || '</table>';
        END IF;
        RETURN h || '</body></html>';
    END
    $$;
COMMENT ON FUNCTION @extschema@.statement_html(text, date) IS
    'An account''s monthly statement as one self-contained HTML page with inline SVG charts (GENCI, RWTH, HLRN, usage '
    'by resource), from account_month()';

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'hpcacct_admin') THEN
        GRANT EXECUTE ON FUNCTION
            @extschema@.html_escape(text), @extschema@.svg_chart(text, text, text[], jsonb, integer, integer),
            @extschema@.visible_account(text), @extschema@.account_month(text, date),
            @extschema@.my_accounts(date), @extschema@.statement_html(text, date)
            TO hpcacct_admin;
    END IF;
END
$$;
-- end of statements and portal pages (issue 16)

-- regulation_report shows the figures a run decided on (issue 16) --------------------------
-- On the day of a monthly retraction, Alloc, TMC and TC without that retraction, as
-- regulation_log has them.
-- (its new definition comes with ledger.pool, below: the view reads the allocations' pool)
COMMENT ON VIEW @extschema@.regulation_report IS
    'Per account, machine and month up to today: Alloc, TMC, TC, consumption, delta and monthly status at the 15th (NULL under annual regulation), and the outcome the monthly run logged';
ALTER VIEW @extschema@.regulation_report SET (security_invoker = true);

-- loader (issue 14) ---------------------------------------------------------------------
-- A job run is (cluster, jobid, submit), as slurmdbd identifies it: a requeued job is several
-- runs of one JobID. The ledger names the run (job_submit) so that a reversal takes back only
-- the run that changed; sacct is loaded through a staging table and load_sacct().

ALTER TABLE @extschema@.ledger ADD COLUMN job_submit timestamptz;
COMMENT ON COLUMN @extschema@.ledger.job_submit IS
    'A charge''s job run: with cluster and jobid, its submit time (a requeued job is several runs; NULL without one)';

CREATE OR REPLACE FUNCTION @extschema@.job_columns(job_table regclass, mapping text[]) RETURNS text[]
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        roles   constant text[] := ARRAY['cluster', 'jobid', 'account', 'user', 'partition', 'start', 'end', 'alloctres',
                                         'submit'];
        submit_mapped boolean := false;
        columns text[] := roles;
        pair    text;
        role    text;
        column_name text;
        column_type oid;
        position integer;
    BEGIN
        FOREACH pair IN ARRAY coalesce(mapping, '{}') LOOP
            role := split_part(pair, '=', 1);
            column_name := substr(pair, length(role) + 2);
            position := array_position(roles, role);
            IF strpos(pair, '=') = 0 OR position IS NULL OR column_name = '' THEN
                RAISE EXCEPTION 'invalid job column mapping "%"', pair
                    USING ERRCODE = 'invalid_parameter_value',
                          HINT = format('Use role=column with a role among %s.', array_to_string(roles, ', '));
            END IF;
            columns[position] := column_name;
            submit_mapped := submit_mapped OR role = 'submit';
        END LOOP;
        FOR position IN 1 .. array_length(roles, 1) LOOP
            SELECT a.atttypid INTO column_type
            FROM pg_catalog.pg_attribute a
            WHERE a.attrelid = job_table AND a.attname = columns[position] AND a.attnum > 0 AND NOT a.attisdropped;
            IF NOT FOUND AND roles[position] = 'submit' AND NOT submit_mapped THEN
                columns[position] := 'NULL';
                CONTINUE;
            END IF;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'column "%" of % (the job''s %) does not exist', columns[position], job_table, roles[position]
                    USING ERRCODE = 'undefined_column',
                          HINT = format('Name it in the trigger arguments, e.g. ''%s=my_column''.', roles[position]);
            END IF;
            -- Charging casts these columns while it runs as the extension's owner: a type
            -- with a cast or output function of its own would run its author's code with
            -- those rights. Only built-in types (and tres) are read, checked at every firing.
            IF NOT column_type = ANY (CASE
                    WHEN roles[position] IN ('start', 'end', 'submit')
                        THEN ARRAY['timestamptz', 'timestamp']::regtype[]
                    WHEN roles[position] = 'alloctres'
                        THEN ARRAY['@extschema@.tres', 'text', 'varchar']::regtype[]
                    ELSE ARRAY['text', 'varchar', 'bpchar', 'name', 'int2', 'int4', 'int8', 'numeric']::regtype[]
                END) THEN
                RAISE EXCEPTION 'column "%" of % (the job''s %) has type %, which charging does not read',
                                columns[position], job_table, roles[position], column_type::regtype
                    USING ERRCODE = 'datatype_mismatch',
                          DETAIL = 'Charging runs with the extension owner''s rights and reads only built-in types: '
                                   'text or integers for names and ids, timestamptz or timestamp for times, '
                                   'tres or text for alloctres.',
                          HINT = 'Change the column to one of these types.';
            END IF;
            columns[position] := quote_ident(columns[position]);
        END LOOP;
        RETURN columns;
    END
    $$;
COMMENT ON FUNCTION @extschema@.job_columns(regclass, text[]) IS 'The columns charging reads from a job table, checked, from role=column pairs';

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
        max_length  interval;
        need_member boolean;
    BEGIN
        IF TG_WHEN <> 'AFTER' OR TG_LEVEL <> 'STATEMENT' THEN
            RAISE EXCEPTION 'hpcacct.charge_jobs() must run AFTER ... FOR EACH STATEMENT'
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Attach it with hpcacct.attach_charging(table).';
        END IF;
        col := @extschema@.job_columns(TG_RELID, TG_ARGV);
        relevant := format('%s::text AS cluster, %s::text AS jobid, %s::text AS account, %s::text AS submitter, '
                           '%s::text AS partition, %s::timestamptz AS job_start, %s::timestamptz AS job_end, '
                           '%s::@extschema@.tres AS alloctres, %s::timestamptz AS job_submit',
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
                                                job_submit, submitter, job_start, job_end, note)
                SELECT l.account, 'charge', -sum(l.amount), l.unit, l.resource_id, l.cluster, l.jobid,
                       l.job_submit, l.submitter, l.job_start, l.job_end, %L
                FROM @extschema@.ledger l
                WHERE l.kind = 'charge'
                  AND EXISTS (SELECT 1 FROM %s o
                              WHERE o.cluster = l.cluster AND o.jobid = l.jobid
                                AND o.job_submit IS NOT DISTINCT FROM l.job_submit)
                GROUP BY l.account, l.unit, l.resource_id, l.cluster, l.jobid, l.job_submit, l.submitter, l.job_start,
                         l.job_end
                HAVING sum(l.amount) <> 0
                $q$, 'reversal: job ' || lower(TG_OP) || 'd', changed_old);
        END IF;

        IF changed_new IS NOT NULL THEN
            max_length := @extschema@.setting_value('max_job_length')::interval;
            need_member := @extschema@.setting_value('require_membership')::boolean;
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
                                                    job_submit, submitter, job_start, job_end)
                    SELECT j.account, 'charge',
                           round(@extschema@.charge(j.alloctres, j.job_end - j.job_start, r.bundle, r.rate,
                                                    CASE WHEN r.exclusive THEN r.node END)::numeric, 6),
                           r.unit, r.resource_id, j.cluster, j.jobid, j.job_submit, j.submitter, j.job_start,
                           j.job_end
                    FROM %s j
                    JOIN @extschema@.resource r
                      ON r.cluster = j.cluster AND r.partition = j.partition AND r.valid @> j.job_start
                    WHERE j.jobid IS NOT NULL AND j.account IS NOT NULL AND j.alloctres IS NOT NULL
                      AND j.job_end >= j.job_start AND j.job_end - j.job_start <= $1
                      AND (NOT $2 OR EXISTS (SELECT 1 FROM @extschema@.membership m
                                             WHERE m.account = j.account AND m.username = j.submitter))
                    $q$, changed_new) USING max_length, need_member;
                GET DIAGNOSTICS charged = ROW_COUNT;
                EXECUTE format('SELECT count(*) FROM %s j', changed_new) INTO jobs;
            END IF;
            IF unknown_accounts > 0 OR charged <> jobs THEN
                EXECUTE format($q$
                    SELECT * FROM (
                        SELECT j.cluster, j.jobid, j.account, j.submitter, j.partition, j.job_start,
                               CASE
                                   WHEN j.cluster IS NULL OR j.jobid IS NULL OR j.account IS NULL
                                        OR j.partition IS NULL OR j.alloctres IS NULL THEN 'missing'
                                   WHEN j.job_start IS NULL OR j.job_end IS NULL THEN 'no_times'
                                   WHEN j.job_end < j.job_start THEN 'end_before_start'
                                   WHEN j.job_end - j.job_start > $1 THEN 'too_long'
                                   WHEN NOT EXISTS (SELECT 1 FROM @extschema@.account a WHERE a.name = j.account)
                                       THEN 'unknown_account'
                                   WHEN $2 AND NOT EXISTS (SELECT 1 FROM @extschema@.membership m
                                                           WHERE m.account = j.account AND m.username = j.submitter)
                                       THEN 'not_member'
                                   WHEN NOT EXISTS (SELECT 1 FROM @extschema@.resource r
                                                    WHERE r.cluster = j.cluster AND r.partition = j.partition
                                                      AND r.valid @> j.job_start)
                                       THEN 'unknown_resource'
                               END AS problem
                        FROM %s j) checked
                    WHERE problem IS NOT NULL
                    LIMIT 1
                    $q$, changed_new) INTO problem USING max_length, need_member;

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
                ELSIF problem.problem = 'too_long' THEN
                    RAISE EXCEPTION 'job %/% claims to have run longer than max_job_length (%)', problem.cluster,
                                    problem.jobid, max_length
                        USING ERRCODE = 'HA004',
                              HINT = 'Correct its start or end; a site with longer jobs raises the setting max_job_length.';
                ELSIF problem.problem = 'not_member' THEN
                    RAISE EXCEPTION 'user "%" is not a member of account "%" (job %/%)', problem.submitter,
                                    problem.account, problem.cluster, problem.jobid
                        USING ERRCODE = 'HA005',
                              HINT = 'Add the membership with hpcacct.add_member(), or set require_membership off.';
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

ALTER FUNCTION @extschema@.charge_jobs() SECURITY DEFINER;  -- as 90_privileges.sql: CREATE OR REPLACE reset it

CREATE OR REPLACE FUNCTION @extschema@.create_job_table(job_table text DEFAULT '@extschema@.job') RETURNS regclass
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        created regclass;
    BEGIN
        EXECUTE format($t$
            CREATE TABLE %s (
                cluster   text NOT NULL,
                jobid     text NOT NULL,
                account   text NOT NULL,
                "user"    text NOT NULL,
                partition text NOT NULL,
                submit    timestamptz,
                start     timestamptz NOT NULL,
                "end"     timestamptz NOT NULL,
                alloctres @extschema@.tres NOT NULL,
                state     text,
                UNIQUE NULLS NOT DISTINCT (cluster, jobid, submit)
            )$t$, job_table);
        created := job_table::regclass;
        EXECUTE format('COMMENT ON TABLE %s IS %L', created,
                       'Finished job runs, one row per (cluster, jobid, submit), columns named after sacct fields; charged by trigger');
        PERFORM @extschema@.attach_charging(created);
        PERFORM @extschema@.protect_table(created);
        RETURN created;
    END
    $$;
COMMENT ON FUNCTION @extschema@.create_job_table(text) IS
    'Creates the job table (default hpcacct.job) with sacct''s columns, charging and row-level security';


-- Existing job tables: every charge in the ledger gets its run's submit time from the table
-- that charged it (under 0.3 (cluster, jobid) was unique there, so each charge has one run),
-- and a primary key on (cluster, jobid) becomes the run's unique key. This is the one update
-- of ledger rows ever made: it fills a new column and changes no amount.
DO $do$
DECLARE
    t record;
    col text[];
    args text[];
    pkey record;
BEGIN
    ALTER TABLE @extschema@.ledger DISABLE TRIGGER ledger_append_only;
    FOR t IN SELECT tg.tgrelid::regclass AS job_table, tg.tgnargs, tg.tgargs
             FROM pg_catalog.pg_trigger tg
             WHERE tg.tgname = 'hpcacct_charge_insert'
               AND tg.tgfoid = '@extschema@.charge_jobs()'::regprocedure LOOP
        args := CASE WHEN t.tgnargs = 0 THEN '{}'::text[]
                     ELSE (pg_catalog.string_to_array(pg_catalog.encode(t.tgargs, 'escape'), '\000'))[1:t.tgnargs] END;
        col := @extschema@.job_columns(t.job_table, args);
        CONTINUE WHEN col[9] = 'NULL';  -- no submit column: its jobs stay identified by (cluster, jobid)
        EXECUTE pg_catalog.format(
            'UPDATE @extschema@.ledger l SET job_submit = j.%s FROM %s j '
            'WHERE l.kind = ''charge'' AND l.job_submit IS NULL AND l.cluster = j.%s::text AND l.jobid = j.%s::text',
            col[9], t.job_table, col[1], col[2]);
        SELECT c.conname INTO pkey
        FROM pg_catalog.pg_constraint c
        WHERE c.conrelid = t.job_table AND c.contype = 'p'
          AND (SELECT pg_catalog.array_agg(pg_catalog.quote_ident(a.attname::text) ORDER BY a.attname)
               FROM pg_catalog.pg_attribute a
               WHERE a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey))
              = (SELECT pg_catalog.array_agg(x ORDER BY x) FROM pg_catalog.unnest(ARRAY[col[1], col[2]]) x);
        IF FOUND THEN
            EXECUTE pg_catalog.format('ALTER TABLE %s DROP CONSTRAINT %I, ADD UNIQUE NULLS NOT DISTINCT (%s, %s, %s)',
                                      t.job_table, pkey.conname, col[1], col[2], col[9]);
        END IF;
    END LOOP;
    ALTER TABLE @extschema@.ledger ENABLE TRIGGER ledger_append_only;
    IF pg_catalog.to_regclass('@extschema@.job') IS NOT NULL THEN
        COMMENT ON TABLE @extschema@.job IS
            'Finished job runs, one row per (cluster, jobid, submit), columns named after sacct fields; charged by trigger';
    END IF;
END
$do$;


-- rerate() carries each charge's run (job_submit) into its reversal and new charge
CREATE OR REPLACE FUNCTION @extschema@.rerate(resource_id bigint, new_rate float8, effective_from timestamptz,
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
            SELECT l.account, l.unit, l.cluster, l.jobid, l.job_submit, l.submitter, l.job_start, l.job_end,
                   sum(l.amount) AS amount
            FROM @extschema@.ledger l
            WHERE l.kind = 'charge' AND l.resource_id = rerate.resource_id AND l.job_start >= effective_from
            GROUP BY l.account, l.unit, l.cluster, l.jobid, l.job_submit, l.submitter, l.job_start, l.job_end
            HAVING sum(l.amount) <> 0
        ), reversed AS (
            INSERT INTO @extschema@.ledger (account, kind, amount, unit, resource_id, cluster, jobid, job_submit,
                                            submitter, job_start, job_end, note)
            SELECT m.account, 'charge', -m.amount, m.unit, rerate.resource_id, m.cluster, m.jobid, m.job_submit,
                   m.submitter, m.job_start, m.job_end, 'reversal: ' || label
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
            INSERT INTO @extschema@.ledger (account, kind, amount, unit, resource_id, cluster, jobid, job_submit,
                                            submitter, job_start, job_end, note)
            SELECT l.account, 'charge', round(-l.amount * (new_rate::numeric / was.rate::numeric), 6), l.unit, new_id,
                   l.cluster, l.jobid, l.job_submit, l.submitter, l.job_start, l.job_end, label
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
        -- the sacct loader (95_sacct.sql): COPY into the staging table, then load_sacct()
        GRANT INSERT ON @extschema@.sacct_staging TO hpcacct_ingest;
        GRANT EXECUTE ON FUNCTION @extschema@.load_sacct(timestamptz, text[]),
                                  @extschema@.sacct_window_start(text, interval) TO hpcacct_ingest;
        GRANT SELECT ON ALL TABLES IN SCHEMA @extschema@ TO hpcacct_portal;
        -- staged lines are every account's, and not behind row-level security (COPY refuses it)
        REVOKE SELECT ON @extschema@.sacct_staging, @extschema@.sacctmgr_staging FROM hpcacct_portal;
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


-- the sacct loader: sql/install/95_sacct.sql as it is
-- ---------------------------------------------------------------------------------------
-- Slurm in (issue 14): sacct's lines are staged as text (COPY, no row-level security), then
-- one set-based step, load_sacct(), charges what it can into hpcacct.job and quarantines the
-- rest with the line, the reason and the SQLSTATE; quarantined lines are retried by every
-- load. The command hpcacct-sacct streams sacct's output into the staging table and calls
-- it; a site with its own export can do the same with COPY and SELECT.
--
-- After the privileges file on purpose: the staging table must not get row-level security
-- (COPY FROM refuses a table with it for a role it applies to), and the quarantine gets it
-- explicitly below.
-- ---------------------------------------------------------------------------------------

-- One row per sacct line, every field as the text sacct printed. Columns are named after
-- sacct's fields (lower case); the required ones are cluster, jobid, account, user,
-- partition, submit, start, end, alloctres and state, the others are kept with quarantined
-- lines. `problem` is set by a loader that could not split the line (wrong number of fields).
CREATE TABLE @extschema@.sacct_staging (
    lineno     bigint,
    line       text,
    problem    text,
    cluster    text,
    jobid      text,
    jobidraw   text,
    account    text,
    "user"     text,
    partition  text,
    submit     text,
    start      text,
    "end"      text,
    alloctres  text,
    state      text,
    elapsedraw text,
    reqtres    text,
    qos        text,
    nodelist   text
);
COMMENT ON TABLE @extschema@.sacct_staging IS
    'sacct lines as text, field by field (COPY them here, then SELECT hpcacct.load_sacct()); emptied by every load';

-- What a load could not charge, with the line and why. Open rows (resolved_at NULL) are
-- retried by every load; a row that then loads (or is skipped) is marked resolved, and kept.
CREATE TABLE @extschema@.sacct_quarantine (
    quarantine_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_key     text NOT NULL,
    reason      text NOT NULL,
    sqlstate    text NOT NULL CHECK (sqlstate ~ '^[0-9A-Z]{5}$'),
    first_seen  timestamptz NOT NULL DEFAULT pg_catalog.statement_timestamp(),
    last_tried  timestamptz NOT NULL DEFAULT pg_catalog.statement_timestamp(),
    attempts    integer NOT NULL DEFAULT 1,
    resolved_at timestamptz,
    resolution  text,
    line       text,
    problem    text,
    cluster    text,
    jobid      text,
    jobidraw   text,
    account    text,
    "user"     text,
    partition  text,
    submit     text,
    start      text,
    "end"      text,
    alloctres  text,
    state      text,
    elapsedraw text,
    reqtres    text,
    qos        text,
    nodelist   text,
    CONSTRAINT sacct_quarantine_resolution CHECK ((resolved_at IS NULL) = (resolution IS NULL))
);
CREATE UNIQUE INDEX sacct_quarantine_open ON @extschema@.sacct_quarantine (job_key) WHERE resolved_at IS NULL;
COMMENT ON TABLE @extschema@.sacct_quarantine IS
    'sacct lines a load could not charge: the line, the reason and its SQLSTATE; retried by every load until resolved';
COMMENT ON COLUMN @extschema@.sacct_quarantine.job_key IS
    'cluster|jobid|submit (submit as epoch seconds when it parses): one open row per job run';
COMMENT ON COLUMN @extschema@.sacct_quarantine.resolution IS
    'What a later load did with it: inserted, rerated, updated, unchanged, ignored, step, unfinished, never_started; '
    'rekeyed: quarantined again under another key (a time that parses now)';

-- Slurm accounts that are not charged under their own name: account NULL means their jobs
-- are not charged at all (Slurm's root, test accounts), counted as ignored; a name means
-- they are charged to that hpcacct account.
CREATE TABLE @extschema@.slurm_account_map (
    slurm_account text PRIMARY KEY,
    account       text REFERENCES @extschema@.account,
    note          text
);
COMMENT ON TABLE @extschema@.slurm_account_map IS
    'Slurm accounts charged under another name (account), or not at all (account NULL: jobs ignored, e.g. root)';

-- How far hpcacct-sacct run has loaded each cluster: the end of its last sacct window.
CREATE TABLE @extschema@.sacct_watermark (
    cluster        text PRIMARY KEY,
    loaded_through timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT pg_catalog.statement_timestamp()
);
COMMENT ON TABLE @extschema@.sacct_watermark IS
    'Per cluster, the end of the last sacct window loaded; advanced by load_sacct() in the load''s transaction';

-- sacctmgr's associations (sacctmgr show assoc -P format=Cluster,Account,User), for
-- sync_slurm_accounts().
CREATE TABLE @extschema@.sacctmgr_staging (
    cluster text,
    account text,
    "user"  text
);
COMMENT ON TABLE @extschema@.sacctmgr_staging IS
    'sacctmgr associations as text (COPY them here, then SELECT hpcacct.sync_slurm_accounts()); emptied by the sync';

-- A time as sacct prints it: seconds since the epoch (SLURM_TIME_FORMAT=%s, what
-- hpcacct-sacct run asks for) or ISO text with a UTC offset (%FT%T%z where a Slurm prints
-- it, or Z) are that instant; ISO text without an offset (sacct's default) is read in `zone`
-- (the site's time zone, never the session's). NULL when the text is not such a time
-- (Unknown, None, a bad date) or has no offset and zone is NULL. Never raises: every value
-- that reaches a cast has been checked.
CREATE FUNCTION @extschema@.sacct_time(value text, zone text) RETURNS timestamptz
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN CASE
        WHEN value ~ '^[0-9]{1,11}$' THEN pg_catalog.to_timestamp(value::double precision)
        WHEN value IS NULL
             OR value !~ '^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[T ]([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](Z|[+-](0[0-9]|1[0-5])(:?[0-5][0-9])?)?$'
             OR pg_catalog.substr(value, 1, 4) = '0000'
            THEN NULL
        WHEN pg_catalog.substr(value, 9, 2)::integer > 28
             AND pg_catalog.substr(value, 9, 2)::integer >
                 pg_catalog.date_part('day', pg_catalog.make_date(pg_catalog.substr(value, 1, 4)::integer,
                                                                  pg_catalog.substr(value, 6, 2)::integer, 1)
                                              + interval '1 month - 1 day')
            THEN NULL
        WHEN pg_catalog.length(value) > 19 THEN value::timestamptz
        WHEN zone IS NULL THEN NULL
        ELSE pg_catalog.timezone(zone, value::timestamp)
    END;
COMMENT ON FUNCTION @extschema@.sacct_time(text, text) IS
    'A sacct time: epoch seconds or ISO with a UTC offset are that instant, ISO without one is read in zone; '
    'NULL if it is not a time (Unknown, None, bad)';

CREATE FUNCTION @extschema@.tres_problem(text) RETURNS text
    AS 'MODULE_PATHNAME', 'hpcacct_tres_problem' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.tres_problem(text) IS
    'NULL when the text is a valid tres, else ''SQLSTATE message'' of the error its input would raise';

-- Where hpcacct-sacct run starts a cluster's next window: the watermark minus the overlap
-- (sacct's -S and -E include both ends, and slurmdbd may record a job after it ended).
-- NULL when the cluster was never loaded.
CREATE FUNCTION @extschema@.sacct_window_start(cluster text, overlap interval) RETURNS timestamptz
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT w.loaded_through OPERATOR(pg_catalog.-) overlap
        FROM @extschema@.sacct_watermark w WHERE w.cluster OPERATOR(pg_catalog.=) sacct_window_start.cluster
    $$;
COMMENT ON FUNCTION @extschema@.sacct_window_start(text, interval) IS
    'Start of a cluster''s next sacct window: its watermark minus the overlap; NULL if never loaded';

-- The load: every staged line (and every open quarantine row) is sorted, in one statement,
-- into steps, ignored accounts, unfinished runs (not charged yet: a later window shows them
-- finished), runs that never started (Start None or Unknown, or no allocation and no time),
-- lines to quarantine, and runs to charge. A run is
-- (cluster, jobid, submit), as slurmdbd identifies it; a run already in hpcacct.job with
-- the same fields writes nothing, a changed one is updated (and re-rated by the charging
-- trigger when a charging field changed). If charging still fails (a site trigger refusing
-- a job, a TRES the checks missed), the rows are bisected until the failing ones are found
-- and quarantined with their error; the rest load. `through` and `clusters`, when given,
-- advance those clusters' watermarks in the same transaction.
CREATE FUNCTION @extschema@.load_sacct(through timestamptz DEFAULT NULL, clusters text[] DEFAULT NULL,
    OUT lines bigint, OUT inserted bigint, OUT rerated bigint, OUT updated bigint, OUT unchanged bigint,
    OUT unfinished bigint, OUT never_started bigint, OUT steps bigint, OUT ignored bigint,
    OUT duplicates bigint, OUT quarantined bigint, OUT retried bigint, OUT resolved bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET jit = off  -- one-off statements over many rows: compiling them cost more than it saved (1.3 s of 17)
    AS $fn$
    DECLARE
        zone    text;
        problems bigint;
        max_length  interval := @extschema@.setting_value('max_job_length')::interval;
        need_member boolean := @extschema@.setting_value('require_membership')::boolean;
        pending bigint[];
        lo      bigint;
        hi      bigint;
        mid     bigint;
        total   bigint;
        state_  text;
        message text;
    BEGIN
        IF pg_catalog.to_regclass('@extschema@.job') IS NULL THEN
            RAISE EXCEPTION 'there is no job table @extschema@.job to load into'
                USING ERRCODE = 'undefined_table', HINT = 'Create it with SELECT @extschema@.create_job_table().';
        END IF;
        IF through IS NOT NULL AND (clusters IS NULL OR pg_catalog.cardinality(clusters) = 0
                                    OR pg_catalog.array_position(clusters, NULL) IS NOT NULL) THEN
            RAISE EXCEPTION 'a watermark (through) needs the clusters it is for'
                USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF through IS NOT NULL AND NOT pg_catalog.isfinite(through) THEN
            RAISE EXCEPTION 'the watermark must be finite, not %', through USING ERRCODE = 'datetime_field_overflow';
        END IF;
        -- One load at a time (another waits here; staged lines are claimed by DELETE, so
        -- every committed line is loaded once).
        PERFORM pg_catalog.pg_advisory_xact_lock('@extschema@.sacct_staging'::regclass::oid::bigint);
        -- Times without an offset are read in the site's time zone; unset, they are quarantined.
        SELECT s.value INTO zone FROM @extschema@.setting s WHERE s.name = 'timezone';

        IF pg_catalog.to_regclass('pg_temp.hpcacct_sacct_batch') IS NOT NULL THEN  -- a load that failed earlier
            DROP TABLE pg_temp.hpcacct_sacct_batch;
        END IF;
        IF pg_catalog.to_regclass('pg_temp.hpcacct_sacct_write') IS NOT NULL THEN
            DROP TABLE pg_temp.hpcacct_sacct_write;
        END IF;
        IF pg_catalog.to_regclass('pg_temp.hpcacct_sacct_failed') IS NOT NULL THEN
            DROP TABLE pg_temp.hpcacct_sacct_failed;
        END IF;
        CREATE TEMP TABLE hpcacct_sacct_batch ON COMMIT DROP AS
        WITH claimed AS (
            DELETE FROM @extschema@.sacct_staging RETURNING *
        ), parsed AS (
            SELECT r.*,
                   @extschema@.sacct_time(r.submit, zone) AS t_submit,
                   @extschema@.sacct_time(r.start, zone) AS t_start,
                   @extschema@.sacct_time(r."end", zone) AS t_end
            FROM (SELECT 0 AS origin, NULL::bigint AS quarantine_id, c.lineno, c.line, c.problem, c.cluster, c.jobid, c.jobidraw, c.account,
                         c."user", c.partition, c.submit, c.start, c."end", c.alloctres, c.state, c.elapsedraw,
                         c.reqtres, c.qos, c.nodelist
                  FROM claimed c
                  UNION ALL
                  SELECT 1, q.quarantine_id, NULL, q.line, q.problem, q.cluster, q.jobid, q.jobidraw, q.account, q."user",
                         q.partition, q.submit, q.start, q."end", q.alloctres, q.state, q.elapsedraw, q.reqtres,
                         q.qos, q.nodelist
                  FROM @extschema@.sacct_quarantine q WHERE q.resolved_at IS NULL) r
            OFFSET 0  -- computed once per line: flattened, every reference would parse the times again
        ), keyed AS (
            SELECT p.*,
                   CASE WHEN p.cluster IS NULL AND p.jobid IS NULL AND p.submit IS NULL
                        THEN 'line:' || coalesce(p.line, '')
                        ELSE coalesce(p.cluster, '') || '|' || coalesce(p.jobid, '') || '|'
                             || coalesce(pg_catalog.date_part('epoch', p.t_submit)::text, 'raw:' || coalesce(p.submit, ''))
                   END AS job_key
            FROM parsed p
            OFFSET 0
        ), ranked AS (
            SELECT k.*,
                   1 AS rank,  -- the line that counts for its run is 1, the others 2 (below)
                   m.slurm_account IS NOT NULL AND m.account IS NULL AS ignored,
                   CASE WHEN m.slurm_account IS NOT NULL THEN m.account ELSE k.account END AS charged_account
            FROM keyed k
            LEFT JOIN @extschema@.slurm_account_map m ON m.slurm_account = k.account
        )
        SELECT r.*,
               CASE
                   WHEN r.problem IS NOT NULL THEN 'quarantine:22P02:' || r.problem
                   WHEN r.jobid ~ '\.' THEN 'step'
                   WHEN r.ignored THEN 'ignored'
                   WHEN coalesce(r."end", '') IN ('', 'Unknown', 'None') THEN 'unfinished'
                   WHEN coalesce(r.start, '') IN ('', 'Unknown', 'None') THEN 'never_started'
                   WHEN coalesce(r.cluster, '') = '' OR coalesce(r.jobid, '') = '' OR coalesce(r.account, '') = ''
                        OR coalesce(r."user", '') = '' OR coalesce(r.partition, '') = ''
                        OR coalesce(r.submit, '') IN ('', 'Unknown', 'None') OR r.alloctres IS NULL
                       THEN 'quarantine:22004:the line lacks a cluster, jobid, account, user, partition, submit time or alloctres'
                   WHEN (r.t_submit IS NULL OR r.t_start IS NULL OR r.t_end IS NULL) AND zone IS NULL
                        AND (@extschema@.sacct_time(r.submit, 'UTC') IS NOT NULL AND r.t_submit IS NULL
                             OR @extschema@.sacct_time(r.start, 'UTC') IS NOT NULL AND r.t_start IS NULL
                             OR @extschema@.sacct_time(r."end", 'UTC') IS NOT NULL AND r.t_end IS NULL)
                       THEN 'quarantine:22023:a time without a UTC offset, and the site''s timezone setting is unset '
                            '(set it, or run sacct with SLURM_TIME_FORMAT=%s)'
                   WHEN r.t_submit IS NULL OR r.t_start IS NULL OR r.t_end IS NULL
                       THEN 'quarantine:22007:invalid time (submit "' || r.submit || '", start "' || r.start
                            || '", end "' || r."end" || '")'
                   WHEN r.t_end < r.t_start
                       THEN 'quarantine:22023:the job ends before it starts'
                   -- cancelled while it waited: Slurm 22.05 may record Start = End and no allocation
                   WHEN r.alloctres = '' AND r.t_end = r.t_start THEN 'never_started'
                   WHEN r.t_end - r.t_start > max_length
                       THEN 'quarantine:HA004:the job claims to have run longer than max_job_length (' || max_length || ')'
                   WHEN @extschema@.tres_problem(r.alloctres) IS NOT NULL
                       THEN 'quarantine:' || pg_catalog.left(@extschema@.tres_problem(r.alloctres), 5) || ':'
                            || pg_catalog.substr(@extschema@.tres_problem(r.alloctres), 7)
                   WHEN NOT EXISTS (SELECT 1 FROM @extschema@.account a WHERE a.name = r.charged_account)
                       THEN 'quarantine:42704:unknown account "' || r.charged_account || '"'
                   WHEN need_member AND NOT EXISTS (SELECT 1 FROM @extschema@.membership ms
                                                    WHERE ms.account = r.charged_account AND ms.username = r."user")
                       THEN 'quarantine:HA005:user "' || r."user" || '" is not a member of account "'
                            || r.charged_account || '"'
                   WHEN NOT EXISTS (SELECT 1 FROM @extschema@.resource rs
                                    WHERE rs.cluster = r.cluster AND rs.partition = r.partition
                                      AND rs.valid @> r.t_start)
                       THEN 'quarantine:42704:no resource for cluster "' || r.cluster || '" partition "'
                            || r.partition || '" at ' || r.t_start
                   ELSE 'charge'
               END AS verdict
        FROM ranked r;
        ANALYZE pg_temp.hpcacct_sacct_batch;
        -- Several lines of one run (a file holding two windows, a quarantined line seen again):
        -- the newest staged line counts, then the quarantined one; the others rank 2. Found by
        -- hashing the keys, without sorting every line.
        WITH dup AS (
            SELECT b.job_key FROM pg_temp.hpcacct_sacct_batch b GROUP BY b.job_key HAVING pg_catalog.count(*) > 1
        ), ordered AS (
            SELECT b.ctid AS row_id,
                   pg_catalog.row_number() OVER (PARTITION BY b.job_key ORDER BY b.origin, b.lineno DESC) AS n
            FROM pg_temp.hpcacct_sacct_batch b JOIN dup d ON d.job_key = b.job_key
        )
        UPDATE pg_temp.hpcacct_sacct_batch b SET rank = 2
        FROM ordered o WHERE b.ctid = o.row_id AND o.n > 1;

        -- Runs to charge, against what hpcacct.job holds for them.
        CREATE TEMP TABLE hpcacct_sacct_write ON COMMIT DROP AS
        SELECT pg_catalog.row_number() OVER () AS seq, w.*
        FROM (SELECT b.origin, b.lineno, b.job_key, b.cluster, b.jobid, b.charged_account AS account, b."user",
                     b.partition, b.t_submit AS submit, b.t_start AS start, b.t_end AS "end", b.alloc AS alloctres,
                     b.state,
                     CASE WHEN j.cluster IS NULL THEN 'inserted'
                          WHEN (j.account, j."user", j.partition, j.start, j."end")
                               IS DISTINCT FROM (b.charged_account, b."user", b.partition, b.t_start, b.t_end)
                               OR NOT j.alloctres OPERATOR(@extschema@.=) b.alloc THEN 'rerated'
                          WHEN j.state IS DISTINCT FROM b.state THEN 'updated'
                          ELSE 'unchanged'
                     END AS action
              FROM (SELECT c.*, c.alloctres::@extschema@.tres AS alloc  -- cast once
                    FROM pg_temp.hpcacct_sacct_batch c
                    WHERE c.verdict = 'charge' AND c.rank = 1
                    OFFSET 0) b
              LEFT JOIN @extschema@.job j ON j.cluster = b.cluster AND j.jobid = b.jobid AND j.submit = b.t_submit) w;
        ANALYZE pg_temp.hpcacct_sacct_write;

        CREATE TEMP TABLE hpcacct_sacct_failed (seq bigint PRIMARY KEY, sqlstate text, reason text) ON COMMIT DROP;
        SELECT pg_catalog.count(*) INTO total FROM pg_temp.hpcacct_sacct_write;
        -- Ranges still to write, as pairs lo, hi: the whole set first; a range that fails is
        -- split in halves, and a single row that fails is quarantined.
        IF total > 0 THEN
            pending := ARRAY[1, total];
        END IF;
        WHILE pg_catalog.cardinality(pending) > 0 LOOP
            lo := pending[1];
            hi := pending[2];
            pending := pending[3:];
            BEGIN
                INSERT INTO @extschema@.job AS j (cluster, jobid, account, "user", partition, submit, start, "end",
                                                  alloctres, state)
                SELECT w.cluster, w.jobid, w.account, w."user", w.partition, w.submit, w.start, w."end",
                       w.alloctres, w.state
                FROM pg_temp.hpcacct_sacct_write w
                WHERE w.seq BETWEEN lo AND hi AND w.action <> 'unchanged'
                ON CONFLICT (cluster, jobid, submit) DO UPDATE
                    SET account = excluded.account, "user" = excluded."user", partition = excluded.partition,
                        start = excluded.start, "end" = excluded."end", alloctres = excluded.alloctres,
                        state = excluded.state
                    WHERE (j.account, j."user", j.partition, j.start, j."end", j.alloctres::text, j.state)
                          IS DISTINCT FROM (excluded.account, excluded."user", excluded.partition, excluded.start,
                                            excluded."end", excluded.alloctres::text, excluded.state);
            EXCEPTION WHEN OTHERS THEN
                GET STACKED DIAGNOSTICS state_ = RETURNED_SQLSTATE, message = MESSAGE_TEXT;
                -- Only what a job's data can cause is quarantined; anything else (out of
                -- memory, deadlock, a full disk) fails the load.
                IF pg_catalog.left(state_, 2) NOT IN ('22', '23', '42', '44', 'HA', 'P0') THEN
                    RAISE;
                END IF;
                IF lo = hi THEN
                    INSERT INTO pg_temp.hpcacct_sacct_failed VALUES (lo, state_, message);
                ELSE
                    mid := (lo + hi) / 2;
                    pending := ARRAY[lo, mid, mid + 1, hi] || pending;
                END IF;
            END;
        END LOOP;

        -- Open quarantine rows (all of them are in the batch) whose run this load took
        -- (charged, unchanged or skipped) are resolved; so are those whose key changed (a time
        -- without offset that now parses): they are quarantined again under the new key below.
        SELECT pg_catalog.count(*) FILTER (WHERE b.rank = 1 AND b.verdict LIKE 'quarantine:%'),
               pg_catalog.count(*) FILTER (WHERE b.origin = 1)
        INTO problems, retried
        FROM pg_temp.hpcacct_sacct_batch b;
        problems := problems + (SELECT pg_catalog.count(*) FROM pg_temp.hpcacct_sacct_failed);
        IF retried > 0 THEN
            WITH done AS (
                UPDATE @extschema@.sacct_quarantine q
                SET resolved_at = pg_catalog.statement_timestamp(),
                    resolution = CASE WHEN q.job_key <> b.job_key AND (top.verdict LIKE 'quarantine:%' OR f.seq IS NOT NULL)
                                      THEN 'rekeyed' ELSE coalesce(w.action, top.verdict) END
                FROM pg_temp.hpcacct_sacct_batch b
                JOIN pg_temp.hpcacct_sacct_batch top ON top.job_key = b.job_key AND top.rank = 1
                LEFT JOIN pg_temp.hpcacct_sacct_write w ON w.job_key = top.job_key
                LEFT JOIN pg_temp.hpcacct_sacct_failed f ON f.seq = w.seq
                WHERE b.origin = 1 AND q.quarantine_id = b.quarantine_id
                  AND ((top.verdict NOT LIKE 'quarantine:%' AND f.seq IS NULL) OR q.job_key <> b.job_key)
                RETURNING q.resolution
            )
            SELECT pg_catalog.count(*) FILTER (WHERE d.resolution <> 'rekeyed') INTO resolved FROM done d;
        ELSE
            resolved := 0;
        END IF;

        -- Quarantine: new problems, and open rows that failed again.
        IF problems > 0 THEN
            INSERT INTO @extschema@.sacct_quarantine AS q
                (job_key, reason, sqlstate, line, problem, cluster, jobid, jobidraw, account, "user", partition,
                 submit, start, "end", alloctres, state, elapsedraw, reqtres, qos, nodelist)
            SELECT b.job_key,
                   coalesce(f.reason, pg_catalog.substr(b.verdict, 18)),
                   coalesce(f.sqlstate, pg_catalog.substr(b.verdict, 12, 5)),
                   b.line, b.problem, b.cluster, b.jobid, b.jobidraw, b.account, b."user", b.partition, b.submit,
                   b.start, b."end", b.alloctres, b.state, b.elapsedraw, b.reqtres, b.qos, b.nodelist
            FROM pg_temp.hpcacct_sacct_batch b
            LEFT JOIN pg_temp.hpcacct_sacct_write w ON w.job_key = b.job_key AND b.verdict = 'charge'
            LEFT JOIN pg_temp.hpcacct_sacct_failed f ON f.seq = w.seq
            WHERE b.rank = 1 AND (b.verdict LIKE 'quarantine:%' OR f.seq IS NOT NULL)
            ON CONFLICT (job_key) WHERE resolved_at IS NULL DO UPDATE
                SET reason = excluded.reason, sqlstate = excluded.sqlstate, last_tried = excluded.last_tried,
                    attempts = q.attempts + 1, line = excluded.line, problem = excluded.problem,
                    cluster = excluded.cluster, jobid = excluded.jobid, jobidraw = excluded.jobidraw,
                    account = excluded.account, "user" = excluded."user", partition = excluded.partition,
                    submit = excluded.submit, start = excluded.start, "end" = excluded."end",
                    alloctres = excluded.alloctres, state = excluded.state, elapsedraw = excluded.elapsedraw,
                    reqtres = excluded.reqtres, qos = excluded.qos, nodelist = excluded.nodelist;
        END IF;

        IF through IS NOT NULL THEN
            INSERT INTO @extschema@.sacct_watermark AS wm (cluster, loaded_through)
            SELECT DISTINCT c, through FROM pg_catalog.unnest(clusters) AS c
            ON CONFLICT (cluster) DO UPDATE
                SET loaded_through = GREATEST(wm.loaded_through, excluded.loaded_through),
                    updated_at = excluded.updated_at;
        END IF;

        SELECT pg_catalog.count(*) FILTER (WHERE b.origin = 0),
               pg_catalog.count(*) FILTER (WHERE b.rank = 1 AND b.verdict = 'unfinished'),
               pg_catalog.count(*) FILTER (WHERE b.rank = 1 AND b.verdict = 'never_started'),
               pg_catalog.count(*) FILTER (WHERE b.rank = 1 AND b.verdict = 'step'),
               pg_catalog.count(*) FILTER (WHERE b.rank = 1 AND b.verdict = 'ignored'),
               pg_catalog.count(*) FILTER (WHERE b.rank > 1 AND b.origin = 0),
               pg_catalog.count(*) FILTER (WHERE b.rank = 1 AND b.verdict LIKE 'quarantine:%'),
               pg_catalog.count(*) FILTER (WHERE b.origin = 1)
        INTO lines, unfinished, never_started, steps, ignored, duplicates, quarantined, retried
        FROM pg_temp.hpcacct_sacct_batch b;
        SELECT pg_catalog.count(*) FILTER (WHERE w.action = 'inserted' AND f.seq IS NULL),
               pg_catalog.count(*) FILTER (WHERE w.action = 'rerated' AND f.seq IS NULL),
               pg_catalog.count(*) FILTER (WHERE w.action = 'updated' AND f.seq IS NULL),
               pg_catalog.count(*) FILTER (WHERE w.action = 'unchanged'),
               pg_catalog.count(*) FILTER (WHERE f.seq IS NOT NULL)
        INTO inserted, rerated, updated, unchanged, total
        FROM pg_temp.hpcacct_sacct_write w
        LEFT JOIN pg_temp.hpcacct_sacct_failed f ON f.seq = w.seq;
        quarantined := quarantined + total;
        DROP TABLE pg_temp.hpcacct_sacct_batch, pg_temp.hpcacct_sacct_write, pg_temp.hpcacct_sacct_failed;
    END
    $fn$;
COMMENT ON FUNCTION @extschema@.load_sacct(timestamptz, text[]) IS
    'Loads the staged sacct lines (and retries the quarantine): charges finished runs, skips steps, unfinished runs and '
    'ignored accounts, quarantines the rest; advances the clusters'' watermarks to through';

-- Accounts, users and memberships from sacctmgr's associations: adds what is missing, never
-- removes anything. Slurm accounts in slurm_account_map are not added (an ignored account is
-- not charged; a mapped one is charged to its hpcacct account). Runs with the caller's
-- rights: an administrator's.
CREATE FUNCTION @extschema@.sync_slurm_accounts(OUT accounts_added bigint, OUT users_added bigint,
                                                OUT memberships_added bigint, OUT associations bigint)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $fn$
    BEGIN
        PERFORM pg_catalog.pg_advisory_xact_lock('@extschema@.sacctmgr_staging'::regclass::oid::bigint);
        IF pg_catalog.to_regclass('pg_temp.hpcacct_assoc') IS NOT NULL THEN
            DROP TABLE pg_temp.hpcacct_assoc;
        END IF;
        CREATE TEMP TABLE hpcacct_assoc ON COMMIT DROP AS
        WITH claimed AS (DELETE FROM @extschema@.sacctmgr_staging RETURNING *)
        SELECT DISTINCT c.account, nullif(c."user", '') AS username
        FROM claimed c
        WHERE coalesce(c.account, '') <> ''
          AND NOT EXISTS (SELECT 1 FROM @extschema@.slurm_account_map m WHERE m.slurm_account = c.account);
        SELECT pg_catalog.count(*) INTO associations FROM pg_temp.hpcacct_assoc;

        INSERT INTO @extschema@.account (name, description)
        SELECT DISTINCT a.account, 'from Slurm (sacctmgr)' FROM pg_temp.hpcacct_assoc a
        ON CONFLICT (name) DO NOTHING;
        GET DIAGNOSTICS accounts_added = ROW_COUNT;
        INSERT INTO @extschema@.hpc_user (username)
        SELECT DISTINCT a.username FROM pg_temp.hpcacct_assoc a WHERE a.username IS NOT NULL
        ON CONFLICT (username) DO NOTHING;
        GET DIAGNOSTICS users_added = ROW_COUNT;
        INSERT INTO @extschema@.membership (account, username)
        SELECT DISTINCT a.account, a.username FROM pg_temp.hpcacct_assoc a WHERE a.username IS NOT NULL
        ON CONFLICT (account, username) DO NOTHING;
        GET DIAGNOSTICS memberships_added = ROW_COUNT;
        DROP TABLE pg_temp.hpcacct_assoc;
    END
    $fn$;
COMMENT ON FUNCTION @extschema@.sync_slurm_accounts() IS
    'Adds the accounts, users and memberships of the staged sacctmgr associations that are missing; removes nothing';

-- Portal users see the quarantined lines and the mappings of their own accounts only.
SELECT @extschema@.protect_table('@extschema@.sacct_quarantine');
SELECT @extschema@.protect_table('@extschema@.slurm_account_map');

REVOKE EXECUTE ON FUNCTION
    @extschema@.load_sacct(timestamptz, text[]),
    @extschema@.sync_slurm_accounts(),
    @extschema@.sacct_window_start(text, interval)
    FROM PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('@extschema@.sacct_quarantine', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.sacct_quarantine_quarantine_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.slurm_account_map', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.sacct_watermark', '');


-- what setup_roles() grants on the loader's objects, for roles an earlier version made
DO $do$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'hpcacct_admin') THEN
        GRANT SELECT, INSERT, UPDATE, DELETE ON @extschema@.sacct_staging, @extschema@.sacct_quarantine,
            @extschema@.slurm_account_map, @extschema@.sacct_watermark, @extschema@.sacctmgr_staging TO hpcacct_admin;
        GRANT USAGE, SELECT, UPDATE ON SEQUENCE @extschema@.sacct_quarantine_quarantine_id_seq TO hpcacct_admin;
        GRANT EXECUTE ON FUNCTION @extschema@.sacct_time(text, text), @extschema@.tres_problem(text),
            @extschema@.sacct_window_start(text, interval), @extschema@.load_sacct(timestamptz, text[]),
            @extschema@.sync_slurm_accounts() TO hpcacct_admin;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'hpcacct_ingest') THEN
        GRANT INSERT ON @extschema@.sacct_staging TO hpcacct_ingest;
        GRANT EXECUTE ON FUNCTION @extschema@.load_sacct(timestamptz, text[]),
                                  @extschema@.sacct_window_start(text, interval) TO hpcacct_ingest;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'hpcacct_portal') THEN
        GRANT SELECT ON @extschema@.sacct_quarantine, @extschema@.slurm_account_map, @extschema@.sacct_watermark
            TO hpcacct_portal;
    END IF;
END
$do$;
-- end of loader (issue 14)

-- people (issue 16, continued): the accounts hpcacct-report --all writes, the pre-expiry
-- warning (outbox topic account_expiry, setting expiry_warning_days), the queue by fair share
-- (pending_job.partition, view fairshare_queue) and r_wlm_usage ----------------------------
ALTER TABLE @extschema@.pending_job ADD COLUMN partition text;
ALTER TABLE @extschema@.outbox DROP CONSTRAINT outbox_topic_check;
ALTER TABLE @extschema@.outbox ADD CONSTRAINT outbox_topic_check
    CHECK (topic IN ('regulation_warning', 'regulation_retraction', 'annual_warning',
                     'annual_retraction', 'quota_state', 'account_expired',
                     'account_deleted', 'job_held', 'job_released', 'balance_low',
                     'account_expiry'));
CREATE OR REPLACE FUNCTION @extschema@.statement_accounts(month date)
    RETURNS SETOF text
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        tz constant text := @extschema@.site_timezone();
        m date;
    BEGIN
        IF month IS NULL THEN
            RAISE EXCEPTION 'a month is needed' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF NOT isfinite(month) THEN
            RAISE EXCEPTION 'the month must be a finite date' USING ERRCODE = 'datetime_field_overflow';
        END IF;
        m := date_trunc('month', month)::date;
        IF m > @extschema@.site_today() THEN
            RAISE EXCEPTION 'month % has not begun', to_char(m, 'YYYY-MM')
                USING ERRCODE = 'invalid_parameter_value', DETAIL = format('Today is %s in the site time zone.', @extschema@.site_today());
        END IF;
        RETURN QUERY
        SELECT a.name
        FROM @extschema@.account a
        WHERE EXISTS (SELECT 1 FROM @extschema@.ledger l
                      WHERE l.account = a.name AND l.kind = 'charge'
                        AND l.job_start < (m + interval '1 month')::timestamp AT TIME ZONE tz
                        AND l.job_end >= m::timestamp AT TIME ZONE tz)
           OR EXISTS (SELECT 1 FROM @extschema@.ledger l
                      WHERE l.account = a.name AND l.kind <> 'charge'
                        AND l.valid_from < (m + interval '1 month')::date AND l.valid_until >= m)
           OR EXISTS (SELECT 1 FROM @extschema@.quota_period p
                      WHERE p.account = a.name AND p.period_start < (m + interval '1 month')::date AND p.period_end >= m)
        ORDER BY a.name;
    END
    $$;
COMMENT ON FUNCTION @extschema@.statement_accounts(date) IS
    'Accounts the caller may see with a charge, an allocation or a window quota in a month: whose statements '
    'hpcacct-report --all writes';
CREATE VIEW @extschema@.fairshare_queue AS
    WITH f AS MATERIALIZED (
        SELECT s.pool, s.unit, s.account, s.submitter, s.factor FROM @extschema@.fairshare() s
    ), q AS (
        SELECT p.cluster, p.jobid, p.username, p.partition, p.held, p.submitted_at,
               coalesce(p.account, u.default_account, p.username) AS account,
               coalesce(r.pool, r.cluster) AS pool, r.unit
        FROM @extschema@.pending_job p
        LEFT JOIN @extschema@.hpc_user u ON u.username = p.username
        LEFT JOIN @extschema@.resource r
          ON r.cluster = p.cluster AND r.partition = pg_catalog.split_part(p.partition, ',', 1)
         AND r.valid @> pg_catalog.now()
    )
    SELECT pg_catalog.row_number() OVER (ORDER BY fa.factor DESC NULLS LAST, fu.factor DESC NULLS LAST,
                                         q.submitted_at, q.cluster, q.jobid) AS position,
           q.cluster, q.jobid, q.username, q.account, q.partition, q.pool, q.unit,
           fa.factor AS account_factor, fu.factor AS user_factor, q.held, q.submitted_at
    FROM q
    LEFT JOIN f fa ON fa.pool = q.pool AND fa.unit = q.unit AND fa.account = q.account AND fa.submitter IS NULL
    LEFT JOIN f fu ON fu.pool = q.pool AND fu.unit = q.unit AND fu.account = q.account AND fu.submitter = q.username
    ORDER BY 1;
ALTER VIEW @extschema@.fairshare_queue SET (security_invoker = true);
COMMENT ON VIEW @extschema@.fairshare_queue IS
    'Pending jobs (pending_job) ordered by their account''s fair-share factor in the pool of their partition, '
    'then the user''s factor and the submit time (LQCD''s queue by fair-share priority)';
CREATE OR REPLACE FUNCTION @extschema@.r_wlm_usage(project text DEFAULT NULL, at date DEFAULT NULL)
    RETURNS TABLE (account text, period_start date, period_end date, month date, state text,
                   monthly float8, remaining_prev float8, consumed_current float8,
                   consumable_pct float8, consumable float8, cluster text, unit text)
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF project IS NOT NULL THEN
            RETURN QUERY SELECT * FROM @extschema@.window_quota_usage(project, at);
            RETURN;
        END IF;
        RETURN QUERY
        SELECT u.*
        FROM (SELECT DISTINCT p.account FROM @extschema@.quota_period p
              WHERE (SELECT @extschema@.sees_all_accounts())
                 OR p.account = ANY ((SELECT @extschema@.visible_accounts())::text[])) a
        CROSS JOIN LATERAL @extschema@.window_quota_usage(a.account, at) u
        ORDER BY u.account;
    END
    $$;
COMMENT ON FUNCTION @extschema@.r_wlm_usage(text, date) IS
    'r_wlm_usage -q: the window quota of the caller''s own accounts (administrators: every account), or of one '
    'project, for the month containing at (NULL: today in the site time zone)';

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'hpcacct_admin') THEN
        GRANT EXECUTE ON FUNCTION @extschema@.statement_accounts(date), @extschema@.r_wlm_usage(text, date)
            TO hpcacct_admin;
        GRANT SELECT, INSERT, UPDATE, DELETE ON @extschema@.fairshare_queue TO hpcacct_admin;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'hpcacct_portal') THEN
        GRANT SELECT ON @extschema@.fairshare_queue TO hpcacct_portal;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'hpcacct_auditor') THEN
        GRANT SELECT ON @extschema@.fairshare_queue TO hpcacct_auditor;
    END IF;
END
$$;
-- end of people (issue 16, continued)

-- raw core-hours of every charge (issue 16: Compute Canada's raw core-years) -------------------
-- Charging books each charge's cores x wall-clock hours in ledger.core_hours (reversals and
-- re-ratings carry it, negated). The charges booked before get theirs, once, from the job
-- table's AllocTRES where the job run is still there (a charge and its reversal alike, so
-- they cancel as their amounts do); others keep NULL (unknown). This fills a new column of
-- rows already written: no amount, account or date of the ledger changes.
-- Raw core-hours of a job: its cores (AllocTRES cpu) x wall-clock hours, unweighted and not
-- rounded to whole nodes, rounded to 6 decimals as charges are. A SQL-standard body without
-- SET options, so that charging inlines it.
CREATE OR REPLACE FUNCTION @extschema@.core_hours(alloc @extschema@.tres, elapsed interval) RETURNS numeric
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN pg_catalog.round((@extschema@.tres_get(alloc, 'cpu') * pg_catalog.date_part('epoch', elapsed) / 3600)::numeric, 6);
COMMENT ON FUNCTION @extschema@.core_hours(@extschema@.tres, interval) IS
    'Raw core-hours: AllocTRES cpu x wall-clock hours (unweighted), rounded to 6 decimals';
ALTER TABLE @extschema@.ledger ADD COLUMN core_hours numeric(20, 6);
COMMENT ON COLUMN @extschema@.ledger.core_hours IS
    'A charge''s raw core-hours: the cores of the job''s AllocTRES x wall-clock hours, unweighted (negative in a '
    'reversal); NULL for other entries and for charges whose core count is not known';
DO $do$
BEGIN
    IF pg_catalog.to_regclass('@extschema@.job') IS NOT NULL THEN
        ALTER TABLE @extschema@.ledger DISABLE TRIGGER ledger_append_only;
        UPDATE @extschema@.ledger l
        SET core_hours = CASE WHEN l.amount < 0 THEN -1 ELSE 1 END
                         * @extschema@.core_hours(j.alloctres, l.job_end - l.job_start)
        FROM @extschema@.job j
        WHERE l.kind = 'charge' AND j.cluster = l.cluster AND j.jobid = l.jobid
          AND j.submit IS NOT DISTINCT FROM l.job_submit;
        ALTER TABLE @extschema@.ledger ENABLE TRIGGER ledger_append_only;
    END IF;
END
$do$;
CREATE OR REPLACE VIEW @extschema@.charge_by_month WITH (security_invoker = true) AS
    SELECT l.entry_id, l.account, r.cluster, r.partition, coalesce(r.pool, r.cluster) AS pool, l.unit, l.submitter,
           m.month::date AS month,
           l.amount * @extschema@.period_share(l.job_start, l.job_end,
                                               m.month AT TIME ZONE z.tz,
                                               (m.month + interval '1 month') AT TIME ZONE z.tz) AS amount,
           l.core_hours * @extschema@.period_share(l.job_start, l.job_end,
                                                   m.month AT TIME ZONE z.tz,
                                                   (m.month + interval '1 month') AT TIME ZONE z.tz) AS core_hours
    FROM @extschema@.ledger l
    JOIN @extschema@.resource r USING (resource_id)
    CROSS JOIN (SELECT (SELECT @extschema@.site_timezone()) AS tz) z  -- once per query
    CROSS JOIN LATERAL pg_catalog.generate_series(
        pg_catalog.date_trunc('month', l.job_start AT TIME ZONE z.tz),
        pg_catalog.date_trunc('month', l.job_end AT TIME ZONE z.tz),
        interval '1 month') AS m(month)
    WHERE l.kind = 'charge'
      AND (m.month < l.job_end AT TIME ZONE z.tz OR l.job_end = l.job_start);
COMMENT ON VIEW @extschema@.charge_by_month IS
    'Charges (and their raw core-hours) split pro rata over the calendar months (site time zone) in which the jobs ran';
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'hpcacct_admin') THEN
        GRANT EXECUTE ON FUNCTION @extschema@.core_hours(@extschema@.tres, interval) TO hpcacct_admin;
    END IF;
END
$$;
-- end of raw core-hours (issue 16)

-- ==== submit (issues 15 and 18): exact bank balances, one definition of an account in the bank
-- quarter_balance counts numeric amounts exactly, in micro-units: its transition function,
-- its result type and the view that uses it change.
DROP VIEW @extschema@.quarter_balances;
DROP AGGREGATE @extschema@.quarter_balance(text, date, float8, date);
DROP FUNCTION @extschema@.quarter_balance_transfn(internal, text, date, float8, date);
ALTER TYPE @extschema@.bank_balance
    ALTER ATTRIBUTE deposits TYPE numeric, ALTER ATTRIBUTE charges TYPE numeric,
    ALTER ATTRIBUTE transfers TYPE numeric, ALTER ATTRIBUTE refunds TYPE numeric,
    ALTER ATTRIBUTE balance TYPE numeric;
COMMENT ON TYPE @extschema@.bank_balance IS
    'An account''s quarter: deposits, charges, transfers (signed), refunds and balance (exact, 6 decimals)';
CREATE FUNCTION @extschema@.quarter_balance_transfn(internal, text, date, numeric, date) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_quarter_balance_transfn' LANGUAGE c CALLED ON NULL INPUT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.quarter_balance_transfn(internal, text, date, numeric, date) IS
    'Support function of the aggregate quarter_balance';
CREATE AGGREGATE @extschema@.quarter_balance(kind text, quarter date, amount numeric, at date) (
    SFUNC = @extschema@.quarter_balance_transfn,
    STYPE = internal,
    SSPACE = 48,
    FINALFUNC = @extschema@.quarter_balance_finalfn,
    COMBINEFUNC = @extschema@.quarter_balance_combinefn,
    SERIALFUNC = @extschema@.quarter_balance_serialfn,
    DESERIALFUNC = @extschema@.quarter_balance_deserialfn,
    PARALLEL = SAFE
);
COMMENT ON AGGREGATE @extschema@.quarter_balance(text, date, numeric, date) IS
    'Balance of the quarter containing at, over bank entries (kind deposit/charge/transfer/refund, a day of the '
    'quarter each counts in, amount); entries of other quarters do not count (credits do not carry over); exact '
    '(micro-units, each amount rounded to 6 decimals)';

CREATE FUNCTION @extschema@.bank_ledger (from_day date, until_day date)
    RETURNS TABLE (account text, kind text, day date, amount numeric)
    LANGUAGE sql STABLE PARALLEL SAFE
BEGIN ATOMIC
        SELECT l.account, l.kind, l.valid_from, l.amount
        FROM @extschema@.ledger l
        WHERE l.kind IN ('deposit', 'transfer', 'refund') AND l.unit = (SELECT @extschema@.bank_unit())
          AND l.valid_from >= bank_ledger.from_day AND l.valid_from < bank_ledger.until_day
        UNION ALL
        SELECT c.account, 'charge', @extschema@.quarter_start(c.month), sum(c.amount)
        FROM @extschema@.charge_rollup c
        WHERE c.unit = (SELECT @extschema@.bank_unit())
          AND c.month >= bank_ledger.from_day AND c.month < bank_ledger.until_day
        GROUP BY c.account, @extschema@.quarter_start(c.month);
END;
COMMENT ON FUNCTION @extschema@.bank_ledger(date, date) IS
    'What bank balances count, from_day (included) to until_day (excluded), quarter starts: deposits, transfers, '
    'refunds (on their day) and charges (per quarter) in the bank unit';

CREATE FUNCTION @extschema@.bank_state (account text, day date)
    RETURNS TABLE (state text, next_allocation date, balance numeric)
    LANGUAGE sql STABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT CASE WHEN a.deleted_in <= bank_state.day THEN 'deleted'
                WHEN q.current THEN 'active'
                WHEN q.later IS NOT NULL THEN 'inactive'
                ELSE 'expired' END,
           q.later,
           coalesce((SELECT (@extschema@.quarter_balance(e.kind, e.day, e.amount, bank_state.day)).balance
                     FROM @extschema@.bank_ledger(@extschema@.quarter_start(bank_state.day),
                                                  (@extschema@.quarter_start(bank_state.day) + interval '3 months')::date) e
                     WHERE e.account = a.name), 0)
    FROM @extschema@.account a
    CROSS JOIN LATERAL (
        SELECT coalesce(bool_or(s.quarter = @extschema@.quarter_start(bank_state.day)), false) AS current,
               min(s.quarter) FILTER (WHERE s.quarter > @extschema@.quarter_start(bank_state.day)) AS later
        FROM (SELECT @extschema@.quarter_start(l.valid_from) AS quarter
              FROM @extschema@.ledger l
              WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer')
                AND l.unit = (SELECT @extschema@.bank_unit())
                AND l.valid_from >= @extschema@.quarter_start(bank_state.day)
              GROUP BY 1
              HAVING sum(l.amount) > 0) s) q
    WHERE a.name = bank_state.account;
END;
COMMENT ON FUNCTION @extschema@.bank_state(text, date) IS
    'An account in the bank at a day: state (active/inactive/expired/deleted), first later quarter with an '
    'allocation, exact balance of the day''s quarter; no row for an unknown account';

CREATE VIEW @extschema@.quarter_balances WITH (security_invoker = true) AS
    SELECT p.account, a.kind AS account_kind, p.quarter,
           (p.b).deposits, (p.b).charges, (p.b).transfers, (p.b).refunds, (p.b).balance, s.state
    FROM (SELECT e.account, @extschema@.quarter_start(e.day) AS quarter,
                 @extschema@.quarter_balance(e.kind, e.day, e.amount, @extschema@.quarter_start(e.day)) AS b
          FROM @extschema@.bank_ledger('-infinity', 'infinity') e
          GROUP BY e.account, @extschema@.quarter_start(e.day)) p
    JOIN @extschema@.account a ON a.name = p.account
    CROSS JOIN LATERAL @extschema@.bank_state(p.account, p.quarter) s;
COMMENT ON VIEW @extschema@.quarter_balances IS
    'Per account and quarter: deposits, charges, transfers, refunds, balance (exact), state (active/inactive/expired/deleted)';

-- sees_all_accounts() becomes PL/pgSQL (final definitions below); what
-- setup_roles() grants on the new and remade views, for roles an earlier version made
DO $do$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'hpcacct_admin') THEN
        GRANT SELECT, INSERT, UPDATE, DELETE ON @extschema@.quarter_balances TO hpcacct_admin;
        GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA @extschema@ TO hpcacct_admin;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'hpcacct_portal') THEN
        GRANT SELECT ON @extschema@.quarter_balances TO hpcacct_portal;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'hpcacct_auditor') THEN
        GRANT SELECT ON @extschema@.quarter_balances TO hpcacct_auditor;
    END IF;
END
$do$;
-- end of submit (issues 15 and 18)

-- ==== dead and test-only code (issue 18, house) -------------------------------------
-- year_charges() was read by no report since the usage reports read the rollup (year_usage);
-- the tests that compared against it carry their own copy.
DROP FUNCTION @extschema@.year_charges(integer, timestamptz);
-- end of dead and test-only code

-- ==== one glue convention (issue 18, house) -------------------------------------------
-- Every aggregate's support functions end in _transfn, _combinefn, _serialfn, _deserialfn,
-- _finalfn, in SQL and in C; tmc's and tc's were the exception. The aggregates refer to
-- their functions by oid: renaming keeps them, the C entry points follow (the final
-- definitions below re-create them with their comments).
ALTER FUNCTION @extschema@.theoretical_combine(internal, internal) RENAME TO theoretical_combinefn;
ALTER FUNCTION @extschema@.theoretical_final(internal) RENAME TO theoretical_finalfn;
ALTER FUNCTION @extschema@.theoretical_serialize(internal) RENAME TO theoretical_serialfn;
ALTER FUNCTION @extschema@.theoretical_deserialize(bytea, internal) RENAME TO theoretical_deserialfn;
CREATE OR REPLACE FUNCTION @extschema@.theoretical_combinefn(internal, internal) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_theoretical_combinefn' LANGUAGE c IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE;
CREATE OR REPLACE FUNCTION @extschema@.theoretical_finalfn(internal) RETURNS float8
    AS 'MODULE_PATHNAME', 'hpcacct_theoretical_finalfn' LANGUAGE c IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE;
CREATE OR REPLACE FUNCTION @extschema@.theoretical_serialfn(internal) RETURNS bytea
    AS 'MODULE_PATHNAME', 'hpcacct_theoretical_serialfn' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
CREATE OR REPLACE FUNCTION @extschema@.theoretical_deserialfn(bytea, internal) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_theoretical_deserialfn' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
-- end of one glue convention

-- ==== the reference: a comment on every column of every view (issue 18, house) ----------
-- As sql/install/98_column_comments.sql; setup_roles() (final definitions) now also comments
-- the roles it creates, which the README's reference lists.
DO $do$
DECLARE
    c record;
    v text;
BEGIN
    FOR c IN SELECT * FROM (VALUES
        -- the usage reports (functions of the same name for any year and instant)
        ('{usage_by_resource,usage_by_account,usage_by_submitter,usage_by_month}'::text[], 'pool',
         'Pool whose allocation year the row is in: resource.pool, or the cluster'),
        ('{usage_by_resource,usage_by_account,usage_by_submitter,usage_by_month,charge_by_month}', 'unit',
         'Unit of the amounts (e.g. core-hours)'),
        ('{usage_by_resource,usage_by_account,usage_by_submitter,usage_by_month}', 'year',
         'Allocation year, named by the calendar year it starts in'),
        ('{usage_by_resource,usage_by_account,usage_by_submitter}', 'first_day',
         'First day of the allocation year'),
        ('{usage_by_resource,usage_by_account,usage_by_submitter}', 'last_day',
         'Last day of the allocation year'),
        ('{usage_by_resource,usage_by_account,usage_by_submitter,usage_by_month}', 'usage',
         'Charges of jobs ended by now, pro rata inside the year up to now'),
        ('{usage_by_resource,usage_by_account,usage_by_submitter,usage_by_month}', 'usage_years',
         'usage in unit-years (unit-hours / hours_per_year)'),
        ('{usage_by_resource,usage_by_account,usage_by_submitter}', 'projected_usage',
         'usage x year length / elapsed wall-clock time (current year; NULL for past years)'),
        ('{usage_by_resource,usage_by_account,usage_by_submitter}', 'projected_years',
         'projected_usage in unit-years'),
        ('{usage_by_resource}', 'equivalent_hours', 'usage / rate: the hours of the resource''s bundles used'),
        ('{usage_by_account}', 'allocation',
         'Allocations (grants, supplements, deposits) pro rata by their days inside the year'),
        ('{usage_by_account}', 'allocation_years', 'allocation in unit-years'),
        ('{usage_by_account}', 'utilization_pct', 'usage / allocation in percent; NULL without an allocation'),
        ('{usage_by_account}', 'projected_utilization_pct',
         'projected_usage / allocation in percent; NULL without an allocation or projection'),
        ('{usage_by_account}', 'overuse', 'usage beyond the allocation (0 if none): shown, never refused'),
        ('{usage_by_submitter}', 'account_pct', 'The submitter''s share of the account''s usage in percent'),
        ('{usage_by_month,charge_by_month}', 'month', 'Calendar month (site time zone), as its first day'),
        ('{usage_by_resource,usage_by_month,charge_by_month}', 'cluster', 'Cluster of the resource charged'),
        ('{usage_by_resource,usage_by_month,charge_by_month}', 'partition', 'Partition of the resource charged'),
        ('{usage_by_month,usage_by_submitter,charge_by_month}', 'submitter', 'User who submitted the jobs'),
        -- every view with an account column
        ('{usage_by_account,usage_by_submitter,usage_by_month,charge_by_month,bank_entry,quarter_balances,'
         'window_quota_usage,regulation_report,slurm_association,account_recipient,outbox_status}', 'account',
         'Account (project or personal) the row is about'),
        -- charges and the bank
        ('{charge_by_month,bank_entry}', 'entry_id', 'The ledger entry'),
        ('{charge_by_month,bank_entry}', 'amount',
         'The entry''s amount; a charge''s share of it inside the month or quarter'),
        ('{charge_by_month}', 'pool', 'Pool of the resource charged: resource.pool, or the cluster'),
        ('{bank_entry}', 'kind', 'Ledger kind: deposit, transfer, refund or charge'),
        ('{bank_entry,quarter_balances}', 'quarter', 'Quarter the amounts count in, as its first day'),
        ('{quarter_balances}', 'account_kind', 'personal, project or special'),
        ('{quarter_balances}', 'deposits', 'Deposits of the quarter, in the bank unit'),
        ('{quarter_balances}', 'charges', 'Charges counted in the quarter (pro rata by job time)'),
        ('{quarter_balances}', 'transfers', 'Transfers in (positive) and out (negative) in the quarter'),
        ('{quarter_balances}', 'refunds', 'Refunds booked in the quarter'),
        ('{quarter_balances}', 'balance', 'Balance after the quarter, carried over under the bank''s rules'),
        ('{quarter_balances}', 'state', 'active, inactive, expired or deleted (rules section 4)'),
        -- the sliding-window quota
        ('{window_quota_usage}', 'period_start', 'First month of the quota period'),
        ('{window_quota_usage}', 'period_end', 'Last month of the quota period'),
        ('{window_quota_usage}', 'month', 'The month the figures are for (the current one)'),
        ('{window_quota_usage}', 'state', 'normal, low_priority or blocked'),
        ('{window_quota_usage}', 'monthly', 'Allowance per month'),
        ('{window_quota_usage}', 'remaining_prev', 'What the previous month left unused'),
        ('{window_quota_usage}', 'consumed_current', 'Consumption in the current month'),
        ('{window_quota_usage}', 'consumable_pct', 'Share of the window still consumable, in percent; NULL if undefined'),
        ('{window_quota_usage}', 'consumable', 'What may still be consumed in the window'),
        ('{window_quota_usage}', 'cluster', 'Cluster the quota period is for'),
        ('{window_quota_usage}', 'unit', 'Unit of the allowance and consumption'),
        -- GENCI / IDRIS regulation
        ('{regulation_report}', 'machine', 'Machine (pool) of the allocation'),
        ('{regulation_report}', 'month', 'Month of the row, as its first day'),
        ('{regulation_report}', 'as_of', 'The day the figures are taken at: the 15th of the month'),
        ('{regulation_report}', 'regulation', 'monthly or annual: the regulation that applies to the allocation'),
        ('{regulation_report}', 'alloc', 'Allocation in force since 1 January (grants, supplements, less retractions)'),
        ('{regulation_report}', 'tmc', 'Theoretical monthly consumption at as_of'),
        ('{regulation_report}', 'tc', 'Theoretical consumption to the end of as_of'),
        ('{regulation_report}', 'consumption', 'Consumption from 1 January to the end of as_of'),
        ('{regulation_report}', 'delta', 'consumption - tc'),
        ('{regulation_report}', 'status', 'ok, warning or retraction; NULL under annual regulation'),
        ('{regulation_report}', 'logged_outcome', 'What the monthly run logged for the month, if it ran'),
        ('{regulation_report}', 'retracted', 'Hours the monthly run retracted'),
        -- enforcement
        ('{slurm_association}', 'policies', 'The policies that bind the account'),
        ('{slurm_association}', 'state', 'blocked, low_priority or normal: what hpcacct-slurm-sync applies'),
        ('{slurm_association}', 'reason', 'Why the account is not normal; NULL if it is'),
        ('{slurm_association}', 'message', 'The message a user sees at submission'),
        -- settings
        ('{settings,fairshare_settings}', 'name', 'Setting name'),
        ('{settings,fairshare_settings}', 'value', 'Effective value'),
        ('{settings,fairshare_settings}', 'source', 'site (set in the table) or default'),
        ('{settings,fairshare_settings}', 'description', 'What the setting means'),
        -- notifications
        ('{account_recipient,outbox_status}', 'username', 'User the message goes to'),
        ('{account_recipient}', 'role', 'The user''s membership role: admin (manager) or member'),
        ('{account_recipient}', 'email', 'E-mail address (contact.email)'),
        ('{account_recipient}', 'display_name', 'Name shown in messages'),
        ('{outbox_status}', 'message_id', 'The message'),
        ('{outbox_status}', 'topic', 'What the message is about: regulation_warning, quota_state, job_held, balance_low, ...'),
        ('{outbox_status}', 'subject', 'Subject line'),
        ('{outbox_status}', 'created_at', 'When the message was written'),
        ('{outbox_status}', 'recipient_id', 'The delivery; NULL when nobody with an address was to receive it'),
        ('{outbox_status}', 'address', 'Address the delivery goes to'),
        ('{outbox_status}', 'state', 'pending, sending, delivered, failed, uncertain or no_recipient'),
        ('{outbox_status}', 'attempts', 'Delivery attempts so far'),
        ('{outbox_status}', 'next_attempt', 'When the sender may try again'),
        ('{outbox_status}', 'last_error', 'The last attempt''s error'),
        ('{outbox_status}', 'delivered_at', 'When the delivery succeeded'),
        -- pending jobs by fair share
        ('{fairshare_queue}', 'position', 'Place in the queue by fair share: 1 is dispatched first'),
        ('{fairshare_queue}', 'cluster', 'Cluster the job is pending on'),
        ('{fairshare_queue}', 'jobid', 'Slurm job id'),
        ('{fairshare_queue}', 'username', 'User who submitted the job'),
        ('{fairshare_queue}', 'account', 'Account the job will be charged to (the user''s default account when Slurm named none)'),
        ('{fairshare_queue}', 'partition', 'Partition(s) the job asked for; the first one selects the pool'),
        ('{fairshare_queue}', 'pool', 'Fair-share pool of that partition now; NULL when no resource row matches'),
        ('{fairshare_queue}', 'unit', 'Unit of the pool''s usage'),
        ('{fairshare_queue}', 'account_factor', 'The account''s fair-share factor now (the first sort key)'),
        ('{fairshare_queue}', 'user_factor', 'The user''s factor inside the account (the second sort key)'),
        ('{fairshare_queue}', 'held', 'Whether hpcacct-slurm-sync holds the job'),
        ('{fairshare_queue}', 'submitted_at', 'When the sync first recorded the job pending (the third sort key)'),
        ('{charge_by_month}', 'core_hours', 'Raw core-hours of the charges in that month (AllocTRES cores x wall-clock hours, pro rata; NULL when a charge''s cores are unknown)'),
        -- several clusters
        ('{federation_status}', 'site', 'Site at the other end of the link (0: the centre)'),
        ('{federation_status}', 'direction', 'from (a subscription here) or to (a slot another database reads)'),
        ('{federation_status}', 'link', 'Subscription or replication slot name'),
        ('{federation_status}', 'enabled', 'Whether the subscription is enabled (always true for a slot)'),
        ('{federation_status}', 'connected', 'Whether the link''s worker or reader is connected now'),
        ('{federation_status}', 'last_entry_id', 'The last ledger entry received from that site'),
        ('{federation_status}', 'last_booked_at', 'When that entry was booked'),
        ('{federation_status}', 'last_message_at', 'When the subscription last heard from the publisher'),
        ('{federation_status}', 'lag', 'Replay lag of an outgoing link'),
        ('{federation_status}', 'pending_wal_bytes', 'WAL not yet confirmed by the reader of an outgoing link')
    ) AS t(views, col, description) LOOP
        FOREACH v IN ARRAY c.views LOOP
            EXECUTE pg_catalog.format('COMMENT ON COLUMN @extschema@.%I.%I IS %L', v, c.col, c.description);
        END LOOP;
    END LOOP;
END
$do$;
-- end of the reference

-- ---- the ledger's foreign keys, checked once per statement (issue 19 item 4) ----------
-- Their per-row checks of new rows are disabled; a statement trigger does that work.
CREATE OR REPLACE FUNCTION @extschema@.ledger_check_references() RETURNS trigger
    LANGUAGE plpgsql
    AS $$ BEGIN RETURN NULL; END $$;  -- defined below (final definitions)
COMMENT ON FUNCTION @extschema@.ledger_check_references() IS
    'Statement trigger of hpcacct.ledger: the foreign keys'' check of new rows, once per statement (locks and checks '
    'the accounts and resources they name)';
CREATE TRIGGER ledger_check_references AFTER INSERT ON @extschema@.ledger
    REFERENCING NEW TABLE AS new_entries
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.ledger_check_references();
DO $do$
DECLARE
    checks record;
BEGIN
    FOR checks IN SELECT t.tgname FROM pg_catalog.pg_trigger t
                  JOIN pg_catalog.pg_constraint c ON c.oid = t.tgconstraint AND c.contype = 'f'
                  WHERE t.tgrelid = '@extschema@.ledger'::regclass AND t.tgisinternal LOOP
        EXECUTE pg_catalog.format('ALTER TABLE @extschema@.ledger DISABLE TRIGGER %I', checks.tgname);
    END LOOP;
END
$do$;
-- end of the ledger's foreign keys

-- ---- the loader's staging table is unlogged (issue 14 item 7) ----------------------------
ALTER TABLE @extschema@.sacct_staging SET UNLOGGED;

-- scale (issue 19) -------------------------------------------------------------------
-- regulate(): a monthly run reads the consumption rollup instead of the year's charges.
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
        -- pass over the allocations, consumption as consumption_before() computes it, summed
        -- exactly (numeric): a charge wholly inside the period counts its amount, a charge
        -- across one of its ends its share before the end minus its share before the start.
        -- A monthly run's period runs from 1 January to the 16th, both boundaries of the
        -- consumption rollup, which holds those very terms: it reads the rollup. An annual
        -- run's ends at 1 May or 1 June: it reads the year's charges one by one.
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
            WHERE kind_of_run <> 'monthly' AND l.kind = 'charge' AND l.job_start < b.b2 AND l.job_end >= b.b1
            GROUP BY l.account, l.resource_id
            UNION ALL
            -- consumption before 16th minus consumption before 1 January: the amounts of the
            -- jobs ended by a boundary in between (the 16th included), the shares before the
            -- 16th of the jobs running across it, minus those before 1 January
            SELECT c.account, c.resource_id,
                   sum(CASE WHEN c.boundary = y_start THEN -c.running
                            WHEN c.boundary = as_of + 1 THEN c.ended + c.running
                            ELSE c.ended END)
            FROM @extschema@.consumption_rollup c
            WHERE kind_of_run = 'monthly' AND c.boundary BETWEEN y_start AND as_of + 1
            GROUP BY c.account, c.resource_id
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
COMMENT ON PROCEDURE @extschema@.regulate(date) IS
    'GENCI regulation for a date: monthly on the 15th, annual warning on 1 May, annual retraction on 1 June, a no-op (notice) on other dates; idempotent; results in hpcacct.regulation_log';
-- end of scale (issue 19)

-- ---- statements: the month check written once (issue 18) ------------------------------
CREATE OR REPLACE FUNCTION @extschema@.statement_month(month date) RETURNS date
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$ BEGIN RETURN NULL; END $$;  -- defined below (final definitions)
-- end of statements' month check

-- ==== internal helpers out of \df hpcacct.* (issue 18, house) ---------------------------
-- Functions a user never calls move to schema hpcacct_internal (00_header.sql); what calls
-- them by name is defined again below as sql/install has it.
CREATE SCHEMA hpcacct_internal;
COMMENT ON SCHEMA hpcacct_internal IS
    'hpcacct''s internal functions: trigger, type, operator and aggregate support, argument checks and building blocks';
ALTER FUNCTION @extschema@.tres_in(cstring) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.tres_out(hpcacct.tres) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.tres_recv(internal) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.tres_send(hpcacct.tres) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.tres_add(hpcacct.tres, hpcacct.tres) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.tres_mul(hpcacct.tres, double precision) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.tres_mul(double precision, hpcacct.tres) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.tres_eq(hpcacct.tres, hpcacct.tres) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.tres_ne(hpcacct.tres, hpcacct.tres) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.tres_lt(hpcacct.tres, hpcacct.tres) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.tres_le(hpcacct.tres, hpcacct.tres) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.tres_gt(hpcacct.tres, hpcacct.tres) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.tres_ge(hpcacct.tres, hpcacct.tres) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.tres_cmp(hpcacct.tres, hpcacct.tres) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.tres_hash(hpcacct.tres) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.tres_hash_extended(hpcacct.tres, bigint) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.check_setting() SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.ledger_is_append_only() SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.ledger_check_references() SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.job_columns(job_table regclass, mapping text[]) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.day_or_today(day date, caller text) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.require_account(account text, caller text) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.rebuild_rollup_trigger() SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.last_charged_start(resource_id bigint) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.check_resource_change() SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.check_account_delete() SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.tmc_transfn(internal, date, date, double precision, date) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.tmc_transfn(internal, date, date, double precision, date, text) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.tc_transfn(internal, date, date, double precision, date) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.tc_transfn(internal, date, date, double precision, date, text) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.theoretical_combinefn(internal, internal) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.theoretical_finalfn(internal) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.theoretical_serialfn(internal) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.theoretical_deserialfn(bytea, internal) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.window_quota_transfn(internal, date, double precision, double precision, date) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.window_quota_combinefn(internal, internal) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.window_quota_serialfn(internal) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.window_quota_deserialfn(bytea, internal) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.window_quota_finalfn(internal) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.check_fairshare_setting() SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.decayed_usage_transfn(internal, timestamp with time zone, double precision, timestamp with time zone, interval) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.decayed_usage_combinefn(internal, internal) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.decayed_usage_serialfn(internal) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.decayed_usage_deserialfn(bytea, internal) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.decayed_usage_finalfn(internal) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.decayed_usage_periods_transfn(internal, timestamp with time zone, double precision, timestamp with time zone, interval, double precision, integer) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.decayed_usage_periods_combinefn(internal, internal) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.decayed_usage_periods_serialfn(internal) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.decayed_usage_periods_deserialfn(bytea, internal) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.decayed_usage_periods_finalfn(internal) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.quarter_balance_transfn(internal, text, date, numeric, date) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.quarter_balance_combinefn(internal, internal) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.quarter_balance_serialfn(internal) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.quarter_balance_deserialfn(bytea, internal) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.quarter_balance_finalfn(internal) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.require_bank_account(account text) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.require_amount(amount numeric) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.book_allocation(account text, kind text, quarter date, amount numeric, note text) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.top_up_note(target numeric) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.check_personal_allotment() SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.require_admin(account text, by_user text) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.require_member_manager(account text, by_user text) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.visible_accounts() SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.sees_all_accounts() SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.protect_table(target regclass) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.grant_submit_role() SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.note_replicated_charge() SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.roll_up_received() SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.federation_refuse_local_write() SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.federation_slot_exists(slot text) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.notify_number(x numeric) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.notify_regulation() SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.notify_quarter() SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.notify_hold() SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.contact_touch() SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.html_escape(s text) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.svg_chart(title text, unit text, labels text[], series jsonb, width integer, height integer) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.visible_account(account text) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.statement_month(month date) SET SCHEMA hpcacct_internal;
CREATE OR REPLACE FUNCTION hpcacct_internal.check_setting() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        max_length interval;
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM @extschema@.setting_catalog() c WHERE c.name = NEW.name) THEN
            RAISE EXCEPTION 'unknown setting "%"', NEW.name
                USING ERRCODE = 'undefined_object', HINT = 'See hpcacct.settings for the settings there are.';
        END IF;
        IF NEW.name = 'timezone'
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_names z WHERE z.name = NEW.value)
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_abbrevs z WHERE z.abbrev = NEW.value) THEN
            RAISE EXCEPTION 'unknown time zone "%"', NEW.value
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Use a name from pg_timezone_names, e.g. Europe/Berlin.';
        END IF;
        IF NEW.name = 'max_job_length' THEN
            BEGIN
                max_length := NEW.value::interval;
            EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR interval_field_overflow THEN
                max_length := NULL;
            END;
            IF max_length IS NULL OR max_length <= interval '0' OR pg_catalog.date_part('month', max_length) <> 0
               OR pg_catalog.date_part('year', max_length) <> 0 THEN
                RAISE EXCEPTION 'max_job_length must be a positive interval in days or hours, not "%"', NEW.value
                    USING ERRCODE = 'invalid_parameter_value', HINT = 'E.g. ''30 days''.';
            END IF;
        END IF;
        IF NEW.name = 'require_membership' AND lower(NEW.value) NOT IN ('on', 'off', 'true', 'false') THEN
            RAISE EXCEPTION 'require_membership must be on or off, not "%"', NEW.value
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF NEW.name = 'expiry_warning_days' AND (NEW.value !~ '^[0-9]{1,2}$' OR NEW.value::integer > 92) THEN
            RAISE EXCEPTION 'expiry_warning_days must be a whole number of days from 0 to 92, not "%"', NEW.value
                USING ERRCODE = 'invalid_parameter_value', HINT = 'At most a quarter ahead; 0 turns the warning off.';
        END IF;
        IF NEW.name = 'personal_allotment'
           AND (NEW.value !~ '^[0-9]+(\.[0-9]+)?$' OR NEW.value::numeric <= 0) THEN
            RAISE EXCEPTION 'personal_allotment must be a positive number, not "%"', NEW.value
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN NEW;
    END
    $$;
CREATE OR REPLACE FUNCTION hpcacct_internal.ledger_is_append_only() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        RAISE EXCEPTION 'hpcacct.ledger is append-only: % is not allowed', lower(TG_OP)
            USING ERRCODE = 'HA001', HINT = 'Book a correcting entry instead.';
    END
    $$;
CREATE OR REPLACE FUNCTION hpcacct_internal.ledger_check_references() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        accounts  text[];
        resources bigint[];
        missing   text;
    BEGIN
        SELECT pg_catalog.array_agg(DISTINCT p.account), pg_catalog.array_agg(DISTINCT p.resource_id)
                   FILTER (WHERE p.resource_id IS NOT NULL)
        INTO accounts, resources
        FROM (SELECT e.account, e.resource_id FROM new_entries e GROUP BY e.account, e.resource_id) p;
        IF (SELECT pg_catalog.count(*) FROM (SELECT 1 FROM @extschema@.account a WHERE a.name = ANY (accounts)
                                              FOR KEY SHARE) l) < pg_catalog.cardinality(accounts) THEN
            SELECT n INTO missing FROM pg_catalog.unnest(accounts) n
            WHERE NOT EXISTS (SELECT 1 FROM @extschema@.account a WHERE a.name = n) LIMIT 1;
            RAISE EXCEPTION 'insert into ledger: account "%" does not exist', missing
                USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'ledger_account_fkey', TABLE = 'ledger',
                      SCHEMA = '@extschema@';
        END IF;
        IF (SELECT pg_catalog.count(*) FROM (SELECT 1 FROM @extschema@.resource r WHERE r.resource_id = ANY (resources)
                                              FOR KEY SHARE) l) < coalesce(pg_catalog.cardinality(resources), 0) THEN
            SELECT n::text INTO missing FROM pg_catalog.unnest(resources) n
            WHERE NOT EXISTS (SELECT 1 FROM @extschema@.resource r WHERE r.resource_id = n) LIMIT 1;
            RAISE EXCEPTION 'insert into ledger: resource % does not exist', missing
                USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'ledger_resource_id_fkey', TABLE = 'ledger',
                      SCHEMA = '@extschema@';
        END IF;
        RETURN NULL;
    END
    $$;
CREATE OR REPLACE FUNCTION hpcacct_internal.job_columns(job_table regclass, mapping text[]) RETURNS text[]
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        roles   constant text[] := ARRAY['cluster', 'jobid', 'account', 'user', 'partition', 'start', 'end', 'alloctres',
                                         'submit'];
        submit_mapped boolean := false;
        columns text[] := roles;
        pair    text;
        role    text;
        column_name text;
        column_type oid;
        position integer;
    BEGIN
        FOREACH pair IN ARRAY coalesce(mapping, '{}') LOOP
            role := split_part(pair, '=', 1);
            column_name := substr(pair, length(role) + 2);
            position := array_position(roles, role);
            IF strpos(pair, '=') = 0 OR position IS NULL OR column_name = '' THEN
                RAISE EXCEPTION 'invalid job column mapping "%"', pair
                    USING ERRCODE = 'invalid_parameter_value',
                          HINT = format('Use role=column with a role among %s.', array_to_string(roles, ', '));
            END IF;
            columns[position] := column_name;
            submit_mapped := submit_mapped OR role = 'submit';
        END LOOP;
        FOR position IN 1 .. array_length(roles, 1) LOOP
            SELECT a.atttypid INTO column_type
            FROM pg_catalog.pg_attribute a
            WHERE a.attrelid = job_table AND a.attname = columns[position] AND a.attnum > 0 AND NOT a.attisdropped;
            IF NOT FOUND AND roles[position] = 'submit' AND NOT submit_mapped THEN
                columns[position] := 'NULL';
                CONTINUE;
            END IF;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'column "%" of % (the job''s %) does not exist', columns[position], job_table, roles[position]
                    USING ERRCODE = 'undefined_column',
                          HINT = format('Name it in the trigger arguments, e.g. ''%s=my_column''.', roles[position]);
            END IF;
            -- Charging casts these columns while it runs as the extension's owner: a type
            -- with a cast or output function of its own would run its author's code with
            -- those rights. Only built-in types (and tres) are read, checked at every firing.
            IF NOT column_type = ANY (CASE
                    WHEN roles[position] IN ('start', 'end', 'submit')
                        THEN ARRAY['timestamptz', 'timestamp']::regtype[]
                    WHEN roles[position] = 'alloctres'
                        THEN ARRAY['@extschema@.tres', 'text', 'varchar']::regtype[]
                    ELSE ARRAY['text', 'varchar', 'bpchar', 'name', 'int2', 'int4', 'int8', 'numeric']::regtype[]
                END) THEN
                RAISE EXCEPTION 'column "%" of % (the job''s %) has type %, which charging does not read',
                                columns[position], job_table, roles[position], column_type::regtype
                    USING ERRCODE = 'datatype_mismatch',
                          DETAIL = 'Charging runs with the extension owner''s rights and reads only built-in types: '
                                   'text or integers for names and ids, timestamptz or timestamp for times, '
                                   'tres or text for alloctres.',
                          HINT = 'Change the column to one of these types.';
            END IF;
            columns[position] := quote_ident(columns[position]);
        END LOOP;
        RETURN columns;
    END
    $$;
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
        max_length  interval;
        need_member boolean;
    BEGIN
        IF TG_WHEN <> 'AFTER' OR TG_LEVEL <> 'STATEMENT' THEN
            RAISE EXCEPTION 'hpcacct.charge_jobs() must run AFTER ... FOR EACH STATEMENT'
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Attach it with hpcacct.attach_charging(table).';
        END IF;
        col := hpcacct_internal.job_columns(TG_RELID, TG_ARGV);
        relevant := format('%s::text AS cluster, %s::text AS jobid, %s::text AS account, %s::text AS submitter, '
                           '%s::text AS partition, %s::timestamptz AS job_start, %s::timestamptz AS job_end, '
                           '%s::@extschema@.tres AS alloctres, %s::timestamptz AS job_submit',
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
                                                job_submit, submitter, job_start, job_end, note, core_hours)
                SELECT l.account, 'charge', -sum(l.amount), l.unit, l.resource_id, l.cluster, l.jobid,
                       l.job_submit, l.submitter, l.job_start, l.job_end, %L, -sum(l.core_hours)
                FROM @extschema@.ledger l
                WHERE l.kind = 'charge'
                  AND EXISTS (SELECT 1 FROM %s o
                              WHERE o.cluster = l.cluster AND o.jobid = l.jobid
                                AND o.job_submit IS NOT DISTINCT FROM l.job_submit)
                GROUP BY l.account, l.unit, l.resource_id, l.cluster, l.jobid, l.job_submit, l.submitter, l.job_start,
                         l.job_end
                HAVING sum(l.amount) <> 0 OR sum(l.core_hours) <> 0  -- a free partition's job has cores to take back
                $q$, 'reversal: job ' || lower(TG_OP) || 'd', changed_old);
        END IF;

        IF changed_new IS NOT NULL THEN
            max_length := @extschema@.setting_value('max_job_length')::interval;
            need_member := @extschema@.setting_value('require_membership')::boolean;
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
                                                    job_submit, submitter, job_start, job_end, core_hours)
                    SELECT j.account, 'charge',
                           round(@extschema@.charge(j.alloctres, j.job_end - j.job_start, r.bundle, r.rate,
                                                    CASE WHEN r.exclusive THEN r.node END)::numeric, 6),
                           r.unit, r.resource_id, j.cluster, j.jobid, j.job_submit, j.submitter, j.job_start,
                           j.job_end,
                           @extschema@.core_hours(j.alloctres, j.job_end - j.job_start)
                    FROM %s j
                    JOIN @extschema@.resource r
                      ON r.cluster = j.cluster AND r.partition = j.partition AND r.valid @> j.job_start
                    WHERE j.jobid IS NOT NULL AND j.account IS NOT NULL AND j.alloctres IS NOT NULL
                      AND j.job_end >= j.job_start AND j.job_end - j.job_start <= $1
                      AND (NOT $2 OR EXISTS (SELECT 1 FROM @extschema@.membership m
                                             WHERE m.account = j.account AND m.username = j.submitter))
                    $q$, changed_new) USING max_length, need_member;
                GET DIAGNOSTICS charged = ROW_COUNT;
                EXECUTE format('SELECT count(*) FROM %s j', changed_new) INTO jobs;
            END IF;
            IF unknown_accounts > 0 OR charged <> jobs THEN
                EXECUTE format($q$
                    SELECT * FROM (
                        SELECT j.cluster, j.jobid, j.account, j.submitter, j.partition, j.job_start,
                               CASE
                                   WHEN j.cluster IS NULL OR j.jobid IS NULL OR j.account IS NULL
                                        OR j.partition IS NULL OR j.alloctres IS NULL THEN 'missing'
                                   WHEN j.job_start IS NULL OR j.job_end IS NULL THEN 'no_times'
                                   WHEN j.job_end < j.job_start THEN 'end_before_start'
                                   WHEN j.job_end - j.job_start > $1 THEN 'too_long'
                                   WHEN NOT EXISTS (SELECT 1 FROM @extschema@.account a WHERE a.name = j.account)
                                       THEN 'unknown_account'
                                   WHEN $2 AND NOT EXISTS (SELECT 1 FROM @extschema@.membership m
                                                           WHERE m.account = j.account AND m.username = j.submitter)
                                       THEN 'not_member'
                                   WHEN NOT EXISTS (SELECT 1 FROM @extschema@.resource r
                                                    WHERE r.cluster = j.cluster AND r.partition = j.partition
                                                      AND r.valid @> j.job_start)
                                       THEN 'unknown_resource'
                               END AS problem
                        FROM %s j) checked
                    WHERE problem IS NOT NULL
                    LIMIT 1
                    $q$, changed_new) INTO problem USING max_length, need_member;

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
                ELSIF problem.problem = 'too_long' THEN
                    RAISE EXCEPTION 'job %/% claims to have run longer than max_job_length (%)', problem.cluster,
                                    problem.jobid, max_length
                        USING ERRCODE = 'HA004',
                              HINT = 'Correct its start or end; a site with longer jobs raises the setting max_job_length.';
                ELSIF problem.problem = 'not_member' THEN
                    RAISE EXCEPTION 'user "%" is not a member of account "%" (job %/%)', problem.submitter,
                                    problem.account, problem.cluster, problem.jobid
                        USING ERRCODE = 'HA005',
                              HINT = 'Add the membership with hpcacct.add_member(), or set require_membership off.';
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
CREATE OR REPLACE FUNCTION @extschema@.attach_charging(job_table regclass, VARIADIC mapping text[] DEFAULT '{}')
    RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        args text;
    BEGIN
        PERFORM hpcacct_internal.job_columns(job_table, mapping);  -- fail now, not at the first insert
        SELECT coalesce(string_agg(quote_literal(m), ', '), '') INTO args FROM unnest(mapping) AS m;
        EXECUTE format('CREATE TRIGGER hpcacct_charge_insert AFTER INSERT ON %s REFERENCING NEW TABLE AS new_jobs '
                       'FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.charge_jobs(%s)', job_table, args);
        EXECUTE format('CREATE TRIGGER hpcacct_charge_update AFTER UPDATE ON %s '
                       'REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs '
                       'FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.charge_jobs(%s)', job_table, args);
        EXECUTE format('CREATE TRIGGER hpcacct_charge_delete AFTER DELETE ON %s REFERENCING OLD TABLE AS old_jobs '
                       'FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.charge_jobs(%s)', job_table, args);
    END
    $$;
CREATE OR REPLACE FUNCTION @extschema@.create_job_table(job_table text DEFAULT '@extschema@.job') RETURNS regclass
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        created regclass;
    BEGIN
        EXECUTE format($t$
            CREATE TABLE %s (
                cluster   text NOT NULL,
                jobid     text NOT NULL,
                account   text NOT NULL,
                "user"    text NOT NULL,
                partition text NOT NULL,
                submit    timestamptz,
                start     timestamptz NOT NULL,
                "end"     timestamptz NOT NULL,
                alloctres @extschema@.tres NOT NULL,
                state     text,
                UNIQUE NULLS NOT DISTINCT (cluster, jobid, submit)
            )$t$, job_table);
        created := job_table::regclass;
        EXECUTE format('COMMENT ON TABLE %s IS %L', created,
                       'Finished job runs, one row per (cluster, jobid, submit), columns named after sacct fields; charged by trigger');
        PERFORM @extschema@.attach_charging(created);
        PERFORM hpcacct_internal.protect_table(created);
        RETURN created;
    END
    $$;
CREATE OR REPLACE FUNCTION hpcacct_internal.day_or_today(day date, caller text) RETURNS date
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
CREATE OR REPLACE FUNCTION hpcacct_internal.require_account(account text, caller text) RETURNS text
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
CREATE OR REPLACE FUNCTION hpcacct_internal.rebuild_rollup_trigger() RETURNS trigger
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
CREATE OR REPLACE FUNCTION hpcacct_internal.last_charged_start(resource_id bigint) RETURNS timestamptz
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
CREATE OR REPLACE FUNCTION hpcacct_internal.check_resource_change() RETURNS trigger
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
                    USING ERRCODE = 'HA006',
                          DETAIL = 'Its rate, bundle, node, unit, pool, exclusive flag and the start of its validity '
                                   'are what the ledger''s charges were computed from.',
                          HINT = format('For jobs from a date on, re-rate them: SELECT hpcacct.rerate(%s, <new rate>, <from>) '
                                        '(closes this row, adds the new one, books reversals and new charges). For future '
                                        'jobs only, close this row at <from> and insert a new one from <from>.',
                                        OLD.resource_id);
            END IF;
            last_start := hpcacct_internal.last_charged_start(OLD.resource_id);
            IF last_start IS NOT NULL AND NOT NEW.valid @> last_start THEN
                RAISE EXCEPTION 'resource % (%/%) cannot be closed at %: it charged a job that started at %',
                                OLD.resource_id, OLD.cluster, OLD.partition, upper(NEW.valid), last_start
                    USING ERRCODE = 'HA006',
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
CREATE OR REPLACE FUNCTION hpcacct_internal.check_account_delete() RETURNS trigger
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
CREATE OR REPLACE FUNCTION @extschema@.window_quota_usage(
        account text,
        at date DEFAULT @extschema@.site_today())
    RETURNS TABLE (account text, period_start date, period_end date, month date, state text,
                   monthly float8, remaining_prev float8, consumed_current float8,
                   consumable_pct float8, consumable float8, cluster text, unit text)
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT hpcacct_internal.require_account($1, 'window_quota_usage'), hpcacct_internal.day_or_today($2, 'window_quota_usage');
        WITH d AS MATERIALIZED (
            SELECT hpcacct_internal.day_or_today($2, 'window_quota_usage') AS day
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
CREATE OR REPLACE FUNCTION hpcacct_internal.check_fairshare_setting() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        ok   boolean;
        what text;
    BEGIN
        SELECT c.description INTO what FROM @extschema@.fairshare_setting_catalog() c WHERE c.name = NEW.name;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'unknown fair-share setting "%"', NEW.name
                USING ERRCODE = 'undefined_object', HINT = 'See hpcacct.fairshare_settings for the settings there are.';
        END IF;
        BEGIN
            ok := CASE NEW.name
                WHEN 'decay' THEN NEW.value IN ('half_life', 'interval')
                WHEN 'half_life' THEN NEW.value::interval > interval '0'
                                      AND pg_catalog.date_part('month', NEW.value::interval) = 0
                                      AND pg_catalog.date_part('year', NEW.value::interval) = 0
                WHEN 'period' THEN NEW.value::interval > interval '0'
                                   AND pg_catalog.date_part('month', NEW.value::interval) = 0
                                   AND pg_catalog.date_part('year', NEW.value::interval) = 0
                WHEN 'period_decay' THEN NEW.value::float8 BETWEEN 0 AND 1
                WHEN 'depth' THEN NEW.value::integer >= 1
                WHEN 'exhausted_factor' THEN NEW.value::float8 BETWEEN 0 AND 1
                WHEN 'year_start_month' THEN NEW.value::integer BETWEEN 1 AND 12
                WHEN 'hours_per_year' THEN NEW.value::float8 > 0 AND NEW.value::float8 < 'Infinity'
            END;
        EXCEPTION WHEN data_exception THEN
            ok := false;
        END;
        IF ok IS NOT TRUE THEN
            RAISE EXCEPTION 'invalid value "%" for fair-share setting %', NEW.value, NEW.name
                USING ERRCODE = 'invalid_parameter_value', HINT = what || '.';
        END IF;
        RETURN NEW;
    END
    $$;
CREATE OR REPLACE FUNCTION @extschema@.account_state(account text, at date DEFAULT @extschema@.site_today())
    RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN (SELECT b.state FROM @extschema@.bank_state(account, hpcacct_internal.day_or_today(at, 'account_state')) b);
CREATE OR REPLACE FUNCTION @extschema@.balance(account text, at date DEFAULT @extschema@.site_today())
    RETURNS numeric
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM hpcacct_internal.require_account(account, 'balance');
        RETURN (SELECT b.balance FROM @extschema@.bank_state(account, hpcacct_internal.day_or_today(at, 'balance')) b);
    END
    $$;
CREATE OR REPLACE FUNCTION hpcacct_internal.require_bank_account(account text) RETURNS void
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
CREATE OR REPLACE FUNCTION hpcacct_internal.require_amount(amount numeric) RETURNS void
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
CREATE OR REPLACE FUNCTION hpcacct_internal.book_allocation(account text, kind text, quarter date, amount numeric, note text)
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
CREATE OR REPLACE FUNCTION @extschema@.deposit(account text, quarter date, amount numeric, note text DEFAULT NULL)
    RETURNS bigint
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM hpcacct_internal.require_bank_account(account);
        PERFORM hpcacct_internal.require_amount(amount);
        RETURN hpcacct_internal.book_allocation(account, 'deposit', quarter, amount, note);
    END
    $$;
CREATE OR REPLACE FUNCTION @extschema@.refund(account text, quarter date, amount numeric, note text DEFAULT NULL)
    RETURNS bigint
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM hpcacct_internal.require_bank_account(account);
        PERFORM hpcacct_internal.require_amount(amount);
        RETURN hpcacct_internal.book_allocation(account, 'refund', quarter, amount, note);
    END
    $$;
CREATE OR REPLACE FUNCTION @extschema@.transfer(from_account text, from_quarter date, to_account text, to_quarter date,
                                     amount numeric, note text DEFAULT NULL)
    RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM hpcacct_internal.require_bank_account(from_account);
        PERFORM hpcacct_internal.require_bank_account(to_account);
        PERFORM hpcacct_internal.require_amount(amount);
        IF from_account = to_account AND @extschema@.quarter_start(from_quarter) = @extschema@.quarter_start(to_quarter) THEN
            RAISE EXCEPTION 'a transfer needs a different account or quarter' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        PERFORM hpcacct_internal.book_allocation(from_account, 'transfer', from_quarter, -amount, note);
        PERFORM hpcacct_internal.book_allocation(to_account, 'transfer', to_quarter, amount, note);
    END
    $$;
CREATE OR REPLACE FUNCTION hpcacct_internal.top_up_note(target numeric) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN 'personal allotment up to ' || pg_catalog.trim_scale(target)::text;
CREATE OR REPLACE FUNCTION @extschema@.top_up(account text, quarter date, target numeric) RETURNS numeric
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    #variable_conflict use_column
    DECLARE
        q constant date := @extschema@.quarter_start(quarter);
        bank_unit constant text := @extschema@.setting_value('bank_unit');
        booked numeric;
    BEGIN
        IF quarter IS NULL OR target IS NULL THEN
            RAISE EXCEPTION 'top_up needs a quarter and a target' USING ERRCODE = 'null_value_not_allowed';
        ELSIF NOT isfinite(quarter) THEN
            RAISE EXCEPTION 'quarter must be a finite date' USING ERRCODE = 'datetime_field_overflow';
        END IF;
        INSERT INTO @extschema@.ledger (account, kind, amount, unit, valid_from, valid_until, note)
        SELECT top_up.account, 'deposit', target - coalesce(sum(l.amount), 0), bank_unit, q,
               (q + interval '3 months')::date - 1, hpcacct_internal.top_up_note(target)
        FROM @extschema@.ledger l
        WHERE l.account = top_up.account AND l.kind = 'deposit' AND l.valid_from = q AND l.unit = bank_unit
        HAVING target - coalesce(sum(l.amount), 0) > 0
        ON CONFLICT (account, valid_from, note) WHERE kind = 'deposit' AND note LIKE 'personal allotment up to %'
        DO NOTHING
        RETURNING amount INTO booked;
        RETURN coalesce(booked, 0);
    END
    $$;
CREATE OR REPLACE FUNCTION hpcacct_internal.check_personal_allotment() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF NEW.personal_allotment > 2 * @extschema@.setting_value('personal_allotment')::numeric THEN
            RAISE EXCEPTION 'personal allotment % exceeds double the default (%)',
                            NEW.personal_allotment, @extschema@.setting_value('personal_allotment')
                USING ERRCODE = 'numeric_value_out_of_range';
        END IF;
        RETURN NEW;
    END
    $$;
CREATE OR REPLACE FUNCTION hpcacct_internal.require_admin(account text, by_user text) RETURNS void
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF by_user IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM @extschema@.membership m
            WHERE m.account = require_admin.account AND m.username = by_user AND m.role = 'admin') THEN
            RAISE EXCEPTION 'user "%" is not an administrator of account "%"', by_user, account
                USING ERRCODE = 'insufficient_privilege';
        END IF;
    END
    $$;
CREATE OR REPLACE FUNCTION hpcacct_internal.require_member_manager(account text, by_user text) RETURNS void
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                   WHERE (r.rolname = 'hpcacct_admin' AND pg_catalog.pg_has_role(pg_catalog.session_user(), r.oid, 'MEMBER'))
                      OR (r.rolname = pg_catalog.session_user() AND r.rolsuper)) THEN
            PERFORM hpcacct_internal.require_admin(account, by_user);
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
CREATE OR REPLACE FUNCTION @extschema@.add_member(account text, username text, role text DEFAULT 'member',
                                       by_user text DEFAULT NULL)
    RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM hpcacct_internal.require_member_manager(account, by_user);
        PERFORM hpcacct_internal.require_bank_account(account);
        IF NOT EXISTS (SELECT 1 FROM @extschema@.hpc_user u WHERE u.username = add_member.username) THEN
            RAISE EXCEPTION 'unknown user "%"', username USING ERRCODE = 'undefined_object';
        END IF;
        PERFORM hpcacct_internal.require_admin(account, by_user);
        INSERT INTO @extschema@.membership (account, username, role) VALUES (account, username, role)
        ON CONFLICT ON CONSTRAINT membership_pkey DO UPDATE SET role = EXCLUDED.role;
    END
    $$;
CREATE OR REPLACE FUNCTION @extschema@.remove_member(account text, username text, by_user text DEFAULT NULL)
    RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM hpcacct_internal.require_member_manager(account, by_user);
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
CREATE OR REPLACE PROCEDURE @extschema@.open_quarter(q date)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        this_quarter constant date := @extschema@.quarter_start(q);
        previous_quarter constant date := (@extschema@.quarter_start(q) - interval '3 months')::date;
    BEGIN
        IF q IS NULL THEN
            RAISE EXCEPTION 'open_quarter needs a date' USING ERRCODE = 'null_value_not_allowed';
        ELSIF NOT isfinite(q) THEN
            RAISE EXCEPTION 'open_quarter needs a finite date' USING ERRCODE = 'datetime_field_overflow';
        END IF;
        -- one run at a time
        PERFORM pg_advisory_xact_lock(pg_catalog.hashtext('hpcacct.open_quarter'));

        -- top_up() of the personal accounts of members of projects active in this quarter
        -- (an allocation for q, not only for a later quarter), for this and the two following
        -- quarters, in one statement
        WITH cfg AS MATERIALIZED (
            SELECT @extschema@.setting_value('bank_unit') AS unit
        ), active AS (
            SELECT p.name
            FROM @extschema@.account p
            CROSS JOIN LATERAL @extschema@.bank_state(p.name, this_quarter) b
            WHERE p.kind = 'project' AND b.state = 'active'
        ), missing AS MATERIALIZED (
            SELECT a.name, t.target, lv.level,
                   lv.level - coalesce((SELECT sum(l.amount) FROM @extschema@.ledger l
                                        WHERE l.account = a.name AND l.kind = 'deposit' AND l.valid_from = t.target
                                          AND l.unit = cfg.unit), 0) AS amount
            FROM @extschema@.account a
            CROSS JOIN LATERAL (SELECT coalesce(a.personal_allotment,
                                                (SELECT @extschema@.setting_value('personal_allotment')::numeric))
                                           AS level) lv
            CROSS JOIN cfg
            CROSS JOIN LATERAL (SELECT (this_quarter + i * interval '3 months')::date AS target
                                FROM pg_catalog.generate_series(0, 2) AS i) t
            WHERE a.kind = 'personal' AND a.deleted_in IS NULL
              AND EXISTS (SELECT 1 FROM @extschema@.membership m JOIN active p ON p.name = m.account
                          WHERE m.username = a.name)
        ), booked AS (
            INSERT INTO @extschema@.ledger (account, kind, amount, unit, valid_from, valid_until, note)
            SELECT m.name, 'deposit', m.amount, cfg.unit, m.target, (m.target + interval '3 months')::date - 1,
                   hpcacct_internal.top_up_note(m.level)
            FROM missing m, cfg
            WHERE m.amount > 0
            ORDER BY m.name, m.target
            ON CONFLICT (account, valid_from, note) WHERE kind = 'deposit' AND note LIKE 'personal allotment up to %'
            DO NOTHING
            RETURNING account, valid_from, amount
        )
        INSERT INTO @extschema@.quarter_log (quarter, account, action, target_quarter, amount)
        SELECT this_quarter, b.account, 'top_up', b.valid_from, b.amount
        FROM booked b
        ORDER BY b.account, b.valid_from
        ON CONFLICT ON CONSTRAINT quarter_log_once
        DO UPDATE SET amount = @extschema@.quarter_log.amount + EXCLUDED.amount;

        -- expire personal accounts without an allocation for this quarter
        INSERT INTO @extschema@.quarter_log (quarter, account, action, target_quarter)
        SELECT this_quarter, a.name, 'expired', this_quarter
        FROM @extschema@.account a
        CROSS JOIN LATERAL @extschema@.bank_state(a.name, this_quarter) b
        WHERE a.kind = 'personal' AND a.deleted_in IS NULL AND b.state <> 'active'
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
            CROSS JOIN LATERAL @extschema@.bank_state(u.default_account, this_quarter) b
            WHERE u.default_account IS NOT NULL AND b.state IN ('expired', 'deleted')
            FOR UPDATE OF u
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
CREATE OR REPLACE FUNCTION @extschema@.account_verdict(account text, at date DEFAULT @extschema@.site_today())
    RETURNS @extschema@.submit_decision
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        a record;
        pol text[];
        bank record;
        wq record;
        machines integer;
        open_machines integer;
        reason text;
        message text;
    BEGIN
        at := hpcacct_internal.day_or_today(at, 'check_submit');  -- NULL: today; infinite: 22008
        SELECT x.name, x.deleted_in INTO a FROM @extschema@.account x WHERE x.name = account_verdict.account;
        IF NOT FOUND THEN
            RETURN ROW(false, account, 'unknown_account',
                       format('account %s does not exist: check the account you gave (sbatch -A)', account))::@extschema@.submit_decision;
        ELSIF a.deleted_in IS NOT NULL AND a.deleted_in <= at THEN
            RETURN ROW(false, account, 'account_deleted',
                       format('account %s has been deleted and cannot be used again', account))::@extschema@.submit_decision;
        END IF;
        pol := @extschema@.account_policies(account);

        IF 'bank' = ANY (pol) THEN
            SELECT b.state, b.next_allocation, b.balance INTO bank FROM @extschema@.bank_state(a.name, at) b;
            IF bank.state = 'expired' THEN
                RETURN ROW(false, account, 'account_expired',
                           format('account %s has no allocation for this or a later quarter: ask for a new '
                                  'allocation, or submit with another account (sbatch -A)', account))::@extschema@.submit_decision;
            ELSIF bank.state = 'inactive' THEN
                RETURN ROW(false, account, 'account_inactive',
                           format('account %s has no allocation for this quarter; its allocation begins on %s: '
                                  'ask staff to move allocation into this quarter, or submit with another account',
                                  account, bank.next_allocation))::@extschema@.submit_decision;
            ELSIF bank.balance < 0 THEN
                RETURN ROW(false, account, 'negative_balance',
                           format('account %s has a negative balance this quarter (%s %s): ask for a transfer '
                                  'or a deposit, or submit with another account',
                                  account, pg_catalog.trim_scale(bank.balance), @extschema@.bank_unit()))::@extschema@.submit_decision;
            END IF;
        END IF;

        IF 'window_quota' = ANY (pol) THEN
            SELECT u.state, u.monthly, u.consumed_current, u.unit INTO wq
            FROM @extschema@.window_quota_usage(a.name, at) u;
            IF wq.state = 'blocked' THEN
                RETURN ROW(false, account, 'quota_blocked',
                           format('account %s is blocked by its sliding-window quota (%s %s used this month, '
                                  'monthly allowance %s): submit with another account',
                                  account, round(wq.consumed_current::numeric, 2), wq.unit,
                                  round(wq.monthly::numeric, 2)))::@extschema@.submit_decision;
            END IF;
        END IF;

        IF 'genci' = ANY (pol) THEN
            SELECT count(*), count(*) FILTER (WHERE s.tmc > 0 AND s.consumption < s.alloc)
            INTO machines, open_machines
            FROM (SELECT DISTINCT l.cluster FROM @extschema@.ledger l
                  WHERE l.account = a.name AND l.kind IN ('grant', 'supplement', 'retraction')
                    AND l.valid_from <= at AND l.valid_until >= at) m
            CROSS JOIN LATERAL @extschema@.allocation_status(a.name, m.cluster, at) s;
            IF machines = 0 THEN
                RETURN ROW(false, account, 'no_allocation',
                           format('account %s has no allocation valid on %s: submit with another account', account, at))::@extschema@.submit_decision;
            ELSIF open_machines = 0 THEN
                RETURN ROW(false, account, 'allocation_exhausted',
                           format('account %s has used up its allocation (after retractions): ask for a supplement, '
                                  'or submit with another account', account))::@extschema@.submit_decision;
            END IF;
        END IF;

        RETURN ROW(true, account, NULL::text, NULL::text)::@extschema@.submit_decision;
    END
    $$;
CREATE OR REPLACE FUNCTION hpcacct_internal.visible_accounts() RETURNS text[]
    LANGUAGE sql STABLE SECURITY DEFINER PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT coalesce(pg_catalog.array_agg(m.account), '{}')
        FROM @extschema@.membership m WHERE m.username = pg_catalog.session_user()
    $$;
CREATE OR REPLACE FUNCTION hpcacct_internal.sees_all_accounts() RETURNS boolean
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        RETURN EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                       WHERE r.rolname IN ('hpcacct_admin', 'hpcacct_auditor', 'hpcacct_submit')
                         AND pg_catalog.pg_has_role(pg_catalog.current_user(), r.oid, 'MEMBER'))
               OR coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = pg_catalog.current_user()),
                           false);
    END
    $$;
CREATE OR REPLACE FUNCTION hpcacct_internal.protect_table(target regclass) RETURNS boolean
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        has_account boolean;
        has_username boolean;
        visible text;
    BEGIN
        SELECT bool_or(a.attname = 'account'), bool_or(a.attname = 'username')
        INTO has_account, has_username
        FROM pg_catalog.pg_attribute a
        WHERE a.attrelid = target AND a.attnum > 0 AND NOT a.attisdropped;
        visible := CASE
            WHEN target = '@extschema@.account'::regclass
                THEN 'name = ANY ((SELECT hpcacct_internal.visible_accounts())::text[])'
            WHEN has_account AND has_username
                THEN 'account = ANY ((SELECT hpcacct_internal.visible_accounts())::text[]) OR username = session_user'
            WHEN has_account
                THEN 'account = ANY ((SELECT hpcacct_internal.visible_accounts())::text[])'
            WHEN has_username
                THEN 'username = session_user'
        END;
        IF visible IS NULL THEN
            RETURN false;
        END IF;
        EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', target);
        EXECUTE format('CREATE POLICY member_rows ON %s FOR SELECT USING ((SELECT hpcacct_internal.sees_all_accounts()) OR %s)',
                       target, visible);
        EXECUTE format('CREATE POLICY insert_rows ON %s FOR INSERT WITH CHECK (true)', target);
        EXECUTE format('CREATE POLICY update_rows ON %s FOR UPDATE USING (true) WITH CHECK (true)', target);
        EXECUTE format('CREATE POLICY delete_rows ON %s FOR DELETE USING (true)', target);
        RETURN true;
    END
    $$;
CREATE OR REPLACE FUNCTION hpcacct_internal.grant_submit_role() RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        GRANT USAGE ON SCHEMA @extschema@, hpcacct_internal TO hpcacct_submit;
        GRANT SELECT ON @extschema@.account, @extschema@.hpc_user, @extschema@.membership, @extschema@.ledger,
                        @extschema@.charge_rollup, @extschema@.setting, @extschema@.settings, @extschema@.resource,
                        @extschema@.quota_period, @extschema@.monthly_allowance, @extschema@.machine_setting
            TO hpcacct_submit;
        GRANT EXECUTE ON FUNCTION @extschema@.check_submit(text, text, date) TO hpcacct_submit;
    END
    $$;
CREATE OR REPLACE PROCEDURE @extschema@.setup_roles()
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        r record;
    BEGIN
        FOR r IN SELECT * FROM (VALUES
            ('hpcacct_admin', 'hpcacct: administers the site: every table, function and procedure of the extension'),
            ('hpcacct_ingest', 'hpcacct: the loader: inserts jobs, COPYs into sacct_staging and runs load_sacct()'),
            ('hpcacct_portal', 'hpcacct: a portal user: reads their own accounts'' rows; a project administrator '
                               'also manages the members of their projects'),
            ('hpcacct_auditor', 'hpcacct: reads every account''s rows and figures and changes nothing'),
            ('hpcacct_submit', 'hpcacct: the Slurm submit check: runs check_submit() for any user and account')
        ) AS v(name, description) LOOP
            IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles x WHERE x.rolname = r.name) THEN
                EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', r.name);
            END IF;
            EXECUTE pg_catalog.format('COMMENT ON ROLE %I IS %L', r.name, r.description);
        END LOOP;
        GRANT USAGE ON SCHEMA @extschema@, hpcacct_internal TO hpcacct_admin, hpcacct_ingest, hpcacct_portal, hpcacct_auditor;
        GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA @extschema@ TO hpcacct_admin;
        GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA @extschema@ TO hpcacct_admin;
        GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA @extschema@, hpcacct_internal TO hpcacct_admin;
        GRANT EXECUTE ON ALL PROCEDURES IN SCHEMA @extschema@ TO hpcacct_admin;
        IF pg_catalog.to_regclass('@extschema@.job') IS NOT NULL THEN
            GRANT INSERT ON @extschema@.job TO hpcacct_ingest;
        END IF;
        -- the sacct loader (95_sacct.sql): COPY into the staging table, then load_sacct()
        GRANT INSERT ON @extschema@.sacct_staging TO hpcacct_ingest;
        GRANT EXECUTE ON FUNCTION @extschema@.load_sacct(timestamptz, text[]),
                                  @extschema@.sacct_window_start(text, interval) TO hpcacct_ingest;
        GRANT SELECT ON ALL TABLES IN SCHEMA @extschema@ TO hpcacct_portal;
        -- staged lines are every account's, and not behind row-level security (COPY refuses it)
        REVOKE SELECT ON @extschema@.sacct_staging, @extschema@.sacctmgr_staging FROM hpcacct_portal;
        -- project administrators manage their projects' members from a portal (the functions
        -- check that the session user administers the account)
        GRANT EXECUTE ON FUNCTION @extschema@.add_member(text, text, text, text),
                                  @extschema@.remove_member(text, text, text) TO hpcacct_portal;
        -- the auditor reads every table (row-level security lets it see every account) and
        -- the fair share of every account; it writes nothing and runs no administrative function
        GRANT SELECT ON ALL TABLES IN SCHEMA @extschema@ TO hpcacct_auditor;
        GRANT EXECUTE ON FUNCTION @extschema@.fairshare_all(timestamptz) TO hpcacct_auditor;
        PERFORM hpcacct_internal.grant_submit_role();
        -- a portal user keeps their own contact row (its policy admits no other)
        GRANT INSERT (username, email, display_name, notify), UPDATE (email, display_name, notify)
            ON @extschema@.contact TO hpcacct_portal;
    END
    $$;
CREATE OR REPLACE FUNCTION @extschema@.fairshare(at timestamptz DEFAULT pg_catalog.now())
    RETURNS TABLE (pool text, unit text, account text, submitter text, allocation numeric, share float8,
                   usage float8, norm_usage float8, year_usage numeric, exhausted boolean, factor float8)
    LANGUAGE plpgsql STABLE SECURITY DEFINER PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        instant constant timestamptz := coalesce(fairshare.at, pg_catalog.now());
        sees_all constant boolean := EXISTS (
            SELECT 1 FROM pg_catalog.pg_roles r
            WHERE (r.rolname IN ('hpcacct_admin', 'hpcacct_auditor')
                   AND pg_catalog.pg_has_role(pg_catalog.session_user(), r.oid, 'MEMBER'))
               OR (r.rolname = pg_catalog.session_user() AND r.rolsuper));
    BEGIN
        IF NOT sees_all AND instant <> pg_catalog.now() THEN
            RAISE EXCEPTION 'fairshare() at % is for administrators: others see the present only', instant
                USING ERRCODE = 'insufficient_privilege', HINT = 'Call hpcacct.fairshare() without an argument.';
        END IF;
        RETURN QUERY
            SELECT f.pool, f.unit, f.account, f.submitter, f.allocation,
                   CASE WHEN sees_all THEN f.share END, f.usage,
                   CASE WHEN sees_all THEN f.norm_usage END, f.year_usage, f.exhausted, f.factor
            FROM @extschema@.fairshare_all(instant) f
            WHERE sees_all OR f.account = ANY (hpcacct_internal.visible_accounts());
    END
    $$;
CREATE OR REPLACE FUNCTION hpcacct_internal.note_replicated_charge() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        first boolean;
    BEGIN
        -- other kinds, and the held charges roll_up_received() inserts (a trigger's statement), go in
        IF NEW.kind <> 'charge' OR pg_catalog.pg_trigger_depth() > 1 THEN
            RETURN NEW;
        END IF;
        first := pg_catalog.current_setting('hpcacct.received_pending', true) IS DISTINCT FROM 'on';
        IF first THEN
            PERFORM pg_catalog.set_config('hpcacct.received_pending', 'on', true);
            IF pg_catalog.to_regclass('pg_temp.hpcacct_received') IS NULL THEN
                CREATE TEMPORARY TABLE hpcacct_received (
                    entry                @extschema@.ledger NOT NULL,
                    first_in_transaction boolean NOT NULL
                );
                CREATE CONSTRAINT TRIGGER hpcacct_received_roll_up AFTER INSERT ON pg_temp.hpcacct_received
                    DEFERRABLE INITIALLY DEFERRED
                    FOR EACH ROW WHEN (NEW.first_in_transaction) EXECUTE FUNCTION hpcacct_internal.roll_up_received();
                -- written in replica sessions only: fire there
                ALTER TABLE pg_temp.hpcacct_received ENABLE ALWAYS TRIGGER hpcacct_received_roll_up;
            ELSIF pg_catalog.pg_relation_size('pg_temp.hpcacct_received') > 8 * 8192 THEN
                TRUNCATE pg_temp.hpcacct_received;  -- empty: only dead rows of earlier transactions
            END IF;
        END IF;
        INSERT INTO pg_temp.hpcacct_received (entry, first_in_transaction) VALUES (NEW, first);
        RETURN NULL;
    END
    $$;
CREATE OR REPLACE FUNCTION hpcacct_internal.federation_refuse_local_write() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        RAISE EXCEPTION '% is written at the federation''s centre, not at a site', TG_TABLE_NAME
            USING ERRCODE = 'HA013',
                  HINT = 'Make the change in the central database; it reaches every site by replication.';
    END
    $$;
CREATE OR REPLACE FUNCTION @extschema@.federation_prepare(site integer, role text) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        node   @extschema@.federation_node;
        ids    constant int8range := @extschema@.federation_id_range(site);
        seq    constant text := pg_catalog.pg_get_serial_sequence('@extschema@.ledger', 'entry_id');
        stray  bigint;
        filled boolean;
        tab    regclass;
    BEGIN
        IF site IS NULL OR role IS NULL THEN
            RAISE EXCEPTION 'site and role must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF role NOT IN ('centre', 'site') OR (role = 'centre') <> (site = 0) OR site NOT BETWEEN 0 AND 32767 THEN
            RAISE EXCEPTION 'invalid federation site % for role %', site, role
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'The centre is site 0; cluster sites are numbered 1 to 32767.';
        END IF;
        SELECT * INTO node FROM @extschema@.federation_node;
        IF FOUND AND (node.site <> site OR node.role <> role) THEN
            RAISE EXCEPTION 'this database is already federation % %, not % %', node.role, node.site, role, site
                USING ERRCODE = 'HA010', HINT = 'A database has one place in a federation.';
        END IF;
        IF NOT FOUND THEN
            -- ids booked before: they must lie in the range, or they would collide with another site's
            SELECT count(*) INTO stray FROM @extschema@.ledger l WHERE NOT ids @> l.entry_id;
            IF stray > 0 THEN
                RAISE EXCEPTION 'the ledger holds % entries outside site %''s id range %', stray, site, ids
                    USING ERRCODE = 'HA011',
                          HINT = CASE WHEN role = 'centre' THEN 'An existing database can become the centre only.'
                                      ELSE 'A site joins with an empty ledger.' END;
            END IF;
            IF role = 'site' THEN
                -- reference data comes from the centre; rows of its own would conflict with the copy
                FOREACH tab IN ARRAY @extschema@.federation_reference_tables() LOOP
                    EXECUTE pg_catalog.format('SELECT EXISTS (SELECT 1 FROM %s)', tab) INTO filled;
                    IF filled THEN
                        RAISE EXCEPTION 'a joining site must not hold reference data: % has rows', tab
                            USING ERRCODE = 'HA012',
                                  HINT = 'Accounts, users, resources and settings are written at the centre; '
                                         'join with the extension freshly created.';
                    END IF;
                END LOOP;
            END IF;
            INSERT INTO @extschema@.federation_node (site, role) VALUES (site, role);
        END IF;

        -- the ledger's ids: this site's range only (a sequence never wraps: it stops at the end)
        IF EXISTS (SELECT 1 FROM @extschema@.ledger l
                   WHERE l.entry_id >= pg_catalog.lower(ids) AND l.entry_id < pg_catalog.upper(ids)) THEN
            EXECUTE pg_catalog.format('ALTER SEQUENCE %s MINVALUE %s MAXVALUE %s START WITH %s', seq,
                                      pg_catalog.lower(ids), pg_catalog.upper(ids) - 1, pg_catalog.lower(ids));
        ELSE
            EXECUTE pg_catalog.format('ALTER SEQUENCE %s MINVALUE %s MAXVALUE %s START WITH %s RESTART WITH %s', seq,
                                      pg_catalog.lower(ids), pg_catalog.upper(ids) - 1, pg_catalog.lower(ids),
                                      pg_catalog.lower(ids));
        END IF;

        -- triggers that must fire for rows received: the rollups of replicated charges, and a
        -- rebuild of the rollups when the time zone or half-life they depend on changes
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                       WHERE t.tgrelid = '@extschema@.ledger'::regclass AND t.tgname = 'ledger_roll_up_replicated') THEN
            CREATE TRIGGER ledger_roll_up_replicated BEFORE INSERT ON @extschema@.ledger
                FOR EACH ROW EXECUTE FUNCTION hpcacct_internal.note_replicated_charge();
        END IF;
        ALTER TABLE @extschema@.ledger ENABLE REPLICA TRIGGER ledger_roll_up_replicated;
        ALTER TABLE @extschema@.setting ENABLE ALWAYS TRIGGER setting_rebuilds_rollup;
        ALTER TABLE @extschema@.fairshare_setting ENABLE ALWAYS TRIGGER fairshare_setting_rebuilds_rollup;
        -- at a site, the reference tables are written by replication only
        IF role = 'site' THEN
            FOREACH tab IN ARRAY @extschema@.federation_reference_tables() LOOP
                IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                               WHERE t.tgrelid = tab AND t.tgname = 'federation_centre_only') THEN
                    EXECUTE pg_catalog.format('CREATE TRIGGER federation_centre_only BEFORE INSERT OR UPDATE OR DELETE '
                                              'ON %s FOR EACH ROW EXECUTE FUNCTION '
                                              'hpcacct_internal.federation_refuse_local_write()', tab);
                END IF;
            END LOOP;
        END IF;
    END
    $$;
CREATE OR REPLACE FUNCTION hpcacct_internal.federation_slot_exists(slot text) RETURNS boolean
    LANGUAGE sql STABLE STRICT
    SET search_path = pg_catalog, pg_temp
    AS $$ SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots s WHERE s.slot_name = slot) $$;
CREATE OR REPLACE PROCEDURE @extschema@.federation_publish(site integer, name text)
    LANGUAGE plpgsql
    AS $$
    DECLARE
        ids    int8range;
        pub    text;
        known  @extschema@.federation_site;
        tables text;
    BEGIN
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        IF site IS NULL OR name IS NULL THEN
            RAISE EXCEPTION 'site and name must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF site NOT BETWEEN 1 AND 32767 OR name !~ '^[a-z0-9_]{1,40}$' THEN
            RAISE EXCEPTION 'invalid site % "%"', site, name
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Sites are numbered 1 to 32767 and named with 1 to 40 of a-z, 0-9 and _.';
        END IF;
        PERFORM @extschema@.federation_prepare(0, 'centre');
        SELECT * INTO known FROM @extschema@.federation_site s WHERE s.site = federation_publish.site OR s.name = federation_publish.name;
        IF FOUND AND (known.site <> federation_publish.site OR known.name <> federation_publish.name) THEN
            RAISE EXCEPTION 'site % "%" conflicts with site % "%"', site, name, known.site, known.name
                USING ERRCODE = 'unique_violation';
        END IF;
        INSERT INTO @extschema@.federation_site (site, name) VALUES (site, name) ON CONFLICT DO NOTHING;

        SELECT pg_catalog.string_agg(t::text, ', ') INTO tables
        FROM pg_catalog.unnest(@extschema@.federation_reference_tables()) t;
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication p WHERE p.pubname = 'hpcacct_fed_reference') THEN
            EXECUTE pg_catalog.format('CREATE PUBLICATION hpcacct_fed_reference FOR TABLE %s '
                                      'WITH (publish = ''insert, update, delete'')', tables);
        ELSE
            EXECUTE pg_catalog.format('ALTER PUBLICATION hpcacct_fed_reference SET TABLE %s', tables);
        END IF;

        ids := @extschema@.federation_id_range(site);
        pub := 'hpcacct_fed_c2s_' || site;
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication p WHERE p.pubname = pub) THEN
            EXECUTE pg_catalog.format('CREATE PUBLICATION %I FOR TABLE @extschema@.ledger '
                                      'WHERE (entry_id < %s OR entry_id >= %s) WITH (publish = ''insert'')',
                                      pub, pg_catalog.lower(ids), pg_catalog.upper(ids));
        END IF;
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        IF NOT hpcacct_internal.federation_slot_exists(pub) THEN
            PERFORM pg_catalog.pg_create_logical_replication_slot(pub, 'pgoutput');
        END IF;
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    END
    $$;
CREATE OR REPLACE PROCEDURE @extschema@.federation_join(site integer, centre_conninfo text)
    LANGUAGE plpgsql
    AS $$
    DECLARE
        ids  int8range;
        pub  text;
        sub  text;
        missing text;
    BEGIN
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        IF site IS NULL OR centre_conninfo IS NULL THEN
            RAISE EXCEPTION 'site and centre_conninfo must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        pub := 'hpcacct_fed_s2c_' || site;
        sub := 'hpcacct_fed_c2s_' || site;
        IF site NOT BETWEEN 1 AND 32767 THEN
            RAISE EXCEPTION 'invalid site %', site
                USING ERRCODE = 'invalid_parameter_value', HINT = 'Sites are numbered 1 to 32767; the centre is 0.';
        END IF;
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_subscription s
                   WHERE s.subname = sub AND s.subdbid = (SELECT d.oid FROM pg_catalog.pg_database d
                                                          WHERE d.datname = pg_catalog.current_database())) THEN
            -- joined before: the checks of an empty site no longer apply
            PERFORM @extschema@.federation_prepare(site, 'site');
            EXECUTE pg_catalog.format('ALTER SUBSCRIPTION %I CONNECTION %L', sub, centre_conninfo);
            EXECUTE pg_catalog.format('ALTER SUBSCRIPTION %I ENABLE', sub);
            -- reference tables a later version added reach the site only after a refresh,
            -- which PostgreSQL does not allow inside a procedure: say so
            SELECT pg_catalog.string_agg(t::text, ', ') INTO missing
            FROM pg_catalog.unnest(@extschema@.federation_reference_tables()) t
            WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_subscription_rel r
                              JOIN pg_catalog.pg_subscription s ON s.oid = r.srsubid
                              WHERE s.subname = sub AND r.srrelid = t);
            IF missing IS NOT NULL THEN
                RAISE WARNING 'this site does not receive %', missing
                    USING HINT = pg_catalog.format('After CALL hpcacct.federation_publish(%s, ...) at the centre, run '
                                                   'ALTER SUBSCRIPTION %I REFRESH PUBLICATION here.', site, sub);
            END IF;
            RETURN;
        END IF;
        PERFORM @extschema@.federation_prepare(site, 'site');
        ids := @extschema@.federation_id_range(site);
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication p WHERE p.pubname = pub) THEN
            EXECUTE pg_catalog.format('CREATE PUBLICATION %I FOR TABLE @extschema@.ledger '
                                      'WHERE (entry_id >= %s AND entry_id < %s) WITH (publish = ''insert'')',
                                      pub, pg_catalog.lower(ids), pg_catalog.upper(ids));
        END IF;
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        IF NOT hpcacct_internal.federation_slot_exists(pub) THEN
            PERFORM pg_catalog.pg_create_logical_replication_slot(pub, 'pgoutput');
        END IF;
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        -- the centre made the slot for this subscription in federation_publish()
        EXECUTE pg_catalog.format('CREATE SUBSCRIPTION %I CONNECTION %L PUBLICATION hpcacct_fed_reference, %I '
                                  'WITH (create_slot = false, slot_name = %L, copy_data = true)',
                                  sub, centre_conninfo, sub, sub);
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    END
    $$;
CREATE OR REPLACE FUNCTION hpcacct_internal.notify_number(x numeric) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN x IS NULL THEN 'n/a'
                ELSE pg_catalog.replace(pg_catalog.btrim(pg_catalog.to_char(pg_catalog.round(x), 'S999,999,999,999,990')), '+', '')
           END;
CREATE OR REPLACE FUNCTION hpcacct_internal.notify_regulation() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM @extschema@.outbox_add_all(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
            'topic', x.topic, 'decision_key', pg_catalog.concat_ws('/', r.account, r.machine, r.run_date, r.run),
            'account', r.account,
            'subject', pg_catalog.format('[hpcacct] %s on %s: %s (%s)', r.account, r.machine,
                                         CASE x.topic WHEN 'regulation_warning' THEN 'under-consumption warning'
                                                      WHEN 'regulation_retraction' THEN 'hours retracted'
                                                      WHEN 'annual_warning' THEN 'annual under-consumption warning'
                                                      ELSE 'annual retraction' END, r.run_date),
            'body', E'Dear project manager,\n\n' || CASE x.topic
                WHEN 'regulation_warning' THEN pg_catalog.format(
                    E'On %s project %s had consumed %s hours on %s, against a theoretical consumption TC of %s hours:\n'
                    'an under-consumption of %s hours, between one and two theoretical monthly consumptions\n'
                    '(TMC = %s hours). No hours are retracted now; should the under-consumption reach twice the TMC\n'
                    'on a later 15th, a TMC of hours will be retracted from the allocation.',
                    r.figures_at, r.account, hpcacct_internal.notify_number(r.consumption::numeric), r.machine,
                    hpcacct_internal.notify_number(r.tc::numeric), hpcacct_internal.notify_number(-r.delta::numeric),
                    hpcacct_internal.notify_number(r.tmc::numeric))
                WHEN 'regulation_retraction' THEN pg_catalog.format(
                    E'On %s project %s had consumed %s hours on %s, against a theoretical consumption TC of %s hours:\n'
                    'an under-consumption of %s hours, at least twice the theoretical monthly consumption\n'
                    '(TMC = %s hours). %s hours (one TMC) are retracted from the allocation, effective %s and\n'
                    'valid until 31 December: the allocation goes from %s to %s hours.',
                    r.figures_at, r.account, hpcacct_internal.notify_number(r.consumption::numeric), r.machine,
                    hpcacct_internal.notify_number(r.tc::numeric), hpcacct_internal.notify_number(-r.delta::numeric),
                    hpcacct_internal.notify_number(r.tmc::numeric), hpcacct_internal.notify_number(r.retracted),
                    r.run_date, hpcacct_internal.notify_number(r.alloc), hpcacct_internal.notify_number(r.alloc - r.retracted))
                WHEN 'annual_warning' THEN pg_catalog.format(
                    E'By the end of %s project %s had used %s of its %s hours on %s (%s %%), less than the %s %%\n'
                    'expected in the first five months. Unless a justification reaches GENCI before the end of May,\n'
                    'up to %s %% of the annual allocation may be retracted after May.',
                    r.figures_at, r.account, hpcacct_internal.notify_number(r.consumption::numeric),
                    hpcacct_internal.notify_number(r.alloc), r.machine, pg_catalog.round(r.used_percent::numeric, 1),
                    s.annual_warning_percent, s.annual_retraction_percent)
                ELSE pg_catalog.format(
                    E'By the end of %s project %s had used %s of its %s hours on %s (%s %%), less than %s %%,\n'
                    'and it was not exonerated. %s hours are retracted from the allocation, effective %s: it goes\n'
                    'from %s to %s hours.',
                    r.figures_at, r.account, hpcacct_internal.notify_number(r.consumption::numeric),
                    hpcacct_internal.notify_number(r.alloc), r.machine, pg_catalog.round(r.used_percent::numeric, 1),
                    s.annual_warning_percent, hpcacct_internal.notify_number(r.retracted), r.run_date,
                    hpcacct_internal.notify_number(r.alloc), hpcacct_internal.notify_number(r.alloc - r.retracted))
            END || E'\n\n'
            || pg_catalog.format(E'Figures at the end of %s:\n  Alloc        %s\n  TMC          %s\n  TC           %s\n'
                                 '  consumption  %s\n  delta        %s\n  retracted    %s\n',
                                 r.figures_at, hpcacct_internal.notify_number(r.alloc), hpcacct_internal.notify_number(r.tmc::numeric),
                                 hpcacct_internal.notify_number(r.tc::numeric), hpcacct_internal.notify_number(r.consumption::numeric),
                                 hpcacct_internal.notify_number(r.delta::numeric), hpcacct_internal.notify_number(r.retracted)),
            'figures', pg_catalog.jsonb_build_object('run_date', r.run_date, 'run', r.run, 'machine', r.machine,
                                                     'figures_at', r.figures_at, 'alloc', r.alloc, 'tmc', r.tmc, 'tc', r.tc,
                                                     'consumption', r.consumption, 'delta', r.delta,
                                                     'used_percent', r.used_percent, 'retracted', r.retracted))))
        FROM new_rows r
        JOIN @extschema@.machine_setting s ON s.machine = r.machine
        CROSS JOIN LATERAL (SELECT CASE r.run WHEN 'monthly' THEN 'regulation_' || r.outcome ELSE r.run END AS topic) x
        WHERE (r.run = 'monthly' AND r.outcome IN ('warning', 'retraction'))
           OR (r.run = 'annual_warning' AND r.outcome = 'warning')
           OR (r.run = 'annual_retraction' AND r.outcome = 'retraction');
        RETURN NULL;
    END
    $$;
CREATE OR REPLACE FUNCTION hpcacct_internal.notify_quarter() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM @extschema@.outbox_add_all(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
            'topic', 'account_' || r.action, 'decision_key', pg_catalog.concat_ws('/', r.account, r.quarter),
            'account', r.account, 'also', pg_catalog.jsonb_build_array(r.account),
            'subject', pg_catalog.format('[hpcacct] account %s %s (%s)', r.account,
                                         CASE r.action WHEN 'expired' THEN 'has expired' ELSE 'is deleted' END, r.quarter),
            'body', CASE r.action
                WHEN 'expired' THEN pg_catalog.format(
                    E'Dear %s,\n\nyour personal account %s holds no allocation for the quarter starting %s, so it\n'
                    'has expired: you can still log in and work interactively, but you cannot submit batch jobs.\n'
                    'A personal account that is still expired at the next quarter start (%s) is deleted, and\n'
                    'with it the files of the login. Join an active project or ask your consultant for an\n'
                    'allocation to keep it.\n', r.account, r.account, r.quarter,
                    (r.quarter + interval '3 months')::date)
                ELSE pg_catalog.format(
                    E'Dear %s,\n\nyour personal account %s expired in the previous quarter and still holds no\n'
                    'allocation on %s: it is deleted. The login is closed and its files on disk and tape are\n'
                    'deleted.\n', r.account, r.account, r.quarter)
            END,
            'figures', pg_catalog.jsonb_build_object('quarter', r.quarter, 'action', r.action))))
        FROM new_rows r
        -- an account that expired the quarter before is deleted by the same run: one notice, the deletion
        WHERE r.action = 'deleted'
           OR (r.action = 'expired'
               AND NOT EXISTS (SELECT 1 FROM @extschema@.quarter_log p
                               WHERE p.account = r.account AND p.action = 'expired'
                                 AND p.quarter = (r.quarter - interval '3 months')::date));
        RETURN NULL;
    END
    $$;
CREATE OR REPLACE FUNCTION hpcacct_internal.notify_hold() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM @extschema@.outbox_add_all(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
            'topic', CASE WHEN n.held THEN 'job_held' ELSE 'job_released' END,
            'decision_key', pg_catalog.concat_ws('/', n.cluster, n.jobid, CASE WHEN n.held THEN 'held' ELSE 'released' END,
                                                 coalesce(n.checked_at, pg_catalog.statement_timestamp())),
            -- NULL when the job names an account that does not exist
            'account', (SELECT a.name FROM @extschema@.account a WHERE a.name = coalesce(n.account, n.username)),
            'also', pg_catalog.jsonb_build_array(n.username),
            'subject', pg_catalog.format('[hpcacct] job %s on %s %s', n.jobid, n.cluster,
                                         CASE WHEN n.held THEN 'is held' ELSE 'is released' END),
            'body', CASE WHEN n.held THEN pg_catalog.format(
                    E'Dear %s,\n\nyour queued job %s on %s (account %s) has been put on hold: %s.\n'
                    'Correct the reason (e.g. choose another account) and release the job, or ask the\n'
                    'project administrator for an allocation.\n',
                    n.username, n.jobid, n.cluster, coalesce(n.account, 'default'), coalesce(n.hold_reason, 'no reason given'))
                 ELSE pg_catalog.format(E'Dear %s,\n\nyour queued job %s on %s (account %s) is no longer held.\n',
                    n.username, n.jobid, n.cluster, coalesce(n.account, 'default'))
            END,
            'figures', pg_catalog.jsonb_build_object('cluster', n.cluster, 'jobid', n.jobid, 'reason', n.hold_reason))))
        FROM new_rows n
        JOIN old_rows o ON o.cluster = n.cluster AND o.jobid = n.jobid
        WHERE n.held IS DISTINCT FROM o.held;
        RETURN NULL;
    END
    $$;
CREATE OR REPLACE FUNCTION @extschema@.notify_scan(at date DEFAULT @extschema@.site_today()) RETURNS integer
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        r record;
        q date;
        written integer := 0;
        id bigint;
        bank_unit text;
        next_q date;
        warn_days integer;
    BEGIN
        IF at IS NULL THEN
            RAISE EXCEPTION 'notify_scan needs a date' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF NOT pg_catalog.isfinite(at) THEN
            RAISE EXCEPTION 'notify_scan needs a finite date' USING ERRCODE = 'datetime_field_overflow';
        END IF;
        -- one scan at a time: a second one waits and then finds the states notified
        LOCK TABLE @extschema@.quota_state_notified IN SHARE ROW EXCLUSIVE MODE;

        -- quota states: entry into low_priority and blocked, and back
        FOR r IN SELECT u.*, coalesce(n.state, 'normal') AS old_state
                 FROM (SELECT DISTINCT p.account FROM @extschema@.quota_period p) a
                 CROSS JOIN LATERAL @extschema@.window_quota_usage(a.account, at) u
                 LEFT JOIN @extschema@.quota_state_notified n ON n.account = u.account
                 WHERE u.state IS DISTINCT FROM coalesce(n.state, 'normal')
                 ORDER BY u.account LOOP
            id := @extschema@.outbox_add(
                'quota_state', pg_catalog.concat_ws('/', r.account, at, r.old_state, r.state), r.account,
                pg_catalog.format('[hpcacct] %s: quota state %s (%s)', r.account, pg_catalog.replace(r.state, '_', ' '), at),
                pg_catalog.format(E'Dear members of %s,\n\nthe core-hour quota of %s is now in state "%s" (before: "%s").\n%s\n\n'
                                  'Accounting period:            %s to %s\n'
                                  'Monthly allowance:            %s %s\n'
                                  'Remaining of previous month:  %s\n'
                                  'Consumed this month:          %s\n'
                                  'Consumable (%%):               %s\n'
                                  'Consumable:                   %s\n',
                                  r.account, r.account, r.state, r.old_state,
                                  CASE r.state
                                      WHEN 'low_priority' THEN E'The quota of the three-month window is used up: jobs still run, and count, but only\nwhen no other project with quota left is waiting (low-priority mode).'
                                      WHEN 'blocked' THEN E'The monthly quota was exceeded six times or the period''s quota twice: no new job can\nbe submitted.'
                                      ELSE E'The quota of the three-month window is no longer used up: jobs run with normal priority.'
                                  END,
                                  r.period_start, r.period_end,
                                  hpcacct_internal.notify_number(r.monthly::numeric), r.unit,
                                  hpcacct_internal.notify_number(r.remaining_prev::numeric),
                                  hpcacct_internal.notify_number(r.consumed_current::numeric),
                                  hpcacct_internal.notify_number(r.consumable_pct::numeric),
                                  hpcacct_internal.notify_number(r.consumable::numeric)),
                pg_catalog.jsonb_build_object('at', at, 'state', r.state, 'previous_state', r.old_state,
                                              'monthly', r.monthly, 'remaining_prev', r.remaining_prev,
                                              'consumed_current', r.consumed_current,
                                              'consumable_pct', r.consumable_pct, 'consumable', r.consumable,
                                              'unit', r.unit),
                true);
            written := written + (id IS NOT NULL)::integer;
            INSERT INTO @extschema@.quota_state_notified AS n (account, state, since)
            VALUES (r.account, r.state, at)
            ON CONFLICT (account) DO UPDATE
                SET state = EXCLUDED.state, since = EXCLUDED.since, notified_at = pg_catalog.statement_timestamp();
        END LOOP;

        -- balances below a threshold, once per account, quarter and threshold
        q := @extschema@.quarter_start(at);
        bank_unit := @extschema@.setting_value('bank_unit');
        FOR r IN WITH alloc AS (
                     SELECT l.account, sum(l.amount) AS amount
                     FROM @extschema@.ledger l
                     WHERE l.kind IN ('deposit', 'transfer', 'refund') AND l.unit = bank_unit
                       AND l.valid_from >= q AND l.valid_from < q + interval '3 months'
                     GROUP BY l.account
                     HAVING sum(l.amount) > 0
                 )
                 SELECT a.account, a.amount AS alloc, b.balance, t.percent
                 FROM alloc a
                 CROSS JOIN LATERAL (SELECT @extschema@.balance(a.account, at) AS balance) b
                 JOIN @extschema@.balance_threshold t
                   ON (t.percent = 0 AND b.balance < 0) OR (t.percent > 0 AND b.balance < a.amount * t.percent / 100)
                 ORDER BY a.account, t.percent LOOP
            id := @extschema@.outbox_add(
                'balance_low', pg_catalog.concat_ws('/', r.account, q, r.percent), r.account,
                pg_catalog.format('[hpcacct] %s: %s', r.account,
                                  CASE WHEN r.percent = 0 THEN 'balance negative, jobs are refused'
                                       ELSE pg_catalog.format('less than %s %% of the quarter''s credits left', r.percent) END),
                pg_catalog.format(E'Dear project administrator,\n\naccount %s holds %s %s of the %s %s of the quarter starting %s (%s %%).\n%s\n',
                                  r.account, hpcacct_internal.notify_number(r.balance), bank_unit,
                                  hpcacct_internal.notify_number(r.alloc), bank_unit, q,
                                  pg_catalog.round(100 * r.balance / r.alloc, 1),
                                  CASE WHEN r.percent = 0
                                       THEN 'The balance is negative: new jobs and queued jobs of the account are refused.'
                                       ELSE pg_catalog.format('That is below the threshold of %s %%.', r.percent) END),
                pg_catalog.jsonb_build_object('quarter', q, 'balance', r.balance, 'allocation', r.alloc,
                                              'threshold_percent', r.percent, 'unit', bank_unit));
            written := written + (id IS NOT NULL)::integer;
        END LOOP;

        -- bank accounts active this quarter with no allocation for the next one, within
        -- expiry_warning_days (at most a quarter) of its start: once per account and expiry day
        next_q := (q + interval '3 months')::date;
        warn_days := @extschema@.setting_value('expiry_warning_days')::integer;
        FOR r IN WITH allocated AS (
                     SELECT l.account, @extschema@.quarter_start(l.valid_from) AS quarter, sum(l.amount) AS amount
                     FROM @extschema@.ledger l
                     WHERE l.kind IN ('deposit', 'transfer') AND l.unit = bank_unit AND l.valid_from >= q
                     GROUP BY 1, 2
                     HAVING sum(l.amount) > 0
                 )
                 SELECT a.name AS account, a.kind, now_q.amount AS alloc,
                        (SELECT min(later.quarter) FROM allocated later
                         WHERE later.account = a.name AND later.quarter > next_q) AS later_quarter
                 FROM allocated now_q
                 JOIN @extschema@.account a ON a.name = now_q.account
                 WHERE now_q.quarter = q AND warn_days > 0 AND next_q - at <= warn_days
                   AND a.deleted_in IS NULL
                   AND NOT EXISTS (SELECT 1 FROM allocated nx WHERE nx.account = a.name AND nx.quarter = next_q)
                 ORDER BY a.name LOOP
            id := @extschema@.outbox_add(
                'account_expiry', pg_catalog.concat_ws('/', r.account, next_q), r.account,
                pg_catalog.format('[hpcacct] account %s: no allocation from %s, %s', r.account, next_q,
                                  CASE WHEN r.later_quarter IS NULL THEN 'it expires' ELSE 'jobs will be refused' END),
                pg_catalog.format(E'Dear members of %s,\n\naccount %s holds an allocation for the quarter ending %s but none for the\n'
                                  'quarter starting %s (%s days from %s). %s\n\n'
                                  'Balance now:        %s %s of %s %s\n'
                                  'Allocation ends:    %s\n%s',
                                  r.account, r.account, next_q - 1, next_q, next_q - at, at,
                                  CASE WHEN r.later_quarter IS NOT NULL
                                       THEN pg_catalog.format(E'Its next allocation starts on %s: until then its jobs\n'
                                                              'are refused and queued jobs are held.', r.later_quarter)
                                       WHEN r.kind = 'personal'
                                       THEN E'On that day the personal account expires: no batch jobs can be submitted\n'
                                            'with it, and one still expired a quarter later is deleted. Join an active\n'
                                            'project or ask your consultant for an allocation.'
                                       ELSE E'On that day the account expires: its jobs are refused and queued jobs are held.\n'
                                            'Ask for an allocation for the next quarter, or move credits to it, before then.' END,
                                  hpcacct_internal.notify_number(@extschema@.balance(r.account, at)), bank_unit,
                                  hpcacct_internal.notify_number(r.alloc), bank_unit, next_q - 1,
                                  CASE WHEN r.later_quarter IS NOT NULL
                                       THEN pg_catalog.format(E'Next allocation:    %s\n', r.later_quarter) ELSE '' END),
                pg_catalog.jsonb_build_object('at', at, 'quarter', q, 'allocation_ends', next_q - 1,
                                              'no_allocation_from', next_q, 'days_left', next_q - at,
                                              'next_allocation', r.later_quarter, 'allocation', r.alloc,
                                              'balance', @extschema@.balance(r.account, at), 'unit', bank_unit),
                true);
            written := written + (id IS NOT NULL)::integer;
        END LOOP;
        RETURN written;
    END
    $$;
CREATE OR REPLACE FUNCTION hpcacct_internal.contact_touch() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        NEW.updated_at := pg_catalog.statement_timestamp();
        RETURN NEW;
    END
    $$;
CREATE OR REPLACE FUNCTION hpcacct_internal.html_escape(s text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(
                   s, '&', '&amp;'), '<', '&lt;'), '>', '&gt;'), '"', '&quot;'), '''', '&#39;')
    $$;
CREATE OR REPLACE FUNCTION hpcacct_internal.svg_chart(title text, unit text, labels text[], series jsonb,
                                      width integer DEFAULT 760, height integer DEFAULT 300)
    RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        n integer := coalesce(pg_catalog.array_length(labels, 1), 0);
        left_x constant float8 := 78;
        top_y constant float8 := 34;
        plot_w float8 := width - left_x - 16;
        plot_h float8 := height - top_y - 58;
        lo float8;
        hi float8;
        step float8;
        mag float8;
        svg text;
        s jsonb;
        k integer := 0;
        bars integer;
        bar_i integer := 0;
        pts text;
        i integer;
        v float8;
        tick float8;
        legend_x float8 := left_x;
    BEGIN
        IF n = 0 OR series IS NULL OR pg_catalog.jsonb_typeof(series) <> 'array' THEN
            RAISE EXCEPTION 'svg_chart needs labels and an array of series' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        SELECT least(0, min(x)), max(x) INTO lo, hi
        FROM (SELECT (e.value #>> '{}')::float8 AS x
              FROM pg_catalog.jsonb_array_elements(series) ser,
                   LATERAL pg_catalog.jsonb_array_elements(coalesce(ser.value -> 'values', '[]') || coalesce(ser.value -> 'lower', '[]')
                                                           || coalesce(ser.value -> 'upper', '[]')) e
              WHERE pg_catalog.jsonb_typeof(e.value) = 'number') t;
        IF hi IS NULL OR hi <= lo THEN
            hi := lo + 1;
        END IF;
        -- a round step: 1, 2 or 5 times a power of ten, about five of them
        mag := power(10, floor(log((hi - lo) / 5)));
        step := CASE WHEN (hi - lo) / 5 <= mag THEN mag WHEN (hi - lo) / 5 <= 2 * mag THEN 2 * mag
                     WHEN (hi - lo) / 5 <= 5 * mag THEN 5 * mag ELSE 10 * mag END;
        lo := floor(lo / step) * step;
        hi := ceil(hi / step) * step;
        svg := format('<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="%s" height="%s" viewBox="0 0 %s %s" '
                      'role="img" aria-label="%s">', width, height, width, height, hpcacct_internal.html_escape(title))
            || format('<rect x="0" y="0" width="%s" height="%s" fill="#ffffff"/>', width, height)
            || format('<text x="%s" y="20" font-family="sans-serif" font-size="14" font-weight="bold">%s</text>',
                      left_x, hpcacct_internal.html_escape(title))
            || format('<text x="12" y="%s" font-family="sans-serif" font-size="11" transform="rotate(-90 12 %s)" '
                      'text-anchor="middle">%s</text>', top_y + plot_h / 2, top_y + plot_h / 2, hpcacct_internal.html_escape(unit));
        -- grid and y labels
        tick := lo;
        WHILE tick <= hi + step / 2 LOOP
            svg := svg || format('<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#dddddd"/>',
                                 left_x, round((top_y + plot_h - (tick - lo) / (hi - lo) * plot_h)::numeric, 1),
                                 left_x + plot_w, round((top_y + plot_h - (tick - lo) / (hi - lo) * plot_h)::numeric, 1))
                       || format('<text x="%s" y="%s" font-family="sans-serif" font-size="10" text-anchor="end">%s</text>',
                                 left_x - 4, round((top_y + plot_h - (tick - lo) / (hi - lo) * plot_h + 3)::numeric, 1),
                                 hpcacct_internal.notify_number(tick::numeric));
            tick := tick + step;
        END LOOP;
        svg := svg || format('<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#333333"/>', left_x, top_y, left_x, top_y + plot_h)
                   || format('<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#333333"/>', left_x,
                             round((top_y + plot_h - (0 - lo) / (hi - lo) * plot_h)::numeric, 1), left_x + plot_w,
                             round((top_y + plot_h - (0 - lo) / (hi - lo) * plot_h)::numeric, 1));
        -- x labels
        FOR i IN 1 .. n LOOP
            CONTINUE WHEN coalesce(labels[i], '') = '';
            svg := svg || format('<text x="%s" y="%s" font-family="sans-serif" font-size="10" text-anchor="middle">%s</text>',
                                 round((left_x + (i - 0.5) * plot_w / n)::numeric, 1), top_y + plot_h + 14,
                                 hpcacct_internal.html_escape(labels[i]));
        END LOOP;
        SELECT count(*) INTO bars FROM jsonb_array_elements(series) e WHERE e.value ->> 'kind' = 'bar';
        FOR s IN SELECT e.value FROM jsonb_array_elements(series) e LOOP
            k := k + 1;
            IF s ->> 'kind' = 'bar' THEN
                svg := svg || format('<g class="series" data-series="%s" fill="%s">', hpcacct_internal.html_escape(s ->> 'name'),
                                     hpcacct_internal.html_escape(coalesce(s ->> 'color', '#1f77b4')));
                FOR i IN 1 .. n LOOP
                    v := (s -> 'values' ->> (i - 1))::float8;
                    CONTINUE WHEN v IS NULL;
                    svg := svg || format('<rect x="%s" y="%s" width="%s" height="%s"/>',
                        round((left_x + (i - 1) * plot_w / n + plot_w / n * (0.15 + 0.7 * bar_i / bars))::numeric, 1),
                        round((top_y + plot_h - (greatest(v, 0) - lo) / (hi - lo) * plot_h)::numeric, 1),
                        round((plot_w / n * 0.7 / bars)::numeric, 1),
                        round((abs(v) / (hi - lo) * plot_h)::numeric, 1));
                END LOOP;
                svg := svg || '</g>';
                bar_i := bar_i + 1;
            ELSIF s ->> 'kind' = 'band' THEN
                SELECT string_agg(format('%s,%s', round((left_x + (j - 0.5) * plot_w / n)::numeric, 1),
                                         round((top_y + plot_h - ((s -> 'upper' ->> (j - 1))::float8 - lo) / (hi - lo) * plot_h)::numeric, 1)),
                                  ' ' ORDER BY j)
                       || ' ' ||
                       string_agg(format('%s,%s', round((left_x + (j - 0.5) * plot_w / n)::numeric, 1),
                                         round((top_y + plot_h - ((s -> 'lower' ->> (j - 1))::float8 - lo) / (hi - lo) * plot_h)::numeric, 1)),
                                  ' ' ORDER BY j DESC)
                INTO pts
                FROM generate_series(1, n) j
                WHERE s -> 'upper' ->> (j - 1) IS NOT NULL AND s -> 'lower' ->> (j - 1) IS NOT NULL;
                svg := svg || format('<polygon class="series" data-series="%s" points="%s" fill="%s" fill-opacity="0.18" stroke="none"/>',
                                     hpcacct_internal.html_escape(s ->> 'name'), coalesce(pts, ''),
                                     hpcacct_internal.html_escape(coalesce(s ->> 'color', '#2ca02c')));
            ELSE
                SELECT string_agg(format('%s,%s', round((left_x + (j - 0.5) * plot_w / n)::numeric, 1),
                                         round((top_y + plot_h - ((s -> 'values' ->> (j - 1))::float8 - lo) / (hi - lo) * plot_h)::numeric, 1)),
                                  ' ' ORDER BY j)
                INTO pts
                FROM generate_series(1, n) j
                WHERE s -> 'values' ->> (j - 1) IS NOT NULL;
                svg := svg || format('<polyline class="series" data-series="%s" points="%s" fill="none" stroke="%s" stroke-width="2"%s/>',
                                     hpcacct_internal.html_escape(s ->> 'name'), coalesce(pts, ''),
                                     hpcacct_internal.html_escape(coalesce(s ->> 'color', '#1f77b4')),
                                     CASE WHEN s ->> 'kind' = 'dashed' THEN ' stroke-dasharray="6 4"' ELSE '' END);
            END IF;
            -- legend
            svg := svg || format('<rect x="%s" y="%s" width="12" height="12" fill="%s"%s/>', legend_x, height - 20,
                                 hpcacct_internal.html_escape(coalesce(s ->> 'color', '#1f77b4')),
                                 CASE WHEN s ->> 'kind' = 'band' THEN ' fill-opacity="0.3"' ELSE '' END)
                       || format('<text x="%s" y="%s" font-family="sans-serif" font-size="11">%s</text>', legend_x + 16,
                                 height - 10, hpcacct_internal.html_escape(s ->> 'name'));
            legend_x := legend_x + 26 + 6.5 * length(s ->> 'name');
        END LOOP;
        RETURN svg || '</svg>';
    END
    $$;
CREATE OR REPLACE FUNCTION hpcacct_internal.visible_account(account text) RETURNS @extschema@.account
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        a @extschema@.account;
    BEGIN
        IF account IS NULL THEN
            RAISE EXCEPTION 'an account is needed' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        SELECT * INTO a FROM @extschema@.account x WHERE x.name = visible_account.account;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'unknown account "%"', account USING ERRCODE = 'undefined_object';
        END IF;
        RETURN a;
    END
    $$;
CREATE OR REPLACE FUNCTION hpcacct_internal.statement_month(month date) RETURNS date
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        m date;
    BEGIN
        IF month IS NULL THEN
            RAISE EXCEPTION 'a month is needed' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF NOT isfinite(month) THEN
            RAISE EXCEPTION 'the month must be a finite date' USING ERRCODE = 'datetime_field_overflow';
        END IF;
        m := date_trunc('month', month)::date;
        IF m > @extschema@.site_today() THEN
            RAISE EXCEPTION 'month % has not begun', to_char(m, 'YYYY-MM')
                USING ERRCODE = 'invalid_parameter_value', DETAIL = format('Today is %s in the site time zone.', @extschema@.site_today());
        END IF;
        RETURN m;
    END
    $$;
CREATE OR REPLACE FUNCTION @extschema@.account_month(account text, month date)
    RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        a @extschema@.account := hpcacct_internal.visible_account(account);
        m date;
        m_end date;
        tz text := @extschema@.site_timezone();
        upto date;
        y_start date;
        q date;
        result jsonb;
        section jsonb;
        sections jsonb := '{}';
        bank_unit text := @extschema@.setting_value('bank_unit');
    BEGIN
        m := hpcacct_internal.statement_month(month);
        m_end := (m + interval '1 month')::date - 1;
        upto := least(m_end, @extschema@.site_today());
        y_start := date_trunc('year', m)::date;

        -- the month's charges by resource and submitter
        SELECT jsonb_build_object(
                   'by_resource', coalesce(jsonb_agg(jsonb_build_object('cluster', r.cluster, 'partition', r.partition,
                                                                        'unit', r.unit, 'amount', r.amount)
                                                     ORDER BY r.cluster, r.partition, r.unit)
                                           FILTER (WHERE r.g = 1), '[]'),
                   'by_submitter', coalesce(jsonb_agg(jsonb_build_object('cluster', r.cluster, 'partition', r.partition,
                                                                         'unit', r.unit, 'submitter', r.submitter,
                                                                         'amount', r.amount)
                                                      ORDER BY r.cluster, r.partition, r.unit, r.submitter)
                                            FILTER (WHERE r.g = 0), '[]'),
                   'total', coalesce(jsonb_object_agg(r.unit, r.amount) FILTER (WHERE r.g = 7), '{}'))
        INTO section
        FROM (SELECT c.cluster, c.partition, c.unit, c.submitter, round(sum(c.amount), 6) AS amount,
                     GROUPING(c.cluster, c.partition, c.submitter) AS g
              FROM @extschema@.charge_by_month c
              WHERE c.account = a.name AND c.month = m
              GROUP BY GROUPING SETS ((c.cluster, c.partition, c.unit, c.submitter), (c.cluster, c.partition, c.unit), (c.unit))) r;
        sections := sections || jsonb_build_object('charges', section);

        -- usage this year by resource, with the projection to the year's end
        SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'pool', u.pool, 'cluster', u.cluster, 'partition', u.partition, 'unit', u.unit,
                   'year_start', u.first_day, 'year_end', u.last_day, 'usage', round(u.usage, 6),
                   'equivalent_hours', round(u.hours, 6),
                   'usage_years', round(u.usage / h.hours, 6),
                   'core_hours', round(u.core_hours, 6), 'core_years', round(u.core_hours / h.hours, 6),
                   'projected_usage', CASE WHEN u.elapsed > 0 THEN round(u.usage * u.year_days / u.elapsed, 6) END)
                   ORDER BY u.pool, u.cluster, u.partition), '[]')
        INTO section
        FROM (SELECT c.pool, c.cluster, c.partition, c.unit, y.first_day, y.last_day,
                     sum(c.amount) AS usage, sum(c.amount / nullif(r.rate, 0)::numeric) AS hours,
                     -- raw core-hours, unless charges whose cores are unknown (booked before 0.4,
                     -- of jobs no longer in the job table) still count
                     CASE WHEN coalesce(sum(c.amount) FILTER (WHERE c.core_hours IS NULL), 0) = 0
                          THEN coalesce(sum(c.core_hours), 0) END AS core_hours,
                     (y.last_day - y.first_day + 1)::numeric AS year_days,
                     (upto - y.first_day + 1)::numeric AS elapsed
              FROM @extschema@.charge_by_month c
              JOIN @extschema@.ledger l ON l.entry_id = c.entry_id
              JOIN @extschema@.resource r ON r.resource_id = l.resource_id
              CROSS JOIN LATERAL (
                  SELECT s.first_day, (s.first_day + interval '1 year')::date - 1 AS last_day
                  FROM (SELECT make_date(EXTRACT(year FROM m)::integer - CASE WHEN EXTRACT(month FROM m) < sm.start_month THEN 1 ELSE 0 END,
                                         sm.start_month, 1) AS first_day
                        FROM (SELECT @extschema@.year_start_month(c.pool) AS start_month) sm) s) y
              WHERE c.account = a.name AND c.month >= y.first_day AND c.month <= m
              GROUP BY c.pool, c.cluster, c.partition, c.unit, y.first_day, y.last_day, upto) u
        CROSS JOIN (SELECT @extschema@.fairshare_setting_value('hours_per_year')::numeric AS hours) h;
        sections := sections || jsonb_build_object('usage_by_resource', section);

        -- GENCI: per machine with allocation events this year, the status at the end of the
        -- month (allocation_status) and the days of the year for the chart
        SELECT jsonb_agg(jsonb_build_object(
                   'machine', s.machine, 'alloc', st.alloc, 'tmc', st.tmc, 'tc', st.tc, 'consumption', st.consumption,
                   'delta', st.delta, 'status', st.status,
                   'days', (SELECT jsonb_agg(jsonb_build_array(dd.day, round(dd.tc::numeric, 2), round(dd.tmc::numeric, 2),
                                                               round(dd.consumption, 2)) ORDER BY dd.day)
                            FROM (SELECT g.day::date AS day,
                                         (SELECT coalesce(@extschema@.tc(l.valid_from, l.valid_until, l.amount::float8, g.day::date, s.month_convention)
                                                          - @extschema@.tc(l.valid_from, l.valid_until, l.amount::float8, y_start - 1, s.month_convention), 0)
                                          FROM @extschema@.ledger l
                                          WHERE l.account = a.name AND l.cluster = s.machine AND l.kind IN ('grant', 'supplement', 'retraction')
                                            AND l.valid_from <= g.day AND l.valid_until >= y_start) AS tc,
                                         (SELECT coalesce(@extschema@.tmc(l.valid_from, l.valid_until, l.amount::float8, g.day::date, s.month_convention), 0)
                                          FROM @extschema@.ledger l
                                          WHERE l.account = a.name AND l.cluster = s.machine AND l.kind IN ('grant', 'supplement', 'retraction')
                                            AND l.valid_from <= g.day AND l.valid_until >= y_start) AS tmc,
                                         (SELECT coalesce(sum(l.amount * @extschema@.period_share(l.job_start, l.job_end,
                                                                  y_start::timestamp AT TIME ZONE tz, (g.day::date + 1)::timestamp AT TIME ZONE tz)), 0)
                                          FROM @extschema@.ledger l JOIN @extschema@.resource r USING (resource_id)
                                          WHERE l.account = a.name AND l.kind = 'charge' AND coalesce(r.pool, r.cluster) = s.machine
                                            AND l.job_start < (g.day::date + 1)::timestamp AT TIME ZONE tz
                                            AND l.job_end >= y_start::timestamp AT TIME ZONE tz) AS consumption
                                  FROM generate_series(y_start, upto, interval '1 day') g(day)) dd))
               ORDER BY s.machine)
        INTO section
        FROM @extschema@.machine_setting s
        CROSS JOIN LATERAL @extschema@.allocation_status(a.name, s.machine, upto) st
        WHERE EXISTS (SELECT 1 FROM @extschema@.ledger l
                      WHERE l.account = a.name AND l.cluster = s.machine AND l.kind IN ('grant', 'supplement', 'retraction')
                        AND l.valid_from <= upto AND l.valid_until >= y_start);
        IF section IS NOT NULL THEN
            sections := sections || jsonb_build_object('regulation', section);
        END IF;

        -- RWTH: the window quota of each month of the period up to this one
        SELECT jsonb_agg(jsonb_build_object('month', u.month, 'state', u.state, 'monthly', u.monthly,
                                            'remaining_prev', u.remaining_prev, 'consumed', u.consumed_current,
                                            'consumable_pct', u.consumable_pct, 'consumable', u.consumable,
                                            'unit', u.unit, 'period_start', u.period_start, 'period_end', u.period_end)
                         ORDER BY u.month)
        INTO section
        FROM @extschema@.quota_period p
        CROSS JOIN LATERAL generate_series(p.period_start, least(p.period_end, upto), interval '1 month') g(mon)
        CROSS JOIN LATERAL @extschema@.window_quota_usage(a.name, CASE WHEN g.mon::date = m THEN upto
                                                                         ELSE (g.mon + interval '1 month')::date - 1 END) u
        WHERE p.account = a.name AND p.period_start <= upto AND p.period_end >= y_start;
        IF section IS NOT NULL THEN
            sections := sections || jsonb_build_object('window_quota', section);
        END IF;

        -- HLRN: the quarter's allocation and the balance at the end of each day of it so far
        q := @extschema@.quarter_start(m);
        SELECT jsonb_build_object(
                   'quarter', q, 'unit', bank_unit, 'allocation', al.amount, 'state', @extschema@.account_state(a.name, upto),
                   'balance', @extschema@.balance(a.name, upto),
                   'days', (SELECT jsonb_agg(jsonb_build_array(g.day::date,
                                round(al.amount - coalesce((SELECT sum(l.amount * @extschema@.period_share(l.job_start, l.job_end,
                                                                        q::timestamp AT TIME ZONE tz, (g.day::date + 1)::timestamp AT TIME ZONE tz))
                                                            FROM @extschema@.ledger l
                                                            WHERE l.account = a.name AND l.kind = 'charge' AND l.unit = bank_unit
                                                              AND l.job_start < (g.day::date + 1)::timestamp AT TIME ZONE tz
                                                              AND l.job_end >= q::timestamp AT TIME ZONE tz), 0), 2))
                                              ORDER BY g.day)
                            FROM generate_series(q, upto, interval '1 day') g(day)))
        INTO section
        FROM (SELECT sum(l.amount) AS amount
              FROM @extschema@.ledger l
              WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer', 'refund') AND l.unit = bank_unit
                AND l.valid_from >= q AND l.valid_from < q + interval '3 months') al
        WHERE al.amount IS NOT NULL;
        IF section IS NOT NULL THEN
            sections := sections || jsonb_build_object('bank', section);
        END IF;

        RETURN jsonb_build_object('account', a.name, 'kind', a.kind, 'description', a.description,
                                  'month', to_char(m, 'YYYY-MM'), 'figures_at', upto, 'time_zone', tz)
               || sections;
    END
    $$;
CREATE OR REPLACE FUNCTION @extschema@.statement_html(account text, month date)
    RETURNS text
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        d jsonb := @extschema@.account_month(account, month);
        h text;
        sec jsonb;
        r jsonb;
        labels text[];
        series jsonb;
        rows text;
        e text;
    BEGIN
        h := '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
             || format('<title>Statement %s %s</title>', hpcacct_internal.html_escape(d ->> 'account'), d ->> 'month')
             || '<style>body{font-family:sans-serif;margin:24px;color:#222;background:#fff}'
                'h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ccc}'
                'table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}'
                'td.n{text-align:right}.meta{color:#555;font-size:13px}.chart{display:block;margin:8px 0}</style></head><body>'
             || format('<h1>Statement of account %s &mdash; %s</h1>', hpcacct_internal.html_escape(d ->> 'account'),
                       to_char((d ->> 'month' || '-01')::date, 'FMMonth YYYY'))
             || format('<p class="meta">%s account%s. Figures at the end of %s (%s).</p>',
                       hpcacct_internal.html_escape(initcap(d ->> 'kind')),
                       CASE WHEN d ->> 'description' IS NOT NULL THEN ': ' || hpcacct_internal.html_escape(d ->> 'description') ELSE '' END,
                       d ->> 'figures_at', hpcacct_internal.html_escape(d ->> 'time_zone'));

        -- the month's charges
        h := h || '<h2>Charges this month</h2>';
        IF jsonb_array_length(d -> 'charges' -> 'by_submitter') = 0 THEN
            h := h || '<p>No charges.</p>';
        ELSE
            SELECT string_agg(format('<tr><td>%s</td><td>%s</td><td>%s</td><td class="n">%s</td><td>%s</td></tr>',
                                     hpcacct_internal.html_escape(x ->> 'cluster'), hpcacct_internal.html_escape(x ->> 'partition'),
                                     hpcacct_internal.html_escape(x ->> 'submitter'),
                                     to_char((x ->> 'amount')::numeric, 'FM999,999,999,990.00'), hpcacct_internal.html_escape(x ->> 'unit')),
                              '' ORDER BY ord)
            INTO rows FROM jsonb_array_elements(d -> 'charges' -> 'by_submitter') WITH ORDINALITY t(x, ord);
            h := h || '<table class="charges"><tr><th>cluster</th><th>partition</th><th>submitter</th><th>amount</th><th>unit</th></tr>'
                   || rows;
            SELECT string_agg(format('<tr><th colspan="3">total</th><td class="n">%s</td><td>%s</td></tr>',
                                     to_char(t.value::numeric, 'FM999,999,999,990.00'), hpcacct_internal.html_escape(t.key)), '' ORDER BY t.key)
            INTO rows FROM jsonb_each_text(d -> 'charges' -> 'total') t;
            h := h || coalesce(rows, '') || '</table>';
        END IF;

        -- GENCI: consumption against TC(d) with the TMC bands, per machine
        FOR sec IN SELECT x FROM jsonb_array_elements(coalesce(d -> 'regulation', '[]')) x LOOP
            SELECT array_agg(CASE WHEN EXTRACT(day FROM (x ->> 0)::date) = 1 THEN to_char((x ->> 0)::date, 'Mon') ELSE '' END ORDER BY ord),
                   jsonb_build_array(
                       jsonb_build_object('name', 'TC ± TMC', 'kind', 'band', 'color', '#2ca02c',
                                          'lower', jsonb_agg((x ->> 1)::numeric - (x ->> 2)::numeric ORDER BY ord),
                                          'upper', jsonb_agg((x ->> 1)::numeric + (x ->> 2)::numeric ORDER BY ord)),
                       jsonb_build_object('name', 'TC − 2·TMC (retraction)', 'kind', 'dashed', 'color', '#d62728',
                                          'values', jsonb_agg((x ->> 1)::numeric - 2 * (x ->> 2)::numeric ORDER BY ord)),
                       jsonb_build_object('name', 'TC(d)', 'kind', 'line', 'color', '#555555',
                                          'values', jsonb_agg((x ->> 1)::numeric ORDER BY ord)),
                       jsonb_build_object('name', 'consumption', 'kind', 'line', 'color', '#1f77b4',
                                          'values', jsonb_agg((x ->> 3)::numeric ORDER BY ord)))
            INTO labels, series
            FROM jsonb_array_elements(sec -> 'days') WITH ORDINALITY t(x, ord);
            h := h || format('<h2>Regulation on %s (GENCI)</h2>', hpcacct_internal.html_escape(sec ->> 'machine'))
                   || hpcacct_internal.svg_chart(format('Consumption against theoretical consumption on %s', sec ->> 'machine'),
                                            'hours', labels, series)
                   || format('<table class="regulation"><tr><th>Alloc</th><th>TMC</th><th>TC</th><th>consumption</th><th>&Delta;</th><th>status</th></tr>'
                             '<tr><td class="n">%s</td><td class="n">%s</td><td class="n">%s</td><td class="n">%s</td><td class="n">%s</td><td>%s</td></tr></table>',
                             hpcacct_internal.notify_number((sec ->> 'alloc')::numeric), hpcacct_internal.notify_number((sec ->> 'tmc')::numeric),
                             hpcacct_internal.notify_number((sec ->> 'tc')::numeric), hpcacct_internal.notify_number((sec ->> 'consumption')::numeric),
                             hpcacct_internal.notify_number((sec ->> 'delta')::numeric), hpcacct_internal.html_escape(sec ->> 'status'));
        END LOOP;

        -- RWTH: the three-month window per month
        IF d ? 'window_quota' THEN
            SELECT array_agg(to_char((x ->> 'month')::date, 'Mon YY') ORDER BY ord),
                   jsonb_build_array(
                       jsonb_build_object('name', 'consumed', 'kind', 'bar', 'color', '#1f77b4',
                                          'values', jsonb_agg((x ->> 'consumed')::numeric ORDER BY ord)),
                       jsonb_build_object('name', 'monthly allowance', 'kind', 'dashed', 'color', '#555555',
                                          'values', jsonb_agg((x ->> 'monthly')::numeric ORDER BY ord)),
                       jsonb_build_object('name', 'consumable (3-month window)', 'kind', 'line', 'color', '#ff7f0e',
                                          'values', jsonb_agg((x ->> 'consumable')::numeric ORDER BY ord)))
            INTO labels, series
            FROM jsonb_array_elements(d -> 'window_quota') WITH ORDINALITY t(x, ord);
            r := d -> 'window_quota' -> -1;
            h := h || '<h2>Core-hour quota (RWTH)</h2>'
                   || hpcacct_internal.svg_chart('Sliding-window quota per month', r ->> 'unit', labels, series)
                   || format('<table class="quota"><tr><th>Accounting period</th><td>%s to %s</td></tr>'
                             '<tr><th>State</th><td>%s</td></tr><tr><th>Monthly</th><td class="n">%s</td></tr>'
                             '<tr><th>Remaining of previous month</th><td class="n">%s</td></tr>'
                             '<tr><th>Consumed this month</th><td class="n">%s</td></tr>'
                             '<tr><th>Consumable (%%)</th><td class="n">%s</td></tr><tr><th>Consumable</th><td class="n">%s</td></tr></table>',
                             r ->> 'period_start', r ->> 'period_end', hpcacct_internal.html_escape(r ->> 'state'),
                             hpcacct_internal.notify_number((r ->> 'monthly')::numeric), hpcacct_internal.notify_number((r ->> 'remaining_prev')::numeric),
                             hpcacct_internal.notify_number((r ->> 'consumed')::numeric), hpcacct_internal.notify_number((r ->> 'consumable_pct')::numeric),
                             hpcacct_internal.notify_number((r ->> 'consumable')::numeric));
        END IF;

        -- HLRN: the quarter's balance
        IF d ? 'bank' THEN
            sec := d -> 'bank';
            SELECT array_agg(CASE WHEN EXTRACT(day FROM (x ->> 0)::date) IN (1, 15) THEN to_char((x ->> 0)::date, 'DD Mon') ELSE '' END ORDER BY ord),
                   jsonb_build_array(
                       jsonb_build_object('name', 'allocation', 'kind', 'dashed', 'color', '#555555',
                                          'values', jsonb_agg((sec ->> 'allocation')::numeric ORDER BY ord)),
                       jsonb_build_object('name', 'balance', 'kind', 'line', 'color', '#1f77b4',
                                          'values', jsonb_agg((x ->> 1)::numeric ORDER BY ord)))
            INTO labels, series
            FROM jsonb_array_elements(sec -> 'days') WITH ORDINALITY t(x, ord);
            h := h || format('<h2>Quarter starting %s (HLRN bank)</h2>', sec ->> 'quarter')
                   || hpcacct_internal.svg_chart('Balance of the quarter', sec ->> 'unit', labels, series)
                   || format('<table class="bank"><tr><th>allocation</th><th>balance</th><th>state</th></tr>'
                             '<tr><td class="n">%s %s</td><td class="n">%s %s</td><td>%s</td></tr></table>',
                             to_char((sec ->> 'allocation')::numeric, 'FM999,999,990.00'), hpcacct_internal.html_escape(sec ->> 'unit'),
                             to_char((sec ->> 'balance')::numeric, 'FM999,999,990.00'), hpcacct_internal.html_escape(sec ->> 'unit'),
                             hpcacct_internal.html_escape(sec ->> 'state'));
        END IF;

        -- usage by resource this allocation year, with the projection
        IF jsonb_array_length(d -> 'usage_by_resource') > 0 THEN
            SELECT array_agg((x ->> 'cluster') || '/' || (x ->> 'partition') ORDER BY ord),
                   jsonb_build_array(
                       jsonb_build_object('name', 'usage to date', 'kind', 'bar', 'color', '#1f77b4',
                                          'values', jsonb_agg((x ->> 'usage')::numeric ORDER BY ord)),
                       jsonb_build_object('name', 'projected for the year', 'kind', 'bar', 'color', '#aec7e8',
                                          'values', jsonb_agg((x ->> 'projected_usage')::numeric ORDER BY ord))),
                   string_agg(format('<tr><td>%s</td><td>%s</td><td>%s to %s</td><td class="n">%s</td><td class="n">%s</td>'
                                     '<td class="n">%s</td><td class="n">%s</td><td class="n">%s</td><td>%s</td></tr>',
                                     hpcacct_internal.html_escape(x ->> 'cluster'), hpcacct_internal.html_escape(x ->> 'partition'),
                                     x ->> 'year_start', x ->> 'year_end',
                                     coalesce(to_char((x ->> 'core_years')::numeric, 'FM999,999,990.000'), 'n/a'),
                                     to_char((x ->> 'equivalent_hours')::numeric, 'FM999,999,999,990.00'),
                                     to_char((x ->> 'usage')::numeric, 'FM999,999,999,990.00'),
                                     to_char((x ->> 'usage_years')::numeric, 'FM999,999,990.000'),
                                     coalesce(to_char((x ->> 'projected_usage')::numeric, 'FM999,999,999,990.00'), ''),
                                     hpcacct_internal.html_escape(x ->> 'unit')), '' ORDER BY ord)
            INTO labels, series, rows
            FROM jsonb_array_elements(d -> 'usage_by_resource') WITH ORDINALITY t(x, ord);
            h := h || '<h2>Usage by resource this allocation year</h2>'
                   || hpcacct_internal.svg_chart('Usage to date and projected for the year', 'charged units', labels, series)
                   || '<table class="usage"><tr><th>cluster</th><th>partition</th><th>year</th><th>core-years (raw)</th>'
                      '<th>equivalent-hours (unweighted)</th><th>usage to date</th><th>usage in unit-years</th>'
                      '<th>projected</th><th>unit</th></tr>'
                   || rows || '</table>';
        END IF;
        RETURN h || '</body></html>';
    END
    $$;
CREATE OR REPLACE FUNCTION @extschema@.statement_accounts(month date)
    RETURNS SETOF text
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        tz constant text := @extschema@.site_timezone();
        m date;
    BEGIN
        m := hpcacct_internal.statement_month(month);
        RETURN QUERY
        SELECT a.name
        FROM @extschema@.account a
        WHERE EXISTS (SELECT 1 FROM @extschema@.ledger l
                      WHERE l.account = a.name AND l.kind = 'charge'
                        AND l.job_start < (m + interval '1 month')::timestamp AT TIME ZONE tz
                        AND l.job_end >= m::timestamp AT TIME ZONE tz)
           OR EXISTS (SELECT 1 FROM @extschema@.ledger l
                      WHERE l.account = a.name AND l.kind <> 'charge'
                        AND l.valid_from < (m + interval '1 month')::date AND l.valid_until >= m)
           OR EXISTS (SELECT 1 FROM @extschema@.quota_period p
                      WHERE p.account = a.name AND p.period_start < (m + interval '1 month')::date AND p.period_end >= m)
        ORDER BY a.name;
    END
    $$;
CREATE OR REPLACE FUNCTION @extschema@.r_wlm_usage(project text DEFAULT NULL, at date DEFAULT NULL)
    RETURNS TABLE (account text, period_start date, period_end date, month date, state text,
                   monthly float8, remaining_prev float8, consumed_current float8,
                   consumable_pct float8, consumable float8, cluster text, unit text)
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF project IS NOT NULL THEN
            RETURN QUERY SELECT * FROM @extschema@.window_quota_usage(project, at);
            RETURN;
        END IF;
        RETURN QUERY
        SELECT u.*
        FROM (SELECT DISTINCT p.account FROM @extschema@.quota_period p
              WHERE (SELECT hpcacct_internal.sees_all_accounts())
                 OR p.account = ANY ((SELECT hpcacct_internal.visible_accounts())::text[])) a
        CROSS JOIN LATERAL @extschema@.window_quota_usage(a.account, at) u
        ORDER BY u.account;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.tres_in(cstring) IS 'Text input of tres: Slurm TRES syntax, validated';
COMMENT ON FUNCTION hpcacct_internal.tres_out(@extschema@.tres) IS 'Canonical text of a tres: keys sorted, memory in the largest whole unit';
COMMENT ON FUNCTION hpcacct_internal.tres_recv(internal) IS 'Binary input of tres, validated as text input is';
COMMENT ON FUNCTION hpcacct_internal.tres_send(@extschema@.tres) IS 'Binary output of tres: count, then key and float8 value per component';
COMMENT ON FUNCTION hpcacct_internal.tres_add(@extschema@.tres, @extschema@.tres) IS
    'Component-wise sum of two resource vectors';
COMMENT ON FUNCTION hpcacct_internal.tres_mul(@extschema@.tres, float8) IS
    'Resource vector scaled by a finite, non-negative number';
COMMENT ON FUNCTION hpcacct_internal.tres_mul(float8, @extschema@.tres) IS
    'Resource vector scaled by a finite, non-negative number';
COMMENT ON FUNCTION hpcacct_internal.tres_eq(@extschema@.tres, @extschema@.tres) IS 'Equality of canonical resource vectors (operator =)';
COMMENT ON FUNCTION hpcacct_internal.tres_ne(@extschema@.tres, @extschema@.tres) IS 'Inequality of canonical resource vectors (operator <>)';
COMMENT ON FUNCTION hpcacct_internal.tres_lt(@extschema@.tres, @extschema@.tres) IS 'Order of resource vectors by key, then value (operator <)';
COMMENT ON FUNCTION hpcacct_internal.tres_le(@extschema@.tres, @extschema@.tres) IS 'Order of resource vectors by key, then value (operator <=)';
COMMENT ON FUNCTION hpcacct_internal.tres_gt(@extschema@.tres, @extschema@.tres) IS 'Order of resource vectors by key, then value (operator >)';
COMMENT ON FUNCTION hpcacct_internal.tres_ge(@extschema@.tres, @extschema@.tres) IS 'Order of resource vectors by key, then value (operator >=)';
COMMENT ON FUNCTION hpcacct_internal.tres_cmp(@extschema@.tres, @extschema@.tres) IS 'Btree support: -1, 0 or 1 by key, then value';
COMMENT ON FUNCTION hpcacct_internal.tres_hash(@extschema@.tres) IS 'Hash support: hash of the canonical form';
COMMENT ON FUNCTION hpcacct_internal.tres_hash_extended(@extschema@.tres, bigint) IS 'Hash support: seeded 64-bit hash of the canonical form';
COMMENT ON FUNCTION hpcacct_internal.check_setting() IS 'Trigger: only known settings, with values of the right kind';
COMMENT ON FUNCTION hpcacct_internal.ledger_is_append_only() IS 'Trigger: refuses UPDATE, DELETE and TRUNCATE of the ledger (HA001)';
COMMENT ON FUNCTION hpcacct_internal.ledger_check_references() IS
    'Statement trigger of hpcacct.ledger: the foreign keys'' check of new rows, once per statement (locks and checks '
    'the accounts and resources they name)';
COMMENT ON FUNCTION hpcacct_internal.job_columns(regclass, text[]) IS 'The columns charging reads from a job table, checked, from role=column pairs';
COMMENT ON FUNCTION hpcacct_internal.day_or_today(date, text) IS
    'A day argument: NULL means today in the site time zone; an infinite day is an error (22008)';
COMMENT ON FUNCTION hpcacct_internal.require_account(text, text) IS
    'An account argument: NULL is an error (22004), an unknown or invisible account too (42704)';
COMMENT ON FUNCTION hpcacct_internal.rebuild_rollup_trigger() IS
    'Trigger of a settings table: rebuilds the charge rollup when the setting named by its argument changes';
COMMENT ON FUNCTION hpcacct_internal.last_charged_start(bigint) IS
    'Latest start of the jobs a resource row still charges (NULL: none)';
COMMENT ON FUNCTION hpcacct_internal.check_resource_change() IS
    'Trigger: a charged resource row may only be closed (HA006), not deleted; overlapping rates get a hint';
COMMENT ON FUNCTION hpcacct_internal.check_account_delete() IS
    'Trigger: an account with ledger entries cannot be deleted; says what to do instead';
COMMENT ON FUNCTION hpcacct_internal.tmc_transfn(internal, date, date, float8, date) IS
    'Transition function of hpcacct.tmc (half_month convention)';
COMMENT ON FUNCTION hpcacct_internal.tmc_transfn(internal, date, date, float8, date, text) IS
    'Transition function of hpcacct.tmc with a month convention';
COMMENT ON FUNCTION hpcacct_internal.tc_transfn(internal, date, date, float8, date) IS
    'Transition function of hpcacct.tc (half_month convention)';
COMMENT ON FUNCTION hpcacct_internal.tc_transfn(internal, date, date, float8, date, text) IS
    'Transition function of hpcacct.tc with a month convention';
COMMENT ON FUNCTION hpcacct_internal.theoretical_combinefn(internal, internal) IS
    'Combine function of hpcacct.tmc and hpcacct.tc (merges two compensated sums)';
COMMENT ON FUNCTION hpcacct_internal.theoretical_finalfn(internal) IS
    'Final function of hpcacct.tmc and hpcacct.tc';
COMMENT ON FUNCTION hpcacct_internal.theoretical_serialfn(internal) IS
    'Serializes a hpcacct.tmc / hpcacct.tc state (two float8, network byte order)';
COMMENT ON FUNCTION hpcacct_internal.theoretical_deserialfn(bytea, internal) IS
    'Deserializes a hpcacct.tmc / hpcacct.tc state, checking its size and that it is finite';
COMMENT ON FUNCTION hpcacct_internal.window_quota_transfn(internal, date, float8, float8, date) IS
    'Transition function of hpcacct.window_quota: adds one month row to the state';
COMMENT ON FUNCTION hpcacct_internal.window_quota_combinefn(internal, internal) IS
    'Combine function of hpcacct.window_quota: merges two partial states';
COMMENT ON FUNCTION hpcacct_internal.window_quota_serialfn(internal) IS
    'Serial function of hpcacct.window_quota: the 88 bytes of a partial state';
COMMENT ON FUNCTION hpcacct_internal.window_quota_deserialfn(bytea, internal) IS
    'Deserial function of hpcacct.window_quota: checks the size and the validity of a partial state';
COMMENT ON FUNCTION hpcacct_internal.window_quota_finalfn(internal) IS
    'Final function of hpcacct.window_quota: the quota of month at, NULL without rows';
COMMENT ON FUNCTION hpcacct_internal.check_fairshare_setting() IS
    'Trigger of hpcacct.fairshare_setting: refuses unknown names (42704) and malformed values (22023)';
COMMENT ON FUNCTION hpcacct_internal.decayed_usage_transfn(internal, timestamptz, float8, timestamptz, interval) IS
    'Transition function of hpcacct.decayed_usage (half-life form): adds one row';
COMMENT ON FUNCTION hpcacct_internal.decayed_usage_combinefn(internal, internal) IS
    'Combine function of hpcacct.decayed_usage (half-life form): merges two partial states';
COMMENT ON FUNCTION hpcacct_internal.decayed_usage_serialfn(internal) IS
    'Serial function of hpcacct.decayed_usage (half-life form): the 48 bytes of a partial state';
COMMENT ON FUNCTION hpcacct_internal.decayed_usage_deserialfn(bytea, internal) IS
    'Deserial function of hpcacct.decayed_usage (half-life form): checks the size and validity of a state';
COMMENT ON FUNCTION hpcacct_internal.decayed_usage_finalfn(internal) IS
    'Final function of hpcacct.decayed_usage (half-life form): the decayed usage, NULL without rows';
COMMENT ON FUNCTION hpcacct_internal.decayed_usage_periods_transfn(internal, timestamptz, float8, timestamptz, interval,
                                                              float8, integer) IS
    'Transition function of hpcacct.decayed_usage (interval form): adds one row';
COMMENT ON FUNCTION hpcacct_internal.decayed_usage_periods_combinefn(internal, internal) IS
    'Combine function of hpcacct.decayed_usage (interval form): merges two partial states';
COMMENT ON FUNCTION hpcacct_internal.decayed_usage_periods_serialfn(internal) IS
    'Serial function of hpcacct.decayed_usage (interval form): the 64 bytes of a partial state';
COMMENT ON FUNCTION hpcacct_internal.decayed_usage_periods_deserialfn(bytea, internal) IS
    'Deserial function of hpcacct.decayed_usage (interval form): checks the size and validity of a state';
COMMENT ON FUNCTION hpcacct_internal.decayed_usage_periods_finalfn(internal) IS
    'Final function of hpcacct.decayed_usage (interval form): the decayed usage, NULL without rows';
COMMENT ON FUNCTION hpcacct_internal.quarter_balance_transfn(internal, text, date, numeric, date) IS
    'Support function of the aggregate quarter_balance';
COMMENT ON FUNCTION hpcacct_internal.quarter_balance_combinefn(internal, internal) IS
    'Support function of the aggregate quarter_balance';
COMMENT ON FUNCTION hpcacct_internal.quarter_balance_serialfn(internal) IS
    'Support function of the aggregate quarter_balance';
COMMENT ON FUNCTION hpcacct_internal.quarter_balance_deserialfn(bytea, internal) IS
    'Support function of the aggregate quarter_balance';
COMMENT ON FUNCTION hpcacct_internal.quarter_balance_finalfn(internal) IS
    'Support function of the aggregate quarter_balance';
COMMENT ON FUNCTION hpcacct_internal.require_bank_account(text) IS 'Raises unless the account exists and is not deleted';
COMMENT ON FUNCTION hpcacct_internal.require_amount(numeric) IS 'Raises unless the amount is a positive number';
COMMENT ON FUNCTION hpcacct_internal.book_allocation(text, text, date, numeric, text) IS
    'Books a bank entry valid for the quarter containing a day (internal helper)';
COMMENT ON FUNCTION hpcacct_internal.top_up_note(numeric) IS 'Ledger note of a personal top-up to a level (its once-only key)';
COMMENT ON FUNCTION hpcacct_internal.check_personal_allotment() IS 'Trigger: a personal allotment is at most double the setting';
COMMENT ON FUNCTION hpcacct_internal.require_admin(text, text) IS
    'Raises unless by_user administers the account (NULL: staff acting directly)';
COMMENT ON FUNCTION hpcacct_internal.require_member_manager(text, text) IS
    'Raises 42501 unless the session user is staff or administers the account (a portal user acts as itself)';
COMMENT ON FUNCTION hpcacct_internal.visible_accounts() IS
    'Accounts the session user is a member of: what row-level security lets a portal role see';
COMMENT ON FUNCTION hpcacct_internal.sees_all_accounts() IS
    'True for superusers and members of hpcacct_admin, hpcacct_auditor or hpcacct_submit, who see every account''s rows';
COMMENT ON FUNCTION hpcacct_internal.protect_table(regclass) IS
    'Row-level security for a table with an account or username column: portal users see their accounts'' rows';
COMMENT ON FUNCTION hpcacct_internal.grant_submit_role() IS
    'Grants hpcacct_submit what check_submit reads (called by setup_roles)';
COMMENT ON FUNCTION hpcacct_internal.note_replicated_charge() IS
    'Row trigger of hpcacct.ledger for replicated rows (enabled for replica sessions only): holds received charges '
    'back until commit';
COMMENT ON FUNCTION hpcacct_internal.roll_up_received() IS
    'Deferred trigger of pg_temp.hpcacct_received: inserts the charges held in the transaction into the ledger and '
    'rolls them up, once';
COMMENT ON FUNCTION hpcacct_internal.federation_refuse_local_write() IS
    'Trigger of the reference tables at a federation site: refuses writes of the site''s own sessions (HA013)';
COMMENT ON FUNCTION hpcacct_internal.federation_slot_exists(text) IS 'Whether a replication slot of that name exists';
COMMENT ON FUNCTION hpcacct_internal.notify_number(numeric) IS 'A figure as messages print it: rounded, thousands separated by commas';
COMMENT ON FUNCTION hpcacct_internal.notify_regulation() IS
    'Trigger: a regulation warning or retraction logged by regulate() writes its message to the project managers';
COMMENT ON FUNCTION hpcacct_internal.notify_quarter() IS
    'Trigger: an expiry or deletion logged by open_quarter() writes its message to the account''s owner';
COMMENT ON FUNCTION hpcacct_internal.notify_hold() IS
    'Trigger: a queued job put on hold (or released) writes its message to the job''s owner';
COMMENT ON FUNCTION hpcacct_internal.contact_touch() IS 'Trigger: sets contact.updated_at on every change';
COMMENT ON FUNCTION hpcacct_internal.html_escape(text) IS 'Text escaped for HTML and SVG (& < > " '')';
COMMENT ON FUNCTION hpcacct_internal.svg_chart(text, text, text[], jsonb, integer, integer) IS
    'An inline SVG chart: line, dashed, bar and band series over labelled x positions; one element of class series each';
COMMENT ON FUNCTION hpcacct_internal.visible_account(text) IS
    'The account row if it exists and the caller may see it, else 42704';
COMMENT ON FUNCTION hpcacct_internal.statement_month(date) IS
    'First day of the month a statement is for; refuses NULL (22004), infinity (22008) and a month that has not begun (22023)';

-- ==== one settings table (issue 18, house) ---------------------------------------------
-- The fair-share and usage-report settings join hpcacct.setting: one table, one catalog, one
-- check, one rebuild trigger (on timezone and half_life); their rows move over. 0.3 had no
-- federation, so no site receives them twice.
CREATE OR REPLACE FUNCTION hpcacct_internal.check_setting() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        max_length interval;
        ok         boolean;
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM @extschema@.setting_catalog() c WHERE c.name = NEW.name) THEN
            RAISE EXCEPTION 'unknown setting "%"', NEW.name
                USING ERRCODE = 'undefined_object', HINT = 'See hpcacct.settings for the settings there are.';
        END IF;
        IF NEW.name = 'timezone'
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_names z WHERE z.name = NEW.value)
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_abbrevs z WHERE z.abbrev = NEW.value) THEN
            RAISE EXCEPTION 'unknown time zone "%"', NEW.value
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Use a name from pg_timezone_names, e.g. Europe/Berlin.';
        END IF;
        IF NEW.name = 'max_job_length' THEN
            BEGIN
                max_length := NEW.value::interval;
            EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR interval_field_overflow THEN
                max_length := NULL;
            END;
            IF max_length IS NULL OR max_length <= interval '0' OR pg_catalog.date_part('month', max_length) <> 0
               OR pg_catalog.date_part('year', max_length) <> 0 THEN
                RAISE EXCEPTION 'max_job_length must be a positive interval in days or hours, not "%"', NEW.value
                    USING ERRCODE = 'invalid_parameter_value', HINT = 'E.g. ''30 days''.';
            END IF;
        END IF;
        IF NEW.name = 'require_membership' AND lower(NEW.value) NOT IN ('on', 'off', 'true', 'false') THEN
            RAISE EXCEPTION 'require_membership must be on or off, not "%"', NEW.value
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF NEW.name = 'expiry_warning_days' AND (NEW.value !~ '^[0-9]{1,2}$' OR NEW.value::integer > 92) THEN
            RAISE EXCEPTION 'expiry_warning_days must be a whole number of days from 0 to 92, not "%"', NEW.value
                USING ERRCODE = 'invalid_parameter_value', HINT = 'At most a quarter ahead; 0 turns the warning off.';
        END IF;
        IF NEW.name = 'personal_allotment'
           AND (NEW.value !~ '^[0-9]+(\.[0-9]+)?$' OR NEW.value::numeric <= 0) THEN
            RAISE EXCEPTION 'personal_allotment must be a positive number, not "%"', NEW.value
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- fair share and usage reports
        BEGIN
            ok := CASE NEW.name
                WHEN 'decay' THEN NEW.value IN ('half_life', 'interval')
                WHEN 'half_life' THEN NEW.value::interval > interval '0'
                                      AND pg_catalog.date_part('month', NEW.value::interval) = 0
                                      AND pg_catalog.date_part('year', NEW.value::interval) = 0
                WHEN 'period' THEN NEW.value::interval > interval '0'
                                   AND pg_catalog.date_part('month', NEW.value::interval) = 0
                                   AND pg_catalog.date_part('year', NEW.value::interval) = 0
                WHEN 'period_decay' THEN NEW.value::float8 BETWEEN 0 AND 1
                WHEN 'depth' THEN NEW.value::integer >= 1
                WHEN 'exhausted_factor' THEN NEW.value::float8 BETWEEN 0 AND 1
                WHEN 'year_start_month' THEN NEW.value::integer BETWEEN 1 AND 12
                WHEN 'hours_per_year' THEN NEW.value::float8 > 0 AND NEW.value::float8 < 'Infinity'
                ELSE true
            END;
        EXCEPTION WHEN data_exception THEN
            ok := false;
        END;
        IF ok IS NOT TRUE THEN
            RAISE EXCEPTION 'invalid value "%" for setting %', NEW.value, NEW.name
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = (SELECT c.description FROM @extschema@.setting_catalog() c WHERE c.name = NEW.name) || '.';
        END IF;
        RETURN NEW;
    END
    $$;
CREATE OR REPLACE FUNCTION hpcacct_internal.rebuild_rollup_trigger() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        changed boolean;
    BEGIN
        changed := CASE TG_OP
                       WHEN 'INSERT' THEN NEW.name = ANY (TG_ARGV)
                       WHEN 'DELETE' THEN OLD.name = ANY (TG_ARGV)
                       ELSE (NEW.name = ANY (TG_ARGV) OR OLD.name = ANY (TG_ARGV)) AND NEW IS DISTINCT FROM OLD
                   END;
        IF changed THEN
            PERFORM @extschema@.rebuild_rollup();
        END IF;
        RETURN NULL;
    END
    $$;
INSERT INTO @extschema@.setting (name, value) SELECT f.name, f.value FROM @extschema@.fairshare_setting f;
DROP TRIGGER setting_rebuilds_rollup ON @extschema@.setting;
CREATE TRIGGER setting_rebuilds_rollup AFTER INSERT OR UPDATE OR DELETE ON @extschema@.setting
    FOR EACH ROW EXECUTE FUNCTION hpcacct_internal.rebuild_rollup_trigger('timezone', 'half_life');
CREATE OR REPLACE FUNCTION @extschema@.rollup_insert_sql(source text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT pg_catalog.format($q$
            WITH z AS MATERIALIZED (  -- once per statement
                SELECT @extschema@.site_timezone() AS tz,
                       @extschema@.setting_value('half_life')::interval AS half_life
            ), entries AS (
                SELECT e.account, e.resource_id, e.unit, e.submitter, e.job_start, e.job_end, e.amount, z.tz,
                       pg_catalog.date_trunc('month', e.job_start AT TIME ZONE z.tz) AS first_month,
                       pg_catalog.date_trunc('month', e.job_end AT TIME ZONE z.tz) AS last_month,
                       e.amount::float8 * @extschema@.decay_weight(e.job_end,
                           (pg_catalog.date_trunc('month', e.job_end AT TIME ZONE z.tz) + interval '1 month')
                               AT TIME ZONE z.tz, z.half_life) AS decayed
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
CREATE OR REPLACE FUNCTION @extschema@.compact_rollup() RETURNS bigint
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
                   @extschema@.setting_value('half_life')::interval AS half_life
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
                   sum(g.decayed * @extschema@.decay_weight(
                                            (g.end_month + interval '1 month')::timestamp AT TIME ZONE cfg.tz,
                                            (cfg.through + interval '1 month')::timestamp AT TIME ZONE cfg.tz,
                                            cfg.half_life)),
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
CREATE OR REPLACE FUNCTION @extschema@.year_start_month(pool text) RETURNS integer
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT coalesce((SELECT p.year_start_month FROM @extschema@.pool p WHERE p.name = $1),
                        @extschema@.setting_value('year_start_month')::integer)
    $$;
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
        CROSS JOIN (SELECT (SELECT @extschema@.setting_value('hours_per_year'))::numeric AS hours) h
    $$;
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
        CROSS JOIN (SELECT (SELECT @extschema@.setting_value('hours_per_year'))::numeric AS hours) h
    $$;
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
        CROSS JOIN (SELECT (SELECT @extschema@.setting_value('hours_per_year'))::numeric AS hours) h
    $$;
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
        CROSS JOIN (SELECT (SELECT @extschema@.setting_value('hours_per_year'))::numeric AS hours) h
    $$;
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
                   @extschema@.setting_value('decay') AS form,
                   @extschema@.setting_value('half_life')::interval AS half_life,
                   @extschema@.setting_value('period')::interval AS period,
                   @extschema@.setting_value('period_decay')::float8 AS decay,
                   @extschema@.setting_value('depth')::integer AS depth,
                   @extschema@.setting_value('exhausted_factor')::float8 AS penalty
            FROM (SELECT @extschema@.site_timezone() AS tz) z
        ), recent AS MATERIALIZED (
            -- the jobs read from the ledger: those that ended in the month of `at` (half-life;
            -- earlier ones are in the rollup), or in the counted periods (interval). Half-life:
            -- none when the rollup's sum of that month, decayed to the month's end, can be
            -- scaled back to `at` (closed_form): no charge of the month ends after `at` (a
            -- report of now), and the month's end is at most 64 half-lives after `at`
            SELECT cfg.*,
                   CASE cfg.form WHEN 'half_life' THEN cfg.at_month AT TIME ZONE cfg.tz
                                 ELSE cfg.at - cfg.depth * cfg.period END AS since,
                   cfg.form = 'half_life'
                   AND @extschema@.decay_weight(cfg.at, (cfg.at_month + interval '1 month') AT TIME ZONE cfg.tz,
                                                cfg.half_life) >= 2 ^ -64
                   -- (an aggregate, not NOT EXISTS: planned for all its rows, it takes the BRIN index
                   -- on job_end; an EXISTS, planned for its first row, scanned the whole ledger)
                   AND (SELECT max(l.job_end) FROM @extschema@.ledger l
                        WHERE l.kind = 'charge' AND l.job_end > $1
                          AND l.job_end < (cfg.at_month + interval '1 month') AT TIME ZONE cfg.tz) IS NULL
                       AS closed_form
            FROM cfg
        ), factors AS MATERIALIZED (
            -- half-life: how much the rollup's decayed sums of each month decay until `at`,
            -- by month number (year * 12 + month - 1) from the rollup's first month on; the
            -- month of `at` (closed form) is scaled back from its end: 1 / 2^(-(end - at) / half_life)
            SELECT f.first_index,
                   pg_catalog.array_agg(CASE WHEN m.month < w.at_month
                                             THEN @extschema@.decay_weight((m.month + interval '1 month') AT TIME ZONE w.tz,
                                                                           w.at, w.half_life)
                                             ELSE 1 / @extschema@.decay_weight(w.at, (m.month + interval '1 month') AT TIME ZONE w.tz,
                                                                               w.half_life) END
                                        ORDER BY m.month) AS factor
            FROM recent w
            CROSS JOIN (SELECT min(c.end_month) AS first_month,
                               (pg_catalog.date_part('year', min(c.end_month)) * 12
                                + pg_catalog.date_part('month', min(c.end_month)) - 1)::integer AS first_index
                        FROM @extschema@.charge_rollup c) f
            CROSS JOIN LATERAL pg_catalog.generate_series(f.first_month,
                                                          w.at_month - CASE WHEN w.closed_form THEN interval '0'
                                                                            ELSE interval '1 month' END,
                                                          interval '1 month') AS m(month)
            WHERE w.form = 'half_life'
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
            WHERE l.kind = 'charge' AND NOT w.closed_form
        ), decayed AS (
            -- usage: decayed (a sum of floats: never below 0), rounded to float8's 15 significant
            -- decimal digits (the cast to numeric), so that the closed form's last bits do not
            -- show where the job-by-job sum is a short decimal; net: exact, what makes a user count
            SELECT d.pool, d.unit, d.account, d.submitter, greatest(sum(d.usage), 0)::numeric::float8 AS usage,
                   sum(d.net) AS net
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
                -- half-life: the rollup's sums for the jobs that ended before the month of `at`
                -- (and in it, closed form), decayed from the end of the month they ended in to
                -- `at`; the rows folded into fairshare_base are read from there when it was
                -- folded before that month
                SELECT coalesce(r.pool, r.cluster), c.unit, c.account, c.submitter,
                       sum(c.decayed * (SELECT f.factor FROM factors f)[
                               (pg_catalog.date_part('year', c.end_month) * 12 + pg_catalog.date_part('month', c.end_month))::integer
                               - (SELECT f.first_index FROM factors f)]),
                       sum(c.job_amount)
                FROM (SELECT c.* FROM @extschema@.charge_rollup c WHERE NOT c.folded  -- its partial index
                      UNION ALL
                      SELECT c.* FROM @extschema@.charge_rollup c WHERE c.folded AND NOT (SELECT b.usable FROM base b)) c
                JOIN @extschema@.resource r USING (resource_id)
                WHERE (c.end_month < (SELECT w.at_month FROM recent w)
                       OR (c.end_month = (SELECT w.at_month FROM recent w) AND (SELECT w.closed_form FROM recent w)))
                  AND (SELECT w.form FROM recent w) = 'half_life'
                GROUP BY coalesce(r.pool, r.cluster), c.unit, c.account, c.submitter
                UNION ALL
                SELECT coalesce(r.pool, r.cluster), b.unit, b.account, b.submitter,
                       sum(b.decayed * @extschema@.decay_weight((b.through + interval '1 month')::timestamp AT TIME ZONE cfg.tz,
                                                                cfg.at, cfg.half_life)),
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
CREATE OR REPLACE FUNCTION @extschema@.account_month(account text, month date)
    RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        a @extschema@.account := hpcacct_internal.visible_account(account);
        m date;
        m_end date;
        tz text := @extschema@.site_timezone();
        upto date;
        y_start date;
        q date;
        result jsonb;
        section jsonb;
        sections jsonb := '{}';
        bank_unit text := @extschema@.setting_value('bank_unit');
    BEGIN
        m := hpcacct_internal.statement_month(month);
        m_end := (m + interval '1 month')::date - 1;
        upto := least(m_end, @extschema@.site_today());
        y_start := date_trunc('year', m)::date;

        -- the month's charges by resource and submitter
        SELECT jsonb_build_object(
                   'by_resource', coalesce(jsonb_agg(jsonb_build_object('cluster', r.cluster, 'partition', r.partition,
                                                                        'unit', r.unit, 'amount', r.amount)
                                                     ORDER BY r.cluster, r.partition, r.unit)
                                           FILTER (WHERE r.g = 1), '[]'),
                   'by_submitter', coalesce(jsonb_agg(jsonb_build_object('cluster', r.cluster, 'partition', r.partition,
                                                                         'unit', r.unit, 'submitter', r.submitter,
                                                                         'amount', r.amount)
                                                      ORDER BY r.cluster, r.partition, r.unit, r.submitter)
                                            FILTER (WHERE r.g = 0), '[]'),
                   'total', coalesce(jsonb_object_agg(r.unit, r.amount) FILTER (WHERE r.g = 7), '{}'))
        INTO section
        FROM (SELECT c.cluster, c.partition, c.unit, c.submitter, round(sum(c.amount), 6) AS amount,
                     GROUPING(c.cluster, c.partition, c.submitter) AS g
              FROM @extschema@.charge_by_month c
              WHERE c.account = a.name AND c.month = m
              GROUP BY GROUPING SETS ((c.cluster, c.partition, c.unit, c.submitter), (c.cluster, c.partition, c.unit), (c.unit))) r;
        sections := sections || jsonb_build_object('charges', section);

        -- usage this year by resource, with the projection to the year's end
        SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'pool', u.pool, 'cluster', u.cluster, 'partition', u.partition, 'unit', u.unit,
                   'year_start', u.first_day, 'year_end', u.last_day, 'usage', round(u.usage, 6),
                   'equivalent_hours', round(u.hours, 6),
                   'usage_years', round(u.usage / h.hours, 6),
                   'core_hours', round(u.core_hours, 6), 'core_years', round(u.core_hours / h.hours, 6),
                   'projected_usage', CASE WHEN u.elapsed > 0 THEN round(u.usage * u.year_days / u.elapsed, 6) END)
                   ORDER BY u.pool, u.cluster, u.partition), '[]')
        INTO section
        FROM (SELECT c.pool, c.cluster, c.partition, c.unit, y.first_day, y.last_day,
                     sum(c.amount) AS usage, sum(c.amount / nullif(r.rate, 0)::numeric) AS hours,
                     -- raw core-hours, unless charges whose cores are unknown (booked before 0.4,
                     -- of jobs no longer in the job table) still count
                     CASE WHEN coalesce(sum(c.amount) FILTER (WHERE c.core_hours IS NULL), 0) = 0
                          THEN coalesce(sum(c.core_hours), 0) END AS core_hours,
                     (y.last_day - y.first_day + 1)::numeric AS year_days,
                     (upto - y.first_day + 1)::numeric AS elapsed
              FROM @extschema@.charge_by_month c
              JOIN @extschema@.ledger l ON l.entry_id = c.entry_id
              JOIN @extschema@.resource r ON r.resource_id = l.resource_id
              CROSS JOIN LATERAL (
                  SELECT s.first_day, (s.first_day + interval '1 year')::date - 1 AS last_day
                  FROM (SELECT make_date(EXTRACT(year FROM m)::integer - CASE WHEN EXTRACT(month FROM m) < sm.start_month THEN 1 ELSE 0 END,
                                         sm.start_month, 1) AS first_day
                        FROM (SELECT @extschema@.year_start_month(c.pool) AS start_month) sm) s) y
              WHERE c.account = a.name AND c.month >= y.first_day AND c.month <= m
              GROUP BY c.pool, c.cluster, c.partition, c.unit, y.first_day, y.last_day, upto) u
        CROSS JOIN (SELECT @extschema@.setting_value('hours_per_year')::numeric AS hours) h;
        sections := sections || jsonb_build_object('usage_by_resource', section);

        -- GENCI: per machine with allocation events this year, the status at the end of the
        -- month (allocation_status) and the days of the year for the chart
        SELECT jsonb_agg(jsonb_build_object(
                   'machine', s.machine, 'alloc', st.alloc, 'tmc', st.tmc, 'tc', st.tc, 'consumption', st.consumption,
                   'delta', st.delta, 'status', st.status,
                   'days', (SELECT jsonb_agg(jsonb_build_array(dd.day, round(dd.tc::numeric, 2), round(dd.tmc::numeric, 2),
                                                               round(dd.consumption, 2)) ORDER BY dd.day)
                            FROM (SELECT g.day::date AS day,
                                         (SELECT coalesce(@extschema@.tc(l.valid_from, l.valid_until, l.amount::float8, g.day::date, s.month_convention)
                                                          - @extschema@.tc(l.valid_from, l.valid_until, l.amount::float8, y_start - 1, s.month_convention), 0)
                                          FROM @extschema@.ledger l
                                          WHERE l.account = a.name AND l.cluster = s.machine AND l.kind IN ('grant', 'supplement', 'retraction')
                                            AND l.valid_from <= g.day AND l.valid_until >= y_start) AS tc,
                                         (SELECT coalesce(@extschema@.tmc(l.valid_from, l.valid_until, l.amount::float8, g.day::date, s.month_convention), 0)
                                          FROM @extschema@.ledger l
                                          WHERE l.account = a.name AND l.cluster = s.machine AND l.kind IN ('grant', 'supplement', 'retraction')
                                            AND l.valid_from <= g.day AND l.valid_until >= y_start) AS tmc,
                                         (SELECT coalesce(sum(l.amount * @extschema@.period_share(l.job_start, l.job_end,
                                                                  y_start::timestamp AT TIME ZONE tz, (g.day::date + 1)::timestamp AT TIME ZONE tz)), 0)
                                          FROM @extschema@.ledger l JOIN @extschema@.resource r USING (resource_id)
                                          WHERE l.account = a.name AND l.kind = 'charge' AND coalesce(r.pool, r.cluster) = s.machine
                                            AND l.job_start < (g.day::date + 1)::timestamp AT TIME ZONE tz
                                            AND l.job_end >= y_start::timestamp AT TIME ZONE tz) AS consumption
                                  FROM generate_series(y_start, upto, interval '1 day') g(day)) dd))
               ORDER BY s.machine)
        INTO section
        FROM @extschema@.regulation_machine s
        CROSS JOIN LATERAL @extschema@.allocation_status(a.name, s.machine, upto) st
        WHERE EXISTS (SELECT 1 FROM @extschema@.ledger l
                      WHERE l.account = a.name AND l.cluster = s.machine AND l.kind IN ('grant', 'supplement', 'retraction')
                        AND l.valid_from <= upto AND l.valid_until >= y_start);
        IF section IS NOT NULL THEN
            sections := sections || jsonb_build_object('regulation', section);
        END IF;

        -- RWTH: the window quota of each month of the period up to this one
        SELECT jsonb_agg(jsonb_build_object('month', u.month, 'state', u.state, 'monthly', u.monthly,
                                            'remaining_prev', u.remaining_prev, 'consumed', u.consumed_current,
                                            'consumable_pct', u.consumable_pct, 'consumable', u.consumable,
                                            'unit', u.unit, 'period_start', u.period_start, 'period_end', u.period_end)
                         ORDER BY u.month)
        INTO section
        FROM @extschema@.quota_period p
        CROSS JOIN LATERAL generate_series(p.period_start, least(p.period_end, upto), interval '1 month') g(mon)
        CROSS JOIN LATERAL @extschema@.window_quota_usage(a.name, CASE WHEN g.mon::date = m THEN upto
                                                                         ELSE (g.mon + interval '1 month')::date - 1 END) u
        WHERE p.account = a.name AND p.period_start <= upto AND p.period_end >= y_start;
        IF section IS NOT NULL THEN
            sections := sections || jsonb_build_object('window_quota', section);
        END IF;

        -- HLRN: the quarter's allocation and the balance at the end of each day of it so far
        q := @extschema@.quarter_start(m);
        SELECT jsonb_build_object(
                   'quarter', q, 'unit', bank_unit, 'allocation', al.amount, 'state', @extschema@.account_state(a.name, upto),
                   'balance', @extschema@.balance(a.name, upto),
                   'days', (SELECT jsonb_agg(jsonb_build_array(g.day::date,
                                round(al.amount - coalesce((SELECT sum(l.amount * @extschema@.period_share(l.job_start, l.job_end,
                                                                        q::timestamp AT TIME ZONE tz, (g.day::date + 1)::timestamp AT TIME ZONE tz))
                                                            FROM @extschema@.ledger l
                                                            WHERE l.account = a.name AND l.kind = 'charge' AND l.unit = bank_unit
                                                              AND l.job_start < (g.day::date + 1)::timestamp AT TIME ZONE tz
                                                              AND l.job_end >= q::timestamp AT TIME ZONE tz), 0), 2))
                                              ORDER BY g.day)
                            FROM generate_series(q, upto, interval '1 day') g(day)))
        INTO section
        FROM (SELECT sum(l.amount) AS amount
              FROM @extschema@.ledger l
              WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer', 'refund') AND l.unit = bank_unit
                AND l.valid_from >= q AND l.valid_from < q + interval '3 months') al
        WHERE al.amount IS NOT NULL;
        IF section IS NOT NULL THEN
            sections := sections || jsonb_build_object('bank', section);
        END IF;

        RETURN jsonb_build_object('account', a.name, 'kind', a.kind, 'description', a.description,
                                  'month', to_char(m, 'YYYY-MM'), 'figures_at', upto, 'time_zone', tz)
               || sections;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.rebuild_rollup_trigger() IS
    'Trigger of hpcacct.setting: rebuilds the rollups when a setting named by its arguments changes';
-- the federation's received-charges trigger is generated from rollup_insert_sql(): again
DO $do$
DECLARE
    received constant text := '(SELECT (r.entry).* FROM pg_temp.hpcacct_received r)';
BEGIN
    EXECUTE pg_catalog.format(
        'CREATE OR REPLACE FUNCTION hpcacct_internal.roll_up_received() RETURNS trigger LANGUAGE plpgsql '
        'SET search_path = pg_catalog, pg_temp SET jit = off AS %L',
        pg_catalog.format(E'\n    BEGIN\n'
                          '        PERFORM pg_catalog.set_config(''hpcacct.received_pending'', ''off'', true);\n'
                          '        INSERT INTO @extschema@.ledger OVERRIDING SYSTEM VALUE\n'
                          '        SELECT (r.entry).* FROM pg_temp.hpcacct_received r ORDER BY (r.entry).entry_id;\n'
                          '%s;\n'
                          '%s;\n'
                          '        DELETE FROM pg_temp.hpcacct_received;\n'
                          '        RETURN NULL;\n'
                          '    END\n    ',
                          @extschema@.rollup_insert_sql(received), @extschema@.consumption_rollup_insert_sql(received)));
END
$do$;
ALTER EXTENSION hpcacct DROP VIEW @extschema@.fairshare_settings;
DROP VIEW @extschema@.fairshare_settings;
ALTER EXTENSION hpcacct DROP TABLE @extschema@.fairshare_setting;
DROP TABLE @extschema@.fairshare_setting;
DROP FUNCTION @extschema@.fairshare_setting_value(text), @extschema@.fairshare_setting_catalog(),
    hpcacct_internal.check_fairshare_setting();

-- ==== one name per area (issue 18, house) ----------------------------------------------
-- GENCI's area is called regulation: table machine_setting becomes regulation_machine,
-- theoretical_year() regulation_year(), the policy genci regulation (account.policies too).
ALTER TABLE @extschema@.machine_setting RENAME TO regulation_machine;
ALTER INDEX @extschema@.machine_setting_pkey RENAME TO regulation_machine_pkey;
DO $do$
DECLARE
    c text;
BEGIN
    FOR c IN SELECT conname FROM pg_catalog.pg_constraint
             WHERE conrelid = '@extschema@.regulation_machine'::regclass AND conname LIKE 'machine\_setting\_%' LOOP
        EXECUTE pg_catalog.format('ALTER TABLE @extschema@.regulation_machine RENAME CONSTRAINT %I TO %I',
                                  c, 'regulation_machine_' || pg_catalog.substr(c, pg_catalog.length('machine_setting_') + 1));
    END LOOP;
END
$do$;
ALTER FUNCTION @extschema@.theoretical_year(text, text, integer, text) RENAME TO regulation_year;
ALTER TABLE @extschema@.account DROP CONSTRAINT account_policies_check;
UPDATE @extschema@.account SET policies = pg_catalog.array_replace(policies, 'genci', 'regulation')
WHERE 'genci' = ANY (policies);
ALTER TABLE @extschema@.account ADD CONSTRAINT account_policies_check
    CHECK (policies OPERATOR(pg_catalog.<@) ARRAY['bank', 'window_quota', 'regulation']
           AND pg_catalog.array_position(policies, NULL) IS NULL);
CREATE OR REPLACE FUNCTION @extschema@.allocation_status(account text, machine text, at date)
    RETURNS TABLE (alloc numeric, granted numeric, tmc float8, tc float8,
                   consumption float8, delta float8, status text)
    LANGUAGE sql STABLE STRICT PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        WITH period AS (
            SELECT pg_catalog.make_date(EXTRACT(year FROM $3)::integer, 1, 1) AS year_start,
                   coalesce((SELECT s.month_convention FROM @extschema@.regulation_machine s WHERE s.machine = $2),
                            'half_month') AS convention,
                   @extschema@.site_timezone() AS tz
        ), events AS (
            SELECT coalesce(sum(l.amount), 0) AS alloc,
                   coalesce(sum(l.amount) FILTER (WHERE l.kind <> 'retraction'), 0) AS granted,
                   coalesce(@extschema@.tmc(l.valid_from, l.valid_until, l.amount::float8, $3, p.convention), 0) AS tmc,
                   coalesce(@extschema@.tc(l.valid_from, l.valid_until, l.amount::float8, $3, p.convention)
                            - @extschema@.tc(l.valid_from, l.valid_until, l.amount::float8, p.year_start - 1, p.convention),
                            0) AS tc
            FROM @extschema@.ledger l
            CROSS JOIN period p
            WHERE l.account = $1 AND l.cluster = $2 AND l.kind IN ('grant', 'supplement', 'retraction')
              AND l.valid_from <= $3 AND l.valid_until >= p.year_start
        ), used AS (
            SELECT (@extschema@.consumption_before($1, $2, ($3 + 1)::timestamp AT TIME ZONE p.tz)
                    - @extschema@.consumption_before($1, $2, p.year_start::timestamp AT TIME ZONE p.tz))::float8
                   AS consumption
            FROM period p
        )
        SELECT e.alloc, e.granted, e.tmc, e.tc, u.consumption, u.consumption - e.tc,
               @extschema@.regulation_status(u.consumption, e.tc, e.tmc)
        FROM events e CROSS JOIN used u
    $$;
CREATE OR REPLACE FUNCTION @extschema@.regulation_year(account text, machine text, year integer, convention text DEFAULT NULL)
    RETURNS TABLE (first_day date, last_day date, alloc numeric, tmc float8, tc float8)
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        y_start date;
        y_end   date;
        conv    text;
    BEGIN
        IF $1 IS NULL OR $2 IS NULL OR $3 IS NULL THEN
            RAISE EXCEPTION 'account, machine and year must not be NULL'
                USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF NOT EXISTS (SELECT 1 FROM @extschema@.account a WHERE a.name = $1) THEN
            RAISE EXCEPTION 'unknown account "%"', $1 USING ERRCODE = 'undefined_object';
        END IF;
        IF $3 NOT BETWEEN 1401 AND 9999 THEN
            RAISE EXCEPTION 'year % is outside the supported range 1401 to 9999', $3
                USING ERRCODE = 'datetime_field_overflow';
        END IF;
        y_start := make_date($3, 1, 1);
        y_end := make_date($3, 12, 31);
        conv := coalesce($4, (SELECT s.month_convention FROM @extschema@.regulation_machine s WHERE s.machine = $2),
                         'half_month');
        RETURN QUERY
        WITH events AS (
            SELECT l.valid_from AS f, l.valid_until AS u, l.amount AS a
            FROM @extschema@.ledger l
            WHERE l.account = $1 AND l.cluster = $2 AND l.kind IN ('grant', 'supplement', 'retraction')
              AND l.valid_from <= y_end AND l.valid_until >= y_start
        ), bounds AS (
            SELECT b.day
            FROM (SELECT y_start UNION SELECT e.f FROM events e UNION SELECT e.u + 1 FROM events e) AS b(day)
            WHERE b.day BETWEEN y_start AND y_end
        ), intervals AS (
            SELECT b.day AS d0, coalesce(lead(b.day) OVER (ORDER BY b.day) - 1, y_end) AS d1
            FROM bounds b
        )
        SELECT i.d0, i.d1,
               (SELECT coalesce(sum(e.a), 0) FROM events e WHERE e.f <= i.d0),
               (SELECT coalesce(@extschema@.tmc(e.f, e.u, e.a::float8, i.d0, conv), 0) FROM events e),
               (SELECT coalesce(@extschema@.tc(e.f, e.u, e.a::float8, i.d1, conv)
                                - @extschema@.tc(e.f, e.u, e.a::float8, y_start - 1, conv), 0)
                FROM events e)
        FROM intervals i
        ORDER BY i.d0;
    END
    $$;
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
        -- pass over the allocations, consumption as consumption_before() computes it, summed
        -- exactly (numeric): a charge wholly inside the period counts its amount, a charge
        -- across one of its ends its share before the end minus its share before the start.
        -- A monthly run's period runs from 1 January to the 16th, both boundaries of the
        -- consumption rollup, which holds those very terms: it reads the rollup. An annual
        -- run's ends at 1 May or 1 June: it reads the year's charges one by one.
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
            JOIN @extschema@.regulation_machine s ON s.machine = l.cluster
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
            WHERE kind_of_run <> 'monthly' AND l.kind = 'charge' AND l.job_start < b.b2 AND l.job_end >= b.b1
            GROUP BY l.account, l.resource_id
            UNION ALL
            -- consumption before 16th minus consumption before 1 January: the amounts of the
            -- jobs ended by a boundary in between (the 16th included), the shares before the
            -- 16th of the jobs running across it, minus those before 1 January
            SELECT c.account, c.resource_id,
                   sum(CASE WHEN c.boundary = y_start THEN -c.running
                            WHEN c.boundary = as_of + 1 THEN c.ended + c.running
                            ELSE c.ended END)
            FROM @extschema@.consumption_rollup c
            WHERE kind_of_run = 'monthly' AND c.boundary BETWEEN y_start AND as_of + 1
            GROUP BY c.account, c.resource_id
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
CREATE OR REPLACE FUNCTION @extschema@.account_policies(account text) RETURNS text[]
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        a record;
        has_quota boolean;
        has_regulation boolean;
        has_bank boolean;
    BEGIN
        SELECT x.name, x.kind, x.policies INTO a FROM @extschema@.account x WHERE x.name = account_policies.account;
        IF NOT FOUND THEN
            RETURN NULL;
        ELSIF a.policies IS NOT NULL THEN
            RETURN a.policies;
        ELSIF a.kind = 'special' THEN
            RETURN '{}'::text[];
        END IF;
        has_quota := EXISTS (SELECT 1 FROM @extschema@.quota_period p WHERE p.account = a.name);
        has_regulation := EXISTS (SELECT 1 FROM @extschema@.ledger l
                             WHERE l.account = a.name AND l.kind IN ('grant', 'supplement'));
        IF a.kind = 'personal' OR NOT (has_quota OR has_regulation) THEN
            has_bank := true;
        ELSE
            has_bank := EXISTS (SELECT 1 FROM @extschema@.ledger l
                                WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer', 'refund')
                                  AND l.unit = @extschema@.bank_unit());
        END IF;
        RETURN pg_catalog.array_remove(ARRAY[CASE WHEN has_bank THEN 'bank' END,
                                             CASE WHEN has_quota THEN 'window_quota' END,
                                             CASE WHEN has_regulation THEN 'regulation' END], NULL);
    END
    $$;
CREATE OR REPLACE FUNCTION @extschema@.account_verdict(account text, at date DEFAULT @extschema@.site_today())
    RETURNS @extschema@.submit_decision
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        a record;
        pol text[];
        bank record;
        wq record;
        machines integer;
        open_machines integer;
        reason text;
        message text;
    BEGIN
        at := hpcacct_internal.day_or_today(at, 'check_submit');  -- NULL: today; infinite: 22008
        SELECT x.name, x.deleted_in INTO a FROM @extschema@.account x WHERE x.name = account_verdict.account;
        IF NOT FOUND THEN
            RETURN ROW(false, account, 'unknown_account',
                       format('account %s does not exist: check the account you gave (sbatch -A)', account))::@extschema@.submit_decision;
        ELSIF a.deleted_in IS NOT NULL AND a.deleted_in <= at THEN
            RETURN ROW(false, account, 'account_deleted',
                       format('account %s has been deleted and cannot be used again', account))::@extschema@.submit_decision;
        END IF;
        pol := @extschema@.account_policies(account);

        IF 'bank' = ANY (pol) THEN
            SELECT b.state, b.next_allocation, b.balance INTO bank FROM @extschema@.bank_state(a.name, at) b;
            IF bank.state = 'expired' THEN
                RETURN ROW(false, account, 'account_expired',
                           format('account %s has no allocation for this or a later quarter: ask for a new '
                                  'allocation, or submit with another account (sbatch -A)', account))::@extschema@.submit_decision;
            ELSIF bank.state = 'inactive' THEN
                RETURN ROW(false, account, 'account_inactive',
                           format('account %s has no allocation for this quarter; its allocation begins on %s: '
                                  'ask staff to move allocation into this quarter, or submit with another account',
                                  account, bank.next_allocation))::@extschema@.submit_decision;
            ELSIF bank.balance < 0 THEN
                RETURN ROW(false, account, 'negative_balance',
                           format('account %s has a negative balance this quarter (%s %s): ask for a transfer '
                                  'or a deposit, or submit with another account',
                                  account, pg_catalog.trim_scale(bank.balance), @extschema@.bank_unit()))::@extschema@.submit_decision;
            END IF;
        END IF;

        IF 'window_quota' = ANY (pol) THEN
            SELECT u.state, u.monthly, u.consumed_current, u.unit INTO wq
            FROM @extschema@.window_quota_usage(a.name, at) u;
            IF wq.state = 'blocked' THEN
                RETURN ROW(false, account, 'quota_blocked',
                           format('account %s is blocked by its sliding-window quota (%s %s used this month, '
                                  'monthly allowance %s): submit with another account',
                                  account, round(wq.consumed_current::numeric, 2), wq.unit,
                                  round(wq.monthly::numeric, 2)))::@extschema@.submit_decision;
            END IF;
        END IF;

        IF 'regulation' = ANY (pol) THEN
            SELECT count(*), count(*) FILTER (WHERE s.tmc > 0 AND s.consumption < s.alloc)
            INTO machines, open_machines
            FROM (SELECT DISTINCT l.cluster FROM @extschema@.ledger l
                  WHERE l.account = a.name AND l.kind IN ('grant', 'supplement', 'retraction')
                    AND l.valid_from <= at AND l.valid_until >= at) m
            CROSS JOIN LATERAL @extschema@.allocation_status(a.name, m.cluster, at) s;
            IF machines = 0 THEN
                RETURN ROW(false, account, 'no_allocation',
                           format('account %s has no allocation valid on %s: submit with another account', account, at))::@extschema@.submit_decision;
            ELSIF open_machines = 0 THEN
                RETURN ROW(false, account, 'allocation_exhausted',
                           format('account %s has used up its allocation (after retractions): ask for a supplement, '
                                  'or submit with another account', account))::@extschema@.submit_decision;
            END IF;
        END IF;

        RETURN ROW(true, account, NULL::text, NULL::text)::@extschema@.submit_decision;
    END
    $$;
CREATE OR REPLACE FUNCTION hpcacct_internal.notify_regulation() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM @extschema@.outbox_add_all(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
            'topic', x.topic, 'decision_key', pg_catalog.concat_ws('/', r.account, r.machine, r.run_date, r.run),
            'account', r.account,
            'subject', pg_catalog.format('[hpcacct] %s on %s: %s (%s)', r.account, r.machine,
                                         CASE x.topic WHEN 'regulation_warning' THEN 'under-consumption warning'
                                                      WHEN 'regulation_retraction' THEN 'hours retracted'
                                                      WHEN 'annual_warning' THEN 'annual under-consumption warning'
                                                      ELSE 'annual retraction' END, r.run_date),
            'body', E'Dear project manager,\n\n' || CASE x.topic
                WHEN 'regulation_warning' THEN pg_catalog.format(
                    E'On %s project %s had consumed %s hours on %s, against a theoretical consumption TC of %s hours:\n'
                    'an under-consumption of %s hours, between one and two theoretical monthly consumptions\n'
                    '(TMC = %s hours). No hours are retracted now; should the under-consumption reach twice the TMC\n'
                    'on a later 15th, a TMC of hours will be retracted from the allocation.',
                    r.figures_at, r.account, hpcacct_internal.notify_number(r.consumption::numeric), r.machine,
                    hpcacct_internal.notify_number(r.tc::numeric), hpcacct_internal.notify_number(-r.delta::numeric),
                    hpcacct_internal.notify_number(r.tmc::numeric))
                WHEN 'regulation_retraction' THEN pg_catalog.format(
                    E'On %s project %s had consumed %s hours on %s, against a theoretical consumption TC of %s hours:\n'
                    'an under-consumption of %s hours, at least twice the theoretical monthly consumption\n'
                    '(TMC = %s hours). %s hours (one TMC) are retracted from the allocation, effective %s and\n'
                    'valid until 31 December: the allocation goes from %s to %s hours.',
                    r.figures_at, r.account, hpcacct_internal.notify_number(r.consumption::numeric), r.machine,
                    hpcacct_internal.notify_number(r.tc::numeric), hpcacct_internal.notify_number(-r.delta::numeric),
                    hpcacct_internal.notify_number(r.tmc::numeric), hpcacct_internal.notify_number(r.retracted),
                    r.run_date, hpcacct_internal.notify_number(r.alloc), hpcacct_internal.notify_number(r.alloc - r.retracted))
                WHEN 'annual_warning' THEN pg_catalog.format(
                    E'By the end of %s project %s had used %s of its %s hours on %s (%s %%), less than the %s %%\n'
                    'expected in the first five months. Unless a justification reaches GENCI before the end of May,\n'
                    'up to %s %% of the annual allocation may be retracted after May.',
                    r.figures_at, r.account, hpcacct_internal.notify_number(r.consumption::numeric),
                    hpcacct_internal.notify_number(r.alloc), r.machine, pg_catalog.round(r.used_percent::numeric, 1),
                    s.annual_warning_percent, s.annual_retraction_percent)
                ELSE pg_catalog.format(
                    E'By the end of %s project %s had used %s of its %s hours on %s (%s %%), less than %s %%,\n'
                    'and it was not exonerated. %s hours are retracted from the allocation, effective %s: it goes\n'
                    'from %s to %s hours.',
                    r.figures_at, r.account, hpcacct_internal.notify_number(r.consumption::numeric),
                    hpcacct_internal.notify_number(r.alloc), r.machine, pg_catalog.round(r.used_percent::numeric, 1),
                    s.annual_warning_percent, hpcacct_internal.notify_number(r.retracted), r.run_date,
                    hpcacct_internal.notify_number(r.alloc), hpcacct_internal.notify_number(r.alloc - r.retracted))
            END || E'\n\n'
            || pg_catalog.format(E'Figures at the end of %s:\n  Alloc        %s\n  TMC          %s\n  TC           %s\n'
                                 '  consumption  %s\n  delta        %s\n  retracted    %s\n',
                                 r.figures_at, hpcacct_internal.notify_number(r.alloc), hpcacct_internal.notify_number(r.tmc::numeric),
                                 hpcacct_internal.notify_number(r.tc::numeric), hpcacct_internal.notify_number(r.consumption::numeric),
                                 hpcacct_internal.notify_number(r.delta::numeric), hpcacct_internal.notify_number(r.retracted)),
            'figures', pg_catalog.jsonb_build_object('run_date', r.run_date, 'run', r.run, 'machine', r.machine,
                                                     'figures_at', r.figures_at, 'alloc', r.alloc, 'tmc', r.tmc, 'tc', r.tc,
                                                     'consumption', r.consumption, 'delta', r.delta,
                                                     'used_percent', r.used_percent, 'retracted', r.retracted))))
        FROM new_rows r
        JOIN @extschema@.regulation_machine s ON s.machine = r.machine
        CROSS JOIN LATERAL (SELECT CASE r.run WHEN 'monthly' THEN 'regulation_' || r.outcome ELSE r.run END AS topic) x
        WHERE (r.run = 'monthly' AND r.outcome IN ('warning', 'retraction'))
           OR (r.run = 'annual_warning' AND r.outcome = 'warning')
           OR (r.run = 'annual_retraction' AND r.outcome = 'retraction');
        RETURN NULL;
    END
    $$;
CREATE OR REPLACE FUNCTION @extschema@.federation_reference_tables() RETURNS regclass[]
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT ARRAY['@extschema@.setting', '@extschema@.account', '@extschema@.resource',
                     '@extschema@.hpc_user', '@extschema@.membership', '@extschema@.regulation_machine',
                     '@extschema@.exoneration', '@extschema@.quota_period', '@extschema@.monthly_allowance',
                     '@extschema@.pool', '@extschema@.fairshare_user',
                     '@extschema@.slurm_account_map']::text[]::regclass[]
    $$;
CREATE OR REPLACE FUNCTION @extschema@.account_month(account text, month date)
    RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        a @extschema@.account := hpcacct_internal.visible_account(account);
        m date;
        m_end date;
        tz text := @extschema@.site_timezone();
        upto date;
        y_start date;
        q date;
        result jsonb;
        section jsonb;
        sections jsonb := '{}';
        bank_unit text := @extschema@.setting_value('bank_unit');
    BEGIN
        m := hpcacct_internal.statement_month(month);
        m_end := (m + interval '1 month')::date - 1;
        upto := least(m_end, @extschema@.site_today());
        y_start := date_trunc('year', m)::date;

        -- the month's charges by resource and submitter
        SELECT jsonb_build_object(
                   'by_resource', coalesce(jsonb_agg(jsonb_build_object('cluster', r.cluster, 'partition', r.partition,
                                                                        'unit', r.unit, 'amount', r.amount)
                                                     ORDER BY r.cluster, r.partition, r.unit)
                                           FILTER (WHERE r.g = 1), '[]'),
                   'by_submitter', coalesce(jsonb_agg(jsonb_build_object('cluster', r.cluster, 'partition', r.partition,
                                                                         'unit', r.unit, 'submitter', r.submitter,
                                                                         'amount', r.amount)
                                                      ORDER BY r.cluster, r.partition, r.unit, r.submitter)
                                            FILTER (WHERE r.g = 0), '[]'),
                   'total', coalesce(jsonb_object_agg(r.unit, r.amount) FILTER (WHERE r.g = 7), '{}'))
        INTO section
        FROM (SELECT c.cluster, c.partition, c.unit, c.submitter, round(sum(c.amount), 6) AS amount,
                     GROUPING(c.cluster, c.partition, c.submitter) AS g
              FROM @extschema@.charge_by_month c
              WHERE c.account = a.name AND c.month = m
              GROUP BY GROUPING SETS ((c.cluster, c.partition, c.unit, c.submitter), (c.cluster, c.partition, c.unit), (c.unit))) r;
        sections := sections || jsonb_build_object('charges', section);

        -- usage this year by resource, with the projection to the year's end
        SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'pool', u.pool, 'cluster', u.cluster, 'partition', u.partition, 'unit', u.unit,
                   'year_start', u.first_day, 'year_end', u.last_day, 'usage', round(u.usage, 6),
                   'equivalent_hours', round(u.hours, 6),
                   'usage_years', round(u.usage / h.hours, 6),
                   'core_hours', round(u.core_hours, 6), 'core_years', round(u.core_hours / h.hours, 6),
                   'projected_usage', CASE WHEN u.elapsed > 0 THEN round(u.usage * u.year_days / u.elapsed, 6) END)
                   ORDER BY u.pool, u.cluster, u.partition), '[]')
        INTO section
        FROM (SELECT c.pool, c.cluster, c.partition, c.unit, y.first_day, y.last_day,
                     sum(c.amount) AS usage, sum(c.amount / nullif(r.rate, 0)::numeric) AS hours,
                     -- raw core-hours, unless charges whose cores are unknown (booked before 0.4,
                     -- of jobs no longer in the job table) still count
                     CASE WHEN coalesce(sum(c.amount) FILTER (WHERE c.core_hours IS NULL), 0) = 0
                          THEN coalesce(sum(c.core_hours), 0) END AS core_hours,
                     (y.last_day - y.first_day + 1)::numeric AS year_days,
                     (upto - y.first_day + 1)::numeric AS elapsed
              FROM @extschema@.charge_by_month c
              JOIN @extschema@.ledger l ON l.entry_id = c.entry_id
              JOIN @extschema@.resource r ON r.resource_id = l.resource_id
              CROSS JOIN LATERAL (
                  SELECT s.first_day, (s.first_day + interval '1 year')::date - 1 AS last_day
                  FROM (SELECT make_date(EXTRACT(year FROM m)::integer - CASE WHEN EXTRACT(month FROM m) < sm.start_month THEN 1 ELSE 0 END,
                                         sm.start_month, 1) AS first_day
                        FROM (SELECT @extschema@.year_start_month(c.pool) AS start_month) sm) s) y
              WHERE c.account = a.name AND c.month >= y.first_day AND c.month <= m
              GROUP BY c.pool, c.cluster, c.partition, c.unit, y.first_day, y.last_day, upto) u
        CROSS JOIN (SELECT @extschema@.setting_value('hours_per_year')::numeric AS hours) h;
        sections := sections || jsonb_build_object('usage_by_resource', section);

        -- GENCI: per machine with allocation events this year, the status at the end of the
        -- month (allocation_status) and the days of the year for the chart
        SELECT jsonb_agg(jsonb_build_object(
                   'machine', s.machine, 'alloc', st.alloc, 'tmc', st.tmc, 'tc', st.tc, 'consumption', st.consumption,
                   'delta', st.delta, 'status', st.status,
                   'days', (SELECT jsonb_agg(jsonb_build_array(dd.day, round(dd.tc::numeric, 2), round(dd.tmc::numeric, 2),
                                                               round(dd.consumption, 2)) ORDER BY dd.day)
                            FROM (SELECT g.day::date AS day,
                                         (SELECT coalesce(@extschema@.tc(l.valid_from, l.valid_until, l.amount::float8, g.day::date, s.month_convention)
                                                          - @extschema@.tc(l.valid_from, l.valid_until, l.amount::float8, y_start - 1, s.month_convention), 0)
                                          FROM @extschema@.ledger l
                                          WHERE l.account = a.name AND l.cluster = s.machine AND l.kind IN ('grant', 'supplement', 'retraction')
                                            AND l.valid_from <= g.day AND l.valid_until >= y_start) AS tc,
                                         (SELECT coalesce(@extschema@.tmc(l.valid_from, l.valid_until, l.amount::float8, g.day::date, s.month_convention), 0)
                                          FROM @extschema@.ledger l
                                          WHERE l.account = a.name AND l.cluster = s.machine AND l.kind IN ('grant', 'supplement', 'retraction')
                                            AND l.valid_from <= g.day AND l.valid_until >= y_start) AS tmc,
                                         (SELECT coalesce(sum(l.amount * @extschema@.period_share(l.job_start, l.job_end,
                                                                  y_start::timestamp AT TIME ZONE tz, (g.day::date + 1)::timestamp AT TIME ZONE tz)), 0)
                                          FROM @extschema@.ledger l JOIN @extschema@.resource r USING (resource_id)
                                          WHERE l.account = a.name AND l.kind = 'charge' AND coalesce(r.pool, r.cluster) = s.machine
                                            AND l.job_start < (g.day::date + 1)::timestamp AT TIME ZONE tz
                                            AND l.job_end >= y_start::timestamp AT TIME ZONE tz) AS consumption
                                  FROM generate_series(y_start, upto, interval '1 day') g(day)) dd))
               ORDER BY s.machine)
        INTO section
        FROM @extschema@.regulation_machine s
        CROSS JOIN LATERAL @extschema@.allocation_status(a.name, s.machine, upto) st
        WHERE EXISTS (SELECT 1 FROM @extschema@.ledger l
                      WHERE l.account = a.name AND l.cluster = s.machine AND l.kind IN ('grant', 'supplement', 'retraction')
                        AND l.valid_from <= upto AND l.valid_until >= y_start);
        IF section IS NOT NULL THEN
            sections := sections || jsonb_build_object('regulation', section);
        END IF;

        -- RWTH: the window quota of each month of the period up to this one
        SELECT jsonb_agg(jsonb_build_object('month', u.month, 'state', u.state, 'monthly', u.monthly,
                                            'remaining_prev', u.remaining_prev, 'consumed', u.consumed_current,
                                            'consumable_pct', u.consumable_pct, 'consumable', u.consumable,
                                            'unit', u.unit, 'period_start', u.period_start, 'period_end', u.period_end)
                         ORDER BY u.month)
        INTO section
        FROM @extschema@.quota_period p
        CROSS JOIN LATERAL generate_series(p.period_start, least(p.period_end, upto), interval '1 month') g(mon)
        CROSS JOIN LATERAL @extschema@.window_quota_usage(a.name, CASE WHEN g.mon::date = m THEN upto
                                                                         ELSE (g.mon + interval '1 month')::date - 1 END) u
        WHERE p.account = a.name AND p.period_start <= upto AND p.period_end >= y_start;
        IF section IS NOT NULL THEN
            sections := sections || jsonb_build_object('window_quota', section);
        END IF;

        -- HLRN: the quarter's allocation and the balance at the end of each day of it so far
        q := @extschema@.quarter_start(m);
        SELECT jsonb_build_object(
                   'quarter', q, 'unit', bank_unit, 'allocation', al.amount, 'state', @extschema@.account_state(a.name, upto),
                   'balance', @extschema@.balance(a.name, upto),
                   'days', (SELECT jsonb_agg(jsonb_build_array(g.day::date,
                                round(al.amount - coalesce((SELECT sum(l.amount * @extschema@.period_share(l.job_start, l.job_end,
                                                                        q::timestamp AT TIME ZONE tz, (g.day::date + 1)::timestamp AT TIME ZONE tz))
                                                            FROM @extschema@.ledger l
                                                            WHERE l.account = a.name AND l.kind = 'charge' AND l.unit = bank_unit
                                                              AND l.job_start < (g.day::date + 1)::timestamp AT TIME ZONE tz
                                                              AND l.job_end >= q::timestamp AT TIME ZONE tz), 0), 2))
                                              ORDER BY g.day)
                            FROM generate_series(q, upto, interval '1 day') g(day)))
        INTO section
        FROM (SELECT sum(l.amount) AS amount
              FROM @extschema@.ledger l
              WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer', 'refund') AND l.unit = bank_unit
                AND l.valid_from >= q AND l.valid_from < q + interval '3 months') al
        WHERE al.amount IS NOT NULL;
        IF section IS NOT NULL THEN
            sections := sections || jsonb_build_object('bank', section);
        END IF;

        RETURN jsonb_build_object('account', a.name, 'kind', a.kind, 'description', a.description,
                                  'month', to_char(m, 'YYYY-MM'), 'figures_at', upto, 'time_zone', tz)
               || sections;
    END
    $$;
CREATE OR REPLACE FUNCTION @extschema@.my_accounts(at date DEFAULT @extschema@.site_today())
    RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        bank_unit text := @extschema@.setting_value('bank_unit');
        result jsonb;
    BEGIN
        IF at IS NULL THEN
            RAISE EXCEPTION 'a date is needed' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF NOT isfinite(at) THEN
            RAISE EXCEPTION 'the date must be finite' USING ERRCODE = 'datetime_field_overflow';
        END IF;
        SELECT jsonb_build_object('user', session_user, 'at', at, 'accounts', coalesce(jsonb_agg(x.item ORDER BY x.name), '[]'))
        INTO result
        FROM (SELECT a.name,
                     jsonb_strip_nulls(jsonb_build_object(
                         'account', a.name, 'kind', a.kind, 'description', a.description,
                         'role', (SELECT m.role FROM @extschema@.membership m WHERE m.account = a.name AND m.username = session_user),
                         'bank', CASE WHEN EXISTS (SELECT 1 FROM @extschema@.ledger l
                                                   WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer') AND l.unit = bank_unit)
                                      THEN jsonb_build_object('state', @extschema@.account_state(a.name, at),
                                                              'balance', @extschema@.balance(a.name, at), 'unit', bank_unit,
                                                              'quarter', @extschema@.quarter_start(at)) END,
                         'quota', (SELECT jsonb_build_object('state', u.state, 'monthly', u.monthly,
                                                             'remaining_prev', u.remaining_prev, 'consumed', u.consumed_current,
                                                             'consumable_pct', u.consumable_pct, 'consumable', u.consumable,
                                                             'unit', u.unit)
                                   FROM @extschema@.window_quota_usage(a.name, at) u
                                   WHERE EXISTS (SELECT 1 FROM @extschema@.quota_period p WHERE p.account = a.name)),
                         'regulation', (SELECT jsonb_agg(jsonb_build_object('machine', s.machine, 'alloc', st.alloc,
                                                                            'tmc', round(st.tmc::numeric, 2), 'tc', round(st.tc::numeric, 2),
                                                                            'consumption', round(st.consumption::numeric, 2),
                                                                            'delta', round(st.delta::numeric, 2), 'status', st.status)
                                                         ORDER BY s.machine)
                                        FROM @extschema@.regulation_machine s
                                        CROSS JOIN LATERAL @extschema@.allocation_status(a.name, s.machine, at) st
                                        WHERE EXISTS (SELECT 1 FROM @extschema@.ledger l
                                                      WHERE l.account = a.name AND l.cluster = s.machine
                                                        AND l.kind IN ('grant', 'supplement', 'retraction')
                                                        AND l.valid_from <= at
                                                        AND l.valid_until >= date_trunc('year', at)::date)),
                         'this_month', (SELECT jsonb_object_agg(t.unit, t.amount)
                                        FROM (SELECT c.unit, round(sum(c.amount), 6) AS amount
                                              FROM @extschema@.charge_by_month c
                                              WHERE c.account = a.name AND c.month = date_trunc('month', at)::date
                                              GROUP BY c.unit) t))) AS item
              FROM @extschema@.account a
              WHERE a.deleted_in IS NULL OR a.deleted_in > at) x;
        RETURN result;
    END
    $$;
CREATE OR REPLACE FUNCTION hpcacct_internal.grant_submit_role() RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        GRANT USAGE ON SCHEMA @extschema@, hpcacct_internal TO hpcacct_submit;
        GRANT SELECT ON @extschema@.account, @extschema@.hpc_user, @extschema@.membership, @extschema@.ledger,
                        @extschema@.charge_rollup, @extschema@.setting, @extschema@.settings, @extschema@.resource,
                        @extschema@.quota_period, @extschema@.monthly_allowance, @extschema@.regulation_machine
            TO hpcacct_submit;
        GRANT EXECUTE ON FUNCTION @extschema@.check_submit(text, text, date) TO hpcacct_submit;
    END
    $$;
COMMENT ON COLUMN @extschema@.account.policies IS
    'Submit rules that bind the account: bank, window_quota, regulation; {} none (staff); NULL derived (account_policies)';
COMMENT ON TABLE @extschema@.regulation_machine IS
    'GENCI regulation settings per machine (ledger cluster): monthly threshold, annual percentages, month convention';
COMMENT ON COLUMN @extschema@.regulation_machine.monthly_threshold IS
    'An account whose grants and supplements for the year on the machine reach this many hours is regulated monthly, otherwise annually';
COMMENT ON COLUMN @extschema@.regulation_machine.annual_warning_percent IS
    'Annual regulation: accounts that used less than this percentage of their allocation are warned (1 May) and lose hours (1 June)';
COMMENT ON COLUMN @extschema@.regulation_machine.annual_retraction_percent IS
    'Annual regulation: percentage of the allocation retracted on 1 June from an under-consuming account that is not exonerated';
COMMENT ON COLUMN @extschema@.regulation_machine.month_convention IS
    'How validity windows are measured in months: half_month (the GENCI document) or day (exact fractions)';
COMMENT ON FUNCTION @extschema@.regulation_year(text, text, integer, text) IS
    'An account''s year on a machine as the GENCI table: intervals of constant Alloc and TMC, with TC at each interval''s last day (convention: the machine''s unless given)';
COMMENT ON FUNCTION @extschema@.account_policies(text) IS
    'Submit rules binding an account: account.policies, or derived (special: none; window_quota with a quota period; '
    'regulation with a grant; bank with bank entries, for personal accounts, or when nothing else binds it)';

-- ==== fewer duplicates (issue 18, house) -----------------------------------------------
-- deposit() and refund() share hpcacct_internal.book_credit().
CREATE OR REPLACE FUNCTION hpcacct_internal.book_credit(account text, kind text, quarter date, amount numeric, note text)
    RETURNS bigint
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM hpcacct_internal.require_bank_account(account);
        PERFORM hpcacct_internal.require_amount(amount);
        RETURN hpcacct_internal.book_allocation(account, kind, quarter, amount, note);
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.book_credit(text, text, date, numeric, text) IS
    'Books a deposit or refund of a positive amount to an account that exists and is not deleted';
CREATE OR REPLACE FUNCTION @extschema@.deposit(account text, quarter date, amount numeric, note text DEFAULT NULL)
    RETURNS bigint LANGUAGE sql RETURN hpcacct_internal.book_credit(account, 'deposit', quarter, amount, note);
CREATE OR REPLACE FUNCTION @extschema@.refund(account text, quarter date, amount numeric, note text DEFAULT NULL)
    RETURNS bigint LANGUAGE sql RETURN hpcacct_internal.book_credit(account, 'refund', quarter, amount, note);
REVOKE EXECUTE ON FUNCTION hpcacct_internal.book_credit(text, text, date, numeric, text) FROM PUBLIC;

-- ---- ingestion: the rollups convert each job's times once per row (issue 19 item 4) -----
CREATE OR REPLACE FUNCTION @extschema@.rollup_insert_sql(source text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT pg_catalog.format($q$
            WITH z AS MATERIALIZED (  -- once per statement
                SELECT @extschema@.site_timezone() AS tz,
                       @extschema@.fairshare_setting_value('half_life')::interval AS half_life
            ), entries AS (
                SELECT e.account, e.resource_id, e.unit, e.submitter, e.job_start, e.job_end, e.amount, e.tz,
                       e.first_month, e.last_month,
                       e.amount::float8 * @extschema@.decay_weight(e.job_end,
                           (e.last_month + interval '1 month') AT TIME ZONE e.tz, e.half_life) AS decayed
                FROM (SELECT e.account, e.resource_id, e.unit, e.submitter, e.job_start, e.job_end, e.amount, z.tz,
                             z.half_life, pg_catalog.date_trunc('month', e.job_start AT TIME ZONE z.tz) AS first_month,
                             pg_catalog.date_trunc('month', e.job_end AT TIME ZONE z.tz) AS last_month
                      FROM %s e, z
                      WHERE e.kind = 'charge'
                      OFFSET 0) e  -- each month once per row, not once per use
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
CREATE OR REPLACE FUNCTION @extschema@.consumption_rollup_insert_sql(source text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT pg_catalog.format($q$
            WITH z AS MATERIALIZED (
                SELECT @extschema@.site_timezone() AS tz
            ), entries AS (
                SELECT e.account, e.resource_id, e.job_start, e.job_end, e.amount, e.tz,
                       -- ended by: the first boundary at or after the end (a job of zero length:
                       -- after its start, where it counts)
                       @extschema@.regulation_boundary_after(
                           CASE WHEN e.job_end > e.job_start THEN e.local_end - interval '1 microsecond'
                                ELSE e.local_start END) AS ended_by,
                       @extschema@.regulation_boundary_after(e.local_start) AS first_after_start
                FROM (SELECT e.account, e.resource_id, e.job_start, e.job_end, e.amount, z.tz,
                             e.job_start AT TIME ZONE z.tz AS local_start, e.job_end AT TIME ZONE z.tz AS local_end
                      FROM %s e, z
                      WHERE e.kind = 'charge'
                      OFFSET 0) e  -- local times once per row, not once per use in the inlined function
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
-- (roll_up_charges and federation's roll_up_received are generated again at the end)
-- end of ingestion rollups

-- federation: rows pending per link (issue 17) -------------------------------------------
-- Each receiver reports the last ledger row it received per origin (federation_received,
-- replicated back to the sender), so that federation_status counts, at the sender, the rows
-- a link has not delivered yet; at a site every link's other end is the centre (site 0).
-- note_replicated_charge and roll_up_received, which write the reports: final definitions.
-- A federation made by an earlier build of 0.4: run federation_publish / federation_join again
-- and refresh the subscriptions they name (their warnings say which).
CREATE TABLE @extschema@.federation_received (
    receiver      integer NOT NULL CHECK (receiver BETWEEN 0 AND 32767),
    origin        integer NOT NULL CHECK (origin BETWEEN 0 AND 32767),
    last_entry_id bigint NOT NULL,
    received_at   timestamptz NOT NULL,
    PRIMARY KEY (receiver, origin)
);
COMMENT ON TABLE @extschema@.federation_received IS
    'Per federation database and origin site: the last ledger row that database received from that origin '
    '(written where received, replicated back to the sender)';
CREATE OR REPLACE FUNCTION hpcacct_internal.federation_report_due(receiver integer, origin integer) RETURNS boolean
    LANGUAGE sql STABLE STRICT
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT NOT EXISTS (SELECT 1 FROM @extschema@.federation_received p
                           WHERE p.receiver = federation_report_due.receiver AND p.origin = federation_report_due.origin
                             AND p.received_at > pg_catalog.now() - interval '1 second'
                             AND p.received_at < pg_catalog.now())
    $$;
COMMENT ON FUNCTION hpcacct_internal.federation_report_due(integer, integer) IS
    'Whether this database reports now the rows of an origin it received (at most one report a second)';
-- Whether publication `pub` of this database includes table `tab`.
CREATE OR REPLACE FUNCTION hpcacct_internal.federation_publishes(pub text, tab regclass) RETURNS boolean
    LANGUAGE sql STABLE STRICT
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_publication_rel r JOIN pg_catalog.pg_publication p ON p.oid = r.prpubid
                       WHERE p.pubname = pub AND r.prrelid = tab)
    $$;
COMMENT ON FUNCTION hpcacct_internal.federation_publishes(text, regclass) IS
    'Whether the publication of that name includes the table';
CREATE OR REPLACE VIEW @extschema@.federation_status WITH (security_invoker = true) AS
    WITH links AS (
        SELECT (pg_catalog.regexp_match(s.subname, '^hpcacct_fed_(c2s|s2c)_([0-9]+)$'))[2]::integer AS link_site,
               s.subname AS link, 'from' AS direction, s.subenabled AS enabled
        FROM pg_catalog.pg_subscription s
        WHERE s.subname ~ '^hpcacct_fed_(c2s|s2c)_[0-9]+$'
          AND s.subdbid = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
        UNION ALL
        SELECT (pg_catalog.regexp_match(r.slot_name::text, '^hpcacct_fed_(c2s|s2c)_([0-9]+)$'))[2]::integer,
               r.slot_name::text, 'to', true
        FROM pg_catalog.pg_replication_slots r
        WHERE r.slot_name ~ '^hpcacct_fed_(c2s|s2c)_[0-9]+$' AND r.database = pg_catalog.current_database()
    ), ends AS (  -- the other end of each link: at a site, the centre
        SELECT k.*, CASE WHEN n.role = 'site' THEN 0 ELSE k.link_site END AS other_end, n.role, n.site AS me
        FROM links k
        LEFT JOIN @extschema@.federation_node n ON true
    )
    SELECT k.other_end AS site, k.direction, k.link, k.enabled,
           CASE WHEN k.direction = 'from'
                THEN EXISTS (SELECT 1 FROM pg_catalog.pg_stat_subscription st
                             WHERE st.subname = k.link AND st.relid IS NULL AND st.pid IS NOT NULL)
                ELSE EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots r WHERE r.slot_name = k.link AND r.active)
           END AS connected,
           last.entry_id AS last_entry_id, last.booked_at AS last_booked_at,
           CASE WHEN k.direction = 'from'
                THEN (SELECT st.last_msg_receipt_time FROM pg_catalog.pg_stat_subscription st
                      WHERE st.subname = k.link AND st.relid IS NULL) END AS last_message_at,
           CASE WHEN k.direction = 'to'
                THEN (SELECT pg_catalog.max(sr.replay_lag) FROM pg_catalog.pg_stat_replication sr
                      WHERE sr.application_name = k.link) END AS lag,
           CASE WHEN k.direction = 'to'
                THEN (SELECT pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), r.confirmed_flush_lsn)
                      FROM pg_catalog.pg_replication_slots r WHERE r.slot_name = k.link) END AS pending_wal_bytes,
           CASE WHEN k.direction = 'to' AND EXISTS (
                    SELECT 1 FROM pg_catalog.pg_replication_slots r
                    WHERE r.slot_name = k.link AND r.confirmed_flush_lsn >= pg_catalog.pg_current_wal_insert_lsn())
                THEN 0  -- the receiver confirmed all the WAL written here
                ELSE pending.rows END AS rows_pending,
           pending.reported_at AS receiver_reported_at
    FROM ends k
    LEFT JOIN LATERAL (
        SELECT l.entry_id, l.booked_at FROM @extschema@.ledger l,
               LATERAL (SELECT @extschema@.federation_id_range(k.other_end) AS ids) r
        WHERE k.direction = 'from'
          AND l.entry_id >= pg_catalog.lower(r.ids) AND l.entry_id < pg_catalog.upper(r.ids)
        ORDER BY l.entry_id DESC LIMIT 1
    ) last ON true
    LEFT JOIN LATERAL (
        -- per origin the link carries (a site: its own rows; the centre: every origin but the
        -- receiver's), the rows above the last one the receiver reported
        SELECT pg_catalog.sum(c.rows)::bigint AS rows, pg_catalog.max(p.received_at) AS reported_at
        FROM (SELECT k.me AS origin WHERE k.role = 'site'
              UNION ALL SELECT 0 WHERE k.role = 'centre'
              UNION ALL SELECT s.site FROM @extschema@.federation_site s WHERE k.role = 'centre') o
        LEFT JOIN @extschema@.federation_received p ON p.receiver = k.other_end AND p.origin = o.origin
        CROSS JOIN LATERAL (SELECT @extschema@.federation_id_range(o.origin) AS ids) r
        CROSS JOIN LATERAL (
            SELECT pg_catalog.count(*) AS rows FROM @extschema@.ledger l
            WHERE l.entry_id > coalesce(p.last_entry_id, pg_catalog.lower(r.ids) - 1)
              AND l.entry_id < pg_catalog.upper(r.ids)
        ) c
        WHERE k.direction = 'to' AND o.origin <> k.other_end
    ) pending ON k.direction = 'to';
COMMENT ON VIEW @extschema@.federation_status IS
    'Per federation link of this database: the site at the other end, direction, connected, the last ledger row '
    'received from it; for outgoing links the lag, unconfirmed WAL and the rows the receiver has not reported received';
COMMENT ON COLUMN @extschema@.federation_status.site IS 'Site at the other end of the link (0: the centre; at a site always 0)';
COMMENT ON COLUMN @extschema@.federation_status.rows_pending IS
    'Ledger rows here that an outgoing link carries and its receiver has not reported received (NULL for incoming links: counted at their sender)';
COMMENT ON COLUMN @extschema@.federation_status.receiver_reported_at IS
    'When the receiver of an outgoing link last reported rows received';
-- end of federation: rows pending

-- ==== the last internal functions out of \df hpcacct.* (issue 18, house) ---------------
-- The charging trigger (attach_charging() attaches it), the ledger's rollup trigger, the
-- two statements' builders and bank_unit() move to hpcacct_internal. Triggers refer to their
-- function by oid: the ledger's and every site job table's keep working. The functions are
-- defined again below (final definitions) as sql/install has them; these placeholders only
-- name them.
ALTER FUNCTION @extschema@.charge_jobs() SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.roll_up_charges() SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.rollup_insert_sql(text) SET SCHEMA hpcacct_internal;
ALTER FUNCTION @extschema@.consumption_rollup_insert_sql(text) SET SCHEMA hpcacct_internal;
CREATE OR REPLACE FUNCTION hpcacct_internal.charge_jobs() RETURNS trigger
    LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;  -- defined below (final definitions)
CREATE OR REPLACE FUNCTION hpcacct_internal.rollup_insert_sql(source text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURN NULL;  -- defined below (final definitions)
CREATE OR REPLACE FUNCTION hpcacct_internal.consumption_rollup_insert_sql(source text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURN NULL;  -- defined below (final definitions)
-- The setting bank_unit read cheaply is a building block of the bank and the submit check.
ALTER FUNCTION @extschema@.bank_unit() SET SCHEMA hpcacct_internal;
CREATE OR REPLACE FUNCTION hpcacct_internal.bank_unit() RETURNS text
    LANGUAGE sql RETURN NULL;  -- defined below (final definitions)
-- rebuild_rollup() runs the builders by name
CREATE OR REPLACE FUNCTION @extschema@.rebuild_rollup() RETURNS bigint
    LANGUAGE sql RETURN NULL;  -- defined below (final definitions)

-- ==== one rule for an account argument (issue 18, house) ---------------------------------
-- The bank operations and the statements check an account argument with require_account()
-- (22004, 42704 with its hint); require_bank_account() takes the caller's name for the
-- message. Its new form, and visible_account(), are defined below (final definitions).
DROP FUNCTION hpcacct_internal.require_bank_account(text);

-- ---- incremental compaction (issue 19, scale2) ------------------------------------------
-- compact_rollup() merges only the rows not folded and adds to the bases: one row per group
-- in the folded rows and the bases (as 0.3's compaction left them), the consumption rollup's
-- merged rows apart from its deltas (existing rows count as deltas until the next compaction).
ALTER TABLE @extschema@.consumption_rollup ADD COLUMN merged boolean NOT NULL DEFAULT false;
CREATE INDEX consumption_rollup_unmerged ON @extschema@.consumption_rollup (boundary) WHERE NOT merged;
CREATE UNIQUE INDEX consumption_rollup_merged ON @extschema@.consumption_rollup (account, resource_id, boundary)
    WHERE merged;
COMMENT ON COLUMN @extschema@.consumption_rollup.merged IS
    'One row per account, resource and boundary, which compact_rollup() adds the delta rows to (new rows are not)';
CREATE UNIQUE INDEX charge_rollup_folded ON @extschema@.charge_rollup
    (account, resource_id, unit, submitter, month, end_month) NULLS NOT DISTINCT WHERE folded;
CREATE UNIQUE INDEX fairshare_base_group ON @extschema@.fairshare_base (account, resource_id, unit, submitter)
    NULLS NOT DISTINCT;
CREATE UNIQUE INDEX usage_base_group ON @extschema@.usage_base (account, resource_id, unit, month);
COMMENT ON COLUMN @extschema@.charge_rollup.folded IS
    'Its decayed sum is in hpcacct.fairshare_base and its amount in hpcacct.usage_base: one row per group, which '
    'compact_rollup() adds late rows to (new rows are not folded)';
COMMENT ON COLUMN @extschema@.usage_base.through IS
    'First day of the last month folded in (site time zone) when the row was last added to: the jobs in it ended '
    'before the next month; the latest is the whole base''s';
CREATE OR REPLACE FUNCTION hpcacct_internal.fold_rollup(through_month date) RETURNS bigint
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$ BEGIN RETURN NULL; END $$;  -- defined below (final definitions)
REVOKE EXECUTE ON FUNCTION hpcacct_internal.fold_rollup(date) FROM PUBLIC;
CREATE OR REPLACE FUNCTION @extschema@.charges_ended_by(at timestamptz, from_month date, to_month date,
                                                       per_submitter boolean)
    RETURNS TABLE (account text, resource_id bigint, unit text, submitter text, month date, amount numeric)
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$ SELECT NULL::text, NULL::bigint, NULL::text, NULL::text, NULL::date, NULL::numeric WHERE false $$;
    -- defined below (final definitions): usage_base's rows keep their own month folded
-- year_usage: a SQL-standard body, which the reports inline (not in the final block)
CREATE OR REPLACE FUNCTION @extschema@.year_usage (for_year integer, at timestamptz, per_submitter boolean)
    RETURNS TABLE (pool text, unit text, cluster text, partition text, account text, submitter text,
                   rate float8, month date, amount numeric, year integer, first_day date, last_day date,
                   elapsed interval, length interval, state text)
    LANGUAGE sql STABLE PARALLEL SAFE
    BEGIN ATOMIC
        WITH years AS MATERIALIZED (
            SELECT p.pool, y.*
            FROM (SELECT DISTINCT coalesce(r.pool, r.cluster) AS pool FROM @extschema@.resource r) p
            CROSS JOIN LATERAL @extschema@.allocation_year(p.pool, $1, $2) y
        )
        SELECT y.pool, c.unit, r.cluster, r.partition, c.account, c.submitter, r.rate, c.month, c.amount,
               y.year, y.first_day, y.last_day, y.elapsed, y.length, y.state
        FROM @extschema@.charges_ended_by($2, (SELECT pg_catalog.min(first_day) FROM years),
                                          (SELECT pg_catalog.max(last_day) FROM years), $3) c
        JOIN @extschema@.resource r USING (resource_id)
        JOIN years y ON y.pool = coalesce(r.pool, r.cluster)
        WHERE c.month BETWEEN y.first_day AND y.last_day;
    END;
-- end of incremental compaction

-- ---- the loader's speed (issue 14 item 7, loader3): sacct_time() in C, one TRES parse per line
CREATE OR REPLACE FUNCTION @extschema@.sacct_tres(text) RETURNS @extschema@.tres
    AS 'MODULE_PATHNAME', 'hpcacct_sacct_tres' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.sacct_tres(text) IS
    'The text as a tres, or NULL where its input would raise (tres_problem() says why): one parse per sacct line';
-- end of the loader's speed

-- Issue 18 (duplicates): federation_publish() and federation_join() share their publishing
-- step (publication, COMMIT, slot) through two internal helpers, defined below (final
-- definitions); these first definitions only create them with their privileges.
CREATE OR REPLACE FUNCTION hpcacct_internal.federation_publish_received(pub text, received_where text) RETURNS void
    LANGUAGE plpgsql AS $$ BEGIN RETURN; END $$;  -- defined below (final definitions)
REVOKE EXECUTE ON FUNCTION hpcacct_internal.federation_publish_received(text, text) FROM PUBLIC;
CREATE OR REPLACE PROCEDURE hpcacct_internal.federation_publish_ledger(pub text, ids int8range, outside boolean,
                                                                      received_where text)
    LANGUAGE plpgsql AS $$ BEGIN RETURN; END $$;  -- defined below (final definitions)
REVOKE EXECUTE ON PROCEDURE hpcacct_internal.federation_publish_ledger(text, int8range, boolean, text) FROM PUBLIC;

-- Issue 18 (duplicates): federation_join() and federation_subscribe() share their checks of
-- a subscription through two internal helpers, defined below (final definitions).
CREATE OR REPLACE FUNCTION hpcacct_internal.federation_subscribed(sub text) RETURNS boolean
    LANGUAGE sql RETURN NULL;  -- defined below (final definitions)
CREATE OR REPLACE FUNCTION hpcacct_internal.federation_not_received(sub text, tabs regclass[]) RETURNS text
    LANGUAGE sql RETURN NULL;  -- defined below (final definitions)

-- Issue 18 (duplicates): federation_join() and federation_subscribe() create their
-- subscription through one internal helper, defined below (final definitions).
CREATE OR REPLACE PROCEDURE hpcacct_internal.federation_subscribe_slot(sub text, conninfo text, publications text[],
                                                                      options text[])
    LANGUAGE plpgsql AS $$ BEGIN RETURN; END $$;  -- defined below (final definitions)
REVOKE EXECUTE ON PROCEDURE hpcacct_internal.federation_subscribe_slot(text, text, text[], text[]) FROM PUBLIC;

-- ==== ledger.pool: an allocation's pool, ledger.cluster a charge's only (issue 18, house) ----
-- Under 0.3 ledger.cluster held a charge's cluster and, on every other row, the pool the
-- allocation counts in (GENCI's machine). The pool moves to a column of its own; two named
-- constraints keep the two apart, their error (23514) raised by this function with a hint.
CREATE OR REPLACE FUNCTION hpcacct_internal.ledger_column_refused(constraint_name text, kind text, value text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF constraint_name = 'ledger_charge_has_no_pool' THEN
            RAISE EXCEPTION 'a charge has no pool (pool "%" given)', value
                USING ERRCODE = 'check_violation', CONSTRAINT = constraint_name, TABLE = 'ledger',
                      SCHEMA = '@extschema@',
                      HINT = 'A charge counts in its resource''s pool (resource.pool, or its cluster): leave pool NULL.';
        END IF;
        RAISE EXCEPTION 'a % row has no cluster (cluster "%" given): only a charge names a cluster', kind, value
            USING ERRCODE = 'check_violation', CONSTRAINT = constraint_name, TABLE = 'ledger',
                  SCHEMA = '@extschema@',
                  HINT = format('Name the %s''s pool in the column pool instead (pool = %L); a NULL pool is every '
                                'pool charged in its unit.', kind, value);
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.ledger_column_refused(text, text, text) IS
    'The error (23514, with a hint) of the ledger''s constraints ledger_charge_has_no_pool and '
    'ledger_allocation_has_no_cluster, raised when one fails';
ALTER TABLE @extschema@.ledger ADD COLUMN pool text;
COMMENT ON COLUMN @extschema@.ledger.cluster IS
    'A charge''s cluster: the cluster its job ran on (with jobid, the job); NULL for every other entry (see pool)';
COMMENT ON COLUMN @extschema@.ledger.pool IS
    'An allocation entry''s pool (any kind but charge): the pool it counts in (GENCI''s machine); NULL: every pool '
    'charged in its unit (the quarterly bank''s credits); NULL for a charge, which counts in its resource''s pool';
COMMENT ON COLUMN @extschema@.regulation_machine.machine IS
    'GENCI''s machine, a pool: the ledger.pool of its grants, supplements and retractions, and the pool '
    '(resource.pool, or the cluster) of the resources whose charges are its consumption';
-- The ledger is append-only: its trigger ledger_append_only is disabled for this one UPDATE
-- and enabled again, in the update's transaction (no other session sees it disabled). The
-- rows' pool is what their cluster said; no amount, kind or date changes.
ALTER TABLE @extschema@.ledger DISABLE TRIGGER ledger_append_only;
UPDATE @extschema@.ledger SET pool = cluster, cluster = NULL WHERE kind <> 'charge' AND cluster IS NOT NULL;
ALTER TABLE @extschema@.ledger ENABLE TRIGGER ledger_append_only;
ALTER TABLE @extschema@.ledger
    ADD CONSTRAINT ledger_charge_has_no_pool CHECK (
        kind <> 'charge' OR pool IS NULL
        OR hpcacct_internal.ledger_column_refused('ledger_charge_has_no_pool', kind, pool)),
    ADD CONSTRAINT ledger_allocation_has_no_cluster CHECK (
        kind = 'charge' OR cluster IS NULL
        OR hpcacct_internal.ledger_column_refused('ledger_allocation_has_no_cluster', kind, cluster)),
    ADD CONSTRAINT ledger_pool_named CHECK (pool <> '');
COMMENT ON TABLE @extschema@.regulation_machine IS
    'GENCI regulation settings per machine (a pool: ledger.pool of its grants): monthly threshold, annual percentages, month convention';
COMMENT ON COLUMN @extschema@.pool.name IS 'The pool: a resource''s pool (or cluster), an allocation''s ledger.pool';
-- regulation_report, which reads the allocations' pool, is defined once, in the deferred
-- rollups' section below (it reads the rollup through charge_rollup_exact there).
-- end of ledger.pool

-- ==== deferred rollups (issue 19, item 4) ----------------------------------------------
-- Setting rollup = deferred: the ledger trigger records each statement's charge ids in
-- rollup_pending; roll_up_pending() rolls them up; reports read the rollups with the pending
-- rows' rollup rows (hpcacct_internal.*_rollup_exact). The two *_insert_sql become a SELECT
-- part and the INSERT around it (final definitions below; the trigger is generated again there).
CREATE OR REPLACE FUNCTION hpcacct_internal.rollup_select_sql(source text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT pg_catalog.format($q$
            WITH z AS MATERIALIZED (  -- once per statement
                SELECT @extschema@.site_timezone() AS tz,
                       @extschema@.setting_value('half_life')::interval AS half_life
            ), entries AS (
                SELECT e.account, e.resource_id, e.unit, e.submitter, e.job_start, e.job_end, e.amount, e.tz,
                       e.first_month, e.last_month,
                       e.amount::float8 * @extschema@.decay_weight(e.job_end,
                           (e.last_month + interval '1 month') AT TIME ZONE e.tz, e.half_life) AS decayed
                FROM (SELECT e.account, e.resource_id, e.unit, e.submitter, e.job_start, e.job_end, e.amount, z.tz,
                             z.half_life, pg_catalog.date_trunc('month', e.job_start AT TIME ZONE z.tz) AS first_month,
                             pg_catalog.date_trunc('month', e.job_end AT TIME ZONE z.tz) AS last_month
                      FROM %s e, z
                      WHERE e.kind = 'charge'
                      OFFSET 0) e  -- each month once per row, not once per use
            )
            SELECT s.account, s.resource_id, s.unit, s.submitter, s.month, s.end_month, sum(s.amount) AS amount,
                   sum(s.job_amount) AS job_amount, sum(s.decayed) AS decayed
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
COMMENT ON FUNCTION hpcacct_internal.rollup_select_sql(text) IS
    'The query of the charge rollup rows of the ledger rows in a table or query';
CREATE OR REPLACE FUNCTION hpcacct_internal.consumption_rollup_select_sql(source text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT pg_catalog.format($q$
            WITH z AS MATERIALIZED (
                SELECT @extschema@.site_timezone() AS tz
            ), entries AS (
                SELECT e.account, e.resource_id, e.job_start, e.job_end, e.amount, e.tz,
                       -- ended by: the first boundary at or after the end (a job of zero length:
                       -- after its start, where it counts)
                       @extschema@.regulation_boundary_after(
                           CASE WHEN e.job_end > e.job_start THEN e.local_end - interval '1 microsecond'
                                ELSE e.local_start END) AS ended_by,
                       @extschema@.regulation_boundary_after(e.local_start) AS first_after_start
                FROM (SELECT e.account, e.resource_id, e.job_start, e.job_end, e.amount, z.tz,
                             e.job_start AT TIME ZONE z.tz AS local_start, e.job_end AT TIME ZONE z.tz AS local_end
                      FROM %s e, z
                      WHERE e.kind = 'charge'
                      OFFSET 0) e  -- local times once per row, not once per use in the inlined function
            )
            SELECT s.account, s.resource_id, s.boundary, sum(s.ended) AS ended, sum(s.running) AS running
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
COMMENT ON FUNCTION hpcacct_internal.consumption_rollup_select_sql(text) IS
    'The query of the consumption rollup rows of the ledger rows in a table or query';
CREATE TABLE @extschema@.rollup_pending (
    first_entry_id bigint PRIMARY KEY,
    last_entry_id  bigint NOT NULL,
    CONSTRAINT rollup_pending_range CHECK (last_entry_id >= first_entry_id)
);
COMMENT ON TABLE @extschema@.rollup_pending IS
    'Ranges of ledger entry ids of charges not rolled up yet (setting rollup = deferred): roll_up_pending() rolls '
    'them up; reports add their rollup rows on read';
COMMENT ON COLUMN @extschema@.rollup_pending.first_entry_id IS 'First entry id of the range';
COMMENT ON COLUMN @extschema@.rollup_pending.last_entry_id IS 'Last entry id of the range (included)';
DO $do$
DECLARE
    pending constant text := '(SELECT l.* FROM @extschema@.ledger l JOIN @extschema@.rollup_pending p '
                             'ON l.entry_id BETWEEN p.first_entry_id AND p.last_entry_id)';
BEGIN
    EXECUTE pg_catalog.format(
        'CREATE VIEW hpcacct_internal.charge_rollup_pending WITH (security_invoker = true) AS '
        'SELECT p.account, p.resource_id, p.unit, p.submitter, p.month, p.end_month, p.amount, p.job_amount, '
        'p.decayed, false AS folded FROM (%s) p WHERE EXISTS (SELECT FROM @extschema@.rollup_pending)',
        hpcacct_internal.rollup_select_sql(pending));
    EXECUTE pg_catalog.format(
        'CREATE VIEW hpcacct_internal.consumption_rollup_pending WITH (security_invoker = true) AS '
        'SELECT p.account, p.resource_id, p.boundary, p.ended, p.running, false AS merged FROM (%s) p '
        'WHERE EXISTS (SELECT FROM @extschema@.rollup_pending)',
        hpcacct_internal.consumption_rollup_select_sql(pending));
END
$do$;
COMMENT ON VIEW hpcacct_internal.charge_rollup_pending IS
    'The charge rollup rows of the pending charges (rollup_pending), computed on read: new rows, not folded';
COMMENT ON VIEW hpcacct_internal.consumption_rollup_pending IS
    'The consumption rollup rows of the pending charges (rollup_pending), computed on read: delta rows, not merged';
CREATE VIEW hpcacct_internal.charge_rollup_exact WITH (security_invoker = true) AS
    SELECT c.account, c.resource_id, c.unit, c.submitter, c.month, c.end_month, c.amount, c.job_amount, c.decayed,
           c.folded
    FROM @extschema@.charge_rollup c
    UNION ALL
    SELECT p.account, p.resource_id, p.unit, p.submitter, p.month, p.end_month, p.amount, p.job_amount, p.decayed,
           p.folded
    FROM hpcacct_internal.charge_rollup_pending p;
COMMENT ON VIEW hpcacct_internal.charge_rollup_exact IS
    'hpcacct.charge_rollup and the rows of the charges not rolled up yet: what reports read';
CREATE VIEW hpcacct_internal.consumption_rollup_exact WITH (security_invoker = true) AS
    SELECT c.account, c.resource_id, c.boundary, c.ended, c.running, c.merged
    FROM @extschema@.consumption_rollup c
    UNION ALL
    SELECT p.account, p.resource_id, p.boundary, p.ended, p.running, p.merged
    FROM hpcacct_internal.consumption_rollup_pending p;
COMMENT ON VIEW hpcacct_internal.consumption_rollup_exact IS
    'hpcacct.consumption_rollup and the rows of the charges not rolled up yet: what reports read';
GRANT SELECT ON hpcacct_internal.charge_rollup_pending, hpcacct_internal.consumption_rollup_pending,
                hpcacct_internal.charge_rollup_exact, hpcacct_internal.consumption_rollup_exact TO PUBLIC;
CREATE OR REPLACE FUNCTION @extschema@.roll_up_pending() RETURNS bigint
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        taken constant text := '(SELECT l.* FROM @extschema@.ledger l '
                               'JOIN ROWS FROM (pg_catalog.unnest($1::bigint[]), pg_catalog.unnest($2::bigint[])) '
                               'AS p(first_entry_id, last_entry_id) '
                               'ON l.entry_id BETWEEN p.first_entry_id AND p.last_entry_id)';
        firsts bigint[];
        lasts bigint[];
        charges bigint;
    BEGIN
        PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('hpcacct.charge_rollup'));
        WITH deleted AS (
            DELETE FROM @extschema@.rollup_pending p RETURNING p.first_entry_id, p.last_entry_id
        )
        SELECT pg_catalog.array_agg(d.first_entry_id), pg_catalog.array_agg(d.last_entry_id),
               coalesce(sum(d.last_entry_id - d.first_entry_id + 1), 0)
        INTO firsts, lasts, charges
        FROM deleted d;
        IF charges > 0 THEN
            EXECUTE hpcacct_internal.rollup_insert_sql(taken) USING firsts, lasts;
            EXECUTE hpcacct_internal.consumption_rollup_insert_sql(taken) USING firsts, lasts;
        END IF;
        RETURN charges;
    END
    $$;
COMMENT ON FUNCTION @extschema@.roll_up_pending() IS
    'Rolls up the charges recorded in rollup_pending (setting rollup = deferred) and empties it; returns the charges '
    'rolled up (0 when nothing is pending)';
REVOKE EXECUTE ON FUNCTION @extschema@.roll_up_pending() FROM PUBLIC;
CREATE OR REPLACE FUNCTION hpcacct_internal.roll_up_pending_trigger() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        immediate_again boolean;
    BEGIN
        immediate_again := CASE TG_OP WHEN 'DELETE' THEN OLD.name = 'rollup'
                                      ELSE NEW.name = 'rollup' AND NEW.value = 'immediate' END;
        IF immediate_again THEN
            PERFORM @extschema@.roll_up_pending();
        END IF;
        RETURN NULL;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.roll_up_pending_trigger() IS
    'Trigger of hpcacct.setting: rolls up the pending charges when the setting rollup returns to immediate';
CREATE TRIGGER setting_rolls_up_pending AFTER INSERT OR UPDATE OR DELETE ON @extschema@.setting
    FOR EACH ROW EXECUTE FUNCTION hpcacct_internal.roll_up_pending_trigger();
-- readers: consumption_before() (final definition below), regulation_report (defined here
-- once: it reads ledger.pool and the rollups with the pending rows; its grid's estimate keeps it
-- below jit_above_cost), bank_ledger()
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
                         FROM hpcacct_internal.charge_rollup_exact c
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
CREATE OR REPLACE VIEW @extschema@.regulation_report AS
    WITH cfg AS MATERIALIZED (
        SELECT (SELECT @extschema@.site_today()) AS today
    ), events AS MATERIALIZED (
        SELECT l.entry_id, l.account, l.pool AS machine, l.kind, l.amount, l.valid_from, l.valid_until
        FROM @extschema@.ledger l
        WHERE l.kind IN ('grant', 'supplement', 'retraction') AND l.pool IS NOT NULL
    ), months AS MATERIALIZED (
        SELECT a.account, a.machine, m.month::date AS month, m.month::date + 14 AS as_of,
               EXTRACT(year FROM m.month)::integer AS year, EXTRACT(month FROM m.month)::integer AS month_of_year,
               s.monthly_threshold, s.month_convention
        FROM (SELECT e.account, e.machine, min(e.valid_from) AS first_day, max(e.valid_until) AS last_day
              FROM events e GROUP BY e.account, e.machine) a
        JOIN @extschema@.regulation_machine s ON s.machine = a.machine
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
                          -- the figures the run decided on: not yet its own retraction
                          AND NOT EXISTS (SELECT 1 FROM @extschema@.regulation_log g
                                          WHERE g.entry_id = e.entry_id AND g.run_date = m.as_of)
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
              FROM hpcacct_internal.consumption_rollup_exact c
              JOIN @extschema@.resource r USING (resource_id)
              JOIN @extschema@.regulation_machine s ON s.machine = coalesce(r.pool, r.cluster)
              CROSS JOIN bounds b) c
        WHERE c.j <= (SELECT b.count FROM bounds b)
        GROUP BY 1, 2, 3
    ), grid AS (  -- consumption_before(account, machine, instant j) for every account, machine and j
        SELECT p.account, p.machine, j.j,
               coalesce(sum(bf.whole) OVER (PARTITION BY p.account, p.machine ORDER BY j.j), 0)
               + coalesce(bf.part, 0) AS amount
        FROM (SELECT DISTINCT m.account, m.machine FROM months m) p
        CROSS JOIN bounds b
        -- unnested from an array: PostgreSQL 15 estimates it at 10 rows, a series with bounds
        -- it cannot see at 1 000, for 13 a year (at 3 M jobs the grid at 267 000 rows for
        -- 15 600, the view's cost past jit_above_cost, and 75 ms of CPU compiling it)
        CROSS JOIN LATERAL pg_catalog.unnest(ARRAY(SELECT pg_catalog.generate_series(1, b.count))) AS j(j)
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
ALTER VIEW @extschema@.regulation_report SET (security_invoker = true);
CREATE OR REPLACE FUNCTION @extschema@.bank_ledger (from_day date, until_day date)
    RETURNS TABLE (account text, kind text, day date, amount numeric)
    LANGUAGE sql STABLE PARALLEL SAFE
BEGIN ATOMIC
        SELECT l.account, l.kind, l.valid_from, l.amount
        FROM @extschema@.ledger l
        WHERE l.kind IN ('deposit', 'transfer', 'refund') AND l.unit = (SELECT hpcacct_internal.bank_unit())
          AND l.valid_from >= bank_ledger.from_day AND l.valid_from < bank_ledger.until_day
        UNION ALL
        SELECT c.account, 'charge', @extschema@.quarter_start(c.month), sum(c.amount)
        FROM hpcacct_internal.charge_rollup_exact c
        WHERE c.unit = (SELECT hpcacct_internal.bank_unit())
          AND c.month >= bank_ledger.from_day AND c.month < bank_ledger.until_day
        GROUP BY c.account, @extschema@.quarter_start(c.month);
END;
-- the ledger trigger (generated again in the final definitions)
COMMENT ON FUNCTION hpcacct_internal.roll_up_charges() IS
    'Statement trigger of hpcacct.ledger: adds the charge and consumption rollup rows of the statement''s charges '
    '(rollup = deferred: records their entry ids in rollup_pending)';
-- end of deferred rollups (issue 19, item 4)

-- ==== quarter_balance's support functions IMMUTABLE, as every other aggregate's ----------
ALTER FUNCTION hpcacct_internal.quarter_balance_transfn(internal, text, date, numeric, date) IMMUTABLE;
ALTER FUNCTION hpcacct_internal.quarter_balance_combinefn(internal, internal) IMMUTABLE;
ALTER FUNCTION hpcacct_internal.quarter_balance_serialfn(internal) IMMUTABLE;
ALTER FUNCTION hpcacct_internal.quarter_balance_deserialfn(bytea, internal) IMMUTABLE;
ALTER FUNCTION hpcacct_internal.quarter_balance_finalfn(internal) IMMUTABLE;
-- end of quarter_balance IMMUTABLE

-- ==== allocation_status(): an account argument as every report's, a NULL day today ----------
-- It was STRICT: a NULL day or account gave no row, an unknown or hidden account zeros and ok.
-- allocation_status(): defined in the final definitions
-- end of allocation_status

-- ==== a NULL user of the user and member functions is 22004 ------------------------------
-- add_user, add_member, remove_member and set_default_project raised 23502, 42704 or 42501
-- for a NULL user (remove_member: 42704 for a NULL account too).
-- add_user(): defined again below ("add_user(user, NULL) is today")
-- add_member(): defined in the final definitions
-- remove_member(): defined in the final definitions
CREATE OR REPLACE FUNCTION @extschema@.set_default_project(username text, account text) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF username IS NULL THEN
            RAISE EXCEPTION 'set_default_project: username must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF account IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM @extschema@.membership m
            WHERE m.account = set_default_project.account AND m.username = set_default_project.username) THEN
            RAISE EXCEPTION 'user "%" is not a member of account "%"', username, account
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        UPDATE @extschema@.hpc_user u
        SET default_account = NULLIF(set_default_project.account, set_default_project.username)
        WHERE u.username = set_default_project.username;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'unknown user "%"', username USING ERRCODE = 'undefined_object';
        END IF;
    END
    $$;
COMMENT ON FUNCTION @extschema@.set_default_project(text, text) IS
    'Sets the project a user''s jobs are charged to when they name none (NULL: the personal account)';
-- end of a NULL user

-- ==== an account the ledger names is not renamed either, with a hint -------------------------
-- A rename failed on the ledger's foreign key (23503) without the hint a delete gets.
-- check_account_delete(): defined in the final definitions
DROP TRIGGER check_account_delete ON @extschema@.account;
CREATE TRIGGER check_account_delete BEFORE DELETE OR UPDATE OF name ON @extschema@.account
    FOR EACH ROW EXECUTE FUNCTION hpcacct_internal.check_account_delete();
-- end of the account rename

-- ==== fairshare_all(NULL) is now, as fairshare(NULL) (it returned no row) -----------------
-- fairshare_all(): defined in the final definitions
-- end of fairshare_all(NULL)

-- ==== add_quota_period(): its account checked as every account argument --------------------
-- A NULL account was 23502 and an unknown one 23503 from the tables' constraints.
-- add_quota_period(): defined again below ("add_quota_period(): NULL dates, allowance or unit are 22004")
-- end of add_quota_period

-- ==== check_submit(): a user without a default project or personal account is told so -------
-- (a user that sync_slurm_accounts() added submitting without -A was told to check the account
-- they gave)
-- check_submit(): defined in the final definitions
-- end of check_submit's message

-- ==== account_verdict(NULL) is 22004 (it answered unknown_account for "account  ") --------
-- account_verdict(): defined in the final definitions
-- end of account_verdict(NULL)

-- ==== charge_jobs() checks its transition tables (security) ----------------------------
-- Without them, new_jobs and old_jobs named the caller's temporary relations, read with the
-- owner's rights: charge_jobs() is defined again, with the check, in the final definitions.
-- end of charge_jobs() transition tables

-- ==== a federation site's ledger: charges only (security) -------------------------------
-- At a site, the ledger is written by charging (charge_jobs(), which runs as the extension's
-- owner) and by replication. A row booked by a site's own session otherwise (a deposit, a
-- grant, a charge of its own making) would reach the centre's bank and every site: a
-- statement trigger refuses it (HA013) unless the session's role is the owner or a superuser.
-- federation_refuse_local_entry(): defined in the final definitions
-- federation_prepare() creates its trigger at a site: defined again in the final definitions
-- end of a federation site's ledger

-- ==== the rollups are written by their functions only (security) -----------------------
-- roll_up_charges(), rebuild_rollup(), roll_up_pending() and fold_rollup() run as the owner
-- and setup_roles() revokes the administrators' writes on them: all defined again in
-- the final definitions; the update runs setup_roles() after them.
REVOKE EXECUTE ON FUNCTION hpcacct_internal.roll_up_charges() FROM PUBLIC;
-- end of the rollups written by their functions only

-- ==== consumption_before(): account checked, NULLs 22004; at a regulation boundary the consumption rollup's ---
-- consumption_before(): defined in the final definitions

-- check_submit reads the consumption rollup (allocation_status at 1 January): the submit role
-- of an installation that has it may read it (grant_submit_role(), final definitions)
DO $do$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'hpcacct_submit') THEN
        GRANT SELECT ON @extschema@.consumption_rollup TO hpcacct_submit;
    END IF;
END
$do$;

-- ==== svg_chart(): y steps of at least 1 (whole-figure labels repeated under it) -----------
-- svg_chart(): defined in the final definitions

-- ==== federation_publish warns of a lost slot (max_slot_wal_keep_size) ---------------------
-- federation_publish(): defined in the final definitions

-- ==== the submit check's speed: one account's consumption, plans kept per session ========
-- consumption_before() scanned the whole consumption rollup at a boundary and every charge
-- of the latest month otherwise, for each call; it now reads the rollup by account and, off a
-- boundary, only the charges that end after the instant. consumption_before(),
-- account_verdict() and check_submit() (planned once per session): final definitions.
CREATE INDEX consumption_rollup_account ON @extschema@.consumption_rollup (account, boundary);

-- ==== window_quota_usage() keeps its plan per session (the RWTH submit check) ============
-- An SQL function with SET was planned at every call (3-4 ms per check_submit() of an RWTH
-- account at 300 000 jobs): the query moves to a PL/pgSQL function, which window_quota_usage()
-- (final definitions) calls, inlined.
CREATE FUNCTION hpcacct_internal.window_quota_usage_rows(quota_account text, at date)
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
        RETURN QUERY
        WITH d AS MATERIALIZED (
            SELECT hpcacct_internal.day_or_today($2, 'window_quota_usage') AS day
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
            SELECT @extschema@.window_quota(m.month, coalesce(a.allowance, 0), coalesce(c.amount, 0)::float8, p.day) AS q
            FROM (SELECT g.month::date AS month
                  FROM pg_catalog.generate_series(p.period_start::timestamp, p.period_end::timestamp,
                                                  interval '1 month') AS g(month)) m
            LEFT JOIN @extschema@.monthly_allowance a ON a.account = p.account AND a.month = m.month
            LEFT JOIN consumed c ON c.month = m.month
        ) w;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.window_quota_usage_rows(text, date) IS
    'The rows of hpcacct.window_quota_usage()';

-- ==== tmc and tc: one date "at" and one convention per aggregate --------------------------
-- The state now keeps them (24 bytes: two float8 and two int4 serialized); the library
-- refuses rows naming several. SSPACE stays 16: an estimate, and changing it would mean
-- recreating the aggregates.
COMMENT ON FUNCTION hpcacct_internal.theoretical_combinefn(internal, internal) IS
    'Combine function of hpcacct.tmc and hpcacct.tc (merges two compensated sums of the same date and convention)';
COMMENT ON FUNCTION hpcacct_internal.theoretical_serialfn(internal) IS
    'Serializes a hpcacct.tmc / hpcacct.tc state (two float8 and two int4, network byte order)';
COMMENT ON FUNCTION hpcacct_internal.theoretical_deserialfn(bytea, internal) IS
    'Deserializes a hpcacct.tmc / hpcacct.tc state, checking its size, that it is finite and its date and convention';

-- ==== statement_html() isolates names in running text (bdi) -------------------------------
-- A right-to-left override in an account, description or machine name reordered the heading
-- around it; in the title, which holds no element, U+2068 and U+2069 isolate it.
-- statement_html(): defined in the final definitions

-- ==== account_month(): the bank balance at the end of the month ---------------------------
-- It was balance(), which counts the whole quarter's charges: a May statement showed June's
-- too, and disagreed with its own chart. account_month(): defined in the final definitions

-- ==== account_month(): the projection counts wall-clock time -------------------------------
-- It counted days, so across a DST change it differed from usage_by_resource()'s at the same
-- instant. account_month(): defined in the final definitions

-- ==== a control character in a name no longer refuses a decision's message ---------------
-- outbox.subject admits no control character, and subjects carry names: an account named
-- with a line break failed regulate(), open_quarter() and notify_scan() for every account.
-- outbox_add_all(): defined in the final definitions

-- ==== my_accounts(), account_month(): the bank balance at the end of the day --------------
-- balance() is the whole quarter's: my_accounts() at a past day showed charges of jobs that
-- ran later in the quarter. Both now read balance_at_end(); they are defined in the final
-- definitions.
CREATE FUNCTION hpcacct_internal.balance_at_end(account text, day date) RETURNS numeric
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT @extschema@.balance(balance_at_end.account, balance_at_end.day)
               + coalesce((SELECT round(sum(l.amount * @extschema@.period_share(l.job_start, l.job_end,
                                                           (balance_at_end.day + 1)::timestamp AT TIME ZONE z.tz, z.q_end AT TIME ZONE z.tz)), 6)
                           FROM @extschema@.ledger l
                           WHERE l.account = balance_at_end.account AND l.kind = 'charge' AND l.unit = hpcacct_internal.bank_unit()
                             AND l.job_end >= (balance_at_end.day + 1)::timestamp AT TIME ZONE z.tz
                             AND l.job_start < z.q_end AT TIME ZONE z.tz), 0)
        FROM (SELECT @extschema@.site_timezone() AS tz,
                     (@extschema@.quarter_start(balance_at_end.day) + interval '3 months')::timestamp AS q_end) z
    $$;
COMMENT ON FUNCTION hpcacct_internal.balance_at_end(text, date) IS
    'Bank balance of an account at the end of a day: balance() without the quarter''s charges after that day';

-- ==== statement_html(): figures up to 10^15 printed in full --------------------------------
-- A bank allocation or balance of 10^9 or more was printed ###,###,###.##. statement_html():
-- defined in the final definitions

-- ==== holds (Slurm enforcement review) ------------------------------------------------
-- pending_job.sync_hold records the holds hpcacct-slurm-sync placed, so that it releases
-- only those; the jobs the previous sync held or failed to release are its own (what that
-- sync would have released)
ALTER TABLE @extschema@.pending_job ADD COLUMN sync_hold text CHECK (sync_hold IN ('release', 'uhold'));
UPDATE @extschema@.pending_job SET sync_hold = 'release' WHERE held OR hold_reason IS NOT NULL;

-- ==== require_amount(): an infinite or too large amount is 22003 naming the amount (it was numeric field overflow) ---
-- hpcacct_internal.require_amount(): defined in the final definitions

-- ==== top_up(): account checked as a bank operation, target from 0 to below 10^14 (NULL was 23502, unknown 23503, negative a silent 0) ---
-- top_up(): defined in the final definitions

-- ==== add_member(), create_job_table(), attach_charging(): a NULL role or table, a blank table name: 22004, 22023 ---
-- (a NULL role was 23502 from membership; create_job_table(NULL or '') a syntax error, 42601;
-- attach_charging(NULL) 42703 naming column "cluster" of <NULL>)
-- add_member(), create_job_table(), attach_charging(): defined in the final definitions

-- ==== add_quota_period(): NULL dates, allowance or unit are 22004 ----
-- (they were 23502 from the tables' constraints)
-- add_quota_period(): defined in the final definitions

-- ==== add_user(user, NULL) is today, as every date argument (it was 22004 from top_up) -----
-- add_user(): defined again below (add_user(): a username of at most 64 characters)

-- ==== personal_allotment(): a NULL or unknown account is 22004, 42704 (it gave NULL) -------
CREATE OR REPLACE FUNCTION @extschema@.personal_allotment(account text) RETURNS numeric
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM hpcacct_internal.require_account(account, 'personal_allotment');
        RETURN (SELECT coalesce(a.personal_allotment, @extschema@.setting_value('personal_allotment')::numeric)
                FROM @extschema@.account a WHERE a.name = personal_allotment.account);
    END
    $$;
COMMENT ON FUNCTION @extschema@.personal_allotment(text) IS
    'Credits per quarter a personal account is topped up to; a NULL (22004) or unknown account (42704) is an error';

-- ==== federation_prepare() alters a trigger only when it is not yet so, setting before ledger
-- (a second federation_join() deadlocked now and then with the first one's table sync):
-- defined in the final definitions below

-- ==== allocation_status() reads its consumption once (a MATERIALIZED CTE; pulled up, the
-- planner computed it at each of its three uses): defined in the final definitions below

-- ==== a CR or LF in a name no longer splits a line of a message's body ---------------------
-- Subjects showed a name's control characters as spaces; bodies carried them as they are.
-- notify_regulation(), notify_quarter(), notify_hold(), notify_scan(): defined in the final
-- definitions.
CREATE FUNCTION hpcacct_internal.notify_name(name text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN pg_catalog.regexp_replace(name, '[[:cntrl:]]', ' ', 'g');
COMMENT ON FUNCTION hpcacct_internal.notify_name(text) IS
    'A name or subject as messages print it: each control character (CR, LF...) a space';

-- ==== notify_hold(): job_released only when hpcacct-slurm-sync lifted its own hold (sync_hold to NULL with hpcacct.sync_lifted on), not when held turns false ---
-- hpcacct_internal.notify_hold(): defined in the final definitions

-- ==== refuse_argument(): the error for a bad argument of an inlined SQL function -----------
CREATE FUNCTION hpcacct_internal.refuse_argument(value anyelement, caller text, arg text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE COST 1
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF value IS NULL THEN
            RAISE EXCEPTION '%: % must not be NULL', caller, arg USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF pg_typeof(value) IN ('date'::regtype, 'timestamp with time zone'::regtype) THEN
            RAISE EXCEPTION '%: % must be finite, not %', caller, arg, value USING ERRCODE = 'datetime_field_overflow';
        END IF;
        IF pg_typeof(value) = 'interval'::regtype THEN
            IF value::text::interval < interval '0' THEN
                RAISE EXCEPTION '%: % must not be negative', caller, arg USING ERRCODE = 'invalid_parameter_value';
            END IF;
            RAISE EXCEPTION '%: % must not have a month part', caller, arg USING ERRCODE = 'invalid_parameter_value',
                HINT = 'Pass the difference of two timestamps, e.g. "end" - start.';
        END IF;
        RAISE EXCEPTION '%: % is out of range: %', caller, arg, value USING ERRCODE = 'invalid_parameter_value';
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.refuse_argument(anyelement, text, text) IS
    'Raises the error for a bad argument of an inlined SQL function: NULL 22004, infinite 22008, negative or month-long interval 22023';

-- ==== bank_ledger(): a NULL bound is 22004; bank_state(): a NULL or infinite day is 22004, 22008 (it gave expired, 0) ---
CREATE OR REPLACE FUNCTION @extschema@.bank_ledger (from_day date, until_day date)
    RETURNS TABLE (account text, kind text, day date, amount numeric)
    LANGUAGE sql STABLE PARALLEL SAFE
BEGIN ATOMIC
        SELECT l.account, l.kind, l.valid_from, l.amount
        FROM @extschema@.ledger l
        WHERE l.kind IN ('deposit', 'transfer', 'refund') AND l.unit = (SELECT hpcacct_internal.bank_unit())
          AND l.valid_from >= bank_ledger.from_day AND l.valid_from < bank_ledger.until_day
          -- (once: the first branch always runs first)
          AND (bank_ledger.from_day IS NOT NULL OR hpcacct_internal.refuse_argument(bank_ledger.from_day, 'bank_ledger', 'from_day'))
          AND (bank_ledger.until_day IS NOT NULL OR hpcacct_internal.refuse_argument(bank_ledger.until_day, 'bank_ledger', 'until_day'))
        UNION ALL
        SELECT c.account, 'charge', @extschema@.quarter_start(c.month), sum(c.amount)
        FROM hpcacct_internal.charge_rollup_exact c
        WHERE c.unit = (SELECT hpcacct_internal.bank_unit())
          AND c.month >= bank_ledger.from_day AND c.month < bank_ledger.until_day
        GROUP BY c.account, @extschema@.quarter_start(c.month);
END;
COMMENT ON FUNCTION @extschema@.bank_ledger(date, date) IS
    'What bank balances count, from_day (included) to until_day (excluded), quarter starts: deposits, transfers, '
    'refunds (on their day) and charges (per quarter) in the bank unit; a NULL bound is an error (22004), an '
    'infinite one no bound';
CREATE OR REPLACE FUNCTION @extschema@.bank_state (account text, day date)
    RETURNS TABLE (state text, next_allocation date, balance numeric)
    LANGUAGE sql STABLE PARALLEL SAFE
BEGIN ATOMIC
    -- the day checked first in the select list too: a constant day is folded there before the
    -- subquery's bank_ledger() (which would name its from_day instead)
    SELECT CASE WHEN NOT (pg_catalog.isfinite(bank_state.day)
                          OR hpcacct_internal.refuse_argument(bank_state.day, 'bank_state', 'day')) THEN NULL
                WHEN a.deleted_in <= bank_state.day THEN 'deleted'
                WHEN q.current THEN 'active'
                WHEN q.later IS NOT NULL THEN 'inactive'
                ELSE 'expired' END,
           q.later,
           coalesce((SELECT (@extschema@.quarter_balance(e.kind, e.day, e.amount, bank_state.day)).balance
                     FROM @extschema@.bank_ledger(@extschema@.quarter_start(bank_state.day),
                                                  (@extschema@.quarter_start(bank_state.day) + interval '3 months')::date) e
                     WHERE e.account = a.name), 0)
    FROM @extschema@.account a
    CROSS JOIN LATERAL (
        SELECT coalesce(bool_or(s.quarter = @extschema@.quarter_start(bank_state.day)), false) AS current,
               min(s.quarter) FILTER (WHERE s.quarter > @extschema@.quarter_start(bank_state.day)) AS later
        FROM (SELECT @extschema@.quarter_start(l.valid_from) AS quarter
              FROM @extschema@.ledger l
              WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer')
                AND l.unit = (SELECT hpcacct_internal.bank_unit())
                AND l.valid_from >= @extschema@.quarter_start(bank_state.day)
              GROUP BY 1
              HAVING sum(l.amount) > 0) s) q
    WHERE a.name = bank_state.account
      AND (pg_catalog.isfinite(bank_state.day) OR hpcacct_internal.refuse_argument(bank_state.day, 'bank_state', 'day'));
END;
COMMENT ON FUNCTION @extschema@.bank_state(text, date) IS
    'An account in the bank at a day: state (active/inactive/expired/deleted), first later quarter with an '
    'allocation, exact balance of the day''s quarter; no row for an unknown account; a NULL (22004) or infinite '
    '(22008) day is an error';

-- ==== allocation_year(): for_year from 1 to 9999 (22008 naming it); year_usage(): a NULL per_submitter is 22004 (it gave no row) ---
CREATE OR REPLACE FUNCTION @extschema@.allocation_year(pool text, for_year integer DEFAULT NULL,
                                            at timestamptz DEFAULT pg_catalog.now())
    RETURNS TABLE (year integer, first_day date, last_day date, starts timestamptz, ends timestamptz,
                   upto timestamptz, elapsed interval, length interval, state text)
    LANGUAGE plpgsql STABLE PARALLEL SAFE ROWS 1
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        tz    constant text := @extschema@.site_timezone();
        m     constant integer := @extschema@.year_start_month(allocation_year.pool);
        today constant date := (allocation_year.at AT TIME ZONE tz)::date;
    BEGIN
        IF allocation_year.at IS NULL THEN
            RAISE EXCEPTION 'allocation_year: at must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        ELSIF NOT pg_catalog.isfinite(allocation_year.at) THEN
            RAISE EXCEPTION 'allocation_year: at must be a finite timestamp' USING ERRCODE = 'datetime_field_overflow';
        ELSIF for_year NOT BETWEEN 1 AND 9999 THEN
            RAISE EXCEPTION 'allocation_year: for_year must be a year from 1 to 9999, not %', for_year
                USING ERRCODE = 'datetime_field_overflow';
        END IF;
        year := coalesce(for_year, pg_catalog.date_part('year', today)::integer
                                   - CASE WHEN pg_catalog.date_part('month', today) < m THEN 1 ELSE 0 END);
        first_day := pg_catalog.make_date(year, m, 1);
        last_day := (first_day + interval '1 year')::date - 1;
        starts := first_day::timestamp AT TIME ZONE tz;
        ends := (first_day + interval '1 year') AT TIME ZONE tz;
        upto := greatest(starts, least(allocation_year.at, ends));
        elapsed := upto - starts;
        length := ends - starts;
        state := CASE WHEN allocation_year.at >= ends THEN 'past'
                      WHEN allocation_year.at < starts THEN 'future' ELSE 'current' END;
        RETURN NEXT;
    END
    $$;
COMMENT ON FUNCTION @extschema@.allocation_year(text, integer, timestamptz) IS
    'A pool''s allocation year (by the year it starts in, or the one containing at): days, bounds in the site '
    'time zone, elapsed and total wall-clock time at at, and whether it is past, current or future; for_year from 1 '
    'to 9999 (22008 otherwise)';
CREATE OR REPLACE FUNCTION @extschema@.year_usage (for_year integer, at timestamptz, per_submitter boolean)
    RETURNS TABLE (pool text, unit text, cluster text, partition text, account text, submitter text,
                   rate float8, month date, amount numeric, year integer, first_day date, last_day date,
                   elapsed interval, length interval, state text)
    LANGUAGE sql STABLE PARALLEL SAFE
    BEGIN ATOMIC
        WITH years AS MATERIALIZED (
            SELECT p.pool, y.*
            FROM (SELECT DISTINCT coalesce(r.pool, r.cluster) AS pool FROM @extschema@.resource r) p
            CROSS JOIN LATERAL @extschema@.allocation_year(p.pool, $1, $2) y
        )
        SELECT y.pool, c.unit, r.cluster, r.partition, c.account, c.submitter, r.rate, c.month, c.amount,
               y.year, y.first_day, y.last_day, y.elapsed, y.length, y.state
        FROM @extschema@.charges_ended_by($2, coalesce((SELECT pg_catalog.min(first_day) FROM years), 'infinity'),
                                          coalesce((SELECT pg_catalog.max(last_day) FROM years), '-infinity'), $3) c
        JOIN @extschema@.resource r USING (resource_id)
        JOIN years y ON y.pool = coalesce(r.pool, r.cluster)
        WHERE c.month BETWEEN y.first_day AND y.last_day
          AND ($3 IS NOT NULL OR hpcacct_internal.refuse_argument($3, 'year_usage', 'per_submitter'));
    END;
COMMENT ON FUNCTION @extschema@.year_usage(integer, timestamptz, boolean) IS
    'Charges per resource, account, submitter (or not: NULL) and month of each pool''s allocation year (named, or '
    'containing at), jobs ended by at, from the charge rollup; the building block of the usage reports';

-- ==== core_hours(): a negative elapsed time or one with a month part is 22023, as for charge() ---
-- defined in the final definitions below

-- ==== charges_ended_by(): a NULL argument is 22004, an infinite at 22008 (they gave no row, or all) ---
-- defined in the final definitions below

-- ==== consumption_before(): an infinite instant is 22008 (it gave 0 or everything) ---------
-- defined in the final definitions below

-- ==== setting_value(NULL) is 22004 (it gave NULL) ------------------------------------------
CREATE OR REPLACE FUNCTION @extschema@.setting_value(name text) RETURNS text
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF setting_value.name IS NULL THEN
            RAISE EXCEPTION 'setting_value: name must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        RETURN (SELECT s.value FROM @extschema@.settings s WHERE s.name = setting_value.name);
    END
    $$;
COMMENT ON FUNCTION @extschema@.setting_value(text) IS 'Effective value of a setting (a NULL name is an error, 22004)';

-- ==== add_user(): a username of at most 64 characters (22023; a 10 000-character one got an account) ---
-- add_user(): defined in the final definitions

-- ==== account_policies(): a NULL account is 22004, an unknown one 42704 (it gave NULL) -----
-- defined in the final definitions below

-- ==== recheck_queued(): an infinite day is 22008 (day_or_today) ----------------------------
-- defined in the final definitions below

-- ==== fairshare_all(), fairshare(): an infinite at is 22008 naming at (decayed_usage named its ts) ---
-- defined in the final definitions below

-- ==== federation_id_range(), federation_prepare(): a site outside 0..32767 is 22023 (it was bigint out of range) ---
-- defined in the final definitions below

-- ==== outbox_add_all(), outbox_add(): NULL topic, decision_key, subject, body are 22004, messages not an array of objects 22023 ---
-- defined in the final definitions below

-- ==== attach_charging(): a NULL mapping is 22004 (it was taken as none) --------------------
-- defined in the final definitions below

-- ==== pending_job.sync_lifting, .other_hold: a lift the sync made but could not record is recorded by its next run; job_held of a job an operator holds says so ---
ALTER TABLE @extschema@.pending_job ADD COLUMN sync_lifting boolean NOT NULL DEFAULT false;
ALTER TABLE @extschema@.pending_job ADD COLUMN other_hold boolean NOT NULL DEFAULT false;
-- hpcacct_internal.notify_hold(): defined in the final definitions

-- ==== outbox_add_all(), outbox_add(): an unknown account (an empty name too) is 42704 (it was the foreign key's 23503) ---
-- defined in the final definitions below

-- ==== contact.email: a dot-atom local part of at most 64 octets, labels of at most 63 characters, UTF-8 too (it took a..b@x, [a]@x, a@x..y) ---
ALTER TABLE @extschema@.contact DROP CONSTRAINT contact_email;
ALTER TABLE @extschema@.contact ADD CONSTRAINT contact_email CHECK (
        email ~ ('^[A-Za-z0-9!#$%&''*+/=?^_`{|}~\u00a1-\U0010ffff-]+(\.[A-Za-z0-9!#$%&''*+/=?^_`{|}~\u00a1-\U0010ffff-]+)*'
                 '@[A-Za-z0-9\u00a1-\U0010ffff]([A-Za-z0-9\u00a1-\U0010ffff-]{0,61}[A-Za-z0-9\u00a1-\U0010ffff])?'
                 '(\.[A-Za-z0-9\u00a1-\U0010ffff]([A-Za-z0-9\u00a1-\U0010ffff-]{0,61}[A-Za-z0-9\u00a1-\U0010ffff])?)*$')
        AND email !~ '[[:space:][:cntrl:]\u0080-\u00a0\u00ad\u1680\u180e\u2000-\u200f\u2028-\u202f\u205f-\u206f\u3000\ufeff\ufff9-\ufffb]'
        AND pg_catalog.octet_length(pg_catalog.split_part(email, '@', 1)) <= 64
        AND pg_catalog.length(email) <= 254);

-- ==== notify_scan(): a quota state that goes back and forth within a day writes each change (the second entry's message was skipped as already written) ---
-- defined in the final definitions below

-- ==== notify_scan(): a quota state outside the accounting period says the period starts or ended (it said the window's quota was used up) ---
-- defined in the final definitions below

-- ==== notify_hold(): a held or released job is told to its owner, not to its account's managers (outbox_add_all's new to_managers), and a job that named no account is its owner's default project's, named in the message (it was the personal account's, shown as "default") ---
-- defined in the final definitions below (with outbox_add_all())

-- ==== outbox_add_all(), outbox_add(): figures other than a JSON object are 22023 (an array or a string was stored, and a portal's figures ->> 'state' read NULL) ---
-- defined in the final definitions below

-- ==== notify_scan(): thresholds crossed at once are told in the order they are crossed (20 %, then negative; the negative one came first) ---
-- defined in the final definitions below

-- ==== my_accounts(): this month's charges are those up to the end of the day at, pro rata as its balance (a past day counted the rest of its month: carol's 20 May 2025 showed May's 3,328 NPL beside the balance of the 20th) ---
-- defined in the final definitions below

-- ==== federation_resync(): a link whose slot was lost, recovered; federation_status.wal_status ---
-- federation_publish(), federation_join(): their warnings of a lost slot name federation_resync (final definitions)
-- The schema of the dblink extension (quoted) that federation_resync() reads the sender with;
-- 55000 when dblink is not installed in this database.
CREATE FUNCTION hpcacct_internal.federation_dblink_schema() RETURNS text
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        nsp text;
    BEGIN
        SELECT pg_catalog.quote_ident(n.nspname) INTO nsp
        FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
        WHERE e.extname = 'dblink';
        IF nsp IS NULL THEN
            RAISE EXCEPTION 'federation_resync needs the extension dblink in this database'
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'CREATE EXTENSION dblink SCHEMA public; (contrib, shipped with PostgreSQL).';
        END IF;
        RETURN nsp;
    END
    $$;
REVOKE EXECUTE ON FUNCTION hpcacct_internal.federation_dblink_schema() FROM PUBLIC;
COMMENT ON FUNCTION hpcacct_internal.federation_dblink_schema() IS
    'The schema of the dblink extension, quoted, for federation_resync(); 55000 when it is not installed';

-- At the receiving end of a link whose slot at the sender was lost (wal_status 'lost', after
-- max_slot_wal_keep_size) or dropped: gives it a new slot and copies what the receiver lacks.
-- At the centre federation_resync(k) repairs site k's charges to the centre; at site k,
-- federation_resync(0) repairs the centre's rows to the site (reference tables, every other
-- origin's ledger rows). Steps: the subscription is disabled and its worker waited for; over
-- dblink (with the subscription's connection string) the sender's slot is dropped and created
-- again on a replication connection that exports its snapshot; in a transaction on that
-- snapshot the receiver reads the sender's reference tables (upserted, rows gone deleted), the
-- ledger's counts per block of 65 536 ids of the origins the link carries, and the rows of the
-- blocks whose count differs (inserted where missing); then the subscription is enabled. Rows
-- committed at the sender before the slot's consistent point are in the snapshot, those after
-- it come through the slot: none is lost or copied twice, whatever the order of their ids.
-- Rows are written as replication writes them (session_replication_role = replica: received
-- charges held back and rolled up at commit, reference rows without the site's refusal).
-- Why dblink and not a subscription with copy_data: only a replication connection's exported
-- snapshot splits the rows exactly between the copy and the stream, and a copy_data
-- subscription writes into the tables of the same name, whose rows are mostly there already.
-- A superuser, outside a transaction block (it commits). Refused before anything is written
-- when another resync of the link runs (55006), the sender cannot be reached (08001) or has
-- columns this database lacks (55000: a sender updated first). Run again after a later failure: the subscription stays disabled until a
-- run completes.
CREATE PROCEDURE @extschema@.federation_resync(site integer)
    LANGUAGE plpgsql
    AS $$
    DECLARE
        node     @extschema@.federation_node;
        ids      int8range;
        link     text;
        conninfo text;
        dbl      text;
        carried  text;
        received text;
        snap     text;
        waited   integer;
        busy     boolean;
        tab      regclass;
        keys     text;
        fkeys    text;
        xkeys    text;
        cols     text;
        blk      bigint;
        n        bigint;
        refs     bigint;
        gone     bigint;
        copied   bigint;
        missing  text;
    BEGIN
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        IF site IS NULL THEN
            RAISE EXCEPTION 'site must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = pg_catalog.current_user() AND r.rolsuper) THEN
            RAISE EXCEPTION 'federation_resync must be run by a superuser' USING ERRCODE = 'insufficient_privilege';
        END IF;
        SELECT * INTO node FROM @extschema@.federation_node;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'this database is not in a federation' USING ERRCODE = 'undefined_object';
        END IF;
        IF node.role = 'centre' THEN
            IF NOT EXISTS (SELECT 1 FROM @extschema@.federation_site s WHERE s.site = federation_resync.site) THEN
                RAISE EXCEPTION 'site % is not published from this database', site USING ERRCODE = 'undefined_object';
            END IF;
            link := 'hpcacct_fed_s2c_' || site;
            ids := @extschema@.federation_id_range(site);
            carried := pg_catalog.format('entry_id >= %s AND entry_id < %s', pg_catalog.lower(ids), pg_catalog.upper(ids));
            received := pg_catalog.format('receiver = %s', site);
        ELSE
            IF site <> 0 THEN
                RAISE EXCEPTION 'a site receives from the centre (0) only, not from site %', site
                    USING ERRCODE = 'invalid_parameter_value', HINT = 'At a site, CALL hpcacct.federation_resync(0).';
            END IF;
            link := 'hpcacct_fed_c2s_' || node.site;
            ids := @extschema@.federation_id_range(node.site);
            carried := pg_catalog.format('entry_id < %s OR entry_id >= %s', pg_catalog.lower(ids), pg_catalog.upper(ids));
            received := pg_catalog.format('receiver = 0 AND origin = %s', node.site);
        END IF;
        SELECT s.subconninfo INTO conninfo FROM pg_catalog.pg_subscription s
        WHERE s.subname = link
          AND s.subdbid = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database());
        IF conninfo IS NULL THEN
            RAISE EXCEPTION 'this database has no subscription %', link
                USING ERRCODE = 'undefined_object', HINT = 'Run the set-up calls first (README, "Several clusters").';
        END IF;
        dbl := hpcacct_internal.federation_dblink_schema();
        -- one resync of a link at a time (a session lock: it outlives the COMMITs below)
        IF NOT pg_catalog.pg_try_advisory_lock(pg_catalog.hashtext('hpcacct.federation_resync'), pg_catalog.hashtext(link)) THEN
            RAISE EXCEPTION 'another federation_resync of % is running', link USING ERRCODE = 'object_in_use';
        END IF;
        -- the sender, reached before anything is written here (08001 when it cannot be)
        EXECUTE pg_catalog.format('SELECT %1$s.dblink_disconnect(c) FROM pg_catalog.unnest(%1$s.dblink_get_connections()) c '
                                  'WHERE c IN (''hpcacct_resync'', ''hpcacct_resync_slot'')', dbl);
        EXECUTE pg_catalog.format('SELECT %s.dblink_connect(''hpcacct_resync'', %L)', dbl, conninfo);
        EXECUTE pg_catalog.format('SELECT %s.dblink_connect(''hpcacct_resync_slot'', %L)', dbl,
                                  CASE WHEN conninfo ~ '^postgres(ql)?://'
                                       THEN conninfo || CASE WHEN pg_catalog.strpos(conninfo, '?') > 0 THEN '&' ELSE '?' END
                                            || 'replication=database'
                                       ELSE conninfo || ' replication=database' END);
        -- every column the sender has must be here: copied without it, a row would lose it
        -- (a sender updated first; replication stops on such a row instead)
        EXECUTE pg_catalog.format(
            'SELECT pg_catalog.string_agg(r.tab || ''.'' || r.col, '', '' ORDER BY r.tab, r.col) '
            'FROM %s.dblink(''hpcacct_resync'', %L) AS r(tab text, col text) '
            'WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a '
            '                  WHERE a.attrelid = pg_catalog.to_regclass(pg_catalog.quote_ident(''@extschema@'') || ''.'' || pg_catalog.quote_ident(r.tab)) '
            '                    AND a.attname = r.col AND a.attnum > 0 AND NOT a.attisdropped)',
            dbl, pg_catalog.format('SELECT c.relname::text, a.attname::text FROM pg_catalog.pg_attribute a '
                                   'JOIN pg_catalog.pg_class c ON c.oid = a.attrelid '
                                   'JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace '
                                   'WHERE n.nspname = %L AND a.attnum > 0 AND NOT a.attisdropped AND c.relname = ANY (%L::text[])',
                                   '@extschema@',
                                   (SELECT pg_catalog.array_agg(c.relname::text) FROM pg_catalog.pg_class c
                                    WHERE c.oid = ANY ('{@extschema@.ledger, @extschema@.federation_received}'::regclass[]
                                                       || CASE WHEN node.role = 'site' THEN @extschema@.federation_reference_tables()
                                                               ELSE '{}'::regclass[] END))))
            INTO missing;
        IF missing IS NOT NULL THEN
            EXECUTE pg_catalog.format('SELECT %1$s.dblink_disconnect(c) FROM pg_catalog.unnest(%1$s.dblink_get_connections()) c '
                                      'WHERE c IN (''hpcacct_resync'', ''hpcacct_resync_slot'')', dbl);
            RAISE EXCEPTION 'the sender has columns this database lacks: %', missing
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'Update this database''s hpcacct first (ALTER EXTENSION hpcacct UPDATE).';
        END IF;

        -- stop the link's apply worker: the slot can be dropped only when no one reads it
        EXECUTE pg_catalog.format('ALTER SUBSCRIPTION %I DISABLE', link);
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        waited := 0;
        WHILE EXISTS (SELECT 1 FROM pg_catalog.pg_stat_subscription st WHERE st.subname = link AND st.pid IS NOT NULL) LOOP
            IF waited >= 600 THEN
                RAISE EXCEPTION 'the apply worker of % did not stop within 60 s', link USING ERRCODE = 'object_in_use';
            END IF;
            PERFORM pg_catalog.pg_sleep(0.1);
            waited := waited + 1;
        END LOOP;

        -- at the sender: a new slot in place of the old one, its snapshot imported by the
        -- other connection (the slot's creation waits for transactions that wrote: this one
        -- has written nothing since its COMMIT)
        waited := 0;
        LOOP
            EXECUTE pg_catalog.format('SELECT t.busy FROM %s.dblink(''hpcacct_resync'', %L) AS t(busy boolean)', dbl,
                                      pg_catalog.format('SELECT pg_catalog.bool_or(active) FROM pg_catalog.pg_replication_slots '
                                                        'WHERE slot_name = %L', link)) INTO busy;
            EXIT WHEN busy IS NOT TRUE;
            IF waited >= 600 THEN
                RAISE EXCEPTION 'the slot % is still in use at the sender after 60 s', link USING ERRCODE = 'object_in_use';
            END IF;
            PERFORM pg_catalog.pg_sleep(0.1);
            waited := waited + 1;
        END LOOP;
        IF busy IS NOT NULL THEN
            EXECUTE pg_catalog.format('SELECT pg_catalog.count(*) FROM %s.dblink(''hpcacct_resync'', %L) AS t(dropped integer)',
                                      dbl, pg_catalog.format('SELECT 1 FROM pg_catalog.pg_drop_replication_slot(%L)', link));
        END IF;
        EXECUTE pg_catalog.format('SELECT t.snapshot_name FROM %s.dblink(''hpcacct_resync_slot'', %L) '
                                  'AS t(slot_name text, consistent_point text, snapshot_name text, output_plugin text)',
                                  dbl, pg_catalog.format('CREATE_REPLICATION_SLOT %I LOGICAL pgoutput (SNAPSHOT ''export'')', link))
            INTO snap;
        EXECUTE pg_catalog.format('SELECT %s.dblink_exec(''hpcacct_resync'', ''BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY'')', dbl);
        EXECUTE pg_catalog.format('SELECT %s.dblink_exec(''hpcacct_resync'', %L)', dbl,
                                  pg_catalog.format('SET TRANSACTION SNAPSHOT %L', snap));
        EXECUTE pg_catalog.format('SELECT %s.dblink_disconnect(''hpcacct_resync_slot'')', dbl);

        -- here, as replication writes
        PERFORM pg_catalog.set_config('session_replication_role', 'replica', true);
        refs := 0;
        gone := 0;
        IF node.role = 'site' THEN
            FOR tab IN SELECT t FROM pg_catalog.unnest(@extschema@.federation_reference_tables()) t
                       WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_subscription_rel r
                                     JOIN pg_catalog.pg_subscription s ON s.oid = r.srsubid
                                     WHERE s.subname = link AND r.srrelid = t) LOOP
                SELECT pg_catalog.string_agg(pg_catalog.quote_ident(a.attname), ', ' ORDER BY a.attnum),
                       pg_catalog.string_agg('f.' || pg_catalog.quote_ident(a.attname), ', ' ORDER BY a.attnum),
                       pg_catalog.string_agg('x.' || pg_catalog.quote_ident(a.attname), ', ' ORDER BY a.attnum)
                INTO keys, fkeys, xkeys
                FROM pg_catalog.pg_index i
                JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
                WHERE i.indrelid = tab AND i.indisprimary;
                SELECT pg_catalog.string_agg(pg_catalog.format('%1$I = excluded.%1$I', a.attname), ', ' ORDER BY a.attnum)
                INTO cols
                FROM pg_catalog.pg_attribute a
                WHERE a.attrelid = tab AND a.attnum > 0 AND NOT a.attisdropped
                  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_index i
                                  WHERE i.indrelid = tab AND i.indisprimary AND a.attnum = ANY (i.indkey));
                EXECUTE pg_catalog.format('CREATE TEMPORARY TABLE hpcacct_resync_rows ON COMMIT DROP AS SELECT e.* '
                                          'FROM %s.dblink(''hpcacct_resync'', %L) AS r(j text), '
                                          'LATERAL pg_catalog.json_populate_record(NULL::%s, r.j::json) e',
                                          dbl, pg_catalog.format('SELECT pg_catalog.row_to_json(t)::text FROM %s t', tab), tab);
                EXECUTE pg_catalog.format('DELETE FROM %s x WHERE NOT EXISTS (SELECT 1 FROM pg_temp.hpcacct_resync_rows f '
                                          'WHERE (%s) = (%s))', tab, fkeys, xkeys);
                GET DIAGNOSTICS n = ROW_COUNT;
                gone := gone + n;
                EXECUTE pg_catalog.format('INSERT INTO %s AS x OVERRIDING SYSTEM VALUE SELECT * FROM pg_temp.hpcacct_resync_rows '
                                          'ON CONFLICT (%s) DO %s', tab, keys,
                                          CASE WHEN cols IS NULL THEN 'NOTHING'
                                               ELSE pg_catalog.format('UPDATE SET %s WHERE ROW(x.*)::text IS DISTINCT FROM ROW(excluded.*)::text', cols) END);
                GET DIAGNOSTICS n = ROW_COUNT;
                refs := refs + n;
                DROP TABLE pg_temp.hpcacct_resync_rows;
            END LOOP;
        END IF;
        -- what the sender reports it received over the reverse link
        EXECUTE pg_catalog.format('INSERT INTO @extschema@.federation_received AS p SELECT e.* '
                                  'FROM %s.dblink(''hpcacct_resync'', %L) AS r(j text), '
                                  'LATERAL pg_catalog.json_populate_record(NULL::@extschema@.federation_received, r.j::json) e '
                                  'ON CONFLICT (receiver, origin) DO UPDATE '
                                  'SET last_entry_id = GREATEST(p.last_entry_id, excluded.last_entry_id), '
                                  'received_at = GREATEST(p.received_at, excluded.received_at)',
                                  dbl, pg_catalog.format('SELECT pg_catalog.row_to_json(p)::text FROM @extschema@.federation_received p '
                                                         'WHERE %s', received));
        -- the ledger: per block of 65 536 ids (one origin each), the rows here are a subset of
        -- the sender's; the blocks that count fewer rows here are read whole
        CREATE TEMPORARY TABLE hpcacct_resync_blocks ON COMMIT DROP AS SELECT 0::bigint AS blk, 0::bigint AS missing LIMIT 0;
        EXECUTE pg_catalog.format('INSERT INTO pg_temp.hpcacct_resync_blocks '
                                  'SELECT b.blk, b.rows - (SELECT pg_catalog.count(*) FROM @extschema@.ledger l '
                                  '                        WHERE l.entry_id >= b.blk * 65536 AND l.entry_id < (b.blk + 1) * 65536) '
                                  'FROM %s.dblink(''hpcacct_resync'', %L) AS b(blk bigint, rows bigint)',
                                  dbl, pg_catalog.format('SELECT entry_id / 65536, pg_catalog.count(*) FROM @extschema@.ledger '
                                                         'WHERE %s GROUP BY 1', carried));
        copied := 0;
        FOR blk, n IN SELECT b.blk, b.missing FROM pg_temp.hpcacct_resync_blocks b WHERE b.missing <> 0 ORDER BY b.blk LOOP
            EXECUTE pg_catalog.format('INSERT INTO @extschema@.ledger OVERRIDING SYSTEM VALUE SELECT e.* '
                                      'FROM %s.dblink(''hpcacct_resync'', %L) AS r(j text), '
                                      'LATERAL pg_catalog.json_populate_record(NULL::@extschema@.ledger, r.j::json) e '
                                      'WHERE NOT EXISTS (SELECT 1 FROM @extschema@.ledger l WHERE l.entry_id = e.entry_id) '
                                      'ORDER BY e.entry_id',
                                      dbl, pg_catalog.format('SELECT pg_catalog.row_to_json(l)::text FROM @extschema@.ledger l '
                                                             'WHERE l.entry_id >= %s AND l.entry_id < %s',
                                                             blk * 65536, (blk + 1) * 65536));
            copied := copied + n;
        END LOOP;
        EXECUTE pg_catalog.format('SELECT %s.dblink_exec(''hpcacct_resync'', ''COMMIT'')', dbl);
        EXECUTE pg_catalog.format('SELECT %s.dblink_disconnect(''hpcacct_resync'')', dbl);
        -- the held charges go in at this commit, rolled up
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        EXECUTE pg_catalog.format('ALTER SUBSCRIPTION %I ENABLE', link);
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        -- every hold of this session (a failed run left one)
        WHILE pg_catalog.pg_advisory_unlock(pg_catalog.hashtext('hpcacct.federation_resync'), pg_catalog.hashtext(link)) LOOP
        END LOOP;
        RAISE NOTICE '%: new slot; % ledger rows copied, % reference rows written, % deleted', link, copied, refs, gone;
    END
    $$;
REVOKE EXECUTE ON PROCEDURE @extschema@.federation_resync(integer) FROM PUBLIC;
COMMENT ON PROCEDURE @extschema@.federation_resync(integer) IS
    'At the receiving end of a federation link whose slot was lost: a new slot at the sender, and the rows missing '
    'here copied from its snapshot (dblink); at the centre the site''s number, at a site 0';

CREATE OR REPLACE VIEW @extschema@.federation_status WITH (security_invoker = true) AS
    WITH links AS (
        SELECT (pg_catalog.regexp_match(s.subname, '^hpcacct_fed_(c2s|s2c)_([0-9]+)$'))[2]::integer AS link_site,
               s.subname AS link, 'from' AS direction, s.subenabled AS enabled
        FROM pg_catalog.pg_subscription s
        WHERE s.subname ~ '^hpcacct_fed_(c2s|s2c)_[0-9]+$'
          AND s.subdbid = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
        UNION ALL
        SELECT (pg_catalog.regexp_match(r.slot_name::text, '^hpcacct_fed_(c2s|s2c)_([0-9]+)$'))[2]::integer,
               r.slot_name::text, 'to', true
        FROM pg_catalog.pg_replication_slots r
        WHERE r.slot_name ~ '^hpcacct_fed_(c2s|s2c)_[0-9]+$' AND r.database = pg_catalog.current_database()
    ), ends AS (  -- the other end of each link: at a site, the centre
        SELECT k.*, CASE WHEN n.role = 'site' THEN 0 ELSE k.link_site END AS other_end, n.role, n.site AS me
        FROM links k
        LEFT JOIN @extschema@.federation_node n ON true
    )
    SELECT k.other_end AS site, k.direction, k.link, k.enabled,
           CASE WHEN k.direction = 'from'
                THEN EXISTS (SELECT 1 FROM pg_catalog.pg_stat_subscription st
                             WHERE st.subname = k.link AND st.relid IS NULL AND st.pid IS NOT NULL)
                ELSE EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots r WHERE r.slot_name = k.link AND r.active)
           END AS connected,
           last.entry_id AS last_entry_id, last.booked_at AS last_booked_at,
           CASE WHEN k.direction = 'from'
                THEN (SELECT st.last_msg_receipt_time FROM pg_catalog.pg_stat_subscription st
                      WHERE st.subname = k.link AND st.relid IS NULL) END AS last_message_at,
           CASE WHEN k.direction = 'to'
                THEN (SELECT pg_catalog.max(sr.replay_lag) FROM pg_catalog.pg_stat_replication sr
                      WHERE sr.application_name = k.link) END AS lag,
           CASE WHEN k.direction = 'to'
                THEN (SELECT pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), r.confirmed_flush_lsn)
                      FROM pg_catalog.pg_replication_slots r WHERE r.slot_name = k.link) END AS pending_wal_bytes,
           CASE WHEN k.direction = 'to' AND EXISTS (
                    SELECT 1 FROM pg_catalog.pg_replication_slots r
                    WHERE r.slot_name = k.link AND r.confirmed_flush_lsn >= pg_catalog.pg_current_wal_insert_lsn())
                THEN 0  -- the receiver confirmed all the WAL written here
                ELSE pending.rows END AS rows_pending,
           pending.reported_at AS receiver_reported_at,
           CASE WHEN k.direction = 'to'
                THEN (SELECT r.wal_status FROM pg_catalog.pg_replication_slots r WHERE r.slot_name = k.link) END
               AS wal_status
    FROM ends k
    LEFT JOIN LATERAL (
        SELECT l.entry_id, l.booked_at FROM @extschema@.ledger l,
               LATERAL (SELECT @extschema@.federation_id_range(k.other_end) AS ids) r
        WHERE k.direction = 'from'
          AND l.entry_id >= pg_catalog.lower(r.ids) AND l.entry_id < pg_catalog.upper(r.ids)
        ORDER BY l.entry_id DESC LIMIT 1
    ) last ON true
    LEFT JOIN LATERAL (
        -- per origin the link carries (a site: its own rows; the centre: every origin but the
        -- receiver's), the rows above the last one the receiver reported
        SELECT pg_catalog.sum(c.rows)::bigint AS rows, pg_catalog.max(p.received_at) AS reported_at
        FROM (SELECT k.me AS origin WHERE k.role = 'site'
              UNION ALL SELECT 0 WHERE k.role = 'centre'
              UNION ALL SELECT s.site FROM @extschema@.federation_site s WHERE k.role = 'centre') o
        LEFT JOIN @extschema@.federation_received p ON p.receiver = k.other_end AND p.origin = o.origin
        CROSS JOIN LATERAL (SELECT @extschema@.federation_id_range(o.origin) AS ids) r
        CROSS JOIN LATERAL (
            SELECT pg_catalog.count(*) AS rows FROM @extschema@.ledger l
            WHERE l.entry_id > coalesce(p.last_entry_id, pg_catalog.lower(r.ids) - 1)
              AND l.entry_id < pg_catalog.upper(r.ids)
        ) c
        WHERE k.direction = 'to' AND o.origin <> k.other_end
    ) pending ON k.direction = 'to';
COMMENT ON VIEW @extschema@.federation_status IS
    'Per federation link of this database: the site at the other end, direction, connected, the last ledger row '
    'received from it; for outgoing links the lag, unconfirmed WAL, the rows the receiver has not reported received '
    'and the slot''s wal_status (lost: run federation_resync at the receiver)';
COMMENT ON COLUMN @extschema@.federation_status.wal_status IS
    'An outgoing link''s slot: reserved, extended, unreserved or lost (lost: the receiver gets nothing more until federation_resync() there)';
DO $do$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'hpcacct_admin') THEN
        GRANT EXECUTE ON PROCEDURE @extschema@.federation_resync(integer) TO hpcacct_admin;
        GRANT EXECUTE ON FUNCTION hpcacct_internal.federation_dblink_schema() TO hpcacct_admin;
    END IF;
END
$do$;

-- ==== add_member(), remove_member(): a NULL account is 22004 for a portal user too, a bad role 22023 ---
-- (a NULL account was 42501, "not an administrator of account <NULL>"; a bad role the
-- membership table's check constraint). Both: defined in the final definitions below

-- ==== deposit(), transfer(), refund(): an amount that rounds to 0 at 6 decimals is 22003 ---
-- (a deposit failed the ledger's sign constraint, a transfer booked two rows of 0).
-- require_amount(): defined in the final definitions below

-- ==== regulation_year(): an unknown month convention is 22023 on a machine without events too ---
-- (it printed a row of zeros). Defined in the final definitions below

-- ==== charge_jobs(): a job with an infinite start or end is 22008 naming the job -----------
-- (it was PostgreSQL's "cannot subtract infinite timestamps" with the trigger's query).
-- Defined in the final definitions below

-- ==== check_submit(), account_verdict(), slurm_associations(): an infinite day names the caller ---
-- (account_verdict() and slurm_associations() said check_submit; check_submit() answered
-- unknown_user for an unknown user at an infinite day). Defined in the final definitions below

-- ==== usage_by_*(): a NULL or infinite instant is refused in the report's own name ---------
-- (they said "allocation_year: at must not be NULL"). Defined in the final definitions below

-- ==== allocation_status(), regulation_year(), consumption_before(): an unknown machine is 42704 (it read as one with nothing on it: zeros, status ok) ---
-- the three functions: defined in the final definitions below
CREATE FUNCTION hpcacct_internal.require_pool(pool text, caller text) RETURNS text
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF pool IS NULL THEN
            RAISE EXCEPTION '%: machine must not be NULL', caller USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF NOT EXISTS (SELECT 1 FROM @extschema@.resource r WHERE coalesce(r.pool, r.cluster) = require_pool.pool)
           AND NOT EXISTS (SELECT 1 FROM @extschema@.ledger l WHERE l.kind <> 'charge' AND l.pool = require_pool.pool) THEN
            RAISE EXCEPTION '%: unknown machine "%"', caller, pool
                USING ERRCODE = 'undefined_object',
                      HINT = 'A machine is the pool (or else the cluster) of a row of hpcacct.resource, or the pool of an allocation.';
        END IF;
        RETURN pool;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.require_pool(text, text) IS
    'A machine (pool) argument: NULL is an error (22004), one no resource charges to and no allocation names too (42704)';

-- ==== add_user(''), add_quota_period()'s negative or NaN allowance and inverted period: 22023 / 22003 in the caller's terms (they were the tables' constraints, 23514) ---
-- add_user(), add_quota_period(): defined in the final definitions

-- ==== final definitions ---------------------------------------------------------------
-- The sections above come from several changes, some to the same functions. Every function
-- and procedure they define is defined here once more, as sql/install has it, so that the
-- update ends where a fresh install of 0.4 starts.
CREATE OR REPLACE FUNCTION @extschema@.decay_weight(ts timestamptz, at timestamptz, half_life interval) RETURNS float8
    AS 'MODULE_PATHNAME', 'hpcacct_decay_weight' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.decay_weight(timestamptz, timestamptz, interval) IS
    'Half-life decay weight 2^(-(at - ts) / half_life); 0 for ts after at and for ages past float8''s range';
CREATE OR REPLACE FUNCTION @extschema@.compact_rollup() RETURNS bigint
    LANGUAGE sql
    SET search_path = pg_catalog, pg_temp
    RETURN hpcacct_internal.fold_rollup((pg_catalog.date_trunc('month', pg_catalog.now() AT TIME ZONE @extschema@.site_timezone())
                                    - interval '1 month')::date);
COMMENT ON FUNCTION @extschema@.compact_rollup() IS
    'Merges the new rows of the charge and consumption rollups into one per group (exact, idempotent) and folds '
    'the months before the current into fairshare_base and usage_base; returns the charge rollup rows it merged';
CREATE OR REPLACE FUNCTION @extschema@.fairshare_all(at timestamptz DEFAULT pg_catalog.now())
    RETURNS TABLE (pool text, unit text, account text, submitter text, allocation numeric, share float8,
                   usage float8, norm_usage float8, year_usage numeric, exhausted boolean, factor float8)
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    SET jit = off
    AS $$
        SELECT pg_catalog.isfinite(coalesce($1, pg_catalog.now()))
               OR hpcacct_internal.refuse_argument($1, 'fairshare_all', 'at');  -- 22008
        WITH cfg AS MATERIALIZED (
            SELECT coalesce($1, pg_catalog.now()) AS at,
                   (coalesce($1, pg_catalog.now()) AT TIME ZONE z.tz)::date AS day,
                   z.tz,
                   pg_catalog.date_trunc('month', coalesce($1, pg_catalog.now()) AT TIME ZONE z.tz) AS at_month,
                   @extschema@.setting_value('decay') AS form,
                   @extschema@.setting_value('half_life')::interval AS half_life,
                   @extschema@.setting_value('period')::interval AS period,
                   @extschema@.setting_value('period_decay')::float8 AS decay,
                   @extschema@.setting_value('depth')::integer AS depth,
                   @extschema@.setting_value('exhausted_factor')::float8 AS penalty
            FROM (SELECT @extschema@.site_timezone() AS tz) z
        ), recent AS MATERIALIZED (
            -- the jobs read from the ledger: those that ended in the month of `at` (half-life;
            -- earlier ones are in the rollup), or in the counted periods (interval). Half-life:
            -- none when the rollup's sum of that month, decayed to the month's end, can be
            -- scaled back to `at` (closed_form): no charge of the month ends after `at` (a
            -- report of now), and the month's end is at most 64 half-lives after `at`
            SELECT cfg.*,
                   CASE cfg.form WHEN 'half_life' THEN cfg.at_month AT TIME ZONE cfg.tz
                                 ELSE cfg.at - cfg.depth * cfg.period END AS since,
                   cfg.form = 'half_life'
                   AND @extschema@.decay_weight(cfg.at, (cfg.at_month + interval '1 month') AT TIME ZONE cfg.tz,
                                                cfg.half_life) >= 2 ^ -64
                   -- (an aggregate, not NOT EXISTS: planned for all its rows, it takes the BRIN index
                   -- on job_end; an EXISTS, planned for its first row, scanned the whole ledger)
                   AND (SELECT max(l.job_end) FROM @extschema@.ledger l
                        WHERE l.kind = 'charge' AND l.job_end > coalesce($1, pg_catalog.now())
                          AND l.job_end < (cfg.at_month + interval '1 month') AT TIME ZONE cfg.tz) IS NULL
                       AS closed_form
            FROM cfg
        ), factors AS MATERIALIZED (
            -- half-life: how much the rollup's decayed sums of each month decay until `at`,
            -- by month number (year * 12 + month - 1) from the rollup's first month on; the
            -- month of `at` (closed form) is scaled back from its end: 1 / 2^(-(end - at) / half_life)
            SELECT f.first_index,
                   pg_catalog.array_agg(CASE WHEN m.month < w.at_month
                                             THEN @extschema@.decay_weight((m.month + interval '1 month') AT TIME ZONE w.tz,
                                                                           w.at, w.half_life)
                                             ELSE 1 / @extschema@.decay_weight(w.at, (m.month + interval '1 month') AT TIME ZONE w.tz,
                                                                               w.half_life) END
                                        ORDER BY m.month) AS factor
            FROM recent w
            CROSS JOIN (SELECT min(c.end_month) AS first_month,
                               (pg_catalog.date_part('year', min(c.end_month)) * 12
                                + pg_catalog.date_part('month', min(c.end_month)) - 1)::integer AS first_index
                        FROM hpcacct_internal.charge_rollup_exact c) f
            CROSS JOIN LATERAL pg_catalog.generate_series(f.first_month,
                                                          w.at_month - CASE WHEN w.closed_form THEN interval '0'
                                                                            ELSE interval '1 month' END,
                                                          interval '1 month') AS m(month)
            WHERE w.form = 'half_life'
            GROUP BY f.first_index
        ), base AS MATERIALIZED (
            -- fairshare_base serves `at` when everything in it ended before the month of `at`
            -- (compaction decays every row to the latest month folded when that month advances)
            SELECT coalesce((SELECT max(b.through) FROM @extschema@.fairshare_base b) < cfg.at_month, true) AS usable
            FROM cfg
        ), alloc AS (
            -- as in year_allocations: a row without a pool (the quarterly bank's deposits,
            -- transfers, refunds) is credit for every pool charged in its unit
            SELECT coalesce(l.pool, u.pool) AS pool, l.unit, l.account, greatest(sum(l.amount), 0) AS allocation
            FROM @extschema@.ledger l
            CROSS JOIN cfg
            LEFT JOIN (SELECT DISTINCT r.unit, coalesce(r.pool, r.cluster) AS pool FROM @extschema@.resource r) u
              ON l.pool IS NULL AND u.unit = l.unit
            WHERE l.kind <> 'charge' AND coalesce(l.pool, u.pool) IS NOT NULL
              AND cfg.day BETWEEN l.valid_from AND l.valid_until
            GROUP BY coalesce(l.pool, u.pool), l.unit, l.account
        ), jobs AS (
            -- the charges and reversals themselves: a reversal decays exactly as the charge it
            -- cancels (same end, same amount) and is subtracted, so a re-rated job counts its
            -- new charge and a deleted one nothing, without grouping the ledger by job
            SELECT l.resource_id, l.unit, l.account, l.submitter, l.job_end,
                   abs(l.amount)::float8 AS amount, l.amount < 0 AS reversal, l.amount AS net
            FROM recent w
            JOIN @extschema@.ledger l ON l.job_end >= w.since AND l.job_end <= w.at
            WHERE l.kind = 'charge' AND NOT w.closed_form
        ), decayed AS (
            -- usage: decayed (a sum of floats: never below 0), rounded to float8's 15 significant
            -- decimal digits (the cast to numeric), so that the closed form's last bits do not
            -- show where the job-by-job sum is a short decimal; net: exact, what makes a user count
            SELECT d.pool, d.unit, d.account, d.submitter, greatest(sum(d.usage), 0)::numeric::float8 AS usage,
                   sum(d.net) AS net
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
                -- half-life: the rollup's sums for the jobs that ended before the month of `at`
                -- (and in it, closed form), decayed from the end of the month they ended in to
                -- `at`; the rows folded into fairshare_base are read from there when it was
                -- folded before that month
                SELECT coalesce(r.pool, r.cluster), c.unit, c.account, c.submitter,
                       sum(c.decayed * (SELECT f.factor FROM factors f)[
                               (pg_catalog.date_part('year', c.end_month) * 12 + pg_catalog.date_part('month', c.end_month))::integer
                               - (SELECT f.first_index FROM factors f)]),
                       sum(c.job_amount)
                FROM (SELECT c.* FROM hpcacct_internal.charge_rollup_exact c WHERE NOT c.folded  -- its partial index
                      UNION ALL
                      SELECT c.* FROM @extschema@.charge_rollup c WHERE c.folded AND NOT (SELECT b.usable FROM base b)) c
                JOIN @extschema@.resource r USING (resource_id)
                WHERE (c.end_month < (SELECT w.at_month FROM recent w)
                       OR (c.end_month = (SELECT w.at_month FROM recent w) AND (SELECT w.closed_form FROM recent w)))
                  AND (SELECT w.form FROM recent w) = 'half_life'
                GROUP BY coalesce(r.pool, r.cluster), c.unit, c.account, c.submitter
                UNION ALL
                SELECT coalesce(r.pool, r.cluster), b.unit, b.account, b.submitter,
                       sum(b.decayed * @extschema@.decay_weight((b.through + interval '1 month')::timestamp AT TIME ZONE cfg.tz,
                                                                cfg.at, cfg.half_life)),
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
            LEFT JOIN @extschema@.usage_by_account(NULL, coalesce($1, pg_catalog.now())) y
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
    'Fair share at at (NULL: now) per pool and account (submitter NULL) and per user inside it: allocation valid at at, '
    'target share, decayed and normalized usage, usage in the allocation year, exhausted flag, '
    'factor 2^(-norm_usage / share) (times setting exhausted_factor when the year''s allocation is used up)';
CREATE OR REPLACE FUNCTION @extschema@.fairshare(at timestamptz DEFAULT pg_catalog.now())
    RETURNS TABLE (pool text, unit text, account text, submitter text, allocation numeric, share float8,
                   usage float8, norm_usage float8, year_usage numeric, exhausted boolean, factor float8)
    LANGUAGE plpgsql STABLE SECURITY DEFINER PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        instant constant timestamptz := coalesce(fairshare.at, pg_catalog.now());
        sees_all constant boolean := EXISTS (
            SELECT 1 FROM pg_catalog.pg_roles r
            WHERE (r.rolname IN ('hpcacct_admin', 'hpcacct_auditor')
                   AND pg_catalog.pg_has_role(pg_catalog.session_user(), r.oid, 'MEMBER'))
               OR (r.rolname = pg_catalog.session_user() AND r.rolsuper));
    BEGIN
        IF NOT pg_catalog.isfinite(instant) THEN
            RAISE EXCEPTION 'fairshare: at must be finite, not %', instant USING ERRCODE = 'datetime_field_overflow';
        END IF;
        IF NOT sees_all AND instant <> pg_catalog.now() THEN
            RAISE EXCEPTION 'fairshare() at % is for administrators: others see the present only', instant
                USING ERRCODE = 'insufficient_privilege', HINT = 'Call hpcacct.fairshare() without an argument.';
        END IF;
        RETURN QUERY
            SELECT f.pool, f.unit, f.account, f.submitter, f.allocation,
                   CASE WHEN sees_all THEN f.share END, f.usage,
                   CASE WHEN sees_all THEN f.norm_usage END, f.year_usage, f.exhausted, f.factor
            FROM @extschema@.fairshare_all(instant) f
            WHERE sees_all OR f.account = ANY (hpcacct_internal.visible_accounts());
    END
    $$;
COMMENT ON FUNCTION @extschema@.fairshare(timestamptz) IS
    'Fair-share table per pool, account and user (see fairshare_all); at NULL means now. Administrators and auditors '
    'see every row at any instant; others their accounts'' rows, now only, without share and norm_usage';
CREATE OR REPLACE FUNCTION @extschema@.top_up(account text, quarter date, target numeric) RETURNS numeric
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    #variable_conflict use_column
    DECLARE
        q constant date := @extschema@.quarter_start(quarter);
        bank_unit constant text := @extschema@.setting_value('bank_unit');
        booked numeric;
    BEGIN
        PERFORM hpcacct_internal.require_bank_account(account, 'top_up');
        IF quarter IS NULL OR target IS NULL THEN
            RAISE EXCEPTION 'top_up needs a quarter and a target' USING ERRCODE = 'null_value_not_allowed';
        ELSIF NOT isfinite(quarter) THEN
            RAISE EXCEPTION 'quarter must be a finite date' USING ERRCODE = 'datetime_field_overflow';
        ELSIF target = 'NaN' OR target < 0 OR target >= 1e14 THEN
            RAISE EXCEPTION 'top_up: target must be a number from 0 to below 10^14, not %', target
                USING ERRCODE = 'numeric_value_out_of_range';
        END IF;
        INSERT INTO @extschema@.ledger (account, kind, amount, unit, valid_from, valid_until, note)
        SELECT top_up.account, 'deposit', target - coalesce(sum(l.amount), 0), bank_unit, q,
               (q + interval '3 months')::date - 1, hpcacct_internal.top_up_note(target)
        FROM @extschema@.ledger l
        WHERE l.account = top_up.account AND l.kind = 'deposit' AND l.valid_from = q AND l.unit = bank_unit
        HAVING target - coalesce(sum(l.amount), 0) > 0
        ON CONFLICT (account, valid_from, note) WHERE kind = 'deposit' AND note LIKE 'personal allotment up to %'
        DO NOTHING
        RETURNING amount INTO booked;
        RETURN coalesce(booked, 0);
    END
    $$;
COMMENT ON FUNCTION @extschema@.top_up(text, date, numeric) IS
    'Deposits what an account lacks to reach a target in a quarter; returns the amount deposited';
CREATE OR REPLACE PROCEDURE @extschema@.open_quarter(q date)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        this_quarter constant date := @extschema@.quarter_start(q);
        previous_quarter constant date := (@extschema@.quarter_start(q) - interval '3 months')::date;
    BEGIN
        IF q IS NULL THEN
            RAISE EXCEPTION 'open_quarter needs a date' USING ERRCODE = 'null_value_not_allowed';
        ELSIF NOT isfinite(q) THEN
            RAISE EXCEPTION 'open_quarter needs a finite date' USING ERRCODE = 'datetime_field_overflow';
        END IF;
        -- one run at a time
        PERFORM pg_advisory_xact_lock(pg_catalog.hashtext('hpcacct.open_quarter'));

        -- top_up() of the personal accounts of members of projects active in this quarter
        -- (an allocation for q, not only for a later quarter), for this and the two following
        -- quarters, in one statement
        WITH cfg AS MATERIALIZED (
            SELECT @extschema@.setting_value('bank_unit') AS unit
        ), active AS (
            SELECT p.name
            FROM @extschema@.account p
            CROSS JOIN LATERAL @extschema@.bank_state(p.name, this_quarter) b
            WHERE p.kind = 'project' AND b.state = 'active'
        ), missing AS MATERIALIZED (
            SELECT a.name, t.target, lv.level,
                   lv.level - coalesce((SELECT sum(l.amount) FROM @extschema@.ledger l
                                        WHERE l.account = a.name AND l.kind = 'deposit' AND l.valid_from = t.target
                                          AND l.unit = cfg.unit), 0) AS amount
            FROM @extschema@.account a
            CROSS JOIN LATERAL (SELECT coalesce(a.personal_allotment,
                                                (SELECT @extschema@.setting_value('personal_allotment')::numeric))
                                           AS level) lv
            CROSS JOIN cfg
            CROSS JOIN LATERAL (SELECT (this_quarter + i * interval '3 months')::date AS target
                                FROM pg_catalog.generate_series(0, 2) AS i) t
            WHERE a.kind = 'personal' AND a.deleted_in IS NULL
              AND EXISTS (SELECT 1 FROM @extschema@.membership m JOIN active p ON p.name = m.account
                          WHERE m.username = a.name)
        ), booked AS (
            INSERT INTO @extschema@.ledger (account, kind, amount, unit, valid_from, valid_until, note)
            SELECT m.name, 'deposit', m.amount, cfg.unit, m.target, (m.target + interval '3 months')::date - 1,
                   hpcacct_internal.top_up_note(m.level)
            FROM missing m, cfg
            WHERE m.amount > 0
            ORDER BY m.name, m.target
            ON CONFLICT (account, valid_from, note) WHERE kind = 'deposit' AND note LIKE 'personal allotment up to %'
            DO NOTHING
            RETURNING account, valid_from, amount
        )
        INSERT INTO @extschema@.quarter_log (quarter, account, action, target_quarter, amount)
        SELECT this_quarter, b.account, 'top_up', b.valid_from, b.amount
        FROM booked b
        ORDER BY b.account, b.valid_from
        ON CONFLICT ON CONSTRAINT quarter_log_once
        DO UPDATE SET amount = @extschema@.quarter_log.amount + EXCLUDED.amount;

        -- expire personal accounts without an allocation for this quarter
        INSERT INTO @extschema@.quarter_log (quarter, account, action, target_quarter)
        SELECT this_quarter, a.name, 'expired', this_quarter
        FROM @extschema@.account a
        CROSS JOIN LATERAL @extschema@.bank_state(a.name, this_quarter) b
        WHERE a.kind = 'personal' AND a.deleted_in IS NULL AND b.state <> 'active'
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
            CROSS JOIN LATERAL @extschema@.bank_state(u.default_account, this_quarter) b
            WHERE u.default_account IS NOT NULL AND b.state IN ('expired', 'deleted')
            FOR UPDATE OF u
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
COMMENT ON PROCEDURE @extschema@.open_quarter(date) IS
    'Quarter start (HLRN): top up personal accounts, expire and delete them, reset default projects; idempotent';
CREATE OR REPLACE FUNCTION @extschema@.balance(account text, at date DEFAULT @extschema@.site_today())
    RETURNS numeric
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM hpcacct_internal.require_account(account, 'balance');
        RETURN (SELECT b.balance FROM @extschema@.bank_state(account, hpcacct_internal.day_or_today(at, 'balance')) b);
    END
    $$;
COMMENT ON FUNCTION @extschema@.balance(text, date) IS
    'Balance of an account in the quarter containing at (default and NULL: today in the site time zone): '
    'deposits + transfers + refunds - charges, exact; an unknown or invisible account is an error (42704)';
CREATE OR REPLACE FUNCTION @extschema@.account_state(account text, at date DEFAULT @extschema@.site_today())
    RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN (SELECT b.state FROM @extschema@.bank_state(account, hpcacct_internal.day_or_today(at, 'account_state')) b);
COMMENT ON FUNCTION @extschema@.account_state(text, date) IS
    'active (an allocation this quarter), inactive (none this quarter, one later), expired (none this quarter or '
    'later), or deleted, at a day (NULL: today in the site time zone); NULL for an unknown account';
CREATE OR REPLACE FUNCTION @extschema@.check_submit(username text, account text DEFAULT NULL,
                                         at date DEFAULT @extschema@.site_today())
    RETURNS @extschema@.submit_decision
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    SET plan_cache_mode = force_generic_plan
    AS $$
    DECLARE
        chosen text := account;
        verdict @extschema@.submit_decision;
    BEGIN
        IF username IS NULL THEN
            RAISE EXCEPTION 'check_submit: username must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        -- before any answer: an unknown user with an infinite day is an error too
        IF NOT isfinite(at) THEN
            RAISE EXCEPTION 'check_submit: % is not a finite date', at USING ERRCODE = 'datetime_field_overflow';
        END IF;
        IF chosen IS NULL THEN
            SELECT coalesce(u.default_account, u.username) INTO chosen
            FROM @extschema@.hpc_user u WHERE u.username = check_submit.username;
            IF NOT FOUND THEN
                RETURN ROW(false, NULL::text, 'unknown_user',
                           format('user %s is not known to the accounting system: submit with an account '
                                  '(sbatch -A) or ask support to register you', username))::@extschema@.submit_decision;
            END IF;
        END IF;
        verdict := @extschema@.account_verdict(chosen, at);
        IF verdict.reason = 'unknown_account' AND account IS NULL THEN
            -- a user with neither a default project nor a personal account (sync_slurm_accounts adds none)
            RETURN ROW(false, chosen, 'unknown_account',
                       format('user %s has no default project and no personal account: submit with an account '
                              '(sbatch -A)', username))::@extschema@.submit_decision;
        ELSIF verdict.reason IN ('unknown_account', 'account_deleted') THEN
            RETURN verdict;
        END IF;
        IF NOT EXISTS (SELECT 1 FROM @extschema@.membership m
                       WHERE m.account = chosen AND m.username = check_submit.username) THEN
            RETURN ROW(false, chosen, 'no_access',
                       format('user %s is not a member of account %s: ask one of its project administrators '
                              'to add you, or submit with another account', username, chosen))::@extschema@.submit_decision;
        END IF;
        RETURN verdict;
    END
    $$;
COMMENT ON FUNCTION @extschema@.check_submit(text, text, date) IS
    'Submit check under the account''s policies: resolves the default project; refuses unknown_user, unknown_account, '
    'account_deleted, no_access, account_expired, account_inactive, negative_balance, quota_blocked, no_allocation, '
    'allocation_exhausted, with a message';
CREATE OR REPLACE FUNCTION @extschema@.window_quota_usage(
        account text,
        at date DEFAULT @extschema@.site_today())
    RETURNS TABLE (account text, period_start date, period_end date, month date, state text,
                   monthly float8, remaining_prev float8, consumed_current float8,
                   consumable_pct float8, consumable float8, cluster text, unit text)
    LANGUAGE sql STABLE PARALLEL SAFE ROWS 1
    BEGIN ATOMIC
        SELECT * FROM hpcacct_internal.window_quota_usage_rows(window_quota_usage.account, window_quota_usage.at);
    END;
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
CREATE OR REPLACE FUNCTION @extschema@.year_allocations(for_year integer, at timestamptz)
    RETURNS TABLE (pool text, unit text, account text, allocation numeric)
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        WITH allocations AS MATERIALIZED (
            SELECT coalesce(l.pool, u.pool) AS pool, l.unit, l.account, l.amount, l.valid_from, l.valid_until
            FROM @extschema@.ledger l
            LEFT JOIN (SELECT DISTINCT r.unit, coalesce(r.pool, r.cluster) AS pool FROM @extschema@.resource r) u
              ON l.pool IS NULL AND u.unit = l.unit
            WHERE l.kind <> 'charge' AND coalesce(l.pool, u.pool) IS NOT NULL
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
    'Allocation of each account in each pool (ledger.pool; without one, every pool charged in its unit) '
    'and unit for the allocation year, allocation rows pro rata by their days of validity inside it';
CREATE OR REPLACE FUNCTION @extschema@.rerate(resource_id bigint, new_rate float8, effective_from timestamptz,
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
            SELECT l.account, l.unit, l.cluster, l.jobid, l.job_submit, l.submitter, l.job_start, l.job_end,
                   sum(l.amount) AS amount, sum(l.core_hours) AS core_hours
            FROM @extschema@.ledger l
            WHERE l.kind = 'charge' AND l.resource_id = rerate.resource_id AND l.job_start >= effective_from
            GROUP BY l.account, l.unit, l.cluster, l.jobid, l.job_submit, l.submitter, l.job_start, l.job_end
            HAVING sum(l.amount) <> 0
        ), reversed AS (
            INSERT INTO @extschema@.ledger (account, kind, amount, unit, resource_id, cluster, jobid, job_submit,
                                            submitter, job_start, job_end, note, core_hours)
            SELECT m.account, 'charge', -m.amount, m.unit, rerate.resource_id, m.cluster, m.jobid, m.job_submit,
                   m.submitter, m.job_start, m.job_end, 'reversal: ' || label, -m.core_hours
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
            INSERT INTO @extschema@.ledger (account, kind, amount, unit, resource_id, cluster, jobid, job_submit,
                                            submitter, job_start, job_end, note, core_hours)
            SELECT l.account, 'charge', round(-l.amount * (new_rate::numeric / was.rate::numeric), 6), l.unit, new_id,
                   l.cluster, l.jobid, l.job_submit, l.submitter, l.job_start, l.job_end, label, -l.core_hours
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
CREATE OR REPLACE FUNCTION @extschema@.add_member(account text, username text, role text DEFAULT 'member',
                                       by_user text DEFAULT NULL)
    RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        -- a NULL account is bad input, not an account the caller does not administer
        IF account IS NULL THEN
            RAISE EXCEPTION 'add_member: account must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        PERFORM hpcacct_internal.require_member_manager(account, by_user);
        PERFORM hpcacct_internal.require_bank_account(account, 'add_member');
        IF username IS NULL THEN
            RAISE EXCEPTION 'add_member: username must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        ELSIF role IS NULL THEN
            RAISE EXCEPTION 'add_member: role must not be NULL (member or admin)' USING ERRCODE = 'null_value_not_allowed';
        ELSIF role NOT IN ('member', 'admin') THEN
            RAISE EXCEPTION 'add_member: role must be member or admin, not "%"', role USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF NOT EXISTS (SELECT 1 FROM @extschema@.hpc_user u WHERE u.username = add_member.username) THEN
            RAISE EXCEPTION 'unknown user "%"', username USING ERRCODE = 'undefined_object';
        END IF;
        PERFORM hpcacct_internal.require_admin(account, by_user);
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
        IF account IS NULL OR username IS NULL THEN
            RAISE EXCEPTION 'remove_member: account and username must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        PERFORM hpcacct_internal.require_member_manager(account, by_user);
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
CREATE OR REPLACE PROCEDURE @extschema@.setup_roles()
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        r record;
    BEGIN
        FOR r IN SELECT * FROM (VALUES
            ('hpcacct_admin', 'hpcacct: administers the site: every table, function and procedure of the extension'),
            ('hpcacct_ingest', 'hpcacct: the loader: inserts jobs, COPYs into sacct_staging and runs load_sacct()'),
            ('hpcacct_portal', 'hpcacct: a portal user: reads their own accounts'' rows; a project administrator '
                               'also manages the members of their projects'),
            ('hpcacct_auditor', 'hpcacct: reads every account''s rows and figures and changes nothing'),
            ('hpcacct_submit', 'hpcacct: the Slurm submit check: runs check_submit() for any user and account')
        ) AS v(name, description) LOOP
            IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles x WHERE x.rolname = r.name) THEN
                EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', r.name);
            END IF;
            EXECUTE pg_catalog.format('COMMENT ON ROLE %I IS %L', r.name, r.description);
        END LOOP;
        GRANT USAGE ON SCHEMA @extschema@, hpcacct_internal TO hpcacct_admin, hpcacct_ingest, hpcacct_portal, hpcacct_auditor;
        GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA @extschema@ TO hpcacct_admin;
        -- the rollups are the ledger's sums: written by the functions that compute them, which run
        -- as the owner (the ledger's trigger, rebuild_rollup, roll_up_pending, compact_rollup)
        REVOKE INSERT, UPDATE, DELETE ON @extschema@.charge_rollup, @extschema@.consumption_rollup,
                                         @extschema@.fairshare_base, @extschema@.usage_base, @extschema@.rollup_pending
            FROM hpcacct_admin;
        GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA @extschema@ TO hpcacct_admin;
        GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA @extschema@, hpcacct_internal TO hpcacct_admin;
        GRANT EXECUTE ON ALL PROCEDURES IN SCHEMA @extschema@ TO hpcacct_admin;
        IF pg_catalog.to_regclass('@extschema@.job') IS NOT NULL THEN
            GRANT INSERT ON @extschema@.job TO hpcacct_ingest;
        END IF;
        -- the sacct loader (95_sacct.sql): COPY into the staging table, then load_sacct()
        GRANT INSERT ON @extschema@.sacct_staging TO hpcacct_ingest;
        GRANT EXECUTE ON FUNCTION @extschema@.load_sacct(timestamptz, text[]),
                                  @extschema@.sacct_window_start(text, interval) TO hpcacct_ingest;
        GRANT SELECT ON ALL TABLES IN SCHEMA @extschema@ TO hpcacct_portal;
        -- staged lines are every account's, and not behind row-level security (COPY refuses it)
        REVOKE SELECT ON @extschema@.sacct_staging, @extschema@.sacctmgr_staging FROM hpcacct_portal;
        -- project administrators manage their projects' members from a portal (the functions
        -- check that the session user administers the account)
        GRANT EXECUTE ON FUNCTION @extschema@.add_member(text, text, text, text),
                                  @extschema@.remove_member(text, text, text) TO hpcacct_portal;
        -- the auditor reads every table (row-level security lets it see every account) and
        -- the fair share of every account; it writes nothing and runs no administrative function
        GRANT SELECT ON ALL TABLES IN SCHEMA @extschema@ TO hpcacct_auditor;
        GRANT EXECUTE ON FUNCTION @extschema@.fairshare_all(timestamptz) TO hpcacct_auditor;
        PERFORM hpcacct_internal.grant_submit_role();
        -- a portal user keeps their own contact row (its policy admits no other)
        GRANT INSERT (username, email, display_name, notify), UPDATE (email, display_name, notify)
            ON @extschema@.contact TO hpcacct_portal;
    END
    $$;
COMMENT ON PROCEDURE @extschema@.setup_roles() IS
    'Creates hpcacct_admin, hpcacct_ingest, hpcacct_portal, hpcacct_auditor and hpcacct_submit if missing and grants '
    'their privileges';
CREATE OR REPLACE FUNCTION @extschema@.account_policies(account text) RETURNS text[]
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        a record;
        has_quota boolean;
        has_regulation boolean;
        has_bank boolean;
    BEGIN
        IF account_policies.account IS NULL THEN
            RAISE EXCEPTION 'account_policies: account must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        SELECT x.name, x.kind, x.policies INTO a FROM @extschema@.account x WHERE x.name = account_policies.account;
        IF NOT FOUND THEN  -- as hpcacct_internal.require_account() says it
            RAISE EXCEPTION 'account "%" does not exist or is not visible to you', account
                USING ERRCODE = 'undefined_object',
                      HINT = 'Accounts are rows of hpcacct.account; a portal user sees only those they are a member of.';
        ELSIF a.policies IS NOT NULL THEN
            RETURN a.policies;
        ELSIF a.kind = 'special' THEN
            RETURN '{}'::text[];
        END IF;
        has_quota := EXISTS (SELECT 1 FROM @extschema@.quota_period p WHERE p.account = a.name);
        has_regulation := EXISTS (SELECT 1 FROM @extschema@.ledger l
                             WHERE l.account = a.name AND l.kind IN ('grant', 'supplement'));
        IF a.kind = 'personal' OR NOT (has_quota OR has_regulation) THEN
            has_bank := true;
        ELSE
            has_bank := EXISTS (SELECT 1 FROM @extschema@.ledger l
                                WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer', 'refund')
                                  AND l.unit = hpcacct_internal.bank_unit());
        END IF;
        RETURN pg_catalog.array_remove(ARRAY[CASE WHEN has_bank THEN 'bank' END,
                                             CASE WHEN has_quota THEN 'window_quota' END,
                                             CASE WHEN has_regulation THEN 'regulation' END], NULL);
    END
    $$;
COMMENT ON FUNCTION @extschema@.account_policies(text) IS
    'Submit rules binding an account: account.policies, or derived (special: none; window_quota with a quota period; '
    'regulation with a grant; bank with bank entries, for personal accounts, or when nothing else binds it); a NULL '
    '(22004) or unknown account (42704) is an error';
CREATE OR REPLACE FUNCTION @extschema@.account_verdict(account text, at date DEFAULT @extschema@.site_today())
    RETURNS @extschema@.submit_decision
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    SET plan_cache_mode = force_generic_plan
    AS $$
    DECLARE
        a record;
        pol text[];
        bank record;
        wq record;
        machines integer;
        open_machines integer;
        reason text;
        message text;
    BEGIN
        IF account IS NULL THEN
            RAISE EXCEPTION 'account_verdict: account must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        at := hpcacct_internal.day_or_today(at, 'account_verdict');  -- NULL: today; infinite: 22008
        SELECT x.name, x.deleted_in INTO a FROM @extschema@.account x WHERE x.name = account_verdict.account;
        IF NOT FOUND THEN
            RETURN ROW(false, account, 'unknown_account',
                       format('account %s does not exist: check the account you gave (sbatch -A)', account))::@extschema@.submit_decision;
        ELSIF a.deleted_in IS NOT NULL AND a.deleted_in <= at THEN
            RETURN ROW(false, account, 'account_deleted',
                       format('account %s has been deleted and cannot be used again', account))::@extschema@.submit_decision;
        END IF;
        pol := @extschema@.account_policies(account);

        IF 'bank' = ANY (pol) THEN
            SELECT b.state, b.next_allocation, b.balance INTO bank FROM @extschema@.bank_state(a.name, at) b;
            IF bank.state = 'expired' THEN
                RETURN ROW(false, account, 'account_expired',
                           format('account %s has no allocation for this or a later quarter: ask for a new '
                                  'allocation, or submit with another account (sbatch -A)', account))::@extschema@.submit_decision;
            ELSIF bank.state = 'inactive' THEN
                RETURN ROW(false, account, 'account_inactive',
                           format('account %s has no allocation for this quarter; its allocation begins on %s: '
                                  'ask staff to move allocation into this quarter, or submit with another account',
                                  account, bank.next_allocation))::@extschema@.submit_decision;
            ELSIF bank.balance < 0 THEN
                RETURN ROW(false, account, 'negative_balance',
                           format('account %s has a negative balance this quarter (%s %s): ask for a transfer '
                                  'or a deposit, or submit with another account',
                                  account, pg_catalog.trim_scale(bank.balance), hpcacct_internal.bank_unit()))::@extschema@.submit_decision;
            END IF;
        END IF;

        IF 'window_quota' = ANY (pol) THEN
            SELECT u.state, u.monthly, u.consumed_current, u.unit INTO wq
            FROM @extschema@.window_quota_usage(a.name, at) u;
            IF wq.state = 'blocked' THEN
                RETURN ROW(false, account, 'quota_blocked',
                           format('account %s is blocked by its sliding-window quota (%s %s used this month, '
                                  'monthly allowance %s): submit with another account',
                                  account, round(wq.consumed_current::numeric, 2), wq.unit,
                                  round(wq.monthly::numeric, 2)))::@extschema@.submit_decision;
            END IF;
        END IF;

        IF 'regulation' = ANY (pol) THEN
            SELECT count(*), count(*) FILTER (WHERE s.tmc > 0 AND s.consumption < s.alloc)
            INTO machines, open_machines
            FROM (SELECT DISTINCT l.pool FROM @extschema@.ledger l
                  WHERE l.account = a.name AND l.kind IN ('grant', 'supplement', 'retraction')
                    AND l.valid_from <= at AND l.valid_until >= at) m
            CROSS JOIN LATERAL @extschema@.allocation_status(a.name, m.pool, at) s;
            IF machines = 0 THEN
                RETURN ROW(false, account, 'no_allocation',
                           format('account %s has no allocation valid on %s: submit with another account', account, at))::@extschema@.submit_decision;
            ELSIF open_machines = 0 THEN
                RETURN ROW(false, account, 'allocation_exhausted',
                           format('account %s has used up its allocation (after retractions): ask for a supplement, '
                                  'or submit with another account', account))::@extschema@.submit_decision;
            END IF;
        END IF;

        RETURN ROW(true, account, NULL::text, NULL::text)::@extschema@.submit_decision;
    END
    $$;
COMMENT ON FUNCTION @extschema@.account_verdict(text, date) IS
    'What an account''s state allows at a day under the policies that bind it: ok, or one reason and a message';
CREATE OR REPLACE FUNCTION @extschema@.recheck_queued(at date DEFAULT @extschema@.site_today())
    RETURNS TABLE (cluster text, jobid text, reason text, message text)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        at := hpcacct_internal.day_or_today(at, 'recheck_queued');  -- NULL: today; infinite: 22008
        RETURN QUERY
        WITH checked AS (
            SELECT p.cluster, p.jobid, p.held AS was_held, c.ok, c.account, c.reason, c.message
            FROM @extschema@.pending_job p
            CROSS JOIN LATERAL @extschema@.check_submit(p.username, p.account, at) c
            FOR UPDATE OF p
        ), updated AS (
            UPDATE @extschema@.pending_job p
            SET held = NOT c.ok, hold_reason = CASE WHEN c.ok THEN NULL ELSE c.message END,
                checked_at = pg_catalog.now()
            FROM checked c
            WHERE p.cluster = c.cluster AND p.jobid = c.jobid
            RETURNING p.cluster, p.jobid, c.was_held, c.ok, c.account, c.reason, c.message
        )
        SELECT u.cluster, u.jobid, u.reason,
               CASE WHEN u.ok THEN format('released: account %s is valid again', u.account) ELSE u.message END
        FROM updated u
        WHERE u.was_held = u.ok   -- held and now valid, or not held and now invalid
        ORDER BY 1, 2;
    END
    $$;
COMMENT ON FUNCTION @extschema@.recheck_queued(date) IS
    'Holds queued jobs whose account became invalid and releases those whose account is valid again; '
    'returns the changes (releases with reason NULL)';
CREATE OR REPLACE FUNCTION @extschema@.slurm_associations(at date DEFAULT @extschema@.site_today())
    RETURNS TABLE (account text, policies text[], state text, reason text, message text)
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT hpcacct_internal.day_or_today($1, 'slurm_associations');  -- infinite: 22008, with no account too
        SELECT a.name, v.pol,
               CASE WHEN NOT (v.d).ok THEN 'blocked'
                    WHEN 'window_quota' = ANY (v.pol)
                         AND @extschema@.window_quota_state(a.name, $1) = 'low_priority' THEN 'low_priority'
                    ELSE 'normal' END,
               (v.d).reason, (v.d).message
        FROM @extschema@.account a
        CROSS JOIN LATERAL (SELECT @extschema@.account_policies(a.name) AS pol,
                                   @extschema@.account_verdict(a.name, $1) AS d) v
        ORDER BY a.name
    $$;
COMMENT ON FUNCTION @extschema@.slurm_associations(date) IS
    'The state each account''s Slurm association should have at a day: blocked (no submission), low_priority '
    '(a low QOS), normal; with the reason and message of a block';
CREATE OR REPLACE FUNCTION @extschema@.federation_id_range(site integer) RETURNS int8range
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN CASE WHEN site BETWEEN 0 AND 32767 OR hpcacct_internal.refuse_argument(site, 'federation_id_range', 'site')
                THEN pg_catalog.int8range(CASE WHEN site = 0 THEN 1 ELSE site::bigint * 281474976710656 END,
                                          (site::bigint + 1) * 281474976710656) END;
COMMENT ON FUNCTION @extschema@.federation_id_range(integer) IS
    'The ledger entry ids a federation site books: [site * 2^48, (site + 1) * 2^48); the centre (0) from 1; '
    'a site outside 0 to 32767 is an error (22023)';
CREATE OR REPLACE FUNCTION @extschema@.federation_origin(entry_id bigint) RETURNS integer
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN (entry_id / 281474976710656)::integer;
COMMENT ON FUNCTION @extschema@.federation_origin(bigint) IS
    'The federation site (0: the centre) that booked the ledger row with this id';
CREATE OR REPLACE FUNCTION @extschema@.federation_reference_tables() RETURNS regclass[]
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT ARRAY['@extschema@.setting', '@extschema@.account', '@extschema@.resource',
                     '@extschema@.hpc_user', '@extschema@.membership', '@extschema@.regulation_machine',
                     '@extschema@.exoneration', '@extschema@.quota_period', '@extschema@.monthly_allowance',
                     '@extschema@.pool', '@extschema@.fairshare_user',
                     '@extschema@.slurm_account_map']::text[]::regclass[]
    $$;
COMMENT ON FUNCTION @extschema@.federation_reference_tables() IS
    'The reference tables the centre publishes to every site (written at the centre only)';
-- At a site, the ledger is written by charging (charge_jobs(), which runs as the extension's
-- owner) and by replication. A row booked by a site's own session otherwise (a deposit, a
-- grant, a charge of its own making) would reach the centre's bank and every site: a
-- statement trigger refuses it (HA013) unless the session's role is the owner or a superuser.
CREATE OR REPLACE FUNCTION hpcacct_internal.federation_refuse_local_entry() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                       WHERE r.rolname = pg_catalog.current_user()
                         AND (r.rolsuper OR r.oid = (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = TG_RELID))) THEN
            RAISE EXCEPTION 'at a federation site the ledger is written by charging jobs only, not by role %',
                            pg_catalog.current_user()
                USING ERRCODE = 'HA013',
                      HINT = 'Book deposits, grants, transfers and corrections in the central database; they reach '
                             'every site by replication.';
        END IF;
        RETURN NULL;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.federation_refuse_local_entry() IS
    'Statement trigger of hpcacct.ledger at a federation site: refuses entries of the site''s own sessions but '
    'charging''s (HA013)';
CREATE OR REPLACE FUNCTION @extschema@.federation_prepare(site integer, role text) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        node   @extschema@.federation_node;
        ids    int8range;  -- the site's, once the site is checked
        seq    constant text := pg_catalog.pg_get_serial_sequence('@extschema@.ledger', 'entry_id');
        stray  bigint;
        filled boolean;
        tab    regclass;
        trig   name;
        fires  "char";
    BEGIN
        IF site IS NULL OR role IS NULL THEN
            RAISE EXCEPTION 'site and role must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF role NOT IN ('centre', 'site') OR (role = 'centre') <> (site = 0) OR site NOT BETWEEN 0 AND 32767 THEN
            RAISE EXCEPTION 'invalid federation site % for role %', site, role
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'The centre is site 0; cluster sites are numbered 1 to 32767.';
        END IF;
        ids := @extschema@.federation_id_range(site);
        SELECT * INTO node FROM @extschema@.federation_node;
        IF FOUND AND (node.site <> site OR node.role <> role) THEN
            RAISE EXCEPTION 'this database is already federation % %, not % %', node.role, node.site, role, site
                USING ERRCODE = 'HA010', HINT = 'A database has one place in a federation.';
        END IF;
        IF NOT FOUND THEN
            -- ids booked before: they must lie in the range, or they would collide with another site's
            SELECT count(*) INTO stray FROM @extschema@.ledger l WHERE NOT ids @> l.entry_id;
            IF stray > 0 THEN
                RAISE EXCEPTION 'the ledger holds % entries outside site %''s id range %', stray, site, ids
                    USING ERRCODE = 'HA011',
                          HINT = CASE WHEN role = 'centre' THEN 'An existing database can become the centre only.'
                                      ELSE 'A site joins with an empty ledger.' END;
            END IF;
            IF role = 'site' THEN
                -- reference data comes from the centre; rows of its own would conflict with the copy
                FOREACH tab IN ARRAY @extschema@.federation_reference_tables() LOOP
                    EXECUTE pg_catalog.format('SELECT EXISTS (SELECT 1 FROM %s)', tab) INTO filled;
                    IF filled THEN
                        RAISE EXCEPTION 'a joining site must not hold reference data: % has rows', tab
                            USING ERRCODE = 'HA012',
                                  HINT = 'Accounts, users, resources and settings are written at the centre; '
                                         'join with the extension freshly created.';
                    END IF;
                END LOOP;
            END IF;
            INSERT INTO @extschema@.federation_node (site, role) VALUES (site, role);
        END IF;

        -- the ledger's ids: this site's range only (a sequence never wraps: it stops at the end)
        IF EXISTS (SELECT 1 FROM @extschema@.ledger l
                   WHERE l.entry_id >= pg_catalog.lower(ids) AND l.entry_id < pg_catalog.upper(ids)) THEN
            EXECUTE pg_catalog.format('ALTER SEQUENCE %s MINVALUE %s MAXVALUE %s START WITH %s', seq,
                                      pg_catalog.lower(ids), pg_catalog.upper(ids) - 1, pg_catalog.lower(ids));
        ELSE
            EXECUTE pg_catalog.format('ALTER SEQUENCE %s MINVALUE %s MAXVALUE %s START WITH %s RESTART WITH %s', seq,
                                      pg_catalog.lower(ids), pg_catalog.upper(ids) - 1, pg_catalog.lower(ids),
                                      pg_catalog.lower(ids));
        END IF;

        -- triggers that must fire for rows received: a rebuild of the rollups when the time
        -- zone or half-life they depend on changes, the roll-up of what is pending when the
        -- setting rollup returns to immediate, and the rollups of replicated charges. Each is
        -- altered only when it is not yet so (ALTER TABLE locks the table against writers), and
        -- setting before ledger: a worker copying or applying setting rows rebuilds the rollups,
        -- which locks the ledger; the other order deadlocked with it on a second join.
        -- (created on the first call only, before this database receives anything)
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                       WHERE t.tgrelid = '@extschema@.ledger'::regclass AND t.tgname = 'ledger_roll_up_replicated') THEN
            CREATE TRIGGER ledger_roll_up_replicated BEFORE INSERT ON @extschema@.ledger
                FOR EACH ROW EXECUTE FUNCTION hpcacct_internal.note_replicated_charge();
        END IF;
        FOR tab, trig, fires IN VALUES ('@extschema@.setting'::regclass, 'setting_rebuilds_rollup'::name, 'A'::"char"),
                                       ('@extschema@.setting', 'setting_rolls_up_pending', 'A'),
                                       ('@extschema@.ledger', 'ledger_roll_up_replicated', 'R') LOOP
            IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                           WHERE t.tgrelid = tab AND t.tgname = trig AND t.tgenabled = fires) THEN
                EXECUTE pg_catalog.format('ALTER TABLE %s ENABLE %s TRIGGER %I', tab,
                                          CASE fires WHEN 'A' THEN 'ALWAYS' ELSE 'REPLICA' END, trig);
            END IF;
        END LOOP;
        -- at a site, the reference tables are written by replication only, the ledger also by charging
        IF role = 'site' THEN
            IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                           WHERE t.tgrelid = '@extschema@.ledger'::regclass AND t.tgname = 'federation_charges_only') THEN
                CREATE TRIGGER federation_charges_only BEFORE INSERT ON @extschema@.ledger
                    FOR EACH STATEMENT EXECUTE FUNCTION hpcacct_internal.federation_refuse_local_entry();
            END IF;
            FOREACH tab IN ARRAY @extschema@.federation_reference_tables() LOOP
                IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                               WHERE t.tgrelid = tab AND t.tgname = 'federation_centre_only') THEN
                    EXECUTE pg_catalog.format('CREATE TRIGGER federation_centre_only BEFORE INSERT OR UPDATE OR DELETE '
                                              'ON %s FOR EACH ROW EXECUTE FUNCTION '
                                              'hpcacct_internal.federation_refuse_local_write()', tab);
                END IF;
            END LOOP;
        END IF;
    END
    $$;
REVOKE EXECUTE ON FUNCTION @extschema@.federation_prepare(integer, text) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.federation_prepare(integer, text) IS
    'Makes this database the federation centre (0) or a site: records it, narrows the ledger ids to its range, '
    'enables the triggers replicated rows need; idempotent';
CREATE OR REPLACE PROCEDURE @extschema@.federation_publish(site integer, name text)
    LANGUAGE plpgsql
    AS $$
    DECLARE
        ids    int8range;
        pub    text;
        known  @extschema@.federation_site;
        tables text;
    BEGIN
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        IF site IS NULL OR name IS NULL THEN
            RAISE EXCEPTION 'site and name must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF site NOT BETWEEN 1 AND 32767 OR name !~ '^[a-z0-9_]{1,40}$' THEN
            RAISE EXCEPTION 'invalid site % "%"', site, name
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Sites are numbered 1 to 32767 and named with 1 to 40 of a-z, 0-9 and _.';
        END IF;
        PERFORM @extschema@.federation_prepare(0, 'centre');
        SELECT * INTO known FROM @extschema@.federation_site s WHERE s.site = federation_publish.site OR s.name = federation_publish.name;
        IF FOUND AND (known.site <> federation_publish.site OR known.name <> federation_publish.name) THEN
            RAISE EXCEPTION 'site % "%" conflicts with site % "%"', site, name, known.site, known.name
                USING ERRCODE = 'unique_violation';
        END IF;
        INSERT INTO @extschema@.federation_site (site, name) VALUES (site, name) ON CONFLICT DO NOTHING;

        SELECT pg_catalog.string_agg(t::text, ', ') INTO tables
        FROM pg_catalog.unnest(@extschema@.federation_reference_tables()) t;
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication p WHERE p.pubname = 'hpcacct_fed_reference') THEN
            EXECUTE pg_catalog.format('CREATE PUBLICATION hpcacct_fed_reference FOR TABLE %s '
                                      'WITH (publish = ''insert, update, delete'')', tables);
        ELSE
            EXECUTE pg_catalog.format('ALTER PUBLICATION hpcacct_fed_reference SET TABLE %s', tables);
        END IF;

        ids := @extschema@.federation_id_range(site);
        pub := 'hpcacct_fed_c2s_' || site;
        -- the ledger rows the site receives, and what the centre reports it received from the site
        CALL hpcacct_internal.federation_publish_ledger(pub, ids, true,
                                                        pg_catalog.format('receiver = 0 AND origin = %s', site));
        -- a slot invalidated by max_slot_wal_keep_size stays lost: running the calls again does not help
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots r
                   WHERE r.slot_name = pub AND r.wal_status = 'lost') THEN
            RAISE WARNING 'the slot % of site % is lost: the site no longer receives the centre''s rows', pub, site
                USING HINT = pg_catalog.format('Running the set-up calls again does not recover it: at site %s, '
                                               'CALL hpcacct.federation_resync(0).', site);
        END IF;
    END
    $$;
COMMENT ON PROCEDURE @extschema@.federation_publish(integer, text) IS
    'At the centre: publish reference data and the other sites'' ledger rows to site N, with its slot; idempotent';
CREATE OR REPLACE PROCEDURE @extschema@.federation_join(site integer, centre_conninfo text)
    LANGUAGE plpgsql
    AS $$
    DECLARE
        ids  int8range;
        pub  text;
        sub  text;
        missing text;
    BEGIN
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        IF site IS NULL OR centre_conninfo IS NULL THEN
            RAISE EXCEPTION 'site and centre_conninfo must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        pub := 'hpcacct_fed_s2c_' || site;
        sub := 'hpcacct_fed_c2s_' || site;
        IF site NOT BETWEEN 1 AND 32767 THEN
            RAISE EXCEPTION 'invalid site %', site
                USING ERRCODE = 'invalid_parameter_value', HINT = 'Sites are numbered 1 to 32767; the centre is 0.';
        END IF;
        IF hpcacct_internal.federation_subscribed(sub) THEN
            -- joined before: the checks of an empty site no longer apply
            PERFORM @extschema@.federation_prepare(site, 'site');
            PERFORM hpcacct_internal.federation_publish_received(pub, pg_catalog.format('receiver = %s', site));
            EXECUTE pg_catalog.format('ALTER SUBSCRIPTION %I CONNECTION %L', sub, centre_conninfo);
            EXECUTE pg_catalog.format('ALTER SUBSCRIPTION %I ENABLE', sub);
            -- tables a later version added reach the site only after a refresh, which
            -- PostgreSQL does not allow inside a procedure: say so
            missing := hpcacct_internal.federation_not_received(
                sub, @extschema@.federation_reference_tables() || '@extschema@.federation_received'::regclass);
            IF missing IS NOT NULL THEN
                RAISE WARNING 'this site does not receive %', missing
                    USING HINT = pg_catalog.format('After CALL hpcacct.federation_publish(%s, ...) at the centre, run '
                                                   'ALTER SUBSCRIPTION %I REFRESH PUBLICATION here.', site, sub);
            END IF;
            -- the slot the centre reads, invalidated by max_slot_wal_keep_size: say how to recover
            IF EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots r
                       WHERE r.slot_name = pub AND r.wal_status = 'lost') THEN
                RAISE WARNING 'the slot % of this site is lost: the centre no longer receives its charges', pub
                    USING HINT = pg_catalog.format('At the centre, CALL hpcacct.federation_resync(%s).', site);
            END IF;
            RETURN;
        END IF;
        PERFORM @extschema@.federation_prepare(site, 'site');
        ids := @extschema@.federation_id_range(site);
        -- its own ledger rows, and what it reports it received
        CALL hpcacct_internal.federation_publish_ledger(pub, ids, false, pg_catalog.format('receiver = %s', site));
        -- the centre made the slot for this subscription in federation_publish()
        CALL hpcacct_internal.federation_subscribe_slot(sub, centre_conninfo, ARRAY['hpcacct_fed_reference', sub],
                                                        '{}');
    END
    $$;
COMMENT ON PROCEDURE @extschema@.federation_join(integer, text) IS
    'At a cluster site: join the federation (ledger ids from site * 2^48, publish own charges, subscribe to the '
    'centre); idempotent';
CREATE OR REPLACE PROCEDURE @extschema@.federation_subscribe(site integer, site_conninfo text)
    LANGUAGE plpgsql
    AS $$
    DECLARE
        sub text;
    BEGIN
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        IF site IS NULL OR site_conninfo IS NULL THEN
            RAISE EXCEPTION 'site and site_conninfo must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        sub := 'hpcacct_fed_s2c_' || site;
        IF NOT EXISTS (SELECT 1 FROM @extschema@.federation_site s WHERE s.site = federation_subscribe.site)
           OR NOT EXISTS (SELECT 1 FROM @extschema@.federation_node n WHERE n.role = 'centre') THEN
            RAISE EXCEPTION 'site % is not published from this database', site
                USING ERRCODE = 'undefined_object', HINT = 'Run CALL hpcacct.federation_publish(site, name) first.';
        END IF;
        PERFORM @extschema@.federation_prepare(0, 'centre');
        IF hpcacct_internal.federation_subscribed(sub) THEN
            EXECUTE pg_catalog.format('ALTER SUBSCRIPTION %I CONNECTION %L', sub, site_conninfo);
            EXECUTE pg_catalog.format('ALTER SUBSCRIPTION %I SET (synchronous_commit = local, binary = true)', sub);
            EXECUTE pg_catalog.format('ALTER SUBSCRIPTION %I ENABLE', sub);
            -- a site joined by an earlier version publishes its reports of rows received once
            -- federation_join() ran there again; the subscription needs a refresh (not in a procedure)
            IF hpcacct_internal.federation_not_received(
                   sub, ARRAY['@extschema@.federation_received'::regclass]) IS NOT NULL THEN
                RAISE WARNING 'this database does not receive site %''s reports of rows received', site
                    USING HINT = pg_catalog.format('After CALL hpcacct.federation_join(%s, ...) at the site, run '
                                                   'ALTER SUBSCRIPTION %I REFRESH PUBLICATION here.', site, sub);
            END IF;
            RETURN;
        END IF;
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        -- synchronous_commit = local: the centre relays what it applies to the other sites, and
        -- a walsender sends only flushed WAL; applied asynchronously (the default), a site's
        -- charge waited for the WAL writer (up to 3 x wal_writer_delay) before it went on.
        -- binary = true: the site's walsender sends the ledger's timestamps, numerics and dates
        -- as their binary form instead of formatting them as text (and the centre does not parse
        -- them); the ledger has built-in types only, the same at both ends
        CALL hpcacct_internal.federation_subscribe_slot(sub, site_conninfo, ARRAY[sub],
                                                        ARRAY['synchronous_commit = local', 'binary = true']);
    END
    $$;
COMMENT ON PROCEDURE @extschema@.federation_subscribe(integer, text) IS
    'At the centre: subscribe to a site''s charges (after federation_join there); idempotent';
CREATE OR REPLACE FUNCTION @extschema@.outbox_add_all(messages jsonb) RETURNS SETOF bigint
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        ids bigint[];
        missing text;
    BEGIN
        -- NULL is no message (jsonb_agg of no rows, as the triggers pass it); else an array of
        -- objects, each with its topic, decision_key, subject and body, and figures an object
        IF messages IS NOT NULL AND (pg_catalog.jsonb_typeof(messages) <> 'array'
                                     OR EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(messages) e
                                                WHERE pg_catalog.jsonb_typeof(e) <> 'object')) THEN
            RAISE EXCEPTION 'outbox_add_all: messages must be a JSON array of objects' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(coalesce(messages, '[]')) e
                   WHERE pg_catalog.jsonb_typeof(e -> 'figures') NOT IN ('object', 'null')) THEN
            RAISE EXCEPTION 'outbox_add_all: a message''s figures must be a JSON object' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        SELECT CASE WHEN m.topic IS NULL THEN 'topic' WHEN m.decision_key IS NULL THEN 'decision_key'
                    WHEN m.subject IS NULL THEN 'subject' ELSE 'body' END
        INTO missing
        FROM pg_catalog.jsonb_to_recordset(coalesce(messages, '[]')) AS m(topic text, decision_key text, subject text, body text)
        WHERE m.topic IS NULL OR m.decision_key IS NULL OR m.subject IS NULL OR m.body IS NULL
        LIMIT 1;
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'outbox_add_all: a message''s % must not be NULL', missing USING ERRCODE = 'null_value_not_allowed';
        END IF;
        -- an account that does not exist is 42704, as for every other function (not the foreign key's 23503)
        SELECT m.account INTO missing
        FROM pg_catalog.jsonb_to_recordset(coalesce(messages, '[]')) AS m(account text)
        WHERE m.account IS NOT NULL AND NOT EXISTS (SELECT 1 FROM @extschema@.account a WHERE a.name = m.account)
        LIMIT 1;
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'unknown account "%"', missing USING ERRCODE = 'undefined_object';
        END IF;
        -- set-based and index-driven: each message's users are found by its account (membership's
        -- key) and carried in its row, so no step joins the new messages to the input
        WITH written AS (
            INSERT INTO @extschema@.outbox (topic, decision_key, account, subject, body, figures, addressed_to)
            -- a subject is one header line: a control character of a name in it (an account
            -- named with a line break) is a space, so that the decision is not refused for it
            SELECT m.topic, m.decision_key, m.account, hpcacct_internal.notify_name(m.subject),
                   m.body, coalesce(m.figures, '{}'),
                   ARRAY(SELECT u.username FROM pg_catalog.unnest(coalesce(m.also, '{}')) AS u(username)
                         UNION
                         SELECT ms.username FROM @extschema@.membership ms
                         WHERE ms.account = m.account
                           AND ((ms.role = 'admin' AND coalesce(m.to_managers, true)) OR coalesce(m.to_members, false))
                         ORDER BY 1)
            FROM pg_catalog.jsonb_to_recordset(coalesce(messages, '[]')) AS m(topic text, decision_key text, account text,
                                                                             subject text, body text, figures jsonb,
                                                                             to_managers boolean, to_members boolean,
                                                                             also text[])
            ORDER BY m.topic, m.decision_key
            ON CONFLICT ON CONSTRAINT outbox_once DO NOTHING
            RETURNING message_id, addressed_to
        ), recipients AS (
            INSERT INTO @extschema@.outbox_recipient (message_id, username, address)
            SELECT DISTINCT ON (w.message_id, c.email) w.message_id, c.username, c.email
            FROM written w
            CROSS JOIN LATERAL pg_catalog.unnest(w.addressed_to) AS u(username)
            JOIN @extschema@.contact c ON c.username = u.username AND c.notify
            ORDER BY w.message_id, c.email, c.username
        )
        SELECT pg_catalog.array_agg(w.message_id ORDER BY w.message_id) INTO ids FROM written w;
        IF ids IS NOT NULL THEN
            PERFORM pg_catalog.pg_notify('hpcacct_outbox', pg_catalog.array_length(ids, 1)::text);
            RETURN QUERY SELECT pg_catalog.unnest(ids);
        END IF;
    END
    $$;
COMMENT ON FUNCTION @extschema@.outbox_add_all(jsonb) IS
    'Writes messages about decisions and their recipients (managers, members if asked, named users), each decision '
    'once, in one statement; one NOTIFY hpcacct_outbox. messages NULL: none; a NULL topic, decision_key, subject or '
    'body is an error (22004), an unknown account 42704, figures other than an object 22023; a NULL account, figures, '
    'to_managers, to_members or also: no account''s users, {}, true, false, none';
CREATE OR REPLACE FUNCTION @extschema@.outbox_add(topic text, decision_key text, account text, subject text, body text,
                                       figures jsonb, to_members boolean DEFAULT false,
                                       also text[] DEFAULT '{}')
    RETURNS bigint
    LANGUAGE sql
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT id
        FROM @extschema@.outbox_add_all(pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object(
                 'topic', $1, 'decision_key', $2, 'account', $3, 'subject', $4, 'body', $5, 'figures', $6,
                 'to_members', $7, 'also', pg_catalog.to_jsonb($8)))) AS id
    $$;
COMMENT ON FUNCTION @extschema@.outbox_add(text, text, text, text, text, jsonb, boolean, text[]) IS
    'Writes a message about a decision and its recipients (managers, members if asked, named users) once; NOTIFY '
    'hpcacct_outbox. NULL topic, decision_key, subject or body: 22004; an unknown account: 42704; figures other than an '
    'object: 22023; NULL account, figures, to_members or also: no account''s users, {}, false, none';
CREATE OR REPLACE FUNCTION @extschema@.notify_scan(at date DEFAULT @extschema@.site_today()) RETURNS integer
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        r record;
        q date;
        written integer := 0;
        id bigint;
        bank_unit text;
        next_q date;
        warn_days integer;
        key text;
        k integer;
    BEGIN
        IF at IS NULL THEN
            RAISE EXCEPTION 'notify_scan needs a date' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF NOT pg_catalog.isfinite(at) THEN
            RAISE EXCEPTION 'notify_scan needs a finite date' USING ERRCODE = 'datetime_field_overflow';
        END IF;
        -- one scan at a time: a second one waits and then finds the states notified
        LOCK TABLE @extschema@.quota_state_notified IN SHARE ROW EXCLUSIVE MODE;

        -- quota states: entry into low_priority and blocked, and back
        FOR r IN SELECT u.*, coalesce(n.state, 'normal') AS old_state
                 FROM (SELECT DISTINCT p.account FROM @extschema@.quota_period p) a
                 CROSS JOIN LATERAL @extschema@.window_quota_usage(a.account, at) u
                 LEFT JOIN @extschema@.quota_state_notified n ON n.account = u.account
                 WHERE u.state IS DISTINCT FROM coalesce(n.state, 'normal')
                 ORDER BY u.account LOOP
            -- account/day/from/to; the same change again that day (the state went back and
            -- forth) is a change of its own: /2, /3...
            key := pg_catalog.concat_ws('/', r.account, at, r.old_state, r.state);
            k := 1;
            WHILE EXISTS (SELECT 1 FROM @extschema@.outbox o
                          WHERE o.topic = 'quota_state' AND o.decision_key = key || CASE WHEN k > 1 THEN '/' || k ELSE '' END) LOOP
                k := k + 1;
            END LOOP;
            id := @extschema@.outbox_add(
                'quota_state', key || CASE WHEN k > 1 THEN '/' || k ELSE '' END, r.account,
                pg_catalog.format('[hpcacct] %s: quota state %s (%s)', r.account, pg_catalog.replace(r.state, '_', ' '), at),
                pg_catalog.format(E'Dear members of %s,\n\nthe core-hour quota of %s is now in state "%s" (before: "%s").\n%s\n\n'
                                  'Accounting period:            %s to %s\n'
                                  'Monthly allowance:            %s %s\n'
                                  'Remaining of previous month:  %s\n'
                                  'Consumed this month:          %s\n'
                                  'Consumable (%%):               %s\n'
                                  'Consumable:                   %s\n',
                                  hpcacct_internal.notify_name(r.account), hpcacct_internal.notify_name(r.account), r.state, r.old_state,
                                  -- a month outside the period has no quota (low_priority): said as such
                                  CASE WHEN r.state = 'low_priority' AND r.month < r.period_start
                                       THEN pg_catalog.format(E'The accounting period starts on %s: until then the account has no quota, and jobs\n'
                                                              'run, and count, only when no other project with quota left is waiting (low-priority mode).',
                                                              r.period_start)
                                       WHEN r.state = 'low_priority' AND r.month > r.period_end
                                       THEN pg_catalog.format(E'The accounting period ended on %s: without a quota, jobs still run, and count, but\n'
                                                              'only when no other project with quota left is waiting (low-priority mode).',
                                                              r.period_end)
                                       WHEN r.state = 'low_priority'
                                       THEN E'The quota of the three-month window is used up: jobs still run, and count, but only\nwhen no other project with quota left is waiting (low-priority mode).'
                                       WHEN r.state = 'blocked'
                                       THEN E'The monthly quota was exceeded six times or the period''s quota twice: no new job can\nbe submitted.'
                                       WHEN r.old_state = 'low_priority' AND r.month = r.period_start
                                       THEN pg_catalog.format('The accounting period began on %s: jobs run with normal priority.', r.period_start)
                                       ELSE E'The quota of the three-month window is no longer used up: jobs run with normal priority.'
                                  END,
                                  r.period_start, r.period_end,
                                  hpcacct_internal.notify_number(r.monthly::numeric), hpcacct_internal.notify_name(r.unit),
                                  hpcacct_internal.notify_number(r.remaining_prev::numeric),
                                  hpcacct_internal.notify_number(r.consumed_current::numeric),
                                  hpcacct_internal.notify_number(r.consumable_pct::numeric),
                                  hpcacct_internal.notify_number(r.consumable::numeric)),
                pg_catalog.jsonb_build_object('at', at, 'state', r.state, 'previous_state', r.old_state,
                                              'monthly', r.monthly, 'remaining_prev', r.remaining_prev,
                                              'consumed_current', r.consumed_current,
                                              'consumable_pct', r.consumable_pct, 'consumable', r.consumable,
                                              'unit', r.unit),
                true);
            written := written + (id IS NOT NULL)::integer;
            INSERT INTO @extschema@.quota_state_notified AS n (account, state, since)
            VALUES (r.account, r.state, at)
            ON CONFLICT (account) DO UPDATE
                SET state = EXCLUDED.state, since = EXCLUDED.since, notified_at = pg_catalog.statement_timestamp();
        END LOOP;

        -- balances below a threshold, once per account, quarter and threshold
        q := @extschema@.quarter_start(at);
        bank_unit := @extschema@.setting_value('bank_unit');
        FOR r IN WITH alloc AS (
                     SELECT l.account, sum(l.amount) AS amount
                     FROM @extschema@.ledger l
                     WHERE l.kind IN ('deposit', 'transfer', 'refund') AND l.unit = bank_unit
                       AND l.valid_from >= q AND l.valid_from < q + interval '3 months'
                     GROUP BY l.account
                     HAVING sum(l.amount) > 0
                 )
                 SELECT a.account, a.amount AS alloc, b.balance, t.percent
                 FROM alloc a
                 CROSS JOIN LATERAL (SELECT @extschema@.balance(a.account, at) AS balance) b
                 JOIN @extschema@.balance_threshold t
                   ON (t.percent = 0 AND b.balance < 0) OR (t.percent > 0 AND b.balance < a.amount * t.percent / 100)
                 -- thresholds in the order they are crossed: the last message is the state now
                 ORDER BY a.account, t.percent DESC LOOP
            id := @extschema@.outbox_add(
                'balance_low', pg_catalog.concat_ws('/', r.account, q, r.percent), r.account,
                pg_catalog.format('[hpcacct] %s: %s', r.account,
                                  CASE WHEN r.percent = 0 THEN 'balance negative, jobs are refused'
                                       ELSE pg_catalog.format('less than %s %% of the quarter''s credits left', r.percent) END),
                pg_catalog.format(E'Dear project administrator,\n\naccount %s holds %s %s of the %s %s of the quarter starting %s (%s %%).\n%s\n',
                                  hpcacct_internal.notify_name(r.account), hpcacct_internal.notify_number(r.balance),
                                  hpcacct_internal.notify_name(bank_unit),
                                  hpcacct_internal.notify_number(r.alloc), hpcacct_internal.notify_name(bank_unit), q,
                                  pg_catalog.round(100 * r.balance / r.alloc, 1),
                                  CASE WHEN r.percent = 0
                                       THEN 'The balance is negative: new jobs and queued jobs of the account are refused.'
                                       ELSE pg_catalog.format('That is below the threshold of %s %%.', r.percent) END),
                pg_catalog.jsonb_build_object('quarter', q, 'balance', r.balance, 'allocation', r.alloc,
                                              'threshold_percent', r.percent, 'unit', bank_unit));
            written := written + (id IS NOT NULL)::integer;
        END LOOP;

        -- bank accounts active this quarter with no allocation for the next one, within
        -- expiry_warning_days (at most a quarter) of its start: once per account and expiry day
        next_q := (q + interval '3 months')::date;
        warn_days := @extschema@.setting_value('expiry_warning_days')::integer;
        FOR r IN WITH allocated AS (
                     SELECT l.account, @extschema@.quarter_start(l.valid_from) AS quarter, sum(l.amount) AS amount
                     FROM @extschema@.ledger l
                     WHERE l.kind IN ('deposit', 'transfer') AND l.unit = bank_unit AND l.valid_from >= q
                     GROUP BY 1, 2
                     HAVING sum(l.amount) > 0
                 )
                 SELECT a.name AS account, a.kind, now_q.amount AS alloc,
                        (SELECT min(later.quarter) FROM allocated later
                         WHERE later.account = a.name AND later.quarter > next_q) AS later_quarter
                 FROM allocated now_q
                 JOIN @extschema@.account a ON a.name = now_q.account
                 WHERE now_q.quarter = q AND warn_days > 0 AND next_q - at <= warn_days
                   AND a.deleted_in IS NULL
                   AND NOT EXISTS (SELECT 1 FROM allocated nx WHERE nx.account = a.name AND nx.quarter = next_q)
                 ORDER BY a.name LOOP
            id := @extschema@.outbox_add(
                'account_expiry', pg_catalog.concat_ws('/', r.account, next_q), r.account,
                pg_catalog.format('[hpcacct] account %s: no allocation from %s, %s', r.account, next_q,
                                  CASE WHEN r.later_quarter IS NULL THEN 'it expires' ELSE 'jobs will be refused' END),
                pg_catalog.format(E'Dear members of %s,\n\naccount %s holds an allocation for the quarter ending %s but none for the\n'
                                  'quarter starting %s (%s days from %s). %s\n\n'
                                  'Balance now:        %s %s of %s %s\n'
                                  'Allocation ends:    %s\n%s',
                                  hpcacct_internal.notify_name(r.account), hpcacct_internal.notify_name(r.account), next_q - 1,
                                  next_q, next_q - at, at,
                                  CASE WHEN r.later_quarter IS NOT NULL
                                       THEN pg_catalog.format(E'Its next allocation starts on %s: until then its jobs\n'
                                                              'are refused and queued jobs are held.', r.later_quarter)
                                       WHEN r.kind = 'personal'
                                       THEN E'On that day the personal account expires: no batch jobs can be submitted\n'
                                            'with it, and one still expired a quarter later is deleted. Join an active\n'
                                            'project or ask your consultant for an allocation.'
                                       ELSE E'On that day the account expires: its jobs are refused and queued jobs are held.\n'
                                            'Ask for an allocation for the next quarter, or move credits to it, before then.' END,
                                  hpcacct_internal.notify_number(@extschema@.balance(r.account, at)),
                                  hpcacct_internal.notify_name(bank_unit),
                                  hpcacct_internal.notify_number(r.alloc), hpcacct_internal.notify_name(bank_unit), next_q - 1,
                                  CASE WHEN r.later_quarter IS NOT NULL
                                       THEN pg_catalog.format(E'Next allocation:    %s\n', r.later_quarter) ELSE '' END),
                pg_catalog.jsonb_build_object('at', at, 'quarter', q, 'allocation_ends', next_q - 1,
                                              'no_allocation_from', next_q, 'days_left', next_q - at,
                                              'next_allocation', r.later_quarter, 'allocation', r.alloc,
                                              'balance', @extschema@.balance(r.account, at), 'unit', bank_unit),
                true);
            written := written + (id IS NOT NULL)::integer;
        END LOOP;
        RETURN written;
    END
    $$;
COMMENT ON FUNCTION @extschema@.notify_scan(date) IS
    'Writes messages for sliding-window quota state changes since the last notified one, for quarter balances '
    'below a site threshold (once per account, quarter and threshold) and for bank accounts whose allocation runs '
    'out within expiry_warning_days (once per account and expiry); returns how many';
CREATE OR REPLACE FUNCTION @extschema@.outbox_claim(worker text, lease interval DEFAULT '5 minutes', batch integer DEFAULT 50)
    RETURNS TABLE (recipient_id bigint, message_id bigint, address text, display_name text, subject text,
                   body text, created_at timestamptz, attempts integer)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF worker IS NULL OR lease IS NULL OR batch IS NULL THEN
            RAISE EXCEPTION 'outbox_claim needs a worker, a lease and a batch size' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF lease <= interval '0' OR batch < 1 THEN
            RAISE EXCEPTION 'outbox_claim needs a positive lease and batch size' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        UPDATE @extschema@.outbox_recipient r
        SET state = 'uncertain', lease_owner = NULL, lease_until = NULL,
            last_error = pg_catalog.format('sender %s stopped while sending (lease until %s): not sent again',
                                           r.lease_owner, r.lease_until)
        WHERE r.state = 'sending' AND r.lease_until < pg_catalog.clock_timestamp();
        RETURN QUERY
        WITH due AS (
            SELECT r.recipient_id
            FROM @extschema@.outbox_recipient r
            WHERE r.state = 'pending' AND r.next_attempt <= pg_catalog.clock_timestamp()
              AND (r.lease_until IS NULL OR r.lease_until < pg_catalog.clock_timestamp())
            ORDER BY r.next_attempt, r.recipient_id
            LIMIT batch
            FOR UPDATE SKIP LOCKED
        ), claimed AS (
            UPDATE @extschema@.outbox_recipient r
            SET lease_owner = worker, lease_until = pg_catalog.clock_timestamp() + lease, attempts = r.attempts + 1
            FROM due
            WHERE r.recipient_id = due.recipient_id
            RETURNING r.*
        )
        SELECT c.recipient_id, c.message_id, c.address, k.display_name, m.subject, m.body, m.created_at, c.attempts
        FROM claimed c
        JOIN @extschema@.outbox m ON m.message_id = c.message_id
        LEFT JOIN @extschema@.contact k ON k.username = c.username
        ORDER BY c.recipient_id;
    END
    $$;
COMMENT ON FUNCTION @extschema@.outbox_claim(text, interval, integer) IS
    'Sender: leases up to batch due deliveries to worker; marks deliveries left in sending past their lease uncertain';
CREATE OR REPLACE FUNCTION @extschema@.outbox_sending(worker text, recipient bigint) RETURNS boolean
    LANGUAGE sql
    SET search_path = pg_catalog, pg_temp
    AS $$
        WITH s AS (
            UPDATE @extschema@.outbox_recipient r SET state = 'sending'
            WHERE r.recipient_id = recipient AND r.state = 'pending' AND r.lease_owner = worker
              AND r.lease_until > pg_catalog.clock_timestamp()
            RETURNING 1
        )
        SELECT EXISTS (SELECT 1 FROM s)
    $$;
COMMENT ON FUNCTION @extschema@.outbox_sending(text, bigint) IS
    'Sender: records that the SMTP transaction is about to complete; false when worker no longer holds the lease';
CREATE OR REPLACE FUNCTION @extschema@.outbox_result(worker text, recipient bigint, outcome text, error text DEFAULT NULL,
                                          retry_base interval DEFAULT '1 minute',
                                          retry_max interval DEFAULT '1 hour')
    RETURNS boolean
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        done boolean;
    BEGIN
        IF outcome IS NULL OR outcome NOT IN ('delivered', 'retry', 'failed', 'uncertain') THEN
            RAISE EXCEPTION 'unknown delivery outcome "%"', outcome
                USING ERRCODE = 'invalid_parameter_value', HINT = 'Use delivered, retry, failed or uncertain.';
        END IF;
        UPDATE @extschema@.outbox_recipient r
        SET state = CASE outcome WHEN 'retry' THEN 'pending' ELSE outcome END,
            next_attempt = CASE WHEN outcome = 'retry'
                                THEN pg_catalog.clock_timestamp()
                                     + least(retry_max, retry_base * pg_catalog.power(2, least(greatest(r.attempts - 1, 0), 30)))
                                ELSE r.next_attempt END,
            delivered_at = CASE WHEN outcome = 'delivered' THEN pg_catalog.clock_timestamp() END,
            last_error = error, lease_owner = NULL, lease_until = NULL
        WHERE r.recipient_id = recipient AND r.lease_owner = worker AND r.state IN ('pending', 'sending')
        RETURNING true INTO done;
        RETURN coalesce(done, false);
    END
    $$;
COMMENT ON FUNCTION @extschema@.outbox_result(text, bigint, text, text, interval, interval) IS
    'Sender: records a delivery''s outcome (delivered, retry after base * 2^(attempts-1) up to max, failed, uncertain)';
CREATE OR REPLACE FUNCTION @extschema@.account_month(account text, month date)
    RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        a @extschema@.account := hpcacct_internal.visible_account(account);
        m date;
        m_end date;
        tz text := @extschema@.site_timezone();
        upto date;
        y_start date;
        q date;
        result jsonb;
        section jsonb;
        sections jsonb := '{}';
        bank_unit text := @extschema@.setting_value('bank_unit');
    BEGIN
        m := hpcacct_internal.statement_month(month);
        m_end := (m + interval '1 month')::date - 1;
        upto := least(m_end, @extschema@.site_today());
        y_start := date_trunc('year', m)::date;

        -- the month's charges by resource and submitter
        SELECT jsonb_build_object(
                   'by_resource', coalesce(jsonb_agg(jsonb_build_object('cluster', r.cluster, 'partition', r.partition,
                                                                        'unit', r.unit, 'amount', r.amount)
                                                     ORDER BY r.cluster, r.partition, r.unit)
                                           FILTER (WHERE r.g = 1), '[]'),
                   'by_submitter', coalesce(jsonb_agg(jsonb_build_object('cluster', r.cluster, 'partition', r.partition,
                                                                         'unit', r.unit, 'submitter', r.submitter,
                                                                         'amount', r.amount)
                                                      ORDER BY r.cluster, r.partition, r.unit, r.submitter)
                                            FILTER (WHERE r.g = 0), '[]'),
                   'total', coalesce(jsonb_object_agg(r.unit, r.amount) FILTER (WHERE r.g = 7), '{}'))
        INTO section
        FROM (SELECT c.cluster, c.partition, c.unit, c.submitter, round(sum(c.amount), 6) AS amount,
                     GROUPING(c.cluster, c.partition, c.submitter) AS g
              FROM @extschema@.charge_by_month c
              WHERE c.account = a.name AND c.month = m
              GROUP BY GROUPING SETS ((c.cluster, c.partition, c.unit, c.submitter), (c.cluster, c.partition, c.unit), (c.unit))) r;
        sections := sections || jsonb_build_object('charges', section);

        -- usage this year by resource, with the projection to the year's end
        SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'pool', u.pool, 'cluster', u.cluster, 'partition', u.partition, 'unit', u.unit,
                   'year_start', u.first_day, 'year_end', u.last_day, 'usage', round(u.usage, 6),
                   'equivalent_hours', round(u.hours, 6),
                   'usage_years', round(u.usage / h.hours, 6),
                   'core_hours', round(u.core_hours, 6), 'core_years', round(u.core_hours / h.hours, 6),
                   'projected_usage', CASE WHEN u.elapsed > 0 THEN round(u.usage * u.year_length / u.elapsed, 6) END)
                   ORDER BY u.pool, u.cluster, u.partition), '[]')
        INTO section
        FROM (SELECT c.pool, c.cluster, c.partition, c.unit, y.first_day, y.last_day,
                     sum(c.amount) AS usage, sum(c.amount / nullif(r.rate, 0)::numeric) AS hours,
                     -- raw core-hours, unless charges whose cores are unknown (booked before 0.4,
                     -- of jobs no longer in the job table) still count
                     CASE WHEN coalesce(sum(c.amount) FILTER (WHERE c.core_hours IS NULL), 0) = 0
                          THEN coalesce(sum(c.core_hours), 0) END AS core_hours,
                     -- wall-clock seconds in the site's time zone, as usage_by_resource() counts
                     -- them (a DST change makes a day 23 or 25 hours)
                     date_part('epoch', (y.last_day + 1)::timestamp AT TIME ZONE tz - y.first_day::timestamp AT TIME ZONE tz)::numeric AS year_length,
                     date_part('epoch', (upto + 1)::timestamp AT TIME ZONE tz - y.first_day::timestamp AT TIME ZONE tz)::numeric AS elapsed
              FROM @extschema@.charge_by_month c
              JOIN @extschema@.ledger l ON l.entry_id = c.entry_id
              JOIN @extschema@.resource r ON r.resource_id = l.resource_id
              CROSS JOIN LATERAL (
                  SELECT s.first_day, (s.first_day + interval '1 year')::date - 1 AS last_day
                  FROM (SELECT make_date(EXTRACT(year FROM m)::integer - CASE WHEN EXTRACT(month FROM m) < sm.start_month THEN 1 ELSE 0 END,
                                         sm.start_month, 1) AS first_day
                        FROM (SELECT @extschema@.year_start_month(c.pool) AS start_month) sm) s) y
              WHERE c.account = a.name AND c.month >= y.first_day AND c.month <= m
              GROUP BY c.pool, c.cluster, c.partition, c.unit, y.first_day, y.last_day, upto) u
        CROSS JOIN (SELECT @extschema@.setting_value('hours_per_year')::numeric AS hours) h;
        sections := sections || jsonb_build_object('usage_by_resource', section);

        -- GENCI: per machine with allocation events this year, the status at the end of the
        -- month (allocation_status) and the days of the year for the chart
        SELECT jsonb_agg(jsonb_build_object(
                   'machine', s.machine, 'alloc', st.alloc, 'tmc', st.tmc, 'tc', st.tc, 'consumption', st.consumption,
                   'delta', st.delta, 'status', st.status,
                   'days', (SELECT jsonb_agg(jsonb_build_array(dd.day, round(dd.tc::numeric, 2), round(dd.tmc::numeric, 2),
                                                               round(dd.consumption, 2)) ORDER BY dd.day)
                            FROM (SELECT g.day::date AS day,
                                         (SELECT coalesce(@extschema@.tc(l.valid_from, l.valid_until, l.amount::float8, g.day::date, s.month_convention)
                                                          - @extschema@.tc(l.valid_from, l.valid_until, l.amount::float8, y_start - 1, s.month_convention), 0)
                                          FROM @extschema@.ledger l
                                          WHERE l.account = a.name AND l.pool = s.machine AND l.kind IN ('grant', 'supplement', 'retraction')
                                            AND l.valid_from <= g.day AND l.valid_until >= y_start) AS tc,
                                         (SELECT coalesce(@extschema@.tmc(l.valid_from, l.valid_until, l.amount::float8, g.day::date, s.month_convention), 0)
                                          FROM @extschema@.ledger l
                                          WHERE l.account = a.name AND l.pool = s.machine AND l.kind IN ('grant', 'supplement', 'retraction')
                                            AND l.valid_from <= g.day AND l.valid_until >= y_start) AS tmc,
                                         (SELECT coalesce(sum(l.amount * @extschema@.period_share(l.job_start, l.job_end,
                                                                  y_start::timestamp AT TIME ZONE tz, (g.day::date + 1)::timestamp AT TIME ZONE tz)), 0)
                                          FROM @extschema@.ledger l JOIN @extschema@.resource r USING (resource_id)
                                          WHERE l.account = a.name AND l.kind = 'charge' AND coalesce(r.pool, r.cluster) = s.machine
                                            AND l.job_start < (g.day::date + 1)::timestamp AT TIME ZONE tz
                                            AND l.job_end >= y_start::timestamp AT TIME ZONE tz) AS consumption
                                  FROM generate_series(y_start, upto, interval '1 day') g(day)) dd))
               ORDER BY s.machine)
        INTO section
        FROM @extschema@.regulation_machine s
        CROSS JOIN LATERAL @extschema@.allocation_status(a.name, s.machine, upto) st
        WHERE EXISTS (SELECT 1 FROM @extschema@.ledger l
                      WHERE l.account = a.name AND l.pool = s.machine AND l.kind IN ('grant', 'supplement', 'retraction')
                        AND l.valid_from <= upto AND l.valid_until >= y_start);
        IF section IS NOT NULL THEN
            sections := sections || jsonb_build_object('regulation', section);
        END IF;

        -- RWTH: the window quota of each month of the period up to this one
        SELECT jsonb_agg(jsonb_build_object('month', u.month, 'state', u.state, 'monthly', u.monthly,
                                            'remaining_prev', u.remaining_prev, 'consumed', u.consumed_current,
                                            'consumable_pct', u.consumable_pct, 'consumable', u.consumable,
                                            'unit', u.unit, 'period_start', u.period_start, 'period_end', u.period_end)
                         ORDER BY u.month)
        INTO section
        FROM @extschema@.quota_period p
        CROSS JOIN LATERAL generate_series(p.period_start, least(p.period_end, upto), interval '1 month') g(mon)
        CROSS JOIN LATERAL @extschema@.window_quota_usage(a.name, CASE WHEN g.mon::date = m THEN upto
                                                                         ELSE (g.mon + interval '1 month')::date - 1 END) u
        WHERE p.account = a.name AND p.period_start <= upto AND p.period_end >= y_start;
        IF section IS NOT NULL THEN
            sections := sections || jsonb_build_object('window_quota', section);
        END IF;

        -- HLRN: the quarter's allocation and the balance at the end of each day of it so far
        q := @extschema@.quarter_start(m);
        SELECT jsonb_build_object(
                   'quarter', q, 'unit', bank_unit, 'allocation', al.amount, 'state', @extschema@.account_state(a.name, upto),
                   'balance', hpcacct_internal.balance_at_end(a.name, upto),
                   'days', (SELECT jsonb_agg(jsonb_build_array(g.day::date,
                                round(al.amount - coalesce((SELECT sum(l.amount * @extschema@.period_share(l.job_start, l.job_end,
                                                                        q::timestamp AT TIME ZONE tz, (g.day::date + 1)::timestamp AT TIME ZONE tz))
                                                            FROM @extschema@.ledger l
                                                            WHERE l.account = a.name AND l.kind = 'charge' AND l.unit = bank_unit
                                                              AND l.job_start < (g.day::date + 1)::timestamp AT TIME ZONE tz
                                                              AND l.job_end >= q::timestamp AT TIME ZONE tz), 0), 2))
                                              ORDER BY g.day)
                            FROM generate_series(q, upto, interval '1 day') g(day)))
        INTO section
        FROM (SELECT sum(l.amount) AS amount
              FROM @extschema@.ledger l
              WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer', 'refund') AND l.unit = bank_unit
                AND l.valid_from >= q AND l.valid_from < q + interval '3 months') al
        WHERE al.amount IS NOT NULL;
        IF section IS NOT NULL THEN
            sections := sections || jsonb_build_object('bank', section);
        END IF;

        RETURN jsonb_build_object('account', a.name, 'kind', a.kind, 'description', a.description,
                                  'month', to_char(m, 'YYYY-MM'), 'figures_at', upto, 'time_zone', tz)
               || sections;
    END
    $$;
COMMENT ON FUNCTION @extschema@.account_month(text, date) IS
    'Portal page of one account''s month as jsonb: charges by resource and submitter, usage by resource with the '
    'year''s projection, GENCI regulation, RWTH window quota and HLRN bank figures where the account has them';
CREATE OR REPLACE FUNCTION @extschema@.my_accounts(at date DEFAULT @extschema@.site_today())
    RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        bank_unit text := @extschema@.setting_value('bank_unit');
        tz constant text := @extschema@.site_timezone();
        result jsonb;
    BEGIN
        IF at IS NULL THEN
            RAISE EXCEPTION 'a date is needed' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF NOT isfinite(at) THEN
            RAISE EXCEPTION 'the date must be finite' USING ERRCODE = 'datetime_field_overflow';
        END IF;
        SELECT jsonb_build_object('user', session_user, 'at', at, 'accounts', coalesce(jsonb_agg(x.item ORDER BY x.name), '[]'))
        INTO result
        FROM (SELECT a.name,
                     jsonb_strip_nulls(jsonb_build_object(
                         'account', a.name, 'kind', a.kind, 'description', a.description,
                         'role', (SELECT m.role FROM @extschema@.membership m WHERE m.account = a.name AND m.username = session_user),
                         'bank', CASE WHEN EXISTS (SELECT 1 FROM @extschema@.ledger l
                                                   WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer') AND l.unit = bank_unit)
                                      THEN jsonb_build_object('state', @extschema@.account_state(a.name, at),
                                                              'balance', hpcacct_internal.balance_at_end(a.name, at), 'unit', bank_unit,
                                                              'quarter', @extschema@.quarter_start(at)) END,
                         'quota', (SELECT jsonb_build_object('state', u.state, 'monthly', u.monthly,
                                                             'remaining_prev', u.remaining_prev, 'consumed', u.consumed_current,
                                                             'consumable_pct', u.consumable_pct, 'consumable', u.consumable,
                                                             'unit', u.unit)
                                   FROM @extschema@.window_quota_usage(a.name, at) u
                                   WHERE EXISTS (SELECT 1 FROM @extschema@.quota_period p WHERE p.account = a.name)),
                         'regulation', (SELECT jsonb_agg(jsonb_build_object('machine', s.machine, 'alloc', st.alloc,
                                                                            'tmc', round(st.tmc::numeric, 2), 'tc', round(st.tc::numeric, 2),
                                                                            'consumption', round(st.consumption::numeric, 2),
                                                                            'delta', round(st.delta::numeric, 2), 'status', st.status)
                                                         ORDER BY s.machine)
                                        FROM @extschema@.regulation_machine s
                                        CROSS JOIN LATERAL @extschema@.allocation_status(a.name, s.machine, at) st
                                        WHERE EXISTS (SELECT 1 FROM @extschema@.ledger l
                                                      WHERE l.account = a.name AND l.pool = s.machine
                                                        AND l.kind IN ('grant', 'supplement', 'retraction')
                                                        AND l.valid_from <= at
                                                        AND l.valid_until >= date_trunc('year', at)::date)),
                         -- the month's charges up to the end of at (pro rata, as charge_by_month and
                         -- the balance): a past day does not count the rest of its month
                         'this_month', (SELECT jsonb_object_agg(t.unit, t.amount)
                                        FROM (SELECT l.unit, round(sum(l.amount * @extschema@.period_share(l.job_start, l.job_end,
                                                                                                           z.m_start, z.d_end)), 6) AS amount
                                              FROM @extschema@.ledger l
                                              WHERE l.account = a.name AND l.kind = 'charge'
                                                AND l.job_start < z.d_end AND (l.job_end > z.m_start OR l.job_start >= z.m_start)
                                              GROUP BY l.unit) t))) AS item
              FROM @extschema@.account a
              CROSS JOIN (SELECT date_trunc('month', at)::timestamp AT TIME ZONE tz AS m_start,
                                 (at + 1)::timestamp AT TIME ZONE tz AS d_end) z
              WHERE a.deleted_in IS NULL OR a.deleted_in > at) x;
        RETURN result;
    END
    $$;
COMMENT ON FUNCTION @extschema@.my_accounts(date) IS
    'Portal first page as jsonb: the caller''s accounts (row-level security) with role, bank balance and state, '
    'window quota, GENCI status per machine and this month''s charges, each at the end of the day at';
CREATE OR REPLACE FUNCTION @extschema@.statement_html(account text, month date)
    RETURNS text
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        d jsonb := @extschema@.account_month(account, month);
        h text;
        sec jsonb;
        r jsonb;
        labels text[];
        series jsonb;
        rows text;
        e text;
    BEGIN
        h := '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
             -- a title holds no element: the name is isolated between U+2068 and U+2069
             || format('<title>Statement %s%s%s %s</title>', chr(8296), hpcacct_internal.html_escape(d ->> 'account'), chr(8297),
                       d ->> 'month')
             || '<style>body{font-family:sans-serif;margin:24px;color:#222;background:#fff}'
                'h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ccc}'
                'table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}'
                'td.n{text-align:right}.meta{color:#555;font-size:13px}.chart{display:block;margin:8px 0}</style></head><body>'
             -- names in running text are isolated (bdi): a right-to-left mark in one does not
             -- reorder the text around it
             || format('<h1>Statement of account <bdi>%s</bdi> &mdash; %s</h1>', hpcacct_internal.html_escape(d ->> 'account'),
                       to_char((d ->> 'month' || '-01')::date, 'FMMonth YYYY'))
             || format('<p class="meta">%s account%s. Figures at the end of %s (%s).</p>',
                       hpcacct_internal.html_escape(initcap(d ->> 'kind')),
                       CASE WHEN d ->> 'description' IS NOT NULL THEN ': <bdi>' || hpcacct_internal.html_escape(d ->> 'description') || '</bdi>' ELSE '' END,
                       d ->> 'figures_at', hpcacct_internal.html_escape(d ->> 'time_zone'));

        -- the month's charges
        h := h || '<h2>Charges this month</h2>';
        IF jsonb_array_length(d -> 'charges' -> 'by_submitter') = 0 THEN
            h := h || '<p>No charges.</p>';
        ELSE
            SELECT string_agg(format('<tr><td>%s</td><td>%s</td><td>%s</td><td class="n">%s</td><td>%s</td></tr>',
                                     hpcacct_internal.html_escape(x ->> 'cluster'), hpcacct_internal.html_escape(x ->> 'partition'),
                                     hpcacct_internal.html_escape(x ->> 'submitter'),
                                     to_char((x ->> 'amount')::numeric, 'FM999,999,999,999,990.00'), hpcacct_internal.html_escape(x ->> 'unit')),
                              '' ORDER BY ord)
            INTO rows FROM jsonb_array_elements(d -> 'charges' -> 'by_submitter') WITH ORDINALITY t(x, ord);
            h := h || '<table class="charges"><tr><th>cluster</th><th>partition</th><th>submitter</th><th>amount</th><th>unit</th></tr>'
                   || rows;
            SELECT string_agg(format('<tr><th colspan="3">total</th><td class="n">%s</td><td>%s</td></tr>',
                                     to_char(t.value::numeric, 'FM999,999,999,999,990.00'), hpcacct_internal.html_escape(t.key)), '' ORDER BY t.key)
            INTO rows FROM jsonb_each_text(d -> 'charges' -> 'total') t;
            h := h || coalesce(rows, '') || '</table>';
        END IF;

        -- GENCI: consumption against TC(d) with the TMC bands, per machine
        FOR sec IN SELECT x FROM jsonb_array_elements(coalesce(d -> 'regulation', '[]')) x LOOP
            SELECT array_agg(CASE WHEN EXTRACT(day FROM (x ->> 0)::date) = 1 THEN to_char((x ->> 0)::date, 'Mon') ELSE '' END ORDER BY ord),
                   jsonb_build_array(
                       jsonb_build_object('name', 'TC ± TMC', 'kind', 'band', 'color', '#2ca02c',
                                          'lower', jsonb_agg((x ->> 1)::numeric - (x ->> 2)::numeric ORDER BY ord),
                                          'upper', jsonb_agg((x ->> 1)::numeric + (x ->> 2)::numeric ORDER BY ord)),
                       jsonb_build_object('name', 'TC − 2·TMC (retraction)', 'kind', 'dashed', 'color', '#d62728',
                                          'values', jsonb_agg((x ->> 1)::numeric - 2 * (x ->> 2)::numeric ORDER BY ord)),
                       jsonb_build_object('name', 'TC(d)', 'kind', 'line', 'color', '#555555',
                                          'values', jsonb_agg((x ->> 1)::numeric ORDER BY ord)),
                       jsonb_build_object('name', 'consumption', 'kind', 'line', 'color', '#1f77b4',
                                          'values', jsonb_agg((x ->> 3)::numeric ORDER BY ord)))
            INTO labels, series
            FROM jsonb_array_elements(sec -> 'days') WITH ORDINALITY t(x, ord);
            h := h || format('<h2>Regulation on <bdi>%s</bdi> (GENCI)</h2>', hpcacct_internal.html_escape(sec ->> 'machine'))
                   || hpcacct_internal.svg_chart(format('Consumption against theoretical consumption on %s', sec ->> 'machine'),
                                            'hours', labels, series)
                   || format('<table class="regulation"><tr><th>Alloc</th><th>TMC</th><th>TC</th><th>consumption</th><th>&Delta;</th><th>status</th></tr>'
                             '<tr><td class="n">%s</td><td class="n">%s</td><td class="n">%s</td><td class="n">%s</td><td class="n">%s</td><td>%s</td></tr></table>',
                             hpcacct_internal.notify_number((sec ->> 'alloc')::numeric), hpcacct_internal.notify_number((sec ->> 'tmc')::numeric),
                             hpcacct_internal.notify_number((sec ->> 'tc')::numeric), hpcacct_internal.notify_number((sec ->> 'consumption')::numeric),
                             hpcacct_internal.notify_number((sec ->> 'delta')::numeric), hpcacct_internal.html_escape(sec ->> 'status'));
        END LOOP;

        -- RWTH: the three-month window per month
        IF d ? 'window_quota' THEN
            SELECT array_agg(to_char((x ->> 'month')::date, 'Mon YY') ORDER BY ord),
                   jsonb_build_array(
                       jsonb_build_object('name', 'consumed', 'kind', 'bar', 'color', '#1f77b4',
                                          'values', jsonb_agg((x ->> 'consumed')::numeric ORDER BY ord)),
                       jsonb_build_object('name', 'monthly allowance', 'kind', 'dashed', 'color', '#555555',
                                          'values', jsonb_agg((x ->> 'monthly')::numeric ORDER BY ord)),
                       jsonb_build_object('name', 'consumable (3-month window)', 'kind', 'line', 'color', '#ff7f0e',
                                          'values', jsonb_agg((x ->> 'consumable')::numeric ORDER BY ord)))
            INTO labels, series
            FROM jsonb_array_elements(d -> 'window_quota') WITH ORDINALITY t(x, ord);
            r := d -> 'window_quota' -> -1;
            h := h || '<h2>Core-hour quota (RWTH)</h2>'
                   || hpcacct_internal.svg_chart('Sliding-window quota per month', r ->> 'unit', labels, series)
                   || format('<table class="quota"><tr><th>Accounting period</th><td>%s to %s</td></tr>'
                             '<tr><th>State</th><td>%s</td></tr><tr><th>Monthly</th><td class="n">%s</td></tr>'
                             '<tr><th>Remaining of previous month</th><td class="n">%s</td></tr>'
                             '<tr><th>Consumed this month</th><td class="n">%s</td></tr>'
                             '<tr><th>Consumable (%%)</th><td class="n">%s</td></tr><tr><th>Consumable</th><td class="n">%s</td></tr></table>',
                             r ->> 'period_start', r ->> 'period_end', hpcacct_internal.html_escape(r ->> 'state'),
                             hpcacct_internal.notify_number((r ->> 'monthly')::numeric), hpcacct_internal.notify_number((r ->> 'remaining_prev')::numeric),
                             hpcacct_internal.notify_number((r ->> 'consumed')::numeric), hpcacct_internal.notify_number((r ->> 'consumable_pct')::numeric),
                             hpcacct_internal.notify_number((r ->> 'consumable')::numeric));
        END IF;

        -- HLRN: the quarter's balance
        IF d ? 'bank' THEN
            sec := d -> 'bank';
            SELECT array_agg(CASE WHEN EXTRACT(day FROM (x ->> 0)::date) IN (1, 15) THEN to_char((x ->> 0)::date, 'DD Mon') ELSE '' END ORDER BY ord),
                   jsonb_build_array(
                       jsonb_build_object('name', 'allocation', 'kind', 'dashed', 'color', '#555555',
                                          'values', jsonb_agg((sec ->> 'allocation')::numeric ORDER BY ord)),
                       jsonb_build_object('name', 'balance', 'kind', 'line', 'color', '#1f77b4',
                                          'values', jsonb_agg((x ->> 1)::numeric ORDER BY ord)))
            INTO labels, series
            FROM jsonb_array_elements(sec -> 'days') WITH ORDINALITY t(x, ord);
            h := h || format('<h2>Quarter starting %s (HLRN bank)</h2>', sec ->> 'quarter')
                   || hpcacct_internal.svg_chart('Balance of the quarter', sec ->> 'unit', labels, series)
                   || format('<table class="bank"><tr><th>allocation</th><th>balance</th><th>state</th></tr>'
                             '<tr><td class="n">%s %s</td><td class="n">%s %s</td><td>%s</td></tr></table>',
                             to_char((sec ->> 'allocation')::numeric, 'FM999,999,999,999,990.00'), hpcacct_internal.html_escape(sec ->> 'unit'),
                             to_char((sec ->> 'balance')::numeric, 'FM999,999,999,999,990.00'), hpcacct_internal.html_escape(sec ->> 'unit'),
                             hpcacct_internal.html_escape(sec ->> 'state'));
        END IF;

        -- usage by resource this allocation year, with the projection
        IF jsonb_array_length(d -> 'usage_by_resource') > 0 THEN
            SELECT array_agg((x ->> 'cluster') || '/' || (x ->> 'partition') ORDER BY ord),
                   jsonb_build_array(
                       jsonb_build_object('name', 'usage to date', 'kind', 'bar', 'color', '#1f77b4',
                                          'values', jsonb_agg((x ->> 'usage')::numeric ORDER BY ord)),
                       jsonb_build_object('name', 'projected for the year', 'kind', 'bar', 'color', '#aec7e8',
                                          'values', jsonb_agg((x ->> 'projected_usage')::numeric ORDER BY ord))),
                   string_agg(format('<tr><td>%s</td><td>%s</td><td>%s to %s</td><td class="n">%s</td><td class="n">%s</td>'
                                     '<td class="n">%s</td><td class="n">%s</td><td class="n">%s</td><td>%s</td></tr>',
                                     hpcacct_internal.html_escape(x ->> 'cluster'), hpcacct_internal.html_escape(x ->> 'partition'),
                                     x ->> 'year_start', x ->> 'year_end',
                                     coalesce(to_char((x ->> 'core_years')::numeric, 'FM999,999,999,999,990.000'), 'n/a'),
                                     to_char((x ->> 'equivalent_hours')::numeric, 'FM999,999,999,999,990.00'),
                                     to_char((x ->> 'usage')::numeric, 'FM999,999,999,999,990.00'),
                                     to_char((x ->> 'usage_years')::numeric, 'FM999,999,999,999,990.000'),
                                     coalesce(to_char((x ->> 'projected_usage')::numeric, 'FM999,999,999,999,990.00'), ''),
                                     hpcacct_internal.html_escape(x ->> 'unit')), '' ORDER BY ord)
            INTO labels, series, rows
            FROM jsonb_array_elements(d -> 'usage_by_resource') WITH ORDINALITY t(x, ord);
            h := h || '<h2>Usage by resource this allocation year</h2>'
                   || hpcacct_internal.svg_chart('Usage to date and projected for the year', 'charged units', labels, series)
                   || '<table class="usage"><tr><th>cluster</th><th>partition</th><th>year</th><th>core-years (raw)</th>'
                      '<th>equivalent-hours (unweighted)</th><th>usage to date</th><th>usage in unit-years</th>'
                      '<th>projected</th><th>unit</th></tr>'
                   || rows || '</table>';
        END IF;
        RETURN h || '</body></html>';
    END
    $$;
COMMENT ON FUNCTION @extschema@.statement_html(text, date) IS
    'An account''s monthly statement as one self-contained HTML page with inline SVG charts (GENCI, RWTH, HLRN, usage '
    'by resource), from account_month()';
CREATE OR REPLACE FUNCTION @extschema@.create_job_table(job_table text DEFAULT '@extschema@.job') RETURNS regclass
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        created regclass;
    BEGIN
        IF job_table IS NULL THEN
            RAISE EXCEPTION 'create_job_table: job_table must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        ELSIF job_table !~ '\S' THEN
            RAISE EXCEPTION 'create_job_table: job_table must name a table, not "%"', job_table
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        EXECUTE format($t$
            CREATE TABLE %s (
                cluster   text NOT NULL,
                jobid     text NOT NULL,
                account   text NOT NULL,
                "user"    text NOT NULL,
                partition text NOT NULL,
                submit    timestamptz,
                start     timestamptz NOT NULL,
                "end"     timestamptz NOT NULL,
                alloctres @extschema@.tres NOT NULL,
                state     text,
                UNIQUE NULLS NOT DISTINCT (cluster, jobid, submit)
            )$t$, job_table);
        created := job_table::regclass;
        EXECUTE format('COMMENT ON TABLE %s IS %L', created,
                       'Finished job runs, one row per (cluster, jobid, submit), columns named after sacct fields; charged by trigger');
        PERFORM @extschema@.attach_charging(created);
        PERFORM hpcacct_internal.protect_table(created);
        RETURN created;
    END
    $$;
COMMENT ON FUNCTION @extschema@.create_job_table(text) IS
    'Creates the job table (default hpcacct.job) with sacct''s columns, charging and row-level security';
CREATE OR REPLACE FUNCTION @extschema@.sacct_time(value text, zone text) RETURNS timestamptz
    AS 'MODULE_PATHNAME', 'hpcacct_sacct_time' LANGUAGE c STABLE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.sacct_time(text, text) IS
    'A sacct time: epoch seconds or ISO with a UTC offset are that instant, ISO without one is read in zone; '
    'NULL if it is not a time (Unknown, None, bad)';
CREATE OR REPLACE FUNCTION @extschema@.tres_problem(text) RETURNS text
    AS 'MODULE_PATHNAME', 'hpcacct_tres_problem' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.tres_problem(text) IS
    'NULL when the text is a valid tres, else ''SQLSTATE message'' of the error its input would raise';
CREATE OR REPLACE FUNCTION @extschema@.sacct_window_start(cluster text, overlap interval) RETURNS timestamptz
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT w.loaded_through OPERATOR(pg_catalog.-) overlap
        FROM @extschema@.sacct_watermark w WHERE w.cluster OPERATOR(pg_catalog.=) sacct_window_start.cluster
    $$;
COMMENT ON FUNCTION @extschema@.sacct_window_start(text, interval) IS
    'Start of a cluster''s next sacct window: its watermark minus the overlap; NULL if never loaded';
CREATE OR REPLACE FUNCTION @extschema@.load_sacct(through timestamptz DEFAULT NULL, clusters text[] DEFAULT NULL,
    OUT lines bigint, OUT inserted bigint, OUT rerated bigint, OUT updated bigint, OUT unchanged bigint,
    OUT unfinished bigint, OUT never_started bigint, OUT steps bigint, OUT ignored bigint,
    OUT duplicates bigint, OUT quarantined bigint, OUT retried bigint, OUT resolved bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET jit = off  -- one-off statements over many rows: compiling them cost more than it saved (1.3 s of 17)
    AS $fn$
    DECLARE
        zone    text;
        problems bigint;
        max_length  interval := @extschema@.setting_value('max_job_length')::interval;
        need_member boolean := @extschema@.setting_value('require_membership')::boolean;
        pending bigint[];
        lo      bigint;
        hi      bigint;
        mid     bigint;
        total   bigint;
        written bigint;
        state_  text;
        message text;
        whole   boolean := true;  -- the first attempt (the whole set) is still to come
        plain   boolean;          -- this attempt inserts new runs by a plain INSERT
        alone   boolean := false; -- the staging table is ours alone: read it, then truncate it
    BEGIN
        IF pg_catalog.to_regclass('@extschema@.job') IS NULL THEN
            RAISE EXCEPTION 'there is no job table @extschema@.job to load into'
                USING ERRCODE = 'undefined_table', HINT = 'Create it with SELECT @extschema@.create_job_table().';
        END IF;
        IF through IS NOT NULL AND (clusters IS NULL OR pg_catalog.cardinality(clusters) = 0
                                    OR pg_catalog.array_position(clusters, NULL) IS NOT NULL) THEN
            RAISE EXCEPTION 'a watermark (through) needs the clusters it is for'
                USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF through IS NOT NULL AND NOT pg_catalog.isfinite(through) THEN
            RAISE EXCEPTION 'the watermark must be finite, not %', through USING ERRCODE = 'datetime_field_overflow';
        END IF;
        -- One load at a time (another waits here): every committed line is loaded once.
        PERFORM pg_catalog.pg_advisory_xact_lock('@extschema@.sacct_staging'::regclass::oid::bigint);
        -- When no other session holds the staging table (none is staging or reading lines) it
        -- is locked until commit, read whole and truncated: deleting every line cost 0.4 s per
        -- 200 000. Only where each statement sees what is committed (read committed): a
        -- snapshot taken earlier would miss lines the TRUNCATE removes. Otherwise the lines
        -- are claimed by DELETE, and another session's uncommitted lines wait for a later load.
        IF pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
            BEGIN
                LOCK TABLE @extschema@.sacct_staging IN ACCESS EXCLUSIVE MODE NOWAIT;
                alone := true;
            EXCEPTION WHEN lock_not_available THEN
                alone := false;
            END;
        END IF;
        -- Times without an offset are read in the site's time zone; unset, they are quarantined.
        SELECT s.value INTO zone FROM @extschema@.setting s WHERE s.name = 'timezone';

        IF pg_catalog.to_regclass('pg_temp.hpcacct_sacct_batch') IS NOT NULL THEN  -- a load that failed earlier
            DROP TABLE pg_temp.hpcacct_sacct_batch;
        END IF;
        IF pg_catalog.to_regclass('pg_temp.hpcacct_sacct_dup') IS NOT NULL THEN
            DROP TABLE pg_temp.hpcacct_sacct_dup;
        END IF;
        IF pg_catalog.to_regclass('pg_temp.hpcacct_sacct_write') IS NOT NULL THEN
            DROP TABLE pg_temp.hpcacct_sacct_write;
        END IF;
        IF pg_catalog.to_regclass('pg_temp.hpcacct_sacct_failed') IS NOT NULL THEN
            DROP TABLE pg_temp.hpcacct_sacct_failed;
        END IF;
        CREATE TEMP TABLE hpcacct_sacct_batch ON COMMIT DROP AS
        WITH claimed AS (
            DELETE FROM @extschema@.sacct_staging WHERE NOT alone RETURNING *
        ), parsed AS (
            SELECT r.*,
                   @extschema@.sacct_time(r.submit, zone) AS t_submit,
                   @extschema@.sacct_time(r.start, zone) AS t_start,
                   @extschema@.sacct_time(r."end", zone) AS t_end,
                   @extschema@.sacct_tres(r.alloctres) AS alloc  -- NULL: not a tres (tres_problem() says why)
            FROM (SELECT 0 AS origin, NULL::bigint AS quarantine_id, c.lineno, c.line, c.problem, c.cluster, c.jobid, c.jobidraw, c.account,
                         c."user", c.partition, c.submit, c.start, c."end", c.alloctres, c.state, c.elapsedraw,
                         c.reqtres, c.qos, c.nodelist
                  FROM (SELECT * FROM claimed
                        UNION ALL
                        SELECT * FROM @extschema@.sacct_staging WHERE alone) c
                  UNION ALL
                  SELECT 1, q.quarantine_id, NULL, q.line, q.problem, q.cluster, q.jobid, q.jobidraw, q.account, q."user",
                         q.partition, q.submit, q.start, q."end", q.alloctres, q.state, q.elapsedraw, q.reqtres,
                         q.qos, q.nodelist
                  FROM @extschema@.sacct_quarantine q WHERE q.resolved_at IS NULL) r
            OFFSET 0  -- computed once per line: flattened, every reference would parse the times again
        ), keyed AS (
            SELECT p.*,
                   CASE WHEN p.cluster IS NULL AND p.jobid IS NULL AND p.submit IS NULL
                        THEN 'line:' || coalesce(p.line, '')
                        ELSE coalesce(p.cluster, '') || '|' || coalesce(p.jobid, '') || '|'
                             || coalesce(pg_catalog.date_part('epoch', p.t_submit)::text, 'raw:' || coalesce(p.submit, ''))
                   END AS job_key
            FROM parsed p
            OFFSET 0
        ), ranked AS (
            SELECT k.*,
                   1 AS rank,  -- the line that counts for its run is 1, the others 2 (below)
                   m.slurm_account IS NOT NULL AND m.account IS NULL AS ignored,
                   CASE WHEN m.slurm_account IS NOT NULL THEN m.account ELSE k.account END AS charged_account,
                   -- a rate at the start (one at most: resource_one_rate_at_a_time); joined, not
                   -- looked up per line (a million index probes)
                   rs.resource_id IS NOT NULL AS rated,
                   -- the account and the membership, joined too (unique keys: one row at most)
                   a.name IS NOT NULL AS account_known,
                   ms.account IS NOT NULL AS member
            FROM keyed k
            LEFT JOIN @extschema@.slurm_account_map m ON m.slurm_account = k.account
            LEFT JOIN @extschema@.account a
              ON a.name = CASE WHEN m.slurm_account IS NOT NULL THEN m.account ELSE k.account END
            LEFT JOIN @extschema@.membership ms
              ON ms.account = a.name AND ms.username = k."user"
            LEFT JOIN @extschema@.resource rs
              ON rs.cluster = k.cluster AND rs.partition = k.partition AND rs.valid @> k.t_start
        )
        SELECT r.*,
               CASE
                   WHEN r.problem IS NOT NULL THEN 'quarantine:22P02:' || r.problem
                   WHEN pg_catalog.strpos(r.jobid, '.') > 0 THEN 'step'
                   WHEN r.ignored THEN 'ignored'
                   WHEN coalesce(r."end", '') IN ('', 'Unknown', 'None') THEN 'unfinished'
                   WHEN coalesce(r.start, '') IN ('', 'Unknown', 'None') THEN 'never_started'
                   WHEN coalesce(r.cluster, '') = '' OR coalesce(r.jobid, '') = '' OR coalesce(r.account, '') = ''
                        OR coalesce(r."user", '') = '' OR coalesce(r.partition, '') = ''
                        OR coalesce(r.submit, '') IN ('', 'Unknown', 'None') OR r.alloctres IS NULL
                       THEN 'quarantine:22004:the line lacks a cluster, jobid, account, user, partition, submit time or alloctres'
                   WHEN (r.t_submit IS NULL OR r.t_start IS NULL OR r.t_end IS NULL) AND zone IS NULL
                        AND (@extschema@.sacct_time(r.submit, 'UTC') IS NOT NULL AND r.t_submit IS NULL
                             OR @extschema@.sacct_time(r.start, 'UTC') IS NOT NULL AND r.t_start IS NULL
                             OR @extschema@.sacct_time(r."end", 'UTC') IS NOT NULL AND r.t_end IS NULL)
                       THEN 'quarantine:22023:a time without a UTC offset, and the site''s timezone setting is unset '
                            '(set it, or run sacct with SLURM_TIME_FORMAT=%s)'
                   WHEN r.t_submit IS NULL OR r.t_start IS NULL OR r.t_end IS NULL
                       THEN 'quarantine:22007:invalid time (submit "' || r.submit || '", start "' || r.start
                            || '", end "' || r."end" || '")'
                   WHEN r.t_end < r.t_start
                       THEN 'quarantine:22023:the job ends before it starts'
                   -- cancelled while it waited: Slurm 22.05 may record Start = End and no allocation
                   WHEN r.alloctres = '' AND r.t_end = r.t_start THEN 'never_started'
                   WHEN r.t_end - r.t_start > max_length
                       THEN 'quarantine:HA004:the job claims to have run longer than max_job_length (' || max_length || ')'
                   WHEN r.alloc IS NULL
                       THEN 'quarantine:' || pg_catalog.left(@extschema@.tres_problem(r.alloctres), 5) || ':'
                            || pg_catalog.substr(@extschema@.tres_problem(r.alloctres), 7)
                   WHEN NOT r.account_known
                       THEN 'quarantine:42704:unknown account "' || r.charged_account || '"'
                   WHEN need_member AND NOT r.member
                       THEN 'quarantine:HA005:user "' || r."user" || '" is not a member of account "'
                            || r.charged_account || '"'
                   WHEN NOT r.rated
                       THEN 'quarantine:42704:no resource for cluster "' || r.cluster || '" partition "'
                            || r.partition || '" at ' || r.t_start
                   ELSE 'charge'
               END AS verdict
        FROM ranked r;
        IF alone THEN
            TRUNCATE @extschema@.sacct_staging;
        END IF;
        -- the columns later statements join and filter on (all 30 of them cost more)
        ANALYZE pg_temp.hpcacct_sacct_batch (job_key, origin, rank, verdict);
        -- Several lines of one run (a file holding two windows, a quarantined line seen again):
        -- the newest staged line counts, then the quarantined one; the others rank 2. Found by
        -- hashing the keys, without sorting every line; the batch is updated only if there are
        -- any (joining it with none still hashed every line: 0.4 s per 200 000).
        CREATE TEMP TABLE hpcacct_sacct_dup ON COMMIT DROP AS
        SELECT b.job_key FROM pg_temp.hpcacct_sacct_batch b GROUP BY b.job_key HAVING pg_catalog.count(*) > 1;
        GET DIAGNOSTICS total = ROW_COUNT;
        IF total > 0 THEN
            WITH ordered AS (
                SELECT b.ctid AS row_id,
                       pg_catalog.row_number() OVER (PARTITION BY b.job_key ORDER BY b.origin, b.lineno DESC) AS n
                FROM pg_temp.hpcacct_sacct_batch b JOIN pg_temp.hpcacct_sacct_dup d ON d.job_key = b.job_key
            )
            UPDATE pg_temp.hpcacct_sacct_batch b SET rank = 2
            FROM ordered o WHERE b.ctid = o.row_id AND o.n > 1;
        END IF;

        -- Runs to write: those to charge that hpcacct.job does not hold as they are (an
        -- unchanged run is only counted: a re-load writes no row here).
        CREATE TEMP TABLE hpcacct_sacct_write ON COMMIT DROP AS
        SELECT pg_catalog.row_number() OVER () AS seq, w.*
        FROM (SELECT b.origin, b.lineno, b.job_key, b.cluster, b.jobid, b.charged_account AS account, b."user",
                     b.partition, b.t_submit AS submit, b.t_start AS start, b.t_end AS "end", b.alloc AS alloctres,
                     b.state,
                     CASE WHEN j.cluster IS NULL THEN 'inserted'
                          WHEN (j.account, j."user", j.partition, j.start, j."end")
                               IS DISTINCT FROM (b.charged_account, b."user", b.partition, b.t_start, b.t_end)
                               OR NOT j.alloctres OPERATOR(@extschema@.=) b.alloc THEN 'rerated'
                          WHEN j.state IS DISTINCT FROM b.state THEN 'updated'
                          ELSE 'unchanged'
                     END AS action
              FROM pg_temp.hpcacct_sacct_batch b
              LEFT JOIN @extschema@.job j ON j.cluster = b.cluster AND j.jobid = b.jobid AND j.submit = b.t_submit
              WHERE b.verdict = 'charge' AND b.rank = 1) w
        WHERE w.action <> 'unchanged';
        GET DIAGNOSTICS total = ROW_COUNT;
        ANALYZE pg_temp.hpcacct_sacct_write (seq, job_key, action);

        CREATE TEMP TABLE hpcacct_sacct_failed (seq bigint PRIMARY KEY, sqlstate text, reason text) ON COMMIT DROP;
        -- Ranges still to write, as pairs lo, hi: the whole set first; a range that fails is
        -- split in halves, and a single row that fails is quarantined.
        IF total > 0 THEN
            pending := ARRAY[1, total];
        END IF;
        WHILE pg_catalog.cardinality(pending) > 0 LOOP
            lo := pending[1];
            hi := pending[2];
            pending := pending[3:];
            BEGIN
                -- The whole set first: new runs by a plain INSERT (no speculative insertion per
                -- row), changed ones by the upsert. If that fails (a site trigger, a run another
                -- session inserted meanwhile), the whole set is upserted, then bisected if need be.
                plain := whole;
                whole := false;  -- a variable: not undone by the exception
                IF plain THEN
                    INSERT INTO @extschema@.job (cluster, jobid, account, "user", partition, submit, start, "end",
                                                 alloctres, state)
                    SELECT w.cluster, w.jobid, w.account, w."user", w.partition, w.submit, w.start, w."end",
                           w.alloctres, w.state
                    FROM pg_temp.hpcacct_sacct_write w
                    WHERE w.action = 'inserted';
                END IF;
                INSERT INTO @extschema@.job AS j (cluster, jobid, account, "user", partition, submit, start, "end",
                                                  alloctres, state)
                SELECT w.cluster, w.jobid, w.account, w."user", w.partition, w.submit, w.start, w."end",
                       w.alloctres, w.state
                FROM pg_temp.hpcacct_sacct_write w
                WHERE w.seq BETWEEN lo AND hi AND NOT (plain AND w.action = 'inserted')
                ON CONFLICT (cluster, jobid, submit) DO UPDATE
                    SET account = excluded.account, "user" = excluded."user", partition = excluded.partition,
                        start = excluded.start, "end" = excluded."end", alloctres = excluded.alloctres,
                        state = excluded.state
                    WHERE (j.account, j."user", j.partition, j.start, j."end", j.alloctres::text, j.state)
                          IS DISTINCT FROM (excluded.account, excluded."user", excluded.partition, excluded.start,
                                            excluded."end", excluded.alloctres::text, excluded.state);
            EXCEPTION WHEN OTHERS THEN
                GET STACKED DIAGNOSTICS state_ = RETURNED_SQLSTATE, message = MESSAGE_TEXT;
                -- Only what a job's data can cause is quarantined; anything else (out of
                -- memory, deadlock, a full disk) fails the load.
                IF pg_catalog.left(state_, 2) NOT IN ('22', '23', '42', '44', 'HA', 'P0') THEN
                    RAISE;
                END IF;
                IF plain THEN  -- the same range again, upserted
                    pending := ARRAY[lo, hi] || pending;
                ELSIF lo = hi THEN
                    INSERT INTO pg_temp.hpcacct_sacct_failed VALUES (lo, state_, message);
                ELSE
                    mid := (lo + hi) / 2;
                    pending := ARRAY[lo, mid, mid + 1, hi] || pending;
                END IF;
            END;
        END LOOP;

        -- Open quarantine rows (all of them are in the batch) whose run this load took
        -- (charged, unchanged or skipped) are resolved; so are those whose key changed (a time
        -- without offset that now parses): they are quarantined again under the new key below.
        -- (the batch's counts, all in one scan; unchanged is completed below)
        SELECT pg_catalog.count(*) FILTER (WHERE b.origin = 0),
               pg_catalog.count(*) FILTER (WHERE b.rank = 1 AND b.verdict = 'unfinished'),
               pg_catalog.count(*) FILTER (WHERE b.rank = 1 AND b.verdict = 'never_started'),
               pg_catalog.count(*) FILTER (WHERE b.rank = 1 AND b.verdict = 'step'),
               pg_catalog.count(*) FILTER (WHERE b.rank = 1 AND b.verdict = 'ignored'),
               pg_catalog.count(*) FILTER (WHERE b.rank > 1 AND b.origin = 0),
               pg_catalog.count(*) FILTER (WHERE b.rank = 1 AND b.verdict LIKE 'quarantine:%'),
               pg_catalog.count(*) FILTER (WHERE b.origin = 1),
               pg_catalog.count(*) FILTER (WHERE b.rank = 1 AND b.verdict = 'charge')
        INTO lines, unfinished, never_started, steps, ignored, duplicates, quarantined, retried, unchanged
        FROM pg_temp.hpcacct_sacct_batch b;
        problems := quarantined + (SELECT pg_catalog.count(*) FROM pg_temp.hpcacct_sacct_failed);
        IF retried > 0 THEN
            WITH done AS (
                UPDATE @extschema@.sacct_quarantine q
                SET resolved_at = pg_catalog.statement_timestamp(),
                    resolution = CASE WHEN q.job_key <> b.job_key AND (top.verdict LIKE 'quarantine:%' OR f.seq IS NOT NULL)
                                      THEN 'rekeyed'
                                 WHEN w.action IS NOT NULL THEN w.action
                                 WHEN top.verdict = 'charge' THEN 'unchanged'  -- not in the write table
                                 ELSE top.verdict END
                FROM pg_temp.hpcacct_sacct_batch b
                JOIN pg_temp.hpcacct_sacct_batch top ON top.job_key = b.job_key AND top.rank = 1
                LEFT JOIN pg_temp.hpcacct_sacct_write w ON w.job_key = top.job_key
                LEFT JOIN pg_temp.hpcacct_sacct_failed f ON f.seq = w.seq
                WHERE b.origin = 1 AND q.quarantine_id = b.quarantine_id
                  AND ((top.verdict NOT LIKE 'quarantine:%' AND f.seq IS NULL) OR q.job_key <> b.job_key)
                RETURNING q.resolution
            )
            SELECT pg_catalog.count(*) FILTER (WHERE d.resolution <> 'rekeyed') INTO resolved FROM done d;
        ELSE
            resolved := 0;
        END IF;

        -- Quarantine: new problems, and open rows that failed again.
        IF problems > 0 THEN
            INSERT INTO @extschema@.sacct_quarantine AS q
                (job_key, reason, sqlstate, line, problem, cluster, jobid, jobidraw, account, "user", partition,
                 submit, start, "end", alloctres, state, elapsedraw, reqtres, qos, nodelist)
            SELECT b.job_key,
                   coalesce(f.reason, pg_catalog.substr(b.verdict, 18)),
                   coalesce(f.sqlstate, pg_catalog.substr(b.verdict, 12, 5)),
                   b.line, b.problem, b.cluster, b.jobid, b.jobidraw, b.account, b."user", b.partition, b.submit,
                   b.start, b."end", b.alloctres, b.state, b.elapsedraw, b.reqtres, b.qos, b.nodelist
            FROM pg_temp.hpcacct_sacct_batch b
            LEFT JOIN pg_temp.hpcacct_sacct_write w ON w.job_key = b.job_key AND b.verdict = 'charge'
            LEFT JOIN pg_temp.hpcacct_sacct_failed f ON f.seq = w.seq
            WHERE b.rank = 1 AND (b.verdict LIKE 'quarantine:%' OR f.seq IS NOT NULL)
            ON CONFLICT (job_key) WHERE resolved_at IS NULL DO UPDATE
                SET reason = excluded.reason, sqlstate = excluded.sqlstate, last_tried = excluded.last_tried,
                    attempts = q.attempts + 1, line = excluded.line, problem = excluded.problem,
                    cluster = excluded.cluster, jobid = excluded.jobid, jobidraw = excluded.jobidraw,
                    account = excluded.account, "user" = excluded."user", partition = excluded.partition,
                    submit = excluded.submit, start = excluded.start, "end" = excluded."end",
                    alloctres = excluded.alloctres, state = excluded.state, elapsedraw = excluded.elapsedraw,
                    reqtres = excluded.reqtres, qos = excluded.qos, nodelist = excluded.nodelist;
        END IF;

        IF through IS NOT NULL THEN
            INSERT INTO @extschema@.sacct_watermark AS wm (cluster, loaded_through)
            SELECT DISTINCT c, through FROM pg_catalog.unnest(clusters) AS c
            ON CONFLICT (cluster) DO UPDATE
                SET loaded_through = GREATEST(wm.loaded_through, excluded.loaded_through),
                    updated_at = excluded.updated_at;
        END IF;

        SELECT pg_catalog.count(*) FILTER (WHERE w.action = 'inserted' AND f.seq IS NULL),
               pg_catalog.count(*) FILTER (WHERE w.action = 'rerated' AND f.seq IS NULL),
               pg_catalog.count(*) FILTER (WHERE w.action = 'updated' AND f.seq IS NULL),
               pg_catalog.count(*) FILTER (WHERE f.seq IS NOT NULL),
               pg_catalog.count(*)
        INTO inserted, rerated, updated, total, written
        FROM pg_temp.hpcacct_sacct_write w
        LEFT JOIN pg_temp.hpcacct_sacct_failed f ON f.seq = w.seq;
        unchanged := unchanged - written;  -- runs to charge that were not to be written
        quarantined := quarantined + total;
        DROP TABLE pg_temp.hpcacct_sacct_batch, pg_temp.hpcacct_sacct_dup, pg_temp.hpcacct_sacct_write,
                   pg_temp.hpcacct_sacct_failed;
    END
    $fn$;
COMMENT ON FUNCTION @extschema@.load_sacct(timestamptz, text[]) IS
    'Loads the staged sacct lines (and retries the quarantine): charges finished runs, skips steps, unfinished runs and '
    'ignored accounts, quarantines the rest; advances the clusters'' watermarks to through';
CREATE OR REPLACE FUNCTION @extschema@.sync_slurm_accounts(OUT accounts_added bigint, OUT users_added bigint,
                                                OUT memberships_added bigint, OUT associations bigint)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $fn$
    BEGIN
        PERFORM pg_catalog.pg_advisory_xact_lock('@extschema@.sacctmgr_staging'::regclass::oid::bigint);
        IF pg_catalog.to_regclass('pg_temp.hpcacct_assoc') IS NOT NULL THEN
            DROP TABLE pg_temp.hpcacct_assoc;
        END IF;
        CREATE TEMP TABLE hpcacct_assoc ON COMMIT DROP AS
        WITH claimed AS (DELETE FROM @extschema@.sacctmgr_staging RETURNING *)
        SELECT DISTINCT c.account, nullif(c."user", '') AS username
        FROM claimed c
        WHERE coalesce(c.account, '') <> ''
          AND NOT EXISTS (SELECT 1 FROM @extschema@.slurm_account_map m WHERE m.slurm_account = c.account);
        SELECT pg_catalog.count(*) INTO associations FROM pg_temp.hpcacct_assoc;

        INSERT INTO @extschema@.account (name, description)
        SELECT DISTINCT a.account, 'from Slurm (sacctmgr)' FROM pg_temp.hpcacct_assoc a
        ON CONFLICT (name) DO NOTHING;
        GET DIAGNOSTICS accounts_added = ROW_COUNT;
        INSERT INTO @extschema@.hpc_user (username)
        SELECT DISTINCT a.username FROM pg_temp.hpcacct_assoc a WHERE a.username IS NOT NULL
        ON CONFLICT (username) DO NOTHING;
        GET DIAGNOSTICS users_added = ROW_COUNT;
        INSERT INTO @extschema@.membership (account, username)
        SELECT DISTINCT a.account, a.username FROM pg_temp.hpcacct_assoc a WHERE a.username IS NOT NULL
        ON CONFLICT (account, username) DO NOTHING;
        GET DIAGNOSTICS memberships_added = ROW_COUNT;
        DROP TABLE pg_temp.hpcacct_assoc;
    END
    $fn$;
COMMENT ON FUNCTION @extschema@.sync_slurm_accounts() IS
    'Adds the accounts, users and memberships of the staged sacctmgr associations that are missing; removes nothing';
CREATE OR REPLACE FUNCTION @extschema@.statement_accounts(month date)
    RETURNS SETOF text
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        tz constant text := @extschema@.site_timezone();
        m date;
    BEGIN
        m := hpcacct_internal.statement_month(month);
        RETURN QUERY
        SELECT a.name
        FROM @extschema@.account a
        WHERE EXISTS (SELECT 1 FROM @extschema@.ledger l
                      WHERE l.account = a.name AND l.kind = 'charge'
                        AND l.job_start < (m + interval '1 month')::timestamp AT TIME ZONE tz
                        AND l.job_end >= m::timestamp AT TIME ZONE tz)
           OR EXISTS (SELECT 1 FROM @extschema@.ledger l
                      WHERE l.account = a.name AND l.kind <> 'charge'
                        AND l.valid_from < (m + interval '1 month')::date AND l.valid_until >= m)
           OR EXISTS (SELECT 1 FROM @extschema@.quota_period p
                      WHERE p.account = a.name AND p.period_start < (m + interval '1 month')::date AND p.period_end >= m)
        ORDER BY a.name;
    END
    $$;
COMMENT ON FUNCTION @extschema@.statement_accounts(date) IS
    'Accounts the caller may see with a charge, an allocation or a window quota in a month: whose statements '
    'hpcacct-report --all writes';
CREATE OR REPLACE FUNCTION @extschema@.r_wlm_usage(project text DEFAULT NULL, at date DEFAULT NULL)
    RETURNS TABLE (account text, period_start date, period_end date, month date, state text,
                   monthly float8, remaining_prev float8, consumed_current float8,
                   consumable_pct float8, consumable float8, cluster text, unit text)
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF project IS NOT NULL THEN
            RETURN QUERY SELECT * FROM @extschema@.window_quota_usage(project, at);
            RETURN;
        END IF;
        RETURN QUERY
        SELECT u.*
        FROM (SELECT DISTINCT p.account FROM @extschema@.quota_period p
              WHERE (SELECT hpcacct_internal.sees_all_accounts())
                 OR p.account = ANY ((SELECT hpcacct_internal.visible_accounts())::text[])) a
        CROSS JOIN LATERAL @extschema@.window_quota_usage(a.account, at) u
        ORDER BY u.account;
    END
    $$;
COMMENT ON FUNCTION @extschema@.r_wlm_usage(text, date) IS
    'r_wlm_usage -q: the window quota of the caller''s own accounts (administrators: every account), or of one '
    'project, for the month containing at (NULL: today in the site time zone)';
CREATE OR REPLACE FUNCTION @extschema@.core_hours(alloc @extschema@.tres, elapsed interval) RETURNS numeric
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN elapsed >= interval '0' AND pg_catalog.date_trunc('month', elapsed) = interval '0'
                     OR elapsed IS NULL
                     OR hpcacct_internal.refuse_argument(elapsed, 'core_hours', 'elapsed')
                THEN pg_catalog.round((@extschema@.tres_get(alloc, 'cpu') * pg_catalog.date_part('epoch', elapsed) / 3600)::numeric, 6)
           END;
COMMENT ON FUNCTION @extschema@.core_hours(@extschema@.tres, interval) IS
    'Raw core-hours: AllocTRES cpu x wall-clock hours (unweighted), rounded to 6 decimals; a negative elapsed time '
    'or one with a month part is an error (22023), as for charge()';
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
        -- pass over the allocations, consumption as consumption_before() computes it, summed
        -- exactly (numeric): a charge wholly inside the period counts its amount, a charge
        -- across one of its ends its share before the end minus its share before the start.
        -- A monthly run's period runs from 1 January to the 16th, both boundaries of the
        -- consumption rollup, which holds those very terms: it reads the rollup. An annual
        -- run's ends at 1 May or 1 June: it reads the year's charges one by one.
        WITH events AS (
            SELECT l.account, l.pool AS machine, s.monthly_threshold, s.annual_warning_percent,
                   s.annual_retraction_percent,
                   coalesce(sum(l.amount), 0) AS alloc,
                   coalesce(sum(l.amount) FILTER (WHERE l.kind <> 'retraction'), 0) AS granted,
                   coalesce(@extschema@.tmc(l.valid_from, l.valid_until, l.amount::float8, as_of, s.month_convention), 0) AS tmc,
                   coalesce(@extschema@.tc(l.valid_from, l.valid_until, l.amount::float8, as_of, s.month_convention)
                            - @extschema@.tc(l.valid_from, l.valid_until, l.amount::float8, y_start - 1, s.month_convention),
                            0) AS tc
            FROM @extschema@.ledger l
            JOIN @extschema@.regulation_machine s ON s.machine = l.pool
            WHERE l.kind IN ('grant', 'supplement', 'retraction') AND l.pool IS NOT NULL
              AND l.valid_from <= as_of AND l.valid_until >= y_start
            GROUP BY l.account, l.pool, s.machine
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
            WHERE kind_of_run <> 'monthly' AND l.kind = 'charge' AND l.job_start < b.b2 AND l.job_end >= b.b1
            GROUP BY l.account, l.resource_id
            UNION ALL
            -- consumption before 16th minus consumption before 1 January: the amounts of the
            -- jobs ended by a boundary in between (the 16th included), the shares before the
            -- 16th of the jobs running across it, minus those before 1 January
            SELECT c.account, c.resource_id,
                   sum(CASE WHEN c.boundary = y_start THEN -c.running
                            WHEN c.boundary = as_of + 1 THEN c.ended + c.running
                            ELSE c.ended END)
            FROM hpcacct_internal.consumption_rollup_exact c
            WHERE kind_of_run = 'monthly' AND c.boundary BETWEEN y_start AND as_of + 1
            GROUP BY c.account, c.resource_id
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
            INSERT INTO @extschema@.ledger (account, kind, amount, unit, pool, valid_from, valid_until, note)
            SELECT o.account, 'retraction', -o.hours,
                   (SELECT l.unit
                    FROM @extschema@.ledger l
                    WHERE l.account = o.account AND l.pool = o.machine
                      AND l.kind IN ('grant', 'supplement', 'retraction') AND l.valid_from <= as_of
                    ORDER BY l.valid_from DESC, l.entry_id DESC
                    LIMIT 1),
                   o.machine, d, y_end,
                   format('hpcacct.regulate(%s): %s regulation', d,
                          CASE WHEN kind_of_run = 'monthly' THEN 'monthly' ELSE 'annual' END)
            FROM outcome o
            WHERE o.hours > 0
            ORDER BY o.machine, o.account
            RETURNING entry_id, account, pool
        ), booked_ids AS (
            -- The retractions' entries by account and machine, looked up by key below rather
            -- than joined: both CTEs are estimated at a row or two whatever the site, and a
            -- join of them was planned as a nested loop, quadratic (1.4 s of CPU for 10 000
            -- accounts and 2 600 retractions).
            SELECT pg_catalog.jsonb_object_agg(pg_catalog.jsonb_build_array(b.account, b.pool)::text, b.entry_id)
                       AS entries
            FROM booked b
        ), logged AS (
            -- A plain INSERT: should a concurrent run slip past the lock (e.g. under
            -- REPEATABLE READ), the unique key makes it fail rather than book twice.
            INSERT INTO @extschema@.regulation_log (run_date, run, account, machine, figures_at, outcome, alloc,
                                                    granted, consumption, tc, tmc, delta, used_percent,
                                                    retracted, entry_id)
            SELECT d, kind_of_run, o.account, o.machine, as_of, o.result, o.alloc, o.granted, o.consumption,
                   o.tc, o.tmc, o.consumption - o.tc, o.used, o.hours,
                   ((SELECT i.entries FROM booked_ids i)
                    ->> pg_catalog.jsonb_build_array(o.account, o.machine)::text)::bigint
            FROM outcome o
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
COMMENT ON PROCEDURE @extschema@.regulate(date) IS
    'GENCI regulation for a date: monthly on the 15th, annual warning on 1 May, annual retraction on 1 June, a no-op (notice) on other dates; idempotent; results in hpcacct.regulation_log';
CREATE OR REPLACE FUNCTION hpcacct_internal.check_setting() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        max_length interval;
        ok         boolean;
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM @extschema@.setting_catalog() c WHERE c.name = NEW.name) THEN
            RAISE EXCEPTION 'unknown setting "%"', NEW.name
                USING ERRCODE = 'undefined_object', HINT = 'See hpcacct.settings for the settings there are.';
        END IF;
        IF NEW.name = 'timezone'
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_names z WHERE z.name = NEW.value)
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_abbrevs z WHERE z.abbrev = NEW.value) THEN
            RAISE EXCEPTION 'unknown time zone "%"', NEW.value
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Use a name from pg_timezone_names, e.g. Europe/Berlin.';
        END IF;
        IF NEW.name = 'max_job_length' THEN
            BEGIN
                max_length := NEW.value::interval;
            EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR interval_field_overflow THEN
                max_length := NULL;
            END;
            IF max_length IS NULL OR max_length <= interval '0' OR pg_catalog.date_part('month', max_length) <> 0
               OR pg_catalog.date_part('year', max_length) <> 0 THEN
                RAISE EXCEPTION 'max_job_length must be a positive interval in days or hours, not "%"', NEW.value
                    USING ERRCODE = 'invalid_parameter_value', HINT = 'E.g. ''30 days''.';
            END IF;
        END IF;
        IF NEW.name = 'require_membership' AND lower(NEW.value) NOT IN ('on', 'off', 'true', 'false') THEN
            RAISE EXCEPTION 'require_membership must be on or off, not "%"', NEW.value
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF NEW.name = 'expiry_warning_days' AND (NEW.value !~ '^[0-9]{1,2}$' OR NEW.value::integer > 92) THEN
            RAISE EXCEPTION 'expiry_warning_days must be a whole number of days from 0 to 92, not "%"', NEW.value
                USING ERRCODE = 'invalid_parameter_value', HINT = 'At most a quarter ahead; 0 turns the warning off.';
        END IF;
        IF NEW.name = 'personal_allotment'
           AND (NEW.value !~ '^[0-9]+(\.[0-9]+)?$' OR NEW.value::numeric <= 0) THEN
            RAISE EXCEPTION 'personal_allotment must be a positive number, not "%"', NEW.value
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- fair share and usage reports
        BEGIN
            ok := CASE NEW.name
                WHEN 'decay' THEN NEW.value IN ('half_life', 'interval')
                WHEN 'half_life' THEN NEW.value::interval > interval '0'
                                      AND pg_catalog.date_part('month', NEW.value::interval) = 0
                                      AND pg_catalog.date_part('year', NEW.value::interval) = 0
                WHEN 'period' THEN NEW.value::interval > interval '0'
                                   AND pg_catalog.date_part('month', NEW.value::interval) = 0
                                   AND pg_catalog.date_part('year', NEW.value::interval) = 0
                WHEN 'period_decay' THEN NEW.value::float8 BETWEEN 0 AND 1
                WHEN 'depth' THEN NEW.value::integer >= 1
                WHEN 'exhausted_factor' THEN NEW.value::float8 BETWEEN 0 AND 1
                WHEN 'year_start_month' THEN NEW.value::integer BETWEEN 1 AND 12
                WHEN 'hours_per_year' THEN NEW.value::float8 > 0 AND NEW.value::float8 < 'Infinity'
                WHEN 'rollup' THEN NEW.value IN ('immediate', 'deferred')
                ELSE true
            END;
        EXCEPTION WHEN data_exception THEN
            ok := false;
        END;
        IF ok IS NOT TRUE THEN
            RAISE EXCEPTION 'invalid value "%" for setting %', NEW.value, NEW.name
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = (SELECT c.description FROM @extschema@.setting_catalog() c WHERE c.name = NEW.name) || '.';
        END IF;
        RETURN NEW;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.check_setting() IS 'Trigger: only known settings, with values of the right kind';
CREATE OR REPLACE FUNCTION hpcacct_internal.ledger_is_append_only() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        RAISE EXCEPTION 'hpcacct.ledger is append-only: % is not allowed', lower(TG_OP)
            USING ERRCODE = 'HA001', HINT = 'Book a correcting entry instead.';
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.ledger_is_append_only() IS 'Trigger: refuses UPDATE, DELETE and TRUNCATE of the ledger (HA001)';
CREATE OR REPLACE FUNCTION hpcacct_internal.ledger_check_references() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        accounts  text[];
        resources bigint[];
        missing   text;
    BEGIN
        SELECT pg_catalog.array_agg(DISTINCT p.account), pg_catalog.array_agg(DISTINCT p.resource_id)
                   FILTER (WHERE p.resource_id IS NOT NULL)
        INTO accounts, resources
        FROM (SELECT e.account, e.resource_id FROM new_entries e GROUP BY e.account, e.resource_id) p;
        IF (SELECT pg_catalog.count(*) FROM (SELECT 1 FROM @extschema@.account a WHERE a.name = ANY (accounts)
                                              FOR KEY SHARE) l) < pg_catalog.cardinality(accounts) THEN
            SELECT n INTO missing FROM pg_catalog.unnest(accounts) n
            WHERE NOT EXISTS (SELECT 1 FROM @extschema@.account a WHERE a.name = n) LIMIT 1;
            RAISE EXCEPTION 'insert into ledger: account "%" does not exist', missing
                USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'ledger_account_fkey', TABLE = 'ledger',
                      SCHEMA = '@extschema@';
        END IF;
        IF (SELECT pg_catalog.count(*) FROM (SELECT 1 FROM @extschema@.resource r WHERE r.resource_id = ANY (resources)
                                              FOR KEY SHARE) l) < coalesce(pg_catalog.cardinality(resources), 0) THEN
            SELECT n::text INTO missing FROM pg_catalog.unnest(resources) n
            WHERE NOT EXISTS (SELECT 1 FROM @extschema@.resource r WHERE r.resource_id = n) LIMIT 1;
            RAISE EXCEPTION 'insert into ledger: resource % does not exist', missing
                USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'ledger_resource_id_fkey', TABLE = 'ledger',
                      SCHEMA = '@extschema@';
        END IF;
        RETURN NULL;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.ledger_check_references() IS
    'Statement trigger of hpcacct.ledger: the foreign keys'' check of new rows, once per statement (locks and checks '
    'the accounts and resources they name)';
CREATE OR REPLACE FUNCTION hpcacct_internal.job_columns(job_table regclass, mapping text[]) RETURNS text[]
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        roles   constant text[] := ARRAY['cluster', 'jobid', 'account', 'user', 'partition', 'start', 'end', 'alloctres',
                                         'submit'];
        submit_mapped boolean := false;
        columns text[] := roles;
        pair    text;
        role    text;
        column_name text;
        column_type oid;
        position integer;
    BEGIN
        FOREACH pair IN ARRAY coalesce(mapping, '{}') LOOP
            role := split_part(pair, '=', 1);
            column_name := substr(pair, length(role) + 2);
            position := array_position(roles, role);
            IF strpos(pair, '=') = 0 OR position IS NULL OR column_name = '' THEN
                RAISE EXCEPTION 'invalid job column mapping "%"', pair
                    USING ERRCODE = 'invalid_parameter_value',
                          HINT = format('Use role=column with a role among %s.', array_to_string(roles, ', '));
            END IF;
            columns[position] := column_name;
            submit_mapped := submit_mapped OR role = 'submit';
        END LOOP;
        FOR position IN 1 .. array_length(roles, 1) LOOP
            SELECT a.atttypid INTO column_type
            FROM pg_catalog.pg_attribute a
            WHERE a.attrelid = job_table AND a.attname = columns[position] AND a.attnum > 0 AND NOT a.attisdropped;
            IF NOT FOUND AND roles[position] = 'submit' AND NOT submit_mapped THEN
                columns[position] := 'NULL';
                CONTINUE;
            END IF;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'column "%" of % (the job''s %) does not exist', columns[position], job_table, roles[position]
                    USING ERRCODE = 'undefined_column',
                          HINT = format('Name it in the trigger arguments, e.g. ''%s=my_column''.', roles[position]);
            END IF;
            -- Charging casts these columns while it runs as the extension's owner: a type
            -- with a cast or output function of its own would run its author's code with
            -- those rights. Only built-in types (and tres) are read, checked at every firing.
            IF NOT column_type = ANY (CASE
                    WHEN roles[position] IN ('start', 'end', 'submit')
                        THEN ARRAY['timestamptz', 'timestamp']::regtype[]
                    WHEN roles[position] = 'alloctres'
                        THEN ARRAY['@extschema@.tres', 'text', 'varchar']::regtype[]
                    ELSE ARRAY['text', 'varchar', 'bpchar', 'name', 'int2', 'int4', 'int8', 'numeric']::regtype[]
                END) THEN
                RAISE EXCEPTION 'column "%" of % (the job''s %) has type %, which charging does not read',
                                columns[position], job_table, roles[position], column_type::regtype
                    USING ERRCODE = 'datatype_mismatch',
                          DETAIL = 'Charging runs with the extension owner''s rights and reads only built-in types: '
                                   'text or integers for names and ids, timestamptz or timestamp for times, '
                                   'tres or text for alloctres.',
                          HINT = 'Change the column to one of these types.';
            END IF;
            columns[position] := quote_ident(columns[position]);
        END LOOP;
        RETURN columns;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.job_columns(regclass, text[]) IS 'The columns charging reads from a job table, checked, from role=column pairs';
CREATE OR REPLACE FUNCTION @extschema@.attach_charging(job_table regclass, VARIADIC mapping text[] DEFAULT '{}')
    RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        args text;
    BEGIN
        IF job_table IS NULL THEN
            RAISE EXCEPTION 'attach_charging: job_table must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF mapping IS NULL THEN
            RAISE EXCEPTION 'attach_charging: mapping must not be NULL' USING ERRCODE = 'null_value_not_allowed',
                HINT = 'Leave it out when the columns have sacct''s names.';
        END IF;
        PERFORM hpcacct_internal.job_columns(job_table, mapping);  -- fail now, not at the first insert
        SELECT coalesce(string_agg(quote_literal(m), ', '), '') INTO args FROM unnest(mapping) AS m;
        EXECUTE format('CREATE TRIGGER hpcacct_charge_insert AFTER INSERT ON %s REFERENCING NEW TABLE AS new_jobs '
                       'FOR EACH STATEMENT EXECUTE FUNCTION hpcacct_internal.charge_jobs(%s)', job_table, args);
        EXECUTE format('CREATE TRIGGER hpcacct_charge_update AFTER UPDATE ON %s '
                       'REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs '
                       'FOR EACH STATEMENT EXECUTE FUNCTION hpcacct_internal.charge_jobs(%s)', job_table, args);
        EXECUTE format('CREATE TRIGGER hpcacct_charge_delete AFTER DELETE ON %s REFERENCING OLD TABLE AS old_jobs '
                       'FOR EACH STATEMENT EXECUTE FUNCTION hpcacct_internal.charge_jobs(%s)', job_table, args);
    END
    $$;
COMMENT ON FUNCTION @extschema@.attach_charging(regclass, text[]) IS
    'Makes inserts, updates and deletes on a job table charge the ledger; mapping: role=column pairs (none when left '
    'out; NULL is an error, 22004)';
CREATE OR REPLACE FUNCTION hpcacct_internal.day_or_today(day date, caller text) RETURNS date
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
CREATE OR REPLACE FUNCTION hpcacct_internal.require_account(account text, caller text) RETURNS text
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
CREATE OR REPLACE FUNCTION hpcacct_internal.rebuild_rollup_trigger() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        changed boolean;
    BEGIN
        changed := CASE TG_OP
                       WHEN 'INSERT' THEN NEW.name = ANY (TG_ARGV)
                       WHEN 'DELETE' THEN OLD.name = ANY (TG_ARGV)
                       ELSE (NEW.name = ANY (TG_ARGV) OR OLD.name = ANY (TG_ARGV)) AND NEW IS DISTINCT FROM OLD
                   END;
        IF changed THEN
            PERFORM @extschema@.rebuild_rollup();
        END IF;
        RETURN NULL;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.rebuild_rollup_trigger() IS
    'Trigger of hpcacct.setting: rebuilds the rollups when a setting named by its arguments changes';
CREATE OR REPLACE FUNCTION hpcacct_internal.last_charged_start(resource_id bigint) RETURNS timestamptz
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
COMMENT ON FUNCTION hpcacct_internal.last_charged_start(bigint) IS
    'Latest start of the jobs a resource row still charges (NULL: none)';
CREATE OR REPLACE FUNCTION hpcacct_internal.check_resource_change() RETURNS trigger
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
                    USING ERRCODE = 'HA006',
                          DETAIL = 'Its rate, bundle, node, unit, pool, exclusive flag and the start of its validity '
                                   'are what the ledger''s charges were computed from.',
                          HINT = format('For jobs from a date on, re-rate them: SELECT hpcacct.rerate(%s, <new rate>, <from>) '
                                        '(closes this row, adds the new one, books reversals and new charges). For future '
                                        'jobs only, close this row at <from> and insert a new one from <from>.',
                                        OLD.resource_id);
            END IF;
            last_start := hpcacct_internal.last_charged_start(OLD.resource_id);
            IF last_start IS NOT NULL AND NOT NEW.valid @> last_start THEN
                RAISE EXCEPTION 'resource % (%/%) cannot be closed at %: it charged a job that started at %',
                                OLD.resource_id, OLD.cluster, OLD.partition, upper(NEW.valid), last_start
                    USING ERRCODE = 'HA006',
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
COMMENT ON FUNCTION hpcacct_internal.check_resource_change() IS
    'Trigger: a charged resource row may only be closed (HA006), not deleted; overlapping rates get a hint';
CREATE OR REPLACE FUNCTION hpcacct_internal.check_account_delete() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF TG_OP = 'UPDATE' AND NEW.name IS NOT DISTINCT FROM OLD.name THEN
            RETURN NEW;
        END IF;
        IF EXISTS (SELECT 1 FROM @extschema@.ledger l WHERE l.account = OLD.name) THEN
            IF TG_OP = 'UPDATE' THEN
                RAISE EXCEPTION 'account "%" has ledger entries and cannot be renamed', OLD.name
                    USING ERRCODE = 'foreign_key_violation',
                          HINT = 'The ledger is append-only and its entries name the account. Keep the name; '
                                 'put what the account is now in its description.';
            END IF;
            RAISE EXCEPTION 'account "%" has ledger entries and cannot be deleted', OLD.name
                USING ERRCODE = 'foreign_key_violation',
                      HINT = 'The ledger is append-only, so its accounts stay. To end an account''s use, stop '
                             'allocating to it (without an allocation for the current quarter check_submit refuses '
                             'it as account_expired) and remove its members with hpcacct.remove_member().';
        END IF;
        RETURN CASE TG_OP WHEN 'UPDATE' THEN NEW ELSE OLD END;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.check_account_delete() IS
    'Trigger: an account with ledger entries cannot be deleted or renamed; says what to do instead';
CREATE OR REPLACE FUNCTION hpcacct_internal.require_bank_account(account text, caller text) RETURNS void
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM hpcacct_internal.require_account(account, caller);
        IF EXISTS (SELECT 1 FROM @extschema@.account a WHERE a.name = account AND a.deleted_in IS NOT NULL) THEN
            RAISE EXCEPTION 'account "%" has been deleted', account
                USING ERRCODE = 'HA002', HINT = 'Deleted personal accounts cannot be reactivated.';
        END IF;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.require_bank_account(text, text) IS
    'An account argument of a bank operation: require_account(), and not deleted (HA002)';
CREATE OR REPLACE FUNCTION hpcacct_internal.require_amount(amount numeric) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF amount IS NULL THEN
            RAISE EXCEPTION 'amount must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        -- the ledger's numeric(20, 6) holds less than 10^14; an amount is booked rounded to 6
        -- decimals, so one that rounds to 0 would book nothing (a transfer of two zero rows)
        IF amount = 'NaN' OR amount <= 0 OR amount >= 1e14 THEN
            RAISE EXCEPTION 'amount must be a positive number below 10^14, not %', amount
                USING ERRCODE = 'numeric_value_out_of_range';
        ELSIF round(amount, 6) = 0 THEN
            RAISE EXCEPTION 'amount must be a positive number below 10^14 at the ledger''s 6 decimals, not %', amount
                USING ERRCODE = 'numeric_value_out_of_range';
        END IF;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.require_amount(numeric) IS 'Raises unless the amount is a positive number below 10^14 that does not round to 0 (the ledger''s numeric(20, 6))';
CREATE OR REPLACE FUNCTION hpcacct_internal.book_allocation(account text, kind text, quarter date, amount numeric, note text)
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
COMMENT ON FUNCTION hpcacct_internal.book_allocation(text, text, date, numeric, text) IS
    'Books a bank entry valid for the quarter containing a day (internal helper)';
CREATE OR REPLACE FUNCTION @extschema@.deposit(account text, quarter date, amount numeric, note text DEFAULT NULL)
    RETURNS bigint LANGUAGE sql RETURN hpcacct_internal.book_credit(account, 'deposit', quarter, amount, note);
COMMENT ON FUNCTION @extschema@.deposit(text, date, numeric, text) IS
    'Deposits credits into an account for the quarter containing a day; returns the ledger entry';
CREATE OR REPLACE FUNCTION @extschema@.refund(account text, quarter date, amount numeric, note text DEFAULT NULL)
    RETURNS bigint LANGUAGE sql RETURN hpcacct_internal.book_credit(account, 'refund', quarter, amount, note);
COMMENT ON FUNCTION @extschema@.refund(text, date, numeric, text) IS
    'Gives credits back to an account in the quarter containing a day (e.g. for a failed job)';
CREATE OR REPLACE FUNCTION @extschema@.transfer(from_account text, from_quarter date, to_account text, to_quarter date,
                                     amount numeric, note text DEFAULT NULL)
    RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM hpcacct_internal.require_bank_account(from_account, 'transfer');
        PERFORM hpcacct_internal.require_bank_account(to_account, 'transfer');
        PERFORM hpcacct_internal.require_amount(amount);
        IF from_account = to_account AND @extschema@.quarter_start(from_quarter) = @extschema@.quarter_start(to_quarter) THEN
            RAISE EXCEPTION 'a transfer needs a different account or quarter' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        PERFORM hpcacct_internal.book_allocation(from_account, 'transfer', from_quarter, -amount, note);
        PERFORM hpcacct_internal.book_allocation(to_account, 'transfer', to_quarter, amount, note);
    END
    $$;
COMMENT ON FUNCTION @extschema@.transfer(text, date, text, date, numeric, text) IS
    'Moves allocation from one account and quarter to another (staff); two ledger rows';
CREATE OR REPLACE FUNCTION hpcacct_internal.top_up_note(target numeric) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN 'personal allotment up to ' || pg_catalog.trim_scale(target)::text;
COMMENT ON FUNCTION hpcacct_internal.top_up_note(numeric) IS 'Ledger note of a personal top-up to a level (its once-only key)';
CREATE OR REPLACE FUNCTION hpcacct_internal.check_personal_allotment() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF NEW.personal_allotment > 2 * @extschema@.setting_value('personal_allotment')::numeric THEN
            RAISE EXCEPTION 'personal allotment % exceeds double the default (%)',
                            NEW.personal_allotment, @extschema@.setting_value('personal_allotment')
                USING ERRCODE = 'numeric_value_out_of_range';
        END IF;
        RETURN NEW;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.check_personal_allotment() IS 'Trigger: a personal allotment is at most double the setting';
CREATE OR REPLACE FUNCTION hpcacct_internal.require_admin(account text, by_user text) RETURNS void
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF by_user IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM @extschema@.membership m
            WHERE m.account = require_admin.account AND m.username = by_user AND m.role = 'admin') THEN
            RAISE EXCEPTION 'user "%" is not an administrator of account "%"', by_user, account
                USING ERRCODE = 'insufficient_privilege';
        END IF;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.require_admin(text, text) IS
    'Raises unless by_user administers the account (NULL: staff acting directly)';
CREATE OR REPLACE FUNCTION hpcacct_internal.require_member_manager(account text, by_user text) RETURNS void
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                   WHERE (r.rolname = 'hpcacct_admin' AND pg_catalog.pg_has_role(pg_catalog.session_user(), r.oid, 'MEMBER'))
                      OR (r.rolname = pg_catalog.session_user() AND r.rolsuper)) THEN
            PERFORM hpcacct_internal.require_admin(account, by_user);
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
COMMENT ON FUNCTION hpcacct_internal.require_member_manager(text, text) IS
    'Raises 42501 unless the session user is staff or administers the account (a portal user acts as itself)';
CREATE OR REPLACE FUNCTION hpcacct_internal.visible_accounts() RETURNS text[]
    LANGUAGE sql STABLE SECURITY DEFINER PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT coalesce(pg_catalog.array_agg(m.account), '{}')
        FROM @extschema@.membership m WHERE m.username = pg_catalog.session_user()
    $$;
COMMENT ON FUNCTION hpcacct_internal.visible_accounts() IS
    'Accounts the session user is a member of: what row-level security lets a portal role see';
CREATE OR REPLACE FUNCTION hpcacct_internal.sees_all_accounts() RETURNS boolean
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        RETURN EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                       WHERE r.rolname IN ('hpcacct_admin', 'hpcacct_auditor', 'hpcacct_submit')
                         AND pg_catalog.pg_has_role(pg_catalog.current_user(), r.oid, 'MEMBER'))
               OR coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = pg_catalog.current_user()),
                           false);
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.sees_all_accounts() IS
    'True for superusers and members of hpcacct_admin, hpcacct_auditor or hpcacct_submit, who see every account''s rows';
CREATE OR REPLACE FUNCTION hpcacct_internal.protect_table(target regclass) RETURNS boolean
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        has_account boolean;
        has_username boolean;
        visible text;
    BEGIN
        SELECT bool_or(a.attname = 'account'), bool_or(a.attname = 'username')
        INTO has_account, has_username
        FROM pg_catalog.pg_attribute a
        WHERE a.attrelid = target AND a.attnum > 0 AND NOT a.attisdropped;
        visible := CASE
            WHEN target = '@extschema@.account'::regclass
                THEN 'name = ANY ((SELECT hpcacct_internal.visible_accounts())::text[])'
            WHEN has_account AND has_username
                THEN 'account = ANY ((SELECT hpcacct_internal.visible_accounts())::text[]) OR username = session_user'
            WHEN has_account
                THEN 'account = ANY ((SELECT hpcacct_internal.visible_accounts())::text[])'
            WHEN has_username
                THEN 'username = session_user'
        END;
        IF visible IS NULL THEN
            RETURN false;
        END IF;
        EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', target);
        EXECUTE format('CREATE POLICY member_rows ON %s FOR SELECT USING ((SELECT hpcacct_internal.sees_all_accounts()) OR %s)',
                       target, visible);
        EXECUTE format('CREATE POLICY insert_rows ON %s FOR INSERT WITH CHECK (true)', target);
        EXECUTE format('CREATE POLICY update_rows ON %s FOR UPDATE USING (true) WITH CHECK (true)', target);
        EXECUTE format('CREATE POLICY delete_rows ON %s FOR DELETE USING (true)', target);
        RETURN true;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.protect_table(regclass) IS
    'Row-level security for a table with an account or username column: portal users see their accounts'' rows';
CREATE OR REPLACE FUNCTION hpcacct_internal.grant_submit_role() RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        GRANT USAGE ON SCHEMA @extschema@, hpcacct_internal TO hpcacct_submit;
        GRANT SELECT ON @extschema@.account, @extschema@.hpc_user, @extschema@.membership, @extschema@.ledger,
                        @extschema@.charge_rollup, @extschema@.consumption_rollup, @extschema@.rollup_pending, @extschema@.setting,
                        @extschema@.settings, @extschema@.resource,
                        @extschema@.quota_period, @extschema@.monthly_allowance, @extschema@.regulation_machine
            TO hpcacct_submit;
        GRANT EXECUTE ON FUNCTION @extschema@.check_submit(text, text, date) TO hpcacct_submit;
    END
    $$;
REVOKE EXECUTE ON FUNCTION hpcacct_internal.grant_submit_role() FROM PUBLIC;
COMMENT ON FUNCTION hpcacct_internal.grant_submit_role() IS
    'Grants hpcacct_submit what check_submit reads (called by setup_roles)';
CREATE OR REPLACE FUNCTION hpcacct_internal.note_replicated_charge() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        first boolean;
    BEGIN
        -- the held charges roll_up_received() inserts (a trigger's statement) go in
        IF pg_catalog.pg_trigger_depth() > 1 THEN
            RETURN NEW;
        END IF;
        -- other kinds go in as they come (rare: deposits, grants, retractions), reported received
        IF NEW.kind <> 'charge' THEN
            INSERT INTO @extschema@.federation_received AS p (receiver, origin, last_entry_id, received_at)
            SELECT n.site, @extschema@.federation_origin(NEW.entry_id), NEW.entry_id, pg_catalog.now()
            FROM @extschema@.federation_node n
            WHERE hpcacct_internal.federation_report_due(n.site, @extschema@.federation_origin(NEW.entry_id))
            ON CONFLICT (receiver, origin) DO UPDATE
                SET last_entry_id = GREATEST(p.last_entry_id, excluded.last_entry_id), received_at = excluded.received_at;
            RETURN NEW;
        END IF;
        first := pg_catalog.current_setting('hpcacct.received_pending', true) IS DISTINCT FROM 'on';
        IF first THEN
            PERFORM pg_catalog.set_config('hpcacct.received_pending', 'on', true);
            IF pg_catalog.to_regclass('pg_temp.hpcacct_received') IS NULL THEN
                CREATE TEMPORARY TABLE hpcacct_received (
                    entry                @extschema@.ledger NOT NULL,
                    first_in_transaction boolean NOT NULL
                );
                CREATE CONSTRAINT TRIGGER hpcacct_received_roll_up AFTER INSERT ON pg_temp.hpcacct_received
                    DEFERRABLE INITIALLY DEFERRED
                    FOR EACH ROW WHEN (NEW.first_in_transaction) EXECUTE FUNCTION hpcacct_internal.roll_up_received();
                -- written in replica sessions only: fire there
                ALTER TABLE pg_temp.hpcacct_received ENABLE ALWAYS TRIGGER hpcacct_received_roll_up;
            ELSIF pg_catalog.pg_relation_size('pg_temp.hpcacct_received') > 8 * 8192 THEN
                TRUNCATE pg_temp.hpcacct_received;  -- empty: only dead rows of earlier transactions
            END IF;
        END IF;
        INSERT INTO pg_temp.hpcacct_received (entry, first_in_transaction) VALUES (NEW, first);
        RETURN NULL;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.note_replicated_charge() IS
    'Row trigger of hpcacct.ledger for replicated rows (enabled for replica sessions only): holds received charges '
    'back until commit';
CREATE OR REPLACE FUNCTION hpcacct_internal.federation_refuse_local_write() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        RAISE EXCEPTION '% is written at the federation''s centre, not at a site', TG_TABLE_NAME
            USING ERRCODE = 'HA013',
                  HINT = 'Make the change in the central database; it reaches every site by replication.';
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.federation_refuse_local_write() IS
    'Trigger of the reference tables at a federation site: refuses writes of the site''s own sessions (HA013)';
CREATE OR REPLACE FUNCTION hpcacct_internal.federation_slot_exists(slot text) RETURNS boolean
    LANGUAGE sql STABLE STRICT
    SET search_path = pg_catalog, pg_temp
    AS $$ SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots s WHERE s.slot_name = slot) $$;
COMMENT ON FUNCTION hpcacct_internal.federation_slot_exists(text) IS 'Whether a replication slot of that name exists';
CREATE OR REPLACE FUNCTION hpcacct_internal.notify_number(x numeric) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN x IS NULL THEN 'n/a'
                ELSE pg_catalog.replace(pg_catalog.btrim(pg_catalog.to_char(pg_catalog.round(x), 'S999,999,999,999,990')), '+', '')
           END;
COMMENT ON FUNCTION hpcacct_internal.notify_number(numeric) IS 'A figure as messages print it: rounded, thousands separated by commas';
CREATE OR REPLACE FUNCTION hpcacct_internal.notify_regulation() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM @extschema@.outbox_add_all(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
            'topic', x.topic, 'decision_key', pg_catalog.concat_ws('/', r.account, r.machine, r.run_date, r.run),
            'account', r.account,
            'subject', pg_catalog.format('[hpcacct] %s on %s: %s (%s)', r.account, r.machine,
                                         CASE x.topic WHEN 'regulation_warning' THEN 'under-consumption warning'
                                                      WHEN 'regulation_retraction' THEN 'hours retracted'
                                                      WHEN 'annual_warning' THEN 'annual under-consumption warning'
                                                      ELSE 'annual retraction' END, r.run_date),
            'body', E'Dear project manager,\n\n' || CASE x.topic
                WHEN 'regulation_warning' THEN pg_catalog.format(
                    E'On %s project %s had consumed %s hours on %s, against a theoretical consumption TC of %s hours:\n'
                    'an under-consumption of %s hours, between one and two theoretical monthly consumptions\n'
                    '(TMC = %s hours). No hours are retracted now; should the under-consumption reach twice the TMC\n'
                    'on a later 15th, a TMC of hours will be retracted from the allocation.',
                    r.figures_at, hpcacct_internal.notify_name(r.account), hpcacct_internal.notify_number(r.consumption::numeric),
                    hpcacct_internal.notify_name(r.machine),
                    hpcacct_internal.notify_number(r.tc::numeric), hpcacct_internal.notify_number(-r.delta::numeric),
                    hpcacct_internal.notify_number(r.tmc::numeric))
                WHEN 'regulation_retraction' THEN pg_catalog.format(
                    E'On %s project %s had consumed %s hours on %s, against a theoretical consumption TC of %s hours:\n'
                    'an under-consumption of %s hours, at least twice the theoretical monthly consumption\n'
                    '(TMC = %s hours). %s hours (one TMC) are retracted from the allocation, effective %s and\n'
                    'valid until 31 December: the allocation goes from %s to %s hours.',
                    r.figures_at, hpcacct_internal.notify_name(r.account), hpcacct_internal.notify_number(r.consumption::numeric),
                    hpcacct_internal.notify_name(r.machine),
                    hpcacct_internal.notify_number(r.tc::numeric), hpcacct_internal.notify_number(-r.delta::numeric),
                    hpcacct_internal.notify_number(r.tmc::numeric), hpcacct_internal.notify_number(r.retracted),
                    r.run_date, hpcacct_internal.notify_number(r.alloc), hpcacct_internal.notify_number(r.alloc - r.retracted))
                WHEN 'annual_warning' THEN pg_catalog.format(
                    E'By the end of %s project %s had used %s of its %s hours on %s (%s %%), less than the %s %%\n'
                    'expected in the first five months. Unless a justification reaches GENCI before the end of May,\n'
                    'up to %s %% of the annual allocation may be retracted after May.',
                    r.figures_at, hpcacct_internal.notify_name(r.account), hpcacct_internal.notify_number(r.consumption::numeric),
                    hpcacct_internal.notify_number(r.alloc), hpcacct_internal.notify_name(r.machine),
                    pg_catalog.round(r.used_percent::numeric, 1),
                    s.annual_warning_percent, s.annual_retraction_percent)
                ELSE pg_catalog.format(
                    E'By the end of %s project %s had used %s of its %s hours on %s (%s %%), less than %s %%,\n'
                    'and it was not exonerated. %s hours are retracted from the allocation, effective %s: it goes\n'
                    'from %s to %s hours.',
                    r.figures_at, hpcacct_internal.notify_name(r.account), hpcacct_internal.notify_number(r.consumption::numeric),
                    hpcacct_internal.notify_number(r.alloc), hpcacct_internal.notify_name(r.machine),
                    pg_catalog.round(r.used_percent::numeric, 1),
                    s.annual_warning_percent, hpcacct_internal.notify_number(r.retracted), r.run_date,
                    hpcacct_internal.notify_number(r.alloc), hpcacct_internal.notify_number(r.alloc - r.retracted))
            END || E'\n\n'
            || pg_catalog.format(E'Figures at the end of %s:\n  Alloc        %s\n  TMC          %s\n  TC           %s\n'
                                 '  consumption  %s\n  delta        %s\n  retracted    %s\n',
                                 r.figures_at, hpcacct_internal.notify_number(r.alloc), hpcacct_internal.notify_number(r.tmc::numeric),
                                 hpcacct_internal.notify_number(r.tc::numeric), hpcacct_internal.notify_number(r.consumption::numeric),
                                 hpcacct_internal.notify_number(r.delta::numeric), hpcacct_internal.notify_number(r.retracted)),
            'figures', pg_catalog.jsonb_build_object('run_date', r.run_date, 'run', r.run, 'machine', r.machine,
                                                     'figures_at', r.figures_at, 'alloc', r.alloc, 'tmc', r.tmc, 'tc', r.tc,
                                                     'consumption', r.consumption, 'delta', r.delta,
                                                     'used_percent', r.used_percent, 'retracted', r.retracted))))
        FROM new_rows r
        JOIN @extschema@.regulation_machine s ON s.machine = r.machine
        CROSS JOIN LATERAL (SELECT CASE r.run WHEN 'monthly' THEN 'regulation_' || r.outcome ELSE r.run END AS topic) x
        WHERE (r.run = 'monthly' AND r.outcome IN ('warning', 'retraction'))
           OR (r.run = 'annual_warning' AND r.outcome = 'warning')
           OR (r.run = 'annual_retraction' AND r.outcome = 'retraction');
        RETURN NULL;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.notify_regulation() IS
    'Trigger: a regulation warning or retraction logged by regulate() writes its message to the project managers';
CREATE OR REPLACE FUNCTION hpcacct_internal.notify_quarter() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM @extschema@.outbox_add_all(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
            'topic', 'account_' || r.action, 'decision_key', pg_catalog.concat_ws('/', r.account, r.quarter),
            'account', r.account, 'also', pg_catalog.jsonb_build_array(r.account),
            'subject', pg_catalog.format('[hpcacct] account %s %s (%s)', r.account,
                                         CASE r.action WHEN 'expired' THEN 'has expired' ELSE 'is deleted' END, r.quarter),
            'body', CASE r.action
                WHEN 'expired' THEN pg_catalog.format(
                    E'Dear %s,\n\nyour personal account %s holds no allocation for the quarter starting %s, so it\n'
                    'has expired: you can still log in and work interactively, but you cannot submit batch jobs.\n'
                    'A personal account that is still expired at the next quarter start (%s) is deleted, and\n'
                    'with it the files of the login. Join an active project or ask your consultant for an\n'
                    'allocation to keep it.\n', hpcacct_internal.notify_name(r.account), hpcacct_internal.notify_name(r.account),
                    r.quarter,
                    (r.quarter + interval '3 months')::date)
                ELSE pg_catalog.format(
                    E'Dear %s,\n\nyour personal account %s expired in the previous quarter and still holds no\n'
                    'allocation on %s: it is deleted. The login is closed and its files on disk and tape are\n'
                    'deleted.\n', hpcacct_internal.notify_name(r.account), hpcacct_internal.notify_name(r.account), r.quarter)
            END,
            'figures', pg_catalog.jsonb_build_object('quarter', r.quarter, 'action', r.action))))
        FROM new_rows r
        -- an account that expired the quarter before is deleted by the same run: one notice, the deletion
        WHERE r.action = 'deleted'
           OR (r.action = 'expired'
               AND NOT EXISTS (SELECT 1 FROM @extschema@.quarter_log p
                               WHERE p.account = r.account AND p.action = 'expired'
                                 AND p.quarter = (r.quarter - interval '3 months')::date));
        RETURN NULL;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.notify_quarter() IS
    'Trigger: an expiry or deletion logged by open_quarter() writes its message to the account''s owner';
CREATE OR REPLACE FUNCTION hpcacct_internal.notify_hold() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        lifted constant boolean := coalesce(pg_catalog.current_setting('hpcacct.sync_lifted', true), '') = 'on';
    BEGIN
        PERFORM @extschema@.outbox_add_all(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
            'topic', CASE WHEN e.held THEN 'job_held' ELSE 'job_released' END,
            'decision_key', pg_catalog.concat_ws('/', n.cluster, n.jobid, CASE WHEN e.held THEN 'held' ELSE 'released' END,
                                                 coalesce(n.checked_at, pg_catalog.statement_timestamp())),
            -- the account as check_submit() resolves it (none named: the user's default project);
            -- NULL when it does not exist. The job's owner is told, not the account's managers.
            'account', (SELECT a.name FROM @extschema@.account a WHERE a.name = acct.name),
            'to_managers', false,
            'also', pg_catalog.jsonb_build_array(n.username),
            'subject', pg_catalog.format('[hpcacct] job %s on %s %s', n.jobid, n.cluster,
                                         CASE WHEN e.held THEN 'is held' ELSE 'is released' END),
            'body', CASE WHEN e.held AND n.other_hold THEN pg_catalog.format(
                    E'Dear %s,\n\nyour queued job %s on %s (account %s) is held by an administrator, and its\n'
                    'account cannot run it either: %s.\n'
                    'When the administrator releases the job, it stays on hold until that is corrected (e.g.\n'
                    'another account for the job), or ask the project administrator for an allocation.\n',
                    hpcacct_internal.notify_name(n.username), hpcacct_internal.notify_name(n.jobid), hpcacct_internal.notify_name(n.cluster),
                    hpcacct_internal.notify_name(acct.shown),
                    hpcacct_internal.notify_name(coalesce(n.hold_reason, 'no reason given')))
                 WHEN e.held THEN pg_catalog.format(
                    E'Dear %s,\n\nyour queued job %s on %s (account %s) has been put on hold: %s.\n'
                    'Correct the reason (e.g. choose another account) and release the job, or ask the\n'
                    'project administrator for an allocation.\n',
                    hpcacct_internal.notify_name(n.username), hpcacct_internal.notify_name(n.jobid), hpcacct_internal.notify_name(n.cluster),
                    hpcacct_internal.notify_name(acct.shown),
                    hpcacct_internal.notify_name(coalesce(n.hold_reason, 'no reason given')))
                 WHEN o.sync_hold = 'uhold' THEN pg_catalog.format(
                    E'Dear %s,\n\nyour queued job %s on %s (account %s) is no longer held by hpcacct.\n'
                    'Your own hold on it remains: release it (scontrol release %s) when it may run.\n',
                    hpcacct_internal.notify_name(n.username), hpcacct_internal.notify_name(n.jobid), hpcacct_internal.notify_name(n.cluster),
                    hpcacct_internal.notify_name(acct.shown), hpcacct_internal.notify_name(n.jobid))
                 ELSE pg_catalog.format(E'Dear %s,\n\nyour queued job %s on %s (account %s) is no longer held.\n',
                    hpcacct_internal.notify_name(n.username), hpcacct_internal.notify_name(n.jobid), hpcacct_internal.notify_name(n.cluster),
                    hpcacct_internal.notify_name(acct.shown))
            END,
            'figures', pg_catalog.jsonb_build_object('cluster', n.cluster, 'jobid', n.jobid, 'reason', n.hold_reason,
                                                     'other_hold', n.other_hold))))
        FROM new_rows n
        JOIN old_rows o ON o.cluster = n.cluster AND o.jobid = n.jobid
        CROSS JOIN LATERAL (SELECT n.held AND NOT o.held AS held) e
        CROSS JOIN LATERAL (SELECT coalesce(n.account, (SELECT coalesce(u.default_account, u.username)
                                                        FROM @extschema@.hpc_user u WHERE u.username = n.username)) AS name) resolved
        CROSS JOIN LATERAL (SELECT resolved.name, CASE WHEN n.account IS NOT NULL THEN n.account
                                                WHEN resolved.name IS NOT NULL THEN resolved.name || ', your default'
                                                ELSE 'default' END AS shown) acct
        WHERE (n.held AND NOT o.held)
           OR (lifted AND o.sync_hold IS NOT NULL AND n.sync_hold IS NULL);
        RETURN NULL;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.notify_hold() IS
    'Trigger: a queued job put on hold, or released by hpcacct-slurm-sync, writes its message to the job''s owner';
CREATE OR REPLACE FUNCTION hpcacct_internal.contact_touch() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        NEW.updated_at := pg_catalog.statement_timestamp();
        RETURN NEW;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.contact_touch() IS 'Trigger: sets contact.updated_at on every change';
CREATE OR REPLACE FUNCTION hpcacct_internal.html_escape(s text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(
                   s, '&', '&amp;'), '<', '&lt;'), '>', '&gt;'), '"', '&quot;'), '''', '&#39;')
    $$;
COMMENT ON FUNCTION hpcacct_internal.html_escape(text) IS 'Text escaped for HTML and SVG (& < > " '')';
CREATE OR REPLACE FUNCTION hpcacct_internal.svg_chart(title text, unit text, labels text[], series jsonb,
                                      width integer DEFAULT 760, height integer DEFAULT 300)
    RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        n integer := coalesce(pg_catalog.array_length(labels, 1), 0);
        left_x constant float8 := 78;
        top_y constant float8 := 34;
        plot_w float8 := width - left_x - 16;
        plot_h float8 := height - top_y - 58;
        lo float8;
        hi float8;
        step float8;
        mag float8;
        svg text;
        s jsonb;
        k integer := 0;
        bars integer;
        bar_i integer := 0;
        pts text;
        i integer;
        v float8;
        tick float8;
        legend_x float8 := left_x;
    BEGIN
        IF n = 0 OR series IS NULL OR pg_catalog.jsonb_typeof(series) <> 'array' THEN
            RAISE EXCEPTION 'svg_chart needs labels and an array of series' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        SELECT least(0, min(x)), max(x) INTO lo, hi
        FROM (SELECT (e.value #>> '{}')::float8 AS x
              FROM pg_catalog.jsonb_array_elements(series) ser,
                   LATERAL pg_catalog.jsonb_array_elements(coalesce(ser.value -> 'values', '[]') || coalesce(ser.value -> 'lower', '[]')
                                                           || coalesce(ser.value -> 'upper', '[]')) e
              WHERE pg_catalog.jsonb_typeof(e.value) = 'number') t;
        IF hi IS NULL OR hi <= lo THEN
            hi := lo + 1;
        END IF;
        -- a round step: 1, 2 or 5 times a power of ten, about five of them
        mag := power(10, floor(log((hi - lo) / 5)));
        step := CASE WHEN (hi - lo) / 5 <= mag THEN mag WHEN (hi - lo) / 5 <= 2 * mag THEN 2 * mag
                     WHEN (hi - lo) / 5 <= 5 * mag THEN 5 * mag ELSE 10 * mag END;
        step := greatest(step, 1);  -- labels are whole figures: a smaller step repeats them
        lo := floor(lo / step) * step;
        hi := ceil(hi / step) * step;
        svg := format('<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="%s" height="%s" viewBox="0 0 %s %s" '
                      'role="img" aria-label="%s">', width, height, width, height, hpcacct_internal.html_escape(title))
            || format('<rect x="0" y="0" width="%s" height="%s" fill="#ffffff"/>', width, height)
            || format('<text x="%s" y="20" font-family="sans-serif" font-size="14" font-weight="bold">%s</text>',
                      left_x, hpcacct_internal.html_escape(title))
            || format('<text x="12" y="%s" font-family="sans-serif" font-size="11" transform="rotate(-90 12 %s)" '
                      'text-anchor="middle">%s</text>', top_y + plot_h / 2, top_y + plot_h / 2, hpcacct_internal.html_escape(unit));
        -- grid and y labels
        tick := lo;
        WHILE tick <= hi + step / 2 LOOP
            svg := svg || format('<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#dddddd"/>',
                                 left_x, round((top_y + plot_h - (tick - lo) / (hi - lo) * plot_h)::numeric, 1),
                                 left_x + plot_w, round((top_y + plot_h - (tick - lo) / (hi - lo) * plot_h)::numeric, 1))
                       || format('<text x="%s" y="%s" font-family="sans-serif" font-size="10" text-anchor="end">%s</text>',
                                 left_x - 4, round((top_y + plot_h - (tick - lo) / (hi - lo) * plot_h + 3)::numeric, 1),
                                 hpcacct_internal.notify_number(tick::numeric));
            tick := tick + step;
        END LOOP;
        svg := svg || format('<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#333333"/>', left_x, top_y, left_x, top_y + plot_h)
                   || format('<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#333333"/>', left_x,
                             round((top_y + plot_h - (0 - lo) / (hi - lo) * plot_h)::numeric, 1), left_x + plot_w,
                             round((top_y + plot_h - (0 - lo) / (hi - lo) * plot_h)::numeric, 1));
        -- x labels
        FOR i IN 1 .. n LOOP
            CONTINUE WHEN coalesce(labels[i], '') = '';
            svg := svg || format('<text x="%s" y="%s" font-family="sans-serif" font-size="10" text-anchor="middle">%s</text>',
                                 round((left_x + (i - 0.5) * plot_w / n)::numeric, 1), top_y + plot_h + 14,
                                 hpcacct_internal.html_escape(labels[i]));
        END LOOP;
        SELECT count(*) INTO bars FROM jsonb_array_elements(series) e WHERE e.value ->> 'kind' = 'bar';
        FOR s IN SELECT e.value FROM jsonb_array_elements(series) e LOOP
            k := k + 1;
            IF s ->> 'kind' = 'bar' THEN
                svg := svg || format('<g class="series" data-series="%s" fill="%s">', hpcacct_internal.html_escape(s ->> 'name'),
                                     hpcacct_internal.html_escape(coalesce(s ->> 'color', '#1f77b4')));
                FOR i IN 1 .. n LOOP
                    v := (s -> 'values' ->> (i - 1))::float8;
                    CONTINUE WHEN v IS NULL;
                    svg := svg || format('<rect x="%s" y="%s" width="%s" height="%s"/>',
                        round((left_x + (i - 1) * plot_w / n + plot_w / n * (0.15 + 0.7 * bar_i / bars))::numeric, 1),
                        round((top_y + plot_h - (greatest(v, 0) - lo) / (hi - lo) * plot_h)::numeric, 1),
                        round((plot_w / n * 0.7 / bars)::numeric, 1),
                        round((abs(v) / (hi - lo) * plot_h)::numeric, 1));
                END LOOP;
                svg := svg || '</g>';
                bar_i := bar_i + 1;
            ELSIF s ->> 'kind' = 'band' THEN
                SELECT string_agg(format('%s,%s', round((left_x + (j - 0.5) * plot_w / n)::numeric, 1),
                                         round((top_y + plot_h - ((s -> 'upper' ->> (j - 1))::float8 - lo) / (hi - lo) * plot_h)::numeric, 1)),
                                  ' ' ORDER BY j)
                       || ' ' ||
                       string_agg(format('%s,%s', round((left_x + (j - 0.5) * plot_w / n)::numeric, 1),
                                         round((top_y + plot_h - ((s -> 'lower' ->> (j - 1))::float8 - lo) / (hi - lo) * plot_h)::numeric, 1)),
                                  ' ' ORDER BY j DESC)
                INTO pts
                FROM generate_series(1, n) j
                WHERE s -> 'upper' ->> (j - 1) IS NOT NULL AND s -> 'lower' ->> (j - 1) IS NOT NULL;
                svg := svg || format('<polygon class="series" data-series="%s" points="%s" fill="%s" fill-opacity="0.18" stroke="none"/>',
                                     hpcacct_internal.html_escape(s ->> 'name'), coalesce(pts, ''),
                                     hpcacct_internal.html_escape(coalesce(s ->> 'color', '#2ca02c')));
            ELSE
                SELECT string_agg(format('%s,%s', round((left_x + (j - 0.5) * plot_w / n)::numeric, 1),
                                         round((top_y + plot_h - ((s -> 'values' ->> (j - 1))::float8 - lo) / (hi - lo) * plot_h)::numeric, 1)),
                                  ' ' ORDER BY j)
                INTO pts
                FROM generate_series(1, n) j
                WHERE s -> 'values' ->> (j - 1) IS NOT NULL;
                svg := svg || format('<polyline class="series" data-series="%s" points="%s" fill="none" stroke="%s" stroke-width="2"%s/>',
                                     hpcacct_internal.html_escape(s ->> 'name'), coalesce(pts, ''),
                                     hpcacct_internal.html_escape(coalesce(s ->> 'color', '#1f77b4')),
                                     CASE WHEN s ->> 'kind' = 'dashed' THEN ' stroke-dasharray="6 4"' ELSE '' END);
            END IF;
            -- legend
            svg := svg || format('<rect x="%s" y="%s" width="12" height="12" fill="%s"%s/>', legend_x, height - 20,
                                 hpcacct_internal.html_escape(coalesce(s ->> 'color', '#1f77b4')),
                                 CASE WHEN s ->> 'kind' = 'band' THEN ' fill-opacity="0.3"' ELSE '' END)
                       || format('<text x="%s" y="%s" font-family="sans-serif" font-size="11">%s</text>', legend_x + 16,
                                 height - 10, hpcacct_internal.html_escape(s ->> 'name'));
            legend_x := legend_x + 26 + 6.5 * length(s ->> 'name');
        END LOOP;
        RETURN svg || '</svg>';
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.svg_chart(text, text, text[], jsonb, integer, integer) IS
    'An inline SVG chart: line, dashed, bar and band series over labelled x positions; one element of class series each';
CREATE OR REPLACE FUNCTION hpcacct_internal.visible_account(account text) RETURNS @extschema@.account
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        a @extschema@.account;
    BEGIN
        PERFORM hpcacct_internal.require_account(account, 'account_month');
        SELECT * INTO a FROM @extschema@.account x WHERE x.name = visible_account.account;
        RETURN a;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.visible_account(text) IS
    'The account row if it exists and the caller may see it, else 42704';
CREATE OR REPLACE FUNCTION hpcacct_internal.statement_month(month date) RETURNS date
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        m date;
    BEGIN
        IF month IS NULL THEN
            RAISE EXCEPTION 'a month is needed' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF NOT isfinite(month) THEN
            RAISE EXCEPTION 'the month must be a finite date' USING ERRCODE = 'datetime_field_overflow';
        END IF;
        m := date_trunc('month', month)::date;
        IF m > @extschema@.site_today() THEN
            RAISE EXCEPTION 'month % has not begun', to_char(m, 'YYYY-MM')
                USING ERRCODE = 'invalid_parameter_value', DETAIL = format('Today is %s in the site time zone.', @extschema@.site_today());
        END IF;
        RETURN m;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.statement_month(date) IS
    'First day of the month a statement is for; refuses NULL (22004), infinity (22008) and a month that has not begun (22023)';
CREATE OR REPLACE FUNCTION @extschema@.year_start_month(pool text) RETURNS integer
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT coalesce((SELECT p.year_start_month FROM @extschema@.pool p WHERE p.name = $1),
                        @extschema@.setting_value('year_start_month')::integer)
    $$;
COMMENT ON FUNCTION @extschema@.year_start_month(text) IS
    'First month of a pool''s allocation year (hpcacct.pool, else setting year_start_month)';
CREATE OR REPLACE FUNCTION @extschema@.usage_by_resource(for_year integer DEFAULT NULL, at timestamptz DEFAULT pg_catalog.now())
    RETURNS TABLE (pool text, unit text, cluster text, partition text, year integer, first_day date, last_day date,
                   equivalent_hours numeric, usage numeric, usage_years numeric,
                   projected_usage numeric, projected_years numeric)
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        -- a bad instant is refused here, in this function's name
        SELECT pg_catalog.isfinite($2) OR hpcacct_internal.refuse_argument($2, 'usage_by_resource', 'at');
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
        CROSS JOIN (SELECT (SELECT @extschema@.setting_value('hours_per_year'))::numeric AS hours) h
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
        -- a bad instant is refused here, in this function's name
        SELECT pg_catalog.isfinite($2) OR hpcacct_internal.refuse_argument($2, 'usage_by_account', 'at');
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
        CROSS JOIN (SELECT (SELECT @extschema@.setting_value('hours_per_year'))::numeric AS hours) h
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
        -- a bad instant is refused here, in this function's name
        SELECT pg_catalog.isfinite($2) OR hpcacct_internal.refuse_argument($2, 'usage_by_submitter', 'at');
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
        CROSS JOIN (SELECT (SELECT @extschema@.setting_value('hours_per_year'))::numeric AS hours) h
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
        -- a bad instant is refused here, in this function's name
        SELECT pg_catalog.isfinite($2) OR hpcacct_internal.refuse_argument($2, 'usage_by_month', 'at');
        SELECT m.pool, m.unit, m.cluster, m.partition, m.account, m.submitter, m.year, m.month,
               round(m.usage, 6), round(m.usage / h.hours, 6)
        FROM (
            SELECT c.pool, c.unit, c.cluster, c.partition, c.account, c.submitter, c.year, c.month,
                   sum(c.amount) AS usage
            FROM @extschema@.year_usage($1, $2, true) c
            GROUP BY c.pool, c.unit, c.cluster, c.partition, c.account, c.submitter, c.year, c.month
            HAVING sum(c.amount) <> 0
        ) m
        CROSS JOIN (SELECT (SELECT @extschema@.setting_value('hours_per_year'))::numeric AS hours) h
    $$;
COMMENT ON FUNCTION @extschema@.usage_by_month(integer, timestamptz) IS
    'Usage per calendar month (site time zone) of the allocation year up to at, per pool, resource, account '
    'and submitter, pro rata by wall-clock time';
COMMENT ON FUNCTION hpcacct_internal.roll_up_received() IS
    'Deferred trigger of pg_temp.hpcacct_received: inserts the charges held in the transaction into the ledger and '
    'rolls them up, once';
CREATE OR REPLACE FUNCTION @extschema@.allocation_status(account text, machine text, at date)
    RETURNS TABLE (alloc numeric, granted numeric, tmc float8, tc float8,
                   consumption float8, delta float8, status text)
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    #variable_conflict use_column
    DECLARE
        acct constant text := hpcacct_internal.require_account($1, 'allocation_status');
        day constant date := hpcacct_internal.day_or_today($3, 'allocation_status');
    BEGIN
        PERFORM hpcacct_internal.require_pool($2, 'allocation_status');
        RETURN QUERY
        WITH period AS (
            SELECT pg_catalog.make_date(EXTRACT(year FROM day)::integer, 1, 1) AS year_start,
                   coalesce((SELECT s.month_convention FROM @extschema@.regulation_machine s WHERE s.machine = $2),
                            'half_month') AS convention,
                   @extschema@.site_timezone() AS tz
        ), events AS (
            SELECT coalesce(sum(l.amount), 0) AS alloc,
                   coalesce(sum(l.amount) FILTER (WHERE l.kind <> 'retraction'), 0) AS granted,
                   coalesce(@extschema@.tmc(l.valid_from, l.valid_until, l.amount::float8, day, p.convention), 0) AS tmc,
                   coalesce(@extschema@.tc(l.valid_from, l.valid_until, l.amount::float8, day, p.convention)
                            - @extschema@.tc(l.valid_from, l.valid_until, l.amount::float8, p.year_start - 1, p.convention),
                            0) AS tc
            FROM @extschema@.ledger l
            CROSS JOIN period p
            WHERE l.account = acct AND l.pool = $2 AND l.kind IN ('grant', 'supplement', 'retraction')
              AND l.valid_from <= day AND l.valid_until >= p.year_start
        ), used AS MATERIALIZED (  -- once: pulled up, it was computed at each of its three uses
            SELECT (@extschema@.consumption_before(acct, $2, (day + 1)::timestamp AT TIME ZONE p.tz)
                    - @extschema@.consumption_before(acct, $2, p.year_start::timestamp AT TIME ZONE p.tz))::float8
                   AS consumption
            FROM period p
        )
        SELECT e.alloc, e.granted, e.tmc, e.tc, u.consumption, u.consumption - e.tc,
               @extschema@.regulation_status(u.consumption, e.tc, e.tmc)
        FROM events e CROSS JOIN used u;
    END
    $$;
COMMENT ON FUNCTION @extschema@.allocation_status(text, text, date) IS
    'Alloc (net), granted (grants and supplements), TMC, TC, consumption up to the end of the day (site time zone; NULL: today), delta and monthly status of an account on a machine, from 1 January of the date''s year';
CREATE OR REPLACE FUNCTION @extschema@.regulation_year(account text, machine text, year integer, convention text DEFAULT NULL)
    RETURNS TABLE (first_day date, last_day date, alloc numeric, tmc float8, tc float8)
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        y_start date;
        y_end   date;
        conv    text;
    BEGIN
        IF $1 IS NULL OR $2 IS NULL OR $3 IS NULL THEN
            RAISE EXCEPTION 'account, machine and year must not be NULL'
                USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF NOT EXISTS (SELECT 1 FROM @extschema@.account a WHERE a.name = $1) THEN
            RAISE EXCEPTION 'unknown account "%"', $1 USING ERRCODE = 'undefined_object';
        END IF;
        IF $3 NOT BETWEEN 1401 AND 9999 THEN
            RAISE EXCEPTION 'year % is outside the supported range 1401 to 9999', $3
                USING ERRCODE = 'datetime_field_overflow';
        END IF;
        y_start := make_date($3, 1, 1);
        y_end := make_date($3, 12, 31);
        conv := coalesce($4, (SELECT s.month_convention FROM @extschema@.regulation_machine s WHERE s.machine = $2),
                         'half_month');
        -- checked here too: without events the aggregates never see it
        IF conv NOT IN ('half_month', 'day') THEN
            RAISE EXCEPTION 'invalid month convention "%"', conv
                USING ERRCODE = 'invalid_parameter_value', HINT = 'The conventions are half_month and day.';
        END IF;
        PERFORM hpcacct_internal.require_pool($2, 'regulation_year');
        RETURN QUERY
        WITH events AS (
            SELECT l.valid_from AS f, l.valid_until AS u, l.amount AS a
            FROM @extschema@.ledger l
            WHERE l.account = $1 AND l.pool = $2 AND l.kind IN ('grant', 'supplement', 'retraction')
              AND l.valid_from <= y_end AND l.valid_until >= y_start
        ), bounds AS (
            SELECT b.day
            FROM (SELECT y_start UNION SELECT e.f FROM events e UNION SELECT e.u + 1 FROM events e) AS b(day)
            WHERE b.day BETWEEN y_start AND y_end
        ), intervals AS (
            SELECT b.day AS d0, coalesce(lead(b.day) OVER (ORDER BY b.day) - 1, y_end) AS d1
            FROM bounds b
        )
        SELECT i.d0, i.d1,
               (SELECT coalesce(sum(e.a), 0) FROM events e WHERE e.f <= i.d0),
               (SELECT coalesce(@extschema@.tmc(e.f, e.u, e.a::float8, i.d0, conv), 0) FROM events e),
               (SELECT coalesce(@extschema@.tc(e.f, e.u, e.a::float8, i.d1, conv)
                                - @extschema@.tc(e.f, e.u, e.a::float8, y_start - 1, conv), 0)
                FROM events e)
        FROM intervals i
        ORDER BY i.d0;
    END
    $$;
COMMENT ON FUNCTION @extschema@.regulation_year(text, text, integer, text) IS
    'An account''s year on a machine as the GENCI table: intervals of constant Alloc and TMC, with TC at each interval''s last day (convention: the machine''s unless given)';
CREATE OR REPLACE FUNCTION hpcacct_internal.book_credit(account text, kind text, quarter date, amount numeric, note text)
    RETURNS bigint
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM hpcacct_internal.require_bank_account(account, kind);
        PERFORM hpcacct_internal.require_amount(amount);
        RETURN hpcacct_internal.book_allocation(account, kind, quarter, amount, note);
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.book_credit(text, text, date, numeric, text) IS
    'Books a deposit or refund of a positive amount to an account that exists and is not deleted';
CREATE OR REPLACE FUNCTION hpcacct_internal.federation_report_due(receiver integer, origin integer) RETURNS boolean
    LANGUAGE sql STABLE STRICT
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT NOT EXISTS (SELECT 1 FROM @extschema@.federation_received p
                           WHERE p.receiver = federation_report_due.receiver AND p.origin = federation_report_due.origin
                             AND p.received_at > pg_catalog.now() - interval '1 second'
                             AND p.received_at < pg_catalog.now())
    $$;
COMMENT ON FUNCTION hpcacct_internal.federation_report_due(integer, integer) IS
    'Whether this database reports now the rows of an origin it received (at most one report a second)';
CREATE OR REPLACE FUNCTION hpcacct_internal.federation_publishes(pub text, tab regclass) RETURNS boolean
    LANGUAGE sql STABLE STRICT
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_publication_rel r JOIN pg_catalog.pg_publication p ON p.oid = r.prpubid
                       WHERE p.pubname = pub AND r.prrelid = tab)
    $$;
COMMENT ON FUNCTION hpcacct_internal.federation_publishes(text, regclass) IS
    'Whether the publication of that name includes the table';
CREATE OR REPLACE FUNCTION hpcacct_internal.charge_jobs() RETURNS trigger
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
        max_length  interval;
        need_member boolean;
    BEGIN
        IF TG_WHEN <> 'AFTER' OR TG_LEVEL <> 'STATEMENT' THEN
            RAISE EXCEPTION 'hpcacct_internal.charge_jobs() must run AFTER ... FOR EACH STATEMENT'
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Attach it with hpcacct.attach_charging(table).';
        END IF;
        -- The statements below read new_jobs and old_jobs with the owner's rights. Without
        -- those transition tables the names would find the caller's temporary relations.
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                       WHERE t.tgrelid = TG_RELID AND t.tgname = TG_NAME
                         AND (TG_OP = 'DELETE' OR t.tgnewtable IS NOT DISTINCT FROM 'new_jobs')
                         AND (TG_OP = 'INSERT' OR t.tgoldtable IS NOT DISTINCT FROM 'old_jobs')) THEN
            RAISE EXCEPTION 'trigger % on % must name its transition tables new_jobs and old_jobs', TG_NAME, TG_RELID::regclass
                USING ERRCODE = 'trigger_protocol_violated',
                      HINT = 'Attach it with hpcacct.attach_charging(table).';
        END IF;
        col := hpcacct_internal.job_columns(TG_RELID, TG_ARGV);
        relevant := format('%s::text AS cluster, %s::text AS jobid, %s::text AS account, %s::text AS submitter, '
                           '%s::text AS partition, %s::timestamptz AS job_start, %s::timestamptz AS job_end, '
                           '%s::@extschema@.tres AS alloctres, %s::timestamptz AS job_submit',
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
                                                job_submit, submitter, job_start, job_end, note, core_hours)
                SELECT l.account, 'charge', -sum(l.amount), l.unit, l.resource_id, l.cluster, l.jobid,
                       l.job_submit, l.submitter, l.job_start, l.job_end, %L, -sum(l.core_hours)
                FROM @extschema@.ledger l
                WHERE l.kind = 'charge'
                  AND EXISTS (SELECT 1 FROM %s o
                              WHERE o.cluster = l.cluster AND o.jobid = l.jobid
                                AND o.job_submit IS NOT DISTINCT FROM l.job_submit)
                GROUP BY l.account, l.unit, l.resource_id, l.cluster, l.jobid, l.job_submit, l.submitter, l.job_start,
                         l.job_end
                HAVING sum(l.amount) <> 0 OR sum(l.core_hours) <> 0  -- a free partition's job has cores to take back
                $q$, 'reversal: job ' || lower(TG_OP) || 'd', changed_old);
        END IF;

        IF changed_new IS NOT NULL THEN
            max_length := @extschema@.setting_value('max_job_length')::interval;
            need_member := @extschema@.setting_value('require_membership')::boolean;
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
                                                    job_submit, submitter, job_start, job_end, core_hours)
                    SELECT j.account, 'charge',
                           round(@extschema@.charge(j.alloctres, j.job_end - j.job_start, r.bundle, r.rate,
                                                    CASE WHEN r.exclusive THEN r.node END)::numeric, 6),
                           r.unit, r.resource_id, j.cluster, j.jobid, j.job_submit, j.submitter, j.job_start,
                           j.job_end,
                           @extschema@.core_hours(j.alloctres, j.job_end - j.job_start)
                    FROM %s j
                    JOIN @extschema@.resource r
                      ON r.cluster = j.cluster AND r.partition = j.partition AND r.valid @> j.job_start
                    WHERE j.jobid IS NOT NULL AND j.account IS NOT NULL AND j.alloctres IS NOT NULL
                      -- infinite times cannot be subtracted: they are left to the diagnosis below
                      AND CASE WHEN pg_catalog.isfinite(j.job_start) AND pg_catalog.isfinite(j.job_end)
                               THEN j.job_end >= j.job_start AND j.job_end - j.job_start <= $1 END
                      AND (NOT $2 OR EXISTS (SELECT 1 FROM @extschema@.membership m
                                             WHERE m.account = j.account AND m.username = j.submitter))
                    $q$, changed_new) USING max_length, need_member;
                GET DIAGNOSTICS charged = ROW_COUNT;
                EXECUTE format('SELECT count(*) FROM %s j', changed_new) INTO jobs;
            END IF;
            IF unknown_accounts > 0 OR charged <> jobs THEN
                EXECUTE format($q$
                    SELECT * FROM (
                        SELECT j.cluster, j.jobid, j.account, j.submitter, j.partition, j.job_start,
                               CASE
                                   WHEN j.cluster IS NULL OR j.jobid IS NULL OR j.account IS NULL
                                        OR j.partition IS NULL OR j.alloctres IS NULL THEN 'missing'
                                   WHEN j.job_start IS NULL OR j.job_end IS NULL THEN 'no_times'
                                   WHEN NOT pg_catalog.isfinite(j.job_start) OR NOT pg_catalog.isfinite(j.job_end) THEN 'infinite_times'
                                   WHEN j.job_end < j.job_start THEN 'end_before_start'
                                   WHEN j.job_end - j.job_start > $1 THEN 'too_long'
                                   WHEN NOT EXISTS (SELECT 1 FROM @extschema@.account a WHERE a.name = j.account)
                                       THEN 'unknown_account'
                                   WHEN $2 AND NOT EXISTS (SELECT 1 FROM @extschema@.membership m
                                                           WHERE m.account = j.account AND m.username = j.submitter)
                                       THEN 'not_member'
                                   WHEN NOT EXISTS (SELECT 1 FROM @extschema@.resource r
                                                    WHERE r.cluster = j.cluster AND r.partition = j.partition
                                                      AND r.valid @> j.job_start)
                                       THEN 'unknown_resource'
                               END AS problem
                        FROM %s j) checked
                    WHERE problem IS NOT NULL
                    LIMIT 1
                    $q$, changed_new) INTO problem USING max_length, need_member;

                IF problem.problem = 'missing' THEN
                    RAISE EXCEPTION 'job %/% lacks a cluster, jobid, account, partition or alloctres', problem.cluster, problem.jobid
                        USING ERRCODE = 'null_value_not_allowed';
                ELSIF problem.problem = 'no_times' THEN
                    RAISE EXCEPTION 'job %/% has no start or end time', problem.cluster, problem.jobid
                        USING ERRCODE = 'null_value_not_allowed',
                              HINT = 'Only finished jobs are charged; load jobs once they have ended.';
                ELSIF problem.problem = 'infinite_times' THEN
                    RAISE EXCEPTION 'job %/% has an infinite start or end', problem.cluster, problem.jobid
                        USING ERRCODE = 'datetime_field_overflow';
                ELSIF problem.problem = 'end_before_start' THEN
                    RAISE EXCEPTION 'job %/% ends before it starts', problem.cluster, problem.jobid
                        USING ERRCODE = 'invalid_parameter_value';
                ELSIF problem.problem = 'too_long' THEN
                    RAISE EXCEPTION 'job %/% claims to have run longer than max_job_length (%)', problem.cluster,
                                    problem.jobid, max_length
                        USING ERRCODE = 'HA004',
                              HINT = 'Correct its start or end; a site with longer jobs raises the setting max_job_length.';
                ELSIF problem.problem = 'not_member' THEN
                    RAISE EXCEPTION 'user "%" is not a member of account "%" (job %/%)', problem.submitter,
                                    problem.account, problem.cluster, problem.jobid
                        USING ERRCODE = 'HA005',
                              HINT = 'Add the membership with hpcacct.add_member(), or set require_membership off.';
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
COMMENT ON FUNCTION hpcacct_internal.charge_jobs() IS
    'Statement trigger charging jobs into hpcacct.ledger; arguments map roles to columns (role=column)';
CREATE OR REPLACE FUNCTION hpcacct_internal.rollup_insert_sql(source text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT 'INSERT INTO @extschema@.charge_rollup (account, resource_id, unit, submitter, month, end_month, amount, '
               'job_amount, decayed)' || hpcacct_internal.rollup_select_sql(source)
    $$;
COMMENT ON FUNCTION hpcacct_internal.rollup_insert_sql(text) IS
    'The INSERT statement adding the charge rollup rows of the ledger rows in a table or query';
CREATE OR REPLACE FUNCTION hpcacct_internal.consumption_rollup_insert_sql(source text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT 'INSERT INTO @extschema@.consumption_rollup (account, resource_id, boundary, ended, running)'
               || hpcacct_internal.consumption_rollup_select_sql(source)
    $$;
COMMENT ON FUNCTION hpcacct_internal.consumption_rollup_insert_sql(text) IS
    'The INSERT statement adding the consumption rollup rows of the ledger rows in a table or query';
CREATE OR REPLACE FUNCTION hpcacct_internal.bank_unit() RETURNS text
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        RETURN coalesce((SELECT s.value FROM @extschema@.setting s WHERE s.name = 'bank_unit'),
                        (SELECT c.default_value FROM @extschema@.setting_catalog() c WHERE c.name = 'bank_unit'));
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.bank_unit() IS 'The setting bank_unit (cheaply: what setting_value(''bank_unit'') gives)';
CREATE OR REPLACE FUNCTION @extschema@.rebuild_rollup() RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
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
        DELETE FROM @extschema@.rollup_pending;  -- every charge is rolled up below
        EXECUTE hpcacct_internal.rollup_insert_sql('@extschema@.ledger');
        GET DIAGNOSTICS rows_added = ROW_COUNT;
        DELETE FROM @extschema@.consumption_rollup;
        EXECUTE hpcacct_internal.consumption_rollup_insert_sql('@extschema@.ledger');
        RETURN rows_added;
    END
    $$;
COMMENT ON FUNCTION @extschema@.rebuild_rollup() IS
    'Recomputes hpcacct.charge_rollup and hpcacct.consumption_rollup from the ledger (automatic when the time zone '
    'or half-life changes) and empties rollup_pending; returns the rows of charge_rollup';
CREATE OR REPLACE FUNCTION hpcacct_internal.fold_rollup(through_month date) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        tz constant text := @extschema@.site_timezone();
        half_life constant interval := @extschema@.setting_value('half_life')::interval;
        base_through date;
        rows_merged bigint;
    BEGIN
        IF through_month IS NULL THEN
            RAISE EXCEPTION 'the month to fold up to must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF through_month <> pg_catalog.date_trunc('month', through_month)
           OR through_month >= pg_catalog.date_trunc('month', pg_catalog.now() AT TIME ZONE tz) THEN
            RAISE EXCEPTION 'cannot fold up to %: not the first day of a month before the current one', through_month
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('hpcacct.charge_rollup'));
        PERFORM @extschema@.roll_up_pending();  -- the pending charges first
        SELECT greatest((SELECT max(b.through) FROM @extschema@.fairshare_base b),
                        (SELECT max(b.through) FROM @extschema@.usage_base b))
            INTO base_through;
        through_month := greatest(through_month, base_through);
        IF base_through < through_month THEN
            UPDATE @extschema@.fairshare_base b
            SET decayed = b.decayed * @extschema@.decay_weight(
                              (base_through + interval '1 month')::timestamp AT TIME ZONE tz,
                              (through_month + interval '1 month')::timestamp AT TIME ZONE tz, half_life),
                through = through_month;
        END IF;
        WITH moved_consumption AS (
            DELETE FROM @extschema@.consumption_rollup c WHERE NOT c.merged
            RETURNING c.account, c.resource_id, c.boundary, c.ended, c.running
        ), merged_consumption AS (
            INSERT INTO @extschema@.consumption_rollup AS c (account, resource_id, boundary, ended, running, merged)
            SELECT m.account, m.resource_id, m.boundary, sum(m.ended), sum(m.running), true
            FROM moved_consumption m
            GROUP BY m.account, m.resource_id, m.boundary
            ON CONFLICT (account, resource_id, boundary) WHERE merged
            DO UPDATE SET ended = c.ended + excluded.ended, running = c.running + excluded.running
        ), moved AS (
            DELETE FROM @extschema@.charge_rollup c WHERE NOT c.folded
            RETURNING c.account, c.resource_id, c.unit, c.submitter, c.month, c.end_month, c.amount, c.job_amount,
                      c.decayed
        ), groups AS MATERIALIZED (
            SELECT m.account, m.resource_id, m.unit, m.submitter, m.month, m.end_month, sum(m.amount) AS amount,
                   sum(m.job_amount) AS job_amount, sum(m.decayed) AS decayed
            FROM moved m
            GROUP BY m.account, m.resource_id, m.unit, m.submitter, m.month, m.end_month
        ), merged AS (
            INSERT INTO @extschema@.charge_rollup AS c (account, resource_id, unit, submitter, month, end_month, amount,
                                                        job_amount, decayed, folded)
            SELECT g.account, g.resource_id, g.unit, g.submitter, g.month, g.end_month, g.amount, g.job_amount,
                   g.decayed, g.end_month <= through_month
            FROM groups g
            ON CONFLICT (account, resource_id, unit, submitter, month, end_month) WHERE folded
            DO UPDATE SET amount = c.amount + excluded.amount, job_amount = c.job_amount + excluded.job_amount,
                          decayed = c.decayed + excluded.decayed
            RETURNING 1
        ), new_base AS (
            INSERT INTO @extschema@.fairshare_base AS b (account, resource_id, unit, submitter, through, decayed,
                                                         job_amount)
            SELECT g.account, g.resource_id, g.unit, g.submitter, through_month,
                   sum(g.decayed * @extschema@.decay_weight(
                                       (g.end_month + interval '1 month')::timestamp AT TIME ZONE tz,
                                       (through_month + interval '1 month')::timestamp AT TIME ZONE tz, half_life)),
                   sum(g.job_amount)
            FROM groups g
            WHERE g.end_month <= through_month
            GROUP BY g.account, g.resource_id, g.unit, g.submitter
            ON CONFLICT (account, resource_id, unit, submitter)
            DO UPDATE SET decayed = b.decayed + excluded.decayed, job_amount = b.job_amount + excluded.job_amount
        ), new_usage_base AS (
            INSERT INTO @extschema@.usage_base AS b (account, resource_id, unit, month, through, amount)
            SELECT g.account, g.resource_id, g.unit, g.month, through_month, sum(g.amount)
            FROM groups g
            WHERE g.end_month <= through_month
            GROUP BY g.account, g.resource_id, g.unit, g.month
            ON CONFLICT (account, resource_id, unit, month)
            DO UPDATE SET amount = b.amount + excluded.amount, through = excluded.through
        )
        SELECT count(*) INTO rows_merged FROM merged;
        RETURN rows_merged;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.fold_rollup(date) IS
    'Merges the new rows of the charge and consumption rollups and folds the months up to through_month into '
    'fairshare_base and usage_base (internal: compact_rollup()); returns the charge rollup rows it merged';
CREATE OR REPLACE FUNCTION @extschema@.charges_ended_by(at timestamptz, from_month date, to_month date, per_submitter boolean)
    RETURNS TABLE (account text, resource_id bigint, unit text, submitter text, month date, amount numeric)
    LANGUAGE sql STABLE PARALLEL SAFE ROWS 100000
    SET search_path = pg_catalog, pg_temp
    SET jit = off
    AS $$
        SELECT (pg_catalog.isfinite($1) OR hpcacct_internal.refuse_argument($1, 'charges_ended_by', 'at'))
           AND ($2 IS NOT NULL OR hpcacct_internal.refuse_argument($2, 'charges_ended_by', 'from_month'))
           AND ($3 IS NOT NULL OR hpcacct_internal.refuse_argument($3, 'charges_ended_by', 'to_month'))
           AND ($4 IS NOT NULL OR hpcacct_internal.refuse_argument($4, 'charges_ended_by', 'per_submitter'));
        WITH z AS MATERIALIZED (
            SELECT t.tz, t.at_month,
                   NOT EXISTS (SELECT 1 FROM @extschema@.ledger l
                               WHERE l.kind = 'charge' AND l.job_end > $1
                                 AND l.job_end < (t.at_month + interval '1 month') AT TIME ZONE t.tz) AS month_complete,
                   -- the base serves when all it holds ended before the month of `at`: its latest month folded
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
        FROM hpcacct_internal.charge_rollup_exact r, z
        WHERE NOT z.from_base
          AND (r.end_month < z.at_month OR (z.month_complete AND r.end_month = z.at_month))
          AND r.month BETWEEN $2 AND $3
        UNION ALL
        -- the same rows as above, but only those not folded: a branch of its own, so that the
        -- planner can read them through the partial index charge_rollup_unfolded
        SELECT r.account, r.resource_id, r.unit, NULL, r.month, r.amount
        FROM hpcacct_internal.charge_rollup_exact r, z
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
    '(from_month to to_month), from the rollup (and usage_base) and the ledger''s latest month; rows to be summed; '
    'a NULL argument (22004) or an infinite at (22008) is an error, an infinite month no bound';
CREATE OR REPLACE FUNCTION @extschema@.sacct_tres(text) RETURNS @extschema@.tres
    AS 'MODULE_PATHNAME', 'hpcacct_sacct_tres' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.sacct_tres(text) IS
    'The text as a tres, or NULL where its input would raise (tres_problem() says why): one parse per sacct line';
CREATE OR REPLACE FUNCTION hpcacct_internal.federation_publish_received(pub text, received_where text) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF NOT hpcacct_internal.federation_publishes(pub, '@extschema@.federation_received') THEN
            EXECUTE pg_catalog.format('ALTER PUBLICATION %I ADD TABLE @extschema@.federation_received '
                                      'WHERE (%s)', pub, received_where);
            EXECUTE pg_catalog.format('ALTER PUBLICATION %I SET (publish = ''insert, update'')', pub);
        END IF;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.federation_publish_received(text, text) IS
    'Adds hpcacct.federation_received, with that row filter, to the publication if it lacks it';
CREATE OR REPLACE PROCEDURE hpcacct_internal.federation_publish_ledger(pub text, ids int8range, outside boolean,
                                                           received_where text)
    LANGUAGE plpgsql
    AS $$
    DECLARE
        ledger_where text;
    BEGIN
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        ledger_where := pg_catalog.format(CASE WHEN outside THEN 'entry_id < %s OR entry_id >= %s'
                                               ELSE 'entry_id >= %s AND entry_id < %s' END,
                                          pg_catalog.lower(ids), pg_catalog.upper(ids));
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication p WHERE p.pubname = pub) THEN
            EXECUTE pg_catalog.format('CREATE PUBLICATION %I FOR TABLE @extschema@.ledger WHERE (%s), '
                                      'TABLE @extschema@.federation_received WHERE (%s) '
                                      'WITH (publish = ''insert, update'')',
                                      pub, ledger_where, received_where);
        ELSE
            PERFORM hpcacct_internal.federation_publish_received(pub, received_where);
        END IF;
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        IF NOT hpcacct_internal.federation_slot_exists(pub) THEN
            PERFORM pg_catalog.pg_create_logical_replication_slot(pub, 'pgoutput');
        END IF;
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    END
    $$;
COMMENT ON PROCEDURE hpcacct_internal.federation_publish_ledger(text, int8range, boolean, text) IS
    'Publication of ledger rows (in or outside an id range) and federation_received rows, then its slot; idempotent';
CREATE OR REPLACE FUNCTION hpcacct_internal.federation_subscribed(sub text) RETURNS boolean
    LANGUAGE sql STABLE STRICT
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_subscription s
                       WHERE s.subname = sub AND s.subdbid = (SELECT d.oid FROM pg_catalog.pg_database d
                                                              WHERE d.datname = pg_catalog.current_database()))
    $$;
COMMENT ON FUNCTION hpcacct_internal.federation_subscribed(text) IS
    'Whether this database has a subscription of that name';
CREATE OR REPLACE FUNCTION hpcacct_internal.federation_not_received(sub text, tabs regclass[]) RETURNS text
    LANGUAGE sql STABLE STRICT
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT pg_catalog.string_agg(t::text, ', ')
        FROM pg_catalog.unnest(tabs) t
        WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_subscription_rel r
                          JOIN pg_catalog.pg_subscription s ON s.oid = r.srsubid
                          WHERE s.subname = sub AND r.srrelid = t)
    $$;
COMMENT ON FUNCTION hpcacct_internal.federation_not_received(text, regclass[]) IS
    'The listed tables the subscription does not receive, comma-separated; NULL when none';
CREATE OR REPLACE PROCEDURE hpcacct_internal.federation_subscribe_slot(sub text, conninfo text, publications text[],
                                                           options text[])
    LANGUAGE plpgsql
    AS $$
    DECLARE
        names text;
    BEGIN
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        SELECT pg_catalog.string_agg(pg_catalog.quote_ident(n), ', ' ORDER BY o) INTO names
        FROM pg_catalog.unnest(publications) WITH ORDINALITY AS u(n, o);
        EXECUTE pg_catalog.format('CREATE SUBSCRIPTION %I CONNECTION %L PUBLICATION %s WITH (%s)',
                                  sub, conninfo, names,
                                  pg_catalog.array_to_string(ARRAY['create_slot = false',
                                                                   pg_catalog.format('slot_name = %L', sub),
                                                                   'copy_data = true'] || options, ', '));
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    END
    $$;
COMMENT ON PROCEDURE hpcacct_internal.federation_subscribe_slot(text, text, text[], text[]) IS
    'Subscription to publications on the slot of its name the other side made, copying existing rows; commits';
CREATE OR REPLACE FUNCTION hpcacct_internal.ledger_column_refused(constraint_name text, kind text, value text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF constraint_name = 'ledger_charge_has_no_pool' THEN
            RAISE EXCEPTION 'a charge has no pool (pool "%" given)', value
                USING ERRCODE = 'check_violation', CONSTRAINT = constraint_name, TABLE = 'ledger',
                      SCHEMA = '@extschema@',
                      HINT = 'A charge counts in its resource''s pool (resource.pool, or its cluster): leave pool NULL.';
        END IF;
        RAISE EXCEPTION 'a % row has no cluster (cluster "%" given): only a charge names a cluster', kind, value
            USING ERRCODE = 'check_violation', CONSTRAINT = constraint_name, TABLE = 'ledger',
                  SCHEMA = '@extschema@',
                  HINT = format('Name the %s''s pool in the column pool instead (pool = %L); a NULL pool is every '
                                'pool charged in its unit.', kind, value);
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.ledger_column_refused(text, text, text) IS
    'The error (23514, with a hint) of the ledger''s constraints ledger_charge_has_no_pool and '
    'ledger_allocation_has_no_cluster, raised when one fails';
CREATE OR REPLACE FUNCTION hpcacct_internal.rollup_select_sql(source text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT pg_catalog.format($q$
            WITH z AS MATERIALIZED (  -- once per statement
                SELECT @extschema@.site_timezone() AS tz,
                       @extschema@.setting_value('half_life')::interval AS half_life
            ), entries AS (
                SELECT e.account, e.resource_id, e.unit, e.submitter, e.job_start, e.job_end, e.amount, e.tz,
                       e.first_month, e.last_month,
                       e.amount::float8 * @extschema@.decay_weight(e.job_end,
                           (e.last_month + interval '1 month') AT TIME ZONE e.tz, e.half_life) AS decayed
                FROM (SELECT e.account, e.resource_id, e.unit, e.submitter, e.job_start, e.job_end, e.amount, z.tz,
                             z.half_life, pg_catalog.date_trunc('month', e.job_start AT TIME ZONE z.tz) AS first_month,
                             pg_catalog.date_trunc('month', e.job_end AT TIME ZONE z.tz) AS last_month
                      FROM %s e, z
                      WHERE e.kind = 'charge'
                      OFFSET 0) e  -- each month once per row, not once per use
            )
            SELECT s.account, s.resource_id, s.unit, s.submitter, s.month, s.end_month, sum(s.amount) AS amount,
                   sum(s.job_amount) AS job_amount, sum(s.decayed) AS decayed
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
COMMENT ON FUNCTION hpcacct_internal.rollup_select_sql(text) IS
    'The query of the charge rollup rows of the ledger rows in a table or query';
CREATE OR REPLACE FUNCTION hpcacct_internal.consumption_rollup_select_sql(source text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT pg_catalog.format($q$
            WITH z AS MATERIALIZED (
                SELECT @extschema@.site_timezone() AS tz
            ), entries AS (
                SELECT e.account, e.resource_id, e.job_start, e.job_end, e.amount, e.tz,
                       -- ended by: the first boundary at or after the end (a job of zero length:
                       -- after its start, where it counts)
                       @extschema@.regulation_boundary_after(
                           CASE WHEN e.job_end > e.job_start THEN e.local_end - interval '1 microsecond'
                                ELSE e.local_start END) AS ended_by,
                       @extschema@.regulation_boundary_after(e.local_start) AS first_after_start
                FROM (SELECT e.account, e.resource_id, e.job_start, e.job_end, e.amount, z.tz,
                             e.job_start AT TIME ZONE z.tz AS local_start, e.job_end AT TIME ZONE z.tz AS local_end
                      FROM %s e, z
                      WHERE e.kind = 'charge'
                      OFFSET 0) e  -- local times once per row, not once per use in the inlined function
            )
            SELECT s.account, s.resource_id, s.boundary, sum(s.ended) AS ended, sum(s.running) AS running
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
COMMENT ON FUNCTION hpcacct_internal.consumption_rollup_select_sql(text) IS
    'The query of the consumption rollup rows of the ledger rows in a table or query';
CREATE OR REPLACE FUNCTION @extschema@.roll_up_pending() RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET jit = off
    AS $$
    DECLARE
        taken constant text := '(SELECT l.* FROM @extschema@.ledger l '
                               'JOIN ROWS FROM (pg_catalog.unnest($1::bigint[]), pg_catalog.unnest($2::bigint[])) '
                               'AS p(first_entry_id, last_entry_id) '
                               'ON l.entry_id BETWEEN p.first_entry_id AND p.last_entry_id)';
        firsts bigint[];
        lasts bigint[];
        charges bigint;
    BEGIN
        PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('hpcacct.charge_rollup'));
        WITH deleted AS (
            DELETE FROM @extschema@.rollup_pending p RETURNING p.first_entry_id, p.last_entry_id
        )
        SELECT pg_catalog.array_agg(d.first_entry_id), pg_catalog.array_agg(d.last_entry_id),
               coalesce(sum(d.last_entry_id - d.first_entry_id + 1), 0)
        INTO firsts, lasts, charges
        FROM deleted d;
        IF charges > 0 THEN
            EXECUTE hpcacct_internal.rollup_insert_sql(taken) USING firsts, lasts;
            EXECUTE hpcacct_internal.consumption_rollup_insert_sql(taken) USING firsts, lasts;
        END IF;
        RETURN charges;
    END
    $$;
COMMENT ON FUNCTION @extschema@.roll_up_pending() IS
    'Rolls up the charges recorded in rollup_pending (setting rollup = deferred) and empties it; returns the charges '
    'rolled up (0 when nothing is pending)';
CREATE OR REPLACE FUNCTION hpcacct_internal.roll_up_pending_trigger() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        immediate_again boolean;
    BEGIN
        immediate_again := CASE TG_OP WHEN 'DELETE' THEN OLD.name = 'rollup'
                                      ELSE NEW.name = 'rollup' AND NEW.value = 'immediate' END;
        IF immediate_again THEN
            PERFORM @extschema@.roll_up_pending();
        END IF;
        RETURN NULL;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.roll_up_pending_trigger() IS
    'Trigger of hpcacct.setting: rolls up the pending charges when the setting rollup returns to immediate';
CREATE OR REPLACE FUNCTION @extschema@.consumption_before(account text, pool text, before timestamptz)
    RETURNS numeric
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    SET plan_cache_mode = force_generic_plan
    AS $$
    DECLARE
        local_before timestamp;
        pool_resources bigint[];
        after_before numeric;
    BEGIN
        PERFORM hpcacct_internal.require_account($1, 'consumption_before');
        IF $2 IS NULL OR $3 IS NULL THEN
            RAISE EXCEPTION 'consumption_before: pool and before must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF NOT pg_catalog.isfinite($3) THEN
            RAISE EXCEPTION 'consumption_before: before must be finite, not %', $3 USING ERRCODE = 'datetime_field_overflow';
        END IF;
        local_before := $3 AT TIME ZONE @extschema@.site_timezone();
        pool_resources := ARRAY(SELECT r.resource_id FROM @extschema@.resource r WHERE coalesce(r.pool, r.cluster) = $2);
        IF pool_resources = '{}' THEN
            PERFORM hpcacct_internal.require_pool($2, 'consumption_before');
        END IF;
        IF local_before = @extschema@.regulation_boundary_after(local_before - interval '1 microsecond') THEN
            RETURN coalesce((SELECT sum(c.ended) + coalesce(sum(c.running) FILTER (WHERE c.boundary = local_before), 0)
                             FROM hpcacct_internal.consumption_rollup_exact c
                             WHERE c.account = $1 AND c.resource_id = ANY (pool_resources)
                               AND c.boundary <= local_before), 0);
        END IF;
        -- (kind in the sum, not the filter: the planner would scan all of ledger_job, a partial index;
        -- job_end bounded on both sides: the plan made once estimates a narrow range, so on a
        -- large ledger it reads the BRIN index on job_end, not the whole table)
        SELECT coalesce(sum(CASE WHEN l.kind = 'charge' THEN l.amount
                                 * (1 - @extschema@.period_share(l.job_start, l.job_end, '-infinity', $3)) END), 0)
        INTO after_before
        FROM @extschema@.ledger l
        WHERE l.job_end >= $3 AND l.job_end <= 'infinity' AND l.account = $1 AND l.resource_id = ANY (pool_resources);
        RETURN coalesce((SELECT sum(c.ended) FROM hpcacct_internal.consumption_rollup_exact c
                         WHERE c.account = $1 AND c.resource_id = ANY (pool_resources)), 0)
               - after_before;
    END
    $$;
COMMENT ON FUNCTION @extschema@.consumption_before(text, text, timestamptz) IS
    'Charges of an account in a pool (or cluster) for the part of its jobs that ran before an instant (finite: 22008 '
    'otherwise)';
-- generated from the rollup statements: generate it again
DO $do$
BEGIN
    EXECUTE pg_catalog.format(
        'CREATE OR REPLACE FUNCTION hpcacct_internal.roll_up_charges() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER '
        'SET search_path = pg_catalog, pg_temp AS %L',
        pg_catalog.format(E'\n    DECLARE\n'
                          '        first_id bigint;\n'
                          '        last_id bigint;\n'
                          '        charges bigint;\n'
                          '    BEGIN\n'
                          '        IF TG_RELID <> ''@extschema@.ledger''::regclass OR TG_OP <> ''INSERT'' OR TG_LEVEL <> ''STATEMENT'' THEN\n'
                          '            RAISE EXCEPTION ''roll_up_charges() is the statement trigger of hpcacct.ledger only''\n'
                          '                USING ERRCODE = ''trigger_protocol_violated'';\n'
                          '        END IF;\n'
                          '        IF @extschema@.setting_value(''rollup'') = ''deferred'' THEN\n'
                          '            SELECT min(e.entry_id), max(e.entry_id), count(*) INTO first_id, last_id, charges\n'
                          '            FROM new_entries e WHERE e.kind = ''charge'';\n'
                          '            IF charges = last_id - first_id + 1 THEN\n'
                          '                INSERT INTO @extschema@.rollup_pending (first_entry_id, last_entry_id)\n'
                          '                VALUES (first_id, last_id);\n'
                          '            ELSIF charges > 0 THEN\n'
                          '                INSERT INTO @extschema@.rollup_pending (first_entry_id, last_entry_id)\n'
                          '                SELECT min(i.entry_id), max(i.entry_id)\n'
                          '                FROM (SELECT e.entry_id, e.entry_id - pg_catalog.row_number() OVER (ORDER BY e.entry_id) AS island\n'
                          '                      FROM new_entries e WHERE e.kind = ''charge'') i\n'
                          '                GROUP BY i.island;\n'
                          '            END IF;\n'
                          '            RETURN NULL;\n'
                          '        END IF;\n'
                          '        IF NOT EXISTS (SELECT 1 FROM new_entries e WHERE e.kind = ''charge'') THEN\n'
                          '            RETURN NULL;\n'
                          '        END IF;\n'
                          '%s;\n'
                          '%s;\n'
                          '        RETURN NULL;\n'
                          '    END\n    ', hpcacct_internal.rollup_insert_sql('new_entries'),
                          hpcacct_internal.consumption_rollup_insert_sql('new_entries')));
END
$do$;
ALTER FUNCTION hpcacct_internal.charge_jobs() SECURITY DEFINER;  -- as sql/install: CREATE OR REPLACE reset it
-- generated from the rollup statements: generate it again
DO $do$
DECLARE
    received constant text := '(SELECT (r.entry).* FROM pg_temp.hpcacct_received r)';
BEGIN
    EXECUTE pg_catalog.format(
        'CREATE OR REPLACE FUNCTION hpcacct_internal.roll_up_received() RETURNS trigger LANGUAGE plpgsql '
        'SET search_path = pg_catalog, pg_temp SET jit = off AS %L',
        pg_catalog.format(E'\n    BEGIN\n'
                          '        PERFORM pg_catalog.set_config(''hpcacct.received_pending'', ''off'', true);\n'
                          '        INSERT INTO @extschema@.ledger OVERRIDING SYSTEM VALUE\n'
                          '        SELECT (r.entry).* FROM pg_temp.hpcacct_received r ORDER BY (r.entry).entry_id;\n'
                          '%s;\n'
                          '%s;\n'
                          '        INSERT INTO @extschema@.federation_received AS p (receiver, origin, last_entry_id, received_at)\n'
                          '        SELECT n.site, @extschema@.federation_origin((r.entry).entry_id), pg_catalog.max((r.entry).entry_id),\n'
                          '               pg_catalog.now()\n'
                          '        FROM pg_temp.hpcacct_received r, @extschema@.federation_node n\n'
                          '        GROUP BY 1, 2\n'
                          '        HAVING hpcacct_internal.federation_report_due(n.site, @extschema@.federation_origin((r.entry).entry_id))\n'
                          '        ON CONFLICT (receiver, origin) DO UPDATE\n'
                          '            SET last_entry_id = GREATEST(p.last_entry_id, excluded.last_entry_id),\n'
                          '                received_at = excluded.received_at;\n'
                          '        DELETE FROM pg_temp.hpcacct_received;\n'
                          '        RETURN NULL;\n'
                          '    END\n    ',
                          hpcacct_internal.rollup_insert_sql(received), hpcacct_internal.consumption_rollup_insert_sql(received)));
END
$do$;
-- sites that use the roles get what setup_roles() grants on every object, old and new
DO $do$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'hpcacct_admin') THEN
        CALL @extschema@.setup_roles();
    END IF;
END
$do$;
CREATE OR REPLACE FUNCTION @extschema@.add_user(username text, at date DEFAULT @extschema@.site_today()) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        q date := @extschema@.quarter_start(hpcacct_internal.day_or_today(at, 'add_user'));
    BEGIN
        IF username IS NULL THEN
            RAISE EXCEPTION 'add_user: username must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF username = '' THEN
            RAISE EXCEPTION 'add_user: username must not be empty' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF pg_catalog.length(username) > 64 THEN  -- a login name (useradd takes 32)
            RAISE EXCEPTION 'add_user: username must be at most 64 characters, not %', pg_catalog.length(username)
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF EXISTS (SELECT 1 FROM @extschema@.hpc_user u WHERE u.username = add_user.username) THEN
            RAISE EXCEPTION 'user "%" already exists', username USING ERRCODE = 'unique_violation';
        END IF;
        INSERT INTO @extschema@.account (name, kind, description) VALUES (username, 'personal', 'personal account');
        INSERT INTO @extschema@.hpc_user (username) VALUES (username);
        INSERT INTO @extschema@.membership (account, username, role) VALUES (username, username, 'admin');
        FOR i IN 0 .. 2 LOOP
            PERFORM @extschema@.top_up(username, (q + i * interval '3 months')::date,
                                       @extschema@.personal_allotment(username));
        END LOOP;
    END
    $$;
COMMENT ON FUNCTION @extschema@.add_user(text, date) IS
    'Creates a user with a personal account holding the allotment for this and the next two quarters (at NULL: today in the site time zone); '
    'a username is not empty and at most 64 characters (22023)';

CREATE OR REPLACE FUNCTION @extschema@.add_quota_period(account text, period_start date, period_end date,
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
    '(0 to 2^53: 22003 otherwise; an end before the start: 22023)';

-- ==== end of final definitions
