-- A small site with one account per centre, for the statements (test/notify/statements.sh)
-- and the README's sample pictures. The year is 2025; statements are for past months.
SET search_path = hpcacct, public;
INSERT INTO setting VALUES ('timezone', 'UTC') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO hpc_user (username) VALUES ('alice'), ('bob'), ('carol');
INSERT INTO contact (username, email, display_name) VALUES
    ('alice', 'alice@example.org', 'Alice'), ('bob', 'bob@example.org', 'Bob'), ('carol', 'carol@example.org', 'Carol');

-- GENCI / IDRIS: 1.2 M hours on jean-zay, used steadily until May, then not at all
INSERT INTO regulation_machine (machine, monthly_threshold) VALUES ('jean-zay', 1000000);
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('jean-zay', 'cpu', 'cpu=40', 'cpu=1', 1, 'hours');
INSERT INTO account (name, description) VALUES ('gen7001', 'Turbulent flows (DARI A17)');
INSERT INTO membership VALUES ('gen7001', 'alice', 'admin'), ('gen7001', 'bob', 'member');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('gen7001', 'grant', 1200000, 'hours', 'jean-zay', '2025-01-01', '2025-12-31');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
SELECT 'jean-zay', 'g' || i, 'gen7001', CASE WHEN i % 3 = 0 THEN 'bob' ELSE 'alice' END, 'cpu',
       timestamptz '2025-01-01 00:00+00' + (i || ' days')::interval,
       timestamptz '2025-01-01 00:00+00' + (i || ' days')::interval + interval '24 hours', 'cpu=120', 'COMPLETED'
FROM generate_series(0, 150) i;
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
SELECT 'jean-zay', 'gs' || i, 'gen7001', 'alice', 'cpu',
       timestamptz '2025-09-01 00:00+00' + (i || ' days')::interval,
       timestamptz '2025-09-01 00:00+00' + (i || ' days')::interval + interval '24 hours', 'cpu=200', 'COMPLETED'
FROM generate_series(0, 25) i;
CALL regulate('2025-01-15'); CALL regulate('2025-02-15'); CALL regulate('2025-03-15'); CALL regulate('2025-04-15');
CALL regulate('2025-05-15'); CALL regulate('2025-06-15'); CALL regulate('2025-07-15'); CALL regulate('2025-08-15');
CALL regulate('2025-09-15');

-- RWTH: 50 000 core-hours a month, January to June; the document's February of 70 000
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('claix', 'c18m', 'cpu=48', 'cpu=1', 1, 'core-hours');
INSERT INTO account (name, description) VALUES ('rwth0042', 'Open-use project');
INSERT INTO membership VALUES ('rwth0042', 'bob', 'admin'), ('rwth0042', 'carol', 'member');
SELECT add_quota_period('rwth0042', '2025-01-01', '2025-06-30', 50000, 'claix', 'core-hours');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
SELECT 'claix', 'r' || m || '-' || k, 'rwth0042', CASE WHEN k % 2 = 0 THEN 'bob' ELSE 'carol' END, 'c18m',
       make_timestamptz(2025, m, 2 + k, 0, 0, 0, 'UTC'), make_timestamptz(2025, m, 2 + k, 0, 0, 0, 'UTC') + interval '1 hour' * h,
       'cpu=50', 'COMPLETED'
FROM (VALUES (2, 140), (3, 120), (4, 80), (5, 40)) AS u(m, h),   -- 10 jobs of 50 cores: 70 000, 60 000, 40 000, 20 000
     LATERAL generate_series(0, 9) k;

-- HLRN: a project with 30 000 NPL for the second quarter, exclusive XC30 nodes
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, exclusive)
VALUES ('hlrn', 'mpp1', 'cpu=24,mem=64G', 'cpu=1', 1.0 / 12, 'NPL', true);
INSERT INTO account (name, kind, description) VALUES ('nip00042', 'project', 'Ocean models');
INSERT INTO membership VALUES ('nip00042', 'carol', 'admin'), ('nip00042', 'alice', 'member');
SELECT deposit('nip00042', '2025-04-01', 30000);
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
SELECT 'hlrn', 'h' || i, 'nip00042', CASE WHEN i % 4 = 0 THEN 'alice' ELSE 'carol' END, 'mpp1',
       timestamptz '2025-04-03 08:00+00' + (i * 1.7 || ' days')::interval,
       timestamptz '2025-04-03 08:00+00' + (i * 1.7 || ' days')::interval + interval '20 hours', ('cpu=' || (96 + 24 * (i % 5)))::tres, 'COMPLETED'
FROM generate_series(0, 29) i;

-- Compute Canada: core equivalents on two clusters, allocation year from April
INSERT INTO pool (name, year_start_month) VALUES ('cc-cpu', 4);
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, pool)
VALUES ('cedar', 'cpubase', 'cpu=48,mem=192G', 'cpu=1,mem=4G', 1, 'core-equivalent-hours', 'cc-cpu'),
       ('graham', 'cpubase', 'cpu=32,mem=128G', 'cpu=1,mem=4G', 1, 'core-equivalent-hours', 'cc-cpu');
INSERT INTO account (name, description) VALUES ('def-smith', 'Default allocation, Smith lab');
INSERT INTO membership VALUES ('def-smith', 'alice', 'admin'), ('def-smith', 'carol', 'member');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('def-smith', 'grant', 350000, 'core-equivalent-hours', 'cc-cpu', '2025-04-01', '2026-03-31');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
SELECT CASE WHEN i % 3 = 0 THEN 'graham' ELSE 'cedar' END, 'c' || i, 'def-smith', CASE WHEN i % 2 = 0 THEN 'alice' ELSE 'carol' END,
       'cpubase', timestamptz '2025-04-01 00:00+00' + (i * 2 || ' days')::interval,
       timestamptz '2025-04-01 00:00+00' + (i * 2 || ' days')::interval + interval '30 hours',
       ('cpu=' || (32 + 8 * (i % 4)) || ',mem=' || (128 + 64 * (i % 3)) || 'G')::tres, 'COMPLETED'
FROM generate_series(0, 110) i;

-- Fermilab LQCD: GPU-hours weighted by generation, allocation year from July
INSERT INTO pool (name, year_start_month) VALUES ('lq-gpu', 7);
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, pool)
VALUES ('lq1', 'k20', 'gres/gpu=4,cpu=16', 'gres/gpu=1', 2, 'gpu-hours', 'lq-gpu'),
       ('lq1', 'c2050', 'gres/gpu=4,cpu=16', 'gres/gpu=1', 1, 'gpu-hours', 'lq-gpu');
INSERT INTO account (name, description) VALUES ('lqcd-hisq', 'HISQ ensembles');
INSERT INTO membership VALUES ('lqcd-hisq', 'bob', 'admin'), ('lqcd-hisq', 'alice', 'member');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('lqcd-hisq', 'grant', 60000, 'gpu-hours', 'lq-gpu', '2025-07-01', '2026-06-30');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
SELECT 'lq1', 'l' || i, 'lqcd-hisq', CASE WHEN i % 2 = 0 THEN 'bob' ELSE 'alice' END, CASE WHEN i % 3 = 0 THEN 'c2050' ELSE 'k20' END,
       timestamptz '2025-07-01 00:00+00' + (i * 1.5 || ' days')::interval,
       timestamptz '2025-07-01 00:00+00' + (i * 1.5 || ' days')::interval + interval '12 hours',
       ('gres/gpu=' || (4 + 4 * (i % 3)) || ',cpu=16')::tres, 'COMPLETED'
FROM generate_series(0, 110) i;
