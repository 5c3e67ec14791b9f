-- Deliveries follow their users (contact_follow, outbox_withdraw_member) also when the message
-- is written at the same time as the change: the writer's transaction open while a user changes
-- their address, silences it, or leaves the account (two sessions through dblink, a scratch
-- database). The change's trigger cannot see the writer's uncommitted deliveries, so it must
-- wait for the writer, or the writer for it.
BEGIN;
SET search_path = public, hpcacct;
SET client_min_messages = warning;
SELECT plan(22);

-- ---- in this transaction: a member removed and added again before it commits never left ----
INSERT INTO setting VALUES ('timezone', 'UTC') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO account (name) VALUES ('mt_p');
SELECT add_user(u, '2025-01-02') FROM unnest(ARRAY['mt_a', 'mt_b', 'mt_c']) AS u;
SELECT add_member('mt_p', 'mt_a', 'admin'), add_member('mt_p', 'mt_b'), add_member('mt_p', 'mt_c');
INSERT INTO contact (username, email) VALUES ('mt_a', 'a@mt.example.org'), ('mt_b', 'b@mt.example.org'),
                                             ('mt_c', 'c@mt.example.org');
SELECT outbox_add('account_expiry', 'mt_p/one', 'mt_p', 's', E'b\n', '{}', true) IS NOT NULL AS written;
SELECT remove_member('mt_p', 'mt_b');
SELECT add_member('mt_p', 'mt_b');
SELECT remove_member('mt_p', 'mt_c');
-- (the state at commit)
SET CONSTRAINTS ALL IMMEDIATE;
SELECT is((SELECT state FROM outbox_recipient WHERE username = 'mt_b'), 'pending',
          'a member removed and added again in one transaction keeps their pending delivery');
SELECT is((SELECT state FROM outbox_recipient WHERE username = 'mt_c'), 'withdrawn',
          'a member removed for good does not');

-- ---- what a portal user learns of other users' addresses: nothing ----
-- mt_eve reads no other contact. She sets her own address to a guess of a fellow recipient's
-- (mt_a's), or to a wrong guess, while a message is pending to both, after mt_a's copy was
-- sent, and when a message is written; what she reads of her deliveries (their rows, states,
-- attempts, leases, reasons), her UPDATE's row count and its errors are the same for both
-- guesses, the address aside. The mailbox still gets each message once.
CALL setup_roles();
CREATE ROLE mt_eve LOGIN IN ROLE hpcacct_portal;
SELECT add_user('mt_eve', '2025-01-02');
SELECT add_member('mt_p', 'mt_eve');
INSERT INTO contact (username, email) VALUES ('mt_eve', 'eve@mt.example.org');
INSERT INTO setting VALUES ('notify_order_wait', '0') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
SET CONSTRAINTS hpcacct.contact_follow IMMEDIATE;
-- what the session's user reads of her delivery of a message, her guess written GUESS
CREATE FUNCTION pg_temp.reads(key text, guess text) RETURNS text LANGUAGE sql AS $$
    SELECT coalesce(replace(string_agg(format('%s | %s | %s | %s | %s | %s | %s', r.state, r.address, r.attempts,
                                              r.lease_owner, r.lease_until IS NULL, r.delivered_at IS NULL,
                                              r.last_error), '; '), guess, 'GUESS'), 'no delivery')
    FROM hpcacct.outbox_recipient r JOIN hpcacct.outbox m USING (message_id)
    WHERE m.decision_key = key AND r.username = session_user $$;
-- a sender: claims what is due and delivers it; returns what it was given of the messages keys
CREATE FUNCTION pg_temp.send(keys text[]) RETURNS text LANGUAGE plpgsql AS $$
    DECLARE
        c record;
        sent text[] := '{}';
    BEGIN
        FOR c IN SELECT * FROM hpcacct.outbox_claim('w', '1 minute', 1000) LOOP
            PERFORM hpcacct.outbox_sending('w', c.recipient_id), hpcacct.outbox_result('w', c.recipient_id, 'delivered');
            sent := sent || (SELECT m.decision_key || ' ' || c.address FROM hpcacct.outbox m
                             WHERE m.message_id = c.message_id AND m.decision_key = ANY (keys));
        END LOOP;
        RETURN array_to_string(ARRAY(SELECT unnest(sent) ORDER BY 1), ', ');
    END $$;
CREATE TEMP TABLE seen (probe text PRIMARY KEY, reads text);
GRANT ALL ON seen TO mt_eve;
-- mt_a's copies of g3 and g4 are delivered; the others are refused for now (mt_eve's g4 for a day)
SELECT outbox_add('account_expiry', k, 'mt_p', 's', E'b\n', '{}', true) IS NOT NULL AS written
FROM unnest(ARRAY['mt_p/g1', 'mt_p/g2', 'mt_p/g3', 'mt_p/g4']) AS k;
SELECT count(*) FILTER (WHERE r.username = 'mt_a' AND m.decision_key IN ('mt_p/g3', 'mt_p/g4')
                          AND hpcacct.outbox_sending('w', c.recipient_id)
                          AND hpcacct.outbox_result('w', c.recipient_id, 'delivered')) AS delivered,
       count(*) FILTER (WHERE NOT (r.username = 'mt_a' AND m.decision_key IN ('mt_p/g3', 'mt_p/g4'))
                          AND hpcacct.outbox_result('w', c.recipient_id, 'retry', 'try later', x.wait, x.wait)) AS retried
