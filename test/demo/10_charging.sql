-- make demo, part 1: a sample site (HLRN-III node types, Compute Canada bundles) and a few
-- thousand generated jobs charged by the trigger.
\pset footer off
CREATE EXTENSION hpcacct CASCADE;
SELECT hpcacct.create_job_table() AS job_table \gset
SET search_path = public, hpcacct;
INSERT INTO setting VALUES ('timezone', 'Europe/Berlin');

\echo
\echo '== The site: node types, bundles and rates (hpcacct.resource) =='
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, exclusive, description) VALUES
    -- HLRN-III: NPL per PEQ-hour, 1 PEQ = 1 core; XC30 and SMP nodes are charged whole.
    ('hlrn', 'mpp1',    'cpu=24,mem=64G,node=1',  'cpu=1', 1.0 / 12, 'NPL', true,  'Cray XC30 MPP phase 1'),
    ('hlrn', 'smp1',    'cpu=32,mem=256G,node=1', 'cpu=1', 1.0 / 8,  'NPL', true,  'SMP nodes phase 1'),
    ('hlrn', 'data',    'cpu=16,mem=256G,node=1', 'cpu=1', 1.0 / 12, 'NPL', false, 'Data nodes'),
    ('hlrn', 'prepost', 'cpu=32,mem=768G,node=1', 'cpu=1', 3.0 / 16, 'NPL', false, 'Pre/Post nodes phase 1'),
    -- Compute Canada: core equivalents and GPU equivalents (the bundle table).
    ('cedar',   'cpu',           'cpu=48,mem=192G,node=1',            'cpu=1,mem=4G',                   1, 'core-equivalent-hours', false, 'Cedar CPU nodes'),
    ('cedar',   'gpu-p100-12gb', 'cpu=24,mem=128000M,gres/gpu=4',     'gres/gpu=1,cpu=6,mem=32000M',    1, 'GPU-equivalent-hours',  false, 'Cedar P100/12GB'),
    ('cedar',   'gpu-p100-16gb', 'cpu=24,mem=256000M,gres/gpu=4',     'gres/gpu=1,cpu=6,mem=64000M',    1, 'GPU-equivalent-hours',  false, 'Cedar P100/16GB'),
    ('cedar',   'gpu-v100-32gb', 'cpu=32,mem=192000M,gres/gpu=4',     'gres/gpu=1,cpu=8,mem=48000M',    1, 'GPU-equivalent-hours',  false, 'Cedar V100/32GB'),
    ('graham',  'cpu',           'cpu=32,mem=128G,node=1',            'cpu=1,mem=4G',                   1, 'core-equivalent-hours', false, 'Graham CPU nodes'),
    ('graham',  'gpu-p100-12gb', 'cpu=32,mem=128000M,gres/gpu=2',     'gres/gpu=1,cpu=16,mem=64000M',   1, 'GPU-equivalent-hours',  false, 'Graham P100/12GB'),
    ('graham',  'gpu-v100-16gb', 'cpu=28,mem=180000M,gres/gpu=8',     'gres/gpu=1,cpu=3.5,mem=22500M',  1, 'GPU-equivalent-hours',  false, 'Graham V100/16GB'),
    ('graham',  'gpu-v100-32gb', 'cpu=40,mem=384000M,gres/gpu=8',     'gres/gpu=1,cpu=5,mem=48000M',    1, 'GPU-equivalent-hours',  false, 'Graham V100/32GB'),
    ('graham',  'gpu-t4-4c',     'cpu=16,mem=196000M,gres/gpu=4',     'gres/gpu=1,cpu=4,mem=49000M',    1, 'GPU-equivalent-hours',  false, 'Graham T4/16GB, 4-core bundle'),
    ('graham',  'gpu-t4-11c',    'cpu=44,mem=196000M,gres/gpu=4',     'gres/gpu=1,cpu=11,mem=49000M',   1, 'GPU-equivalent-hours',  false, 'Graham T4/16GB, 11-core bundle'),
    ('beluga',  'gpu-v100-16gb', 'cpu=40,mem=188000M,gres/gpu=4',     'gres/gpu=1,cpu=10,mem=47000M',   1, 'GPU-equivalent-hours',  false, 'Beluga V100/16GB'),
    ('niagara', 'cpu',           'cpu=40,mem=192000M,node=1',         'cpu=1,mem=4800M',                1, 'core-equivalent-hours', false, 'Niagara');
