-- The charging trigger's contract: SQLSTATEs, nothing written on error, ledger = jobs.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(39);

INSERT INTO account (name) VALUES ('p1'), ('p2');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, exclusive) VALUES
    ('c', 'cpu', 'cpu=24,mem=96G', 'cpu=1,mem=4G', 1, 'core-hours', false),
    ('c', 'excl', 'cpu=24,mem=96G', 'cpu=1', 1, 'core-hours', true);

CREATE FUNCTION pg_temp.ledger_rows() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM hpcacct.ledger';

SELECT lives_ok($$INSERT INTO hpcacct.job VALUES
    ('c', '1', 'p1', 'u1', 'cpu', NULL, '2024-01-01 00:00+00', '2024-01-01 02:00+00', 'cpu=2,mem=16G', 'COMPLETED'),
    ('c', '2', 'p2', 'u2', 'excl', NULL, '2024-01-01 00:00+00', '2024-01-01 01:00+00', 'cpu=30', 'COMPLETED')$$,
    'valid jobs are charged');
SELECT is((SELECT amount FROM ledger WHERE jobid = '1'), 8.000000, 'memory-bound job: 4 core equivalents x 2 h');
SELECT is((SELECT amount FROM ledger WHERE jobid = '2'), 48.000000, 'exclusive job: 2 whole nodes x 24 cores x 1 h');

SELECT throws_ok($$INSERT INTO hpcacct.job VALUES
    ('c', '3', 'nobody', 'u', 'cpu', NULL, '2024-01-01 00:00+00', '2024-01-01 01:00+00', 'cpu=1', 'COMPLETED')$$,
    '42704', NULL, 'unknown account');
SELECT throws_ok($$INSERT INTO hpcacct.job VALUES
    ('c', '3', 'p1', 'u', 'gpu', NULL, '2024-01-01 00:00+00', '2024-01-01 01:00+00', 'cpu=1', 'COMPLETED')$$,
    '42704', NULL, 'unknown resource');
SELECT throws_ok($$INSERT INTO hpcacct.job VALUES
    ('c', '3', 'p1', 'u', 'cpu', NULL, '2024-01-01 02:00+00', '2024-01-01 01:00+00', 'cpu=1', 'COMPLETED')$$,
    '22023', NULL, 'end before start');
SELECT throws_ok($$INSERT INTO hpcacct.job VALUES
    ('c', '3', 'p1', 'u', 'cpu', NULL, '2024-01-01 00:00+00', 'infinity', 'cpu=1', 'COMPLETED')$$,
    '22008', 'job c/3 has an infinite start or end', 'an infinite end is named, not "cannot subtract infinite timestamps"');
SELECT throws_ok($$INSERT INTO hpcacct.job VALUES
    ('c', '3', 'p1', 'u', 'cpu', NULL, '-infinity', '2024-01-01 01:00+00', 'cpu=1', 'COMPLETED')$$,
    '22008', 'job c/3 has an infinite start or end', 'an infinite start too');
SELECT throws_ok($$INSERT INTO hpcacct.job VALUES
    ('c', '3', 'p1', 'u', 'cpu', NULL, NULL, '2024-01-01 01:00+00', 'cpu=1', 'COMPLETED')$$,
    '23502', NULL, 'NULL start in hpcacct.job');
SELECT throws_ok($$INSERT INTO hpcacct.job VALUES
    ('c', '3', 'p1', 'u', 'cpu', NULL, '2024-01-01 00:00+00', '2024-01-01 01:00+00', 'cpu=1,', 'COMPLETED')$$,
    '22P02', NULL, 'malformed TRES');
SELECT throws_ok($$INSERT INTO hpcacct.job VALUES
    ('c', '', 'p1', 'u', 'cpu', NULL, '2024-01-01 00:00+00', '2024-01-01 01:00+00', 'cpu=1', 'COMPLETED')$$,
    '22023', 'job c/ has an empty jobid or user', 'an empty jobid is refused, not charged');
SELECT throws_ok($$INSERT INTO hpcacct.job VALUES
    ('c', '3', 'p1', '', 'cpu', NULL, '2024-01-01 00:00+00', '2024-01-01 01:00+00', 'cpu=1', 'COMPLETED')$$,
    '22023', 'job c/3 has an empty jobid or user', 'an empty user is refused, not charged');
SELECT is(pg_temp.ledger_rows(), 2::bigint, 'nothing was written by the failed inserts');
SELECT is((SELECT count(*) FROM hpcacct.job), 2::bigint, 'no failed job was stored');

-- A site table without NOT NULL constraints: the trigger refuses NULL times itself.
CREATE TABLE site_jobs AS SELECT * FROM hpcacct.job WITH NO DATA;
SELECT hpcacct.attach_charging('site_jobs');
SELECT throws_ok($$INSERT INTO site_jobs VALUES
    ('c', '9', 'p1', 'u', 'cpu', NULL, '2024-01-01 00:00+00', NULL, 'cpu=1', 'RUNNING')$$,
    '22004', NULL, 'NULL end in a site table');
