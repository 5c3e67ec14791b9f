-- hpcacct install script, assembled by the Makefile from sql/install/*.sql in name order.
-- Every object lives in schema hpcacct (@extschema@); everything the script calls is
-- schema-qualified, so that a hostile search_path cannot change what it creates.

\echo Use "CREATE EXTENSION hpcacct" to load this file. \quit
-- ---------------------------------------------------------------------------------------
-- The resource vector type: Slurm's TRES syntax, e.g. 'cpu=4,gres/gpu=1,mem=16G,node=1'.
-- ---------------------------------------------------------------------------------------

CREATE TYPE @extschema@.tres;

CREATE FUNCTION @extschema@.tres_in(cstring) RETURNS @extschema@.tres
    AS 'MODULE_PATHNAME', 'hpcacct_tres_in' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.tres_in(cstring) IS 'Text input of tres: Slurm TRES syntax, validated';
CREATE FUNCTION @extschema@.tres_out(@extschema@.tres) RETURNS cstring
    AS 'MODULE_PATHNAME', 'hpcacct_tres_out' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.tres_out(@extschema@.tres) IS 'Canonical text of a tres: keys sorted, memory in the largest whole unit';
CREATE FUNCTION @extschema@.tres_recv(internal) RETURNS @extschema@.tres
    AS 'MODULE_PATHNAME', 'hpcacct_tres_recv' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.tres_recv(internal) IS 'Binary input of tres, validated as text input is';
CREATE FUNCTION @extschema@.tres_send(@extschema@.tres) RETURNS bytea
    AS 'MODULE_PATHNAME', 'hpcacct_tres_send' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.tres_send(@extschema@.tres) IS 'Binary output of tres: count, then key and float8 value per component';

CREATE TYPE @extschema@.tres (
    INPUT = @extschema@.tres_in,
    OUTPUT = @extschema@.tres_out,
    RECEIVE = @extschema@.tres_recv,
    SEND = @extschema@.tres_send,
    INTERNALLENGTH = VARIABLE,
    STORAGE = extended
);
COMMENT ON TYPE @extschema@.tres IS
    'Resource vector in Slurm TRES syntax (cpu=4,mem=16G,gres/gpu=1,...); memory in MB, missing keys are 0';

CREATE FUNCTION @extschema@.tres_get(@extschema@.tres, text) RETURNS float8
    AS 'MODULE_PATHNAME', 'hpcacct_tres_get' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.tres_get(@extschema@.tres, text) IS
    'Component of a resource vector (memory in MB); 0 when the key is missing';
CREATE OPERATOR @extschema@.-> (
    LEFTARG = @extschema@.tres, RIGHTARG = text, FUNCTION = @extschema@.tres_get
);

CREATE FUNCTION @extschema@.tres_add(@extschema@.tres, @extschema@.tres) RETURNS @extschema@.tres
    AS 'MODULE_PATHNAME', 'hpcacct_tres_add' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.tres_add(@extschema@.tres, @extschema@.tres) IS
    'Component-wise sum of two resource vectors';
CREATE OPERATOR @extschema@.+ (
    LEFTARG = @extschema@.tres, RIGHTARG = @extschema@.tres, FUNCTION = @extschema@.tres_add,
    COMMUTATOR = OPERATOR(@extschema@.+)
);

CREATE FUNCTION @extschema@.tres_mul(@extschema@.tres, float8) RETURNS @extschema@.tres
    AS 'MODULE_PATHNAME', 'hpcacct_tres_mul' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION @extschema@.tres_mul(float8, @extschema@.tres) RETURNS @extschema@.tres
    AS 'MODULE_PATHNAME', 'hpcacct_tres_mul_left' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.tres_mul(@extschema@.tres, float8) IS
    'Resource vector scaled by a finite, non-negative number';
COMMENT ON FUNCTION @extschema@.tres_mul(float8, @extschema@.tres) IS
    'Resource vector scaled by a finite, non-negative number';
CREATE OPERATOR @extschema@.* (
    LEFTARG = @extschema@.tres, RIGHTARG = float8, FUNCTION = @extschema@.tres_mul,
    COMMUTATOR = OPERATOR(@extschema@.*)
);
CREATE OPERATOR @extschema@.* (
    LEFTARG = float8, RIGHTARG = @extschema@.tres, FUNCTION = @extschema@.tres_mul,
    COMMUTATOR = OPERATOR(@extschema@.*)
);

CREATE AGGREGATE @extschema@.sum(@extschema@.tres) (
    SFUNC = @extschema@.tres_add,
    STYPE = @extschema@.tres,
    COMBINEFUNC = @extschema@.tres_add,
    PARALLEL = SAFE
);
COMMENT ON AGGREGATE @extschema@.sum(@extschema@.tres) IS 'Component-wise sum of resource vectors';

-- Equality is on the canonical form; the order (by key, then value) exists so that
-- tres values can be sorted, indexed with btree and used in GROUP BY or DISTINCT.
CREATE FUNCTION @extschema@.tres_eq(@extschema@.tres, @extschema@.tres) RETURNS boolean
    AS 'MODULE_PATHNAME', 'hpcacct_tres_eq' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF;
COMMENT ON FUNCTION @extschema@.tres_eq(@extschema@.tres, @extschema@.tres) IS 'Equality of canonical resource vectors (operator =)';
CREATE FUNCTION @extschema@.tres_ne(@extschema@.tres, @extschema@.tres) RETURNS boolean
    AS 'MODULE_PATHNAME', 'hpcacct_tres_ne' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF;
COMMENT ON FUNCTION @extschema@.tres_ne(@extschema@.tres, @extschema@.tres) IS 'Inequality of canonical resource vectors (operator <>)';
CREATE FUNCTION @extschema@.tres_lt(@extschema@.tres, @extschema@.tres) RETURNS boolean
    AS 'MODULE_PATHNAME', 'hpcacct_tres_lt' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.tres_lt(@extschema@.tres, @extschema@.tres) IS 'Order of resource vectors by key, then value (operator <)';
CREATE FUNCTION @extschema@.tres_le(@extschema@.tres, @extschema@.tres) RETURNS boolean
    AS 'MODULE_PATHNAME', 'hpcacct_tres_le' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.tres_le(@extschema@.tres, @extschema@.tres) IS 'Order of resource vectors by key, then value (operator <=)';
CREATE FUNCTION @extschema@.tres_gt(@extschema@.tres, @extschema@.tres) RETURNS boolean
    AS 'MODULE_PATHNAME', 'hpcacct_tres_gt' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.tres_gt(@extschema@.tres, @extschema@.tres) IS 'Order of resource vectors by key, then value (operator >)';
CREATE FUNCTION @extschema@.tres_ge(@extschema@.tres, @extschema@.tres) RETURNS boolean
    AS 'MODULE_PATHNAME', 'hpcacct_tres_ge' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.tres_ge(@extschema@.tres, @extschema@.tres) IS 'Order of resource vectors by key, then value (operator >=)';
CREATE FUNCTION @extschema@.tres_cmp(@extschema@.tres, @extschema@.tres) RETURNS integer
    AS 'MODULE_PATHNAME', 'hpcacct_tres_cmp' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.tres_cmp(@extschema@.tres, @extschema@.tres) IS 'Btree support: -1, 0 or 1 by key, then value';
CREATE FUNCTION @extschema@.tres_hash(@extschema@.tres) RETURNS integer
    AS 'MODULE_PATHNAME', 'hpcacct_tres_hash' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.tres_hash(@extschema@.tres) IS 'Hash support: hash of the canonical form';
CREATE FUNCTION @extschema@.tres_hash_extended(@extschema@.tres, bigint) RETURNS bigint
    AS 'MODULE_PATHNAME', 'hpcacct_tres_hash_extended' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.tres_hash_extended(@extschema@.tres, bigint) IS 'Hash support: seeded 64-bit hash of the canonical form';

CREATE OPERATOR @extschema@.= (
    LEFTARG = @extschema@.tres, RIGHTARG = @extschema@.tres, FUNCTION = @extschema@.tres_eq,
    COMMUTATOR = OPERATOR(@extschema@.=), NEGATOR = OPERATOR(@extschema@.<>),
    RESTRICT = pg_catalog.eqsel, JOIN = pg_catalog.eqjoinsel, HASHES, MERGES
);
CREATE OPERATOR @extschema@.<> (
    LEFTARG = @extschema@.tres, RIGHTARG = @extschema@.tres, FUNCTION = @extschema@.tres_ne,
    COMMUTATOR = OPERATOR(@extschema@.<>), NEGATOR = OPERATOR(@extschema@.=),
    RESTRICT = pg_catalog.neqsel, JOIN = pg_catalog.neqjoinsel
);
CREATE OPERATOR @extschema@.< (
    LEFTARG = @extschema@.tres, RIGHTARG = @extschema@.tres, FUNCTION = @extschema@.tres_lt,
    COMMUTATOR = OPERATOR(@extschema@.>), NEGATOR = OPERATOR(@extschema@.>=),
    RESTRICT = pg_catalog.scalarltsel, JOIN = pg_catalog.scalarltjoinsel
);
CREATE OPERATOR @extschema@.<= (
    LEFTARG = @extschema@.tres, RIGHTARG = @extschema@.tres, FUNCTION = @extschema@.tres_le,
    COMMUTATOR = OPERATOR(@extschema@.>=), NEGATOR = OPERATOR(@extschema@.>),
    RESTRICT = pg_catalog.scalarlesel, JOIN = pg_catalog.scalarlejoinsel
);
CREATE OPERATOR @extschema@.> (
    LEFTARG = @extschema@.tres, RIGHTARG = @extschema@.tres, FUNCTION = @extschema@.tres_gt,
    COMMUTATOR = OPERATOR(@extschema@.<), NEGATOR = OPERATOR(@extschema@.<=),
    RESTRICT = pg_catalog.scalargtsel, JOIN = pg_catalog.scalargtjoinsel
);
CREATE OPERATOR @extschema@.>= (
    LEFTARG = @extschema@.tres, RIGHTARG = @extschema@.tres, FUNCTION = @extschema@.tres_ge,
    COMMUTATOR = OPERATOR(@extschema@.<=), NEGATOR = OPERATOR(@extschema@.<),
    RESTRICT = pg_catalog.scalargesel, JOIN = pg_catalog.scalargejoinsel
);

CREATE OPERATOR CLASS @extschema@.tres_ops DEFAULT FOR TYPE @extschema@.tres USING btree AS
    OPERATOR 1 @extschema@.<,
    OPERATOR 2 @extschema@.<=,
    OPERATOR 3 @extschema@.=,
    OPERATOR 4 @extschema@.>=,
    OPERATOR 5 @extschema@.>,
    FUNCTION 1 @extschema@.tres_cmp(@extschema@.tres, @extschema@.tres);

CREATE OPERATOR CLASS @extschema@.tres_hash_ops DEFAULT FOR TYPE @extschema@.tres USING hash AS
    OPERATOR 1 @extschema@.=,
    FUNCTION 1 @extschema@.tres_hash(@extschema@.tres),
    FUNCTION 2 @extschema@.tres_hash_extended(@extschema@.tres, bigint);
-- ---------------------------------------------------------------------------------------
-- Equivalents and charges (SPEC §0-§1).
-- ---------------------------------------------------------------------------------------

CREATE FUNCTION @extschema@.equivalents(request @extschema@.tres, bundle @extschema@.tres)
    RETURNS float8
    AS 'MODULE_PATHNAME', 'hpcacct_equivalents' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.equivalents(@extschema@.tres, @extschema@.tres) IS
    'Bundles a request takes: max over the bundle''s components k of request_k / bundle_k';

CREATE FUNCTION @extschema@.charge(alloc @extschema@.tres, elapsed interval, bundle @extschema@.tres,
                                   rate float8, node @extschema@.tres DEFAULT NULL)
    RETURNS float8
    AS 'MODULE_PATHNAME', 'hpcacct_charge' LANGUAGE c IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.charge(@extschema@.tres, interval, @extschema@.tres, float8, @extschema@.tres) IS
    'equivalents x wall-clock hours x rate; with a node capacity, the request is first rounded up to whole nodes (exclusive node types)';
-- ---------------------------------------------------------------------------------------
-- The site: settings, accounts and resources (node types / partitions with their rates).
-- ---------------------------------------------------------------------------------------

-- Every setting hpcacct knows, with its default and meaning.
CREATE FUNCTION @extschema@.setting_catalog()
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
COMMENT ON FUNCTION @extschema@.setting_catalog() IS 'Every setting with its default and meaning';

-- Site settings the administrator has set; every setting has a default (see settings).
CREATE TABLE @extschema@.setting (
    name  text PRIMARY KEY,
    value text NOT NULL
);
COMMENT ON TABLE @extschema@.setting IS 'Site settings set by the administrator; unset ones take their default';

CREATE VIEW @extschema@.settings AS
    SELECT c.name,
           coalesce(s.value, c.default_value,
                    -- the TimeZone the session started with (the server's, unless the client sent
                    -- its own at connection: PGTZ, PGOPTIONS, JDBC), not one SET later
                    CASE WHEN c.name = 'timezone'
                         THEN (SELECT p.reset_val FROM pg_catalog.pg_settings p WHERE p.name = 'TimeZone') END)
               AS value,
           CASE WHEN s.value IS NULL THEN 'default' ELSE 'site' END AS source,
           c.description
    FROM @extschema@.setting_catalog() c
    LEFT JOIN @extschema@.setting s USING (name);
COMMENT ON VIEW @extschema@.settings IS 'Every setting with its effective value and where it comes from';

-- PL/pgSQL keeps this function's plan for the session; a SQL function would plan its body
-- again in every statement that calls it (the charging and rollup triggers call it per
-- statement: a loader inserting one job per statement paid that for every job).
CREATE FUNCTION @extschema@.setting_value(name text) RETURNS text
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$ BEGIN RETURN (SELECT s.value FROM @extschema@.settings s WHERE s.name = setting_value.name); END $$;
COMMENT ON FUNCTION @extschema@.setting_value(text) IS 'Effective value of a setting';

-- Only known settings, with values of the right kind.
CREATE FUNCTION @extschema@.check_setting() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
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
        IF NEW.name = 'personal_allotment'
           AND (NEW.value !~ '^[0-9]+(\.[0-9]+)?$' OR NEW.value::numeric <= 0) THEN
            RAISE EXCEPTION 'personal_allotment must be a positive number, not "%"', NEW.value
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN NEW;
    END
    $$;
COMMENT ON FUNCTION @extschema@.check_setting() IS 'Trigger: only known settings, with values of the right kind';
CREATE TRIGGER check_setting BEFORE INSERT OR UPDATE ON @extschema@.setting
    FOR EACH ROW EXECUTE FUNCTION @extschema@.check_setting();

CREATE TABLE @extschema@.account (
    name        text PRIMARY KEY CHECK (name <> ''),
    kind        text NOT NULL DEFAULT 'project' CHECK (kind IN ('personal', 'project', 'special')),
    description text,
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    -- quarterly bank (HLRN): a personal account's own allotment, and when it was deleted
    personal_allotment numeric CHECK (personal_allotment > 0),
    deleted_in  date,
    CONSTRAINT account_allotment_is_personal CHECK (personal_allotment IS NULL OR kind = 'personal'),
    CONSTRAINT account_deleted_only_personal CHECK (deleted_in IS NULL OR kind = 'personal')
);
COMMENT ON TABLE @extschema@.account IS
    'Accounts (projects) that jobs are charged to: personal, project or special (staff)';

-- A node type or partition of a cluster and how its jobs are charged. Rates change over
-- time: a job is charged at the row whose validity contains the job's start.
CREATE TABLE @extschema@.resource (
    resource_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    cluster     text NOT NULL,
    partition   text NOT NULL,
    node        @extschema@.tres NOT NULL,
    bundle      @extschema@.tres NOT NULL CHECK (bundle OPERATOR(@extschema@.<>) ''),
    rate        float8 NOT NULL CHECK (rate >= 0 AND rate < 'Infinity'),
    unit        text NOT NULL,
    pool        text CHECK (pool <> ''),
    exclusive   boolean NOT NULL DEFAULT false,
    valid       tstzrange NOT NULL DEFAULT '[-infinity,infinity)' CHECK (NOT pg_catalog.isempty(valid)),
    description text,
    CONSTRAINT resource_exclusive_has_node
        CHECK (NOT exclusive OR node OPERATOR(@extschema@.<>) ''),
    CONSTRAINT resource_one_rate_at_a_time
        EXCLUDE USING gist (cluster WITH =, partition WITH =, valid WITH &&)
);
COMMENT ON TABLE @extschema@.resource IS
    'Node types / partitions: node capacity, bundle (one equivalent), rate in unit per equivalent-hour, exclusive flag, validity';
COMMENT ON COLUMN @extschema@.resource.node IS 'Capacity of one node, e.g. cpu=24,mem=64G,node=1';
COMMENT ON COLUMN @extschema@.resource.bundle IS 'One equivalent (PEQ, core or GPU equivalent), e.g. cpu=1,mem=4G';
COMMENT ON COLUMN @extschema@.resource.rate IS 'Units charged per equivalent-hour (includes any generation weight)';
COMMENT ON COLUMN @extschema@.resource.pool IS
    'Allocation pool the resource''s charges count against (machine, CPU or GPU pool); NULL: the cluster';
COMMENT ON COLUMN @extschema@.resource.exclusive IS 'Jobs hold whole nodes and are charged for all of them';

SELECT pg_catalog.pg_extension_config_dump('@extschema@.setting', '');
COMMENT ON COLUMN @extschema@.account.personal_allotment IS
    'Credits per quarter for this personal account, when raised on request (at most double the setting)';
COMMENT ON COLUMN @extschema@.account.deleted_in IS 'Quarter in which a personal account was deleted; it stays deleted';

SELECT pg_catalog.pg_extension_config_dump('@extschema@.account', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.resource', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.resource_resource_id_seq', '');
-- ---------------------------------------------------------------------------------------
-- Jobs, the ledger, and the trigger that charges every job into the ledger.
-- ---------------------------------------------------------------------------------------

-- Every money-like movement is one row; balances are sums. Rows are never updated or
-- deleted: a correction is a new row (a re-rated or deleted job gets a reversal).
--   charge       a job's charge (positive) or its reversal (negative); names the job
--   grant, supplement, deposit   allocation credited to the account for [valid_from, valid_until]
--   retraction   allocation withdrawn (negative), effective valid_from until valid_until
--   transfer     allocation moved between quarters or accounts: one negative, one positive row
--   refund       credit given back for a charge
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
    CONSTRAINT ledger_charge_names_job CHECK (
        kind <> 'charge' OR (cluster IS NOT NULL AND jobid IS NOT NULL AND resource_id IS NOT NULL
                             AND job_start IS NOT NULL AND job_end >= job_start)),
    CONSTRAINT ledger_allocation_has_window CHECK (
        kind = 'charge' OR (valid_from IS NOT NULL AND valid_until >= valid_from
                            AND pg_catalog.isfinite(valid_from) AND pg_catalog.isfinite(valid_until))),
    CONSTRAINT ledger_sign_of_kind CHECK (
        CASE kind WHEN 'grant' THEN amount > 0 WHEN 'supplement' THEN amount > 0 WHEN 'deposit' THEN amount > 0
                  WHEN 'refund' THEN amount > 0 WHEN 'retraction' THEN amount < 0 ELSE true END)
);
CREATE INDEX ledger_job ON @extschema@.ledger (cluster, jobid) WHERE kind = 'charge';
CREATE INDEX ledger_allocation_account ON @extschema@.ledger (account) WHERE kind <> 'charge';
-- Charges by end, for the latest month of the reports (earlier ones are in charge_rollup).
-- The ledger is appended in about time order: a BRIN index is small and nearly free to keep.
CREATE INDEX ledger_job_end ON @extschema@.ledger USING brin (job_end);
COMMENT ON TABLE @extschema@.ledger IS
    'Append-only ledger: one row per charge, reversal, deposit, transfer or retraction';
COMMENT ON COLUMN @extschema@.ledger.amount IS
    'Units (see unit); a charge is positive, its reversal negative; rounded to 6 decimals when booked';

CREATE FUNCTION @extschema@.ledger_is_append_only() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        RAISE EXCEPTION 'hpcacct.ledger is append-only: % is not allowed', lower(TG_OP)
            USING ERRCODE = 'HA001', HINT = 'Book a correcting entry instead.';
    END
    $$;
COMMENT ON FUNCTION @extschema@.ledger_is_append_only() IS 'Trigger: refuses UPDATE, DELETE and TRUNCATE of the ledger (HA001)';
CREATE TRIGGER ledger_append_only BEFORE UPDATE OR DELETE ON @extschema@.ledger
    FOR EACH ROW EXECUTE FUNCTION @extschema@.ledger_is_append_only();
CREATE TRIGGER ledger_no_truncate BEFORE TRUNCATE ON @extschema@.ledger
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.ledger_is_append_only();

-- The columns of a job table that charging reads, as quoted identifiers in the order
-- cluster, jobid, account, user, partition, start, end, alloctres. `mapping` holds
-- 'role=column' pairs for a table whose names differ from sacct's.
CREATE FUNCTION @extschema@.job_columns(job_table regclass, mapping text[]) RETURNS text[]
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        roles   constant text[] := ARRAY['cluster', 'jobid', 'account', 'user', 'partition', 'start', 'end', 'alloctres'];
        columns text[] := roles;
        pair    text;
        role    text;
        column_name text;
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
            IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                           WHERE a.attrelid = job_table AND a.attname = columns[position]
                             AND a.attnum > 0 AND NOT a.attisdropped) THEN
                RAISE EXCEPTION 'column "%" of % (the job''s %) does not exist', columns[position], job_table, roles[position]
                    USING ERRCODE = 'undefined_column',
                          HINT = format('Name it in the trigger arguments, e.g. ''%s=my_column''.', roles[position]);
            END IF;
            columns[position] := quote_ident(columns[position]);
        END LOOP;
        RETURN columns;
    END
    $$;
COMMENT ON FUNCTION @extschema@.job_columns(regclass, text[]) IS 'The columns charging reads from a job table, checked, from role=column pairs';

-- Charges jobs as a statement-level AFTER trigger over the transition tables new_jobs and
-- old_jobs: one set-based INSERT into the ledger per statement (COPY included).
-- INSERT charges the new jobs; DELETE reverses what the ledger holds for the old ones;
-- UPDATE does both, for the jobs whose charging columns changed.
CREATE FUNCTION @extschema@.charge_jobs() RETURNS trigger
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
        PERFORM @extschema@.job_columns(job_table, mapping);  -- fail now, not at the first insert
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
COMMENT ON FUNCTION @extschema@.attach_charging(regclass, text[]) IS
    'Makes inserts, updates and deletes on a job table charge the ledger; mapping: role=column pairs';

-- Creates the table of finished jobs, one row each, with sacct's fields as columns (sacct
-- --parsable2 -o Cluster,JobID,Account,User,Partition,Submit,Start,End,AllocTRES,State loads
-- with COPY; "user" and "end" are SQL keywords and need quotes), and attaches charging.
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
                PRIMARY KEY (cluster, jobid)
            )$t$, job_table);
        created := job_table::regclass;
        EXECUTE format('COMMENT ON TABLE %s IS %L', created,
                       'Finished jobs, one row each, columns named after sacct fields; charged by trigger');
        PERFORM @extschema@.attach_charging(created);
        PERFORM @extschema@.protect_table(created);
        RETURN created;
    END
    $$;
COMMENT ON FUNCTION @extschema@.create_job_table(text) IS
    'Creates the job table (default hpcacct.job) with sacct''s columns, charging and row-level security';

SELECT pg_catalog.pg_extension_config_dump('@extschema@.ledger', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.ledger_entry_id_seq', '');
-- ---------------------------------------------------------------------------------------
-- Attribution of charges to periods (SPEC §0): a job's charge counts in the days, months
-- and quarters in which it ran, pro rata by wall-clock time, in the site's time zone.
-- ---------------------------------------------------------------------------------------

CREATE FUNCTION @extschema@.site_timezone() RETURNS text
    LANGUAGE plpgsql STABLE PARALLEL SAFE  -- plan kept for the session, as setting_value()'s
    SET search_path = pg_catalog, pg_temp
    AS $$ BEGIN RETURN @extschema@.setting_value('timezone'); END $$;
COMMENT ON FUNCTION @extschema@.site_timezone() IS
    'The site''s time zone (setting timezone): days, months and quarters of reports are its';

CREATE FUNCTION @extschema@.site_today() RETURNS date
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN (pg_catalog.now() AT TIME ZONE @extschema@.site_timezone())::date;
COMMENT ON FUNCTION @extschema@.site_today() IS 'Today in the site''s time zone';

-- Fraction of [job_start, job_end) that lies in [period_start, period_end). A job of zero
-- length counts wholly in the period where it starts; NULL in, NULL out. A SQL-standard
-- body (parsed once, at creation) without SET options, so that the planner inlines it.
CREATE FUNCTION @extschema@.period_share(job_start timestamptz, job_end timestamptz,
                                         period_start timestamptz, period_end timestamptz)
    RETURNS numeric
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE
        WHEN job_start IS NULL OR job_end IS NULL OR period_start IS NULL OR period_end IS NULL THEN NULL
        WHEN job_end <= job_start THEN
            CASE WHEN job_start >= period_start AND job_start < period_end THEN 1 ELSE 0 END
        ELSE
            GREATEST(0, pg_catalog.date_part('epoch', LEAST(job_end, period_end)
                                                                 - GREATEST(job_start, period_start))::numeric)
            / pg_catalog.date_part('epoch', job_end - job_start)::numeric
    END;
COMMENT ON FUNCTION @extschema@.period_share(timestamptz, timestamptz, timestamptz, timestamptz) IS
    'Fraction of a job''s wall-clock time [job_start, job_end) inside [period_start, period_end)';

-- Every charge (and reversal) split by calendar month of the site's time zone.
CREATE VIEW @extschema@.charge_by_month AS
    SELECT l.entry_id, l.account, r.cluster, r.partition, coalesce(r.pool, r.cluster) AS pool, l.unit, l.submitter,
           m.month::date AS month,
           l.amount * @extschema@.period_share(l.job_start, l.job_end,
                                               m.month AT TIME ZONE z.tz,
                                               (m.month + interval '1 month') AT TIME ZONE z.tz) AS amount
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
    'Charges split pro rata over the calendar months (site time zone) in which the jobs ran';
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
CREATE FUNCTION @extschema@.consumption_before(account text, pool text, before timestamptz)
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
-- ---------------------------------------------------------------------------------------
-- Theoretical consumption and regulation, GENCI / IDRIS (SPEC §2).
--
-- Allocation events are ledger rows of kind grant, supplement (positive) and retraction
-- (negative), with cluster = the machine and a validity window valid_from..valid_until
-- (inclusive). Consumption of an account on a machine is its job charges there, pro rata.
-- The allocation period is the calendar year: TC, consumption and Alloc of a date count
-- from 1 January of that date's year.
-- ---------------------------------------------------------------------------------------

-- Regulation settings per machine. Machines without a row are not regulated.
CREATE TABLE @extschema@.machine_setting (
    machine                   text PRIMARY KEY CHECK (machine <> ''),
    monthly_threshold         numeric NOT NULL CHECK (monthly_threshold >= 0 AND monthly_threshold < 'Infinity'),
    annual_warning_percent    numeric NOT NULL DEFAULT 30 CHECK (annual_warning_percent BETWEEN 0 AND 100),
    annual_retraction_percent numeric NOT NULL DEFAULT 40 CHECK (annual_retraction_percent BETWEEN 0 AND 100),
    month_convention          text NOT NULL DEFAULT 'half_month' CHECK (month_convention IN ('half_month', 'day')),
    description               text
);
COMMENT ON TABLE @extschema@.machine_setting IS
    'GENCI regulation settings per machine (ledger cluster): monthly threshold, annual percentages, month convention';
COMMENT ON COLUMN @extschema@.machine_setting.monthly_threshold IS
    'An account whose grants and supplements for the year on the machine reach this many hours is regulated monthly, otherwise annually';
COMMENT ON COLUMN @extschema@.machine_setting.annual_warning_percent IS
    'Annual regulation: accounts that used less than this percentage of their allocation are warned (1 May) and lose hours (1 June)';
COMMENT ON COLUMN @extschema@.machine_setting.annual_retraction_percent IS
    'Annual regulation: percentage of the allocation retracted on 1 June from an under-consuming account that is not exonerated';
COMMENT ON COLUMN @extschema@.machine_setting.month_convention IS
    'How validity windows are measured in months: half_month (the GENCI document) or day (exact fractions)';

-- ---- The aggregates tmc and tc -------------------------------------------------------

CREATE FUNCTION @extschema@.tmc_transfn(internal, date, date, float8, date) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_tmc_transfn' LANGUAGE c IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION @extschema@.tmc_transfn(internal, date, date, float8, date, text) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_tmc_transfn' LANGUAGE c IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION @extschema@.tc_transfn(internal, date, date, float8, date) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_tc_transfn' LANGUAGE c IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION @extschema@.tc_transfn(internal, date, date, float8, date, text) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_tc_transfn' LANGUAGE c IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION @extschema@.theoretical_combine(internal, internal) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_theoretical_combine' LANGUAGE c IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION @extschema@.theoretical_final(internal) RETURNS float8
    AS 'MODULE_PATHNAME', 'hpcacct_theoretical_final' LANGUAGE c IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION @extschema@.theoretical_serialize(internal) RETURNS bytea
    AS 'MODULE_PATHNAME', 'hpcacct_theoretical_serialize' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION @extschema@.theoretical_deserialize(bytea, internal) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_theoretical_deserialize' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.tmc_transfn(internal, date, date, float8, date) IS
    'Transition function of hpcacct.tmc (half_month convention)';
COMMENT ON FUNCTION @extschema@.tmc_transfn(internal, date, date, float8, date, text) IS
    'Transition function of hpcacct.tmc with a month convention';
COMMENT ON FUNCTION @extschema@.tc_transfn(internal, date, date, float8, date) IS
    'Transition function of hpcacct.tc (half_month convention)';
COMMENT ON FUNCTION @extschema@.tc_transfn(internal, date, date, float8, date, text) IS
    'Transition function of hpcacct.tc with a month convention';
COMMENT ON FUNCTION @extschema@.theoretical_combine(internal, internal) IS
    'Combine function of hpcacct.tmc and hpcacct.tc (merges two compensated sums)';
COMMENT ON FUNCTION @extschema@.theoretical_final(internal) IS
    'Final function of hpcacct.tmc and hpcacct.tc';
COMMENT ON FUNCTION @extschema@.theoretical_serialize(internal) IS
    'Serializes a hpcacct.tmc / hpcacct.tc state (two float8, network byte order)';
COMMENT ON FUNCTION @extschema@.theoretical_deserialize(bytea, internal) IS
    'Deserializes a hpcacct.tmc / hpcacct.tc state, checking its size and that it is finite';

CREATE AGGREGATE @extschema@.tmc(valid_from date, valid_until date, amount float8, at date) (
    SFUNC = @extschema@.tmc_transfn, STYPE = internal, SSPACE = 16,
    FINALFUNC = @extschema@.theoretical_final,
    COMBINEFUNC = @extschema@.theoretical_combine,
    SERIALFUNC = @extschema@.theoretical_serialize, DESERIALFUNC = @extschema@.theoretical_deserialize,
    PARALLEL = SAFE
);
CREATE AGGREGATE @extschema@.tmc(valid_from date, valid_until date, amount float8, at date, convention text) (
    SFUNC = @extschema@.tmc_transfn, STYPE = internal, SSPACE = 16,
    FINALFUNC = @extschema@.theoretical_final,
    COMBINEFUNC = @extschema@.theoretical_combine,
    SERIALFUNC = @extschema@.theoretical_serialize, DESERIALFUNC = @extschema@.theoretical_deserialize,
    PARALLEL = SAFE
);
CREATE AGGREGATE @extschema@.tc(valid_from date, valid_until date, amount float8, at date) (
    SFUNC = @extschema@.tc_transfn, STYPE = internal, SSPACE = 16,
    FINALFUNC = @extschema@.theoretical_final,
    COMBINEFUNC = @extschema@.theoretical_combine,
    SERIALFUNC = @extschema@.theoretical_serialize, DESERIALFUNC = @extschema@.theoretical_deserialize,
    PARALLEL = SAFE
);
CREATE AGGREGATE @extschema@.tc(valid_from date, valid_until date, amount float8, at date, convention text) (
    SFUNC = @extschema@.tc_transfn, STYPE = internal, SSPACE = 16,
    FINALFUNC = @extschema@.theoretical_final,
    COMBINEFUNC = @extschema@.theoretical_combine,
    SERIALFUNC = @extschema@.theoretical_serialize, DESERIALFUNC = @extschema@.theoretical_deserialize,
    PARALLEL = SAFE
);
COMMENT ON AGGREGATE @extschema@.tmc(date, date, float8, date) IS
    'Theoretical monthly consumption at a date: sum of amount / months of the window over the events valid that day (half_month convention); NULL without rows';
COMMENT ON AGGREGATE @extschema@.tmc(date, date, float8, date, text) IS
    'Theoretical monthly consumption at a date under a month convention (half_month or day); NULL without rows';
COMMENT ON AGGREGATE @extschema@.tc(date, date, float8, date) IS
    'Theoretical consumption up to the end of a date: the integral of TMC, i.e. each event pro rata of the months of its window elapsed (half_month convention); NULL without rows';
COMMENT ON AGGREGATE @extschema@.tc(date, date, float8, date, text) IS
    'Theoretical consumption up to the end of a date under a month convention (half_month or day); NULL without rows';

CREATE FUNCTION @extschema@.regulation_status(consumption float8, tc float8, tmc float8) RETURNS text
    AS 'MODULE_PATHNAME', 'hpcacct_regulation_status' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.regulation_status(float8, float8, float8) IS
    'Monthly regulation outcome for delta = consumption - tc: ok when delta > -tmc, warning when -2 tmc < delta <= -tmc, retraction when delta <= -2 tmc (ok when tmc <= 0)';

-- ---- Where an account stands -------------------------------------------------------------

-- Alloc, TMC, TC, consumption and Δ of an account on a machine at a date, counted from
-- 1 January of that date's year (TC = TC(at) - TC(31 Dec of the previous year), so an
-- event that began in an earlier year counts only for its part in this year).
CREATE FUNCTION @extschema@.allocation_status(account text, machine text, at date)
    RETURNS TABLE (alloc numeric, granted numeric, tmc float8, tc float8,
                   consumption float8, delta float8, status text)
    LANGUAGE sql STABLE STRICT PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        WITH period AS (
            SELECT pg_catalog.make_date(EXTRACT(year FROM $3)::integer, 1, 1) AS year_start,
                   coalesce((SELECT s.month_convention FROM @extschema@.machine_setting s WHERE s.machine = $2),
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
COMMENT ON FUNCTION @extschema@.allocation_status(text, text, date) IS
    'Alloc (net), granted (grants and supplements), TMC, TC, consumption up to the end of the day (site time zone), delta and monthly status of an account on a machine, from 1 January of the date''s year';

-- The document's table: one row per interval of the year on which Alloc and TMC are
-- constant, with TC at the interval's last day.
CREATE FUNCTION @extschema@.theoretical_year(account text, machine text, year integer, convention text DEFAULT NULL)
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
        conv := coalesce($4, (SELECT s.month_convention FROM @extschema@.machine_setting s WHERE s.machine = $2),
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
COMMENT ON FUNCTION @extschema@.theoretical_year(text, text, integer, text) IS
    'An account''s year on a machine as the GENCI table: intervals of constant Alloc and TMC, with TC at each interval''s last day (convention: the machine''s unless given)';

-- ---- Regulation ------------------------------------------------------------------------

-- Accounts exonerated from the annual regulation of a year, entered by an administrator.
CREATE TABLE @extschema@.exoneration (
    account  text NOT NULL REFERENCES @extschema@.account,
    machine  text NOT NULL REFERENCES @extschema@.machine_setting,
    year     integer NOT NULL CHECK (year BETWEEN 1401 AND 9999),
    reason   text NOT NULL CHECK (reason IN ('justification', 'second_half_start')),
    received date NOT NULL,
    note     text,
    PRIMARY KEY (account, machine, year),
    CONSTRAINT exoneration_in_time CHECK (
        received <= CASE reason WHEN 'justification' THEN pg_catalog.make_date(year, 5, 31)
                                ELSE pg_catalog.make_date(year, 1, 31) END)
);
COMMENT ON TABLE @extschema@.exoneration IS
    'Exonerations from the annual regulation: a justification received by 31 May, or a second-half start agreed by 31 January';

-- What each run found and did, one row per account, machine, run date and kind of run.
CREATE TABLE @extschema@.regulation_log (
    log_id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_date     date NOT NULL,
    run          text NOT NULL CHECK (run IN ('monthly', 'annual_warning', 'annual_retraction')),
    account      text NOT NULL REFERENCES @extschema@.account,
    machine      text NOT NULL REFERENCES @extschema@.machine_setting,
    figures_at   date NOT NULL,
    outcome      text NOT NULL CHECK (outcome IN ('ok', 'warning', 'retraction', 'exonerated')),
    alloc        numeric NOT NULL,
    granted      numeric NOT NULL,
    consumption  float8 NOT NULL,
    tc           float8 NOT NULL,
    tmc          float8 NOT NULL,
    delta        float8 NOT NULL,
    used_percent float8,
    retracted    numeric(20, 6) NOT NULL DEFAULT 0 CHECK (retracted >= 0),
    -- No foreign key: ledger rows are never deleted, and a reference would make TRUNCATE of
    -- the ledger fail on the key rather than on its append-only trigger (HA001).
    entry_id     bigint,
    logged_at    timestamptz NOT NULL DEFAULT pg_catalog.statement_timestamp(),
    CONSTRAINT regulation_log_once UNIQUE (account, machine, run_date, run),
    CONSTRAINT regulation_log_booked CHECK ((entry_id IS NOT NULL) = (retracted > 0))
);
COMMENT ON TABLE @extschema@.regulation_log IS
    'One row per account, machine, run date and run (monthly, annual_warning, annual_retraction): the figures, the outcome and the hours retracted';
COMMENT ON COLUMN @extschema@.regulation_log.figures_at IS
    'The day whose end the figures are taken at: the run date for monthly runs, the day before for annual runs';
COMMENT ON COLUMN @extschema@.regulation_log.used_percent IS
    'Annual runs: consumption as a percentage of Alloc';
COMMENT ON COLUMN @extschema@.regulation_log.entry_id IS 'The retraction booked in hpcacct.ledger, if any';

-- The kind of regulation run a date calls for; NULL on any other date.
CREATE FUNCTION @extschema@.regulation_run(d date) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT CASE
            WHEN EXTRACT(day FROM d) = 15 THEN 'monthly'
            WHEN EXTRACT(month FROM d) = 5 AND EXTRACT(day FROM d) = 1 THEN 'annual_warning'
            WHEN EXTRACT(month FROM d) = 6 AND EXTRACT(day FROM d) = 1 THEN 'annual_retraction'
        END
    $$;
COMMENT ON FUNCTION @extschema@.regulation_run(date) IS
    'Regulation run of a date: monthly on the 15th, annual_warning on 1 May, annual_retraction on 1 June, NULL otherwise';

-- Monthly runs (the 15th) regulate the accounts whose grants and supplements for the year
-- on a machine reach its threshold; annual runs (1 May, 1 June) the others. Idempotent:
-- an account already logged for this date and run is skipped, and runs are serialized by
-- a lock on the log, so a retraction is booked at most once.
CREATE PROCEDURE @extschema@.regulate(d date)
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
COMMENT ON PROCEDURE @extschema@.regulate(date) IS
    'GENCI regulation for a date: monthly on the 15th, annual warning on 1 May, annual retraction on 1 June, a no-op (notice) on other dates; idempotent; results in hpcacct.regulation_log';

-- Per account, machine and month: the figures at the month's regulation day (the 15th),
-- recomputed from the ledger as it is now, and what the monthly run logged that day. The
-- status is the monthly rule's; it is NULL for an account under annual regulation, whose
-- outcomes (1 May, 1 June) are in hpcacct.regulation_log.
CREATE VIEW @extschema@.regulation_report AS
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
COMMENT ON VIEW @extschema@.regulation_report IS
    'Per account, machine and month up to today: Alloc, TMC, TC, consumption, delta and monthly status at the 15th (NULL under annual regulation), and the outcome the monthly run logged';

SELECT pg_catalog.pg_extension_config_dump('@extschema@.machine_setting', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.exoneration', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.regulation_log', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.regulation_log_log_id_seq', '');
-- ---------------------------------------------------------------------------------------
-- Sliding-window quotas (SPEC §3, RWTH): monthly allowances within an accounting period,
-- consumption from the job charges, and the figures of RWTH's `r_wlm_usage -q`.
-- ---------------------------------------------------------------------------------------

-- What the aggregate returns for the month `at` (field names as in SPEC §3).
CREATE TYPE @extschema@.quota AS (
    monthly          float8,  -- A(at)
    remaining_prev   float8,  -- A(at-1) - C(at-1)
    consumed_current float8,  -- C(at)
    consumable_pct   float8,  -- (A(at-1) + A(at) - C(at-1) - C(at)) / A(at) x 100, -101 below -100; NULL if A(at) = 0
    consumable       float8,  -- A(at-1) + A(at) + A(at+1) - C(at-1) - C(at)
    state            text     -- normal, low_priority or blocked
);
COMMENT ON TYPE @extschema@.quota IS
    'Sliding-window quota of one month: monthly, remaining_prev, consumed_current, consumable_pct, consumable, state';

-- Support functions of the aggregate. The state is `internal` (the core's flat 88-byte
-- State in the aggregate context; see src/pg/window_quota.cpp for why), so the combine
-- function must not be strict, and the transition function is not strict so that a NULL
-- argument is an error (22004) rather than a month silently left out.
CREATE FUNCTION @extschema@.window_quota_transfn(internal, date, float8, float8, date) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_window_quota_transfn' LANGUAGE c IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.window_quota_transfn(internal, date, float8, float8, date) IS
    'Transition function of hpcacct.window_quota: adds one month row to the state';
CREATE FUNCTION @extschema@.window_quota_combinefn(internal, internal) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_window_quota_combinefn' LANGUAGE c IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.window_quota_combinefn(internal, internal) IS
    'Combine function of hpcacct.window_quota: merges two partial states';
CREATE FUNCTION @extschema@.window_quota_serialfn(internal) RETURNS bytea
    AS 'MODULE_PATHNAME', 'hpcacct_window_quota_serialfn' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.window_quota_serialfn(internal) IS
    'Serial function of hpcacct.window_quota: the 88 bytes of a partial state';
CREATE FUNCTION @extschema@.window_quota_deserialfn(bytea, internal) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_window_quota_deserialfn' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.window_quota_deserialfn(bytea, internal) IS
    'Deserial function of hpcacct.window_quota: checks the size and the validity of a partial state';
CREATE FUNCTION @extschema@.window_quota_finalfn(internal) RETURNS @extschema@.quota
    AS 'MODULE_PATHNAME', 'hpcacct_window_quota_finalfn' LANGUAGE c IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.window_quota_finalfn(internal) IS
    'Final function of hpcacct.window_quota: the quota of month at, NULL without rows';

CREATE AGGREGATE @extschema@.window_quota(month date, allowance float8, consumed float8, at date) (
    SFUNC = @extschema@.window_quota_transfn,
    STYPE = internal,
    SSPACE = 88,
    FINALFUNC = @extschema@.window_quota_finalfn,
    COMBINEFUNC = @extschema@.window_quota_combinefn,
    SERIALFUNC = @extschema@.window_quota_serialfn,
    DESERIALFUNC = @extschema@.window_quota_deserialfn,
    PARALLEL = SAFE
);
COMMENT ON AGGREGATE @extschema@.window_quota(date, float8, float8, date) IS
    'RWTH sliding-window quota of the month containing at, over one row per month of an accounting period '
    '(the period runs from its first to its last month; rows of one month add up; NULL arguments are an error)';

-- An account's accounting periods. Within one, each month has an allowance (a row of
-- monthly_allowance; a month without a row has none). Consumption is the account's charges
-- in `unit`, on `cluster` or, when it is NULL, on every cluster.
CREATE TABLE @extschema@.quota_period (
    account      text NOT NULL REFERENCES @extschema@.account,
    period_start date NOT NULL,
    period_end   date NOT NULL,
    cluster      text,
    unit         text NOT NULL DEFAULT 'core-hours',
    note         text,
    PRIMARY KEY (account, period_start),
    UNIQUE (account, period_start, period_end),
    CONSTRAINT quota_period_finite CHECK (pg_catalog.isfinite(period_start) AND pg_catalog.isfinite(period_end)),
    CONSTRAINT quota_period_whole_months CHECK (
        pg_catalog.date_part('day', period_start::timestamp) = 1
        AND pg_catalog.date_part('day', (period_end + 1)::timestamp) = 1),
    CONSTRAINT quota_period_not_empty CHECK (period_end >= period_start),
    CONSTRAINT quota_period_no_overlap
        EXCLUDE USING gist (account WITH =, pg_catalog.daterange(period_start, period_end, '[]') WITH &&)
);
COMMENT ON TABLE @extschema@.quota_period IS
    'Accounting periods with a sliding-window quota (RWTH): whole months, first day to last day, never overlapping per account';
COMMENT ON COLUMN @extschema@.quota_period.period_end IS 'Last day of the period (inclusive), e.g. 2012-06-30';
COMMENT ON COLUMN @extschema@.quota_period.cluster IS 'Charges on this cluster count; NULL: charges on every cluster';
COMMENT ON COLUMN @extschema@.quota_period.unit IS 'Charges in this unit count (the allowance''s unit)';

-- The allowance of each month of a period. The composite foreign key repeats the period's
-- bounds so that "month inside the period" is a plain CHECK, kept true by ON UPDATE CASCADE
-- when a period is shortened or moved (the CHECK then refuses the change).
CREATE TABLE @extschema@.monthly_allowance (
    account      text NOT NULL,
    period_start date NOT NULL,
    period_end   date NOT NULL,
    month        date NOT NULL,
    allowance    float8 NOT NULL,
    PRIMARY KEY (account, month),
    FOREIGN KEY (account, period_start, period_end)
        REFERENCES @extschema@.quota_period (account, period_start, period_end) ON UPDATE CASCADE ON DELETE CASCADE,
    CONSTRAINT monthly_allowance_first_of_month CHECK (pg_catalog.date_part('day', month::timestamp) = 1),
    CONSTRAINT monthly_allowance_in_period CHECK (month >= period_start AND month <= period_end),
    -- 'NaN' sorts above 'Infinity' in PostgreSQL, so this refuses NaN too; 2^53 as the core.
    CONSTRAINT monthly_allowance_amount CHECK (allowance >= 0 AND allowance <= 9007199254740992)
);
COMMENT ON TABLE @extschema@.monthly_allowance IS
    'Allowance of each month of a quota period (core-hours or the period''s unit); a month without a row has 0';

SELECT pg_catalog.pg_extension_config_dump('@extschema@.quota_period', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.monthly_allowance', '');

-- A period with the same allowance in every month (change single months in
-- monthly_allowance afterwards).
CREATE FUNCTION @extschema@.add_quota_period(account text, period_start date, period_end date,
                                             monthly_allowance float8, cluster text DEFAULT NULL,
                                             unit text DEFAULT 'core-hours')
    RETURNS void
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $$
        INSERT INTO @extschema@.quota_period (account, period_start, period_end, cluster, unit)
        VALUES ($1, $2, $3, $5, $6);
        INSERT INTO @extschema@.monthly_allowance (account, period_start, period_end, month, allowance)
        SELECT $1, $2, $3, m.month::date, $4
        FROM pg_catalog.generate_series($2::timestamp, $3::timestamp, interval '1 month') AS m(month);
    $$;
COMMENT ON FUNCTION @extschema@.add_quota_period(text, date, date, float8, text, text) IS
    'Adds an accounting period (first day to last day of whole months) with the same allowance in every month';

-- The sliding-window quota of one account in the month containing `at`, with r_wlm_usage's
-- figures, as of that month: consumption of later months is not counted (for the current
-- month there is none; for a past month, the state is the one the account had then). The
-- period is the account's one containing `at`, else its latest one before, else its first
-- one after (outside its period an account has no quota: low_priority, figures 0). No row
-- when the account has no quota period.
CREATE FUNCTION @extschema@.window_quota_usage(
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

-- r_wlm_usage -q for every account with a quota period, this month (site time zone).
CREATE VIEW @extschema@.window_quota_usage AS
    SELECT u.account, u.period_start, u.period_end, u.month, u.state, u.monthly, u.remaining_prev,
           u.consumed_current, u.consumable_pct, u.consumable, u.cluster, u.unit
    FROM (SELECT DISTINCT p.account FROM @extschema@.quota_period p) a
    CROSS JOIN LATERAL @extschema@.window_quota_usage(
        a.account, @extschema@.site_today()) u;
COMMENT ON VIEW @extschema@.window_quota_usage IS
    'Sliding-window quota of every account with a quota period for the current month (site time zone), '
    'in r_wlm_usage -q''s terms';

-- For submit checks (HLRN issue): normal, low_priority (runs, counts) or blocked (refuse the
-- submission); NULL when the account has no quota period, i.e. no window rule applies.
CREATE FUNCTION @extschema@.window_quota_state(
        account text,
        at date DEFAULT @extschema@.site_today())
    RETURNS text
    LANGUAGE sql STABLE STRICT PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$ SELECT u.state FROM @extschema@.window_quota_usage($1, $2) u $$;
COMMENT ON FUNCTION @extschema@.window_quota_state(text, date) IS
    'Sliding-window state of an account at a date (default today, site time zone): normal, low_priority, '
    'blocked; NULL without a quota period';
-- ---------------------------------------------------------------------------------------
-- Fair share and usage reports (SPEC §5: Fermilab LQCD, Compute Canada).
--
-- A pool is where allocations and usage meet: a resource's charges count in its pool
-- (coalesce(resource.pool, resource.cluster)), an allocation row of the ledger (any kind
-- but charge) counts in the pool named by its `cluster`. A pool is further split by unit,
-- so a cluster with CPU and GPU partitions charged in different units has two pools.
-- Generation weights are rates: a resource row's rate holds the weight for its validity
-- range (a K20 hour costs 2 GPU-hours while the C2050 is the reference), and a new
-- reference year is a new row.
-- ---------------------------------------------------------------------------------------

-- ---- Settings ----------------------------------------------------------------------------

-- Every fair-share and report setting with its default. (hpcacct.setting only takes the
-- names of hpcacct.setting_catalog(); these live in their own table.)
CREATE FUNCTION @extschema@.fairshare_setting_catalog()
    RETURNS TABLE (name text, default_value text, description text)
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        VALUES ('decay', 'half_life',
                'Decay of usage in fairshare(): half_life (Slurm) or interval (Maui periods)'),
               ('half_life', '7 days', 'Half-life of usage for decay = half_life (an interval without months)'),
               ('period', '5 days', 'Fair-share period for decay = interval (LQCD: 5 days; an interval without months)'),
               ('period_decay', '0.8', 'Weight of each older period for decay = interval, between 0 and 1'),
               ('depth', '8', 'Number of periods counted for decay = interval, at least 1'),
               ('exhausted_factor', '0.01',
                'The fair-share factor of an account whose allocation for the year is used up is multiplied by this'),
               ('year_start_month', '1', 'First month of the allocation year for pools not in hpcacct.pool'),
               ('hours_per_year', '8760', 'Hours in a core-year or GPU-year (365 days of 24 hours)')
    $$;
COMMENT ON FUNCTION @extschema@.fairshare_setting_catalog() IS
    'Every fair-share and usage-report setting with its default and meaning';

CREATE TABLE @extschema@.fairshare_setting (
    name  text PRIMARY KEY,
    value text NOT NULL
);
COMMENT ON TABLE @extschema@.fairshare_setting IS
    'Fair-share and usage-report settings set by the administrator; unset ones take their default';

CREATE VIEW @extschema@.fairshare_settings AS
    SELECT c.name, coalesce(s.value, c.default_value) AS value,
           CASE WHEN s.value IS NULL THEN 'default' ELSE 'site' END AS source,
           c.description
    FROM @extschema@.fairshare_setting_catalog() c
    LEFT JOIN @extschema@.fairshare_setting s USING (name);
COMMENT ON VIEW @extschema@.fairshare_settings IS
    'Every fair-share and usage-report setting with its effective value and where it comes from';

CREATE FUNCTION @extschema@.fairshare_setting_value(name text) RETURNS text
    LANGUAGE plpgsql STABLE PARALLEL SAFE  -- plan kept for the session, as setting_value()'s
    SET search_path = pg_catalog, pg_temp
    AS $$ BEGIN RETURN (SELECT s.value FROM @extschema@.fairshare_settings s WHERE s.name = $1); END $$;
COMMENT ON FUNCTION @extschema@.fairshare_setting_value(text) IS
    'Effective value of a fair-share or usage-report setting (NULL for an unknown name)';

-- Only known names, with values of the right kind.
CREATE FUNCTION @extschema@.check_fairshare_setting() RETURNS trigger
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
COMMENT ON FUNCTION @extschema@.check_fairshare_setting() IS
    'Trigger of hpcacct.fairshare_setting: refuses unknown names (42704) and malformed values (22023)';
CREATE TRIGGER check_fairshare_setting BEFORE INSERT OR UPDATE ON @extschema@.fairshare_setting
    FOR EACH ROW EXECUTE FUNCTION @extschema@.check_fairshare_setting();
-- The rollup's decayed sums depend on the half-life: changing it rebuilds them.
CREATE TRIGGER fairshare_setting_rebuilds_rollup AFTER INSERT OR UPDATE OR DELETE ON @extschema@.fairshare_setting
    FOR EACH ROW EXECUTE FUNCTION @extschema@.rebuild_rollup_trigger('half_life');

-- Pools that need settings of their own: the allocation year's first month (1 January at
-- HLRN and GENCI, 1 April at Compute Canada, 1 July at Fermilab LQCD).
CREATE TABLE @extschema@.pool (
    name             text PRIMARY KEY CHECK (name <> ''),
    year_start_month integer NOT NULL CHECK (year_start_month BETWEEN 1 AND 12),
    description      text
);
COMMENT ON TABLE @extschema@.pool IS
    'Allocation pools with their own allocation year (first month); other pools take setting year_start_month';
COMMENT ON COLUMN @extschema@.pool.name IS 'The pool: a resource''s pool (or cluster), an allocation''s ledger cluster';

-- Shares of users inside an account (all pools). Users not listed have 1 share, so users
-- share an account equally by default. Listing a user with shares 0 takes them out.
CREATE TABLE @extschema@.fairshare_user (
    account   text NOT NULL REFERENCES @extschema@.account,
    submitter text NOT NULL,
    shares    float8 NOT NULL DEFAULT 1 CHECK (shares >= 0 AND shares < 'Infinity'),
    PRIMARY KEY (account, submitter)
);
COMMENT ON TABLE @extschema@.fairshare_user IS
    'Users'' shares inside an account for fairshare() (default 1 each); lists users before their first job too';

SELECT pg_catalog.pg_extension_config_dump('@extschema@.fairshare_setting', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.pool', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.fairshare_user', '');

-- ---- Decayed usage: the aggregates ---------------------------------------------------------

-- Support functions. The state is `internal` (the core's flat 48- or 64-byte state in the
-- aggregate context; see src/pg/fairshare.cpp), so the combine functions are not strict,
-- and the transition functions are not strict so that a NULL argument is an error (22004)
-- rather than a row silently left out.
CREATE FUNCTION @extschema@.decayed_usage_transfn(internal, timestamptz, float8, timestamptz, interval)
    RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_decayed_usage_transfn' LANGUAGE c IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.decayed_usage_transfn(internal, timestamptz, float8, timestamptz, interval) IS
    'Transition function of hpcacct.decayed_usage (half-life form): adds one row';
CREATE FUNCTION @extschema@.decayed_usage_combinefn(internal, internal) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_decayed_usage_combinefn' LANGUAGE c IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.decayed_usage_combinefn(internal, internal) IS
    'Combine function of hpcacct.decayed_usage (half-life form): merges two partial states';
CREATE FUNCTION @extschema@.decayed_usage_serialfn(internal) RETURNS bytea
    AS 'MODULE_PATHNAME', 'hpcacct_decayed_usage_serialfn' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.decayed_usage_serialfn(internal) IS
    'Serial function of hpcacct.decayed_usage (half-life form): the 48 bytes of a partial state';
CREATE FUNCTION @extschema@.decayed_usage_deserialfn(bytea, internal) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_decayed_usage_deserialfn' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.decayed_usage_deserialfn(bytea, internal) IS
    'Deserial function of hpcacct.decayed_usage (half-life form): checks the size and validity of a state';
CREATE FUNCTION @extschema@.decayed_usage_finalfn(internal) RETURNS float8
    AS 'MODULE_PATHNAME', 'hpcacct_decayed_usage_finalfn' LANGUAGE c IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.decayed_usage_finalfn(internal) IS
    'Final function of hpcacct.decayed_usage (half-life form): the decayed usage, NULL without rows';

CREATE AGGREGATE @extschema@.decayed_usage(ts timestamptz, amount float8, at timestamptz, half_life interval) (
    SFUNC = @extschema@.decayed_usage_transfn,
    STYPE = internal,
    SSPACE = 48,
    FINALFUNC = @extschema@.decayed_usage_finalfn,
    COMBINEFUNC = @extschema@.decayed_usage_combinefn,
    SERIALFUNC = @extschema@.decayed_usage_serialfn,
    DESERIALFUNC = @extschema@.decayed_usage_deserialfn,
    PARALLEL = SAFE
);
COMMENT ON AGGREGATE @extschema@.decayed_usage(timestamptz, float8, timestamptz, interval) IS
    'Slurm-style decayed usage at at: sum of amount x 2^(-(at - ts) / half_life); rows after at count 0; '
    'NULL arguments, negative or non-finite amounts, non-positive half-lives or ones with months are errors';

CREATE FUNCTION @extschema@.decayed_usage_periods_transfn(internal, timestamptz, float8, timestamptz, interval,
                                                          float8, integer)
    RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_decayed_usage_periods_transfn' LANGUAGE c IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.decayed_usage_periods_transfn(internal, timestamptz, float8, timestamptz, interval,
                                                              float8, integer) IS
    'Transition function of hpcacct.decayed_usage (interval form): adds one row';
CREATE FUNCTION @extschema@.decayed_usage_periods_combinefn(internal, internal) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_decayed_usage_periods_combinefn' LANGUAGE c IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.decayed_usage_periods_combinefn(internal, internal) IS
    'Combine function of hpcacct.decayed_usage (interval form): merges two partial states';
CREATE FUNCTION @extschema@.decayed_usage_periods_serialfn(internal) RETURNS bytea
    AS 'MODULE_PATHNAME', 'hpcacct_decayed_usage_periods_serialfn' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.decayed_usage_periods_serialfn(internal) IS
    'Serial function of hpcacct.decayed_usage (interval form): the 64 bytes of a partial state';
CREATE FUNCTION @extschema@.decayed_usage_periods_deserialfn(bytea, internal) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_decayed_usage_periods_deserialfn' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.decayed_usage_periods_deserialfn(bytea, internal) IS
    'Deserial function of hpcacct.decayed_usage (interval form): checks the size and validity of a state';
CREATE FUNCTION @extschema@.decayed_usage_periods_finalfn(internal) RETURNS float8
    AS 'MODULE_PATHNAME', 'hpcacct_decayed_usage_periods_finalfn' LANGUAGE c IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.decayed_usage_periods_finalfn(internal) IS
    'Final function of hpcacct.decayed_usage (interval form): the decayed usage, NULL without rows';

CREATE AGGREGATE @extschema@.decayed_usage(ts timestamptz, amount float8, at timestamptz, period interval,
                                           decay float8, depth integer) (
    SFUNC = @extschema@.decayed_usage_periods_transfn,
    STYPE = internal,
    SSPACE = 64,
    FINALFUNC = @extschema@.decayed_usage_periods_finalfn,
    COMBINEFUNC = @extschema@.decayed_usage_periods_combinefn,
    SERIALFUNC = @extschema@.decayed_usage_periods_serialfn,
    DESERIALFUNC = @extschema@.decayed_usage_periods_deserialfn,
    PARALLEL = SAFE
);
COMMENT ON AGGREGATE @extschema@.decayed_usage(timestamptz, float8, timestamptz, interval, float8, integer) IS
    'Maui-style decayed usage at at: sum over periods i < depth of decay^i x usage of period i, where period i '
    'is (at - (i+1) x period, at - i x period]; rows after at or older than depth periods count 0';

CREATE FUNCTION @extschema@.fairshare_factor(usage float8, share float8) RETURNS float8
    AS 'MODULE_PATHNAME', 'hpcacct_fairshare_factor' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.fairshare_factor(float8, float8) IS
    'Slurm''s classic fair-share factor 2^(-usage / share) of a normalized usage and share; 0 when share is 0';

-- ---- Allocation years ---------------------------------------------------------------------

CREATE FUNCTION @extschema@.year_start_month(pool text) RETURNS integer
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT coalesce((SELECT p.year_start_month FROM @extschema@.pool p WHERE p.name = $1),
                        @extschema@.fairshare_setting_value('year_start_month')::integer)
    $$;
COMMENT ON FUNCTION @extschema@.year_start_month(text) IS
    'First month of a pool''s allocation year (hpcacct.pool, else setting year_start_month)';

-- The allocation year of a pool: the one named `for_year` (the calendar year it starts in),
-- or when `for_year` is NULL the one containing `at`. Bounds are midnights of the site time zone.
-- `upto` is `at` clamped to the year; elapsed = upto - starts (wall-clock time: maintenance
-- downtime does not stop it), length = ends - starts.
CREATE FUNCTION @extschema@.allocation_year(pool text, for_year integer DEFAULT NULL,
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
    'time zone, elapsed and total wall-clock time at at, and whether it is past, current or future';

-- ---- Usage reports ----------------------------------------------------------------------

-- The charges of each pool's allocation year up to `at`, pro rata by wall-clock time
-- (SPEC §0), from jobs that ended by `at`. One row per ledger charge row (reversals
-- included, so they cancel). Zero-length jobs charge nothing and are left out.
CREATE FUNCTION @extschema@.year_charges(for_year integer, at timestamptz)
    RETURNS TABLE (pool text, unit text, cluster text, partition text, account text, submitter text,
                   rate float8, job_start timestamptz, job_end timestamptz, charged numeric, amount numeric,
                   year integer, first_day date, last_day date, starts timestamptz, upto timestamptz,
                   elapsed interval, length interval, state text)
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        WITH years AS MATERIALIZED (
            SELECT p.pool, y.*
            FROM (SELECT DISTINCT coalesce(r.pool, r.cluster) AS pool FROM @extschema@.resource r) p
            CROSS JOIN LATERAL @extschema@.allocation_year(p.pool, $1, $2) y
        )
        SELECT y.pool, l.unit, r.cluster, r.partition, l.account, l.submitter, r.rate, l.job_start, l.job_end,
               l.amount, l.amount * @extschema@.period_share(l.job_start, l.job_end, y.starts, y.upto),
               y.year, y.first_day, y.last_day, y.starts, y.upto, y.elapsed, y.length, y.state
        FROM @extschema@.ledger l
        JOIN @extschema@.resource r USING (resource_id)
        JOIN years y ON y.pool = coalesce(r.pool, r.cluster)
        WHERE l.kind = 'charge' AND l.job_end <= $2
          AND l.job_end > y.starts AND l.job_start < y.upto AND l.job_end > l.job_start
    $$;
COMMENT ON FUNCTION @extschema@.year_charges(integer, timestamptz) IS
    'Charge rows attributed pro rata to each pool''s allocation year (named, or containing at) up to at, '
    'jobs ended by at; the building block of the usage reports';

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

-- Allocation of each account in each pool for the allocation year: every allocation row
-- of the ledger (grant, supplement, deposit, retraction, transfer, refund) in the pool,
-- pro rata by the days of its validity inside the year (a grant for the year counts whole,
-- a grant over two years by its days in each).
CREATE FUNCTION @extschema@.year_allocations(for_year integer, at timestamptz)
    RETURNS TABLE (pool text, unit text, account text, allocation numeric)
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        WITH years AS MATERIALIZED (
            SELECT p.pool, y.first_day, y.last_day
            FROM (SELECT DISTINCT l.cluster AS pool FROM @extschema@.ledger l
                  WHERE l.kind <> 'charge' AND l.cluster IS NOT NULL) p
            CROSS JOIN LATERAL @extschema@.allocation_year(p.pool, $1, $2) y
        )
        SELECT l.cluster, l.unit, l.account,
               sum(l.amount * greatest(0, least(l.valid_until, y.last_day) + 1 - greatest(l.valid_from, y.first_day))
                   / (l.valid_until + 1 - l.valid_from))
        FROM @extschema@.ledger l
        JOIN years y ON y.pool = l.cluster
        WHERE l.kind <> 'charge'
          AND l.valid_from <= y.last_day AND l.valid_until >= y.first_day
        GROUP BY l.cluster, l.unit, l.account
    $$;
COMMENT ON FUNCTION @extschema@.year_allocations(integer, timestamptz) IS
    'Allocation of each account in each pool (ledger cluster) and unit for the allocation year, '
    'allocation rows pro rata by their days of validity inside it';

-- Usage by resource (cluster and partition) for the allocation year.
CREATE FUNCTION @extschema@.usage_by_resource(for_year integer DEFAULT NULL, at timestamptz DEFAULT pg_catalog.now())
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
CREATE FUNCTION @extschema@.usage_by_account(for_year integer DEFAULT NULL, at timestamptz DEFAULT pg_catalog.now())
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
CREATE FUNCTION @extschema@.usage_by_submitter(for_year integer DEFAULT NULL, at timestamptz DEFAULT pg_catalog.now())
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
CREATE FUNCTION @extschema@.usage_by_month(for_year integer DEFAULT NULL, at timestamptz DEFAULT pg_catalog.now())
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

-- The current allocation year (of each pool) as views; the functions give any year.
CREATE VIEW @extschema@.usage_by_resource AS SELECT * FROM @extschema@.usage_by_resource(NULL, pg_catalog.now());
COMMENT ON VIEW @extschema@.usage_by_resource IS
    'Usage per cluster and partition in the current allocation year, with projection (usage_by_resource(year, at) for others)';
CREATE VIEW @extschema@.usage_by_account AS SELECT * FROM @extschema@.usage_by_account(NULL, pg_catalog.now());
COMMENT ON VIEW @extschema@.usage_by_account IS
    'Allocation, usage, utilization and projection per account and pool in the current allocation year';
CREATE VIEW @extschema@.usage_by_submitter AS SELECT * FROM @extschema@.usage_by_submitter(NULL, pg_catalog.now());
COMMENT ON VIEW @extschema@.usage_by_submitter IS
    'Usage and projection per submitter inside each account and pool in the current allocation year';
CREATE VIEW @extschema@.usage_by_month AS SELECT * FROM @extschema@.usage_by_month(NULL, pg_catalog.now());
COMMENT ON VIEW @extschema@.usage_by_month IS
    'Monthly usage per pool, resource, account and submitter in the current allocation year';

-- ---- Fair share ---------------------------------------------------------------------------

-- Per pool (and unit) and account, and per user inside each account:
--   share       = account's allocation valid at `at` / the pool's total (users: the account's
--                 share divided by their shares, equal by default)
--   usage       = decayed usage at `at` (setting decay: half_life or interval); each job's
--                 net charge dated at its end, jobs that ended after `at` not counted
--   norm_usage  = usage / the pool's total decayed usage
--   factor      = 2^(-norm_usage / share), times exhausted_factor when the account's usage in
--                 the allocation year containing `at` has reached its allocation for it
CREATE FUNCTION @extschema@.fairshare_all(at timestamptz DEFAULT pg_catalog.now())
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
-- ---------------------------------------------------------------------------------------
-- The quarterly bank, HLRN (SPEC §4): users, members, deposits per quarter, balances,
-- the quarter-start run and the submit check.
-- ---------------------------------------------------------------------------------------

CREATE TABLE @extschema@.hpc_user (
    username        text PRIMARY KEY CHECK (username <> ''),
    default_account text REFERENCES @extschema@.account,
    created_at      timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE @extschema@.hpc_user IS
    'Users of the bank; default_account NULL means the personal account (named after the user)';

CREATE TABLE @extschema@.membership (
    account  text NOT NULL REFERENCES @extschema@.account,
    username text NOT NULL REFERENCES @extschema@.hpc_user,
    role     text NOT NULL DEFAULT 'member' CHECK (role IN ('admin', 'member')),
    added_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (account, username)
);
CREATE INDEX membership_user ON @extschema@.membership (username);
COMMENT ON TABLE @extschema@.membership IS
    'Who may charge an account (member) and manage its members (admin, the project administrator)';

-- What each quarter-start run did; its unique key makes the run idempotent.
CREATE TABLE @extschema@.quarter_log (
    quarter        date NOT NULL,
    account        text NOT NULL,
    action         text NOT NULL CHECK (action IN ('top_up', 'expired', 'deleted', 'default_reset')),
    target_quarter date NOT NULL,
    amount         numeric(20, 6),
    username       text,
    done_at        timestamptz NOT NULL DEFAULT pg_catalog.statement_timestamp(),
    -- once per quarter, account, action and target quarter (and user, for a default reset)
    CONSTRAINT quarter_log_once UNIQUE NULLS NOT DISTINCT (quarter, account, action, target_quarter, username)
);
COMMENT ON TABLE @extschema@.quarter_log IS
    'What open_quarter did: top-ups (per target quarter), expiries, deletions, default-project resets';

-- Jobs a site records as queued, for recheck_queued().
CREATE TABLE @extschema@.pending_job (
    cluster      text NOT NULL,
    jobid        text NOT NULL,
    username     text NOT NULL,
    account      text,
    submitted_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    held         boolean NOT NULL DEFAULT false,
    hold_reason  text,
    checked_at   timestamptz,
    PRIMARY KEY (cluster, jobid)
);
COMMENT ON TABLE @extschema@.pending_job IS
    'Queued jobs as the site records them; recheck_queued() holds those whose account became invalid';

CREATE INDEX ledger_bank ON @extschema@.ledger (account, valid_from) WHERE kind IN ('deposit', 'transfer', 'refund');

SELECT pg_catalog.pg_extension_config_dump('@extschema@.hpc_user', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.membership', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.quarter_log', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.pending_job', '');

-- ---- quarters ------------------------------------------------------------------------

CREATE FUNCTION @extschema@.quarter_start(day date) RETURNS date
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN pg_catalog.date_trunc('quarter', day::timestamp)::date;
COMMENT ON FUNCTION @extschema@.quarter_start(date) IS 'First day of the calendar quarter containing a day';

-- ---- the balance aggregate -------------------------------------------------------------

CREATE TYPE @extschema@.bank_balance AS (
    quarter_start date,
    deposits      float8,
    charges       float8,
    transfers     float8,
    refunds       float8,
    balance       float8
);
COMMENT ON TYPE @extschema@.bank_balance IS
    'An account''s quarter: deposits, charges, transfers (signed), refunds and balance';

CREATE FUNCTION @extschema@.quarter_balance_transfn(internal, text, date, float8, date) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_quarter_balance_transfn' LANGUAGE c CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION @extschema@.quarter_balance_combinefn(internal, internal) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_quarter_balance_combinefn' LANGUAGE c CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION @extschema@.quarter_balance_serialfn(internal) RETURNS bytea
    AS 'MODULE_PATHNAME', 'hpcacct_quarter_balance_serialfn' LANGUAGE c STRICT PARALLEL SAFE;
CREATE FUNCTION @extschema@.quarter_balance_deserialfn(bytea, internal) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_quarter_balance_deserialfn' LANGUAGE c STRICT PARALLEL SAFE;
CREATE FUNCTION @extschema@.quarter_balance_finalfn(internal) RETURNS @extschema@.bank_balance
    AS 'MODULE_PATHNAME', 'hpcacct_quarter_balance_finalfn' LANGUAGE c CALLED ON NULL INPUT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.quarter_balance_transfn(internal, text, date, float8, date) IS
    'Support function of the aggregate quarter_balance';
COMMENT ON FUNCTION @extschema@.quarter_balance_combinefn(internal, internal) IS
    'Support function of the aggregate quarter_balance';
COMMENT ON FUNCTION @extschema@.quarter_balance_serialfn(internal) IS
    'Support function of the aggregate quarter_balance';
COMMENT ON FUNCTION @extschema@.quarter_balance_deserialfn(bytea, internal) IS
    'Support function of the aggregate quarter_balance';
COMMENT ON FUNCTION @extschema@.quarter_balance_finalfn(internal) IS
    'Support function of the aggregate quarter_balance';

CREATE AGGREGATE @extschema@.quarter_balance(kind text, quarter date, amount float8, at date) (
    SFUNC = @extschema@.quarter_balance_transfn,
    STYPE = internal,
    SSPACE = 80,
    FINALFUNC = @extschema@.quarter_balance_finalfn,
    COMBINEFUNC = @extschema@.quarter_balance_combinefn,
    SERIALFUNC = @extschema@.quarter_balance_serialfn,
    DESERIALFUNC = @extschema@.quarter_balance_deserialfn,
    PARALLEL = SAFE
);
COMMENT ON AGGREGATE @extschema@.quarter_balance(text, date, float8, date) IS
    'Balance of the quarter containing at, over bank entries (kind deposit/charge/transfer/refund, the quarter '
    'each counts in, amount); entries of other quarters do not count (credits do not carry over)';

-- Bank entries in the bank's unit, each in the quarter it counts in: deposits, transfers and
-- refunds in the quarter of valid_from; charges split pro rata over the quarters (site time
-- zone) in which the job ran.
CREATE VIEW @extschema@.bank_entry AS
    SELECT l.entry_id, l.account, l.kind, @extschema@.quarter_start(l.valid_from) AS quarter, l.amount
    FROM @extschema@.ledger l
    WHERE l.kind IN ('deposit', 'transfer', 'refund')
      AND l.unit = (SELECT @extschema@.setting_value('bank_unit'))
    UNION ALL
    SELECT l.entry_id, l.account, l.kind, q.quarter::date,
           l.amount * @extschema@.period_share(l.job_start, l.job_end,
                                               q.quarter AT TIME ZONE z.tz,
                                               (q.quarter + interval '3 months') AT TIME ZONE z.tz)
    FROM @extschema@.ledger l
    CROSS JOIN (SELECT (SELECT @extschema@.site_timezone()) AS tz) z  -- once per query
    CROSS JOIN LATERAL pg_catalog.generate_series(
        pg_catalog.date_trunc('quarter', l.job_start AT TIME ZONE z.tz),
        pg_catalog.date_trunc('quarter', l.job_end AT TIME ZONE z.tz),
        interval '3 months') AS q(quarter)
    WHERE l.kind = 'charge'
      AND l.unit = (SELECT @extschema@.setting_value('bank_unit'))
      AND (q.quarter < l.job_end AT TIME ZONE z.tz OR l.job_end = l.job_start);
COMMENT ON VIEW @extschema@.bank_entry IS
    'Ledger entries in the bank unit, each attributed to the quarter it counts in (charges pro rata)';

-- State of an account at a day: deleted (personal accounts, for good), active while it has
-- an allocation (deposits and transfers adding up to more than zero) for the day's quarter
-- or a later one, otherwise expired.
CREATE FUNCTION @extschema@.account_state(account text, at date DEFAULT @extschema@.site_today())
    RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT CASE
            WHEN a.name IS NULL THEN NULL
            WHEN a.deleted_in IS NOT NULL AND a.deleted_in <= at THEN 'deleted'
            WHEN EXISTS (SELECT 1 FROM @extschema@.ledger l
                         WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer')
                           AND l.unit = (SELECT @extschema@.setting_value('bank_unit'))
                           AND l.valid_from >= @extschema@.quarter_start(at)
                         GROUP BY @extschema@.quarter_start(l.valid_from)
                         HAVING sum(l.amount) > 0) THEN 'active'
            ELSE 'expired'
        END
        FROM (SELECT 1) one
        LEFT JOIN @extschema@.account a ON a.name = account_state.account
    $$;
COMMENT ON FUNCTION @extschema@.account_state(text, date) IS
    'active (an allocation this quarter or later), expired, or deleted; NULL for an unknown account';

-- Exact balance of an account in the quarter containing `at` (numeric, from the ledger).
CREATE FUNCTION @extschema@.balance(account text, at date DEFAULT @extschema@.site_today())
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

-- One row per account and quarter with entries: what a portal shows.
CREATE VIEW @extschema@.quarter_balances AS
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

-- ---- deposits, transfers, refunds ----------------------------------------------------

CREATE FUNCTION @extschema@.require_bank_account(account text) RETURNS void
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
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

CREATE FUNCTION @extschema@.require_amount(amount numeric) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF amount IS NULL OR amount = 'NaN' OR amount <= 0 THEN
            RAISE EXCEPTION 'amount must be a positive number, not %', coalesce(amount::text, 'NULL')
                USING ERRCODE = 'numeric_value_out_of_range';
        END IF;
    END
    $$;
COMMENT ON FUNCTION @extschema@.require_amount(numeric) IS 'Raises unless the amount is a positive number';

CREATE FUNCTION @extschema@.book_allocation(account text, kind text, quarter date, amount numeric, note text)
    RETURNS bigint
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        q constant date := @extschema@.quarter_start(quarter);
        entry bigint;
    BEGIN
        IF quarter IS NULL OR NOT isfinite(quarter) THEN
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

CREATE FUNCTION @extschema@.deposit(account text, quarter date, amount numeric, note text DEFAULT NULL)
    RETURNS bigint
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM @extschema@.require_bank_account(account);
        PERFORM @extschema@.require_amount(amount);
        RETURN @extschema@.book_allocation(account, 'deposit', quarter, amount, note);
    END
    $$;
COMMENT ON FUNCTION @extschema@.deposit(text, date, numeric, text) IS
    'Deposits credits into an account for the quarter containing a day; returns the ledger entry';

CREATE FUNCTION @extschema@.refund(account text, quarter date, amount numeric, note text DEFAULT NULL)
    RETURNS bigint
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM @extschema@.require_bank_account(account);
        PERFORM @extschema@.require_amount(amount);
        RETURN @extschema@.book_allocation(account, 'refund', quarter, amount, note);
    END
    $$;
COMMENT ON FUNCTION @extschema@.refund(text, date, numeric, text) IS
    'Gives credits back to an account in the quarter containing a day (e.g. for a failed job)';

-- Staff move allocation between quarters and between accounts: two ledger rows.
CREATE FUNCTION @extschema@.transfer(from_account text, from_quarter date, to_account text, to_quarter date,
                                     amount numeric, note text DEFAULT NULL)
    RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM @extschema@.require_bank_account(from_account);
        PERFORM @extschema@.require_bank_account(to_account);
        PERFORM @extschema@.require_amount(amount);
        IF from_account = to_account AND @extschema@.quarter_start(from_quarter) = @extschema@.quarter_start(to_quarter) THEN
            RAISE EXCEPTION 'a transfer needs a different account or quarter' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        PERFORM @extschema@.book_allocation(from_account, 'transfer', from_quarter, -amount, note);
        PERFORM @extschema@.book_allocation(to_account, 'transfer', to_quarter, amount, note);
    END
    $$;
COMMENT ON FUNCTION @extschema@.transfer(text, date, text, date, numeric, text) IS
    'Moves allocation from one account and quarter to another (staff); two ledger rows';

-- Tops an account up to `target` in a quarter: deposits only what is missing, never twice.
CREATE FUNCTION @extschema@.top_up(account text, quarter date, target numeric) RETURNS numeric
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        q constant date := @extschema@.quarter_start(quarter);
        missing numeric;
    BEGIN
        SELECT target - coalesce(sum(l.amount), 0) INTO missing
        FROM @extschema@.ledger l
        WHERE l.account = top_up.account AND l.kind = 'deposit' AND l.valid_from = q
          AND l.unit = (SELECT @extschema@.setting_value('bank_unit'));
        IF missing > 0 THEN
            PERFORM @extschema@.book_allocation(account, 'deposit', q, missing, 'personal allotment');
            RETURN missing;
        END IF;
        RETURN 0;
    END
    $$;
COMMENT ON FUNCTION @extschema@.top_up(text, date, numeric) IS
    'Deposits what an account lacks to reach a target in a quarter; returns the amount deposited';

CREATE FUNCTION @extschema@.personal_allotment(account text) RETURNS numeric
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT coalesce(a.personal_allotment, @extschema@.setting_value('personal_allotment')::numeric)
        FROM @extschema@.account a WHERE a.name = account
    $$;
COMMENT ON FUNCTION @extschema@.personal_allotment(text) IS 'Credits per quarter a personal account is topped up to';

-- A personal allotment may be raised on request, up to double the setting.
CREATE FUNCTION @extschema@.check_personal_allotment() RETURNS trigger
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
COMMENT ON FUNCTION @extschema@.check_personal_allotment() IS 'Trigger: a personal allotment is at most double the setting';
CREATE TRIGGER check_personal_allotment BEFORE INSERT OR UPDATE OF personal_allotment ON @extschema@.account
    FOR EACH ROW WHEN (NEW.personal_allotment IS NOT NULL)
    EXECUTE FUNCTION @extschema@.check_personal_allotment();

-- ---- users and members ---------------------------------------------------------------

-- A new user gets a personal account named after them, holding the allotment for the
-- current and the two following quarters.
CREATE FUNCTION @extschema@.add_user(username text, at date DEFAULT @extschema@.site_today()) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        q date := @extschema@.quarter_start(at);
    BEGIN
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
    'Creates a user with a personal account holding the allotment for this and the next two quarters';

CREATE FUNCTION @extschema@.require_admin(account text, by_user text) RETURNS void
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
COMMENT ON FUNCTION @extschema@.require_admin(text, text) IS
    'Raises unless by_user administers the account (NULL: staff acting directly)';

-- Project administrators (by_user) add members and other administrators; staff pass NULL.
CREATE FUNCTION @extschema@.add_member(account text, username text, role text DEFAULT 'member',
                                       by_user text DEFAULT NULL)
    RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
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
    'Grants a user access to an account as member or admin; by_user must administer it (NULL: staff)';

CREATE FUNCTION @extschema@.remove_member(account text, username text, by_user text DEFAULT NULL)
    RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM @extschema@.require_admin(account, by_user);
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
    'Removes a user''s access to an account (not its last administrator); resets their default project if it was this';

CREATE FUNCTION @extschema@.set_default_project(username text, account text) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
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

-- ---- the quarter-start run -----------------------------------------------------------

-- At the start of quarter q (any day of it names it):
--  1. personal accounts of members of active projects are topped up to their allotment for
--     q and the two following quarters (never deposited twice);
--  2. personal accounts with no allocation for q expire;
--  3. those that also expired in the previous quarter are deleted, for good;
--  4. default projects pointing to expired or deleted accounts are reset to the personal one.
-- Everything is logged in quarter_log; a second run for the same quarter changes nothing.
CREATE PROCEDURE @extschema@.open_quarter(q date)
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
COMMENT ON PROCEDURE @extschema@.open_quarter(date) IS
    'Quarter start (HLRN): top up personal accounts, expire and delete them, reset default projects; idempotent';

-- ---- submit checks ---------------------------------------------------------------------

-- Resolves the account a job is charged to and says whether it may be submitted:
-- reason is NULL when ok, else one of unknown_user, unknown_account, account_deleted,
-- no_access, account_expired, negative_balance, quota_blocked; message says it in words.
CREATE TYPE @extschema@.submit_decision AS (ok boolean, account text, reason text, message text);
COMMENT ON TYPE @extschema@.submit_decision IS 'Result of check_submit: may the job run, on which account, and why not';

CREATE FUNCTION @extschema@.check_submit(username text, account text DEFAULT NULL,
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

-- Re-checks queued jobs and holds those whose account became invalid (HLRN's SystemHold).
-- Returns the jobs it held with the reason; held jobs stay held until the site releases them.
CREATE FUNCTION @extschema@.recheck_queued(at date DEFAULT @extschema@.site_today())
    RETURNS TABLE (cluster text, jobid text, reason text, message text)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        RETURN QUERY
        WITH checked AS (
            SELECT p.cluster, p.jobid, c.ok, c.reason, c.message
            FROM @extschema@.pending_job p
            CROSS JOIN LATERAL @extschema@.check_submit(p.username, p.account, at) c
            WHERE NOT p.held
            FOR UPDATE OF p
        ), held AS (
            UPDATE @extschema@.pending_job p
            SET held = NOT c.ok, hold_reason = c.message, checked_at = pg_catalog.now()
            FROM checked c
            WHERE p.cluster = c.cluster AND p.jobid = c.jobid
            RETURNING p.cluster, p.jobid, c.ok, c.reason, c.message
        )
        SELECT h.cluster, h.jobid, h.reason, h.message FROM held h WHERE NOT h.ok ORDER BY 1, 2;
    END
    $$;
COMMENT ON FUNCTION @extschema@.recheck_queued(date) IS
    'Holds queued jobs whose account became invalid, with the reason; returns them';
-- ---------------------------------------------------------------------------------------
-- Privileges and row-level security.
--
-- Three roles, created by CALL hpcacct.setup_roles() (or by the site, with these names):
--   hpcacct_admin   runs the centre: every table, every function and procedure;
--   hpcacct_ingest  loads jobs: INSERT into hpcacct.job, nothing else (the charging trigger
--                   books the ledger with the extension owner's rights);
--   hpcacct_portal  reads every table and view, but sees only the rows of accounts its
--                   session user is a member of (row-level security).
-- Administrative functions and procedures are not executable by PUBLIC.
-- ---------------------------------------------------------------------------------------

-- The accounts the session's user is a member of. SECURITY DEFINER so that policies can ask
-- without membership's own policy recursing.
CREATE FUNCTION @extschema@.visible_accounts() RETURNS text[]
    LANGUAGE sql STABLE SECURITY DEFINER PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT coalesce(pg_catalog.array_agg(m.account), '{}')
        FROM @extschema@.membership m WHERE m.username = pg_catalog.session_user()
    $$;
COMMENT ON FUNCTION @extschema@.visible_accounts() IS
    'Accounts the session user is a member of: what row-level security lets a portal role see';

-- Whether the current role sees every row: superusers and members of hpcacct_admin.
CREATE FUNCTION @extschema@.sees_all_accounts() RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                       WHERE r.rolname = 'hpcacct_admin'
                         AND pg_catalog.pg_has_role(pg_catalog.current_user(), r.oid, 'MEMBER'))
               OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = pg_catalog.current_user())
    $$;
COMMENT ON FUNCTION @extschema@.sees_all_accounts() IS
    'True for superusers and members of hpcacct_admin, who see every account''s rows';

-- The charging trigger books the ledger for whoever inserts jobs (hpcacct_ingest has no
-- right on the ledger itself). Its search_path is pinned and everything it calls qualified.
ALTER FUNCTION @extschema@.charge_jobs() SECURITY DEFINER;

-- Views run with the privileges and row-level security of the role that queries them.
DO $$
DECLARE
    v regclass;
BEGIN
    FOR v IN SELECT c.oid FROM pg_catalog.pg_class c
             WHERE c.relnamespace = '@extschema@'::regnamespace AND c.relkind = 'v' LOOP
        EXECUTE pg_catalog.format('ALTER VIEW %s SET (security_invoker = true)', v);
    END LOOP;
END
$$;

-- Row-level security on a table that names an account (or a user): reading is restricted,
-- writing is governed by the table privileges alone. The functions are called through
-- scalar subqueries, so that a query evaluates them once, not per row. Tables without such
-- a column (resources, settings, machines, pools) are reference data and left alone.
CREATE FUNCTION @extschema@.protect_table(target regclass) RETURNS boolean
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
                THEN 'name = ANY ((SELECT @extschema@.visible_accounts())::text[])'
            WHEN has_account AND has_username
                THEN 'account = ANY ((SELECT @extschema@.visible_accounts())::text[]) OR username = session_user'
            WHEN has_account
                THEN 'account = ANY ((SELECT @extschema@.visible_accounts())::text[])'
            WHEN has_username
                THEN 'username = session_user'
        END;
        IF visible IS NULL THEN
            RETURN false;
        END IF;
        EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', target);
        EXECUTE format('CREATE POLICY member_rows ON %s FOR SELECT USING ((SELECT @extschema@.sees_all_accounts()) OR %s)',
                       target, visible);
        EXECUTE format('CREATE POLICY insert_rows ON %s FOR INSERT WITH CHECK (true)', target);
        EXECUTE format('CREATE POLICY update_rows ON %s FOR UPDATE USING (true) WITH CHECK (true)', target);
        EXECUTE format('CREATE POLICY delete_rows ON %s FOR DELETE USING (true)', target);
        RETURN true;
    END
    $$;
COMMENT ON FUNCTION @extschema@.protect_table(regclass) IS
    'Row-level security for a table with an account or username column: portal users see their accounts'' rows';

SELECT count(*) FILTER (WHERE @extschema@.protect_table(c.oid)) AS protected_tables
FROM pg_catalog.pg_class c
WHERE c.relnamespace = '@extschema@'::regnamespace AND c.relkind = 'r';

-- Creates the three roles if they do not exist yet and grants them their privileges. Run it
-- after create_job_table(), and again after adding tables of your own to the schema.
CREATE PROCEDURE @extschema@.setup_roles()
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
    END
    $$;
REVOKE EXECUTE ON PROCEDURE @extschema@.setup_roles() FROM PUBLIC;
COMMENT ON PROCEDURE @extschema@.setup_roles() IS
    'Creates hpcacct_admin, hpcacct_ingest and hpcacct_portal if missing and grants their privileges';

-- A share is an account's fraction of its pool, so computing one account's factor needs
-- every account's usage, which row-level security hides from a portal user. fairshare()
-- therefore computes as the owner (fairshare_all) and returns the rows of the accounts the
-- session user is a member of, or every row to superusers and members of hpcacct_admin.
CREATE FUNCTION @extschema@.fairshare(at timestamptz DEFAULT pg_catalog.now())
    RETURNS TABLE (pool text, unit text, account text, submitter text, allocation numeric, share float8,
                   usage float8, norm_usage float8, year_usage numeric, exhausted boolean, factor float8)
    LANGUAGE sql STABLE SECURITY DEFINER PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT f.*
        FROM @extschema@.fairshare_all(at) f
        WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                      WHERE (r.rolname = 'hpcacct_admin' AND pg_catalog.pg_has_role(pg_catalog.session_user(), r.oid, 'MEMBER'))
                         OR (r.rolname = pg_catalog.session_user() AND r.rolsuper))
           OR f.account = ANY (@extschema@.visible_accounts())
    $$;
COMMENT ON FUNCTION @extschema@.fairshare(timestamptz) IS
    'Fair-share table per pool, account and user (see fairshare_all), limited to the session user''s accounts '
    'unless they administer the site';

-- Administrative functions: not for PUBLIC (setup_roles grants them to hpcacct_admin).
-- charge_jobs() among them: it writes the ledger with the owner's rights, so whoever may
-- attach it to a table of their own could book or reverse charges of any account.
REVOKE EXECUTE ON FUNCTION
    @extschema@.deposit(text, date, numeric, text),
    @extschema@.refund(text, date, numeric, text),
    @extschema@.transfer(text, date, text, date, numeric, text),
    @extschema@.top_up(text, date, numeric),
    @extschema@.book_allocation(text, text, date, numeric, text),
    @extschema@.add_user(text, date),
    @extschema@.add_member(text, text, text, text),
    @extschema@.remove_member(text, text, text),
    @extschema@.set_default_project(text, text),
    @extschema@.recheck_queued(date),
    @extschema@.attach_charging(regclass, text[]),
    @extschema@.charge_jobs(),
    @extschema@.create_job_table(text),
    @extschema@.protect_table(regclass),
    @extschema@.fairshare_all(timestamptz),
    @extschema@.add_quota_period(text, date, date, float8, text, text),
    @extschema@.rebuild_rollup(),
    @extschema@.compact_rollup()
    FROM PUBLIC;
REVOKE EXECUTE ON PROCEDURE @extschema@.open_quarter(date), @extschema@.regulate(date) FROM PUBLIC;