SELECT cluster, partition, bundle, round(rate::numeric, 4) AS rate, unit, exclusive, node
FROM resource ORDER BY cluster, partition;

INSERT INTO account (name, kind) VALUES
    ('nhbkalli', 'personal'), ('nip00001', 'project'), ('hbp00042', 'project'),
    ('def-smith', 'project'), ('rrg-jones', 'project'), ('rpp-lee', 'project');

-- 3 000 jobs over 2024, reproducible: sizes and durations drawn from a seeded generator.
SELECT setseed(0.2024) AS seeded \gset
SET max_parallel_workers_per_gather = 0;
CREATE TEMP TABLE generated AS
SELECT i,
       r.cluster, r.partition, r.node, r.bundle,
       random() AS size_draw, random() AS memory_draw, random() AS length_draw, random() AS start_draw,
       random() AS account_draw
FROM generate_series(1, 3000) AS i
CROSS JOIN LATERAL (SELECT * FROM resource ORDER BY random() + i * 0 LIMIT 1) r;

INSERT INTO job (cluster, jobid, account, "user", partition, submit, start, "end", alloctres, state)
SELECT g.cluster,
       (1000000 + g.i)::text,
       CASE WHEN g.cluster = 'hlrn' THEN (ARRAY['nhbkalli', 'nip00001', 'hbp00042'])[1 + floor(g.account_draw * 3)::int]
            ELSE (ARRAY['def-smith', 'rrg-jones', 'rpp-lee'])[1 + floor(g.account_draw * 3)::int] END,
       'user' || (1 + floor(g.account_draw * 12)::int),
       g.partition,
       s.start - interval '10 minutes',
       s.start,
       s.start + (5 + floor(power(g.length_draw, 2) * 48 * 60))::int * interval '1 minute',
       -- whole cores (up to two nodes), GPUs on GPU nodes, 2 to 9 GB per core
       ('cpu=' || z.cores || ',node=' || ceil(z.cores / (g.node -> 'cpu'))
        || ',mem=' || z.cores * (2 + floor(g.memory_draw * 8)) || 'G'
        || CASE WHEN g.node -> 'gres/gpu' > 0
                THEN ',gres/gpu=' || greatest(1, round(g.size_draw * (g.node -> 'gres/gpu'))) ELSE '' END)::tres,
       CASE WHEN g.length_draw > 0.95 THEN 'TIMEOUT' ELSE 'COMPLETED' END
FROM generated g
CROSS JOIN LATERAL (SELECT timestamptz '2024-01-01 00:00+01' + g.start_draw * interval '365 days' AS start) s
CROSS JOIN LATERAL (SELECT greatest(1, round(power(g.size_draw, 2) * 2 * (g.node -> 'cpu')))::int AS cores) z;

\echo
\echo '== A few jobs and how they were charged =='
SELECT j.cluster, j.partition, j.jobid, j.alloctres, round(extract(epoch FROM j."end" - j.start) / 3600, 2) AS hours,
       round(equivalents(j.alloctres, r.bundle)::numeric, 2) AS equivalents, l.amount, l.unit
FROM job j
JOIN ledger l ON l.cluster = j.cluster AND l.jobid = j.jobid
JOIN resource r USING (resource_id)
WHERE j.jobid::int % 500 = 0
ORDER BY j.cluster, j.jobid;

\echo
\echo '== Charges per account and resource, 2024 =='
SELECT l.account, r.cluster, r.partition, count(*) AS jobs, round(sum(l.amount), 2) AS charged, l.unit
FROM ledger l JOIN resource r USING (resource_id)
WHERE l.kind = 'charge'
GROUP BY l.account, r.cluster, r.partition, l.unit
ORDER BY l.account, r.cluster, r.partition;

\echo
\echo '== Totals per account and unit =='
SELECT account, unit, count(*) AS jobs, round(sum(amount), 2) AS charged
FROM ledger WHERE kind = 'charge'
GROUP BY account, unit ORDER BY unit, charged DESC;

\echo
\echo '== Charges by month (pro rata across month ends, Europe/Berlin), HLRN =='
SELECT month, round(sum(amount) FILTER (WHERE account = 'nhbkalli'), 1) AS nhbkalli,
              round(sum(amount) FILTER (WHERE account = 'nip00001'), 1) AS nip00001,
              round(sum(amount) FILTER (WHERE account = 'hbp00042'), 1) AS hbp00042
FROM charge_by_month WHERE cluster = 'hlrn'
GROUP BY month ORDER BY month;
