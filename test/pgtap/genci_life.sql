-- GENCI / IDRIS regulation through two calendar years, as a site lives it: a regulated machine
-- (jz, half_month) and one that is not (ir); grants from 1 January, two granted from 16 May (one
-- above the monthly threshold, one below), a supplement in September, retractions by the
-- monthly and the annual regulation and one booked by hand; accounts that spend evenly, nothing
-- until October, or too much early. regulate(d) runs on each 1st and 15th as the README's
-- pg_cron line does (the day after, with the jobs loaded by then), the 15 April run is missed
-- and made late on 20 April, the year ends, the second year renews some grants. At each run the
-- figures are the README's formulas (rules §2) computed by hand from the ledger, and
-- allocation_status(), the run's log and retraction, my_accounts(), account_verdict(),
-- check_submit(), the outbox's messages and regulation_report agree; a re-run changes nothing.
BEGIN;
SET search_path = public, hpcacct;
SET client_min_messages = warning;
SELECT plan(30);

INSERT INTO setting VALUES ('timezone', 'Europe/Paris') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO regulation_machine (machine, monthly_threshold) VALUES ('jz', 1000000);
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES
    ('jz', 'cpu', 'cpu=40', 'cpu=1', 1, 'hours'), ('ir', 'cpu', 'cpu=40', 'cpu=1', 1, 'hours');
INSERT INTO account (name) VALUES ('even'), ('late'), ('early'), ('may'), ('mays'), ('small');
INSERT INTO hpc_user (username) SELECT 'pm_' || name FROM account;
INSERT INTO membership (account, username, role) SELECT name, 'pm_' || name, 'admin' FROM account;
INSERT INTO contact (username, email) SELECT 'pm_' || name, 'pm_' || name || '@example.org' FROM account;

-- ---- by hand: the README's formulas (rules §2) from the ledger ----------------------------
-- A day boundary's position in months (counted from year 0), rounded to the nearest half month,
-- ties upward (half_month).
CREATE FUNCTION pg_temp.pos(d date) RETURNS numeric LANGUAGE sql IMMUTABLE AS $$
    SELECT extract(year FROM d) * 12 + extract(month FROM d) - 1
           + floor(2 * (extract(day FROM d) - 1)
                   / extract(day FROM date_trunc('month', d) + interval '1 month - 1 day') + 0.5) / 2
$$;
-- Alloc, granted, TMC, TC, consumption, Δ and the monthly status of an account on a machine at
-- the end of d, from 1 January of d's year; without the ledger rows listed in skip.
CREATE FUNCTION pg_temp.hand(acc text, mach text, d date, skip bigint[] DEFAULT '{}')
    RETURNS TABLE (alloc numeric, granted numeric, tmc numeric, tc numeric, consumption numeric, delta numeric,
                   status text)
    LANGUAGE sql AS $$
    WITH ys AS (SELECT make_date(extract(year FROM d)::int, 1, 1) AS ys),
    ev AS (
        SELECT l.kind, l.amount AS a, l.valid_from AS f, l.valid_until AS u
        FROM hpcacct.ledger l, ys
        WHERE l.account = acc AND l.pool = mach AND l.kind IN ('grant', 'supplement', 'retraction')
          AND l.valid_from <= d AND l.valid_until >= ys.ys AND l.entry_id <> ALL (skip)
    ), fig AS (
        SELECT coalesce(sum(a), 0) AS alloc,
               coalesce(sum(a) FILTER (WHERE kind <> 'retraction'), 0) AS granted,
               coalesce(sum(a / (pg_temp.pos(u + 1) - pg_temp.pos(f))) FILTER (WHERE d <= u), 0) AS tmc,
               coalesce(sum(a * (pg_temp.pos(least(d, u) + 1) - pg_temp.pos(greatest(f, ys.ys)))
                            / (pg_temp.pos(u + 1) - pg_temp.pos(f))), 0) AS tc
        FROM ev, ys
    ), used AS (
        SELECT coalesce(sum(l.amount * extract(epoch FROM least(l.job_end, t.t1) - greatest(l.job_start, t.t0))
                            / extract(epoch FROM l.job_end - l.job_start)), 0) AS consumption
        FROM (SELECT ys.ys::timestamp AT TIME ZONE 'Europe/Paris' AS t0,
                     (d + 1)::timestamp AT TIME ZONE 'Europe/Paris' AS t1 FROM ys) t
        JOIN hpcacct.ledger l ON l.kind = 'charge' AND l.account = acc AND l.job_start < t.t1 AND l.job_end > t.t0
        JOIN hpcacct.resource r ON r.resource_id = l.resource_id AND coalesce(r.pool, r.cluster) = mach
    )
    SELECT f.alloc, f.granted, f.tmc, f.tc, u.consumption, u.consumption - f.tc,
           CASE WHEN f.tmc <= 0 OR u.consumption - f.tc > -f.tmc THEN 'ok'
                WHEN u.consumption - f.tc > -2 * f.tmc THEN 'warning' ELSE 'retraction' END
    FROM fig f, used u
