-- The extension's schema as normalized text: compared between a fresh install of the current
-- version and an older version brought up to it with ALTER EXTENSION ... UPDATE.
\pset footer off
\pset tuples_only on
SELECT 'extension ' || extversion FROM pg_extension WHERE extname = 'hpcacct';
SELECT 'function ' || p.oid::regprocedure || E'\n' || pg_get_functiondef(p.oid)
FROM pg_proc p WHERE p.pronamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace) AND p.prokind IN ('f', 'p') ORDER BY 1;
SELECT 'aggregate ' || a.aggfnoid::regprocedure || ' ' || a.aggtransfn || ' ' || a.aggcombinefn || ' '
       || a.aggserialfn || ' ' || a.aggdeserialfn || ' ' || a.aggfinalfn || ' ' || p.proparallel::text
FROM pg_aggregate a JOIN pg_proc p ON p.oid = a.aggfnoid
WHERE p.pronamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace) ORDER BY 1;
SELECT 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
       || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
       || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
WHERE c.relnamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace) AND c.relkind IN ('r', 'v', 'c')
ORDER BY c.relname, a.attnum;
SELECT 'constraint ' || conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(oid)
FROM pg_constraint WHERE connamespace = 'hpcacct'::regnamespace AND conrelid <> 0 ORDER BY 1;
SELECT 'index ' || pg_get_indexdef(i.indexrelid)
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE c.relnamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace) ORDER BY 1;
SELECT 'view ' || c.oid::regclass || ' ' || coalesce(array_to_string(c.reloptions, ','), '') || E'\n'
       || pg_get_viewdef(c.oid)
FROM pg_class c WHERE c.relnamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace) AND c.relkind = 'v' ORDER BY 1;
SELECT 'trigger ' || pg_get_triggerdef(t.oid)
FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
WHERE c.relnamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace) AND NOT t.tgisinternal ORDER BY 1;
SELECT 'policy ' || schemaname || '.' || tablename || ' ' || policyname || ' ' || cmd || ' '
       || coalesce(qual, '') || ' ' || coalesce(with_check, '')
FROM pg_policies WHERE schemaname = 'hpcacct' ORDER BY 1;
SELECT 'rls ' || c.oid::regclass || ' ' || c.relrowsecurity
FROM pg_class c WHERE c.relnamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace) AND c.relkind = 'r' ORDER BY 1;
SELECT 'operator ' || o.oid::regoperator FROM pg_operator o WHERE o.oprnamespace = 'hpcacct'::regnamespace ORDER BY 1;
SELECT 'opclass ' || opcname || ' ' || (SELECT amname FROM pg_am WHERE oid = opcmethod)
FROM pg_opclass WHERE opcnamespace = 'hpcacct'::regnamespace ORDER BY 1;
SELECT 'type ' || t.oid::regtype FROM pg_type t
WHERE t.typnamespace = 'hpcacct'::regnamespace AND t.typtype IN ('b', 'c') AND t.typrelid = 0 ORDER BY 1;
SELECT 'comment ' || pg_describe_object(d.classoid, d.objoid, d.objsubid) || ': ' || d.description
FROM pg_description d
JOIN pg_depend e ON e.classid = d.classoid AND e.objid = d.objoid AND e.deptype = 'e'
                AND e.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'hpcacct')
ORDER BY 1;
SELECT 'member ' || pg_describe_object(classid, objid, objsubid)
FROM pg_depend WHERE deptype = 'e' AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'hpcacct')
ORDER BY 1;
SELECT 'config ' || unnest(extconfig)::regclass FROM pg_extension WHERE extname = 'hpcacct' ORDER BY 1;
SELECT 'acl ' || p.oid::regprocedure || ' ' || coalesce(p.proacl::text, 'default')
FROM pg_proc p WHERE p.pronamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace) ORDER BY 1;
SELECT 'schema ' || n.nspname || ' ' || coalesce(n.nspacl::text, 'default')
FROM pg_namespace n WHERE n.nspname IN ('hpcacct', 'hpcacct_internal') ORDER BY 1;
-- table and column privileges, each list in one order (an update grants in another)
SELECT 'relacl ' || c.oid::regclass || ' ' || coalesce((SELECT string_agg(x::text, ',' ORDER BY x::text)
                                                        FROM unnest(c.relacl) x), 'default')
FROM pg_class c WHERE c.relnamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace) AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S') ORDER BY 1;
SELECT 'attacl ' || c.oid::regclass || '.' || a.attname || ' '
       || (SELECT string_agg(x::text, ',' ORDER BY x::text) FROM unnest(a.attacl) x)
FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.relnamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace) AND a.attacl IS NOT NULL ORDER BY 1;
