-- One definition of an account's GENCI figures: what regulate() logs and what
-- regulation_report shows are allocation_status()'s (allocation_statuses()), on a site with a
-- machine that is a pool of another cluster under the day convention, allocations across two
-- years, a retraction, and jobs across 1 January, the 16ths, 1 May and 1 June (Paris).
BEGIN;
SET search_path = public, hpcacct;
SET client_min_messages = warning;
SELECT plan(16);

INSERT INTO hpcacct.setting VALUES ('timezone', 'Europe/Paris') ON CONFLICT (name) DO UPDATE SET value = excluded.value;
INSERT INTO regulation_machine (machine, monthly_threshold, month_convention) VALUES
    ('ada', 1000000, 'half_month'), ('vega', 500000, 'day');
INSERT INTO account (name) VALUES ('M1'), ('M2'), ('A1'), ('A2');
-- ada is its cluster's machine; vega is the pool of the cluster jz's GPU partition
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, pool) VALUES
    ('ada', 'cpu', 'cpu=64', 'cpu=1', 1, 'hours', NULL),
    ('jz', 'gpu', 'cpu=64', 'cpu=1', 3, 'hours', 'vega');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until) VALUES
    ('M1', 'grant', 1200000, 'hours', 'ada', '2025-01-01', '2025-12-31'),
    ('M1', 'grant', 600000, 'hours', 'ada', '2024-07-01', '2025-06-30'),
    ('M1', 'supplement', 300000, 'hours', 'ada', '2025-03-01', '2025-12-31'),
    ('M1', 'retraction', -50000, 'hours', 'ada', '2025-02-10', '2025-12-31'),
    ('M2', 'grant', 700000, 'hours', 'vega', '2025-01-01', '2025-12-31'),
    ('A1', 'grant', 500000, 'hours', 'ada', '2025-01-01', '2025-12-31'),
    ('A2', 'grant', 400000, 'hours', 'vega', '2024-10-01', '2025-09-30');
-- jobs across the year's start, the 16ths, 1 May and 1 June, of odd lengths (shares that
-- are not round numbers), on both machines
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
SELECT c, a || '-' || i, a, 'u', p, s::timestamp AT TIME ZONE 'Europe/Paris', e::timestamp AT TIME ZONE 'Europe/Paris',
       t::hpcacct.tres, 'COMPLETED'
FROM (VALUES (1, 'ada', 'cpu', 'M1', '2024-12-31 17:13', '2025-01-01 05:59:07', 'cpu=61'),
             (2, 'ada', 'cpu', 'M1', '2025-02-15 19:00', '2025-02-16 07:47:31', 'cpu=37'),
             (3, 'ada', 'cpu', 'M1', '2025-03-10 00:00', '2025-03-14 13:01', 'cpu=64'),
             (4, 'ada', 'cpu', 'M1', '2025-04-15 23:00', '2025-04-16 00:00:01', 'cpu=3'),
             (5, 'ada', 'cpu', 'M1', '2025-04-30 21:17', '2025-05-01 02:03', 'cpu=29'),
             (6, 'jz', 'gpu', 'M2', '2024-12-30 00:00', '2025-01-03 00:00', 'cpu=11'),
             (7, 'jz', 'gpu', 'M2', '2025-03-15 22:22', '2025-03-16 01:01:01', 'cpu=7'),
             (8, 'jz', 'gpu', 'M2', '2025-05-14 08:00', '2025-05-20 08:00', 'cpu=64'),
             (9, 'ada', 'cpu', 'A1', '2025-04-29 10:00', '2025-05-02 10:00', 'cpu=17'),
             (10, 'ada', 'cpu', 'A1', '2025-05-31 20:00', '2025-06-01 03:33:33', 'cpu=13'),
             (11, 'jz', 'gpu', 'A2', '2024-12-31 23:00', '2025-01-01 01:00', 'cpu=5'),
             (12, 'jz', 'gpu', 'A2', '2025-01-10 00:00', '2025-04-30 23:59:59', 'cpu=19'),
             (13, 'jz', 'gpu', 'A2', '2025-05-31 23:00', '2025-06-01 00:30', 'cpu=41'),
             (14, 'ada', 'cpu', 'M2', '2025-02-01 00:00', '2025-02-02 00:00', 'cpu=64'))
     AS v(i, c, p, a, s, e, t);

