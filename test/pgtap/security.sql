-- Attacks of a hostile site user (issue 20), each performed for real: a non-superuser must
-- not become superuser through the charging trigger, a portal user must not derive another
-- account's grant or usage from fairshare(), one ancient job must not break fair share, and
-- a job may not claim more than the site allows.
BEGIN;
SET search_path = hpcacct, public;
SELECT plan(41);

CALL setup_roles();
CREATE ROLE sec_staff LOGIN IN ROLE hpcacct_admin;   -- a non-superuser administrator
CREATE ROLE sec_owner LOGIN;                          -- owns a site table a superuser attached
CREATE ROLE sec_alice LOGIN IN ROLE hpcacct_portal;
CREATE SCHEMA sec_site AUTHORIZATION sec_owner;
GRANT USAGE ON SCHEMA hpcacct TO sec_owner;

INSERT INTO setting VALUES ('timezone', 'UTC') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('secc', 'cpu', 'cpu=16', 'cpu=1', 1, 'CH');
INSERT INTO account (name) VALUES ('sec_a'), ('sec_b');
SELECT add_user('sec_alice', '2024-01-05');
SELECT add_member('sec_a', 'sec_alice', 'admin');

-- ---- 1. superuser through the charging trigger ----
-- a temporary type whose cast to text makes its caller's role superuser when it can
SET SESSION AUTHORIZATION sec_staff;
CREATE TYPE pg_temp.evil AS (v text);
CREATE FUNCTION pg_temp.evil_to_text(pg_temp.evil) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        EXECUTE 'ALTER ROLE sec_staff SUPERUSER';
    END IF;
    RETURN ($1).v;
END $$;
CREATE CAST (pg_temp.evil AS text) WITH FUNCTION pg_temp.evil_to_text(pg_temp.evil);
CREATE TEMP TABLE myjobs (cluster text, jobid pg_temp.evil, account text, "user" text, partition text,
                          start timestamptz, "end" timestamptz, alloctres text);
SELECT throws_ok($$SELECT hpcacct.attach_charging('myjobs')$$, '42804', NULL,
                 'attaching charging to a table with a column of a user-defined type is refused');
-- the same table attached by hand with CREATE TRIGGER: the check runs at every firing
CREATE TRIGGER by_hand AFTER INSERT ON myjobs REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION hpcacct_internal.charge_jobs();
SELECT throws_ok($$INSERT INTO myjobs VALUES ('secc', ROW('x'), 'sec_a', 'u', 'cpu', '2024-05-01 00:00+00',
                                              '2024-05-01 01:00+00', 'cpu=1')$$,
                 '42804', NULL, 'a job in such a table is refused when the trigger fires');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT rolsuper FROM pg_roles WHERE rolname = 'sec_staff'), false,
          'the administrator did not become superuser through a cast');

-- a trigger without the transition tables charging reads: the names new_jobs and old_jobs
-- would find the caller's own temporary relations, read with the owner's rights
SET SESSION AUTHORIZATION sec_staff;
CREATE FUNCTION pg_temp.evil_cluster() RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        EXECUTE 'ALTER ROLE sec_staff SUPERUSER';
    END IF;
    RETURN 'secc';
END $$;
CREATE TEMP TABLE plainjobs (cluster text, jobid text, account text, "user" text, partition text,
                             start timestamptz, "end" timestamptz, alloctres text);
CREATE TEMP VIEW new_jobs AS
    SELECT pg_temp.evil_cluster() AS cluster, 'tv1'::text AS jobid, 'sec_a'::text AS account, 'u'::text AS "user",
           'cpu'::text AS partition, '2024-05-01 00:00+00'::timestamptz AS start,
           '2024-05-01 01:00+00'::timestamptz AS "end", 'cpu=1'::text AS alloctres;