$$;
CREATE FUNCTION pg_temp.near(x float8, y numeric) RETURNS boolean LANGUAGE sql IMMUTABLE
    AS 'SELECT x IS NOT NULL AND y IS NOT NULL AND abs(x::numeric - y) < 0.001';

-- The pairs with an event valid from 1 January to d (every machine, regulated or not).
CREATE FUNCTION pg_temp.pairs(d date) RETURNS TABLE (account text, machine text) LANGUAGE sql AS $$
    SELECT DISTINCT l.account, l.pool FROM hpcacct.ledger l
    WHERE l.kind IN ('grant', 'supplement', 'retraction') AND l.valid_from <= d
      AND l.valid_until >= make_date(extract(year FROM d)::int, 1, 1)
$$;

-- Where allocation_status(), my_accounts(), account_verdict() and check_submit() at d differ from
-- the figures by hand (NULL: nowhere).
CREATE FUNCTION pg_temp.surfaces(d date) RETURNS text[] LANGUAGE sql AS $$
    WITH st AS (
        SELECT p.account, p.machine, s.*, h.alloc AS h_alloc, h.granted AS h_granted, h.tmc AS h_tmc, h.tc AS h_tc,
               h.consumption AS h_cons, h.delta AS h_delta, h.status AS h_status
        FROM pg_temp.pairs(d) p
        CROSS JOIN LATERAL hpcacct.allocation_status(p.account, p.machine, d) s
        CROSS JOIN LATERAL pg_temp.hand(p.account, p.machine, d) h
    ), portal AS (
        SELECT a ->> 'account' AS account, r ->> 'machine' AS machine, r
        FROM jsonb_array_elements(hpcacct.my_accounts(d) -> 'accounts') a
        CROSS JOIN LATERAL jsonb_array_elements(coalesce(a -> 'regulation', '[]')) r
    ), verdict AS (
        SELECT a.name AS account, v.reason, c.reason AS submit_reason, c.ok AS submit_ok, v.ok,
               -- (README, Slurm enforcement: an account with no grant or supplement at all is
               -- bound by the bank, with no deposit: expired)
               CASE WHEN NOT EXISTS (SELECT 1 FROM hpcacct.ledger l
                                     WHERE l.account = a.name AND l.kind IN ('grant', 'supplement')) THEN 'account_expired'
                    WHEN NOT EXISTS (SELECT 1 FROM hpcacct.ledger l
                                     WHERE l.account = a.name AND l.kind IN ('grant', 'supplement', 'retraction')
                                       AND d BETWEEN l.valid_from AND l.valid_until) THEN 'no_allocation'
                    -- README: on every machine with a grant or supplement valid at the day, the
                    -- year's consumption has reached Alloc
                    WHEN NOT EXISTS (SELECT 1 FROM st WHERE st.account = a.name AND st.h_cons < st.h_alloc
                                       AND EXISTS (SELECT 1 FROM hpcacct.ledger l
                                                   WHERE l.account = a.name AND l.pool = st.machine
                                                     AND l.kind IN ('grant', 'supplement')
                                                     AND d BETWEEN l.valid_from AND l.valid_until))
                         THEN 'allocation_exhausted' END AS h_reason
        FROM hpcacct.account a
        CROSS JOIN LATERAL hpcacct.account_verdict(a.name, d) v
        CROSS JOIN LATERAL hpcacct.check_submit('pm_' || a.name, a.name, d) c
        WHERE a.kind = 'project'
    )
    SELECT array_agg(x ORDER BY x) FROM (
        SELECT format('%s %s %s: allocation_status %s/%s/%s/%s/%s/%s/%s, by hand %s/%s/%s/%s/%s/%s/%s', d, account, machine,
                      alloc, granted, tmc, tc, consumption, delta, status,
                      h_alloc, h_granted, round(h_tmc, 3), round(h_tc, 3), round(h_cons, 3), round(h_delta, 3), h_status)
        FROM st
        WHERE alloc <> h_alloc OR granted <> h_granted OR NOT pg_temp.near(tmc, h_tmc) OR NOT pg_temp.near(tc, h_tc)
           OR NOT pg_temp.near(consumption, h_cons) OR NOT pg_temp.near(delta, h_delta) OR status <> h_status
        UNION ALL
        SELECT format('%s %s %s: my_accounts %s, by hand %s/%s/%s/%s/%s', d, coalesce(st.account, p.account),
                      coalesce(st.machine, p.machine), p.r, st.h_alloc, round(st.h_tmc, 2), round(st.h_tc, 2),
                      round(st.h_cons, 2), st.h_status)
        FROM (SELECT * FROM st WHERE st.machine IN (SELECT machine FROM hpcacct.regulation_machine)) st
        FULL JOIN portal p ON p.account = st.account AND p.machine = st.machine
        WHERE p.r IS NULL OR st.account IS NULL
           OR (p.r ->> 'alloc')::numeric <> st.h_alloc
           OR abs((p.r ->> 'tmc')::numeric - st.h_tmc) > 0.006 OR abs((p.r ->> 'tc')::numeric - st.h_tc) > 0.006
           OR abs((p.r ->> 'consumption')::numeric - st.h_cons) > 0.006 OR p.r ->> 'status' <> st.h_status
        UNION ALL
        SELECT format('%s %s: account_verdict %s, check_submit %s, by hand %s', d, account, reason, submit_reason, h_reason)
        FROM verdict
        WHERE reason IS DISTINCT FROM h_reason OR submit_reason IS DISTINCT FROM h_reason
           OR ok <> (h_reason IS NULL) OR submit_ok <> ok
    ) m(x)
