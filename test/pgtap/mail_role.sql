-- The mail sender's login (hpcacct-notify, on the one host that talks to the outside SMTP
-- relay), as the README says to make it. It must do what hpcacct-notify does -- lease due
-- deliveries with their subject, body and display name (outbox_claim), mark one sending,
-- record its outcome, ask when the next one is due (outbox_sending, outbox_result,
-- outbox_next_due; setting_value('notify_order_wait') inside them) -- and nothing else: every
-- write to the ledger, accounts, users, settings, rates, jobs, contacts and the outbox's
-- messages is refused with 42501, and nothing is written (a fingerprint of every table).
BEGIN;
SET search_path = hpcacct, public;
SET client_min_messages = warning;
SELECT plan(52);

CALL setup_roles();
CREATE ROLE ml_mailer LOGIN IN ROLE hpcacct_notify;   -- hpcacct-notify's login

INSERT INTO setting VALUES ('timezone', 'UTC') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('mlc', 'cpu', 'cpu=16', 'cpu=1', 1, 'NPL');
INSERT INTO account (name) VALUES ('ml_a');
SELECT add_user(u, '2024-01-05') FROM unnest(ARRAY['ml_ann', 'ml_ben']) AS u;
SELECT add_member('ml_a', 'ml_ann', 'admin'), add_member('ml_a', 'ml_ben');
SELECT deposit('ml_a', '2024-01-01', 1000);
INSERT INTO contact (username, email, display_name) VALUES ('ml_ann', 'ann@example.org', 'Ann A'),
                                                           ('ml_ben', 'ben@example.org', NULL);
SELECT outbox_add('balance_low', 'ml_a/1', 'ml_a', 'First', 'first body', '{}', true);
SELECT outbox_add('balance_low', 'ml_a/2', 'ml_a', 'Second', 'second body', '{}', false);

-- ---- what hpcacct-notify does, as its login ----
SET SESSION AUTHORIZATION ml_mailer;
CREATE TEMP TABLE ml_claimed AS
    SELECT * FROM hpcacct.outbox_claim('mailhost:1', make_interval(secs => 600), 10);
SELECT is((SELECT array_agg(address || ' ' || coalesce(display_name, '-') || ' ' || subject || ' ' || body
                            ORDER BY recipient_id) FROM ml_claimed),
          ARRAY['ann@example.org Ann A First first body', 'ben@example.org - First first body'],
          'the sender leases the first message''s deliveries with address, display name, subject and body');
SELECT is((SELECT count(*) FROM hpcacct.outbox_claim('mailhost:2', make_interval(secs => 600), 10)), 0::bigint,
          'the second message waits for the first to ann''s mailbox (notify_order_wait read through setting_value)');
SELECT ok(hpcacct.outbox_sending('mailhost:1', (SELECT min(recipient_id) FROM ml_claimed)),
          'the sender marks a delivery sending');
SELECT ok(hpcacct.outbox_result('mailhost:1', (SELECT min(recipient_id) FROM ml_claimed), 'delivered', NULL,
                                '1 minute', '1 hour'), 'and records it delivered');
SELECT ok(hpcacct.outbox_result('mailhost:1', (SELECT max(recipient_id) FROM ml_claimed), 'retry', 'greylisted',
                                '1 minute', '1 hour'), 'records a retry');
SELECT ok(hpcacct.outbox_next_due() <= clock_timestamp(), 'and asks when the next delivery is due: now, ann''s second message');
SELECT is((SELECT count(*) FROM hpcacct.outbox_claim('mailhost:1', make_interval(secs => 600), 10)), 1::bigint,
          'the next claim leases the second message to ann');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT array_agg(username || ':' || state || ':' || attempts ORDER BY recipient_id) FROM outbox_recipient),
          ARRAY['ml_ann:delivered:1', 'ml_ben:pending:1', 'ml_ann:pending:1'],
          'the deliveries are in the states the sender recorded');

