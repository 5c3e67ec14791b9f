-- What one person learns about another, with real login roles (session_user): two members of
-- one project and a user of another. A message about a person's own job is read by that
-- person, and by the account's members only when they see the job itself (pending_job: a job
-- that named the account); addresses and deliveries stay their owner's; a project's members
-- see its usage per user.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(34);

CALL setup_roles();
CREATE ROLE pv_alice LOGIN IN ROLE hpcacct_portal;
CREATE ROLE pv_bob LOGIN IN ROLE hpcacct_portal;
CREATE ROLE pv_carol LOGIN IN ROLE hpcacct_portal;
CREATE ROLE pv_dave LOGIN IN ROLE hpcacct_portal;

INSERT INTO setting VALUES ('timezone', 'UTC') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('pvc', 'mpp', 'cpu=24', 'cpu=1', 1, 'NPL');
INSERT INTO account (name) VALUES ('pv_p1'), ('pv_p2');
SELECT add_user(u, '2024-01-05') FROM unnest(ARRAY['pv_alice', 'pv_bob', 'pv_carol', 'pv_dave']) AS u;
SELECT add_member('pv_p1', 'pv_alice', 'admin'), add_member('pv_p1', 'pv_bob'), add_member('pv_p1', 'pv_carol'),
       add_member('pv_p2', 'pv_dave', 'admin');
UPDATE hpc_user SET default_account = 'pv_p1' WHERE username IN ('pv_alice', 'pv_bob', 'pv_carol');
INSERT INTO contact (username, email) VALUES ('pv_alice', 'alice@home.example'), ('pv_bob', 'bob@home.example'),
                                             ('pv_carol', 'carol@home.example'), ('pv_dave', 'dave@home.example');
SELECT deposit('pv_p1', '2024-04-01', 1000);
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    ('pvc', 'j1', 'pv_p1', 'pv_bob', 'mpp', '2024-04-02 00:00+00', '2024-04-02 01:00+00', 'cpu=10', 'COMPLETED'),
    ('pvc', 'j2', 'pv_p1', 'pv_carol', 'mpp', '2024-04-03 00:00+00', '2024-04-03 01:00+00', 'cpu=20', 'COMPLETED');
-- bob's job names no account (his default, pv_p1); alice's names pv_p1; carol's names pv_p2, of
-- which she is no member; dave's names an account that does not exist
INSERT INTO pending_job (cluster, jobid, username, account) VALUES
    ('pvc', 'q-bob', 'pv_bob', NULL), ('pvc', 'q-alice', 'pv_alice', 'pv_p1'),
    ('pvc', 'q-carol', 'pv_carol', 'pv_p2'), ('pvc', 'q-dave', 'pv_dave', 'pv_nowhere');
UPDATE pending_job SET held = true, hold_reason = 'reason of ' || jobid WHERE cluster = 'pvc';
SELECT is((SELECT count(*) FROM outbox WHERE topic = 'job_held' AND figures ->> 'cluster' = 'pvc'), 4::bigint,
          'setup: four held-job messages');

-- ---- carol, a member of bob's project ----
SET SESSION AUTHORIZATION pv_carol;
SELECT is_empty($$SELECT 1 FROM hpcacct.pending_job WHERE jobid = 'q-bob'$$,
                'carol does not see bob''s job that named no account (pending_job)');
SELECT is_empty($$SELECT 1 FROM hpcacct.outbox WHERE figures ->> 'jobid' = 'q-bob'$$,
                'nor the message about it in the outbox');
SELECT is_empty($$SELECT 1 FROM hpcacct.outbox WHERE body ~ 'reason of q-bob' OR subject ~ 'q-bob'$$,
                'nor its body or subject');
SELECT is_empty($$SELECT 1 FROM hpcacct.outbox_status WHERE subject ~ 'q-bob'$$, 'nor in outbox_status');
SELECT isnt_empty($$SELECT 1 FROM hpcacct.pending_job WHERE jobid = 'q-alice'$$,
                  'she sees alice''s job that named their project');
SELECT isnt_empty($$SELECT 1 FROM hpcacct.outbox WHERE figures ->> 'jobid' = 'q-alice'$$,
                  'and so the message about it, as before');
SELECT isnt_empty($$SELECT 1 FROM hpcacct.outbox WHERE figures ->> 'jobid' = 'q-carol'$$,
                  'she reads the message about her own job, though it names an account she is no member of');
SELECT is((SELECT array_agg(username ORDER BY username) FROM hpcacct.outbox_recipient), ARRAY['pv_carol'],
          'of the deliveries she sees her own only');
SELECT is((SELECT array_agg(username ORDER BY username) FROM hpcacct.contact), ARRAY['pv_carol'],
          'of the contacts her own only');
