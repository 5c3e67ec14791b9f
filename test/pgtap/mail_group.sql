-- One copy per mailbox (outbox_claim) under a second sender: what a sender waits for, and a
-- change of address that commits while a claim runs (two sessions through dblink, a scratch
-- database).
BEGIN;
SET search_path = public, hpcacct;
SET client_min_messages = warning;
SELECT plan(16);

INSERT INTO setting VALUES ('timezone', 'UTC') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO setting VALUES ('notify_order_wait', '0') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
SET CONSTRAINTS hpcacct.contact_follow IMMEDIATE;
SELECT add_user(u, '2024-01-05') FROM unnest(ARRAY['mg_f', 'mg_g']) AS u;
INSERT INTO contact (username, email) VALUES ('mg_f', 'f@mg.example'), ('mg_g', 'g@mg.example');

-- a delivery that moved to a mailbox whose copy another sender holds waits for that copy: a
-- second sender sleeps until the lease ends (it polled every 0.2 s)
SELECT outbox_add('balance_low', 'mg/1', NULL, 'held', E'one copy\n', '{}', false, ARRAY['mg_f', 'mg_g']);
CREATE TEMP TABLE held AS SELECT c.* FROM outbox_claim('w1', '10 minutes', 100) c;
UPDATE contact SET email = 'f@mg.example' WHERE username = 'mg_g';
SELECT is((SELECT count(*)::int FROM outbox_claim('w2', '10 minutes', 100)), 0,
          'a delivery moved to a leased copy''s mailbox is not claimed');
SELECT cmp_ok(outbox_next_due(), '>=', (SELECT lease_until FROM outbox_recipient WHERE username = 'mg_f'),
              'and not due before that lease ends');
-- the copy is being sent: not due before its lease ends (then it is uncertain, and so is the moved one)
SELECT outbox_sending('w1', (SELECT recipient_id FROM held WHERE address = 'f@mg.example'));
SELECT cmp_ok(outbox_next_due(), '>=', (SELECT lease_until FROM outbox_recipient WHERE username = 'mg_f'),
              'nor while the copy is being sent');

-- a delivery of a copy withdrawn after the claim (its user silenced their contact): the copy
-- goes to the others, and the withdrawn one stays withdrawn
SELECT add_user(u, '2024-01-05') FROM unnest(ARRAY['mg_h', 'mg_i']) AS u;
INSERT INTO contact (username, email) VALUES ('mg_h', 'h@mg.example'), ('mg_i', 'h@mg.example');
SELECT outbox_add('balance_low', 'mg/2', NULL, 'withdrawn', E'one copy\n', '{}', false, ARRAY['mg_h', 'mg_i']);
CREATE TEMP TABLE copy2 AS
SELECT c.* FROM outbox_claim('w1', '10 minutes', 100) c JOIN outbox m USING (message_id) WHERE m.decision_key = 'mg/2';
UPDATE contact SET notify = false WHERE username = 'mg_i';
SELECT ok(outbox_sending('w1', (SELECT recipient_id FROM copy2)) AND outbox_result('w1', (SELECT recipient_id FROM copy2), 'delivered'),
          'a copy one of whose deliveries was withdrawn after the claim is sent');
SELECT is((SELECT string_agg(username || ' ' || state || ' ' || attempts, ', ' ORDER BY username) FROM outbox_recipient r
           JOIN outbox m USING (message_id) WHERE m.decision_key = 'mg/2'),
          'mg_h delivered 1, mg_i withdrawn 1', 'and recorded on the others: the withdrawn one stays withdrawn');