FROM outbox_claim('w', '1 minute', 1000) c JOIN outbox m USING (message_id) JOIN outbox_recipient r USING (recipient_id)
CROSS JOIN LATERAL (SELECT CASE WHEN r.username = 'mt_eve' AND m.decision_key = 'mt_p/g4'
                                THEN interval '1 day' ELSE interval '0' END AS wait) x;

SET SESSION AUTHORIZATION mt_eve;
-- the wrong guess: mt_a's g2 pending, mt_a's g4 sent
WITH u AS (UPDATE hpcacct.contact SET email = 'nobody@mt.example.org' WHERE username = 'mt_eve' RETURNING 1)
SELECT is(count(*)::int, 1, 'her change of address to a wrong guess updates her row') FROM u;
INSERT INTO seen VALUES ('pending wrong', pg_temp.reads('mt_p/g2', 'nobody@mt.example.org')),
                        ('sent wrong', pg_temp.reads('mt_p/g4', 'nobody@mt.example.org'));
-- the right guess: mt_a's g1 pending, mt_a's g3 sent
WITH u AS (UPDATE hpcacct.contact SET email = 'a@mt.example.org' WHERE username = 'mt_eve' RETURNING 1)
SELECT is(count(*)::int, 1, 'her change of address to a fellow recipient''s updates her row') FROM u;
INSERT INTO seen VALUES ('pending right', pg_temp.reads('mt_p/g1', 'a@mt.example.org')),
                        ('sent right', pg_temp.reads('mt_p/g3', 'a@mt.example.org'));
WITH u AS (UPDATE hpcacct.contact SET email = 'eve@mt.example.org' WHERE username = 'mt_eve' RETURNING 1)
SELECT is(count(*)::int, 1, 'and back to her own') FROM u;
INSERT INTO seen VALUES ('back', pg_temp.reads('mt_p/g1', 'eve@mt.example.org'));
RESET SESSION AUTHORIZATION;
SELECT is((SELECT reads FROM seen WHERE probe = 'pending right'), (SELECT reads FROM seen WHERE probe = 'pending wrong'),
          'a portal user''s delivery does not show whether her new address is that of a recipient it is pending to');
SELECT is((SELECT reads FROM seen WHERE probe = 'pending right'), 'pending | GUESS | 1 |  | t | t | try later',
          '(it is pending, at her new address)');
SELECT is((SELECT reads FROM seen WHERE probe = 'sent right'), (SELECT reads FROM seen WHERE probe = 'sent wrong'),
          'nor whether it is that of a recipient the message was sent to');
SELECT is((SELECT reads FROM seen WHERE probe = 'back'), 'pending | GUESS | 1 |  | t | t | try later',
          'her address changed back, her delivery is pending to it');

-- at the sender, her address the right guess: g3, which mt_a's mailbox has, is not sent again;
-- g1 and g2, pending to mt_a and to her, go to the mailbox once
SET SESSION AUTHORIZATION mt_eve;
UPDATE hpcacct.contact SET email = 'a@mt.example.org' WHERE username = 'mt_eve';
RESET SESSION AUTHORIZATION;
SELECT is(pg_temp.send(ARRAY['mt_p/g1', 'mt_p/g2', 'mt_p/g3']), 'mt_p/g1 a@mt.example.org, mt_p/g1 b@mt.example.org, mt_p/g2 a@mt.example.org, mt_p/g2 b@mt.example.org, '
          'mt_p/g3 b@mt.example.org', 'the sender gets g1 and g2 to mt_a''s mailbox once, g3 not again');
