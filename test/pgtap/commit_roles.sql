-- What each role's work does at COMMIT. Deferred triggers (contact_follow,
-- outbox_withdraw_member) run when a transaction commits, as the session's role, outside the
-- SECURITY DEFINER function that wrote the row; a test that rolls its transaction back never
-- fires them. Here every operation the README gives a role runs as a login of that role in
-- a scratch database, through dblink, and commits; then its effect is read back.
BEGIN;
SET search_path = public;
SET client_min_messages = warning;
SELECT plan(56);

\set scratch hpcacct_commit_roles
\set adm cr_adm
\ir include/scratch_db.psql
-- the six roles are cluster-wide: made here (and dropped at the end) only if missing
SELECT NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpcacct_admin') AS made_roles \gset
SELECT dblink_connect('cr_setup', :'srv' || ' dbname=' || :'scratch');
SELECT dblink_exec('cr_setup', $s$
    SET client_min_messages = warning;
    CREATE EXTENSION hpcacct CASCADE;
    SELECT hpcacct.create_job_table();
    CALL hpcacct.setup_roles();
$s$);
SELECT dblink_exec('cr_adm', format('DROP ROLE IF EXISTS %s', r))
FROM unnest(ARRAY['cr_admin', 'cr_loader', 'cr_pa', 'cr_alice', 'cr_bob', 'cr_dan', 'cr_submit', 'cr_mailer',
                  'cr_audit']) AS r;
SELECT dblink_exec('cr_adm', $s$
    CREATE ROLE cr_admin LOGIN IN ROLE hpcacct_admin;
    CREATE ROLE cr_loader LOGIN IN ROLE hpcacct_ingest;
    CREATE ROLE cr_pa LOGIN IN ROLE hpcacct_portal;
    CREATE ROLE cr_alice LOGIN IN ROLE hpcacct_portal;
    CREATE ROLE cr_bob LOGIN IN ROLE hpcacct_portal;
    CREATE ROLE cr_dan LOGIN IN ROLE hpcacct_portal;
    CREATE ROLE cr_submit LOGIN IN ROLE hpcacct_submit;
    CREATE ROLE cr_mailer LOGIN IN ROLE hpcacct_notify;
    CREATE ROLE cr_audit LOGIN IN ROLE hpcacct_auditor;
$s$);
SELECT dblink_exec('cr_setup', $s$
    SET search_path = hpcacct, public;
    INSERT INTO setting VALUES ('timezone', 'UTC'), ('notify_order_wait', '0');
    INSERT INTO account (name) VALUES ('cr_p');
    INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('crc', 'cpu', 'cpu=16', 'cpu=1', 1, 'NPL');
    SELECT deposit('cr_p', '2024-01-01', 1000);
    SELECT add_user(u, '2024-01-02') FROM unnest(ARRAY['cr_pa', 'cr_alice', 'cr_bob', 'cr_dan', 'cr_eve']) AS u;
    SELECT add_member('cr_p', 'cr_pa', 'admin'), add_member('cr_p', 'cr_alice'), add_member('cr_p', 'cr_bob'),
           add_member('cr_p', 'cr_dan');
    INSERT INTO contact (username, email) VALUES ('cr_pa', 'pa@example.org'), ('cr_bob', 'bob@example.org'),
                                                 ('cr_dan', 'dan@example.org');
$s$);

-- runs SQL on a connection (one transaction, which commits): 'ok' or the error's message (a
-- SET last, as dblink_exec() takes no rows)
CREATE FUNCTION pg_temp.run(conn text, statements text) RETURNS text LANGUAGE plpgsql AS $$
    BEGIN
        IF dblink_exec(conn, statements || '; SET application_name = commit_roles', false) = 'ERROR' THEN
            RETURN dblink_error_message(conn);
        END IF;
        RETURN 'ok';
    END $$;
-- one value read, as the superuser, from what has been committed
CREATE FUNCTION pg_temp.q(query text) RETURNS text LANGUAGE sql AS $$
    SELECT v FROM dblink('cr_setup', query) AS t(v text) $$;
CREATE FUNCTION pg_temp.login(who text) RETURNS text LANGUAGE sql AS $$
    SELECT dblink_connect(who, format('%s dbname=%s user=%s', current_setting('cr.srv'), current_setting('cr.db'), who)) $$;
