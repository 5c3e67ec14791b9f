-- What hpcacct writes and says does not follow the formatting settings of the session that
-- happens to run it (a portal's, a pg_cron job's, PGOPTIONS or ALTER ROLE ... SET): days in
-- messages, their decision keys and submit refusals are ISO 8601 under any DateStyle, and
-- figures are the same under any extra_float_digits.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(43);

INSERT INTO setting VALUES ('timezone', 'UTC') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
SELECT add_user(u, '2024-01-05') FROM unnest(ARRAY['sf_a']) AS u;
INSERT INTO contact (username, email) VALUES ('sf_a', 'a@example.org');

-- ---- RWTH: a quota state change (notify_scan), written by a German session ----------------
INSERT INTO account (name) VALUES ('sf_rw');
SELECT add_member('sf_rw', 'sf_a', 'admin');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('sf_rwth', 'c18m', 'cpu=48', 'cpu=1', 1, 'core-hours');
SELECT add_quota_period('sf_rw', '2024-02-01', '2024-03-31', 1234.5678, 'sf_rwth', 'core-hours');
SET LOCAL DateStyle = 'German, DMY';
SELECT is(notify_scan('2024-01-20'), 1, 'a quota state change, scanned by a German session');
SELECT is((SELECT subject FROM outbox WHERE account = 'sf_rw'), '[hpcacct] sf_rw: quota state low priority (2024-01-20)',
          'its subject gives the day in ISO 8601');
SELECT ok((SELECT body FROM outbox WHERE account = 'sf_rw')
          ~ 'The accounting period starts on 2024-02-01: .*Accounting period: +2024-02-01 to 2024-03-31\n',
          'its body the days of the period');
SELECT is((SELECT decision_key FROM outbox WHERE account = 'sf_rw'), 'sf_rw/2024-01-20/normal/low_priority',
          'and its decision key the day, as a session of DateStyle ISO writes it');
SET LOCAL extra_float_digits = -15;
SELECT is(notify_scan('2024-02-10'), 1, 'back to normal, scanned by a session of extra_float_digits -15');
RESET extra_float_digits;
SELECT is((SELECT (figures ->> 'monthly')::numeric FROM outbox WHERE account = 'sf_rw' AND figures ->> 'at' = '2024-02-10'),
          (SELECT monthly::numeric FROM window_quota_usage('sf_rw', '2024-02-10')),
          'its figures are the quota''s, not as the session printed them');

-- ---- HLRN: a balance below a threshold: once, whichever session scans ----------------------
INSERT INTO balance_threshold VALUES (20) ON CONFLICT DO NOTHING;
INSERT INTO account (name) VALUES ('sf_hp');
SELECT add_member('sf_hp', 'sf_a', 'admin');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('sf_hlrn', 'mpp', 'cpu=24', 'cpu=1', 1.0 / 12, 'NPL');
SELECT deposit('sf_hp', '2024-04-01', 1000);
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
VALUES ('sf_hlrn', 'b1', 'sf_hp', 'sf_a', 'mpp', '2024-04-10 00:00+00', '2024-04-30 00:00+00', 'cpu=24', 'COMPLETED');
CREATE TEMP VIEW sf_low AS SELECT count(*) AS n FROM outbox WHERE account = 'sf_hp' AND topic = 'balance_low';
SET LOCAL DateStyle = 'SQL, DMY';
SELECT notify_scan('2024-05-01');
SELECT is((SELECT n FROM sf_low), 1::bigint, 'below 20 %: one message, scanned by a session of DateStyle SQL, DMY');
SET LOCAL DateStyle = 'ISO, YMD';
SELECT notify_scan('2024-05-02');
SELECT is((SELECT n FROM sf_low), 1::bigint, 'a scan by a session of DateStyle ISO the next day: no second message');
SET LOCAL DateStyle = 'Postgres, MDY';
SELECT notify_scan('2024-05-03');
SELECT is((SELECT n FROM sf_low), 1::bigint, 'nor by one of DateStyle Postgres');
SELECT ok((SELECT body FROM outbox WHERE account = 'sf_hp' AND topic = 'balance_low' ORDER BY message_id LIMIT 1)
          ~ 'of the quarter starting 2024-04-01 ',
          'the message gives the quarter''s first day in ISO 8601');