-- Every table's rows, as the owner sees them: compared at the end, nothing may have changed.
\ir include/fingerprint.psql
CREATE TEMP TABLE ml_before AS SELECT pg_temp.fingerprint() AS fingerprint;

-- ---- what it must not do ----
SET SESSION AUTHORIZATION ml_mailer;
-- the ledger
SELECT throws_ok($$SELECT hpcacct.deposit('ml_a', '2024-01-01', 100)$$, '42501', NULL, 'the sender cannot deposit');
SELECT throws_ok($$SELECT hpcacct.refund('ml_a', '2024-01-01', 100)$$, '42501', NULL, 'nor refund');
SELECT throws_ok($$SELECT hpcacct.transfer('ml_a', '2024-01-01', 'ml_a', '2024-04-01', 100)$$, '42501', NULL,
                 'nor transfer');
SELECT throws_ok($$SELECT hpcacct.top_up('ml_a', '2024-01-01', 5000)$$, '42501', NULL, 'nor top up');
SELECT throws_ok($$INSERT INTO hpcacct.ledger (account, kind, amount, unit, pool, valid_from, valid_until)
                   VALUES ('ml_a', 'grant', 1e6, 'NPL', 'mlc', '2024-01-01', '2024-12-31')$$, '42501', NULL,
                 'nor insert a grant into the ledger');
SELECT throws_ok($$CALL hpcacct.regulate('2024-02-15')$$, '42501', NULL, 'nor run the regulation (retractions)');
SELECT throws_ok($$CALL hpcacct.open_quarter('2024-04-01')$$, '42501', NULL, 'nor open a quarter');
SELECT throws_ok($$INSERT INTO hpcacct.job VALUES ('mlc', 'x1', 'ml_a', 'ml_ann', 'cpu', NULL,
                   '2024-02-01 00:00+00', '2024-02-01 05:00+00', 'cpu=4', 'COMPLETED')$$, '42501', NULL,
                 'nor charge a job');
SELECT throws_ok($$SELECT hpcacct.load_sacct(now(), NULL)$$, '42501', NULL, 'nor run the loader');
-- accounts, users and members
SELECT throws_ok($$INSERT INTO hpcacct.account (name) VALUES ('ml_new')$$, '42501', NULL, 'nor create an account');
SELECT throws_ok($$UPDATE hpcacct.account SET description = 'x'$$, '42501', NULL, 'nor change one');
SELECT throws_ok($$SELECT hpcacct.add_user('ml_eve')$$, '42501', NULL, 'nor add a user');
SELECT throws_ok($$SELECT hpcacct.add_member('ml_a', 'ml_ben', 'admin')$$, '42501', NULL, 'nor make a manager');
SELECT throws_ok($$SELECT hpcacct.add_quota_period('ml_a', '2024-01-01', '2024-06-30', 1e9)$$, '42501', NULL,
                 'nor give a quota');
-- settings and rates
SELECT throws_ok($$INSERT INTO hpcacct.setting VALUES ('notify_order_wait', '1 second')$$, '42501', NULL,
                 'nor change a setting');
SELECT throws_ok($$UPDATE hpcacct.resource SET rate = 0$$, '42501', NULL, 'nor a rate');
SELECT throws_ok($$SELECT hpcacct.rerate((SELECT min(resource_id) FROM hpcacct.resource), 0, now())$$, '42501', NULL,
                 'nor re-rate');
-- contacts and the outbox beyond the delivery record
SELECT throws_ok($$UPDATE hpcacct.contact SET email = 'eve@evil.example'$$, '42501', NULL,
                 'nor change an address');
SELECT throws_ok($$SELECT hpcacct.outbox_add('balance_low', 'x', 'ml_a', 'Forged', 'pay here', '{}')$$, '42501', NULL,
                 'nor write a message of its own');
SELECT throws_ok($$INSERT INTO hpcacct.outbox (topic, decision_key, subject, body) VALUES ('balance_low', 'y', 'F', 'B')$$,
                 '42501', NULL, 'nor insert one');
