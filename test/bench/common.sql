-- make bench: helpers every benchmark database gets (schema bench). psql variables: seed.
--   bench.u(i, k)        deterministic uniform [0, 1) from a row number, a stream and the seed
--   bench.time(...)      one timed run of a statement (server side), recorded in pg_temp.timing
--   bench.capture(sql)   a query's rows as jsonb, in a subtransaction that is rolled back
--   bench.compare(...)   the rows of a fast path and of its reference, compared by key
SET client_min_messages = warning;
CREATE SCHEMA bench;

-- Hash-based, not random(): the same seed gives the same site whatever the plan (parallel
-- generation included) and whatever the order rows are produced in.
CREATE FUNCTION bench.u(i bigint, k integer) RETURNS float8
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN (pg_catalog.hashint8extended(i, :seed::bigint * 1000 + k) & 2147483647)::float8 / 2147483648.0;

-- Whether run `run` of a variant is still to be made (see bench.time).
CREATE FUNCTION bench.will_run(variant text, run integer, budget_ms float8, runs integer) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
    DECLARE
        done integer;
        used float8;
    BEGIN
        SELECT count(*) FILTER (WHERE t.variant = will_run.variant AND NOT t.warmup), coalesce(sum(t.ms), 0)
        INTO done, used
        FROM pg_temp.timing t;
        RETURN NOT (done >= runs OR (done >= 1 AND used > budget_ms));
    END
    $$;

-- One run of `sql`, timed on the server (no client transfer). Skipped (NULL) once the variant
-- has `runs` counted runs, or when the group has used its budget and the variant has one.
-- Run 0 is a warm-up (not counted) when it is cheap (< 2 s) and more than one run is asked
-- for; a costly run 0 counts. With `rollback`, what the statement wrote is rolled back
-- (a subtransaction), so that procedures can be timed again and again on the same data.
CREATE FUNCTION bench.time(variant text, run integer, sql text, rollback boolean, budget_ms float8, runs integer)
    RETURNS text
    LANGUAGE plpgsql
    AS $$
    DECLARE
        t0 timestamptz;
        ms float8;
        warm boolean;
    BEGIN
        IF NOT bench.will_run(variant, run, budget_ms, runs) THEN
            RETURN NULL;
        END IF;
        BEGIN
            t0 := clock_timestamp();
            EXECUTE sql;
            ms := 1000 * extract(epoch FROM clock_timestamp() - t0);
            IF rollback THEN
                RAISE EXCEPTION USING ERRCODE = 'HB000';
            END IF;
        EXCEPTION WHEN SQLSTATE 'HB000' THEN
            NULL;
        END;
        warm := run = 0 AND ms < 2000 AND runs > 1;
        INSERT INTO pg_temp.timing VALUES (variant, run, ms, warm);
        RETURN format('%s|%s|%s|%s', variant, run, round(ms::numeric, 3), warm);
    END
    $$;

-- EXPLAIN ANALYZE of `sql` as it runs inside bench.time (same settings), rolled back.
CREATE FUNCTION bench.explain(sql text) RETURNS SETOF text
    LANGUAGE plpgsql
    AS $$
    DECLARE
        lines text[] := '{}';
        line text;
    BEGIN
        BEGIN
            FOR line IN EXECUTE 'EXPLAIN (ANALYZE, BUFFERS) ' || sql LOOP
                lines := lines || line;
            END LOOP;
            RAISE EXCEPTION USING ERRCODE = 'HB000';
        EXCEPTION WHEN SQLSTATE 'HB000' THEN
            NULL;
        END;
        RETURN QUERY SELECT unnest(lines);
    END
    $$;

-- The rows of a query as a jsonb array, computed in a subtransaction that is rolled back
-- (the query may call a procedure through a function: its writes vanish).
CREATE FUNCTION bench.capture(sql text, gucs text[] DEFAULT '{}') RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
    DECLARE
        rows jsonb;
        guc text;
    BEGIN
        BEGIN
            FOREACH guc IN ARRAY coalesce(gucs, '{}') LOOP
                PERFORM set_config(split_part(guc, '=', 1), split_part(guc, '=', 2), true);
            END LOOP;
            EXECUTE format('SELECT coalesce(jsonb_agg(to_jsonb(q)), ''[]'') FROM (%s) q', sql) INTO rows;
            RAISE EXCEPTION USING ERRCODE = 'HB000';
        EXCEPTION WHEN SQLSTATE 'HB000' THEN
            NULL;
        END;
        RETURN rows;
    END
    $$;

