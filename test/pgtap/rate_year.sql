-- A year of rate changes as a site lives it: two clusters (alpha: the HLRN-style bank in NPL,
-- deposits per quarter; beta: GENCI-style grants on a regulated machine), 300 jobs across a
-- month, a quarter and a rate boundary (some spanning them), then: a rate row closed and its
-- successor added; a re-rating; the same again; one that overlaps it; a re-rating while
-- another session inserts jobs of its period; a job loaded late; a job deleted and one
-- corrected after re-rating. After each step the lived database (a scratch database, so that
-- other sessions see it) is compared, to the digit, with a fresh database charging the same
-- jobs at the rates the lived one has by then: the ledger per account and unit, balance() and
-- quarter_balances, usage_by_account, account_month(), allocation_status(), regulate()'s
-- decisions and fairshare()'s usage; and its rollups with what rebuild_rollup() makes of its
-- ledger. Then the rights, bad input and the log of each re-rating.
BEGIN;
SET search_path = public, hpcacct;
SET client_min_messages = warning;
SELECT plan(53);

\set scratch hpcacct_rate_year
\set adm ry_adm
\ir include/scratch_db.psql
\set scratch hpcacct_rate_year_fresh
\set adm ry_adm_fresh
\ir include/scratch_db.psql
SELECT dblink_connect('ry', :'srv' || ' dbname=hpcacct_rate_year');
SELECT dblink_connect('ry2', :'srv' || ' dbname=hpcacct_rate_year');
SELECT dblink_connect('ry3', :'srv' || ' dbname=hpcacct_rate_year');
CREATE TEMP TABLE srv AS SELECT :'srv'::text AS srv;

SELECT dblink_exec('ry', $s$
    SET client_min_messages = warning;
    CREATE EXTENSION hpcacct CASCADE;
    SELECT hpcacct.create_job_table();
    SET search_path = public, hpcacct;
    INSERT INTO setting VALUES ('timezone', 'Europe/Berlin') ON CONFLICT (name) DO UPDATE SET value = excluded.value;
    INSERT INTO regulation_machine (machine, monthly_threshold) VALUES ('beta', 1000000);
    INSERT INTO resource (cluster, partition, node, bundle, rate, unit, valid) VALUES
        ('alpha', 'std', 'cpu=8', 'cpu=1', 1, 'NPL', tstzrange('2024-01-01 00:00 Europe/Berlin', NULL)),
        ('beta', 'gpu', 'cpu=32,gres/gpu=4', 'gres/gpu=1', 2, 'hours', tstzrange('2024-01-01 00:00 Europe/Berlin', NULL));
    INSERT INTO account (name) VALUES ('b1'), ('b2'), ('g1'), ('g2');
    SELECT deposit(a, q, 3000) FROM unnest(ARRAY['b1', 'b2']) a,
           unnest(ARRAY['2024-01-01', '2024-04-01', '2024-07-01', '2024-10-01']::date[]) q;
    INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
    SELECT a, 'grant', 20000, 'hours', 'beta', '2024-01-01', '2024-12-31' FROM unnest(ARRAY['g1', 'g2']) a;
    -- job i: every 97 minutes from 25 March, 36 minutes to 24 hours long (some across
    -- midnight, 1 April and the rate boundaries); even ones on alpha, odd ones on beta
    CREATE TABLE public.all_jobs AS
    SELECT i, CASE WHEN i % 2 = 0 THEN 'alpha' ELSE 'beta' END AS cluster, i::text AS jobid,
           CASE i % 4 WHEN 0 THEN 'b1' WHEN 2 THEN 'b2' WHEN 1 THEN 'g1' ELSE 'g2' END AS account,
           'u' || i % 3 AS "user", CASE WHEN i % 2 = 0 THEN 'std' ELSE 'gpu' END AS partition,
           '2024-03-25 00:00 Europe/Berlin'::timestamptz + i * interval '97 minutes' AS start,
           '2024-03-25 00:00 Europe/Berlin'::timestamptz + i * interval '97 minutes'
               + (i % 40 + 1) * interval '36 minutes' AS "end",
           (CASE WHEN i % 2 = 0 THEN 'cpu=' || i % 8 + 1 ELSE 'cpu=4,gres/gpu=' || i % 4 + 1 END)::hpcacct.tres AS alloctres
    FROM generate_series(1, 300) i;
    INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres)
    SELECT cluster, jobid, account, "user", partition, start, "end", alloctres FROM public.all_jobs WHERE i <= 240;
    RESET client_min_messages;