SELECT throws_ok($$INSERT INTO site_jobs VALUES
    ('c', '9', NULL, 'u', 'cpu', NULL, '2024-01-01 00:00+00', '2024-01-01 01:00+00', 'cpu=1', 'COMPLETED')$$,
    '22004', NULL, 'NULL account in a site table');
SELECT throws_ok($$INSERT INTO site_jobs VALUES
    ('c', '9', 'p1', NULL, 'cpu', NULL, '2024-01-01 00:00+00', '2024-01-01 01:00+00', 'cpu=1', 'COMPLETED')$$,
    '22004', 'job c/9 lacks a cluster, jobid, account, user, partition or alloctres',
    'NULL user in a site table: refused, not charged to nobody');
SELECT is((SELECT count(*) FROM site_jobs), 0::bigint, 'the site table kept none of the refused jobs');
SELECT throws_ok($$SELECT hpcacct.attach_charging('site_jobs', 'jobid=missing')$$, '42703', NULL,
                 'mapping to a missing column');
SELECT throws_ok($$SELECT hpcacct.attach_charging('site_jobs', 'colour=jobid')$$, '22023', NULL,
                 'mapping with an unknown role');

-- The ledger is append-only.
SELECT throws_ok($$UPDATE hpcacct.ledger SET amount = 0$$, 'HA001', NULL, 'UPDATE of the ledger');
SELECT throws_ok($$DELETE FROM hpcacct.ledger$$, 'HA001', NULL, 'DELETE from the ledger');
SELECT throws_ok($$TRUNCATE hpcacct.ledger CASCADE$$, 'HA001', NULL, 'TRUNCATE of the ledger');

-- Many updates and deletes later, the ledger still equals the jobs' charges.
INSERT INTO hpcacct.job
SELECT 'c', 'bulk' || i, CASE WHEN i % 2 = 0 THEN 'p1' ELSE 'p2' END, 'u', 'cpu', NULL,
       timestamptz '2024-02-01 00:00+00' + i * interval '1 minute',
       timestamptz '2024-02-01 00:00+00' + i * interval '1 minute' + (i % 7 + 1) * interval '13 minutes',
       ('cpu=' || (i % 5 + 1) || ',mem=' || (i % 11 + 1) || 'G')::hpcacct.tres, 'COMPLETED'
FROM generate_series(1, 500) AS i;
UPDATE hpcacct.job SET "end" = "end" + interval '7 minutes' WHERE jobid LIKE 'bulk%' AND right(jobid, 1) IN ('1', '5');
UPDATE hpcacct.job SET account = 'p1' WHERE jobid LIKE 'bulk%' AND right(jobid, 1) = '3';
DELETE FROM hpcacct.job WHERE jobid LIKE 'bulk%' AND right(jobid, 1) = '9';
SELECT results_eq(
    $$SELECT account, sum(amount) FROM hpcacct.ledger WHERE kind = 'charge' GROUP BY account ORDER BY account$$,
    $$SELECT j.account, sum(round(hpcacct.charge(j.alloctres, j."end" - j.start, r.bundle, r.rate,
                                                  CASE WHEN r.exclusive THEN r.node END)::numeric, 6))
      FROM hpcacct.job j JOIN hpcacct.resource r
        ON r.cluster = j.cluster AND r.partition = j.partition AND r.valid @> j.start
      GROUP BY j.account ORDER BY j.account$$,
    'ledger per account equals the recomputed charges of the remaining jobs');
SELECT is((SELECT count(*) FROM (SELECT jobid FROM hpcacct.ledger GROUP BY jobid HAVING sum(amount) <> 0
                                 EXCEPT SELECT jobid FROM hpcacct.job) s),
          0::bigint, 'deleted jobs net to zero in the ledger');

-- A run listed in job_to_reload (a restored site: its charges are in the ledger, its row is
-- not): inserted, what the ledger holds for it is replaced; an unlisted run is charged as
-- ever; an update or delete of a listed run takes it off the list too.
INSERT INTO hpcacct.ledger (account, kind, amount, unit, resource_id, cluster, jobid, job_start, job_end)
SELECT 'p1', 'charge', 5, 'core-hours', resource_id, 'c', 'back1', '2024-03-01 00:00+00', '2024-03-01 01:00+00'
FROM hpcacct.resource WHERE partition = 'cpu';
INSERT INTO hpcacct.job_to_reload (cluster, jobid, job_submit, account) VALUES
    ('c', 'back1', NULL, 'p1'), ('c', '1', NULL, 'p1'), ('c', 'gone', NULL, 'p1');
INSERT INTO hpcacct.job VALUES
    ('c', 'back1', 'p1', 'u1', 'cpu', NULL, '2024-03-01 00:00+00', '2024-03-01 03:00+00', 'cpu=2', 'COMPLETED'),
    ('c', 'fresh', 'p1', 'u1', 'cpu', NULL, '2024-03-01 00:00+00', '2024-03-01 03:00+00', 'cpu=2', 'COMPLETED');
SELECT is((SELECT sum(amount) FROM ledger WHERE jobid = 'back1'), 6.000000,
          'a listed run loaded again is charged what it costs (2 cores x 3 h), its earlier charge reversed, not added to');
