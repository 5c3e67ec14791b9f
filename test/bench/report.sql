-- make bench: the table, from bench.timing (every run of every variant) and bench.pair.
-- psql variable jobs: the scale (targets "at 10M" are judged at the scale that ran).
\pset footer off
\pset format aligned
\pset tuples_only off
WITH med AS (
    SELECT grp, variant, count(*) AS runs,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) AS ms
    FROM bench.timing
    WHERE NOT warmup
    GROUP BY grp, variant
), line AS (
    SELECT p.ord, p.name, r.rows, f.runs, f.ms AS fast_ms, p.ref_label, x.ms AS ref_ms, f.ms / nullif(x.ms, 0) AS ratio,
           p.target,
           CASE
               WHEN f.ms IS NULL OR x.ms IS NULL THEN 'not run'
               WHEN p.target LIKE 'ratio <= %' THEN
                   CASE WHEN f.ms / x.ms <= split_part(p.target, ' ', 3)::float8 THEN 'met' ELSE 'MISSED' END
               WHEN p.target LIKE 'ratio < %' THEN
                   CASE WHEN f.ms / x.ms < split_part(p.target, ' ', 3)::float8 THEN 'met' ELSE 'MISSED' END
               WHEN p.target LIKE 'ms < %' THEN
                   CASE WHEN f.ms < split_part(p.target, ' ', 3)::float8 THEN 'met' ELSE 'MISSED' END
                   || CASE WHEN p.target LIKE '%10M' AND :jobs < 10000000 THEN ' (at ' || :jobs || ')' ELSE '' END
               ELSE ''
           END AS verdict
    FROM bench.pair p
    LEFT JOIN med f ON f.grp = p.grp AND f.variant = p.fast
    LEFT JOIN med x ON x.grp = p.grp AND x.variant = p.ref
    LEFT JOIN bench.grp_rows r ON r.grp = p.grp
)
SELECT name AS "case", rows, runs,
       CASE WHEN fast_ms < 10 THEN to_char(fast_ms, 'FM990.000') ELSE to_char(fast_ms, 'FM999999990') END AS "median ms",
       ref_label AS reference,
       CASE WHEN ref_ms < 10 THEN to_char(ref_ms, 'FM990.000') ELSE to_char(ref_ms, 'FM999999990') END AS "ref median ms",
       to_char(ratio, 'FM99990.00') AS ratio, target, verdict
FROM line
ORDER BY ord;