SELECT set_config('cr.srv', :'srv', true), set_config('cr.db', :'scratch', true);
SELECT pg_temp.login(u)
FROM unnest(ARRAY['cr_admin', 'cr_loader', 'cr_pa', 'cr_alice', 'cr_bob', 'cr_submit', 'cr_mailer', 'cr_audit']) AS u;

-- ---- the portal ----
SELECT is(pg_temp.run('cr_alice', $$INSERT INTO hpcacct.contact (username, email) VALUES ('cr_alice', 'alice@old.example.org')$$),
          'ok', 'a portal user inserts her contact row and commits');
SELECT is(pg_temp.q($$SELECT email FROM hpcacct.contact WHERE username = 'cr_alice'$$), 'alice@old.example.org',
          'the row is there afterwards');
SELECT is(pg_temp.run('cr_setup', $$SELECT hpcacct.outbox_add('balance_low', 'cr/1', 'cr_p', 's', E'b\n', '{}', true)$$), 'ok',
          'a message about the account is written to its members');
SELECT is(pg_temp.run('cr_alice', $$UPDATE hpcacct.contact SET email = 'alice@new.example.org' WHERE username = 'cr_alice'$$),
          'ok', 'she changes her address and commits (contact_follow runs at commit, as her login)');
SELECT is(pg_temp.q($$SELECT r.address FROM hpcacct.outbox_recipient r JOIN hpcacct.outbox m USING (message_id)
                      WHERE m.decision_key = 'cr/1' AND r.username = 'cr_alice'$$), 'alice@new.example.org',
          'her pending delivery goes to the new address');
SELECT is(pg_temp.run('cr_bob', $$UPDATE hpcacct.contact SET notify = false WHERE username = 'cr_bob'$$),
          'ok', 'another silences his address and commits');
SELECT is(pg_temp.q($$SELECT r.state FROM hpcacct.outbox_recipient r JOIN hpcacct.outbox m USING (message_id)
                      WHERE m.decision_key = 'cr/1' AND r.username = 'cr_bob'$$), 'withdrawn',
          'his pending delivery is withdrawn');
SELECT is(pg_temp.run('cr_pa', $$SELECT hpcacct.remove_member('cr_p', 'cr_dan')$$),
          'ok', 'the project administrator removes a member from her portal login and commits');
SELECT is(pg_temp.q($$SELECT count(*)::text FROM hpcacct.membership WHERE account = 'cr_p' AND username = 'cr_dan'$$), '0',
          'the membership is gone');
SELECT is(pg_temp.q($$SELECT r.state FROM hpcacct.outbox_recipient r JOIN hpcacct.outbox m USING (message_id)
                      WHERE m.decision_key = 'cr/1' AND r.username = 'cr_dan'$$), 'withdrawn',
          'and the removed member''s pending delivery is withdrawn');
SELECT is(pg_temp.run('cr_pa', $$SELECT hpcacct.add_member('cr_p', 'cr_eve')$$),
          'ok', 'she adds a member and commits');
SELECT is(pg_temp.q($$SELECT count(*)::text FROM hpcacct.membership WHERE account = 'cr_p' AND username = 'cr_eve'$$), '1',
          'the membership is there');

-- her portal's pages read, and write nothing
SELECT is((SELECT v FROM dblink('cr_alice', $$SELECT (hpcacct.my_accounts()::text LIKE '%"cr_p"%')::text
                                                 || ' ' || (hpcacct.account_month('cr_p', '2024-02-01') IS NOT NULL)::text
                                                 || ' ' || (hpcacct.statement_html('cr_p', '2024-02-01') IS NOT NULL)::text
                                                 || ' ' || (pg_current_xact_id_if_assigned() IS NULL)::text$$) AS t(v text)),
          'true true true true', 'her portal''s pages (my_accounts, account_month, statement_html) read and write nothing');

-- ---- loading ----
SELECT is(pg_temp.run('cr_loader', $$INSERT INTO hpcacct.job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
                                    VALUES ('crc', '1', 'cr_p', 'cr_alice', 'cpu', '2024-02-01 00:00+00', '2024-02-01 02:00+00', 'cpu=1', 'COMPLETED')$$),
          'ok', 'the ingest login inserts a job into hpcacct.job and commits');