SELECT is_empty($$SELECT 1 FROM hpcacct.account_recipient WHERE email <> 'carol@home.example'$$,
                'account_recipient shows no other member''s address');
SELECT is((SELECT array_agg(username ORDER BY username) FROM hpcacct.membership WHERE account = 'pv_p1'),
          ARRAY['pv_alice', 'pv_bob', 'pv_carol'], 'she sees who the project''s members are');
SELECT is((SELECT array_agg(e ->> 'submitter' ORDER BY e ->> 'submitter')
           FROM jsonb_array_elements(hpcacct.account_month('pv_p1', '2024-04-01') -> 'charges' -> 'by_submitter') e),
          ARRAY['pv_bob', 'pv_carol'], 'and the project''s usage per user (the statement''s by_submitter)');
SELECT is_empty($$SELECT 1 FROM hpcacct.outbox WHERE account IS DISTINCT FROM 'pv_p1' AND figures ->> 'jobid' <> 'q-carol'$$,
                'no other account''s messages, and no message about another person''s job of no account she sees');
RESET SESSION AUTHORIZATION;

-- ---- bob, the job's owner ----
SET SESSION AUTHORIZATION pv_bob;
SELECT isnt_empty($$SELECT 1 FROM hpcacct.pending_job WHERE jobid = 'q-bob'$$, 'bob sees his job');
-- (held by hand, not by recheck_queued(): the account his jobs without -A go to today, his
-- personal one since pv_p1, with no allocation after June 2024, has expired)
SELECT is((SELECT body FROM hpcacct.outbox WHERE figures ->> 'jobid' = 'q-bob') ~ '\(account pv_bob, your default\)', true,
          'and reads its message, naming the account his jobs without an account go to today');
SELECT is((SELECT state FROM hpcacct.outbox_status WHERE subject ~ 'q-bob'), 'pending', 'and its delivery to him');
RESET SESSION AUTHORIZATION;

-- ---- alice, the project's administrator ----
SET SESSION AUTHORIZATION pv_alice;
SELECT is_empty($$SELECT 1 FROM hpcacct.outbox WHERE figures ->> 'jobid' = 'q-bob'$$,
                'the project''s administrator does not read bob''s message either (job messages go to the owner only)');
SELECT is_empty($$SELECT 1 FROM hpcacct.contact WHERE username <> 'pv_alice'$$, 'nor any member''s address');
RESET SESSION AUTHORIZATION;

-- ---- dave, of another project ----
SET SESSION AUTHORIZATION pv_dave;
SELECT is((SELECT array_agg(figures ->> 'jobid' ORDER BY figures ->> 'jobid') FROM hpcacct.outbox), ARRAY['q-carol', 'q-dave'],
          'dave reads the message about his own job (to an account that does not exist), and the one about the job '
          'carol queued on his project, which he sees in pending_job');
SELECT is((SELECT array_agg(jobid ORDER BY jobid) FROM hpcacct.pending_job), ARRAY['q-carol', 'q-dave'],
          'as pending_job shows him the jobs of his project and his own');
RESET SESSION AUTHORIZATION;

-- staff see every message
SELECT is((SELECT count(*) FROM outbox WHERE figures ->> 'cluster' = 'pvc'), 4::bigint, 'staff see every message');
-- the owner of a message about their job is recorded with it
SELECT is((SELECT array_agg(job_owner ORDER BY job_owner) FROM outbox WHERE figures ->> 'cluster' = 'pvc'),
          ARRAY['pv_alice', 'pv_bob', 'pv_carol', 'pv_dave'], 'each job message names the job''s owner');
SELECT is((SELECT array_agg(figures ->> 'jobid' ORDER BY figures ->> 'jobid') FROM outbox
           WHERE figures ->> 'cluster' = 'pvc' AND owner_only), ARRAY['q-bob'],
          'and the one whose job named no account is for its owner only');

-- ---- a re-rating: its jobs and amounts are every account's on the resource ----
-- (a partition only pv_p2 used: the log's totals would be that project's usage)
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('pvc', 'gpu', 'cpu=24', 'cpu=1', 1, 'NPL');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    ('pvc', 'g1', 'pv_p2', 'pv_dave', 'gpu', '2024-04-05 00:00+00', '2024-04-05 10:00+00', 'cpu=24', 'COMPLETED');
SELECT rerate((SELECT resource_id FROM resource WHERE cluster = 'pvc' AND partition = 'gpu'), 2, '2024-01-01');
CREATE ROLE pv_audit LOGIN IN ROLE hpcacct_auditor;
SET SESSION AUTHORIZATION pv_carol;
SELECT is_empty($$SELECT 1 FROM hpcacct.rerate_log$$,
                'carol does not read the re-ratings'' totals: 240 NPL of one job were pv_p2''s usage of the gpu partition');
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION pv_audit;
SELECT is((SELECT amount_before FROM hpcacct.rerate_log r JOIN hpcacct.resource o ON o.resource_id = r.old_resource_id
           WHERE o.cluster = 'pvc'), 240::numeric, 'the auditor reads them');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT count(*) FROM rerate_log r JOIN resource o ON o.resource_id = r.old_resource_id WHERE o.cluster = 'pvc'),
          1::bigint, 'and so do staff');

