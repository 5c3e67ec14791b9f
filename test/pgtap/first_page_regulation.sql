-- my_accounts()'s GENCI entries on past days, every account's in one pass
-- (hpcacct_internal.allocation_statuses(), through consumptions_before()): each entry is
-- allocation_status() of that account and machine, and its consumption the job-by-job sum
-- from 1 January to the end of the day. An account on two machines (one a pool of two
-- clusters, its grant begun the year before), one with a retraction, one whose grant starts
-- later, one with jobs and no allocation; days in January (the 15th: the next instant a
-- regulation boundary), on 31 December, across the DST change, and today.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(29);

INSERT INTO setting VALUES ('timezone', 'Europe/Berlin') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('fg_a', 'p', 'cpu=16', 'cpu=1', 1, 'h');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, pool) VALUES
    ('fg_b', 'p', 'cpu=16', 'cpu=1', 2, 'h', 'fg_p'),
    ('fg_c', 'p', 'cpu=16', 'cpu=1', 3, 'h', 'fg_p');
INSERT INTO regulation_machine (machine, monthly_threshold) VALUES ('fg_a', 100);
INSERT INTO regulation_machine (machine, monthly_threshold, month_convention) VALUES ('fg_p', 100, 'day');
INSERT INTO account (name) VALUES ('fg_two'), ('fg_ret'), ('fg_late'), ('fg_none'), ('fg_old');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until) VALUES
    ('fg_two', 'grant', 24000, 'h', 'fg_a', '2025-01-01', '2026-12-31'),
    ('fg_two', 'grant', 6000, 'h', 'fg_p', '2024-07-01', '2025-06-30'),
    ('fg_two', 'supplement', 900, 'h', 'fg_p', '2025-01-10', '2025-06-30'),
    ('fg_ret', 'grant', 9000, 'h', 'fg_a', '2025-01-01', '2025-12-31'),
    ('fg_ret', 'retraction', -1500, 'h', 'fg_a', '2025-03-16', '2025-12-31'),
    ('fg_late', 'grant', 3000, 'h', 'fg_p', '2025-04-01', '2025-12-31'),
    ('fg_old', 'grant', 1200, 'h', 'fg_a', '2024-01-01', '2024-12-31');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    -- across 1 January, across the 16th, across the 20th's end (re-rated below)
    ('fg_a', 'a1', 'fg_two', 'u', 'p', '2024-12-31 20:00+01', '2025-01-01 04:00+01', 'cpu=2', 'COMPLETED'),
    ('fg_a', 'a2', 'fg_two', 'u', 'p', '2025-01-15 22:00+01', '2025-01-16 02:00+01', 'cpu=1', 'COMPLETED'),
    ('fg_a', 'a3', 'fg_two', 'u', 'p', '2025-01-19 12:00+01', '2025-01-22 12:00+01', 'cpu=3', 'COMPLETED'),
    -- on both clusters of the pool, one across the DST change and the end of March
    ('fg_b', 'b1', 'fg_two', 'u', 'p', '2025-01-10 00:00+01', '2025-01-10 10:00+01', 'cpu=4', 'COMPLETED'),
    ('fg_c', 'c1', 'fg_two', 'u', 'p', '2025-03-29 22:00+01', '2025-04-02 12:00+02', 'cpu=2', 'COMPLETED'),
    ('fg_c', 'c0', 'fg_two', 'u', 'p', '2024-12-20 00:00+01', '2024-12-21 00:00+01', 'cpu=1', 'COMPLETED'),
    ('fg_a', 'r1', 'fg_ret', 'u', 'p', '2025-03-10 00:00+01', '2025-03-20 00:00+01', 'cpu=1', 'COMPLETED'),
    ('fg_a', 'r2', 'fg_ret', 'u', 'p', '2025-01-20 22:00+01', '2025-01-21 03:00+01', 'cpu=2', 'COMPLETED'),
    ('fg_b', 'l1', 'fg_late', 'u', 'p', '2025-04-10 00:00+02', '2025-04-11 00:00+02', 'cpu=1', 'COMPLETED'),
    ('fg_a', 'n1', 'fg_none', 'u', 'p', '2025-01-05 00:00+01', '2025-01-06 00:00+01', 'cpu=1', 'COMPLETED'),
    ('fg_a', 'o1', 'fg_old', 'u', 'p', '2024-06-01 00:00+02', '2024-06-02 00:00+02', 'cpu=1', 'COMPLETED');
