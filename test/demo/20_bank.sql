-- make demo, part 2: HLRN's quarterly bank over the sample site's 2024 jobs.
\pset footer off
SET search_path = public, hpcacct;

-- Users and members: nhbkalli's personal account exists already (part 1); two more users.
INSERT INTO hpc_user (username) VALUES ('nhbkalli');
INSERT INTO membership (account, username, role) VALUES ('nhbkalli', 'nhbkalli', 'admin');
SELECT add_user('nhbmuell', '2024-01-02') AS added \gset
SELECT add_user('nhbschmi', '2024-01-02') AS added \gset
SELECT add_member('nip00001', 'nhbkalli', 'admin') AS added \gset
SELECT add_member('nip00001', 'nhbmuell', 'member', by_user => 'nhbkalli') AS added \gset
SELECT add_member('hbp00042', 'nhbmuell', 'admin') AS added \gset
SELECT set_default_project('nhbmuell', 'nip00001') AS set \gset

-- The Scientific Board's grants, per quarter (nip00001 runs out in Q4).
SELECT count(deposit(a, q, amount))
FROM (VALUES ('nhbkalli', date '2024-01-01', 2500), ('nhbkalli', '2024-04-01', 2500), ('nhbkalli', '2024-07-01', 2500),
             ('nip00001', '2024-01-01', 9000), ('nip00001', '2024-04-01', 9000), ('nip00001', '2024-07-01', 6000),
             ('hbp00042', '2024-01-01', 8000), ('hbp00042', '2024-04-01', 8000), ('hbp00042', '2024-07-01', 8000),
             ('hbp00042', '2024-10-01', 8000), ('hbp00042', '2025-01-01', 8000)) AS g(a, q, amount) \gset
-- Staff move 2 000 NPL of hbp00042's fourth quarter into nip00001's.
SELECT transfer('hbp00042', '2024-10-01', 'nip00001', '2024-10-01', 2000, 'bridge until the next call') AS moved \gset

\echo
\echo '== Quarterly balances (NPL; credits do not carry over; charges split across quarter ends) =='
SELECT account, account_kind, quarter, round(deposits::numeric, 1) AS deposits, round(charges::numeric, 1) AS charges,
       round(transfers::numeric, 1) AS transfers, round(balance::numeric, 1) AS balance, state
FROM quarter_balances
WHERE account IN ('nhbkalli', 'nhbmuell', 'nhbschmi', 'nip00001', 'hbp00042')
ORDER BY account, quarter;

\echo
\echo '== Submit checks on 2024-11-20 =='
SELECT u.username, coalesce(u.account, '(default)') AS requested, c.ok, c.account, c.reason, c.message
FROM (VALUES ('nhbmuell', NULL), ('nhbmuell', 'hbp00042'), ('nhbschmi', 'nip00001'), ('nhbkalli', 'nip00001'),
             ('nobody', NULL)) AS u(username, account)
CROSS JOIN LATERAL check_submit(u.username, u.account, '2024-11-20') c
ORDER BY u.username, u.account NULLS FIRST;
\echo
\echo '== Quarter start 2025-01-01: top-ups, expiries, default-project resets (open_quarter) =='
CALL open_quarter('2025-01-01');
CALL open_quarter('2025-01-01');   -- a re-run changes nothing
SELECT quarter, account, action, target_quarter, amount, username FROM quarter_log ORDER BY 1, 2, 3, 4;

\echo
\echo '== Submit checks on 2025-01-05, after the quarter start =='
SELECT u.username, coalesce(u.account, '(default)') AS requested, c.ok, c.account, c.reason, c.message
FROM (VALUES ('nhbmuell', NULL), ('nhbmuell', 'hbp00042'), ('nhbschmi', 'nip00001'), ('nhbkalli', 'nip00001'),
             ('nobody', NULL)) AS u(username, account)
CROSS JOIN LATERAL check_submit(u.username, u.account, '2025-01-05') c
ORDER BY u.username, u.account NULLS FIRST;
