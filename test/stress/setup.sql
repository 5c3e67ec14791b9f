-- A small site for the concurrency and crash tests: 20 projects, 40 users, one partition.
SET search_path = public, hpcacct;
INSERT INTO setting VALUES ('timezone', 'UTC');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit)
VALUES ('stress', 'cpu', 'cpu=32,mem=128G', 'cpu=1,mem=4G', 1.0 / 12, 'NPL');
INSERT INTO account (name) SELECT 'p' || i FROM generate_series(1, 20) AS i;
SELECT count(add_user('u' || i, '2024-04-02')) FROM generate_series(1, 40) AS i;
SELECT count(add_member('p' || (1 + i % 20), 'u' || i)) FROM generate_series(1, 40) AS i;
SELECT count(deposit('p' || i, '2024-04-01', 5000)) FROM generate_series(1, 20) AS i;
SELECT count(deposit('p' || i, '2024-07-01', 5000)) FROM generate_series(1, 20) AS i;
-- GENCI-style yearly grants on the stress machine, regulated monthly.
INSERT INTO regulation_machine (machine, monthly_threshold) VALUES ('stress', 10000);
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until, note)
SELECT 'p' || i, 'grant', 120000, 'NPL', 'stress', '2024-01-01', '2024-12-31', 'first session'
FROM generate_series(1, 20) AS i;