SELECT is(pg_temp.q($$SELECT sum(amount)::numeric(12,0)::text FROM hpcacct.ledger WHERE kind = 'charge' AND cluster = 'crc' AND jobid = '1'$$), '2',
          'its charge is booked');
SELECT is(pg_temp.run('cr_loader', $$INSERT INTO hpcacct.job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
                                    VALUES ('crc', '1', 'cr_p', 'cr_alice', 'cpu', '2024-02-01 00:00+00', '2024-02-01 02:00+00', 'cpu=1', 'COMPLETED'),
                                           ('crc', '6', 'cr_p', 'cr_alice', 'cpu', '2024-02-01 00:00+00', '2024-02-01 01:00+00', 'cpu=1', 'COMPLETED')
                                    ON CONFLICT DO NOTHING$$),
          'ok', 'it inserts a job already loaded and a new one with ON CONFLICT DO NOTHING (the README''s hint) and commits');
SELECT is(pg_temp.q($$SELECT string_agg(jobid || ' ' || amount::numeric(12,0), ', ' ORDER BY jobid) FROM hpcacct.ledger
                      WHERE kind = 'charge' AND cluster = 'crc'$$), '1 2, 6 1', 'the new one is charged, the other not twice');
SELECT is(pg_temp.run('cr_loader', $$INSERT INTO hpcacct.sacct_staging (lineno, line, cluster, jobid, account, "user", partition, submit, start, "end", alloctres, state)
                                    VALUES (1, 'crc|2|cr_p|cr_alice|cpu|…', 'crc', '2', 'cr_p', 'cr_alice', 'cpu', '2024-02-02T00:00:00+0000',
                                            '2024-02-02T00:00:00+0000', '2024-02-02T03:00:00+0000', 'cpu=1', 'COMPLETED');
                                    SELECT * FROM hpcacct.load_sacct()$$),
          'ok', 'it stages a sacct line and loads it with load_sacct(), each committed');
SELECT is(pg_temp.q($$SELECT sum(amount)::numeric(12,0)::text FROM hpcacct.ledger WHERE kind = 'charge' AND cluster = 'crc' AND jobid = '2'$$), '3',
          'the loaded job is charged');
-- hpcacct-sacct load: BEGIN, COPY into the staging table, load_sacct(), COMMIT; a line it cannot
-- charge is quarantined, and job 2 sent again with a later end is re-rated
SELECT is(pg_temp.run('cr_loader', $$BEGIN;
                                    INSERT INTO hpcacct.sacct_staging (lineno, line, cluster, jobid, account, "user", partition, submit, start, "end", alloctres, state)
                                    VALUES (1, 'crc|2|…', 'crc', '2', 'cr_p', 'cr_alice', 'cpu', '2024-02-02T00:00:00+0000',
                                            '2024-02-02T00:00:00+0000', '2024-02-02T04:00:00+0000', 'cpu=1', 'COMPLETED'),
                                           (2, 'crc|4|…', 'crc', '4', 'cr_p', 'cr_alice', 'cpu', '2024-02-02T00:00:00+0000',
                                            '2024-02-02T00:00:00+0000', '2024-02-02T04:00:00+0000', 'cpu=oops', 'COMPLETED');
                                    SELECT * FROM hpcacct.load_sacct(NULL, NULL);
                                    COMMIT$$),
          'ok', 'the loader''s transaction (stage, load, one with a line it cannot charge) commits');
SELECT is(pg_temp.q($$SELECT sum(amount)::numeric(12,0)::text FROM hpcacct.ledger WHERE kind = 'charge' AND cluster = 'crc' AND jobid = '2'$$), '4',
          'the job sent again is re-rated');
SELECT is(pg_temp.q($$SELECT count(*)::text FROM hpcacct.sacct_quarantine WHERE jobid = '4' AND resolved_at IS NULL$$), '1',
          'and the bad line is quarantined');
