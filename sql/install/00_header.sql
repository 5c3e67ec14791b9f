-- hpcacct install script, assembled by the Makefile from sql/install/*.sql in name order.
-- Every object lives in schema hpcacct (@extschema@); everything the script calls is
-- schema-qualified, so that a hostile search_path cannot change what it creates.

\echo Use "CREATE EXTENSION hpcacct" to load this file. \quit

-- Functions a user never calls (trigger functions, the support functions of types, operators
-- and aggregates, argument checks and other building blocks) live in hpcacct_internal, out of
-- `\df hpcacct.*`. No PUBLIC usage: setup_roles() grants USAGE to the extension's roles,
-- whose functions look the helpers up by name when they run.
CREATE SCHEMA hpcacct_internal;
COMMENT ON SCHEMA hpcacct_internal IS
    'hpcacct''s internal functions: trigger, type, operator and aggregate support, argument checks and building blocks';
