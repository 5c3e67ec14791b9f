-- The sacct loader's SQL step (issue 14): hand-written sacct lines staged in
-- hpcacct.sacct_staging and loaded by load_sacct(): steps, unfinished runs (None, Unknown),
-- requeued runs, overlapping windows, quarantine and retry, the time-zone rule, bad TRES and
-- times, ignored accounts, a job a site trigger refuses, the watermark, the roles.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(100);

CALL setup_roles();
CREATE ROLE ldr_ingest LOGIN IN ROLE hpcacct_ingest;
CREATE ROLE ldr_portal LOGIN IN ROLE hpcacct_portal;

INSERT INTO account (name) VALUES ('lp1'), ('lp2');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES
    ('ldr', 'cpu', 'cpu=24,mem=96G', 'cpu=1,mem=4G', 1, 'core-hours');
INSERT INTO slurm_account_map (slurm_account, account, note) VALUES
    ('root', NULL, 'Slurm''s root account: not charged'),
    ('lp2_slurm', 'lp2', 'charged under another name');
DELETE FROM setting WHERE name = 'timezone';
SET TimeZone = 'America/New_York';  -- the session's zone must never matter

-- Stages lines with sacct's fields Cluster|JobID|Account|User|Partition|Submit|Start|End|AllocTRES|State.
CREATE FUNCTION pg_temp.stage(VARIADIC lines text[]) RETURNS void LANGUAGE sql AS $$
    INSERT INTO hpcacct.sacct_staging (lineno, line, cluster, jobid, account, "user", partition, submit, start,
                                       "end", alloctres, state)
    SELECT u.n, u.l, f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9], f[10]
    FROM unnest(lines) WITH ORDINALITY AS u(l, n), LATERAL (SELECT string_to_array(u.l, '|') AS f) s
$$;
CREATE TEMP TABLE outcome AS SELECT 0 AS load, * FROM hpcacct.load_sacct() WHERE false;
CREATE FUNCTION pg_temp.load(n integer) RETURNS void LANGUAGE sql AS
    'INSERT INTO outcome SELECT n, * FROM hpcacct.load_sacct()';
CREATE FUNCTION pg_temp.charged(id text) RETURNS numeric LANGUAGE sql AS
    $$SELECT sum(amount) FROM hpcacct.ledger WHERE kind = 'charge' AND cluster = 'ldr' AND jobid = id$$;
CREATE FUNCTION pg_temp.ledger_rows() RETURNS bigint LANGUAGE sql AS
    $$SELECT count(*) FROM hpcacct.ledger WHERE cluster = 'ldr'$$;
CREATE FUNCTION pg_temp.open(id text) RETURNS text LANGUAGE sql AS
    $$SELECT string_agg(sqlstate, ',') FROM hpcacct.sacct_quarantine WHERE jobid = id AND resolved_at IS NULL$$;