-- ---- HLRN: an allocation that runs out (notify_scan) ---------------------------------------
INSERT INTO account (name) VALUES ('sf_ex');
SELECT add_member('sf_ex', 'sf_a', 'admin');
SELECT deposit('sf_ex', '2024-04-01', 1000);
SET LOCAL DateStyle = 'German';
SELECT notify_scan('2024-06-20');
SELECT is((SELECT count(*) FROM outbox WHERE account = 'sf_ex'), 1::bigint, 'an allocation that runs out, scanned by a German session');
SELECT is((SELECT subject FROM outbox WHERE account = 'sf_ex'), '[hpcacct] account sf_ex: no allocation from 2024-07-01, it expires',
          'its subject gives the day in ISO 8601');
SELECT ok((SELECT body FROM outbox WHERE account = 'sf_ex')
          ~ 'ending 2024-06-30 but none for the\nquarter starting 2024-07-01 \(11 days from 2024-06-20\)',
          'its body too');

-- ---- HLRN: an expiry logged by open_quarter() ----------------------------------------------
INSERT INTO quarter_log (quarter, account, action, target_quarter) VALUES ('2024-04-01', 'sf_a', 'expired', '2024-04-01');
SELECT is((SELECT subject FROM outbox WHERE topic = 'account_expired' AND account = 'sf_a'),
          '[hpcacct] account sf_a has expired (2024-04-01)', 'an expiry''s subject gives the quarter in ISO 8601');
SELECT ok((SELECT body FROM outbox WHERE topic = 'account_expired' AND account = 'sf_a')
          ~ 'quarter starting 2024-04-01, so it\n.*next quarter start \(2024-07-01\)', 'and its body');

-- ---- GENCI: a regulation outcome logged by regulate() --------------------------------------
INSERT INTO regulation_machine (machine, monthly_threshold) VALUES ('sf_g', 100);
INSERT INTO account (name) VALUES ('sf_gp');
SELECT add_member('sf_gp', 'sf_a', 'admin');
SET LOCAL extra_float_digits = -15;
INSERT INTO regulation_log (run_date, run, account, machine, figures_at, outcome, alloc, granted, consumption, tc, tmc, delta)
VALUES ('2024-06-15', 'monthly', 'sf_gp', 'sf_g', '2024-05-31', 'warning', 12000, 12000, 1000.25, 3000.5, 1000.125, -2000.25);
SELECT is((SELECT subject FROM outbox WHERE account = 'sf_gp'), '[hpcacct] sf_gp on sf_g: under-consumption warning (2024-06-15)',
          'a regulation warning''s subject gives the day in ISO 8601');
SELECT ok((SELECT body FROM outbox WHERE account = 'sf_gp') ~ '^Dear project manager,\n\nOn 2024-05-31 project sf_gp '
          AND (SELECT body FROM outbox WHERE account = 'sf_gp') ~ 'Figures at the end of 2024-05-31:',
          'its body too');
SELECT is((SELECT decision_key FROM outbox WHERE account = 'sf_gp'), 'sf_gp/sf_g/2024-06-15/monthly',
          'and its decision key');
SELECT is((SELECT figures - 'run_date' - 'figures_at' - 'run' - 'machine' FROM outbox WHERE account = 'sf_gp'),
          '{"alloc": 12000, "tmc": 1000.125, "tc": 3000.5, "consumption": 1000.25, "delta": -2000.25,
            "used_percent": null, "retracted": 0}'::jsonb,
          'its figures are the log''s, written by a session of extra_float_digits -15');
RESET extra_float_digits;

-- ---- a held job: its decision key names the check's instant in ISO 8601 and UTC ------------
SET LOCAL TimeZone = 'Asia/Kolkata';
INSERT INTO pending_job (cluster, jobid, username, account) VALUES ('sf_c', 'h1', 'sf_a', 'sf_gp');
UPDATE pending_job SET held = true, hold_reason = 'a test hold', checked_at = '2024-05-10 12:00:00.5+00' WHERE cluster = 'sf_c';
SELECT is((SELECT decision_key FROM outbox WHERE topic = 'job_held' AND figures ->> 'jobid' = 'h1'),
          'sf_c/h1/held/2024-05-10 12:00:00.500000+00', 'a held job''s decision key, written by a German session in Kolkata');
