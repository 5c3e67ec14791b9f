-- The HLRN bank over eight quarters (2025-Q1 to 2026-Q4), as a site lives it: projects whose
-- allocations stop and resume, personal accounts topped up, expired and deleted, transfers,
-- refunds, a member who leaves, jobs across a quarter's start and jobs loaded late. At every
-- step: each balance is the ledger's deposits - charges + transfers + refunds of its quarter,
-- in balance(), quarter_balances, bank_entry and my_accounts alike; states as the README says.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(74);

INSERT INTO setting VALUES ('timezone', 'UTC');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit)
VALUES ('c', 'p', 'cpu=16', 'cpu=1', 1, 'NPL');
INSERT INTO balance_threshold VALUES (0, 'negative');

-- Every account's quarter q, from the raw ledger, against what each function reports: a row per
-- disagreement (none expected).
CREATE FUNCTION pg_temp.disagreements(q date) RETURNS SETOF text LANGUAGE sql AS $$
    WITH raw AS (
        SELECT a.name AS account,
               coalesce((SELECT sum(l.amount) FROM hpcacct.ledger l WHERE l.account = a.name AND l.kind = 'deposit'
                           AND hpcacct.quarter_start(l.valid_from) = q), 0) AS deposits,
               coalesce((SELECT sum(l.amount) FROM hpcacct.ledger l WHERE l.account = a.name AND l.kind = 'transfer'
                           AND hpcacct.quarter_start(l.valid_from) = q), 0) AS transfers,
               coalesce((SELECT sum(l.amount) FROM hpcacct.ledger l WHERE l.account = a.name AND l.kind = 'refund'
                           AND hpcacct.quarter_start(l.valid_from) = q), 0) AS refunds,
               coalesce((SELECT round(sum(e.amount), 6) FROM hpcacct.bank_entry e WHERE e.account = a.name
                           AND e.kind = 'charge' AND e.quarter = q), 0) AS charges
        FROM hpcacct.account a
    )
    SELECT format('%s %s: balance() %s, ledger %s', r.account, q, hpcacct.balance(r.account, q),
                  r.deposits + r.transfers + r.refunds - r.charges)
    FROM raw r WHERE hpcacct.balance(r.account, q) <> r.deposits + r.transfers + r.refunds - r.charges
    UNION ALL
    SELECT format('%s %s: quarter_balances %s/%s/%s/%s/%s, ledger %s/%s/%s/%s', r.account, q,
                  b.deposits, b.charges, b.transfers, b.refunds, b.balance, r.deposits, r.charges, r.transfers, r.refunds)
    FROM raw r JOIN hpcacct.quarter_balances b ON b.account = r.account AND b.quarter = q
    WHERE (b.deposits, b.charges, b.transfers, b.refunds, b.balance)
          IS DISTINCT FROM (r.deposits, r.charges, r.transfers, r.refunds, r.deposits + r.transfers + r.refunds - r.charges)
       OR b.state IS DISTINCT FROM hpcacct.account_state(r.account, q)
    UNION ALL
    SELECT format('%s %s: no row in quarter_balances', r.account, q)
    FROM raw r
    WHERE (r.deposits, r.transfers, r.refunds, r.charges) <> (0, 0, 0, 0)
      AND NOT EXISTS (SELECT FROM hpcacct.quarter_balances b WHERE b.account = r.account AND b.quarter = q)
    UNION ALL
    -- my_accounts at the quarter's last day: the balance of each bank account it shows
    SELECT format('%s %s: my_accounts %s, balance() %s', x ->> 'account', q, x -> 'bank' ->> 'balance',
                  hpcacct.balance(x ->> 'account', q))
    FROM jsonb_array_elements(hpcacct.my_accounts((q + interval '3 months')::date - 1) -> 'accounts') x
    WHERE x ? 'bank' AND ((x -> 'bank' ->> 'balance')::numeric <> hpcacct.balance(x ->> 'account', q)
                          OR x -> 'bank' ->> 'state' <> hpcacct.account_state(x ->> 'account', q));