-- Day 1: a real day's mix.
SELECT pg_temp.stage(
    'ldr|1|lp1|u1|cpu|2024-01-10T08:00:00+0100|2024-01-10T08:00:00+0100|2024-01-10T10:00:00+0100|cpu=2,mem=16G|COMPLETED',
    'ldr|1.batch|lp1||cpu|2024-01-10T08:00:00+0100|2024-01-10T08:00:00+0100|2024-01-10T10:00:00+0100|cpu=2,mem=16G|COMPLETED',
    'ldr|1.extern|lp1||cpu|2024-01-10T08:00:00+0100|2024-01-10T08:00:00+0100|2024-01-10T10:00:00+0100|cpu=2,mem=16G|COMPLETED',
    'ldr|1.0|lp1||cpu|2024-01-10T08:00:00+0100|2024-01-10T08:00:00+0100|2024-01-10T10:00:00+0100|cpu=2|COMPLETED',
    'ldr|2|lp1|u1|cpu|2024-01-10T08:00:00+0100|None|2024-01-10T08:05:00+0100||CANCELLED by 1000',
    'ldr|3|lp1|u1|cpu|2024-01-10T08:00:00+0100|2024-01-10T09:00:00+0100|Unknown|cpu=1|RUNNING',
    'ldr|54_[1-3]|lp1|u1|cpu|2024-01-10T08:00:00+0100|Unknown|Unknown||PENDING',
    'ldr|54_4|lp1|u1|cpu|2024-01-10T08:00:00+0100|2024-01-10T08:00:00+0100|2024-01-10T08:30:00+0100|cpu=1|COMPLETED',
    'ldr|20+0|lp1|u1|cpu|2024-01-10T08:00:00+0100|2024-01-10T08:00:00+0100|2024-01-10T09:00:00+0100|cpu=4|COMPLETED',
    'ldr|20+1|lp1|u1|cpu|2024-01-10T08:00:00+0100|2024-01-10T08:00:00+0100|2024-01-10T09:00:00+0100|cpu=1|COMPLETED',
    'ldr|20+0.0|lp1||cpu|2024-01-10T08:00:00+0100|2024-01-10T08:00:00+0100|2024-01-10T09:00:00+0100|cpu=4|COMPLETED',
    'ldr|5|root|root|cpu|2024-01-10T08:00:00+0100|2024-01-10T08:00:00+0100|2024-01-10T09:00:00+0100|cpu=1|COMPLETED',
    'ldr|6|newproj|u2|cpu|2024-01-10T08:00:00+0100|2024-01-10T08:00:00+0100|2024-01-10T09:00:00+0100|cpu=3|COMPLETED',
    'ldr|7|lp1|u1|cpu|2024-01-10T08:00:00|2024-01-10T08:00:00|2024-01-10T09:00:00|cpu=1|COMPLETED',
    'ldr|8|lp1|u1|cpu|2024-01-10T08:00:00+0100|2024-01-10T08:00:00+0100|2024-01-10T09:00:00+0100|cpu=1,cpu=2|COMPLETED',
    'ldr|9|lp1|u1|cpu|2024-02-10T08:00:00+0100|2024-02-10T08:00:00+0100|2024-02-30T09:00:00+0100|cpu=1|COMPLETED',
    'ldr|10|lp1|u1|cpu|2024-01-10T08:00:00+0100|2024-01-10T08:00:00+0100|2024-01-10T09:00:00+0100|cpu=1|REQUEUED',
    'ldr|10|lp1|u1|cpu|2024-01-10T09:01:00+0100|2024-01-10T09:02:00+0100|2024-01-10T11:02:00+0100|cpu=1|COMPLETED',
    'ldr|11|lp2_slurm|u3|cpu|2024-01-10T08:00:00+0100|2024-01-10T08:00:00+0100|2024-01-10T09:00:00+0100|cpu=6|COMPLETED',
    'ldr|12|lp1|u1|gpu|2024-01-10T08:00:00+0100|2024-01-10T08:00:00+0100|2024-01-10T09:00:00+0100|cpu=1|COMPLETED',
    'ldr|13|lp1|u1|cpu|2024-01-10T08:00:00+0100|2024-01-10T09:00:00+0100|2024-01-10T08:00:00+0100|cpu=1|COMPLETED',
    'ldr|15|lp1|u1|cpu|2024-01-10T08:00:00+0100|2024-01-10T08:07:00+0100|2024-01-10T08:07:00+0100||CANCELLED by 0');
INSERT INTO sacct_staging (lineno, line, problem) VALUES (23, 'ldr|14|lp1', 'line 23 has 3 fields, the header 10');
SELECT lives_ok('SELECT pg_temp.load(1)', 'a day with every kind of line loads');
SELECT is((SELECT (lines, inserted, rerated, updated, unchanged, unfinished, never_started, steps, ignored, duplicates,
                   quarantined, retried, resolved)::text FROM outcome WHERE load = 1),
          '(23,7,0,0,0,2,2,4,1,0,7,0,0)',
          'lines, inserted, rerated, updated, unchanged, unfinished, never started, steps, ignored, duplicates, '
          'quarantined, retried, resolved');
SELECT is((SELECT count(*) FROM sacct_staging), 0::bigint, 'the staging table is emptied');
SELECT is(pg_temp.charged('1'), 8.000000, 'job 1: 4 core equivalents (16G) x 2 h');
SELECT is(pg_temp.charged('54_4'), 0.500000, 'an array task is a job of its own');
SELECT is(pg_temp.charged('20+0'), 4.000000, 'heterogeneous component 0 is a job of its own');
SELECT is(pg_temp.charged('20+1'), 1.000000, 'and component 1 too');
SELECT is((SELECT array_agg(amount ORDER BY job_submit) FROM ledger WHERE cluster = 'ldr' AND jobid = '10'),
          ARRAY[1.000000, 2.000000], 'both runs of the requeued job 10 are charged, each as its own run');
SELECT is((SELECT array_agg(job_submit ORDER BY job_submit) FROM ledger WHERE cluster = 'ldr' AND jobid = '10'),
          ARRAY['2024-01-10 07:00+00', '2024-01-10 08:01+00']::timestamptz[], 'the ledger names each run by its submit time');