$$;

-- ---- the jobs, loaded as they end -------------------------------------------------------
CREATE TEMP TABLE plan (jobid text, account text, cluster text, cores int, t0 timestamptz, t1 timestamptz,
                        loaded boolean NOT NULL DEFAULT false);
-- half-month jobs from..to (local days) with n cores
CREATE FUNCTION pg_temp.jobs(acc text, cl text, n int, from_day date, to_day date) RETURNS void LANGUAGE sql AS $$
    INSERT INTO plan (jobid, account, cluster, cores, t0, t1)
    SELECT acc || '-' || cl || '-' || b::date, acc, cl, n,
           b::timestamp AT TIME ZONE 'Europe/Paris',
           (CASE WHEN extract(day FROM b) = 1 THEN b + interval '15 days' ELSE date_trunc('month', b) + interval '1 month' END)
               AT TIME ZONE 'Europe/Paris'
    FROM generate_series(from_day::timestamp, to_day::timestamp - interval '1 day', interval '1 day') b
    WHERE extract(day FROM b) IN (1, 16)
$$;
SELECT pg_temp.jobs('even', 'jz', 134, '2024-01-01', '2025-07-01');
SELECT pg_temp.jobs('even', 'ir', 10, '2024-01-01', '2025-07-01');
SELECT pg_temp.jobs('late', 'jz', 700, '2024-10-01', '2025-01-01');
SELECT pg_temp.jobs('early', 'jz', 900, '2024-01-01', '2024-03-01');
SELECT pg_temp.jobs('early', 'jz', 200, '2024-09-01', '2024-10-01');
SELECT pg_temp.jobs('may', 'jz', 200, '2024-06-16', '2025-01-01');
SELECT pg_temp.jobs('small', 'jz', 50, '2024-01-01', '2024-04-01');
SELECT pg_temp.jobs('small', 'jz', 60, '2025-01-01', '2025-03-01');
-- a job across the end of 15 April, loaded only when the missed run is made (20 April), and
-- one across the new year, counted pro rata in each year
INSERT INTO plan (jobid, account, cluster, cores, t0, t1) VALUES
    ('late-april', 'late', 'jz', 100, '2024-04-10 00:00 Europe/Paris', '2024-04-20 00:00 Europe/Paris'),
    ('even-newyear', 'even', 'ir', 20, '2024-12-20 12:00 Europe/Paris', '2025-01-10 12:00 Europe/Paris');

