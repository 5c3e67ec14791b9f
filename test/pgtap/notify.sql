-- Notifications (issue 16): contacts and their row-level security; every decision a document
-- says a person learns of writes one message, with its figures, in the deciding transaction,
-- and a re-run writes none; the sender's claim / sending / result protocol.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(104);

CALL setup_roles();
CREATE ROLE n_alice LOGIN IN ROLE hpcacct_portal;
CREATE ROLE n_bob LOGIN IN ROLE hpcacct_portal;

INSERT INTO setting VALUES ('timezone', 'UTC') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
SELECT add_user(u, '2024-01-05') FROM unnest(ARRAY['n_alice', 'n_bob', 'n_carol', 'n_px']) AS u;

-- ---- contacts ------------------------------------------------------------------------
INSERT INTO contact (username, email, display_name) VALUES
    ('n_alice', 'alice@example.org', 'Alice A'), ('n_bob', 'bob@example.org', 'Bob B'),
    ('n_carol', 'carol@example.org', NULL), ('n_px', 'px@example.org', NULL);

SELECT throws_ok($$INSERT INTO hpcacct.contact (username, email) VALUES ('n_nobody', 'x@example.org')$$,
                 '23503', NULL, 'a contact for an unknown user');
SELECT throws_ok($$UPDATE hpcacct.contact SET email = 'not an address' WHERE username = 'n_bob'$$,
                 '23514', NULL, 'an address with spaces and no domain');
SELECT throws_ok($$UPDATE hpcacct.contact SET email = E'bob@example.org\r\nBcc: eve@example.org' WHERE username = 'n_bob'$$,
                 '23514', NULL, 'an address that would add a header');
SELECT throws_ok($$UPDATE hpcacct.contact SET email = 'bob@example.org>, eve@example.org' WHERE username = 'n_bob'$$,
                 '23514', NULL, 'an address that would add a recipient');
SELECT throws_ok($$UPDATE hpcacct.contact SET display_name = E'Bob\nBcc: eve@example.org' WHERE username = 'n_bob'$$,
                 '23514', NULL, 'a display name with a line break');
SELECT is((SELECT email FROM contact WHERE username = 'n_bob'), 'bob@example.org', 'refused changes wrote nothing');

-- a portal user reads and changes their own contact only
SET SESSION AUTHORIZATION n_alice;
SELECT is((SELECT array_agg(username) FROM hpcacct.contact), ARRAY['n_alice'], 'n_alice sees only her own contact');
SELECT lives_ok($$UPDATE hpcacct.contact SET email = 'alice@lab.example.org' WHERE username = 'n_alice'$$,
                'n_alice changes her own address');
SELECT lives_ok($$UPDATE hpcacct.contact SET email = 'eve@example.org', notify = false$$,
                'n_alice''s update of every row runs (and reaches her own only)');
SELECT throws_ok($$INSERT INTO hpcacct.contact (username, email) VALUES ('n_carol', 'eve@example.org')
                   ON CONFLICT DO NOTHING$$, '42501', NULL, 'n_alice cannot write a contact row for someone else');
SELECT throws_ok($$UPDATE hpcacct.contact SET username = 'n_bob' WHERE username = 'n_alice'$$,
                 '42501', NULL, 'n_alice cannot move her row to another user');
SELECT throws_ok($$SELECT hpcacct.outbox_claim('me')$$, '42501', NULL, 'a portal user cannot claim deliveries');
SELECT throws_ok($$SELECT hpcacct.notify_scan('2024-03-01')$$, '42501', NULL, 'a portal user cannot run the scan');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT email FROM contact WHERE username = 'n_bob'), 'bob@example.org', 'n_bob''s address is unchanged');
SELECT is((SELECT email FROM contact WHERE username = 'n_alice'), 'eve@example.org', 'n_alice''s change is stored');
UPDATE contact SET email = 'alice@lab.example.org', notify = true WHERE username = 'n_alice';

