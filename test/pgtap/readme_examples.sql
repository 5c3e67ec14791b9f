-- The README's LQCD worked example (usage report and fair share) under the settings the
-- README states for it — `timezone` UTC — and the figure it gives for the Quick Start's
-- Europe/Berlin: the projection depends on the site's time zone because the elapsed time is
-- wall-clock time from 1 July 00:00 local time, and Berlin's clocks went back an hour in
-- October.
BEGIN;
SET search_path = public, hpcacct;
SET client_min_messages = warning;
SELECT plan(25);

-- As the README sets it up: timezone UTC, a GPU pool whose year starts on 1 July.
INSERT INTO setting VALUES ('timezone', 'UTC') ON CONFLICT (name) DO UPDATE SET value = excluded.value;
INSERT INTO pool (name, year_start_month) VALUES ('gpu', 7);
INSERT INTO account (name) VALUES ('lattice'), ('hadron'), ('nuclear');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, pool) VALUES
    ('example', 'k20', 'cpu=16,gres/gpu=100', 'gres/gpu=1', 1, 'GPU-hours', 'gpu');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until) VALUES
    ('lattice', 'grant', 1800, 'GPU-hours', 'gpu', '2023-07-01', '2024-06-30'),
    ('hadron',  'grant',  900, 'GPU-hours', 'gpu', '2023-07-01', '2024-06-30'),
    ('nuclear', 'grant',  300, 'GPU-hours', 'gpu', '2023-07-01', '2024-06-30');
-- 1 200 GPU-h ended 7 days before 15 March 2024 00:00 UTC, 400 ended 14 days before, 300 at it.
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres) VALUES
    ('example', 'x1', 'lattice', 'alice', 'k20', '2024-03-07 12:00+00', '2024-03-08 00:00+00', 'cpu=16,gres/gpu=100'),
    ('example', 'x2', 'hadron',  'carol', 'k20', '2024-02-29 14:00+00', '2024-03-01 00:00+00', 'cpu=8,gres/gpu=40'),
    ('example', 'x3', 'nuclear', 'dave',  'k20', '2024-03-14 14:00+00', '2024-03-15 00:00+00', 'cpu=8,gres/gpu=30');

-- Usage report: 1 200 of 1 800 GPU-h is 66.67 %, projected 1 200 × 366 / 258 = 1 702.33 (94.57 %).
SELECT is((SELECT usage FROM usage_by_account(NULL, '2024-03-15 00:00+00') WHERE account = 'lattice'),
          1200.000000, 'UTC: lattice used 1 200 GPU-h');
SELECT is((SELECT utilization_pct FROM usage_by_account(NULL, '2024-03-15 00:00+00') WHERE account = 'lattice'),
          66.67, 'UTC: 66.67 % of 1 800');
SELECT is((SELECT round(projected_usage, 2) FROM usage_by_account(NULL, '2024-03-15 00:00+00') WHERE account = 'lattice'),
          1702.33, 'UTC: projected 1 200 × 366 / 258 = 1 702.33');
SELECT is((SELECT projected_utilization_pct FROM usage_by_account(NULL, '2024-03-15 00:00+00') WHERE account = 'lattice'),
          94.57, 'UTC: projected utilization 94.57 %');

-- Fair share: shares 0.6 / 0.3 / 0.1, decayed usage 600 / 100 / 300, factors 0.5, 0.793701,
-- and 2^(−3) × 0.01 = 0.00125 for nuclear, which used up its allocation.
SELECT results_eq($$SELECT account, share, usage, round(factor::numeric, 6) FROM fairshare('2024-03-15 00:00+00')
                   WHERE pool = 'gpu' AND submitter IS NULL ORDER BY account$$,
                  $$VALUES ('hadron', 0.3::float8, 100::float8, 0.793701), ('lattice', 0.6, 600, 0.500000),
                           ('nuclear', 0.1, 300, 0.001250)$$,
                  'UTC: the fair-share table of the README');

-- The same site under the Quick Start's Europe/Berlin, seen at 15 March 2024 00:00 local time:
-- 258 days and 1 hour of wall-clock time since 1 July 00:00 (CEST then, CET now), so
-- 1 200 × 8 784 h / 6 193 h = 1 702.05.
UPDATE setting SET value = 'Europe/Berlin' WHERE name = 'timezone';
SELECT is((SELECT usage FROM usage_by_account(NULL, '2024-03-15 00:00 Europe/Berlin') WHERE account = 'lattice'),
          1200.000000, 'Europe/Berlin: the same 1 200 GPU-h');
SELECT is((SELECT round(projected_usage, 2) FROM usage_by_account(NULL, '2024-03-15 00:00 Europe/Berlin')
           WHERE account = 'lattice'),
          1702.05, 'Europe/Berlin: projected 1 200 × 8 784 / 6 193 = 1 702.05, as the README says');
SELECT isnt((SELECT round(projected_usage, 2) FROM usage_by_account(NULL, '2024-03-15 00:00 Europe/Berlin')
             WHERE account = 'lattice'),
            1702.33, 'so 1 702.33 is a UTC figure');

