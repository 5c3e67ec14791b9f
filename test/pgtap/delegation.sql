-- Management without administrator rights: a read-only auditor (hpcacct_auditor) sees every
-- account's rows in every table and view and can change nothing; a project administrator
-- with only the portal role (hpcacct_portal) adds and removes members and further
-- administrators of their own projects, and is refused (42501) for any other.
BEGIN;
SET search_path = public, hpcacct;
SET client_min_messages = warning;

CREATE TEMP TABLE relations_with_account AS
    SELECT c.oid::regclass AS relation
    FROM pg_class c
    WHERE c.relnamespace = 'hpcacct'::regnamespace AND c.relkind IN ('r', 'v')
      AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'account'
                  AND NOT a.attisdropped)
    ORDER BY 1;
GRANT SELECT ON relations_with_account TO PUBLIC;
SELECT plan((SELECT count(*)::int FROM relations_with_account) + 31);

CALL setup_roles();
CREATE ROLE dg_audit LOGIN IN ROLE hpcacct_auditor;
CREATE ROLE dg_pa LOGIN IN ROLE hpcacct_portal;      -- administers dg_a
CREATE ROLE dg_member LOGIN IN ROLE hpcacct_portal;  -- a plain member of dg_a
CREATE ROLE dg_other LOGIN IN ROLE hpcacct_portal;   -- administers dg_b

INSERT INTO setting VALUES ('timezone', 'UTC') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('dgc', 'cpu', 'cpu=16', 'cpu=1', 1, 'NPL');
INSERT INTO account (name) VALUES ('dg_a'), ('dg_b');
SELECT add_user('dg_pa', '2024-01-05'), add_user('dg_member', '2024-01-05'), add_user('dg_other', '2024-01-05'),
       add_user('dg_new', '2024-01-05');
SELECT add_member('dg_a', 'dg_pa', 'admin'), add_member('dg_a', 'dg_member'), add_member('dg_b', 'dg_other', 'admin');
SELECT deposit('dg_a', '2024-01-01', 1000), deposit('dg_b', '2024-01-01', 1000);
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('dg_a', 'grant', 100, 'NPL', 'dgc', '2024-01-01', '2024-12-31'),
       ('dg_b', 'grant', 300, 'NPL', 'dgc', '2024-01-01', '2024-12-31');
INSERT INTO job VALUES
    ('dgc', 'a1', 'dg_a', 'dg_pa', 'cpu', NULL, '2024-02-01 00:00+00', '2024-02-01 05:00+00', 'cpu=4', 'COMPLETED'),
    ('dgc', 'b1', 'dg_b', 'dg_other', 'cpu', NULL, '2024-02-01 00:00+00', '2024-02-01 05:00+00', 'cpu=8', 'COMPLETED');
SELECT add_quota_period('dg_a', '2024-01-01', '2024-06-30', 100, NULL, 'NPL'),
       add_quota_period('dg_b', '2024-01-01', '2024-06-30', 100, NULL, 'NPL');

-- What the extension owner sees in every relation with an account column.
CREATE TEMP TABLE seen_by_owner AS SELECT relation, 0::bigint AS n FROM relations_with_account;
CREATE FUNCTION pg_temp.rows_of(relation regclass) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    EXECUTE format('SELECT count(*) FROM %s', relation) INTO n;
    RETURN n;
END $$;
UPDATE seen_by_owner SET n = pg_temp.rows_of(relation);
GRANT SELECT ON seen_by_owner TO PUBLIC;
CREATE TEMP TABLE fairshare_accounts AS
    SELECT array_agg(DISTINCT account ORDER BY account) AS accounts FROM fairshare_all('2024-03-01 00:00+00');
GRANT SELECT ON fairshare_accounts TO PUBLIC;

-- ---- the auditor ----
SET SESSION AUTHORIZATION dg_audit;
SELECT is(pg_temp.rows_of(o.relation), o.n, format('the auditor sees every account''s rows of %s', o.relation))
FROM seen_by_owner o ORDER BY o.relation;
SELECT is((SELECT array_agg(DISTINCT account ORDER BY account) FROM hpcacct.fairshare_all('2024-03-01 00:00+00')),
          (SELECT accounts FROM fairshare_accounts), 'and the fair share of every account (fairshare_all), as the owner does');
SELECT is(hpcacct.balance('dg_b', '2024-02-15'), 960.000000, 'and any account''s balance');
SELECT throws_ok($$INSERT INTO hpcacct.account (name) VALUES ('dg_x')$$, '42501', NULL, 'the auditor cannot add an account');
SELECT throws_ok($$UPDATE hpcacct.account SET description = 'x' WHERE name = 'dg_a'$$, '42501', NULL, 'nor change one');
SELECT throws_ok($$DELETE FROM hpcacct.membership$$, '42501', NULL, 'nor delete members');
SELECT throws_ok($$INSERT INTO hpcacct.ledger (account, kind, amount, unit, valid_from, valid_until)
                   VALUES ('dg_a', 'deposit', 1, 'NPL', '2024-01-01', '2024-03-31')$$, '42501', NULL, 'nor write the ledger');