-- hpcacct-sacct run: one transaction a cluster, its window's start, the staged lines, and
-- load_sacct() through the window's end for that cluster, which moves the watermark
SELECT is(pg_temp.run('cr_loader', $$BEGIN;
                                    SELECT hpcacct.sacct_window_start('crc', '300 seconds');
                                    INSERT INTO hpcacct.sacct_staging (lineno, line, cluster, jobid, account, "user", partition, submit, start, "end", alloctres, state)
                                    VALUES (1, 'crc|5|…', 'crc', '5', 'cr_p', 'cr_alice', 'cpu', '2024-02-02T05:00:00+0000',
                                            '2024-02-02T05:00:00+0000', '2024-02-02T06:00:00+0000', 'cpu=1', 'COMPLETED');
                                    SELECT * FROM hpcacct.load_sacct('2024-02-02T07:00:00+00', '{crc}');
                                    COMMIT$$),
          'ok', 'the loader''s run over a cluster''s window commits');
SELECT is(pg_temp.q($$SELECT count(*)::text FROM hpcacct.ledger WHERE kind = 'charge' AND cluster = 'crc' AND jobid = '5'$$), '1',
          'its job is charged');
SELECT is((SELECT v FROM dblink('cr_loader', $$SELECT hpcacct.sacct_window_start('crc', '300 seconds')::text$$) AS t(v text)),
          (SELECT v FROM dblink('cr_setup', $$SELECT (timestamptz '2024-02-02T07:00:00+00' - interval '300 seconds')::text$$) AS t(v text)),
          'and the next window starts at the watermark it committed, less the overlap');