SELECT is((SELECT account FROM ledger WHERE cluster = 'ldr' AND jobid = '11'), 'lp2',
          'a mapped Slurm account is charged to its hpcacct account');
SELECT is(pg_temp.charged('5'), NULL, 'root''s job (mapped to no account) is not charged');
SELECT is(pg_temp.open('5'), NULL, 'and not quarantined');
SELECT is(pg_temp.charged('2'), NULL, 'a job cancelled before it started (Start=None) is not charged');
SELECT is(pg_temp.charged('15'), NULL, 'nor one cancelled while waiting that Slurm records with Start = End and no allocation');
SELECT is(pg_temp.charged('3'), NULL, 'a running job (End=Unknown) is not charged yet');
SELECT is((SELECT count(*) FROM job WHERE cluster = 'ldr' AND (jobid ~ '\.' OR jobid LIKE '54\_[%')), 0::bigint,
          'no step and no pending array is stored');
SELECT is(pg_temp.open('6'), '42704', 'an unknown account is quarantined (42704)');
SELECT is(pg_temp.open('7'), '22023', 'a time without offset is quarantined while the site''s timezone is unset (22023)');
SELECT is(pg_temp.open('8'), '22P02', 'a bad TRES is quarantined with the tres type''s SQLSTATE (22P02)');
SELECT alike((SELECT reason FROM sacct_quarantine WHERE jobid = '8'), '%duplicate key "cpu"%', 'and its message');
SELECT is(pg_temp.open('9'), '22007', 'an impossible date (30 February) is quarantined (22007)');
SELECT is(pg_temp.open('12'), '42704', 'no resource for the partition is quarantined (42704)');
SELECT is(pg_temp.open('13'), '22023', 'a job that ends before it starts is quarantined (22023)');
SELECT is((SELECT sqlstate || ' ' || line FROM sacct_quarantine WHERE problem IS NOT NULL), '22P02 ldr|14|lp1',
          'a line the loader could not split is quarantined with the line itself');
SELECT is((SELECT line FROM sacct_quarantine WHERE jobid = '6'),
          'ldr|6|newproj|u2|cpu|2024-01-10T08:00:00+0100|2024-01-10T08:00:00+0100|2024-01-10T09:00:00+0100|cpu=3|COMPLETED',
          'the quarantine keeps the raw line');

-- Day 2: sacct's next window overlaps the first: the same lines again, job 3 now finished,
-- the same line twice in one file, and job 1 corrected (more memory): re-rated.
SELECT pg_temp.stage(
    'ldr|1|lp1|u1|cpu|2024-01-10T08:00:00+0100|2024-01-10T08:00:00+0100|2024-01-10T10:00:00+0100|cpu=2,mem=32G|COMPLETED',
    'ldr|3|lp1|u1|cpu|2024-01-10T08:00:00+0100|2024-01-10T09:00:00+0100|2024-01-10T12:00:00+0100|cpu=1|COMPLETED',
    'ldr|3|lp1|u1|cpu|2024-01-10T08:00:00+0100|2024-01-10T09:00:00+0100|2024-01-10T12:00:00+0100|cpu=1|COMPLETED',
    'ldr|54_4|lp1|u1|cpu|2024-01-10T08:00:00+0100|2024-01-10T08:00:00+0100|2024-01-10T08:30:00+0100|cpu=1|COMPLETED',
    'ldr|20+0|lp1|u1|cpu|2024-01-10T08:00:00+0100|2024-01-10T08:00:00+0100|2024-01-10T09:00:00+0100|cpu=4|TIMEOUT',
    'ldr|10|lp1|u1|cpu|2024-01-10T08:00:00+0100|2024-01-10T08:00:00+0100|2024-01-10T09:00:00+0100|cpu=1|REQUEUED',
    'ldr|10|lp1|u1|cpu|2024-01-10T09:01:00+0100|2024-01-10T09:02:00+0100|2024-01-10T11:02:00+0100|cpu=1|COMPLETED');
SELECT pg_temp.load(2);
SELECT is((SELECT (lines, inserted, rerated, updated, unchanged, duplicates, quarantined, retried, resolved)::text
           FROM outcome WHERE load = 2),
          '(7,1,1,1,3,1,7,7,0)',
          'overlap: 1 inserted (job 3 finished), 1 re-rated, 1 updated (state only), 3 unchanged, 1 duplicate line; '
          'the 7 quarantined lines retried and still quarantined');