$$;

-- a job of `hours` core-hours (1 NPL each) of a user on an account
CREATE FUNCTION pg_temp.job(id text, acct text, usr text, s timestamptz, hours numeric) RETURNS void LANGUAGE sql AS $$
    INSERT INTO hpcacct.job VALUES ('c', id, acct, usr, 'p', NULL, s, s + hours * interval '1 hour', 'cpu=1', 'COMPLETED');
$$;

-- (findings, each in a savepoint of its own: the quarters are opened again by the life below)

-- A personal account with an allocation for a later quarter only (staff booked it ahead) is
-- inactive, as account_state() says, not expired: not deleted at the second start, its
-- allocation lost with it.
SAVEPOINT ahead;
SELECT add_user('erin', '2025-01-06');
SELECT deposit('erin', '2026-04-01', 1000, 'for her thesis runs');
CALL open_quarter('2025-01-06');
CALL open_quarter('2025-04-01');
CALL open_quarter('2025-07-01');
CALL open_quarter('2025-10-01');
CALL open_quarter('2026-01-01');
SELECT is(account_state('erin', '2026-01-01'), 'inactive', 'erin, with an allocation for Q2 2026, is inactive in Q1');
SELECT is((SELECT array_agg(action || ':' || quarter ORDER BY quarter) FROM quarter_log
           WHERE account = 'erin' AND action IN ('expired', 'deleted')), NULL,
          'quarter_log neither expires nor deletes an inactive personal account');
CALL open_quarter('2026-04-01');
SELECT is(account_state('erin', '2026-04-01'), 'active', 'her allocation makes her account active in Q2 2026');
ROLLBACK TO SAVEPOINT ahead;

-- No warning that a personal account expires when its owner is a member of a project with an
-- allocation for the next quarter: the quarter's start tops it up.
SAVEPOINT warned;
SELECT add_user('frank', '2025-01-06');
INSERT INTO account (name) VALUES ('pf');
SELECT deposit('pf', '2025-07-01', 1000);
SELECT deposit('pf', '2025-10-01', 1000);
SELECT add_member('pf', 'frank');
INSERT INTO setting VALUES ('expiry_warning_days', '20');
SELECT notify_scan('2025-09-20');
SELECT is((SELECT count(*) FROM outbox WHERE topic = 'account_expiry' AND account = 'frank'), 0::bigint,
          'frank, a member of pf (allocated for Q4), is not told his account expires');
CALL open_quarter('2025-10-01');
SELECT is(account_state('frank', '2025-10-01'), 'active', 'it does not: the start of Q4 tops it up');
ROLLBACK TO SAVEPOINT warned;

-- ==== 2025-Q1: users, projects, members
SELECT add_user(u, '2025-01-06') FROM unnest(ARRAY['alice', 'bob', 'carol', 'dave']) u;
INSERT INTO account (name) VALUES ('p1'), ('p2');
SELECT add_member('p1', 'alice', 'admin');
SELECT add_member('p1', 'bob');
SELECT add_member('p2', 'carol', 'admin');
SELECT add_member('p2', 'bob');
SELECT deposit('p1', '2025-01-01', 10000);
SELECT deposit('p1', '2025-04-01', 10000);
SELECT deposit('p2', '2025-01-01', 500);
SELECT set_default_project('bob', 'p2');
CALL open_quarter('2025-01-06');
SELECT is((SELECT count(*) FROM quarter_log WHERE action = 'top_up'), 0::bigint,
          'Q1 opened after add_user: nothing topped up twice');
SELECT is((SELECT sum(amount) FROM ledger WHERE account = 'alice' AND kind = 'deposit'), 7500.000000,
          'alice holds 2 500 for Q1, Q2 and Q3');