-- ---- GENCI monthly regulation: warning on 15 February, retraction on 15 March -------------
INSERT INTO regulation_machine (machine, monthly_threshold) VALUES ('n_ada', 1000000);
INSERT INTO account (name) VALUES ('n_gp');
SELECT add_member('n_gp', 'n_alice', 'admin'), add_member('n_gp', 'n_bob', 'member');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('n_gp', 'grant', 1200000, 'hours', 'n_ada', '2024-01-01', '2024-12-31');

-- a rolled-back run writes no message
SAVEPOINT before_run;
CALL regulate('2024-02-15');
SELECT is((SELECT count(*) FROM outbox WHERE account = 'n_gp'), 1::bigint, 'the run writes its message');
ROLLBACK TO SAVEPOINT before_run;
SELECT is((SELECT count(*) FROM outbox WHERE account = 'n_gp'), 0::bigint, 'a rolled-back run leaves no message');

CALL regulate('2024-01-15');
SELECT is((SELECT count(*) FROM outbox WHERE account = 'n_gp'), 0::bigint, '15 January (ok): no message');
CALL regulate('2024-02-15');
SELECT is((SELECT topic FROM outbox WHERE account = 'n_gp'), 'regulation_warning', '15 February: a warning');
SELECT is((SELECT array_agg(address ORDER BY address) FROM outbox_recipient r JOIN outbox m USING (message_id)
           WHERE m.account = 'n_gp'), ARRAY['alice@lab.example.org'], 'to the project manager, not the member');
SELECT ok((SELECT body FROM outbox WHERE topic = 'regulation_warning' AND account = 'n_gp')
          ~ 'theoretical consumption TC of 150,000 hours', 'the warning gives TC(15 Feb) = 150 000');
SELECT ok((SELECT body FROM outbox WHERE topic = 'regulation_warning' AND account = 'n_gp')
          ~ 'TMC = 100,000 hours', 'and TMC = 100 000');
SELECT is((SELECT (figures ->> 'delta')::float8 FROM outbox WHERE topic = 'regulation_warning' AND account = 'n_gp'),
          -150000::float8, 'its figures: delta = -150 000');
CALL regulate('2024-03-15');
SELECT is((SELECT (figures ->> 'retracted')::numeric FROM outbox WHERE topic = 'regulation_retraction' AND account = 'n_gp'),
          100000::numeric, '15 March: a retraction of one TMC');
SELECT ok((SELECT body FROM outbox WHERE topic = 'regulation_retraction' AND account = 'n_gp')
          ~ 'goes from 1,200,000 to 1,100,000 hours', 'the notice gives the allocation before and after');
SELECT is((SELECT (figures ->> 'retracted')::numeric FROM outbox WHERE topic = 'regulation_retraction' AND account = 'n_gp'),
          (SELECT retracted FROM regulation_log WHERE account = 'n_gp' AND run_date = '2024-03-15'),
          'the message agrees with regulation_log');
SELECT results_eq($$SELECT alloc, tmc, tc FROM hpcacct.regulation_report WHERE account = 'n_gp' AND as_of = '2024-03-15'$$,
                  $$SELECT alloc, tmc, tc FROM hpcacct.regulation_log WHERE account = 'n_gp' AND run_date = '2024-03-15'$$,
                  'regulation_report on the day of the retraction shows the figures the run decided on');
SELECT is((SELECT alloc FROM regulation_report WHERE account = 'n_gp' AND as_of = '2024-04-15'), 1100000::numeric,
          'and a month later the allocation without the retracted hours');
CALL regulate('2024-03-15');
CALL regulate('2024-02-15');
SELECT is((SELECT count(*) FROM outbox WHERE account = 'n_gp'), 2::bigint, 'running the dates again writes no message');

-- ---- GENCI annual regulation: warning on 1 May, retraction on 1 June --------------------
INSERT INTO account (name) VALUES ('n_small');
SELECT add_member('n_small', 'n_carol', 'admin');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('n_small', 'grant', 100000, 'hours', 'n_ada', '2024-01-01', '2024-12-31');
CALL regulate('2024-05-01');
CALL regulate('2024-06-01');
CALL regulate('2024-06-01');
SELECT is((SELECT array_agg(topic ORDER BY message_id) FROM outbox WHERE account = 'n_small'),
          ARRAY['annual_warning', 'annual_retraction'], 'annual warning and retraction, once each');
