-- NULL arguments: an error with a named SQLSTATE or the documented default (a NULL day is
-- today in the site's time zone), never a silent zero, an empty result or a refusal.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(67);

INSERT INTO setting VALUES ('timezone', 'Europe/Berlin') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
-- A bad for_year of a usage report is 22008 naming the report, on a site with no resource
-- yet as on one with resources (it returned no rows here: the check was allocation_year()'s,
-- called once per pool, and there was no pool).
SELECT throws_ok(format('SELECT * FROM hpcacct.%s(%s)', f, y), '22008',
                 format('%s: for_year must be a year from 1 to 9999, not %s', f, y),
                 format('%s(%s) on a site without resources', f, y))
FROM (VALUES ('usage_by_resource', 0), ('usage_by_account', 10000), ('usage_by_submitter', -1),
             ('usage_by_month', 0)) v(f, y);

-- HLRN's XC30 nodes: 24 cores, exclusive, 2 NPL per node-hour.
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, exclusive)
VALUES ('hlrn', 'mpp1', 'cpu=24', 'cpu=1', 1.0 / 12, 'NPL', true);
INSERT INTO account (name) VALUES ('nip00001');
SELECT add_user('alice', site_today());
SELECT add_member('nip00001', 'alice', 'admin');
SELECT deposit('nip00001', site_today(), 10000);
-- 35 hours on one node, inside this quarter (site time zone): 70 NPL, so the balance is 9 930.
CREATE TEMP TABLE this_quarter AS
    SELECT (quarter_start(site_today())::timestamp AT TIME ZONE site_timezone()) AS q0;
INSERT INTO job
SELECT 'hlrn', 'j1', 'nip00001', 'alice', 'mpp1', NULL, q0, q0 + interval '35 hours', 'cpu=1', 'COMPLETED'
FROM this_quarter;
SELECT add_quota_period('nip00001', date_trunc('month', site_today())::date,
                        (date_trunc('month', site_today()) + interval '1 month - 1 day')::date, 1000, NULL, 'NPL');

-- balance()
SELECT is(balance('nip00001'), 9930.000000, 'balance() today: 10 000 deposited - 70 charged');
SELECT is(balance('nip00001', NULL), 9930.000000, 'balance(account, NULL) is today''s balance, not 0');
SELECT is(balance('nip00001', NULL), balance('nip00001', site_today()), 'the same as balance(account, site_today())');
SELECT throws_ok($$SELECT hpcacct.balance(NULL)$$, '22004', NULL, 'balance(NULL) is an error, not 0');
SELECT throws_ok($$SELECT hpcacct.balance('nobody')$$, '42704', NULL, 'balance() of an unknown account is an error, not 0');
SELECT throws_ok($$SELECT hpcacct.balance('nip00001', 'infinity')$$, '22008', NULL, 'balance() at infinity');

-- check_submit()
SELECT is((check_submit('alice', NULL, NULL)).ok, true, 'check_submit(user, NULL, NULL) admits an active account');
SELECT is((check_submit('alice', NULL, NULL)).account, 'alice', 'on the user''s default (personal) account');
SELECT is(check_submit('alice', 'nip00001', NULL), check_submit('alice', 'nip00001', site_today()),
          'a NULL day is today in the site time zone');
SELECT throws_ok($$SELECT hpcacct.check_submit(NULL, 'nip00001')$$, '22004', NULL, 'check_submit() without a user');
SELECT throws_ok($$SELECT hpcacct.check_submit('alice', 'nip00001', '-infinity')$$, '22008', NULL,
                 'check_submit() at -infinity');
SELECT throws_ok($$SELECT hpcacct.account_verdict(NULL)$$, '22004', NULL,
                 'account_verdict(NULL) is an error, not unknown_account for an account without a name');

-- account_state()
SELECT is(account_state('nip00001', NULL), 'active', 'account_state(account, NULL) is today''s state');

-- window_quota_usage() and window_quota_state()
SELECT is((SELECT count(*) FROM window_quota_usage('nip00001', NULL)), 1::bigint,
          'window_quota_usage(account, NULL) gives this month''s row');
SELECT is((SELECT u FROM window_quota_usage('nip00001', NULL) u), (SELECT u FROM window_quota_usage('nip00001') u),
          'the same as window_quota_usage(account)');
SELECT throws_ok($$SELECT * FROM hpcacct.window_quota_usage(NULL)$$, '22004', NULL,
                 'window_quota_usage(NULL) is an error, not an empty result');
SELECT throws_ok($$SELECT * FROM hpcacct.window_quota_usage('nobody')$$, '42704', NULL,
                 'window_quota_usage() of an unknown account');
SELECT is(window_quota_state('nip00001', NULL), window_quota_state('nip00001'), 'window_quota_state(account, NULL) is today''s');
SELECT is((SELECT count(*) FROM window_quota_usage('alice')), 0::bigint, 'an account without a quota period has no row');

