-- ---------------------------------------------------------------------------------------
-- The site: settings, accounts and resources (node types / partitions with their rates).
-- ---------------------------------------------------------------------------------------

-- Site settings the administrator has set; every setting has a default (see settings).
CREATE TABLE @extschema@.setting (
    name  text PRIMARY KEY CHECK (name IN ('timezone')),
    value text NOT NULL
);
COMMENT ON TABLE @extschema@.setting IS 'Site settings set by the administrator; unset ones take their default';

CREATE FUNCTION @extschema@.setting_default(name text) RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT CASE name
            -- the server's configured TimeZone, not the session's
            WHEN 'timezone' THEN (SELECT s.reset_val FROM pg_catalog.pg_settings s WHERE s.name = 'TimeZone')
        END
    $$;

CREATE VIEW @extschema@.settings AS
    SELECT d.name,
           coalesce(s.value, @extschema@.setting_default(d.name)) AS value,
           CASE WHEN s.value IS NULL THEN 'default' ELSE 'site' END AS source
    FROM (VALUES ('timezone')) AS d(name)
    LEFT JOIN @extschema@.setting s USING (name);
COMMENT ON VIEW @extschema@.settings IS 'Every setting with its effective value and where it comes from';

-- A time zone must be one PostgreSQL knows.
CREATE FUNCTION @extschema@.check_setting() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF NEW.name = 'timezone'
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_names z WHERE z.name = NEW.value)
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_abbrevs z WHERE z.abbrev = NEW.value) THEN
            RAISE EXCEPTION 'unknown time zone "%"', NEW.value
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Use a name from pg_timezone_names, e.g. Europe/Berlin.';
        END IF;
        RETURN NEW;
    END
    $$;
CREATE TRIGGER check_setting BEFORE INSERT OR UPDATE ON @extschema@.setting
    FOR EACH ROW EXECUTE FUNCTION @extschema@.check_setting();

CREATE TABLE @extschema@.account (
    name        text PRIMARY KEY CHECK (name <> ''),
    kind        text NOT NULL DEFAULT 'project' CHECK (kind IN ('personal', 'project', 'special')),
    description text,
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.now()
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
SELECT pg_catalog.pg_extension_config_dump('@extschema@.account', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.resource', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.resource_resource_id_seq', '');