SELECT pg_temp.job('j1', 'p1', 'alice', '2025-02-01 10:00+00', 100);
SELECT pg_temp.job('j2', 'p2', 'carol', '2025-02-01 10:00+00', 600);   -- p2 overdrawn
-- across the quarter's start: 4 h in Q1, 4 h in Q2
SELECT pg_temp.job('j3', 'p1', 'bob', '2025-03-31 20:00+00', 8);
SELECT is(balance('p1', '2025-02-15'), 10000 - 100 - 4.000000, 'p1 Q1: 10 000 less 100 and the first half of j3');
SELECT is(balance('p2', '2025-02-15'), -100.000000, 'p2 Q1 overdrawn');
SELECT is((check_submit('carol', 'p2', '2025-03-01')).reason, 'negative_balance', 'p2 refused while negative');
INSERT INTO pending_job (cluster, jobid, username, account) VALUES ('c', 'q1', 'carol', 'p2'), ('c', 'q2', 'bob', NULL),
                                                                   ('c', 'q3', 'dave', NULL);
SELECT is((SELECT array_agg(jobid || ':' || coalesce(reason, 'released') ORDER BY jobid) FROM recheck_queued('2025-03-01')),
          ARRAY['q1:negative_balance', 'q2:negative_balance'], 'recheck holds the jobs on p2 (bob''s default)');
SELECT is(notify_scan('2025-03-01'), 1, 'one message: p2 negative');
SELECT is(notify_scan('2025-03-02'), 0, 'the scan again: no message twice');
SELECT refund('p2', '2025-03-01', 150, 'failed node');
SELECT is(balance('p2', '2025-03-05'), 50.000000, 'the refund puts p2 back above 0');
SELECT is((SELECT array_agg(jobid || ':' || coalesce(reason, 'released') ORDER BY jobid) FROM recheck_queued('2025-03-05')),
          ARRAY['q1:released', 'q2:released'], 'and releases its jobs');
SELECT is(array_agg(d), NULL, 'Q1: every balance agrees with the ledger') FROM pg_temp.disagreements('2025-01-01') d;

-- ==== 2025-Q2: p2 stops (no allocation), a transfer between quarters
CALL open_quarter('2025-04-01');
SELECT is((SELECT array_agg(account || ':' || target_quarter ORDER BY account) FROM quarter_log
           WHERE quarter = '2025-04-01' AND action = 'top_up'),
          ARRAY['alice:2025-10-01', 'bob:2025-10-01'], 'Q2: members of active p1 topped up for Q4 only');
SELECT is((SELECT array_agg(account || ':' || username) FROM quarter_log WHERE quarter = '2025-04-01' AND action = 'default_reset'),
          ARRAY['p2:bob'], 'bob''s default p2 expired: reset');
SELECT is(account_state('p2', '2025-04-01'), 'expired', 'p2 expired in Q2');
SELECT is(account_state('carol', '2025-04-01'), 'active', 'carol''s personal account still holds Q2');
CALL open_quarter('2025-04-02');
SELECT is((SELECT count(*) FROM quarter_log WHERE quarter = '2025-04-01'), 3::bigint, 'a second run changes nothing');
SELECT transfer('p1', '2025-04-01', 'p1', '2025-07-01', 3000, 'to Q3');
SELECT is(balance('p1', '2025-05-01'), 10000 - 4 - 3000.000000, 'p1 Q2: 10 000 less j3''s second half less the transfer');
SELECT is((check_submit('carol', 'p2', '2025-05-01')).reason, 'account_expired', 'p2 expired: refused');
SELECT is((check_submit('bob', NULL, '2025-05-01')).account, 'bob', 'bob''s jobs go to his personal account');
SELECT pg_temp.job('j4', 'dave', 'dave', '2025-05-10 00:00+00', 200);
SELECT is(array_agg(d), NULL, 'Q2: every balance agrees with the ledger') FROM pg_temp.disagreements('2025-04-01') d;

-- ==== 2025-Q3: bob leaves p2; p1 lives on its transfer
CALL open_quarter('2025-07-01');
SELECT is(account_state('p1', '2025-07-01'), 'active', 'p1 active in Q3 on the transfer alone');
SELECT is((SELECT array_agg(account ORDER BY account) FROM quarter_log WHERE quarter = '2025-07-01' AND action = 'top_up'),
          ARRAY['alice', 'bob'], 'Q3: alice and bob topped up for Q5');
