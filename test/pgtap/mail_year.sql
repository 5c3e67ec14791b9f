-- A year of mail as users receive it: deliveries still pending (the mail server down for a
-- day) when their user leaves the account, changes their address or silences it, go where the
-- contact and the membership say at the time they are sent, not where they said when written.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(33);

CALL setup_roles();
CREATE ROLE my_bob LOGIN IN ROLE hpcacct_portal;
INSERT INTO setting VALUES ('timezone', 'Europe/Berlin') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
SELECT add_user(u, '2025-01-02') FROM unnest(ARRAY['my_alice', 'my_bob', 'my_carol', 'my_dan', 'my_eve']) AS u;
INSERT INTO contact (username, email) VALUES
    ('my_alice', 'alice@example.org'), ('my_bob', 'bob@old.example.org'),
    ('my_carol', 'carol@example.org'), ('my_dan', 'dan@example.org'), ('my_eve', 'eve@example.org');
INSERT INTO account (name) VALUES ('my_p');
SELECT add_member('my_p', 'my_alice', 'admin'), add_member('my_p', 'my_bob', 'member'),
       add_member('my_p', 'my_carol', 'member'), add_member('my_p', 'my_dan', 'member'),
       add_member('my_p', 'my_eve', 'member');

-- the server is down: the day's messages to the members are written and wait
SELECT outbox_add('account_expiry', 'my_p/one', 'my_p', 'one', E'about my_p\n', '{}', true) IS NOT NULL AS one \gset
SELECT outbox_add_all(jsonb_build_array(jsonb_build_object(
    'topic', 'job_held', 'decision_key', 'c/1/held', 'account', 'my_p', 'to_managers', false,
    'job_owner', 'my_carol', 'also', jsonb_build_array('my_carol'), 'subject', 'job', 'body', E'your job\n')));
SELECT is((SELECT count(*) FROM outbox_recipient WHERE state = 'pending'), 6::bigint, 'six deliveries wait');

-- during the day: carol leaves the project, dan changes his address, eve silences hers, and
-- bob (a portal user) moves to a new address himself
SELECT remove_member('my_p', 'my_carol');
-- (the membership's and the contacts' checks run at commit, as a sender sees it: here, now)
SET CONSTRAINTS hpcacct.outbox_withdraw_member, hpcacct.contact_follow IMMEDIATE;
UPDATE contact SET email = 'dan@new.example.org' WHERE username = 'my_dan';
UPDATE contact SET notify = false WHERE username = 'my_eve';
SET SESSION AUTHORIZATION my_bob;
SELECT lives_ok($$UPDATE hpcacct.contact SET email = 'bob@new.example.org' WHERE username = 'my_bob'$$,
                'bob changes his own address');
RESET SESSION AUTHORIZATION;

-- the server is back: what the sender is given
CREATE TEMP TABLE sent AS SELECT * FROM outbox_claim('w', '1 minute', 100);
SELECT is((SELECT array_agg(c.address ORDER BY c.address) FROM sent c JOIN outbox m USING (message_id)
           WHERE m.decision_key = 'my_p/one'),
          ARRAY['alice@example.org', 'bob@new.example.org', 'dan@new.example.org'],
          'the account''s message goes to its members at their addresses now: not to carol, who left, nor eve, silenced');
SELECT is((SELECT array_agg(c.address) FROM sent c JOIN outbox m USING (message_id) WHERE m.decision_key = 'c/1/held'),
          ARRAY['carol@example.org'], 'carol still gets the message about her own job');
SELECT is((SELECT state FROM outbox_status WHERE username = 'my_carol' AND subject = 'one'), 'withdrawn',
          'carol''s delivery is withdrawn');
SELECT ok((SELECT last_error FROM outbox_status WHERE username = 'my_carol' AND subject = 'one') ~ 'left account my_p',
          'with the reason');
SELECT is((SELECT state FROM outbox_status WHERE username = 'my_eve'), 'withdrawn', 'eve''s delivery is withdrawn');
SELECT ok((SELECT last_error FROM outbox_status WHERE username = 'my_eve') ~ 'silenced', 'with the reason');
SELECT is((SELECT address FROM outbox_recipient WHERE username = 'my_dan'), 'dan@new.example.org',
          'the delivery record holds the new address');

