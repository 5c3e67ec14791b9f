-- One definition of an account's charges after the end of a day, in the rest of a period:
-- charges_after_day_end(). The window quota's month (charges_after_day()) and the bank's
-- quarter (balances_at_end()) are its figures, not queries of their own. Site in New York
-- (-04 in May 2026), so that a UTC midnight (20:00 local) is not taken for the local one.
-- 60 cores at 1 NPL per core-hour: a minute is 1 NPL.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(14);

INSERT INTO setting VALUES ('timezone', 'America/New_York') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO setting VALUES ('bank_unit', 'NPL') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES
    ('pd', 'p', 'cpu=64', 'cpu=1', 1, 'NPL'), ('pd2', 'p', 'cpu=64', 'cpu=1', 1, 'NPL'),
    ('cu', 'p', 'cpu=64', 'cpu=1', 1, 'CPUh');
INSERT INTO account (name) VALUES ('ad_a'), ('ad_b');
CREATE FUNCTION pg_temp.job(acct text, id text, s timestamptz, e timestamptz, cl text DEFAULT 'pd') RETURNS void
    LANGUAGE sql AS $$
    INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
    VALUES (cl, id, acct, 'u', 'p', s, e, 'cpu=60'::tres, 'COMPLETED') $$;
SELECT deposit('ad_a', '2026-04-01', 1000), deposit('ad_b', '2026-04-01', 500);
-- the day is 12 May; the month ends at 1 June, the quarter at 1 July (local midnights)
SELECT pg_temp.job('ad_a', 'a1', '2026-05-12 10:00-04', '2026-05-12 10:20-04');        -- 20, before the day's end
SELECT pg_temp.job('ad_a', 'a2', '2026-05-12 23:30-04', '2026-05-13 00:30-04');        -- 60, 30 after
SELECT pg_temp.job('ad_a', 'a3', '2026-05-12 19:50-04', '2026-05-12 20:10-04');        -- 20 across 00:00 UTC: none after
SELECT pg_temp.job('ad_a', 'a4', '2026-05-31 23:50-04', '2026-06-01 00:10-04');        -- 20, 10 in May
SELECT pg_temp.job('ad_a', 'a5', '2026-05-20 10:00-04', '2026-05-20 10:07-04', 'pd2'); -- 7, on pd2
SELECT pg_temp.job('ad_a', 'a6', '2026-06-15 10:00-04', '2026-06-15 10:05-04');        -- 5, in June
SELECT pg_temp.job('ad_a', 'a7', '2026-06-30 23:50-04', '2026-07-01 00:10-04');        -- 20, 10 in the quarter
SELECT pg_temp.job('ad_a', 'a8', '2026-05-20 10:00-04', '2026-05-20 11:00-04', 'cu');  -- 60 CPUh, another unit
SELECT pg_temp.job('ad_b', 'b1', '2026-05-10 10:00-04', '2026-05-10 10:09-04');        -- 9, before the day

SELECT has_function('hpcacct_internal', 'charges_after_day_end', ARRAY['text[]', 'text', 'text', 'date', 'date'],
                    'charges_after_day_end() is the definition');
SELECT is((SELECT array_agg(c.account || ' ' || c.amount::numeric(20, 6) ORDER BY c.account)
           FROM hpcacct_internal.charges_after_day_end(ARRAY['ad_a', 'ad_b', 'ad_a'], 'NPL', NULL, '2026-05-12', '2026-06-01') c),
          ARRAY['ad_a 47.000000'],
          'the rest of May after 12 May: 30 + 10 + 7 NPL of ad_a, one row however often it is given; ad_b has none');
SELECT is((SELECT c.amount::numeric(20, 6) FROM hpcacct_internal.charges_after_day_end(ARRAY['ad_a'], 'NPL', 'pd', '2026-05-12', '2026-06-01') c),
          40.000000, 'on cluster pd only: 30 + 10 (pd2''s 7 not counted)');
SELECT is((SELECT c.amount::numeric(20, 6) FROM hpcacct_internal.charges_after_day_end(ARRAY['ad_a'], 'NPL', NULL, '2026-05-12', '2026-07-01') c),
          72.000000, 'the rest of the quarter: 30 + 20 + 7 + 5 + 10');
SELECT is((SELECT c.amount::numeric(20, 6) FROM hpcacct_internal.charges_after_day_end(ARRAY['ad_a'], 'CPUh', NULL, '2026-05-12', '2026-06-01') c),
          60.000000, 'in another unit: its own charges');

-- the callers' figures are the definition's
SELECT is(hpcacct_internal.charges_after_day('ad_a', 'NPL', NULL, '2026-05-12')::numeric(20, 6), 47.000000,
          'charges_after_day(): the month''s rest, every cluster');
SELECT is(hpcacct_internal.charges_after_day('ad_a', 'NPL', 'pd', '2026-05-12')::numeric(20, 6), 40.000000,
          'charges_after_day(): the month''s rest on pd');
SELECT is(hpcacct_internal.charges_after_day('ad_b', 'NPL', NULL, '2026-05-12'), 0::numeric,
          'charges_after_day(): 0 when nothing is charged after the day');
SELECT is((SELECT array_agg(b.account || ' ' || (b.balance - balance(b.account, '2026-05-12'))::numeric(20, 6) ORDER BY b.account)
           FROM hpcacct_internal.balances_at_end(ARRAY['ad_a', 'ad_b'], '2026-05-12') b),
          ARRAY['ad_a 72.000000', 'ad_b 0.000000'],
          'balances_at_end(): balance() with the quarter''s 72 NPL after 12 May added back');
SELECT is((SELECT array_agg(p.proname::text ORDER BY p.proname) FROM pg_proc p
           WHERE p.pronamespace = 'hpcacct_internal'::regnamespace
             AND p.proname IN ('charges_after_day', 'balances_at_end')
             AND p.prosrc LIKE '%charges_after_day_end(%' AND p.prosrc NOT LIKE '%period_share%'),
          ARRAY['balances_at_end', 'charges_after_day'],
          'charges_after_day() and balances_at_end() call the definition and have no ledger query of their own');

-- NULL arguments
SELECT throws_ok($$SELECT * FROM hpcacct_internal.charges_after_day_end(NULL, 'NPL', NULL, '2026-05-12', '2026-06-01')$$,
                 '22004', NULL, 'NULL accounts: 22004');
SELECT throws_ok($$SELECT * FROM hpcacct_internal.charges_after_day_end(ARRAY['ad_a'], NULL, NULL, '2026-05-12', '2026-06-01')$$,
                 '22004', NULL, 'NULL unit: 22004');
SELECT throws_ok($$SELECT * FROM hpcacct_internal.charges_after_day_end(ARRAY['ad_a'], 'NPL', NULL, NULL, '2026-06-01')$$,
                 '22004', NULL, 'NULL day: 22004');
SELECT throws_ok($$SELECT * FROM hpcacct_internal.charges_after_day_end(ARRAY['ad_a'], 'NPL', NULL, '2026-05-12', NULL)$$,
                 '22004', NULL, 'NULL period_end: 22004');

SELECT * FROM finish();
ROLLBACK;
