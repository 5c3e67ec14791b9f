-- The extension's catalog: every object says what it is, and the version installed is the one
-- the control file names.
BEGIN;
SELECT plan(12);

SELECT is((SELECT extversion FROM pg_extension WHERE extname = 'hpcacct'),
          (SELECT default_version FROM pg_available_extensions WHERE name = 'hpcacct'),
          'the installed version is the default version');
SELECT is_empty($$SELECT p.oid::regprocedure FROM pg_proc p
                  WHERE p.pronamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace) AND obj_description(p.oid, 'pg_proc') IS NULL$$,
                'every function, procedure and aggregate has a comment');
SELECT is_empty($$SELECT c.oid::regclass FROM pg_class c
                  WHERE c.relnamespace = 'hpcacct'::regnamespace AND c.relkind IN ('r', 'v')
                    AND obj_description(c.oid, 'pg_class') IS NULL$$,
                'every table and view has a comment');
SELECT is_empty($$SELECT c.oid::regclass || '.' || a.attname FROM pg_class c
                  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                  WHERE c.relnamespace = 'hpcacct'::regnamespace AND c.relkind = 'v'
                    AND col_description(c.oid, a.attnum) IS NULL$$,
                'every column of every view has a comment (sql/install/98_column_comments.sql)');
SELECT is_empty($$SELECT t.oid::regtype FROM pg_type t
                  WHERE t.typnamespace = 'hpcacct'::regnamespace AND t.typtype IN ('b', 'c')
                    AND t.typcategory <> 'A'
                    AND (t.typrelid = 0 OR (SELECT relkind FROM pg_class WHERE oid = t.typrelid) = 'c')
                    AND obj_description(t.oid, 'pg_type') IS NULL$$,
                'every type has a comment');
SELECT is_empty($$SELECT p.oid::regprocedure FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
                  WHERE p.pronamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace) AND l.lanname = 'c'
                    AND p.proparallel <> 's'$$,
                'every C function is PARALLEL SAFE');

-- A PL/pgSQL block with an EXCEPTION clause starts a subtransaction, which a parallel plan
-- cannot: such a function marked PARALLEL SAFE failed in any query the planner ran in parallel
-- ("cannot start subtransactions during a parallel operation"), e.g. the check of a machine's
-- grants when a regulation_machine row is added on a site with a large ledger.
SELECT is_empty($$SELECT p.oid::regprocedure FROM pg_proc p
                  WHERE p.pronamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace)
                    AND p.prosrc ~* 'exception\s+when' AND p.proparallel <> 'u'$$,
                'no function with an EXCEPTION block is marked PARALLEL SAFE or RESTRICTED');
SAVEPOINT parallel_check;
SET LOCAL timezone = 'UTC';
INSERT INTO hpcacct.account (name) VALUES ('cat-p');
INSERT INTO hpcacct.resource (cluster, partition, node, bundle, rate, unit)
VALUES ('cat-m', 'cpu', 'cpu=40', 'cpu=1', 1, 'core-hours');
INSERT INTO hpcacct.ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('cat-p', 'grant', 1000, 'core-hours', 'cat-m', '2025-01-01', '2025-12-31');
SELECT set_config(CASE WHEN current_setting('server_version_num')::int >= 160000 THEN 'debug_parallel_query'
                        ELSE 'force_parallel_mode' END, 'on', true) AS parallel \gset
SELECT lives_ok($$INSERT INTO hpcacct.regulation_machine (machine, monthly_threshold) VALUES ('cat-m', 1000000)$$,
                'a machine''s regulation_machine row is added while its grants are checked by a parallel plan');
ROLLBACK TO SAVEPOINT parallel_check;

-- \df hpcacct.* shows what a user calls: what implements a type, an operator, an operator
-- class, an aggregate or a trigger lives in hpcacct_internal (but tres_get, the function of
-- ->, which the README recommends calling).
SELECT is_empty($$WITH implementation AS (
                      SELECT unnest(ARRAY[t.typinput, t.typoutput, t.typreceive, t.typsend]) AS oid
                      FROM pg_type t WHERE t.typnamespace = 'hpcacct'::regnamespace
                      UNION SELECT o.oprcode FROM pg_operator o WHERE o.oprnamespace = 'hpcacct'::regnamespace
                      UNION SELECT p.amproc FROM pg_amproc p JOIN pg_opfamily f ON f.oid = p.amprocfamily
                            WHERE f.opfnamespace = 'hpcacct'::regnamespace
                      UNION SELECT unnest(ARRAY[a.aggtransfn, a.aggfinalfn, a.aggcombinefn, a.aggserialfn,
                                                a.aggdeserialfn]::oid[])
                            FROM pg_aggregate a JOIN pg_proc p ON p.oid = a.aggfnoid
                            WHERE p.pronamespace = 'hpcacct'::regnamespace)
                  SELECT p.oid::regprocedure FROM pg_proc p
                  WHERE p.pronamespace = 'hpcacct'::regnamespace
                    AND (p.oid IN (SELECT oid FROM implementation) OR p.prorettype = 'trigger'::regtype)
                    AND p.proname <> 'tres_get'$$,
                'schema hpcacct has no type, operator, aggregate or trigger support function but tres_get');
SELECT is_empty($$SELECT p.oid::regprocedure FROM pg_proc p
                  WHERE p.pronamespace = 'hpcacct'::regnamespace
                    AND p.proname ~ '^(require_|book_allocation$|bank_unit$|(consumption_)?rollup_insert_sql$|day_or_today$|protect_table$|visible_account|sees_all_accounts$)'$$,
                'the argument checks and bookkeeping helpers are not in schema hpcacct');
SELECT ok(NOT has_schema_privilege('public', 'hpcacct_internal', 'USAGE')
          AND (SELECT count(*) FROM pg_proc WHERE pronamespace = 'hpcacct_internal'::regnamespace) > 50,
          'PUBLIC has no USAGE on hpcacct_internal, which holds the internal functions');
-- an aggregate's support functions compute from their arguments only, and say so (IMMUTABLE),
-- as PostgreSQL's own do (the planner reads the aggregate's own volatility, which is IMMUTABLE)
SELECT is_empty($$SELECT f::regprocedure, p.provolatile FROM pg_aggregate a
                  JOIN pg_proc ag ON ag.oid = a.aggfnoid,
                  LATERAL unnest(ARRAY[a.aggtransfn, a.aggfinalfn, a.aggcombinefn, a.aggserialfn,
                                       a.aggdeserialfn]::oid[]) f
                  JOIN pg_proc p ON p.oid = f
                  WHERE ag.pronamespace = 'hpcacct'::regnamespace AND f <> 0 AND p.provolatile <> 'i'$$,
                'every support function of the extension''s aggregates is IMMUTABLE');

SELECT * FROM finish();
ROLLBACK;
