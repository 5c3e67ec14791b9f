-- Rates that charged jobs: a charged resource row may only be closed (not before the start
-- of a job it charges); editing its rate or validity otherwise, or deleting it, is refused
-- with a named SQLSTATE and a hint; re-rating is rerate(), which books reversals and new
-- charges through the ledger and logs itself. The errors users meet most say what to do.
BEGIN;
SET search_path = public, hpcacct;
SET client_min_messages = warning;
SELECT plan(45);

-- The SQLSTATE and hint of a statement's error.
CREATE FUNCTION pg_temp.hint_of(statement text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    hint text;
BEGIN
    EXECUTE statement;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS hint = PG_EXCEPTION_HINT;
    RETURN SQLSTATE || ' ' || coalesce(hint, '(no hint)');
END $$;

INSERT INTO setting VALUES ('timezone', 'UTC') ON CONFLICT (name) DO UPDATE SET value = excluded.value;
INSERT INTO account (name) VALUES ('rr'), ('unused');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, valid)
VALUES ('rrc', 'gpu', 'cpu=32,gres/gpu=4', 'gres/gpu=1', 1, 'GPU-hours', tstzrange('2024-01-01 00:00+00', NULL));
CREATE TEMP TABLE r0 AS SELECT resource_id AS id FROM resource WHERE cluster = 'rrc';
-- Three jobs of 10 GPU-hours at rate 1: 1 March, 1 April, 1 May (and one of zero length).
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres) VALUES
    ('rrc', 'm', 'rr', 'u', 'gpu', '2024-03-01 00:00+00', '2024-03-01 05:00+00', 'gres/gpu=2'),
    ('rrc', 'a', 'rr', 'u', 'gpu', '2024-04-01 00:00+00', '2024-04-01 05:00+00', 'gres/gpu=2'),
    ('rrc', 'y', 'rr', 'u', 'gpu', '2024-05-01 00:00+00', '2024-05-01 05:00+00', 'gres/gpu=2');

-- ---- edits of a charged row are refused ----
SELECT throws_ok(format('UPDATE hpcacct.resource SET rate = 2 WHERE resource_id = %s', id), 'HA006', NULL,
                 'UPDATE of the rate of a charged row is refused (HA006)') FROM r0;
SELECT throws_ok(format('UPDATE hpcacct.resource SET valid = tstzrange(''2024-02-01 00:00+00'', NULL) WHERE resource_id = %s', id),
                 'HA006', NULL, 'moving the start of its validity too') FROM r0;
SELECT throws_ok(format('UPDATE hpcacct.resource SET bundle = ''gres/gpu=2'' WHERE resource_id = %s', id), 'HA006', NULL,
                 'and changing its bundle') FROM r0;
SELECT throws_ok(format('UPDATE hpcacct.resource SET valid = tstzrange(lower(valid), ''2024-04-15 00:00+00'') WHERE resource_id = %s', id),
                 'HA006', NULL, 'closing it before the start of a job it charges (1 May) is refused') FROM r0;
SELECT throws_ok(format('DELETE FROM hpcacct.resource WHERE resource_id = %s', id), '23503', NULL,
                 'deleting it is refused (23503)') FROM r0;
SELECT matches(pg_temp.hint_of(format('UPDATE hpcacct.resource SET rate = 2 WHERE resource_id = %s', id)),
               '^HA006 .*hpcacct\.rerate\(' || id, 'the hint names rerate() for this row') FROM r0;
SELECT matches(pg_temp.hint_of(format('DELETE FROM hpcacct.resource WHERE resource_id = %s', id)),
               '^23503 .*close it', 'the delete''s hint says to close the row instead') FROM r0;
SELECT is((SELECT rate FROM resource r JOIN r0 ON r.resource_id = r0.id), 1::float8, 'the rate is unchanged');
SELECT is((SELECT sum(amount) FROM ledger WHERE account = 'rr'), 30.000000, 'and so are the charges (3 × 10)');

-- ---- closing it after its last job is allowed; so is editing a row that charged nothing ----
SELECT lives_ok(format('UPDATE hpcacct.resource SET valid = tstzrange(lower(valid), ''2025-01-01 00:00+00'') WHERE resource_id = %s', id),
                'closing the row after its last job (1 May) is allowed') FROM r0;