-- The README's Quick Start: one core for one hour on an exclusive 24-core XC30 node at 1/12
-- NPL per core-hour costs the whole node, 2 NPL; in Berlin, a job from 30 June 22:00 to
-- 1 July 02:00 counts half in June and half in July.
-- As the README's logins: the Quick Start's SQL as acct_admin, the jobs as acct_loader.
CALL setup_roles();
CREATE ROLE acct_admin LOGIN IN ROLE hpcacct_admin;
CREATE ROLE acct_loader LOGIN IN ROLE hpcacct_ingest;
SET SESSION AUTHORIZATION acct_admin;
SET search_path = hpcacct, public;
INSERT INTO account (name) VALUES ('nip00001');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, exclusive)
VALUES ('hlrn', 'mpp1', 'cpu=24,mem=64G', 'cpu=1', 1.0 / 12, 'NPL', true);
INSERT INTO slurm_account_map (slurm_account, account) VALUES ('root', NULL);
SET SESSION AUTHORIZATION acct_loader;
INSERT INTO job (cluster, jobid, account, "user", partition, submit, start, "end", alloctres, state) VALUES
    ('hlrn', 'q1', 'nip00001', 'u', 'mpp1', NULL, '2024-05-02 10:00 Europe/Berlin', '2024-05-02 11:00 Europe/Berlin',
     'cpu=1,mem=1G,node=1', 'COMPLETED'),
    ('hlrn', 'q2', 'nip00001', 'u', 'mpp1', NULL, '2024-06-30 22:00 Europe/Berlin', '2024-07-01 02:00 Europe/Berlin',
     'cpu=24,node=1', 'COMPLETED');
SET SESSION AUTHORIZATION acct_admin;
SET search_path = hpcacct, public;
SELECT is((SELECT amount FROM ledger WHERE kind = 'charge' AND jobid = 'q1'), 2.000000,
          'Quick Start: one core-hour on an exclusive XC30 node is 2 NPL');
SELECT is((SELECT amount FROM ledger WHERE kind = 'charge' AND jobid = 'q2'), 8.000000,
          'a whole node for 4 hours is 8 NPL');
SELECT results_eq($$SELECT month, amount FROM charge_by_month WHERE account = 'nip00001' AND month >= '2024-06-01'
                   ORDER BY month$$,
                  $$VALUES ('2024-06-01'::date, 4.000000::numeric), ('2024-07-01'::date, 4.000000::numeric)$$,
                  'half in June, half in July (Europe/Berlin)');
SELECT is((SELECT sum(amount) FROM ledger WHERE kind = 'charge' AND account = 'nip00001'), 10.000000,
          'the Quick Start''s last query: the charges per account');
RESET SESSION AUTHORIZATION;
SET search_path = public, hpcacct;

-- "Slurm sites": the loader's login finds where its next window starts through
-- sacct_window_start(), which reads the watermark for it; the watermark table itself, like the
-- staged lines, is not the loader's to read.
SET SESSION AUTHORIZATION acct_loader;
SELECT lives_ok($$SELECT hpcacct.sacct_window_start('hlrn', '1 hour')$$,
                'the loader''s login may call sacct_window_start()');
SELECT throws_ok($$SELECT * FROM hpcacct.sacct_watermark$$, '42501', NULL,
                 'the loader''s login cannot read the watermark table (42501)');
RESET SESSION AUTHORIZATION;

-- Regulation: a machine is regulated once it has a regulation_machine row, as the README
-- adds it; the annual percentages are that row's columns (30 and 40 by default), not rows
-- of the setting table.
SET SESSION AUTHORIZATION acct_admin;
SET search_path = hpcacct, public;
SELECT throws_ok($$INSERT INTO hpcacct.setting VALUES ('annual_warning_percent', '25')$$, '42704', NULL,
                 'annual_warning_percent is no setting of the setting table (42704)');
INSERT INTO account (name) VALUES ('gen-p');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('ada', 'cpu', 'cpu=40', 'cpu=1', 1, 'core-hours');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('gen-p', 'grant', 1200000, 'core-hours', 'ada', '2025-01-01', '2025-12-31');
CALL hpcacct.regulate('2025-03-15');
SELECT is((SELECT count(*) FROM regulation_log WHERE account = 'gen-p'), 0::bigint,
          'a machine without a regulation_machine row is not regulated');
INSERT INTO hpcacct.regulation_machine (machine, monthly_threshold) VALUES ('ada', 1000000);
SELECT results_eq($$SELECT annual_warning_percent, annual_retraction_percent FROM regulation_machine WHERE machine = 'ada'$$,
                  $$VALUES (30::numeric, 40::numeric)$$,
                  'the annual percentages are regulation_machine''s columns, 30 and 40 by default');
CALL hpcacct.regulate('2025-04-15');
SELECT is((SELECT outcome FROM regulation_log WHERE account = 'gen-p' AND run_date = '2025-04-15'), 'retraction',
          'with the row, the machine is regulated: 15 April of an unused 1 200 000 retracts');
RESET SESSION AUTHORIZATION;
SET search_path = public, hpcacct;