CREATE TEMP VIEW old_jobs AS SELECT * FROM new_jobs;
CREATE TRIGGER no_tables AFTER INSERT OR UPDATE OR DELETE ON plainjobs
    FOR EACH STATEMENT EXECUTE FUNCTION hpcacct_internal.charge_jobs();
SELECT throws_ok($$INSERT INTO plainjobs VALUES ('secc', 'tv0', 'sec_a', 'u', 'cpu', '2024-05-01 00:00+00',
                                                 '2024-05-01 01:00+00', 'cpu=1')$$,
                 '39P01', NULL, 'a charging trigger without its transition table new_jobs is refused');
DROP TRIGGER no_tables ON plainjobs;
-- an UPDATE trigger naming only new_jobs would read old_jobs from the temporary schema
CREATE TRIGGER half_tables AFTER UPDATE ON plainjobs REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION hpcacct_internal.charge_jobs();
INSERT INTO plainjobs VALUES ('secc', 'tv0', 'sec_a', 'u', 'cpu', '2024-05-01 00:00+00', '2024-05-01 01:00+00', 'cpu=1');
SELECT throws_ok($$UPDATE plainjobs SET alloctres = 'cpu=2'$$,
                 '39P01', NULL, 'an update trigger without old_jobs is refused too');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT rolsuper FROM pg_roles WHERE rolname = 'sec_staff'), false,
          'the administrator did not become superuser through a temporary view named new_jobs');
SELECT is((SELECT count(*) FROM ledger WHERE cluster = 'secc' AND jobid LIKE 'tv%'), 0::bigint,
          'and nothing was charged');

-- the rollups are the ledger's sums, which balances, reports and check_submit read: an
-- administrator books in the ledger, and cannot change the sums around it
SET SESSION AUTHORIZATION sec_staff;
SELECT throws_ok($$UPDATE hpcacct.charge_rollup SET amount = 0$$, '42501', NULL,
                 'an administrator cannot zero the charge rollup (balances would lose charges the ledger holds)');
SELECT throws_ok($$DELETE FROM hpcacct.consumption_rollup$$, '42501', NULL, 'nor delete the consumption rollup');
SELECT throws_ok($$DELETE FROM hpcacct.fairshare_base$$, '42501', NULL, 'nor the folded fair-share usage');
SELECT throws_ok($$INSERT INTO hpcacct.usage_base (account, resource_id, unit, month, through, amount)
                   VALUES ('sec_a', 1, 'CH', '2024-01-01', '2024-01-01', -1000)$$, '42501', NULL,
                 'nor add folded usage');
SELECT throws_ok($$INSERT INTO hpcacct.rollup_pending VALUES (1, 9223372036854775806)$$, '42501', NULL,
                 'nor mark rolled-up charges pending again (reports would count them twice)');
-- what an administrator does still keeps the rollups: a charge booked by hand, a rebuild, a compaction
INSERT INTO hpcacct.ledger (account, kind, amount, unit, resource_id, cluster, jobid, submitter, job_start, job_end)
SELECT 'sec_b', 'charge', 7, 'CH', r.resource_id, 'secc', 'by-hand', 'u', '2024-05-05 00:00+00', '2024-05-05 01:00+00'
FROM hpcacct.resource r WHERE r.cluster = 'secc';
SELECT is((SELECT sum(amount) FROM hpcacct.charge_rollup WHERE account = 'sec_b'), 7::numeric,
          'a charge an administrator books by hand is rolled up');
SELECT lives_ok($$SELECT hpcacct.rebuild_rollup()$$, 'an administrator rebuilds the rollups');
SELECT lives_ok($$SELECT hpcacct.compact_rollup()$$, 'and compacts them');
SELECT is((SELECT sum(amount) FROM hpcacct.charge_rollup WHERE account = 'sec_b'), 7::numeric,
          'and they still hold the ledger''s sums');
