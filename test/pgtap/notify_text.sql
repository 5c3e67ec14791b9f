-- Notifications: what a message says, and to whom. A quota state outside the accounting period
-- is told as such, not as a used-up window; a held job is told to its owner, naming the account
-- it was held for (the default project when it named none).
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(15);

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

-- ---- a held job: to its owner, not to its project's managers --------------------------------
SELECT add_user(u, '2024-01-05') FROM unnest(ARRAY['nt_mgr', 'nt_mem']) AS u;
INSERT INTO contact (username, email) VALUES ('nt_mgr', 'mgr@example.org'), ('nt_mem', 'mem@example.org');
INSERT INTO account (name) VALUES ('nt_proj');
SELECT add_member('nt_proj', 'nt_mgr', 'admin'), add_member('nt_proj', 'nt_mem', 'member');
-- an allocation this quarter: without one, nt_proj has expired under the bank and a job
-- without an account is nt_mem's personal account's (job_account())
SELECT deposit('nt_proj', quarter_start(site_today()), 100);
UPDATE hpc_user SET default_account = 'nt_proj' WHERE username = 'nt_mem';
INSERT INTO pending_job (cluster, jobid, username, account) VALUES ('nt_c', 'h1', 'nt_mem', 'nt_proj'),
                                                                   ('nt_c', 'h2', 'nt_mem', NULL);
UPDATE pending_job SET held = true, hold_reason = 'a test hold' WHERE cluster = 'nt_c';
SELECT is((SELECT array_agg(r.address ORDER BY r.address) FROM outbox_recipient r JOIN outbox m USING (message_id)
           WHERE m.topic = 'job_held' AND m.figures ->> 'jobid' = 'h1'), ARRAY['mem@example.org'],
          'a held job is told to its owner only, as the README says');
SELECT is((SELECT array_agg(r.address ORDER BY r.address) FROM outbox_recipient r JOIN outbox m USING (message_id)
           WHERE m.topic = 'job_held' AND m.figures ->> 'jobid' = 'h2'), ARRAY['mem@example.org'],
          'one that named no account too');
SELECT is((SELECT account FROM outbox WHERE topic = 'job_held' AND figures ->> 'jobid' = 'h2'),
          (check_submit('nt_mem', NULL, site_today())).account,
          'a job that named no account is the default project''s, as check_submit() resolves it');
SELECT ok((SELECT body FROM outbox WHERE topic = 'job_held' AND figures ->> 'jobid' = 'h2') ~ '\(account nt_proj, your default\)',
          'and its message names it');
SELECT ok((SELECT body FROM outbox WHERE topic = 'job_held' AND figures ->> 'jobid' = 'h1') ~ '\(account nt_proj\)',
          'a job that named its account: the message names it');

-- ---- thresholds crossed at once: told in the order they were crossed -----------------------
-- (the milder first, so that the last message a manager reads is the state the account is in)
INSERT INTO balance_threshold VALUES (20), (0) ON CONFLICT DO NOTHING;
INSERT INTO account (name) VALUES ('nt_hp');
SELECT add_member('nt_hp', 'nt_mgr', 'admin');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('nt_hlrn', 'mpp', 'cpu=24', 'cpu=1', 1.0 / 12, 'NPL');
SELECT deposit('nt_hp', '2024-04-01', 1000);
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
VALUES ('nt_hlrn', 'b1', 'nt_hp', 'nt_mgr', 'mpp', '2024-04-10 00:00+00', '2024-04-30 00:00+00', 'cpu=42', 'COMPLETED');
SELECT cmp_ok(balance('nt_hp', '2024-05-01'), '<', 0::numeric, 'setup: the balance is negative');
SELECT cmp_ok(notify_scan('2024-05-01'), '>=', 2, 'the scan writes both thresholds'' messages');
SELECT is((SELECT array_agg(figures ->> 'threshold_percent' ORDER BY message_id) FROM outbox
           WHERE topic = 'balance_low' AND account = 'nt_hp'),
          ARRAY['20', '0'], 'below 20 % and negative at once: the 20 % message first, then the negative one');

SELECT * FROM finish();
ROLLBACK;
