-- Notifications: one delivery per message and mailbox. Addresses that name one mailbox (an
-- internationalized domain and its A-label, a domain in other case) are one delivery; a local
-- part in other case is another mailbox (RFC 5321 leaves it to the receiving host).
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(9);

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
SELECT is((SELECT string_agg(username || ' ' || address, ', ' ORDER BY address)
           FROM outbox_recipient r JOIN outbox m USING (message_id) WHERE m.decision_key = 'mailbox/1'),
          'mb_d X@bücher.example, mb_a x@xn--bcher-kva.example, mb_e y@Lab.example',
          'three addresses of one mailbox are one delivery (the first user''s); X@ is another mailbox');

-- a second delivery to the same mailbox of one message, written by hand, is refused
SELECT throws_ok($$INSERT INTO hpcacct.outbox_recipient (message_id, username, address)
                   SELECT message_id, 'mb_b', 'x@Bücher.EXAMPLE' FROM hpcacct.outbox WHERE decision_key = 'mailbox/1'$$,
                 '23505', NULL, 'by hand too, a message has one delivery per mailbox');
SELECT is((SELECT mailbox FROM outbox_recipient WHERE address = 'y@Lab.example'), 'y@lab.example',
          'outbox_recipient.mailbox is the key');
-- another message to the same users: its own deliveries
SELECT outbox_add('balance_low', 'mailbox/2', NULL, 'one mailbox again', E'one copy\n', '{}', false,
                  ARRAY['mb_b', 'mb_c']);
SELECT is((SELECT count(*) FROM outbox_recipient r JOIN outbox m USING (message_id) WHERE m.decision_key = 'mailbox/2'),
          1::bigint, 'a second message: one delivery to the mailbox');

SELECT * FROM finish();
ROLLBACK;
