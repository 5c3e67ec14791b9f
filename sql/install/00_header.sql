-- hpcacct install script, assembled by the Makefile from sql/install/*.sql in name order.
-- Every object lives in schema hpcacct (@extschema@); everything the script calls is
-- schema-qualified, so that a hostile search_path cannot change what it creates.

\echo Use "CREATE EXTENSION hpcacct" to load this file. \quit

-- Functions a user never calls (trigger functions, the support functions of types, operators
-- and aggregates, argument checks and other building blocks) live in hpcacct_internal, out of
-- `\df hpcacct.*`. No PUBLIC usage: setup_roles() grants USAGE to the extension's roles,
-- whose functions look the helpers up by name when they run.
CREATE SCHEMA hpcacct_internal;
COMMENT ON SCHEMA hpcacct_internal IS
    'hpcacct''s internal functions: trigger, type, operator and aggregate support, argument checks and building blocks';

-- A bad argument of a function whose body is plain SQL (inlined into its callers): the
-- caller tests cheaply (isfinite(day) OR ...) and calls this only to raise, naming the
-- argument: NULL is 22004, an infinite date or instant 22008, a negative interval or one with
-- a month part 22023. IMMUTABLE, so that an inlined IMMUTABLE caller stays inlinable. COST 1:
-- with PL/pgSQL's default of 100 in its callers' generic plans, a PL/pgSQL loop calling
-- bank_state() was replanned at every call (10 times slower).
CREATE FUNCTION hpcacct_internal.refuse_argument(value anyelement, caller text, arg text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE COST 1
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF value IS NULL THEN
            RAISE EXCEPTION '%: % must not be NULL', caller, arg USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF pg_typeof(value) IN ('date'::regtype, 'timestamp with time zone'::regtype) THEN
            RAISE EXCEPTION '%: % must be finite, not %', caller, arg, value USING ERRCODE = 'datetime_field_overflow';
        END IF;
        IF pg_typeof(value) = 'interval'::regtype THEN
            IF value::text::interval < interval '0' THEN
                RAISE EXCEPTION '%: % must not be negative', caller, arg USING ERRCODE = 'invalid_parameter_value';
            END IF;
            RAISE EXCEPTION '%: % must not have a month part', caller, arg USING ERRCODE = 'invalid_parameter_value',
                HINT = 'Pass the difference of two timestamps, e.g. "end" - start.';
        END IF;
        RAISE EXCEPTION '%: % is out of range: %', caller, arg, value USING ERRCODE = 'invalid_parameter_value';
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.refuse_argument(anyelement, text, text) IS
    'Raises the error for a bad argument of an inlined SQL function: NULL 22004, infinite 22008, negative or month-long interval 22023';

-- A name in a message's body (account, user, cluster, unit...), a subject or a held job's
-- comment: a control character (a CR or LF that would split the line) shows as a space. Inlined.
CREATE FUNCTION hpcacct_internal.notify_name(name text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN pg_catalog.regexp_replace(name, '[[:cntrl:]]', ' ', 'g');
COMMENT ON FUNCTION hpcacct_internal.notify_name(text) IS
    'A name or subject as messages print it: each control character (CR, LF...) a space';

-- An instant moved by a span a caller gives (a lease, a retry's back-off, the loader's overlap):
-- its days 24 hours and its months calendar months of UTC, not of the session's TimeZone, in
-- which a day across a change of summer time lasts 23 or 25 hours. Inlined.
CREATE FUNCTION hpcacct_internal.shift_utc(at timestamptz, span interval) RETURNS timestamptz
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN (at AT TIME ZONE 'UTC' + span) AT TIME ZONE 'UTC';
COMMENT ON FUNCTION hpcacct_internal.shift_utc(timestamptz, interval) IS
    'An instant plus a span, its days 24 hours and its months calendar months of UTC, whatever the session''s TimeZone';

-- A day in a message, a decision key or a note: ISO 8601 (2024-07-01), as a session of
-- DateStyle ISO prints it, whatever the DateStyle of the session that writes it. IMMUTABLE:
-- to_char() is STABLE for its localized patterns (TM), which this one has none of. Inlined.
CREATE FUNCTION hpcacct_internal.iso_date(day date) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN NOT pg_catalog.isfinite(day) THEN day::text  -- infinity, -infinity: in any DateStyle
                WHEN day < DATE '0001-01-01' THEN pg_catalog.to_char(day, 'YYYY-MM-DD') || ' BC'
                ELSE pg_catalog.to_char(day, 'YYYY-MM-DD') END;
COMMENT ON FUNCTION hpcacct_internal.iso_date(date) IS
    'A day as messages, decision keys and notes print it: ISO 8601 under any DateStyle';

-- An instant in a note or a message's reason: ISO 8601 in UTC to the second
-- (2024-07-01 00:00:00+00), whatever the DateStyle and TimeZone of the session that writes it;
-- infinity as itself. IMMUTABLE as iso_date(). Inlined.
CREATE FUNCTION hpcacct_internal.iso_instant(at timestamptz) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN NOT pg_catalog.isfinite(at) THEN at::text
                ELSE pg_catalog.to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || '+00' END;
COMMENT ON FUNCTION hpcacct_internal.iso_instant(timestamptz) IS
    'An instant as notes and reasons print it: ISO 8601 in UTC, to the second, under any DateStyle and TimeZone';

-- A float8 figure in a JSON document (a statement, a message's figures): the numeric of its
-- shortest exact text, every digit a default session prints, whatever the session's
-- extra_float_digits. (A float8 cast to numeric keeps 15 significant digits only.)
CREATE FUNCTION hpcacct_internal.float_figure(x float8) RETURNS numeric
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    SET extra_float_digits = 1
    RETURN x::text::numeric;
COMMENT ON FUNCTION hpcacct_internal.float_figure(float8) IS
    'A float8 figure as numeric with every digit of its shortest exact text, under any extra_float_digits';

-- A whole number of at least 0 with its thousands separated by commas (1,000,000), every digit
-- however large (to_char()'s patterns print # past their width): what ledger_figure() and
-- notify_number() print the integer part of a figure with.
CREATE FUNCTION hpcacct_internal.grouped_digits(n numeric) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN pg_catalog.reverse(pg_catalog.regexp_replace(pg_catalog.reverse(n::text), '([0-9]{3})(?=[0-9])', '\1,', 'g'));
COMMENT ON FUNCTION hpcacct_internal.grouped_digits(numeric) IS
    'A whole number of at least 0 with its thousands separated by commas, every digit';

-- A ledger figure (an amount, a balance, an allocation of the bank) as documents print it: every
-- digit of its 6 decimals, at least 2, thousands separated by commas (-0.015, 1,000,000.00).
-- Never rounded to a figure that hides a sign or a difference: a balance of -0.000001 is not
-- 0.00, and printed lines add up as the exact ones do. NULL is 'n/a'.
CREATE FUNCTION hpcacct_internal.ledger_figure(x numeric) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN x IS NULL THEN 'n/a'
                ELSE CASE WHEN pg_catalog.round(x, 6) < 0 THEN '-' ELSE '' END
                     || hpcacct_internal.grouped_digits(pg_catalog.trunc(pg_catalog.abs(pg_catalog.round(x, 6))))
                     -- the decimals: '.' and 2 to 6 digits
                     || pg_catalog.substr(pg_catalog.to_char(pg_catalog.abs(pg_catalog.round(x, 6))
                                                             - pg_catalog.trunc(pg_catalog.abs(pg_catalog.round(x, 6))),
                                                             'FM0.009999'), 2) END;
COMMENT ON FUNCTION hpcacct_internal.ledger_figure(numeric) IS
    'A ledger figure as statements, messages and refusals print it: every digit of its 6 decimals (at least 2), '
    'thousands separated by commas';

-- Numbers in messages: whole units with a thin grouping, as the documents print them (here, before
-- 85_enforce's refusals, which print a quota's figures with it).
-- (A body parsed at creation, without a SET clause: it is inlined into the messages' queries.)
CREATE FUNCTION hpcacct_internal.notify_number(x numeric) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN x IS NULL THEN 'n/a'
                ELSE CASE WHEN pg_catalog.round(x) < 0 THEN '-' ELSE '' END
                     || hpcacct_internal.grouped_digits(pg_catalog.abs(pg_catalog.round(x))) END;
COMMENT ON FUNCTION hpcacct_internal.notify_number(numeric) IS 'A figure as messages print it: rounded, thousands separated by commas';

-- Runs that must not overlap keep apart on a row of run_lock each, locked FOR UPDATE until
-- their transaction ends (run_alone). Not on advisory locks: any login may take any advisory
-- lock, and so stall the loader or the rollups; a row of this table can be locked only by
-- its owner and whoever may execute run_alone() (hpcacct_admin). federation_resync() holds
-- a row of its own link across its commits, as a lease naming its session (holder_pid).
CREATE TABLE hpcacct_internal.run_lock (
    name         text PRIMARY KEY,
    holder_pid   integer,
    holder_since timestamptz
);
COMMENT ON TABLE hpcacct_internal.run_lock IS
    'Rows that runs which must not overlap lock (rollup upkeep, sacct loads, account syncs, quarter openings, '
    'queue syncs), '
    'and the leases of federation_resync() runs';
INSERT INTO hpcacct_internal.run_lock (name) VALUES ('rollup'), ('load_sacct'), ('sync_slurm_accounts'), ('open_quarter'),
                                                  ('recheck_queued');

CREATE FUNCTION hpcacct_internal.run_alone(run text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM 1 FROM hpcacct_internal.run_lock l WHERE l.name = run FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'no run named %', run USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.run_alone(text) IS
    'Waits until no other transaction runs the run named (rollup, load_sacct, sync_slurm_accounts, open_quarter, '
    'recheck_queued: hpcacct-slurm-sync''s queue run), '
    'then keeps others waiting until this transaction ends';
REVOKE EXECUTE ON FUNCTION hpcacct_internal.run_alone(text) FROM PUBLIC;

-- Scheduled runs of a day that go in date order (open_quarter: a quarter's first day;
-- notify_scan, recheck_queued: the day) keep the latest day they ran for, so that a past day
-- after a later run is refused even when that run wrote nothing (its log alone cannot tell).
CREATE TABLE hpcacct_internal.run_day (
    run      text PRIMARY KEY,
    last_day date NOT NULL
);
COMMENT ON TABLE hpcacct_internal.run_day IS
    'The latest day each scheduled run that goes in date order (open_quarter, notify_scan, recheck_queued) ran for';
SELECT pg_catalog.pg_extension_config_dump('hpcacct_internal.run_day', '');

-- Records that run ran for day, in the caller's transaction, and returns NULL; or, when it
-- ran already for a later day, records nothing and returns that day (the caller refuses).
-- A run of the same day again writes nothing. Runs wait for each other on the run's row
-- until the transaction ends; a run's first one inserts it first, so that a second first run
-- waits for it (and then reads its day) rather than find no row and record an earlier day.
CREATE FUNCTION hpcacct_internal.run_in_order(run text, day date) RETURNS date
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        last date;
    BEGIN
        IF run IS NULL OR day IS NULL THEN
            RAISE EXCEPTION 'run_in_order needs a run and a day' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        INSERT INTO hpcacct_internal.run_day (run, last_day) VALUES (run_in_order.run, day)
        ON CONFLICT ON CONSTRAINT run_day_pkey DO NOTHING;
        IF FOUND THEN
            RETURN NULL;  -- the first run
        END IF;
        SELECT r.last_day INTO last FROM hpcacct_internal.run_day r WHERE r.run = run_in_order.run FOR UPDATE;
        IF last > day THEN
            RETURN last;
        ELSIF last < day THEN
            UPDATE hpcacct_internal.run_day r SET last_day = day WHERE r.run = run_in_order.run;
        END IF;
        RETURN NULL;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.run_in_order(text, date) IS
    'Records the day a scheduled run that goes in date order ran for; returns the later day it ran for already '
    '(then records nothing), NULL otherwise';
REVOKE EXECUTE ON FUNCTION hpcacct_internal.run_in_order(text, date) FROM PUBLIC;