-- Rules §4: a project account is active with an allocation for the current quarter; one
-- booked for a later quarter only is inactive (its jobs refused), not active; none, expired.
INSERT INTO account (name) VALUES ('now-p'), ('ahead-p'), ('none-p');
SELECT hpcacct.deposit('now-p', site_today(), 1000);
SELECT hpcacct.deposit('ahead-p', (quarter_start(site_today()) + interval '3 months')::date, 1000);
SELECT results_eq($$SELECT a, account_state(a) FROM unnest(ARRAY['now-p', 'ahead-p', 'none-p']) a$$,
                  $$VALUES ('now-p', 'active'), ('ahead-p', 'inactive'), ('none-p', 'expired')$$,
                  'rules §4: active this quarter, inactive with a later quarter''s allocation only, else expired');
SELECT is((SELECT reason FROM account_verdict('ahead-p')), 'account_inactive',
          'an account allocated for a later quarter only is refused as account_inactive');
SELECT is((SELECT ok FROM account_verdict('now-p')), true, 'one allocated for this quarter is not');

-- Rules §1, Compute Canada: with the bundle 1 core + 4 GB, 2 cores with 2 GB each are 2 core
-- equivalents, 2 cores with 5 GB each 2.5; 2 cores and 5 GB in all are 2 (the memory is not the
-- larger ratio), which the README once gave as 2.5.
SELECT is(equivalents('cpu=2,mem=4G', 'cpu=1,mem=4G'), 2::float8, 'rules §1: 2 cores with 2 GB each are 2 core equivalents');
SELECT is(equivalents('cpu=2,mem=10G', 'cpu=1,mem=4G'), 2.5::float8, 'rules §1: 2 cores with 5 GB each are 2.5');
SELECT is(equivalents('cpu=2,mem=5G', 'cpu=1,mem=4G'), 2::float8, 'rules §1: 2 cores and 5 GB in all are 2, not 2.5');

-- The queue by fair-share priority (LQCD), as the README builds it: allocations 1 800 / 900 /
-- 300 GPU-hours in a pool whose K20 hours count twice; lq-a used 1 200 GPU-hours and lq-b 100
-- a day ago (half-life 7 days)
INSERT INTO hpc_user (username) VALUES ('alice'), ('bob'), ('carol');
INSERT INTO account (name) VALUES ('lq-a'), ('lq-b'), ('lq-c');
INSERT INTO account (name, kind) VALUES ('carol', 'personal');
INSERT INTO membership VALUES ('lq-a', 'alice', 'admin'), ('lq-b', 'bob', 'admin'), ('lq-c', 'carol', 'admin'),
                              ('carol', 'carol', 'admin');
INSERT INTO pool (name, year_start_month) VALUES ('lq-gpu', 7);
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, pool) VALUES
    ('lq', 'k20', 'gres/gpu=4', 'gres/gpu=1', 2, 'GPU-hours', 'lq-gpu'),
    ('lq', 'c2050', 'gres/gpu=4', 'gres/gpu=1', 1, 'GPU-hours', 'lq-gpu');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
SELECT a, 'grant', x, 'GPU-hours', 'lq-gpu', current_date - 30, current_date + 300
FROM (VALUES ('lq-a', 1800), ('lq-b', 900), ('lq-c', 300)) AS g(a, x);
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    ('lq', 'lq1', 'lq-a', 'alice', 'k20', now() - interval '1 day 150 hours', now() - interval '1 day', 'gres/gpu=4', 'COMPLETED'),
    ('lq', 'lq2', 'lq-b', 'bob', 'c2050', now() - interval '1 day 25 hours', now() - interval '1 day', 'gres/gpu=4', 'COMPLETED');
INSERT INTO pending_job (cluster, jobid, username, account, partition, submitted_at) VALUES
    ('lq', '1041', 'alice', 'lq-a', 'k20', now() - interval '5 hours'),
    ('lq', '1042', 'bob', 'lq-b', 'k20,c2050', now() - interval '4 hours'),
    ('lq', '1043', 'carol', 'lq-c', 'c2050', now() - interval '3 hours'),
    ('lq', '1044', 'alice', 'lq-a', NULL, now() - interval '2 hours'),
    ('lq', '1045', 'carol', NULL, 'k20', now() - interval '1 hours');
SELECT results_eq($$SELECT position, jobid, username, account, partition, pool, round(account_factor::numeric, 4),
                           round(user_factor::numeric, 4)
                    FROM hpcacct.fairshare_queue$$,
                  $$VALUES (1::bigint, '1043'::text, 'carol'::text, 'lq-c'::text, 'c2050'::text, 'lq-gpu'::text, 1.0000, NULL::numeric),
                           (2, '1042', 'bob', 'lq-b', 'k20,c2050', 'lq-gpu', 0.8372, 0.8372),
                           (3, '1041', 'alice', 'lq-a', 'k20', 'lq-gpu', 0.3443, 0.3443),
                           (4, '1044', 'alice', 'lq-a', NULL, NULL, NULL, NULL),
                           (5, '1045', 'carol', 'carol', 'k20', 'lq-gpu', NULL, NULL)$$,
                  'fairshare_queue as the README prints it');

SELECT * FROM finish();
ROLLBACK;