UPDATE job SET alloctres = 'cpu=5' WHERE jobid = 'a3';
-- a job of no length at the 20th's last hour (booked by hand)
INSERT INTO ledger (account, kind, amount, unit, resource_id, cluster, jobid, submitter, job_start, job_end, note)
SELECT 'fg_two', 'charge', 7, 'h', resource_id, 'fg_a', 'zero', 'u', '2025-01-20 23:00+01', '2025-01-20 23:00+01', 'by hand'
FROM resource WHERE cluster = 'fg_a';

CREATE TEMP TABLE days AS
SELECT unnest(ARRAY['2024-12-31', '2025-01-15', '2025-01-20', '2025-03-31', '2025-04-30', site_today()]::date[]) AS day;
-- the page's GENCI entries of the test's accounts, one row per day, account and machine
CREATE TEMP TABLE page AS
SELECT d.day, x ->> 'account' AS account, r ->> 'machine' AS machine, r AS entry
FROM days d, jsonb_array_elements(my_accounts(d.day) -> 'accounts') x, jsonb_array_elements(x -> 'regulation') r
WHERE x ->> 'account' LIKE 'fg\_%';

SELECT is((SELECT count(*) FROM ledger WHERE jobid = 'a3' AND kind = 'charge'), 3::bigint,
          'setup: the re-rated job has its charge, a reversal and a new charge');
SELECT is((SELECT string_agg(to_char(p.day, 'YYYY-MM-DD') || ' ' || p.account || ' ' || p.machine, ', ' ORDER BY p.day, p.account, p.machine)
           FROM page p WHERE p.day < '2026-01-01'),
          '2024-12-31 fg_old fg_a, 2024-12-31 fg_two fg_p, '
          '2025-01-15 fg_ret fg_a, 2025-01-15 fg_two fg_a, 2025-01-15 fg_two fg_p, '
          '2025-01-20 fg_ret fg_a, 2025-01-20 fg_two fg_a, 2025-01-20 fg_two fg_p, '
          '2025-03-31 fg_ret fg_a, 2025-03-31 fg_two fg_a, 2025-03-31 fg_two fg_p, '
          '2025-04-30 fg_late fg_p, 2025-04-30 fg_ret fg_a, 2025-04-30 fg_two fg_a, 2025-04-30 fg_two fg_p',
          'the past days'' entries: an account per machine it has an allocation on that year, up to the day');
SELECT is((SELECT string_agg(p.account || ' ' || p.machine, ', ') FROM page p WHERE p.day = site_today()),
          CASE WHEN site_today() <= '2026-12-31' THEN 'fg_two fg_a' END,
          'today: the grant that runs to the end of 2026 (none after it)');
-- the page as it was built account by account, allocation_status() for each machine
SELECT is((SELECT count(*)
           FROM days d
           CROSS JOIN (SELECT unnest(ARRAY['fg_two', 'fg_ret', 'fg_late', 'fg_none', 'fg_old']) AS account) a
           WHERE (SELECT jsonb_agg(p.entry ORDER BY p.machine) FROM page p WHERE p.day = d.day AND p.account = a.account)
                 IS DISTINCT FROM
                 (SELECT jsonb_agg(jsonb_build_object('machine', s.machine, 'alloc', st.alloc,
                                                      'tmc', round(st.tmc::numeric, 2), 'tc', round(st.tc::numeric, 2),
                                                      'consumption', round(st.consumption::numeric, 2),
                                                      'delta', round(st.delta::numeric, 2), 'status', st.status)
                                   ORDER BY s.machine)
                  FROM regulation_machine s
                  CROSS JOIN LATERAL allocation_status(a.account, s.machine, d.day) st
                  WHERE EXISTS (SELECT 1 FROM hpcacct_internal.allocation_events(a.account, s.machine,
                                                                                 date_trunc('year', d.day)::date, d.day)))),
          0::bigint, 'every account''s entries on every day are allocation_status() called for it, machine by machine');
-- the consumption written out job by job: the machine's resources, from 1 January to the day's end
SELECT is((SELECT count(*) FROM page p
           WHERE (p.entry ->> 'consumption')::numeric IS DISTINCT FROM round(
               (SELECT coalesce(sum(l.amount * period_share(l.job_start, l.job_end,
                                                            date_trunc('year', p.day)::timestamp AT TIME ZONE 'Europe/Berlin',
                                                            (p.day + 1)::timestamp AT TIME ZONE 'Europe/Berlin')), 0)
                FROM ledger l JOIN resource r USING (resource_id)
                WHERE l.account = p.account AND l.kind = 'charge' AND coalesce(r.pool, r.cluster) = p.machine), 2)),
          0::bigint, 'every entry''s consumption is the job-by-job sum from 1 January to the end of its day');