SELECT ok((SELECT body FROM outbox WHERE account = 'n_small' AND topic = 'annual_retraction')
          ~ '40,000 hours are retracted', 'the annual retraction gives 40 % of 100 000');
SELECT is((SELECT address FROM outbox_recipient r JOIN outbox m USING (message_id)
           WHERE m.account = 'n_small' AND m.topic = 'annual_warning'), 'carol@example.org', 'to its manager');

-- ---- HLRN: expiry and deletion of a personal account, a held queued job ------------------
CALL open_quarter('2024-10-01');
SELECT is((SELECT count(*) FROM outbox WHERE topic = 'account_expired' AND account = 'n_px'), 1::bigint,
          'an expired personal account: a notice');
SELECT is((SELECT address FROM outbox_recipient r JOIN outbox m USING (message_id)
           WHERE m.topic = 'account_expired' AND m.account = 'n_px'), 'px@example.org', 'to its owner');
SELECT ok((SELECT body FROM outbox WHERE topic = 'account_expired' AND account = 'n_px') ~ 'deleted',
          'which says what follows');
INSERT INTO pending_job (cluster, jobid, username, account) VALUES ('n_c', 'j1', 'n_px', 'n_px'),
                                                                   ('n_c', 'j2', 'n_px', 'n_nowhere');
SELECT is((SELECT count(*) FROM recheck_queued('2024-10-02')), 2::bigint, 'recheck_queued holds both jobs');
SELECT is((SELECT count(*) FROM outbox WHERE topic = 'job_held'), 2::bigint, 'a message per held job');
SELECT ok((SELECT body FROM outbox WHERE topic = 'job_held' AND figures ->> 'jobid' = 'j1')
          ~ 'account n_px has no allocation', 'with the reason');
SELECT is((SELECT account FROM outbox WHERE topic = 'job_held' AND figures ->> 'jobid' = 'j2'), NULL,
          'a job held for an unknown account names no account');
SELECT is((SELECT address FROM outbox_recipient r JOIN outbox m USING (message_id)
           WHERE m.topic = 'job_held' AND m.figures ->> 'jobid' = 'j2'), 'px@example.org', 'and reaches the job''s owner');
SELECT is((SELECT count(*) FROM recheck_queued('2024-10-03')), 0::bigint, 'a second recheck holds nothing new');
SELECT is((SELECT count(*) FROM outbox WHERE topic = 'job_held'), 2::bigint, 'and writes no message');
-- released: only when hpcacct-slurm-sync lifted its own hold (an operator may still hold it)
UPDATE pending_job SET sync_hold = 'release' WHERE jobid IN ('j1', 'j2');   -- the sync held both
UPDATE pending_job SET held = false WHERE jobid IN ('j1', 'j2');
SELECT is((SELECT count(*) FROM outbox WHERE topic = 'job_released'), 0::bigint,
          'a job the database no longer holds: no message yet (the sync has not released it)');
UPDATE pending_job SET sync_hold = NULL WHERE jobid = 'j2';   -- the sync forgets: someone else holds it
SELECT is((SELECT count(*) FROM outbox WHERE topic = 'job_released'), 0::bigint,
          'a hold the sync forgets (someone else holds the job): no message');
SELECT set_config('hpcacct.sync_lifted', 'on', true);
UPDATE pending_job SET sync_hold = NULL WHERE jobid = 'j1';   -- the sync released it
SELECT set_config('hpcacct.sync_lifted', '', true);
SELECT is((SELECT count(*) FROM outbox WHERE topic = 'job_released' AND figures ->> 'jobid' = 'j1'), 1::bigint,
          'a hold the sync lifted itself: a message');
