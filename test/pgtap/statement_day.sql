-- my_accounts(at): every figure is the one at the end of that day. A day in the past shows the
-- month's charges up to it, as its bank balance, not the charges of the rest of the month.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(4);

INSERT INTO setting VALUES ('timezone', 'UTC') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO setting VALUES ('bank_unit', 'NPL') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('sd_c', 'p', 'cpu=24', 'cpu=1', 1, 'NPL');
INSERT INTO account (name) VALUES ('sd_a');
SELECT deposit('sd_a', '2024-04-01', 1000);
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    ('sd_c', 'd1', 'sd_a', 'sd_u', 'p', '2024-05-10 00:00+00', '2024-05-10 10:00+00', 'cpu=1', 'COMPLETED'),
    ('sd_c', 'd2', 'sd_a', 'sd_u', 'p', '2024-05-20 20:00+00', '2024-05-21 04:00+00', 'cpu=1', 'COMPLETED'),
    ('sd_c', 'd3', 'sd_a', 'sd_u', 'p', '2024-05-25 00:00+00', '2024-05-26 06:00+00', 'cpu=1', 'COMPLETED');
CREATE TEMP TABLE sd AS
SELECT x FROM jsonb_array_elements(my_accounts('2024-05-20') -> 'accounts') x WHERE x ->> 'account' = 'sd_a';

SELECT is((SELECT (x -> 'bank' ->> 'balance')::numeric FROM sd), 986::numeric,
          'setup: the balance at the end of 20 May is 1 000 less 10 and the 4 hours of d2 on the 20th');
SELECT is((SELECT (x -> 'this_month' ->> 'NPL')::numeric FROM sd), 14::numeric,
          'this month''s charges up to the end of 20 May: 10 and 4, not d2''s 21 May hours or d3');
SELECT is((SELECT (x -> 'this_month' ->> 'NPL')::numeric FROM sd) + (SELECT (x -> 'bank' ->> 'balance')::numeric FROM sd),
          1000::numeric, 'so the month''s charges and the balance add up to the quarter''s deposit');
SELECT is((SELECT (x -> 'this_month' ->> 'NPL')::numeric
           FROM jsonb_array_elements(my_accounts('2024-05-31') -> 'accounts') x WHERE x ->> 'account' = 'sd_a'),
          (SELECT (account_month('sd_a', '2024-05-01') -> 'charges' -> 'total' ->> 'NPL')::numeric),
          'on the month''s last day they are the month''s statement''s');

SELECT * FROM finish();
ROLLBACK;
