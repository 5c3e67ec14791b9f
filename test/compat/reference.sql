-- The README's reference of every object (test/compat/reference.sh): one Markdown table row
-- per object of the extension a user names, with its kind and its comment, in a fixed order.
-- Only schema hpcacct is listed, and hpcacct_internal by one line: the functions behind a type's
-- I/O, an operator, an operator class, an aggregate or a trigger, and the helpers the
-- extension's functions call, live there. Trigger functions left in hpcacct are left out too.
\pset footer off
\pset tuples_only on
\pset format unaligned
SET search_path = hpcacct, pg_catalog;  -- types shown as \df shows them
WITH objects AS (
    SELECT 0 AS rank, 'schema' AS kind, n.nspname::text AS object, obj_description(n.oid, 'pg_namespace') AS description
    FROM pg_namespace n WHERE n.nspname = 'hpcacct_internal'
    UNION ALL
    SELECT 1, 'type', t.typname::text AS object, obj_description(t.oid, 'pg_type') AS description
    FROM pg_type t
    WHERE t.typnamespace = 'hpcacct'::regnamespace AND t.typtype IN ('b', 'c', 'd', 'e') AND t.typcategory <> 'A'
      AND (t.typrelid = 0 OR (SELECT relkind FROM pg_class WHERE oid = t.typrelid) = 'c')
    UNION ALL
    SELECT 2, 'operator', format('%s %s %s', o.oprleft::regtype, o.oprname, o.oprright::regtype),
           coalesce(obj_description(o.oid, 'pg_operator'), obj_description(o.oprcode, 'pg_proc'))
    FROM pg_operator o WHERE o.oprnamespace = 'hpcacct'::regnamespace
    UNION ALL
    SELECT CASE c.relkind WHEN 'v' THEN 4 ELSE 3 END, CASE c.relkind WHEN 'v' THEN 'view' ELSE 'table' END,
           c.relname::text, obj_description(c.oid, 'pg_class')
    FROM pg_class c WHERE c.relnamespace = 'hpcacct'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm')
    UNION ALL
    SELECT CASE p.prokind WHEN 'a' THEN 6 WHEN 'p' THEN 7 ELSE 5 END,
           CASE p.prokind WHEN 'a' THEN 'aggregate' WHEN 'p' THEN 'procedure' ELSE 'function' END,
           format('%s(%s)', p.proname, pg_get_function_identity_arguments(p.oid)), obj_description(p.oid, 'pg_proc')
    FROM pg_proc p
    WHERE p.pronamespace = 'hpcacct'::regnamespace AND p.prokind IN ('f', 'a', 'p')
      AND p.prorettype NOT IN ('trigger'::regtype, 'event_trigger'::regtype)
    UNION ALL
    SELECT 8, 'role', r.rolname::text, shobj_description(r.oid, 'pg_authid')
    FROM pg_roles r WHERE r.rolname IN ('hpcacct_admin', 'hpcacct_ingest', 'hpcacct_portal', 'hpcacct_auditor',
                                        'hpcacct_submit', 'hpcacct_notify')
    UNION ALL
    SELECT 9, 'setting', s.name, s.description || coalesce(' (default ' || s.default_value || ')', '')
    FROM hpcacct.setting_catalog() s
)
SELECT format('| `%s` | %s | %s |', replace(object, '|', '\|'), kind,
              coalesce(replace(regexp_replace(description, '\s+', ' ', 'g'), '|', '\|'), '(no description)'))
FROM objects ORDER BY rank, object COLLATE "C";