SELECT throws_ok($$UPDATE hpcacct.outbox SET body = 'pay here'$$, '42501', NULL, 'nor change a message');
SELECT throws_ok($$UPDATE hpcacct.outbox_recipient SET address = 'eve@evil.example'$$, '42501', NULL,
                 'nor redirect a delivery');
SELECT throws_ok($$INSERT INTO hpcacct.outbox_recipient (message_id, username, address)
                   SELECT min(message_id), 'ml_ann', 'eve@evil.example' FROM hpcacct.outbox_recipient$$, '42501', NULL,
                 'nor add a recipient');
SELECT throws_ok($$DELETE FROM hpcacct.outbox_recipient$$, '42501', NULL, 'nor delete deliveries');
SELECT throws_ok($$SELECT hpcacct.notify_scan('2024-03-01')$$, '42501', NULL, 'nor run the scan');
SELECT throws_ok($$CALL hpcacct.setup_roles()$$, '42501', NULL, 'nor grant roles');
-- what it reads: the deliveries, not the ledger, nor addresses but through them
SELECT throws_ok($$SELECT count(*) FROM hpcacct.ledger$$, '42501', NULL, 'it does not read the ledger');
SELECT throws_ok($$SELECT email FROM hpcacct.contact$$, '42501', NULL,
                 'nor the contacts'' addresses (a delivery carries its own)');
SELECT throws_ok($$SELECT hpcacct.balance('ml_a', '2024-02-01')$$, '42501', NULL, 'nor balances');
SELECT throws_ok($$SELECT hpcacct.statement_html('ml_a', '2024-02-01')$$, '42501', NULL,
                 'nor statements (hpcacct-report''s, run as an auditor)');
SELECT throws_ok($$SELECT count(*) FROM hpcacct.outbox_status$$, '42501', NULL,
                 'nor the outbox''s topics, accounts and figures (outbox_status)');
RESET SESSION AUTHORIZATION;
SELECT is(pg_temp.fingerprint(), (SELECT fingerprint FROM ml_before), 'nothing written, as the owner sees it');

-- ---- a portal user in the mail role reads no more than as a portal user ----
-- The sender's policies show every delivery, message and contact; its grants only some
-- columns. A portal user's grants are every column, its rows its own: a login in both, or in
-- the mail role through a NOINHERIT group (no grant of it), read every account's messages with
-- their figures and every contact's address. Sending takes SET ROLE hpcacct_notify.
INSERT INTO account (name) VALUES ('ml_b');
SELECT outbox_add('balance_low', 'ml_b/1', 'ml_b', 'Other', 'other body', '{"balance": -5}', false);
CREATE ROLE ml_ben LOGIN IN ROLE hpcacct_portal, hpcacct_notify;
CREATE ROLE ml_group NOLOGIN NOINHERIT IN ROLE hpcacct_notify;
CREATE ROLE ml_ann LOGIN IN ROLE hpcacct_portal, ml_group;
SET SESSION AUTHORIZATION ml_ben;
SELECT is((SELECT count(*) FROM hpcacct.outbox WHERE account = 'ml_b'), 0::bigint,
          'a portal user in hpcacct_notify reads no message of an account not its own (figures, topic)');
SELECT is((SELECT array_agg(username ORDER BY username) FROM hpcacct.contact), ARRAY['ml_ben'],
          'nor another user''s contact (address)');
SET ROLE hpcacct_notify;
SELECT is((SELECT count(*) FROM hpcacct.outbox WHERE subject = 'Other'), 1::bigint,
          'as hpcacct_notify (SET ROLE) it reads every message''s subject, as the sender does');
RESET ROLE;
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION ml_ann;
SELECT is((SELECT count(*) FROM hpcacct.outbox WHERE account = 'ml_b'), 0::bigint,
          'a portal user in hpcacct_notify through a NOINHERIT group reads no message of another account');
