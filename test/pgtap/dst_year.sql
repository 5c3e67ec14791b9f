-- Two sites through 2026, one in America/New_York (clocks change 8 March and 1 November), one
-- in Europe/Berlin (29 March and 25 October): jobs ending just before and after local midnight
-- on those days, at month and quarter ends, and across the clock change. 60 cores at 1 NPL per
-- core-hour: a minute is 1 NPL. Every per-month, per-quarter and per-day figure is compared with
-- the sums worked out by hand below, in the site's session and in sessions in other zones.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(5);

INSERT INTO setting VALUES ('timezone', 'America/New_York') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO setting VALUES ('bank_unit', 'NPL') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES
    ('dy_ny', 'p', 'cpu=64', 'cpu=1', 1, 'NPL'), ('dy_be', 'p', 'cpu=64', 'cpu=1', 1, 'NPL');
INSERT INTO regulation_machine (machine, monthly_threshold) VALUES ('dy_ny', 100), ('dy_be', 100);
INSERT INTO account (name) VALUES ('dy_ny'), ('dy_be');
SELECT deposit(a, q, 1000) FROM unnest(ARRAY['dy_ny', 'dy_be']) a,
       unnest(ARRAY[date '2026-01-01', '2026-04-01', '2026-07-01', '2026-10-01']) q;
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('dy_ny', 'grant', 12000, 'NPL', 'dy_ny', '2026-01-01', '2026-12-31'),
       ('dy_be', 'grant', 12000, 'NPL', 'dy_be', '2026-01-01', '2026-12-31');
SELECT add_quota_period(a, '2026-01-01', '2026-12-31', 1000, NULL, 'NPL') FROM unnest(ARRAY['dy_ny', 'dy_be']) a;

INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    ('dy_ny', 'm7a', 'dy_ny', 'u', 'p', '2026-03-07 23:40-05', '2026-03-07 23:55-05', 'cpu=60', 'COMPLETED'), -- 15: 7 Mar
    ('dy_ny', 'm8x', 'dy_ny', 'u', 'p', '2026-03-07 23:50-05', '2026-03-08 00:10-05', 'cpu=60', 'COMPLETED'), -- 10 + 10
    ('dy_ny', 'dst', 'dy_ny', 'u', 'p', '2026-03-08 01:30-05', '2026-03-08 03:30-04', 'cpu=60', 'COMPLETED'), -- 60: 8 Mar
    ('dy_ny', 'm8b', 'dy_ny', 'u', 'p', '2026-03-08 23:50-04', '2026-03-08 23:59-04', 'cpu=60', 'COMPLETED'), -- 9
    ('dy_ny', 'm9a', 'dy_ny', 'u', 'p', '2026-03-08 23:55-04', '2026-03-09 00:05-04', 'cpu=60', 'COMPLETED'), -- 5 + 5
    ('dy_ny', 'q1',  'dy_ny', 'u', 'p', '2026-03-31 23:30-04', '2026-04-01 00:30-04', 'cpu=60', 'COMPLETED'), -- 30 + 30
    ('dy_ny', 'mo',  'dy_ny', 'u', 'p', '2026-04-30 23:58-04', '2026-04-30 23:59-04', 'cpu=60', 'COMPLETED'), -- 1
    ('dy_ny', 'q3',  'dy_ny', 'u', 'p', '2026-09-30 23:45-04', '2026-10-01 00:15-04', 'cpu=60', 'COMPLETED'), -- 15 + 15
    ('dy_ny', 'o31', 'dy_ny', 'u', 'p', '2026-10-31 23:50-04', '2026-11-01 00:10-04', 'cpu=60', 'COMPLETED'), -- 10 + 10
    ('dy_ny', 'fb',  'dy_ny', 'u', 'p', '2026-11-01 00:30-04', '2026-11-01 01:30-05', 'cpu=60', 'COMPLETED'), -- 120: 1 Nov
    ('dy_ny', 'n1e', 'dy_ny', 'u', 'p', '2026-11-01 23:50-05', '2026-11-02 00:20-05', 'cpu=60', 'COMPLETED'), -- 10 + 20
    ('dy_be', 'b1', 'dy_be', 'u', 'p', '2026-03-28 23:50+01', '2026-03-29 00:10+01', 'cpu=60', 'COMPLETED'),  -- 10 + 10
    ('dy_be', 'bd', 'dy_be', 'u', 'p', '2026-03-29 01:30+01', '2026-03-29 03:30+02', 'cpu=60', 'COMPLETED'),  -- 60: 29 Mar
    ('dy_be', 'b2', 'dy_be', 'u', 'p', '2026-03-29 23:55+02', '2026-03-30 00:05+02', 'cpu=60', 'COMPLETED'),  -- 5 + 5
    ('dy_be', 'bq', 'dy_be', 'u', 'p', '2026-03-31 23:30+02', '2026-04-01 00:30+02', 'cpu=60', 'COMPLETED'),  -- 30 + 30
    ('dy_be', 'bs', 'dy_be', 'u', 'p', '2026-09-30 23:50+02', '2026-10-01 00:10+02', 'cpu=60', 'COMPLETED'),  -- 10 + 10
    ('dy_be', 'b3', 'dy_be', 'u', 'p', '2026-10-24 23:50+02', '2026-10-25 00:20+02', 'cpu=60', 'COMPLETED'),  -- 10 + 20
    ('dy_be', 'bf', 'dy_be', 'u', 'p', '2026-10-25 02:30+02', '2026-10-25 02:30+01', 'cpu=60', 'COMPLETED'),  -- 60: 25 Oct
    ('dy_be', 'b4', 'dy_be', 'u', 'p', '2026-10-25 23:45+01', '2026-10-26 00:15+01', 'cpu=60', 'COMPLETED'),  -- 15 + 15
    ('dy_be', 'bo', 'dy_be', 'u', 'p', '2026-10-31 23:40+01', '2026-11-01 00:20+01', 'cpu=60', 'COMPLETED');  -- 20 + 20

