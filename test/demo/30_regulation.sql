-- make demo, GENCI / IDRIS regulation (rules §2): project P of the document on Ada in 2024,
-- four other projects, a year of jobs, and the regulation runs pg_cron would make.
\pset footer off
SET search_path = public, hpcacct;
SET client_min_messages = warning;

INSERT INTO regulation_machine (machine, monthly_threshold, description) VALUES
    ('turing', 5000000, 'IDRIS Turing (IBM Blue Gene/Q)'),
    ('ada', 1000000, 'IDRIS Ada (IBM x3750)');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, exclusive, description) VALUES
    ('ada', 'cpu', 'cpu=32,mem=128G,node=1', 'cpu=1', 1, 'hours', false, 'IDRIS Ada compute nodes');
INSERT INTO account (name, kind, description) VALUES
    ('P', 'project', 'project P of the GENCI document: a slow start, then regular'),
    ('Q', 'project', 'large allocation, never used'),
    ('R', 'project', 'small allocation, never used'),
    ('S', 'project', 'small allocation, not used, justified in May'),
    ('T', 'project', 'small allocation, used from January');

-- Allocations: P's as in the document, except its retraction of 15 March, which the
-- regulation run of that day makes. The second session and the supplement are booked with
-- their validity (from 1 July, from 16 November).
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until, note) VALUES
    ('P', 'grant',      1200000, 'hours', 'ada', '2024-01-01', '2024-12-31', 'first DARI session'),
    ('P', 'grant',       400000, 'hours', 'ada', '2024-07-01', '2024-12-31', 'second DARI session'),
    ('P', 'supplement',  100000, 'hours', 'ada', '2024-11-16', '2024-12-31', 'supplement requested on 15 November'),
    ('Q', 'grant',      1200000, 'hours', 'ada', '2024-01-01', '2024-12-31', 'first DARI session'),
    ('R', 'grant',       600000, 'hours', 'ada', '2024-01-01', '2024-12-31', 'first DARI session'),
    ('S', 'grant',       600000, 'hours', 'ada', '2024-01-01', '2024-12-31', 'first DARI session'),
    ('T', 'grant',       400000, 'hours', 'ada', '2024-01-01', '2024-12-31', 'first DARI session');

-- One job a day (local midnight to midnight). P starts on 16 March, catches up until
-- 15 April, then follows its TMC; T runs 60 cores from January to May.
INSERT INTO job (cluster, jobid, account, "user", partition, submit, start, "end", alloctres, state)
SELECT 'ada', 'ada-' || j.account || '-' || to_char(j.day, 'MMDD'), j.account, j.account || '-user', 'cpu',
       j.day::timestamp AT TIME ZONE 'Europe/Berlin', j.day::timestamp AT TIME ZONE 'Europe/Berlin',
       (j.day + 1)::timestamp AT TIME ZONE 'Europe/Berlin', ('cpu=' || j.cores)::tres, 'COMPLETED'
FROM (
    SELECT d::date AS day, 'P' AS account,
           CASE WHEN d < '2024-04-16' THEN 420 WHEN d < '2024-07-01' THEN 125
                WHEN d < '2024-11-16' THEN 215 ELSE 310 END AS cores
    FROM generate_series(date '2024-03-16', date '2024-12-31', interval '1 day') AS d
    UNION ALL
    SELECT d::date, 'T', 60
    FROM generate_series(date '2024-01-01', date '2024-05-31', interval '1 day') AS d
) j;

\echo
\echo '== GENCI regulation settings per machine (hpcacct.regulation_machine) =='
SELECT machine, monthly_threshold, annual_warning_percent AS "warn %", annual_retraction_percent AS "retract %",
       month_convention, description
FROM regulation_machine ORDER BY machine;

\echo
\echo '== A year of regulation: CALL hpcacct.regulate(d) on each regulation date of 2024 =='
\echo '   (the 15th: monthly regulation of P and Q; 1 May: annual warning; 1 June: annual retraction)'
-- S sends a justification for its under-consumption in May, after the warning.
DO $$
DECLARE
    d date;
BEGIN
    FOR d IN SELECT g::date FROM generate_series(date '2024-01-01', date '2024-12-31', interval '1 day') AS g
             WHERE hpcacct.regulation_run(g::date) IS NOT NULL ORDER BY 1 LOOP
        IF d = '2024-06-01' THEN
            INSERT INTO hpcacct.exoneration (account, machine, year, reason, received, note)
            VALUES ('S', 'ada', 2024, 'justification', '2024-05-24', 'thesis students arrive in June');
        END IF;
        CALL hpcacct.regulate(d);
    END LOOP;
