-- notify_scan() of a past day (a missed run caught up by hand) tells the sliding-window quota
-- state at the end of that day in the site's time zone: the month's charges up to that
-- midnight, a job running across it for its part before it (as the scan's balance counts
-- them), never a job that ran only after it. Site in New York (-04 in April and May 2026), so
-- that a UTC midnight (20:00 local) is not taken for the local one. 60 cores at 1 NPL per
-- core-hour: a minute is 1 NPL. Allowance 10 NPL a month: a month is used up at 30 NPL
-- (consumable A(m-1) + A(m) + A(m+1) - C(m-1) - C(m)) and blocked above 60.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(15);

INSERT INTO setting VALUES ('timezone', 'America/New_York') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES
    ('pd', 'p', 'cpu=64', 'cpu=1', 1, 'NPL'), ('pd2', 'p', 'cpu=64', 'cpu=1', 1, 'NPL');
INSERT INTO account (name) VALUES ('pd_in'), ('pd_out'), ('pd_m'), ('pd_t'), ('pd_c');
SELECT add_quota_period(a, '2026-01-01', '2026-12-31', 10, NULL, 'NPL') FROM unnest(ARRAY['pd_in', 'pd_out', 'pd_m']) a;
CREATE FUNCTION pg_temp.job(acct text, id text, s timestamptz, e timestamptz, cores integer DEFAULT 60,
                            cl text DEFAULT 'pd') RETURNS void
    LANGUAGE sql AS $$
    INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
    VALUES (cl, id, acct, 'u', 'p', s, e, ('cpu=' || cores)::tres, 'COMPLETED') $$;
-- what the scans told an account: day, from, to, consumed this month
CREATE FUNCTION pg_temp.told(acct text) RETURNS text[] LANGUAGE sql AS $$
    SELECT array_agg(concat_ws(' ', figures ->> 'at', figures ->> 'previous_state', figures ->> 'state',
                               round((figures ->> 'consumed_current')::numeric, 6)) ORDER BY message_id)
    FROM outbox WHERE topic = 'quota_state' AND account = acct $$;

-- Every job is loaded before the first scan, as when scans are caught up.
-- pd_m: 20 NPL on 20 April, 40 on 25 April, 100 on 2 May
SELECT pg_temp.job('pd_m', 'm1', '2026-04-20 10:00-04', '2026-04-20 10:20-04');
SELECT pg_temp.job('pd_m', 'm2', '2026-04-25 10:00-04', '2026-04-25 10:40-04');
SELECT pg_temp.job('pd_m', 'm3', '2026-05-02 10:00-04', '2026-05-02 11:40-04');
-- pd_in: 30 NPL ending at 23:59 on 12 May; pd_out: 30 NPL ending at 00:01 on 13 May (29 of
-- them before midnight)
SELECT pg_temp.job('pd_in', 'i1', '2026-05-12 23:29-04', '2026-05-12 23:59-04');
SELECT pg_temp.job('pd_out', 'o1', '2026-05-12 23:31-04', '2026-05-13 00:01-04');

-- ---- a past day in the month before the one of later scans ------------------------------
SELECT is(notify_scan('2026-04-21'), 0, '21 April: 20 NPL of April so far, normal, nothing told (the 40 of 25 April and May''s 100 not counted)');
SELECT is(notify_scan('2026-04-30'), 1, '30 April: 60 NPL, the window is used up');
SELECT is(notify_scan('2026-05-01'), 0, '1 May: low priority still; May''s 100 NPL of the 2nd do not block it yet');
SELECT is(notify_scan('2026-05-02'), 1, '2 May: 100 NPL in May, blocked');
SELECT is(pg_temp.told('pd_m'), ARRAY['2026-04-30 normal low_priority 60.000000', '2026-05-02 low_priority blocked 100.000000'],
          'pd_m: each state told on the day it began, with that day''s consumption');

