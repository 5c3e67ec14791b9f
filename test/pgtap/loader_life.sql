-- The sacct loader through a month (October 2024, Europe/Berlin) as a site lives it: a small
-- slurmdbd (pg_temp.sdb) answers each window as sacct would, and pg_temp.run() stages its
-- answer as `hpcacct-sacct run` does (every field, times as epoch seconds, the line with '|')
-- and loads it with the cluster's watermark. Windows every 10 to 30 minutes overlap by the
-- default hour; two clusters (alpha, beta) share one database. Along the month: a job across
-- the first window's start, steps, a job array whose tasks end in several windows, a requeued
-- job, a job running for hours (End Unknown), a job cancelled while pending (Start None),
-- root's job, a job of an account created the next day (corrected while it waits), a job of a
-- partition with no rate at its start, a job corrected in slurmdbd, a loader run that fails
-- half way, slurmdbd down while a running job ends (its end recorded after the next run:
-- sacct_running) and while a pending job runs (the outage loaded again), a job held while
-- pending, a record slurmdbd loses, the change from daylight time (27
-- October), a job across the month's end. Every charge is checked against the README's rule
-- computed here by hand, equivalents (max over the bundle of alloc/bundle) x wall-clock hours
-- x rate; after every load the watermark, the staging table, each run charged once and the
-- rollup against the ledger; at the end the rollup's months and the quarter's balances.
BEGIN;
SET search_path = public, hpcacct;
SET client_min_messages = warning;
SELECT plan(72);

INSERT INTO setting VALUES ('timezone', 'Europe/Berlin') ON CONFLICT (name) DO UPDATE SET value = excluded.value;
SET TimeZone = 'America/New_York';  -- the session's zone must not matter
INSERT INTO account (name) VALUES ('chem'), ('phys');
INSERT INTO hpc_user (username) VALUES ('u1'), ('u2'), ('u3');
INSERT INTO membership (account, username) VALUES ('chem', 'u1'), ('phys', 'u2');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, valid) VALUES
    ('alpha', 'cpu', 'cpu=48,mem=192G', 'cpu=1,mem=4G', 1, 'core-hours', '[-infinity,infinity)'),
    -- a partition opened on 10 October: a job that ran on it before has no rate yet
    ('alpha', 'big', 'cpu=96,mem=1T', 'cpu=1,mem=8G', 2, 'core-hours', '[2024-10-10 00:00+02,infinity)'),
    ('beta', 'cpu', 'cpu=32,mem=64G', 'cpu=1,mem=2G', 0.5, 'core-hours', '[-infinity,infinity)');
