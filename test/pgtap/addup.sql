-- Do the figures people read add up, as printed? A statement's lines and its total, the bank's
-- allocation, charges and balance, and one balance printed the same (digits, sign, unit) in the
-- mail, the submit refusal, the statement and the portal's JSON.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(29);

INSERT INTO setting VALUES ('timezone', 'UTC') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO setting VALUES ('bank_unit', 'NPL') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('au_c', 'p', 'cpu=24', 'cpu=1', 1, 'NPL');
INSERT INTO balance_threshold VALUES (0) ON CONFLICT DO NOTHING;

-- au_a: 1 NPL deposited; one job of 1 NPL and three of 0.005 NPL (18 s): the balance is -0.015
INSERT INTO account (name) VALUES ('au_a'), ('au_z'), ('au_big'), ('au_split');
SELECT deposit('au_a', '2024-04-01', 1);
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    ('au_c', 'a1', 'au_a', 'u1', 'p', '2024-05-10 00:00+00', '2024-05-10 01:00:00+00', 'cpu=1', 'COMPLETED'),
    ('au_c', 'a2', 'au_a', 'u2', 'p', '2024-05-10 00:00+00', '2024-05-10 00:00:18+00', 'cpu=1', 'COMPLETED'),
    ('au_c', 'a3', 'au_a', 'u3', 'p', '2024-05-10 00:00+00', '2024-05-10 00:00:18+00', 'cpu=1', 'COMPLETED'),
    ('au_c', 'a4', 'au_a', 'u4', 'p', '2024-05-10 00:00+00', '2024-05-10 00:00:18+00', 'cpu=1', 'COMPLETED');
-- au_z: 1 NPL deposited, 1.000001 charged (3 600.0036 s): a millionth below zero
SELECT deposit('au_z', '2024-04-01', 1);
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    ('au_c', 'z1', 'au_z', 'u1', 'p', '2024-05-10 00:00+00', '2024-05-10 01:00:00.0036+00', 'cpu=1', 'COMPLETED');
-- au_big: 10^12 NPL deposited, 0.5 charged
SELECT deposit('au_big', '2024-04-01', 1000000000000);
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    ('au_c', 'b1', 'au_big', 'u1', 'p', '2024-05-10 00:00+00', '2024-05-10 00:30+00', 'cpu=1', 'COMPLETED');
-- au_split: three submitters' jobs of 1.000001 NPL, each a third in May: a submitter's May is
-- 0.333333666…, rounded 0.333334; the three together 1.0000009999…
SELECT deposit('au_split', '2024-04-01', 10);
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
SELECT 'au_c', 's' || u, 'au_split', 'u' || u, 'p', '2024-04-30 23:19:59.9976+00', '2024-05-01 00:20:00.0012+00',
       'cpu=1', 'COMPLETED'
FROM generate_series(1, 3) u;

-- au_y: three submitters' jobs of 1.000001 h, a third in 2024 (from 31 December 23:19:59.9976)
INSERT INTO account (name) VALUES ('au_y');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
SELECT 'au_c', 'y' || u, 'au_y', 'u' || u, 'p', '2023-12-31 23:19:59.9976+00', '2024-01-01 00:20:00.0012+00',
       'cpu=1', 'COMPLETED'
FROM generate_series(1, 3) u;

-- au_r: an RWTH quota of 1 000.4 core-hours a month, 6 500 used in March: blocked
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('au_w', 'p', 'cpu=48', 'cpu=1', 1, 'core-hours');
INSERT INTO account (name) VALUES ('au_r'), ('au_g');
SELECT add_quota_period('au_r', '2024-01-01', '2024-06-30', 1000.4);
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    ('au_w', 'r1', 'au_r', 'u1', 'p', '2024-03-10 00:00+00', '2024-03-10 10:00:00+00', 'cpu=650', 'COMPLETED');
SELECT notify_scan('2024-03-20');
-- au_g: a GENCI grant of 1 200 006 hours (TMC 100 000.5), 0.4 hours used by 15 February: TC
-- 150 000.75, delta -150 000.35, printed 150 001, 0 and 150 000
INSERT INTO regulation_machine (machine, monthly_threshold) VALUES ('au_m', 1000000);
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('au_m', 'p', 'cpu=24', 'cpu=1', 1, 'hours');
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
VALUES ('au_g', 'grant', 1200006, 'hours', 'au_m', '2024-01-01', '2024-12-31');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    ('au_m', 'g1', 'au_g', 'u1', 'p', '2024-01-10 00:00+00', '2024-01-10 00:24:00+00', 'cpu=1', 'COMPLETED');
CALL regulate('2024-01-15');
CALL regulate('2024-02-15');

SELECT notify_scan('2024-05-31');

CREATE FUNCTION pg_temp.cells(html text, tbl text) RETURNS text[] LANGUAGE sql AS $$
    SELECT array_agg(m[1] ORDER BY ord)
    FROM regexp_matches(substring(html FROM '<table class="' || tbl || '">.*?</table>'), '<td class="n">([^<]*)</td>', 'g')
         WITH ORDINALITY t(m, ord)
