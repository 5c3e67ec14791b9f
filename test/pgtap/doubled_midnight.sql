-- A midnight that comes twice. In America/Havana, 1 November 2026 begins at 00:00 CDT (04:00
-- UTC) and the clocks go back from 01:00 CDT to 00:00 CST; PostgreSQL reads '2026-11-01 00:00'
-- as the second pass (05:00 UTC). A job run in the first pass ran in October by instants, which
-- is how period_share() splits it: the rollups, charges_ended_by(), the bank's quarters and the
-- consumption rollup must count its months (quarters, boundaries) so too, or part of it is lost
-- or counted in the wrong month. Each figure is compared with the job-by-job sum over the ledger.
-- Europe/Rome 1978-10-01 (a quarter's first midnight twice) and Europe/Malta 1974-09-16 (a
-- regulation boundary twice) the same.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(15);

INSERT INTO setting VALUES ('timezone', 'America/Havana') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO setting VALUES ('bank_unit', 'NPL') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('hv', 'p', 'cpu=64', 'cpu=1', 1, 'NPL');
INSERT INTO account (name) VALUES ('hv_b');
SELECT deposit('hv_b', '2026-10-01', 5000);
INSERT INTO regulation_machine (machine, monthly_threshold) VALUES ('hv', 100);
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('hv_b', 'grant', 9000, 'NPL', 'hv', '2026-01-01', '2026-12-31');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    -- the review's job: 727.5, half an hour of it in October
    ('hv', 'long', 'hv_b', 'u', 'p', '2026-11-01 04:30+00', '2026-12-01 12:00+00', 'cpu=1', 'COMPLETED'),
    -- across PostgreSQL's midnight: 30 in October, 30 in November
    ('hv', 'across', 'hv_b', 'u', 'p', '2026-11-01 04:30+00', '2026-11-01 05:30+00', 'cpu=60', 'COMPLETED'),
    -- wholly in the first pass: 40 in October (local dates 1 November)
    ('hv', 'first', 'hv_b', 'u', 'p', '2026-11-01 04:10+00', '2026-11-01 04:50+00', 'cpu=60', 'COMPLETED'),
    -- from 31 October to the first pass: 80 in October
    ('hv', 'into', 'hv_b', 'u', 'p', '2026-11-01 03:00+00', '2026-11-01 04:20+00', 'cpu=60', 'COMPLETED'),
    -- ending in November after the reports' instant below: charges_ended_by() reads the ledger
    ('hv', 'late', 'hv_b', 'u', 'p', '2026-11-25 12:00+00', '2026-11-26 12:00+00', 'cpu=1', 'COMPLETED');
-- one of no length in the first pass (booked by hand): 7 in October
INSERT INTO ledger (account, kind, amount, unit, resource_id, cluster, jobid, submitter, job_start, job_end, note)
SELECT 'hv_b', 'charge', 7, 'NPL', resource_id, 'hv', 'zero', 'u', '2026-11-01 04:40+00', '2026-11-01 04:40+00', 'by hand'
FROM resource WHERE cluster = 'hv';

