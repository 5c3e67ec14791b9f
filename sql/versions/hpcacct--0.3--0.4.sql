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
