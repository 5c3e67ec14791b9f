-- The portal's figures do not depend on the session's TimeZone (a client may send its own:
-- PGTZ, JDBC), only on the site's time zone: a session zone where a month's first midnight
-- does not exist (America/Asuncion, 1 October 2023) or a day was skipped (Pacific/Apia,
-- 30 December 2011) gives the same figures as UTC.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(12);

INSERT INTO setting VALUES ('timezone', 'UTC') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO setting VALUES ('bank_unit', 'NPL') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('pr_c', 'p', 'cpu=16', 'cpu=1', 1, 'NPL');
INSERT INTO account (name) VALUES ('pr_a');
SELECT deposit('pr_a', '2011-10-01', 1000);
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    -- in the first hour of October (UTC), which Asuncion's session would start an hour late
    ('pr_c', 'o1', 'pr_a', 'u', 'p', '2023-10-01 00:00+00', '2023-10-01 00:30+00', 'cpu=2', 'COMPLETED'),
    ('pr_c', 'o2', 'pr_a', 'u', 'p', '2023-10-02 00:00+00', '2023-10-02 01:00+00', 'cpu=1', 'COMPLETED'),
    -- on 30 December 2011 (UTC), a day Apia skipped
    ('pr_c', 'd1', 'pr_a', 'u', 'p', '2011-12-30 10:00+00', '2011-12-30 12:00+00', 'cpu=1', 'COMPLETED');

SET LOCAL TimeZone = 'America/Asuncion';
SELECT is((SELECT x -> 'this_month' FROM jsonb_array_elements(my_accounts('2023-10-15') -> 'accounts') x
           WHERE x ->> 'account' = 'pr_a'), '{"NPL": 2.000000}'::jsonb,
          'my_accounts() in a session of America/Asuncion: October''s charges from the site''s midnight of the 1st');

SET LOCAL TimeZone = 'Pacific/Apia';
SELECT is((SELECT array_agg(d.day ORDER BY d.day) FROM hpcacct_internal.charges_to_day_end('pr_a', NULL, NULL, '2011-12-28', '2012-01-01') d),
          '{2011-12-28,2011-12-29,2011-12-30,2011-12-31,2012-01-01}'::date[],
          'charges_to_day_end() in a session of Pacific/Apia: every day of the site''s calendar');
SELECT is((SELECT (p ->> 1)::numeric FROM jsonb_array_elements(account_month('pr_a', '2011-12-01') -> 'bank' -> 'days') p
           WHERE p ->> 0 = '2011-12-30'), 998.00::numeric,
          'account_month()''s bank chart in a session of Pacific/Apia has 30 December, with its job');

-- A quota period from 1 October 2023, whose midnight Asuncion skipped: account_month() on
-- 1 November (site_today() stands in for that day) lists October and November.
SELECT add_quota_period('pr_a', '2023-10-01', '2024-09-30', 100, NULL, 'NPL');
SAVEPOINT before_today;
CREATE OR REPLACE FUNCTION hpcacct.site_today() RETURNS date LANGUAGE sql STABLE BEGIN ATOMIC SELECT date '2023-11-01'; END;
SET LOCAL TimeZone = 'America/Asuncion';
SELECT is((SELECT array_agg(x ->> 'month' ORDER BY x ->> 'month') FROM jsonb_array_elements(account_month('pr_a', '2023-11-01') -> 'window_quota') x)::text,
          '{2023-10-01,2023-11-01}',
          'account_month()''s window quota in a session of America/Asuncion: every month of the period up to the day');
ROLLBACK TO SAVEPOINT before_today;

-- fairshare(), interval form: a period of days counts 24 hours (as decayed_usage()), also
-- in a session whose TimeZone has a day of 23 hours in it (Europe/Berlin, 31 March 2024)
INSERT INTO setting VALUES ('decay', 'interval'), ('period', '1 day'), ('period_decay', '0.5'), ('depth', '1');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until) VALUES ('pr_a', 'grant', 1000, 'NPL', 'pr_c', '2024-01-01', '2024-12-31');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    ('pr_c', 'f1', 'pr_a', 'u', 'p', '2024-03-30 12:00+00', '2024-03-30 12:30+00', 'cpu=2', 'COMPLETED'),
    ('pr_c', 'f2', 'pr_a', 'u', 'p', '2024-03-31 10:00+00', '2024-03-31 11:00+00', 'cpu=1', 'COMPLETED');