SELECT is((SELECT string_agg(m.decision_key || ' ' || r.username || ' ' || r.state, ', ' ORDER BY m.decision_key, r.username)
           FROM outbox_recipient r JOIN outbox m USING (message_id)
           WHERE m.decision_key IN ('mt_p/g1', 'mt_p/g3') AND r.address = 'a@mt.example.org'),
          'mt_p/g1 mt_a delivered, mt_p/g1 mt_eve delivered, mt_p/g3 mt_a delivered, mt_p/g3 mt_eve delivered',
          'the copy is recorded on both deliveries');
-- her address the wrong guess: g4, once its back-off has passed, goes to it
SET SESSION AUTHORIZATION mt_eve;
UPDATE hpcacct.contact SET email = 'nobody@mt.example.org' WHERE username = 'mt_eve';
RESET SESSION AUTHORIZATION;
UPDATE outbox_recipient SET next_attempt = now() WHERE username = 'mt_eve' AND state = 'pending';
SELECT is(pg_temp.send(ARRAY['mt_p/g4']), 'mt_p/g4 nobody@mt.example.org', 'g4 goes to the wrong guess');
SELECT is((SELECT count(*)::int FROM outbox_recipient WHERE state = 'pending'), 0, '(nothing is left pending)');
SET SESSION AUTHORIZATION mt_eve;
INSERT INTO seen VALUES ('sent right, after', pg_temp.reads('mt_p/g3', 'a@mt.example.org')),
                        ('sent wrong, after', pg_temp.reads('mt_p/g4', 'nobody@mt.example.org'));
RESET SESSION AUTHORIZATION;
SELECT is((SELECT reads FROM seen WHERE probe = 'sent right, after'), (SELECT reads FROM seen WHERE probe = 'sent wrong, after'),
          'her delivery to a mailbox that had the message ends as one sent to her wrong guess');
SELECT is((SELECT reads FROM seen WHERE probe = 'sent right, after'), 'delivered | GUESS | 2 |  | t | f | ',
          '(delivered)');

-- her address a guess when a message is written: a delivery of her own, right guess or wrong
SET SESSION AUTHORIZATION mt_eve;
UPDATE hpcacct.contact SET email = 'a@mt.example.org' WHERE username = 'mt_eve';
RESET SESSION AUTHORIZATION;
SELECT outbox_add('account_expiry', 'mt_p/g5', 'mt_p', 's', E'b\n', '{}', true) IS NOT NULL AS written;
SET SESSION AUTHORIZATION mt_eve;
INSERT INTO seen VALUES ('written right', pg_temp.reads('mt_p/g5', 'a@mt.example.org'));
UPDATE hpcacct.contact SET email = 'nobody@mt.example.org' WHERE username = 'mt_eve';
RESET SESSION AUTHORIZATION;
SELECT outbox_add('account_expiry', 'mt_p/g6', 'mt_p', 's', E'b\n', '{}', true) IS NOT NULL AS written;
SET SESSION AUTHORIZATION mt_eve;
INSERT INTO seen VALUES ('written wrong', pg_temp.reads('mt_p/g6', 'nobody@mt.example.org'));
UPDATE hpcacct.contact SET email = 'a@mt.example.org' WHERE username = 'mt_eve';
RESET SESSION AUTHORIZATION;
SELECT is((SELECT reads FROM seen WHERE probe = 'written right'), (SELECT reads FROM seen WHERE probe = 'written wrong'),
          'a message written while her address is another recipient''s gives her a delivery as a wrong guess does');
SELECT is(pg_temp.send(ARRAY['mt_p/g5', 'mt_p/g6']), 'mt_p/g5 a@mt.example.org, mt_p/g5 b@mt.example.org, mt_p/g6 a@mt.example.org, mt_p/g6 b@mt.example.org',
          'each goes to mt_a''s mailbox once');

-- ---- two sessions ----