INSERT INTO slurm_account_map (slurm_account, account, note) VALUES ('root', NULL, 'not charged');
-- a quarterly bank in core-hours (HLRN's rules): the balance is the deposits less the charges
INSERT INTO setting VALUES ('bank_unit', 'core-hours') ON CONFLICT (name) DO UPDATE SET value = excluded.value;
DO $$ BEGIN PERFORM hpcacct.deposit('chem', '2024-10-01', 1000), hpcacct.deposit('phys', '2024-10-01', 500); END $$;

-- slurmdbd: one row per job run (or step, or pending array line) as sacct prints it once it
-- has ended; start NULL: never started (None), "end" NULL: still running at the month's end.
-- A version of a record is known over [known_from, known_until) (a correction replaces it).
CREATE TEMP TABLE sdb (
    cluster text, jobid text, jobidraw text, account text, "user" text, partition text,
    submit timestamptz, start timestamptz, "end" timestamptz, alloctres text, state text,
    known_from timestamptz NOT NULL DEFAULT '-infinity', known_until timestamptz NOT NULL DEFAULT 'infinity');

-- sacct -S s -E e --allocations --duplicates at instant e: the runs submitted by e that had not
-- ended before s; what had not happened by e is Unknown (pending: no allocation).
CREATE FUNCTION pg_temp.sacct(c text, s timestamptz, e timestamptz) RETURNS TABLE (n bigint, f text[])
    LANGUAGE sql AS $$
    SELECT row_number() OVER (ORDER BY d.submit, d.jobid),
           ARRAY[d.cluster, d.jobid, d.jobidraw, d.account, d."user", d.partition,
                 extract(epoch FROM d.submit)::bigint::text,
                 CASE WHEN d.start IS NULL AND d."end" <= e THEN 'None'
                      WHEN d.start IS NULL OR d.start > e THEN 'Unknown'
                      ELSE extract(epoch FROM d.start)::bigint::text END,
                 CASE WHEN d."end" IS NULL OR d."end" > e THEN 'Unknown'
                      ELSE extract(epoch FROM d."end")::bigint::text END,
                 CASE WHEN d.start IS NULL OR d.start > e THEN '0'
                      ELSE extract(epoch FROM least(coalesce(d."end", e), e) - d.start)::bigint::text END,
                 CASE WHEN d.start IS NULL OR d.start > e THEN '' ELSE d.alloctres END,
                 d.alloctres,
                 CASE WHEN d.start IS NULL AND d."end" <= e THEN d.state
                      WHEN d.start IS NULL OR d.start > e THEN 'PENDING'
                      WHEN d."end" IS NULL OR d."end" > e THEN 'RUNNING'
                      ELSE d.state END,
                 'normal', 'n1']
    FROM pg_temp.sdb d
    WHERE d.cluster = c AND d.known_from <= e AND e < d.known_until
      AND d.submit <= e AND (d."end" IS NULL OR d."end" >= s)
$$;

CREATE TEMP TABLE outcome AS
    SELECT ''::text AS cluster, now() AS at, now() AS window_start, * FROM hpcacct.load_sacct() WHERE false;
-- One `hpcacct-sacct run -M c` at instant e: the window from the watermark minus the default
-- overlap (3600 s) to e, staged and loaded in one transaction with the watermark e.
CREATE FUNCTION pg_temp.run(c text, e timestamptz) RETURNS void LANGUAGE plpgsql AS $$
    DECLARE
        s timestamptz := coalesce(hpcacct.sacct_window_start(c, '3600 seconds'), '2024-10-01 00:00+02');
    BEGIN
        INSERT INTO hpcacct.sacct_staging (lineno, line, cluster, jobid, jobidraw, account, "user", partition, submit,
                                           start, "end", elapsedraw, alloctres, reqtres, state, qos, nodelist)
        SELECT x.n, array_to_string(x.f, '|'), x.f[1], x.f[2], x.f[3], x.f[4], x.f[5], x.f[6], x.f[7], x.f[8],
               x.f[9], x.f[10], x.f[11], x.f[12], x.f[13], x.f[14], x.f[15]
        FROM pg_temp.sacct(c, s, e) x;
        INSERT INTO outcome SELECT c, e, s, * FROM hpcacct.load_sacct(e, ARRAY[c]);
    END
$$;
-- What must hold after every load, one row per breach.
CREATE TEMP TABLE breach (at timestamptz, what text);
CREATE FUNCTION pg_temp.check(e timestamptz, clusters text[]) RETURNS void LANGUAGE sql AS $$
    INSERT INTO pg_temp.breach
    SELECT e, 'watermark of ' || c || ' is ' || coalesce(w.loaded_through::text, 'missing')
    FROM unnest(clusters) c LEFT JOIN hpcacct.sacct_watermark w ON w.cluster = c
    WHERE w.loaded_through IS DISTINCT FROM e
    UNION ALL
    SELECT e, 'staging holds lines' WHERE EXISTS (SELECT 1 FROM hpcacct.sacct_staging)
    UNION ALL
    -- a run's net charge is 0 or its positive charge rows net of their reversals: charged once
    SELECT e, 'run ' || l.cluster || ' ' || l.jobid || ' nets ' || sum(l.amount) || ' over '
              || count(*) FILTER (WHERE l.amount > 0) || ' charges and ' || count(*) FILTER (WHERE l.amount < 0)
              || ' reversals'
    FROM hpcacct.ledger l WHERE l.kind = 'charge'
    GROUP BY l.cluster, l.jobid, l.job_submit
    HAVING count(*) FILTER (WHERE l.amount > 0) <> count(*) FILTER (WHERE l.amount < 0) + 1
    UNION ALL
    SELECT e, 'rollup of ' || coalesce(r.account, l.account) || ' is ' || coalesce(r.amount, 0) || ', ledger '
              || coalesce(l.amount, 0)
    FROM (SELECT c.account, sum(c.amount) AS amount FROM hpcacct_internal.charge_rollup_exact c GROUP BY c.account) r
    FULL JOIN (SELECT l.account, sum(l.amount) AS amount FROM hpcacct.ledger l WHERE l.kind = 'charge'
               GROUP BY l.account) l ON l.account = r.account
    WHERE r.amount IS DISTINCT FROM l.amount
$$;
-- The clusters loaded every `step` from `a` (included) to `b` (excluded). (Only the hours
-- something happens are lived window by window: in one transaction every load's temporary
-- tables hold their locks to the end, and a month of 30-minute windows exceeds the lock table.)
CREATE FUNCTION pg_temp.live(a timestamptz, b timestamptz, step interval DEFAULT '30 minutes',
                             clusters text[] DEFAULT ARRAY['alpha', 'beta']) RETURNS void
    LANGUAGE plpgsql AS $$
    DECLARE
        e timestamptz;
        c text;
    BEGIN
        FOR e IN SELECT g FROM generate_series(a, b - interval '1 microsecond', step) g LOOP
            FOREACH c IN ARRAY clusters LOOP
                PERFORM pg_temp.run(c, e);
            END LOOP;
            PERFORM pg_temp.check(e, clusters);
        END LOOP;
    END
$$;
-- A run's net charge, and its charge rows.
CREATE FUNCTION pg_temp.net(c text, id text) RETURNS numeric LANGUAGE sql AS
    $$SELECT sum(amount) FROM hpcacct.ledger WHERE kind = 'charge' AND cluster = c AND jobid = id$$;
CREATE FUNCTION pg_temp.rows(c text, id text) RETURNS numeric[] LANGUAGE sql AS
    $$SELECT array_agg(amount ORDER BY entry_id) FROM hpcacct.ledger WHERE kind = 'charge' AND cluster = c AND jobid = id$$;

-- ==== The month's slurmdbd (times local to Berlin: +02 until 27 October 03:00, +01 after)
INSERT INTO sdb (cluster, jobid, jobidraw, account, "user", partition, submit, start, "end", alloctres, state,
                 known_from, known_until) VALUES
    -- 30 September 22:00 to 1 October 02:00: in the first window (--since 1 October), half in each quarter
    ('alpha', '1000', '1000', 'phys', 'u2', 'cpu', '2024-09-30 21:00+02', '2024-09-30 22:00+02', '2024-10-01 02:00+02',
     'cpu=1', 'COMPLETED', '-infinity', 'infinity'),
    -- 1 October: a job with its steps (in a file without --allocations); 4 cores, 8G: 4 eq x 2 h
    ('alpha', '1001', '1001', 'chem', 'u1', 'cpu', '2024-10-01 08:00+02', '2024-10-01 08:05+02', '2024-10-01 10:05+02',
     'billing=4,cpu=4,mem=8G,node=1', 'COMPLETED', '-infinity', 'infinity'),
    ('alpha', '1001.batch', '1001.batch', 'chem', '', '', '2024-10-01 08:05+02', '2024-10-01 08:05+02', '2024-10-01 10:05+02',
     'cpu=4,mem=8G,node=1', 'COMPLETED', '-infinity', 'infinity'),
    ('alpha', '1001.extern', '1001.extern', 'chem', '', '', '2024-10-01 08:05+02', '2024-10-01 08:05+02', '2024-10-01 10:05+02',
     'billing=4,cpu=4,mem=8G,node=1', 'COMPLETED', '-infinity', 'infinity'),
    ('alpha', '1001.0', '1001.0', 'chem', '', '', '2024-10-01 08:06+02', '2024-10-01 08:06+02', '2024-10-01 10:04+02',
     'cpu=4,mem=8G,node=1', 'COMPLETED', '-infinity', 'infinity'),
    -- the same job id on beta (another job): 4 cores, 8G with beta's 2G bundle: 4 eq x 3 h x 0.5
    ('beta', '1001', '1001', 'chem', 'u1', 'cpu', '2024-10-01 09:00+02', '2024-10-01 09:00+02', '2024-10-01 12:00+02',
     'billing=4,cpu=4,mem=8G,node=1', 'COMPLETED', '-infinity', 'infinity'),
    -- 2 October: an array of three tasks, started one after the other; the pending ones are
    -- one line 1002_[1-3], then 1002_[2-3]; the last task has the array's raw id (as Slurm prints it)
    ('alpha', '1002_[1-3]', '1002', 'chem', 'u1', 'cpu', '2024-10-02 08:40+02', NULL, NULL, 'cpu=2', 'PENDING',
     '-infinity', '2024-10-02 09:10+02'),
    ('alpha', '1002_[2-3]', '1002', 'chem', 'u1', 'cpu', '2024-10-02 08:40+02', NULL, NULL, 'cpu=2', 'PENDING',
     '2024-10-02 09:10+02', '2024-10-02 09:40+02'),
    ('alpha', '1002_1', '1003', 'chem', 'u1', 'cpu', '2024-10-02 08:40+02', '2024-10-02 09:10+02', '2024-10-02 09:40+02',
     'cpu=2', 'COMPLETED', '2024-10-02 09:10+02', 'infinity'),
    ('alpha', '1002_2', '1004', 'chem', 'u1', 'cpu', '2024-10-02 08:40+02', '2024-10-02 09:40+02', '2024-10-02 11:10+02',
     'cpu=2', 'COMPLETED', '2024-10-02 09:40+02', 'infinity'),
    ('alpha', '1002_3', '1002', 'chem', 'u1', 'cpu', '2024-10-02 08:40+02', '2024-10-02 11:10+02', '2024-10-02 14:10+02',
     'cpu=2', 'FAILED', '2024-10-02 09:40+02', 'infinity'),
    -- 3 October: requeued after an hour (node failure), then run again as a new record
    ('alpha', '1005', '1005', 'phys', 'u2', 'cpu', '2024-10-03 10:00+02', '2024-10-03 10:00+02', '2024-10-03 11:00+02',
     'cpu=8', 'REQUEUED', '-infinity', 'infinity'),
    ('alpha', '1005', '1005', 'phys', 'u2', 'cpu', '2024-10-03 11:00+02', '2024-10-03 11:30+02', '2024-10-03 13:30+02',
     'cpu=8', 'COMPLETED', '2024-10-03 11:00+02', 'infinity'),
    -- 4 October: 16 hours (End Unknown in 32 windows), and a job cancelled while pending
    ('alpha', '1006', '1006', 'chem', 'u1', 'cpu', '2024-10-04 06:00+02', '2024-10-04 06:00+02', '2024-10-04 22:00+02',
     'cpu=1,mem=4G', 'COMPLETED', '-infinity', 'infinity'),
    ('alpha', '1007', '1007', 'chem', 'u1', 'cpu', '2024-10-04 07:00+02', NULL, '2024-10-04 07:30+02',
     'cpu=1', 'CANCELLED by 1000', '-infinity', 'infinity'),
    ('alpha', '1015', '1015', 'root', 'root', 'cpu', '2024-10-04 07:00+02', '2024-10-04 07:00+02', '2024-10-04 08:00+02',
     'cpu=1', 'COMPLETED', '-infinity', 'infinity'),
    -- 5 October: an account sacctmgr has and hpcacct not yet (created on the 6th at 09:00)
    -- corrected in slurmdbd at 14:20 (it ended at 13:30) while it waits in the quarantine
    ('alpha', '1008', '1008', 'bio', 'u3', 'cpu', '2024-10-05 12:00+02', '2024-10-05 12:00+02', '2024-10-05 14:00+02',
     'cpu=2', 'COMPLETED', '-infinity', '2024-10-05 14:20+02'),
    ('alpha', '1008', '1008', 'bio', 'u3', 'cpu', '2024-10-05 12:00+02', '2024-10-05 12:00+02', '2024-10-05 13:30+02',
     'cpu=2', 'COMPLETED', '2024-10-05 14:20+02', 'infinity'),
    -- 8 October: on the partition that has no rate before the 10th
    ('alpha', '1009', '1009', 'chem', 'u1', 'big', '2024-10-08 10:00+02', '2024-10-08 10:00+02', '2024-10-08 12:00+02',
     'cpu=4,mem=16G', 'COMPLETED', '-infinity', 'infinity'),
    -- 15 October: charged as 4 cores for 2 hours; at 10:20 slurmdbd's record is corrected
    -- (it ended at 09:30, on 6 cores)
    ('alpha', '1010', '1010', 'phys', 'u2', 'cpu', '2024-10-15 08:00+02', '2024-10-15 08:00+02', '2024-10-15 10:00+02',
     'cpu=4', 'COMPLETED', '-infinity', '2024-10-15 10:20+02'),
    ('alpha', '1010', '1010', 'phys', 'u2', 'cpu', '2024-10-15 08:00+02', '2024-10-15 08:00+02', '2024-10-15 09:30+02',
     'cpu=6', 'COMPLETED', '2024-10-15 10:20+02', 'infinity'),
    -- 20 October: a job that ends in the window whose load fails
    ('alpha', '1016', '1016', 'chem', 'u1', 'cpu', '2024-10-20 10:00+02', '2024-10-20 10:00+02', '2024-10-20 11:50+02',
     'cpu=3', 'COMPLETED', '-infinity', 'infinity'),
    -- 22 October: seen running at 10:00; slurmdbd is down from 10:30 to 13:00 (sacct fails, the
    -- runs load nothing) and the job ends at 11:00; slurmctld sends the end when its backlog
    -- reaches it, at 13:10, after the 13:00 run saw the job running again
    ('alpha', '1017', '1017', 'chem', 'u1', 'cpu', '2024-10-22 08:00+02', '2024-10-22 08:00+02', NULL,
     'cpu=2', 'RUNNING', '-infinity', '2024-10-22 13:10+02'),
    ('alpha', '1017', '1017', 'chem', 'u1', 'cpu', '2024-10-22 08:00+02', '2024-10-22 08:00+02', '2024-10-22 11:00+02',
     'cpu=2', 'COMPLETED', '2024-10-22 13:10+02', 'infinity'),
    -- on beta (the same slurmdbd), pending when it goes down, run from 11:00 to 11:50; its
    -- start and end reach slurmdbd at 13:10 too: 4 cores x 50 min x 0.5
    ('beta', '2002', '2002', 'phys', 'u2', 'cpu', '2024-10-22 09:50+02', NULL, NULL,
     'cpu=4', 'PENDING', '-infinity', '2024-10-22 13:10+02'),
    ('beta', '2002', '2002', 'phys', 'u2', 'cpu', '2024-10-22 09:50+02', '2024-10-22 11:00+02', '2024-10-22 11:50+02',
     'cpu=4', 'COMPLETED', '2024-10-22 13:10+02', 'infinity'),
    -- on beta, a job pending from 12:40 on 22 October, held at 14:10 by hpcacct-slurm-sync (a
    -- held job's Eligible is Unknown: sacct's windows no longer show it), released on
    -- 23 October and run 09:00-10:00: 2 cores x 1 h x 0.5
    ('beta', '2003', '2003', 'phys', 'u2', 'cpu', '2024-10-22 12:40+02', NULL, NULL,
     'cpu=2', 'PENDING', '-infinity', '2024-10-22 14:10+02'),
    ('beta', '2003', '2003', 'phys', 'u2', 'cpu', '2024-10-22 12:40+02', '2024-10-23 09:00+02', '2024-10-23 10:00+02',
     'cpu=2', 'COMPLETED', '2024-10-23 08:00+02', 'infinity'),
    -- and a record slurmdbd loses (restored from a backup taken before the job): seen running, then never again
    ('alpha', '1018', '1018', 'phys', 'u2', 'cpu', '2024-10-22 14:00+02', '2024-10-22 14:00+02', NULL,
     'cpu=1', 'RUNNING', '-infinity', '2024-10-22 14:40+02'),
    -- 27 October, the night the clocks go back (03:00 CEST is 02:00 CET): 01:30 CEST to
    -- 03:30 CET is 3 hours; one ending in the repeated hour, 02:10 CEST to 02:50 CET, 1 h 40 min
    ('alpha', '1011', '1011', 'chem', 'u1', 'cpu', '2024-10-27 01:00+02', '2024-10-27 01:30+02', '2024-10-27 03:30+01',
     'cpu=2', 'COMPLETED', '-infinity', 'infinity'),
    ('alpha', '1012', '1012', 'phys', 'u2', 'cpu', '2024-10-27 02:00+02', '2024-10-27 02:10+02', '2024-10-27 02:50+01',
     'cpu=3', 'COMPLETED', '-infinity', 'infinity'),
    ('beta', '2001', '2001', 'phys', 'u2', 'cpu', '2024-10-27 00:00+02', '2024-10-27 00:00+02', '2024-10-27 06:00+01',
     'cpu=2,mem=8G', 'COMPLETED', '-infinity', 'infinity'),
    -- 31 October: across the month's end (half in each month), and one still running on 1 November
    ('alpha', '1013', '1013', 'phys', 'u2', 'cpu', '2024-10-31 22:00+01', '2024-10-31 22:00+01', '2024-11-01 02:00+01',
     'cpu=1', 'COMPLETED', '-infinity', 'infinity'),
    ('alpha', '1014', '1014', 'chem', 'u1', 'cpu', '2024-10-31 20:00+01', '2024-10-31 20:00+01', NULL,
     'cpu=1', 'RUNNING', '-infinity', 'infinity');

-- By hand, per run (cluster, jobid, submit): the README's equivalents x hours x rate.
CREATE TEMP TABLE hand (cluster text, jobid text, submit timestamptz, amount numeric);
INSERT INTO hand VALUES
    ('alpha', '1000', '2024-09-30 21:00+02', 1 * 4),
    ('alpha', '1001', '2024-10-01 08:00+02', 4 * 2 * 1),               -- max(4/1, 8G/4G) = 4 eq, 2 h
    ('beta', '1001', '2024-10-01 09:00+02', 4 * 3 * 0.5),              -- max(4/1, 8G/2G) = 4 eq, 3 h, 0.5
    ('alpha', '1002_1', '2024-10-02 08:40+02', 2 * 0.5),
    ('alpha', '1002_2', '2024-10-02 08:40+02', 2 * 1.5),
    ('alpha', '1002_3', '2024-10-02 08:40+02', 2 * 3),                 -- failed: charged as it ran
    ('alpha', '1005', '2024-10-03 10:00+02', 8 * 1),                   -- the requeued run
    ('alpha', '1005', '2024-10-03 11:00+02', 8 * 2),
    ('alpha', '1006', '2024-10-04 06:00+02', 1 * 16),
    ('alpha', '1008', '2024-10-05 12:00+02', 2 * 1.5),                 -- as corrected
    ('alpha', '1009', '2024-10-08 10:00+02', 4 * 2 * 2),               -- max(4/1, 16G/8G) = 4 eq, 2 h, rate 2 (the row added later)
    ('alpha', '1010', '2024-10-15 08:00+02', 6 * 1.5),                 -- as corrected
    ('alpha', '1016', '2024-10-20 10:00+02', 3 * (110 / 60.0)),
    ('alpha', '1017', '2024-10-22 08:00+02', 2 * 3),
    ('beta', '2002', '2024-10-22 09:50+02', 4 * (50 / 60.0) * 0.5),
    ('beta', '2003', '2024-10-22 12:40+02', 2 * 1 * 0.5),
    ('alpha', '1011', '2024-10-27 01:00+02', 2 * 3),
    ('alpha', '1012', '2024-10-27 02:00+02', 3 * (100 / 60.0)),
    ('beta', '2001', '2024-10-27 00:00+02', 4 * 7 * 0.5),              -- max(2/1, 8G/2G) = 4 eq, 7 h
    ('alpha', '1013', '2024-10-31 22:00+01', 1 * 4);
UPDATE hand SET amount = round(amount, 6);

-- ==== 1 to 3 October
SELECT lives_ok($$SELECT pg_temp.live('2024-10-01 07:30+02', '2024-10-01 13:00+02')$$,
                '1 October: both clusters loaded every 30 minutes');
SELECT pg_temp.live('2024-10-02 08:30+02', '2024-10-02 15:00+02', '20 minutes', ARRAY['alpha']);
SELECT pg_temp.live('2024-10-03 09:30+02', '2024-10-03 14:00+02', '30 minutes', ARRAY['alpha']);
SELECT is((SELECT count(*) FROM outcome), (11 * 2 + 20 + 9)::bigint, 'one load per cluster and window');
SELECT is((SELECT array_agg(DISTINCT what) FROM breach), NULL,
          'after every load: the watermark is the window''s end, staging is empty, every run charged once, '
          'rollup = ledger');
SELECT is(pg_temp.rows('alpha', '1001'), ARRAY[8.000000], 'alpha 1001: one charge, 4 eq x 2 h, in however many windows');
SELECT is(pg_temp.rows('alpha', '1000'), ARRAY[4.000000], '1000, which ended in the first window (from --since): 1 core x 4 h');
SELECT is(pg_temp.rows('beta', '1001'), ARRAY[6.000000], 'beta 1001, the same id on the other cluster: its own charge');
SELECT is((SELECT sum(steps)::bigint FROM outcome WHERE cluster = 'alpha' AND at < '2024-10-02'),
          (SELECT count(*) FROM outcome o, sdb d WHERE o.cluster = 'alpha' AND d.jobid LIKE '1001.%' AND o.at < '2024-10-02'
             AND d.start <= o.at AND d."end" >= o.window_start),
          'the steps are counted as steps in every window that shows them');
SELECT is((SELECT count(*) FROM job WHERE jobid ~ '[.\[]'), 0::bigint, 'no step and no pending array line is stored');
SELECT is((SELECT sum(unfinished)::bigint FROM outcome WHERE at IN ('2024-10-02 08:50+02', '2024-10-02 09:10+02')),
          3::bigint, 'the pending array line 1002_[1-3], then 1002_[2-3] and the running task 1002_1: unfinished');
SELECT is((SELECT array_agg(jobid || '=' || net ORDER BY jobid) FROM (
               SELECT jobid, sum(amount) AS net FROM ledger WHERE kind = 'charge' AND jobid LIKE '1002%' GROUP BY jobid) s),
          ARRAY['1002_1=1.000000', '1002_2=3.000000', '1002_3=6.000000'], 'the array''s tasks, each charged as it ran');
SELECT is((SELECT array_agg(o.at ORDER BY o.at) FROM outcome o WHERE o.cluster = 'alpha' AND o.inserted > 0
             AND (o.at AT TIME ZONE 'Europe/Berlin')::date = '2024-10-02'),
          ARRAY['2024-10-02 09:50+02', '2024-10-02 11:10+02', '2024-10-02 14:10+02']::timestamptz[],
          'each task charged by the first window that shows its end');
SELECT is((SELECT array_agg(amount ORDER BY job_submit) FROM ledger WHERE kind = 'charge' AND jobid = '1005'),
          ARRAY[8.000000, 16.000000], 'the requeued job: both runs, each charged once');
SELECT is((SELECT array_agg(state ORDER BY submit) FROM job WHERE jobid = '1005'), ARRAY['REQUEUED', 'COMPLETED'],
          'both kept under the same id with their states');

-- ==== 4 to 6 October: the long job, the cancelled one, root's, and the account created on the 6th
SELECT pg_temp.live('2024-10-04 05:30+02', '2024-10-04 23:00+02', '30 minutes', ARRAY['alpha']);
SELECT is(pg_temp.rows('alpha', '1006'), ARRAY[16.000000], '1006 charged once after 16 hours');
SELECT is((SELECT count(*) FROM outcome WHERE cluster = 'alpha' AND unfinished > 0
             AND at BETWEEN '2024-10-04 06:00+02' AND '2024-10-04 22:00+02'),
          32::bigint, 'and counted unfinished in the 32 windows that showed it running (06:00 to 21:30)');
SELECT is(pg_temp.net('alpha', '1007'), NULL, '1007, cancelled while pending: not charged');
SELECT is((SELECT count(*) FROM outcome WHERE cluster = 'alpha' AND never_started > 0), 4::bigint,
          'counted never_started in the 4 windows that showed it ended (07:30 to 09:00)');
SELECT is(pg_temp.net('alpha', '1015'), NULL, 'root''s job: not charged');
SELECT is((SELECT count(*) FROM outcome WHERE cluster = 'alpha' AND ignored > 0), 6::bigint,
          'counted ignored in the 6 windows that showed it, running or ended (07:00 to 09:30)');
SELECT pg_temp.live('2024-10-05 11:30+02', '2024-10-05 15:00+02', '30 minutes', ARRAY['alpha']);
SELECT pg_temp.live('2024-10-06 08:00+02', '2024-10-06 09:00+02');
SELECT is((SELECT count(*) FROM sacct_quarantine WHERE jobid IN ('1007', '1015')), 0::bigint,
          'neither the cancelled job nor root''s is quarantined');
SELECT is((SELECT sqlstate || ' ' || reason || ' ' || (resolved_at IS NULL) FROM sacct_quarantine WHERE jobid = '1008'),
          '42704 unknown account "bio" true', 'bio''s job is quarantined with its reason, open');
SELECT is((SELECT "end" FROM sacct_quarantine WHERE jobid = '1008'),
          extract(epoch FROM '2024-10-05 13:30+02'::timestamptz)::bigint::text,
          'the row holds the corrected line, seen by the 14:30 window');
SELECT is((SELECT attempts FROM sacct_quarantine WHERE jobid = '1008'),
          (SELECT count(*)::integer FROM outcome WHERE at >= '2024-10-05 14:00+02'),
          'and retried by every load since, either cluster''s');
SELECT is((SELECT count(*) FROM job WHERE jobid = '1008'), 0::bigint, 'nothing of it charged');

-- The account is created at 09:00 on the 6th (sync-accounts, an administrator): the next
-- load, whatever cluster it is for, charges the job from its quarantined line.
INSERT INTO account (name) VALUES ('bio');
INSERT INTO membership (account, username) VALUES ('bio', 'u3');
DO $$ BEGIN PERFORM hpcacct.deposit('bio', '2024-10-01', 100); END $$;
SELECT pg_temp.live('2024-10-06 09:00+02', '2024-10-06 10:00+02', '30 minutes', ARRAY['beta', 'alpha']);
SELECT is((SELECT (cluster, retried, resolved, inserted)::text FROM outcome WHERE at = '2024-10-06 09:00+02' AND cluster = 'beta'),
          '(beta,1,1,1)', 'the first load after it, beta''s, retried the row, charged the alpha job and resolved the row');
SELECT is(pg_temp.rows('alpha', '1008'), ARRAY[3.000000], 'charged once, as corrected: 2 cores x 1.5 h');
SELECT is((SELECT resolution FROM sacct_quarantine WHERE jobid = '1008'), 'inserted', 'resolution: inserted');
SELECT is((SELECT sum(retried)::bigint FROM outcome WHERE at > '2024-10-06 09:00+02' OR cluster = 'alpha' AND at = '2024-10-06 09:00+02'),
          0::bigint, 'no later load retries it');

-- ==== 8 and 12 October: a job on a partition with no rate at its start
SELECT pg_temp.live('2024-10-08 09:30+02', '2024-10-08 13:00+02', '30 minutes', ARRAY['alpha']);
SELECT is((SELECT sqlstate || ' ' || reason FROM sacct_quarantine WHERE jobid = '1009' AND resolved_at IS NULL),
          '42704 no resource for cluster "alpha" partition "big" at 2024-10-08 08:00:00+00',
          'a job with no rate at its start is quarantined with the partition and the instant');
-- the administrator gives the partition a rate before 10 October too
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, valid) VALUES
    ('alpha', 'big', 'cpu=96,mem=1T', 'cpu=1,mem=8G', 2, 'core-hours', '[2024-10-01 00:00+02,2024-10-10 00:00+02)');
