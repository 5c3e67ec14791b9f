-- ---------------------------------------------------------------------------------------
-- The charge rollup: the ledger's charges summed per account, resource, submitter, month
-- they count in (pro rata by wall-clock time, site time zone) and month the jobs ended in.
-- A statement trigger on the ledger appends the rollup rows of every statement's charges
-- in the same transaction, so the rollup is always the ledger's sum; reports read
-- thousands of rollup rows instead of millions of ledger rows. Rows are deltas (one per
-- group and statement; a loader never updates a row, so concurrent loaders do not lock each
-- other); compact_rollup() merges them into one row per group (and adds a late delta of a
-- folded month to its row), rebuild_rollup() recomputes everything from the ledger.
-- ---------------------------------------------------------------------------------------

-- The weight 2^(-(at - ts) / half_life) of usage dated ts at the instant at (0 when ts is after
-- at): the same function as decayed_usage's, so the rollup and the aggregate decay alike. An
-- age of more than about 1 074 half-lives weighs 0, not an underflow error.
CREATE FUNCTION @extschema@.decay_weight(ts timestamptz, at timestamptz, half_life interval) RETURNS float8
    AS 'MODULE_PATHNAME', 'hpcacct_decay_weight' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.decay_weight(timestamptz, timestamptz, interval) IS
    'Half-life decay weight 2^(-(at - ts) / half_life); 0 for ts after at and for ages past float8''s range';