SELECT is(pg_temp.charged('1'), 16.000000, 'job 1 re-rated: 8 core equivalents x 2 h');
SELECT is((SELECT count(*) FROM ledger WHERE cluster = 'ldr' AND jobid = '1'), 3::bigint,
          'as a charge, its reversal and the new charge');
SELECT is(pg_temp.charged('3'), 3.000000, 'job 3, running yesterday, is charged once it has ended');
SELECT is((SELECT state FROM job WHERE cluster = 'ldr' AND jobid = '20+0'), 'TIMEOUT', 'a state change is stored');
SELECT is(pg_temp.charged('20+0'), 4.000000, 'without touching the ledger');
SELECT is((SELECT attempts FROM sacct_quarantine WHERE jobid = '6'), 2, 'the quarantine counts its attempts');
SELECT is((SELECT count(*) FROM sacct_quarantine WHERE resolved_at IS NULL), 7::bigint, 'one open row per run');

-- Day 3: the same window once more: nothing changes.
SELECT pg_temp.ledger_rows() AS before_rows \gset
SELECT pg_temp.stage(
    'ldr|1|lp1|u1|cpu|2024-01-10T08:00:00+0100|2024-01-10T08:00:00+0100|2024-01-10T10:00:00+0100|cpu=2,mem=32G|COMPLETED',
    'ldr|3|lp1|u1|cpu|2024-01-10T08:00:00+0100|2024-01-10T09:00:00+0100|2024-01-10T12:00:00+0100|cpu=1|COMPLETED',
    'ldr|10|lp1|u1|cpu|2024-01-10T08:00:00+0100|2024-01-10T08:00:00+0100|2024-01-10T09:00:00+0100|cpu=1|REQUEUED',
    'ldr|10|lp1|u1|cpu|2024-01-10T09:01:00+0100|2024-01-10T09:02:00+0100|2024-01-10T11:02:00+0100|cpu=1|COMPLETED');
SELECT pg_temp.load(3);
SELECT is((SELECT (inserted, rerated, updated, unchanged)::text FROM outcome WHERE load = 3), '(0,0,0,4)',
          'a re-load of the same lines: 4 unchanged');
SELECT is(pg_temp.ledger_rows(), :before_rows::bigint, 'and not one ledger row more');

-- The account is created and the time zone set: the next load (no new line) charges both.
INSERT INTO account (name) VALUES ('newproj');
INSERT INTO setting VALUES ('timezone', 'Europe/Berlin');
SELECT pg_temp.load(4);
SELECT is((SELECT (lines, inserted, retried, resolved)::text FROM outcome WHERE load = 4), '(0,2,7,2)',
          'with no new line, the quarantine is retried: 2 of 7 charged and resolved');
SELECT is(pg_temp.charged('6'), 3.000000, 'the job of the account created since is charged');
SELECT is((SELECT resolution FROM sacct_quarantine WHERE jobid = '6'), 'inserted', 'and its quarantine row resolved');
SELECT is((SELECT job_start FROM ledger WHERE cluster = 'ldr' AND jobid = '7'), '2024-01-10 07:00+00'::timestamptz,
          'a time without offset is read in the site''s zone (Berlin, UTC+1), not the session''s (New York)');
SELECT is((SELECT count(*) FROM sacct_quarantine WHERE jobid = '7' AND resolved_at IS NULL), 0::bigint,
          'and its quarantine row, keyed by the unparsed submit time before, is resolved');
SELECT is(pg_temp.open('8'), '22P02', 'the bad TRES stays quarantined');

-- A time with an offset means that instant whatever the site's zone.
SELECT is(sacct_time('2024-07-01T12:00:00+0200', 'UTC'), '2024-07-01 10:00+00'::timestamptz, 'offset +0200');
SELECT is(sacct_time('2024-07-01T12:00:00-05:30', 'UTC'), '2024-07-01 17:30+00'::timestamptz, 'offset -05:30');
SELECT is(sacct_time('2024-07-01T12:00:00Z', 'Europe/Berlin'), '2024-07-01 12:00+00'::timestamptz, 'Z');
SELECT is(sacct_time('1719835200', 'Europe/Berlin'), '2024-07-01 12:00+00'::timestamptz,
          'epoch seconds (SLURM_TIME_FORMAT=%s)');
SELECT is(sacct_time('2024-07-01T12:00:00', 'Europe/Berlin'), '2024-07-01 10:00+00'::timestamptz,
          'no offset: the zone given (summer time in Berlin)');