SELECT is((SELECT count(*) FROM outbox WHERE topic = 'job_released'), 1::bigint, 'only that one');
-- a job an administrator holds in Slurm (the sync saw it so): told the account's reason, not a hold
DELETE FROM pending_job WHERE jobid IN ('j1', 'j2');
INSERT INTO pending_job (cluster, jobid, username, account, other_hold) VALUES ('n_c', 'j3', 'n_px', 'n_px', true);
SELECT is((SELECT count(*) FROM recheck_queued('2024-10-03')), 1::bigint, 'recheck_queued holds a job an operator holds too');
SELECT ok((SELECT body FROM outbox WHERE topic = 'job_held' AND figures ->> 'jobid' = 'j3')
          ~ 'is held by an administrator, and its\naccount cannot run it either: account n_px has no allocation'
          AND (SELECT body FROM outbox WHERE topic = 'job_held' AND figures ->> 'jobid' = 'j3') !~ 'put on hold'
          AND (SELECT figures -> 'other_hold' FROM outbox WHERE topic = 'job_held' AND figures ->> 'jobid' = 'j3') = 'true',
          'its owner is told that an administrator holds it and the account''s reason, not that it was put on hold');
CALL open_quarter('2025-01-01');
CALL open_quarter('2025-01-01');
SELECT is((SELECT count(*) FROM outbox WHERE topic = 'account_deleted' AND account = 'n_px'), 1::bigint,
          'deleted a quarter later: one notice');
SELECT is((SELECT count(*) FROM outbox WHERE topic = 'account_expired' AND account = 'n_px'), 1::bigint,
          'and no second expiry notice in the quarter it is deleted');

-- ---- RWTH: entry into low_priority and back (notify_scan) --------------------------------
INSERT INTO account (name) VALUES ('n_rw');
SELECT add_member('n_rw', 'n_alice', 'admin'), add_member('n_rw', 'n_bob', 'member');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('n_rwth', 'c18m', 'cpu=48', 'cpu=1', 1, 'core-hours');
SELECT add_quota_period('n_rw', '2024-01-01', '2024-06-30', 1000, 'n_rwth', 'core-hours');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
VALUES ('n_rwth', 'r1', 'n_rw', 'n_bob', 'c18m', '2024-02-01 00:00+00', '2024-02-03 16:35+00', 'cpu=48', 'COMPLETED');
SELECT is(window_quota_state('n_rw', '2024-03-10'), 'low_priority', 'setup: 3 100 core-h in February make March low priority');
SELECT throws_ok($$SELECT hpcacct.notify_scan(NULL)$$, '22004', NULL, 'notify_scan(NULL)');
SELECT throws_ok($$SELECT hpcacct.notify_scan('infinity')$$, '22008', NULL, 'notify_scan(infinity)');
SELECT is(notify_scan('2024-01-20'), 0, 'January: normal, nothing to say');
SELECT is(notify_scan('2024-03-10'), 1, 'March: one message');
SELECT is(notify_scan('2024-03-11'), 0, 'a second scan: none');
SELECT is((SELECT array_agg(address ORDER BY address) FROM outbox_recipient r JOIN outbox m USING (message_id)
           WHERE m.account = 'n_rw'), ARRAY['alice@lab.example.org', 'bob@example.org'], 'to the managers and members');
SELECT ok((SELECT body FROM outbox WHERE account = 'n_rw') ~ 'Consumable:\s+-100', 'with the consumable core-hours');
SELECT is(notify_scan('2024-04-10'), 1, 'April: back to normal, one message');
SELECT is((SELECT array_agg(figures ->> 'state' ORDER BY message_id) FROM outbox WHERE account = 'n_rw'),
          ARRAY['low_priority', 'normal'], 'into low priority and back');
-- scans go in date order and not ahead: a scan of 12 March after April's told the members
-- of low priority again (and the next scan of normal again)
SELECT throws_ok($$SELECT hpcacct.notify_scan('2024-03-12')$$, '22023',
                 'notify_scan: 2024-03-12 comes before the quota state change notified on 2024-04-10',
                 'a scan of a day before a change notified is refused');
SELECT throws_ok(format('SELECT hpcacct.notify_scan(%L)', hpcacct.site_today() + 1), '22023', NULL,
                 'a scan of a day to come is refused');
SELECT is((SELECT count(*) FROM outbox WHERE account = 'n_rw'), 2::bigint, 'neither wrote a message');