CREATE FUNCTION pg_temp.load(until timestamptz) RETURNS void LANGUAGE sql AS $$
    INSERT INTO hpcacct.job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
    SELECT p.cluster, p.jobid, p.account, 'pm_' || p.account, 'cpu', p.t0, p.t1, ('cpu=' || p.cores)::hpcacct.tres, 'COMPLETED'
    FROM plan p WHERE NOT p.loaded AND p.t1 <= until;
    UPDATE plan SET loaded = true WHERE NOT loaded AND t1 <= until;
$$;

-- ---- a run, as pg_cron makes it ----------------------------------------------------------
-- The figures by hand of every regulated pair before each run, and what the run should do.
CREATE TEMP TABLE expected (run_date date, run text, account text, machine text, figures_at date, outcome text,
                            alloc numeric, granted numeric, tmc numeric, tc numeric, consumption numeric,
                            delta numeric, used numeric, retracted numeric);
CREATE TEMP TABLE counts (run_date date, ledger bigint, log bigint, outbox bigint, recipients bigint);

-- regulate(d) with the jobs ended by load_until loaded, notify_scan(d); then both again.
CREATE FUNCTION pg_temp.run(d date, load_until timestamptz) RETURNS void LANGUAGE plpgsql AS $$
    DECLARE
        kind text := hpcacct.regulation_run(d);
        as_of date := CASE WHEN kind = 'monthly' THEN d ELSE d - 1 END;
    BEGIN
        PERFORM pg_temp.load(load_until);
        IF kind IS NOT NULL THEN
            INSERT INTO expected
            SELECT d, kind, p.account, p.machine, as_of, o.outcome, h.alloc, h.granted, h.tmc, h.tc, h.consumption,
                   h.delta, u.used, o.hours
            FROM pg_temp.pairs(as_of) p
            JOIN hpcacct.regulation_machine s ON s.machine = p.machine
            CROSS JOIN LATERAL pg_temp.hand(p.account, p.machine, as_of) h
            CROSS JOIN LATERAL (SELECT CASE WHEN kind <> 'monthly' AND h.alloc > 0 THEN 100 * h.consumption / h.alloc END AS used) u
            -- README, rules §2: warned when under 30 % in January-April, retracted when "still"
            -- under 30 % after May: under it at the end of April as well
            CROSS JOIN LATERAL pg_temp.hand(p.account, p.machine, make_date(extract(year FROM d)::int, 4, 30)) apr
            CROSS JOIN LATERAL (
                SELECT CASE WHEN kind = 'monthly' THEN h.status
                            WHEN u.used < s.annual_warning_percent
                                 AND (kind = 'annual_warning'
                                      OR apr.alloc > 0 AND 100 * apr.consumption / apr.alloc < s.annual_warning_percent)
                                 THEN CASE kind WHEN 'annual_warning' THEN 'warning' ELSE 'retraction' END
                            ELSE 'ok' END AS outcome) o0
            CROSS JOIN LATERAL (
                SELECT o0.outcome,
                       CASE WHEN o0.outcome <> 'retraction' THEN 0
                            WHEN kind = 'monthly' THEN round(h.tmc, 6)
                            ELSE round(greatest(0, least(s.annual_retraction_percent / 100 * h.alloc, h.alloc - h.consumption)), 6)
                       END AS hours) o
            WHERE (h.granted >= s.monthly_threshold) = (kind = 'monthly');
        END IF;
        CALL hpcacct.regulate(d);
        PERFORM hpcacct.notify_scan(d);
        INSERT INTO counts SELECT d, (SELECT count(*) FROM hpcacct.ledger), (SELECT count(*) FROM hpcacct.regulation_log),
                                  (SELECT count(*) FROM hpcacct.outbox), (SELECT count(*) FROM hpcacct.outbox_recipient);
        CALL hpcacct.regulate(d);
        PERFORM hpcacct.notify_scan(d);
    END $$;

