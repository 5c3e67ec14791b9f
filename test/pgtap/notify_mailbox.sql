-- Notifications: one copy per message and mailbox. Addresses that name one mailbox (an
-- internationalized domain and its A-label, a domain in other case) are one copy; a local
-- part in other case is another mailbox (RFC 5321 leaves it to the receiving host).
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(20);

SELECT is(hpcacct_internal.mailbox_key(a), k, 'mailbox_key(' || a || ')')
FROM (VALUES ('x@bücher.example', 'x@xn--bcher-kva.example'),
             ('x@BÜCHER.Example', 'x@xn--bcher-kva.example'),
             ('x@XN--BCHER-KVA.example', 'x@xn--bcher-kva.example'),
             ('Zoë.Ünal@Lab.Example', 'Zoë.Ünal@lab.example'),
             ('d@☃.EXAMPLE', 'd@☃.example')) AS t(a, k);

SELECT add_user(u, '2024-01-05') FROM unnest(ARRAY['mb_a', 'mb_b', 'mb_c', 'mb_d', 'mb_e']) AS u;
INSERT INTO contact (username, email) VALUES
    ('mb_a', 'x@xn--bcher-kva.example'), ('mb_b', 'x@bücher.example'), ('mb_c', 'x@BÜCHER.example'),
    ('mb_d', 'X@bücher.example'), ('mb_e', 'y@Lab.example');
SELECT outbox_add('balance_low', 'mailbox/1', NULL, 'one mailbox', E'one copy\n', '{}', false,
                  ARRAY['mb_a', 'mb_b', 'mb_c', 'mb_d', 'mb_e']);
SELECT is((SELECT string_agg(username || ' ' || address, ', ' ORDER BY username)
           FROM outbox_recipient r JOIN outbox m USING (message_id) WHERE m.decision_key = 'mailbox/1'),
          'mb_a x@xn--bcher-kva.example, mb_b x@bücher.example, mb_c x@BÜCHER.example, mb_d X@bücher.example, mb_e y@Lab.example',
          'each user has a delivery of their own');
CREATE TEMP TABLE claimed AS SELECT * FROM outbox_claim('w', '1 minute', 100);
SELECT is((SELECT string_agg(address || ' ' || coalesce(display_name, '-'), ', ' ORDER BY address) FROM claimed),
          'X@bücher.example -, x@xn--bcher-kva.example -, y@Lab.example -',
          'the sender gets one of the three addresses of one mailbox (the first user''s); X@ is another mailbox');
SELECT ok(outbox_sending('w', (SELECT recipient_id FROM claimed WHERE address = 'x@xn--bcher-kva.example'))
          AND outbox_result('w', (SELECT recipient_id FROM claimed WHERE address = 'x@xn--bcher-kva.example'), 'delivered'),
          'its copy is delivered');
SELECT is((SELECT string_agg(username || ' ' || state, ', ' ORDER BY username) FROM outbox_recipient
           WHERE mailbox = 'x@xn--bcher-kva.example'),
          'mb_a delivered, mb_b delivered, mb_c delivered', 'and recorded on the three deliveries');
SELECT is((SELECT mailbox FROM outbox_recipient WHERE address = 'y@Lab.example'), 'y@lab.example',
          'outbox_recipient.mailbox is the key');
-- another message to two of them: one copy, with the display name they share (none when theirs differ)
UPDATE contact SET display_name = 'X at Bücher' WHERE username IN ('mb_b', 'mb_c');
SELECT outbox_add('balance_low', 'mailbox/2', NULL, 'one mailbox again', E'one copy\n', '{}', false,
                  ARRAY['mb_b', 'mb_c']);
CREATE TEMP TABLE claimed2 AS SELECT c.* FROM outbox_claim('w', '1 minute', 100) c;
SELECT is((SELECT string_agg(c.address || ' ' || coalesce(c.display_name, '-'), ', ')
           FROM claimed2 c JOIN outbox m USING (message_id) WHERE m.decision_key = 'mailbox/2'),
          'x@bücher.example X at Bücher', 'a second message: one copy to the mailbox, with the name its users share');
SELECT outbox_result('w', recipient_id, 'delivered') FROM claimed2;
UPDATE contact SET display_name = 'Someone else' WHERE username = 'mb_c';
SELECT outbox_add('balance_low', 'mailbox/3', NULL, 'one mailbox again', E'one copy\n', '{}', false,
                  ARRAY['mb_b', 'mb_c']);
