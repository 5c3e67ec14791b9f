-- make bench: N rows (psql variable jobs) for the aggregates, spread over the 2 000 accounts
-- and the three years: one row is what each aggregate takes (an allocation event for tc and
-- tmc, a month for window_quota, a bank entry for quarter_balance, a dated usage for
-- decayed_usage). All of them read the same table, and their references (sum()) too.
SET client_min_messages = warning;
CREATE TABLE bench.agg_rows (
    account     text NOT NULL,
    kind        text NOT NULL,
    ts          timestamptz NOT NULL,
    valid_from  date NOT NULL,
    valid_until date NOT NULL,
    month       date NOT NULL,
    amount      float8 NOT NULL,
    allowance   float8 NOT NULL
);
INSERT INTO bench.agg_rows
SELECT a.name,
       CASE WHEN bench.u(i, 52) < 0.95 THEN 'charge' WHEN bench.u(i, 52) < 0.98 THEN 'deposit'
            WHEN bench.u(i, 52) < 0.99 THEN 'transfer' ELSE 'refund' END,
       t.ts, t.ts::date, t.ts::date + 31 + floor(bench.u(i, 53) * 365)::integer,
       date_trunc('month', t.ts)::date,
       round(exp(bench.u(i, 54) * ln(10000))::numeric, 3)::float8,
       round((exp(bench.u(i, 54) * ln(10000)) * (0.5 + bench.u(i, 55)))::numeric, 3)::float8
FROM generate_series(1, :jobs::bigint) AS i
CROSS JOIN bench.site s
CROSS JOIN LATERAL (SELECT s.t0 + bench.u(i, 51) * (s.t1 - s.t0) AS ts) t
JOIN bench.acct a ON a.n = 1 + floor(bench.u(i, 50) * 2000)::integer;
VACUUM ANALYZE bench.agg_rows;
