-- Notifications: what a message says. A quota state outside the accounting period is told as
-- such, not as a used-up window.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(7);

SELECT add_user(u, '2024-01-05') FROM unnest(ARRAY['nt_a']) AS u;
INSERT INTO contact (username, email) VALUES ('nt_a', 'a@example.org');
INSERT INTO account (name) VALUES ('nt_rw');
SELECT add_member('nt_rw', 'nt_a', 'admin');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('nt_rwth', 'c18m', 'cpu=48', 'cpu=1', 1, 'core-hours');
SELECT add_quota_period('nt_rw', '2024-02-01', '2024-03-31', 1000, 'nt_rwth', 'core-hours');

-- before the period: low priority, for want of a quota
SELECT is(notify_scan('2024-01-20'), 1, 'before the period: a message');
SELECT ok((SELECT body FROM outbox WHERE account = 'nt_rw' AND figures ->> 'at' = '2024-01-20')
          ~ 'The accounting period starts on 2024-02-01', 'it says the period has not begun');
SELECT ok((SELECT body FROM outbox WHERE account = 'nt_rw' AND figures ->> 'at' = '2024-01-20') !~ 'used up',
          'and not that a quota is used up');
-- the period begins
SELECT is(notify_scan('2024-02-10'), 1, 'in the period: back to normal');
SELECT ok((SELECT body FROM outbox WHERE account = 'nt_rw' AND figures ->> 'at' = '2024-02-10')
          ~ 'The accounting period began on 2024-02-01', 'it says the period has begun');
-- after the period
SELECT is(notify_scan('2024-04-10'), 1, 'after the period: low priority');
SELECT ok((SELECT body FROM outbox WHERE account = 'nt_rw' AND figures ->> 'at' = '2024-04-10')
          ~ 'The accounting period ended on 2024-03-31', 'it says the period has ended');

SELECT * FROM finish();
ROLLBACK;
