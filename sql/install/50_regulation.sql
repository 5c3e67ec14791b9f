-- ---------------------------------------------------------------------------------------
-- Theoretical consumption and regulation, GENCI / IDRIS (rules §2).
--
-- Allocation events are ledger rows of kind grant, supplement (positive) and retraction
-- (negative), with pool = the machine and a validity window valid_from..valid_until
-- (inclusive). Consumption of an account on a machine is its job charges there, pro rata.
-- The allocation period is the calendar year: TC, consumption and Alloc of a date count
-- from 1 January of that date's year.
-- ---------------------------------------------------------------------------------------

-- Regulation settings per machine. Machines without a row are not regulated.
CREATE TABLE @extschema@.regulation_machine (
    machine                   text PRIMARY KEY CHECK (machine <> ''),
    monthly_threshold         numeric NOT NULL CHECK (monthly_threshold >= 0 AND monthly_threshold < 'Infinity'),
    annual_warning_percent    numeric NOT NULL DEFAULT 30 CHECK (annual_warning_percent BETWEEN 0 AND 100),
    annual_retraction_percent numeric NOT NULL DEFAULT 40 CHECK (annual_retraction_percent BETWEEN 0 AND 100),
    month_convention          text NOT NULL DEFAULT 'half_month' CHECK (month_convention IN ('half_month', 'day')),
    description               text
);
COMMENT ON TABLE @extschema@.regulation_machine IS
    'GENCI regulation settings per machine (a pool: ledger.pool of its grants): monthly threshold, annual percentages, month convention';
COMMENT ON COLUMN @extschema@.regulation_machine.machine IS
    'GENCI''s machine, a pool: the ledger.pool of its grants, supplements and retractions, and the pool '
    '(resource.pool, or the cluster) of the resources whose charges are its consumption';
COMMENT ON COLUMN @extschema@.regulation_machine.monthly_threshold IS
    'An account whose grants and supplements for the year on the machine reach this many hours is regulated monthly, otherwise annually';
COMMENT ON COLUMN @extschema@.regulation_machine.annual_warning_percent IS
    'Annual regulation: accounts that used less than this percentage of their allocation are warned (1 May) and lose hours (1 June)';
COMMENT ON COLUMN @extschema@.regulation_machine.annual_retraction_percent IS
    'Annual regulation: percentage of the allocation retracted on 1 June from an under-consuming account that is not exonerated';
COMMENT ON COLUMN @extschema@.regulation_machine.month_convention IS
    'How validity windows are measured in months: half_month (the GENCI document) or day (exact fractions)';

-- ---- The aggregates tmc and tc -------------------------------------------------------

CREATE FUNCTION hpcacct_internal.tmc_transfn(internal, date, date, float8, date) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_tmc_transfn' LANGUAGE c IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION hpcacct_internal.tmc_transfn(internal, date, date, float8, date, text) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_tmc_transfn' LANGUAGE c IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION hpcacct_internal.tc_transfn(internal, date, date, float8, date) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_tc_transfn' LANGUAGE c IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION hpcacct_internal.tc_transfn(internal, date, date, float8, date, text) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_tc_transfn' LANGUAGE c IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION hpcacct_internal.theoretical_combinefn(internal, internal) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_theoretical_combinefn' LANGUAGE c IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION hpcacct_internal.theoretical_finalfn(internal) RETURNS float8
    AS 'MODULE_PATHNAME', 'hpcacct_theoretical_finalfn' LANGUAGE c IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION hpcacct_internal.theoretical_serialfn(internal) RETURNS bytea
    AS 'MODULE_PATHNAME', 'hpcacct_theoretical_serialfn' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION hpcacct_internal.theoretical_deserialfn(bytea, internal) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_theoretical_deserialfn' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.tmc_transfn(internal, date, date, float8, date) IS
    'Transition function of hpcacct.tmc (half_month convention)';
COMMENT ON FUNCTION hpcacct_internal.tmc_transfn(internal, date, date, float8, date, text) IS
    'Transition function of hpcacct.tmc with a month convention';
COMMENT ON FUNCTION hpcacct_internal.tc_transfn(internal, date, date, float8, date) IS
    'Transition function of hpcacct.tc (half_month convention)';
COMMENT ON FUNCTION hpcacct_internal.tc_transfn(internal, date, date, float8, date, text) IS
    'Transition function of hpcacct.tc with a month convention';
COMMENT ON FUNCTION hpcacct_internal.theoretical_combinefn(internal, internal) IS
    'Combine function of hpcacct.tmc and hpcacct.tc (merges two compensated sums of the same date and convention)';
COMMENT ON FUNCTION hpcacct_internal.theoretical_finalfn(internal) IS
    'Final function of hpcacct.tmc and hpcacct.tc';
COMMENT ON FUNCTION hpcacct_internal.theoretical_serialfn(internal) IS
    'Serializes a hpcacct.tmc / hpcacct.tc state (two float8 and two int4, network byte order)';
COMMENT ON FUNCTION hpcacct_internal.theoretical_deserialfn(bytea, internal) IS
    'Deserializes a hpcacct.tmc / hpcacct.tc state, checking its size, that it is finite and its date and convention';

