-- hpcacct 0.3 -> 0.4: security (issue 20), the sacct loader (issue 14), the first hour (issue 18).
-- Every change here is also in sql/install/.
\echo Use "ALTER EXTENSION hpcacct UPDATE TO '0.4'" to load this file. \quit

-- security (issue 20) ------------------------------------------------------------------

-- settings: max_job_length, require_membership
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
                'Credits a personal account is topped up to per quarter (HLRN: 2500 NPL; at most double per account)'),
               ('max_job_length', '366 days',
                'Longest run a job may claim (end - start); a longer one is refused (HA004), so no job can flood '
                'the rollups with months it never ran in'),
               ('require_membership', 'off',
                'on: a job is charged only when its user is a member of its account (HA005); off: the job table '
                'is trusted, as Slurm''s own associations already checked it')
    $$;
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

-- ==== final definitions ---------------------------------------------------------------
-- The sections above come from several changes, some to the same functions. Every function
-- and procedure they define is defined here once more, as sql/install has it, so that the
-- update ends where a fresh install of 0.4 starts.
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
                'Credits a personal account is topped up to per quarter (HLRN: 2500 NPL; at most double per account)'),
               ('max_job_length', '366 days',
                'Longest run a job may claim (end - start); a longer one is refused (HA004), so no job can flood '
                'the rollups with months it never ran in'),
               ('require_membership', 'off',
                'on: a job is charged only when its user is a member of its account (HA005); off: the job table '
                'is trusted, as Slurm''s own associations already checked it')
    $$;
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
CREATE OR REPLACE FUNCTION @extschema@.decay_weight(ts timestamptz, at timestamptz, half_life interval) RETURNS float8
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
            WHERE sees_all OR f.account = ANY (@extschema@.visible_accounts());
    END
    $$;
COMMENT ON FUNCTION @extschema@.fairshare(timestamptz) IS
    'Fair-share table per pool, account and user (see fairshare_all); at NULL means now. Administrators and auditors '
    'see every row at any instant; others their accounts'' rows, now only, without share and norm_usage';
CREATE OR REPLACE FUNCTION @extschema@.top_up_note(target numeric) RETURNS text
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
        IF q IS NULL THEN
            RAISE EXCEPTION 'open_quarter needs a date' USING ERRCODE = 'null_value_not_allowed';
        ELSIF NOT isfinite(q) THEN
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
CREATE OR REPLACE FUNCTION @extschema@.last_charged_start(resource_id bigint) RETURNS timestamptz
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
CREATE OR REPLACE FUNCTION @extschema@.check_resource_change() RETURNS trigger
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
CREATE OR REPLACE FUNCTION @extschema@.check_account_delete() RETURNS trigger
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
ALTER FUNCTION @extschema@.charge_jobs() SECURITY DEFINER;  -- as 90_privileges.sql: CREATE OR REPLACE reset it
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
-- sites that use the roles get what setup_roles() grants on every object, old and new
DO $do$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'hpcacct_admin') THEN
        CALL @extschema@.setup_roles();
    END IF;
END
$do$;
-- ==== end of final definitions

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
