-- Equivalents and charges: every figure of rules §1.
SET search_path = public, hpcacct;

-- HLRN-III (PEQ = 1 core). Rates in NPL per PEQ-hour: XC30 1/12 and SMP 1/8, both
-- exclusive (whole nodes charged); Data nodes 1/12; Pre/Post 3/16.
SELECT 'Data: 12 cores, 1 h' AS job,
       charge('cpu=12,node=1', '1 hour', 'cpu=1', 1.0 / 12) AS npl
UNION ALL
SELECT 'Pre/Post: 16 cores, 1 h', charge('cpu=16,node=1', '1 hour', 'cpu=1', 3.0 / 16)
UNION ALL
SELECT 'XC30: 1 core, 1 h (whole node)', charge('cpu=1,node=1', '1 hour', 'cpu=1', 1.0 / 12, 'cpu=24')
UNION ALL
SELECT 'SMP: 8 cores, 1 h (whole node)', charge('cpu=8,node=1', '1 hour', 'cpu=1', 1.0 / 8, 'cpu=32');

-- Per node-hour as the HLRN table gives it: XC30 2, SMP 4, Data 1.333, Pre/Post 6.
SELECT round(charge('cpu=24', '1 hour', 'cpu=1', 1.0 / 12, 'cpu=24')::numeric, 3) AS xc30,
       round(charge('cpu=32', '1 hour', 'cpu=1', 1.0 / 8, 'cpu=32')::numeric, 3) AS smp,
       round(charge('cpu=16', '1 hour', 'cpu=1', 1.0 / 12)::numeric, 3) AS data,
       round(charge('cpu=32', '1 hour', 'cpu=1', 3.0 / 16)::numeric, 3) AS prepost;

-- Exclusive nodes: rounded up to whole nodes by any component, or by the node count.
SELECT charge('cpu=25', '1 hour', 'cpu=1', 1.0 / 12, 'cpu=24,mem=64G') AS two_nodes_by_cores,
       charge('cpu=1,mem=100G', '1 hour', 'cpu=1', 1.0 / 12, 'cpu=24,mem=64G') AS two_nodes_by_memory,
       charge('cpu=2,node=3', '1 hour', 'cpu=1', 1.0 / 12, 'cpu=24,mem=64G') AS three_nodes_by_count,
       charge('cpu=48', '30 minutes', 'cpu=1', 1.0 / 12, 'cpu=24') AS two_nodes_half_hour;

-- Historic IBM Power4: 1 PEQ = max(CPUs / 32, memory / 64 GB), i.e. the bundle cpu=32,mem=64G.
SELECT equivalents('cpu=32,mem=32G', 'cpu=32,mem=64G') AS by_cpu,
       equivalents('cpu=8,mem=128G', 'cpu=32,mem=64G') AS by_memory;

-- Compute Canada core equivalents (bundle 1 core / 4 GB).
SELECT equivalents('cpu=2,mem=4G', 'cpu=1,mem=4G') AS two_cores_2gb_each,
       equivalents('cpu=2,mem=10G', 'cpu=1,mem=4G') AS two_cores_5gb_each;

-- Compute Canada GPU equivalents (bundle 1 GPU / 6 cores / 32 GB).
SELECT equivalents('gres/gpu=2,cpu=6,mem=32G', 'gres/gpu=1,cpu=6,mem=32G') AS by_gpu,
       equivalents('gres/gpu=1,cpu=9,mem=32G', 'gres/gpu=1,cpu=6,mem=32G') AS by_cores,
       equivalents('gres/gpu=1,cpu=6,mem=48G', 'gres/gpu=1,cpu=6,mem=32G') AS by_memory;

-- Components the bundle does not name are ignored; a request with none of them is 0.
SELECT equivalents('cpu=4,node=1,billing=4,license/matlab=1', 'cpu=1') AS four,
       equivalents('license/matlab=1', 'cpu=1,mem=4G') AS zero;

-- Generation weights are rates: a K20 hour costs 2 GPU-hours against the C2050.
SELECT charge('gres/gpu:k20=4', '3 hours', 'gres/gpu:k20=1', 2) AS k20_gpu_hours,
       charge('gres/gpu:c2050=4', '3 hours', 'gres/gpu:c2050=1', 1) AS c2050_gpu_hours;

-- Wall-clock hours from an interval; days are 24 hours.
SELECT charge('cpu=1', '1 day 02:30:00', 'cpu=1', 1) AS hours,
       charge('cpu=1', timestamptz '2024-01-01 10:00+00' - timestamptz '2023-12-31 22:00+00', 'cpu=1', 1) AS from_timestamps;

-- NULL in gives NULL out; a NULL node means a shared node type.
SELECT charge(NULL, '1 hour', 'cpu=1', 1) IS NULL AS null_alloc,
       charge('cpu=1', NULL, 'cpu=1', 1) IS NULL AS null_elapsed,
       charge('cpu=1', '1 hour', 'cpu=1', NULL) IS NULL AS null_rate,
       charge('cpu=1', '1 hour', 'cpu=1', 1, NULL) AS shared;

-- Bad arguments.
SELECT equivalents('cpu=1', '');
SELECT charge('cpu=1', '1 hour', '', 1);
SELECT charge('cpu=1', '-1 hour', 'cpu=1', 1);
SELECT charge('cpu=1', '1 month', 'cpu=1', 1);
SELECT charge('cpu=1', '1 hour', 'cpu=1', -1);
SELECT charge('cpu=1', '1 hour', 'cpu=1', 'NaN');
SELECT charge('cpu=1', '1 hour', 'cpu=1', 'Infinity');
SELECT charge('cpu=1', '1 hour', 'cpu=1', 1, '');