SELECT is(ARRAY[sacct_time('Unknown', 'UTC'), sacct_time('None', 'UTC'), sacct_time('2024-13-01T00:00:00', 'UTC'),
                sacct_time('2023-02-29T00:00:00', 'UTC'), sacct_time('2024-01-01T24:00:00', 'UTC'),
                sacct_time('2024-01-01T00:00:00', NULL), sacct_time('0000-01-01T00:00:00', 'UTC')],
          ARRAY[NULL, NULL, NULL, NULL, NULL, NULL, NULL]::timestamptz[],
          'Unknown, None, month 13, 29 February 2023, hour 24, no zone, year 0: not times, and no error');
SELECT is(sacct_time('2024-02-29T00:00:00', 'UTC'), '2024-02-29 00:00+00'::timestamptz, '29 February 2024 is');
SELECT is(tres_problem('cpu=1,mem=4G'), NULL, 'tres_problem: NULL for a valid TRES');
SELECT is(left(tres_problem('cpu=x'), 5), '22P02', 'and the SQLSTATE of the error its input raises (malformed)');
SELECT is(left(tres_problem('cpu=-1'), 5), '22003', 'or (negative)');
SELECT is(sacct_tres('mem=4G,cpu=1'), 'cpu=1,mem=4G'::tres, 'sacct_tres: the tres of a valid TRES text');
SELECT is(ARRAY[sacct_tres('cpu=x'), sacct_tres('cpu=-1')], ARRAY[NULL, NULL]::tres[],
          'and NULL where its input raises (tres_problem() says why)');
SELECT throws_ok($$SELECT sacct_time('2024-07-01T12:00:00', 'No/Such_Zone')$$, '22023', NULL,
                 'sacct_time: an unknown zone raises, as timezone() does');

-- A job a site's own trigger refuses is found by bisection and quarantined with its error;
-- the others in the same load are charged.
CREATE FUNCTION pg_temp.refuse_666() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.jobid = '666' THEN RAISE EXCEPTION 'job 666 is refused' USING ERRCODE = 'P0001'; END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER ldr_refuse BEFORE INSERT ON hpcacct.job FOR EACH ROW EXECUTE FUNCTION pg_temp.refuse_666();
SELECT pg_temp.stage(
    'ldr|665|lp1|u1|cpu|2024-01-11T08:00:00+0100|2024-01-11T08:00:00+0100|2024-01-11T09:00:00+0100|cpu=1|COMPLETED',
    'ldr|666|lp1|u1|cpu|2024-01-11T08:00:00+0100|2024-01-11T08:00:00+0100|2024-01-11T09:00:00+0100|cpu=1|COMPLETED',
    'ldr|667|lp1|u1|cpu|2024-01-11T08:00:00+0100|2024-01-11T08:00:00+0100|2024-01-11T09:00:00+0100|cpu=1|COMPLETED',
    'ldr|668|lp1|u1|cpu|2024-01-11T08:00:00+0100|2024-01-11T08:00:00+0100|2024-01-11T09:00:00+0100|cpu=1|COMPLETED');
SELECT pg_temp.load(5);
DROP TRIGGER ldr_refuse ON hpcacct.job;
SELECT is((SELECT (inserted, quarantined)::text FROM outcome WHERE load = 5), '(3,6)',
          'a refused job: the 3 others inserted, it joins the 5 still quarantined');
SELECT is(pg_temp.open('666'), 'P0001', 'quarantined with the refusing trigger''s SQLSTATE');
SELECT is((SELECT reason FROM sacct_quarantine WHERE jobid = '666'), 'job 666 is refused', 'and its message');
SELECT is(pg_temp.charged('667'), 1.000000, 'the job after it is charged');
SELECT pg_temp.load(6);
SELECT is(pg_temp.charged('666'), 1.000000, 'once the site lets it in, the next load charges it');

-- A job longer than max_job_length is quarantined (HA004) before charging is tried.
SELECT pg_temp.stage(
    'ldr|700|lp1|u1|cpu|2023-01-01T00:00:00+0000|2023-01-01T00:00:00+0000|2024-06-01T00:00:00+0000|cpu=1|COMPLETED');
SELECT pg_temp.load(7);
SELECT is(pg_temp.open('700'), 'HA004', 'a job claiming 17 months is quarantined with HA004');

-- The watermark advances with the load, never backwards; through needs its clusters.
SELECT lives_ok($$SELECT * FROM hpcacct.load_sacct('2024-01-12 00:00+00', ARRAY['ldr'])$$, 'a load with a watermark');
SELECT is(sacct_window_start('ldr', '1 hour'), '2024-01-11 23:00+00'::timestamptz,
          'the next window starts an overlap before it');