-- allocation_status() of every account on its machine at a day, as text (exact)
CREATE FUNCTION pg_temp.statuses(at date)
    RETURNS TABLE (account text, machine text, alloc text, granted text, tmc text, tc text, consumption text,
                   delta text, status text)
    LANGUAGE sql AS $$
    SELECT p.account, p.machine, s.alloc::text, s.granted::text, s.tmc::text, s.tc::text, s.consumption::text,
           s.delta::text, s.status
    FROM (VALUES ('M1', 'ada'), ('M2', 'vega'), ('A1', 'ada'), ('A2', 'vega')) AS p(account, machine),
         LATERAL hpcacct.allocation_status(p.account, p.machine, at) s
$$;
CREATE TEMP TABLE before_run (run_date date, account text, machine text, alloc text, granted text, tmc text, tc text,
                              consumption text, delta text, status text);
-- Runs each date in order; before each, what allocation_status() says at the run's figures_at.
CREATE FUNCTION pg_temp.run(d date) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO before_run
    SELECT d, s.* FROM pg_temp.statuses(CASE WHEN hpcacct.regulation_run(d) = 'monthly' THEN d ELSE d - 1 END) s;
    CALL hpcacct.regulate(d);
END $$;
SELECT pg_temp.run(d::date)
FROM unnest(ARRAY['2025-01-15', '2025-02-15', '2025-03-15', '2025-04-15', '2025-05-01', '2025-05-15',
                  '2025-06-01', '2025-06-15']) AS d;

CREATE FUNCTION pg_temp.logged(d date) RETURNS TABLE (account text, alloc text, granted text, tmc text, tc text,
                                                      consumption text, delta text, status text)
    LANGUAGE sql AS $$
    SELECT g.account, g.alloc::text, g.granted::text, g.tmc::text, g.tc::text, g.consumption::text, g.delta::text,
           CASE WHEN g.run = 'monthly' THEN g.outcome END
    FROM hpcacct.regulation_log g WHERE g.run_date = d ORDER BY g.account
$$;
CREATE FUNCTION pg_temp.expected(d date, accounts text[]) RETURNS TABLE (account text, alloc text, granted text,
                                                                         tmc text, tc text, consumption text,
                                                                         delta text, status text)
    LANGUAGE sql AS $$
    SELECT b.account, b.alloc, b.granted, b.tmc, b.tc, b.consumption, b.delta,
           CASE WHEN hpcacct.regulation_run(d) = 'monthly' THEN b.status END
    FROM before_run b WHERE b.run_date = d AND b.account = ANY (accounts) ORDER BY b.account
$$;

-- ---- regulate() logs allocation_status()'s figures, the monthly outcome its status ----
SELECT results_eq(format('SELECT * FROM pg_temp.logged(%L)', d), format('SELECT * FROM pg_temp.expected(%L, %L)', d, a),
                  format('regulate(%s): the figures of allocation_status() at %s, for %s', d,
                         CASE WHEN hpcacct.regulation_run(d::date) = 'monthly' THEN d ELSE (d::date - 1)::text END, a))
FROM (VALUES ('2025-01-15', '{M1,M2}'), ('2025-02-15', '{M1,M2}'), ('2025-03-15', '{M1,M2}'), ('2025-04-15', '{M1,M2}'),
             ('2025-05-01', '{A1,A2}'), ('2025-05-15', '{M1,M2}'), ('2025-06-01', '{A1,A2}'), ('2025-06-15', '{M1,M2}'))
     AS v(d, a);
-- the site is what the figures are about: warnings and retractions of both kinds, and
-- consumption by hand: A1 by 1 May 17 cores x 38 of 72 h (646), by 1 June that job whole
-- (1 224) and 4 h of 13 cores (52); M2 on vega the 2 days of 2025 of 11 cores at rate 3
-- (1 584), not its job on ada
SELECT is((SELECT array_agg(DISTINCT (g.run = 'monthly')::text || ' ' || g.outcome) FROM hpcacct.regulation_log g
           WHERE g.outcome <> 'ok'),
          '{"false retraction","false warning","true retraction","true warning"}',
          'the runs warned and retracted, monthly and annually');
SELECT is((SELECT array_agg(round(g.consumption::numeric, 6) ORDER BY g.run_date, g.account)
           FROM hpcacct.regulation_log g
           WHERE (g.account, g.run_date) IN (('A1', '2025-05-01'), ('A1', '2025-06-01'), ('M2', '2025-02-15'))),
          '{1584, 646, 1276}'::numeric[], 'consumption as counted by hand');

