-- What a centre reads from hpcacct, as one deterministic text: compared before and after a
-- dump/restore or an extension update.
SET search_path = public, hpcacct;
\pset footer off
SELECT account, kind, unit, count(*) AS entries, sum(amount) AS total FROM ledger GROUP BY 1, 2, 3 ORDER BY 1, 2, 3;
SELECT cluster, count(*) AS jobs, sum((alloctres -> 'cpu')) AS cores FROM job GROUP BY 1 ORDER BY 1;
SELECT account, pool, month, round(sum(amount), 6) FROM charge_by_month GROUP BY 1, 2, 3 ORDER BY 1, 2, 3;
-- amounts to the ledger's 6 decimals (0.3 printed its float8 sums without them)
SELECT account, account_kind, quarter, deposits::numeric(20, 6), charges::numeric(20, 6), transfers::numeric(20, 6),
       refunds::numeric(20, 6), balance::numeric(20, 6), state
FROM quarter_balances ORDER BY account, quarter;
SELECT * FROM quarter_log ORDER BY quarter, account, action, target_quarter;
SELECT account, machine, run_date, run, outcome, retracted FROM regulation_log ORDER BY 1, 2, 3, 4;
SELECT a.name, (regulation_year(a.name, 'ada', 2024)).* FROM account a
WHERE EXISTS (SELECT 1 FROM ledger l WHERE l.account = a.name AND l.pool = 'ada') ORDER BY 1, 2;
SELECT a.name, d.day, s.* FROM account a
CROSS JOIN (VALUES (date '2024-03-15'), ('2024-10-20'), ('2024-12-31')) AS d(day)
CROSS JOIN LATERAL allocation_status(a.name, 'ada', d.day) s
WHERE EXISTS (SELECT 1 FROM ledger l WHERE l.account = a.name AND l.pool = 'ada') ORDER BY 1, 2;
-- allocations by pool (the pool of a grant); the bank's unit apart: 0.4 counts the bank's
-- credits as allocations of every pool charged in it, 0.3 did not
SELECT pool, unit, account, round(allocation, 6) FROM year_allocations(2024, '2024-10-01 00:00+02')
WHERE unit <> 'NPL' ORDER BY 1, 2, 3;
SELECT pool, unit, account, allocation FROM fairshare('2024-10-01 00:00+02')
WHERE submitter IS NULL AND unit <> 'NPL' ORDER BY 1, 2, 3;
SELECT p.account, u.* FROM (SELECT DISTINCT account FROM quota_period) p
CROSS JOIN LATERAL window_quota_usage(p.account, '2012-03-10') u ORDER BY 1;
SELECT name, value, source FROM settings WHERE source = 'site' ORDER BY name;  -- new versions add defaults
SELECT username, default_account FROM hpc_user ORDER BY 1;
SELECT account, username, role FROM membership ORDER BY 1, 2;
SELECT cluster, partition, bundle, rate, unit, exclusive, valid FROM resource ORDER BY 1, 2, valid;