SELECT lives_ok($$SELECT * FROM hpcacct.load_sacct('2024-01-11 00:00+00', ARRAY['ldr'])$$, 'an older window');
SELECT is(sacct_window_start('ldr', '0'), '2024-01-12 00:00+00'::timestamptz, 'does not move it back');
SELECT is(sacct_window_start('nowhere', '0'), NULL, 'a cluster never loaded has no window start');
SELECT throws_ok($$SELECT * FROM hpcacct.load_sacct('2024-01-12 00:00+00')$$, '22004', NULL,
                 'a watermark without clusters is refused');
-- a watermark in the future would stay there (it never moves back) and every later window
-- would start after the jobs that end before it: refused, nothing moved
SELECT throws_ok($$SELECT * FROM hpcacct.load_sacct(now() + interval '10 years', ARRAY['ldr'])$$, '22023', NULL,
                 'a watermark ten years ahead of the clock is refused');
SELECT is(sacct_window_start('ldr', '0'), '2024-01-12 00:00+00'::timestamptz, 'and the watermark stays');

-- The roles: the ingestion role stages and loads (no row-level security on staging, so
-- COPY works for it); a portal user cannot read staged lines at all.
SELECT is((SELECT relrowsecurity FROM pg_class WHERE oid = 'hpcacct.sacct_staging'::regclass), false,
          'the staging table has no row-level security (COPY FROM refuses it)');
SET SESSION AUTHORIZATION ldr_ingest;
SELECT lives_ok($$INSERT INTO hpcacct.sacct_staging (lineno, line, cluster, jobid, account, "user", partition, submit,
                                                      start, "end", alloctres, state)
                  VALUES (1, 'x', 'ldr', '800', 'lp1', 'u1', 'cpu', '2024-01-12T08:00:00+0000',
                          '2024-01-12T08:00:00+0000', '2024-01-12T10:00:00+0000', 'cpu=1', 'COMPLETED')$$,
                'the ingestion role stages a line');
SELECT lives_ok($$SELECT * FROM hpcacct.load_sacct()$$, 'and loads it');
SELECT throws_ok($$SELECT count(*) FROM hpcacct.sacct_staging$$, '42501', NULL, 'but reads no staged line');
RESET SESSION AUTHORIZATION;
SELECT is(pg_temp.charged('800'), 2.000000, 'the line the ingestion role loaded is charged');
SET SESSION AUTHORIZATION ldr_portal;
SELECT throws_ok($$SELECT count(*) FROM hpcacct.sacct_staging$$, '42501', NULL, 'a portal user cannot read staged lines');
SELECT throws_ok($$SELECT count(*) FROM hpcacct.sacctmgr_staging$$, '42501', NULL, 'nor staged associations');
SELECT is((SELECT count(*) FROM hpcacct.sacct_quarantine), 0::bigint, 'nor other accounts'' quarantined lines');
SELECT throws_ok($$SELECT * FROM hpcacct.load_sacct()$$, '42501', NULL, 'nor load');
RESET SESSION AUTHORIZATION;

-- rerate() keeps the runs apart: the requeued job's two runs are re-rated each, and a run
-- deleted afterwards nets to zero while the other keeps its new charge.
SELECT lives_ok($$SELECT hpcacct.rerate((SELECT resource_id FROM hpcacct.resource WHERE cluster = 'ldr'
                                          AND partition = 'cpu'), 2, '2024-01-01 00:00+00')$$,
                'rerate() of the partition the requeued job ran in');
SELECT is((SELECT count(*) FROM ledger WHERE cluster = 'ldr' AND jobid = '10' AND job_submit IS NULL), 0::bigint,
          'its reversals and new charges name the run');
DELETE FROM job WHERE cluster = 'ldr' AND jobid = '10' AND submit = '2024-01-10 08:01+00';
SELECT is((SELECT array_agg(s ORDER BY job_submit) FROM (SELECT job_submit, sum(amount) AS s FROM ledger
           WHERE cluster = 'ldr' AND jobid = '10' GROUP BY job_submit) x),
          ARRAY[2.000000, 0.000000], 'the deleted run nets to zero, the other keeps its charge at the new rate');

-- Accounts from sacctmgr: added once, root (mapped to no account) left out.
INSERT INTO sacctmgr_staging VALUES ('ldr', 'root', ''), ('ldr', 'root', 'root'), ('ldr', 'sproj', ''),
                                    ('ldr', 'sproj', 'sam'), ('ldr', 'lp1', 'sam');
