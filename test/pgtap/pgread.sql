-- The portal's figures do not depend on the session's TimeZone (a client may send its own:
-- PGTZ, JDBC), only on the site's time zone: a session zone where a month's first midnight
-- does not exist (America/Asuncion, 1 October 2023) gives the same figures as UTC.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(1);

INSERT INTO setting VALUES ('timezone', 'UTC') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO setting VALUES ('bank_unit', 'NPL') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('pr_c', 'p', 'cpu=16', 'cpu=1', 1, 'NPL');
INSERT INTO account (name) VALUES ('pr_a');
SELECT deposit('pr_a', '2011-10-01', 1000);
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    -- in the first hour of October (UTC), which Asuncion's session would start an hour late
    ('pr_c', 'o1', 'pr_a', 'u', 'p', '2023-10-01 00:00+00', '2023-10-01 00:30+00', 'cpu=2', 'COMPLETED'),
    ('pr_c', 'o2', 'pr_a', 'u', 'p', '2023-10-02 00:00+00', '2023-10-02 01:00+00', 'cpu=1', 'COMPLETED'),
    -- on 30 December 2011 (UTC), a day Apia skipped
    ('pr_c', 'd1', 'pr_a', 'u', 'p', '2011-12-30 10:00+00', '2011-12-30 12:00+00', 'cpu=1', 'COMPLETED');

SET LOCAL TimeZone = 'America/Asuncion';
SELECT is((SELECT x -> 'this_month' FROM jsonb_array_elements(my_accounts('2023-10-15') -> 'accounts') x
           WHERE x ->> 'account' = 'pr_a'), '{"NPL": 2.000000}'::jsonb,
          'my_accounts() in a session of America/Asuncion: October''s charges from the site''s midnight of the 1st');

SELECT * FROM finish();
ROLLBACK;