-- deferred rollups: the charge's entry ids are recorded, and pg_cron's roll_up_pending() (as the
-- administrator's login) rolls them up
SELECT dblink_exec('cr_setup', $$INSERT INTO hpcacct.setting VALUES ('rollup', 'deferred')$$);
SELECT is(pg_temp.run('cr_loader', $$INSERT INTO hpcacct.job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
                                    VALUES ('crc', '3', 'cr_p', 'cr_alice', 'cpu', '2024-02-03 00:00+00', '2024-02-03 01:00+00', 'cpu=1', 'COMPLETED')$$),
          'ok', 'under deferred rollups the ingest login''s insert commits');
SELECT is(pg_temp.q($$SELECT (count(*) > 0)::text FROM hpcacct.rollup_pending$$), 'true', 'and leaves its charge pending');
SELECT is(pg_temp.run('cr_admin', $$SELECT hpcacct.roll_up_pending()$$), 'ok', 'the administrator''s login rolls it up and commits');
SELECT is(pg_temp.q($$SELECT count(*)::text FROM hpcacct.rollup_pending$$), '0', 'nothing is pending afterwards');

-- ---- the submit check: reads only ----
SELECT is(pg_temp.q($$SELECT 1::text$$), '1', '(the superuser''s connection still answers)');
SELECT is((SELECT v FROM dblink('cr_submit', $$SELECT (hpcacct.check_submit('cr_alice', 'cr_p', '2024-02-15')).ok::text
                                                 || ' ' || (pg_current_xact_id_if_assigned() IS NULL)::text$$) AS t(v text)),
          'true true', 'the submit login''s check_submit answers and writes nothing');

-- ---- the mail sender's protocol, each step its own transaction ----
CREATE TEMP TABLE claimed AS
    SELECT * FROM dblink('cr_mailer', $$SELECT recipient_id FROM hpcacct.outbox_claim('crw', '5 minutes', 50)$$) AS t(recipient_id bigint);
SELECT is((SELECT count(*)::int FROM claimed), 2, 'the sender claims the two pending deliveries (pa''s and alice''s; eve has no address)');
SELECT is((SELECT string_agg(pg_temp.run('cr_mailer', format($$SELECT hpcacct.outbox_sending('crw', %s)$$, recipient_id)), ',')
           FROM claimed), 'ok,ok', 'it marks each as being sent, committing each');
SELECT is((SELECT string_agg(pg_temp.run('cr_mailer', format($$SELECT hpcacct.outbox_result('crw', %s, 'delivered')$$, recipient_id)), ',')
           FROM claimed), 'ok,ok', 'and records each delivered');
SELECT is(pg_temp.q($$SELECT string_agg(r.username || ' ' || r.state, ', ' ORDER BY r.username)
                      FROM hpcacct.outbox_recipient r JOIN hpcacct.outbox m USING (message_id) WHERE m.decision_key = 'cr/1'$$),
          'cr_alice delivered, cr_bob withdrawn, cr_dan withdrawn, cr_pa delivered', 'the deliveries are delivered afterwards');

-- ---- the auditor: reads, writes nothing ----
SELECT is((SELECT v FROM dblink('cr_audit', $$SELECT (SELECT count(*) FROM hpcacct.ledger WHERE kind = 'charge')::text
                                                 || ' ' || (SELECT count(*) FROM hpcacct.fairshare_all())::text
                                                 || ' ' || (pg_current_xact_id_if_assigned() IS NULL)::text$$) AS t(v text)),
          pg_temp.q($$SELECT count(*)::text FROM hpcacct.ledger WHERE kind = 'charge'$$) || ' 2 true', 'the auditor reads every charge and the fair share, and writes nothing');

-- ---- the administrator's scheduled runs, each committed ----
SELECT is(pg_temp.run('cr_admin', $$CALL hpcacct.regulate(hpcacct.site_today() - 1)$$), 'ok', 'regulate() as the administrator''s login');
SELECT is(pg_temp.run('cr_admin', $$CALL hpcacct.open_quarter(hpcacct.site_today())$$), 'ok', 'open_quarter()');
SELECT is(pg_temp.run('cr_admin', $$SELECT hpcacct.notify_scan()$$), 'ok', 'notify_scan()');
SELECT is(pg_temp.run('cr_admin', $$SELECT hpcacct.compact_rollup(); SELECT hpcacct.outbox_prune('1 year')$$), 'ok',
          'compact_rollup() and outbox_prune()');

SELECT is(pg_temp.run('cr_admin', $$SELECT hpcacct.rebuild_rollup()$$), 'ok', 'rebuild_rollup()');
SELECT is(pg_temp.run('cr_admin', $$UPDATE hpcacct.setting SET value = 'immediate' WHERE name = 'rollup';
                                   UPDATE hpcacct.setting SET value = 'Europe/Berlin' WHERE name = 'timezone'$$), 'ok',
          'the administrator changes settings the rollups follow');
SELECT is(pg_temp.run('cr_admin', $$SELECT hpcacct.rerate(resource_id, 2, '2024-02-01 12:00+00') FROM hpcacct.resource WHERE cluster = 'crc'$$),
          'ok', 'rerate()');
SELECT is(pg_temp.q($$SELECT sum(amount)::numeric(12,0)::text FROM hpcacct.ledger WHERE kind = 'charge' AND cluster = 'crc'$$), '15',
          'the jobs run after the new rate''s start are charged twice as much (2 + 1 + 4·2 + 1·2 + 1·2)');
-- a queued job of an account that runs dry: recheck_queued() holds it and notify_hold writes a message
SELECT dblink_exec('cr_setup', $$INSERT INTO hpcacct.account (name) VALUES ('cr_dry');
                                  SELECT hpcacct.add_member('cr_dry', 'cr_alice');
                                  INSERT INTO hpcacct.pending_job (cluster, jobid, username, account) VALUES ('crc', 'q1', 'cr_alice', 'cr_dry')$$);
SELECT is(pg_temp.run('cr_admin', $$SELECT * FROM hpcacct.recheck_queued()$$), 'ok', 'recheck_queued()');
SELECT is(pg_temp.q($$SELECT held::text FROM hpcacct.pending_job WHERE jobid = 'q1'$$), 'true', 'holds the job');
SELECT is(pg_temp.q($$SELECT count(*)::text FROM hpcacct.outbox WHERE topic = 'job_held'$$), '1', 'and tells its owner');
SELECT is(pg_temp.run('cr_admin', $$DELETE FROM hpcacct.membership WHERE account = 'cr_p' AND username = 'cr_eve';
                                   SELECT hpcacct.remove_member('cr_p', 'cr_bob', 'cr_pa');
                                   DELETE FROM hpcacct.job WHERE cluster = 'crc' AND jobid = '3'$$), 'ok',
          'the administrator removes members (directly, and for a project administrator) and deletes a job');
SELECT is(pg_temp.q($$SELECT sum(amount)::numeric(12,0)::text FROM hpcacct.ledger WHERE cluster = 'crc' AND jobid = '3'$$), '0',
          'the job''s charge is reversed');

-- ---- the sender's other results ----
-- hpcacct-notify listens; a message committed by another session wakes it
SELECT dblink_exec('cr_mailer', 'LISTEN hpcacct_outbox');
SELECT is(pg_temp.run('cr_setup', $$SELECT hpcacct.outbox_add('balance_low', 'cr/2', 'cr_p', 's', E'b\n', '{}', true)$$), 'ok',
          'a second message is written');
SELECT is((SELECT count(*)::int FROM dblink_get_notify('cr_mailer') WHERE notify_name = 'hpcacct_outbox'), 1,
          'the sender is woken by its commit');
CREATE TEMP TABLE claimed2 AS
    SELECT recipient_id, pg_temp.q(format($$SELECT r.username || ' ' || m.decision_key FROM hpcacct.outbox_recipient r
                                             JOIN hpcacct.outbox m USING (message_id) WHERE r.recipient_id = %s$$, recipient_id)) AS username
    FROM dblink('cr_mailer', $$SELECT recipient_id FROM hpcacct.outbox_claim('crw', '5 minutes', 50)$$) AS t(recipient_id bigint);
SELECT is((SELECT string_agg(username, ',' ORDER BY username) FROM claimed2 WHERE username LIKE '% cr/2'),
          'cr_alice cr/2,cr_pa cr/2', 'a second message is claimed, with what else is due');
SELECT is((SELECT string_agg(pg_temp.run('cr_mailer', format($$SELECT hpcacct.outbox_result('crw', %s, %L, 'smtp said no')$$,
                                                              recipient_id, CASE username WHEN 'cr_pa cr/2' THEN 'retry' ELSE 'failed' END)), ',')
           FROM claimed2 WHERE username LIKE '% cr/2'), 'ok,ok', 'the sender records a retry and a failure');
SELECT is(pg_temp.q($$SELECT string_agg(r.username || ' ' || r.state, ', ' ORDER BY r.username)
                      FROM hpcacct.outbox_recipient r JOIN hpcacct.outbox m USING (message_id) WHERE m.decision_key = 'cr/2'$$),
          'cr_alice failed, cr_pa pending', 'they are recorded');
SELECT is((SELECT v FROM dblink('cr_mailer', $$SELECT (hpcacct.outbox_next_due() IS NOT NULL)::text$$) AS t(v text)), 'true',
          'outbox_next_due() tells the retry''s time');

-- ---- the statement writer (hpcacct-report as the auditor's login): one read-only transaction ----
SELECT is(pg_temp.run('cr_audit', $$BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;
                                   SELECT a FROM hpcacct.statement_accounts('2024-02-01') a;
                                   SELECT hpcacct.account_month('cr_p', '2024-02-01')::text;
                                   SELECT hpcacct.statement_html('cr_p', '2024-02-01');
                                   COMMIT$$), 'ok', 'the auditor writes a month''s statements');

SELECT dblink_disconnect(u)
FROM unnest(ARRAY['cr_admin', 'cr_loader', 'cr_pa', 'cr_alice', 'cr_bob', 'cr_submit', 'cr_mailer', 'cr_audit', 'cr_setup']) AS u;
SELECT dblink_exec('cr_adm', 'DROP DATABASE hpcacct_commit_roles');
SELECT dblink_exec('cr_adm', format('DROP ROLE %s', r))
FROM unnest(ARRAY['cr_admin', 'cr_loader', 'cr_pa', 'cr_alice', 'cr_bob', 'cr_dan', 'cr_submit', 'cr_mailer',
                  'cr_audit']) AS r;
SELECT dblink_exec('cr_adm', format('DROP ROLE %s', r))
FROM unnest(ARRAY['hpcacct_admin', 'hpcacct_ingest', 'hpcacct_portal', 'hpcacct_auditor', 'hpcacct_submit',
                  'hpcacct_notify']) AS r
WHERE :'made_roles';
SELECT dblink_disconnect('cr_adm');

SELECT * FROM finish();
ROLLBACK;
