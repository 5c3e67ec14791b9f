-- Names a statement must show as text, whatever they hold (test/notify/statements.sh): markup,
-- quotes, '&', CR/LF, U+2028, a right-to-left override, and a name longer than a file name may be.
SET search_path = hpcacct, public;
INSERT INTO setting VALUES ('timezone', 'Europe/Berlin'), ('bank_unit', E'NPL<u>&"')
    ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
CREATE TEMP TABLE n AS SELECT
    E'<script>alert(1)</script>"q''&amp;\r\nx\u2028y\u202Eevil' AS acct,
    E'<img src=x onerror=alert(2)>u"''&\u202E' AS usr,
    E'cl<b>"&''\u202E' AS cl,
    E'p</text><script>alert(3)</script>' AS part,
    repeat(E'\u00e9quipe-', 40) AS longname,
    E'=HYPERLINK("http://x")<desc>&\u202E\r\n' AS descr;
INSERT INTO hpc_user (username) SELECT usr FROM n;
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) SELECT cl, part, 'cpu=16', 'cpu=1', 1, E'NPL<u>&"' FROM n;
INSERT INTO account (name, description) SELECT acct, descr FROM n UNION ALL SELECT longname, 'long' FROM n
    UNION ALL SELECT E'\u017e-after', 'after the long one' FROM n;
INSERT INTO membership SELECT acct, usr, 'admin' FROM n;
SELECT deposit(acct, '2025-04-01', 1000), deposit(longname, '2025-04-01', 10), deposit(E'\u017e-after', '2025-04-01', 10) FROM n;
INSERT INTO regulation_machine (machine, monthly_threshold) SELECT cl, 1000000 FROM n;
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
SELECT acct, 'grant', 12000, E'NPL<u>&"', cl, '2025-01-01', '2025-12-31' FROM n;
SELECT add_quota_period(acct, '2025-04-01', '2025-09-30', 500, cl, E'NPL<u>&"') FROM n;
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state)
SELECT cl, 'h' || i, acct, usr, part, timestamptz '2025-05-03 08:00+00' + (i || ' days')::interval,
       timestamptz '2025-05-03 08:00+00' + (i || ' days')::interval + interval '5 hours', 'cpu=4', 'COMPLETED'
FROM n, generate_series(0, 5) i;