-- ---- HLRN: a balance below a site threshold ----------------------------------------------
INSERT INTO balance_threshold VALUES (20), (0);
SELECT throws_ok($$INSERT INTO hpcacct.balance_threshold VALUES (120)$$, '23514', NULL, 'a threshold above 100 %');
INSERT INTO account (name) VALUES ('n_hp');
SELECT add_member('n_hp', 'n_bob', 'admin');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('n_hlrn', 'mpp', 'cpu=24', 'cpu=1', 1.0 / 12, 'NPL');
SELECT deposit('n_hp', '2024-04-01', 1000);
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
VALUES ('n_hlrn', 'h1', 'n_hp', 'n_bob', 'mpp', '2024-04-10 00:00+00', '2024-04-20 00:00+00', 'cpu=42', 'COMPLETED');
SELECT is(balance('n_hp', '2024-05-01'), 160::numeric, 'setup: 840 of 1 000 NPL used');
SELECT is(notify_scan('2024-05-01'), 1, 'below 20 %: one message');
SELECT ok((SELECT body FROM outbox WHERE account = 'n_hp') ~ 'at the end of 2024-05-01, account n_hp held 160\.00 NPL of the 1,000\.00 NPL', 'with the balance');
SELECT is(notify_scan('2024-05-02'), 0, 'once per quarter and threshold');
-- an account whose name has a line break: the subject's check (no control characters) failed
-- the deciding transaction, here the whole scan; the subject shows the break as a space
SAVEPOINT control_name;
INSERT INTO account (name) VALUES (E'n_hp\r\nBcc: x');
SELECT add_member(E'n_hp\r\nBcc: x', 'n_bob', 'admin');
SELECT deposit(E'n_hp\r\nBcc: x', '2024-04-01', 1000);
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
VALUES ('n_hlrn', 'h1x', E'n_hp\r\nBcc: x', 'n_bob', 'mpp', '2024-04-10 00:00+00', '2024-04-20 00:00+00', 'cpu=42', 'COMPLETED');
SELECT lives_ok($$SELECT hpcacct.notify_scan('2024-05-03')$$, 'a line break in an account name does not stop the scan');
SELECT is((SELECT subject FROM outbox WHERE account = E'n_hp\r\nBcc: x'), '[hpcacct] n_hp  Bcc: x: less than 20 % of the quarter''s credits left (2024-05-03)',
          'its message is written, the break a space in the subject');
ROLLBACK TO SAVEPOINT control_name;

-- ---- HLRN: a warning before an account's allocation runs out (notify_scan) --------------
-- (2025: the personal accounts above were deleted at the start of the year)
SELECT throws_ok($$INSERT INTO hpcacct.setting VALUES ('expiry_warning_days', '100')$$, '22023', NULL,
                 'expiry_warning_days beyond a quarter');
SELECT throws_ok($$INSERT INTO hpcacct.setting VALUES ('expiry_warning_days', 'two weeks')$$, '22023', NULL,
                 'expiry_warning_days that is not a number of days');
INSERT INTO account (name) VALUES ('n_ex'), ('n_ex2'), ('n_ex3'), ('n_ex4'), ('n_ex5');
SELECT add_member(a, 'n_carol', 'admin') FROM unnest(ARRAY['n_ex', 'n_ex2', 'n_ex3', 'n_ex4']) AS a;
SELECT add_member('n_ex', 'n_bob', 'member');
SELECT deposit('n_ex', '2025-07-01', 500), deposit('n_ex2', '2025-07-01', 500), deposit('n_ex2', '2026-01-01', 500),
       deposit('n_ex3', '2025-10-01', 500), deposit('n_ex4', '2025-07-01', 500), deposit('n_ex4', '2025-10-01', 500);
CREATE TEMP VIEW expiry AS SELECT * FROM outbox WHERE topic = 'account_expiry';
SELECT notify_scan('2025-09-10');
SELECT is((SELECT count(*) FROM expiry), 0::bigint, '21 days before the quarter ends: no warning (14 days by default)');
SELECT notify_scan('2025-09-20');
SELECT is((SELECT array_agg(account ORDER BY account) FROM expiry), ARRAY['n_ex', 'n_ex2'],
          '11 days before: the accounts without an allocation for the next quarter are warned (not n_ex4, which has one)');
