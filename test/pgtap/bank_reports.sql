-- One bank, one allocation: the quarterly bank's deposits (ledger rows without a pool)
-- are the allocation of every report — usage by account and the fair share — in the pools
-- charged in the bank's unit, not an allocation of 0 with overuse and a factor of 0.
BEGIN;
SET search_path = public, hpcacct;
SET client_min_messages = warning;
SELECT plan(10);

INSERT INTO setting VALUES ('timezone', 'UTC') ON CONFLICT (name) DO UPDATE SET value = excluded.value;
-- HLRN's XC30 nodes, 2 NPL per node-hour, in the bank's unit.
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, exclusive)
VALUES ('hlrn', 'mpp1', 'cpu=24', 'cpu=1', 1.0 / 12, 'NPL', true);
INSERT INTO account (name) VALUES ('nip00001'), ('nip00002');
SELECT deposit('nip00001', '2024-01-01', 10000), deposit('nip00001', '2024-04-01', 10000),
       deposit('nip00002', '2024-01-01', 30000);
-- 35 hours on one node in February: 70 NPL.
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres)
VALUES ('hlrn', 'b1', 'nip00001', 'u', 'mpp1', '2024-02-01 00:00+00', '2024-02-02 11:00+00', 'cpu=1');
SELECT is(balance('nip00001', '2024-03-15'), 9930.000000, 'the bank: 10 000 deposited for Q1, 70 charged');

CREATE TEMP TABLE report AS SELECT * FROM usage_by_account(2024, '2024-03-15 00:00+00');
SELECT is((SELECT allocation FROM report WHERE account = 'nip00001'), 20000.000000,
          'usage_by_account: the year''s deposits (Q1 + Q2) are nip00001''s allocation, not 0');
SELECT is((SELECT pool FROM report WHERE account = 'nip00001'), 'hlrn', 'in the pool its jobs are charged in');
SELECT is((SELECT usage FROM report WHERE account = 'nip00001'), 70.000000, 'with its 70 NPL used');
SELECT is((SELECT utilization_pct FROM report WHERE account = 'nip00001'), 0.35, 'utilization 0.35 %');
SELECT is((SELECT overuse FROM report WHERE account = 'nip00001'), 0.000000, 'and no overuse');
SELECT is((SELECT allocation FROM report WHERE account = 'nip00002'), 30000.000000,
          'an account with deposits and no jobs is listed with its allocation');

CREATE TEMP TABLE fs AS SELECT * FROM fairshare('2024-03-15 00:00+00') WHERE submitter IS NULL;
SELECT results_eq($$SELECT account, allocation, share FROM fs ORDER BY account$$,
                  $$VALUES ('nip00001', 10000.000000::numeric, 0.25::float8), ('nip00002', 30000.000000, 0.75)$$,
                  'fairshare: the deposits valid on 15 March are the allocations, shares 0.25 and 0.75');
SELECT is((SELECT factor FROM fs WHERE account = 'nip00001'), 0.0625::float8,
          'nip00001''s factor is 2^(-1/0.25) = 0.0625, not 0: it used all of the pool''s usage on a quarter share');
SELECT is((SELECT exhausted FROM fs WHERE account = 'nip00001'), false, 'and it has not used up its allocation');

SELECT * FROM finish();
ROLLBACK;