$s$);

-- The statements that make a fresh database charging the lived one's jobs at its rates now.
CREATE FUNCTION pg_temp.fresh() RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    script text;
    conn text := (SELECT srv FROM srv) || ' dbname=hpcacct_rate_year_fresh';
BEGIN
    SELECT t.s INTO script FROM dblink('ry', $q$
        SELECT string_agg(s, E';\n' ORDER BY o) FROM (
            SELECT 1 AS o, 'SET client_min_messages = warning; CREATE EXTENSION hpcacct CASCADE; '
                           'SELECT hpcacct.create_job_table()' AS s
            UNION ALL SELECT 2, format('INSERT INTO hpcacct.setting VALUES (%L, %L) ON CONFLICT (name) DO UPDATE SET value = excluded.value',
                                      name, value) FROM hpcacct.setting
            UNION ALL SELECT 3, format('INSERT INTO hpcacct.regulation_machine (machine, monthly_threshold) VALUES (%L, %L)',
                                       machine, monthly_threshold) FROM hpcacct.regulation_machine
            UNION ALL SELECT 4, format('INSERT INTO hpcacct.account (name) VALUES (%L)', name) FROM hpcacct.account
            UNION ALL SELECT 5, format('INSERT INTO hpcacct.resource (cluster, partition, node, bundle, rate, unit, pool, exclusive, valid) '
                                       'VALUES (%L, %L, %L, %L, %L, %L, %L, %L, %L)', cluster, partition, node, bundle, rate, unit,
                                       pool, exclusive, valid) FROM hpcacct.resource
            UNION ALL SELECT 6, format('INSERT INTO hpcacct.ledger (booked_at, account, kind, amount, unit, pool, valid_from, valid_until, note) '
                                       'VALUES (%L, %L, %L, %L, %L, %L, %L, %L, %L)', booked_at, account, kind, amount, unit, pool,
                                       valid_from, valid_until, note) FROM hpcacct.ledger WHERE kind <> 'charge'
            UNION ALL SELECT 7, format('INSERT INTO hpcacct.job SELECT (j).* FROM unnest(%L::hpcacct.job[]) j', array_agg(j))
                      FROM hpcacct.job j
            UNION ALL SELECT 8, 'RESET client_min_messages') x
        $q$) AS t(s text);
    IF 'ryf' = ANY (dblink_get_connections()) THEN
        PERFORM dblink_disconnect('ryf');
    END IF;
    PERFORM dblink_exec('ry_adm_fresh', 'DROP DATABASE hpcacct_rate_year_fresh');
    PERFORM dblink_exec('ry_adm_fresh', 'CREATE DATABASE hpcacct_rate_year_fresh');
    PERFORM dblink_connect('ryf', conn);
    PERFORM dblink_exec('ryf', script);
END $$;

-- Every figure the task names, as lines of text (no ids, which differ between the two).
CREATE TEMP TABLE figures_sql AS SELECT $q$
    SELECT 'ledger ' || account || ' ' || unit || ' ' || sum(amount) || ' ' || sum(core_hours)
    FROM hpcacct.ledger GROUP BY account, unit
    UNION ALL SELECT format('balance %s %s %s', a, d, hpcacct.balance(a, d))
    FROM unnest(ARRAY['b1', 'b2']) a, unnest(ARRAY['2024-02-15', '2024-05-15', '2024-08-15']::date[]) d
    UNION ALL SELECT 'quarter_balances ' || q::text FROM hpcacct.quarter_balances q
    UNION ALL SELECT 'usage_by_account ' || u::text FROM hpcacct.usage_by_account(2024, '2024-06-01 00:00+00') u
    UNION ALL SELECT format('account_month %s %s %s', a.name, m, hpcacct.account_month(a.name, m))
    FROM hpcacct.account a, unnest(ARRAY['2024-03-01', '2024-04-01']::date[]) m
    UNION ALL SELECT format('allocation_status %s %s %s', a, d, (SELECT row(s.alloc, s.granted, round(s.tmc::numeric, 6),
                                    round(s.tc::numeric, 6), round(s.consumption::numeric, 6), s.status)
                                    FROM hpcacct.allocation_status(a, 'beta', d) s))
    FROM unnest(ARRAY['g1', 'g2']) a, unnest(ARRAY['2024-03-31', '2024-04-15', '2024-04-30']::date[]) d
    UNION ALL SELECT format('fairshare %s %s %s %s %s %s', pool, unit, account, submitter,
                            round(usage::numeric, 6), year_usage)
    FROM hpcacct.fairshare('2024-06-01 00:00+00')
    UNION ALL SELECT format('rollup %s %s %s %s %s %s', account, unit, submitter, month, end_month, sum(amount))
    FROM hpcacct.charge_rollup GROUP BY account, unit, submitter, month, end_month HAVING sum(amount) <> 0
    UNION ALL SELECT format('consumption %s %s %s %s', account, boundary, sum(ended), sum(running))
    FROM hpcacct.consumption_rollup GROUP BY account, boundary HAVING sum(ended) <> 0 OR sum(running) <> 0