SELECT is((SELECT subject FROM expiry WHERE account = 'n_ex'), '[hpcacct] account n_ex: no allocation from 2025-10-01, it expires',
          'the subject names the day it runs out');
SELECT is((SELECT subject FROM expiry WHERE account = 'n_ex2'),
          '[hpcacct] account n_ex2: no allocation from 2025-10-01, jobs will be refused',
          'an account with a later allocation is told its jobs will be refused until then');
SELECT is((SELECT figures ->> 'days_left' || ' ' || (figures ->> 'balance') || ' ' || (figures ->> 'allocation') FROM expiry
           WHERE account = 'n_ex'), '11 500.000000 500.000000', 'with the days left, the balance and the allocation');
SELECT ok((SELECT body FROM expiry WHERE account = 'n_ex2') ~ 'Next allocation:\s+2026-01-01', 'and the next allocation');
SELECT is((SELECT array_agg(address ORDER BY address) FROM outbox_recipient r JOIN expiry m USING (message_id)
           WHERE m.account = 'n_ex'), ARRAY['bob@example.org', 'carol@example.org'], 'to the managers and members');
SELECT notify_scan('2025-09-21');
SELECT notify_scan('2025-09-30');
SELECT is((SELECT count(*) FROM expiry), 2::bigint, 'later scans write no second warning for the same expiry');
SELECT notify_scan('2025-12-05');
SELECT is((SELECT count(*) FROM expiry WHERE account = 'n_ex3'), 0::bigint, 'n_ex3, 26 days before its quarter ends: none');
INSERT INTO setting VALUES ('expiry_warning_days', '30');
SELECT notify_scan('2025-12-05');
SELECT is((SELECT array_agg(account ORDER BY account) FROM expiry WHERE account IN ('n_ex3', 'n_ex4')), ARRAY['n_ex3', 'n_ex4'],
          'with expiry_warning_days = 30: n_ex3 and n_ex4, whose last quarter ends with the year, are warned');
SELECT add_member('n_ex5', 'n_carol', 'admin'), deposit('n_ex5', '2026-01-01', 500);
SAVEPOINT before_rollback;
UPDATE setting SET value = '0' WHERE name = 'expiry_warning_days';
SELECT notify_scan('2026-03-30');
SELECT is((SELECT count(*) FROM expiry WHERE account = 'n_ex5'), 0::bigint, 'expiry_warning_days = 0: no warning');
UPDATE setting SET value = '14' WHERE name = 'expiry_warning_days';
SELECT notify_scan('2026-03-30');
SELECT is((SELECT count(*) FROM expiry WHERE account = 'n_ex5'), 1::bigint, 'n_ex5 is warned two days before');
ROLLBACK TO SAVEPOINT before_rollback;
SELECT is((SELECT count(*) FROM expiry WHERE account = 'n_ex5'), 0::bigint, 'a rolled-back scan leaves no warning');

-- ---- the sender's protocol -------------------------------------------------------------
CREATE TEMP TABLE claimed AS SELECT * FROM outbox_claim('w1', '1 minute', 1000);
SELECT is((SELECT count(*) FROM claimed), (SELECT count(DISTINCT mailbox) FROM outbox_recipient),
          'w1 claims every due delivery: the oldest message''s to each mailbox (the others wait: notify_order)');
SELECT is((SELECT count(*) FROM outbox_claim('w2', '1 minute', 1000)), 0::bigint, 'w2 finds them leased');
SELECT ok(NOT outbox_sending('w2', (SELECT min(recipient_id) FROM claimed)), 'w2 cannot send what w1 holds');
SELECT ok(outbox_sending('w1', (SELECT min(recipient_id) FROM claimed)), 'w1 can');
SELECT ok(outbox_result('w1', (SELECT min(recipient_id) FROM claimed), 'delivered'), 'and marks it delivered');
SELECT ok(outbox_result('w1', (SELECT max(recipient_id) FROM claimed), 'retry', 'connection refused', '10 minutes', '1 hour'),
          'a refused delivery is retried');
SELECT ok((SELECT state = 'pending' AND next_attempt > clock_timestamp() + interval '9 minutes'
           FROM outbox_recipient WHERE recipient_id = (SELECT max(recipient_id) FROM claimed)),
          'after the back-off');
