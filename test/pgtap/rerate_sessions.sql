-- Closing and re-rating rates while other sessions charge, in a scratch database (dblink):
-- rerate_catch_up() under REPEATABLE READ, whose snapshot predates a late charge committed
-- before its ledger lock; and two administrators each replacing a rate-0 row in a transaction
-- (close it, add the new row, load its jobs again), as rerate()'s hint says, at once; a row
-- re-rated while another transaction edits it; a row applied by replication (a federation
-- site's apply worker) in any isolation; and a row closed by an administrator's login.
BEGIN;
SET search_path = public, hpcacct;
SET client_min_messages = warning;
SELECT plan(15);

\set scratch hpcacct_rerate_sessions
\set adm rs_adm
\ir include/scratch_db.psql
SELECT dblink_connect('rs1', :'srv' || ' dbname=hpcacct_rerate_sessions');
SELECT dblink_connect('rs2', :'srv' || ' dbname=hpcacct_rerate_sessions');

SELECT dblink_exec('rs1', $s$
    SET client_min_messages = warning;
    CREATE EXTENSION hpcacct CASCADE;
    SELECT hpcacct.create_job_table();
    SET search_path = public, hpcacct;
    INSERT INTO setting VALUES ('timezone', 'UTC') ON CONFLICT (name) DO UPDATE SET value = excluded.value;
    INSERT INTO account (name) VALUES ('a1');
    INSERT INTO resource (cluster, partition, node, bundle, rate, unit, valid) VALUES
        ('x', 'gpu', 'cpu=32,gres/gpu=4', 'gres/gpu=1', 1, 'hours', tstzrange('2024-01-01 00:00+00', NULL)),
        ('y', 'std', 'cpu=8', 'cpu=1', 0, 'hours', tstzrange('2024-01-01 00:00+00', NULL)),
        ('z', 'std', 'cpu=8', 'cpu=1', 0, 'hours', tstzrange('2024-01-01 00:00+00', NULL));
    INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres) VALUES
        ('x', 'x1', 'a1', 'u', 'gpu', '2024-05-01 00:00+00', '2024-05-01 05:00+00', 'gres/gpu=2'),
        ('y', 'y1', 'a1', 'u', 'std', '2024-05-01 00:00+00', '2024-05-01 05:00+00', 'cpu=2'),
        ('z', 'z1', 'a1', 'u', 'std', '2024-05-01 00:00+00', '2024-05-01 05:00+00', 'cpu=2');
    SELECT rerate(resource_id, 2, '2024-04-01 00:00+00') FROM resource WHERE cluster = 'x';
    -- a query's one value, or the SQLSTATE it raised
    CREATE FUNCTION public.value_or_state(q text) RETURNS text LANGUAGE plpgsql AS $b$
        DECLARE
            v text;
        BEGIN
            EXECUTE q INTO v;
            RETURN v;
        EXCEPTION WHEN OTHERS THEN
            RETURN SQLSTATE;
        END $b$;
    RESET client_min_messages;
$s$);
CREATE FUNCTION pg_temp.one(conn text, q text) RETURNS text LANGUAGE sql AS $$ SELECT t.x FROM dblink(conn, q) AS t(x text) $$;
-- The error of what conn was sent ('OK' when none), once it finished (within 15 s; cancelled after).
CREATE FUNCTION pg_temp.error_of(conn text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    waited integer := 0;
    msg text;
BEGIN
    WHILE dblink_is_busy(conn) = 1 LOOP
        IF waited >= 300 THEN
            PERFORM dblink_cancel_query(conn);
            PERFORM * FROM dblink_get_result(conn, false) AS t(x text);
            PERFORM * FROM dblink_get_result(conn, false) AS t(x text);
            RETURN 'still waiting after 15 s';
        END IF;
        PERFORM pg_sleep(0.05);
        waited := waited + 1;
    END LOOP;
    PERFORM * FROM dblink_get_result(conn, false) AS t(x text);
    msg := split_part(dblink_error_message(conn), E'\n', 1);
    PERFORM * FROM dblink_get_result(conn, false) AS t(x text);
    RETURN msg;
END $$;

-- ---- 1. rerate_catch_up() under REPEATABLE READ ----
-- rs1's snapshot is taken; then a late charge of x's closed row (a site's job from 1 April
-- on, as replication inserts it) commits; rs1's call locks the ledger after it.
SELECT dblink_exec('rs1', 'BEGIN ISOLATION LEVEL REPEATABLE READ');
SELECT pg_temp.one('rs1', 'SELECT count(*)::text FROM hpcacct.ledger');
SELECT dblink_exec('rs2', $$INSERT INTO hpcacct.ledger (account, kind, amount, unit, resource_id, cluster, jobid, job_submit,
                                                      submitter, job_start, job_end, core_hours)
    SELECT l.account, 'charge', 10.000000, l.unit, r.old_resource_id, 'x', 'late', l.job_submit, l.submitter,
           '2024-05-20 00:00+00', '2024-05-20 05:00+00', 10
    FROM hpcacct.ledger l, hpcacct.rerate_log r WHERE l.jobid = 'x1' AND l.note IS NULL$$);
SELECT is(pg_temp.one('rs1', $$SELECT public.value_or_state('SELECT hpcacct.rerate_catch_up()::text')$$), '25000',
          'rerate_catch_up() under REPEATABLE READ is refused (25000): its snapshot misses the late charge');
SELECT dblink_exec('rs1', 'COMMIT');
SELECT is(pg_temp.one('rs1', 'SELECT hpcacct.rerate_catch_up()::text'), '1',
          'in READ COMMITTED it re-rates the late charge');
SELECT is(pg_temp.one('rs1', $$SELECT format('%s %s', sum(l.amount), sum(l.amount) FILTER (WHERE r.rate = 2))
                               FROM hpcacct.ledger l JOIN hpcacct.resource r USING (resource_id) WHERE l.jobid = 'late'$$),
          '20.000000 20.000000', 'at the new rate, on the new row');
SELECT dblink_exec('rs2', 'BEGIN ISOLATION LEVEL SERIALIZABLE');
SELECT is(pg_temp.one('rs2', $$SELECT public.value_or_state('SELECT hpcacct.rerate_catch_up()::text')$$), '25000',
          'and under SERIALIZABLE');
SELECT dblink_exec('rs2', 'ROLLBACK');

-- ---- 2. two rate-0 rows replaced at once, each in a transaction ----
-- rs1 replaces y's row from 1 April, rs2 z's: close it (its charges net to 0), add the new
-- row, delete the job and insert it again (charged at the new row). Each closes first, then
-- books; neither deadlocks with the other.
SELECT dblink_send_query('rs1', $q$DO $d$ BEGIN
    UPDATE hpcacct.resource SET valid = tstzrange(lower(valid), '2024-04-01 00:00+00') WHERE cluster = 'y';
    INSERT INTO hpcacct.resource (cluster, partition, node, bundle, rate, unit, valid)
    VALUES ('y', 'std', 'cpu=8', 'cpu=1', 3, 'hours', tstzrange('2024-04-01 00:00+00', NULL));
    PERFORM pg_sleep(0.5);
    DELETE FROM hpcacct.job WHERE cluster = 'y';
    INSERT INTO hpcacct.job (cluster, jobid, account, "user", partition, start, "end", alloctres)
    VALUES ('y', 'y1', 'a1', 'u', 'std', '2024-05-01 00:00+00', '2024-05-01 05:00+00', 'cpu=2');
END $d$$q$);
SELECT pg_sleep(0.1);
SELECT dblink_send_query('rs2', $q$DO $d$ BEGIN
    UPDATE hpcacct.resource SET valid = tstzrange(lower(valid), '2024-04-01 00:00+00') WHERE cluster = 'z';
    INSERT INTO hpcacct.resource (cluster, partition, node, bundle, rate, unit, valid)
    VALUES ('z', 'std', 'cpu=8', 'cpu=1', 3, 'hours', tstzrange('2024-04-01 00:00+00', NULL));
    PERFORM pg_sleep(0.5);
    DELETE FROM hpcacct.job WHERE cluster = 'z';
    INSERT INTO hpcacct.job (cluster, jobid, account, "user", partition, start, "end", alloctres)
    VALUES ('z', 'z1', 'a1', 'u', 'std', '2024-05-01 00:00+00', '2024-05-01 05:00+00', 'cpu=2');
END $d$$q$);
SELECT is(pg_temp.error_of('rs1'), 'OK', 'the first replacement commits');
SELECT is(pg_temp.error_of('rs2'), 'OK', 'the second, begun meanwhile, commits too (no deadlock)');
SELECT is(pg_temp.one('rs1', $$SELECT string_agg(format('%s %s', l.jobid, s), ' ' ORDER BY l.jobid)
                               FROM (SELECT jobid, sum(amount) s FROM hpcacct.ledger WHERE cluster IN ('y', 'z') GROUP BY 1) l$$),
          'y1 30.000000 z1 30.000000', 'both jobs are charged at their new rows');
SELECT is(pg_temp.one('rs1', $$SELECT count(*)::text FROM hpcacct.resource WHERE cluster IN ('y', 'z')$$), '4',
          'each cluster has its closed row and its new one');
SELECT is(pg_temp.one('rs1', $$SELECT count(*)::text FROM hpcacct.job WHERE cluster IN ('y', 'z')$$), '2',
          'and its job');

-- ---- 3. rerate() of a row another transaction edits (its description, then its end) ----
-- rerate() locks the ledger, then the row; the edit locked the row first: it must not then
-- wait for the ledger behind rerate() (40P01)
SELECT dblink_send_query('rs1', $q$DO $d$ BEGIN
    UPDATE hpcacct.resource SET description = 'GPU nodes, closing at the year''s end' WHERE cluster = 'x' AND rate = 2;
    PERFORM pg_sleep(0.5);
    UPDATE hpcacct.resource SET valid = tstzrange(lower(valid), '2025-01-01 00:00+00') WHERE cluster = 'x' AND rate = 2;
END $d$$q$);
SELECT pg_sleep(0.1);
SELECT dblink_send_query('rs2', $$SELECT hpcacct.rerate(resource_id, 3, '2024-06-01 00:00+00') FROM hpcacct.resource
                                 WHERE cluster = 'x' AND rate = 2$$);
SELECT is(pg_temp.error_of('rs1'), 'OK', 'the edit commits');
SELECT is(pg_temp.error_of('rs2'), 'OK', 'the re-rating begun meanwhile waits for it and commits (no deadlock)');
SELECT is(pg_temp.one('rs1', $$SELECT string_agg(format('%s %s', rate, valid), '; ' ORDER BY lower(valid)) FROM hpcacct.resource
                               WHERE cluster = 'x'$$),
          '1 ["2024-01-01 00:00:00+00","2024-04-01 00:00:00+00"); 2 ["2024-04-01 00:00:00+00","2024-06-01 00:00:00+00"); '
          '3 ["2024-06-01 00:00:00+00","2025-01-01 00:00:00+00")', 'x''s rows: the re-rating split the closed row');

-- ---- 4. a federation site applies the centre's resource rows as replication does ----
-- (session_replication_role = replica), in whatever isolation its database defaults to: the
-- check does not fire there (the centre checked the change; a site's late charges are
-- rerate_catch_up()'s), so it cannot stop the site's replication with 25000 or HA006
SELECT dblink_exec('rs2', 'BEGIN ISOLATION LEVEL SERIALIZABLE');
SELECT is(pg_temp.one('rs2', $$SELECT public.outcome('UPDATE hpcacct.resource SET valid = tstzrange(lower(valid), ''2024-05-01 00:00+00'') WHERE cluster = ''y'' AND rate = 3')$$),
          '25000', 'closing a row in a SERIALIZABLE session: 25000');
SELECT dblink_exec('rs2', 'ROLLBACK');
SELECT dblink_exec('rs2', 'BEGIN ISOLATION LEVEL SERIALIZABLE');
SELECT dblink_exec('rs2', 'SET LOCAL session_replication_role = replica');
SELECT is(pg_temp.one('rs2', $$SELECT public.outcome('UPDATE hpcacct.resource SET valid = tstzrange(lower(valid), ''2024-04-15 00:00+00'') WHERE cluster = ''y'' AND rate = 3')$$),
          'ok', 'applied as replication applies it, the same change (even before a charged job''s start) goes in');
SELECT dblink_exec('rs2', 'ROLLBACK');

-- ---- 5. an administrator's login (the ledger's lock needs no more than hpcacct_admin has) ----
CALL setup_roles();
CREATE ROLE rs_staff IN ROLE hpcacct_admin;
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, valid)
VALUES ('w', 'std', 'cpu=8', 'cpu=1', 1, 'hours', tstzrange('2024-01-01 00:00+00', NULL));
SET SESSION AUTHORIZATION rs_staff;
SELECT lives_ok($$UPDATE hpcacct.resource SET valid = tstzrange(lower(valid), '2024-06-01 00:00+00') WHERE cluster = 'w'$$,
                'an hpcacct_admin login closes a rate row');
RESET SESSION AUTHORIZATION;

SELECT dblink_disconnect('rs1');
SELECT dblink_disconnect('rs2');
SELECT dblink_exec('rs_adm', 'DROP DATABASE hpcacct_rerate_sessions');
SELECT dblink_disconnect('rs_adm');
SELECT * FROM finish();
ROLLBACK;