-- the ledger's trigger runs as the owner: on a table of one's own it would roll up invented charges
CREATE TEMP TABLE fake_entries (LIKE hpcacct.ledger);
CREATE TRIGGER fake_roll_up AFTER INSERT ON fake_entries REFERENCING NEW TABLE AS new_entries
    FOR EACH STATEMENT EXECUTE FUNCTION hpcacct_internal.roll_up_charges();
SELECT throws_ok($$INSERT INTO fake_entries (entry_id, booked_at, account, kind, amount, unit, resource_id, cluster, jobid,
                                             submitter, job_start, job_end)
                   SELECT 1, now(), 'sec_b', 'charge', -1000, 'CH', r.resource_id, 'secc', 'fake', 'u',
                          '2024-05-05 00:00+00', '2024-05-05 01:00+00'
                   FROM hpcacct.resource r WHERE r.cluster = 'secc'$$,
                 '39P01', NULL, 'the ledger''s roll-up trigger refuses to run on any other table');
RESET SESSION AUTHORIZATION;

-- a site table attached by a superuser, whose owner then changes a column's type
CREATE TABLE sec_site.jobs (cluster text, job_id text, account text, "user" text, partition text,
                            start timestamptz, "end" timestamptz, alloctres hpcacct.tres);
ALTER TABLE sec_site.jobs OWNER TO sec_owner;
SELECT lives_ok($$SELECT hpcacct.attach_charging('sec_site.jobs', 'jobid=job_id')$$,
                'a table of built-in types can be attached');
INSERT INTO sec_site.jobs VALUES ('secc', 'ok1', 'sec_a', 'u', 'cpu', '2024-05-01 00:00+00', '2024-05-01 02:00+00', 'cpu=2');
SELECT is((SELECT sum(amount) FROM ledger WHERE cluster = 'secc' AND jobid = 'ok1'), 4.000000::numeric,
          'and charges its jobs');
SET SESSION AUTHORIZATION sec_owner;
CREATE TYPE sec_site.evil AS (v text);
CREATE FUNCTION sec_site.evil_to_text(sec_site.evil) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        EXECUTE 'ALTER ROLE sec_owner SUPERUSER';
    END IF;
    RETURN ($1).v;
END $$;
CREATE CAST (sec_site.evil AS text) WITH FUNCTION sec_site.evil_to_text(sec_site.evil);
ALTER TABLE sec_site.jobs ALTER COLUMN job_id TYPE sec_site.evil USING ROW(job_id)::sec_site.evil;
SELECT throws_ok($$INSERT INTO sec_site.jobs VALUES ('secc', ROW('x'), 'sec_a', 'u', 'cpu', '2024-05-01 00:00+00',
                                                     '2024-05-01 01:00+00', 'cpu=1')$$,
                 '42804', NULL, 'after ALTER COLUMN ... TYPE to a user-defined type the next insert is refused');
-- a domain over text carries its owner's code too (CHECK functions): refused as well
CREATE DOMAIN sec_site.name_domain AS text;
ALTER TABLE sec_site.jobs ALTER COLUMN job_id TYPE sec_site.name_domain USING (job_id).v;
SELECT throws_ok($$INSERT INTO sec_site.jobs VALUES ('secc', 'd1', 'sec_a', 'u', 'cpu', '2024-05-01 00:00+00',
                                                     '2024-05-01 01:00+00', 'cpu=1')$$,
                 '42804', NULL, 'so is a column of a domain type');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT rolsuper FROM pg_roles WHERE rolname = 'sec_owner'), false,
          'the table owner did not become superuser through a cast');
SELECT is((SELECT count(*) FROM ledger WHERE cluster = 'secc' AND jobid NOT IN ('ok1', 'by-hand')), 0::bigint,
          'and none of the refused jobs was charged');
-- integer job ids and timestamp columns are built-in: still charged
CREATE TABLE sec_site.int_jobs (cluster varchar, jobid bigint, account text, "user" text, partition text,
                                start timestamp, "end" timestamp, alloctres text);
