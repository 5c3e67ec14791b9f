-- make bench: the cases, in the main database (psql variables: anchor, ingest_file,
-- regulation_day, quarter). A group runs its variants side by side (alternating, RUNS times);
-- a pair is one line of the table: a variant, its reference, the target on their ratio.
SET client_min_messages = warning;

CREATE TABLE bench.grp (
    grp      text PRIMARY KEY,
    ord      integer NOT NULL,
    db       text NOT NULL,            -- main, ingest or admin
    rows_sql text NOT NULL,            -- the rows the case works on (shown in the table)
    explain  boolean NOT NULL DEFAULT true
);
CREATE TABLE bench.variant (
    grp      text NOT NULL REFERENCES bench.grp,
    variant  text NOT NULL,
    kind     text NOT NULL DEFAULT 'sql' CHECK (kind IN ('sql', 'pgbench')),
    settings text NOT NULL DEFAULT '',  -- SET commands before each run
    before   text NOT NULL DEFAULT '',  -- untimed statements before each run
    sql      text NOT NULL,             -- the timed statement (pgbench: the script)
    rollback boolean NOT NULL DEFAULT false,
    PRIMARY KEY (grp, variant)
);
CREATE TABLE bench.pair (
    ord        integer PRIMARY KEY,
    name       text NOT NULL,
    grp        text NOT NULL REFERENCES bench.grp,
    fast       text NOT NULL,
    ref        text NOT NULL,
    ref_label  text NOT NULL,
    target     text NOT NULL,           -- 'ratio <= x', 'ratio < x', 'ms < x' or '' (measured only)
    check_fast text,                    -- queries whose rows must agree (NULL: not checked)
    check_ref  text,
    check_keys text[],
    check_fast_gucs text[],             -- name=value settings for each side of the check
    check_ref_gucs text[],
    FOREIGN KEY (grp, fast) REFERENCES bench.variant,
    FOREIGN KEY (grp, ref) REFERENCES bench.variant
);

