-- ---------------------------------------------------------------------------------------
-- Equivalents and charges (rules §0-§1).
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

-- Raw core-hours of a job: its cores (AllocTRES cpu) x wall-clock hours, unweighted and not
-- rounded to whole nodes, rounded to 6 decimals as charges are. A SQL-standard body without
-- SET options, so that charging inlines it. Elapsed time as charge() takes it: negative or
-- with a month part is 22023 (the helper runs only then); NULL gives NULL.
CREATE FUNCTION @extschema@.core_hours(alloc @extschema@.tres, elapsed interval) RETURNS numeric
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN elapsed >= interval '0' AND pg_catalog.date_trunc('month', elapsed) = interval '0'
                     OR elapsed IS NULL
                     OR hpcacct_internal.refuse_argument(elapsed, 'core_hours', 'elapsed')
                THEN pg_catalog.round((@extschema@.tres_get(alloc, 'cpu') * pg_catalog.date_part('epoch', elapsed) / 3600)::numeric, 6)
           END;
COMMENT ON FUNCTION @extschema@.core_hours(@extschema@.tres, interval) IS
    'Raw core-hours: AllocTRES cpu x wall-clock hours (unweighted), rounded to 6 decimals; a negative elapsed time '
    'or one with a month part is an error (22023), as for charge()';