RESET TimeZone;
RESET DateStyle;

-- ---- submit refusals, which Slurm shows the user -------------------------------------------
INSERT INTO account (name, kind) VALUES ('sf_future', 'project'), ('sf_past', 'project');
SELECT add_member(a, 'sf_a', 'admin') FROM unnest(ARRAY['sf_future', 'sf_past']) AS a;
SELECT deposit('sf_future', '2024-10-01', 1000);
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('sf_past', 'grant', 100, 'hours', 'sf_g', '2023-01-01', '2023-12-31');
SET LOCAL DateStyle = 'German';
SELECT is((check_submit('sf_a', 'sf_future', '2024-05-10')).message,
          'account sf_future has no allocation for this quarter; its allocation begins on 2024-10-01: ask staff to move '
          'allocation into this quarter, or submit with another account',
          'an inactive account''s refusal gives the day its allocation begins in ISO 8601');
SET LOCAL DateStyle = 'SQL, MDY';
SELECT is((check_submit('sf_a', 'sf_past', '2024-05-10')).message,
          'account sf_past has no allocation valid on 2024-05-10: submit with another account',
          'a GENCI project without a grant: the day checked in ISO 8601');
RESET DateStyle;

-- ---- re-rating: the ledger's note names the instant in ISO 8601 ----------------------------
SET LOCAL DateStyle = 'Postgres, DMY';
SELECT isnt(rerate((SELECT resource_id FROM resource WHERE cluster = 'sf_hlrn'), 1.0 / 6, '2024-04-01 00:00+00'), NULL::bigint,
            're-rating from an instant, by a session of DateStyle Postgres');
RESET DateStyle;
SELECT is((SELECT array_agg(DISTINCT note) FROM ledger WHERE account = 'sf_hp' AND note LIKE '%re-rated%'),
          ARRAY['re-rated: resource ' || (SELECT min(resource_id) FROM resource WHERE cluster = 'sf_hlrn') || ' from 2024-04-01 00:00:00+00',
                'reversal: re-rated: resource ' || (SELECT min(resource_id) FROM resource WHERE cluster = 'sf_hlrn') || ' from 2024-04-01 00:00:00+00'],
          'its notes name the instant as a session of DateStyle ISO in UTC writes it');

-- ---- statements: the same figures under any extra_float_digits -----------------------------
-- (account_month()'s float8 figures went into its JSON as the session printed them: with
-- extra_float_digits = -15 a TC of 3 000.5 hours was 3e+03, and statement_html() printed 3,000.00)
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('sf_g', 'cpu', 'cpu=16', 'cpu=1', 1, 'hours');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('sf_gp', 'grant', 12345.67, 'hours', 'sf_g', '2024-01-01', '2024-12-31');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
VALUES ('sf_g', 'g1', 'sf_gp', 'sf_a', 'cpu', '2024-03-10 00:00+00', '2024-03-11 07:13+00', 'cpu=7', 'COMPLETED');
CREATE TEMP TABLE shown AS
SELECT a.account, account_month(a.account, '2024-05-01') AS month, statement_html(a.account, '2024-05-01') AS html
FROM unnest(ARRAY['sf_gp', 'sf_rw']) AS a(account);
SELECT ok((SELECT month -> 'regulation' -> 0 ->> 'tc' FROM shown WHERE account = 'sf_gp') ~ '^[0-9]+\.[0-9]+$',
          'a GENCI statement''s TC is a decimal figure');
-- its figures are allocation_status()'s to the last digit, as a default session prints a
-- float8 (a float8 cast to numeric keeps 15 significant digits: TMC 101639.344262295 for 101639.34426229508)
SET LOCAL extra_float_digits = 1;
SELECT is((SELECT concat_ws(' ', r ->> 'tmc', r ->> 'tc', r ->> 'consumption', r ->> 'delta')
           FROM shown, LATERAL (SELECT month -> 'regulation' -> 0 AS r) x WHERE account = 'sf_gp'),
          (SELECT concat_ws(' ', tmc, tc, consumption, delta) FROM allocation_status('sf_gp', 'sf_g', '2024-05-31')),
          'a GENCI statement''s TMC, TC, consumption and delta are allocation_status()''s, every digit');