-- ---- ingestion: COPY of the first chunk of jobs (INGEST_JOBS) ----------------------------
INSERT INTO bench.grp VALUES ('ingest', 10, 'ingest', format('SELECT %s', :'ingest_jobs'), false);
INSERT INTO bench.variant (grp, variant, before, sql)
SELECT 'ingest', v, format('SELECT bench.prepare_ingest(%L); CHECKPOINT;', v), format('COPY hpcacct.job FROM %L', :'ingest_file')
FROM unnest(ARRAY['charge_jobs', 'charge_jobs_deferred', 'plain', 'plpgsql']) AS v;
-- deferred rollups: the roll_up_pending() after a deferred COPY (committed, untimed), and the
-- two in one timed run (the work moved out of the loader's transaction, not hidden)
INSERT INTO bench.variant (grp, variant, before, sql) VALUES
    ('ingest', 'roll_up_pending',
     format('SELECT bench.prepare_ingest(''charge_jobs_deferred''); COPY hpcacct.job FROM %L; CHECKPOINT;', :'ingest_file'),
     'SELECT hpcacct.roll_up_pending()'),
    ('ingest', 'deferred_and_roll_up', 'SELECT bench.prepare_ingest(''charge_jobs_deferred''); CHECKPOINT;',
     format('DO $do$ BEGIN COPY hpcacct.job FROM %L; PERFORM hpcacct.roll_up_pending(); END $do$', :'ingest_file'));
INSERT INTO bench.pair (ord, name, grp, fast, ref, ref_label, target, check_fast, check_ref, check_keys) VALUES
    (10, 'ingest: COPY, charge_jobs trigger', 'ingest', 'charge_jobs', 'plain', 'COPY, no trigger',
     'ratio <= 3.0', NULL, NULL, NULL),
    (11, 'ingest: COPY, charge_jobs trigger', 'ingest', 'charge_jobs', 'plpgsql', 'COPY, PL/pgSQL row trigger',
     'ratio <= 0.1',
     format('SELECT * FROM bench.ingest_ledger(''charge_jobs'', %L)', :'ingest_file'),
     format('SELECT * FROM bench.ingest_ledger(''plpgsql'', %L)', :'ingest_file'),
     '{cluster,jobid,amount}'),
    (14, 'ingest: COPY, charge_jobs trigger, rollups deferred', 'ingest', 'charge_jobs_deferred', 'plain',
     'COPY, no trigger', 'ratio <= 3.0', NULL, NULL, NULL),
    (15, 'ingest: roll_up_pending() after the deferred COPY', 'ingest', 'roll_up_pending', 'plain',
     'COPY, no trigger', '', NULL, NULL, NULL),
    (16, 'ingest: deferred COPY + roll_up_pending(), one run', 'ingest', 'deferred_and_roll_up', 'plain',
     'COPY, no trigger', '',
     format('SELECT * FROM bench.ingest_rollup(''charge_jobs_deferred'', %L)', :'ingest_file'),
     format('SELECT * FROM bench.ingest_rollup(''charge_jobs'', %L)', :'ingest_file'), '{k}');

-- ---- the sacct loader (issue 14): hpcacct-sacct load of the same jobs as sacct text ------
-- Timed by driver.sh around the command (client parsing, COPY into staging, load_sacct()),
-- against COPY of the same jobs (whole seconds, as sacct prints them) through the trigger;
-- then the same file again, every line unchanged. Checked there: the same ledger as the COPY.
INSERT INTO bench.grp VALUES ('loader', 12, 'ingest', 'SELECT count(*) FROM hpcacct.job', false);
INSERT INTO bench.variant (grp, variant, sql) VALUES
    ('loader', 'copy', '-- driver.sh: COPY hpcacct.job FROM the jobs file'),
    ('loader', 'load', '-- driver.sh: hpcacct-sacct load FILE'),
    ('loader', 'reload', '-- driver.sh: hpcacct-sacct load FILE, again');
INSERT INTO bench.pair (ord, name, grp, fast, ref, ref_label, target) VALUES
    (12, 'loader: hpcacct-sacct load', 'loader', 'load', 'copy', 'COPY, charge_jobs trigger', 'ratio <= 1.5'),
    (13, 'loader: the same lines again', 'loader', 'reload', 'load', 'hpcacct-sacct load, first', 'ratio <= 0.5');

-- ---- aggregates over N rows, GROUP BY account (2 000 groups) ---------------------------
CREATE TEMP TABLE aggs (name text, ord integer, call text, ref text, formula text, composite boolean GENERATED ALWAYS AS (name IN ('window_quota', 'quarter_balance')) STORED);
INSERT INTO aggs VALUES
    ('tc', 20, format('hpcacct.tc(valid_from, valid_until, amount, %L::date)', :'anchor'), 'sum(amount)',
     format('SELECT account, sum(bench.tc_row(valid_from, valid_until, amount, %L::date)) AS v FROM bench.agg_rows GROUP BY account', :'anchor')),
    ('tmc', 30, format('hpcacct.tmc(valid_from, valid_until, amount, %L::date)', :'anchor'), 'sum(amount)',
     format('SELECT account, sum(bench.tmc_row(valid_from, valid_until, amount, %L::date)) AS v FROM bench.agg_rows GROUP BY account', :'anchor')),
    ('window_quota', 40, format('hpcacct.window_quota(month, allowance, amount, %L::date)', :'anchor'),
     'sum(allowance), sum(amount)',
     format($f$
        SELECT s.account, f.*
        FROM (SELECT account,
                     max(month) >= m.at AND min(month) <= m.at AS inside,
                     coalesce(sum(allowance) FILTER (WHERE month = m.at - interval '1 month'), 0) AS a_prev,
                     coalesce(sum(allowance) FILTER (WHERE month = m.at), 0) AS a_cur,
                     coalesce(sum(allowance) FILTER (WHERE month = m.at + interval '1 month'), 0) AS a_next,
                     coalesce(sum(amount) FILTER (WHERE month = m.at - interval '1 month'), 0) AS c_prev,
                     coalesce(sum(amount) FILTER (WHERE month = m.at), 0) AS c_cur,
                     sum(allowance) AS total_a, sum(amount) AS total_c
              FROM bench.agg_rows, (SELECT date_trunc('month', %L::date)::date AS at) m
              GROUP BY account, m.at) s
        CROSS JOIN LATERAL bench.quota_figures(
            CASE WHEN s.inside THEN s.a_prev ELSE 0 END, CASE WHEN s.inside THEN s.a_cur ELSE 0 END,
            CASE WHEN s.inside THEN s.a_next ELSE 0 END, CASE WHEN s.inside THEN s.c_prev ELSE 0 END,
            CASE WHEN s.inside THEN s.c_cur ELSE 0 END, s.total_a,
            CASE WHEN s.inside THEN s.total_c ELSE 0 END) f  -- no blocking outside the period
     $f$, :'anchor')),
    ('quarter_balance', 50, -- exact: amounts in numeric, as the ledger's; the reference sums the same numerics
     format('hpcacct.quarter_balance(kind, month, amount::numeric, %L::date)', :'anchor'), 'sum(amount::numeric)',
     format($f$
        SELECT account, at AS quarter_start, round(d, 6) AS deposits, round(c, 6) AS charges,
               round(t, 6) AS transfers, round(r, 6) AS refunds,
               round(d + t + r - c, 6) AS balance
        FROM (SELECT account, coalesce(sum(amount::numeric) FILTER (WHERE kind = 'deposit' AND date_trunc('quarter', month) = q.at), 0) AS d,
                     coalesce(sum(amount::numeric) FILTER (WHERE kind = 'charge' AND date_trunc('quarter', month) = q.at), 0) AS c,
                     coalesce(sum(amount::numeric) FILTER (WHERE kind = 'transfer' AND date_trunc('quarter', month) = q.at), 0) AS t,
                     coalesce(sum(amount::numeric) FILTER (WHERE kind = 'refund' AND date_trunc('quarter', month) = q.at), 0) AS r,
                     q.at
              FROM bench.agg_rows, (SELECT date_trunc('quarter', %L::date)::date AS at) q
              GROUP BY account, q.at) s
     $f$, :'anchor')),
    ('decayed_usage', 60, format('hpcacct.decayed_usage(ts, amount, %L::timestamptz, interval ''7 days'')', :'anchor'),
     'sum(amount)',
     format($f$
        SELECT account, sum(amount * bench.exp2neg(extract(epoch FROM %1$L::timestamptz - ts)::float8 / (7 * 86400)))
                            FILTER (WHERE ts <= %1$L::timestamptz) AS v
        FROM bench.agg_rows GROUP BY account
     $f$, :'anchor'));

INSERT INTO bench.grp SELECT 'agg ' || name, ord, 'main', 'SELECT count(*) FROM bench.agg_rows' FROM aggs;
INSERT INTO bench.variant (grp, variant, settings, sql)
SELECT 'agg ' || a.name, v.variant, v.settings,
       format('SELECT account, %s FROM bench.agg_rows GROUP BY account', CASE WHEN v.variant LIKE 'sum%' THEN a.ref ELSE a.call END)
FROM aggs a
CROSS JOIN (VALUES
    ('serial', 'SET max_parallel_workers_per_gather = 0;'),
    ('parallel', 'SET max_parallel_workers_per_gather = 2; SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0;'),
    ('sum serial', 'SET max_parallel_workers_per_gather = 0;'),
    ('sum parallel', 'SET max_parallel_workers_per_gather = 2; SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0;')
) AS v(variant, settings);
-- The checks compare the aggregate with its rule in SQL (serial) and the parallel plan with
-- the serial one (composite results field by field).
CREATE FUNCTION pg_temp.agg_check(a aggs) RETURNS text LANGUAGE sql
    RETURN CASE WHEN a.composite
                THEN format('SELECT s.account, (s.v).* FROM (SELECT account, %s AS v FROM bench.agg_rows GROUP BY account) s', a.call)
                ELSE format('SELECT account, %s AS v FROM bench.agg_rows GROUP BY account', a.call) END;
INSERT INTO bench.pair (ord, name, grp, fast, ref, ref_label, target, check_fast, check_ref, check_keys)
SELECT a.ord, a.name || ', serial', 'agg ' || a.name, 'serial', 'sum serial', a.ref || ', serial', 'ratio <= 1.3',
       pg_temp.agg_check(a), a.formula, '{account}'::text[]
FROM aggs a
UNION ALL
SELECT a.ord + 1, a.name || ', parallel', 'agg ' || a.name, 'parallel', 'sum parallel', a.ref || ', parallel', 'ratio <= 1.3',
       NULL, NULL, NULL::text[]
FROM aggs a
UNION ALL
SELECT a.ord + 2, a.name || ', parallel vs serial', 'agg ' || a.name, 'parallel', 'serial', a.name || ', serial', 'ratio < 1',
       pg_temp.agg_check(a), pg_temp.agg_check(a), '{account}'::text[]
FROM aggs a;
-- the checks run serial plans, except the parallel side of 'parallel vs serial'
UPDATE bench.pair SET check_fast_gucs = '{max_parallel_workers_per_gather=0}', check_ref_gucs = '{max_parallel_workers_per_gather=0}'
WHERE grp LIKE 'agg %' AND name LIKE '%, serial';
UPDATE bench.pair SET check_fast_gucs = '{max_parallel_workers_per_gather=2,parallel_setup_cost=0,parallel_tuple_cost=0,min_parallel_table_scan_size=0}',
                      check_ref_gucs = '{max_parallel_workers_per_gather=0}'
WHERE grp LIKE 'agg %' AND name LIKE '%parallel vs serial';

-- ---- reports for all accounts ----------------------------------------------------------
INSERT INTO bench.grp (grp, ord, db, rows_sql)
SELECT r.view, r.ord, 'main', 'SELECT count(*) FROM hpcacct.ledger'
FROM (VALUES ('regulation_report', 70), ('window_quota_usage', 80), ('quarter_balances', 90),
             ('usage_by_resource', 100), ('usage_by_account', 110), ('usage_by_submitter', 120),
             ('usage_by_month', 130), ('fairshare', 140)) AS r(view, ord);
INSERT INTO bench.variant (grp, variant, sql)
SELECT g.grp, v.variant,
       CASE WHEN v.variant = 'view' THEN
                CASE WHEN g.grp = 'fairshare' THEN 'SELECT * FROM hpcacct.fairshare()' ELSE 'SELECT * FROM hpcacct.' || g.grp END
            ELSE 'SELECT * FROM bench.' || g.grp || '_hand' END
FROM bench.grp g
CROSS JOIN (VALUES ('view'), ('hand-written')) AS v(variant)
WHERE g.ord BETWEEN 70 AND 140;
INSERT INTO bench.pair (ord, name, grp, fast, ref, ref_label, target, check_fast, check_ref, check_keys)
SELECT g.ord, CASE WHEN g.grp = 'fairshare' THEN 'fairshare() table' ELSE g.grp || ' view' END, g.grp, 'view',
       'hand-written', 'hand-written SQL', 'ms < 1000 at 10M',
       fast.sql, ref.sql,
       CASE g.grp
           WHEN 'regulation_report' THEN '{account,machine,month}'
           WHEN 'window_quota_usage' THEN '{account}'
           WHEN 'quarter_balances' THEN '{account,quarter}'
           WHEN 'usage_by_resource' THEN '{pool,unit,cluster,partition}'
           WHEN 'usage_by_account' THEN '{pool,unit,account}'
           WHEN 'usage_by_submitter' THEN '{pool,unit,account,submitter}'
           WHEN 'usage_by_month' THEN '{pool,unit,cluster,partition,account,submitter,month}'
           WHEN 'fairshare' THEN '{pool,unit,account,submitter}'
       END::text[]
FROM bench.grp g
JOIN bench.variant fast ON fast.grp = g.grp AND fast.variant = 'view'
JOIN bench.variant ref ON ref.grp = g.grp AND ref.variant = 'hand-written'
WHERE g.ord BETWEEN 70 AND 140;

-- ---- the portal page's daily charts (account_month()): the 2 GENCI projects with the most
-- charges on a regulated machine, from 1 January, and the 2 HLRN projects with the most
-- charges in the bank's unit, from the quarter's first day; up to the anchor (the reference
-- reads the ledger once per day: about a minute a run at 1 M jobs)
CREATE TABLE bench.chart_case AS
SELECT * FROM (
    SELECT l.account, coalesce(r.pool, r.cluster) AS pool, NULL::text AS unit,
           date_trunc('year', :'anchor'::date)::date AS first_day, :'anchor'::date AS last_day
    FROM hpcacct.ledger l JOIN hpcacct.resource r USING (resource_id)
    JOIN hpcacct.regulation_machine s ON s.machine = coalesce(r.pool, r.cluster)
    WHERE l.kind = 'charge' AND l.job_end >= date_trunc('year', :'anchor'::date)
    GROUP BY 1, 2 ORDER BY count(*) DESC, 1, 2 LIMIT 2) genci
UNION ALL
SELECT * FROM (
    SELECT l.account, NULL, l.unit, hpcacct.quarter_start(:'anchor'::date), :'anchor'::date
    FROM hpcacct.ledger l
    WHERE l.kind = 'charge' AND l.unit = hpcacct.setting_value('bank_unit')
      AND l.job_end >= hpcacct.quarter_start(:'anchor'::date)
    GROUP BY 1, 2, 3 ORDER BY count(*) DESC, 1 LIMIT 2) hlrn;
INSERT INTO bench.grp VALUES
    ('daily_charts', 145, 'main',
     'SELECT sum(last_day - first_day + 1) FROM bench.chart_case', false);
INSERT INTO bench.variant (grp, variant, sql) VALUES
    ('daily_charts', 'one pass',
     'SELECT c.account, d.* FROM bench.chart_case c, hpcacct_internal.charges_to_day_end(c.account, c.pool, c.unit, c.first_day, c.last_day) d'),
    ('daily_charts', 'day by day',
     'SELECT c.account, d.* FROM bench.chart_case c, bench.charges_to_day_end_hand(c.account, c.pool, c.unit, c.first_day, c.last_day) d');
INSERT INTO bench.pair (ord, name, grp, fast, ref, ref_label, target, check_fast, check_ref, check_keys) VALUES
    (145, 'daily charts of 4 portal pages', 'daily_charts', 'one pass', 'day by day',
     'job-by-job sum for every day', 'ratio <= 0.2',
     'SELECT c.account, coalesce(c.pool, c.unit) AS what, d.day, d.amount FROM bench.chart_case c, hpcacct_internal.charges_to_day_end(c.account, c.pool, c.unit, c.first_day, c.last_day) d',
     'SELECT c.account, coalesce(c.pool, c.unit) AS what, d.day, d.amount FROM bench.chart_case c, bench.charges_to_day_end_hand(c.account, c.pool, c.unit, c.first_day, c.last_day) d',
     '{account,what,day}');

-- ---- the portal's first page (my_accounts()) as the superuser: every account (2 000), on the
-- anchor and on the last day of the month before
INSERT INTO bench.grp VALUES
    ('first_page', 147, 'main', 'SELECT 2 * count(*) FROM hpcacct.account', false);
INSERT INTO bench.variant (grp, variant, sql) VALUES
    ('first_page', 'one pass',
     format('SELECT hpcacct.my_accounts(d) FROM unnest(ARRAY[%L::date, date_trunc(''month'', %L::date)::date - 1]) d',
            :'anchor', :'anchor')),
    ('first_page', 'per account',
     format('SELECT bench.my_accounts_per_account(d) FROM unnest(ARRAY[%L::date, date_trunc(''month'', %L::date)::date - 1]) d',
            :'anchor', :'anchor'));
INSERT INTO bench.pair (ord, name, grp, fast, ref, ref_label, target, check_fast, check_ref, check_keys) VALUES
    (147, 'portal first page, every account', 'first_page', 'one pass', 'per account',
     'the month''s charges read once per account', 'ratio <= 0.3',
     format('SELECT d, x ->> ''account'' AS account, x AS item FROM unnest(ARRAY[%L::date, date_trunc(''month'', %L::date)::date - 1]) d, '
            'jsonb_array_elements(hpcacct.my_accounts(d) -> ''accounts'') x', :'anchor', :'anchor'),
     format('SELECT d, x ->> ''account'' AS account, x AS item FROM unnest(ARRAY[%L::date, date_trunc(''month'', %L::date)::date - 1]) d, '
            'jsonb_array_elements(bench.my_accounts_per_account(d) -> ''accounts'') x', :'anchor', :'anchor'),
     '{d,account}');

-- ---- scheduled procedures at 10 000 accounts (ADMIN_ACCOUNTS), and the submit check ------
INSERT INTO bench.grp VALUES
    ('regulate', 150, 'admin', 'SELECT count(*) FROM hpcacct.account WHERE name LIKE ''r%''', false),
    ('open_quarter', 160, 'admin', 'SELECT count(*) FROM hpcacct.account WHERE kind = ''personal''', false),
    ('check_submit', 170, 'main', 'SELECT 1', false),
    ('check_submit_genci', 172, 'main', 'SELECT 1', false),
    ('check_submit_rwth', 174, 'main', 'SELECT 1', false),
    ('compact_rollup', 165, 'main', 'SELECT count(*) FROM hpcacct.charge_rollup', false),
    -- regulate() on the main site's GENCI projects (two machines, monthly and annual, jobs across
    -- 1 January and the 16ths, re-rated and deleted jobs): checked against the job-by-job figures
    ('regulate_genci', 152, 'main', 'SELECT count(*) FROM hpcacct.regulation_machine', false);
