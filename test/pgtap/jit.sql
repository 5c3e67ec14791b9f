-- JIT inlining reads the bitcode installed with the library: every C function must survive it.
-- A C++ constructor emitted as an alias in that bitcode made LLVM abort the backend (SIGABRT)
-- while planning the inlining, and the postmaster then restarted every session; with the
-- default settings any query costed over jit_inline_above_cost that called tres_get (->),
-- tres * float8 or a tres comparison did so.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(2);

CREATE TEMP TABLE jit_rows AS
SELECT i, ('cpu=' || i || ',mem=' || i || 'G')::hpcacct.tres AS t, 'cpu=' || i AS s,
       date '2024-01-01' + i AS d, timestamptz '2024-01-01' + i * interval '1 hour' AS ts
FROM generate_series(1, 200) i;

-- Every C function of the extension, in expressions and aggregates, as one text.
CREATE FUNCTION pg_temp.everything(jit boolean) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    result text;
BEGIN
    PERFORM set_config('jit', jit::text, true);
    PERFORM set_config('jit_above_cost', '0', true);
    PERFORM set_config('jit_inline_above_cost', '0', true);
    PERFORM set_config('jit_optimize_above_cost', '0', true);
    PERFORM set_config('max_parallel_workers_per_gather', '0', true);
    SELECT concat_ws(' ',
               sum(t -> 'cpu'), sum((t * 2.0) -> 'mem'), sum((0.5 * t) -> 'cpu'), (hpcacct.sum(t + t))::text,
               count(*) FILTER (WHERE t < 'cpu=50'), count(*) FILTER (WHERE t <= 'cpu=50'),
               count(*) FILTER (WHERE t > 'cpu=50'), count(*) FILTER (WHERE t >= 'cpu=50'),
               count(*) FILTER (WHERE t = 'cpu=7,mem=7G'), count(*) FILTER (WHERE t <> 'cpu=7,mem=7G'),
               sum(hpcacct_internal.tres_cmp(t, 'cpu=50')), sum(hpcacct_internal.tres_hash(t)::numeric),
               sum(hpcacct_internal.tres_hash_extended(t, 1)::numeric),
               sum(hpcacct.equivalents(t, 'cpu=4,mem=8G')), sum(hpcacct.charge(t, '2 hours', 'cpu=1', 1.5)),
               sum(hpcacct.charge(t, '2 hours', 'cpu=1', 1.5, 'cpu=64,mem=256G')),
               count(hpcacct.sacct_tres(s)), count(hpcacct.tres_problem(s || 'x')), count(hpcacct.sacct_time(s, 'UTC')),
               sum(hpcacct.decay_weight(ts, '2024-02-01', '7 days')), sum(hpcacct.fairshare_factor(i, 50)),
               count(hpcacct.regulation_status(i, 100, 10)),
               hpcacct.tmc(d, d + 90, i, '2024-03-01'), hpcacct.tc(d, d + 90, i, '2024-03-01', 'day'),
               hpcacct.decayed_usage(ts, i, '2024-02-01', '7 days'),
               hpcacct.decayed_usage(ts, i, '2024-02-01', '7 days', 0.5, 4),
               hpcacct.window_quota(date_trunc('month', d)::date, 100, i, '2024-03-15')::text,
               hpcacct.quarter_balance('charge', d, i, '2024-03-01')::text)
    INTO result FROM jit_rows;
    RETURN result;
END $$;

SELECT is(pg_temp.everything(true), pg_temp.everything(false), 'every C function gives the same results with JIT inlining');

CREATE FUNCTION pg_temp.inlined() RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    plan json;
BEGIN
    PERFORM set_config('jit', 'on', true);
    PERFORM set_config('jit_above_cost', '0', true);
    PERFORM set_config('jit_inline_above_cost', '0', true);
    EXECUTE 'EXPLAIN (ANALYZE, FORMAT JSON) SELECT sum(t -> ''cpu'') FROM jit_rows' INTO plan;
    RETURN (plan -> 0 -> 'JIT' -> 'Options' ->> 'Inlining')::boolean;
END $$;
SELECT CASE WHEN pg_jit_available()
            THEN ok(pg_temp.inlined(), 'the query was JIT compiled with inlining')
            ELSE skip('JIT is not available on this server') END;

SELECT * FROM finish();
ROLLBACK;