RESET extra_float_digits;
CREATE TEMP TABLE first_page AS SELECT my_accounts('2024-03-15') AS m;
SELECT ok((SELECT m FROM first_page) @? '$.accounts[*] ? (@.account == "sf_rw").quota.monthly',
          'the first page shows sf_rw''s quota');
SET LOCAL extra_float_digits = -15;
SET LOCAL DateStyle = 'German';
SET LOCAL IntervalStyle = 'sql_standard';
SELECT is(account_month('sf_gp', '2024-05-01'), (SELECT month FROM shown WHERE account = 'sf_gp'),
          'a GENCI statement''s figures with extra_float_digits = -15 (DateStyle German) are those of a default session');
SELECT is(statement_html('sf_gp', '2024-05-01'), (SELECT html FROM shown WHERE account = 'sf_gp'),
          'and so is its page, chart included');
SELECT is(account_month('sf_rw', '2024-05-01'), (SELECT month FROM shown WHERE account = 'sf_rw'),
          'a window quota statement''s figures too');
SELECT is(statement_html('sf_rw', '2024-05-01'), (SELECT html FROM shown WHERE account = 'sf_rw'), 'and its page');
SELECT is(my_accounts('2024-03-15') - 'user', (SELECT m - 'user' FROM first_page),
          'the portal''s first page (my_accounts()) too');
SET LOCAL extra_float_digits = 0;
SET LOCAL DateStyle = 'SQL, DMY';
SET LOCAL IntervalStyle = 'postgres_verbose';
SELECT is(account_month('sf_gp', '2024-05-01'), (SELECT month FROM shown WHERE account = 'sf_gp'),
          'with extra_float_digits = 0 (DateStyle SQL, DMY) too');
SELECT is(statement_html('sf_gp', '2024-05-01'), (SELECT html FROM shown WHERE account = 'sf_gp'), 'and its page');
SELECT is(my_accounts('2024-03-15') - 'user', (SELECT m - 'user' FROM first_page), 'and the first page');
RESET extra_float_digits;
RESET DateStyle;
RESET IntervalStyle;

-- ---- the loader: a run's key and the quarantine's reasons ----------------------------------
-- (a job's key is cluster|jobid|submit epoch: with extra_float_digits = -15 the epoch printed as
-- 2e+09, and two runs of one job id a day apart were one run, the second a duplicate)
INSERT INTO account (name) VALUES ('sf_ld');
SELECT add_member('sf_ld', 'sf_a', 'member');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('sf_ldr', 'cpu', 'cpu=24', 'cpu=1', 1, 'core-hours');
SET LOCAL extra_float_digits = -15;
SET LOCAL DateStyle = 'German';
SET LOCAL IntervalStyle = 'sql_standard';
SET LOCAL TimeZone = 'Asia/Kolkata';
INSERT INTO sacct_staging (lineno, line, cluster, jobid, account, "user", partition, submit, start, "end", alloctres, state)
VALUES (1, 'l1', 'sf_ldr', '900', 'sf_ld', 'sf_a', 'cpu', '2024-03-01T00:00:00+0000', '2024-03-01T00:00:00+0000',
        '2024-03-01T01:00:00+0000', 'cpu=1', 'COMPLETED'),
       (2, 'l2', 'sf_ldr', '900', 'sf_ld', 'sf_a', 'cpu', '2024-03-02T00:00:00+0000', '2024-03-02T00:00:00+0000',
        '2024-03-02T02:00:00+0000', 'cpu=1', 'COMPLETED'),
       (3, 'l3', 'sf_ldr', '901', 'sf_ld', 'sf_a', 'gpu', '2024-03-03T00:00:00+0000', '2024-03-03T00:00:00+0000',
        '2024-03-03T01:00:00+0000', 'cpu=1', 'COMPLETED'),
       (4, 'l4', 'sf_ldr', '902', 'sf_ld', 'sf_a', 'cpu', '2023-01-01T00:00:00+0000', '2023-01-01T00:00:00+0000',
        '2024-06-01T00:00:00+0000', 'cpu=1', 'COMPLETED');
