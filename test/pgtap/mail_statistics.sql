-- A transaction that writes 1 000 deliveries leaves outbox_recipient analyzed, in one message
-- or many (notify_scan() writes one per account): the sender's next claim plans with
-- statistics that count them, not with none (a plan for one pending row compared 20 000 of
-- them pair by pair, 85 s a claim; test/bench/claim.sh). The ANALYZE runs with the owner's
-- rights, so an administrator's message does it too.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(10);
CALL setup_roles();

INSERT INTO account (name) VALUES ('st_a'), ('st_b');
SELECT add_user('st' || i, '2025-01-02') FROM generate_series(1, 1999) i;
INSERT INTO membership (account, username)
SELECT CASE WHEN i <= 999 THEN 'st_a' ELSE 'st_b' END, 'st' || i FROM generate_series(1, 1999) i
ON CONFLICT DO NOTHING;
INSERT INTO contact (username, email) SELECT 'st' || i, 'st' || i || '@example.org' FROM generate_series(1, 1999) i;
-- statistics of what the table holds now (none of this test's deliveries)
ANALYZE outbox_recipient;
CREATE TEMP TABLE before_any AS SELECT c.reltuples FROM pg_class c WHERE c.oid = 'outbox_recipient'::regclass;

SELECT isnt(outbox_add('account_expiry', 'st_a/1', 'st_a', 's', E'b\n', '{}', true), NULL, 'a message to 999 members');
SELECT is((SELECT count(*) FROM outbox_recipient r JOIN outbox m USING (message_id) WHERE m.decision_key = 'st_a/1'),
          999::bigint, 'it has 999 deliveries');
SELECT is((SELECT c.reltuples FROM pg_class c WHERE c.oid = 'outbox_recipient'::regclass), (SELECT reltuples FROM before_any),
          'below 1 000 deliveries, the statement leaves the statistics as they were');

SELECT isnt(outbox_add('account_expiry', 'st_a/2', NULL, 's', E'b\n', '{}', false, ARRAY['st1']), NULL,
            'in the same transaction, a message to one user: the 1 000th delivery');
SELECT is((SELECT c.reltuples FROM pg_class c WHERE c.oid = 'outbox_recipient'::regclass),
          (SELECT reltuples FROM before_any) + 1000::real,
          'the transaction''s deliveries are counted together: the table is analyzed after the 1 000th');

-- an administrator, who does not own the table (ANALYZE is the owner's)
SET LOCAL ROLE hpcacct_admin;
SELECT isnt(outbox_add('account_expiry', 'st_b/1', 'st_b', 's', E'b\n', '{}', true), NULL,
            'an administrator writes a message to 1 000 members');
RESET ROLE;
SELECT is((SELECT count(*) FROM outbox_recipient r JOIN outbox m USING (message_id) WHERE m.decision_key = 'st_b/1'),
          1000::bigint, 'it has 1 000 deliveries');
SELECT is((SELECT c.reltuples FROM pg_class c WHERE c.oid = 'outbox_recipient'::regclass),
          (SELECT reltuples FROM before_any) + 2000::real,
          'the table is analyzed after it: its row count has the 2 000 new deliveries');
SELECT ok((SELECT 'pending' = ANY (s.most_common_vals::text::text[]) FROM pg_stats s
           WHERE s.schemaname = 'hpcacct' AND s.tablename = 'outbox_recipient' AND s.attname = 'state'),
          'its statistics know deliveries are pending');

SELECT is(has_function_privilege('hpcacct_portal', 'hpcacct_internal.outbox_analyze()', 'EXECUTE'), false,
          'a portal user may not run the owner''s ANALYZE herself');

SELECT * FROM finish();
ROLLBACK;