SELECT pg_temp.live('2024-10-12 10:00+02', '2024-10-12 11:00+02', '30 minutes', ARRAY['alpha']);
SELECT is(pg_temp.rows('alpha', '1009'), ARRAY[16.000000], 'the next load charges it once: 4 eq x 2 h x 2');
SELECT is((SELECT resolution FROM sacct_quarantine WHERE jobid = '1009'), 'inserted', 'and resolves its row');

-- ==== 15 October: a job charged, then corrected in slurmdbd (ended at 09:30, on 6 cores)
SELECT pg_temp.live('2024-10-15 07:30+02', '2024-10-15 12:00+02', '10 minutes', ARRAY['alpha']);
SELECT is((SELECT array_agg(at ORDER BY at) FROM outcome WHERE cluster = 'alpha' AND (at AT TIME ZONE 'Europe/Berlin')::date = '2024-10-15'
             AND (inserted, rerated) <> (0, 0)),
          ARRAY['2024-10-15 10:00+02', '2024-10-15 10:20+02']::timestamptz[],
          'charged at its end, re-rated by the first window that shows the correction');
SELECT is(pg_temp.rows('alpha', '1010'), ARRAY[8.000000, -8.000000, 9.000000],
          'as 4 cores x 2 h, reversed, and 6 cores x 1.5 h');