-- a delivery the sender is completing keeps the address it is being sent to
SELECT ok(outbox_sending('w', (SELECT recipient_id FROM sent WHERE address = 'dan@new.example.org')), 'dan''s is sending');
UPDATE contact SET email = 'dan@third.example.org' WHERE username = 'my_dan';
SELECT is((SELECT address || ' ' || state FROM outbox_recipient WHERE username = 'my_dan'),
          'dan@new.example.org sending', 'a delivery being sent is not changed');

-- a new address that another recipient of the message already has: one copy
SELECT outbox_add('account_expiry', 'my_p/two', 'my_p', 'two', E'about my_p\n', '{}', true) IS NOT NULL AS two \gset
UPDATE contact SET email = 'alice@example.org' WHERE username = 'my_bob';
SELECT is((SELECT array_agg(username || ' ' || state || ' ' || address ORDER BY username) FROM outbox_status
           WHERE subject = 'two' AND username IN ('my_alice', 'my_bob')),
          ARRAY['my_alice pending alice@example.org', 'my_bob pending alice@example.org'],
          'bob moving to alice''s mailbox: his delivery goes there (the sender sends it one copy: notify_mailbox)');
-- eve, silenced again after a message, leaves her address to alice, who takes it: the mailbox
-- gets the message through alice
UPDATE contact SET notify = true WHERE username = 'my_eve';
SELECT outbox_add('account_expiry', 'my_p/four', 'my_p', 'four', E'about my_p\n', '{}', true) IS NOT NULL AS four \gset
UPDATE contact SET notify = false WHERE username = 'my_eve';
UPDATE contact SET email = 'eve@example.org' WHERE username = 'my_alice';
SELECT is((SELECT array_agg(username || ' ' || state || ' ' || address ORDER BY username) FROM outbox_status
           WHERE subject = 'four' AND username IN ('my_alice', 'my_eve')),
          ARRAY['my_alice pending eve@example.org', 'my_eve withdrawn eve@example.org'],
          'an address taken over from a silenced contact gets the message (her withdrawn delivery does not count)');
-- a contact deleted: its pending deliveries are withdrawn
DELETE FROM contact WHERE username = 'my_dan';
SELECT is((SELECT state FROM outbox_status WHERE username = 'my_dan' AND subject = 'two'), 'withdrawn',
          'a deleted contact''s pending delivery is withdrawn');
-- carol back in the project later gets the messages written after
SELECT add_member('my_p', 'my_carol', 'member');
SELECT outbox_add('account_expiry', 'my_p/three', 'my_p', 'three', E'about my_p\n', '{}', true) IS NOT NULL AS three \gset
SELECT is((SELECT state FROM outbox_status WHERE username = 'my_carol' AND subject = 'three'), 'pending',
          'back in the project, carol gets the next message');
SELECT is((SELECT state FROM outbox_status WHERE username = 'my_carol' AND subject = 'one'), 'withdrawn',
          'and not the one withdrawn while she was out');

-- ---- HLRN: a balance running low, topped up, and running low again in the quarter ----------
INSERT INTO balance_threshold VALUES (20), (0) ON CONFLICT DO NOTHING;
INSERT INTO account (name) VALUES ('my_hp');
SELECT add_member('my_hp', 'my_alice', 'admin');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('my_hlrn', 'mpp', 'cpu=24', 'cpu=1', 1.0 / 12, 'NPL');
SELECT deposit('my_hp', '2025-04-01', 1000);
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
VALUES ('my_hlrn', 'b1', 'my_hp', 'my_alice', 'mpp', '2025-04-10 00:00+02', '2025-04-30 00:00+02', 'cpu=42', 'COMPLETED');
SELECT notify_scan('2025-05-01');
SELECT deposit('my_hp', '2025-05-05', 2000, 'top-up');
SELECT notify_scan('2025-05-06');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
VALUES ('my_hlrn', 'b2', 'my_hp', 'my_alice', 'mpp', '2025-05-10 00:00+02', '2025-05-30 00:00+02', 'cpu=42', 'COMPLETED');
SELECT cmp_ok(balance('my_hp', '2025-06-01'), '<', 0::numeric, 'setup: negative again after the top-up');
SELECT notify_scan('2025-06-01');
SELECT is((SELECT array_agg((figures ->> 'threshold_percent') || ' ' || (figures ->> 'allocation') ORDER BY message_id)
           FROM outbox WHERE topic = 'balance_low' AND account = 'my_hp'),
          ARRAY['20 1000.000000', '0 1000.000000', '20 3000.000000', '0 3000.000000'],
          'low and negative before the top-up, and again after it: the second time jobs are refused is told too');
