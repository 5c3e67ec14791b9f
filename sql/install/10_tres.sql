-- ---------------------------------------------------------------------------------------
-- The resource vector type: Slurm's TRES syntax, e.g. 'cpu=4,gres/gpu=1,mem=16G,node=1'.
-- ---------------------------------------------------------------------------------------

CREATE TYPE @extschema@.tres;

CREATE FUNCTION hpcacct_internal.tres_in(cstring) RETURNS @extschema@.tres
    AS 'MODULE_PATHNAME', 'hpcacct_tres_in' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.tres_in(cstring) IS 'Text input of tres: Slurm TRES syntax, validated';
CREATE FUNCTION hpcacct_internal.tres_out(@extschema@.tres) RETURNS cstring
    AS 'MODULE_PATHNAME', 'hpcacct_tres_out' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.tres_out(@extschema@.tres) IS 'Canonical text of a tres: keys sorted, memory in the largest whole unit';
CREATE FUNCTION hpcacct_internal.tres_recv(internal) RETURNS @extschema@.tres
    AS 'MODULE_PATHNAME', 'hpcacct_tres_recv' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.tres_recv(internal) IS 'Binary input of tres, validated as text input is';
CREATE FUNCTION hpcacct_internal.tres_send(@extschema@.tres) RETURNS bytea
    AS 'MODULE_PATHNAME', 'hpcacct_tres_send' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.tres_send(@extschema@.tres) IS 'Binary output of tres: count, then key and float8 value per component';

