-- ---------------------------------------------------------------------------------------
-- The site: settings, accounts and resources (node types / partitions with their rates).
-- ---------------------------------------------------------------------------------------

-- Every setting hpcacct knows, with its default and meaning.
-- A SQL-standard body (names bound at creation) without SET options, so that the planner
-- inlines it into the settings view, which every setting lookup (the time zone of today, at
-- every submit check) reads. Written "name (" as every BEGIN ATOMIC function: the update
-- script's final block cannot carry such a body, so the update script defines it once, in its
-- first section, as 0.4 has it: a change that adds a setting edits that definition too.
CREATE FUNCTION @extschema@.setting_catalog ()
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
               ('notify_order_wait', '1 hour',
                'How long a message to a mailbox waits, from when it was written, while an older one to the same '
                'mailbox is still to be delivered (retried), so that they arrive in the order written; 0: no wait'),
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
    AS $$
    BEGIN
        IF setting_value.name IS NULL THEN
            RAISE EXCEPTION 'setting_value: name must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        RETURN (SELECT s.value FROM @extschema@.settings s WHERE s.name = setting_value.name);
    END
    $$;
COMMENT ON FUNCTION @extschema@.setting_value(text) IS 'Effective value of a setting (a NULL name is an error, 22004)';

-- Only known settings, with values of the right kind.
CREATE FUNCTION hpcacct_internal.check_setting() RETURNS trigger
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
        -- (a zone's name, not an abbreviation, whose meaning is each session's
        -- timezone_abbreviations: IST is India's, Israel's or Ireland's)
        IF NEW.name = 'timezone'
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_names z WHERE z.name = NEW.value) THEN
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
                WHEN 'bank_unit' THEN NEW.value <> ''
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
                WHEN 'notify_order_wait' THEN NEW.value::interval >= interval '0'
                                              AND pg_catalog.date_part('month', NEW.value::interval) = 0
                                              AND pg_catalog.date_part('year', NEW.value::interval) = 0
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
        -- An interval is read by every session in its IntervalStyle: under sql_standard a leading
        -- minus applies to every field ('-1 26:00:00' is -50 hours there, 2 hours elsewhere).
        -- A value of these, never negative, has no need of one. (Checked last: a value negative
        -- here gets the error of a negative value above.)
        IF NEW.name IN ('max_job_length', 'half_life', 'period', 'notify_order_wait') AND NEW.value ~ '^\s*-' THEN
            RAISE EXCEPTION '% must not begin with a minus sign, not "%"', NEW.name, NEW.value
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'A session of IntervalStyle sql_standard reads a leading minus as applying to every field: '
                             'write the value without it, e.g. ''2 hours''.';
        END IF;
        RETURN NEW;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.check_setting() IS 'Trigger: only known settings, with values of the right kind';
CREATE TRIGGER check_setting BEFORE INSERT OR UPDATE ON @extschema@.setting
    FOR EACH ROW EXECUTE FUNCTION hpcacct_internal.check_setting();



CREATE TABLE @extschema@.account (
    name        text PRIMARY KEY CHECK (name <> ''),
    kind        text NOT NULL DEFAULT 'project' CHECK (kind IN ('personal', 'project', 'special')),
    description text,
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    -- quarterly bank (HLRN): a personal account's own allotment, and when it was deleted
    personal_allotment numeric CHECK (personal_allotment > 0),
    deleted_in  date,
    -- which submit rules bind the account (enforcement, issue 15); NULL: derived from what it has
    policies    text[] CHECK (policies OPERATOR(pg_catalog.<@) ARRAY['bank', 'window_quota', 'regulation']
                              AND pg_catalog.array_position(policies, NULL) IS NULL),
    CONSTRAINT account_allotment_is_personal CHECK (personal_allotment IS NULL OR kind = 'personal'),
    CONSTRAINT account_deleted_only_personal CHECK (deleted_in IS NULL OR kind = 'personal')
);
COMMENT ON TABLE @extschema@.account IS
    'Accounts (projects) that jobs are charged to: personal, project or special (staff)';


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
SELECT pg_catalog.pg_extension_config_dump('@extschema@.hpc_user', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.membership', '');

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
    CONSTRAINT resource_cluster_named CHECK (cluster <> ''),
    CONSTRAINT resource_partition_named CHECK (partition <> ''),
    CONSTRAINT resource_unit_named CHECK (unit <> ''),
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
COMMENT ON COLUMN @extschema@.account.policies IS
    'Submit rules that bind the account: bank, window_quota, regulation; {} none (staff); NULL derived (account_policies)';

SELECT pg_catalog.pg_extension_config_dump('@extschema@.account', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.resource', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.resource_resource_id_seq', '');

-- This database's place in a federation: one row, written by federation_publish() (the
-- centre, site 0) or federation_join() (a cluster site). Not replicated.
-- (Here, not with the rest of the federation: the centre's runs refuse to run at a site.)
CREATE TABLE @extschema@.federation_node (
    only_row  boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    site      integer NOT NULL CHECK (site BETWEEN 0 AND 32767),
    role      text NOT NULL CHECK (role IN ('centre', 'site')),
    joined_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT federation_node_centre_is_0 CHECK ((role = 'centre') = (site = 0))
);
COMMENT ON TABLE @extschema@.federation_node IS
    'This database''s place in a federation (one row): the centre (site 0) or a cluster site; not replicated';

SELECT pg_catalog.pg_extension_config_dump('@extschema@.federation_node', '');

-- A run that is the federation centre's (regulate(), open_quarter(), rerate_catch_up()) at a
-- cluster site: refused (HA013). The centre decides on every site's charges and what it books
-- reaches the sites; a site would decide on its own charges alone, whoever runs it (pg_cron
-- runs as a superuser, whom the site's ledger lets through).
CREATE FUNCTION hpcacct_internal.refuse_at_site(caller text) RETURNS void
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF EXISTS (SELECT 1 FROM @extschema@.federation_node n WHERE n.role = 'site') THEN
            RAISE EXCEPTION '%: this database is a federation site', caller
                USING ERRCODE = 'HA013',
                      HINT = 'Run it in the central database, which holds every site''s charges; what it books '
                             'reaches the sites.';
        END IF;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.refuse_at_site(text) IS
    'Refuses (HA013) a run that is the federation centre''s in a database that is a cluster site';