-- figures by hand
SELECT is((SELECT (entry ->> 'consumption')::numeric FROM page WHERE day = '2025-01-20' AND account = 'fg_two' AND machine = 'fg_a'),
          (2 * 4 + 1 * 4 + 5 * 36 + 7)::numeric,
          'fg_two on fg_a, 20 January: a1 from midnight, a2, a3 re-rated (36 of its 72 hours at 5 cores), the job of no length');
SELECT is((SELECT (entry ->> 'consumption')::numeric FROM page WHERE day = '2025-01-20' AND account = 'fg_two' AND machine = 'fg_p'),
          (2 * 4 * 10)::numeric, 'fg_two on the pool, 20 January: b1 at rate 2 (c0 was last year)');
SELECT is((SELECT (entry ->> 'consumption')::numeric FROM page WHERE day = '2024-12-31' AND account = 'fg_two' AND machine = 'fg_p'),
          (3 * 24)::numeric, 'fg_two on the pool, 31 December 2024: c0 at rate 3');
SELECT is((SELECT (entry ->> 'consumption')::numeric FROM page WHERE day = '2025-03-31' AND account = 'fg_two' AND machine = 'fg_p'),
          (2 * 4 * 10 + 3 * 2 * (2 + 23 + 24))::numeric,
          'fg_two on the pool, 31 March: b1, and c1''s 2 hours of 29 March, 23 of 30 March (the DST day) and 24 of 31 March, 2 cores at rate 3');
SELECT is((SELECT ARRAY[(entry ->> 'alloc')::numeric, (entry ->> 'consumption')::numeric] FROM page
           WHERE day = '2025-04-30' AND account = 'fg_ret' AND machine = 'fg_a'),
          ARRAY[7500, 250]::numeric[], 'fg_ret, 30 April: the grant less the retraction; r1''s 240 hours and r2''s 10');
SELECT is((SELECT ARRAY[s.alloc, s.granted] FROM allocation_status('fg_ret', 'fg_a', '2025-03-31') s),
          ARRAY[7500, 9000]::numeric[], 'allocation_status(): granted leaves out the retraction');
SELECT is((SELECT (entry ->> 'consumption')::numeric FROM page WHERE day = '2025-01-15' AND account = 'fg_two' AND machine = 'fg_a'),
          (2 * 4 + 1 * 2)::numeric, 'fg_two on fg_a, 15 January (up to the 16th, a boundary): a1, and a2''s two hours');

-- consumptions_before(): pairs, one named twice, an account in two pools; at a boundary
-- (1 January, the 16th) and between; each pair the job-by-job sum before the instant exactly
CREATE TEMP TABLE instants AS
SELECT unnest(ARRAY['2025-01-01 00:00+01', '2025-01-16 00:00+01', '2025-01-20 15:00+01', '2025-04-01 00:30+02',
                    '2030-01-01 00:00+01']::timestamptz[]) AS at;
CREATE TEMP TABLE cb AS
SELECT i.at, c.account, c.pool, c.consumption
FROM instants i,
     hpcacct_internal.consumptions_before(ARRAY['fg_two', 'fg_two', 'fg_ret', 'fg_two', 'fg_none'],
                                          ARRAY['fg_a', 'fg_p', 'fg_a', 'fg_a', 'fg_p'], i.at) c;
SELECT is((SELECT count(*) || ' ' || count(DISTINCT (at, account, pool)) FROM cb), '20 20',
          'consumptions_before(): each pair once per instant, though fg_two on fg_a is named twice');
SELECT is((SELECT count(*) FROM cb
           WHERE cb.consumption IS DISTINCT FROM
                 (SELECT coalesce(sum(l.amount * period_share(l.job_start, l.job_end, '-infinity', cb.at)), 0)
                  FROM ledger l JOIN resource r USING (resource_id)
                  WHERE l.account = cb.account AND l.kind = 'charge' AND coalesce(r.pool, r.cluster) = cb.pool)),
          0::bigint, 'consumptions_before(): every pair at every instant is the job-by-job sum, to the last digit');
SELECT is((SELECT count(*) FROM cb WHERE cb.consumption IS DISTINCT FROM consumption_before(cb.account, cb.pool, cb.at)),
          0::bigint, 'consumption_before() is consumptions_before() of its pair');