-- Two JSON values agree: equal, or numbers within `tol` relative to max(1, |a|, |b|).
CREATE FUNCTION bench.same(a jsonb, b jsonb, tol float8) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    RETURN CASE
        WHEN a IS NULL OR b IS NULL THEN a IS NOT DISTINCT FROM b
        WHEN jsonb_typeof(a) = 'number' AND jsonb_typeof(b) = 'number' THEN
            abs(a::text::float8 - b::text::float8)
                <= tol * greatest(1, abs(a::text::float8), abs(b::text::float8))
        ELSE a = b
    END;

-- Compares the rows of two queries, joined on the columns `keys` (the rest compared with
-- bench.same). Returns 'ok: N rows' or 'MISMATCH: ...' with the first differences.
CREATE FUNCTION bench.compare(fast_sql text, ref_sql text, keys text[], fast_gucs text[] DEFAULT '{}',
                              ref_gucs text[] DEFAULT '{}', tol float8 DEFAULT 2e-6) RETURNS text
    LANGUAGE plpgsql
    AS $$
    DECLARE
        a jsonb := bench.capture(fast_sql, fast_gucs);
        b jsonb := bench.capture(ref_sql, ref_gucs);
        n_a integer := jsonb_array_length(a);
        n_b integer := jsonb_array_length(b);
        dup text;
        bad integer;
        shown text;
    BEGIN
        WITH ea AS (
            SELECT (SELECT string_agg(coalesce(e ->> k, '<null>'), '|' ORDER BY o)
                    FROM unnest(keys) WITH ORDINALITY AS x(k, o)) AS key
            FROM jsonb_array_elements(a) e
            UNION ALL
            SELECT (SELECT string_agg(coalesce(e ->> k, '<null>'), '|' ORDER BY o)
                    FROM unnest(keys) WITH ORDINALITY AS x(k, o)) || ' (reference)'
            FROM jsonb_array_elements(b) e
        )
        SELECT string_agg(key, ', ') INTO dup
        FROM (SELECT key FROM ea GROUP BY key HAVING count(*) > 1 LIMIT 3) d;
        IF dup IS NOT NULL THEN
            RETURN 'MISMATCH: key not unique: ' || dup;
        END IF;
        WITH ea AS (
            SELECT e, (SELECT string_agg(coalesce(e ->> k, '<null>'), '|' ORDER BY o)
                       FROM unnest(keys) WITH ORDINALITY AS x(k, o)) AS key
            FROM jsonb_array_elements(a) e
        ), eb AS (
            SELECT e, (SELECT string_agg(coalesce(e ->> k, '<null>'), '|' ORDER BY o)
                       FROM unnest(keys) WITH ORDINALITY AS x(k, o)) AS key
            FROM jsonb_array_elements(b) e
        ), joined AS (
            SELECT coalesce(ea.key, eb.key) AS key, ea.e AS ae, eb.e AS be
            FROM ea FULL JOIN eb ON ea.key = eb.key
        ), diffs AS (
            SELECT j.key,
                   CASE WHEN j.ae IS NULL THEN 'only in reference'
                        WHEN j.be IS NULL THEN 'only in fast path'
                        ELSE (SELECT string_agg(format('%s: %s vs %s', f.k, j.ae -> f.k, j.be -> f.k), '; ')
                              FROM (SELECT jsonb_object_keys(j.ae) AS k UNION SELECT jsonb_object_keys(j.be)) f
                              WHERE NOT bench.same(j.ae -> f.k, j.be -> f.k, tol))
                   END AS what
            FROM joined j
        )
        SELECT count(*), string_agg(format('[%s] %s', d.key, d.what), ' | ')
                             FILTER (WHERE d.rn <= 3)
        INTO bad, shown
        FROM (SELECT d.*, row_number() OVER (ORDER BY d.key) AS rn FROM diffs d WHERE d.what IS NOT NULL) d;
        IF bad > 0 THEN
            RETURN format('MISMATCH: %s of %s/%s rows differ: %s', bad, n_a, n_b, shown);
        END IF;
        IF n_a = 0 THEN
            RETURN 'MISMATCH: both sides are empty (nothing was checked)';
        END IF;
        RETURN format('ok: %s rows', n_a);
    END
    $$;

-- After CREATE EXTENSION: the job table (newer versions create it on request).
DO $$
BEGIN
    IF to_regclass('hpcacct.job') IS NULL THEN
        EXECUTE 'SELECT hpcacct.create_job_table()';
    END IF;
END
$$;

