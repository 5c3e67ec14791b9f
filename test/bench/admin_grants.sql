-- make bench: the regulated projects' grants for the anchor's year, sized from their jobs
-- (times 0.5 to 1.5 of what the year so far projects): some on track, some warned, some
-- retracted on the regulation day. Then statistics.
SET client_min_messages = warning;
SET search_path = public, hpcacct;
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until, note)
SELECT a.name, 'grant',
       greatest(1000, round(coalesce(u.used, 0) * 365 / greatest(1, s.anchor - s.year_start)
                            * (0.5 + bench.u(substr(a.name, 2)::bigint, 68)))),
       'hours', 'ada', s.year_start, make_date(extract(year FROM s.anchor)::integer, 12, 31), 'first session'
FROM account a
CROSS JOIN bench.site s
LEFT JOIN (SELECT l.account, sum(l.amount)::float8 AS used FROM ledger l WHERE l.kind = 'charge' GROUP BY l.account) u
  ON u.account = a.name
WHERE a.name LIKE 'r%';
VACUUM ANALYZE;