-- the job-by-job sums: per month (site time zone, PostgreSQL's instants), of the jobs ended by an instant
CREATE FUNCTION pg_temp.direct(acct text, tz text, period interval, ended_by timestamptz DEFAULT 'infinity')
    RETURNS TABLE (start date, amount numeric) LANGUAGE sql STABLE AS $$
    SELECT g.p::date, sum(l.amount * period_share(l.job_start, l.job_end, g.p AT TIME ZONE tz, (g.p + period) AT TIME ZONE tz))
    FROM ledger l, generate_series('1970-01-01'::timestamp, '2030-01-01', period) g(p)
    WHERE l.account = acct AND l.kind = 'charge' AND l.job_end <= ended_by
    GROUP BY g.p HAVING sum(l.amount * period_share(l.job_start, l.job_end, g.p AT TIME ZONE tz,
                                                    (g.p + period) AT TIME ZONE tz)) <> 0
$$;
CREATE FUNCTION pg_temp.show(t anyarray) RETURNS text LANGUAGE sql AS $$ SELECT array_to_string(t, ', ') $$;

SELECT is((SELECT pg_temp.show(array_agg(r.month || ' ' || round(r.s, 6) ORDER BY r.month))
           FROM (SELECT c.month, sum(c.amount) AS s FROM charge_rollup c WHERE c.account = 'hv_b' GROUP BY c.month) r),
          (SELECT pg_temp.show(array_agg(d.start || ' ' || round(d.amount, 6) ORDER BY d.start))
           FROM pg_temp.direct('hv_b', 'America/Havana', '1 month') d),
          'charge_rollup: each month''s sum is the job-by-job sum (October holds the first pass)');
SELECT is((SELECT pg_temp.show(array_agg(c.end_month || ' ' || round(c.s, 6) ORDER BY c.end_month))
           FROM (SELECT c.end_month, sum(c.job_amount) AS s FROM charge_rollup c WHERE c.account = 'hv_b' GROUP BY c.end_month) c),
          (SELECT pg_temp.show(array_agg(e.month || ' ' || round(e.s, 6) ORDER BY e.month))
           FROM (SELECT (SELECT max(g.m)::date FROM generate_series('2026-01-01'::timestamp, '2027-01-01', '1 month') g(m)
                         WHERE g.m AT TIME ZONE 'America/Havana' <= l.job_end) AS month, sum(l.amount) AS s
                 FROM ledger l WHERE l.account = 'hv_b' AND l.kind = 'charge' GROUP BY 1) e),
          'charge_rollup: the month a job ended in holds its end (the first pass: October)');
SELECT is(balance('hv_b', '2026-11-20'),
          5000 - (SELECT sum(amount) FROM ledger WHERE account = 'hv_b' AND kind = 'charge'),
          'balance(): the deposit less every charge of the quarter (the review: 4273 for 4272.5)');
SELECT is((SELECT charges FROM quarter_balances WHERE account = 'hv_b' AND quarter = '2026-10-01'),
          (SELECT round(sum(amount), 6) FROM ledger WHERE account = 'hv_b' AND kind = 'charge'),
          'quarter_balances: the quarter''s charges');
SELECT is((SELECT pg_temp.show(array_agg(r.month || ' ' || round(r.s, 6) ORDER BY r.month))
           FROM (SELECT c.month, sum(c.amount) AS s FROM charges_ended_by('2026-11-20', '-infinity', 'infinity', true) c
                 WHERE c.account = 'hv_b' GROUP BY c.month) r),
          (SELECT pg_temp.show(array_agg(d.start || ' ' || round(d.amount, 6) ORDER BY d.start))
           FROM pg_temp.direct('hv_b', 'America/Havana', '1 month', '2026-11-20') d),
          'charges_ended_by(20 November): the jobs ended by then, per month (a job ended in the first pass too)');
SELECT is((SELECT pg_temp.show(array_agg(r.month || ' ' || round(r.s, 6) ORDER BY r.month))
           FROM (SELECT c.month, sum(c.amount) AS s FROM charges_ended_by('2026-11-01 04:45+00', '-infinity', 'infinity', false) c
                 WHERE c.account = 'hv_b' GROUP BY c.month) r),
          (SELECT pg_temp.show(array_agg(d.start || ' ' || round(d.amount, 6) ORDER BY d.start))
           FROM pg_temp.direct('hv_b', 'America/Havana', '1 month', '2026-11-01 04:45+00') d),
          'charges_ended_by() at an instant of the first pass: October''s jobs ended by then');
SELECT is((SELECT pg_temp.show(array_agg(r.month || ' ' || round(r.s, 6) ORDER BY r.month))
           FROM (SELECT u.month, sum(u.usage) AS s FROM usage_by_month(2026, '2026-12-31') u
                 WHERE u.account = 'hv_b' GROUP BY u.month HAVING sum(u.usage) <> 0) r),
          (SELECT pg_temp.show(array_agg(d.start || ' ' || round(d.amount, 6) ORDER BY d.start))
           FROM pg_temp.direct('hv_b', 'America/Havana', '1 month') d),
          'usage_by_month(): each month is the job-by-job sum');
SELECT is((SELECT round(u.usage, 6) FROM usage_by_account(2026, '2026-12-31') u WHERE u.account = 'hv_b'),
          (SELECT round(sum(amount), 6) FROM ledger WHERE account = 'hv_b' AND kind = 'charge'),
          'usage_by_account(): every charge');
SELECT is((SELECT round(s.consumption::numeric, 6) FROM allocation_status('hv_b', 'hv', '2026-10-31') s),
          (SELECT round(d.amount, 6) FROM pg_temp.direct('hv_b', 'America/Havana', '1 month') d WHERE d.start = '2026-10-01'),
          'allocation_status() at 31 October: October''s share');

-- A quarter's first midnight twice: Europe/Rome, 1 October 1978 (PostgreSQL's: 23:00 UTC;
-- the first pass 22:00-23:00 UTC). (Changing the time zone rebuilds the rollups.)
UPDATE setting SET value = 'Europe/Rome' WHERE name = 'timezone';
INSERT INTO account (name) VALUES ('rm_b');
SELECT deposit('rm_b', '1978-07-01', 1000);
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    ('hv', 'rm1', 'rm_b', 'u', 'p', '1978-09-30 22:30+00', '1978-09-30 23:30+00', 'cpu=60', 'COMPLETED'),
    ('hv', 'rm2', 'rm_b', 'u', 'p', '1978-09-30 22:05+00', '1978-09-30 22:55+00', 'cpu=60', 'COMPLETED');