SELECT remove_member('p2', 'bob', 'carol');
SELECT transfer('alice', '2025-07-01', 'p1', '2025-07-01', 1000, 'alice gives to p1');
SELECT is(balance('alice', '2025-07-15'), 1500.000000, 'alice Q3 after giving 1 000');
SELECT is(balance('p1', '2025-07-15'), 4000.000000, 'p1 Q3 3 000 + 1 000');
-- p2 resumes in 2026-Q1: inactive until then
SELECT deposit('p2', '2026-01-01', 2000);
SELECT is(account_state('p2', '2025-08-01'), 'inactive', 'p2 inactive: an allocation for a later quarter');
SELECT is((check_submit('carol', 'p2', '2025-08-01')).reason, 'account_inactive', 'its jobs refused as inactive');
INSERT INTO setting VALUES ('expiry_warning_days', '20');
SELECT is(notify_scan('2025-09-20'), 3, 'expiry warnings: no allocation from Q4');
SELECT is((SELECT array_agg(account ORDER BY account) FROM outbox WHERE topic = 'account_expiry'),
          ARRAY['carol', 'dave', 'p1'], 'for carol, dave and p1 (its transfer ends with Q3)');
SELECT is(notify_scan('2025-09-25'), 0, 'and not again');
SELECT is(array_agg(d), NULL, 'Q3: every balance agrees with the ledger') FROM pg_temp.disagreements('2025-07-01') d;

-- ==== 2025-Q4: carol and dave expire
CALL open_quarter('2025-10-01');
SELECT is((SELECT array_agg(account ORDER BY account) FROM quarter_log WHERE quarter = '2025-10-01' AND action = 'expired'),
          ARRAY['carol', 'dave'], 'Q4: carol and dave expired');
SELECT is((check_submit('dave', NULL, '2025-10-02')).reason, 'account_expired', 'dave refused');
SELECT is((SELECT array_agg(jobid || ':' || coalesce(reason, 'released') ORDER BY jobid) FROM recheck_queued('2025-10-02')),
          ARRAY['q1:account_inactive', 'q3:account_expired'], 'carol''s and dave''s queued jobs held');
-- a late job: dave's, run in Q3, loaded after his account expired
SELECT pg_temp.job('j5', 'dave', 'dave', '2025-09-20 00:00+00', 50);
SELECT is(balance('dave', '2025-09-01'), 2500 - 50.000000, 'dave''s late Q3 job charged to dave in Q3');
SELECT is(array_agg(d), NULL, 'Q4: every balance agrees with the ledger') FROM pg_temp.disagreements('2025-10-01') d;

-- ==== 2026-Q1: p2 resumes; carol, member of an active project again, is saved; dave deleted
CALL open_quarter('2026-01-01');
SELECT is(account_state('p2', '2026-01-01'), 'active', 'p2 active again');
SELECT is((SELECT array_agg(account || ':' || target_quarter ORDER BY account, target_quarter) FROM quarter_log
           WHERE quarter = '2026-01-01' AND action = 'top_up' AND account = 'carol'),
          ARRAY['carol:2026-01-01', 'carol:2026-04-01', 'carol:2026-07-01'], 'carol topped up for Q5 to Q7');
SELECT is((SELECT array_agg(account ORDER BY account) FROM quarter_log WHERE quarter = '2026-01-01' AND action = 'deleted'),
          ARRAY['dave'], 'dave, expired at two starts in a row, deleted; carol not');
SELECT is(account_state('dave', '2026-01-01'), 'deleted', 'dave deleted');
SELECT is(account_state('dave', '2025-12-31'), 'expired', 'dave was expired the day before');
SELECT is((check_submit('dave', NULL, '2026-01-02')).reason, 'account_deleted', 'dave''s jobs refused as deleted');
SELECT is((SELECT array_agg(jobid || ':' || coalesce(reason, 'released') ORDER BY jobid) FROM recheck_queued('2026-01-02')),
          ARRAY['q1:released'], 'carol''s job released');