SELECT is((SELECT string_agg(coalesce(note, '-') || ' ' || amount, ', ' ORDER BY entry_id) FROM ledger WHERE jobid = 'back1'),
          '- 5.000000, reversal: job reloaded -5.000000, - 6.000000', 'as a reversal and a new charge');
SELECT is((SELECT sum(amount) FROM ledger WHERE jobid = 'fresh'), 6.000000, 'an unlisted run in the same statement is charged as ever');
UPDATE hpcacct.job SET state = 'COMPLETED' WHERE jobid = '1';
SELECT is((SELECT string_agg(jobid, ',' ORDER BY jobid) FROM job_to_reload), 'gone',
          'the runs loaded or updated left the list; the one not loaded stays');
SELECT is((SELECT sum(amount) FROM ledger WHERE jobid = '1'), 8.000000, 'an update of an unchanged listed run books nothing');
-- An update that changes a run's key: a row moved onto a listed run's key takes its place as
-- an insert would (the listed run's charges reversed, not added to); the listed key it leaves
-- was reversed whole, and leaves the list as a delete would.
INSERT INTO hpcacct.ledger (account, kind, amount, unit, resource_id, cluster, jobid, job_start, job_end)
SELECT 'p1', 'charge', 5, 'core-hours', resource_id, 'c', 'back2', '2024-03-01 00:00+00', '2024-03-01 01:00+00'
FROM hpcacct.resource WHERE partition = 'cpu';
INSERT INTO hpcacct.job VALUES
    ('c', 'typo2', 'p1', 'u1', 'cpu', NULL, '2024-03-01 00:00+00', '2024-03-01 03:00+00', 'cpu=2', 'COMPLETED'),
    ('c', 'move3', 'p1', 'u1', 'cpu', NULL, '2024-03-01 00:00+00', '2024-03-01 03:00+00', 'cpu=2', 'COMPLETED');
INSERT INTO hpcacct.job_to_reload (cluster, jobid, job_submit, account) VALUES
    ('c', 'back2', NULL, 'p1'), ('c', 'move3', NULL, 'p1');
UPDATE hpcacct.job SET jobid = 'back2' WHERE jobid = 'typo2';
SELECT is((SELECT sum(amount) FROM ledger WHERE jobid = 'back2'), 6.000000,
          'a row whose key becomes a listed run''s is charged once: the listed charge reversed, not added to');
SELECT is((SELECT sum(amount) FROM ledger WHERE jobid = 'typo2'), 0.000000, 'and the key it left nets to zero');
UPDATE hpcacct.job SET jobid = 'moved3' WHERE jobid = 'move3';
SELECT is((SELECT string_agg(jobid, ',' ORDER BY jobid) FROM job_to_reload), 'gone',
          'a listed run whose row moves to another key leaves the list, as when it is deleted');
INSERT INTO hpcacct.job VALUES
    ('c', 'move3', 'p1', 'u1', 'cpu', NULL, '2024-03-01 00:00+00', '2024-03-01 02:00+00', 'cpu=2', 'COMPLETED');
SELECT is((SELECT string_agg(jobid || ' ' || s, ', ' ORDER BY jobid)
           FROM (SELECT jobid, sum(amount) AS s FROM ledger WHERE jobid IN ('move3', 'moved3') GROUP BY jobid) x),
          'move3 4.000000, moved3 6.000000', 'a new run with the key it left is charged what it costs, the moved one too');
SELECT is((SELECT count(*) FROM ledger WHERE jobid = 'move3' AND note = 'reversal: job reloaded'), 0::bigint,
          'without a reload reversal');

-- A resource names its cluster, partition and unit: an empty one (which no job or allocation
-- names) is refused by a named constraint (23514), nothing written.
SELECT throws_ok($$INSERT INTO hpcacct.resource (cluster, partition, node, bundle, rate, unit)
                   VALUES ('', 'e', 'cpu=24', 'cpu=1', 1, 'core-hours')$$,
                 '23514', 'new row for relation "resource" violates check constraint "resource_cluster_named"',
                 'a resource with an empty cluster is refused (resource_cluster_named)');
SELECT throws_ok($$INSERT INTO hpcacct.resource (cluster, partition, node, bundle, rate, unit)
                   VALUES ('e', '', 'cpu=24', 'cpu=1', 1, 'core-hours')$$,
                 '23514', 'new row for relation "resource" violates check constraint "resource_partition_named"',
                 'an empty partition too (resource_partition_named)');
SELECT throws_ok($$INSERT INTO hpcacct.resource (cluster, partition, node, bundle, rate, unit)
                   VALUES ('e', 'e', 'cpu=24', 'cpu=1', 1, '')$$,
                 '23514', 'new row for relation "resource" violates check constraint "resource_unit_named"',
                 'an empty unit too (resource_unit_named)');
SELECT is((SELECT count(*) FROM hpcacct.resource WHERE cluster IN ('', 'e')), 0::bigint,
          'the refused resources wrote nothing');

SELECT * FROM finish();
ROLLBACK;