SELECT is((SELECT pg_temp.show(array_agg(b.quarter || ' ' || round(b.s, 6) ORDER BY b.quarter))
           FROM (SELECT b.quarter, sum(b.amount) AS s FROM bank_entry b WHERE b.account = 'rm_b' AND b.kind = 'charge'
                 GROUP BY b.quarter HAVING sum(b.amount) <> 0) b),
          (SELECT pg_temp.show(array_agg(d.start || ' ' || round(d.amount, 6) ORDER BY d.start))
           FROM pg_temp.direct('rm_b', 'Europe/Rome', '3 months') d),
          'bank_entry: the first pass of 1 October in the third quarter (80 of 110)');
SELECT is(balance('rm_b', '1978-09-30'),
          1000 - (SELECT round(d.amount, 6) FROM pg_temp.direct('rm_b', 'Europe/Rome', '3 months') d WHERE d.start = '1978-07-01'),
          'balance() of the third quarter: the deposit less its share (80)');
SELECT is((SELECT pg_temp.show(array_agg(r.month || ' ' || round(r.s, 6) ORDER BY r.month))
           FROM (SELECT c.month, sum(c.amount) AS s FROM charge_rollup c WHERE c.account = 'rm_b' GROUP BY c.month) r),
          (SELECT pg_temp.show(array_agg(d.start || ' ' || round(d.amount, 6) ORDER BY d.start))
           FROM pg_temp.direct('rm_b', 'Europe/Rome', '1 month') d),
          'charge_rollup after the rebuild: September holds the first pass');

-- A regulation boundary twice: Europe/Malta, 16 September 1974 (PostgreSQL's: 23:00 UTC on the
-- 15th; the first pass 22:00-23:00 UTC). consumption_before() at it reads the consumption rollup.
UPDATE setting SET value = 'Europe/Malta' WHERE name = 'timezone';
INSERT INTO account (name) VALUES ('mt_b');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    ('hv', 'mt1', 'mt_b', 'u', 'p', '1974-09-15 22:10+00', '1974-09-15 22:50+00', 'cpu=60', 'COMPLETED'),
    ('hv', 'mt2', 'mt_b', 'u', 'p', '1974-09-15 22:30+00', '1974-09-15 23:30+00', 'cpu=60', 'COMPLETED');
SELECT is((SELECT array[consumption_before('mt_b', 'hv', '1974-09-16'::timestamp AT TIME ZONE 'Europe/Malta'),
                        consumption_before('mt_b', 'hv', '1974-09-15 22:00+00'),
                        consumption_before('mt_b', 'hv', '1974-09-15 22:40+00')]),
          (SELECT array_agg((SELECT sum(l.amount * period_share(l.job_start, l.job_end, '-infinity', b.at))
                             FROM ledger l WHERE l.account = 'mt_b' AND l.kind = 'charge') ORDER BY b.n)
           FROM (VALUES (1, '1974-09-16'::timestamp AT TIME ZONE 'Europe/Malta'), (2, '1974-09-15 22:00+00'::timestamptz),
                        (3, '1974-09-15 22:40+00')) b(n, at)),
          'consumption_before() at the boundary and in its first pass: the job-by-job shares (70, 0, 40)');

-- The day of an instant in the first pass is the day before too, as local_time() counts it: a
-- pool whose allocation year begins in November is still in the year before, and an allocation
-- from 1 November is not yet valid for fair share (both took the first pass for 1 November).
UPDATE setting SET value = 'America/Havana' WHERE name = 'timezone';
INSERT INTO pool (name, year_start_month) VALUES ('hv', 11);
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('hv_b', 'grant', 500, 'NPL', 'hv', '2026-11-01', '2026-12-31');
SELECT is((SELECT y.year || ' ' || y.state FROM allocation_year('hv', NULL, '2026-11-01 04:30+00') y), '2025 current',
          'allocation_year() in the first pass of 1 November: the year that holds the instant');
SELECT is((SELECT array_agg(DISTINCT f.pool || ' ' || f.allocation) FROM fairshare_all('2026-11-01 04:30+00') f
           WHERE f.account = 'hv_b' AND f.allocation IS NOT NULL),
          (SELECT array_agg(DISTINCT f.pool || ' ' || f.allocation) FROM fairshare_all('2026-11-01 03:30+00') f
           WHERE f.account = 'hv_b' AND f.allocation IS NOT NULL),
          'fairshare_all() in the first pass: the allocations of 31 October, as half an hour before');

SELECT * FROM finish();
ROLLBACK;