SELECT is((SELECT hold_reason FROM pending_job WHERE jobid = 'q3'),
          'account dave has been deleted and cannot be used again', 'dave''s, held still, has the new reason');
-- late jobs after deletion: dave's, run in Q4 2025; bob's on p2 run in Q2 while a member
SELECT lives_ok($$SELECT pg_temp.job('j6', 'dave', 'dave', '2025-12-30 12:00+00', 30)$$,
                'a deleted account''s late job is loaded');
SELECT is(balance('dave', '2025-12-01'), -30.000000, 'and charged to dave in Q4 2025');
-- his statement of December 2025 shows the quarter as the bank has it: no allocation, -30, expired
SELECT is((account_month('dave', '2025-12-01') -> 'bank') - 'days',
          jsonb_build_object('quarter', '2025-10-01', 'unit', 'NPL', 'allocation', 0, 'balance', balance('dave', '2025-12-01'),
                             'state', 'expired'),
          'the statement''s HLRN section of a charged quarter without allocation: allocation 0, balance -30, expired');
SELECT ok(statement_html('dave', '2025-12-01') ~ 'HLRN bank.*-30\.00 NPL.*expired', 'and the HTML page shows it');
SELECT lives_ok($$SELECT pg_temp.job('j7', 'p2', 'bob', '2025-06-10 00:00+00', 10)$$,
                'a late job of a member who left since is loaded');
SELECT is(balance('p2', '2025-06-01'), -10.000000, 'and charged to p2 in Q2 2025, when bob was a member');
-- with require_membership on, membership is checked at loading: the late job of a member who
-- left is refused (HA005, as the README says), and charged once the membership is back for it
SAVEPOINT strict;
INSERT INTO setting VALUES ('require_membership', 'on');
SELECT throws_ok($$SELECT pg_temp.job('j8', 'p2', 'bob', '2025-06-12 00:00+00', 5)$$, 'HA005', NULL,
                 'require_membership: the late job of a member who left is refused at loading');
SELECT add_member('p2', 'bob');
SELECT pg_temp.job('j8', 'p2', 'bob', '2025-06-12 00:00+00', 5);
SELECT remove_member('p2', 'bob');
SELECT is(balance('p2', '2025-06-01'), -15.000000, 'the membership back for the load: charged to p2 in Q2 2025');
-- through the loader the line is not lost and stops nothing: quarantined with HA005, retried at
-- every load, and charged once the membership is back
INSERT INTO sacct_staging (lineno, line, cluster, jobid, account, "user", partition, submit, start, "end", alloctres, state)
VALUES (1, 'c|j9|p2|bob|p|...', 'c', 'j9', 'p2', 'bob', 'p', '2025-06-14T00:00:00+0000', '2025-06-14T00:00:00+0000',
        '2025-06-14T02:00:00+0000', 'cpu=1', 'COMPLETED'),
       (2, 'c|j10|p2|carol|p|...', 'c', 'j10', 'p2', 'carol', 'p', '2025-06-14T00:00:00+0000', '2025-06-14T00:00:00+0000',
        '2025-06-14T01:00:00+0000', 'cpu=1', 'COMPLETED');
SELECT is((SELECT (inserted, quarantined)::text FROM load_sacct()), '(1,1)',
          'the loader charges the member''s line and quarantines the late one of the member who left');
SELECT is((SELECT sqlstate FROM sacct_quarantine WHERE jobid = 'j9' AND resolved_at IS NULL), 'HA005',
          'with the membership''s SQLSTATE');
SELECT add_member('p2', 'bob');
SELECT is((SELECT (retried, resolved)::text FROM load_sacct()), '(1,1)', 'the next load, the membership back, retries it');
SELECT remove_member('p2', 'bob');
SELECT is(balance('p2', '2025-06-01'), -18.000000, 'and charges it to p2 in Q2 2025 (2 h), beside the member''s (1 h)');
ROLLBACK TO SAVEPOINT strict;
SELECT is(array_agg(d), NULL, 'Q4 2025 after the late jobs: every balance agrees with the ledger')
FROM pg_temp.disagreements('2025-10-01') d;
SELECT is(array_agg(d), NULL, 'Q1 2026: every balance agrees with the ledger') FROM pg_temp.disagreements('2026-01-01') d;

