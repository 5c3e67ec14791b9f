-- Notifications: what re-runs write. A scan run twice writes a change once; a state that
-- changes back and forth within a day writes each change.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(6);

-- the site's zone set: unset, it is the session's starting TimeZone (PGTZ), whose months the
-- job below would straddle west of UTC (America/Asuncion: it starts on 31 January)
INSERT INTO setting VALUES ('timezone', 'UTC') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;

SELECT add_user(u, '2024-01-05') FROM unnest(ARRAY['nr_a']) AS u;
INSERT INTO contact (username, email) VALUES ('nr_a', 'a@example.org');
INSERT INTO account (name) VALUES ('nr_rw');
SELECT add_member('nr_rw', 'nr_a', 'admin');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('nr_rwth', 'c18m', 'cpu=48', 'cpu=1', 1, 'core-hours');
SELECT add_quota_period('nr_rw', '2024-01-01', '2024-06-30', 1000, 'nr_rwth', 'core-hours');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
VALUES ('nr_rwth', 'r1', 'nr_rw', 'nr_a', 'c18m', '2024-02-01 00:00+00', '2024-02-03 16:35+00', 'cpu=48', 'COMPLETED');

-- ---- quota states: low priority, back to normal and low again on one day -------------------
SELECT is(notify_scan('2024-03-10'), 1, 'low priority: one message');
SELECT is(notify_scan('2024-03-10'), 0, 'the same scan again: none');
DELETE FROM job WHERE cluster = 'nr_rwth' AND jobid = 'r1';
SELECT is(notify_scan('2024-03-10'), 1, 'the job deleted, the same day: back to normal, one message');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
VALUES ('nr_rwth', 'r2', 'nr_rw', 'nr_a', 'c18m', '2024-02-01 00:00+00', '2024-02-03 16:35+00', 'cpu=48', 'COMPLETED');
SELECT is(notify_scan('2024-03-10'), 1, 'another job, the same day: low priority again, one message');
SELECT is((SELECT array_agg(figures ->> 'state' ORDER BY message_id) FROM outbox WHERE account = 'nr_rw'),
          ARRAY['low_priority', 'normal', 'low_priority'], 'the last message tells the state the account is in');
SELECT is(notify_scan('2024-03-10'), 0, 'and a scan after it: none');

SELECT * FROM finish();
ROLLBACK;