CREATE AGGREGATE @extschema@.tmc(valid_from date, valid_until date, amount float8, at date) (
    SFUNC = hpcacct_internal.tmc_transfn, STYPE = internal, SSPACE = 16,
    FINALFUNC = hpcacct_internal.theoretical_finalfn,
    COMBINEFUNC = hpcacct_internal.theoretical_combinefn,
    SERIALFUNC = hpcacct_internal.theoretical_serialfn, DESERIALFUNC = hpcacct_internal.theoretical_deserialfn,
    PARALLEL = SAFE
);
CREATE AGGREGATE @extschema@.tmc(valid_from date, valid_until date, amount float8, at date, convention text) (
    SFUNC = hpcacct_internal.tmc_transfn, STYPE = internal, SSPACE = 16,
    FINALFUNC = hpcacct_internal.theoretical_finalfn,
    COMBINEFUNC = hpcacct_internal.theoretical_combinefn,
    SERIALFUNC = hpcacct_internal.theoretical_serialfn, DESERIALFUNC = hpcacct_internal.theoretical_deserialfn,
    PARALLEL = SAFE
);
CREATE AGGREGATE @extschema@.tc(valid_from date, valid_until date, amount float8, at date) (
    SFUNC = hpcacct_internal.tc_transfn, STYPE = internal, SSPACE = 16,
    FINALFUNC = hpcacct_internal.theoretical_finalfn,
    COMBINEFUNC = hpcacct_internal.theoretical_combinefn,
    SERIALFUNC = hpcacct_internal.theoretical_serialfn, DESERIALFUNC = hpcacct_internal.theoretical_deserialfn,
    PARALLEL = SAFE
);
CREATE AGGREGATE @extschema@.tc(valid_from date, valid_until date, amount float8, at date, convention text) (
    SFUNC = hpcacct_internal.tc_transfn, STYPE = internal, SSPACE = 16,
    FINALFUNC = hpcacct_internal.theoretical_finalfn,
    COMBINEFUNC = hpcacct_internal.theoretical_combinefn,
    SERIALFUNC = hpcacct_internal.theoretical_serialfn, DESERIALFUNC = hpcacct_internal.theoretical_deserialfn,
    PARALLEL = SAFE
);
COMMENT ON AGGREGATE @extschema@.tmc(date, date, float8, date) IS
    'Theoretical monthly consumption at a date: sum of amount / months of the window over the events valid that day (half_month convention); NULL without rows';
COMMENT ON AGGREGATE @extschema@.tmc(date, date, float8, date, text) IS
    'Theoretical monthly consumption at a date under a month convention (half_month or day); NULL without rows';
COMMENT ON AGGREGATE @extschema@.tc(date, date, float8, date) IS
    'Theoretical consumption up to the end of a date: the integral of TMC, i.e. each event pro rata of the months of its window elapsed (half_month convention); NULL without rows';
COMMENT ON AGGREGATE @extschema@.tc(date, date, float8, date, text) IS
    'Theoretical consumption up to the end of a date under a month convention (half_month or day); NULL without rows';

-- ---- Windows a machine's convention can measure ------------------------------------------