$$;
-- a printed figure as a number: thousands separators and a unit dropped
CREATE FUNCTION pg_temp.num(printed text) RETURNS numeric LANGUAGE sql AS $$
    SELECT replace(split_part(printed, ' ', 1), ',', '')::numeric
$$;

SELECT is(balance('au_a', '2024-05-31'), -0.015::numeric, 'setup: au_a''s balance is -0.015 NPL');

-- one balance, one way of printing it
SELECT matches((SELECT body FROM outbox WHERE account = 'au_a' AND topic = 'balance_low'),
               'held -0\.015 NPL of the 1\.00 NPL',
               'the mail of a negative balance prints it with its sign and digits, not "held 0 NPL"');
SELECT matches((account_verdict('au_a', '2024-05-31')).message, '\(-0\.015 NPL\)',
               'the submit refusal prints the same digits');
SELECT is(pg_temp.cells(statement_html('au_a', '2024-05-01'), 'bank'), ARRAY['1.00 NPL', '-0.015 NPL'],
          'the statement prints the same allocation and balance, not a balance of -0.02');
SELECT is((my_accounts('2024-05-31') #>> '{accounts,0,bank,balance}')::numeric,
          pg_temp.num((pg_temp.cells(statement_html('au_a', '2024-05-01'), 'bank'))[2]),
          'the portal''s JSON holds the balance the statement prints');

-- a millionth below zero is below zero wherever it is printed
SELECT matches((SELECT body FROM outbox WHERE account = 'au_z' AND topic = 'balance_low'), 'held -0\.000001 NPL',
               'a balance of -0.000001: the mail does not print 0 beside "the balance is negative"');
SELECT is((pg_temp.cells(statement_html('au_z', '2024-05-01'), 'bank'))[2], '-0.000001 NPL',
          'nor the statement 0.00 (or -0.00)');
SELECT matches((account_verdict('au_z', '2024-05-31')).message, '\(-0\.000001 NPL\)', 'the refusal says -0.000001');

-- 10^12: every digit, with separators
SELECT is(pg_temp.cells(statement_html('au_big', '2024-05-01'), 'bank'), ARRAY['1,000,000,000,000.00 NPL', '999,999,999,999.50 NPL'],
          'a balance of 10^12 - 0.5 is printed to the last digit');

-- the statement's charges: the lines add up to the total as printed
SELECT is((SELECT sum(pg_temp.num(x)) FROM unnest((pg_temp.cells(statement_html('au_a', '2024-05-01'), 'charges'))[1:4]) x),
          pg_temp.num((pg_temp.cells(statement_html('au_a', '2024-05-01'), 'charges'))[5]),
          'the statement''s four lines (1 + 3 × 0.005) add up to the total it prints');
SELECT is(pg_temp.num((pg_temp.cells(statement_html('au_a', '2024-05-01'), 'bank'))[1])
            - pg_temp.num((pg_temp.cells(statement_html('au_a', '2024-05-01'), 'charges'))[5]),
          pg_temp.num((pg_temp.cells(statement_html('au_a', '2024-05-01'), 'bank'))[2]),
          'the allocation less the charges printed is the balance printed (the quarter''s only charges)');
SELECT is((SELECT sum((x ->> 'amount')::numeric) FROM jsonb_array_elements(account_month('au_split', '2024-05-01') #> '{charges,by_submitter}') x),
          (account_month('au_split', '2024-05-01') #>> '{charges,total,NPL}')::numeric,
          'account_month(): the submitters'' lines add up to the total, to the millionth');
SELECT is((SELECT sum(pg_temp.num(x))
           FROM unnest((pg_temp.cells(statement_html('au_split', '2024-05-01'), 'charges'))[1:3]) x),
          pg_temp.num((pg_temp.cells(statement_html('au_split', '2024-05-01'), 'charges'))[4]),
          'and so do the statement''s printed lines');
SELECT is((account_month('au_split', '2024-05-01') #>> '{charges,total,NPL}')::numeric,
          (SELECT (x #>> '{this_month,NPL}')::numeric FROM jsonb_array_elements(my_accounts('2024-05-31') -> 'accounts') x
           WHERE x ->> 'account' = 'au_split'),
          'the first page''s charges of the month are the statement''s total');

-- a quota's figures: the refusal prints them as the mail and the statement do
SELECT matches((SELECT body FROM outbox WHERE account = 'au_r' AND topic = 'quota_state' ORDER BY message_id LIMIT 1),
               'Monthly allowance: +1,000 core-hours\nRemaining of previous month: +1,000\nConsumed this month: +6,500\n',
               'setup: the quota mail prints whole core-hours: 1,000 and 6,500');
SELECT matches((account_verdict('au_r', '2024-03-20')).message,
               '\(6,500 core-hours used this month, monthly allowance 1,000\)',
               'the quota refusal prints the same figures (not 6500.00 and 1000.40)');

-- GENCI's hours, rounded to whole hours each on its own: the document says so
SELECT is(ARRAY(SELECT (regexp_matches(body, '(?:consumed|TC of|under-consumption of) ([0-9,]+) hours', 'g'))[1]
                FROM outbox WHERE account = 'au_g' AND topic = 'regulation_warning'),
          ARRAY['0', '150,001', '150,000'],
          'setup: the warning''s consumption 0 and TC 150,001 leave an under-consumption of 150,000 as printed');
SELECT matches((SELECT body FROM outbox WHERE account = 'au_g' AND topic = 'regulation_warning'),
               'each rounded on its own to the nearest whole hour',
               'so the mail says how its hours are rounded');
SELECT matches(substring(statement_html('au_g', '2024-02-01') FROM '<table class="regulation">.*?(?:<h2>|</body>)'),
               '</table><p class="meta">Hours, each rounded on its own',
               'and so does the statement under its GENCI table');

-- the usage reports: each row rounded once; coarser rows within a millionth per finer row
CREATE TEMP TABLE au_sub AS SELECT * FROM usage_by_submitter(2024, '2024-03-01') WHERE account = 'au_y';
SELECT cmp_ok((SELECT abs(sum(s.usage) - (SELECT a.usage FROM usage_by_account(2024, '2024-03-01') a WHERE a.account = 'au_y'))
               - count(*) * 0.000001 FROM au_sub s), '<=', 0::numeric,
              'usage_by_submitter''s rows add up to usage_by_account''s within a millionth per row, as the README says');
SELECT cmp_ok((SELECT abs(sum(m.usage) - (SELECT sum(s.usage) FROM au_sub s)) - count(*) * 0.000001
               FROM usage_by_month(2024, '2024-03-01') m WHERE m.account = 'au_y'), '<=', 0::numeric,
              'usage_by_month''s months add up to the year''s within a millionth per row');
SELECT cmp_ok((SELECT abs(sum(s.account_pct) - 100) - count(*) * 0.01 FROM au_sub s), '<=', 0::numeric,
              'the submitters'' shares add up to 100 % within 0.01 per row');

-- re-rated (a reversal and a new charge for every job of au_c) after a transfer and a refund:
-- the bank's figures still add up, and so do the statement's
SELECT transfer('au_big', '2024-04-01', 'au_a', '2024-04-01', 10.333333);
SELECT refund('au_a', '2024-04-01', 0.000001);
SELECT rerate((SELECT resource_id FROM resource WHERE cluster = 'au_c'), 1 / 3.0, '2024-01-01');
SELECT is((SELECT count(*) FROM ledger WHERE account = 'au_a' AND kind = 'charge'), 12::bigint,
          'setup: au_a''s four charges, their reversals and new charges');
SELECT is_empty($$SELECT account, quarter FROM hpcacct.quarter_balances
                  WHERE account LIKE 'au\_%' AND deposits - charges + transfers + refunds <> balance$$,
                'quarter_balances: deposits - charges + transfers + refunds = balance, to the last digit, in every quarter');
SELECT is(ARRAY[(SELECT sum(pg_temp.num(x)) FROM unnest((pg_temp.cells(statement_html('au_a', '2024-05-01'), 'charges'))[1:4]) x),
                pg_temp.num((pg_temp.cells(statement_html('au_a', '2024-05-01'), 'charges'))[5]),
                pg_temp.num((pg_temp.cells(statement_html('au_a', '2024-05-01'), 'bank'))[1])
                  - pg_temp.num((pg_temp.cells(statement_html('au_a', '2024-05-01'), 'bank'))[2])],
          ARRAY[0.338334, 0.338334, 0.338334],
          're-rated, au_a''s statement: its lines, its total and its allocation less its balance are the same 0.338334');

-- one rounding rule: the bank's aggregate (C++) rounds an amount of more decimals as round() does,
-- halves away from zero (not to even)
SELECT is(ARRAY(SELECT (SELECT (quarter_balance('deposit', '2024-04-01', x, '2024-04-01')).balance FROM (VALUES (a)) v(x))
                FROM unnest(ARRAY[0.0000005, 0.0000015, 0.0000025, -0.0000005, -0.0000025]) WITH ORDINALITY u(a, o) ORDER BY o),
          ARRAY[0.000001, 0.000002, 0.000003, -0.000001, -0.000003],
          'quarter_balance() rounds 0.0000025 to 0.000003 and -0.0000005 to -0.000001, as round(x, 6)');

-- figures too large for to_char's pattern: every digit, not ###,###,###,###,###
INSERT INTO account (name) VALUES ('au_huge');
SELECT add_quota_period('au_huge', '2024-01-01', '2024-06-30', 2e15);
SELECT is((pg_temp.cells(statement_html('au_huge', '2024-03-01'), 'quota'))[1], '2,000,000,000,000,000',
          'a monthly quota of 2e15 core-hours: the statement prints 2,000,000,000,000,000');
SELECT is(hpcacct_internal.notify_number(-123456789012345678.5), '-123,456,789,012,345,679',
          'notify_number() of a figure of 18 digits, negative, rounded half away from zero');
SELECT is(hpcacct_internal.ledger_figure(-1234567890123456.5), '-1,234,567,890,123,456.50',
          'ledger_figure() of 16 digits: every digit, separated, at least 2 decimals');

SELECT * FROM finish();
ROLLBACK;