CREATE TABLE @extschema@.charge_rollup (
    account     text NOT NULL,
    resource_id bigint NOT NULL,
    unit        text NOT NULL,
    submitter   text,
    month       date NOT NULL,
    end_month   date NOT NULL,
    amount      numeric NOT NULL,
    job_amount  numeric NOT NULL,
    decayed     float8 NOT NULL,
    folded      boolean NOT NULL DEFAULT false
);
CREATE INDEX charge_rollup_account ON @extschema@.charge_rollup (account, month);
-- The rows not yet folded (the current month's, late reversals): what reports read next to the bases.
CREATE INDEX charge_rollup_unfolded ON @extschema@.charge_rollup (end_month) WHERE NOT folded;
-- The folded rows: one per group, which compact_rollup() adds late rows of folded months to.
CREATE UNIQUE INDEX charge_rollup_folded ON @extschema@.charge_rollup
    (account, resource_id, unit, submitter, month, end_month) NULLS NOT DISTINCT WHERE folded;
COMMENT ON TABLE @extschema@.charge_rollup IS
    'Charges (and reversals) summed per account, resource, unit, submitter, month counted in and month ended in; '
    'maintained with the ledger, derived from it';
COMMENT ON COLUMN @extschema@.charge_rollup.month IS
    'First day of the month (site time zone) the amount counts in: charges are split pro rata by wall-clock time';
COMMENT ON COLUMN @extschema@.charge_rollup.end_month IS 'First day of the month (site time zone) the jobs ended in';
COMMENT ON COLUMN @extschema@.charge_rollup.job_amount IS
    'Sum of the jobs'' whole amounts, on their first month''s row: what they charged, whatever month they ran in';
COMMENT ON COLUMN @extschema@.charge_rollup.decayed IS
    'Sum of amount x 2^(-(end of end_month - job_end) / half_life) of the jobs, on their first month''s row: '
    'fairshare() scales it to any later instant';
COMMENT ON COLUMN @extschema@.charge_rollup.folded IS
    'Its decayed sum is in hpcacct.fairshare_base and its amount in hpcacct.usage_base: one row per group, which '
    'compact_rollup() adds late rows to (new rows are not folded)';

-- The half-life fair share needs every month's decayed sum, scaled to `at`. compact_rollup()
-- folds the months up to the one before the current into one row per account, resource,
-- unit and submitter, decayed to the end of that month (`through`), so that fairshare()
-- reads one row per user for the past and the rollup only for what came since.
CREATE TABLE @extschema@.fairshare_base (
    account     text NOT NULL,
    resource_id bigint NOT NULL,
    unit        text NOT NULL,
    submitter   text,
    through     date NOT NULL,
    decayed     float8 NOT NULL,
    job_amount  numeric NOT NULL
);
CREATE UNIQUE INDEX fairshare_base_group ON @extschema@.fairshare_base (account, resource_id, unit, submitter)
    NULLS NOT DISTINCT;
COMMENT ON TABLE @extschema@.fairshare_base IS
    'The folded rows of charge_rollup per account, resource, unit and submitter: decayed sums to the end of the '
    'month `through`, whole amounts; written by compact_rollup(), emptied by rebuild_rollup()';
COMMENT ON COLUMN @extschema@.fairshare_base.through IS
    'First day of the last month folded in (site time zone); decayed is scaled to the end of that month';

-- The same folded rows without the submitter, per month counted in: the usage per account
-- and per resource (and the fair share's year usage) read about a quarter of the rows.
CREATE TABLE @extschema@.usage_base (
    account     text NOT NULL,
    resource_id bigint NOT NULL,
    unit        text NOT NULL,
    month       date NOT NULL,
    through     date NOT NULL,
    amount      numeric NOT NULL
);
CREATE INDEX usage_base_through ON @extschema@.usage_base (through);
CREATE UNIQUE INDEX usage_base_group ON @extschema@.usage_base (account, resource_id, unit, month);
COMMENT ON TABLE @extschema@.usage_base IS
    'The folded rows of charge_rollup per account, resource, unit and month counted in (their amounts); '
    'written by compact_rollup(), emptied by rebuild_rollup()';
COMMENT ON COLUMN @extschema@.usage_base.through IS
    'First day of the last month folded in (site time zone) when the row was last added to: the jobs in it ended '
    'before the next month; the latest is the whole base''s';

-- The consumption rollup, for GENCI's regulation report: consumption before an instant
-- (consumption_before()) at the instants the report needs, 1 January and the 16th of each
-- month at 00:00 (the day after the 15th), site time zone. Per account, resource and such
-- boundary: the whole amounts of the jobs that ended by it (and after the boundary before),
-- and the share before it of the jobs running across it. Consumption before boundary b is
-- the sum of `ended` up to b plus `running` at b: exactly consumption_before()'s numerics.
CREATE TABLE @extschema@.consumption_rollup (
    account     text NOT NULL,
    resource_id bigint NOT NULL,
    boundary    date NOT NULL,
    ended       numeric NOT NULL,
    running     numeric NOT NULL,
    merged      boolean NOT NULL DEFAULT false
);
-- The delta rows, which compact_rollup() merges, and the merged rows, one per group.
CREATE INDEX consumption_rollup_unmerged ON @extschema@.consumption_rollup (boundary) WHERE NOT merged;
CREATE UNIQUE INDEX consumption_rollup_merged ON @extschema@.consumption_rollup (account, resource_id, boundary)
    WHERE merged;
-- One account's rows (consumption_before() at a boundary; the merged index holds only some).
CREATE INDEX consumption_rollup_account ON @extschema@.consumption_rollup (account, boundary);
COMMENT ON TABLE @extschema@.consumption_rollup IS
    'Charges per account, resource and regulation boundary (1 January, the 16th of each month): amounts of the '
    'jobs ended by it, shares before it of the jobs running across it; maintained with the ledger, derived from it';
COMMENT ON COLUMN @extschema@.consumption_rollup.boundary IS
    '1 January or the 16th of a month, at 00:00 in the site time zone';
COMMENT ON COLUMN @extschema@.consumption_rollup.merged IS
    'One row per account, resource and boundary, which compact_rollup() adds the delta rows to (new rows are not)';

-- The first regulation boundary strictly after a local time. Inlined (SQL-standard body).
CREATE FUNCTION @extschema@.regulation_boundary_after(local_time timestamp) RETURNS date
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE
        WHEN local_time < pg_catalog.date_trunc('month', local_time) + interval '15 days'
            THEN (pg_catalog.date_trunc('month', local_time) + interval '15 days')::date
        WHEN pg_catalog.date_part('month', local_time) = 12
            THEN (pg_catalog.date_trunc('month', local_time) + interval '1 month')::date
        ELSE (pg_catalog.date_trunc('month', local_time) + interval '1 month 15 days')::date
    END;
COMMENT ON FUNCTION @extschema@.regulation_boundary_after(timestamp) IS
    'First regulation boundary (1 January, or the 16th of a month, at 00:00) strictly after a local time';

-- The rollup rows of the charges in `source` (a table or a parenthesized query with the
-- ledger's columns), as one query's text: the trigger inserts them for its transition table,
-- rebuild_rollup() for the whole ledger, roll_up_pending() for the pending ranges, and the
-- view charge_rollup_pending computes them on read. A job inside one month (almost all)
-- takes the short branch without splitting.
CREATE FUNCTION hpcacct_internal.rollup_select_sql(source text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT pg_catalog.format($q$
            WITH z AS MATERIALIZED (  -- once per statement
                SELECT @extschema@.site_timezone() AS tz,
                       @extschema@.setting_value('half_life')::interval AS half_life
            ), entries AS (
                SELECT e.account, e.resource_id, e.unit, e.submitter, e.job_start, e.job_end, e.amount, e.tz,
                       e.local_end, e.first_month, e.last_month,
                       e.amount::float8 * @extschema@.decay_weight(e.job_end,
                           (e.last_month + interval '1 month') AT TIME ZONE e.tz, e.half_life) AS decayed
                FROM (SELECT e.*, pg_catalog.date_trunc('month', e.local_start) AS first_month,
                             pg_catalog.date_trunc('month', e.local_end) AS last_month
                      -- (the months as local_time() counts them: where a midnight comes twice, from PostgreSQL's)
                      FROM (SELECT e.account, e.resource_id, e.unit, e.submitter, e.job_start, e.job_end, e.amount,
                                   z.tz, z.half_life, hpcacct_internal.local_time(e.job_start, z.tz) AS local_start,
                                   hpcacct_internal.local_time(e.job_end, z.tz) AS local_end
                            FROM %s e, z
                            WHERE e.kind = 'charge'
                            OFFSET 0) e  -- local times once per row
                      OFFSET 0) e  -- each month once per row, not once per use
            )
            SELECT s.account, s.resource_id, s.unit, s.submitter, s.month, s.end_month, sum(s.amount) AS amount,
                   sum(s.job_amount) AS job_amount, sum(s.decayed) AS decayed
            FROM (
                SELECT e.account, e.resource_id, e.unit, e.submitter, e.first_month::date AS month,
                       e.last_month::date AS end_month, e.amount, e.amount AS job_amount, e.decayed
                FROM entries e
                WHERE e.first_month = e.last_month
                UNION ALL
                SELECT e.account, e.resource_id, e.unit, e.submitter, m.month::date, e.last_month::date,
                       e.amount * @extschema@.period_share(e.job_start, e.job_end, m.month AT TIME ZONE e.tz,
                                                           (m.month + interval '1 month') AT TIME ZONE e.tz),
                       CASE WHEN m.month = e.first_month THEN e.amount ELSE 0 END,
                       CASE WHEN m.month = e.first_month THEN e.decayed ELSE 0 END
                FROM entries e
                CROSS JOIN LATERAL pg_catalog.generate_series(e.first_month, e.last_month, interval '1 month') AS m(month)
                WHERE e.first_month <> e.last_month AND m.month < e.local_end
            ) s
            GROUP BY s.account, s.resource_id, s.unit, s.submitter, s.month, s.end_month
            $q$, source)
    $$;
COMMENT ON FUNCTION hpcacct_internal.rollup_select_sql(text) IS
    'The query of the charge rollup rows of the ledger rows in a table or query';

CREATE FUNCTION hpcacct_internal.rollup_insert_sql(source text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT 'INSERT INTO @extschema@.charge_rollup (account, resource_id, unit, submitter, month, end_month, amount, '
               'job_amount, decayed)' || hpcacct_internal.rollup_select_sql(source)
    $$;
COMMENT ON FUNCTION hpcacct_internal.rollup_insert_sql(text) IS
    'The INSERT statement adding the charge rollup rows of the ledger rows in a table or query';

-- The same for the consumption rollup. A job that crosses no boundary (almost all) gives
-- one row; one that runs across boundaries also a share before each of them.
CREATE FUNCTION hpcacct_internal.consumption_rollup_select_sql(source text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT pg_catalog.format($q$
            WITH z AS MATERIALIZED (
                SELECT @extschema@.site_timezone() AS tz
            ), entries AS (
                SELECT e.account, e.resource_id, e.job_start, e.job_end, e.amount, e.tz,
                       -- ended by: the first boundary at or after the end (a job of zero length:
                       -- after its start, where it counts)
                       @extschema@.regulation_boundary_after(
                           CASE WHEN e.job_end > e.job_start THEN e.local_end - interval '1 microsecond'
                                ELSE e.local_start END) AS ended_by,
                       @extschema@.regulation_boundary_after(e.local_start) AS first_after_start
                FROM (SELECT e.account, e.resource_id, e.job_start, e.job_end, e.amount, z.tz,
                             -- (as local_time() counts them: where a midnight comes twice, from PostgreSQL's)
                             hpcacct_internal.local_time(e.job_start, z.tz) AS local_start,
                             hpcacct_internal.local_time(e.job_end, z.tz) AS local_end
                      FROM %s e, z
                      WHERE e.kind = 'charge'
                      OFFSET 0) e  -- local times once per row, not once per use in the inlined function
            )
            SELECT s.account, s.resource_id, s.boundary, sum(s.ended) AS ended, sum(s.running) AS running
            FROM (
                SELECT e.account, e.resource_id, e.ended_by AS boundary, e.amount AS ended, 0 AS running
                FROM entries e
                UNION ALL
                -- the boundaries from the first after the start up to the one it ended by
                SELECT e.account, e.resource_id, b.boundary, 0,
                       e.amount * @extschema@.period_share(e.job_start, e.job_end, '-infinity',
                                                           b.boundary::timestamp AT TIME ZONE e.tz)
                FROM entries e
                CROSS JOIN LATERAL pg_catalog.generate_series(
                    pg_catalog.date_trunc('month', e.first_after_start::timestamp), e.ended_by::timestamp,
                    interval '1 month') AS m(month)
                CROSS JOIN LATERAL (VALUES ((m.month + interval '15 days')::date),
                                           (CASE WHEN pg_catalog.date_part('month', m.month) = 1
                                                 THEN m.month::date END)) AS b(boundary)
                WHERE e.first_after_start < e.ended_by
                  AND b.boundary >= e.first_after_start AND b.boundary < e.ended_by
            ) s
            GROUP BY s.account, s.resource_id, s.boundary
            $q$, source)
    $$;
COMMENT ON FUNCTION hpcacct_internal.consumption_rollup_select_sql(text) IS
    'The query of the consumption rollup rows of the ledger rows in a table or query';

CREATE FUNCTION hpcacct_internal.consumption_rollup_insert_sql(source text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT 'INSERT INTO @extschema@.consumption_rollup (account, resource_id, boundary, ended, running)'
               || hpcacct_internal.consumption_rollup_select_sql(source)
    $$;
COMMENT ON FUNCTION hpcacct_internal.consumption_rollup_insert_sql(text) IS
    'The INSERT statement adding the consumption rollup rows of the ledger rows in a table or query';

-- Deferred rollups (setting rollup = deferred): the trigger records the entry ids of each
-- statement's charges as ranges of consecutive ids here, in the loader's transaction, and
-- roll_up_pending() rolls them up later. Until then the views *_rollup_pending compute their
-- rollup rows on read, so that reports, which read the rollups with them, stay exact.
-- Local derived state: not dumped (a restore charges the ledger again), never published.
CREATE TABLE @extschema@.rollup_pending (
    first_entry_id bigint PRIMARY KEY,
    last_entry_id  bigint NOT NULL,
    CONSTRAINT rollup_pending_range CHECK (last_entry_id >= first_entry_id)
);
COMMENT ON TABLE @extschema@.rollup_pending IS
    'Ranges of ledger entry ids of charges not rolled up yet (setting rollup = deferred): roll_up_pending() rolls '
    'them up; reports add their rollup rows on read';
COMMENT ON COLUMN @extschema@.rollup_pending.first_entry_id IS 'First entry id of the range';
COMMENT ON COLUMN @extschema@.rollup_pending.last_entry_id IS 'Last entry id of the range (included)';
-- Analyzed empty: the planner takes a table never analyzed for 10 pages, and autovacuum never
-- analyzes one nothing is written to (rollup = immediate). Its pending branch, a range join with
-- the ledger, was then costed at millions in every bank read, which PostgreSQL's default jit
-- compiled at each call (balance(), check_submit(): 0.8 s each at 80 000 ledger rows).
ANALYZE @extschema@.rollup_pending;

-- The ledger rows in the pending ranges (one range: an index range scan of the ledger), rolled
-- up on read by a function that plans that query only when something is pending. In a view, the
-- planner costed it by the ledger's size even with nothing pending (1 million at 220 000 ledger
-- rows), and PostgreSQL's default jit then compiled every report reading the rollups
-- (regulation_report: 2 s instead of 0.26 s); a function scan is costed at its ROWS and COST.
-- Without JIT, as charges_ended_by(): with 20 000 charges pending, compiling that query took
-- about 1 s of each balance() (0.12 s without).
-- The functions and views run as their caller: the ledger's row-level security shows a portal
-- user the pending rows of its accounts only, as the rollups' own policies do.
DO $do$
DECLARE
    pending constant text := '(SELECT l.* FROM @extschema@.ledger l JOIN @extschema@.rollup_pending p '
                             'ON l.entry_id BETWEEN p.first_entry_id AND p.last_entry_id)';
    body constant text := $b$
        #variable_conflict use_column
        BEGIN
            IF EXISTS (SELECT FROM @extschema@.rollup_pending) THEN
                RETURN QUERY %s;
            END IF;
        END
    $b$;
BEGIN
    EXECUTE pg_catalog.format(
        'CREATE FUNCTION hpcacct_internal.charge_rollup_pending_rows() '
        'RETURNS TABLE (account text, resource_id bigint, unit text, submitter text, month date, end_month date, '
        'amount numeric, job_amount numeric, decayed float8) '
        'LANGUAGE plpgsql STABLE PARALLEL RESTRICTED ROWS 1 SET search_path = pg_catalog, pg_temp SET jit = off AS %L',
        pg_catalog.format(body, hpcacct_internal.rollup_select_sql(pending)));
    EXECUTE pg_catalog.format(
        'CREATE FUNCTION hpcacct_internal.consumption_rollup_pending_rows() '
        'RETURNS TABLE (account text, resource_id bigint, boundary date, ended numeric, running numeric) '
        'LANGUAGE plpgsql STABLE PARALLEL RESTRICTED ROWS 1 SET search_path = pg_catalog, pg_temp SET jit = off AS %L',
        pg_catalog.format(body, hpcacct_internal.consumption_rollup_select_sql(pending)));
END
$do$;
COMMENT ON FUNCTION hpcacct_internal.charge_rollup_pending_rows() IS
    'The charge rollup rows of the pending charges (rollup_pending), computed when called; none when nothing is pending';
COMMENT ON FUNCTION hpcacct_internal.consumption_rollup_pending_rows() IS
    'The consumption rollup rows of the pending charges (rollup_pending), computed when called; none when nothing is '
    'pending';
CREATE VIEW hpcacct_internal.charge_rollup_pending WITH (security_invoker = true) AS
    SELECT p.account, p.resource_id, p.unit, p.submitter, p.month, p.end_month, p.amount, p.job_amount, p.decayed,
           false AS folded
    FROM hpcacct_internal.charge_rollup_pending_rows() p;
CREATE VIEW hpcacct_internal.consumption_rollup_pending WITH (security_invoker = true) AS
    SELECT p.account, p.resource_id, p.boundary, p.ended, p.running, false AS merged
    FROM hpcacct_internal.consumption_rollup_pending_rows() p;
COMMENT ON VIEW hpcacct_internal.charge_rollup_pending IS
    'The charge rollup rows of the pending charges (rollup_pending), computed on read: new rows, not folded';
COMMENT ON VIEW hpcacct_internal.consumption_rollup_pending IS
    'The consumption rollup rows of the pending charges (rollup_pending), computed on read: delta rows, not merged';

-- What reports read: the rollups with the rows of the pending charges, exact at every instant.
-- With nothing pending, the second branch is one look at the empty rollup_pending.
CREATE VIEW hpcacct_internal.charge_rollup_exact WITH (security_invoker = true) AS
    SELECT c.account, c.resource_id, c.unit, c.submitter, c.month, c.end_month, c.amount, c.job_amount, c.decayed,
           c.folded
    FROM @extschema@.charge_rollup c
    UNION ALL
    SELECT p.account, p.resource_id, p.unit, p.submitter, p.month, p.end_month, p.amount, p.job_amount, p.decayed,
           p.folded
    FROM hpcacct_internal.charge_rollup_pending p;
COMMENT ON VIEW hpcacct_internal.charge_rollup_exact IS
    'hpcacct.charge_rollup and the rows of the charges not rolled up yet: what reports read';
CREATE VIEW hpcacct_internal.consumption_rollup_exact WITH (security_invoker = true) AS
    SELECT c.account, c.resource_id, c.boundary, c.ended, c.running, c.merged
    FROM @extschema@.consumption_rollup c
    UNION ALL
    SELECT p.account, p.resource_id, p.boundary, p.ended, p.running, p.merged
    FROM hpcacct_internal.consumption_rollup_pending p;
COMMENT ON VIEW hpcacct_internal.consumption_rollup_exact IS
    'hpcacct.consumption_rollup and the rows of the charges not rolled up yet: what reports read';
-- Invoker's rights: a caller reads through them what the ledger, the rollups and
-- rollup_pending let it read, no more.
GRANT SELECT ON hpcacct_internal.charge_rollup_pending, hpcacct_internal.consumption_rollup_pending,
                hpcacct_internal.charge_rollup_exact, hpcacct_internal.consumption_rollup_exact TO PUBLIC;

-- The trigger runs those statements as static SQL, so that PL/pgSQL keeps their plans: a
-- loader inserting one job per statement does not plan them again for every job. Their text
-- is pasted in from the two *_insert_sql('new_entries') when the function is created.
-- Deferred: the statement's charge ids as ranges of consecutive ids (gaps and islands; a
-- concurrent loader's ids interleave, and a range of consecutive ids of the transition table
-- holds this statement's rows only); one range, without sorting, when the ids have no gap.
DO $do$
BEGIN
    EXECUTE pg_catalog.format(
        'CREATE FUNCTION hpcacct_internal.roll_up_charges() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER '
        'SET search_path = pg_catalog, pg_temp AS %L',
        pg_catalog.format(E'\n    DECLARE\n'
                          '        first_id bigint;\n'
                          '        last_id bigint;\n'
                          '        charges bigint;\n'
                          '    BEGIN\n'
                          '        IF TG_RELID <> ''@extschema@.ledger''::regclass OR TG_OP <> ''INSERT'' OR TG_LEVEL <> ''STATEMENT'' THEN\n'
                          '            RAISE EXCEPTION ''roll_up_charges() is the statement trigger of hpcacct.ledger only''\n'
                          '                USING ERRCODE = ''trigger_protocol_violated'';\n'
                          '        END IF;\n'
                          '        IF @extschema@.setting_value(''rollup'') = ''deferred'' THEN\n'
                          '            SELECT min(e.entry_id), max(e.entry_id), count(*) INTO first_id, last_id, charges\n'
                          '            FROM new_entries e WHERE e.kind = ''charge'';\n'
                          '            IF charges = last_id - first_id + 1 THEN\n'
                          '                INSERT INTO @extschema@.rollup_pending (first_entry_id, last_entry_id)\n'
                          '                VALUES (first_id, last_id);\n'
                          '            ELSIF charges > 0 THEN\n'
                          '                INSERT INTO @extschema@.rollup_pending (first_entry_id, last_entry_id)\n'
                          '                SELECT min(i.entry_id), max(i.entry_id)\n'
                          '                FROM (SELECT e.entry_id, e.entry_id - pg_catalog.row_number() OVER (ORDER BY e.entry_id) AS island\n'
                          '                      FROM new_entries e WHERE e.kind = ''charge'') i\n'
                          '                GROUP BY i.island;\n'
                          '            END IF;\n'
                          '            RETURN NULL;\n'
                          '        END IF;\n'
                          '        IF NOT EXISTS (SELECT 1 FROM new_entries e WHERE e.kind = ''charge'') THEN\n'
                          '            RETURN NULL;\n'
                          '        END IF;\n'
                          '%s;\n'
                          '%s;\n'
                          '        RETURN NULL;\n'
                          '    END\n    ', hpcacct_internal.rollup_insert_sql('new_entries'),
                          hpcacct_internal.consumption_rollup_insert_sql('new_entries')));
END
$do$;
COMMENT ON FUNCTION hpcacct_internal.roll_up_charges() IS
    'Statement trigger of hpcacct.ledger: adds the charge and consumption rollup rows of the statement''s charges '
    '(rollup = deferred: records their entry ids in rollup_pending)';
-- it writes the rollups with the owner's rights: not for PUBLIC (and it refuses any table but the ledger)
REVOKE EXECUTE ON FUNCTION hpcacct_internal.roll_up_charges() FROM PUBLIC;
CREATE TRIGGER ledger_roll_up AFTER INSERT ON @extschema@.ledger
    REFERENCING NEW TABLE AS new_entries
    FOR EACH STATEMENT EXECUTE FUNCTION hpcacct_internal.roll_up_charges();

-- Recomputes the rollup from the ledger: after a change of the site's time zone or the
-- fair-share half-life, which its months and decay depend on.
CREATE FUNCTION @extschema@.rebuild_rollup() RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        rows_added bigint;
    BEGIN
        LOCK TABLE @extschema@.ledger IN SHARE MODE;  -- no charge is booked meanwhile
        PERFORM hpcacct_internal.run_alone('rollup');  -- no compaction meanwhile
        DELETE FROM @extschema@.fairshare_base;
        DELETE FROM @extschema@.usage_base;
        DELETE FROM @extschema@.charge_rollup;
        DELETE FROM @extschema@.rollup_pending;  -- every charge is rolled up below
        EXECUTE hpcacct_internal.rollup_insert_sql('@extschema@.ledger');
        GET DIAGNOSTICS rows_added = ROW_COUNT;
        DELETE FROM @extschema@.consumption_rollup;
        EXECUTE hpcacct_internal.consumption_rollup_insert_sql('@extschema@.ledger');
        RETURN rows_added;
    END
    $$;
COMMENT ON FUNCTION @extschema@.rebuild_rollup() IS
    'Recomputes hpcacct.charge_rollup and hpcacct.consumption_rollup from the ledger (automatic when the time zone '
    'or half-life changes) and empties rollup_pending; returns the rows of charge_rollup';
REVOKE EXECUTE ON FUNCTION @extschema@.rebuild_rollup() FROM PUBLIC;

-- Rolls up the pending charges (setting rollup = deferred) with the trigger's statements, over
-- the ledger rows of the ranges it takes out of rollup_pending. Run it every minute (pg_cron).
-- Concurrency: it waits for compactions and rebuilds (run_alone('rollup')), and two calls
-- wait for each other on it. Without that lock the DELETE's row locks would still do: a second
-- call's DELETE waits for the first's transaction and then skips the ranges it deleted, so no
-- range is rolled up twice. Ranges a loader commits meanwhile stay for the next call. No
-- deadlock with rebuild_rollup(), which locks the ledger (SHARE) before this lock: this
-- function only reads the ledger (ACCESS SHARE, which SHARE does not block). A re-run finds
-- nothing and changes nothing. Returns the charges (ledger rows) it rolled up. No JIT: the
-- statements' month series are costed at 333 rows a charge, so 20 000 pending charges were
-- compiled (0.3 s, with inlining) for a run of 0.3 s whose per-row work compiled code cannot shorten.
CREATE FUNCTION @extschema@.roll_up_pending() RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET jit = off
    AS $$
    DECLARE
        taken constant text := '(SELECT l.* FROM @extschema@.ledger l '
                               'JOIN ROWS FROM (pg_catalog.unnest($1::bigint[]), pg_catalog.unnest($2::bigint[])) '
                               'AS p(first_entry_id, last_entry_id) '
                               'ON l.entry_id BETWEEN p.first_entry_id AND p.last_entry_id)';
        firsts bigint[];
        lasts bigint[];
        charges bigint;
    BEGIN
        PERFORM hpcacct_internal.run_alone('rollup');
        WITH deleted AS (
            DELETE FROM @extschema@.rollup_pending p RETURNING p.first_entry_id, p.last_entry_id
        )
        SELECT pg_catalog.array_agg(d.first_entry_id), pg_catalog.array_agg(d.last_entry_id),
               coalesce(sum(d.last_entry_id - d.first_entry_id + 1), 0)
        INTO firsts, lasts, charges
        FROM deleted d;
        IF charges > 0 THEN
            EXECUTE hpcacct_internal.rollup_insert_sql(taken) USING firsts, lasts;
            EXECUTE hpcacct_internal.consumption_rollup_insert_sql(taken) USING firsts, lasts;
        END IF;
        RETURN charges;
    END
    $$;
COMMENT ON FUNCTION @extschema@.roll_up_pending() IS
    'Rolls up the charges recorded in rollup_pending (setting rollup = deferred) and empties it; returns the charges '
    'rolled up (0 when nothing is pending)';
REVOKE EXECUTE ON FUNCTION @extschema@.roll_up_pending() FROM PUBLIC;

-- Folds the rollups' new rows, up to the month through_month: merges the consumption
-- rollup's delta rows into its merged rows, and the charge rollup's rows not folded (the
-- partial index: the new deltas, the months not folded yet) into one row per group, adding
-- a late row of a folded month to that month's folded row; the groups that ended by the end
-- of through_month are folded, i.e. added to fairshare_base (decayed to that month's end)
-- and usage_base. When through_month advances, fairshare_base is first decayed by the time
-- between the two months' ends (its rows are few: one per user and resource); usage_base's
-- rows keep the month of the fold that last added to them (its readers take the latest). Work in proportion to the rows not folded, not to the
-- rollup. The same sums as folding everything at once, numerics exactly, decayed sums up to
-- float8's rounding. The base never moves back: an earlier through_month folds up to the
-- base's month. Internal: compact_rollup() folds up to the month before the current.
CREATE FUNCTION hpcacct_internal.fold_rollup(through_month date) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        tz constant text := @extschema@.site_timezone();
        half_life constant interval := @extschema@.setting_value('half_life')::interval;
        base_through date;
        rows_merged bigint;
    BEGIN
        IF through_month IS NULL THEN
            RAISE EXCEPTION 'the month to fold up to must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF through_month <> pg_catalog.date_trunc('month', through_month)
           OR through_month >= pg_catalog.date_trunc('month', pg_catalog.now() AT TIME ZONE tz) THEN
            RAISE EXCEPTION 'cannot fold up to %: not the first day of a month before the current one', through_month
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        PERFORM hpcacct_internal.run_alone('rollup');
        PERFORM @extschema@.roll_up_pending();  -- the pending charges first
        SELECT greatest((SELECT max(b.through) FROM @extschema@.fairshare_base b),
                        (SELECT max(b.through) FROM @extschema@.usage_base b))
            INTO base_through;
        through_month := greatest(through_month, base_through);
        IF base_through < through_month THEN
            UPDATE @extschema@.fairshare_base b
            SET decayed = b.decayed * @extschema@.decay_weight(
                              (base_through + interval '1 month')::timestamp AT TIME ZONE tz,
                              (through_month + interval '1 month')::timestamp AT TIME ZONE tz, half_life),
                through = through_month;
        END IF;
        WITH moved_consumption AS (
            DELETE FROM @extschema@.consumption_rollup c WHERE NOT c.merged
            RETURNING c.account, c.resource_id, c.boundary, c.ended, c.running
        ), merged_consumption AS (
            INSERT INTO @extschema@.consumption_rollup AS c (account, resource_id, boundary, ended, running, merged)
            SELECT m.account, m.resource_id, m.boundary, sum(m.ended), sum(m.running), true
            FROM moved_consumption m
            GROUP BY m.account, m.resource_id, m.boundary
            ON CONFLICT (account, resource_id, boundary) WHERE merged
            DO UPDATE SET ended = c.ended + excluded.ended, running = c.running + excluded.running
        ), moved AS (
            DELETE FROM @extschema@.charge_rollup c WHERE NOT c.folded
            RETURNING c.account, c.resource_id, c.unit, c.submitter, c.month, c.end_month, c.amount, c.job_amount,
                      c.decayed
        ), groups AS MATERIALIZED (
            SELECT m.account, m.resource_id, m.unit, m.submitter, m.month, m.end_month, sum(m.amount) AS amount,
                   sum(m.job_amount) AS job_amount, sum(m.decayed) AS decayed
            FROM moved m
            GROUP BY m.account, m.resource_id, m.unit, m.submitter, m.month, m.end_month
        ), merged AS (
            INSERT INTO @extschema@.charge_rollup AS c (account, resource_id, unit, submitter, month, end_month, amount,
                                                        job_amount, decayed, folded)
            SELECT g.account, g.resource_id, g.unit, g.submitter, g.month, g.end_month, g.amount, g.job_amount,
                   g.decayed, g.end_month <= through_month
            FROM groups g
            ON CONFLICT (account, resource_id, unit, submitter, month, end_month) WHERE folded
            DO UPDATE SET amount = c.amount + excluded.amount, job_amount = c.job_amount + excluded.job_amount,
                          decayed = c.decayed + excluded.decayed
            RETURNING 1
        ), new_base AS (
            INSERT INTO @extschema@.fairshare_base AS b (account, resource_id, unit, submitter, through, decayed,
                                                         job_amount)
            SELECT g.account, g.resource_id, g.unit, g.submitter, through_month,
                   sum(g.decayed * @extschema@.decay_weight(
                                       (g.end_month + interval '1 month')::timestamp AT TIME ZONE tz,
                                       (through_month + interval '1 month')::timestamp AT TIME ZONE tz, half_life)),
                   sum(g.job_amount)
            FROM groups g
            WHERE g.end_month <= through_month
            GROUP BY g.account, g.resource_id, g.unit, g.submitter
            ON CONFLICT (account, resource_id, unit, submitter)
            DO UPDATE SET decayed = b.decayed + excluded.decayed, job_amount = b.job_amount + excluded.job_amount
        ), new_usage_base AS (
            INSERT INTO @extschema@.usage_base AS b (account, resource_id, unit, month, through, amount)
            SELECT g.account, g.resource_id, g.unit, g.month, through_month, sum(g.amount)
            FROM groups g
            WHERE g.end_month <= through_month
            GROUP BY g.account, g.resource_id, g.unit, g.month
            ON CONFLICT (account, resource_id, unit, month)
            DO UPDATE SET amount = b.amount + excluded.amount, through = excluded.through
        )
        SELECT count(*) INTO rows_merged FROM merged;
        RETURN rows_merged;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.fold_rollup(date) IS
    'Merges the new rows of the charge and consumption rollups and folds the months up to through_month into '
    'fairshare_base and usage_base (internal: compact_rollup()); returns the charge rollup rows it merged';
REVOKE EXECUTE ON FUNCTION hpcacct_internal.fold_rollup(date) FROM PUBLIC;

-- Merges the delta rows and folds the months up to the one before the current (the site's
-- time zone). Exact (sums of the same numerics) and idempotent; safe next to loaders (it
-- moves only the rows it sees; rows added meanwhile stay unfolded and are read as they are).
-- Compactions wait for each other. Run it daily (pg_cron).
CREATE FUNCTION @extschema@.compact_rollup() RETURNS bigint
    LANGUAGE sql
    SET search_path = pg_catalog, pg_temp
    RETURN hpcacct_internal.fold_rollup((pg_catalog.date_trunc('month', pg_catalog.now() AT TIME ZONE @extschema@.site_timezone())
                                    - interval '1 month')::date);
COMMENT ON FUNCTION @extschema@.compact_rollup() IS
    'Merges the new rows of the charge and consumption rollups into one per group (exact, idempotent) and folds '
    'the months before the current into fairshare_base and usage_base; returns the charge rollup rows it merged';
REVOKE EXECUTE ON FUNCTION @extschema@.compact_rollup() FROM PUBLIC;

-- Charges of the jobs that ended by `at`, per account, resource, submitter and month counted
-- in, for the months from_month to to_month: the rollup for the jobs that ended before the
-- month of `at`, the ledger (its job_end index) for those that ended in it. When no charge
-- of that month ends after `at` (a report of today, as portals ask), the rollup's rows of
-- that month are exactly those jobs and the ledger is not read. Without per_submitter
-- (submitter NULL), the months folded into usage_base are read from there when they all
-- ended before the month of `at`, and only the rollup rows not folded. Not grouped. Its rows
-- are estimated at 100 000 (a year of a site's rollup), not the default 1 000: the reports
-- that read it then hash rather than sort (twice their CPU time with the default).
-- No JIT: planned generically, the ledger branch (which a report of now skips) is costed at
-- millions, so jit = on compiled the statement in 0.5-2.8 s for a read of 0.1 s whose per-row
-- work (a projection) compiled code cannot shorten. (Not inlined anyway: it pins search_path.)
-- A NULL argument is 22004, an infinite instant 22008 (the first statement); an infinite month
-- is no bound (year_usage() of a site without resources reads from infinity to -infinity).
CREATE FUNCTION @extschema@.charges_ended_by(at timestamptz, from_month date, to_month date, per_submitter boolean)
    RETURNS TABLE (account text, resource_id bigint, unit text, submitter text, month date, amount numeric)
    LANGUAGE sql STABLE PARALLEL SAFE ROWS 100000
    SET search_path = pg_catalog, pg_temp
    SET jit = off
    AS $$
        SELECT (pg_catalog.isfinite($1) OR hpcacct_internal.refuse_argument($1, 'charges_ended_by', 'at'))
           AND ($2 IS NOT NULL OR hpcacct_internal.refuse_argument($2, 'charges_ended_by', 'from_month'))
           AND ($3 IS NOT NULL OR hpcacct_internal.refuse_argument($3, 'charges_ended_by', 'to_month'))
           AND ($4 IS NOT NULL OR hpcacct_internal.refuse_argument($4, 'charges_ended_by', 'per_submitter'));
        WITH z AS MATERIALIZED (
            SELECT t.tz, t.at_month,
                   NOT EXISTS (SELECT 1 FROM @extschema@.ledger l
                               WHERE l.kind = 'charge' AND l.job_end > $1
                                 AND l.job_end < (t.at_month + interval '1 month') AT TIME ZONE t.tz) AS month_complete,
                   -- the base serves when all it holds ended before the month of `at`: its latest month folded
                   NOT $4 AND coalesce((SELECT max(b.through) FROM @extschema@.usage_base b) < t.at_month, true)
                       AS from_base
            FROM (SELECT s.tz, pg_catalog.date_trunc('month', hpcacct_internal.local_time($1, s.tz)) AS at_month
                  FROM (SELECT @extschema@.site_timezone() AS tz) s) t
        )
        SELECT b.account, b.resource_id, b.unit, NULL::text, b.month, b.amount
        FROM @extschema@.usage_base b, z
        WHERE z.from_base AND b.month BETWEEN $2 AND $3
        UNION ALL
        SELECT r.account, r.resource_id, r.unit, CASE WHEN $4 THEN r.submitter END, r.month, r.amount
        FROM hpcacct_internal.charge_rollup_exact r, z
        WHERE NOT z.from_base
          AND (r.end_month < z.at_month OR (z.month_complete AND r.end_month = z.at_month))
          AND r.month BETWEEN $2 AND $3
        UNION ALL
        -- the same rows as above, but only those not folded: a branch of its own, so that the
        -- planner can read them through the partial index charge_rollup_unfolded
        SELECT r.account, r.resource_id, r.unit, NULL, r.month, r.amount
        FROM hpcacct_internal.charge_rollup_exact r, z
        WHERE z.from_base AND NOT r.folded
          AND (r.end_month < z.at_month OR (z.month_complete AND r.end_month = z.at_month))
          AND r.month BETWEEN $2 AND $3
        UNION ALL
        SELECT l.account, l.resource_id, l.unit, CASE WHEN $4 THEN l.submitter END, m.month::date,
               l.amount * @extschema@.period_share(l.job_start, l.job_end, m.month AT TIME ZONE z.tz,
                                                   (m.month + interval '1 month') AT TIME ZONE z.tz)
        FROM @extschema@.ledger l, z
        -- (the months as local_time() counts them, as the rollup's)
        CROSS JOIN LATERAL pg_catalog.generate_series(pg_catalog.date_trunc('month', hpcacct_internal.local_time(l.job_start, z.tz)),
                                                      z.at_month, interval '1 month') AS m(month)
        WHERE NOT z.month_complete
          AND l.kind = 'charge' AND l.job_end >= z.at_month AT TIME ZONE z.tz AND l.job_end <= $1
          AND (m.month < hpcacct_internal.local_time(l.job_end, z.tz) OR l.job_end = l.job_start)
          AND m.month BETWEEN $2 AND $3
    $$;
COMMENT ON FUNCTION @extschema@.charges_ended_by(timestamptz, date, date, boolean) IS
    'Charges of the jobs that ended by at, per account, resource, unit, submitter (or not: NULL) and month counted in '
    '(from_month to to_month), from the rollup (and usage_base) and the ledger''s latest month; rows to be summed; '
    'a NULL argument (22004) or an infinite at (22008) is an error, an infinite month no bound';

-- A machine (pool) argument: one that a resource charges to (its pool, or else its cluster)
-- or that an allocation names; 42704 otherwise, so that a misspelt machine is not read as
-- one with nothing on it. (The allocations are read under row-level security.)
CREATE FUNCTION hpcacct_internal.require_pool(pool text, caller text) RETURNS text
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF pool IS NULL THEN
            RAISE EXCEPTION '%: machine must not be NULL', caller USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF NOT EXISTS (SELECT 1 FROM @extschema@.resource r WHERE coalesce(r.pool, r.cluster) = require_pool.pool)
           AND NOT EXISTS (SELECT 1 FROM @extschema@.ledger l WHERE l.kind <> 'charge' AND l.pool = require_pool.pool) THEN
            RAISE EXCEPTION '%: unknown machine "%"', caller, pool
                USING ERRCODE = 'undefined_object',
                      HINT = 'A machine is the pool (or else the cluster) of a row of hpcacct.resource, or the pool of an allocation.';
        END IF;
        RETURN pool;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.require_pool(text, text) IS
    'A machine (pool) argument: NULL is an error (22004), one no resource charges to and no allocation names too (42704)';

-- Consumption of accounts in pools (by default, a cluster) up to an instant: charges pro
-- rata before it, of the i-th account in the i-th pool (a pair named twice once). At a
-- regulation boundary (1 January or the 16th at 00:00, site time zone) it is the consumption
-- rollup's. Otherwise it is all the account's charges (the sum of the rollup's `ended`) less
-- the part after the instant of the jobs that end at or after it, read from the ledger
-- through its BRIN index on job_end, every pair's in one pass: none for an instant after the
-- last job's end (a submit check's end of today), and the newer a past instant the fewer.
-- The sum is exactly the job-by-job one (numeric arithmetic is exact, a whole share is
-- exactly 1). Its statements are planned once per session (their custom plans cost more than
-- running them for one account).
CREATE FUNCTION hpcacct_internal.consumptions_before(accounts text[], pools text[], before timestamptz)
    RETURNS TABLE (account text, pool text, consumption numeric)
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    SET plan_cache_mode = force_generic_plan
    AS $$
    #variable_conflict use_column
    DECLARE
        local_before timestamp;
        missing text;
    BEGIN
        IF $1 IS NULL OR $2 IS NULL OR $3 IS NULL
           OR pg_catalog.array_position($1, NULL) IS NOT NULL OR pg_catalog.array_position($2, NULL) IS NOT NULL THEN
            RAISE EXCEPTION 'consumption_before: accounts, pools and before must not be NULL'
                USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF pg_catalog.cardinality($1) <> pg_catalog.cardinality($2) THEN
            RAISE EXCEPTION 'consumption_before: % accounts for % pools', pg_catalog.cardinality($1), pg_catalog.cardinality($2)
                USING ERRCODE = 'invalid_parameter_value', HINT = 'The i-th account is taken in the i-th pool.';
        END IF;
        IF NOT pg_catalog.isfinite($3) THEN
            RAISE EXCEPTION 'consumption_before: before must be finite, not %', $3 USING ERRCODE = 'datetime_field_overflow';
        END IF;
        SELECT u.name INTO missing FROM pg_catalog.unnest($1) AS u(name)
        WHERE NOT EXISTS (SELECT 1 FROM @extschema@.account a WHERE a.name = u.name) LIMIT 1;
        IF FOUND THEN
            PERFORM hpcacct_internal.require_account(missing, 'consumption_before');
        END IF;
        PERFORM hpcacct_internal.require_pool(p.name, 'consumption_before')
        FROM (SELECT DISTINCT u.name FROM pg_catalog.unnest($2) AS u(name)) p
        WHERE NOT EXISTS (SELECT 1 FROM @extschema@.resource r WHERE coalesce(r.pool, r.cluster) = p.name);
        local_before := hpcacct_internal.local_time($3, @extschema@.site_timezone());  -- (as the rollup counts it)
        IF local_before = @extschema@.regulation_boundary_after(local_before - interval '1 microsecond') THEN
            RETURN QUERY
            SELECT p.account, p.pool,
                   coalesce((SELECT sum(c.ended) + coalesce(sum(c.running) FILTER (WHERE c.boundary = local_before), 0)
                             FROM hpcacct_internal.consumption_rollup_exact c
                             WHERE c.account = p.account
                               AND c.resource_id = ANY (ARRAY(SELECT r.resource_id FROM @extschema@.resource r
                                                              WHERE coalesce(r.pool, r.cluster) = p.pool))
                               AND c.boundary <= local_before), 0)
            FROM (SELECT DISTINCT u.account, u.pool FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2)) AS u(account, pool)) p;
            RETURN;
        END IF;
        -- (kind in the sum, not the filter: the planner would scan all of ledger_job, a partial index;
        -- job_end bounded on both sides: the plan made once estimates a narrow range, so on a
        -- large ledger it reads the BRIN index on job_end, not the whole table)
        RETURN QUERY
        WITH pairs AS MATERIALIZED (
            SELECT DISTINCT u.account, u.pool FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2)) AS u(account, pool)
        ), after_before AS (
            SELECT l.account, coalesce(r.pool, r.cluster) AS pool,
                   sum(CASE WHEN l.kind = 'charge' THEN l.amount
                            * (1 - @extschema@.period_share(l.job_start, l.job_end, '-infinity', $3)) END) AS amount
            FROM @extschema@.ledger l
            JOIN @extschema@.resource r ON r.resource_id = l.resource_id
            WHERE l.job_end >= $3 AND l.job_end <= 'infinity'
              AND (l.account, coalesce(r.pool, r.cluster)) IN (SELECT p.account, p.pool FROM pairs p)
            GROUP BY 1, 2
        )
        SELECT p.account, p.pool,
               coalesce((SELECT sum(c.ended) FROM hpcacct_internal.consumption_rollup_exact c
                         WHERE c.account = p.account
                           AND c.resource_id = ANY (ARRAY(SELECT r.resource_id FROM @extschema@.resource r
                                                          WHERE coalesce(r.pool, r.cluster) = p.pool))), 0)
               - coalesce(b.amount, 0)
        FROM pairs p
        LEFT JOIN after_before b ON b.account = p.account AND b.pool = p.pool;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.consumptions_before(text[], text[], timestamptz) IS
    'Charges of each account in its pool (the i-th of each array; or cluster) for the part of its jobs that ran '
    'before an instant (finite: 22008 otherwise), one row per pair';

-- The same for one account in one pool.
CREATE FUNCTION @extschema@.consumption_before(account text, pool text, before timestamptz)
    RETURNS numeric
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM hpcacct_internal.require_account($1, 'consumption_before');
        IF $2 IS NULL OR $3 IS NULL THEN
            RAISE EXCEPTION 'consumption_before: pool and before must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        RETURN (SELECT c.consumption FROM hpcacct_internal.consumptions_before(ARRAY[$1], ARRAY[$2], $3) c);
    END
    $$;
COMMENT ON FUNCTION @extschema@.consumption_before(text, text, timestamptz) IS
    'Charges of an account in a pool (or cluster) for the part of its jobs that ran before an instant (finite: 22008 '
    'otherwise)';

-- Months depend on the site's time zone, decayed sums on the fair-share half-life: a row
-- trigger on each settings table rebuilds the rollup when the row of the setting named by
-- its argument is added, changed or removed. (Not dumped: a restore of the ledger rolls its
-- rows up again, and a restored time zone rebuilds them.)
CREATE FUNCTION hpcacct_internal.rebuild_rollup_trigger() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        changed boolean;
    BEGIN
        changed := CASE TG_OP
                       WHEN 'INSERT' THEN NEW.name = ANY (TG_ARGV)
                       WHEN 'DELETE' THEN OLD.name = ANY (TG_ARGV)
                       ELSE (NEW.name = ANY (TG_ARGV) OR OLD.name = ANY (TG_ARGV)) AND NEW IS DISTINCT FROM OLD
                   END;
        IF changed THEN
            PERFORM @extschema@.rebuild_rollup();
        END IF;
        RETURN NULL;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.rebuild_rollup_trigger() IS
    'Trigger of hpcacct.setting: rebuilds the rollups when a setting named by its arguments changes';
CREATE TRIGGER setting_rebuilds_rollup AFTER INSERT OR UPDATE OR DELETE ON @extschema@.setting
    FOR EACH ROW EXECUTE FUNCTION hpcacct_internal.rebuild_rollup_trigger('timezone', 'half_life');

-- Switching rollup back to immediate (or removing the setting) rolls up what is pending.
CREATE FUNCTION hpcacct_internal.roll_up_pending_trigger() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        immediate_again boolean;
    BEGIN
        immediate_again := CASE TG_OP WHEN 'DELETE' THEN OLD.name = 'rollup'
                                      ELSE NEW.name = 'rollup' AND NEW.value = 'immediate' END;
        IF immediate_again THEN
            PERFORM @extschema@.roll_up_pending();
        END IF;
        RETURN NULL;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.roll_up_pending_trigger() IS
    'Trigger of hpcacct.setting: rolls up the pending charges when the setting rollup returns to immediate';
CREATE TRIGGER setting_rolls_up_pending AFTER INSERT OR UPDATE OR DELETE ON @extschema@.setting
    FOR EACH ROW EXECUTE FUNCTION hpcacct_internal.roll_up_pending_trigger();
