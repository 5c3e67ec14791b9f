-- ---------------------------------------------------------------------------------------
-- Jobs, the ledger, and the trigger that charges every job into the ledger.
-- ---------------------------------------------------------------------------------------

-- The error of the ledger's two constraints that keep a charge's cluster and an allocation's
-- pool apart (below), raised by the constraint itself when it fails, so that the message says
-- what to write instead (only a failing row calls it: the constraint's other terms decide
-- every valid row).
CREATE FUNCTION hpcacct_internal.ledger_column_refused(constraint_name text, kind text, value text) RETURNS boolean
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

-- Every money-like movement is one row; balances are sums. Rows are never updated or
-- deleted: a correction is a new row (a re-rated or deleted job gets a reversal).
--   charge       a job's charge (positive) or its reversal (negative); names the job
--   grant, supplement, deposit   allocation credited to the account for [valid_from, valid_until]
--   retraction   allocation withdrawn (negative), effective valid_from until valid_until
--   transfer     allocation moved between quarters or accounts: one negative, one positive row
--   refund       credit given back for a charge
-- A charge names the cluster its job ran on (`cluster`, with `jobid`) and counts in its
-- resource's pool; every other row names the pool it counts in (`pool`; NULL: every pool
-- charged in its unit). Two columns, because a job's cluster and an allocation's pool are
-- two things (a pool may span clusters, or be a cluster's GPU partitions).
CREATE TABLE @extschema@.ledger (
    entry_id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    booked_at   timestamptz NOT NULL DEFAULT pg_catalog.statement_timestamp(),
    account     text NOT NULL REFERENCES @extschema@.account,
    kind        text NOT NULL CHECK (kind IN ('charge', 'grant', 'supplement', 'deposit', 'retraction',
                                              'transfer', 'refund')),
    amount      numeric(20, 6) NOT NULL CHECK (amount <> 'NaN'),
    unit        text NOT NULL,
    resource_id bigint REFERENCES @extschema@.resource,
    cluster     text,
    jobid       text,
    submitter   text,
    job_start   timestamptz,
    job_end     timestamptz,
    valid_from  date,
    valid_until date,
    note        text,
    job_submit  timestamptz,
    core_hours  numeric(20, 6),
    pool        text,
    CONSTRAINT ledger_charge_names_job CHECK (
        kind <> 'charge' OR (cluster IS NOT NULL AND jobid IS NOT NULL AND resource_id IS NOT NULL
                             AND job_start IS NOT NULL AND job_end IS NOT NULL AND job_end >= job_start)),
    CONSTRAINT ledger_allocation_has_window CHECK (
        kind = 'charge' OR (valid_from IS NOT NULL AND valid_until IS NOT NULL AND valid_until >= valid_from
                            AND pg_catalog.isfinite(valid_from) AND pg_catalog.isfinite(valid_until))),
    CONSTRAINT ledger_sign_of_kind CHECK (
        CASE kind WHEN 'grant' THEN amount > 0 WHEN 'supplement' THEN amount > 0 WHEN 'deposit' THEN amount > 0
                  WHEN 'refund' THEN amount > 0 WHEN 'retraction' THEN amount < 0 ELSE true END),
    CONSTRAINT ledger_charge_has_no_pool CHECK (
        kind <> 'charge' OR pool IS NULL
        OR hpcacct_internal.ledger_column_refused('ledger_charge_has_no_pool', kind, pool)),
    CONSTRAINT ledger_allocation_has_no_cluster CHECK (
        kind = 'charge' OR cluster IS NULL
        OR hpcacct_internal.ledger_column_refused('ledger_allocation_has_no_cluster', kind, cluster)),
    CONSTRAINT ledger_pool_named CHECK (pool <> ''),
    CONSTRAINT ledger_unit_named CHECK (unit <> '')
);
CREATE INDEX ledger_job ON @extschema@.ledger (cluster, jobid) WHERE kind = 'charge';
CREATE INDEX ledger_allocation_account ON @extschema@.ledger (account) WHERE kind <> 'charge';
-- Charges by end, for the latest month of the reports (earlier ones are in charge_rollup).
-- The ledger is appended in about time order: a BRIN index is small and nearly free to keep.
CREATE INDEX ledger_job_end ON @extschema@.ledger USING brin (job_end);
COMMENT ON TABLE @extschema@.ledger IS
    'Append-only ledger: one row per charge, reversal, deposit, transfer or retraction';
COMMENT ON COLUMN @extschema@.ledger.cluster IS
    'A charge''s cluster: the cluster its job ran on (with jobid, the job); NULL for every other entry (see pool)';
COMMENT ON COLUMN @extschema@.ledger.pool IS
    'An allocation entry''s pool (any kind but charge): the pool it counts in (GENCI''s machine); NULL: every pool '
    'charged in its unit (the quarterly bank''s credits); NULL for a charge, which counts in its resource''s pool';
COMMENT ON COLUMN @extschema@.ledger.job_submit IS
    'A charge''s job run: with cluster and jobid, its submit time (a requeued job is several runs; NULL without one)';
COMMENT ON COLUMN @extschema@.ledger.core_hours IS
    'A charge''s raw core-hours: the cores of the job''s AllocTRES x wall-clock hours, unweighted (negative in a '
    'reversal); NULL for other entries and for charges whose core count is not known';
COMMENT ON COLUMN @extschema@.ledger.amount IS
    'Units (see unit); a charge is positive, its reversal negative; rounded to 6 decimals when booked';

-- The jobs a site must load again after a restore from pg_dump: federation_resync() copies
-- back the charges the site booked after its dump, but its job table lacks their jobs. A job
-- loaded later whose run is listed here (or updated onto its key) has what the ledger holds for
-- it replaced (reversed, then charged anew), not added to; a listed run loaded, updated (old or
-- new key) or deleted leaves the list (charge_jobs).
CREATE TABLE @extschema@.job_to_reload (
    cluster    text NOT NULL,
    jobid      text NOT NULL,
    job_submit timestamptz,
    account    text NOT NULL,
    noted_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    UNIQUE NULLS NOT DISTINCT (cluster, jobid, job_submit)
);
COMMENT ON TABLE @extschema@.job_to_reload IS
    'Job runs whose charges federation_resync copied back to this restored site without their rows: loading one '
    'replaces its charges instead of adding to them';
SELECT pg_catalog.pg_extension_config_dump('@extschema@.job_to_reload', '');

CREATE FUNCTION hpcacct_internal.ledger_is_append_only() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        RAISE EXCEPTION 'hpcacct.ledger is append-only: % is not allowed', lower(TG_OP)
            USING ERRCODE = 'HA001', HINT = 'Book a correcting entry instead.';
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.ledger_is_append_only() IS 'Trigger: refuses UPDATE, DELETE and TRUNCATE of the ledger (HA001)';
CREATE TRIGGER ledger_append_only BEFORE UPDATE OR DELETE ON @extschema@.ledger
    FOR EACH ROW EXECUTE FUNCTION hpcacct_internal.ledger_is_append_only();
CREATE TRIGGER ledger_no_truncate BEFORE TRUNCATE ON @extschema@.ledger
    FOR EACH STATEMENT EXECUTE FUNCTION hpcacct_internal.ledger_is_append_only();

-- The ledger's foreign keys, checked once per statement. A foreign key checks every new row
-- with a query of its own (two per charge: about 40 % of the cost of charging). Those two
-- per-row triggers are disabled; ledger_check_references() does their work once per
-- statement: it locks the accounts and resources the statement's rows name as they would
-- (FOR KEY SHARE) and fails like them (23503). Everything else stays PostgreSQL's own: the
-- foreign keys' triggers on account and resource refuse to delete or rename a row the ledger
-- names, at any isolation level (a delete that waited for a charging transaction, or whose
-- snapshot predates it, sees its rows), and pg_dump restores the ledger after them.
CREATE FUNCTION hpcacct_internal.ledger_check_references() RETURNS trigger
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
CREATE TRIGGER ledger_check_references AFTER INSERT ON @extschema@.ledger
    REFERENCING NEW TABLE AS new_entries
    FOR EACH STATEMENT EXECUTE FUNCTION hpcacct_internal.ledger_check_references();
-- the foreign keys' own per-row checks of new rows (the ledger's rows are never updated)
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