SELECT throws_ok($$INSERT INTO hpcacct.job VALUES ('dgc', 'x', 'dg_a', 'dg_pa', 'cpu', NULL,
                   '2024-02-01', '2024-02-02', 'cpu=1', 'COMPLETED')$$, '42501', NULL, 'nor load jobs');
SELECT throws_ok($$UPDATE hpcacct.resource SET description = 'x'$$, '42501', NULL, 'nor edit resources');
SELECT throws_ok($$SELECT hpcacct.deposit('dg_a', '2024-04-01', 10)$$, '42501', NULL, 'nor deposit');
SELECT throws_ok($$SELECT hpcacct.add_member('dg_a', 'dg_new')$$, '42501', NULL, 'nor change members');
SELECT throws_ok($$CALL hpcacct.regulate('2024-04-15')$$, '42501', NULL, 'nor run regulate()');
SELECT throws_ok($$SELECT hpcacct.compact_rollup()$$, '42501', NULL, 'nor compact the rollup');
RESET SESSION AUTHORIZATION;

-- ---- a project administrator, from the portal ----
SET SESSION AUTHORIZATION dg_pa;
SELECT lives_ok($$SELECT hpcacct.add_member('dg_a', 'dg_new')$$, 'a project administrator adds a member to her project');
SELECT lives_ok($$SELECT hpcacct.add_member('dg_a', 'dg_member', 'admin')$$, 'and makes a member a further administrator');
SELECT lives_ok($$SELECT hpcacct.remove_member('dg_a', 'dg_new', 'dg_pa')$$,
                'and removes a member (naming herself as by_user is allowed)');
SELECT throws_ok($$SELECT hpcacct.add_member('dg_b', 'dg_new')$$, '42501', NULL,
                 'she cannot add members to a project she does not administer');
SELECT throws_ok($$SELECT hpcacct.remove_member('dg_b', 'dg_other')$$, '42501', NULL, 'nor remove them');
SELECT throws_ok($$SELECT hpcacct.add_member('dg_b', 'dg_new', 'member', 'dg_other')$$, '42501', NULL,
                 'nor act for another project''s administrator through by_user');
SELECT throws_ok($$SELECT hpcacct.add_member('nosuch', 'dg_new')$$, '42501', NULL,
                 'an unknown account is refused the same way (nothing learnt about it)');
SELECT throws_ok($$SELECT hpcacct.deposit('dg_a', '2024-04-01', 10)$$, '42501', NULL, 'she still cannot deposit');
-- bad input from a portal is named as such (22004, 22023), as it is for staff
SELECT throws_ok($$SELECT hpcacct.add_member(NULL, 'dg_new')$$, '22004', 'add_member: account must not be NULL',
                 'a NULL account is 22004, not "not an administrator of account <NULL>"');
SELECT throws_ok($$SELECT hpcacct.remove_member(NULL, 'dg_new')$$, '22004', NULL, 'remove_member() too');
SELECT throws_ok($$SELECT hpcacct.add_member('dg_a', 'dg_new', 'boss')$$, '22023',
                 'add_member: role must be member or admin, not "boss"', 'an unknown role is 22023 with the two it may be');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT array_agg(username || ':' || role ORDER BY username) FROM membership WHERE account = 'dg_a'),
          ARRAY['dg_member:admin', 'dg_pa:admin'], 'dg_a''s members are what she made them');
SELECT is((SELECT array_agg(username ORDER BY username) FROM membership WHERE account = 'dg_b'), ARRAY['dg_other'],
          'dg_b''s are unchanged');

-- ---- a plain member cannot manage members; staff still can, for any project ----
SET SESSION AUTHORIZATION dg_other;
SELECT throws_ok($$SELECT hpcacct.add_member('dg_a', 'dg_other')$$, '42501', NULL,
                 'a user who does not administer dg_a cannot add herself to it');
SELECT throws_ok($$SELECT hpcacct.add_member('dg_b', 'dg_other', 'member')$$, 'HA003', NULL,
                 'dg_b''s only administrator cannot make herself a plain member (the project would have none)');
RESET SESSION AUTHORIZATION;
SELECT lives_ok($$SELECT hpcacct.remove_member('dg_a', 'dg_pa')$$, 'dg_member, now an administrator too, lets dg_pa go (staff)');
SET SESSION AUTHORIZATION dg_pa;
SELECT throws_ok($$SELECT hpcacct.add_member('dg_a', 'dg_new')$$, '42501', NULL,
                 'once removed, dg_pa no longer manages dg_a''s members');
RESET SESSION AUTHORIZATION;
SELECT lives_ok($$SELECT hpcacct.add_member('dg_b', 'dg_new', 'member', 'dg_other')$$,
                'staff act for a project administrator through by_user');

SELECT is(ARRAY[hpcacct_internal.administers('dg_member', 'dg_a'), hpcacct_internal.administers('dg_pa', 'dg_a'),
                hpcacct_internal.administers('dg_new', 'dg_b'), hpcacct_internal.administers('dg_other', 'dg_a'),
                hpcacct_internal.administers('dg_other', 'dg_b')],
          ARRAY[true, false, false, false, true],
          'administers(): an admin membership of that account (dg_member promoted, dg_pa removed), not a member''s');

SELECT * FROM finish();
ROLLBACK;