SELECT is((SELECT (alloctres::text, "end") FROM job WHERE jobid = '1010'), ('cpu=6'::text, '2024-10-15 09:30+02'::timestamptz),
          'the job holds the corrected record');

-- ==== 20 October: a run that fails half way (sacct's lines staged, then the load refused:
-- the loader host's clock is two hours ahead). Nothing is loaded, the watermark stays, and
-- the next run's window (from the old watermark) charges the job that ended meanwhile.
SELECT pg_temp.live('2024-10-20 09:30+02', '2024-10-20 12:00+02', '30 minutes', ARRAY['alpha']);
CREATE FUNCTION pg_temp.failing_run(c text, e timestamptz) RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO hpcacct.sacct_staging (lineno, line, cluster, jobid, jobidraw, account, "user", partition, submit,
                                           start, "end", elapsedraw, alloctres, reqtres, state, qos, nodelist)
        SELECT x.n, array_to_string(x.f, '|'), x.f[1], x.f[2], x.f[3], x.f[4], x.f[5], x.f[6], x.f[7], x.f[8],
               x.f[9], x.f[10], x.f[11], x.f[12], x.f[13], x.f[14], x.f[15]
        FROM pg_temp.sacct(c, hpcacct.sacct_window_start(c, '3600 seconds'), e) x;
        PERFORM hpcacct.load_sacct(statement_timestamp() + interval '2 hours', ARRAY[c]);
    END
$$;
SELECT throws_ok($$SELECT pg_temp.failing_run('alpha', '2024-10-20 12:00+02')$$, '22023', NULL,
                 'the run at 12:00 fails (22023: its watermark is ahead of the server''s clock)');
SELECT is((SELECT loaded_through FROM sacct_watermark WHERE cluster = 'alpha'), '2024-10-20 11:30+02'::timestamptz,
          'the watermark has not moved');
SELECT is((SELECT count(*) FROM sacct_staging) + (SELECT count(*) FROM job WHERE jobid = '1016')
          + (SELECT count(*) FROM sacct_quarantine WHERE jobid = '1016'), 0::bigint,
          'nothing staged, charged or quarantined is left of it');
SELECT pg_temp.live('2024-10-20 12:30+02', '2024-10-20 13:00+02', '30 minutes', ARRAY['alpha']);
SELECT is((SELECT window_start FROM outcome WHERE at = '2024-10-20 12:30+02'), '2024-10-20 10:30+02'::timestamptz,
          'the next run''s window starts an hour before the old watermark');
SELECT is(pg_temp.rows('alpha', '1016'), ARRAY[5.500000], 'and charges the job once: 3 cores x 1 h 50 min');

-- ==== 22 October: slurmdbd down from 10:30 to 13:00; the job's end (11:00) reaches it at 13:10
SELECT pg_temp.live('2024-10-22 07:30+02', '2024-10-22 10:30+02');
SELECT pg_temp.live('2024-10-22 13:00+02', '2024-10-22 13:40+02');
SELECT is((SELECT array_agg(cluster || ' ' || unfinished ORDER BY cluster) FROM outcome WHERE at = '2024-10-22 13:00+02'),
          ARRAY['alpha 1', 'beta 2'], 'the runs at 13:00 still see 1017 running, 2002 and 2003 pending');
SELECT is((SELECT array_agg((jobid, start, first_seen, missing_since, lost_at)::text ORDER BY jobid) FROM sacct_running
           WHERE jobid IN ('1017', '2002')),
          ARRAY[('1017', '2024-10-22 08:00+02'::timestamptz, '2024-10-22 08:00+02'::timestamptz,
                 '2024-10-22 13:30+02'::timestamptz, NULL::timestamptz)::text],
          'the 13:30 window (from 12:00) shows neither: sacct_running marks 1017 missing; 2002, pending when last '
          'seen, is not kept (a held job leaves the windows too)');
SELECT pg_temp.live('2024-10-22 14:00+02', '2024-10-22 16:30+02');
SELECT is((SELECT array_agg(window_start ORDER BY at) FROM outcome WHERE cluster = 'alpha' AND at > '2024-10-22 13:00+02'
             AND at < '2024-10-23'),
          ARRAY['2024-10-22 12:00+02', '2024-10-22 08:00+02', '2024-10-22 13:00+02', '2024-10-22 13:30+02',
                '2024-10-22 14:00+02', '2024-10-22 14:30+02']::timestamptz[],
          'so alpha''s 14:00 window starts at 1017''s start, 08:00; the next from the watermark again; 1018''s start, '
          '14:00, at 15:30');
SELECT is((SELECT array_agg(window_start ORDER BY at) FROM outcome WHERE cluster = 'beta' AND at > '2024-10-22 13:00+02'
             AND at < '2024-10-22 16:30+02'),
          ARRAY['2024-10-22 12:00+02', '2024-10-22 12:30+02', '2024-10-22 13:00+02', '2024-10-22 13:30+02',
                '2024-10-22 14:00+02', '2024-10-22 14:30+02']::timestamptz[],
          'beta''s windows start from the watermark: neither 2002 nor 2003, held at 14:10, moves one back to its submit');
SELECT is(pg_temp.rows('beta', '2002'), NULL, '2002, run during the outage, is in none of the runs'' windows');
-- the README's step after slurmdbd was down: its outage loaded again (hpcacct-sacct load of
-- sacct -S <outage start>, no watermark) once slurmctld's backlog has reached it
INSERT INTO sacct_staging (lineno, line, cluster, jobid, jobidraw, account, "user", partition, submit,
                           start, "end", elapsedraw, alloctres, reqtres, state, qos, nodelist)