-- a delivery in its own back-off is not leased with a copy due now: it keeps its schedule, and
-- when due it finds the mailbox has the message (not sent again)
SELECT add_user(u, '2024-01-05') FROM unnest(ARRAY['mg_j', 'mg_k']) AS u;
INSERT INTO contact (username, email) VALUES ('mg_j', 'j@mg.example'), ('mg_k', 'j@mg.example');
SELECT outbox_add('balance_low', 'mg/3', NULL, 'back-off', E'one copy\n', '{}', false, ARRAY['mg_j', 'mg_k']);
UPDATE outbox_recipient SET next_attempt = now() + interval '1 hour' WHERE username = 'mg_k';
CREATE TEMP TABLE copy3 AS
SELECT c.* FROM outbox_claim('w1', '10 minutes', 100) c JOIN outbox m USING (message_id) WHERE m.decision_key = 'mg/3';
SELECT outbox_sending('w1', (SELECT recipient_id FROM copy3)) AND outbox_result('w1', (SELECT recipient_id FROM copy3), 'delivered');
SELECT is((SELECT string_agg(username || ' ' || state || ' ' || attempts || ' ' || (lease_owner IS NULL), ', ' ORDER BY username)
           FROM outbox_recipient r JOIN outbox m USING (message_id) WHERE m.decision_key = 'mg/3'),
          'mg_j delivered 1 true, mg_k pending 0 true', 'a delivery not due yet is not leased with the copy due now');
UPDATE outbox_recipient SET next_attempt = now() WHERE username = 'mg_k';
CREATE TEMP TABLE claim3 AS SELECT c.* FROM outbox_claim('w1', '10 minutes', 100) c;
SELECT is((SELECT count(*)::int FROM claim3) || ' ' || (SELECT state || ' ' || attempts FROM outbox_recipient WHERE username = 'mg_k'),
          '0 delivered 1', 'when due, it ends as the copy did, not sent again');

-- two senders that each leased a delivery of one copy (two claims whose snapshots each missed
-- the other's lease): the second to commit to sending it is refused, before the copy completes
SELECT add_user(u, '2024-01-05') FROM unnest(ARRAY['mg_l', 'mg_m']) AS u;
INSERT INTO contact (username, email) VALUES ('mg_l', 'l@mg.example'), ('mg_m', 'l@mg.example');
SELECT outbox_add('balance_low', 'mg/4', NULL, 'two leases', E'one copy\n', '{}', false, ARRAY['mg_l', 'mg_m']);
UPDATE outbox_recipient SET lease_owner = CASE username WHEN 'mg_l' THEN 'w1' ELSE 'w2' END,
                            lease_until = now() + interval '10 minutes', attempts = 1
WHERE username IN ('mg_l', 'mg_m');
SELECT ok(outbox_sending('w1', (SELECT recipient_id FROM outbox_recipient WHERE username = 'mg_l')),
          'the first sender commits to the copy');
SELECT is(outbox_sending('w2', (SELECT recipient_id FROM outbox_recipient WHERE username = 'mg_m')), false,
          'the second, holding another delivery of the same copy, is refused: the mailbox gets one copy');

-- ---- two sessions ----
\set scratch hpcacct_mail_group
\set adm mg_adm
\ir include/scratch_db.psql
SELECT dblink_connect('mg_setup', :'srv' || ' dbname=hpcacct_mail_group');
SELECT dblink_exec('mg_setup', $s$
    SET client_min_messages = warning;
    CREATE EXTENSION hpcacct CASCADE;
    SET search_path = public, hpcacct;
    INSERT INTO setting VALUES ('timezone', 'UTC'), ('notify_order_wait', '0');
    SELECT add_user(u, '2024-01-05') FROM unnest(ARRAY['mg_a', 'mg_b']) AS u;
    INSERT INTO contact (username, email) VALUES ('mg_a', 'a@mg.example'), ('mg_b', 'b@mg.example');
    SELECT outbox_add('balance_low', 'mg/race', NULL, 'race', E'one copy\n', '{}', false, ARRAY['mg_a', 'mg_b']);
    -- a's copy delivered; b's to be tried again at once
    SELECT CASE WHEN c.address = 'a@mg.example'
                THEN outbox_sending('w1', c.recipient_id) AND outbox_result('w1', c.recipient_id, 'delivered')
                ELSE outbox_result('w1', c.recipient_id, 'retry', 'later', '0', '0') END
    FROM outbox_claim('w1', '10 minutes', 100) c;
    RESET client_min_messages;
$s$);
SELECT dblink_connect('mg_s', :'srv' || ' dbname=hpcacct_mail_group');
SELECT dblink_connect('mg_u', :'srv' || ' dbname=hpcacct_mail_group');
-- b takes a's address; the change commits while a claim runs, after its first statements (the
-- table lock holds the claim there until the change commits)
SELECT dblink_exec('mg_u', $$BEGIN;
    LOCK TABLE hpcacct.outbox IN ACCESS EXCLUSIVE MODE;
    UPDATE hpcacct.contact SET email = 'a@mg.example' WHERE username = 'mg_b'$$);