$q$ AS q;
-- regulate()'s decisions on 16 April and 1 May (run, read and rolled back)
CREATE TEMP TABLE regulate_sql AS SELECT $q$
    SELECT format('regulate %s %s %s %s %s %s %s', run_date, run, account, outcome, round(consumption::numeric, 6),
                  used_percent, retracted)
    FROM hpcacct.regulation_log
$q$ AS q;

CREATE FUNCTION pg_temp.lines(conn text, q text) RETURNS SETOF text LANGUAGE sql AS $$
    SELECT t.x FROM dblink(conn, q) AS t(x text)
$$;
CREATE FUNCTION pg_temp.regulated(conn text) RETURNS SETOF text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM dblink_exec(conn, 'BEGIN; CALL hpcacct.regulate(''2024-04-16''); CALL hpcacct.regulate(''2024-05-01'')');
    RETURN QUERY SELECT pg_temp.lines(conn, (SELECT q FROM regulate_sql));
    PERFORM dblink_exec(conn, 'ROLLBACK');
END $$;
-- The lines that differ between the lived and a fresh database ('' when none).
CREATE FUNCTION pg_temp.differ() RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    conn text := (SELECT srv FROM srv) || ' dbname=hpcacct_rate_year_fresh';
    result text;
BEGIN
    PERFORM pg_temp.fresh();
    CREATE TEMP TABLE lived AS SELECT pg_temp.lines('ry', (SELECT q FROM figures_sql)) AS x
                               UNION ALL SELECT pg_temp.regulated('ry');
    CREATE TEMP TABLE fresh AS SELECT pg_temp.lines('ryf', (SELECT q FROM figures_sql)) AS x
                               UNION ALL SELECT pg_temp.regulated('ryf');
    SELECT coalesce(string_agg(d, E'\n' ORDER BY d), '') INTO result FROM (
        (SELECT 'lived: ' || x AS d FROM (TABLE lived EXCEPT ALL TABLE fresh) l LIMIT 10)
        UNION ALL
        (SELECT 'fresh: ' || x FROM (TABLE fresh EXCEPT ALL TABLE lived) f LIMIT 10)) z;
    IF (SELECT count(*) FROM lived) < 50 THEN
        result := result || ' (only ' || (SELECT count(*) FROM lived) || ' lines)';
    END IF;
    DROP TABLE lived, fresh;
    RETURN result;
END $$;
-- The rollups against what rebuild_rollup() makes of the ledger (rebuilt, read, rolled back).
CREATE TEMP TABLE rollup_sql AS SELECT $q$
    SELECT format('rollup %s %s %s %s %s %s %s %s', account, resource_id, unit, submitter, month, end_month, sum(amount),
                  sum(job_amount))
    FROM hpcacct.charge_rollup GROUP BY account, resource_id, unit, submitter, month, end_month
    HAVING sum(amount) <> 0 OR sum(job_amount) <> 0
    UNION ALL SELECT format('consumption %s %s %s %s %s', account, resource_id, boundary, sum(ended), sum(running))
    FROM hpcacct.consumption_rollup GROUP BY account, resource_id, boundary HAVING sum(ended) <> 0 OR sum(running) <> 0
$q$ AS q;
CREATE FUNCTION pg_temp.rollup_differs() RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    result text;
BEGIN
    CREATE TEMP TABLE kept AS SELECT pg_temp.lines('ry', (SELECT q FROM rollup_sql)) AS x;
    PERFORM dblink_exec('ry', 'BEGIN');
    PERFORM * FROM dblink('ry', 'SELECT hpcacct.rebuild_rollup()') AS t(n bigint);
    CREATE TEMP TABLE rebuilt AS SELECT pg_temp.lines('ry', (SELECT q FROM rollup_sql)) AS x;
    PERFORM dblink_exec('ry', 'ROLLBACK');
    SELECT coalesce(string_agg(d, E'\n' ORDER BY d), '') INTO result FROM (
        (SELECT 'kept: ' || x AS d FROM (TABLE kept EXCEPT ALL TABLE rebuilt) l LIMIT 10)
        UNION ALL
        (SELECT 'rebuilt: ' || x FROM (TABLE rebuilt EXCEPT ALL TABLE kept) f LIMIT 10)) z;
    DROP TABLE kept, rebuilt;
    RETURN result;