SELECT lives_ok(format('UPDATE hpcacct.resource SET valid = tstzrange(lower(valid), NULL) WHERE resource_id = %s', id),
                'and reopening it') FROM r0;
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('rrc', 'idle', 'cpu=32', 'cpu=1', 1, 'core-hours');
SELECT lives_ok($$UPDATE hpcacct.resource SET rate = 3 WHERE cluster = 'rrc' AND partition = 'idle'$$,
                'a row that charged nothing can still be edited');
SELECT lives_ok($$DELETE FROM hpcacct.resource WHERE cluster = 'rrc' AND partition = 'idle'$$, 'and deleted');

-- ---- overlapping rates: 23P01 with a hint ----
SELECT throws_ok($$INSERT INTO hpcacct.resource (cluster, partition, node, bundle, rate, unit, valid)
                   VALUES ('rrc', 'gpu', 'cpu=32,gres/gpu=4', 'gres/gpu=1', 2, 'GPU-hours', tstzrange('2024-06-01 00:00+00', NULL))$$,
                 '23P01', NULL, 'a second rate over the same time is refused (23P01)');
SELECT matches(pg_temp.hint_of($$INSERT INTO hpcacct.resource (cluster, partition, node, bundle, rate, unit, valid)
                   VALUES ('rrc', 'gpu', 'cpu=32,gres/gpu=4', 'gres/gpu=1', 2, 'GPU-hours', tstzrange('2024-06-01 00:00+00', NULL))$$),
               '^23P01 One rate at a time: close resource ' || id, 'its hint says to close the current row first') FROM r0;

-- ---- deleting an account with ledger entries: 23503 with a hint ----
SELECT throws_ok($$DELETE FROM hpcacct.account WHERE name = 'rr'$$, '23503', NULL, 'an account with charges stays');
SELECT matches(pg_temp.hint_of($$DELETE FROM hpcacct.account WHERE name = 'rr'$$), '^23503 .*remove_member',
               'its hint says how to end its use instead');
-- ... nor renamed (README: "cannot be deleted or renamed (23503, with a hint …)")
SELECT throws_ok($$UPDATE hpcacct.account SET name = 'rr2' WHERE name = 'rr'$$, '23503', NULL,
                 'an account with charges keeps its name');
SELECT matches(pg_temp.hint_of($$UPDATE hpcacct.account SET name = 'rr2' WHERE name = 'rr'$$), '^23503 .*description',
               'the rename''s hint says to keep the name');
SELECT lives_ok($$UPDATE hpcacct.account SET description = 'still rr' WHERE name = 'rr'$$,
                'other columns of the account can change');
SELECT lives_ok($$UPDATE hpcacct.account SET name = 'unused2' WHERE name = 'unused'; UPDATE hpcacct.account SET name = 'unused' WHERE name = 'unused2'$$,
                'an account without entries can be renamed');
-- a charged resource row's cluster or partition is not renamed either: HA006, as its rate
SELECT throws_ok(format('UPDATE hpcacct.resource SET partition = ''gpu2'' WHERE resource_id = %s', id), 'HA006', NULL,
                 'renaming the partition of a charged resource row is refused (HA006)') FROM r0;
SELECT lives_ok($$DELETE FROM hpcacct.account WHERE name = 'unused'$$, 'an account without entries can be deleted');

-- ---- rerate(): from 1 April on, rate 1.5 ----
SELECT throws_ok(format('SELECT hpcacct.rerate(%s, -1, ''2024-04-01 00:00+00'')', id), '22003', NULL, 'a negative rate') FROM r0;
SELECT throws_ok(format('SELECT hpcacct.rerate(%s, NULL, ''2024-04-01 00:00+00'')', id), '22004', NULL, 'a NULL rate') FROM r0;
SELECT throws_ok($$SELECT hpcacct.rerate(-1, 2, '2024-04-01 00:00+00')$$, '42704', NULL, 'an unknown resource');
SELECT throws_ok(format('SELECT hpcacct.rerate(%s, 2, ''2023-04-01 00:00+00'')', id), '22023', NULL,
                 'an instant before the row''s validity') FROM r0;
SELECT is((SELECT count(*) FROM rerate_log), 0::bigint, 'refused re-ratings log nothing');

CREATE TEMP TABLE r1 AS SELECT rerate(id, 1.5, '2024-04-01 00:00+00', 'price of 2024-Q2') AS id FROM r0;
SELECT is((SELECT upper(valid) FROM resource r JOIN r0 ON r.resource_id = r0.id), '2024-04-01 00:00+00'::timestamptz,
          'the old row is closed at 1 April');
