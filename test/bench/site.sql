-- make bench: the synthetic site without its jobs and allocations. psql variables: seed,
-- anchor (the site's "today"; jobs run in the three years before it).
--
-- 2 000 accounts at five centres, each with the rules of its own document:
--   genci  300 projects on two GENCI machines (ada, jeanzay): yearly grants, second sessions,
--          supplements, retractions; monthly or annual regulation
--   hlrn   200 projects and 500 personal accounts (their users) in the quarterly NPL bank;
--          exclusive XC30/SMP nodes
--   rwth   400 projects with sliding-window quota periods on CLAIX (JARA nodes exclusive)
--   cc     400 projects on Cedar: core and GPU equivalents, allocation years from 1 April
--   lqcd   200 projects in CPU and GPU pools with a generation weight that changes, from 1 July
SET client_min_messages = warning;
SET search_path = public, hpcacct;

INSERT INTO setting VALUES ('timezone', 'Europe/Berlin');

CREATE TABLE bench.site AS
SELECT :'anchor'::date AS anchor,
       (:'anchor'::date - interval '3 years')::timestamp AT TIME ZONE 'Europe/Berlin' AS t0,
       :'anchor'::date::timestamp AT TIME ZONE 'Europe/Berlin' AS t1;

-- Node types and partitions. Rates change over time on ada and on the LQCD GPUs (a new
-- reference year halves the K20's weight), so jobs are charged at the row valid at their start.
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, pool, exclusive, valid, description)
SELECT r.cluster, r.partition, r.node::tres, r.bundle::tres, r.rate, r.unit, r.pool, r.exclusive,
       CASE r.era WHEN 0 THEN '[-infinity,infinity)'::tstzrange
                  WHEN 1 THEN tstzrange('-infinity', s.t0 + interval '18 months')
                  ELSE tstzrange(s.t0 + interval '18 months', 'infinity') END,
       r.description
FROM bench.site s
CROSS JOIN (VALUES
    ('ada',     'cpu',     'cpu=32,mem=128G,node=1',        'cpu=1',                       1.0,      'hours',                 NULL,       false, 1, 'IDRIS Ada'),
    ('ada',     'cpu',     'cpu=32,mem=128G,node=1',        'cpu=1',                       1.1,      'hours',                 NULL,       false, 2, 'IDRIS Ada, new rate'),
    ('jeanzay', 'cpu',     'cpu=40,mem=160G,node=1',        'cpu=1',                       1.0,      'hours',                 NULL,       false, 0, 'IDRIS Jean Zay'),
    ('hlrn',    'mpp1',    'cpu=24,mem=64G,node=1',         'cpu=1',                       1.0 / 12, 'NPL',                   NULL,       true,  0, 'Cray XC30 MPP'),
    ('hlrn',    'smp1',    'cpu=32,mem=256G,node=1',        'cpu=1',                       1.0 / 8,  'NPL',                   NULL,       true,  0, 'SMP nodes'),
    ('hlrn',    'data',    'cpu=16,mem=256G,node=1',        'cpu=1',                       1.0 / 12, 'NPL',                   NULL,       false, 0, 'Data nodes'),
    ('hlrn',    'prepost', 'cpu=32,mem=768G,node=1',        'cpu=1',                       3.0 / 16, 'NPL',                   NULL,       false, 0, 'Pre/Post nodes'),
    ('claix',   'c18m',    'cpu=48,mem=192G,node=1',        'cpu=1',                       1.0,      'core-hours',            NULL,       false, 0, 'CLAIX-2018 MPI'),
    ('claix',   'jara',    'cpu=48,mem=192G,node=1',        'cpu=1',                       1.0,      'core-hours',            NULL,       true,  0, 'CLAIX JARA (exclusive)'),
    ('cedar',   'cpu',     'cpu=48,mem=192G,node=1',        'cpu=1,mem=4G',                1.0,      'core-equivalent-hours', NULL,       false, 0, 'Cedar CPU'),
    ('cedar',   'gpu',     'cpu=24,mem=128000M,gres/gpu=4,node=1', 'gres/gpu=1,cpu=6,mem=32000M', 1.0, 'GPU-equivalent-hours', NULL,     false, 0, 'Cedar P100/12GB'),
    ('lqcd',    'pi0',     'cpu=16,mem=128G,node=1',        'cpu=1',                       1.0,      'core-hours',            'lqcd-cpu', false, 0, 'LQCD pi0 CPU'),
    ('lqcd',    'ds',      'cpu=16,mem=128G,gres/gpu=4,node=1', 'gres/gpu=1',              2.0,      'GPU-hours',             'lqcd-gpu', false, 1, 'LQCD K20 (2 C2050-hours)'),
    ('lqcd',    'ds',      'cpu=16,mem=128G,gres/gpu=4,node=1', 'gres/gpu=1',              1.0,      'GPU-hours',             'lqcd-gpu', false, 2, 'LQCD K20, new reference year')
) AS r(cluster, partition, node, bundle, rate, unit, pool, exclusive, era, description);

INSERT INTO pool (name, year_start_month, description) VALUES
    ('cedar', 4, 'Compute Canada: allocation years from 1 April'),
    ('lqcd-cpu', 7, 'Fermilab LQCD CPU pool, years from 1 July'),
    ('lqcd-gpu', 7, 'Fermilab LQCD GPU pool, years from 1 July');

-- Partitions a centre's jobs run on, with the share of its jobs (p_lo <= u < p_hi).
CREATE TABLE bench.part (grp text, cluster text, partition text, p_lo float8, p_hi float8,
                         cores_per_node integer, gpus_per_node integer, max_nodes integer);
INSERT INTO bench.part VALUES
    ('ada',     'ada',     'cpu',     0.00, 1.00, 32, 0, 8),
    ('jeanzay', 'jeanzay', 'cpu',     0.00, 1.00, 40, 0, 8),
    ('hlrn',    'hlrn',    'mpp1',    0.00, 0.60, 24, 0, 8),
    ('hlrn',    'hlrn',    'smp1',    0.60, 0.70, 32, 0, 2),
    ('hlrn',    'hlrn',    'data',    0.70, 0.85, 16, 0, 1),
    ('hlrn',    'hlrn',    'prepost', 0.85, 1.00, 32, 0, 1),
    ('claix',   'claix',   'c18m',    0.00, 0.80, 48, 0, 8),
    ('claix',   'claix',   'jara',    0.80, 1.00, 48, 0, 8),
    ('cedar',   'cedar',   'cpu',     0.00, 0.75, 48, 0, 4),
    ('cedar',   'cedar',   'gpu',     0.75, 1.00, 24, 4, 2),
    ('lqcd',    'lqcd',    'pi0',     0.00, 0.60, 16, 0, 8),
    ('lqcd',    'lqcd',    'ds',      0.60, 1.00, 16, 4, 4);

-- The 2 000 accounts: n is global, k the index inside the centre's list.
CREATE TABLE bench.acct (n integer PRIMARY KEY, centre text, k integer, name text UNIQUE, kind text,
                         grp text, users integer);
INSERT INTO bench.acct
SELECT n, c.centre, n - c.first + 1,
       c.prefix || lpad((n - c.first + 1)::text, 4, '0'),
       c.kind,
       CASE WHEN c.centre = 'genci' THEN CASE WHEN n - c.first < 150 THEN 'ada' ELSE 'jeanzay' END ELSE c.grp END,
       1 + floor(bench.u(n, 1) * 12)::integer
FROM (VALUES ('genci', 1, 300, 'gen', 'project', NULL),
             ('hlrn', 301, 500, 'nip', 'project', 'hlrn'),
             ('hlrnp', 501, 1000, 'hbk', 'personal', 'hlrn'),
             ('rwth', 1001, 1400, 'rwth', 'project', 'claix'),
             ('cc', 1401, 1800, 'rrg-', 'project', 'cedar'),
             ('lqcd', 1801, 2000, 'lq', 'project', 'lqcd')) AS c(centre, first, last, prefix, kind, grp)
CROSS JOIN LATERAL generate_series(c.first, c.last) AS n;

INSERT INTO account (name, kind, description)
SELECT name, kind, centre || ' account' FROM bench.acct ORDER BY n;

-- HLRN users are the owners of the personal accounts; project p has 2 to 5 members.
CREATE TABLE bench.member (project text, j integer, username text, PRIMARY KEY (project, j));
INSERT INTO bench.member
SELECT a.name, j, 'hbk' || lpad((((a.k * 7 + j * 13) % 500) + 1)::text, 4, '0')
FROM bench.acct a
CROSS JOIN LATERAL generate_series(0, 1 + a.k % 4) AS j
WHERE a.centre = 'hlrn';

INSERT INTO hpc_user (username, created_at)
SELECT name, s.t0 FROM bench.acct, bench.site s WHERE centre = 'hlrnp' ORDER BY n;
INSERT INTO membership (account, username, role, added_at)
SELECT name, name, 'admin', s.t0 FROM bench.acct, bench.site s WHERE centre = 'hlrnp';
INSERT INTO membership (account, username, role, added_at)
SELECT m.project, m.username, CASE WHEN m.j = 0 THEN 'admin' ELSE 'member' END, s.t0
FROM bench.member m, bench.site s;
-- GENCI and RWTH projects: their principal investigator, who submits to them (check_submit's samples).
INSERT INTO hpc_user (username, created_at)
SELECT 'pi_' || name, s.t0 FROM bench.acct, bench.site s WHERE centre IN ('genci', 'rwth') ORDER BY n;
INSERT INTO membership (account, username, role, added_at)
SELECT name, 'pi_' || name, 'admin', s.t0 FROM bench.acct, bench.site s WHERE centre IN ('genci', 'rwth');
-- three in ten users charge a project by default
UPDATE hpc_user u SET default_account = m.project
FROM bench.member m
WHERE m.username = u.username AND m.j = 0 AND bench.u(substr(u.username, 4)::bigint, 2) < 0.3;

-- Users of other centres' projects (fair share inside accounts): a few with more shares.
INSERT INTO fairshare_user (account, submitter, shares)
SELECT a.name, a.name || '_u1', 2
FROM bench.acct a WHERE a.centre IN ('cc', 'lqcd') AND bench.u(a.n, 3) < 0.1;

INSERT INTO regulation_machine (machine, monthly_threshold, description) VALUES
    ('ada', 0, 'IDRIS Ada'), ('jeanzay', 0, 'IDRIS Jean Zay');  -- thresholds set from the grants