END $$;
CREATE FUNCTION pg_temp.one(q text) RETURNS text LANGUAGE sql AS $$ SELECT t.x FROM dblink('ry', q) AS t(x text) $$;

-- ---- 1. 240 jobs charged at the first rates ----
SELECT is(pg_temp.one('SELECT count(*) FROM hpcacct.ledger WHERE kind = ''charge'''), '240', '240 jobs charged');
SELECT is(pg_temp.differ(), '', 'at the first rates the lived database is a fresh one');

-- ---- 2. alpha's rate row closed on 1 May, its successor from then (README: "Close a rate") ----
SELECT dblink_exec('ry', $s$
    UPDATE hpcacct.resource SET valid = tstzrange(lower(valid), '2024-05-01 00:00 Europe/Berlin')
    WHERE cluster = 'alpha' AND upper_inf(valid);
    INSERT INTO hpcacct.resource (cluster, partition, node, bundle, rate, unit, valid)
    VALUES ('alpha', 'std', 'cpu=8', 'cpu=1', 1.2, 'NPL', tstzrange('2024-05-01 00:00 Europe/Berlin', NULL))$s$);
SELECT is(pg_temp.differ(), '', 'closing a rate row after its jobs and adding its successor changes no figure');

-- ---- 3. re-rating alpha from 5 April at 1.5 ----
SELECT is(pg_temp.one($$SELECT hpcacct.rerate(r.resource_id, 1.5, '2024-04-05 00:00 Europe/Berlin', 'April tariff')::text
                        FROM hpcacct.resource r WHERE r.cluster = 'alpha' AND r.rate = 1$$) IS NOT NULL, true,
          're-rating alpha from 5 April');
SELECT is(pg_temp.differ(), '', 'after the re-rating the figures are a fresh database''s at the new rates');
SELECT is(pg_temp.rollup_differs(), '', 'and the rollups are what rebuild_rollup() makes of the ledger');
SELECT is(pg_temp.one($$SELECT format('%s %s %s %s %s %s', l.rerated_by = current_user, l.old_rate, l.new_rate,
                                      l.jobs = (SELECT count(*) FROM public.all_jobs j JOIN hpcacct.job USING (cluster, jobid)
                                                WHERE j.cluster = 'alpha' AND j.start >= l.effective_from),
                                      l.amount_after = (SELECT sum(amount) FROM hpcacct.ledger
                                                        WHERE resource_id = l.new_resource_id),
                                      -l.amount_before = (SELECT sum(amount) FROM hpcacct.ledger
                                                          WHERE note = 'reversal: re-rated: resource ' || l.old_resource_id
                                                                       || ' from 2024-04-04 22:00:00+00'))
                        FROM hpcacct.rerate_log l$$),
          't 1 1.5 t t t', 'the log says who re-rated, the rates, the jobs and the amounts the ledger moved');

-- ---- 4. the same re-rating again: refused, nothing written ----
CREATE TEMP TABLE before AS SELECT pg_temp.one('SELECT count(*) || '' '' || sum(amount) FROM hpcacct.ledger') AS l,
                                   pg_temp.one('SELECT count(*) FROM hpcacct.rerate_log') AS g;
SELECT is(pg_temp.one($$SELECT public.outcome(format('SELECT hpcacct.rerate(%s, 1.5, ''2024-04-05 00:00 Europe/Berlin'')', old_resource_id))
                        FROM hpcacct.rerate_log$$), '22023', 'the same re-rating again is refused (22023)');
SELECT is(pg_temp.one($$SELECT public.outcome(format('SELECT hpcacct.rerate(%s, 1.5, ''2024-04-06 00:00 Europe/Berlin'')', new_resource_id))
                        FROM hpcacct.rerate_log$$), '22023', 'and re-rating the new row to its own rate (22023)');
SELECT is((SELECT (pg_temp.one('SELECT count(*) || '' '' || sum(amount) FROM hpcacct.ledger'),
                   pg_temp.one('SELECT count(*) FROM hpcacct.rerate_log'))::text), (SELECT (l, g)::text FROM before),
          'they wrote nothing');