-- An allocation event's window on a regulated machine spans some time in the machine's month
-- convention: one that half_month makes empty (both ends round to one half-month boundary:
-- 28-31 December, 1-3 March) has no TMC, and every figure that reads it (allocation_status(),
-- regulate() of every account, regulation_report, the submit check) would fail with 22023. It
-- is refused where it is written (22023): booked on a regulated machine, or a machine made
-- regulated, or switched to half_month, while it holds one. The aggregate is the one measure.
CREATE FUNCTION hpcacct_internal.require_window_months(caller text, account text, kind text, machine text,
                                                       valid_from date, valid_until date, convention text)
    RETURNS void
    LANGUAGE plpgsql STABLE  -- not PARALLEL SAFE: its EXCEPTION block starts a subtransaction
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        -- (a NULL, infinite or inverted window, or an unknown convention, is a CHECK's to refuse, 23514)
        IF valid_from IS NULL OR valid_until IS NULL OR valid_until < valid_from
           OR NOT pg_catalog.isfinite(valid_from) OR NOT pg_catalog.isfinite(valid_until)
           OR convention IS NULL OR convention NOT IN ('half_month', 'day') THEN
            RETURN;
        END IF;
        PERFORM @extschema@.tmc(valid_from, valid_until, 1, valid_from, convention);
    EXCEPTION WHEN invalid_parameter_value THEN
        RAISE EXCEPTION '%: the % of account "%" on machine "%", valid % to %, spans no time under the % convention',
            caller, kind, account, machine, hpcacct_internal.iso_date(valid_from), hpcacct_internal.iso_date(valid_until),
            convention
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'Both ends round to the same half-month boundary: the window has no TMC.',
                  HINT = 'Give the window at least half a month, or set the machine''s month_convention to day.';
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.require_window_months(text, text, text, text, date, date, text) IS
    'An allocation event''s window spans some time in a month convention; 22023 for one it makes empty';

-- Once per statement, as ledger_check_references(): a row trigger, even one whose WHEN skips
-- charges, would make COPY into the ledger (a restore, a site's initial copy) insert row by row.
CREATE FUNCTION hpcacct_internal.ledger_check_window() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM hpcacct_internal.require_window_months('insert into ledger', e.account, e.kind, e.pool,
                                                       e.valid_from, e.valid_until, s.month_convention)
        FROM new_entries e
        JOIN @extschema@.regulation_machine s ON s.machine = e.pool
        WHERE e.kind IN ('grant', 'supplement', 'retraction');
        RETURN NULL;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.ledger_check_window() IS
    'Statement trigger of hpcacct.ledger: a new grant, supplement or retraction on a regulated machine spans some time '
    'in its month convention (22023)';
CREATE TRIGGER ledger_check_window AFTER INSERT ON @extschema@.ledger
    REFERENCING NEW TABLE AS new_entries
    FOR EACH STATEMENT EXECUTE FUNCTION hpcacct_internal.ledger_check_window();

CREATE FUNCTION hpcacct_internal.regulation_machine_check_windows() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM hpcacct_internal.require_window_months('regulation_machine', l.account, l.kind, l.pool,
                                                       l.valid_from, l.valid_until, NEW.month_convention)
        FROM @extschema@.ledger l
        WHERE l.pool = NEW.machine AND l.kind IN ('grant', 'supplement', 'retraction');
        RETURN NEW;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.regulation_machine_check_windows() IS
    'Trigger of hpcacct.regulation_machine: every grant, supplement and retraction of the machine spans some time in '
    'its month convention (22023)';
CREATE TRIGGER regulation_machine_check_windows BEFORE INSERT OR UPDATE OF machine, month_convention
    ON @extschema@.regulation_machine
    FOR EACH ROW EXECUTE FUNCTION hpcacct_internal.regulation_machine_check_windows();

CREATE FUNCTION @extschema@.regulation_status(consumption float8, tc float8, tmc float8) RETURNS text
    AS 'MODULE_PATHNAME', 'hpcacct_regulation_status' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.regulation_status(float8, float8, float8) IS
    'Monthly regulation outcome for delta = consumption - tc: ok when delta > -tmc, warning when -2 tmc < delta <= -tmc, retraction when delta <= -2 tmc (ok when tmc <= 0)';

-- ---- Where an account stands -------------------------------------------------------------

-- The allocation events (grants, supplements, retractions) of an account on a machine whose
-- validity overlaps from_day..to_day: what every figure of an account on a machine reads.
-- SQL-standard, without SET options: the planner inlines it into its callers' plans.
CREATE FUNCTION hpcacct_internal.allocation_events(account text, machine text, from_day date, to_day date)
    RETURNS TABLE (kind text, amount numeric, valid_from date, valid_until date)
    LANGUAGE sql STABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT l.kind, l.amount, l.valid_from, l.valid_until
    FROM @extschema@.ledger l
    WHERE l.account = allocation_events.account AND l.pool = allocation_events.machine
      AND l.kind IN ('grant', 'supplement', 'retraction')
      AND l.valid_from <= allocation_events.to_day AND l.valid_until >= allocation_events.from_day;
END;
COMMENT ON FUNCTION hpcacct_internal.allocation_events(text, text, date, date) IS
    'Grants, supplements and retractions of an account on a machine valid on some day from from_day to to_day';

-- Alloc, TMC, TC, consumption and Δ of accounts on machines at a date (the i-th account on
-- the i-th machine, a pair named twice once), counted from 1 January of that date's year
-- (TC = TC(at) - TC(31 Dec of the previous year), so an event that began in an earlier year
-- counts only for its part in this year). Consumption is consumptions_before()'s, every
-- pair's in one pass. A NULL day is 22004; an account or machine is checked as
-- consumption_before()'s.
CREATE FUNCTION hpcacct_internal.allocation_statuses(accounts text[], machines text[], at date)
    RETURNS TABLE (account text, machine text, alloc numeric, granted numeric, tmc float8, tc float8,
                   consumption float8, delta float8, status text)
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    #variable_conflict use_column
    DECLARE
        tz constant text := @extschema@.site_timezone();
        year_start date;
    BEGIN
        IF $3 IS NULL OR NOT pg_catalog.isfinite($3) THEN
            PERFORM hpcacct_internal.refuse_argument($3, 'allocation_status', 'at');
        END IF;
        year_start := pg_catalog.make_date(EXTRACT(year FROM $3)::integer, 1, 1);
        RETURN QUERY
        WITH used AS MATERIALIZED (  -- once per bound (pulled up, it would be read at each use)
            SELECT e.account, e.pool, (e.consumption - s.consumption)::float8 AS consumption
            FROM hpcacct_internal.consumptions_before($1, $2, ($3 + 1)::timestamp AT TIME ZONE tz) e
            JOIN hpcacct_internal.consumptions_before($1, $2, year_start::timestamp AT TIME ZONE tz) s
              ON s.account = e.account AND s.pool = e.pool
        ), events AS (
            SELECT u.account, u.pool AS machine,
                   coalesce(sum(l.amount), 0) AS alloc,
                   coalesce(sum(l.amount) FILTER (WHERE l.kind <> 'retraction'), 0) AS granted,
                   coalesce(@extschema@.tmc(l.valid_from, l.valid_until, l.amount::float8, $3, u.convention)
                                FILTER (WHERE l.kind IS NOT NULL), 0) AS tmc,
                   coalesce(@extschema@.tc(l.valid_from, l.valid_until, l.amount::float8, $3, u.convention)
                                FILTER (WHERE l.kind IS NOT NULL)
                            - @extschema@.tc(l.valid_from, l.valid_until, l.amount::float8, year_start - 1, u.convention)
                                FILTER (WHERE l.kind IS NOT NULL),
                            0) AS tc
            FROM (SELECT u.account, u.pool,
                         coalesce((SELECT s.month_convention FROM @extschema@.regulation_machine s WHERE s.machine = u.pool),
                                  'half_month') AS convention
                  FROM used u) u
            LEFT JOIN LATERAL hpcacct_internal.allocation_events(u.account, u.pool, year_start, $3) l ON true
            GROUP BY u.account, u.pool
        )
        SELECT e.account, e.machine, e.alloc, e.granted, e.tmc, e.tc, u.consumption, u.consumption - e.tc,
               @extschema@.regulation_status(u.consumption, e.tc, e.tmc)
        FROM events e
        JOIN used u ON u.account = e.account AND u.pool = e.machine;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.allocation_statuses(text[], text[], date) IS
    'allocation_status() of each account on its machine (the i-th of each array) at a day, one row per pair';

-- The same for one account on one machine. The account is checked as every report's (22004,
-- 42704), a NULL day is today, a NULL machine 22004.
CREATE FUNCTION @extschema@.allocation_status(account text, machine text, at date)
    RETURNS TABLE (alloc numeric, granted numeric, tmc float8, tc float8,
                   consumption float8, delta float8, status text)
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        acct constant text := hpcacct_internal.require_account($1, 'allocation_status');
        day constant date := hpcacct_internal.day_or_today($3, 'allocation_status');
    BEGIN
        PERFORM hpcacct_internal.require_pool($2, 'allocation_status');
        RETURN QUERY
        SELECT s.alloc, s.granted, s.tmc, s.tc, s.consumption, s.delta, s.status
        FROM hpcacct_internal.allocation_statuses(ARRAY[acct], ARRAY[$2], day) s;
    END
    $$;
COMMENT ON FUNCTION @extschema@.allocation_status(text, text, date) IS
    'Alloc (net), granted (grants and supplements), TMC, TC, consumption up to the end of the day (site time zone; NULL: today), delta and monthly status of an account on a machine, from 1 January of the date''s year';

-- The document's table: one row per interval of the year on which Alloc and TMC are
-- constant, with TC at the interval's last day.
CREATE FUNCTION @extschema@.regulation_year(account text, machine text, year integer, convention text DEFAULT NULL)
    RETURNS TABLE (first_day date, last_day date, alloc numeric, tmc float8, tc float8)
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        y_start date;
        y_end   date;
        conv    text;
    BEGIN
        IF $1 IS NULL OR $2 IS NULL OR $3 IS NULL THEN
            RAISE EXCEPTION 'account, machine and year must not be NULL'
                USING ERRCODE = 'null_value_not_allowed';
        END IF;
        PERFORM hpcacct_internal.require_account($1, 'regulation_year');  -- the reports' 42704
        IF $3 NOT BETWEEN 1401 AND 9999 THEN
            RAISE EXCEPTION 'year % is outside the supported range 1401 to 9999', $3
                USING ERRCODE = 'datetime_field_overflow';
        END IF;
        y_start := make_date($3, 1, 1);
        y_end := make_date($3, 12, 31);
        conv := coalesce($4, (SELECT s.month_convention FROM @extschema@.regulation_machine s WHERE s.machine = $2),
                         'half_month');
        -- checked here too: without events the aggregates never see it
        IF conv NOT IN ('half_month', 'day') THEN
            RAISE EXCEPTION 'invalid month convention "%"', conv
                USING ERRCODE = 'invalid_parameter_value', HINT = 'The conventions are half_month and day.';
        END IF;
        PERFORM hpcacct_internal.require_pool($2, 'regulation_year');
        RETURN QUERY
        WITH events AS (
            SELECT l.valid_from AS f, l.valid_until AS u, l.amount AS a
            FROM hpcacct_internal.allocation_events($1, $2, y_start, y_end) l
        ), bounds AS (
            SELECT b.day
            FROM (SELECT y_start UNION SELECT e.f FROM events e UNION SELECT e.u + 1 FROM events e) AS b(day)
            WHERE b.day BETWEEN y_start AND y_end
        ), intervals AS (
            SELECT b.day AS d0, coalesce(lead(b.day) OVER (ORDER BY b.day) - 1, y_end) AS d1
            FROM bounds b
        )
        SELECT i.d0, i.d1,
               (SELECT coalesce(sum(e.a), 0) FROM events e WHERE e.f <= i.d0),
               (SELECT coalesce(@extschema@.tmc(e.f, e.u, e.a::float8, i.d0, conv), 0) FROM events e),
               (SELECT coalesce(@extschema@.tc(e.f, e.u, e.a::float8, i.d1, conv)
                                - @extschema@.tc(e.f, e.u, e.a::float8, y_start - 1, conv), 0)
                FROM events e)
        FROM intervals i
        ORDER BY i.d0;
    END
    $$;
COMMENT ON FUNCTION @extschema@.regulation_year(text, text, integer, text) IS
    'An account''s year on a machine as the GENCI table: intervals of constant Alloc and TMC, with TC at each interval''s last day (convention: the machine''s unless given)';

-- ---- Regulation ------------------------------------------------------------------------

-- Accounts exonerated from the annual regulation of a year, entered by an administrator.
CREATE TABLE @extschema@.exoneration (
    account  text NOT NULL REFERENCES @extschema@.account,
    machine  text NOT NULL REFERENCES @extschema@.regulation_machine,
    year     integer NOT NULL CHECK (year BETWEEN 1401 AND 9999),
    reason   text NOT NULL CHECK (reason IN ('justification', 'second_half_start')),
    received date NOT NULL,
    note     text,
    PRIMARY KEY (account, machine, year),
    CONSTRAINT exoneration_in_time CHECK (
        received <= CASE reason WHEN 'justification' THEN pg_catalog.make_date(year, 5, 31)
                                ELSE pg_catalog.make_date(year, 1, 31) END)
);
COMMENT ON TABLE @extschema@.exoneration IS
    'Exonerations from the annual regulation: a justification received by 31 May, or a second-half start agreed by 31 January';

-- What each run found and did, one row per account, machine, run date and kind of run.
CREATE TABLE @extschema@.regulation_log (
    log_id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_date     date NOT NULL,
    run          text NOT NULL CHECK (run IN ('monthly', 'annual_warning', 'annual_retraction')),
    account      text NOT NULL REFERENCES @extschema@.account,
    machine      text NOT NULL REFERENCES @extschema@.regulation_machine,
    figures_at   date NOT NULL,
    outcome      text NOT NULL CHECK (outcome IN ('ok', 'warning', 'retraction', 'exonerated')),
    alloc        numeric NOT NULL,
    granted      numeric NOT NULL,
    consumption  float8 NOT NULL,
    tc           float8 NOT NULL,
    tmc          float8 NOT NULL,
    delta        float8 NOT NULL,
    used_percent float8,
    retracted    numeric(20, 6) NOT NULL DEFAULT 0 CHECK (retracted >= 0),
    -- No foreign key: ledger rows are never deleted, and a reference would make TRUNCATE of
    -- the ledger fail on the key rather than on its append-only trigger (HA001).
    entry_id     bigint,
    logged_at    timestamptz NOT NULL DEFAULT pg_catalog.statement_timestamp(),
    CONSTRAINT regulation_log_once UNIQUE (account, machine, run_date, run),
    CONSTRAINT regulation_log_booked CHECK ((entry_id IS NOT NULL) = (retracted > 0))
);
COMMENT ON TABLE @extschema@.regulation_log IS
    'One row per account, machine, run date and run (monthly, annual_warning, annual_retraction): the figures, the outcome and the hours retracted';
COMMENT ON COLUMN @extschema@.regulation_log.figures_at IS
    'The day whose end the figures are taken at: the run date for monthly runs, the day before for annual runs';
COMMENT ON COLUMN @extschema@.regulation_log.used_percent IS
    'Annual runs: consumption as a percentage of Alloc';
COMMENT ON COLUMN @extschema@.regulation_log.entry_id IS 'The retraction booked in hpcacct.ledger, if any';

-- The kind of regulation run a date calls for; NULL on any other date.
CREATE FUNCTION @extschema@.regulation_run(d date) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT CASE
            WHEN EXTRACT(day FROM d) = 15 THEN 'monthly'
            WHEN EXTRACT(month FROM d) = 5 AND EXTRACT(day FROM d) = 1 THEN 'annual_warning'
            WHEN EXTRACT(month FROM d) = 6 AND EXTRACT(day FROM d) = 1 THEN 'annual_retraction'
        END
    $$;
COMMENT ON FUNCTION @extschema@.regulation_run(date) IS
    'Regulation run of a date: monthly on the 15th, annual_warning on 1 May, annual_retraction on 1 June, NULL otherwise';

-- Monthly runs (the 15th) regulate the accounts whose grants and supplements for the year
-- on a machine reach its threshold; annual runs (1 May, 1 June) the others. Idempotent:
-- an account already logged for this date and run is skipped, and runs are serialized by
-- a lock on the log, so a retraction is booked at most once.
CREATE PROCEDURE @extschema@.regulate(d date)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        kind_of_run text;
        as_of       date;
        y_start     date;
        y_end       date;
        today       date;
        accounts    text[];
        machines    text[];
        later_accounts text[];
        later_machines text[];
        already     bigint;
        later       date;
        n_ok        integer := 0;
        n_warning   integer := 0;
        n_retracted integer := 0;
        n_exonerated integer := 0;
        cut_off     text;
    BEGIN
        IF d IS NULL THEN
            RAISE EXCEPTION 'regulation date must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF NOT isfinite(d) THEN
            RAISE EXCEPTION 'regulation date must be a finite date' USING ERRCODE = 'datetime_field_overflow';
        END IF;
        today := @extschema@.site_today();
        IF d > today THEN
            RAISE EXCEPTION 'regulation date % is in the future', d
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = format('Today is %s in the site time zone.', today),
                      HINT = 'Consumption up to the end of that day is not known yet.';
        END IF;

        PERFORM hpcacct_internal.refuse_at_site('regulate');
        kind_of_run := @extschema@.regulation_run(d);
        IF kind_of_run IS NULL THEN
            RAISE NOTICE 'hpcacct.regulate: % is not a regulation date, nothing to do', d
                USING HINT = 'Monthly regulation runs on the 15th, annual regulation on 1 May (warning) and 1 June (retraction).';
            RETURN;
        END IF;

        -- A federation's centre decides on every site's charges, and a run is logged for good:
        -- with a site's link down, what the site charged meanwhile is not here.
        SELECT pg_catalog.string_agg(substr(s.subname, 17), ', ' ORDER BY s.subname) INTO cut_off
        FROM pg_catalog.pg_subscription s
        WHERE s.subname ~ '^hpcacct_fed_s2c_[0-9]+$'
          AND s.subdbid = (SELECT b.oid FROM pg_catalog.pg_database b WHERE b.datname = pg_catalog.current_database())
          AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_subscription st
                          WHERE st.subid = s.oid AND st.relid IS NULL AND st.pid IS NOT NULL);
        IF cut_off IS NOT NULL THEN
            RAISE EXCEPTION 'regulate: the link from site % is not connected: its charges since are not here', cut_off
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'Run it once the link is back and the site''s charges are in (federation_status at the site: '
                             'rows_pending 0); a site gone for good: remove its subscription (README, "Removing a site").';
        END IF;

        -- Serializes regulation runs (readers are not blocked): a second run of the same
        -- date waits for the first to commit and then finds its rows in the log.
        LOCK TABLE @extschema@.regulation_log IN SHARE ROW EXCLUSIVE MODE;

        y_start := make_date(EXTRACT(year FROM d)::integer, 1, 1);
        y_end := make_date(EXTRACT(year FROM d)::integer, 12, 31);
        as_of := CASE WHEN kind_of_run = 'monthly' THEN d ELSE d - 1 END;
        SELECT count(*) INTO already FROM @extschema@.regulation_log g WHERE g.run_date = d AND g.run = kind_of_run;
        -- The accounts to regulate: those with an allocation event valid from 1 January to
        -- as_of on a regulated machine (allocation_events()), not logged yet for this date and
        -- run, on this run's side of the threshold by their figures below.
        SELECT coalesce(array_agg(p.account ORDER BY p.machine, p.account), '{}'),
               coalesce(array_agg(p.machine ORDER BY p.machine, p.account), '{}')
        INTO accounts, machines
        FROM (SELECT DISTINCT l.account, l.pool AS machine
              FROM @extschema@.ledger l
              JOIN @extschema@.regulation_machine s ON s.machine = l.pool
              WHERE l.kind IN ('grant', 'supplement', 'retraction')) p
        WHERE EXISTS (SELECT 1 FROM hpcacct_internal.allocation_events(p.account, p.machine, y_start, as_of))
          AND NOT EXISTS (SELECT 1 FROM @extschema@.regulation_log g
                          WHERE g.account = p.account AND g.machine = p.machine
                            AND g.run_date = d AND g.run = kind_of_run);

        -- Runs of a year go in date order: a later run (monthly, or annual) decided on figures
        -- an earlier date's retraction would change, so an account this run would regulate
        -- that is logged by a later run of the same kind this year stops the run (a missed
        -- date is caught up before the next run, or skipped). Their figures, as below.
        SELECT coalesce(array_agg(p.account ORDER BY p.machine, p.account), '{}'),
               coalesce(array_agg(p.machine ORDER BY p.machine, p.account), '{}')
        INTO later_accounts, later_machines
        FROM (SELECT DISTINCT g.account, g.machine
              FROM @extschema@.regulation_log g
              WHERE g.run_date > d AND g.run_date <= y_end AND (g.run = 'monthly') = (kind_of_run = 'monthly')) p
        WHERE (p.account, p.machine) IN (SELECT * FROM unnest(accounts, machines));
        SELECT min(g.run_date) INTO later
        FROM hpcacct_internal.allocation_statuses(later_accounts, later_machines, as_of) st
        JOIN @extschema@.regulation_machine s ON s.machine = st.machine
        JOIN @extschema@.regulation_log g ON g.account = st.account AND g.machine = st.machine
        WHERE (st.granted >= s.monthly_threshold) = (kind_of_run = 'monthly')
          AND g.run_date > d AND g.run_date <= y_end AND (g.run = 'monthly') = (kind_of_run = 'monthly');
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'regulate: % comes before the run of %, made already', d, later
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = 'The run of a later date decided on figures that a run of this date would change.',
                      HINT = 'Run the dates of a year in order; a date missed before a later run is skipped.';
        END IF;

        -- A concurrent run that slipped past the lock (under REPEATABLE READ, whose snapshot
        -- predates the first run's commit) meets its log rows: the unique key stops it before
        -- it books twice, and it fails as the serialization failure it is (40001, retried).
        BEGIN
            -- Every figure, the monthly status and delta are allocation_status(account, machine,
            -- as_of)'s, every account's in one call of allocation_statuses().
            WITH figures AS (
                SELECT st.account, st.machine, st.alloc, st.granted, st.tmc, st.tc, st.consumption, st.delta, st.status,
                       s.annual_warning_percent, s.annual_retraction_percent
                FROM hpcacct_internal.allocation_statuses(accounts, machines, as_of) st
                JOIN @extschema@.regulation_machine s ON s.machine = st.machine
                WHERE (st.granted >= s.monthly_threshold) = (kind_of_run = 'monthly')
            ), april AS (
                -- 1 June retracts from those "still" under the percentage: under it at the end
                -- of April too (the 1 May run's figures). A project granted after April, never
                -- warned, is not retracted two weeks into its grant.
                SELECT ap.account, ap.machine,
                       CASE WHEN ap.alloc > 0 THEN 100 * ap.consumption / ap.alloc::float8 END AS used
                FROM hpcacct_internal.allocation_statuses(
                         CASE WHEN kind_of_run = 'annual_retraction' THEN accounts ELSE '{}' END,
                         CASE WHEN kind_of_run = 'annual_retraction' THEN machines ELSE '{}' END,
                         pg_catalog.make_date(EXTRACT(year FROM d)::integer, 4, 30)) ap
            ), annual AS (
                SELECT f.*, CASE WHEN kind_of_run <> 'monthly' AND f.alloc > 0
                                 THEN 100 * f.consumption / f.alloc::float8 END AS used,
                       ap.used AS used_april
                FROM figures f
                LEFT JOIN april ap ON ap.account = f.account AND ap.machine = f.machine
            ), outcome AS MATERIALIZED (
                SELECT a.*, x.result,
                       CASE WHEN x.result <> 'retraction' THEN 0
                            WHEN kind_of_run = 'monthly' THEN round(a.tmc::numeric, 6)
                            ELSE round(greatest(0, least(a.annual_retraction_percent / 100 * a.alloc,
                                                         a.alloc - a.consumption::numeric)), 6)
                       END::numeric(20, 6) AS hours
                FROM annual a
                CROSS JOIN LATERAL (
                    SELECT CASE
                        WHEN kind_of_run = 'monthly' THEN a.status
                        WHEN a.used < a.annual_warning_percent
                             AND (kind_of_run = 'annual_warning' OR a.used_april < a.annual_warning_percent) THEN
                            CASE WHEN EXISTS (SELECT 1 FROM @extschema@.exoneration x
                                              WHERE x.account = a.account AND x.machine = a.machine
                                                AND x.year = EXTRACT(year FROM d)) THEN 'exonerated'
                                 WHEN kind_of_run = 'annual_warning' THEN 'warning'
                                 ELSE 'retraction' END
                        ELSE 'ok'
                    END AS result
                ) x
            ), booked AS (
                INSERT INTO @extschema@.ledger (account, kind, amount, unit, pool, valid_from, valid_until, note)
                SELECT o.account, 'retraction', -o.hours,
                       (SELECT l.unit
                        FROM @extschema@.ledger l
                        WHERE l.account = o.account AND l.pool = o.machine
                          AND l.kind IN ('grant', 'supplement', 'retraction') AND l.valid_from <= as_of
                        ORDER BY l.valid_from DESC, l.entry_id DESC
                        LIMIT 1),
                       o.machine, d, y_end,
                       format('hpcacct.regulate(%s): %s regulation', hpcacct_internal.iso_date(d),
                              CASE WHEN kind_of_run = 'monthly' THEN 'monthly' ELSE 'annual' END)
                FROM outcome o
                WHERE o.hours > 0
                ORDER BY o.machine, o.account
                RETURNING entry_id, account, pool
            ), booked_ids AS (
                -- The retractions' entries by account and machine, looked up by key below rather
                -- than joined: both CTEs are estimated at a row or two whatever the site, and a
                -- join of them was planned as a nested loop, quadratic (1.4 s of CPU for 10 000
                -- accounts and 2 600 retractions).
                SELECT pg_catalog.jsonb_object_agg(pg_catalog.jsonb_build_array(b.account, b.pool)::text, b.entry_id)
                           AS entries
                FROM booked b
            ), logged AS (
                -- A plain INSERT, not ON CONFLICT: its unique key stops a concurrent run (below)
                INSERT INTO @extschema@.regulation_log (run_date, run, account, machine, figures_at, outcome, alloc,
                                                        granted, consumption, tc, tmc, delta, used_percent,
                                                        retracted, entry_id)
                SELECT d, kind_of_run, o.account, o.machine, as_of, o.result, o.alloc, o.granted, o.consumption,
                       o.tc, o.tmc, o.delta, o.used, o.hours,
                       ((SELECT i.entries FROM booked_ids i)
                        ->> pg_catalog.jsonb_build_array(o.account, o.machine)::text)::bigint
                FROM outcome o
                ORDER BY o.machine, o.account
                RETURNING outcome
            )
            SELECT count(*) FILTER (WHERE g.outcome = 'ok'), count(*) FILTER (WHERE g.outcome = 'warning'),
                   count(*) FILTER (WHERE g.outcome = 'retraction'), count(*) FILTER (WHERE g.outcome = 'exonerated')
            INTO n_ok, n_warning, n_retracted, n_exonerated
            FROM logged g;
        EXCEPTION WHEN unique_violation THEN
            RAISE EXCEPTION 'regulate(%): another run of this date committed while this one waited', d
                USING ERRCODE = 'serialization_failure',
                      HINT = 'Run it again: it will find that run''s rows in regulation_log and change nothing.';
        END;

        RAISE NOTICE 'hpcacct.regulate(%): % run: % ok, % warning, % retraction, % exonerated, % already recorded',
            d, kind_of_run, n_ok, n_warning, n_retracted, n_exonerated, already;
    END
    $$;
COMMENT ON PROCEDURE @extschema@.regulate(date) IS
    'GENCI regulation for a date: monthly on the 15th, annual warning on 1 May, annual retraction on 1 June, a no-op (notice) on other dates; idempotent; results in hpcacct.regulation_log';
REVOKE EXECUTE ON PROCEDURE @extschema@.regulate(date) FROM PUBLIC;

-- Per account, machine and month: the figures at the month's regulation day (the 15th),
-- recomputed from the ledger as it is now -- except the retraction that day's run booked,
-- so that the figures are those the run decided on, as regulation_log has them -- and what
-- the monthly run logged that day. The
-- status is the monthly rule's; it is NULL for an account under annual regulation, whose
-- outcomes (1 May, 1 June) are in hpcacct.regulation_log.
CREATE VIEW @extschema@.regulation_report AS
    WITH cfg AS MATERIALIZED (
        SELECT (SELECT @extschema@.site_today()) AS today
    ), events AS MATERIALIZED (
        SELECT l.entry_id, l.account, l.pool AS machine, l.kind, l.amount, l.valid_from, l.valid_until
        FROM @extschema@.ledger l
        WHERE l.kind IN ('grant', 'supplement', 'retraction') AND l.pool IS NOT NULL
    ), months AS MATERIALIZED (
        SELECT a.account, a.machine, m.month::date AS month, m.month::date + 14 AS as_of,
               EXTRACT(year FROM m.month)::integer AS year, EXTRACT(month FROM m.month)::integer AS month_of_year,
               s.monthly_threshold, s.month_convention
        FROM (SELECT e.account, e.machine, min(e.valid_from) AS first_day, max(e.valid_until) AS last_day
              FROM events e GROUP BY e.account, e.machine) a
        JOIN @extschema@.regulation_machine s ON s.machine = a.machine
        CROSS JOIN cfg
        CROSS JOIN LATERAL pg_catalog.generate_series(pg_catalog.date_trunc('month', a.first_day::timestamp),
                                                      pg_catalog.date_trunc('month', a.last_day::timestamp),
                                                      interval '1 month') AS m(month)
        WHERE m.month::date + 14 <= cfg.today
    ), bounds AS MATERIALIZED (
        -- The instants consumption is taken before, numbered j = 1, 2, ... in order: 1 January
        -- and the 16th (the day after the 15th) of every month of the report's years, 13 a year
        -- (the boundaries of consumption_rollup).
        SELECT min(m.year) AS first_year, (max(m.year) - min(m.year) + 1) * 13 AS count
        FROM months m
    ), status AS (  -- allocation_status() of each row: the events
        SELECT m.account, m.machine, m.month, m.as_of, m.monthly_threshold,
               -- the numbers of the day after as_of and of 1 January
               (m.year - b.first_year) * 13 + 1 + m.month_of_year AS j_end, (m.year - b.first_year) * 13 + 1 AS j_start,
               coalesce(sum(e.amount), 0) AS alloc,
               coalesce(sum(e.amount) FILTER (WHERE e.kind <> 'retraction'), 0) AS granted,
               coalesce(@extschema@.tmc(e.valid_from, e.valid_until, e.amount::float8, m.as_of, m.month_convention)
                            FILTER (WHERE e.account IS NOT NULL), 0) AS tmc,
               coalesce(@extschema@.tc(e.valid_from, e.valid_until, e.amount::float8, m.as_of, m.month_convention)
                            FILTER (WHERE e.account IS NOT NULL)
                        - @extschema@.tc(e.valid_from, e.valid_until, e.amount::float8,
                                         pg_catalog.make_date(m.year, 1, 1) - 1, m.month_convention)
                            FILTER (WHERE e.account IS NOT NULL), 0) AS tc
        FROM months m
        CROSS JOIN bounds b
        LEFT JOIN events e ON e.account = m.account AND e.machine = m.machine
                          AND e.valid_from <= m.as_of AND e.valid_until >= pg_catalog.make_date(m.year, 1, 1)
                          -- the figures the run decided on: not yet its own retraction
                          AND NOT EXISTS (SELECT 1 FROM @extschema@.regulation_log g
                                          WHERE g.entry_id = e.entry_id AND g.run_date = m.as_of)
        GROUP BY m.account, m.machine, m.month, m.as_of, m.monthly_threshold, b.first_year, m.year, m.month_of_year
        -- a month in which none of the pair's allocations is valid (from 1 January to the
        -- 15th) is no row: no run regulates the pair then (regulate()'s allocation_events())
        HAVING count(e.entry_id) > 0
    ), before AS (
        -- consumption_before(account, machine, instant j) for every j, from the consumption
        -- rollup, summed exactly as consumption_before() sums: a job ended by instant j counts
        -- its amount from there on ("whole", j with the rows of earlier boundaries), a job
        -- running across instant j its share before it ("part")
        SELECT c.account, c.machine, greatest(c.j, 1) AS j, sum(c.ended) AS whole,
               sum(c.running) FILTER (WHERE c.j >= 1) AS part
        FROM (SELECT c.account, coalesce(r.pool, r.cluster) AS machine, c.ended, c.running,
                     -- the boundary's number (1 January: k = 0; the 16th of month k)
                     (pg_catalog.date_part('year', c.boundary)::integer - b.first_year) * 13 + 1
                     + CASE WHEN pg_catalog.date_part('day', c.boundary) = 1 THEN 0
                            ELSE pg_catalog.date_part('month', c.boundary)::integer END AS j
              FROM hpcacct_internal.consumption_rollup_exact c
              JOIN @extschema@.resource r USING (resource_id)
              JOIN @extschema@.regulation_machine s ON s.machine = coalesce(r.pool, r.cluster)
              CROSS JOIN bounds b) c
        WHERE c.j <= (SELECT b.count FROM bounds b)
        GROUP BY 1, 2, 3
    ), grid AS (  -- consumption_before(account, machine, instant j) for every account, machine and j
        SELECT p.account, p.machine, j.j,
               coalesce(sum(bf.whole) OVER (PARTITION BY p.account, p.machine ORDER BY j.j), 0)
               + coalesce(bf.part, 0) AS amount
        FROM (SELECT DISTINCT m.account, m.machine FROM months m) p
        CROSS JOIN bounds b
        -- unnested from an array: PostgreSQL 15 estimates it at 10 rows, a series with bounds
        -- it cannot see at 1 000, for 13 a year (at 3 M jobs the grid at 267 000 rows for
        -- 15 600, the view's cost past jit_above_cost, and 75 ms of CPU compiling it)
        CROSS JOIN LATERAL pg_catalog.unnest(ARRAY(SELECT pg_catalog.generate_series(1, b.count))) AS j(j)
        LEFT JOIN before bf ON bf.account = p.account AND bf.machine = p.machine AND bf.j = j.j
    )
    SELECT st.account, st.machine, st.month, st.as_of,
           CASE WHEN st.granted >= st.monthly_threshold THEN 'monthly' ELSE 'annual' END AS regulation,
           st.alloc, st.tmc, st.tc, u.consumption, u.consumption - st.tc AS delta,
           CASE WHEN st.granted >= st.monthly_threshold
                THEN @extschema@.regulation_status(u.consumption, st.tc, st.tmc) END AS status,
           g.outcome AS logged_outcome, g.retracted
    FROM status st
    JOIN grid g_end ON g_end.account = st.account AND g_end.machine = st.machine AND g_end.j = st.j_end
    JOIN grid g_start ON g_start.account = st.account AND g_start.machine = st.machine AND g_start.j = st.j_start
    CROSS JOIN LATERAL (SELECT (g_end.amount - g_start.amount)::float8 AS consumption) u
    LEFT JOIN @extschema@.regulation_log g
      ON g.account = st.account AND g.machine = st.machine AND g.run_date = st.as_of AND g.run = 'monthly';
COMMENT ON VIEW @extschema@.regulation_report IS
    'Per account, machine and month up to today: Alloc, TMC, TC, consumption, delta and monthly status at the 15th (NULL under annual regulation), and the outcome the monthly run logged';

SELECT pg_catalog.pg_extension_config_dump('@extschema@.regulation_machine', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.exoneration', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.regulation_log', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.regulation_log_log_id_seq', '');