-- ---- a new quarter: pv_p1 has no allocation for it, so its members' default project is reset ----
CALL open_quarter('2024-07-01');
CALL open_quarter('2024-10-01');   -- the personal accounts expire (rows without a user)
SELECT is((SELECT array_agg(username ORDER BY username) FROM quarter_log WHERE action = 'default_reset' AND account = 'pv_p1'),
          ARRAY['pv_alice', 'pv_bob', 'pv_carol'], 'setup: the three members'' defaults are reset');
SET SESSION AUTHORIZATION pv_carol;
SELECT is((SELECT array_agg(username) FROM hpcacct.quarter_log WHERE action = 'default_reset'), ARRAY['pv_carol'],
          'carol reads her own default''s reset, not that pv_p1 was bob''s or alice''s default (hpc_user hides it)');
SELECT isnt_empty($$SELECT 1 FROM hpcacct.quarter_log WHERE account = 'pv_carol' AND action = 'expired'$$,
                  'and the rest of what the quarters did to her accounts (her personal account''s expiry)');
RESET SESSION AUTHORIZATION;

-- ---- outbox_status: whether another person had an address (a delivery) does not show ----
-- A portal user sees their own deliveries only, so a message they read shows no_recipient when
-- it has no delivery of theirs, whoever else received it.
DELETE FROM contact WHERE username = 'pv_alice';          -- alice has no address now; bob has one
-- (contact_follow runs at commit: here, now)
SET CONSTRAINTS hpcacct.contact_follow IMMEDIATE;
SELECT outbox_add('balance_low', 'pv-to-bob', 'pv_p1', 'pv: to bob', 'b', '{}', false, ARRAY['pv_bob']),
       outbox_add('balance_low', 'pv-to-alice', 'pv_p1', 'pv: to alice', 'b', '{}', false, '{}');
INSERT INTO pending_job (cluster, jobid, username, account) VALUES ('pvc', 'q-alice2', 'pv_alice', 'pv_p1');
UPDATE pending_job SET held = true, hold_reason = 'reason of q-alice2' WHERE jobid = 'q-alice2';
CREATE FUNCTION pg_temp.seen(which text) RETURNS TABLE (recipient_id bigint, username text, address text, state text,
                                                      attempts integer, last_error text, waiting_for bigint)
    LANGUAGE sql AS $$
    SELECT s.recipient_id, s.username, s.address, s.state, s.attempts, s.last_error, s.waiting_for
    FROM hpcacct.outbox_status s JOIN hpcacct.outbox o ON o.message_id = s.message_id
    WHERE o.decision_key = which OR o.figures ->> 'jobid' = which
    ORDER BY s.recipient_id $$;
SELECT is((SELECT array_agg(x.state) FROM (SELECT state FROM pg_temp.seen('pv-to-bob')
                                             UNION ALL SELECT state FROM pg_temp.seen('q-alice')) x),
          ARRAY['pending', 'withdrawn'],
          'setup: the message to the managers and bob has bob''s delivery (alice has no address), the one about '
          'alice''s first held job hers, withdrawn with her contact');
SELECT is((SELECT array_agg(x.state) FROM (SELECT state FROM pg_temp.seen('pv-to-alice')
                                             UNION ALL SELECT state FROM pg_temp.seen('q-alice2')) x),
          ARRAY['no_recipient', 'no_recipient'],
          'setup: the message to the managers alone (alice) has none, nor the one about her job held now');
SET SESSION AUTHORIZATION pv_carol;
SELECT results_eq($$SELECT * FROM pg_temp.seen('pv-to-bob')$$, $$SELECT * FROM pg_temp.seen('pv-to-alice')$$,
                  'carol reads both messages alike in outbox_status (no_recipient: none of hers), so not that alice has no address');
SELECT results_eq($$SELECT * FROM pg_temp.seen('q-alice')$$, $$SELECT * FROM pg_temp.seen('q-alice2')$$,
                  'nor which of alice''s held jobs was delivered to her (one before her address was removed, one after)');
RESET SESSION AUTHORIZATION;

SELECT * FROM finish();
ROLLBACK;
