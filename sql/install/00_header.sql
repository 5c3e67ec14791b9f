-- hpcacct install script, assembled by the Makefile from sql/install/*.sql in name order.
-- Every object lives in schema hpcacct (@extschema@); everything the script calls is
-- schema-qualified, so that a hostile search_path cannot change what it creates.

\echo Use "CREATE EXTENSION hpcacct" to load this file. \quit
