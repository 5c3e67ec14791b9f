-- The extension's catalog: every object says what it is, and the version installed is the one
-- the control file names.
BEGIN;
SELECT plan(6);

SELECT is((SELECT extversion FROM pg_extension WHERE extname = 'hpcacct'),
          (SELECT default_version FROM pg_available_extensions WHERE name = 'hpcacct'),
          'the installed version is the default version');
SELECT is_empty($$SELECT p.oid::regprocedure FROM pg_proc p
                  WHERE p.pronamespace = 'hpcacct'::regnamespace AND obj_description(p.oid, 'pg_proc') IS NULL$$,
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
                  WHERE p.pronamespace = 'hpcacct'::regnamespace AND l.lanname = 'c'
                    AND p.proparallel <> 's'$$,
                'every C function is PARALLEL SAFE');

SELECT * FROM finish();
ROLLBACK;