SELECT is(pg_temp.one('SELECT hpcacct.rerate_catch_up()::text'), '0', 'rerate_catch_up() (not federated) re-rates nothing');
SELECT is(pg_temp.differ(), '', 'and the figures are unchanged');

-- ---- 5. a re-rating overlapping the first: alpha from 1 April (across the quarter) at 1.25;
--         beta from 31 March noon at 2.5 ----
SELECT is(pg_temp.one($$SELECT count(hpcacct.rerate(r.resource_id, 1.25, '2024-04-01 00:00 Europe/Berlin'))::text
                        FROM hpcacct.resource r WHERE r.cluster = 'alpha' AND r.rate = 1$$), '1',
          're-rating alpha''s first row from 1 April, before the first re-rating''s instant');
SELECT is(pg_temp.one($$SELECT count(hpcacct.rerate(r.resource_id, 2.5, '2024-03-31 12:00 Europe/Berlin'))::text
                        FROM hpcacct.resource r WHERE r.cluster = 'beta'$$), '1', 're-rating beta from 31 March noon');
SELECT is(pg_temp.differ(), '', 'after the overlapping re-ratings the figures are a fresh database''s');
SELECT is(pg_temp.rollup_differs(), '', 'and so are the rollups');
SELECT is(pg_temp.one($$SELECT string_agg(format('%s-%s %s', lower(valid), upper(valid), rate), ', ' ORDER BY lower(valid))
                        FROM hpcacct.resource WHERE cluster = 'alpha'$$),
          '2023-12-31 23:00:00+00-2024-03-31 22:00:00+00 1, 2024-03-31 22:00:00+00-2024-04-04 22:00:00+00 1.25, '
          '2024-04-04 22:00:00+00-2024-04-30 22:00:00+00 1.5, 2024-04-30 22:00:00+00- 1.2',
          'alpha''s rows follow each other without a gap or overlap');

-- ---- 6. re-rating while another session inserts jobs of the period ----
-- ry2 inserts jobs 241-255 (from 10 April) and has not committed; ry3 re-rates beta's row
-- from 8 April: it waits for the insert, then re-rates its jobs too
SELECT dblink_exec('ry2', $$BEGIN; INSERT INTO hpcacct.job (cluster, jobid, account, "user", partition, start, "end", alloctres)
    SELECT cluster, jobid, account, "user", partition, start, "end", alloctres FROM public.all_jobs WHERE i BETWEEN 241 AND 255$$);
SELECT dblink_send_query('ry3', $$SELECT hpcacct.rerate(r.resource_id, 3, '2024-04-08 00:00 Europe/Berlin')::text
                                  FROM hpcacct.resource r WHERE r.cluster = 'beta' AND r.rate = 2.5$$);
SELECT pg_sleep(0.5);
SELECT dblink_exec('ry2', 'COMMIT');
SELECT is((SELECT count(*) FROM dblink_get_result('ry3') AS t(x text) WHERE x IS NOT NULL), 1::bigint,
          'the re-rating ran once the insert committed');
SELECT * FROM dblink_get_result('ry3') AS t(x text);
SELECT is(pg_temp.differ(), '', 'the concurrent jobs are re-rated: the figures are a fresh database''s');
-- the other way round: ry3's re-rating of beta from 11 April (at 3.5) has not committed when
-- ry2 inserts jobs of that period: the insert waits and charges them at the new row
SELECT dblink_exec('ry3', $$BEGIN$$);
SELECT t.x IS NOT NULL AS rerated FROM dblink('ry3', $$SELECT hpcacct.rerate(r.resource_id, 3.5, '2024-04-11 00:00 Europe/Berlin')::text
                                                 FROM hpcacct.resource r WHERE r.cluster = 'beta' AND r.rate = 3$$) AS t(x text);
SELECT dblink_send_query('ry2', $$SELECT public.outcome($i$INSERT INTO hpcacct.job (cluster, jobid, account, "user", partition, start, "end", alloctres)
    SELECT cluster, jobid, account, "user", partition, start, "end", alloctres FROM public.all_jobs WHERE i BETWEEN 256 AND 265 AND cluster = 'beta'$i$)$$);
