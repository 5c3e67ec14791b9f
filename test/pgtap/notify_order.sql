-- Notifications: messages to a mailbox are delivered in the order written. A delivery waits
-- while one of an older message to its mailbox is to be delivered (a retry), up to the setting
-- notify_order_wait from when its message was written; outbox_next_due() counts the wait.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(17);

SELECT add_user(u, '2024-01-05') FROM unnest(ARRAY['no_a', 'no_b', 'no_c']) AS u;
-- no_a and no_b: one mailbox, spelled two ways; no_c another
INSERT INTO contact (username, email) VALUES ('no_a', 'q@bücher.example'), ('no_b', 'q@XN--BCHER-KVA.example'),
                                             ('no_c', 'c@lab.example');
CREATE TEMP TABLE ids AS
SELECT 1 AS n, outbox_add('quota_state', 'order/1', NULL, 'low priority', E'1\n', '{}', false, ARRAY['no_a']) AS id;
INSERT INTO ids SELECT 2, outbox_add('quota_state', 'order/2', NULL, 'normal', E'2\n', '{}', false, ARRAY['no_b', 'no_c']);
CREATE FUNCTION pg_temp.claimed(worker text) RETURNS text LANGUAGE sql AS $$
    SELECT coalesce(string_agg(i.n || ' ' || c.address, ', ' ORDER BY c.recipient_id), '')
    FROM hpcacct.outbox_claim(worker, '1 minute', 100) c JOIN ids i ON i.id = c.message_id $$;

SELECT is(pg_temp.claimed('w1'), '1 q@bücher.example, 2 c@lab.example',
          'the older message to a mailbox is claimed; the newer to it waits, the one to another mailbox does not');
SELECT ok(outbox_result('w1', r.recipient_id, 'retry', '451 try later', '1 hour', '1 hour'), 'the older one is to be retried')
FROM outbox_recipient r JOIN ids i ON i.id = r.message_id WHERE i.n = 1;
SELECT ok(outbox_result('w1', r.recipient_id, 'delivered'), 'the other mailbox''s is delivered')
FROM outbox_recipient r JOIN ids i ON i.id = r.message_id WHERE i.n = 2 AND r.address = 'c@lab.example';
SELECT is(pg_temp.claimed('w2'), '', 'while it is to be retried the newer one waits');
SELECT ok(outbox_next_due() > clock_timestamp() + interval '55 minutes',
          'and the next delivery is due at the retry, not now (a sender sleeps)');
-- outbox_status says why a pending delivery is not claimed
CREATE FUNCTION pg_temp.waiting(n integer, addr text) RETURNS bigint LANGUAGE sql AS $$
    SELECT s.waiting_for FROM hpcacct.outbox_status s JOIN ids i ON i.id = s.message_id
    WHERE i.n = waiting.n AND s.address = waiting.addr $$;
SELECT is(pg_temp.waiting(2, 'q@XN--BCHER-KVA.example'), (SELECT id FROM ids WHERE n = 1),
          'outbox_status: the waiting delivery names the older message it waits for');
SELECT is(pg_temp.waiting(1, 'q@bücher.example'), NULL, 'outbox_status: the older one waits for nothing');
-- its message written more than notify_order_wait (default 1 hour) ago: it goes
UPDATE outbox SET created_at = created_at - interval '61 minutes' WHERE message_id = (SELECT id FROM ids WHERE n = 2);
SELECT ok(outbox_next_due() <= clock_timestamp(), 'past notify_order_wait it is due');
SELECT is(pg_temp.waiting(2, 'q@XN--BCHER-KVA.example'), NULL, 'outbox_status: past notify_order_wait it waits no more');
SELECT is(pg_temp.claimed('w3'), '2 q@XN--BCHER-KVA.example', 'and is claimed while the older one still waits for its retry');

-- delivered: the next one goes at once
INSERT INTO ids SELECT 3, outbox_add('quota_state', 'order/3', NULL, 'blocked', E'3\n', '{}', false, ARRAY['no_c']);
INSERT INTO ids SELECT 4, outbox_add('quota_state', 'order/4', NULL, 'normal', E'4\n', '{}', false, ARRAY['no_c']);
SELECT is(pg_temp.claimed('w4'), '3 c@lab.example', 'of two new messages to a mailbox the older is claimed');
SELECT is(pg_temp.waiting(4, 'c@lab.example'), (SELECT id FROM ids WHERE n = 3),
          'outbox_status: a new message waits for the older one being sent');
SELECT ok(outbox_result('w4', r.recipient_id, 'delivered'), 'and delivered')
FROM outbox_recipient r JOIN ids i ON i.id = r.message_id WHERE i.n = 3;
SELECT is(pg_temp.claimed('w5'), '4 c@lab.example', 'then the newer one is claimed');

-- the setting
SELECT throws_ok($$INSERT INTO hpcacct.setting VALUES ('notify_order_wait', '1 month')$$, '22023', NULL, 'notify_order_wait: no months');

SELECT throws_ok($$INSERT INTO hpcacct.setting VALUES ('notify_order_wait', '-1 hour')$$, '22023', NULL,
                 'notify_order_wait must not be negative');
SELECT lives_ok($$INSERT INTO hpcacct.setting VALUES ('notify_order_wait', '0')$$, 'notify_order_wait 0: no wait');

SELECT * FROM finish();
ROLLBACK;
