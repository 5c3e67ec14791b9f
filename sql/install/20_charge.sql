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
