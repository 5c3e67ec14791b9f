-- Jobs, the ledger and the charging trigger.
SET search_path = public, hpcacct;
\set SHOW_CONTEXT never

INSERT INTO account (name, kind) VALUES ('alice', 'personal'), ('proj1', 'project'), ('proj2', 'project');

-- HLRN-III node types; Data nodes changed rate on 1 July 2024 (to show validity ranges).
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, exclusive, valid) VALUES
    ('hlrn', 'mpp1',    'cpu=24', 'cpu=1', 1.0 / 12, 'NPL', true,  '[-infinity,infinity)'),
    ('hlrn', 'smp1',    'cpu=32', 'cpu=1', 1.0 / 8,  'NPL', true,  '[-infinity,infinity)'),
    ('hlrn', 'data',    'cpu=16', 'cpu=1', 1.0 / 12, 'NPL', false, '[-infinity,2024-07-01)'),
    ('hlrn', 'data',    'cpu=16', 'cpu=1', 1.0 / 6,  'NPL', false, '[2024-07-01,infinity)'),
    ('hlrn', 'prepost', 'cpu=32', 'cpu=1', 3.0 / 16, 'NPL', false, '[-infinity,infinity)');

-- Two rates for the same partition must not overlap.
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, valid)
VALUES ('hlrn', 'data', 'cpu=16', 'cpu=1', 1, 'NPL', '[2024-01-01,2025-01-01)');

-- sacct --parsable2 output loads with COPY.
COPY job (cluster, jobid, account, "user", partition, submit, start, "end", alloctres, state)
FROM stdin WITH (FORMAT csv, DELIMITER '|', HEADER true);
Cluster|JobID|Account|User|Partition|Submit|Start|End|AllocTRES|State
hlrn|101|proj1|alice|data|2024-03-01T09:00:00+00|2024-03-01T10:00:00+00|2024-03-01T11:00:00+00|billing=12,cpu=12,mem=48G,node=1|COMPLETED
hlrn|102|proj1|alice|prepost|2024-03-01T09:00:00+00|2024-03-01T10:00:00+00|2024-03-01T11:00:00+00|cpu=16,mem=100G,node=1|COMPLETED
hlrn|103|proj2|bob|mpp1|2024-03-01T09:00:00+00|2024-03-01T10:00:00+00|2024-03-01T11:00:00+00|cpu=1,node=1|FAILED
hlrn|104|proj2|bob|smp1|2024-03-01T09:00:00+00|2024-03-01T10:00:00+00|2024-03-01T11:00:00+00|cpu=8,node=1|COMPLETED
hlrn|105|alice|alice|data|2024-07-01T09:00:00+00|2024-07-01T10:00:00+00|2024-07-01T11:00:00+00|cpu=12,node=1|COMPLETED
hlrn|106|alice|alice|data|2024-06-30T20:00:00+00|2024-06-30T22:00:00+00|2024-07-01T02:00:00+00|cpu=12,node=1|TIMEOUT
\.

-- 1, 3, 2 and 4 NPL; job 105 started after the rate change (2 NPL); job 106 started
-- before it and is charged at the old rate for all its 4 hours.
SELECT jobid, account, amount, unit, submitter, job_start, job_end, note
FROM ledger WHERE cluster = 'hlrn' ORDER BY jobid;
SELECT max(entry_id) AS last_entry FROM ledger \gset

-- Re-rating: an UPDATE of a charging column reverses the job's charge and books the new one.
UPDATE job SET "end" = start + interval '2 hours' WHERE jobid = '101';
-- Moving a job to another account.
UPDATE job SET account = 'proj2' WHERE jobid = '102';
-- An UPDATE of other columns books nothing.
UPDATE job SET state = 'COMPLETED';
-- A DELETE reverses.
DELETE FROM job WHERE jobid = '103';
SELECT jobid, account, amount, note FROM ledger WHERE entry_id > :last_entry ORDER BY jobid, entry_id;

