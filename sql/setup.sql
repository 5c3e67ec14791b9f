-- Runs first: the job table the other regression tests load (CREATE EXTENSION does not
-- create it: it belongs to the site, see create_job_table).
\set SHOW_CONTEXT never
SELECT hpcacct.create_job_table();
SELECT hpcacct.create_job_table();  -- a second one is an error