SELECT pg_sleep(0.5);
SELECT dblink_exec('ry3', 'COMMIT');
SELECT is((SELECT x FROM dblink_get_result('ry2') AS t(x text)), 'ok', 'the insert waited for the re-rating');
SELECT * FROM dblink_get_result('ry2') AS t(x text);
SELECT is(pg_temp.one($$SELECT string_agg(DISTINCT r.rate::text, ',') FROM hpcacct.ledger l JOIN hpcacct.resource r USING (resource_id)
                        JOIN public.all_jobs j ON j.jobid = l.jobid AND j.i BETWEEN 256 AND 265 WHERE l.cluster = 'beta'$$), '3.5',
          'and charged its jobs at the new rate');
SELECT is(pg_temp.differ(), '', 'the figures are a fresh database''s');
-- and the other order: ry3 re-rates alpha's newest row (1.2 from 1 May) from 2 May while
-- ry2, whose transaction is REPEATABLE READ and has read already, has jobs 256-265 inserted
-- meanwhile by ry3 (committed before the re-rating): the re-rating must see them or refuse
SELECT dblink_exec('ry2', 'BEGIN ISOLATION LEVEL REPEATABLE READ');
SELECT t.n > 0 AS read FROM dblink('ry2', 'SELECT count(*) FROM hpcacct.ledger') AS t(n bigint);
SELECT dblink_exec('ry3', $$INSERT INTO hpcacct.job (cluster, jobid, account, "user", partition, start, "end", alloctres)
    SELECT cluster, jobid, account, "user", partition, start + interval '27 days', "end" + interval '27 days', alloctres
    FROM public.all_jobs WHERE i BETWEEN 256 AND 265 AND cluster = 'alpha'$$);
SELECT is(t.x, '25000', 'a re-rating in a REPEATABLE READ transaction that read before jobs were charged is refused (25000)')
FROM dblink('ry2', $$SELECT public.outcome($r$SELECT hpcacct.rerate(r.resource_id, 1.4, '2024-05-02 00:00 Europe/Berlin')
                                           FROM hpcacct.resource r WHERE r.cluster = 'alpha' AND r.rate = 1.2$r$)$$) AS t(x text);
SELECT dblink_exec('ry2', 'COMMIT');
SELECT is(pg_temp.differ(), '', 'no job is left at a rate row closed before its start');

-- ---- 7. jobs loaded late, after their period was re-rated ----
SELECT dblink_exec('ry', $$INSERT INTO hpcacct.job (cluster, jobid, account, "user", partition, start, "end", alloctres)
    SELECT cluster, jobid, account, "user", partition, start, "end", alloctres FROM public.all_jobs WHERE i BETWEEN 266 AND 300
    UNION ALL
    SELECT cluster, 'late-' || jobid, account, "user", partition, start, "end", alloctres FROM public.all_jobs WHERE i BETWEEN 100 AND 140$$);
SELECT is(pg_temp.differ(), '', 'jobs loaded after their period was re-rated are charged at its new rates');

-- ---- 7b. closing a rate row while another session charges a job that starts after the new
--          end: the close waits for the charge and is refused (HA006), as for a committed one ----
SELECT dblink_exec('ry2', $$BEGIN; INSERT INTO hpcacct.job (cluster, jobid, account, "user", partition, start, "end", alloctres)
    VALUES ('alpha', 'june', 'b1', 'u0', 'std', '2024-06-10 00:00 Europe/Berlin', '2024-06-10 01:00 Europe/Berlin', 'cpu=2')$$);
SELECT dblink_send_query('ry3', $$SELECT public.outcome($u$UPDATE hpcacct.resource SET valid = tstzrange(lower(valid), '2024-06-01 00:00 Europe/Berlin')
                                                       WHERE cluster = 'alpha' AND upper_inf(valid)$u$)$$);
SELECT pg_sleep(0.5);
SELECT dblink_exec('ry2', 'COMMIT');
SELECT is((SELECT x FROM dblink_get_result('ry3') AS t(x text)), 'HA006',
          'closing a row before the start of a job being charged at it in another session is refused (HA006)');
SELECT * FROM dblink_get_result('ry3') AS t(x text);
SELECT is(pg_temp.one($$SELECT count(*) FROM (SELECT l.jobid FROM hpcacct.ledger l JOIN hpcacct.resource r USING (resource_id)
                                               WHERE l.kind = 'charge' AND NOT r.valid @> l.job_start
                                               GROUP BY l.cluster, l.jobid, l.job_submit, r.resource_id HAVING sum(l.amount) <> 0) c$$),
          '0', 'no charge is left at a row whose validity does not hold its job''s start');
