-- make bench: jobs lo..hi of the site's N (psql variables lo, hi, jobs, file), written as
-- sacct-like COPY text to `file` by the server. Set-based and hash-based (bench.u), so chunks
-- can be generated concurrently and the same seed always gives the same jobs.
--
-- Centre of a job by share of the jobs; account inside the centre skewed towards the first
-- ones (u^2: a few heavy projects, many small ones); partition by share; size log-uniform up
-- to max_nodes nodes (GPU jobs: 1 to all GPUs of max_nodes nodes, skewed small); duration
-- log-uniform from 1 minute to 48 hours; starts spread evenly over the three years in job
-- number order (a ledger is appended in time order), jobs all end before the anchor.
-- month_jobs (0 unless given): the last month_jobs jobs start instead in the anchor's month
-- (site time zone), spread evenly up to 49 hours before the anchor: an HTC site's month.
SET client_min_messages = warning;
\if :{?month_jobs}
\else
\set month_jobs 0
\endif
SET TimeZone = 'UTC';
SET max_parallel_workers_per_gather = 0;

COPY (
    WITH centre (centre, first, cnt, p_lo, p_hi) AS (
        VALUES ('genci', 1, 300, 0.00::float8, 0.15::float8), ('hlrn', 301, 200, 0.15, 0.43),
               ('hlrnp', 501, 500, 0.43, 0.50), ('rwth', 1001, 400, 0.50, 0.70),
               ('cc', 1401, 400, 0.70, 0.90), ('lqcd', 1801, 200, 0.90, 1.01)
    )
    SELECT p.cluster, g.i, a.name,
           CASE a.centre
               WHEN 'hlrn' THEN 'hbk' || lpad((((a.k * 7 + floor(bench.u(g.i, 19) * (2 + a.k % 4))::integer * 13) % 500) + 1)::text, 4, '0')
               WHEN 'hlrnp' THEN a.name
               ELSE a.name || '_u' || (1 + floor(bench.u(g.i, 19) * a.users))::integer
           END,
           p.partition,
           t.start - bench.u(g.i, 18) * interval '2 hours',
           t.start, t.start + t.minutes * interval '1 minute',
           CASE WHEN p.gpus_per_node > 0
                THEN format('billing=%s,cpu=%s,gres/gpu=%s,mem=%sG,node=%s', z.cores, z.cores, z.gpus, z.gpus * 24,
                            ceil(z.gpus::numeric / p.gpus_per_node))
                ELSE format('billing=%s,cpu=%s,mem=%sG,node=%s', z.cores, z.cores,
                            z.cores * (1 + floor(bench.u(g.i, 17) * 6)::integer),
                            ceil(z.cores::numeric / p.cores_per_node))
           END,
           CASE WHEN bench.u(g.i, 16) < 0.05 THEN 'FAILED' WHEN bench.u(g.i, 16) < 0.08 THEN 'TIMEOUT' ELSE 'COMPLETED' END
    FROM generate_series(:lo::bigint, :hi::bigint) AS g(i)
    CROSS JOIN bench.site s
    CROSS JOIN LATERAL (SELECT date_trunc('month', s.t1 AT TIME ZONE 'Europe/Berlin') AT TIME ZONE 'Europe/Berlin' AS first) m
    JOIN centre c ON bench.u(g.i, 10) >= c.p_lo AND bench.u(g.i, 10) < c.p_hi
    JOIN bench.acct a ON a.n = c.first + floor(c.cnt * bench.u(g.i, 11) ^ 2)::integer
    JOIN bench.part p ON p.grp = a.grp AND bench.u(g.i, 12) >= p.p_lo AND bench.u(g.i, 12) < p.p_hi
    CROSS JOIN LATERAL (
        SELECT ceil(exp(bench.u(g.i, 13) * ln(2880)))::integer AS minutes,
               date_trunc('second',
                          CASE WHEN g.i <= :jobs::bigint - :month_jobs::bigint
                               THEN s.t0 + ((g.i - 1 + bench.u(g.i, 14)) / (:jobs::bigint - :month_jobs::bigint)::float8)
                                           * (s.t1 - s.t0 - interval '49 hours')
                               ELSE m.first + ((g.i - 1 - (:jobs::bigint - :month_jobs::bigint) + bench.u(g.i, 14))
                                               / :month_jobs::float8) * (s.t1 - m.first - interval '49 hours') END) AS start
    ) t
    CROSS JOIN LATERAL (
        SELECT least(p.max_nodes * p.cores_per_node,
                     ceil(exp(bench.u(g.i, 15) * ln(p.max_nodes * p.cores_per_node)))::integer) AS cores,
               least(p.max_nodes * p.gpus_per_node,
                     1 + floor(bench.u(g.i, 15) ^ 2 * p.max_nodes * p.gpus_per_node)::integer) AS gpus
    ) z0
    CROSS JOIN LATERAL (
        SELECT CASE WHEN p.gpus_per_node > 0 THEN z0.gpus * (p.cores_per_node / p.gpus_per_node) ELSE z0.cores END AS cores,
               z0.gpus
    ) z
) TO :'file';