-- ---- regulate(): what a run wrote, and the job-by-job decisions (admin and main sites) ----

-- What a regulation run wrote (procedure or reference), for the correctness check.
CREATE FUNCTION bench.regulate_outcome(how text, d date)
    RETURNS TABLE (account text, machine text, outcome text, alloc numeric, granted numeric, consumption float8,
                   tc float8, tmc float8, delta float8, retracted numeric, booked numeric, note text)
    LANGUAGE plpgsql
    AS $$
    BEGIN
        IF how = 'procedure' THEN
            CALL hpcacct.regulate(d);
        ELSE
            PERFORM bench.regulate_hand(d);
        END IF;
        RETURN QUERY
        SELECT g.account, g.machine, g.outcome, g.alloc, g.granted, g.consumption, g.tc, g.tmc, g.delta, g.retracted,
               l.amount, l.note
        FROM hpcacct.regulation_log g
        LEFT JOIN hpcacct.ledger l ON l.entry_id = g.entry_id
        WHERE g.run_date = d;
    END
    $$;

-- The decisions of a monthly run as regulate() made them before it read the consumption
-- rollup (issue 19): the year's charges one by one, each charge's terms summed in numeric
-- (its amount when wholly inside the period, else its share before the 16th minus its share
-- before 1 January). Read-only; every figure as text, so that the check is exact.
CREATE FUNCTION bench.regulate_job_by_job(d date)
    RETURNS TABLE (account text, machine text, outcome text, alloc text, granted text, consumption text, tc text,
                   tmc text, delta text, retracted text)
    LANGUAGE sql
    AS $$
        WITH cfg AS MATERIALIZED (
            SELECT make_date(extract(year FROM d)::integer, 1, 1) AS year_start, hpcacct.site_timezone() AS tz
        ), b AS MATERIALIZED (
            SELECT cfg.year_start, cfg.year_start::timestamp AT TIME ZONE cfg.tz AS b1,
                   (d + 1)::timestamp AT TIME ZONE cfg.tz AS b2
            FROM cfg
        ), events AS (
            SELECT l.account, l.pool AS machine, s.monthly_threshold,
                   sum(l.amount) AS alloc,
                   coalesce(sum(l.amount) FILTER (WHERE l.kind <> 'retraction'), 0) AS granted,
                   coalesce(hpcacct.tmc(l.valid_from, l.valid_until, l.amount::float8, d, s.month_convention), 0) AS tmc,
                   coalesce(hpcacct.tc(l.valid_from, l.valid_until, l.amount::float8, d, s.month_convention)
                            - hpcacct.tc(l.valid_from, l.valid_until, l.amount::float8, b.year_start - 1, s.month_convention),
                            0) AS tc
            FROM hpcacct.ledger l
            JOIN hpcacct.regulation_machine s ON s.machine = l.pool
            CROSS JOIN b
            WHERE l.kind IN ('grant', 'supplement', 'retraction') AND l.valid_from <= d AND l.valid_until >= b.year_start
            GROUP BY l.account, l.pool, s.monthly_threshold
        ), used AS (
            SELECT l.account, coalesce(r.pool, r.cluster) AS machine,
                   sum(CASE WHEN l.job_start >= b.b1 AND l.job_end <= b.b2 THEN l.amount
                            ELSE l.amount * hpcacct.period_share(l.job_start, l.job_end, '-infinity', b.b2)
                                 - CASE WHEN l.job_start < b.b1
                                        THEN l.amount * hpcacct.period_share(l.job_start, l.job_end, '-infinity', b.b1)
                                        ELSE 0 END
                       END)::float8 AS amount
            FROM hpcacct.ledger l
            JOIN hpcacct.resource r USING (resource_id)
            CROSS JOIN b
            WHERE l.kind = 'charge' AND l.job_start < b.b2 AND l.job_end >= b.b1
            GROUP BY 1, 2
        ), figures AS (
            SELECT e.*, coalesce(u.amount, 0) AS consumption,
                   hpcacct.regulation_status(coalesce(u.amount, 0), e.tc, e.tmc) AS outcome
            FROM events e
            LEFT JOIN used u USING (account, machine)
            WHERE e.granted >= e.monthly_threshold
        )
        SELECT f.account, f.machine, f.outcome, f.alloc::text, f.granted::text, f.consumption::text, f.tc::text,
               f.tmc::text, (f.consumption - f.tc)::text,
               (CASE WHEN f.outcome = 'retraction' THEN round(f.tmc::numeric, 6) ELSE 0 END)::numeric(20, 6)::text
        FROM figures f
    $$;