SELECT dblink_exec('ry2', 'BEGIN ISOLATION LEVEL REPEATABLE READ');
SELECT is(t.x, '25000', 'closing a rate row in a REPEATABLE READ transaction is refused (25000)')
FROM dblink('ry2', $$SELECT public.outcome($u$UPDATE hpcacct.resource SET valid = tstzrange(lower(valid), '2024-07-01 00:00 Europe/Berlin')
                                            WHERE cluster = 'alpha' AND upper_inf(valid)$u$)$$) AS t(x text);
SELECT is(t.x, 'ok', 'changing its description there is not')
FROM dblink('ry2', $$SELECT public.outcome($u$UPDATE hpcacct.resource SET description = 'alpha, standard nodes'
                                            WHERE cluster = 'alpha' AND upper_inf(valid)$u$)$$) AS t(x text);
SELECT dblink_exec('ry2', 'ROLLBACK');
-- (without the refusal: reopened, so that the steps below run)
SELECT dblink_exec('ry', $$UPDATE hpcacct.resource SET valid = tstzrange(lower(valid), NULL)
                           WHERE cluster = 'alpha' AND upper(valid) = '2024-06-01 00:00 Europe/Berlin'$$);

-- ---- 8. a job deleted, jobs corrected (README: an UPDATE of the job row), after re-rating ----
SELECT dblink_exec('ry', $$
    DELETE FROM hpcacct.job WHERE jobid IN ('150', '151');
    UPDATE hpcacct.job SET "end" = "end" + interval '6 minutes' WHERE jobid IN ('152', '153');
    UPDATE hpcacct.job SET start = start - interval '4 days', "end" = "end" - interval '4 days' WHERE jobid IN ('154', '155');
    UPDATE hpcacct.job SET alloctres = 'cpu=4,gres/gpu=4' WHERE jobid = '157'$$);
SELECT is(pg_temp.differ(), '', 'a deleted and corrected jobs after re-rating: a fresh database''s figures');
SELECT is(pg_temp.rollup_differs(), '', 'the rollups are the rebuilt ones');
SELECT count(*) FROM dblink('ry', 'SELECT hpcacct.compact_rollup()') AS t(n bigint);
SELECT count(*) FROM dblink('ry', 'SELECT hpcacct.compact_rollup()') AS t(n bigint);
SELECT is(pg_temp.differ(), '', 'compacted (twice) the figures are the same');
SELECT is(pg_temp.rollup_differs(), '', 'and the rollups');

-- ---- 9. a re-rating after compaction folded its months; a job deleted and one loaded then ----
SELECT is(pg_temp.one($$SELECT count(hpcacct.rerate(r.resource_id, 4, '2024-04-12 00:00 Europe/Berlin'))::text
                        FROM hpcacct.resource r WHERE r.cluster = 'beta' AND r.rate = 3.5$$), '1', 're-rating beta from 12 April, its months folded');
SELECT dblink_exec('ry', $$DELETE FROM hpcacct.job WHERE jobid = '263';
    INSERT INTO hpcacct.job (cluster, jobid, account, "user", partition, start, "end", alloctres)
    SELECT cluster, 'late2-' || jobid, account, "user", partition, start, "end", alloctres FROM public.all_jobs WHERE i BETWEEN 255 AND 262$$);
SELECT is(pg_temp.differ(), '', 'the figures are a fresh database''s');
SELECT is(pg_temp.rollup_differs(), '', 'and the rollups the rebuilt ones');
SELECT count(*) FROM dblink('ry', 'SELECT hpcacct.compact_rollup()') AS t(n bigint);
SELECT is(pg_temp.differ(), '', 'compacted again: the same');

SELECT dblink_disconnect('ry'), dblink_disconnect('ry2'), dblink_disconnect('ry3'), dblink_disconnect('ryf');
SELECT dblink_exec('ry_adm', 'DROP DATABASE hpcacct_rate_year');
SELECT dblink_exec('ry_adm_fresh', 'DROP DATABASE hpcacct_rate_year_fresh');
SELECT dblink_disconnect('ry_adm'), dblink_disconnect('ry_adm_fresh');

-- ---- rights, bad input, the log (in this database, rolled back) ----
CALL setup_roles();
INSERT INTO setting VALUES ('timezone', 'UTC') ON CONFLICT (name) DO UPDATE SET value = excluded.value;
INSERT INTO account (name) VALUES ('ry_a'), ('ry_b');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, valid)
VALUES ('ryc', 'std', 'cpu=8', 'cpu=1', 1, 'core-hours', tstzrange('2024-01-01 00:00+00', NULL));
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres) VALUES
    ('ryc', '1', 'ry_a', 'ry_pa', 'std', '2024-03-01 00:00+00', '2024-03-01 01:00+00', 'cpu=2'),
    ('ryc', '2', 'ry_b', 'ry_pb', 'std', '2024-04-01 00:00+00', '2024-04-01 01:00+00', 'cpu=2');
