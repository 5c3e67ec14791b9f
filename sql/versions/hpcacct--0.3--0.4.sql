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
CREATE OR REPLACE VIEW @extschema@.regulation_report AS
    WITH cfg AS MATERIALIZED (
        SELECT (SELECT @extschema@.site_today()) AS today
    ), events AS MATERIALIZED (
        SELECT l.entry_id, l.account, l.cluster AS machine, l.kind, l.amount, l.valid_from, l.valid_until
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
COMMENT ON VIEW @extschema@.regulation_report IS
    'Per account, machine and month up to today: Alloc, TMC, TC, consumption, delta and monthly status at the 15th (NULL under annual regulation), and the outcome the monthly run logged';
ALTER VIEW @extschema@.regulation_report SET (security_invoker = true);