SELECT is((SELECT string_agg(c.address || ' ' || coalesce(c.display_name, '-'), ', ')
           FROM outbox_claim('w', '1 minute', 100) c JOIN outbox m USING (message_id) WHERE m.decision_key = 'mailbox/3'),
          'x@bücher.example -', 'names that differ: none');

-- a delivery that moves to a mailbox whose copy is leased waits for that copy, and ends as it did
SET CONSTRAINTS hpcacct.contact_follow IMMEDIATE;
SELECT add_user(u, '2024-01-05') FROM unnest(ARRAY['mb_f', 'mb_g']) AS u;
INSERT INTO contact (username, email) VALUES ('mb_f', 'f@lab.example'), ('mb_g', 'g@lab.example');
SELECT outbox_add('balance_low', 'mailbox/4', NULL, 'moved', E'one copy\n', '{}', false, ARRAY['mb_f', 'mb_g']);
CREATE TEMP TABLE claimed4 AS SELECT c.* FROM outbox_claim('w', '1 minute', 100) c;
UPDATE contact SET email = 'f@lab.example' WHERE username = 'mb_g';
SELECT is((SELECT count(*)::int FROM outbox_claim('w2', '1 minute', 100)), 0, 'it is not given to another sender meanwhile');
SELECT ok(outbox_sending('w', (SELECT recipient_id FROM claimed4 WHERE address = 'f@lab.example'))
          AND outbox_result('w', (SELECT recipient_id FROM claimed4 WHERE address = 'f@lab.example'), 'uncertain', 'timeout'),
          'the copy to f@ ends uncertain');
SELECT is((SELECT count(*)::int FROM outbox_claim('w2', '1 minute', 100)), 0, 'the moved delivery is not sent');
SELECT is((SELECT state || ', ' || last_error FROM outbox_recipient r JOIN outbox m USING (message_id)
           WHERE m.decision_key = 'mailbox/4' AND r.username = 'mb_g'),
          'uncertain, not sent: its mailbox may have the message already (uncertain)', 'it ends uncertain too');
-- a copy's first delivery moves away before it is sent: the sender is told to stop, and the
-- others leased with it are left to the lease's end
SELECT outbox_add('balance_low', 'mailbox/5', NULL, 'moved away', E'one copy\n', '{}', false, ARRAY['mb_f', 'mb_g']);
CREATE TEMP TABLE claimed5 AS SELECT c.* FROM outbox_claim('w', '1 minute', 100) c;
SELECT is((SELECT string_agg(username || ' ' || lease_owner, ', ' ORDER BY username) FROM outbox_recipient r
           JOIN outbox m USING (message_id) WHERE m.decision_key = 'mailbox/5'),
          'mb_f w, mb_g w', 'one copy: both deliveries leased');
UPDATE contact SET email = 'f2@lab.example' WHERE username = 'mb_f';
SELECT ok(NOT outbox_sending('w', (SELECT recipient_id FROM claimed5)), 'the first moved away: not sending');
SELECT is((SELECT string_agg(username || ' ' || state, ', ' ORDER BY username) FROM outbox_recipient r
           JOIN outbox m USING (message_id) WHERE m.decision_key = 'mailbox/5'),
          'mb_f pending, mb_g pending', 'neither is marked sending');

-- two users who swap addresses in one statement: each delivery goes to its user's new address
SELECT add_user(u, '2024-01-05') FROM unnest(ARRAY['mb_s1', 'mb_s2']) AS u;
INSERT INTO contact (username, email) VALUES ('mb_s1', 's1@lab.example'), ('mb_s2', 's2@lab.example');
SELECT outbox_add('balance_low', 'mailbox/6', NULL, 'swap', E'one copy\n', '{}', false, ARRAY['mb_s1', 'mb_s2']);
UPDATE contact SET email = CASE username WHEN 'mb_s1' THEN 's2@lab.example' ELSE 's1@lab.example' END
WHERE username IN ('mb_s1', 'mb_s2');
SELECT is((SELECT string_agg(c.address || ' ' || r.username, ', ' ORDER BY c.address)
           FROM outbox_claim('w3', '1 minute', 100) c JOIN outbox_recipient r USING (recipient_id)
           JOIN outbox m ON m.message_id = c.message_id WHERE m.decision_key = 'mailbox/6'),
          's1@lab.example mb_s2, s2@lab.example mb_s1', 'swapped addresses: each mailbox gets the message');

SELECT * FROM finish();
ROLLBACK;