SELECT is((SELECT count(*) FROM hpcacct_internal.allocation_statuses('{}', '{}', '2025-01-20')), 0::bigint,
          'allocation_statuses() of no pair: no row');

-- bad input: named errors
SELECT throws_ok($$SELECT * FROM hpcacct_internal.consumptions_before(ARRAY['fg_two', NULL], ARRAY['fg_a', 'fg_a'], now())$$,
                 '22004', NULL, 'consumptions_before(): a NULL account is 22004');
SELECT throws_ok($$SELECT * FROM hpcacct_internal.consumptions_before(ARRAY['fg_two'], ARRAY['fg_a', 'fg_p'], now())$$,
                 '22023', NULL, 'consumptions_before(): fewer accounts than pools is 22023');
SELECT throws_ok($$SELECT * FROM hpcacct_internal.consumptions_before(ARRAY['fg_two', 'fg_nobody'], ARRAY['fg_a', 'fg_a'], now())$$,
                 '42704', NULL, 'consumptions_before(): an unknown account is 42704, not 0');
SELECT throws_ok($$SELECT * FROM hpcacct_internal.consumptions_before(ARRAY['fg_two'], ARRAY['fg_nowhere'], now())$$,
                 '42704', NULL, 'consumptions_before(): an unknown pool is 42704, not 0');
SELECT throws_ok($$SELECT * FROM hpcacct_internal.consumptions_before(ARRAY['fg_two'], ARRAY['fg_a'], 'infinity')$$,
                 '22008', NULL, 'consumptions_before(): an infinite instant is 22008');
SELECT throws_ok($$SELECT * FROM hpcacct_internal.allocation_statuses(ARRAY['fg_two'], ARRAY['fg_a'], NULL)$$,
                 '22004', NULL, 'allocation_statuses(): a NULL day is 22004 (allocation_status() makes it today)');

-- row-level security: a portal user's page has their account's entries, and no other's
CALL setup_roles();
CREATE ROLE fg_alice LOGIN IN ROLE hpcacct_portal;
SELECT add_user('fg_alice', '2025-01-01');
SELECT add_member('fg_ret', 'fg_alice', 'admin');
GRANT SELECT ON page TO PUBLIC;
SET SESSION AUTHORIZATION fg_alice;
SELECT is((SELECT jsonb_agg(x -> 'regulation') FROM jsonb_array_elements(my_accounts('2025-04-30') -> 'accounts') x
           WHERE x ? 'regulation'),
          (SELECT jsonb_build_array(jsonb_agg(entry)) FROM page WHERE day = '2025-04-30' AND account = 'fg_ret'),
          'a member''s page: their account''s entry, the same as the administrator''s');
SELECT throws_ok($$SELECT * FROM hpcacct_internal.allocation_statuses(ARRAY['fg_two'], ARRAY['fg_a'], '2025-04-30')$$,
                 '42704', 'account "fg_two" does not exist or is not visible to you',
                 'allocation_statuses() of another account is the error of an unknown one, not its figures');
RESET SESSION AUTHORIZATION;

-- the submit check reads the same statuses, all the project's machines in one call: accepted
-- while one machine has hours left
SELECT is((account_verdict('fg_two', '2025-04-30')).ok, true, 'account_verdict(): fg_two, hours left on both machines: accepted');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('fg_two', 'retraction', -6500, 'h', 'fg_p', '2025-04-15', '2025-06-30');
SELECT is((SELECT array_agg(s.tmc > 0 AND s.consumption < s.alloc ORDER BY m.m)
           FROM unnest(ARRAY['fg_a', 'fg_p']) m(m), allocation_status('fg_two', m.m, '2025-04-30') s),
          ARRAY[true, false], 'setup: after a retraction on the pool (400 left of it, 590 used), hours left on fg_a only');
SELECT is((account_verdict('fg_two', '2025-04-30')).ok, true, 'account_verdict(): accepted while one machine has hours left');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('fg_two', 'retraction', -23900, 'h', 'fg_a', '2025-04-20', '2026-12-31');
SELECT is((account_verdict('fg_two', '2025-04-30')).reason, 'allocation_exhausted',
          'account_verdict(): both machines used up (100 left on fg_a, 379 used): refused');
SELECT is((account_verdict('fg_two', '2027-01-10')).reason, 'no_allocation', 'account_verdict(): no allocation valid in 2027: refused');

SELECT * FROM finish();
ROLLBACK;