SELECT throws_ok($$SELECT hpcacct.outbox_result('w1', 1, 'lost')$$, '22023', NULL, 'an unknown outcome');
SELECT throws_ok($$SELECT hpcacct.outbox_claim('w1', '0 seconds')$$, '22023', NULL, 'a lease of zero');
-- a sender that stopped between 'sending' and its result: never sent again
SELECT ok(outbox_sending('w1', (SELECT recipient_id FROM claimed ORDER BY recipient_id OFFSET 1 LIMIT 1)), 'w1 sends another');
UPDATE outbox_recipient SET lease_until = clock_timestamp() - interval '1 second' WHERE lease_owner = 'w1';
SELECT ok(NOT EXISTS (SELECT 1 FROM outbox_claim('w3', '1 minute', 1000) c
                      WHERE c.recipient_id = (SELECT recipient_id FROM claimed ORDER BY recipient_id OFFSET 1 LIMIT 1)),
          'after w1''s lease ran out, w3 does not get the one w1 was sending');
SELECT is((SELECT state FROM outbox_recipient
           WHERE recipient_id = (SELECT recipient_id FROM claimed ORDER BY recipient_id OFFSET 1 LIMIT 1)),
          'uncertain', 'it is uncertain');

-- A lease or a retry of a day lasts 24 hours in any session's TimeZone (here one whose summer
-- time begins at the hour twelve hours from now: in it, the next day lasts 23 hours; at
-- tomorrow's midnight, a run in the first hour of the day landed a day later in the skipped
-- hour, and the day lasted 24). NULL or negative spans: 22004, 22023 (the sender always passes
-- both; a NULL one made the retry come at retry_max).
SELECT set_config('TimeZone', format('AAA0BBB,%s/%s,%s/0', extract(doy FROM t)::int - 1, extract(hour FROM t)::int,
                                     (extract(doy FROM t)::int + 180) % 365), true)
FROM (SELECT (now() + interval '12 hours') AT TIME ZONE 'UTC' AS t) x;
SELECT ok((SELECT extract(epoch FROM now() + interval '1 day' - now()) = 82800),
          'the test''s session zone: its next day lasts 23 hours');
SELECT add_user('n_lease', '2024-01-05');
INSERT INTO contact (username, email) VALUES ('n_lease', 'lease@lab.example');
CREATE TEMP TABLE lease_message AS
SELECT outbox_add('quota_state', 'lease/1', NULL, 'lease', E'1\n', '{}', false, ARRAY['n_lease']) AS id;
CREATE TEMP TABLE claimed_day AS
SELECT c.* FROM outbox_claim('w4', '1 day', 1000) c WHERE c.message_id = (SELECT id FROM lease_message);
SELECT ok((SELECT extract(epoch FROM r.lease_until - clock_timestamp()) BETWEEN 86340 AND 86400
           FROM outbox_recipient r JOIN claimed_day c USING (recipient_id)),
          'a lease of 1 day runs 24 hours');
SELECT ok(outbox_result('w4', (SELECT recipient_id FROM claimed_day), 'retry', '451 later', '1 day', '2 days'),
          'retried after a day');
SELECT ok((SELECT extract(epoch FROM next_attempt - clock_timestamp()) BETWEEN 86340 AND 86400
           FROM outbox_recipient WHERE recipient_id = (SELECT recipient_id FROM claimed_day)),
          'a retry of 1 day comes 24 hours later');
RESET TimeZone;
SELECT throws_ok($$SELECT hpcacct.outbox_result('w1', 1, 'retry', NULL, NULL)$$, '22004', NULL,
                 'a NULL retry_base is refused');
SELECT throws_ok($$SELECT hpcacct.outbox_result('w1', 1, 'retry', NULL, '-1 minute')$$, '22023', NULL,
                 'a negative retry_base is refused');
SELECT throws_ok($$SELECT hpcacct.outbox_result('w1', 1, 'delivered', NULL, '1 minute', NULL)$$, '22004', NULL,
                 'a NULL retry_max is refused');

SELECT * FROM finish();
ROLLBACK;