-- allocation_status(): a NULL day is today; a NULL or unknown account is an error, not zeros.
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('nip00001', 'grant', 1200, 'NPL', 'hlrn', make_date(extract(year FROM site_today())::int, 1, 1),
        make_date(extract(year FROM site_today())::int, 12, 31));
SELECT is((SELECT s FROM allocation_status('nip00001', 'hlrn', NULL) s),
          (SELECT s FROM allocation_status('nip00001', 'hlrn', site_today()) s),
          'allocation_status(account, machine, NULL) is today''s, not an empty result');
SELECT is((SELECT alloc FROM allocation_status('nip00001', 'hlrn', NULL)), 1200.000000, 'with this year''s grant');
SELECT throws_ok($$SELECT * FROM hpcacct.allocation_status(NULL, 'hlrn', NULL)$$, '22004', NULL,
                 'allocation_status(NULL, …) is an error, not an empty result');
SELECT throws_ok($$SELECT * FROM hpcacct.allocation_status('nobody', 'hlrn', NULL)$$, '42704', NULL,
                 'allocation_status() of an unknown account is an error, not zeros and ok');
SELECT throws_ok($$SELECT * FROM hpcacct.allocation_status('nip00001', NULL, NULL)$$, '22004', NULL,
                 'allocation_status() without a machine');

-- consumption_before(), which allocation_status() reads: the same argument rules, never a 0.
SELECT throws_ok($$SELECT hpcacct.consumption_before(NULL, 'hlrn', now())$$, '22004', NULL,
                 'consumption_before(NULL, …) is an error, not 0');
SELECT throws_ok($$SELECT hpcacct.consumption_before('nobody', 'hlrn', now())$$, '42704', NULL,
                 'consumption_before() of an unknown account is an error, not 0');
SELECT throws_ok($$SELECT hpcacct.consumption_before('nip00001', NULL, now())$$, '22004', NULL,
                 'consumption_before() without a pool');
SELECT throws_ok($$SELECT hpcacct.consumption_before('nip00001', 'hlrn', NULL)$$, '22004', NULL,
                 'consumption_before() without an instant');

-- fairshare_all(): a NULL instant is now, as fairshare()'s, not an empty result.
SELECT cmp_ok((SELECT count(*) FROM fairshare_all(NULL)), '>', 0::bigint, 'fairshare_all(NULL) has rows');
SELECT results_eq($$SELECT account, submitter, factor FROM hpcacct.fairshare_all(NULL) ORDER BY 1, 2$$,
                  $$SELECT account, submitter, factor FROM hpcacct.fairshare_all(now()) ORDER BY 1, 2$$,
                  'fairshare_all(NULL) is fairshare_all(now())');

-- The usage reports: a NULL instant is 22004 (the README: "22004 for the usage reports");
-- a NULL day of the portal's page and of the scan too.
SELECT throws_ok($$SELECT * FROM hpcacct.usage_by_account(NULL, NULL)$$, '22004', NULL, 'usage_by_account(year, NULL)');
-- each names itself (they said "allocation_year: at must not be NULL", a function not called)
SELECT throws_ok($$SELECT * FROM hpcacct.usage_by_resource(NULL, NULL)$$, '22004', 'usage_by_resource: at must not be NULL',
                 'usage_by_resource(year, NULL) names itself');
SELECT throws_ok($$SELECT * FROM hpcacct.usage_by_account(NULL, NULL)$$, '22004', 'usage_by_account: at must not be NULL',
                 'usage_by_account(year, NULL) too');
SELECT throws_ok($$SELECT * FROM hpcacct.usage_by_submitter(NULL, NULL)$$, '22004', 'usage_by_submitter: at must not be NULL',
                 'usage_by_submitter(year, NULL) too');
SELECT throws_ok($$SELECT * FROM hpcacct.usage_by_month(NULL, 'infinity')$$, '22008', 'usage_by_month: at must be finite, not infinity',
                 'usage_by_month(year, infinity) too');
SELECT throws_ok($$SELECT * FROM hpcacct.usage_by_account(10000)$$, '22008',
                 'usage_by_account: for_year must be a year from 1 to 9999, not 10000',
                 'usage_by_account(10000) with resources names itself too');