SELECT hpcacct.attach_charging('sec_site.int_jobs');
INSERT INTO sec_site.int_jobs VALUES ('secc', 42, 'sec_a', 'u', 'cpu', '2024-05-02 00:00', '2024-05-02 03:00', 'cpu=1');
SELECT is((SELECT sum(amount) FROM ledger WHERE cluster = 'secc' AND jobid = '42'), 3.000000::numeric,
          'a table with integer ids and timestamp columns is charged');

-- ---- 5. what a job may claim ----
SELECT throws_ok($$INSERT INTO job VALUES ('secc', 'flood', 'sec_a', 'u', 'cpu', NULL, '2000-01-01 00:00+00',
                                            '2100-01-01 00:00+00', 'cpu=0', 'COMPLETED')$$,
                 'HA004', NULL, 'a job claiming a century is refused (max_job_length)');
SELECT is((SELECT count(*) FROM charge_rollup WHERE month < '2024-01-01'), 0::bigint,
          'and wrote no rollup rows');
INSERT INTO setting VALUES ('max_job_length', '2 hours');
SELECT throws_ok($$INSERT INTO job VALUES ('secc', 'long', 'sec_a', 'u', 'cpu', NULL, '2024-05-03 00:00+00',
                                            '2024-05-03 02:00:01+00', 'cpu=1', 'COMPLETED')$$,
                 'HA004', NULL, 'the bound is a site setting: one second over 2 hours is refused');
SELECT lives_ok($$INSERT INTO job VALUES ('secc', 'long', 'sec_a', 'u', 'cpu', NULL, '2024-05-03 00:00+00',
                                           '2024-05-03 02:00:00+00', 'cpu=1', 'COMPLETED')$$,
                'exactly 2 hours is charged');
SELECT throws_ok($$INSERT INTO setting VALUES ('max_job_length', '1 mon') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value$$,
                 '22023', NULL, 'max_job_length in months is refused (a month has no fixed length)');
DELETE FROM setting WHERE name = 'max_job_length';

-- ---- 7. a submitter outside the account, when the site requires membership ----
SELECT lives_ok($$INSERT INTO job VALUES ('secc', 'm1', 'sec_b', 'sec_alice', 'cpu', NULL, '2024-05-04 00:00+00',
                                           '2024-05-04 01:00+00', 'cpu=1', 'COMPLETED')$$,
                'by default the job table is trusted: a non-member''s job is charged');
INSERT INTO setting VALUES ('require_membership', 'on');
SELECT throws_ok($$INSERT INTO job VALUES ('secc', 'm2', 'sec_b', 'sec_alice', 'cpu', NULL, '2024-05-04 00:00+00',
                                            '2024-05-04 01:00+00', 'cpu=1', 'COMPLETED')$$,
                 'HA005', NULL, 'with require_membership on, a job of a non-member is refused');
SELECT lives_ok($$INSERT INTO job VALUES ('secc', 'm3', 'sec_a', 'sec_alice', 'cpu', NULL, '2024-05-04 00:00+00',
                                           '2024-05-04 01:00+00', 'cpu=1', 'COMPLETED')$$,
                'and a member''s job is charged');
DELETE FROM setting WHERE name = 'require_membership';

-- ---- 3. one ancient job does not break fair share ----
INSERT INTO setting VALUES ('half_life', '1 day')
    ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO job VALUES ('secc', 'old', 'sec_a', 'u', 'cpu', NULL, '2005-01-01 00:00+00', '2005-01-01 01:00+00',
                        'cpu=1', 'COMPLETED');
SELECT lives_ok($$SELECT * FROM hpcacct.fairshare_all('2024-06-01 00:00+00')$$,
                'fairshare() works with a job that ended 7 000 half-lives ago');
SELECT lives_ok($$SELECT hpcacct.compact_rollup()$$, 'and so does compact_rollup()');
SELECT is(decay_weight('2005-01-01 00:00+00', '2024-06-01 00:00+00', '1 day'), 0::float8,
          'an age past float8''s range weighs 0');

