-- The account of a job that names none: the user's default project, the personal account
-- from the day that project has expired under the bank or been deleted (README, "The account
-- of a job without -A"). Every place that resolves it must name the same account on every
-- day: check_submit() (charged, checked), recheck_queued() and the hold message to the job's
-- owner (notify_hold), the fairshare_queue view, and open_quarter(), which records the
-- fallback hours after the quarter's midnight.
--   ann: default p_exp (deposits in Q2 2024 only: expired on 1 July), personal account active;
--   cy:  default p_exp, personal account expired on 1 July too (allotments up to Q2);
--   dee: default x_gone (a personal account, active, deleted on 1 July), own one expired;
--   eve: default p_late (inactive on 1 July: its next deposit is for Q4): not a fallback.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(17);

INSERT INTO setting VALUES ('timezone', 'UTC') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
SELECT add_user('ann', '2024-01-02'), add_user('cy', '2023-10-01'), add_user('dee', '2023-10-01'),
       add_user('eve', '2024-01-02');
INSERT INTO account (name, kind) VALUES ('p_exp', 'project'), ('p_late', 'project'), ('x_gone', 'personal');
SELECT add_member('p_exp', 'ann', 'admin'), add_member('p_exp', 'cy'), add_member('p_late', 'eve', 'admin');
INSERT INTO membership VALUES ('x_gone', 'dee', 'admin');
SELECT deposit('p_exp', '2024-04-01', 100);
SELECT deposit('p_late', '2024-04-01', 100), deposit('p_late', '2024-10-01', 100);
SELECT deposit('x_gone', q, 100) FROM unnest(ARRAY[date '2024-04-01', '2024-07-01', '2024-10-01']) q;
SELECT set_default_project('ann', 'p_exp'), set_default_project('cy', 'p_exp'),
       set_default_project('dee', 'x_gone'), set_default_project('eve', 'p_late');
INSERT INTO pending_job (cluster, jobid, username, account) VALUES
    ('c', 'q1', 'ann', NULL), ('c', 'q2', 'cy', NULL), ('c', 'q3', 'dee', NULL), ('c', 'q4', 'eve', NULL),
    ('c', 'q5', 'ann', 'p_exp');

-- 30 June: every default project still counts.
SELECT is(ARRAY(SELECT (check_submit(u, NULL, '2024-06-30')).account FROM unnest(ARRAY['ann', 'cy', 'dee', 'eve']) u),
          ARRAY['p_exp', 'p_exp', 'x_gone', 'p_late'], '30 June: check_submit charges each default project');
SELECT is_empty($$SELECT * FROM recheck_queued('2024-06-30')$$, '30 June: no queued job is held');

-- 1 July, midnight: p_exp has expired, x_gone is deleted (by hand here; open_quarter deletes
-- only accounts that expired twice). open_quarter() has not run yet.
UPDATE account SET deleted_in = '2024-07-01' WHERE name = 'x_gone';
SELECT is(ARRAY(SELECT (check_submit(u, NULL, '2024-07-01')).account FROM unnest(ARRAY['ann', 'cy', 'dee', 'eve']) u),
          ARRAY['ann', 'cy', 'dee', 'p_late'],
          '1 July, before open_quarter: check_submit charges the personal account for an expired or deleted default');
SELECT results_eq($$SELECT jobid, reason FROM recheck_queued('2024-07-01')$$,
                  $$VALUES ('q2', 'account_expired'), ('q3', 'account_expired'), ('q4', 'account_inactive'),
                           ('q5', 'account_expired')$$,
                  '1 July: recheck holds cy''s and dee''s jobs (their personal accounts expired), eve''s and the one naming p_exp');
SELECT results_eq($$SELECT jobid, hold_reason FROM pending_job WHERE held ORDER BY 1$$,
                  $$SELECT j, (check_submit(u, NULL, '2024-07-01')).message
                    FROM (VALUES ('q2', 'cy'), ('q3', 'dee'), ('q4', 'eve')) v(j, u)
                    UNION ALL SELECT 'q5', (check_submit('ann', 'p_exp', '2024-07-01')).message ORDER BY 1$$,
                  'each held job''s reason is check_submit''s message');
-- the owner's message names the account check_submit judged, as its reason does
SELECT results_eq($$SELECT figures ->> 'jobid', account FROM outbox WHERE topic = 'job_held' ORDER BY 1$$,
                  $$VALUES ('q2', 'cy'), ('q3', 'dee'), ('q4', 'p_late'), ('q5', 'p_exp')$$,
                  '1 July: the hold messages are about cy, dee, p_late and p_exp');
SELECT results_eq($$SELECT figures ->> 'jobid', substring(body FROM '\(account ([^)]*)\)') FROM outbox
                    WHERE topic = 'job_held' ORDER BY 1$$,
                  $$VALUES ('q2', 'cy, your default'), ('q3', 'dee, your default'), ('q4', 'p_late, your default'),
                           ('q5', 'p_exp')$$,
                  'and their bodies name those accounts, not the expired or deleted default');

-- The queue view, today (no deposit after 2024: p_exp and p_late have expired; x_gone is
-- deleted): each job's account is the one check_submit charges today.
SELECT results_eq($$SELECT jobid, account FROM fairshare_queue ORDER BY jobid$$,
                  $$SELECT p.jobid, (check_submit(p.username, p.account, site_today())).account
                    FROM pending_job p ORDER BY p.jobid$$,
                  'fairshare_queue names the account check_submit charges today, for every queued job');
SELECT results_eq($$SELECT jobid, account FROM fairshare_queue ORDER BY jobid$$,
                  $$VALUES ('q1', 'ann'), ('q2', 'cy'), ('q3', 'dee'), ('q4', 'eve'), ('q5', 'p_exp')$$,
                  'today: the personal accounts of all four; the account q5 names, expired as it is');

-- open_quarter() records the same fallback, for the same users.
CALL open_quarter('2024-07-01');
SELECT results_eq($$SELECT username, account FROM quarter_log WHERE action = 'default_reset' ORDER BY 1$$,
                  $$VALUES ('ann', 'p_exp'), ('cy', 'p_exp'), ('dee', 'x_gone')$$,
                  'open_quarter resets the defaults of ann, cy and dee, not eve''s');
SELECT is(ARRAY(SELECT (check_submit(u, NULL, '2024-07-01')).account FROM unnest(ARRAY['ann', 'cy', 'dee', 'eve']) u),
          ARRAY['ann', 'cy', 'dee', 'p_late'], '1 July, after open_quarter: check_submit charges the same accounts');
SELECT results_eq($$SELECT jobid, account FROM fairshare_queue ORDER BY jobid$$,
                  $$SELECT p.jobid, (check_submit(p.username, p.account, site_today())).account
                    FROM pending_job p ORDER BY p.jobid$$,
                  'and the queue view the same');

-- the one definition
SELECT has_function('hpcacct_internal', 'job_account', ARRAY['text', 'text', 'date'],
                    'hpcacct_internal.job_account(username, account, at) exists');
SELECT is(ARRAY(SELECT hpcacct_internal.job_account(u, a, d)
                FROM (VALUES ('ann', NULL, date '2024-06-30'), ('ann', 'p_late', '2024-07-01'), ('nobody', NULL, '2024-07-01'),
                             ('nobody', 'p_exp', '2024-07-01')) v(u, a, d)),
          ARRAY['ann', 'p_late', NULL, 'p_exp'],
          'job_account: the account named, whoever names it; a default reset to the personal account; NULL for an unknown user');
UPDATE hpc_user SET default_account = 'p_exp' WHERE username = 'ann';
SELECT is(ARRAY(SELECT hpcacct_internal.job_account('ann', NULL, d)
                FROM unnest(ARRAY[date '2024-06-30', '2024-07-01']) d),
          ARRAY['p_exp', 'ann'], 'job_account: the default project until it has expired, the personal account from then');
SELECT throws_ok($$SELECT hpcacct_internal.job_account('ann', NULL, NULL)$$, '22004', NULL,
                 'job_account: a NULL day is an error');
SELECT throws_ok($$SELECT hpcacct_internal.job_account('ann', NULL, 'infinity')$$, '22008', NULL,
                 'job_account: an infinite day is an error');

SELECT * FROM finish();
ROLLBACK;