-- the allocation year containing `at` must be one of 1 to 9999, as a named for_year must be
-- (an April year seen in March of year 1 is year 0: it was PostgreSQL's "date field value
-- out of range: 0-04-01"; an instant in year 10000 gave a year 10000 row)
INSERT INTO hpcacct.pool (name, year_start_month) VALUES ('nl-april', 4);
SELECT throws_ok($$SELECT * FROM hpcacct.allocation_year('nl-april', NULL, '0001-03-01 12:00+00')$$, '22008',
                 'allocation_year: the allocation year containing at is 0, outside 1 to 9999',
                 'allocation_year() of an instant in allocation year 0');
SELECT throws_ok($$SELECT * FROM hpcacct.allocation_year('nl-april', NULL, '10000-06-01 12:00+00')$$, '22008',
                 'allocation_year: the allocation year containing at is 10000, outside 1 to 9999',
                 'and of one in year 10000');
SELECT lives_ok($$SELECT * FROM hpcacct.allocation_year('nl-april', NULL, '0001-06-01 12:00+00')$$,
                'year 1 is a year');
-- period_share(): an infinite job start or end is 22008 naming it (it was PostgreSQL's
-- 'cannot subtract infinite timestamps'); infinite period bounds stay no bound.
SELECT throws_ok($$SELECT hpcacct.period_share('2024-01-01', 'infinity', '2024-01-01', '2024-02-01')$$, '22008',
                 'period_share: job_end must be finite, not infinity', 'period_share() of a job without end');
SELECT throws_ok($$SELECT hpcacct.period_share(x, '2024-01-02', '-infinity', 'infinity')
                   FROM (VALUES ('-infinity'::timestamptz)) v(x)$$, '22008',
                 'period_share: job_start must be finite, not -infinity', 'period_share() of a job without start, per row');
SELECT is(hpcacct.period_share('2024-01-01 12:00', '2024-01-02 12:00', '-infinity', '2024-01-02'), 0.5,
          'period_share() up to a day from no bound');
SELECT is(hpcacct.period_share('2024-01-01', '2024-01-02', 'infinity', 'infinity')
          + hpcacct.period_share('2024-01-01', '2024-01-02', '-infinity', '-infinity'), 0::numeric,
          'period_share() of a period at either infinity is 0');
SELECT throws_ok($$SELECT hpcacct.my_accounts(NULL)$$, '22004', NULL, 'my_accounts(NULL)');
SELECT throws_ok($$SELECT hpcacct.notify_scan(NULL)$$, '22004', NULL, 'notify_scan(NULL)');

-- add_quota_period(): a NULL account is 22004, an unknown one 42704 (not 23502, 23503).
SELECT throws_ok($$SELECT hpcacct.add_quota_period(NULL, '2030-01-01', '2030-01-31', 5)$$, '22004', NULL,
                 'add_quota_period(NULL, …)');
SELECT throws_ok($$SELECT hpcacct.add_quota_period('nobody', '2030-01-01', '2030-01-31', 5)$$, '42704', NULL,
                 'add_quota_period() of an unknown account');
SELECT is((SELECT count(*) FROM quota_period WHERE period_start = '2030-01-01'), 0::bigint, 'and wrote no period');

-- Money movements and procedures: NULL is 22004, as the README's error table says.
SELECT throws_ok($$SELECT hpcacct.deposit('nip00001', NULL, 1)$$, '22004', NULL, 'deposit() without a quarter');
SELECT throws_ok($$SELECT hpcacct.deposit('nip00001', 'infinity', 1)$$, '22008', NULL, 'deposit() at infinity');
SELECT throws_ok($$SELECT hpcacct.deposit('nip00001', '2024-01-01', NULL)$$, '22004', NULL, 'deposit() without an amount');
SELECT throws_ok($$SELECT hpcacct.deposit(NULL, '2024-01-01', 1)$$, '22004', NULL, 'deposit() without an account');
SELECT throws_ok($$CALL hpcacct.regulate(NULL)$$, '22004', NULL, 'regulate(NULL)');
SELECT throws_ok($$CALL hpcacct.open_quarter(NULL)$$, '22004', NULL, 'open_quarter(NULL)');
-- Users and members: a NULL user is 22004 too, not 42704 "unknown user" nor a NOT NULL violation.
SELECT throws_ok($$SELECT hpcacct.add_user(NULL)$$, '22004', NULL, 'add_user(NULL)');
SELECT throws_ok($$SELECT hpcacct.add_user('')$$, '22023', 'add_user: username must not be empty', 'add_user('''')');
SELECT throws_ok($$SELECT hpcacct.add_user(E'bo\nb')$$, '22023', 'add_user: username must not hold control characters',
                 'add_user() of a name with a line break (no login has one; it would become an account name)');
SELECT throws_ok($$SELECT hpcacct.add_member('nip00001', NULL)$$, '22004', NULL, 'add_member() without a user');
SELECT throws_ok($$SELECT hpcacct.remove_member('nip00001', NULL)$$, '22004', NULL, 'remove_member() without a user');
SELECT throws_ok($$SELECT hpcacct.remove_member(NULL, 'alice')$$, '22004', NULL, 'remove_member() without an account');
SELECT throws_ok($$SELECT hpcacct.set_default_project(NULL, 'nip00001')$$, '22004', NULL,
                 'set_default_project() without a user');
SELECT is((SELECT count(*) FROM membership WHERE account = 'nip00001'), 1::bigint, 'the members are unchanged');
SELECT is((SELECT count(*) FROM ledger WHERE account = 'nip00001' AND kind = 'deposit'), 1::bigint,
          'the refused calls wrote nothing');

SELECT * FROM finish();
ROLLBACK;