SELECT is((SELECT (accounts_added, users_added, memberships_added)::text FROM sync_slurm_accounts()), '(1,1,2)',
          'sync: account sproj, user sam, two memberships; root left out');
INSERT INTO sacctmgr_staging VALUES ('ldr', 'sproj', 'sam');
SELECT is((SELECT (accounts_added, users_added, memberships_added)::text FROM sync_slurm_accounts()), '(0,0,0)',
          'a second sync adds nothing');

-- A quarantined run that hpcacct.job meanwhile holds as the line says: resolved as unchanged,
-- nothing written (runs not to be written are counted, not kept).
SELECT pg_temp.stage(
    'ldr|30|ghost|u1|cpu|2024-01-12T08:00:00+00|2024-01-12T08:00:00+00|2024-01-12T09:00:00+00|cpu=1|COMPLETED');
SELECT pg_temp.load(40);
INSERT INTO account (name) VALUES ('ghost');
INSERT INTO job (cluster, jobid, account, "user", partition, submit, start, "end", alloctres, state)
VALUES ('ldr', '30', 'ghost', 'u1', 'cpu', '2024-01-12 08:00+00', '2024-01-12 08:00+00', '2024-01-12 09:00+00', 'cpu=1',
        'COMPLETED');
SELECT pg_temp.ledger_rows() AS before_rows \gset
SELECT pg_temp.load(41);
SELECT is((SELECT (inserted, rerated, updated, unchanged)::text FROM outcome WHERE load = 41), '(0,0,0,1)',
          'a quarantined run hpcacct.job holds as it is: 1 unchanged');
SELECT is((SELECT resolution || ', ' || (pg_temp.ledger_rows() - :before_rows) FROM sacct_quarantine WHERE jobid = '30'),
          'unchanged, 0', 'its quarantine row resolved as unchanged, no ledger row written');

-- A line of 3 MB that no field can be read from (a broken export): quarantined beside a good
-- line, its key short enough for the index of open rows (the whole line as key failed the load,
-- 54000, and every later one of the window).
INSERT INTO sacct_staging (lineno, line, problem) VALUES (1, repeat('x', 3000000), 'line 1 has 1 field, the header 10');
SELECT pg_temp.stage('ldr|31|lp1|u1|cpu|2024-01-12T08:00:00+00|2024-01-12T08:00:00+00|2024-01-12T09:00:00+00|cpu=1|COMPLETED');
SELECT lives_ok('SELECT pg_temp.load(42)', 'a load with a line of 3 MB runs');
SELECT is((SELECT inserted || ', ' || (SELECT count(*) FROM sacct_quarantine WHERE resolved_at IS NULL AND line LIKE 'xxx%')
           FROM outcome WHERE load = 42), '1, 1', 'the good line is charged, the long one quarantined');
SELECT is((SELECT length(job_key) <= 100 AND length(line) = 3000000 FROM sacct_quarantine
           WHERE resolved_at IS NULL AND line LIKE 'xxx%'), true, 'with its whole line, under a short key');

-- slurm_account_map names a Slurm account: an empty one (which no sacct line names: the load
-- quarantines a line without an account) is refused by a named constraint (23514).
SELECT throws_ok($$INSERT INTO hpcacct.slurm_account_map (slurm_account, account) VALUES ('', NULL)$$,
                 '23514',
                 'new row for relation "slurm_account_map" violates check constraint "slurm_account_map_slurm_account_named"',
                 'an empty Slurm account is refused (slurm_account_map_slurm_account_named)');
SELECT is((SELECT count(*) FROM hpcacct.slurm_account_map WHERE slurm_account = ''), 0::bigint, 'and wrote nothing');

-- sacct_window_start(): a negative overlap would start the window after the watermark (jobs
-- ending in between never loaded): 22023; a NULL one 22004; whether the cluster was loaded or not.
SELECT throws_ok($$SELECT hpcacct.sacct_window_start('ldr', '-1 hour')$$, '22023',
                 'sacct_window_start: overlap must not be negative', 'a negative overlap is refused (22023)');
SELECT throws_ok($$SELECT hpcacct.sacct_window_start('nowhere', '-1 second')$$, '22023',
                 'sacct_window_start: overlap must not be negative', 'for a cluster never loaded too');
SELECT throws_ok($$SELECT hpcacct.sacct_window_start('ldr', NULL)$$, '22004',
                 'sacct_window_start: overlap must not be NULL', 'a NULL overlap is refused (22004)');
