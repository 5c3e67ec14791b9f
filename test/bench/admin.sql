-- make bench: the site for the scheduled procedures at 10 000 accounts (psql variables: anchor,
-- accounts = 10 000, jobs = jobs charged to the regulated accounts this year, file = where to
-- write them):
--   regulate()      `accounts` GENCI projects on ada, all regulated monthly, with grants for
--                   the anchor's year and jobs up to the anchor
--   open_quarter()  `accounts` HLRN users (personal accounts) in accounts / 5 projects,
--                   deposits up to the next quarter (the last run's top-ups), one project in
--                   five expired
SET client_min_messages = warning;
SET search_path = public, hpcacct;

INSERT INTO setting VALUES ('timezone', 'Europe/Berlin');
CREATE TABLE bench.site AS
SELECT :'anchor'::date AS anchor,
       make_date(extract(year FROM :'anchor'::date)::integer, 1, 1) AS year_start,
       -- the last regulation day (the 15th) up to the anchor
       CASE WHEN extract(day FROM :'anchor'::date) >= 15
            THEN date_trunc('month', :'anchor'::date)::date + 14
            ELSE (date_trunc('month', :'anchor'::date) - interval '1 month')::date + 14 END AS regulation_day,
       date_trunc('quarter', :'anchor'::date)::date AS quarter;

INSERT INTO resource (cluster, partition, node, bundle, rate, unit, description)
VALUES ('ada', 'cpu', 'cpu=32,mem=128G,node=1', 'cpu=1', 1, 'hours', 'IDRIS Ada');
INSERT INTO regulation_machine (machine, monthly_threshold, description) VALUES ('ada', 1, 'every project monthly');

-- ---- regulate: the projects, jobs this year, grants sized from the jobs ---------------------
INSERT INTO account (name, kind) SELECT 'r' || lpad(i::text, 5, '0'), 'project' FROM generate_series(1, :accounts) AS i;

COPY (
    SELECT 'ada', 'r' || g.i, 'r' || lpad((1 + g.i % :accounts)::text, 5, '0'), 'u' || (g.i % :accounts), 'cpu', NULL,
           t.start, t.start + ceil(exp(bench.u(g.i, 61) * ln(2880))) * interval '1 minute',
           'cpu=' || ceil(exp(bench.u(g.i, 62) * ln(256))), 'COMPLETED'
    FROM generate_series(1, :jobs::bigint) AS g(i), bench.site s,
         LATERAL (SELECT date_trunc('second', s.year_start::timestamp AT TIME ZONE 'Europe/Berlin'
                                     + bench.u(g.i, 60) * ((s.anchor - s.year_start - 2) * interval '1 day')) AS start) t
) TO :'file';

-- ---- open_quarter: accounts / 5 projects, `accounts` users with personal accounts -----------
INSERT INTO account (name, kind) SELECT 'h' || lpad(i::text, 5, '0'), 'project' FROM generate_series(1, :accounts / 5) AS i;
INSERT INTO account (name, kind) SELECT 'p' || lpad(i::text, 5, '0'), 'personal' FROM generate_series(1, :accounts) AS i;
INSERT INTO hpc_user (username) SELECT 'p' || lpad(i::text, 5, '0') FROM generate_series(1, :accounts) AS i;
INSERT INTO membership (account, username, role)
SELECT 'p' || lpad(i::text, 5, '0'), 'p' || lpad(i::text, 5, '0'), 'admin' FROM generate_series(1, :accounts) AS i;
INSERT INTO membership (account, username, role)  -- every user in one project, one in two in a second
SELECT DISTINCT 'h' || lpad((1 + (i * j * 7919) % (:accounts / 5))::text, 5, '0'), 'p' || lpad(i::text, 5, '0'), 'member'
FROM generate_series(1, :accounts) AS i, generate_series(1, 2) AS j
WHERE j = 1 OR bench.u(i, 63) < 0.5;
UPDATE hpc_user SET default_account = 'h' || lpad((1 + (substr(username, 2)::integer * 7919) % (:accounts / 5))::text, 5, '0')
WHERE bench.u(substr(username, 2)::bigint, 64) < 0.3;
-- projects: deposits from the previous quarter to the next; one in five none from this quarter on
INSERT INTO ledger (account, kind, amount, unit, valid_from, valid_until, note)
SELECT 'h' || lpad(i::text, 5, '0'), 'deposit', 10000, 'NPL', q, (q + interval '3 months')::date - 1, 'grant'
FROM generate_series(1, :accounts / 5) AS i, bench.site s,
     LATERAL (SELECT (s.quarter + k * interval '3 months')::date AS q FROM generate_series(-1, 1) AS k) qq
WHERE q < s.quarter OR bench.u(i, 65) >= 0.2;
-- personal accounts: the last run topped them up to the next quarter; one in ten has nothing
-- since the previous quarter (it expires now, and is deleted if it expired then too)
INSERT INTO ledger (account, kind, amount, unit, valid_from, valid_until, note)
SELECT 'p' || lpad(i::text, 5, '0'), 'deposit', 2500, 'NPL', q, (q + interval '3 months')::date - 1, 'personal allotment'
FROM generate_series(1, :accounts) AS i, bench.site s,
     LATERAL (SELECT (s.quarter + k * interval '3 months')::date AS q FROM generate_series(-2, 1) AS k) qq
WHERE bench.u(i, 66) >= 0.1 OR q < s.quarter - interval '3 months';
INSERT INTO quarter_log (quarter, account, action, target_quarter)
SELECT (s.quarter - interval '3 months')::date, 'p' || lpad(i::text, 5, '0'), 'expired', (s.quarter - interval '3 months')::date
FROM generate_series(1, :accounts) AS i, bench.site s
WHERE bench.u(i, 66) < 0.1 AND bench.u(i, 67) < 0.5;

-- ---- hand-written references ------------------------------------------------------------

-- regulate(d) for a monthly run (the 15th), set-based: every account's figures in one query,
-- consumption in one pass over this year's charges, then the retractions and the log.
CREATE FUNCTION bench.regulate_hand(d date) RETURNS void
    LANGUAGE sql
    AS $$
        WITH cfg AS MATERIALIZED (
            SELECT d AS as_of, make_date(extract(year FROM d)::integer, 1, 1) AS year_start,
                   make_date(extract(year FROM d)::integer, 12, 31) AS year_end, hpcacct.site_timezone() AS tz
        ), st AS MATERIALIZED (
            SELECT l.account, l.pool AS machine, s.monthly_threshold,
                   sum(l.amount) AS alloc,
                   coalesce(sum(l.amount) FILTER (WHERE l.kind <> 'retraction'), 0) AS granted,
                   coalesce(hpcacct.tmc(l.valid_from, l.valid_until, l.amount::float8, cfg.as_of, s.month_convention), 0) AS tmc,
                   coalesce(hpcacct.tc(l.valid_from, l.valid_until, l.amount::float8, cfg.as_of, s.month_convention)
                            - hpcacct.tc(l.valid_from, l.valid_until, l.amount::float8, cfg.year_start - 1, s.month_convention),
                            0) AS tc,
                   (array_agg(l.unit ORDER BY l.valid_from DESC, l.entry_id DESC))[1] AS unit
            FROM hpcacct.ledger l
            JOIN hpcacct.regulation_machine s ON s.machine = l.pool
            CROSS JOIN cfg
            WHERE l.kind IN ('grant', 'supplement', 'retraction') AND l.pool IS NOT NULL
              AND l.valid_from <= cfg.as_of AND l.valid_until >= cfg.year_start
            GROUP BY l.account, l.pool, s.monthly_threshold
        ), used AS (
            SELECT l.account, coalesce(r.pool, r.cluster) AS machine,
                   sum(l.amount * hpcacct.period_share(l.job_start, l.job_end, cfg.year_start::timestamp AT TIME ZONE cfg.tz,
                                                        (cfg.as_of + 1)::timestamp AT TIME ZONE cfg.tz))::float8 AS consumption
            FROM hpcacct.ledger l
            JOIN hpcacct.resource r USING (resource_id)
            CROSS JOIN cfg
            WHERE l.kind = 'charge' AND l.job_end >= cfg.year_start::timestamp AT TIME ZONE cfg.tz
              AND l.job_start < (cfg.as_of + 1)::timestamp AT TIME ZONE cfg.tz
            GROUP BY 1, 2
        ), outcome AS MATERIALIZED (
            SELECT st.*, coalesce(u.consumption, 0) AS consumption,
                   coalesce(u.consumption, 0) - st.tc AS delta,
                   CASE WHEN NOT (st.tmc > 0) OR coalesce(u.consumption, 0) - st.tc > -st.tmc THEN 'ok'
                        WHEN coalesce(u.consumption, 0) - st.tc > -2 * st.tmc THEN 'warning'
                        ELSE 'retraction' END AS result
            FROM st
            LEFT JOIN used u USING (account, machine)
            WHERE st.granted >= st.monthly_threshold
              AND NOT EXISTS (SELECT 1 FROM hpcacct.regulation_log g
                              WHERE g.account = st.account AND g.machine = st.machine AND g.run_date = d AND g.run = 'monthly')
        ), booked AS (
            INSERT INTO hpcacct.ledger (account, kind, amount, unit, pool, valid_from, valid_until, note)
            SELECT o.account, 'retraction', -round(o.tmc::numeric, 6), o.unit, o.machine, d, cfg.year_end,
                   format('hpcacct.regulate(%s): monthly regulation', d)
            FROM outcome o, cfg
            WHERE o.result = 'retraction' AND round(o.tmc::numeric, 6) > 0
            RETURNING entry_id, account, pool
        )
        INSERT INTO hpcacct.regulation_log (run_date, run, account, machine, figures_at, outcome, alloc, granted,
                                            consumption, tc, tmc, delta, used_percent, retracted, entry_id)
        SELECT d, 'monthly', o.account, o.machine, d, o.result, o.alloc, o.granted, o.consumption, o.tc, o.tmc,
               o.delta, NULL, CASE WHEN b.entry_id IS NULL THEN 0 ELSE round(o.tmc::numeric, 6) END, b.entry_id
        FROM outcome o
        LEFT JOIN booked b ON b.account = o.account AND b.pool = o.machine
    $$;

-- open_quarter(q), set-based: top-ups of the members of active projects in one INSERT, then
-- the same expiry, deletion and default-project statements as the procedure.
CREATE FUNCTION bench.open_quarter_hand(q date) RETURNS void
    LANGUAGE sql
    AS $$
        WITH cfg AS MATERIALIZED (
            SELECT hpcacct.quarter_start(q) AS this_q, hpcacct.setting_value('bank_unit') AS unit,
                   hpcacct.setting_value('personal_allotment')::numeric AS allotment
        ), active AS (
            SELECT DISTINCT x.account
            FROM (SELECT l.account FROM hpcacct.ledger l, cfg
                  WHERE l.kind IN ('deposit', 'transfer') AND l.unit = cfg.unit AND l.valid_from >= cfg.this_q
                    AND l.valid_from < cfg.this_q + interval '3 months'   -- active: this quarter
                  GROUP BY l.account
                  HAVING sum(l.amount) > 0) x
            JOIN hpcacct.account p ON p.name = x.account AND p.kind = 'project'
            CROSS JOIN cfg
            WHERE p.deleted_in IS NULL OR p.deleted_in > cfg.this_q
        ), missing AS (
            SELECT a.name, t.target, coalesce(a.personal_allotment, cfg.allotment) AS level,
                   coalesce(a.personal_allotment, cfg.allotment)
                   - coalesce((SELECT sum(l.amount) FROM hpcacct.ledger l
                               WHERE l.account = a.name AND l.kind = 'deposit' AND l.valid_from = t.target
                                 AND l.unit = cfg.unit), 0) AS amount
            FROM hpcacct.account a
            CROSS JOIN cfg
            CROSS JOIN LATERAL (SELECT (cfg.this_q + i * interval '3 months')::date AS target
                                FROM generate_series(0, 2) AS i) t
            WHERE a.kind = 'personal' AND a.deleted_in IS NULL
              AND EXISTS (SELECT 1 FROM hpcacct.membership m JOIN active p ON p.account = m.account
                          WHERE m.username = a.name)
        ), booked AS (
            INSERT INTO hpcacct.ledger (account, kind, amount, unit, valid_from, valid_until, note)
            SELECT m.name, 'deposit', m.amount, cfg.unit, m.target, (m.target + interval '3 months')::date - 1,
                   hpcacct_internal.top_up_note(m.level)   -- the note the procedure books (its once-only key)
            FROM missing m, cfg
            WHERE m.amount > 0
            RETURNING account, valid_from, amount
        )
        INSERT INTO hpcacct.quarter_log (quarter, account, action, target_quarter, amount)
        SELECT cfg.this_q, b.account, 'top_up', b.valid_from, b.amount FROM booked b, cfg
        ON CONFLICT ON CONSTRAINT quarter_log_once
        DO UPDATE SET amount = hpcacct.quarter_log.amount + EXCLUDED.amount;

        INSERT INTO hpcacct.quarter_log (quarter, account, action, target_quarter)
        SELECT hpcacct.quarter_start(q), a.name, 'expired', hpcacct.quarter_start(q)
        FROM hpcacct.account a
        WHERE a.kind = 'personal' AND a.deleted_in IS NULL
          AND NOT EXISTS (SELECT 1 FROM hpcacct.ledger l
                          WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer')
                            AND l.unit = hpcacct.setting_value('bank_unit') AND l.valid_from = hpcacct.quarter_start(q)
                          HAVING sum(l.amount) > 0)
        ON CONFLICT DO NOTHING;

        WITH deleted AS (
            UPDATE hpcacct.account a SET deleted_in = hpcacct.quarter_start(q)
            WHERE a.kind = 'personal' AND a.deleted_in IS NULL
              AND EXISTS (SELECT 1 FROM hpcacct.quarter_log g
                          WHERE g.account = a.name AND g.action = 'expired' AND g.quarter = hpcacct.quarter_start(q))
              AND EXISTS (SELECT 1 FROM hpcacct.quarter_log g
                          WHERE g.account = a.name AND g.action = 'expired'
                            AND g.quarter = (hpcacct.quarter_start(q) - interval '3 months')::date)
            RETURNING a.name
        )
        INSERT INTO hpcacct.quarter_log (quarter, account, action, target_quarter)
        SELECT hpcacct.quarter_start(q), d.name, 'deleted', hpcacct.quarter_start(q) FROM deleted d
        ON CONFLICT DO NOTHING;

        -- default projects that are expired or deleted now (inline: no function per user)
        WITH stale AS (
            SELECT u.username, u.default_account
            FROM hpcacct.hpc_user u
            JOIN hpcacct.account a ON a.name = u.default_account
            WHERE (a.deleted_in IS NOT NULL AND a.deleted_in <= hpcacct.quarter_start(q))
               OR NOT EXISTS (SELECT 1 FROM hpcacct.ledger l
                              WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer')
                                AND l.unit = hpcacct.setting_value('bank_unit')
                                AND l.valid_from >= hpcacct.quarter_start(q)
                              GROUP BY hpcacct.quarter_start(l.valid_from)
                              HAVING sum(l.amount) > 0)
            FOR UPDATE OF u
        ), reset AS (
            UPDATE hpcacct.hpc_user u SET default_account = NULL
            FROM stale s WHERE u.username = s.username
            RETURNING s.username, s.default_account AS old_default
        )
        INSERT INTO hpcacct.quarter_log (quarter, account, action, target_quarter, username)
        SELECT hpcacct.quarter_start(q), r.old_default, 'default_reset', hpcacct.quarter_start(q), r.username FROM reset r
        ON CONFLICT DO NOTHING;
    $$;

-- What a quarter-start run wrote (procedure or reference), for the correctness check.
CREATE FUNCTION bench.open_quarter_outcome(how text, q date)
    RETURNS TABLE (what text, account text, target date, amount numeric, username text)
    LANGUAGE plpgsql
    AS $$
    DECLARE
        last_entry bigint := (SELECT coalesce(max(entry_id), 0) FROM hpcacct.ledger);
    BEGIN
        IF how = 'procedure' THEN
            CALL hpcacct.open_quarter(q);
        ELSE
            PERFORM bench.open_quarter_hand(q);
        END IF;
        RETURN QUERY
        SELECT 'log: ' || g.action, g.account, g.target_quarter, g.amount, g.username
        FROM hpcacct.quarter_log g WHERE g.quarter = hpcacct.quarter_start(q)
        UNION ALL
        SELECT 'ledger: ' || l.kind, l.account, l.valid_from, l.amount, l.note
        FROM hpcacct.ledger l WHERE l.entry_id > last_entry
        UNION ALL
        SELECT 'deleted', a.name, a.deleted_in, NULL, NULL FROM hpcacct.account a WHERE a.deleted_in IS NOT NULL
        UNION ALL
        SELECT 'default', u.username, NULL, NULL, u.default_account FROM hpcacct.hpc_user u
        WHERE u.default_account IS NOT NULL;
    END
    $$;
