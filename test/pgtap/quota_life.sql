-- The RWTH sliding-window quota through a year, as a site lives it: periods back to back and
-- with a gap, allowances that differ by month and change mid-period, jobs across a month's and
-- a period's end, jobs loaded late, normal -> low_priority -> blocked -> normal, a quota on one
-- cluster of two, and notify_scan() every day. At each step the figures are the README's
-- formulas computed by hand from the ledger (charge_by_month), and every surface agrees.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(34);

INSERT INTO setting VALUES ('timezone', 'Europe/Berlin') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
SELECT add_user('ql_u', '2025-01-01');
INSERT INTO account (name) VALUES ('ql_a');
SELECT add_member('ql_a', 'ql_u', 'admin');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES
    ('qa', 'c', 'cpu=48', 'cpu=1', 1, 'core-hours'), ('qb', 'c', 'cpu=48', 'cpu=1', 1, 'core-hours');

-- The README's formulas, by hand from the ledger: the period containing d (none: figures 0,
-- low_priority), A and C of the months m-1, m, m+1 inside it, C counted up to month m.
CREATE FUNCTION pg_temp.hand(acc text, d date)
    RETURNS TABLE (monthly float8, remaining_prev float8, consumed float8, pct float8, consumable float8, state text)
    LANGUAGE plpgsql AS $$
    DECLARE
        p record;
        m date := date_trunc('month', d::timestamp)::date;
        a_prev float8; a_cur float8; a_next float8; c_prev float8; c_cur float8; c_total float8; a_total float8;
    BEGIN
        SELECT * INTO p FROM hpcacct.quota_period q WHERE q.account = acc AND d BETWEEN q.period_start AND q.period_end;
        IF NOT FOUND THEN
            RETURN QUERY SELECT 0::float8, 0::float8, 0::float8, NULL::float8, 0::float8, 'low_priority'::text;
            RETURN;
        END IF;
        SELECT coalesce(sum(x.allowance) FILTER (WHERE x.month = (m - interval '1 month')::date), 0),
               coalesce(sum(x.allowance) FILTER (WHERE x.month = m), 0),
               coalesce(sum(x.allowance) FILTER (WHERE x.month = (m + interval '1 month')::date), 0),
               coalesce(sum(x.allowance), 0)
        INTO a_prev, a_cur, a_next, a_total
        FROM hpcacct.monthly_allowance x
        WHERE x.account = acc AND x.month BETWEEN p.period_start AND p.period_end;
        SELECT coalesce(sum(c.amount) FILTER (WHERE c.month = (m - interval '1 month')::date), 0),
               coalesce(sum(c.amount) FILTER (WHERE c.month = m), 0),
               coalesce(sum(c.amount), 0)
        INTO c_prev, c_cur, c_total
        FROM hpcacct.charge_by_month c
        WHERE c.account = acc AND c.unit = p.unit AND (p.cluster IS NULL OR c.cluster = p.cluster)
          AND c.month BETWEEN p.period_start AND least(p.period_end, m);
        RETURN QUERY SELECT a_cur, a_prev - c_prev, c_cur,
            CASE WHEN a_cur > 0 THEN greatest((a_prev + a_cur - c_prev - c_cur) * 100 / a_cur, -101) END,
            a_prev + a_cur + a_next - c_prev - c_cur,
            CASE WHEN c_cur > 6 * a_cur OR c_total > 2 * a_total THEN 'blocked'
                 WHEN a_prev + a_cur + a_next - c_prev - c_cur > 0 THEN 'normal' ELSE 'low_priority' END;
    END $$;