SELECT is((SELECT (rate, lower(valid), upper(valid))::text FROM resource r JOIN r1 ON r.resource_id = r1.id),
          (1.5::float8, '2024-04-01 00:00+00'::timestamptz, NULL::timestamptz)::text,
          'the new row has rate 1.5 from 1 April, open-ended like the old one');
SELECT results_eq($$SELECT jobid, sum(amount) FROM ledger WHERE account = 'rr' GROUP BY jobid ORDER BY jobid$$,
                  $$VALUES ('a', 15.000000::numeric), ('m', 10.000000), ('y', 15.000000)$$,
                  'April''s and May''s jobs now cost 15, March''s still 10');
SELECT results_eq($$SELECT l.jobid FROM ledger l JOIN r1 ON l.resource_id = r1.id WHERE l.kind = 'charge' ORDER BY 1$$,
                  $$VALUES ('a'), ('y')$$, 'their charges name the new row');
SELECT is((SELECT count(*) FROM ledger WHERE note LIKE 'reversal: re-rated%' AND amount = -10), 2::bigint,
          'each through a reversal of its old charge, booked in the ledger');
SELECT is((SELECT (jobs, amount_before, amount_after, old_rate, new_rate, note)::text FROM rerate_log),
          (2::bigint, 20.000000::numeric, 30.000000::numeric, 1::float8, 1.5::float8, 'price of 2024-Q2')::text,
          'the re-rating is logged: 2 jobs, 20 → 30');
SELECT is((SELECT sum(amount) FROM charge_rollup WHERE account = 'rr'), 40.000000, 'the rollup follows the ledger');
-- A job inserted now, starting in May, is charged at the new rate.
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres)
VALUES ('rrc', 'n', 'rr', 'u', 'gpu', '2024-05-10 00:00+00', '2024-05-10 01:00+00', 'gres/gpu=2');
SELECT is((SELECT amount FROM ledger WHERE jobid = 'n'), 3.000000, 'a new job from 1 April on is charged at 1.5');
-- Deleting a re-rated job reverses exactly what it holds.
DELETE FROM job WHERE jobid = 'a';
SELECT is((SELECT sum(amount) FROM ledger WHERE jobid = 'a'), 0.000000, 'deleting a re-rated job nets it to zero');
SELECT throws_ok(format('SELECT hpcacct.rerate(%s, 3, ''2024-03-01 00:00+00'')', id), '22023', NULL,
                 'the closed row cannot be re-rated past its end') FROM r1;

-- ---- rerate_catch_up(): a charge of the closed row that reached the ledger after rerate() ----
-- (at a federation's centre: a site's charge of a job from 1 April on, booked at the old rate
-- while its link was down; here inserted as replication would)
SELECT is(rerate_catch_up(), 0::bigint, 'rerate_catch_up() with nothing late: 0');
INSERT INTO ledger (account, kind, amount, unit, resource_id, cluster, jobid, job_submit, submitter, job_start, job_end, core_hours)
SELECT account, kind, 2.000000, unit, r0.id, cluster, 'late', job_submit, submitter,
       '2024-05-20 00:00+00', '2024-05-20 01:00+00', core_hours
FROM ledger, r0 WHERE jobid = 'n';
SELECT is(rerate_catch_up(), 1::bigint, 'rerate_catch_up() re-rates the late charge');
SELECT is((SELECT sum(amount) FROM ledger l JOIN r1 ON l.resource_id = r1.id WHERE jobid = 'late'), 3.000000,
          'at the new rate, on the new row');
SELECT is((SELECT sum(amount) FROM ledger WHERE jobid = 'late'), 3.000000, 'the job nets to its new charge');
SELECT is((SELECT (jobs, amount_before, amount_after)::text FROM rerate_log), (3::bigint, 22.000000::numeric, 33.000000::numeric)::text,
          'rerate_log adds it: 3 jobs, 22 → 33');
SELECT is(rerate_catch_up(), 0::bigint, 'a second call re-rates nothing');
INSERT INTO federation_node (site, role) VALUES (1, 'site');
SELECT throws_ok('SELECT hpcacct.rerate_catch_up()', 'HA013', NULL, 'at a federation site it is refused (HA013)');
DELETE FROM federation_node;

SELECT * FROM finish();
ROLLBACK;
