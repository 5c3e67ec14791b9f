-- The ledger's two place columns (issue 18): a charge names its job's cluster (`cluster`),
-- every other row the pool it counts in (`pool`; NULL: every pool charged in its unit). Each
-- misplaced one is refused by a named constraint, 23514 with a hint, nothing written; a grant
-- by pool is what regulation, the submit check and the allocation reports read, here with a
-- pool that is not a cluster's name (the cluster lpc's CPU partition is the pool lp-cpu).
BEGIN;
SET search_path = public, hpcacct;
SET client_min_messages = warning;
SELECT plan(23);

-- SQLSTATE, constraint and hint of a statement's error.
CREATE FUNCTION pg_temp.error_of(statement text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    name text;
    hint text;
BEGIN
    EXECUTE statement;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS name = CONSTRAINT_NAME, hint = PG_EXCEPTION_HINT;
    RETURN SQLSTATE || ' ' || coalesce(name, '(no constraint)') || ' ' || coalesce(hint, '(no hint)');
END $$;

INSERT INTO setting VALUES ('timezone', 'UTC') ON CONFLICT (name) DO UPDATE SET value = excluded.value;
INSERT INTO account (name, kind) VALUES ('lp_genci', 'project'), ('lp_bank', 'project');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, pool) VALUES
    ('lpc', 'cpu', 'cpu=128', 'cpu=1', 1, 'hours', 'lp-cpu'),
    ('lpc', 'gpu', 'cpu=64,gres/gpu=8', 'gres/gpu=1', 1, 'lp-GPU-hours', NULL);
INSERT INTO regulation_machine (machine, monthly_threshold) VALUES ('lp-cpu', 1000000);

-- ---- misplaced columns: refused, named, with a hint, nothing written ----
SELECT throws_ok($$INSERT INTO hpcacct.ledger (account, kind, amount, unit, cluster, valid_from, valid_until)
                   VALUES ('lp_genci', 'grant', 1200000, 'hours', 'lp-cpu', '2025-01-01', '2025-12-31')$$,
                 '23514', 'a grant row has no cluster (cluster "lp-cpu" given): only a charge names a cluster',
                 'a grant that names a cluster is refused (23514)');
SELECT is(pg_temp.error_of($$INSERT INTO hpcacct.ledger (account, kind, amount, unit, cluster, valid_from, valid_until)
                             VALUES ('lp_genci', 'grant', 1200000, 'hours', 'lp-cpu', '2025-01-01', '2025-12-31')$$),
          '23514 ledger_allocation_has_no_cluster Name the grant''s pool in the column pool instead '
          '(pool = ''lp-cpu''); a NULL pool is every pool charged in its unit.',
          'its error names the constraint, and the hint says to name the pool in pool');
SELECT is(pg_temp.error_of($$INSERT INTO hpcacct.ledger (account, kind, amount, unit, cluster, valid_from, valid_until)
                             VALUES ('lp_bank', 'deposit', 500, 'NPL', 'lpc', '2025-01-01', '2025-03-31')$$),
          '23514 ledger_allocation_has_no_cluster Name the deposit''s pool in the column pool instead '
          '(pool = ''lpc''); a NULL pool is every pool charged in its unit.',
          'so is a deposit that names a cluster (every kind but charge)');
SELECT throws_ok($$INSERT INTO hpcacct.ledger (account, kind, amount, unit, resource_id, cluster, jobid, job_start,
                                               job_end, pool)
                   SELECT 'lp_genci', 'charge', 10, 'hours', r.resource_id, 'lpc', 'x1', '2025-02-01 00:00+00',
                          '2025-02-01 01:00+00', 'lp-cpu'
                   FROM hpcacct.resource r WHERE r.cluster = 'lpc' AND r.partition = 'cpu'$$,
                 '23514', 'a charge has no pool (pool "lp-cpu" given)', 'a charge that names a pool is refused (23514)');
SELECT is(pg_temp.error_of($$INSERT INTO hpcacct.ledger (account, kind, amount, unit, resource_id, cluster, jobid,
                                                         job_start, job_end, pool)
                             SELECT 'lp_genci', 'charge', 10, 'hours', r.resource_id, 'lpc', 'x1', '2025-02-01 00:00+00',
                                    '2025-02-01 01:00+00', 'lp-cpu'
                             FROM hpcacct.resource r WHERE r.cluster = 'lpc' AND r.partition = 'cpu'$$),
          '23514 ledger_charge_has_no_pool A charge counts in its resource''s pool (resource.pool, or its cluster): '
          'leave pool NULL.',
          'its error names the constraint, and the hint says where a charge counts');
SELECT throws_ok($$INSERT INTO hpcacct.ledger (account, kind, amount, unit, pool, valid_from, valid_until)
                   VALUES ('lp_genci', 'grant', 1200000, 'hours', '', '2025-01-01', '2025-12-31')$$,
                 '23514', NULL, 'a grant whose pool is the empty string is refused (23514: a NULL pool is every pool)');
-- a charge without an end: allocation_status() would count it, balance() and the charts not
SELECT is(rtrim(pg_temp.error_of($$INSERT INTO hpcacct.ledger (account, kind, amount, unit, resource_id, cluster, jobid,
                                                               job_start, job_end)
                             SELECT 'lp_genci', 'charge', 10, 'hours', r.resource_id, 'lpc', 'x2', '2025-02-01 00:00+00', NULL
                             FROM hpcacct.resource r WHERE r.cluster = 'lpc' AND r.partition = 'cpu'$$)),
          '23514 ledger_charge_names_job', 'a charge without a job_end is refused (23514)');