-- ---- regulation_report: allocation_status() at the 15th; on a run's day, before its retraction ----
SELECT results_eq(
    $$SELECT r.account, r.alloc::text, r.tmc::text, r.tc::text, r.consumption::text, r.delta::text,
             coalesce(r.status, '-')
      FROM hpcacct.regulation_report r JOIN hpcacct.regulation_log g
        ON g.account = r.account AND g.machine = r.machine AND g.run_date = r.as_of AND g.run = 'monthly'
      ORDER BY r.as_of, r.account$$,
    $$SELECT b.account, b.alloc, b.tmc, b.tc, b.consumption, b.delta,
             CASE WHEN b.granted::numeric >= s.monthly_threshold THEN b.status ELSE '-' END
      FROM before_run b JOIN hpcacct.regulation_machine s ON s.machine = b.machine
      WHERE hpcacct.regulation_run(b.run_date) = 'monthly' AND b.account IN ('M1', 'M2')
      ORDER BY b.run_date, b.account$$,
    'the report on the monthly runs'' days: allocation_status() before the run');
SELECT results_eq(
    $$SELECT r.account, r.as_of, r.alloc::text, r.tmc::text, r.tc::text, r.consumption::text, r.delta::text,
             coalesce(r.status, '-')
      FROM hpcacct.regulation_report r
      WHERE NOT EXISTS (SELECT 1 FROM hpcacct.regulation_log g
                        WHERE g.account = r.account AND g.machine = r.machine AND g.run_date = r.as_of)
      ORDER BY r.as_of, r.account$$,
    $$SELECT r.account, r.as_of, s.alloc::text, s.tmc::text, s.tc::text, s.consumption::text, s.delta::text,
             CASE WHEN s.granted >= m.monthly_threshold THEN s.status ELSE '-' END
      FROM hpcacct.regulation_report r
      JOIN hpcacct.regulation_machine m ON m.machine = r.machine
      CROSS JOIN LATERAL hpcacct.allocation_status(r.account, r.machine, r.as_of) s
      WHERE NOT EXISTS (SELECT 1 FROM hpcacct.regulation_log g
                        WHERE g.account = r.account AND g.machine = r.machine AND g.run_date = r.as_of)
      ORDER BY r.as_of, r.account$$,
    'the report on every other month: allocation_status() at the 15th');
-- M1 July 2024 to December 2025, A2 October 2024 to September 2025, M2 and A1 2025: 54
-- months, 12 of them monthly runs' days
SELECT is((SELECT count(*) FROM hpcacct.regulation_report r
           WHERE NOT EXISTS (SELECT 1 FROM hpcacct.regulation_log g
                             WHERE g.account = r.account AND g.machine = r.machine AND g.run_date = r.as_of)),
          42::bigint, 'every other month of the allocations');

-- ---- regulate() composes no figure of its own: it reads allocation_statuses() ----
SELECT ok((SELECT p.prosrc ~ 'hpcacct_internal\.allocation_statuses\('
                  AND p.prosrc !~ '\m(tmc|tc|sum|period_share|regulation_status)\(|consumption_rollup|consumptions?_before'
           FROM pg_proc p WHERE p.oid = 'hpcacct.regulate(date)'::regprocedure),
          'regulate() reads its figures through allocation_statuses(), with no sum, aggregate, rollup or share of its own');

-- ---- a month in which no allocation of the pair is valid: no row, as no run regulates it ----
-- G1 has allocations on ada in 2023 and from March 2025: none is valid from 1 January 2024
-- to the 15th of any month of 2024, nor to 15 January or 15 February 2025
INSERT INTO account (name) VALUES ('G1');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until) VALUES
    ('G1', 'grant', 100000, 'hours', 'ada', '2023-01-01', '2023-12-31'),
    ('G1', 'grant', 100000, 'hours', 'ada', '2025-03-01', '2025-12-31');
SELECT is_empty($$SELECT r.month FROM hpcacct.regulation_report r
                  WHERE r.account = 'G1' AND r.month BETWEEN '2024-01-01' AND '2025-02-01'$$,
                'no report row for a month in which none of the pair''s allocations is valid (no run regulates it)');
SELECT is((SELECT count(*) FROM hpcacct.regulation_report r WHERE r.account = 'G1'), 22::bigint,
          'the months of 2023 and March to December 2025 are reported');

SELECT * FROM finish();
ROLLBACK;
