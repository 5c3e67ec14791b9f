-- Notifications: the addresses a contact may hold (what SMTP can carry, an internationalized
-- domain or local part included) and outbox_add's errors for an unknown account.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(33);

SELECT add_user(u, '2024-01-05') FROM unnest(ARRAY['na_a', 'na_b']) AS u;
INSERT INTO account (name) VALUES ('na_acct');
SELECT add_member('na_acct', 'na_a', 'admin');
INSERT INTO contact (username, email) VALUES ('na_a', 'a@example.org'), ('na_b', 'b@example.org');

-- ---- addresses: accepted --------------------------------------------------------------
SELECT lives_ok(format($$UPDATE hpcacct.contact SET email = %L WHERE username = 'na_b'$$, e), 'accepted: ' || e)
FROM unnest(ARRAY['zoë.ünal@lab.example', 'u@université.example', 'o''neil+tag=x/y{z}~!#$%&*^_`|?-@x.example',
                  'root@localhost', 'a@xn--universit-e1a.example', repeat('l', 64) || '@' || repeat('d', 63) || '.example'])
     AS e;

-- ---- addresses: refused (23514), nothing written --------------------------------------
SELECT throws_ok(format($$UPDATE hpcacct.contact SET email = %L WHERE username = 'na_a'$$, e), '23514', NULL,
                 'refused: ' || why)
FROM (VALUES ('a..b@example.org', 'two dots in a row'), ('.a@example.org', 'a leading dot'),
             ('a.@example.org', 'a dot before @'), ('[a]@example.org', 'brackets in the local part'),
             ('a@@example.org', 'two @'), ('a@example..org', 'an empty label'),
             ('a@-example.org', 'a label starting with a hyphen'), ('a@example-.org', 'a label ending with a hyphen'),
             ('a@example.org.', 'a final dot'), ('a@exa_mple.org', 'an underscore in the domain'),
             ('a@[192.0.2.1]', 'an address literal'), ('@example.org', 'no local part'), ('a@', 'no domain'),
             (repeat('l', 65) || '@example.org', 'a local part of 65 octets'),
             (repeat('é', 33) || '@example.org', 'a local part of 66 octets in 33 characters'),
             ('a@' || repeat('d', 64) || '.example', 'a label of 64 characters'),
             ('a@ex ample.org', 'a space'), (E'a@example.org\u00a0', 'a no-break space'),
             ('a@exa,mple.org', 'a comma')) AS t(e, why);
SELECT is((SELECT email FROM contact WHERE username = 'na_a'), 'a@example.org', 'refused addresses wrote nothing');

-- ---- outbox_add: an unknown account is 42704, as in the other functions ----------------
SELECT throws_ok($$SELECT hpcacct.outbox_add('balance_low', 'na/1', '', 's', 'b', '{}')$$, '42704', NULL,
                 'outbox_add with an empty account');
SELECT throws_ok($$SELECT hpcacct.outbox_add('balance_low', 'na/2', 'na_nosuch', 's', 'b', '{}')$$, '42704',
                 'unknown account "na_nosuch"', 'outbox_add with an unknown account names it');
SELECT throws_ok($$SELECT hpcacct.outbox_add_all('[{"topic": "balance_low", "decision_key": "na/3", "account": "na_acct",
                                                    "subject": "s", "body": "b"},
                                                   {"topic": "balance_low", "decision_key": "na/4", "account": "na_nosuch",
                                                    "subject": "s", "body": "b"}]')$$, '42704', NULL,
                 'outbox_add_all with one unknown account among good ones');
-- ---- figures are an object (a portal reads figures ->> 'state'): anything else is 22023 --------
SELECT throws_ok($$SELECT hpcacct.outbox_add('balance_low', 'na/5', 'na_acct', 's', 'b', '[1, 2]')$$, '22023', NULL,
                 'outbox_add with figures that are an array');
SELECT throws_ok($$SELECT hpcacct.outbox_add_all('[{"topic": "balance_low", "decision_key": "na/6", "subject": "s",
                                                    "body": "b", "figures": "x"}]')$$, '22023', NULL,
                 'outbox_add_all with figures that are a string');
SELECT lives_ok($$SELECT hpcacct.outbox_add_all('[{"topic": "balance_low", "decision_key": "na/7", "subject": "s",
                                                   "body": "b", "figures": null}]')$$,
                'figures null are {}');
SELECT is((SELECT count(*) FROM outbox WHERE decision_key LIKE 'na/%' AND decision_key <> 'na/7'), 0::bigint,
          'and nothing is written');

SELECT * FROM finish();
ROLLBACK;