CREATE ROLE ry_pa IN ROLE hpcacct_portal;
CREATE ROLE ry_load IN ROLE hpcacct_ingest;
CREATE ROLE ry_staff IN ROLE hpcacct_admin;
INSERT INTO hpc_user (username) VALUES ('ry_pa');
INSERT INTO membership (account, username, role) VALUES ('ry_a', 'ry_pa', 'admin');
CREATE TEMP TABLE r0 AS SELECT resource_id AS id FROM resource WHERE cluster = 'ryc';
GRANT SELECT ON r0 TO PUBLIC;
\ir include/fingerprint.psql
CREATE TEMP TABLE fp AS SELECT pg_temp.fingerprint() AS f;
SELECT throws_ok(format('SELECT hpcacct.rerate(%s, NULL, ''2024-03-15'')', id), '22004', NULL, 'a NULL rate: 22004') FROM r0;
SELECT throws_ok($$SELECT hpcacct.rerate(NULL, 2, '2024-03-15')$$, '22004', NULL, 'a NULL resource: 22004');
SELECT throws_ok(format('SELECT hpcacct.rerate(%s, 2, NULL)', id), '22004', NULL, 'a NULL instant: 22004') FROM r0;
SELECT throws_ok($$SELECT hpcacct.rerate(-7, 2, '2024-03-15')$$, '42704', NULL, 'an unknown resource: 42704');
SELECT throws_ok(format('UPDATE hpcacct.resource SET valid = tstzrange(lower(valid), ''2023-06-01'') WHERE resource_id = %s', id),
                 '22000', NULL, 'closing a row at an end before its start: 22000') FROM r0;
SELECT throws_ok(format('UPDATE hpcacct.resource SET valid = tstzrange(lower(valid), lower(valid)) WHERE resource_id = %s', id),
                 'HA006', NULL, 'closing it at its start (an empty range): HA006') FROM r0;
SET SESSION AUTHORIZATION ry_pa;
SELECT throws_ok(format('SELECT hpcacct.rerate(%s, 2, ''2024-03-15'')', id), '42501', NULL, 'a portal login cannot re-rate') FROM r0;
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION ry_load;
SELECT throws_ok(format('SELECT hpcacct.rerate(%s, 2, ''2024-03-15'')', id), '42501', NULL, 'nor can the ingest login') FROM r0;
SELECT throws_ok('SELECT hpcacct.rerate_catch_up()', '42501', NULL, 'nor run rerate_catch_up()');
RESET SESSION AUTHORIZATION;
CREATE ROLE ry_audit IN ROLE hpcacct_auditor;
SET SESSION AUTHORIZATION ry_audit;
SELECT throws_ok(format('SELECT hpcacct.rerate(%s, 2, ''2024-03-15'')', id), '42501', NULL, 'nor an auditor') FROM r0;
RESET SESSION AUTHORIZATION;
SELECT is(pg_temp.fingerprint(), (SELECT f FROM fp), 'the refused calls wrote nothing');
SET SESSION AUTHORIZATION ry_staff;
SELECT lives_ok(format('SELECT hpcacct.rerate(%s, 2, ''2024-03-15'', ''Q2 price'')', id), 'staff re-rate') FROM r0;
RESET SESSION AUTHORIZATION;
SELECT is((SELECT (rerated_by, rerated_at BETWEEN now() AND clock_timestamp(), jobs, amount_before, amount_after, note)::text
           FROM rerate_log), ('ry_staff', true, 1, 2.000000, 4.000000, 'Q2 price')::text,
          'the log names who, when, and what moved');
SET SESSION AUTHORIZATION ry_pa;
SELECT is((SELECT count(*) FROM hpcacct.rerate_log), 0::bigint, 'a portal user sees no row of the log');
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION ry_audit;
SELECT is((SELECT count(*) FROM hpcacct.rerate_log), 1::bigint, 'an auditor reads it');
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION ry_load;
SELECT throws_ok('SELECT count(*) FROM hpcacct.rerate_log', '42501', NULL, 'the ingest login cannot read it');
RESET SESSION AUTHORIZATION;

SELECT * FROM finish();
ROLLBACK;