-- Where the run of d differs from the hand: its log rows, its retractions in the ledger, its
-- messages, and a re-run that changed something.
CREATE FUNCTION pg_temp.run_mismatches(d date) RETURNS text[] LANGUAGE sql AS $$
    SELECT array_agg(x ORDER BY x) FROM (
        SELECT format('%s %s: logged %s %s/%s/%s/%s/%s/%s retracted %s, by hand %s %s/%s/%s/%s/%s/%s retracted %s', d,
                      coalesce(g.account, e.account), g.outcome, g.alloc, g.tmc, g.tc, g.consumption, g.delta, g.used_percent,
                      g.retracted, e.outcome, e.alloc, round(e.tmc, 3), round(e.tc, 3), round(e.consumption, 3),
                      round(e.delta, 3), round(e.used, 3), e.retracted)
        FROM (SELECT * FROM hpcacct.regulation_log WHERE run_date = d) g
        FULL JOIN (SELECT * FROM expected WHERE run_date = d) e ON e.account = g.account AND e.machine = g.machine
        WHERE g.account IS NULL OR e.account IS NULL OR g.outcome <> e.outcome OR g.alloc <> e.alloc
           OR g.granted <> e.granted OR g.figures_at <> e.figures_at OR g.run <> e.run
           OR NOT pg_temp.near(g.tmc, e.tmc) OR NOT pg_temp.near(g.tc, e.tc)
           OR NOT pg_temp.near(g.consumption, e.consumption) OR NOT pg_temp.near(g.delta, e.delta)
           OR g.used_percent IS DISTINCT FROM e.used AND NOT pg_temp.near(g.used_percent, e.used)
           OR abs(g.retracted - e.retracted) > 0.001
        UNION ALL  -- the retraction: -hours from d to 31 December, the log's entry
        SELECT format('%s %s: retraction entry %s %s %s..%s', d, g.account, l.entry_id, l.amount, l.valid_from, l.valid_until)
        FROM hpcacct.regulation_log g
        LEFT JOIN hpcacct.ledger l ON l.entry_id = g.entry_id
        WHERE g.run_date = d AND g.retracted > 0
          AND (l.entry_id IS NULL OR l.kind <> 'retraction' OR l.amount <> -g.retracted OR l.valid_from <> d
               OR l.valid_until <> make_date(extract(year FROM d)::int, 12, 31) OR l.account <> g.account OR l.pool <> g.machine)
        UNION ALL  -- one message per warning and retraction, to the project manager, its figures the log's
        SELECT format('%s %s: %s, message %s', d, g.account, g.outcome, coalesce(o.subject, 'none'))
        FROM hpcacct.regulation_log g
        LEFT JOIN hpcacct.outbox o ON o.decision_key = concat_ws('/', g.account, g.machine, g.run_date, g.run)
        WHERE g.run_date = d AND g.outcome IN ('warning', 'retraction')
          AND (o.message_id IS NULL
               OR o.topic <> CASE g.run WHEN 'monthly' THEN 'regulation_' || g.outcome ELSE g.run END
               OR o.addressed_to <> ARRAY['pm_' || g.account]
               OR NOT EXISTS (SELECT 1 FROM hpcacct.outbox_recipient r
                              WHERE r.message_id = o.message_id AND r.address = 'pm_' || g.account || '@example.org')
               OR (o.figures ->> 'alloc')::numeric <> g.alloc OR (o.figures ->> 'retracted')::numeric <> g.retracted
               OR NOT pg_temp.near((o.figures ->> 'tc')::float8, g.tc::numeric)
               OR NOT pg_temp.near((o.figures ->> 'consumption')::float8, g.consumption::numeric)
               OR g.run = 'monthly'
                  AND position(format('had consumed %s hours on jz, against a theoretical consumption TC of %s hours:',
                                      hpcacct_internal.notify_number(g.consumption::numeric),
                                      hpcacct_internal.notify_number(g.tc::numeric)) IN o.body) = 0
               OR g.run = 'monthly'
                  AND position(format('an under-consumption of %s hours', hpcacct_internal.notify_number(-g.delta::numeric)) IN o.body) = 0
               OR g.run = 'monthly'
                  AND position(format('(TMC = %s hours)', hpcacct_internal.notify_number(g.tmc::numeric)) IN o.body) = 0
               OR g.run <> 'monthly'
                  AND position(format('had used %s of its %s hours on jz', hpcacct_internal.notify_number(g.consumption::numeric),
                                      hpcacct_internal.notify_number(g.alloc)) IN o.body) = 0
               OR g.outcome = 'retraction'
                  AND position(format('from %s to %s hours', hpcacct_internal.notify_number(g.alloc),
                                      hpcacct_internal.notify_number(g.alloc - g.retracted)) IN o.body) = 0)
        UNION ALL
        SELECT format('%s: a message of no warning or retraction: %s', d, o.subject)
        FROM hpcacct.outbox o
        WHERE o.figures ->> 'run_date' = d::text
          AND NOT EXISTS (SELECT 1 FROM hpcacct.regulation_log g
                          WHERE concat_ws('/', g.account, g.machine, g.run_date, g.run) = o.decision_key
                            AND g.outcome IN ('warning', 'retraction'))
        UNION ALL
        SELECT format('%s: the re-run changed ledger %s -> %s, log %s -> %s, outbox %s -> %s', d, c.ledger,
                      (SELECT count(*) FROM hpcacct.ledger), c.log, (SELECT count(*) FROM hpcacct.regulation_log),
                      c.outbox, (SELECT count(*) FROM hpcacct.outbox))
        FROM counts c
        WHERE c.run_date = d
          AND (c.ledger, c.log, c.outbox, c.recipients)
              <> ((SELECT count(*) FROM hpcacct.ledger), (SELECT count(*) FROM hpcacct.regulation_log),
                  (SELECT count(*) FROM hpcacct.outbox), (SELECT count(*) FROM hpcacct.outbox_recipient))
    ) m(x)