-- a grant without an end of its window: allocation_events() would leave it out of every figure
SELECT is(rtrim(pg_temp.error_of($$INSERT INTO hpcacct.ledger (account, kind, amount, unit, pool, valid_from, valid_until)
                                   VALUES ('lp_genci', 'grant', 1200000, 'hours', 'lp-cpu', '2025-01-01', NULL)$$)),
          '23514 ledger_allocation_has_window', 'a grant without a valid_until is refused (23514)');
SELECT is((SELECT count(*) FROM ledger WHERE account LIKE 'lp\_%'), 0::bigint, 'the refused rows wrote nothing');
SELECT col_is_null('hpcacct', 'ledger', 'pool', 'ledger.pool may be NULL (a charge, or every pool of the unit)');
SELECT is(col_description('hpcacct.ledger'::regclass,
                          (SELECT attnum FROM pg_attribute WHERE attrelid = 'hpcacct.ledger'::regclass AND attname = 'pool')),
          'An allocation entry''s pool (any kind but charge): the pool it counts in (GENCI''s machine); NULL: every pool '
          'charged in its unit (the quarterly bank''s credits); NULL for a charge, which counts in its resource''s pool',
          'ledger.pool''s comment says what it holds');

-- ---- a job's charge names its cluster, not its pool ----
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    ('lpc', 'j1', 'lp_genci', 'lu', 'cpu', '2025-02-01 00:00+00', '2025-02-02 00:00+00', 'cpu=100', 'COMPLETED');
SELECT row_eq($$SELECT kind, cluster, pool, amount FROM hpcacct.ledger WHERE jobid = 'j1'$$,
              ROW('charge'::text, 'lpc'::text, NULL::text, 2400.000000::numeric),
              'the charging trigger books the job''s cluster and no pool');

-- ---- a grant by pool: regulation, the submit check and the allocation reports read it ----
SELECT lives_ok($$INSERT INTO hpcacct.ledger (account, kind, amount, unit, pool, valid_from, valid_until)
                  VALUES ('lp_genci', 'grant', 1200000, 'hours', 'lp-cpu', '2025-01-01', '2025-12-31')$$,
                'a grant names its pool (GENCI''s machine) in pool');
SELECT row_eq($$SELECT alloc, granted, round(tmc::numeric), round(consumption::numeric)
                FROM hpcacct.allocation_status('lp_genci', 'lp-cpu', '2025-03-14')$$,
              ROW(1200000.000000::numeric, 1200000.000000::numeric, 100000::numeric, 2400::numeric),
              'allocation_status: the grant is the machine''s Alloc, the charges in its pool its consumption');
SELECT row_eq($$SELECT first_day, alloc, round(tmc::numeric) FROM hpcacct.regulation_year('lp_genci', 'lp-cpu', 2025)
                ORDER BY first_day LIMIT 1$$,
              ROW('2025-01-01'::date, 1200000.000000::numeric, 100000::numeric),
              'regulation_year reads the grant by its pool');
SELECT is((SELECT round(allocation, 6) FROM hpcacct.year_allocations(2025, '2025-06-01 00:00+00')
           WHERE pool = 'lp-cpu' AND account = 'lp_genci'), 1200000.000000::numeric,
          'year_allocations counts the grant in its pool');
SELECT is((SELECT (account_verdict('lp_genci', '2025-03-14')).ok), true,
          'the submit check finds the allocation on its machine (the pool)');
CALL regulate('2025-03-15');
SELECT row_eq($$SELECT machine, outcome, retracted FROM hpcacct.regulation_log
                WHERE account = 'lp_genci' AND run_date = '2025-03-15'$$,
              ROW('lp-cpu'::text, 'retraction'::text, 100000.000000::numeric),
              'regulate() regulates the grant on its machine: consumption 2 400 against TC 250 000, a retraction');
SELECT row_eq($$SELECT l.kind, l.pool, l.cluster, l.amount FROM hpcacct.ledger l
                JOIN hpcacct.regulation_log g USING (entry_id) WHERE g.account = 'lp_genci'$$,
              ROW('retraction'::text, 'lp-cpu'::text, NULL::text, -100000.000000::numeric),
              'the retraction it books names the pool, not a cluster');
SELECT is((SELECT allocation FROM hpcacct.fairshare('2025-06-01 00:00+00')
           WHERE pool = 'lp-cpu' AND account = 'lp_genci' AND submitter IS NULL), 1100000.000000::numeric,
          'the fair share''s allocation in the pool: the grant less the retraction');

-- ---- a row without a pool: every pool charged in its unit ----
INSERT INTO ledger (account, kind, amount, unit, valid_from, valid_until)
VALUES ('lp_bank', 'deposit', 800, 'lp-GPU-hours', '2025-04-01', '2025-06-30');
SELECT is((SELECT array_agg(pool || '=' || round(allocation) ORDER BY pool)
           FROM hpcacct.year_allocations(2025, '2025-06-01 00:00+00') WHERE account = 'lp_bank'),
          '{lpc=800}'::text[],
          'a deposit without a pool counts in every pool charged in its unit (the GPU partition''s pool: its cluster)');

-- Every entry names its unit: an empty one (which no balance or charge counts in) is refused by
-- a named constraint, as add_quota_period() refuses an empty unit (22023), nothing written.
SELECT throws_ok($$INSERT INTO hpcacct.ledger (account, kind, amount, unit, pool, valid_from, valid_until)
                   VALUES ('lp_genci', 'grant', 1200000, '', 'lp-cpu', '2025-01-01', '2025-12-31')$$,
                 '23514', 'new row for relation "ledger" violates check constraint "ledger_unit_named"',
                 'a grant with an empty unit is refused (ledger_unit_named)');
SELECT is((SELECT count(*) FROM hpcacct.ledger WHERE unit = ''), 0::bigint, 'and wrote nothing');

SELECT * FROM finish();
ROLLBACK;