CREATE TYPE @extschema@.tres (
    INPUT = hpcacct_internal.tres_in,
    OUTPUT = hpcacct_internal.tres_out,
    RECEIVE = hpcacct_internal.tres_recv,
    SEND = hpcacct_internal.tres_send,
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

CREATE FUNCTION hpcacct_internal.tres_add(@extschema@.tres, @extschema@.tres) RETURNS @extschema@.tres
    AS 'MODULE_PATHNAME', 'hpcacct_tres_add' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.tres_add(@extschema@.tres, @extschema@.tres) IS
    'Component-wise sum of two resource vectors';
CREATE OPERATOR @extschema@.+ (
    LEFTARG = @extschema@.tres, RIGHTARG = @extschema@.tres, FUNCTION = hpcacct_internal.tres_add,
    COMMUTATOR = OPERATOR(@extschema@.+)
);

CREATE FUNCTION hpcacct_internal.tres_mul(@extschema@.tres, float8) RETURNS @extschema@.tres
    AS 'MODULE_PATHNAME', 'hpcacct_tres_mul' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION hpcacct_internal.tres_mul(float8, @extschema@.tres) RETURNS @extschema@.tres
    AS 'MODULE_PATHNAME', 'hpcacct_tres_mul_left' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.tres_mul(@extschema@.tres, float8) IS
    'Resource vector scaled by a finite, non-negative number';
COMMENT ON FUNCTION hpcacct_internal.tres_mul(float8, @extschema@.tres) IS
    'Resource vector scaled by a finite, non-negative number';
CREATE OPERATOR @extschema@.* (
    LEFTARG = @extschema@.tres, RIGHTARG = float8, FUNCTION = hpcacct_internal.tres_mul,
    COMMUTATOR = OPERATOR(@extschema@.*)
);
CREATE OPERATOR @extschema@.* (
    LEFTARG = float8, RIGHTARG = @extschema@.tres, FUNCTION = hpcacct_internal.tres_mul,
    COMMUTATOR = OPERATOR(@extschema@.*)
);

CREATE AGGREGATE @extschema@.sum(@extschema@.tres) (
    SFUNC = hpcacct_internal.tres_add,
    STYPE = @extschema@.tres,
    COMBINEFUNC = hpcacct_internal.tres_add,
    PARALLEL = SAFE
);
COMMENT ON AGGREGATE @extschema@.sum(@extschema@.tres) IS 'Component-wise sum of resource vectors';

-- Equality is on the canonical form; the order (by key, then value) exists so that
-- tres values can be sorted, indexed with btree and used in GROUP BY or DISTINCT.
CREATE FUNCTION hpcacct_internal.tres_eq(@extschema@.tres, @extschema@.tres) RETURNS boolean
    AS 'MODULE_PATHNAME', 'hpcacct_tres_eq' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF;
COMMENT ON FUNCTION hpcacct_internal.tres_eq(@extschema@.tres, @extschema@.tres) IS 'Equality of canonical resource vectors (operator =)';
CREATE FUNCTION hpcacct_internal.tres_ne(@extschema@.tres, @extschema@.tres) RETURNS boolean
    AS 'MODULE_PATHNAME', 'hpcacct_tres_ne' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF;
COMMENT ON FUNCTION hpcacct_internal.tres_ne(@extschema@.tres, @extschema@.tres) IS 'Inequality of canonical resource vectors (operator <>)';
CREATE FUNCTION hpcacct_internal.tres_lt(@extschema@.tres, @extschema@.tres) RETURNS boolean
    AS 'MODULE_PATHNAME', 'hpcacct_tres_lt' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.tres_lt(@extschema@.tres, @extschema@.tres) IS 'Order of resource vectors by key, then value (operator <)';
CREATE FUNCTION hpcacct_internal.tres_le(@extschema@.tres, @extschema@.tres) RETURNS boolean
    AS 'MODULE_PATHNAME', 'hpcacct_tres_le' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.tres_le(@extschema@.tres, @extschema@.tres) IS 'Order of resource vectors by key, then value (operator <=)';
CREATE FUNCTION hpcacct_internal.tres_gt(@extschema@.tres, @extschema@.tres) RETURNS boolean
    AS 'MODULE_PATHNAME', 'hpcacct_tres_gt' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.tres_gt(@extschema@.tres, @extschema@.tres) IS 'Order of resource vectors by key, then value (operator >)';
CREATE FUNCTION hpcacct_internal.tres_ge(@extschema@.tres, @extschema@.tres) RETURNS boolean
    AS 'MODULE_PATHNAME', 'hpcacct_tres_ge' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.tres_ge(@extschema@.tres, @extschema@.tres) IS 'Order of resource vectors by key, then value (operator >=)';
CREATE FUNCTION hpcacct_internal.tres_cmp(@extschema@.tres, @extschema@.tres) RETURNS integer
    AS 'MODULE_PATHNAME', 'hpcacct_tres_cmp' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.tres_cmp(@extschema@.tres, @extschema@.tres) IS 'Btree support: -1, 0 or 1 by key, then value';
CREATE FUNCTION hpcacct_internal.tres_hash(@extschema@.tres) RETURNS integer
    AS 'MODULE_PATHNAME', 'hpcacct_tres_hash' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.tres_hash(@extschema@.tres) IS 'Hash support: hash of the canonical form';
CREATE FUNCTION hpcacct_internal.tres_hash_extended(@extschema@.tres, bigint) RETURNS bigint
    AS 'MODULE_PATHNAME', 'hpcacct_tres_hash_extended' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.tres_hash_extended(@extschema@.tres, bigint) IS 'Hash support: seeded 64-bit hash of the canonical form';

CREATE OPERATOR @extschema@.= (
    LEFTARG = @extschema@.tres, RIGHTARG = @extschema@.tres, FUNCTION = hpcacct_internal.tres_eq,
    COMMUTATOR = OPERATOR(@extschema@.=), NEGATOR = OPERATOR(@extschema@.<>),
    RESTRICT = pg_catalog.eqsel, JOIN = pg_catalog.eqjoinsel, HASHES, MERGES
);
CREATE OPERATOR @extschema@.<> (
    LEFTARG = @extschema@.tres, RIGHTARG = @extschema@.tres, FUNCTION = hpcacct_internal.tres_ne,
    COMMUTATOR = OPERATOR(@extschema@.<>), NEGATOR = OPERATOR(@extschema@.=),
    RESTRICT = pg_catalog.neqsel, JOIN = pg_catalog.neqjoinsel
);
CREATE OPERATOR @extschema@.< (
    LEFTARG = @extschema@.tres, RIGHTARG = @extschema@.tres, FUNCTION = hpcacct_internal.tres_lt,
    COMMUTATOR = OPERATOR(@extschema@.>), NEGATOR = OPERATOR(@extschema@.>=),
    RESTRICT = pg_catalog.scalarltsel, JOIN = pg_catalog.scalarltjoinsel
);
CREATE OPERATOR @extschema@.<= (
    LEFTARG = @extschema@.tres, RIGHTARG = @extschema@.tres, FUNCTION = hpcacct_internal.tres_le,
    COMMUTATOR = OPERATOR(@extschema@.>=), NEGATOR = OPERATOR(@extschema@.>),
    RESTRICT = pg_catalog.scalarlesel, JOIN = pg_catalog.scalarlejoinsel
);
CREATE OPERATOR @extschema@.> (
    LEFTARG = @extschema@.tres, RIGHTARG = @extschema@.tres, FUNCTION = hpcacct_internal.tres_gt,
    COMMUTATOR = OPERATOR(@extschema@.<), NEGATOR = OPERATOR(@extschema@.<=),
    RESTRICT = pg_catalog.scalargtsel, JOIN = pg_catalog.scalargtjoinsel
);
CREATE OPERATOR @extschema@.>= (
    LEFTARG = @extschema@.tres, RIGHTARG = @extschema@.tres, FUNCTION = hpcacct_internal.tres_ge,
    COMMUTATOR = OPERATOR(@extschema@.<=), NEGATOR = OPERATOR(@extschema@.<),
    RESTRICT = pg_catalog.scalargesel, JOIN = pg_catalog.scalargejoinsel
);

CREATE OPERATOR CLASS @extschema@.tres_ops DEFAULT FOR TYPE @extschema@.tres USING btree AS
    OPERATOR 1 @extschema@.<,
    OPERATOR 2 @extschema@.<=,
    OPERATOR 3 @extschema@.=,
    OPERATOR 4 @extschema@.>=,
    OPERATOR 5 @extschema@.>,
    FUNCTION 1 hpcacct_internal.tres_cmp(@extschema@.tres, @extschema@.tres);

CREATE OPERATOR CLASS @extschema@.tres_hash_ops DEFAULT FOR TYPE @extschema@.tres USING hash AS
    OPERATOR 1 @extschema@.=,
    FUNCTION 1 hpcacct_internal.tres_hash(@extschema@.tres),
    FUNCTION 2 hpcacct_internal.tres_hash_extended(@extschema@.tres, bigint);