SELECT is((SELECT count(*) FROM hpcacct.contact WHERE username <> 'ml_ann'), 0::bigint,
          'nor another user''s contact');
SET ROLE hpcacct_notify;
SELECT is((SELECT count(*) FROM hpcacct.outbox WHERE subject = 'Other'), 1::bigint,
          'and as hpcacct_notify (SET ROLE) every message''s subject');
RESET ROLE;
RESET SESSION AUTHORIZATION;

-- ---- its privileges, in the catalog ----
SELECT ok((SELECT NOT rolcanlogin AND NOT rolsuper AND NOT rolcreaterole AND NOT rolcreatedb AND NOT rolbypassrls
                  AND NOT rolreplication FROM pg_roles WHERE rolname = 'hpcacct_notify'),
          'setup_roles() makes hpcacct_notify a NOLOGIN group role without attributes');
-- beyond what PUBLIC may execute: the sender's four functions, and outbox_analyze(), which they
-- call
SELECT set_eq($$SELECT p.oid::regprocedure::text FROM pg_proc p
                WHERE p.pronamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace)
                  AND has_function_privilege('ml_mailer', p.oid, 'EXECUTE')
                  AND NOT EXISTS (SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
                                  WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')$$,
              ARRAY['outbox_claim(text,interval,integer)', 'outbox_next_due()', 'outbox_sending(text,bigint)',
                    'outbox_result(text,bigint,text,text,interval,interval)', 'hpcacct_internal.outbox_analyze(bigint)'],
              'the sender executes outbox_claim, outbox_next_due, outbox_sending, outbox_result, outbox_analyze and what PUBLIC may');
SELECT set_eq($$SELECT p.pronamespace::regnamespace || '.' || p.proname FROM pg_proc p
                WHERE p.pronamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace) AND p.prosecdef
                  AND has_function_privilege('ml_mailer', p.oid, 'EXECUTE')$$,
              ARRAY['hpcacct_internal.visible_accounts', 'hpcacct.fairshare', 'hpcacct_internal.outbox_analyze'],
              'it reaches no SECURITY DEFINER function but visible_accounts and fairshare (PUBLIC''s) and '
              'outbox_analyze (which analyzes the deliveries after many were written or changed)');
-- every write privilege on every relation of the schemas, column privileges included
SELECT set_eq($$SELECT c.relname || ' ' || p.priv FROM pg_class c
                CROSS JOIN unnest(ARRAY['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) AS p(priv)
                WHERE c.relnamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace)
                  AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
                  AND CASE WHEN p.priv IN ('INSERT', 'UPDATE', 'REFERENCES')
                           THEN has_any_column_privilege('ml_mailer', c.oid, p.priv)
                           ELSE has_table_privilege('ml_mailer', c.oid, p.priv) END$$,
              ARRAY['outbox_recipient UPDATE'],
              'it may write nothing but the delivery record (outbox_recipient)');
SELECT set_eq($$SELECT a.attname::text FROM pg_attribute a
                WHERE a.attrelid = 'hpcacct.outbox_recipient'::regclass AND a.attnum > 0 AND NOT a.attisdropped
                  AND has_column_privilege('ml_mailer', a.attrelid, a.attnum, 'UPDATE')$$,
              ARRAY['state', 'attempts', 'next_attempt', 'lease_owner', 'lease_until', 'last_error', 'delivered_at'],
              'and of it only the delivery''s state, lease, attempts and error, not its address or message');
SELECT is((SELECT count(*) FROM pg_class c
           WHERE c.relnamespace IN ('hpcacct'::regnamespace, 'hpcacct_internal'::regnamespace) AND c.relkind = 'S'
             AND (has_sequence_privilege('ml_mailer', c.oid, 'USAGE') OR has_sequence_privilege('ml_mailer', c.oid, 'UPDATE'))),
          0::bigint, 'nor use a sequence');

SELECT * FROM finish();
ROLLBACK;