SELECT is(notify_scan('2025-06-01'), 0, 'a re-run of the scan writes nothing');
-- a balance message may arrive days late (the server down): it says which day it is about
SELECT ok((SELECT body FROM outbox WHERE decision_key = 'my_hp/2025-04-01/0/2')
          ~ 'at the end of 2025-06-01, account my_hp held -360\.00 NPL of the 3,000\.00 NPL', 'the balance message names its day');
SELECT is((SELECT figures ->> 'at' FROM outbox WHERE decision_key = 'my_hp/2025-04-01/0/2'), '2025-06-01', 'and so do its figures');

-- ---- a year on: what keeps the outbox in check --------------------------------------------
-- every message so far is 400 days old; its deliveries as a year of sending left them
UPDATE outbox SET created_at = created_at - interval '400 days';
UPDATE outbox_recipient SET state = 'delivered' WHERE state IN ('pending', 'sending');
UPDATE outbox_recipient SET state = 'uncertain'
WHERE message_id = (SELECT message_id FROM outbox WHERE decision_key = 'my_p/three') AND username = 'my_alice';
SELECT outbox_add('regulation_warning', 'my_p/old-run', 'my_p', 'old run', E'w\n', '{}') IS NOT NULL AS r \gset
UPDATE outbox SET created_at = created_at - interval '400 days' WHERE decision_key = 'my_p/old-run';
SELECT outbox_add('account_expiry', 'my_p/new', 'my_p', 'new', E'about my_p\n', '{}', true) IS NOT NULL AS n \gset
SELECT throws_ok($$SELECT hpcacct.outbox_prune('30 days')$$, '22023', NULL, 'a retention shorter than a quarter is refused');
SELECT throws_ok($$SELECT hpcacct.outbox_prune(NULL)$$, '22004', NULL, 'and none');
-- the last scan was of 1 June 2025: its quarter's messages stay, whatever their age
SELECT is(outbox_prune('1 year'), 1::bigint, 'outbox_prune deletes the hold message over a year old, its delivery over');
SELECT is((SELECT array_agg(decision_key ORDER BY message_id) FROM outbox),
          ARRAY['my_p/one', 'my_p/two', 'my_p/four', 'my_p/three', 'my_hp/2025-04-01/20', 'my_hp/2025-04-01/0', 'my_hp/2025-04-01/20/2', 'my_hp/2025-04-01/0/2',
                'my_p/old-run', 'my_p/new'],
          'it keeps one with a delivery uncertain, the regulation''s (its log row would write it again), a recent one, '
          'and the scan''s of the last scan''s quarter');
SELECT is(notify_scan('2025-06-01'), 0, 'which the scan of that day, run again, finds: it writes nothing');
-- a scan in a later quarter: the scan's older messages go too
SELECT lives_ok($$SELECT hpcacct.notify_scan()$$, 'today''s scan');
SELECT is(outbox_prune('1 year'), 7::bigint, 'then the scan''s messages of 2025 go (4 balance, 3 expiry)');
SELECT is((SELECT count(*) FROM outbox_recipient r WHERE NOT EXISTS (SELECT 1 FROM outbox m WHERE m.message_id = r.message_id)),
          0::bigint, 'no delivery is left without its message');
SELECT is(outbox_prune('1 year'), 0::bigint, 'a re-run deletes nothing');
SELECT is(outbox_prune('100000000 years'), 0::bigint, 'a keep before the earliest instant: nothing is that old');
SET ROLE my_bob;
SELECT throws_ok($$SELECT hpcacct.outbox_prune('1 year')$$, '42501', NULL, 'not for PUBLIC');
RESET ROLE;
SELECT is((SELECT array_agg(decision_key ORDER BY message_id) FROM outbox), ARRAY['my_p/three', 'my_p/old-run', 'my_p/new'],
          'what is kept');

SELECT * FROM finish();
ROLLBACK;
