-- Calendar edges: zones far from UTC (Pacific/Kiritimati +14, Pacific/Pago_Pago -11), the last
-- day of a month, quarter and year, 29 February, an allocation year of 366 days, and GENCI
-- validity windows at a month's end that the half_month convention makes empty.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(29);

INSERT INTO setting VALUES ('timezone', 'Pacific/Kiritimati') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO setting VALUES ('bank_unit', 'NPL') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('ce', 'p', 'cpu=64', 'cpu=1', 1, 'NPL');
INSERT INTO pool (name, year_start_month) VALUES ('ce', 7);
INSERT INTO regulation_machine (machine, monthly_threshold) VALUES ('ce', 100);
INSERT INTO account (name) VALUES ('ce_a'), ('ce_b');
SELECT deposit('ce_a', '2024-01-01', 5000);
SELECT deposit('ce_a', '2024-04-01', 5000);
SELECT deposit('ce_a', '2024-07-01', 5000);
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('ce_a', 'grant', 1200000, 'NPL', 'ce', '2024-01-01', '2024-12-31');
SELECT add_quota_period('ce_a', '2024-01-01', '2024-12-31', 1000, NULL, 'NPL');
-- 23:30-23:50 local on the last day of a quarter, of a half year (the pool's year) and of a
-- year: 09:30-09:50 UTC of that day, and 20 NPL each
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    ('ce', 'q1', 'ce_a', 'u', 'p', '2024-03-31 23:30+14', '2024-03-31 23:50+14', 'cpu=60', 'COMPLETED'),
    ('ce', 'h1', 'ce_a', 'u', 'p', '2024-06-30 23:30+14', '2024-06-30 23:50+14', 'cpu=60', 'COMPLETED'),
    ('ce', 'y1', 'ce_a', 'u', 'p', '2024-12-31 23:30+14', '2024-12-31 23:50+14', 'cpu=60', 'COMPLETED');

SELECT is((SELECT array_agg(month || ' ' || amount ORDER BY month) FROM charge_rollup WHERE account = 'ce_a'),
          ARRAY['2024-03-01 20.000000', '2024-06-01 20.000000', '2024-12-01 20.000000'],
          'Kiritimati: a job at 23:30 on the last day of a month is that month''s in the rollup');
SELECT is((SELECT array_agg(quarter || ' ' || round(amount, 6) ORDER BY quarter) FROM bank_entry
           WHERE account = 'ce_a' AND kind = 'charge'),
          ARRAY['2024-01-01 20.000000', '2024-04-01 20.000000', '2024-10-01 20.000000'],
          'Kiritimati: ... and its quarter''s in the bank');
SELECT is(ARRAY[balance('ce_a', '2024-03-31'), balance('ce_a', '2024-06-30'), balance('ce_a', '2024-07-01')],
          ARRAY[4980.000000, 4980.000000, 5000.000000],
          'Kiritimati: balance() of the first and second quarters counts their last day''s job, of the third nothing');
SELECT is((SELECT array_agg(consumed_current ORDER BY d) FROM (VALUES (date '2024-03-31'), ('2024-04-01')) v(d),
           window_quota_usage('ce_a', v.d) u),
          ARRAY[20, 0]::float8[],
          'Kiritimati: the window quota counts it in March, not April');
SELECT is((SELECT array_agg(s.consumption ORDER BY d) FROM (VALUES (date '2024-03-30'), ('2024-03-31'), ('2024-12-31')) v(d),
           allocation_status('ce_a', 'ce', v.d) s),
          ARRAY[0, 20, 60]::float8[],
          'Kiritimati: allocation_status() counts it at the end of its day, and the year''s at 31 December');
SELECT is((SELECT array_agg(u.year || ' ' || u.month || ' ' || u.usage ORDER BY u.month)
           FROM (SELECT * FROM usage_by_month(2023, '2025-06-01') UNION ALL
                 SELECT * FROM usage_by_month(2024, '2025-06-01')) u WHERE u.account = 'ce_a'),
          ARRAY['2023 2024-03-01 20.000000', '2023 2024-06-01 20.000000', '2024 2024-12-01 20.000000'],
          'Kiritimati: usage_by_month() puts 30 June''s job in the allocation year that ends that day (July start)');

UPDATE setting SET value = 'Pacific/Pago_Pago' WHERE name = 'timezone';
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    ('ce', 'pp', 'ce_b', 'u', 'p', '2024-12-31 23:30-11', '2024-12-31 23:50-11', 'cpu=60', 'COMPLETED');
SELECT is((SELECT array_agg(month || ' ' || amount ORDER BY month) FROM charge_rollup WHERE account = 'ce_b'),
          ARRAY['2024-12-01 20.000000'],
          'Pago Pago: a job at 23:30 on 31 December (10:30 UTC on 1 January) is December''s');
SELECT is((SELECT array_agg(quarter || ' ' || round(amount, 6)) FROM bank_entry WHERE account = 'ce_b' AND kind = 'charge'),
          ARRAY['2024-10-01 20.000000'], 'Pago Pago: ... and the fourth quarter''s');
SELECT is((SELECT array_agg(month || ' ' || amount ORDER BY month) FROM charge_rollup WHERE account = 'ce_a'),
          ARRAY['2024-03-01 20.000000', '2024-06-01 20.000000', '2024-12-01 20.000000'],
          'the time zone changed: the rollup rebuilt in the new zone (Kiritimati''s jobs, 25 hours earlier there, stay in their months)');

-- The allocation year of 366 days, and GENCI's figures on 29 February and 31 December
SELECT is((SELECT first_day || ' ' || last_day || ' ' || length FROM allocation_year('ce', 2023)),
          '2023-07-01 2024-06-30 366 days', 'allocation_year(): July 2023 to June 2024 has 366 days');
SELECT is((SELECT array_agg(round(s.tmc) || ' ' || round(s.tc) ORDER BY d)
           FROM (VALUES (date '2024-02-28'), ('2024-02-29'), ('2024-12-31')) v(d), allocation_status('ce_a', 'ce', v.d) s),
          ARRAY['100000 200000', '100000 200000', '100000 1200000'],
          'half_month: TC at the end of 28 February (1 + 28/29 months, rounded up) and 29 February is two months; '
          'on 31 December the whole year, TMC still a twelfth');
UPDATE regulation_machine SET month_convention = 'day' WHERE machine = 'ce';
SELECT is((SELECT array_agg(round(s.tc::numeric, 4) ORDER BY d)
           FROM (VALUES (date '2024-02-28'), ('2024-02-29'), ('2024-12-31')) v(d), allocation_status('ce_a', 'ce', v.d) s),
          ARRAY[round(100000 * (1 + 28 / 29.0), 4), 200000, 1200000],
          'day: TC at the end of 28 February of a leap year is 1 + 28/29 months');
UPDATE regulation_machine SET month_convention = 'half_month' WHERE machine = 'ce';

-- A validity window that half_month makes empty (both ends round to the same half-month
-- boundary: 28-31 December, 1-3 March) is refused when booked, not on every later read
CREATE FUNCTION pg_temp.ledger_rows() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM hpcacct.ledger';
SELECT pg_temp.ledger_rows() AS rows_before \gset
SELECT throws_ok($$INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
                   VALUES ('ce_a', 'supplement', 1000, 'NPL', 'ce', '2024-12-28', '2024-12-31')$$,
                 '22023', NULL, 'a supplement of 28-31 December on a half_month machine is refused (22023)');
SELECT throws_ok($$INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
                   VALUES ('ce_a', 'grant', 1000, 'NPL', 'ce', '2024-03-01', '2024-03-03')$$,
                 '22023', NULL, 'a grant of 1-3 March too');
SELECT throws_ok($$INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
                   VALUES ('ce_b', 'grant', 1000, 'NPL', 'ce', '2024-01-01', '2024-12-31'),
                          ('ce_a', 'retraction', -10, 'NPL', 'ce', '2024-01-29', '2024-01-31')$$,
                 '22023', NULL, 'a retraction of 29-31 January too, with the statement''s other rows');
SELECT is(pg_temp.ledger_rows(), :rows_before::bigint, '... and nothing is written');
SELECT lives_ok($$SELECT * FROM allocation_status('ce_a', 'ce', '2024-12-30')$$,
                'allocation_status() at 30 December still answers');
SELECT lives_ok($$SELECT * FROM regulation_report$$, 'regulation_report still answers');
SELECT throws_ok($$INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
                   VALUES ('ce_a', 'supplement', 1000, 'NPL', 'ce', '2024-12-31', '2024-12-30')$$,
                 '23514', NULL, 'an inverted window is still the CHECK''s 23514');
SELECT lives_ok($$INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
                  VALUES ('ce_a', 'supplement', 1000, 'NPL', 'ce', '2024-12-16', '2024-12-31')$$,
                'half a month (16-31 December) is booked');
SELECT is((SELECT round(s.tmc::numeric) FROM allocation_status('ce_a', 'ce', '2024-12-20') s), 102000::numeric,
          '... and its TMC is its amount over half a month');
-- the same window on a machine of the day convention is booked; a machine cannot then be
-- switched to half_month, nor a pool with such a window become a regulated machine
INSERT INTO regulation_machine (machine, monthly_threshold, month_convention) VALUES ('dm', 100, 'day');
SELECT lives_ok($$INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
                  VALUES ('ce_b', 'supplement', 310, 'NPL', 'dm', '2024-12-28', '2024-12-31')$$,
                'under the day convention 28-31 December is four days of December, booked');
SELECT is((SELECT round(s.tmc::numeric) FROM allocation_status('ce_b', 'dm', '2024-12-30') s), 2403::numeric,
          '... TMC 310 over 4/31 months');
SELECT throws_ok($$UPDATE regulation_machine SET month_convention = 'half_month' WHERE machine = 'dm'$$,
                 '22023', NULL, 'switching that machine to half_month is refused (22023)');
SELECT is((SELECT month_convention FROM regulation_machine WHERE machine = 'dm'), 'day', '... and it keeps day');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('ce_b', 'grant', 1000, 'NPL', 'nm', '2024-12-28', '2024-12-31');
SELECT throws_ok($$INSERT INTO regulation_machine (machine, monthly_threshold) VALUES ('nm', 100)$$,
                 '22023', NULL, 'a pool with a 28-31 December grant cannot become a half_month machine');
SELECT lives_ok($$INSERT INTO regulation_machine (machine, monthly_threshold, month_convention) VALUES ('nm', 100, 'day')$$,
                '... it can under the day convention');
SELECT throws_ok($$UPDATE regulation_machine SET month_convention = 'weekly' WHERE machine = 'nm'$$,
                 '23514', NULL, 'an unknown convention is still the CHECK''s 23514');
SELECT lives_ok($$CALL regulate('2024-03-15')$$, 'regulate() of 15 March runs (ce_a''s retraction booked)');

SELECT * FROM finish();
ROLLBACK;
