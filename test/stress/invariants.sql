-- Invariants that must hold after concurrent or interrupted work. One row per invariant:
-- (name, ok, detail). The driver counts the rows with ok = true.
SET search_path = public, hpcacct;
WITH per_job AS (
    SELECT j.cluster, j.jobid,
           round(charge(j.alloctres, j."end" - j.start, r.bundle, r.rate,
                         CASE WHEN r.exclusive THEN r.node END)::numeric, 6) AS expected
    FROM job j JOIN resource r ON r.cluster = j.cluster AND r.partition = j.partition AND r.valid @> j.start
    WHERE j.cluster = 'stress'
), booked AS (
    SELECT cluster, jobid, sum(amount) AS booked
    FROM ledger WHERE kind = 'charge' AND cluster = 'stress' GROUP BY cluster, jobid
), mismatches AS (
    SELECT coalesce(p.jobid, b.jobid) AS jobid, p.expected, b.booked
    FROM per_job p FULL JOIN booked b USING (cluster, jobid)
    WHERE coalesce(p.expected, 0) <> coalesce(b.booked, 0)
)
SELECT 'every job''s ledger entries sum to its charge, deleted jobs to zero' AS invariant,
       count(*) = 0 AS ok,
       coalesce(left(string_agg(jobid || ': ' || coalesce(expected, 0) || ' vs ' || coalesce(booked, 0), ', '), 300),
                (SELECT count(*) || ' jobs' FROM job WHERE cluster = 'stress')) AS detail
FROM mismatches
UNION ALL
SELECT 'the ledger total equals the total of the jobs'' charges',
       (SELECT coalesce(sum(amount), 0) FROM ledger WHERE kind = 'charge' AND cluster = 'stress')
       = (SELECT coalesce(sum(round(charge(j.alloctres, j."end" - j.start, r.bundle, r.rate)::numeric, 6)), 0)
          FROM job j JOIN resource r ON r.cluster = j.cluster AND r.partition = j.partition
          WHERE j.cluster = 'stress'),
       ''
UNION ALL
SELECT 'no personal allotment was deposited twice for a quarter',
       NOT EXISTS (SELECT 1 FROM ledger l JOIN account a ON a.name = l.account
                   WHERE a.kind = 'personal' AND l.kind = 'deposit'
                   GROUP BY l.account, l.valid_from HAVING sum(l.amount) > 2500),
       ''
UNION ALL
SELECT 'no quarter-start action was logged twice',
       NOT EXISTS (SELECT 1 FROM quarter_log GROUP BY quarter, account, action, target_quarter, username
                   HAVING count(*) > 1),
       ''
UNION ALL
SELECT 'no regulation retraction was booked twice',
       NOT EXISTS (SELECT 1 FROM ledger WHERE kind = 'retraction'
                   GROUP BY account, cluster, valid_from HAVING count(*) > 1)
       AND (SELECT count(*) FROM ledger WHERE kind = 'retraction')
           = (SELECT count(*) FROM regulation_log WHERE retracted > 0),
       (SELECT count(*) || ' retractions booked' FROM ledger WHERE kind = 'retraction');