SELECT is(sacct_window_start('ldr', '1 mon'), '2023-12-12 00:00+00'::timestamptz,
          'a month is an overlap like any other (the watermark minus a calendar month)');
-- an overlap of no length by comparison whose parts are subtracted one by one: from 1 March,
-- 1 month back and 30 days on is 3 March, after the watermark
UPDATE sacct_watermark SET loaded_through = '2024-03-01 00:00+00' WHERE cluster = 'ldr';
SELECT throws_ok($$SELECT hpcacct.sacct_window_start('ldr', '1 mon -30 days')$$, '22023',
                 'sacct_window_start: overlap must not be negative', 'an overlap with a negative part (days) is refused');
SELECT throws_ok($$SELECT hpcacct.sacct_window_start('nowhere', '-1 day 30 hours')$$, '22023',
                 'sacct_window_start: overlap must not be negative', 'and one with negative days and more hours');
SELECT is(sacct_window_start('ldr', '1 mon 2 days 03:00'), '2024-01-29 21:00+00'::timestamptz,
          'an overlap whose parts are all positive is subtracted (its month a calendar month of UTC)');

-- the overlap's days are 24 hours whatever the session's TimeZone (here one whose summer time
-- began at noon on 11 January 2024: in it, 11 January lasted 23 hours)
UPDATE sacct_watermark SET loaded_through = '2024-01-12 00:00+00' WHERE cluster = 'ldr';
SET LOCAL TimeZone = 'AAA0BBB,J11/12,J300/0';
SELECT is(sacct_window_start('ldr', '1 day'), '2024-01-11 00:00+00'::timestamptz,
          'an overlap of a day is 24 hours in any session time zone');
SELECT is(sacct_window_start('ldr', '1 mon'), '2023-12-12 00:00+00'::timestamptz,
          'and a month a calendar month of UTC');
RESET TimeZone;

-- A run's key is the one 0.3 wrote (the submit epoch as float8 text of a default session) for
-- every submit the loader reads (whole seconds: negative, far, none): an open quarantine row
-- of 0.3 is found again under it, not resolved as rekeyed and quarantined twice.
SET LOCAL extra_float_digits = 1;
SELECT pg_temp.stage('ldr|k1|nobody|u1|cpu|1969-12-31T23:59:59+00|1969-12-31T23:59:59+00|1970-01-01T00:00:01+00|cpu=1|COMPLETED',
                     'ldr|k2|nobody|u1|cpu|9999-12-31T23:59:59+00|2024-01-12T08:00:00+00|2024-01-12T09:00:00+00|cpu=1|COMPLETED',
                     'ldr|k3|nobody|u1|cpu|1600-02-29T12:00:00+00|2024-01-12T08:00:00+00|2024-01-12T09:00:00+00|cpu=1|COMPLETED',
                     'ldr|k4|nobody|u1|cpu|Unknown|2024-01-12T08:00:00+00|2024-01-12T09:00:00+00|cpu=1|COMPLETED');
SELECT pg_temp.load(43);
SELECT is((SELECT string_agg(job_key, ' ' ORDER BY jobid) FROM sacct_quarantine WHERE jobid LIKE 'k_' AND resolved_at IS NULL),
          (SELECT string_agg('ldr|' || v.j || '|' || coalesce(date_part('epoch', v.t)::text, 'raw:Unknown'), ' ' ORDER BY v.j)
           FROM (VALUES ('k1', timestamptz '1969-12-31 23:59:59+00'), ('k2', '9999-12-31 23:59:59+00'),
                        ('k3', '1600-02-29 12:00:00+00'), ('k4', NULL)) v(j, t)),
          'a run''s key is byte for byte 0.3''s: the submit epoch as a default session printed its float8');
RESET extra_float_digits;
SET LOCAL extra_float_digits = -15;
SELECT pg_temp.stage('ldr|k1|nobody|u1|cpu|1969-12-31T23:59:59+00|1969-12-31T23:59:59+00|1970-01-01T00:00:01+00|cpu=1|COMPLETED');
SELECT pg_temp.load(44);
SELECT is((SELECT string_agg(coalesce(resolution, 'open') || ' ' || attempts, ', ' ORDER BY quarantine_id)
           FROM sacct_quarantine WHERE jobid IN ('k1', 'k2')),
          'open 2, open 2', 'loaded again (in a session of extra_float_digits -15), each is found under its key: retried, not rekeyed');
RESET extra_float_digits;

SELECT * FROM finish();
ROLLBACK;