$$;

-- The runs of a month, as pg_cron makes them: the 1st on the 2nd, the 15th on the 16th (the
-- jobs ended by then loaded); the surfaces checked at each run date.
CREATE FUNCTION pg_temp.month(m date, skip_15th boolean DEFAULT false) RETURNS text[] LANGUAGE plpgsql AS $$
    DECLARE
        out text[] := '{}';
    BEGIN
        PERFORM pg_temp.run(m, (m + 1)::timestamp AT TIME ZONE 'Europe/Paris');
        out := out || coalesce(pg_temp.run_mismatches(m), '{}') || coalesce(pg_temp.surfaces(m), '{}');
        IF NOT skip_15th THEN
            PERFORM pg_temp.run(m + 14, (m + 15)::timestamp AT TIME ZONE 'Europe/Paris');
            out := out || coalesce(pg_temp.run_mismatches(m + 14), '{}') || coalesce(pg_temp.surfaces(m + 14), '{}');
        END IF;
        RETURN CASE WHEN cardinality(out) > 0 THEN out END;
    END $$;

-- ---- 2024 ------------------------------------------------------------------------------
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until, note) VALUES
    ('even', 'grant', 1200000, 'hours', 'jz', '2024-01-01', '2024-12-31', 'A2024'),
    ('even', 'grant', 100000, 'hours', 'ir', '2024-01-01', '2024-12-31', 'A2024'),
    ('late', 'grant', 1200000, 'hours', 'jz', '2024-01-01', '2024-12-31', 'A2024'),
    ('early', 'grant', 1200000, 'hours', 'jz', '2024-01-01', '2024-12-31', 'A2024'),
    ('small', 'grant', 400000, 'hours', 'jz', '2024-01-01', '2024-12-31', 'A2024');

SELECT is(pg_temp.month('2024-01-01'), NULL, 'January 2024: runs, figures and surfaces as by hand');
SELECT is(pg_temp.month('2024-02-01'), NULL, 'February 2024: as by hand');
SELECT is((SELECT array_agg(account || ':' || outcome ORDER BY account) FROM regulation_log WHERE run_date = '2024-02-15'),
          ARRAY['early:ok', 'even:ok', 'late:warning'], '15 February: late (nothing spent) is warned, as the README says');
SELECT is(pg_temp.month('2024-03-01'), NULL, 'March 2024: as by hand');
SELECT is((SELECT retracted FROM regulation_log WHERE run_date = '2024-03-15' AND account = 'late'), 100000.000000,
          '15 March: late loses one TMC, 100 000');
SELECT is((hpcacct.account_verdict('early', '2024-03-01')).reason, 'allocation_exhausted',
          'early has spent its 1 200 000 by the end of February');

