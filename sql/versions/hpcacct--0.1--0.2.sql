-- hpcacct 0.1 -> 0.2: every function of the extension has a comment; only administrators may
-- attach the charging trigger function (it writes the ledger with the owner's rights).

\echo Use "ALTER EXTENSION hpcacct UPDATE TO '0.2'" to load this file. \quit

COMMENT ON FUNCTION @extschema@.tres_in(cstring) IS 'Text input of tres: Slurm TRES syntax, validated';
COMMENT ON FUNCTION @extschema@.tres_out(@extschema@.tres) IS 'Canonical text of a tres: keys sorted, memory in the largest whole unit';
COMMENT ON FUNCTION @extschema@.tres_recv(internal) IS 'Binary input of tres, validated as text input is';
COMMENT ON FUNCTION @extschema@.tres_send(@extschema@.tres) IS 'Binary output of tres: count, then key and float8 value per component';
COMMENT ON FUNCTION @extschema@.tres_eq(@extschema@.tres, @extschema@.tres) IS 'Equality of canonical resource vectors (operator =)';
COMMENT ON FUNCTION @extschema@.tres_ne(@extschema@.tres, @extschema@.tres) IS 'Inequality of canonical resource vectors (operator <>)';
COMMENT ON FUNCTION @extschema@.tres_lt(@extschema@.tres, @extschema@.tres) IS 'Order of resource vectors by key, then value (operator <)';
COMMENT ON FUNCTION @extschema@.tres_le(@extschema@.tres, @extschema@.tres) IS 'Order of resource vectors by key, then value (operator <=)';
COMMENT ON FUNCTION @extschema@.tres_gt(@extschema@.tres, @extschema@.tres) IS 'Order of resource vectors by key, then value (operator >)';
COMMENT ON FUNCTION @extschema@.tres_ge(@extschema@.tres, @extschema@.tres) IS 'Order of resource vectors by key, then value (operator >=)';
COMMENT ON FUNCTION @extschema@.tres_cmp(@extschema@.tres, @extschema@.tres) IS 'Btree support: -1, 0 or 1 by key, then value';
COMMENT ON FUNCTION @extschema@.tres_hash(@extschema@.tres) IS 'Hash support: hash of the canonical form';
COMMENT ON FUNCTION @extschema@.tres_hash_extended(@extschema@.tres, bigint) IS 'Hash support: seeded 64-bit hash of the canonical form';
COMMENT ON FUNCTION @extschema@.check_setting() IS 'Trigger: only known settings, with values of the right kind';
COMMENT ON FUNCTION @extschema@.ledger_is_append_only() IS 'Trigger: refuses UPDATE, DELETE and TRUNCATE of the ledger (HA001)';
COMMENT ON FUNCTION @extschema@.job_columns(regclass, text[]) IS 'The columns charging reads from a job table, checked, from role=column pairs';
COMMENT ON FUNCTION @extschema@.check_personal_allotment() IS 'Trigger: a personal allotment is at most double the setting';

REVOKE EXECUTE ON FUNCTION @extschema@.charge_jobs() FROM PUBLIC;