SELECT x.n, array_to_string(x.f, '|'), x.f[1], x.f[2], x.f[3], x.f[4], x.f[5], x.f[6], x.f[7], x.f[8],
       x.f[9], x.f[10], x.f[11], x.f[12], x.f[13], x.f[14], x.f[15]
FROM pg_temp.sacct('beta', '2024-10-22 10:30+02', '2024-10-22 16:30+02') x;
SELECT is((SELECT array[inserted, unchanged, unfinished] FROM load_sacct()), ARRAY[1, 0, 0]::bigint[],
          'which charges 2002 (1 inserted; 2003, held, is not shown)');
SELECT pg_temp.check('2024-10-22 16:00+02', ARRAY['beta']);
SELECT is(pg_temp.rows('beta', '2002'), ARRAY[1.666667], 'once: 4 eq x 50 min x 0.5');
SELECT is((SELECT array_agg(jobid || ' ' || coalesce(missing_since::text, '-') || ' ' || coalesce(lost_at::text, '-'))
           FROM sacct_running WHERE submit::date = '2024-10-22'),
          ARRAY['1018 ' || '2024-10-22 15:00+02'::timestamptz || ' ' || '2024-10-22 15:30+02'::timestamptz],
          '1017 and 2002 are forgotten once charged; 1018, missing from the 15:00 window and from the 15:30 one, from its start, '
          'is kept as lost, and moves no later window');