-- The columns of a job table that charging reads, as quoted identifiers in the order
-- cluster, jobid, account, user, partition, start, end, alloctres, submit. `mapping` holds
-- 'role=column' pairs for a table whose names differ from sacct's. submit is optional: a
-- table without that column (and no mapping for it) gets NULL, and its jobs are told apart
-- by cluster and jobid alone.
CREATE FUNCTION hpcacct_internal.job_columns(job_table regclass, mapping text[]) RETURNS text[]
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

-- Charges jobs as a statement-level AFTER trigger over the transition tables new_jobs and
-- old_jobs: one set-based INSERT into the ledger per statement (COPY included).
-- INSERT charges the new jobs; DELETE reverses what the ledger holds for the old ones;
-- UPDATE does both, for the jobs whose charging columns changed. A job listed in
-- job_to_reload that is inserted, or that an update moves onto the listed key, has what the
-- ledger holds for it reversed first.
CREATE FUNCTION hpcacct_internal.charge_jobs() RETURNS trigger
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
        reversal_note text;
        reloaded_clusters text[];
        reloaded_jobids   text[];
        reloaded_submits  timestamptz[];
        run_key  text;
        reloaded_old text;
        reversal text;
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
        reversal_note := 'reversal: job ' || lower(TG_OP) || 'd';
        IF TG_OP = 'UPDATE' THEN
            changed_old := format('(SELECT %1$s FROM old_jobs EXCEPT SELECT %1$s FROM new_jobs)', relevant);
            changed_new := format('(SELECT %1$s FROM new_jobs EXCEPT SELECT %1$s FROM old_jobs)', relevant);
        ELSIF TG_OP = 'DELETE' THEN
            changed_old := format('(SELECT %s FROM old_jobs)', relevant);
        ELSE
            changed_new := format('(SELECT %s FROM new_jobs)', relevant);
        END IF;
        -- runs listed in job_to_reload leave the list (an update's old and new keys). A run
        -- arriving at a listed key (inserted, or an update's new key no old row had) has the
        -- charges already in the ledger reversed before it is charged; a run that keeps its key
        -- or leaves it is reversed by the update or delete anyway
        IF EXISTS (SELECT 1 FROM @extschema@.job_to_reload) THEN
            run_key := format('%s::text AS cluster, %s::text AS jobid, %s::timestamptz AS job_submit', col[1], col[2], col[9]);
            EXECUTE format($q$
                WITH reloaded AS (
                    DELETE FROM @extschema@.job_to_reload r
                    USING (%s) n
                    WHERE r.cluster = n.cluster AND r.jobid = n.jobid AND r.job_submit IS NOT DISTINCT FROM n.job_submit
                    RETURNING r.cluster, r.jobid, r.job_submit)
                SELECT array_agg(r.cluster), array_agg(r.jobid), array_agg(r.job_submit) FROM reloaded r
                WHERE %s
                $q$,
                CASE TG_OP WHEN 'INSERT' THEN format('SELECT %s FROM new_jobs', run_key)
                           WHEN 'DELETE' THEN format('SELECT %s FROM old_jobs', run_key)
                           ELSE format('SELECT %1$s FROM new_jobs UNION SELECT %1$s FROM old_jobs', run_key) END,
                CASE TG_OP WHEN 'INSERT' THEN 'true'
                           WHEN 'DELETE' THEN 'false'
                           ELSE format('NOT EXISTS (SELECT 1 FROM (SELECT %s FROM old_jobs) o WHERE o.cluster = r.cluster '
                                       'AND o.jobid = r.jobid AND o.job_submit IS NOT DISTINCT FROM r.job_submit)', run_key) END)
                INTO reloaded_clusters, reloaded_jobids, reloaded_submits;
            IF reloaded_jobids IS NOT NULL THEN
                reloaded_old := format('(SELECT * FROM unnest(%L::text[], %L::text[], %L::timestamptz[]) '
                                       'AS o(cluster, jobid, job_submit))',
                                       reloaded_clusters, reloaded_jobids, reloaded_submits);
            END IF;
        END IF;

        reversal := $q$
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
            $q$;
        IF changed_old IS NOT NULL THEN
            EXECUTE format(reversal, reversal_note, changed_old);
        END IF;
        -- (an arriving key is not among changed_old's, which are old rows' keys)
        IF reloaded_old IS NOT NULL THEN
            EXECUTE format(reversal, 'reversal: job reloaded', reloaded_old);
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
                    WHERE j.jobid <> '' AND j.submitter <> '' AND j.account IS NOT NULL AND j.alloctres IS NOT NULL
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
                                   WHEN j.cluster IS NULL OR j.jobid IS NULL OR j.account IS NULL OR j.submitter IS NULL
                                        OR j.partition IS NULL OR j.alloctres IS NULL THEN 'missing'
                                   WHEN j.jobid = '' OR j.submitter = '' THEN 'empty_name'
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
                    RAISE EXCEPTION 'job %/% lacks a cluster, jobid, account, user, partition or alloctres', problem.cluster, problem.jobid
                        USING ERRCODE = 'null_value_not_allowed';
                ELSIF problem.problem = 'empty_name' THEN
                    RAISE EXCEPTION 'job %/% has an empty jobid or user', problem.cluster, problem.jobid
                        USING ERRCODE = 'invalid_parameter_value';
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
-- not for PUBLIC: it writes the ledger with the owner's rights, so whoever may attach it to a
-- table of their own could book or reverse charges of any account
REVOKE EXECUTE ON FUNCTION hpcacct_internal.charge_jobs() FROM PUBLIC;

-- Attaches charging to a job table: three statement triggers (transition tables allow one
-- event per trigger). `mapping` names columns whose names differ from sacct's.
CREATE FUNCTION @extschema@.attach_charging(job_table regclass, VARIADIC mapping text[] DEFAULT '{}')
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
REVOKE EXECUTE ON FUNCTION @extschema@.attach_charging(regclass, text[]) FROM PUBLIC;

-- Creates the table of finished jobs, one row per run, with sacct's fields as columns
-- ("user" and "end" are SQL keywords and need quotes), and attaches charging. A run is
-- (cluster, jobid, submit), as slurmdbd identifies it: a requeued job is several runs of one
-- JobID with different submit times. A row without submit is identified by (cluster, jobid)
-- alone (NULLS NOT DISTINCT). hpcacct-sacct and load_sacct() load it from sacct.
-- The table belongs to the site, not to the extension: pg_dump dumps it as a table whose
-- charging triggers are created after its rows are restored, so a restore never charges
-- the restored jobs a second time.
CREATE FUNCTION @extschema@.create_job_table(job_table text DEFAULT '@extschema@.job') RETURNS regclass
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
REVOKE EXECUTE ON FUNCTION @extschema@.create_job_table(text) FROM PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('@extschema@.ledger', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.ledger_entry_id_seq', '');