-- ==== 2026-Q2: p1 without allocation since Q3 2025, p2 stops again
CALL open_quarter('2026-04-01');
SELECT is(account_state('p1', '2026-04-01'), 'expired', 'p1 expired');
SELECT is((SELECT count(*) FROM quarter_log WHERE quarter = '2026-04-01' AND action = 'top_up'), 0::bigint,
          'Q2 2026: no project active, nobody topped up');
SELECT is((SELECT array_agg(account ORDER BY account) FROM quarter_log WHERE quarter = '2026-04-01' AND action = 'expired'),
          ARRAY['alice', 'bob'], 'alice and bob (topped up last for Q1 2026) expire');
SELECT is(array_agg(d), NULL, 'Q2 2026: every balance agrees with the ledger') FROM pg_temp.disagreements('2026-04-01') d;

-- ==== 2026-Q3, 2026-Q4
CALL open_quarter('2026-07-01');
SELECT is((SELECT array_agg(account ORDER BY account) FROM quarter_log WHERE quarter = '2026-07-01' AND action = 'deleted'),
          ARRAY['alice', 'bob'], 'Q3 2026: alice and bob, expired at two starts in a row, deleted');
SELECT is(array_agg(d), NULL, 'Q3 2026: every balance agrees with the ledger') FROM pg_temp.disagreements('2026-07-01') d;
CALL open_quarter('2026-10-01');
SELECT is((SELECT array_agg(account ORDER BY account) FROM quarter_log WHERE quarter = '2026-10-01' AND action = 'expired'),
          ARRAY['carol'], 'Q4 2026: carol, topped up last for Q3 2026, expires');
SELECT is(array_agg(d), NULL, 'Q4 2026: every balance agrees with the ledger') FROM pg_temp.disagreements('2026-10-01') d;
SELECT is((SELECT count(*) FROM (SELECT account, valid_from, note FROM ledger WHERE kind = 'deposit'
                                 GROUP BY 1, 2, 3 HAVING count(*) > 1) d), 0::bigint, 'no deposit booked twice');
SELECT is((SELECT count(*) FROM outbox GROUP BY topic, decision_key HAVING count(*) > 1 LIMIT 1), NULL::bigint,
          'no message written twice');

-- the owners' notices of open_quarter(), once per expiry and deletion (an account deleted gets
-- the deletion alone), and the queued jobs' hold messages, once per hold
SELECT is((SELECT array_agg(account || ':' || topic || ':' || (figures ->> 'quarter') ORDER BY account, figures ->> 'quarter')
           FROM outbox WHERE topic IN ('account_expired', 'account_deleted')),
          ARRAY['alice:account_expired:2026-04-01', 'alice:account_deleted:2026-07-01',
                'bob:account_expired:2026-04-01', 'bob:account_deleted:2026-07-01',
                'carol:account_expired:2025-10-01', 'carol:account_expired:2026-10-01',
                'dave:account_expired:2025-10-01', 'dave:account_deleted:2026-01-01'],
          'a notice per expiry and deletion, once each');
-- (a hold's key is its job and the instant it was checked, now(): one instant in this test's one
-- transaction, so q1's second hold, in October, has the key of its first and is not told again)
SELECT is((SELECT array_agg(figures ->> 'jobid' || ':' || split_part(decision_key, '/', 3) ORDER BY message_id)
           FROM outbox WHERE topic = 'job_held'),
          ARRAY['q1:held', 'q2:held', 'q3:held', 'q3:reason'],
          'a message per hold: q1 and q2 in March 2025, q3 in October, and q3''s new reason (deleted) in January 2026');

SELECT * FROM finish();
ROLLBACK;