SELECT is(pg_temp.rows('alpha', '1017'), ARRAY[6.000000],
          'a job seen running whose end slurmdbd records more than the overlap late is charged: 2 cores x 3 h');

-- ==== 23 October: 2003, released, runs 09:00-10:00; beta's windows charge it as any job
SELECT pg_temp.live('2024-10-23 08:30+02', '2024-10-23 11:00+02', '30 minutes', ARRAY['beta']);
SELECT is(pg_temp.rows('beta', '2003'), ARRAY[1.000000], '2003, released and run: 2 cores x 1 h x 0.5, once');
SELECT is((SELECT count(*) FROM sacct_running WHERE jobid IN ('2002', '2003')), 0::bigint,
          'and nothing of 2002 or 2003 is left in sacct_running');

-- ==== 26 to 27 October: the night the clocks go back, windows every 20 minutes
SELECT pg_temp.live('2024-10-26 23:00+02', '2024-10-27 08:00+01', '20 minutes');
SELECT is((SELECT count(*) FROM outcome WHERE at > '2024-10-26 22:00+02' AND at < '2024-10-27 09:00+01'),
          (10 * 3 * 2)::bigint, '10 hours of real time (9 on the clock): 30 windows per cluster');
SELECT is(pg_temp.rows('alpha', '1011'), ARRAY[6.000000], '01:30 CEST to 03:30 CET: 2 cores x 3 h');
SELECT is(pg_temp.rows('alpha', '1012'), ARRAY[5.000000], '02:10 CEST to 02:50 CET: 3 cores x 1 h 40 min');
SELECT is(pg_temp.rows('beta', '2001'), ARRAY[14.000000], 'beta: 00:00 CEST to 06:00 CET: 4 eq x 7 h x 0.5');