-- ---- 2. fair share does not give away the other account ----
-- pool secc: sec_a and sec_b hold 1 000 each and each used 100 (jobs ending at the same
-- instant); then sec_b gets 1 000 more and uses 100 more. The pool's totals change, their
-- ratio does not: what sec_alice sees must not change either.
DELETE FROM setting WHERE name = 'half_life';
CREATE TEMP TABLE sec_seen (world int, pool text, account text, submitter text, allocation numeric,
                            share float8, usage float8, norm_usage float8, factor float8);
GRANT ALL ON sec_seen TO PUBLIC;
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('sec_a', 'grant', 1000, 'CH', 'secc', current_date - 30, current_date + 30),
       ('sec_b', 'grant', 1000, 'CH', 'secc', current_date - 30, current_date + 30);
INSERT INTO job VALUES
    ('secc', 'fa', 'sec_a', 'sec_alice', 'cpu', NULL, date_trunc('hour', now()) - interval '110 minutes',
     date_trunc('hour', now()) - interval '10 minutes', 'cpu=50', 'COMPLETED'),
    ('secc', 'fb', 'sec_b', 'bob', 'cpu', NULL, date_trunc('hour', now()) - interval '110 minutes',
     date_trunc('hour', now()) - interval '10 minutes', 'cpu=50', 'COMPLETED');
SET SESSION AUTHORIZATION sec_alice;
INSERT INTO sec_seen SELECT 1, pool, account, submitter, allocation, share, usage, norm_usage, factor
                     FROM hpcacct.fairshare() WHERE pool = 'secc';
SELECT throws_ok($$SELECT * FROM hpcacct.fairshare(now() - interval '1 day')$$, '42501', NULL,
                 'a portal user cannot ask for fair share at an instant of their choosing');
SELECT lives_ok($$SELECT * FROM hpcacct.fairshare(NULL)$$, 'fairshare(NULL) is now');
RESET SESSION AUTHORIZATION;
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('sec_b', 'grant', 1000, 'CH', 'secc', current_date - 30, current_date + 30);
INSERT INTO job VALUES
    ('secc', 'fb2', 'sec_b', 'bob', 'cpu', NULL, date_trunc('hour', now()) - interval '110 minutes',
     date_trunc('hour', now()) - interval '10 minutes', 'cpu=50', 'COMPLETED');
SET SESSION AUTHORIZATION sec_alice;
INSERT INTO sec_seen SELECT 2, pool, account, submitter, allocation, share, usage, norm_usage, factor
                     FROM hpcacct.fairshare() WHERE pool = 'secc';
RESET SESSION AUTHORIZATION;
SELECT is((SELECT array_agg(coalesce(submitter, '(account)') ORDER BY submitter NULLS FIRST) FROM sec_seen WHERE world = 1),
          ARRAY['(account)', 'sec_alice', 'u'], 'sec_alice sees her account''s row and its users'' rows, no other account''s');
SELECT is((SELECT count(*) FROM sec_seen WHERE share IS NOT NULL OR norm_usage IS NOT NULL), 0::bigint,
          'without share or norm_usage (fractions of the pool''s totals)');
SELECT set_eq($$SELECT pool, account, submitter, allocation, usage, round(factor::numeric, 12) FROM sec_seen WHERE world = 1$$,
              $$SELECT pool, account, submitter, allocation, usage, round(factor::numeric, 12) FROM sec_seen WHERE world = 2$$,
              'what she sees is the same whether the other account holds 1 000 and used 100, or 2 000 and used 200');
SELECT isnt((SELECT share FROM fairshare_all(now()) WHERE account = 'sec_a' AND submitter IS NULL AND pool = 'secc'),
            0.5::float8, 'while her share of the pool did change (it is 1/3 now): the test can tell the worlds apart');

SELECT * FROM finish();
ROLLBACK;