-- April: the run of the 15th is missed (the server down all the 16th), made by hand on 20 April.
SELECT is(pg_temp.month('2024-04-01', skip_15th => true), NULL, '1 April 2024: as by hand');
SELECT pg_temp.run('2024-04-15', '2024-04-21 00:00 Europe/Paris');
SELECT is(coalesce(pg_temp.run_mismatches('2024-04-15'), '{}') || coalesce(pg_temp.surfaces('2024-04-15'), '{}'), '{}',
          '15 April, run late on 20 April: as by hand, with the figures at the end of 15 April');
SELECT is((SELECT consumption FROM regulation_log WHERE run_date = '2024-04-15' AND account = 'late'), 100 * 144::float8,
          '15 April, run late: late''s job of 10-20 April, loaded on 20 April, counts its 6 days to the end of 15 April');

-- May: the annual warning; two projects granted from 16 May (booked on 10 May).
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until, note) VALUES
    ('may', 'grant', 1500000, 'hours', 'jz', '2024-05-16', '2024-12-31', 'A2024 session 2'),
    ('mays', 'grant', 300000, 'hours', 'jz', '2024-05-16', '2024-12-31', 'A2024 session 2');
SELECT is(pg_temp.month('2024-05-01'), NULL, 'May 2024: as by hand');
SELECT is((SELECT outcome FROM regulation_log WHERE run_date = '2024-05-01' AND account = 'small'), 'warning',
          '1 May: small (27 % by April) is warned');

-- June: the annual retraction; a retraction booked by hand on 20 June, from 1 July.
SELECT is(pg_temp.month('2024-06-01'), NULL, 'June 2024: as by hand');
SELECT is((SELECT retracted FROM regulation_log WHERE run_date = '2024-06-01' AND account = 'small'), 160000.000000,
          '1 June: small loses 40 % of 400 000');
SELECT is((SELECT array_agg(outcome || ' ' || retracted) FROM regulation_log WHERE run_date = '2024-06-01' AND account = 'mays'),
          ARRAY['ok 0.000000'],
          '1 June: mays, granted from 16 May and never warned, is not "still under 30 %": it keeps its hours');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until, note)
VALUES ('even', 'retraction', -120000, 'hours', 'jz', '2024-07-01', '2024-12-31', 'by hand: GENCI committee');

SELECT is(pg_temp.month('2024-07-01'), NULL, 'July 2024: as by hand');
SELECT is(pg_temp.month('2024-08-01'), NULL, 'August 2024: as by hand');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until, note)
VALUES ('early', 'supplement', 300000, 'hours', 'jz', '2024-09-01', '2024-12-31', 'supplement');
SELECT is(pg_temp.month('2024-09-01'), NULL, 'September 2024: as by hand');
SELECT is((hpcacct.account_verdict('early', '2024-09-01')).ok, true, 'the supplement lets early submit again');
SELECT is(pg_temp.month('2024-10-01'), NULL, 'October 2024: as by hand');
SELECT is(pg_temp.month('2024-11-01'), NULL, 'November 2024: as by hand');
SELECT is(pg_temp.month('2024-12-01'), NULL, 'December 2024: as by hand');

-- The year's end: TC(31 December) is Alloc for every pair; the surfaces at 31 December.
SELECT pg_temp.load('2025-01-01 00:00 Europe/Paris');
SELECT is((SELECT array_agg(p.account || '/' || p.machine ORDER BY 1)
           FROM pg_temp.pairs('2024-12-31') p
           CROSS JOIN LATERAL hpcacct.allocation_status(p.account, p.machine, '2024-12-31') s
           CROSS JOIN LATERAL pg_temp.hand(p.account, p.machine, '2024-12-31') h
           WHERE NOT pg_temp.near(s.tc, s.alloc) OR h.tc <> h.alloc), NULL,
          '31 December 2024: TC = Alloc for every account on both machines');
SELECT is(pg_temp.surfaces('2024-12-31'), NULL, '31 December 2024: the surfaces as by hand');
SELECT is(ARRAY[(SELECT retracted FROM regulation_log WHERE run_date = '2024-12-15' AND account = 'may') > 0,
                (SELECT tmc < 0 AND consumption < alloc FROM allocation_status('may', 'jz', '2024-12-20')),
                (account_verdict('may', '2024-12-20')).ok],
          ARRAY[true, true, true],
          '15 December: a retraction spread over half a month makes TMC negative; may, under its Alloc, still submits');