\set scratch hpcacct_mail_race
\set adm mr_adm
\ir include/scratch_db.psql
SELECT dblink_connect('mr_setup', :'srv' || ' dbname=hpcacct_mail_race');
SELECT dblink_exec('mr_setup', $s$
    SET client_min_messages = warning;
    CREATE EXTENSION hpcacct CASCADE;
    SET search_path = public, hpcacct;
    INSERT INTO setting VALUES ('timezone', 'UTC');
    INSERT INTO account (name) VALUES ('mr_p');
    SELECT add_user(u, '2025-01-02') FROM unnest(ARRAY['mr_a', 'mr_b', 'mr_c', 'mr_d']) AS u;
    SELECT add_member('mr_p', 'mr_a', 'admin'), add_member('mr_p', 'mr_b'), add_member('mr_p', 'mr_c'),
           add_member('mr_p', 'mr_d');
    INSERT INTO contact (username, email) VALUES ('mr_a', 'a@example.org'), ('mr_b', 'b@old.example.org'),
                                                 ('mr_c', 'c@example.org'), ('mr_d', 'd@example.org');
$s$);
SELECT dblink_connect('mr_w', :'srv' || ' dbname=hpcacct_mail_race');
SELECT dblink_connect('mr_u', :'srv' || ' dbname=hpcacct_mail_race');
SELECT dblink_exec('mr_u', 'SET lock_timeout = ''20s''');

-- the writer's transaction has written a message to every member; before it commits, b moves
-- to a new address, c silences theirs and d leaves the account (one transaction)
SELECT dblink_exec('mr_w', 'BEGIN');
SELECT * FROM dblink('mr_w', $$SELECT hpcacct.outbox_add('account_expiry', 'mr_p/race', 'mr_p', 's', E'b\n', '{}', true)::text$$) AS t(id text);
SELECT dblink_send_query('mr_u', $q$DO $d$ BEGIN
    UPDATE hpcacct.contact SET email = 'b@new.example.org' WHERE username = 'mr_b';
    UPDATE hpcacct.contact SET notify = false WHERE username = 'mr_c';
    PERFORM hpcacct.remove_member('mr_p', 'mr_d');
    END $d$$q$);
SELECT pg_sleep(0.5);
SELECT dblink_exec('mr_w', 'COMMIT');
SELECT is((SELECT r FROM dblink_get_result('mr_u') AS t(r text)), 'DO', 'the change commits');
SELECT is((SELECT count(*)::int FROM dblink_get_result('mr_u') AS t(r text)), 0, 'and nothing else is left');

SELECT is((SELECT string_agg(username || ' ' || address || ' ' || state, ', ' ORDER BY username)
           FROM dblink('mr_setup', $$SELECT username, address, state FROM hpcacct.outbox_recipient$$)
                AS t(username text, address text, state text)),
          'mr_a a@example.org pending, mr_b b@new.example.org pending, mr_c c@example.org withdrawn, '
          'mr_d d@example.org withdrawn',
          'a delivery written while its user changed goes where the contact and membership say after both');

-- the other order: a portal user's change is open (left so) when the message is written; the
-- writer does not wait for it (a scheduled run must not: lock_timeout), and the delivery follows
-- once it commits
SELECT dblink_exec('mr_u', $$BEGIN;
    UPDATE hpcacct.contact SET email = 'a@new.example.org' WHERE username = 'mr_a'$$);
SELECT dblink_exec('mr_w', 'SET lock_timeout = ''2s''');
SELECT is((SELECT o FROM dblink('mr_w', $$SELECT public.outcome($o$SELECT hpcacct.outbox_add('account_expiry', 'mr_p/race2',
                                          'mr_p', 's', E'b\n', '{}', true)$o$)$$) AS t(o text)),
          'ok', 'a message is written while a contact change is open, without waiting for it');
SELECT dblink_exec('mr_u', 'COMMIT');
SELECT is((SELECT string_agg(username || ' ' || address, ', ' ORDER BY username)
           FROM dblink('mr_setup', $$SELECT r.username, r.address FROM hpcacct.outbox_recipient r
                                      JOIN hpcacct.outbox m USING (message_id) WHERE m.decision_key = 'mr_p/race2'$$)
                AS t(username text, address text)),
          'mr_a a@new.example.org, mr_b b@new.example.org',
          'a message written while a change is open reaches the new address');

SELECT dblink_disconnect('mr_w'), dblink_disconnect('mr_u'), dblink_disconnect('mr_setup');
SELECT dblink_exec('mr_adm', 'DROP DATABASE hpcacct_mail_race');
SELECT dblink_disconnect('mr_adm');

SELECT * FROM finish();
ROLLBACK;