-- ==== 31 October to 1 November: a job across the month's end, one still running
SELECT pg_temp.live('2024-10-31 19:00+01', '2024-11-01 03:00+01');
SELECT is(pg_temp.rows('alpha', '1013'), ARRAY[4.000000], '22:00 to 02:00: 1 core x 4 h');
SELECT is((SELECT array_agg(month || '=' || amount ORDER BY month) FROM (
               SELECT month, sum(amount)::numeric(20, 6) AS amount FROM hpcacct_internal.charge_rollup_exact
               WHERE account = 'phys' AND resource_id = (SELECT resource_id FROM resource WHERE cluster = 'alpha' AND partition = 'cpu')
               GROUP BY month) m),
          ARRAY['2024-09-01=2.000000', '2024-10-01=42.000000', '2024-11-01=2.000000'],
          'the rollup counts half of it in each month (phys on alpha: 2 + 8 + 16 + 9 + 5 + 2 in October; '
          'half of 1000 in September)');
SELECT is(pg_temp.net('alpha', '1014'), NULL, 'the job still running is not charged yet');

-- ==== The month's end: the ledger against the hand, the rollups against the ledger
SELECT is((SELECT array_agg(DISTINCT what) FROM breach), NULL,
          'after every load of the month: watermark, staging, every run charged once, rollup = ledger');