-- Days from..to where window_quota_usage() differs from the hand figures, or where
-- window_quota_state(), check_submit(), slurm_associations() or (on a month's last day) the
-- statement's RWTH table tell another state, or my_accounts() another than at the day's end.
CREATE FUNCTION pg_temp.mismatches(acc text, from_day date, to_day date) RETURNS text[]
    LANGUAGE sql AS $$
    SELECT array_agg(d::date || ': ' || x ORDER BY d)
    FROM generate_series(from_day::timestamp, to_day::timestamp, '1 day') g(d)
    CROSS JOIN LATERAL (
        SELECT concat_ws(' ',
            CASE WHEN (u.monthly, u.remaining_prev, u.consumed_current, u.consumable_pct, u.consumable, u.state)
                      IS DISTINCT FROM (h.monthly, h.remaining_prev, h.consumed, h.pct, h.consumable, h.state)
                 THEN format('usage %s hand %s', (u.monthly, u.remaining_prev, u.consumed_current, u.consumable_pct, u.consumable, u.state),
                             (h.monthly, h.remaining_prev, h.consumed, h.pct, h.consumable, h.state)) END,
            CASE WHEN hpcacct.window_quota_state(acc, d::date) IS DISTINCT FROM u.state THEN 'window_quota_state' END,
            CASE WHEN (SELECT r FROM hpcacct.r_wlm_usage(NULL, d::date) r WHERE r.account = acc) IS DISTINCT FROM u
                 THEN 'r_wlm_usage' END,
            CASE WHEN (SELECT e -> 'quota' ->> 'state' FROM jsonb_array_elements(hpcacct.my_accounts(d::date) -> 'accounts') e
                       WHERE e ->> 'account' = acc)
                      IS DISTINCT FROM (SELECT x.state FROM hpcacct_internal.window_quota_usage_rows(acc, d::date, true) x)
                 THEN 'my_accounts' END,
            CASE WHEN (coalesce((hpcacct.check_submit('ql_u', acc, d::date)).reason, 'ok') = 'quota_blocked') <> (u.state = 'blocked')
                 THEN 'check_submit' END,
            CASE WHEN (SELECT s.state FROM hpcacct.slurm_associations(d::date) s WHERE s.account = acc) IS DISTINCT FROM u.state
                 THEN 'slurm_associations ' || (SELECT s.state FROM hpcacct.slurm_associations(d::date) s WHERE s.account = acc) END,
            CASE WHEN d::date = (date_trunc('month', d) + interval '1 month - 1 day')::date
                      AND EXISTS (SELECT 1 FROM hpcacct.quota_period q WHERE q.account = acc AND d::date BETWEEN q.period_start AND q.period_end)
                      AND (SELECT w ->> 'state' FROM jsonb_array_elements(hpcacct.account_month(acc, d::date) -> 'window_quota') w
                           WHERE (w ->> 'month')::date = date_trunc('month', d)::date) IS DISTINCT FROM u.state
                 THEN 'statement' END) AS x
        FROM hpcacct.window_quota_usage(acc, d::date) u, pg_temp.hand(acc, d::date) h
    ) c
    WHERE c.x <> ''
$$;

-- notify_scan() each day; what each scan found (the state at the day's end, as the ledger
-- then was: a job loaded before the scan of a day it ran on counts up to that day's end);
-- returns how many quota_state messages of ql_a the scans wrote.
CREATE TEMP TABLE scanned (day date PRIMARY KEY, state text, figures jsonb);
CREATE FUNCTION pg_temp.scan(from_day date, to_day date) RETURNS bigint LANGUAGE plpgsql AS $$
    DECLARE d date; before bigint;
    BEGIN
        SELECT count(*) INTO before FROM hpcacct.outbox WHERE topic = 'quota_state' AND account = 'ql_a';
        FOR d IN SELECT g::date FROM generate_series(from_day::timestamp, to_day::timestamp, '1 day') g LOOP
            PERFORM hpcacct.notify_scan(d);
            INSERT INTO scanned
            SELECT d, u.state, jsonb_build_object('state', u.state, 'monthly', u.monthly, 'remaining_prev', u.remaining_prev,
                                                  'consumed_current', u.consumed_current, 'consumable_pct', u.consumable_pct,
                                                  'consumable', u.consumable, 'unit', u.unit)
            FROM hpcacct_internal.window_quota_usage_rows('ql_a', d, true) u;
        END LOOP;
        RETURN (SELECT count(*) FROM hpcacct.outbox WHERE topic = 'quota_state' AND account = 'ql_a') - before;
    END $$;
CREATE FUNCTION pg_temp.job(id text, cl text, s timestamptz, e timestamptz) RETURNS void LANGUAGE sql AS $$
    INSERT INTO hpcacct.job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
    VALUES (cl, id, 'ql_a', 'ql_u', 'c', s, e, 'cpu=10', 'COMPLETED') $$;

-- ---- Period 1: January to March, 1 000 a month, on cluster qa only ---------------------
SELECT add_quota_period('ql_a', '2025-01-01', '2025-03-31', 1000, 'qa');
SELECT pg_temp.job('j1', 'qa', '2025-01-10 00:00+01', '2025-01-12 02:00+01');  -- 500 in January
SELECT pg_temp.job('b1', 'qb', '2025-01-11 00:00+01', '2025-01-23 12:00+01');  -- 3 000 on qb: not counted
SELECT is(pg_temp.scan('2025-01-01', '2025-01-31'), 0::bigint, 'January: normal, nothing told');
SELECT is((SELECT (consumed_current, consumable, state) FROM window_quota_usage('ql_a', '2025-01-31')),
          (500::float8, 1500::float8, 'normal'::text), 'January: 500 used on qa (qb''s 3 000 do not count), 1 500 consumable');
-- across January's end: 20:00 to 04:00, Berlin: 40 in January, 40 in February
SELECT pg_temp.job('j2', 'qa', '2025-01-31 20:00+01', '2025-02-01 04:00+01');
-- mid-February: February raised to 1 500, March lowered to 500
UPDATE monthly_allowance SET allowance = 1500 WHERE account = 'ql_a' AND month = '2025-02-01';
SELECT is(pg_temp.scan('2025-02-01', '2025-02-14'), 0::bigint, 'early February: normal');
UPDATE monthly_allowance SET allowance = 500 WHERE account = 'ql_a' AND month = '2025-03-01';
SELECT pg_temp.job('j3', 'qa', '2025-02-15 00:00+01', '2025-02-25 10:00+01');  -- 2 500 in February
SELECT is(pg_temp.scan('2025-02-15', '2025-02-28'), 1::bigint, 'February: into low_priority, told once');
SELECT is((SELECT (monthly, remaining_prev, consumed_current, consumable, state) FROM window_quota_usage('ql_a', '2025-02-28')),
          (1500::float8, 460::float8, 2540::float8, -80::float8, 'low_priority'::text),
          'February by hand: A 1 000 + 1 500 + 500 - C 540 - 2 540 = -80: low_priority');
-- loaded late, on 2 March, after February ended and after its message: 100 on 20 February
SELECT pg_temp.job('late1', 'qa', '2025-02-20 00:00+01', '2025-02-20 10:00+01');
SELECT is(pg_temp.scan('2025-03-01', '2025-03-04'), 0::bigint, 'early March: still low_priority, nothing new told');
SELECT pg_temp.job('j4', 'qa', '2025-03-05 00:00+01', '2025-03-18 08:00+01');  -- 3 200 > 6 x 500
SELECT is(pg_temp.scan('2025-03-05', '2025-03-31'), 1::bigint, 'March: blocked, told once');
-- the quota counts qa only, but its state binds the account everywhere (README): a job for qb
-- is refused as well, and the association (which has no cluster) is blocked on both
SELECT is((check_submit('ql_u', 'ql_a', '2025-03-20')).reason, 'quota_blocked',
          'March: a quota on qa refuses the account''s jobs for qb too (check_submit has no cluster)');
-- across the period's end: 22:00 to 02:00 -> 20 in March, 20 in April (period 2)
SELECT pg_temp.job('j5', 'qa', '2025-03-31 22:00+02', '2025-04-01 02:00+02');
SELECT is(pg_temp.mismatches('ql_a', '2025-01-01', '2025-03-31'), NULL, 'period 1: every day as by hand, every surface agrees');

-- ---- Period 2, back to back: April to June, 1 000 a month, on every cluster ------------
SELECT add_quota_period('ql_a', '2025-04-01', '2025-06-30', 1000);
SELECT is(pg_temp.scan('2025-04-01', '2025-04-30'), 1::bigint, 'April: a new period, nothing carried: normal, told once');
SELECT ok((SELECT body FROM outbox WHERE topic = 'quota_state' AND account = 'ql_a' ORDER BY message_id DESC LIMIT 1)
          ~ 'The accounting period began on 2025-04-01: jobs run with normal priority\.',
          'April''s message (blocked before) says the new period began, not that the window is no longer used up');
SELECT is((SELECT (monthly, remaining_prev, consumed_current, consumable, state) FROM window_quota_usage('ql_a', '2025-04-30')),
          (1000::float8, 0::float8, 20::float8, 1980::float8, 'normal'::text),
          'April: remaining of March not carried; 20 of the job across the period''s end');
SELECT pg_temp.job('j6', 'qb', '2025-05-02 00:00+02', '2025-05-09 12:00+02');  -- 1 800 on qb: counts now
SELECT is(pg_temp.scan('2025-05-01', '2025-05-31'), 0::bigint, 'May: normal');
SELECT pg_temp.job('j7', 'qa', '2025-06-01 00:00+02', '2025-06-21 20:00+02');  -- 5 000 in June
-- across the period's end into the gap: 22:00 to 04:00 -> 20 in June, 40 in July
SELECT pg_temp.job('j8', 'qa', '2025-06-30 22:00+02', '2025-07-01 04:00+02');
-- (scanned after j7 was loaded, as a catch-up: each day counts June up to its end, 240 a day)
SELECT is(pg_temp.scan('2025-06-01', '2025-06-30'), 2::bigint,
          'June: low_priority from the 1st (1 000 + 1 000 + 0 - 1 800 - 240 < 0), blocked on the 18th (20 + 1 800 + 18 x 240 > 2 x 3 000): told twice');
SELECT is((SELECT array_agg((figures ->> 'at') || ' ' || (figures ->> 'state') ORDER BY message_id) FROM outbox
           WHERE topic = 'quota_state' AND account = 'ql_a' AND (figures ->> 'at')::date BETWEEN '2025-06-01' AND '2025-06-30'),
          ARRAY['2025-06-01 low_priority', '2025-06-18 blocked'], 'June''s messages on those days');
SELECT is(pg_temp.mismatches('ql_a', '2025-04-01', '2025-06-30'), NULL, 'period 2: every day as by hand, every surface agrees');

-- ---- July: a gap (no period) -------------------------------------------------------------
SELECT is((SELECT (monthly, consumed_current, consumable, state) FROM window_quota_usage('ql_a', '2025-07-15')),
          (0::float8, 0::float8, 0::float8, 'low_priority'::text),
          'July, outside every period: no quota, figures 0, low_priority (README)');
SELECT is(pg_temp.scan('2025-07-01', '2025-07-31'), 1::bigint, 'July: the end of the period told once');
SELECT ok((SELECT body FROM outbox WHERE topic = 'quota_state' AND account = 'ql_a' ORDER BY message_id DESC LIMIT 1)
          ~ 'The accounting period ended on 2025-06-30', 'July''s message says the period ended');
SELECT is(pg_temp.mismatches('ql_a', '2025-07-01', '2025-07-31'), NULL, 'July: every surface agrees');
-- July's statement: its quota table is July's (no period: low_priority), not June's figures
SELECT ok(statement_html('ql_a', '2025-07-01') !~ '<th>State</th><td>blocked</td>'
          AND statement_html('ql_a', '2025-07-01') ~ '<th>State</th><td>low_priority</td>',
          'July''s statement shows July''s state, low_priority, not June''s blocked');
SELECT ok(statement_html('ql_a', '2025-07-01') !~ '<th>Consumed this month</th><td class="n">5,020</td>',
          'nor June''s consumption as this month''s');

-- ---- Period 3: August to December, 1 000 a month, qa -------------------------------------
SELECT add_quota_period('ql_a', '2025-08-01', '2025-12-31', 1000, 'qa');
SELECT is(pg_temp.scan('2025-08-01', '2025-10-02'), 1::bigint, 'August: a new period, normal again, told once');
SELECT ok((SELECT body FROM outbox WHERE topic = 'quota_state' AND account = 'ql_a' ORDER BY message_id DESC LIMIT 1)
          ~ 'The accounting period began on 2025-08-01: jobs run with normal priority\.', 'so does August''s');
-- loaded late, on 3 October: 6 100 in September, more than 6 x 1 000. September (past) was
-- blocked as the ledger now is; that state has passed and is not told (README: scans tell
-- the state of their day), October's low_priority is, once
SELECT pg_temp.job('late2', 'qa', '2025-09-01 00:00+02', '2025-09-26 10:00+02');
SELECT is(window_quota_state('ql_a', '2025-09-30'), 'blocked', 'September, as the ledger now is: blocked');
SELECT is(pg_temp.scan('2025-10-03', '2025-10-10'), 1::bigint, 'October: low_priority, told once');
SELECT is((SELECT array_agg(figures ->> 'state') FROM outbox WHERE topic = 'quota_state' AND account = 'ql_a'
           AND (figures ->> 'at')::date >= '2025-08-01'), ARRAY['normal', 'low_priority'],
          'September''s blocked state, found late, is not told; October''s state is');
SELECT pg_temp.job('j9', 'qa', '2025-10-11 00:00+02', '2025-10-21 00:00+02');  -- 2 400
-- mid-October: September's allowance lowered after the fact, November's raised
UPDATE monthly_allowance SET allowance = 200 WHERE account = 'ql_a' AND month = '2025-09-01';
UPDATE monthly_allowance SET allowance = 3000 WHERE account = 'ql_a' AND month = '2025-11-01';
SELECT is(pg_temp.scan('2025-10-11', '2025-12-31') > 0, true, 'October to December: changes told');
SELECT pg_temp.job('j10', 'qa', '2025-12-31 20:00+01', '2026-01-01 04:00+01');
SELECT is(pg_temp.mismatches('ql_a', '2025-08-01', '2025-12-31'), NULL, 'period 3: every day as by hand, every surface agrees');
SELECT is(pg_temp.mismatches('ql_a', '2025-01-01', '2025-12-31'), NULL, 'the whole year again, with every late job');

-- ---- each change told once -----------------------------------------------------------
SELECT is((SELECT array_agg(figures ->> 'state' ORDER BY message_id) FROM outbox WHERE topic = 'quota_state' AND account = 'ql_a'),
          (SELECT array_agg(s.state ORDER BY s.day) FROM (
               SELECT day, state, lag(state, 1, 'normal') OVER (ORDER BY day) AS before FROM scanned) s
           WHERE s.state <> s.before),
          'one message per change of the state the daily scan found, in order');
SELECT is((SELECT count(*) FROM outbox WHERE topic = 'quota_state' AND account = 'ql_a'),
          (SELECT count(*) FROM (SELECT state, lag(state, 1, 'normal') OVER (ORDER BY day) AS before FROM scanned) s
           WHERE s.state <> s.before), 'as many messages as changes');

SELECT is((SELECT array_agg((o.figures - 'at' - 'previous_state') = s.figures ORDER BY o.message_id)
           FROM outbox o LEFT JOIN scanned s ON s.day = (o.figures ->> 'at')::date
           WHERE o.topic = 'quota_state' AND o.account = 'ql_a'),
          array_fill(true, ARRAY[(SELECT count(*)::integer FROM outbox WHERE topic = 'quota_state' AND account = 'ql_a')]),
          'each message''s figures are those of its day''s end, as the ledger then was');
SELECT is((SELECT (u.state, u.monthly, u.consumable) FROM window_quota_usage u WHERE u.account = 'ql_a'),
          (SELECT (u.state, u.monthly, u.consumable) FROM window_quota_usage('ql_a') u),
          'the view window_quota_usage is today''s row (after the last period: no quota)');

SELECT * FROM finish();
ROLLBACK;
