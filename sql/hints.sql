-- The errors a new administrator meets most say what to do instead (HINT): a job loaded
-- twice, an account with charges deleted, two rates over the same time, a charged rate
-- edited. (pgTAP rerate checks their SQLSTATEs; this file shows the whole messages.)
SET search_path = public, hpcacct;
SET TimeZone = 'UTC';
SET DateStyle = 'ISO, YMD';
\set SHOW_CONTEXT never
BEGIN;
ALTER TABLE resource ALTER COLUMN resource_id RESTART WITH 9001;  -- rolled back with the rest
INSERT INTO account (name) VALUES ('hint_a');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, valid)
VALUES ('hintc', 'cpu', 'cpu=16', 'cpu=1', 1, 'core-hours', tstzrange('2024-01-01 00:00+00', NULL));
INSERT INTO job VALUES ('hintc', '1', 'hint_a', 'u', 'cpu', NULL, '2024-03-01 00:00+00', '2024-03-01 01:00+00', 'cpu=4', 'COMPLETED');
SAVEPOINT s;
-- The same job again, by INSERT and by COPY.
INSERT INTO job VALUES ('hintc', '1', 'hint_a', 'u', 'cpu', NULL, '2024-03-01 00:00+00', '2024-03-01 01:00+00', 'cpu=4', 'COMPLETED');
ROLLBACK TO SAVEPOINT s;
COPY job (cluster, jobid, account, "user", partition, submit, start, "end", alloctres, state) FROM STDIN (DELIMITER '|');
hintc|2|hint_a|u|cpu|\N|2024-03-02 00:00+00|2024-03-02 01:00+00|cpu=4|COMPLETED
hintc|1|hint_a|u|cpu|\N|2024-03-01 00:00+00|2024-03-01 01:00+00|cpu=4|COMPLETED
\.
ROLLBACK TO SAVEPOINT s;
-- What the hint says works: the repeated job is skipped, the new one charged.
INSERT INTO job VALUES
    ('hintc', '1', 'hint_a', 'u', 'cpu', NULL, '2024-03-01 00:00+00', '2024-03-01 01:00+00', 'cpu=4', 'COMPLETED'),
    ('hintc', '2', 'hint_a', 'u', 'cpu', NULL, '2024-03-02 00:00+00', '2024-03-02 01:00+00', 'cpu=4', 'COMPLETED')
ON CONFLICT DO NOTHING;
SELECT jobid, sum(amount) FROM ledger WHERE cluster = 'hintc' GROUP BY jobid ORDER BY jobid;
-- An account with charges.
DELETE FROM account WHERE name = 'hint_a';
ROLLBACK TO SAVEPOINT s;
-- A second rate over the same time, and the charged rate edited.
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, valid)
VALUES ('hintc', 'cpu', 'cpu=16', 'cpu=1', 2, 'core-hours', tstzrange('2024-06-01 00:00+00', NULL));
ROLLBACK TO SAVEPOINT s;
UPDATE resource SET rate = 2 WHERE cluster = 'hintc';
ROLLBACK TO SAVEPOINT s;
UPDATE resource SET valid = tstzrange('2024-01-01 00:00+00', '2024-02-01 00:00+00') WHERE cluster = 'hintc';
ROLLBACK TO SAVEPOINT s;
DELETE FROM resource WHERE cluster = 'hintc';
ROLLBACK;