-- ---- a job ending at 23:59 local of the day, and one at 00:01 of the next ------------------
SELECT is(notify_scan('2026-05-12'), 1, '12 May: one message');
SELECT is((SELECT (u.consumed_current, u.state) FROM hpcacct_internal.window_quota_usage_rows('pd_out', '2026-05-12', true) u),
          (29::float8, 'normal'::text),
          'at the end of 12 May pd_out has used the 29 minutes of its job before midnight, and is normal');
SELECT is((SELECT (u.consumed_current, u.state) FROM window_quota_usage('pd_out', '2026-05-12') u),
          (30::float8, 'low_priority'::text),
          'window_quota_usage() of the same day counts the whole month, as documented');
-- the portal's first page of a past day tells the same day's end (its balance is of that day's end too)
SELECT is((SELECT (e -> 'quota' ->> 'consumed', e -> 'quota' ->> 'state') FROM jsonb_array_elements(my_accounts('2026-05-12') -> 'accounts') e
           WHERE e ->> 'account' = 'pd_out'),
          ('29'::text, 'normal'::text), 'my_accounts() of 12 May: pd_out''s quota at the end of that day');
-- a re-run, after a job that ended later (15 May) was loaded: nothing more
SELECT pg_temp.job('pd_in', 'i2', '2026-05-15 10:00-04', '2026-05-15 11:40-04');
SELECT is(notify_scan('2026-05-12'), 0, '12 May again, a job of 15 May loaded meanwhile: nothing written');
-- a period on one cluster: a job on another one, running across the midnight, is not taken out
SELECT add_quota_period('pd_c', '2026-01-01', '2026-12-31', 10, 'pd', 'NPL');
SELECT pg_temp.job('pd_c', 'c1', '2026-05-12 10:00-04', '2026-05-12 10:25-04');
SELECT pg_temp.job('pd_c', 'c2', '2026-05-12 23:00-04', '2026-05-13 01:00-04', 60, 'pd2');
SELECT is((SELECT u.consumed_current FROM hpcacct_internal.window_quota_usage_rows('pd_c', '2026-05-12', true) u),
          25::float8, 'a period on cluster pd: at the end of 12 May, its 25 NPL there (pd2''s job neither counted nor taken out)');
SELECT throws_ok($$SELECT * FROM hpcacct_internal.window_quota_usage_rows('pd_c', '2026-05-12', NULL)$$, '22004',
                 'window_quota_usage: to_day_end must not be NULL', 'a NULL to_day_end is an error');
SELECT is(notify_scan('2026-05-13'), 1, '13 May: pd_out''s last minute counts, one message');
SELECT is(ARRAY[pg_temp.told('pd_in'), pg_temp.told('pd_out')],
          ARRAY[ARRAY['2026-05-12 normal low_priority 30.000000'], ARRAY['2026-05-13 normal low_priority 30.000000']],
          'pd_in is told on 12 May (its job ended at 23:59), pd_out on 13 May (its job ended at 00:01)');

-- ---- today's scan: the state window_quota_usage() gives now, with its figures --------------
SELECT add_quota_period('pd_t', (date_trunc('month', site_today()::timestamp) - interval '1 month')::date,
                        (date_trunc('month', site_today()::timestamp) + interval '2 months')::date - 1, 10, NULL, 'NPL');
-- 6 000 NPL an hour ago: blocked (more than twice the period's 40), in whichever month it ran
SELECT pg_temp.job('pd_t', 't1', now() - interval '2 hours', now() - interval '1 hour', 6000);
SELECT notify_scan();
SELECT is(pg_temp.told('pd_t'),
          (SELECT ARRAY[concat_ws(' ', site_today(), 'normal', u.state, round(u.consumed_current::numeric, 6))]
           FROM window_quota_usage('pd_t') u WHERE u.state = 'blocked'),
          'today''s scan tells the state and consumption of window_quota_usage()');

SELECT * FROM finish();
ROLLBACK;