-- every figure of an account, as text: months (charge_by_month, usage_by_month, account_month's
-- charges, window quota), quarters (quarter_balances, balance()), and the charges of each day
-- given (the bank chart's and the GENCI chart's steps, allocation_status() at the day's end
-- minus the day before's; window_quota_usage() counts the whole month of its day)
CREATE FUNCTION pg_temp.figures(acct text, kind text, days date[]) RETURNS text[] LANGUAGE sql AS $$
    SELECT CASE kind
    WHEN 'charge_by_month' THEN
        (SELECT array_agg(to_char(month, 'YYYY-MM') || ' ' || round(s, 6) ORDER BY month)
         FROM (SELECT month, sum(amount) AS s FROM charge_by_month WHERE account = acct GROUP BY month) c)
    WHEN 'usage_by_month' THEN
        (SELECT array_agg(to_char(month, 'YYYY-MM') || ' ' || round(usage, 6) ORDER BY month)
         FROM usage_by_month(2026) WHERE account = acct)
    WHEN 'account_month' THEN
        (SELECT array_agg(to_char(m, 'YYYY-MM') || ' ' || round((account_month(acct, m::date) -> 'charges' -> 'total' ->> 'NPL')::numeric, 6)
                          ORDER BY m)
         FROM generate_series(timestamp '2026-03-01', '2026-11-01', '1 month') m
         WHERE account_month(acct, m::date) -> 'charges' -> 'total' ? 'NPL')
    WHEN 'window_quota' THEN
        (SELECT array_agg(to_char(m, 'YYYY-MM') || ' ' || round(u.consumed_current::numeric, 6) ORDER BY m)
         FROM generate_series(timestamp '2026-03-01', '2026-11-01', '1 month') m,
              window_quota_usage(acct, (m + interval '1 month')::date - 1) u
         WHERE u.consumed_current > 0)
    WHEN 'quarter_balances' THEN
        (SELECT array_agg(to_char(quarter, 'YYYY-MM') || ' ' || round(charges, 6) || ' ' || round(balance, 6) ORDER BY quarter)
         FROM quarter_balances WHERE account = acct)
    WHEN 'balance' THEN
        (SELECT array_agg(to_char(q, 'YYYY-MM') || ' ' || round(1000 - balance(acct, q::date), 6) || ' ' || round(balance(acct, q::date), 6) ORDER BY q)
         FROM generate_series(timestamp '2026-01-01', '2026-10-01', '3 months') q)
    WHEN 'bank_chart' THEN
        (SELECT array_agg(to_char(d, 'MM-DD') || ' ' ||
                          (CASE WHEN d = quarter_start(d) THEN 1000  -- (a quarter's chart starts from its allocation)
                                ELSE (SELECT (p ->> 1)::numeric FROM jsonb_array_elements(account_month(acct, date_trunc('month', d - 1)::date) -> 'bank' -> 'days') p
                                      WHERE (p ->> 0)::date = d - 1) END
                           - (SELECT (p ->> 1)::numeric FROM jsonb_array_elements(account_month(acct, date_trunc('month', d)::date) -> 'bank' -> 'days') p
                              WHERE (p ->> 0)::date = d)) ORDER BY d)
         FROM unnest(days) d)
    WHEN 'genci_chart' THEN
        (SELECT array_agg(to_char(d, 'MM-DD') || ' ' ||
                          ((SELECT (p ->> 3)::numeric FROM jsonb_array_elements(account_month(acct, date_trunc('month', d)::date) -> 'regulation' -> 0 -> 'days') p
                            WHERE (p ->> 0)::date = d)
                           - (SELECT (p ->> 3)::numeric FROM jsonb_array_elements(account_month(acct, date_trunc('month', d - 1)::date) -> 'regulation' -> 0 -> 'days') p
                              WHERE (p ->> 0)::date = d - 1)) ORDER BY d)
         FROM unnest(days) d)
    WHEN 'allocation_status' THEN
        (SELECT array_agg(to_char(d, 'MM-DD') || ' ' ||
                          round(((SELECT consumption FROM allocation_status(acct, acct, d))
                                 - (SELECT consumption FROM allocation_status(acct, acct, d - 1)))::numeric, 6) ORDER BY d)
         FROM unnest(days) d)
    END
$$;
CREATE TEMP TABLE kinds (kind text, per_day boolean);
INSERT INTO kinds VALUES ('charge_by_month', false), ('usage_by_month', false), ('account_month', false),
    ('window_quota', false), ('quarter_balances', false), ('balance', false),
    ('bank_chart', true), ('genci_chart', true), ('allocation_status', true);

-- New York, worked out by hand
CREATE TEMP TABLE expected (site text, kind text, figures text[]);
INSERT INTO expected VALUES
    ('dy_ny', 'month', ARRAY['2026-03 144.000000', '2026-04 31.000000', '2026-09 15.000000', '2026-10 25.000000', '2026-11 160.000000']),
    ('dy_ny', 'quarter', ARRAY['2026-01 144.000000 856.000000', '2026-04 31.000000 969.000000',
                               '2026-07 15.000000 985.000000', '2026-10 185.000000 815.000000']),
    ('dy_ny', 'day', ARRAY['03-07 25.00', '03-08 84.00', '03-09 5.00', '03-31 30.00', '04-01 30.00',
                           '10-31 10.00', '11-01 140.00', '11-02 20.00']),
    ('dy_be', 'month', ARRAY['2026-03 120.000000', '2026-04 30.000000', '2026-09 10.000000', '2026-10 150.000000', '2026-11 20.000000']),
    ('dy_be', 'quarter', ARRAY['2026-01 120.000000 880.000000', '2026-04 30.000000 970.000000',
                               '2026-07 10.000000 990.000000', '2026-10 170.000000 830.000000']),
    ('dy_be', 'day', ARRAY['03-28 10.00', '03-29 75.00', '03-30 5.00', '03-31 30.00', '04-01 30.00',
                           '10-24 10.00', '10-25 95.00', '10-26 15.00', '11-01 20.00']);

-- each kind of figure against the hand's, in sessions whose TimeZone is the site's, UTC and
-- Pacific/Kiritimati (+14): a list of what differs
CREATE FUNCTION pg_temp.wrong(site text) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    out text[] := '{}';
    k record;
    z text;
    got text[];
    want text[];
    days date[];
BEGIN
    FOREACH z IN ARRAY ARRAY[setting_value('timezone'), 'UTC', 'Pacific/Kiritimati'] LOOP
        PERFORM set_config('TimeZone', z, true);
        FOR k IN SELECT * FROM kinds LOOP
            SELECT e.figures INTO want FROM expected e
            WHERE e.site = wrong.site AND e.kind = CASE WHEN k.per_day THEN 'day'
                                                        WHEN k.kind IN ('quarter_balances', 'balance') THEN 'quarter' ELSE 'month' END;
            IF k.per_day THEN
                days := (SELECT array_agg(('2026-' || split_part(f, ' ', 1))::date) FROM unnest(want) f);
                -- (the charts round to cents; the others to 6 decimals)
                want := (SELECT array_agg(CASE WHEN k.kind IN ('bank_chart', 'genci_chart') THEN f ELSE f || '0000' END) FROM unnest(want) f);
            END IF;
            got := pg_temp.figures(site, k.kind, days);
            IF got IS DISTINCT FROM want THEN
                out := out || (z || ' ' || k.kind || ': ' || coalesce(got::text, 'NULL'));
            END IF;
        END LOOP;
    END LOOP;
    RESET TimeZone;
    RETURN out;
END
$$;

SELECT is(pg_temp.wrong('dy_ny'), '{}', 'New York: every month, quarter and day figure is the hand''s, in any session TimeZone');

-- a scan of a past day tells the balance at that day's end: a job that ended after it (the
-- next day, just after midnight, or later in the quarter) is not yet charged then
INSERT INTO balance_threshold VALUES (88);
-- an account over a 10 NPL window only on 31 March (50 NPL)
INSERT INTO account (name) VALUES ('dy_q');
SELECT add_quota_period('dy_q', '2026-01-01', '2026-12-31', 10, NULL, 'NPL');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    ('dy_ny', 'wq', 'dy_q', 'u', 'p', '2026-03-31 23:00-04', '2026-03-31 23:50-04', 'cpu=60', 'COMPLETED');
SELECT notify_scan('2026-03-08');
-- and the quota state at that day's end: the month's later jobs do not count in it either
SELECT is((SELECT array_agg(subject) FROM outbox WHERE topic = 'quota_state' AND account = 'dy_q'), NULL,
          'New York: the scan of 8 March tells no quota state of an account whose only job ended on 31 March');
SELECT is((SELECT count(*) FROM outbox WHERE topic = 'balance_low' AND account = 'dy_ny'), 0::bigint,
          'New York: at the end of 8 March (109 NPL charged, 891 left) the balance is not below 88 %');
SELECT notify_scan('2026-03-31');
SELECT is((SELECT array_agg(subject || ' | ' || (figures ->> 'balance')::numeric || ' | ' || substring(body FROM 'held ([0-9.,]+) NPL') ORDER BY message_id)
           FROM outbox WHERE topic = 'balance_low' AND account = 'dy_ny'),
          ARRAY['[hpcacct] dy_ny: less than 88 % of the quarter''s credits left (2026-03-31) | 856.000000 | 856.00'],
          'New York: at the end of 31 March (144 NPL charged) it is, told with that day''s date and balance');

UPDATE setting SET value = 'Europe/Berlin' WHERE name = 'timezone';
SELECT is(pg_temp.wrong('dy_be'), '{}', 'Berlin: every month, quarter and day figure is the hand''s, in any session TimeZone');

SELECT * FROM finish();
ROLLBACK;
