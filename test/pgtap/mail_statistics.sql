-- The deliveries' statistics count what is to be sent before the sender plans with them (a
-- plan for one pending row compared 20 000 of them pair by pair, 85 s a claim;
-- test/bench/claim.sh): a transaction that writes 1 000 deliveries, in one message or many
-- (notify_scan() writes one per account), leaves outbox_recipient analyzed; so does the sender's
-- claim when 1 000 rows changed since the last ANALYZE (many small writers). The ANALYZE runs
-- with the owner's rights, so an administrator's message and the sender's login do it too. And
-- whatever the statistics, outbox_status does not read outbox_recipient_due (its probe of a
-- mailbox took it for empty and read it whole for each delivery: over 20 s at 20 000 pending).
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(16);
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
CREATE FUNCTION pg_temp.plan_of(q text) RETURNS SETOF text LANGUAGE plpgsql AS $$
    BEGIN RETURN QUERY EXECUTE 'EXPLAIN ' || q; END $$;

SELECT isnt(outbox_add('account_expiry', 'st_a/1', 'st_a', 's', E'b\n', '{}', true), NULL, 'a message to 999 members');
SELECT is((SELECT count(*) FROM outbox_recipient r JOIN outbox m USING (message_id) WHERE m.decision_key = 'st_a/1'),
          999::bigint, 'it has 999 deliveries');
SELECT is((SELECT c.reltuples FROM pg_class c WHERE c.oid = 'outbox_recipient'::regclass), (SELECT reltuples FROM before_any),
          'below 1 000 deliveries, the statement leaves the statistics as they were');
-- (the statistics count none of them)
SELECT unalike((SELECT string_agg(p, E'\n') FROM pg_temp.plan_of('SELECT count(*) FROM hpcacct.outbox_status') p),
               '%outbox_recipient_due%', 'outbox_status cannot read outbox_recipient_due');

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

-- the count is the transaction's: a value a session set that is not such a count is none
SET LOCAL hpcacct.deliveries_not_analyzed = 'x';
SELECT lives_ok($$SELECT outbox_add('account_expiry', 'st_a/3', NULL, 's', E'b\n', '{}', false, ARRAY['st2'])$$,
                'a setting that is not a count does not stop a message');
SET LOCAL hpcacct.deliveries_not_analyzed = '9223372036854775807';
SELECT lives_ok($$SELECT outbox_add('account_expiry', 'st_a/4', NULL, 's', E'b\n', '{}', false, ARRAY['st2'])$$,
                'nor one out of range');

SELECT is(has_function_privilege('hpcacct_portal', 'hpcacct_internal.outbox_analyze(bigint)', 'EXECUTE'), false,
          'a portal user may not run the owner''s ANALYZE herself');


-- ---- many small writers, each in a transaction of its own (two sessions) ----
\set scratch hpcacct_mail_statistics
\set adm ms_adm
\ir include/scratch_db.psql
SELECT dblink_connect('ms_w', :'srv' || ' dbname=hpcacct_mail_statistics');
SELECT dblink_connect('ms_s', :'srv' || ' dbname=hpcacct_mail_statistics');
SELECT dblink_exec('ms_w', $s$
    SET client_min_messages = warning;
    CREATE EXTENSION hpcacct CASCADE;
    SET search_path = public, hpcacct;
    INSERT INTO account (name) VALUES ('sm_a'), ('sm_b');
    SELECT add_user('sm' || i, '2025-01-02') FROM generate_series(1, 1200) i;
    INSERT INTO membership (account, username)
    SELECT CASE WHEN i <= 600 THEN 'sm_a' ELSE 'sm_b' END, 'sm' || i FROM generate_series(1, 1200) i ON CONFLICT DO NOTHING;
    INSERT INTO contact (username, email) SELECT 'sm' || i, 'sm' || i || '@example.org' FROM generate_series(1, 1200) i;
    -- (autovacuum would analyze it too, at a moment of its own)
    ALTER TABLE hpcacct.outbox_recipient SET (autovacuum_enabled = false);
    ANALYZE hpcacct.outbox_recipient;
    RESET client_min_messages;
$s$);
-- two transactions of 600 deliveries each; their changes reach the activity counts at once
SELECT dblink_exec('ms_w', $w$DO $d$ BEGIN PERFORM hpcacct.outbox_add('account_expiry', 'sm_a/1', 'sm_a', 's', E'b\n', '{}', true);
                                       PERFORM pg_stat_force_next_flush(); END $d$$w$);
SELECT dblink_exec('ms_w', $w$DO $d$ BEGIN PERFORM hpcacct.outbox_add('account_expiry', 'sm_b/1', 'sm_b', 's', E'b\n', '{}', true);
                                       PERFORM pg_stat_force_next_flush(); END $d$$w$);
SELECT is((SELECT t.n FROM dblink('ms_s', $$SELECT reltuples FROM pg_class WHERE oid = 'hpcacct.outbox_recipient'::regclass$$)
           AS t(n real)), 0::real, 'two writers of 600 deliveries each leave the statistics as they were');
SELECT is((SELECT t.n FROM dblink('ms_s', $$SELECT count(*) FROM hpcacct.outbox_claim('sm', '1 minute', 1)$$) AS t(n bigint)),
          1::bigint, 'the sender claims');
SELECT is((SELECT t.n FROM dblink('ms_s', $$SELECT reltuples FROM pg_class WHERE oid = 'hpcacct.outbox_recipient'::regclass$$)
           AS t(n real)), 1200::real, 'having analyzed the table first: 1 200 rows changed since its last ANALYZE');
SELECT dblink_disconnect('ms_w'), dblink_disconnect('ms_s');
SELECT dblink_exec('ms_adm', 'DROP DATABASE hpcacct_mail_statistics');
SELECT dblink_disconnect('ms_adm');

SELECT * FROM finish();
ROLLBACK;