SET LOCAL TimeZone = 'Europe/Berlin';
SELECT is((SELECT usage FROM fairshare('2024-03-31 12:00+00') WHERE account = 'pr_a' AND submitter IS NULL), 2::float8,
          'fairshare() with 1-day periods in a session of Europe/Berlin: both jobs of the last 24 hours');
DELETE FROM setting WHERE name IN ('decay', 'period', 'period_decay', 'depth');

-- The outbox's order wait (notify_order_wait) in days of 24 hours, also in a session whose
-- TimeZone puts a DST change in the wait: here a POSIX zone whose clocks go forward 12 hours
-- ago (the newer message, written 23.5 hours ago, waits half an hour more, not -0.5).
INSERT INTO setting VALUES ('notify_order_wait', '1 day');
SELECT add_user(u, '2024-01-05') FROM unnest(ARRAY['pr_u1', 'pr_u2']) AS u;
INSERT INTO contact (username, email) VALUES ('pr_u1', 'pr@x.example'), ('pr_u2', 'pr@x.example');
CREATE TEMP TABLE pr_ids AS
SELECT 1 AS n, outbox_add('quota_state', 'pr/1', NULL, 's1', E'1\n', '{}', false, ARRAY['pr_u1']) AS id;
INSERT INTO pr_ids SELECT 2, outbox_add('quota_state', 'pr/2', NULL, 's2', E'2\n', '{}', false, ARRAY['pr_u2']);
UPDATE outbox_recipient SET next_attempt = statement_timestamp() + interval '2 days' WHERE message_id = (SELECT id FROM pr_ids WHERE n = 1);
UPDATE outbox SET created_at = statement_timestamp() - interval '23 hours 30 minutes' WHERE message_id = (SELECT id FROM pr_ids WHERE n = 2);
SELECT FROM (SELECT set_config('TimeZone', format('<-00>0<+01>-1,%s/%s,%s/23', extract(doy FROM t)::int - 1, extract(hour FROM t)::int,
                                     (extract(doy FROM t)::int + 1) % 365), true)
      FROM (SELECT (statement_timestamp() - interval '12 hours') AT TIME ZONE 'UTC' AS t) x) z;
SELECT is((SELECT s.waiting_for FROM outbox_status s WHERE s.message_id = (SELECT id FROM pr_ids WHERE n = 2)),
          (SELECT id FROM pr_ids WHERE n = 1),
          'outbox_status in a session with a DST change in the wait: the newer message still waits (1 day = 24 hours)');
SELECT is(outbox_next_due(), (SELECT created_at + interval '24 hours' FROM outbox WHERE message_id = (SELECT id FROM pr_ids WHERE n = 2)),
          'outbox_next_due() in that session: 24 hours after the newer message was written');
SET LOCAL TimeZone = 'UTC';
DELETE FROM setting WHERE name = 'notify_order_wait';

-- account_month() runs without JIT: its GENCI section is costed at millions (set-returning
-- functions at 1 000 rows each), and jit = on compiled it for 1.4 s of a 1.5 s page
SELECT ok((SELECT 'jit=off' = ANY (p.proconfig) FROM pg_proc p WHERE p.oid = 'hpcacct.account_month(text, date)'::regprocedure),
          'account_month() runs without JIT');

-- The site's time zone is a zone name: an abbreviation means what each session's
-- timezone_abbreviations says (IST: India under Default, Israel or Ireland elsewhere), so the
-- same charge fell in January for one session's rollup and in February for another's report.
SELECT throws_ok($$UPDATE setting SET value = 'IST' WHERE name = 'timezone'$$, '22023', 'unknown time zone "IST"',
                 'an abbreviation that names no zone is refused as the site''s time zone');
SELECT throws_ok($$UPDATE setting SET value = 'Mars/Olympus_Mons' WHERE name = 'timezone'$$, '22023', NULL,
                 'an unknown zone is refused');
SELECT lives_ok($$UPDATE setting SET value = 'Asia/Kolkata' WHERE name = 'timezone';
                  UPDATE setting SET value = 'GMT' WHERE name = 'timezone'$$,
                'zone names are taken, GMT among them');
SELECT is(site_timezone(), 'GMT', 'the site''s time zone is the name set');

SELECT * FROM finish();
ROLLBACK;