SELECT is((SELECT inserted FROM load_sacct()), 2::bigint,
          'two runs of one job id, a day apart, loaded by a session of extra_float_digits -15: both are charged');
RESET extra_float_digits;
RESET DateStyle;
RESET IntervalStyle;
RESET TimeZone;
SELECT is((SELECT reason FROM sacct_quarantine WHERE cluster = 'sf_ldr' AND jobid = '901'),
          'no resource for cluster "sf_ldr" partition "gpu" at 2024-03-03 00:00:00+00',
          'a job without a resource: the reason names its start in ISO 8601 and UTC');
SELECT is((SELECT reason FROM sacct_quarantine WHERE cluster = 'sf_ldr' AND jobid = '902'),
          'the job claims to have run longer than max_job_length (' || setting_value('max_job_length') || ')',
          'a job too long: the reason names the setting as it was written');

-- ---- interval settings: read alike under every IntervalStyle --------------------------------
-- ('-1 26:00:00' is 2 hours to a default session, -50 hours to one of IntervalStyle sql_standard)
SELECT throws_ok($$INSERT INTO hpcacct.setting VALUES ('max_job_length', '-1 26:00:00')$$, '22023',
                 'max_job_length must not begin with a minus sign, not "-1 26:00:00"',
                 'a max_job_length with a leading minus is refused');
SELECT throws_ok($$INSERT INTO hpcacct.setting VALUES ('notify_order_wait', ' -0 5:00:00')$$, '22023', NULL,
                 'so is a notify_order_wait');
SET LOCAL IntervalStyle = 'iso_8601';
SELECT lives_ok($$INSERT INTO hpcacct.setting VALUES ('half_life', 'P14DT12H')
                  ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value$$,
                'a half_life written as an ISO 8601 session prints it is taken');
RESET IntervalStyle;

-- ---- notes: a retraction regulate() books, a delivery a stopped sender left in sending ------
INSERT INTO account (name) VALUES ('sf_rg');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('sf_rg', 'grant', 1200, 'core-hours', 'sf_g', '2024-01-01', '2024-12-31');
SET LOCAL DateStyle = 'German, DMY';
CALL regulate('2024-07-15');
SELECT is((SELECT note FROM ledger WHERE account = 'sf_rg' AND kind = 'retraction'),
          'hpcacct.regulate(2024-07-15): monthly regulation',
          'a retraction''s note, booked by a German session, gives the run''s day in ISO 8601');
RESET DateStyle;
SELECT add_user('sf_l', '2024-01-05');
INSERT INTO contact (username, email) VALUES ('sf_l', 'l@example.org');
CREATE TEMP TABLE sf_lease AS
SELECT outbox_add('quota_state', 'sf/lease', NULL, 'lease', E'lease\n', '{}', false, ARRAY['sf_l']) AS id;
SELECT count(*) FROM outbox_claim('w1', '1 minute', 1000);
SELECT outbox_sending('w1', r.recipient_id) FROM outbox_recipient r WHERE r.message_id = (SELECT id FROM sf_lease);
UPDATE outbox_recipient SET lease_until = '2024-05-01 10:00:00+00' WHERE message_id = (SELECT id FROM sf_lease);
SET LOCAL DateStyle = 'German, DMY';
SET LOCAL TimeZone = 'Asia/Kolkata';
SELECT count(*) FROM outbox_claim('w2', '1 minute', 1000);
RESET DateStyle;
RESET TimeZone;
SELECT is((SELECT last_error FROM outbox_recipient WHERE message_id = (SELECT id FROM sf_lease)),
          'sender w1 stopped while sending (lease until 2024-05-01 10:00:00+00): not sent again',
          'a delivery left in sending: its note, written by a German session in Kolkata, gives the lease''s end in ISO 8601 and UTC');

SELECT * FROM finish();
ROLLBACK;
