-- The queue by fair-share priority (LQCD: fairshare_queue over pending_job) and r_wlm_usage
-- without -p (RWTH: the caller's own accounts), issue 16.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(17);

CALL setup_roles();
CREATE ROLE q_alice LOGIN IN ROLE hpcacct_portal;
CREATE ROLE q_bob LOGIN IN ROLE hpcacct_portal;
CREATE ROLE q_carol LOGIN IN ROLE hpcacct_portal;
INSERT INTO setting VALUES ('timezone', 'UTC') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO hpc_user (username) VALUES ('q_alice'), ('q_bob'), ('q_carol');
INSERT INTO account (name) VALUES ('q_a'), ('q_b'), ('q_c');
INSERT INTO membership VALUES ('q_a', 'q_alice', 'admin'), ('q_b', 'q_bob', 'admin'), ('q_c', 'q_carol', 'admin');
UPDATE hpc_user SET default_account = 'q_c' WHERE username = 'q_carol';

-- ---- the queue by fair share ---------------------------------------------------------------
-- A GPU pool with generations weighted (K20 2, C2050 1); allocations 1 800 / 900 / 300 give
-- shares 0.6 / 0.3 / 0.1. q_a used 1 200, q_b 100 and q_c nothing a day ago: factors about
-- 0.34, 0.84 and 1.
INSERT INTO pool (name, year_start_month) VALUES ('q_gpu', 7);
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, pool) VALUES
    ('q_lq', 'k20', 'gres/gpu=4', 'gres/gpu=1', 2, 'gpu-hours', 'q_gpu'),
    ('q_lq', 'c2050', 'gres/gpu=4', 'gres/gpu=1', 1, 'gpu-hours', 'q_gpu');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
SELECT a, 'grant', x, 'gpu-hours', 'q_gpu', current_date - 30, current_date + 300
FROM (VALUES ('q_a', 1800), ('q_b', 900), ('q_c', 300)) AS g(a, x);
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    ('q_lq', 'u1', 'q_a', 'q_alice', 'k20', now() - interval '1 day 150 hours', now() - interval '1 day', 'gres/gpu=4', 'COMPLETED'),
    ('q_lq', 'u2', 'q_b', 'q_bob', 'c2050', now() - interval '1 day 25 hours', now() - interval '1 day', 'gres/gpu=4', 'COMPLETED');
CREATE TEMP TABLE f AS SELECT * FROM fairshare() WHERE pool = 'q_gpu' AND submitter IS NULL;
GRANT SELECT ON f TO q_alice;
SELECT ok((SELECT array_agg(account ORDER BY factor DESC) FROM f) = ARRAY['q_c', 'q_b', 'q_a'],
          'setup: factors q_c > q_b > q_a');

INSERT INTO pending_job (cluster, jobid, username, account, partition, submitted_at) VALUES
    ('q_lq', 'p1', 'q_alice', 'q_a', 'k20', now() - interval '5 hours'),
    ('q_lq', 'p2', 'q_bob', 'q_b', 'k20,c2050', now() - interval '4 hours'),
    ('q_lq', 'p3', 'q_carol', 'q_c', 'c2050', now() - interval '3 hours'),
    ('q_lq', 'p4', 'q_alice', 'q_a', NULL, now() - interval '6 hours'),
    ('q_lq', 'p5', 'q_carol', NULL, 'k20', now() - interval '2 hours');
SELECT is((SELECT array_agg(jobid ORDER BY position) FROM fairshare_queue), ARRAY['p3', 'p5', 'p2', 'p1', 'p4'],
          'the queue by the account''s factor, then the submit time; a job without a known pool last');
SELECT is((SELECT account_factor FROM fairshare_queue WHERE jobid = 'p1'), (SELECT factor FROM f WHERE account = 'q_a'),
          'each job carries its account''s factor in the pool of its partition');
SELECT is((SELECT user_factor FROM fairshare_queue WHERE jobid = 'p1'),
          (SELECT factor FROM fairshare() WHERE pool = 'q_gpu' AND account = 'q_a' AND submitter = 'q_alice'),
          'and its user''s factor inside the account');
SELECT is((SELECT account || ' ' || pool FROM fairshare_queue WHERE jobid = 'p5'), 'q_c q_gpu',
          'a job without an account counts under its user''s default project');
SELECT is((SELECT pool || ' ' || unit FROM fairshare_queue WHERE jobid = 'p2'), 'q_gpu gpu-hours',
          'a job for several partitions: the first names the pool');
SELECT is((SELECT account_factor FROM fairshare_queue WHERE jobid = 'p4'), NULL, 'no partition recorded: no factor');
SET SESSION AUTHORIZATION q_alice;
SELECT is((SELECT array_agg(jobid ORDER BY position) FROM hpcacct.fairshare_queue), ARRAY['p1', 'p4'],
          'a portal user sees the jobs of her accounts');
SELECT is((SELECT account_factor FROM hpcacct.fairshare_queue WHERE jobid = 'p1'), (SELECT factor FROM f WHERE account = 'q_a'),
          'with her account''s factor');
RESET SESSION AUTHORIZATION;

-- ---- r_wlm_usage: without -p, the caller's own accounts --------------------------------------
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('q_claix', 'c18m', 'cpu=48', 'cpu=1', 1, 'core-hours');
SELECT add_quota_period(a, '2024-01-01', '2024-06-30', 1000, 'q_claix', 'core-hours') FROM unnest(ARRAY['q_a', 'q_b']) AS a;
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    ('q_claix', 'w1', 'q_b', 'q_bob', 'c18m', '2024-02-01 00:00+00', '2024-02-03 16:35+00', 'cpu=48', 'COMPLETED');
SELECT is((SELECT array_agg(account ORDER BY account) FROM r_wlm_usage(NULL, '2024-03-10')), ARRAY['q_a', 'q_b'],
          'an administrator without a project: every account with a quota');
SELECT is((SELECT r FROM r_wlm_usage('q_b', '2024-03-10') r), (SELECT w FROM window_quota_usage('q_b', '2024-03-10') w),
          'with a project: that account''s figures, window_quota_usage()''s');
SELECT throws_ok($$SELECT * FROM hpcacct.r_wlm_usage('q_nobody')$$, '42704', NULL, 'an unknown project');
SET SESSION AUTHORIZATION q_bob;
SELECT is((SELECT array_agg(account || ' ' || state) FROM hpcacct.r_wlm_usage(NULL, '2024-03-10')), ARRAY['q_b low_priority'],
          'q_bob without a project: his own account, in low priority after February''s 3 100 core-hours');
SELECT is((SELECT array_agg(account) FROM hpcacct.r_wlm_usage()), ARRAY['q_b'], 'also for today (no date)');
SELECT throws_ok($$SELECT * FROM hpcacct.r_wlm_usage('q_a', '2024-03-10')$$, '42704', NULL,
                 'another project is unknown to him');
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION q_carol;
SELECT is((SELECT count(*) FROM hpcacct.r_wlm_usage(NULL, '2024-03-10')), 0::bigint,
          'q_carol, whose account has no quota: nothing');
RESET SESSION AUTHORIZATION;
INSERT INTO membership VALUES ('q_b', 'q_alice', 'member');
SET SESSION AUTHORIZATION q_alice;
SELECT is((SELECT array_agg(account ORDER BY account) FROM hpcacct.r_wlm_usage(NULL, '2024-03-10')), ARRAY['q_a', 'q_b'],
          'q_alice, a member of two: both');
RESET SESSION AUTHORIZATION;

SELECT * FROM finish();
ROLLBACK;