INSERT INTO bench.variant (grp, variant, sql, rollback) VALUES
    ('regulate', 'procedure', format('CALL hpcacct.regulate(%L)', :'regulation_day'), true),
    ('regulate', 'hand-written', format('SELECT bench.regulate_hand(%L)', :'regulation_day'), true),
    ('open_quarter', 'procedure', format('CALL hpcacct.open_quarter(%L)', :'quarter'), true),
    ('open_quarter', 'hand-written', format('SELECT bench.open_quarter_hand(%L)', :'quarter'), true),
    ('regulate_genci', 'procedure', format('CALL hpcacct.regulate(%L)', :'regulation_day'), true),
    -- the daily compaction (measured only: bench-curves' table), again on a compacted rollup
    ('compact_rollup', 'procedure', 'SELECT hpcacct.compact_rollup()', true);
-- pgbench scripts; :n is the sample size (set by the driver), one call per transaction
INSERT INTO bench.variant (grp, variant, kind, sql) VALUES
    ('check_submit', 'function', 'pgbench', E'\\set i random(1, :n)\n'
        'SELECT c.* FROM bench.submit_sample s, LATERAL hpcacct.check_submit(s.username, s.account, s.at) c WHERE s.i = :i;\n'),
    ('check_submit', 'hand-written', 'pgbench', E'\\set i random(1, :n)\n'
        'SELECT c.* FROM bench.submit_sample s, LATERAL bench.check_submit_hand(s.username, s.account, s.at) c WHERE s.i = :i;\n'),
    ('check_submit', 'select 1', 'pgbench', E'\\set i random(1, :n)\n'
        'SELECT s.* FROM bench.submit_sample s WHERE s.i = :i;\n'),
    ('check_submit_genci', 'function', 'pgbench', E'\\set i random(1, :n)\n'
        'SELECT c.* FROM bench.submit_sample_project s, LATERAL hpcacct.check_submit(s.username, s.account, s.at) c WHERE s.centre = ''genci'' AND s.i = :i;\n'),
    ('check_submit_genci', 'select 1', 'pgbench', E'\\set i random(1, :n)\n'
        'SELECT s.* FROM bench.submit_sample_project s WHERE s.centre = ''genci'' AND s.i = :i;\n'),
    ('check_submit_rwth', 'function', 'pgbench', E'\\set i random(1, :n)\n'
        'SELECT c.* FROM bench.submit_sample_project s, LATERAL hpcacct.check_submit(s.username, s.account, s.at) c WHERE s.centre = ''rwth'' AND s.i = :i;\n'),
    ('check_submit_rwth', 'select 1', 'pgbench', E'\\set i random(1, :n)\n'
        'SELECT s.* FROM bench.submit_sample_project s WHERE s.centre = ''rwth'' AND s.i = :i;\n');
INSERT INTO bench.pair (ord, name, grp, fast, ref, ref_label, target, check_fast, check_ref, check_keys) VALUES
    (150, format('regulate(), %s accounts', :'admin_accounts'), 'regulate', 'procedure', 'hand-written', 'set-based SQL, same writes',
     'ms < 1000',
     format('SELECT * FROM bench.regulate_outcome(''procedure'', %L)', :'regulation_day'),
     format('SELECT * FROM bench.regulate_outcome(''hand'', %L)', :'regulation_day'), '{account,machine}'),
    (151, 'regulate(): every decision as job by job', 'regulate', 'procedure', 'hand-written', 'set-based SQL, same writes',
     '',
     format('SELECT account, machine, outcome, alloc::text, granted::text, consumption::text, tc::text, tmc::text,
                    delta::text, retracted::text
             FROM bench.regulate_outcome(''procedure'', %L)', :'regulation_day'),
     format('SELECT * FROM bench.regulate_job_by_job(%L)', :'regulation_day'), '{account,machine}'),
    (152, 'regulate(), GENCI projects of the main site', 'regulate_genci', 'procedure', 'procedure',
     'the same (a check: every decision as job by job)', '',
     format('SELECT account, machine, outcome, alloc::text, granted::text, consumption::text, tc::text, tmc::text,
                    delta::text, retracted::text
             FROM bench.regulate_outcome(''procedure'', %L)', :'regulation_day'),
     format('SELECT * FROM bench.regulate_job_by_job(%L)', :'regulation_day'), '{account,machine}'),
    (160, format('open_quarter(), %s accounts', :'admin_accounts'), 'open_quarter', 'procedure', 'hand-written', 'set-based SQL, same writes',
     '',
     format('SELECT * FROM bench.open_quarter_outcome(''procedure'', %L)', :'quarter'),
     format('SELECT * FROM bench.open_quarter_outcome(''hand'', %L)', :'quarter'), '{what,account,target,username}'),
    (170, 'check_submit(), per call', 'check_submit', 'function', 'hand-written', 'one SQL statement, per call',
     'ms < 1',
     'SELECT s.i, c.* FROM bench.submit_sample s, LATERAL hpcacct.check_submit(s.username, s.account, s.at) c',
     'SELECT s.i, c.* FROM bench.submit_sample s, LATERAL bench.check_submit_hand(s.username, s.account, s.at) c',
     '{i}'),
    (171, 'check_submit(), per call', 'check_submit', 'function', 'select 1', 'a sample lookup alone (round trip)',
     '', NULL, NULL, NULL),
    (172, 'check_submit(), GENCI projects, per call', 'check_submit_genci', 'function', 'select 1',
     'a sample lookup alone (round trip)', 'ms < 1',
     'SELECT s.i, c.ok, c.account, c.reason FROM bench.submit_sample_project s, LATERAL hpcacct.check_submit(s.username, s.account, s.at) c WHERE s.centre = ''genci''',
     'SELECT * FROM bench.check_submit_genci_all()', '{i}'),
    (174, 'check_submit(), RWTH projects, per call', 'check_submit_rwth', 'function', 'select 1',
     'a sample lookup alone (round trip)', 'ms < 1', NULL, NULL, NULL);

-- The psql script of a group's SQL variants: run 0 (a warm-up when cheap) to `runs`, the
-- variants in a rotating order so that none always runs first. Prints variant|run|ms|warmup.
CREATE FUNCTION bench.script(g text, runs integer, budget_s float8) RETURNS text
    LANGUAGE sql STABLE
    AS $$
        SELECT E'\\set ON_ERROR_STOP 1\nSET client_min_messages = warning;\n'
               'CREATE TEMP TABLE timing (variant text, run integer, ms float8, warmup boolean);\n'
               || string_agg(E'RESET ALL;\nSET client_min_messages = warning;\n' || v.settings || E'\n'
                             || CASE WHEN v.before <> ''
                                     THEN format(E'SELECT bench.will_run(%L, %s, %s, %s) AS go \\gset\n\\if :go\n\\o /dev/null\n%s\n\\o\n\\endif\n',
                                                 v.variant, r, budget_s * 1000, runs, v.before)
                                     ELSE '' END
                             || format(E'SELECT bench.time(%L, %s, %L, %L, %s, %s);\n', v.variant, r, v.sql, v.rollback,
                                       budget_s * 1000, runs),
                             '' ORDER BY r, (v.rn + r) % v.n)
        FROM generate_series(0, runs) AS r
        CROSS JOIN (SELECT x.*, row_number() OVER (ORDER BY x.variant) AS rn, count(*) OVER () AS n
                    FROM bench.variant x WHERE x.grp = g AND x.kind = 'sql') v
    $$;