END
$$;
SELECT run_date, run, string_agg(account || ': ' || outcome, ', ' ORDER BY account) AS outcomes
FROM regulation_log GROUP BY run_date, run ORDER BY run_date;

\echo
\echo '== Project P in 2024, as the GENCI document shows it (hpcacct.regulation_year) =='
WITH y AS (SELECT * FROM regulation_year('P', 'ada', 2024)),
     events AS (  -- each event's months: amount / its own TMC on its first day
        SELECT l.entry_id, l.valid_from, l.amount, l.amount / m.tmc AS months
        FROM ledger l
        CROSS JOIN LATERAL (SELECT tmc(v.f, v.u, v.a, v.f)
                            FROM (VALUES (l.valid_from, l.valid_until, l.amount::float8)) AS v(f, u, a)) AS m(tmc)
        WHERE l.account = 'P' AND l.pool = 'ada' AND l.kind IN ('grant', 'supplement', 'retraction')),
     starting AS (  -- the events that start each interval, as the document writes them
        SELECT e.valid_from AS first_day,
               string_agg(CASE WHEN e.amount < 0 THEN ' - ' ELSE ' + ' END
                          || replace(to_char(abs(e.amount), 'FM9,999,999'), ',', ' ') || ' / '
                          || trim(trailing '.' FROM to_char(e.months, 'FM99.9')),
                          '' ORDER BY e.entry_id) AS added
        FROM events e GROUP BY e.valid_from)
SELECT to_char(y.first_day, 'FMDD Mon') || ' to ' || to_char(y.last_day, 'FMDD Mon') AS period,
       replace(to_char(y.alloc, 'FM9,999,999'), ',', ' ') AS "Alloc",
       CASE WHEN lag(y.tmc) OVER w IS NULL THEN ltrim(s.added, ' +')
            ELSE replace(to_char(round(lag(y.tmc) OVER w), 'FM9,999,999'), ',', ' ') || s.added END
       || ' = ' || replace(to_char(round(y.tmc), 'FM9,999,999'), ',', ' ') AS "TMC",
       replace(to_char(round(y.tc), 'FM9,999,999'), ',', ' ') AS "TC at the end"
FROM y LEFT JOIN starting s USING (first_day)
WINDOW w AS (ORDER BY y.first_day)
ORDER BY y.first_day;

\echo
\echo '== P: what the monthly runs found and did (hpcacct.regulation_log) =='
SELECT run_date, outcome, round(alloc) AS alloc, round(consumption::numeric) AS consumption,
       round(tc::numeric) AS tc, round(tmc::numeric) AS tmc, round(delta::numeric) AS delta, round(retracted) AS retracted
FROM regulation_log WHERE account = 'P' ORDER BY run_date;

\echo
\echo '== Q, which never consumes: a retraction of TMC every month from 15 March =='
SELECT run_date, outcome, round(alloc) AS alloc, round(tc::numeric) AS tc, round(tmc::numeric) AS tmc,
       round(delta::numeric) AS delta, round(retracted) AS retracted
FROM regulation_log WHERE account = 'Q' ORDER BY run_date;

\echo
\echo '== Annual regulation of the small allocations (consumption over January-April, then January-May) =='
SELECT g.run_date, g.account, g.outcome, round(g.alloc) AS alloc, round(g.consumption::numeric) AS consumption,
       round(g.used_percent::numeric, 1) AS "used %", round(g.retracted) AS retracted, x.reason AS exonerated_for
FROM regulation_log g
LEFT JOIN exoneration x ON x.account = g.account AND x.machine = g.machine AND g.outcome = 'exonerated'
WHERE g.run <> 'monthly' ORDER BY g.run_date, g.account;

\echo
\echo '== The retractions the runs booked in the ledger =='
SELECT account, kind, amount, unit, valid_from, valid_until, note
FROM ledger WHERE kind = 'retraction' AND pool = 'ada' ORDER BY valid_from, account;

\echo
\echo '== Running it again for 15 March changes nothing =='
SET client_min_messages = notice;
CALL regulate('2024-03-15');
SET client_min_messages = warning;

\echo
\echo '== For a portal: P month by month at the 15th (hpcacct.regulation_report) =='
SELECT month, regulation, round(alloc) AS alloc, round(tmc::numeric) AS tmc, round(tc::numeric) AS tc,
       round(consumption::numeric) AS consumption, round(delta::numeric) AS delta, status, logged_outcome
FROM regulation_report WHERE account = 'P' AND machine = 'ada' ORDER BY month;