SELECT dblink_send_query('mg_s', $$SELECT address FROM hpcacct.outbox_claim('w2', '10 minutes', 100)$$);
SELECT pg_sleep(0.5);
SELECT dblink_exec('mg_u', 'COMMIT');
SELECT is((SELECT coalesce(string_agg(address, ', '), 'none') FROM dblink_get_result('mg_s') AS t(address text)), 'none',
          'a delivery that moved to a mailbox which has the message is not sent it again');
SELECT * FROM dblink_get_result('mg_s') AS t(address text);

-- a claim does not wait for a delivery of its copy that another claim has locked (two claims
-- that each took a different delivery of one copy as their first waited for each other, and
-- PostgreSQL aborted one, 40P01): it leases the others, and the locked one, once free, ends as
-- the copy did
SELECT dblink_exec('mg_setup', $s$
    SET client_min_messages = warning;
    SET search_path = public, hpcacct;
    SELECT add_user(u, '2024-01-05') FROM unnest(ARRAY['mg_c', 'mg_d']) AS u;
    INSERT INTO contact (username, email) VALUES ('mg_c', 'c@mg.example'), ('mg_d', 'c@mg.example');
    SELECT outbox_add('balance_low', 'mg/lock', NULL, 'locked', E'one copy\n', '{}', false, ARRAY['mg_c', 'mg_d']);
    RESET client_min_messages;
$s$);
SELECT dblink_exec('mg_u', 'BEGIN');
SELECT * FROM dblink('mg_u', $$SELECT 1 FROM hpcacct.outbox_recipient WHERE username = 'mg_d' FOR UPDATE$$) AS t(locked int);
SELECT dblink_exec('mg_s', $$SET lock_timeout = '3s'$$);
SELECT lives_ok($$CREATE TEMP TABLE lock_claim AS
                  SELECT * FROM dblink('mg_s', 'SELECT address FROM hpcacct.outbox_claim(''w3'', ''10 minutes'', 100)')
                  AS t(address text)$$,
                'a claim does not wait for a delivery of its copy that another claim has locked');
SELECT is((SELECT string_agg(address, ', ') FROM lock_claim), 'c@mg.example', 'it claims the copy');
SELECT dblink_exec('mg_u', 'ROLLBACK');
SELECT is((SELECT string_agg(t.who, ', ') FROM dblink('mg_s', $$
               SELECT username || ' ' || coalesce(lease_owner, 'none') FROM hpcacct.outbox_recipient r
               JOIN hpcacct.outbox m USING (message_id) WHERE m.decision_key = 'mg/lock' ORDER BY username$$) AS t(who text)),
          'mg_c w3, mg_d none', 'with the deliveries it could lock: not the locked one');
SELECT is((SELECT string_agg(t.who, ', ') FROM dblink('mg_s', $$
               SELECT hpcacct.outbox_sending('w3', r.recipient_id)::text || ' ' || hpcacct.outbox_result('w3', r.recipient_id, 'delivered')::text
               FROM hpcacct.outbox_recipient r WHERE r.username = 'mg_c'$$) AS t(who text)),
          'true true', 'the copy is sent');
SELECT is((SELECT n FROM dblink('mg_s', $$SELECT count(*) FROM hpcacct.outbox_claim('w3', '10 minutes', 100)$$) AS t(n bigint)),
          0::bigint, 'the next claim sends nothing');
SELECT is((SELECT t.state FROM dblink('mg_s', $$SELECT state FROM hpcacct.outbox_recipient WHERE username = 'mg_d'$$) AS t(state text)),
          'delivered', 'and the delivery that was locked ends as the copy did, not sent again');

SELECT dblink_disconnect('mg_s'), dblink_disconnect('mg_u'), dblink_disconnect('mg_setup');
SELECT dblink_exec('mg_adm', 'DROP DATABASE hpcacct_mail_group');
SELECT dblink_disconnect('mg_adm');

SELECT * FROM finish();
ROLLBACK;