-- ---- 2025: grants renewed for even, early and small; late and may are not ---------------
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until, note) VALUES
    ('even', 'grant', 1200000, 'hours', 'jz', '2025-01-01', '2025-12-31', 'A2025'),
    ('even', 'grant', 100000, 'hours', 'ir', '2025-01-01', '2025-12-31', 'A2025'),
    ('early', 'grant', 1200000, 'hours', 'jz', '2025-01-01', '2025-12-31', 'A2025'),
    ('small', 'grant', 400000, 'hours', 'jz', '2025-01-01', '2025-12-31', 'A2025');
SELECT is(pg_temp.month('2025-01-01'), NULL, 'January 2025: as by hand (the year starts from 0)');
SELECT is(pg_temp.month('2025-02-01'), NULL, 'February 2025: as by hand');

-- ---- every day, with every job loaded: allocation_status() and the document's table -----
SELECT is((SELECT array_agg(format('%s %s/%s', d::date, p.account, p.machine) ORDER BY d, p.account, p.machine)
           FROM generate_series('2024-01-01'::timestamp, '2025-02-28', '1 day') d
           CROSS JOIN LATERAL pg_temp.pairs(d::date) p
           CROSS JOIN LATERAL allocation_status(p.account, p.machine, d::date) s
           CROSS JOIN LATERAL pg_temp.hand(p.account, p.machine, d::date) h
           WHERE s.alloc <> h.alloc OR NOT pg_temp.near(s.tmc, h.tmc) OR NOT pg_temp.near(s.tc, h.tc)
              OR NOT pg_temp.near(s.consumption, h.consumption) OR s.status <> h.status),
          NULL, 'allocation_status() as by hand on every day of 2024 and of January-February 2025, on both machines');
SELECT is((SELECT array_agg(format('%s %s: %s..%s %s/%s/%s', p.account, p.machine, y.first_day, y.last_day, y.alloc, y.tmc, y.tc)
                            ORDER BY p.account, p.machine, y.first_day)
           FROM (SELECT DISTINCT account, pool AS machine FROM ledger WHERE kind = 'grant') p
           CROSS JOIN LATERAL regulation_year(p.account, p.machine, 2024) y
           CROSS JOIN LATERAL pg_temp.hand(p.account, p.machine, y.first_day) h0
           CROSS JOIN LATERAL pg_temp.hand(p.account, p.machine, y.last_day) h1
           WHERE y.alloc <> h0.alloc OR NOT pg_temp.near(y.tmc, h0.tmc) OR NOT pg_temp.near(y.tc, h1.tc)
              OR NOT pg_temp.near(y.tmc, h1.tmc)),
          NULL, 'regulation_year(2024): each interval''s Alloc and TMC as by hand on its first and last day, TC at its end');

-- ---- regulation_report: every row by hand; on a run's day, the figures the run decided on --
SELECT is((SELECT array_agg(format('%s %s %s: %s/%s/%s/%s/%s logged %s', r.account, r.machine, r.month, r.alloc, r.tmc,
                                   r.tc, r.consumption, r.status, r.logged_outcome) ORDER BY r.account, r.month)
           FROM regulation_report r
           CROSS JOIN LATERAL pg_temp.hand(r.account, r.machine, r.as_of,
                                           ARRAY(SELECT g.entry_id FROM regulation_log g
                                                 WHERE g.run_date = r.as_of AND g.entry_id IS NOT NULL)) h
           LEFT JOIN regulation_log g ON g.account = r.account AND g.machine = r.machine AND g.run_date = r.as_of
           WHERE r.month < '2025-03-01'
             AND (r.alloc <> h.alloc OR NOT pg_temp.near(r.tmc, h.tmc) OR NOT pg_temp.near(r.tc, h.tc)
                  OR NOT pg_temp.near(r.consumption, h.consumption)
                  OR r.status IS DISTINCT FROM CASE WHEN h.granted >= 1000000 THEN h.status END
                  OR r.logged_outcome IS DISTINCT FROM CASE WHEN g.run = 'monthly' THEN g.outcome END)),
          NULL, 'regulation_report: every month of both years as by hand, and as logged');
SELECT is((SELECT count(*) FROM outbox),
          (SELECT count(*) FROM regulation_log WHERE outcome IN ('warning', 'retraction')),
          'one message per warning and retraction, and no other');

SELECT * FROM finish();
ROLLBACK;