SELECT set_eq($$SELECT cluster, jobid, job_submit, sum(amount) FROM ledger WHERE kind = 'charge'
                GROUP BY cluster, jobid, job_submit HAVING sum(amount) <> 0$$,
              $$SELECT cluster, jobid, submit, amount FROM hand$$,
              'every run nets to its charge by hand, and nothing else is charged');
SELECT is((SELECT array_agg(jobid ORDER BY jobid) FROM (
               SELECT jobid FROM ledger WHERE kind = 'charge' AND amount > 0 GROUP BY cluster, jobid, job_submit
               HAVING count(*) > 1) r),
          ARRAY['1010'], 'only the corrected job was charged twice (with its reversal between)');
-- every finished run slurmdbd has is charged, or has a row saying why it is not
SELECT is((SELECT array_agg(d.cluster || ' ' || d.jobid ORDER BY d.cluster, d.jobid) FROM sdb d
           WHERE d.known_until = 'infinity' AND d.start IS NOT NULL AND d."end" IS NOT NULL
             AND d.jobid !~ '[.\[]' AND d.account <> 'root'
             AND NOT EXISTS (SELECT 1 FROM job j WHERE j.cluster = d.cluster AND j.jobid = d.jobid AND j.submit = d.submit)
             AND NOT EXISTS (SELECT 1 FROM sacct_quarantine q WHERE q.cluster = d.cluster AND q.jobid = d.jobid
                             AND q.resolved_at IS NULL)),
          NULL, 'no finished run is lost: each is a job or an open quarantine row');
SELECT is((SELECT array_agg(jobid || ' ' || resolution ORDER BY jobid) FROM sacct_quarantine),
          ARRAY['1008 inserted', '1009 inserted'], 'the quarantine: two rows, both resolved by the load that charged them');
SELECT set_eq($$SELECT account, month, sum(amount) FROM hpcacct_internal.charge_rollup_exact GROUP BY account, month$$,
              $$SELECT account, month, sum(amount) FROM charge_by_month GROUP BY account, month$$,
              'the rollup per account and month equals the ledger split by month');
SELECT lives_ok('SELECT rebuild_rollup()', 'the rollup rebuilt from the ledger');
SELECT set_eq($$SELECT account, month, sum(amount) FROM hpcacct_internal.charge_rollup_exact GROUP BY account, month$$,
              $$SELECT account, month, sum(amount) FROM charge_by_month GROUP BY account, month$$,
              'has the same sums');
SELECT is((SELECT array_agg(account || ' ' || charges || ' ' || balance ORDER BY account) FROM quarter_balances
           WHERE quarter = '2024-10-01'),
          ARRAY['bio 3.000000 97.000000', 'chem 73.500000 926.500000', 'phys 60.666667 439.333333'],
          'the quarter''s balances: chem 8 + 6 + 1 + 3 + 6 + 16 + 16 + 5.5 + 6 + 6, phys 2 (half of 1000) + 24 + 9 + 1.666667 + 1 + 5 + 14 + 4, '
          'bio 3');
SELECT is((SELECT array_agg(account || ' ' || charges || ' ' || balance ORDER BY account) FROM quarter_balances
           WHERE quarter = '2024-07-01'),
          ARRAY['phys 2.000000 -2.000000'], 'the other half of 1000 in the third quarter, which has no deposit');
SELECT is((SELECT array_agg(balance(a, '2024-11-15') ORDER BY a) FROM unnest(ARRAY['bio', 'chem', 'phys']) a),
          ARRAY[97.000000, 926.500000, 439.333333], 'and balance() says the same');
SELECT is((SELECT array_agg(jobid || ' ' || (lost_at IS NOT NULL) ORDER BY jobid) FROM sacct_running),
          ARRAY['1014 false', '1018 true'], 'sacct_running: the job still running, and the run slurmdbd lost');
-- a portal user (u2, of phys) sees phys's runs only, and the loader's role none
CALL setup_roles();
CREATE ROLE u2 LOGIN IN ROLE hpcacct_portal;
CREATE ROLE life_ingest LOGIN IN ROLE hpcacct_ingest;
SET SESSION AUTHORIZATION u2;
SELECT is((SELECT array_agg(jobid ORDER BY jobid) FROM hpcacct.sacct_running), ARRAY['1018'],
          'a portal user sees the runs of their accounts in sacct_running');
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION life_ingest;
SELECT throws_ok('SELECT * FROM hpcacct.sacct_running', '42501', NULL, 'the loader''s role cannot read it');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT array_agg(cluster || ' ' || loaded_through ORDER BY cluster) FROM sacct_watermark),
          (SELECT array_agg(c || ' ' || '2024-11-01 02:30+01'::timestamptz ORDER BY c) FROM unnest(ARRAY['alpha', 'beta']) c),
          'each cluster''s watermark is its last window''s end');

SELECT * FROM finish();
ROLLBACK;
