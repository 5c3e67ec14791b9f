-- The accounting rules' examples (README) that the other tests did not state as written: the Niagara and Cedar
-- P100 bundles, the job from 30 June 22:00 to 1 July 02:00, Turing's threshold, the annual
-- regulation's 30 % boundary and both percentages as settings, and a bank account's
-- reactivation.
BEGIN;
SET search_path = public, hpcacct;
SET client_min_messages = warning;
SELECT plan(14);

-- ---- §0 bundles ----
SELECT is(equivalents('cpu=1,mem=9600M', 'cpu=1,mem=4800M'), 2::float8,
          'Niagara bundle cpu=1,mem=4800M: 1 core with 9600M of memory is 2 equivalents');
SELECT is(equivalents('cpu=2,mem=4800M', 'cpu=1,mem=4800M'), 2::float8,
          'Niagara bundle: 2 cores with 4800M are 2 equivalents');
SELECT is(equivalents('gres/gpu=1,cpu=6,mem=48000M', 'gres/gpu=1,cpu=6,mem=32000M'), 1.5::float8,
          'Cedar P100 bundle gres/gpu=1,cpu=6,mem=32000M: 1 GPU, 6 cores and 48000M are 1.5 GPU equivalents');

-- ---- §0 attribution: 30 June 22:00 to 1 July 02:00 counts half in June, half in July ----
INSERT INTO setting VALUES ('timezone', 'Europe/Berlin') ON CONFLICT (name) DO UPDATE SET value = excluded.value;
INSERT INTO account (name) VALUES ('sx');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('sxc', 'cpu', 'cpu=32', 'cpu=1', 1, 'core-hours');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres)
VALUES ('sxc', 'june30', 'sx', 'sxu', 'cpu', '2025-06-30 22:00 Europe/Berlin', '2025-07-01 02:00 Europe/Berlin', 'cpu=4');
SELECT results_eq($$SELECT month, amount FROM charge_by_month WHERE account = 'sx' ORDER BY month$$,
                  $$VALUES ('2025-06-01'::date, 8.000000::numeric), ('2025-07-01'::date, 8.000000::numeric)$$,
                  'the job charges 16 core-hours: 8 in June, 8 in July (site time zone)');

-- ---- §2 Turing's threshold: 5 M hours ----
INSERT INTO regulation_machine (machine, monthly_threshold) VALUES ('turing', 5000000);
INSERT INTO account (name) VALUES ('tu5'), ('tu4');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until) VALUES
    ('tu5', 'grant', 5000000, 'hours', 'turing', '2025-01-01', '2025-12-31'),
    ('tu4', 'grant', 4999999, 'hours', 'turing', '2025-01-01', '2025-12-31');
CALL regulate('2025-01-15');
SELECT is((SELECT string_agg(account || ':' || run, ',' ORDER BY account) FROM regulation_log
           WHERE machine = 'turing' AND run_date = '2025-01-15'),
          'tu5:monthly', 'on Turing, 5 M hours are regulated monthly, 4 999 999 are not');

-- ---- §2 annual regulation: "less than 30 %" of the allocation by the end of April on ada
-- (the defaults); both percentages as settings on ada3: warn below 50 %, retract up to 80 % ----
INSERT INTO regulation_machine (machine, monthly_threshold, annual_warning_percent, annual_retraction_percent)
VALUES ('ada', 1000000, DEFAULT, DEFAULT), ('ada3', 1000000, 50, 80);
INSERT INTO resource (cluster, partition, node, bundle, rate, unit)
SELECT m, 'cpu', 'cpu=1000', 'cpu=1', 1, 'hours' FROM unnest(ARRAY['ada', 'ada3']) AS m;
-- 500 000 hours each; 1 000 cores in April for 150 h (30 %), 149 h 57 min (29.99 %),
-- 200 h (40 %) and 50 h (10 %)
CREATE TEMP TABLE annual (machine text, account text, hours interval);
INSERT INTO annual VALUES ('ada', 'p30', '150 hours'), ('ada', 'p29', '149 hours 57 minutes'),
                          ('ada3', 'q40', '200 hours'), ('ada3', 'q10', '50 hours');
INSERT INTO account (name) SELECT account FROM annual;
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
SELECT account, 'grant', 500000, 'hours', machine, '2025-01-01', '2025-12-31' FROM annual;
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres)
SELECT machine, 'j-' || account, account, 'pu', 'cpu', '2025-04-01 00:00 Europe/Berlin',
       timestamptz '2025-04-01 00:00 Europe/Berlin' + hours, 'cpu=1000'
FROM annual;
CALL regulate('2025-05-01');
SELECT is((SELECT outcome FROM regulation_log WHERE account = 'p30' AND run_date = '2025-05-01'), 'ok',
          'a project that used exactly 30 % is not warned');
SELECT is((SELECT outcome FROM regulation_log WHERE account = 'p29' AND run_date = '2025-05-01'), 'warning',
          'one that used 29.99 % is');
SELECT is((SELECT string_agg(account || ':' || outcome, ',' ORDER BY account) FROM regulation_log
           WHERE machine = 'ada3' AND run_date = '2025-05-01'),
          'q10:warning,q40:warning', 'with a 50 % setting, 40 % and 10 % are both warned');
CALL regulate('2025-06-01');
SELECT is((SELECT retracted FROM regulation_log WHERE account = 'q10' AND run_date = '2025-06-01'), 400000.000000::numeric,
          'q10 loses 80 % of its allocation (the retraction setting)');
SELECT is((SELECT retracted FROM regulation_log WHERE account = 'q40' AND run_date = '2025-06-01'), 300000.000000::numeric,
          'q40 loses "up to" 80 %: the 60 % it had not used');
SELECT is((SELECT retracted FROM regulation_log WHERE account = 'p29' AND run_date = '2025-06-01'), 200000.000000::numeric,
          'on a machine with the defaults, 40 % (p29)');

-- ---- §4 an account with no allocation for this or a later quarter expires; a new one reactivates it ----
INSERT INTO setting VALUES ('timezone', 'UTC') ON CONFLICT (name) DO UPDATE SET value = excluded.value;
INSERT INTO account (name) VALUES ('rp');
SELECT deposit('rp', '2025-01-01', 1000) AS booked \gset
SELECT is(account_state('rp', '2025-02-01'), 'active', 'active in the quarter of its allocation');
SELECT is(account_state('rp', '2025-04-02'), 'expired', 'expired in the next quarter, with no allocation for it or later');
SELECT deposit('rp', '2025-07-01', 1000) AS booked \gset
SELECT is(account_state('rp', '2025-07-02'), 'active', 'reactivated by a new allocation');

SELECT * FROM finish();
ROLLBACK;
