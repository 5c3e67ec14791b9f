-- Scheduled procedures run twice, late, out of order and at the same time (README, "Scheduled
-- runs": what each does). regulate(), open_quarter(), notify_scan(), recheck_queued(),
-- compact_rollup() and roll_up_pending(): a second run of the same day changes no row (every
-- table they write, compared before and after); a late run gives the figures of one on time;
-- a past day after a later one is refused (22023) or does what the README says; and two
-- sessions running one at once (dblink, in a scratch database of this file's own, as the runs
-- must commit): the second waits for the first and then changes nothing, no duplicate row,
-- no unique violation or deadlock.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(64);

INSERT INTO setting VALUES ('timezone', 'UTC') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;

-- Everything the scheduled procedures write, as one text per table (a snapshot to compare).
CREATE FUNCTION pg_temp.written() RETURNS TABLE (tbl text, content text) LANGUAGE sql AS $$
    SELECT 'ledger', string_agg(format('%s|%s|%s|%s|%s|%s|%s|%s|%s', entry_id, account, kind, amount, unit, pool,
                                       valid_from, valid_until, note), E'\n' ORDER BY entry_id) FROM hpcacct.ledger
    UNION ALL
    SELECT 'regulation_log', string_agg(g::text, E'\n' ORDER BY g::text) FROM hpcacct.regulation_log g
    UNION ALL
    SELECT 'quarter_log', string_agg(g::text, E'\n' ORDER BY g::text) FROM hpcacct.quarter_log g
    UNION ALL
    SELECT 'outbox', string_agg(format('%s|%s|%s|%s', o.message_id, o.topic, o.decision_key, o.account), E'\n'
                                ORDER BY o.message_id) FROM hpcacct.outbox o
    UNION ALL
    SELECT 'outbox_recipient', string_agg(r::text, E'\n' ORDER BY r::text) FROM hpcacct.outbox_recipient r
    UNION ALL
    SELECT 'quota_state_notified', string_agg(n::text, E'\n' ORDER BY n::text) FROM hpcacct.quota_state_notified n
    UNION ALL
    SELECT 'account', string_agg(a::text, E'\n' ORDER BY a::text) FROM hpcacct.account a
    UNION ALL
    SELECT 'hpc_user', string_agg(u::text, E'\n' ORDER BY u::text) FROM hpcacct.hpc_user u
    UNION ALL
    SELECT 'pending_job', string_agg(format('%s|%s|%s|%s|%s', p.cluster, p.jobid, p.held, p.hold_reason, p.hold_comment),
                                     E'\n' ORDER BY p.cluster, p.jobid) FROM hpcacct.pending_job p
    UNION ALL
    SELECT 'charge_rollup', string_agg(format('%s|%s|%s|%s|%s|%s|%s|%s|%s|%s', c.account, c.resource_id, c.unit,
                                              c.submitter, c.month, c.end_month, c.amount, c.job_amount, c.decayed,
                                              c.folded), E'\n' ORDER BY c::text) FROM hpcacct.charge_rollup c
    UNION ALL
    SELECT 'consumption_rollup', string_agg(c::text, E'\n' ORDER BY c::text) FROM hpcacct.consumption_rollup c
    UNION ALL
    SELECT 'fairshare_base', string_agg(b::text, E'\n' ORDER BY b::text) FROM hpcacct.fairshare_base b
    UNION ALL
    SELECT 'usage_base', string_agg(b::text, E'\n' ORDER BY b::text) FROM hpcacct.usage_base b
    UNION ALL
    SELECT 'rollup_pending', string_agg(p::text, E'\n' ORDER BY p::text) FROM hpcacct.rollup_pending p
$$;
CREATE TEMP TABLE before_run (tbl text, content text);
CREATE FUNCTION pg_temp.mark() RETURNS void LANGUAGE sql AS $$
    DELETE FROM before_run; INSERT INTO before_run SELECT * FROM pg_temp.written();
$$;
-- the tables whose content differs from the mark (none: '{}')
CREATE FUNCTION pg_temp.changed() RETURNS text[] LANGUAGE sql AS $$
    SELECT coalesce(array_agg(w.tbl ORDER BY w.tbl), '{}')
    FROM pg_temp.written() w JOIN before_run b USING (tbl)
    WHERE w.content IS DISTINCT FROM b.content
$$;

-- ---- fixtures: a GENCI project, an HLRN project with a member, an RWTH quota, a queued job ----
INSERT INTO regulation_machine (machine, monthly_threshold) VALUES ('s_ada', 1000000);
INSERT INTO account (name) VALUES ('s_gp');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('s_gp', 'grant', 1200000, 'hours', 's_ada', '2024-01-01', '2024-12-31');
SELECT add_user('s_u', '2024-01-05');
SELECT add_member('s_gp', 's_u', 'admin');
INSERT INTO account (name) VALUES ('s_bp');
SELECT deposit('s_bp', '2024-10-01', 1000);
SELECT add_member('s_bp', 's_u', 'admin');
SELECT add_user('s_v', '2024-01-05');   -- a personal account of no project: expires in Q4
INSERT INTO account (name) VALUES ('s_rw');
SELECT add_member('s_rw', 's_u', 'admin');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('s_rwth', 'c18m', 'cpu=48', 'cpu=1', 1, 'core-hours');
SELECT add_quota_period('s_rw', '2024-01-01', '2024-06-30', 1000, 's_rwth', 'core-hours');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
VALUES ('s_rwth', 'r1', 's_rw', 's_u', 'c18m', '2024-02-01 00:00+00', '2024-02-03 16:35+00', 'cpu=48', 'COMPLETED');
INSERT INTO pending_job (cluster, jobid, username, account) VALUES ('s_c', 'q1', 's_u', 's_nowhere');

-- ---- regulate(): twice, late, out of order ---------------------------------------------
CALL regulate('2024-02-15');
SELECT pg_temp.mark();
CALL regulate('2024-02-15');
SELECT is(pg_temp.changed(), '{}', 'regulate: a second run of 15 February changes no row');
-- 16 February's run is a no-op; 17 February's too (the 15th is not run again by them)
CALL regulate('2024-02-16');
CALL regulate('2024-02-17');
SELECT is(pg_temp.changed(), '{}', 'regulate: the days after the 15th change nothing');
-- 15 March run late (here long after): the figures at the end of 15 March, as on time; of
-- the jobs loaded since, one across midnight counts its part before the 16th (480 of 960
-- hours), one started on the 16th nothing
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('s_ada', 'cpu', 'cpu=40', 'cpu=1', 1, 'hours');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
VALUES ('s_ada', 'g1', 's_gp', 's_u', 'cpu', '2024-03-15 12:00+00', '2024-03-16 12:00+00', 'cpu=40', 'COMPLETED'),
       ('s_ada', 'g2', 's_gp', 's_u', 'cpu', '2024-03-16 01:00+00', '2024-03-16 03:00+00', 'cpu=40', 'COMPLETED');
CALL regulate('2024-03-15');
SELECT is((SELECT consumption FROM regulation_log WHERE account = 's_gp' AND run_date = '2024-03-15'), 480::float8,
          'regulate: 15 March run late counts the consumption up to the end of 15 March only');
SELECT results_eq($$SELECT outcome, figures_at, tmc::numeric(20, 3), tc::numeric(20, 3), retracted
                    FROM hpcacct.regulation_log WHERE account = 's_gp' AND run_date = '2024-03-15'$$,
                  $$VALUES ('retraction'::text, '2024-03-15'::date, 100000::numeric(20, 3), 250000::numeric(20, 3),
                            100000::numeric(20, 6))$$,
                  'regulate: 15 March run late decides on the figures at the end of 15 March (a retraction of TMC)');
SELECT pg_temp.mark();
CALL regulate('2024-03-15');
SELECT is(pg_temp.changed(), '{}', 'regulate: a re-run of a retraction books nothing more');
-- 15 April skipped, 15 May run: May's figures; then April is refused and stays skipped
CALL regulate('2024-05-15');
SELECT is((SELECT outcome FROM regulation_log WHERE account = 's_gp' AND run_date = '2024-05-15'), 'retraction',
          'regulate: 15 May after a skipped 15 April runs');
SELECT pg_temp.mark();
SELECT throws_ok($$CALL hpcacct.regulate('2024-04-15')$$, '22023', 'regulate: 2024-04-15 comes before the run of 2024-05-15, made already',
                 'regulate: the skipped 15 April after 15 May is refused');
SELECT is(pg_temp.changed(), '{}', 'regulate: the refused run wrote nothing');
SELECT throws_ok(format('CALL hpcacct.regulate(%L)', site_today() + 1), '22023', NULL, 'regulate: a day to come is refused');

-- ---- open_quarter(): twice, late, out of order -----------------------------------------
-- a later quarter that wrote nothing still comes first: Q2 2024 opened (no action: every
-- personal account has its allocation), then Q1 2024 would expire s_w, created in April
SAVEPOINT quarters;
SELECT add_user('s_w', '2024-04-02');
CALL open_quarter('2024-04-01');
SELECT is((SELECT count(*) FROM quarter_log), 0::bigint, 'open_quarter (setup): Q2 2024 has nothing to do');
SELECT pg_temp.mark();
SELECT throws_ok($$CALL hpcacct.open_quarter('2024-01-01')$$, '22023',
                 'open_quarter: the quarter of 2024-01-01 comes before the quarter 2024-04-01 opened already',
                 'open_quarter: Q1 after Q2 is refused though Q2 logged nothing');
SELECT is(pg_temp.changed(), '{}', 'open_quarter: that refused run wrote nothing (no expiry of s_w, no message)');
ROLLBACK TO SAVEPOINT quarters;
CALL open_quarter('2024-10-01');
SELECT is((SELECT array_agg(action || ':' || account ORDER BY action, account, target_quarter) FROM quarter_log
           WHERE quarter = '2024-10-01'),
          ARRAY['expired:s_v', 'top_up:s_u', 'top_up:s_u', 'top_up:s_u'],
          'open_quarter (setup): Q4 tops up s_u for three quarters and expires s_v');
SELECT pg_temp.mark();
CALL open_quarter('2024-10-01');
SELECT is(pg_temp.changed(), '{}', 'open_quarter: a second run of the same quarter changes no row');
-- run late: on 20 November it names the same quarter and changes nothing either
CALL open_quarter('2024-11-20');
SELECT is(pg_temp.changed(), '{}', 'open_quarter: a run later in the quarter changes no row');
-- Q1 2025 missed, Q2 2025 run: s_v expired at Q4 and at Q2 (not two starts in a row): kept
CALL open_quarter('2025-04-01');
SELECT is((SELECT array_agg(action ORDER BY action) FROM quarter_log WHERE account = 's_v'),
          ARRAY['expired', 'expired'], 'open_quarter: Q1 missed, Q2 expires s_v again and does not delete it');
SELECT pg_temp.mark();
SELECT throws_ok($$CALL hpcacct.open_quarter('2025-01-01')$$, '22023', NULL,
                 'open_quarter: the missed Q1 after Q2 is refused');
SELECT is(pg_temp.changed(), '{}', 'open_quarter: the refused run wrote nothing');

-- ---- notify_scan(): twice, late, out of order ------------------------------------------
SELECT is(notify_scan('2024-03-10'), 1, 'notify_scan (setup): March is low priority, one message');
SELECT pg_temp.mark();
SELECT is(notify_scan('2024-03-10'), 0, 'notify_scan: a second scan of the same day writes nothing');
SELECT is(pg_temp.changed(), '{}', 'notify_scan: and changes no row');
-- a scan missed for days: the next one tells the state of its day, once
SELECT is(notify_scan('2024-04-12'), 1, 'notify_scan: after missed days, the next scan tells the change back to normal');
SELECT pg_temp.mark();
SELECT throws_ok($$SELECT hpcacct.notify_scan('2024-03-20')$$, '22023', NULL,
                 'notify_scan: a day before the change notified is refused');
SELECT is(pg_temp.changed(), '{}', 'notify_scan: the refused scan wrote nothing');
-- a later scan that told nothing still comes first: 3 100 core-h in April make May low
-- priority and leave June normal; after the scan of 20 June (normal, as told), one of 10 May
-- would tell the members of a low priority that has passed (and the next scan of normal)
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
VALUES ('s_rwth', 'r4', 's_rw', 's_u', 'c18m', '2024-04-20 00:00+00', '2024-04-22 16:35+00', 'cpu=48', 'COMPLETED');
SELECT is(window_quota_state('s_rw', '2024-05-10') || ' ' || window_quota_state('s_rw', '2024-06-20'), 'low_priority normal',
          'notify_scan (setup): 10 May low priority, 20 June normal');
SELECT is(notify_scan('2024-06-20'), 0, 'notify_scan: 20 June, normal as told: nothing to write');
SELECT pg_temp.mark();
SELECT throws_ok($$SELECT hpcacct.notify_scan('2024-05-10')$$, '22023',
                 'notify_scan: 2024-05-10 comes before the scan of 2024-06-20',
                 'notify_scan: 10 May after the scan of 20 June is refused, though that scan wrote nothing');
SELECT is(pg_temp.changed(), '{}', 'notify_scan: that refused scan wrote nothing');

-- ---- recheck_queued(): twice --------------------------------------------------------------
SELECT is((SELECT count(*) FROM recheck_queued('2024-10-02')), 1::bigint, 'recheck_queued (setup): holds the job');
SELECT pg_temp.mark();
SELECT is((SELECT count(*) FROM recheck_queued('2024-10-02')), 0::bigint, 'recheck_queued: a second run reports nothing');
SELECT is(pg_temp.changed(), '{}', 'recheck_queued: and changes no row (but checked_at)');
-- out of order: s_bp's allocation starts on 1 October, so a job of it is fine on 2 October
-- and would be held by a check of 20 September, run after (and its owner told so)
INSERT INTO pending_job (cluster, jobid, username, account) VALUES ('s_c', 'q2', 's_u', 's_bp');
SELECT is((SELECT count(*) FROM recheck_queued('2024-10-03')), 0::bigint, 'recheck_queued (setup): q2 of s_bp runs on 3 October');
SELECT pg_temp.mark();
SELECT throws_ok($$SELECT * FROM hpcacct.recheck_queued('2024-09-20')$$, '22023',
                 'recheck_queued: 2024-09-20 comes before the check of 2024-10-03',
                 'recheck_queued: a day before the last check is refused');
SELECT is(pg_temp.changed(), '{}', 'recheck_queued: the refused check held nothing and wrote no message');

-- ---- compact_rollup(), roll_up_pending(): twice ----------------------------------------
SELECT ok(compact_rollup() >= 0, 'compact_rollup (setup)');
SELECT pg_temp.mark();
SELECT is(compact_rollup(), (SELECT count(*) FROM charge_rollup WHERE NOT folded), 'compact_rollup: a second run merges only the current month''s rows again');
SELECT is(pg_temp.changed(), '{}', 'compact_rollup: and changes no row');
INSERT INTO setting VALUES ('rollup', 'deferred');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
VALUES ('s_rwth', 'r2', 's_rw', 's_u', 'c18m', '2024-03-01 00:00+00', '2024-03-01 10:00+00', 'cpu=4', 'COMPLETED');
SELECT is(roll_up_pending(), 1::bigint, 'roll_up_pending (setup): one charge pending');
SELECT pg_temp.mark();
SELECT is(roll_up_pending(), 0::bigint, 'roll_up_pending: a second run rolls up nothing');
SELECT is(pg_temp.changed(), '{}', 'roll_up_pending: and changes no row');

-- the runs that keep their day (run_day) run as an administrator's login, as pg_cron runs them
CALL setup_roles();
CREATE ROLE s_admin LOGIN IN ROLE hpcacct_admin;
SET ROLE s_admin;
SELECT lives_ok($$CALL hpcacct.open_quarter('2025-04-02')$$, 'open_quarter runs as an hpcacct_admin login');
SELECT lives_ok($$SELECT hpcacct.notify_scan('2024-06-21')$$, 'notify_scan runs as an hpcacct_admin login');
SELECT lives_ok($$SELECT * FROM hpcacct.recheck_queued('2024-10-04')$$, 'recheck_queued runs as an hpcacct_admin login');
RESET ROLE;
SELECT is((SELECT array_agg(last_day ORDER BY run) FROM hpcacct_internal.run_day), '{2024-06-21,2025-04-01,2024-10-04}'::date[],
          'run_day holds the last day of each (notify_scan, open_quarter: its quarter''s first day, recheck_queued)');

-- ---- overlapping runs: two sessions at once (dblink), in a scratch database ------------------
-- Session a runs the procedure in an open transaction; session b starts the same run; the test
-- sees b wait on a lock, commits a, and takes b's outcome ('ok' or its SQLSTATE).
\set scratch hpcacct_sched_overlap
\set adm adm
\ir include/scratch_db.psql
SELECT dblink_connect('setup', :'srv' || ' dbname=hpcacct_sched_overlap');
SELECT dblink_exec('setup', $s$
    SET client_min_messages = warning;
    CREATE EXTENSION hpcacct CASCADE;
    SELECT hpcacct.create_job_table();
    SET search_path = public, hpcacct;
    INSERT INTO setting VALUES ('timezone', 'UTC');
    INSERT INTO regulation_machine (machine, monthly_threshold) VALUES ('s_ada', 1000000);
    INSERT INTO account (name) VALUES ('s_gp'), ('s_bp'), ('s_rw');
    INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
    VALUES ('s_gp', 'grant', 1200000, 'hours', 's_ada', '2024-01-01', '2024-12-31');
    SELECT add_user('s_u', '2024-01-05'), add_user('s_v', '2024-01-05');
    SELECT add_member('s_gp', 's_u', 'admin'), add_member('s_bp', 's_u', 'admin'), add_member('s_rw', 's_u', 'admin');
    SELECT deposit('s_bp', '2024-10-01', 1000);
    INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('s_rwth', 'c18m', 'cpu=48', 'cpu=1', 1, 'core-hours');
    SELECT add_quota_period('s_rw', '2024-01-01', '2024-06-30', 1000, 's_rwth', 'core-hours');
    INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
    VALUES ('s_rwth', 'r1', 's_rw', 's_u', 'c18m', '2024-02-01 00:00+00', '2024-02-03 16:35+00', 'cpu=48', 'COMPLETED');
    INSERT INTO pending_job (cluster, jobid, username, account) VALUES ('s_c', 'q1', 's_u', 's_nowhere');
    -- runs a statement, returns 'ok' or its SQLSTATE
$s$);
SELECT dblink_connect('a', :'srv' || ' dbname=hpcacct_sched_overlap');
SELECT dblink_connect('b', :'srv' || ' dbname=hpcacct_sched_overlap');
SELECT dblink_exec('a', 'SET client_min_messages = warning');
SELECT dblink_exec('b', 'SET client_min_messages = warning');
SELECT pid AS b_pid FROM dblink('b', 'SELECT pg_backend_pid()') AS t(pid integer) \gset

-- a runs `run` and keeps its transaction open; b runs it too, or run_b (under `isolation`);
-- returns whether b waited for a, then a's and b's outcomes, after a commits
CREATE FUNCTION pg_temp.overlap(run text, isolation text DEFAULT 'READ COMMITTED', run_b text DEFAULT NULL) RETURNS text
    LANGUAGE plpgsql AS $$
    DECLARE
        a_outcome text;
        b_outcome text;
        waited boolean := false;
    BEGIN
        PERFORM dblink_exec('a', 'BEGIN');
        SELECT o INTO a_outcome FROM dblink('a', format('SELECT public.outcome(%L)', run)) AS t(o text);
        PERFORM dblink_exec('b', 'BEGIN ISOLATION LEVEL ' || isolation);
        PERFORM dblink_send_query('b', format('SELECT public.outcome(%L)', coalesce(run_b, run)));
        FOR i IN 1..200 LOOP
            waited := cardinality(pg_blocking_pids(current_setting('hpcacct_test.b_pid')::integer)) > 0;
            EXIT WHEN waited OR dblink_is_busy('b') = 0;
            PERFORM pg_sleep(0.05);
        END LOOP;
        PERFORM dblink_exec('a', 'COMMIT');
        SELECT o INTO b_outcome FROM dblink_get_result('b') AS t(o text);
        PERFORM * FROM dblink_get_result('b') AS t(o text);
        PERFORM dblink_exec('b', 'COMMIT');
        RETURN format('waited %s, a %s, b %s', waited::text, a_outcome, b_outcome);
    END
    $$;
SELECT set_config('hpcacct_test.b_pid', :'b_pid', false);
-- a count in the scratch database
CREATE FUNCTION pg_temp.remote(query text) RETURNS text LANGUAGE sql AS $$
    SELECT v FROM dblink('setup', query) AS t(v text)
$$;

-- the very first checks (no run_day row yet), a later day's and an earlier day's at once: the
-- earlier one waits, then is refused as it is after the later check has committed
SELECT is(pg_temp.overlap($$SELECT hpcacct.recheck_queued('2024-10-02')$$,
                          run_b => $$SELECT hpcacct.recheck_queued('2024-10-01')$$), 'waited true, a ok, b 22023',
          'recheck_queued''s first checks at once, the later day first: the earlier day waits, then is refused (22023)');
SELECT is(pg_temp.overlap($$CALL hpcacct.regulate('2024-03-15')$$), 'waited true, a ok, b ok',
          'regulate at once twice: the second waits for the first, then runs cleanly');
SELECT is(pg_temp.remote($$SELECT format('%s log, %s retraction, %s message', (SELECT count(*) FROM hpcacct.regulation_log),
                                          (SELECT count(*) FROM hpcacct.ledger WHERE kind = 'retraction'),
                                          (SELECT count(*) FROM hpcacct.outbox WHERE topic LIKE 'regulation%'))$$),
          '1 log, 1 retraction, 1 message', 'regulate at once twice: one log row, one retraction, one message');
SELECT is(pg_temp.overlap($$CALL hpcacct.open_quarter('2024-10-01')$$), 'waited true, a ok, b ok',
          'open_quarter at once twice: the second waits, then runs cleanly');
SELECT is(pg_temp.remote($$SELECT format('%s deposits, %s quarter_log', (SELECT count(*) FROM hpcacct.ledger WHERE kind = 'deposit'
                                                                          AND valid_from >= '2024-10-01' AND account = 's_u'),
                                          (SELECT count(*) FROM hpcacct.quarter_log))$$),
          '3 deposits, 4 quarter_log', 'open_quarter at once twice: three top-ups, four actions logged, once each');
SELECT is(pg_temp.overlap($$SELECT hpcacct.notify_scan('2024-03-10')$$), 'waited true, a ok, b ok',
          'notify_scan at once twice: the second waits, then runs cleanly');
SELECT is(pg_temp.remote($$SELECT count(*) FROM hpcacct.outbox WHERE topic = 'quota_state'$$), '1',
          'notify_scan at once twice: one message');
SELECT is(pg_temp.overlap($$SELECT hpcacct.recheck_queued('2024-10-02')$$), 'waited true, a ok, b ok',
          'recheck_queued at once twice: the second waits, then runs cleanly');
SELECT is(pg_temp.remote($$SELECT count(*) FROM hpcacct.outbox WHERE topic = 'job_held'$$), '1',
          'recheck_queued at once twice: one message');
SELECT is(pg_temp.overlap($$SELECT hpcacct.compact_rollup()$$), 'waited true, a ok, b ok',
          'compact_rollup at once twice: the second waits, then runs cleanly');
SELECT is(pg_temp.remote($$SELECT (SELECT sum(amount) FROM hpcacct.charge_rollup)::text
                                  || ' / ' || (SELECT sum(amount) FROM hpcacct.ledger WHERE kind IN ('charge', 'reversal'))$$),
          pg_temp.remote($$SELECT (SELECT sum(amount) FROM hpcacct.ledger WHERE kind IN ('charge', 'reversal'))::text
                                  || ' / ' || (SELECT sum(amount) FROM hpcacct.ledger WHERE kind IN ('charge', 'reversal'))$$),
          'compact_rollup at once twice: the rollup still sums to the ledger''s charges');
SELECT dblink_exec('setup', $s$
    INSERT INTO hpcacct.setting VALUES ('rollup', 'deferred');
    INSERT INTO hpcacct.job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
    VALUES ('s_rwth', 'r2', 's_rw', 's_u', 'c18m', '2024-03-01 00:00+00', '2024-03-01 10:00+00', 'cpu=4', 'COMPLETED')
$s$);
SELECT is(pg_temp.overlap($$SELECT hpcacct.roll_up_pending()$$), 'waited true, a ok, b ok',
          'roll_up_pending at once twice: the second waits, then runs cleanly');
SELECT is(pg_temp.remote($$SELECT format('%s pending, %s / %s', (SELECT count(*) FROM hpcacct.rollup_pending),
                                          (SELECT sum(amount) FROM hpcacct.charge_rollup),
                                          (SELECT sum(amount) FROM hpcacct.ledger WHERE kind IN ('charge', 'reversal')))$$),
          pg_temp.remote($$SELECT format('0 pending, %s / %s', (SELECT sum(amount) FROM hpcacct.ledger WHERE kind IN ('charge', 'reversal')),
                                          (SELECT sum(amount) FROM hpcacct.ledger WHERE kind IN ('charge', 'reversal')))$$),
          'roll_up_pending at once twice: nothing pending, the charge rolled up once');
-- a session in REPEATABLE READ (its snapshot taken before the first run committed): each
-- fails as a serialization failure, to be run again (regulate()'s log INSERT meets the first
-- run's rows, which its snapshot does not see: it raised their unique violation, 23505)
SELECT is(pg_temp.overlap($$CALL hpcacct.regulate('2024-04-15')$$, 'REPEATABLE READ'), 'waited true, a ok, b 40001',
          'regulate at once twice, the second in REPEATABLE READ: it waits, then fails as a serialization failure (40001)');
SELECT is(pg_temp.overlap($$CALL hpcacct.open_quarter('2025-01-01')$$, 'REPEATABLE READ'), 'waited true, a ok, b 40001',
          'open_quarter at once twice, the second in REPEATABLE READ: it waits, then fails as a serialization failure (40001)');
SELECT is(pg_temp.overlap($$SELECT hpcacct.notify_scan('2024-04-12')$$, 'REPEATABLE READ'), 'waited true, a ok, b 40001',
          'notify_scan at once twice, the second in REPEATABLE READ: it waits, then fails as a serialization failure (40001)');
SELECT is(pg_temp.overlap($$SELECT hpcacct.recheck_queued('2024-10-03')$$, 'REPEATABLE READ'), 'waited true, a ok, b 40001',
          'recheck_queued at once twice, the second in REPEATABLE READ: it waits, then fails as a serialization failure (40001)');
SELECT is(pg_temp.overlap($$SELECT hpcacct.compact_rollup()$$, 'REPEATABLE READ'), 'waited true, a ok, b 40001',
          'compact_rollup at once twice, the second in REPEATABLE READ: it waits, then fails as a serialization failure (40001)');
SELECT dblink_exec('setup', $s$
    INSERT INTO hpcacct.job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
    VALUES ('s_rwth', 'r3', 's_rw', 's_u', 'c18m', '2024-03-02 00:00+00', '2024-03-02 10:00+00', 'cpu=4', 'COMPLETED')
$s$);
SELECT is(pg_temp.overlap($$SELECT hpcacct.roll_up_pending()$$, 'REPEATABLE READ'), 'waited true, a ok, b 40001',
          'roll_up_pending at once twice, the second in REPEATABLE READ: it waits, then fails as a serialization failure (40001)');
SELECT is(pg_temp.remote($$SELECT format('%s pending, %s / %s', (SELECT count(*) FROM hpcacct.rollup_pending),
                                          (SELECT sum(amount) FROM hpcacct.charge_rollup),
                                          (SELECT sum(amount) FROM hpcacct.ledger WHERE kind IN ('charge', 'reversal')))$$),
          pg_temp.remote($$SELECT format('0 pending, %s / %s', (SELECT sum(amount) FROM hpcacct.ledger WHERE kind IN ('charge', 'reversal')),
                                          (SELECT sum(amount) FROM hpcacct.ledger WHERE kind IN ('charge', 'reversal')))$$),
          'after them, nothing pending and the rollup sums to the ledger''s charges');

SELECT dblink_disconnect('a'), dblink_disconnect('b'), dblink_disconnect('setup');
SELECT dblink_exec('adm', 'DROP DATABASE hpcacct_sched_overlap');
SELECT dblink_disconnect('adm');

SELECT * FROM finish();
ROLLBACK;