-- The ledger equals the sum of the jobs' charges, per account.
SELECT l.account, l.total, j.total AS from_jobs, l.total = j.total AS equal
FROM (SELECT account, sum(amount) AS total FROM ledger WHERE kind = 'charge' AND cluster = 'hlrn'
      GROUP BY account) l
FULL JOIN (SELECT j.account, sum(round(charge(j.alloctres, j."end" - j.start, r.bundle, r.rate,
                                              CASE WHEN r.exclusive THEN r.node END)::numeric, 6)) AS total
           FROM job j JOIN resource r ON r.cluster = j.cluster AND r.partition = j.partition AND r.valid @> j.start
           WHERE j.cluster = 'hlrn'
           GROUP BY j.account) j USING (account)
ORDER BY 1;

-- Bad jobs: an error, and nothing is written.
SELECT count(*) AS ledger_rows_before FROM ledger \gset
INSERT INTO job VALUES ('hlrn', '201', 'nobody', 'x', 'data', NULL, '2024-03-01 10:00+00', '2024-03-01 11:00+00', 'cpu=1', 'COMPLETED');
INSERT INTO job VALUES ('hlrn', '202', 'proj1', 'x', 'gpu', NULL, '2024-03-01 10:00+00', '2024-03-01 11:00+00', 'cpu=1', 'COMPLETED');
INSERT INTO job VALUES ('other', '203', 'proj1', 'x', 'data', NULL, '2024-03-01 10:00+00', '2024-03-01 11:00+00', 'cpu=1', 'COMPLETED');
INSERT INTO job VALUES ('hlrn', '204', 'proj1', 'x', 'data', NULL, '2024-03-01 11:00+00', '2024-03-01 10:00+00', 'cpu=1', 'COMPLETED');
INSERT INTO job VALUES ('hlrn', '205', 'proj1', 'x', 'data', NULL, NULL, '2024-03-01 10:00+00', 'cpu=1', 'COMPLETED');
INSERT INTO job VALUES ('hlrn', '206', 'proj1', 'x', 'data', NULL, '2024-03-01 10:00+00', '2024-03-01 11:00+00', 'cpu=1,mem=-1', 'COMPLETED');
-- One bad row fails the whole statement.
INSERT INTO job VALUES
    ('hlrn', '207', 'proj1', 'x', 'data', NULL, '2024-03-01 10:00+00', '2024-03-01 11:00+00', 'cpu=1', 'COMPLETED'),
    ('hlrn', '208', 'nobody', 'x', 'data', NULL, '2024-03-01 10:00+00', '2024-03-01 11:00+00', 'cpu=1', 'COMPLETED');
SELECT count(*) = :ledger_rows_before AS nothing_written FROM ledger;
SELECT count(*) AS jobs_after FROM job WHERE cluster = 'hlrn' AND jobid::int > 200;

-- The ledger is append-only.
UPDATE ledger SET amount = 0;
DELETE FROM ledger;
SET client_min_messages = warning;  -- quiet the list of tables CASCADE would reach
TRUNCATE ledger CASCADE;
RESET client_min_messages;

-- A site's own job table, with its own column names, charged by the same trigger.
CREATE TABLE site_jobs (
    id bigint PRIMARY KEY, machine text, project text, login text, queue text,
    started timestamp, finished timestamp, tres text
);
SELECT attach_charging('site_jobs', 'jobid=id', 'cluster=machine', 'account=project', 'user=login',
                       'partition=queue', 'start=started', 'end=finished', 'alloctres=tres');
SET TimeZone = 'UTC';
INSERT INTO site_jobs VALUES (9001, 'hlrn', 'proj1', 'carol', 'prepost', '2024-03-02 00:00', '2024-03-02 02:00', 'cpu=32');
SELECT jobid, account, amount, submitter FROM ledger WHERE jobid = '9001';
DELETE FROM site_jobs;
SELECT jobid, sum(amount) FROM ledger WHERE jobid = '9001' GROUP BY jobid;
-- Mappings are checked when attached.
SELECT attach_charging('site_jobs', 'jobid=nope');
SELECT attach_charging('site_jobs', 'color=id');
SELECT attach_charging('site_jobs', 'jobid');
SELECT attach_charging('site_jobs');
