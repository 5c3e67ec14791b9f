-- ---------------------------------------------------------------------------------------
-- The quarterly bank, HLRN (rules §4): users, members, deposits per quarter, balances,
-- the quarter-start run and the submit check.
-- ---------------------------------------------------------------------------------------

-- What each quarter-start run did; its unique key makes the run idempotent.
CREATE TABLE @extschema@.quarter_log (
    quarter        date NOT NULL,
    account        text NOT NULL,
    action         text NOT NULL CHECK (action IN ('top_up', 'expired', 'deleted', 'default_reset')),
    target_quarter date NOT NULL,
    amount         numeric(20, 6),
    username       text,
    done_at        timestamptz NOT NULL DEFAULT pg_catalog.statement_timestamp(),
    -- once per quarter, account, action and target quarter (and user, for a default reset)
    CONSTRAINT quarter_log_once UNIQUE NULLS NOT DISTINCT (quarter, account, action, target_quarter, username)
);
COMMENT ON TABLE @extschema@.quarter_log IS
    'What open_quarter did: top-ups (per target quarter), expiries, deletions, default-project resets';

-- Jobs a site records as queued, for recheck_queued().
CREATE TABLE @extschema@.pending_job (
    cluster      text NOT NULL,
    jobid        text NOT NULL,
    username     text NOT NULL,
    account      text,
    submitted_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    held         boolean NOT NULL DEFAULT false,
    hold_reason  text,
    checked_at   timestamptz,
    -- the partition(s) it waits for, as squeue prints them ("a,b"): the pool of its fair share
    partition    text,
    -- the hold hpcacct-slurm-sync placed in Slurm and how it lifts it: release (scontrol
    -- release), uhold (back to the owner's own hold, scontrol uhold); NULL: none of its own
    sync_hold    text CHECK (sync_hold IN ('release', 'uhold')),
    -- the sync is lifting its hold (set before scontrol release/uhold, cleared when recorded)
    sync_lifting boolean NOT NULL DEFAULT false,
    -- Slurm showed a hold the sync did not place (an operator's) when it last read the queue
    other_hold   boolean NOT NULL DEFAULT false,
    -- why it is held, without the account's figures (refusal_message with no details): the
    -- comment hpcacct-slurm-sync gives the job, which every user of the cluster reads
    hold_comment text,
    PRIMARY KEY (cluster, jobid),
    CONSTRAINT pending_job_cluster_named CHECK (cluster <> ''),
    CONSTRAINT pending_job_jobid_named CHECK (jobid <> '')
);
COMMENT ON TABLE @extschema@.pending_job IS
    'Queued jobs as the site records them; recheck_queued() holds those whose account became invalid';
COMMENT ON COLUMN @extschema@.pending_job.hold_comment IS
    'Why the job is held, without the account''s figures (hold_reason has them, for its owner): the comment '
    'hpcacct-slurm-sync gives the job, which every user of the cluster may read';

CREATE INDEX ledger_bank ON @extschema@.ledger (account, valid_from) WHERE kind IN ('deposit', 'transfer', 'refund');
-- A personal top-up to a level is booked once per account and quarter, whatever runs at the
-- same time and under any isolation level: the note names the level topped up to, and a
-- second booking of it conflicts here (top_up() and open_quarter() skip it, or fail with a
-- serialization error under REPEATABLE READ, to be retried).
CREATE UNIQUE INDEX ledger_top_up_once ON @extschema@.ledger (account, valid_from, note)
    WHERE kind = 'deposit' AND note LIKE 'personal allotment up to %';

SELECT pg_catalog.pg_extension_config_dump('@extschema@.quarter_log', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.pending_job', '');

-- ---- quarters ------------------------------------------------------------------------

CREATE FUNCTION @extschema@.quarter_start(day date) RETURNS date
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN pg_catalog.date_trunc('quarter', day::timestamp)::date;
COMMENT ON FUNCTION @extschema@.quarter_start(date) IS 'First day of the calendar quarter containing a day';

-- ---- the balance aggregate -------------------------------------------------------------

-- The bank's unit, as setting_value('bank_unit') gives it, without reading pg_settings (the
-- settings view does, for the time zone's default): the submit check reads it at every
-- submission. PL/pgSQL keeps its plan for the session.
CREATE FUNCTION hpcacct_internal.bank_unit() RETURNS text
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        RETURN coalesce((SELECT s.value FROM @extschema@.setting s WHERE s.name = 'bank_unit'),
                        (SELECT c.default_value FROM @extschema@.setting_catalog() c WHERE c.name = 'bank_unit'));
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.bank_unit() IS 'The setting bank_unit (cheaply: what setting_value(''bank_unit'') gives)';

CREATE TYPE @extschema@.bank_balance AS (
    quarter_start date,
    deposits      numeric,
    charges       numeric,
    transfers     numeric,
    refunds       numeric,
    balance       numeric
);
COMMENT ON TYPE @extschema@.bank_balance IS
    'An account''s quarter: deposits, charges, transfers (signed), refunds and balance (exact, 6 decimals)';

CREATE FUNCTION hpcacct_internal.quarter_balance_transfn(internal, text, date, numeric, date) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_quarter_balance_transfn' LANGUAGE c IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION hpcacct_internal.quarter_balance_combinefn(internal, internal) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_quarter_balance_combinefn' LANGUAGE c IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION hpcacct_internal.quarter_balance_serialfn(internal) RETURNS bytea
    AS 'MODULE_PATHNAME', 'hpcacct_quarter_balance_serialfn' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION hpcacct_internal.quarter_balance_deserialfn(bytea, internal) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_quarter_balance_deserialfn' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION hpcacct_internal.quarter_balance_finalfn(internal) RETURNS @extschema@.bank_balance
    AS 'MODULE_PATHNAME', 'hpcacct_quarter_balance_finalfn' LANGUAGE c IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.quarter_balance_transfn(internal, text, date, numeric, date) IS
    'Support function of the aggregate quarter_balance';
COMMENT ON FUNCTION hpcacct_internal.quarter_balance_combinefn(internal, internal) IS
    'Support function of the aggregate quarter_balance';
COMMENT ON FUNCTION hpcacct_internal.quarter_balance_serialfn(internal) IS
    'Support function of the aggregate quarter_balance';
COMMENT ON FUNCTION hpcacct_internal.quarter_balance_deserialfn(bytea, internal) IS
    'Support function of the aggregate quarter_balance';
COMMENT ON FUNCTION hpcacct_internal.quarter_balance_finalfn(internal) IS
    'Support function of the aggregate quarter_balance';

-- Exact: amounts are summed in integer micro-units (the ledger's 6 decimals); an amount with
-- more decimals is rounded to 6, half away from zero, as it enters; a sum beyond about
-- 9.2e12 is an error (22003).
CREATE AGGREGATE @extschema@.quarter_balance(kind text, quarter date, amount numeric, at date) (
    SFUNC = hpcacct_internal.quarter_balance_transfn,
    STYPE = internal,
    SSPACE = 48,
    FINALFUNC = hpcacct_internal.quarter_balance_finalfn,
    COMBINEFUNC = hpcacct_internal.quarter_balance_combinefn,
    SERIALFUNC = hpcacct_internal.quarter_balance_serialfn,
    DESERIALFUNC = hpcacct_internal.quarter_balance_deserialfn,
    PARALLEL = SAFE
);
COMMENT ON AGGREGATE @extschema@.quarter_balance(text, date, numeric, date) IS
    'Balance of the quarter containing at, over bank entries (kind deposit/charge/transfer/refund, a day of the '
    'quarter each counts in, amount); entries of other quarters do not count (credits do not carry over); exact '
    '(micro-units, each amount rounded to 6 decimals)';

-- Bank entries in the bank's unit, each in the quarter it counts in: deposits, transfers and
-- refunds in the quarter of valid_from; charges split pro rata over the quarters (site time
-- zone) in which the job ran.
CREATE VIEW @extschema@.bank_entry AS
    SELECT l.entry_id, l.account, l.kind, @extschema@.quarter_start(l.valid_from) AS quarter, l.amount
    FROM @extschema@.ledger l
    WHERE l.kind IN ('deposit', 'transfer', 'refund')
      AND l.unit = (SELECT @extschema@.setting_value('bank_unit'))
    UNION ALL
    SELECT l.entry_id, l.account, l.kind, q.quarter::date,
           l.amount * @extschema@.period_share(l.job_start, l.job_end,
                                               q.quarter AT TIME ZONE z.tz,
                                               (q.quarter + interval '3 months') AT TIME ZONE z.tz)
    FROM @extschema@.ledger l
    CROSS JOIN (SELECT (SELECT @extschema@.site_timezone()) AS tz) z  -- once per query
    CROSS JOIN LATERAL pg_catalog.generate_series(
        -- (the quarters as local_time() counts them: where a midnight comes twice, from PostgreSQL's)
        pg_catalog.date_trunc('quarter', hpcacct_internal.local_time(l.job_start, z.tz)),
        pg_catalog.date_trunc('quarter', hpcacct_internal.local_time(l.job_end, z.tz)),
        interval '3 months') AS q(quarter)
    WHERE l.kind = 'charge'
      AND l.unit = (SELECT @extschema@.setting_value('bank_unit'))
      AND (q.quarter < hpcacct_internal.local_time(l.job_end, z.tz) OR l.job_end = l.job_start);
COMMENT ON VIEW @extschema@.bank_entry IS
    'Ledger entries in the bank unit, each attributed to the quarter it counts in (charges pro rata)';

-- What the balance counts, per account, between two quarter starts: deposits, transfers and
-- refunds in the bank unit on the day they are valid from, and the charges in the bank unit
-- per quarter they count in (the rollup's exact sum of the quarter, one row). balance(), the
-- submit check and quarter_balances aggregate these rows with quarter_balance(), so that they
-- give the same digits. SQL-standard (names bound at creation), without SET options: the
-- planner inlines it, as bank_state() below, into its callers' plans. A NULL bound is 22004;
-- -infinity and infinity are no bound (quarter_balances reads all quarters so).
CREATE FUNCTION @extschema@.bank_ledger (from_day date, until_day date)
    RETURNS TABLE (account text, kind text, day date, amount numeric)
    LANGUAGE sql STABLE PARALLEL SAFE
BEGIN ATOMIC
        SELECT l.account, l.kind, l.valid_from, l.amount
        FROM @extschema@.ledger l
        WHERE l.kind IN ('deposit', 'transfer', 'refund') AND l.unit = (SELECT hpcacct_internal.bank_unit())
          AND l.valid_from >= bank_ledger.from_day AND l.valid_from < bank_ledger.until_day
          -- (once: the first branch always runs first)
          AND (bank_ledger.from_day IS NOT NULL OR hpcacct_internal.refuse_argument(bank_ledger.from_day, 'bank_ledger', 'from_day'))
          AND (bank_ledger.until_day IS NOT NULL OR hpcacct_internal.refuse_argument(bank_ledger.until_day, 'bank_ledger', 'until_day'))
        UNION ALL
        SELECT c.account, 'charge', @extschema@.quarter_start(c.month), sum(c.amount)
        FROM hpcacct_internal.charge_rollup_exact c
        WHERE c.unit = (SELECT hpcacct_internal.bank_unit())
          AND c.month >= bank_ledger.from_day AND c.month < bank_ledger.until_day
        GROUP BY c.account, @extschema@.quarter_start(c.month);
END;
COMMENT ON FUNCTION @extschema@.bank_ledger(date, date) IS
    'What bank balances count, from_day (included) to until_day (excluded), quarter starts: deposits, transfers, '
    'refunds (on their day) and charges (per quarter) in the bank unit; a NULL bound is an error (22004), an '
    'infinite one no bound';

-- An account in the bank at a day, one definition for balance(), account_state(), the submit
-- check, open_quarter() and quarter_balances (no row for an unknown account). SQL-standard,
-- without SET options, so that the planner inlines it into each of them (and a caller's cached
-- plan keeps it). Written "name (" as setting_catalog() (see there).
--   state       deleted (personal accounts, for good); active while it has an allocation
--               (deposits and transfers adding up to more than zero) for the day's quarter;
--               inactive when it has none for this quarter but one for a later quarter (not
--               yet active, not expired either); otherwise expired;
--   next_allocation  the first later quarter with an allocation;
--   balance     deposits + transfers + refunds - charges of the day's quarter, exact.
-- A NULL day is 22004, an infinite one 22008 (a test the planner folds or runs once).
CREATE FUNCTION @extschema@.bank_state (account text, day date)
    RETURNS TABLE (state text, next_allocation date, balance numeric)
    LANGUAGE sql STABLE PARALLEL SAFE
BEGIN ATOMIC
    -- the day checked first in the select list too: a constant day is folded there before the
    -- subquery's bank_ledger() (which would name its from_day instead)
    SELECT CASE WHEN NOT (pg_catalog.isfinite(bank_state.day)
                          OR hpcacct_internal.refuse_argument(bank_state.day, 'bank_state', 'day')) THEN NULL
                WHEN a.deleted_in <= bank_state.day THEN 'deleted'
                WHEN q.current THEN 'active'
                WHEN q.later IS NOT NULL THEN 'inactive'
                ELSE 'expired' END,
           q.later,
           coalesce((SELECT (@extschema@.quarter_balance(e.kind, e.day, e.amount, bank_state.day)).balance
                     FROM @extschema@.bank_ledger(@extschema@.quarter_start(bank_state.day),
                                                  (@extschema@.quarter_start(bank_state.day) + interval '3 months')::date) e
                     WHERE e.account = a.name), 0)
    FROM @extschema@.account a
    CROSS JOIN LATERAL (
        SELECT coalesce(bool_or(s.quarter = @extschema@.quarter_start(bank_state.day)), false) AS current,
               min(s.quarter) FILTER (WHERE s.quarter > @extschema@.quarter_start(bank_state.day)) AS later
        FROM (SELECT @extschema@.quarter_start(l.valid_from) AS quarter
              FROM @extschema@.ledger l
              WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer')
                AND l.unit = (SELECT hpcacct_internal.bank_unit())
                AND l.valid_from >= @extschema@.quarter_start(bank_state.day)
              GROUP BY 1
              HAVING sum(l.amount) > 0) s) q
    WHERE a.name = bank_state.account
      AND (pg_catalog.isfinite(bank_state.day) OR hpcacct_internal.refuse_argument(bank_state.day, 'bank_state', 'day'));
END;
COMMENT ON FUNCTION @extschema@.bank_state(text, date) IS
    'An account in the bank at a day: state (active/inactive/expired/deleted), first later quarter with an '
    'allocation, exact balance of the day''s quarter; no row for an unknown account; a NULL (22004) or infinite '
    '(22008) day is an error';

CREATE FUNCTION @extschema@.account_state(account text, at date DEFAULT @extschema@.site_today())
    RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN (SELECT b.state FROM @extschema@.bank_state(account, hpcacct_internal.day_or_today(at, 'account_state')) b);
COMMENT ON FUNCTION @extschema@.account_state(text, date) IS
    'active (an allocation this quarter), inactive (none this quarter, one later), expired (none this quarter or '
    'later), or deleted, at a day (NULL: today in the site time zone); NULL for an unknown account';

-- Exact balance of an account in the quarter containing `at` (bank_state()).
-- A NULL `at` is today in the site's time zone; a NULL account is 22004; an account that does
-- not exist, or that row-level security hides from the caller, is 42704 (the same error for
-- both, so that a portal user learns nothing of other accounts), never a balance of 0.
CREATE FUNCTION @extschema@.balance(account text, at date DEFAULT @extschema@.site_today())
    RETURNS numeric
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM hpcacct_internal.require_account(account, 'balance');
        RETURN (SELECT b.balance FROM @extschema@.bank_state(account, hpcacct_internal.day_or_today(at, 'balance')) b);
    END
    $$;
COMMENT ON FUNCTION @extschema@.balance(text, date) IS
    'Balance of an account in the quarter containing at (default and NULL: today in the site time zone): '
    'deposits + transfers + refunds - charges, exact; an unknown or invisible account is an error (42704)';

-- Accounts' bank balances at the end of a day: balance() counts the whole quarter's charges,
-- so the part of them after the day is added back (balance() itself when no job runs past
-- it): charges_after_day_end()'s, in the bank's unit on every cluster, rounded to 6 decimals,
-- read in one pass for all the accounts given. A NULL day is 22004.
CREATE FUNCTION hpcacct_internal.balances_at_end(accounts text[], day date)
    RETURNS TABLE (account text, balance numeric)
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF $2 IS NULL THEN  -- not balance()'s today, which counts the rest of the quarter
            PERFORM hpcacct_internal.refuse_argument($2, 'balance_at_end', 'day');
        END IF;
        RETURN QUERY
        SELECT x.account, @extschema@.balance(x.account, $2) + coalesce(round(after_day.amount, 6), 0)
        FROM (SELECT DISTINCT u.account FROM unnest($1) AS u(account)) x
        LEFT JOIN hpcacct_internal.charges_after_day_end(
                      coalesce($1, '{}'), hpcacct_internal.bank_unit(), NULL, $2,
                      (@extschema@.quarter_start($2) + interval '3 months')::date) after_day
               ON after_day.account = x.account;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.balances_at_end(text[], date) IS
    'Bank balances of accounts at the end of a day: balance() without the quarter''s charges after that day';

CREATE FUNCTION hpcacct_internal.balance_at_end(account text, day date) RETURNS numeric
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT b.balance FROM hpcacct_internal.balances_at_end(ARRAY[balance_at_end.account], balance_at_end.day) b
    $$;
COMMENT ON FUNCTION hpcacct_internal.balance_at_end(text, date) IS
    'Bank balance of an account at the end of a day: balance() without the quarter''s charges after that day';

-- One row per account and quarter with entries: what a portal shows. The balance is
-- balance()'s (the same rows of bank_ledger through quarter_balance), the state
-- account_state()'s at the quarter's first day.
CREATE VIEW @extschema@.quarter_balances AS
    SELECT p.account, a.kind AS account_kind, p.quarter,
           (p.b).deposits, (p.b).charges, (p.b).transfers, (p.b).refunds, (p.b).balance, s.state
    FROM (SELECT e.account, @extschema@.quarter_start(e.day) AS quarter,
                 @extschema@.quarter_balance(e.kind, e.day, e.amount, @extschema@.quarter_start(e.day)) AS b
          FROM @extschema@.bank_ledger('-infinity', 'infinity') e
          GROUP BY e.account, @extschema@.quarter_start(e.day)) p
    JOIN @extschema@.account a ON a.name = p.account
    CROSS JOIN LATERAL @extschema@.bank_state(p.account, p.quarter) s;
COMMENT ON VIEW @extschema@.quarter_balances IS
    'Per account and quarter: deposits, charges, transfers, refunds, balance (exact), state (active/inactive/expired/deleted)';

-- ---- deposits, transfers, refunds ----------------------------------------------------

CREATE FUNCTION hpcacct_internal.require_bank_account(account text, caller text) RETURNS void
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM hpcacct_internal.require_account(account, caller);
        IF EXISTS (SELECT 1 FROM @extschema@.account a WHERE a.name = account AND a.deleted_in IS NOT NULL) THEN
            RAISE EXCEPTION 'account "%" has been deleted', account
                USING ERRCODE = 'HA002', HINT = 'Deleted personal accounts cannot be reactivated.';
        END IF;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.require_bank_account(text, text) IS
    'An account argument of a bank operation: require_account(), and not deleted (HA002)';

CREATE FUNCTION hpcacct_internal.require_amount(amount numeric) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF amount IS NULL THEN
            RAISE EXCEPTION 'amount must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        -- the ledger's numeric(20, 6) holds less than 10^14; an amount is booked rounded to 6
        -- decimals, so one that rounds to 0 would book nothing (a transfer of two zero rows)
        IF amount = 'NaN' OR amount <= 0 OR amount >= 1e14 THEN
            RAISE EXCEPTION 'amount must be a positive number below 10^14, not %', amount
                USING ERRCODE = 'numeric_value_out_of_range';
        ELSIF round(amount, 6) = 0 THEN
            RAISE EXCEPTION 'amount must be a positive number below 10^14 at the ledger''s 6 decimals, not %', amount
                USING ERRCODE = 'numeric_value_out_of_range';
        END IF;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.require_amount(numeric) IS 'Raises unless the amount is a positive number below 10^14 that does not round to 0 (the ledger''s numeric(20, 6))';

CREATE FUNCTION hpcacct_internal.book_allocation(account text, kind text, quarter date, amount numeric, note text)
    RETURNS bigint
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        q constant date := @extschema@.quarter_start(quarter);
        entry bigint;
    BEGIN
        IF quarter IS NULL THEN
            RAISE EXCEPTION 'quarter must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF NOT isfinite(quarter) THEN
            RAISE EXCEPTION 'quarter must be a finite date' USING ERRCODE = 'datetime_field_overflow';
        END IF;
        INSERT INTO @extschema@.ledger (account, kind, amount, unit, valid_from, valid_until, note)
        VALUES (account, kind, amount, @extschema@.setting_value('bank_unit'), q, (q + interval '3 months')::date - 1, note)
        RETURNING entry_id INTO entry;
        RETURN entry;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.book_allocation(text, text, date, numeric, text) IS
    'Books a bank entry valid for the quarter containing a day (internal helper)';
REVOKE EXECUTE ON FUNCTION hpcacct_internal.book_allocation(text, text, date, numeric, text) FROM PUBLIC;

-- A deposit or a refund: a positive amount credited to an existing account.
CREATE FUNCTION hpcacct_internal.book_credit(account text, kind text, quarter date, amount numeric, note text)
    RETURNS bigint
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM hpcacct_internal.require_bank_account(account, kind);
        PERFORM hpcacct_internal.require_amount(amount);
        RETURN hpcacct_internal.book_allocation(account, kind, quarter, amount, note);
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.book_credit(text, text, date, numeric, text) IS
    'Books a deposit or refund of a positive amount to an account that exists and is not deleted';
REVOKE EXECUTE ON FUNCTION hpcacct_internal.book_credit(text, text, date, numeric, text) FROM PUBLIC;

CREATE FUNCTION @extschema@.deposit(account text, quarter date, amount numeric, note text DEFAULT NULL)
    RETURNS bigint LANGUAGE sql RETURN hpcacct_internal.book_credit(account, 'deposit', quarter, amount, note);
COMMENT ON FUNCTION @extschema@.deposit(text, date, numeric, text) IS
    'Deposits credits into an account for the quarter containing a day; returns the ledger entry';
REVOKE EXECUTE ON FUNCTION @extschema@.deposit(text, date, numeric, text) FROM PUBLIC;

CREATE FUNCTION @extschema@.refund(account text, quarter date, amount numeric, note text DEFAULT NULL)
    RETURNS bigint LANGUAGE sql RETURN hpcacct_internal.book_credit(account, 'refund', quarter, amount, note);
COMMENT ON FUNCTION @extschema@.refund(text, date, numeric, text) IS
    'Gives credits back to an account in the quarter containing a day (e.g. for a failed job)';
REVOKE EXECUTE ON FUNCTION @extschema@.refund(text, date, numeric, text) FROM PUBLIC;

-- Staff move allocation between quarters and between accounts: two ledger rows.
CREATE FUNCTION @extschema@.transfer(from_account text, from_quarter date, to_account text, to_quarter date,
                                     amount numeric, note text DEFAULT NULL)
    RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM hpcacct_internal.require_bank_account(from_account, 'transfer');
        PERFORM hpcacct_internal.require_bank_account(to_account, 'transfer');
        PERFORM hpcacct_internal.require_amount(amount);
        IF from_account = to_account AND @extschema@.quarter_start(from_quarter) = @extschema@.quarter_start(to_quarter) THEN
            RAISE EXCEPTION 'a transfer needs a different account or quarter' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        PERFORM hpcacct_internal.book_allocation(from_account, 'transfer', from_quarter, -amount, note);
        PERFORM hpcacct_internal.book_allocation(to_account, 'transfer', to_quarter, amount, note);
    END
    $$;
COMMENT ON FUNCTION @extschema@.transfer(text, date, text, date, numeric, text) IS
    'Moves allocation from one account and quarter to another (staff); two ledger rows';
REVOKE EXECUTE ON FUNCTION @extschema@.transfer(text, date, text, date, numeric, text) FROM PUBLIC;

-- Tops an account up to `target` in a quarter: deposits only what is missing, never twice.
-- The note of a top-up deposit: the level it tops up to, the key that books it once.
CREATE FUNCTION hpcacct_internal.top_up_note(target numeric) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN 'personal allotment up to ' || pg_catalog.trim_scale(target)::text;
COMMENT ON FUNCTION hpcacct_internal.top_up_note(numeric) IS 'Ledger note of a personal top-up to a level (its once-only key)';

CREATE FUNCTION @extschema@.top_up(account text, quarter date, target numeric) RETURNS numeric
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    #variable_conflict use_column
    DECLARE
        q constant date := @extschema@.quarter_start(quarter);
        bank_unit constant text := @extschema@.setting_value('bank_unit');
        booked numeric;
    BEGIN
        PERFORM hpcacct_internal.require_bank_account(account, 'top_up');
        IF quarter IS NULL OR target IS NULL THEN
            RAISE EXCEPTION 'top_up needs a quarter and a target' USING ERRCODE = 'null_value_not_allowed';
        ELSIF NOT isfinite(quarter) THEN
            RAISE EXCEPTION 'quarter must be a finite date' USING ERRCODE = 'datetime_field_overflow';
        ELSIF target = 'NaN' OR target < 0 OR target >= 1e14 THEN
            RAISE EXCEPTION 'top_up: target must be a number from 0 to below 10^14, not %', target
                USING ERRCODE = 'numeric_value_out_of_range';
        END IF;
        INSERT INTO @extschema@.ledger (account, kind, amount, unit, valid_from, valid_until, note)
        SELECT top_up.account, 'deposit', target - coalesce(sum(l.amount), 0), bank_unit, q,
               (q + interval '3 months')::date - 1, hpcacct_internal.top_up_note(target)
        FROM @extschema@.ledger l
        WHERE l.account = top_up.account AND l.kind = 'deposit' AND l.valid_from = q AND l.unit = bank_unit
        HAVING target - coalesce(sum(l.amount), 0) > 0
        ON CONFLICT (account, valid_from, note) WHERE kind = 'deposit' AND note LIKE 'personal allotment up to %'
        DO NOTHING
        RETURNING amount INTO booked;
        RETURN coalesce(booked, 0);
    END
    $$;
COMMENT ON FUNCTION @extschema@.top_up(text, date, numeric) IS
    'Deposits what an account lacks to reach a target in a quarter; returns the amount deposited';
REVOKE EXECUTE ON FUNCTION @extschema@.top_up(text, date, numeric) FROM PUBLIC;

CREATE FUNCTION @extschema@.personal_allotment(account text) RETURNS numeric
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM hpcacct_internal.require_account(account, 'personal_allotment');
        RETURN (SELECT coalesce(a.personal_allotment, @extschema@.setting_value('personal_allotment')::numeric)
                FROM @extschema@.account a WHERE a.name = personal_allotment.account);
    END
    $$;
COMMENT ON FUNCTION @extschema@.personal_allotment(text) IS
    'Credits per quarter a personal account is topped up to; a NULL (22004) or unknown account (42704) is an error';

-- A personal allotment may be raised on request, up to double the setting.
CREATE FUNCTION hpcacct_internal.check_personal_allotment() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF NEW.personal_allotment > 2 * @extschema@.setting_value('personal_allotment')::numeric THEN
            RAISE EXCEPTION 'personal allotment % exceeds double the default (%)',
                            NEW.personal_allotment, @extschema@.setting_value('personal_allotment')
                USING ERRCODE = 'numeric_value_out_of_range';
        END IF;
        RETURN NEW;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.check_personal_allotment() IS 'Trigger: a personal allotment is at most double the setting';
CREATE TRIGGER check_personal_allotment BEFORE INSERT OR UPDATE OF personal_allotment ON @extschema@.account
    FOR EACH ROW WHEN (NEW.personal_allotment IS NOT NULL)
    EXECUTE FUNCTION hpcacct_internal.check_personal_allotment();

-- ---- users and members ---------------------------------------------------------------

-- A new user gets a personal account named after them, holding the allotment for the
-- current and the two following quarters.
CREATE FUNCTION @extschema@.add_user(username text, at date DEFAULT @extschema@.site_today()) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        q date := @extschema@.quarter_start(hpcacct_internal.day_or_today(at, 'add_user'));
    BEGIN
        IF username IS NULL THEN
            RAISE EXCEPTION 'add_user: username must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF username = '' THEN
            RAISE EXCEPTION 'add_user: username must not be empty' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF username ~ '[[:cntrl:]]' THEN
            RAISE EXCEPTION 'add_user: username must not hold control characters' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF pg_catalog.length(username) > 64 THEN  -- a login name (useradd takes 32)
            RAISE EXCEPTION 'add_user: username must be at most 64 characters, not %', pg_catalog.length(username)
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF EXISTS (SELECT 1 FROM @extschema@.hpc_user u WHERE u.username = add_user.username) THEN
            RAISE EXCEPTION 'user "%" already exists', username USING ERRCODE = 'unique_violation';
        END IF;
        INSERT INTO @extschema@.account (name, kind, description) VALUES (username, 'personal', 'personal account');
        INSERT INTO @extschema@.hpc_user (username) VALUES (username);
        INSERT INTO @extschema@.membership (account, username, role) VALUES (username, username, 'admin');
        FOR i IN 0 .. 2 LOOP
            PERFORM @extschema@.top_up(username, (q + i * interval '3 months')::date,
                                       @extschema@.personal_allotment(username));
        END LOOP;
    END
    $$;
COMMENT ON FUNCTION @extschema@.add_user(text, date) IS
    'Creates a user with a personal account holding the allotment for this and the next two quarters (at NULL: today in the site time zone); '
    'a username is not empty, holds no control character and is at most 64 characters (22023)';
REVOKE EXECUTE ON FUNCTION @extschema@.add_user(text, date) FROM PUBLIC;

-- Whether a user administers an account (a membership with role admin).
CREATE FUNCTION hpcacct_internal.administers(username text, account text) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN EXISTS (SELECT 1 FROM @extschema@.membership m
                   WHERE m.account = administers.account AND m.username = administers.username AND m.role = 'admin');
COMMENT ON FUNCTION hpcacct_internal.administers(text, text) IS
    'Whether a user is an administrator of an account (membership role admin)';

-- An account keeps an administrator: removing its last one, or making them a plain member,
-- is HA003 (remove_member(), add_member()). The caller holds the account's row lock.
CREATE FUNCTION hpcacct_internal.refuse_last_admin(account text, username text) RETURNS void
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF hpcacct_internal.administers(username, account)
           AND NOT EXISTS (SELECT 1 FROM @extschema@.membership m
                           WHERE m.account = refuse_last_admin.account AND m.username <> refuse_last_admin.username
                             AND m.role = 'admin') THEN
            RAISE EXCEPTION 'user "%" is the last administrator of account "%"', username, account
                USING ERRCODE = 'HA003', HINT = 'Make another member an administrator first.';
        END IF;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.refuse_last_admin(text, text) IS
    'HA003 if the user is the account''s only administrator (before removing them or making them a member)';

CREATE FUNCTION hpcacct_internal.require_admin(account text, by_user text) RETURNS void
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF by_user IS NOT NULL AND NOT hpcacct_internal.administers(by_user, account) THEN
            RAISE EXCEPTION 'user "%" is not an administrator of account "%"', by_user, account
                USING ERRCODE = 'insufficient_privilege';
        END IF;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.require_admin(text, text) IS
    'Raises unless by_user administers the account (NULL: staff acting directly)';

-- Who may change an account's members: staff (superusers and members of hpcacct_admin,
-- who may name the project administrator they act for in by_user, or pass NULL), and the
-- account's own administrators, who act as themselves: for a portal user (hpcacct_portal)
-- the session user must administer the account, and by_user, if given, must be that user.
-- 42501 otherwise. (The functions that call it run as their owner, so it looks at the
-- session user, as row-level security does.)
CREATE FUNCTION hpcacct_internal.require_member_manager(account text, by_user text) RETURNS void
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                   WHERE (r.rolname = 'hpcacct_admin' AND pg_catalog.pg_has_role(pg_catalog.session_user(), r.oid, 'MEMBER'))
                      OR (r.rolname = pg_catalog.session_user() AND r.rolsuper)) THEN
            PERFORM hpcacct_internal.require_admin(account, by_user);
            RETURN;
        END IF;
        IF by_user IS NOT NULL AND by_user <> pg_catalog.session_user() THEN
            RAISE EXCEPTION 'user "%" cannot act for user "%"', pg_catalog.session_user(), by_user
                USING ERRCODE = 'insufficient_privilege',
                      HINT = 'A portal user acts as themselves: leave by_user out (NULL).';
        END IF;
        IF account IS NULL OR NOT hpcacct_internal.administers(pg_catalog.session_user(), account) THEN
            RAISE EXCEPTION 'user "%" is not an administrator of account "%"', pg_catalog.session_user(), account
                USING ERRCODE = 'insufficient_privilege',
                      HINT = 'A project''s administrators manage its members; ask one of them, or the centre''s staff.';
        END IF;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.require_member_manager(text, text) IS
    'Raises 42501 unless the session user is staff or administers the account (a portal user acts as itself)';

-- Project administrators add members and other administrators, from a portal (as
-- themselves) or through staff (by_user names them; staff acting directly pass NULL).
CREATE FUNCTION @extschema@.add_member(account text, username text, role text DEFAULT 'member',
                                       by_user text DEFAULT NULL)
    RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        -- a NULL account is bad input, not an account the caller does not administer
        IF account IS NULL THEN
            RAISE EXCEPTION 'add_member: account must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        PERFORM hpcacct_internal.require_member_manager(account, by_user);
        PERFORM hpcacct_internal.require_bank_account(account, 'add_member');
        IF username IS NULL THEN
            RAISE EXCEPTION 'add_member: username must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        ELSIF role IS NULL THEN
            RAISE EXCEPTION 'add_member: role must not be NULL (member or admin)' USING ERRCODE = 'null_value_not_allowed';
        ELSIF role NOT IN ('member', 'admin') THEN
            RAISE EXCEPTION 'add_member: role must be member or admin, not "%"', role
                USING ERRCODE = 'invalid_parameter_value', HINT = 'Pass ''member'' or ''admin''.';
        END IF;
        IF NOT EXISTS (SELECT 1 FROM @extschema@.hpc_user u WHERE u.username = add_member.username) THEN
            RAISE EXCEPTION 'unknown user "%"', username
                USING ERRCODE = 'undefined_object',
                      HINT = 'Name the user by their login name; the centre''s staff add users who have none yet.';
        END IF;
        PERFORM hpcacct_internal.require_admin(account, by_user);
        -- one member change of an account at a time, so that two administrators demoting or
        -- removing each other at once cannot both pass the check below (loads, which lock
        -- the account FOR KEY SHARE, do not wait)
        PERFORM FROM @extschema@.account a WHERE a.name = add_member.account FOR NO KEY UPDATE;
        -- making the last administrator a plain member would remove them as one (HA003)
        IF role = 'member' THEN
            PERFORM hpcacct_internal.refuse_last_admin(account, username);
        END IF;
        INSERT INTO @extschema@.membership (account, username, role) VALUES (account, username, role)
        ON CONFLICT ON CONSTRAINT membership_pkey DO UPDATE SET role = EXCLUDED.role;
    END
    $$;
COMMENT ON FUNCTION @extschema@.add_member(text, text, text, text) IS
    'Grants a user access to an account as member or admin; a portal user must administer the account, '
    'staff may name the administrator in by_user (NULL: staff acting directly)';
REVOKE EXECUTE ON FUNCTION @extschema@.add_member(text, text, text, text) FROM PUBLIC;

CREATE FUNCTION @extschema@.remove_member(account text, username text, by_user text DEFAULT NULL)
    RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF account IS NULL OR username IS NULL THEN
            RAISE EXCEPTION 'remove_member: account and username must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        PERFORM hpcacct_internal.require_member_manager(account, by_user);
        -- one member change of an account at a time (see add_member())
        PERFORM FROM @extschema@.account a WHERE a.name = remove_member.account FOR NO KEY UPDATE;
        IF NOT EXISTS (SELECT 1 FROM @extschema@.membership m
                       WHERE m.account = remove_member.account AND m.username = remove_member.username) THEN
            RAISE EXCEPTION 'user "%" is not a member of account "%"', username, account
                USING ERRCODE = 'undefined_object',
                      HINT = 'hpcacct.membership lists the account''s members; one removed already has nothing to remove.';
        END IF;
        PERFORM hpcacct_internal.refuse_last_admin(account, username);
        DELETE FROM @extschema@.membership m WHERE m.account = remove_member.account AND m.username = remove_member.username;
        UPDATE @extschema@.hpc_user u SET default_account = NULL
        WHERE u.username = remove_member.username AND u.default_account = remove_member.account;
    END
    $$;
COMMENT ON FUNCTION @extschema@.remove_member(text, text, text) IS
    'Removes a user''s access to an account (not its last administrator); resets their default project if it was this; '
    'a portal user must administer the account';
REVOKE EXECUTE ON FUNCTION @extschema@.remove_member(text, text, text) FROM PUBLIC;

CREATE FUNCTION @extschema@.set_default_project(username text, account text) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF username IS NULL THEN
            RAISE EXCEPTION 'set_default_project: username must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF account IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM @extschema@.membership m
            WHERE m.account = set_default_project.account AND m.username = set_default_project.username) THEN
            RAISE EXCEPTION 'user "%" is not a member of account "%"', username, account
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        UPDATE @extschema@.hpc_user u
        SET default_account = NULLIF(set_default_project.account, set_default_project.username)
        WHERE u.username = set_default_project.username;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'unknown user "%"', username USING ERRCODE = 'undefined_object';
        END IF;
    END
    $$;
COMMENT ON FUNCTION @extschema@.set_default_project(text, text) IS
    'Sets the project a user''s jobs are charged to when they name none (NULL: the personal account)';
REVOKE EXECUTE ON FUNCTION @extschema@.set_default_project(text, text) FROM PUBLIC;

-- ---- which submit rules bind an account (enforcement: 85_enforce.sql) ----------------

-- The policies that bind an account: its own list when set, otherwise derived:
--   special accounts: none;
--   window_quota when it has a quota period, regulation when it has a grant or supplement;
--   bank when it has bank entries (deposits, transfers, refunds in the bank unit), when it
--   is a personal account, or when nothing else binds it (what every account was before).
CREATE FUNCTION @extschema@.account_policies(account text) RETURNS text[]
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        a record;
        has_quota boolean;
        has_regulation boolean;
        has_bank boolean;
    BEGIN
        IF account_policies.account IS NULL THEN
            RAISE EXCEPTION 'account_policies: account must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        SELECT x.name, x.kind, x.policies INTO a FROM @extschema@.account x WHERE x.name = account_policies.account;
        IF NOT FOUND THEN  -- as hpcacct_internal.require_account() says it
            RAISE EXCEPTION 'account "%" does not exist or is not visible to you', account
                USING ERRCODE = 'undefined_object',
                      HINT = 'Accounts are rows of hpcacct.account; a portal user sees only those they are a member of.';
        ELSIF a.policies IS NOT NULL THEN
            RETURN a.policies;
        ELSIF a.kind = 'special' THEN
            RETURN '{}'::text[];
        END IF;
        has_quota := EXISTS (SELECT 1 FROM @extschema@.quota_period p WHERE p.account = a.name);
        has_regulation := EXISTS (SELECT 1 FROM @extschema@.ledger l
                             WHERE l.account = a.name AND l.kind IN ('grant', 'supplement'));
        IF a.kind = 'personal' OR NOT (has_quota OR has_regulation) THEN
            has_bank := true;
        ELSE
            has_bank := EXISTS (SELECT 1 FROM @extschema@.ledger l
                                WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer', 'refund')
                                  AND l.unit = hpcacct_internal.bank_unit());
        END IF;
        RETURN pg_catalog.array_remove(ARRAY[CASE WHEN has_bank THEN 'bank' END,
                                             CASE WHEN has_quota THEN 'window_quota' END,
                                             CASE WHEN has_regulation THEN 'regulation' END], NULL);
    END
    $$;
COMMENT ON FUNCTION @extschema@.account_policies(text) IS
    'Submit rules binding an account: account.policies, or derived (special: none; window_quota with a quota period; '
    'regulation with a grant; bank with bank entries, for personal accounts, or when nothing else binds it); a NULL '
    '(22004) or unknown account (42704) is an error';

-- The account of a job (README, "The account of a job without -A"), the one definition that
-- check_submit(), recheck_queued(), the hold messages, open_quarter() and the view
-- pending_job_account (fairshare_queue's and hpcacct-slurm-sync's queue) use:
-- the account the job names; naming none, the user's default project, or the personal
-- account when the user has none or from the day it has been deleted or has expired under
-- the bank (open_quarter() then records it, hours after the quarter's midnight). NULL when
-- none is named and the user is unknown. A NULL (22004) or infinite (22008) day is an error.
-- One row, a set so that it is inlined where a query calls it in FROM (check_submit's
-- statement, planned once per session; a view's row).
CREATE FUNCTION hpcacct_internal.job_account(username text, account text, at date)
    RETURNS SETOF text
    LANGUAGE sql STABLE PARALLEL SAFE ROWS 1
BEGIN ATOMIC
    SELECT coalesce(job_account.account,
                    (SELECT CASE WHEN u.default_account IS NULL THEN u.username
                                 WHEN EXISTS (SELECT 1 FROM @extschema@.bank_state(u.default_account, job_account.at) b
                                              WHERE CASE WHEN b.state = 'deleted' THEN true
                                                         WHEN b.state = 'expired'
                                                             THEN 'bank' = ANY (@extschema@.account_policies(u.default_account))
                                                         ELSE false END)
                                     THEN u.username
                                 ELSE u.default_account END
                     FROM @extschema@.hpc_user u
                     WHERE u.username = job_account.username))
    WHERE pg_catalog.isfinite(job_account.at) OR hpcacct_internal.refuse_argument(job_account.at, 'job_account', 'at');
END;
COMMENT ON FUNCTION hpcacct_internal.job_account(text, text, date) IS
    'The account of a job at a day: the one named; none named, the user''s default project, the personal account '
    'when there is none or once it has been deleted or has expired under the bank; NULL for an unknown user';

-- ---- the quarter-start run -----------------------------------------------------------

-- At the start of quarter q (any day of it names it):
--  1. personal accounts of members of active projects are topped up to their allotment for
--     q and the two following quarters (never deposited twice);
--  2. personal accounts with no allocation for q or a later quarter expire;
--  3. those that also expired in the previous quarter are deleted, for good;
--  4. default projects pointing to deleted accounts, or to expired ones the bank binds
--     (account_policies()), are reset to the personal one.
-- Everything is logged in quarter_log; a second run for the same quarter changes nothing.
CREATE PROCEDURE @extschema@.open_quarter(q date)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        this_quarter constant date := @extschema@.quarter_start(q);
        previous_quarter constant date := (@extschema@.quarter_start(q) - interval '3 months')::date;
        later date;
    BEGIN
        IF q IS NULL THEN
            RAISE EXCEPTION 'open_quarter needs a date' USING ERRCODE = 'null_value_not_allowed';
        ELSIF NOT isfinite(q) THEN
            RAISE EXCEPTION 'open_quarter needs a finite date' USING ERRCODE = 'datetime_field_overflow';
        ELSIF this_quarter > @extschema@.quarter_start(@extschema@.site_today()) THEN
            RAISE EXCEPTION 'open_quarter: the quarter of % has not begun', q
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = format('Today is %s in the site time zone.', @extschema@.site_today());
        END IF;
        PERFORM hpcacct_internal.refuse_at_site('open_quarter');
        -- one run at a time
        PERFORM hpcacct_internal.run_alone('open_quarter');
        -- Quarters are opened in order: a run of an earlier quarter after a later one would
        -- expire and delete accounts on states the later quarter has changed.
        -- (quarter_log: runs before 0.4 recorded no run_day)
        later := greatest(hpcacct_internal.run_in_order('open_quarter', this_quarter),
                          (SELECT max(g.quarter) FROM @extschema@.quarter_log g WHERE g.quarter > this_quarter));
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'open_quarter: the quarter of % comes before the quarter % opened already', q, later
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'A quarter start missed before the next one is skipped.';
        END IF;

        -- top_up() of the personal accounts of members of projects active in this quarter
        -- (an allocation for q, not only for a later quarter), for this and the two following
        -- quarters, in one statement
        WITH cfg AS MATERIALIZED (
            SELECT @extschema@.setting_value('bank_unit') AS unit
        ), active AS (
            SELECT p.name
            FROM @extschema@.account p
            CROSS JOIN LATERAL @extschema@.bank_state(p.name, this_quarter) b
            WHERE p.kind = 'project' AND b.state = 'active'
        ), missing AS MATERIALIZED (
            SELECT a.name, t.target, lv.level,
                   lv.level - coalesce((SELECT sum(l.amount) FROM @extschema@.ledger l
                                        WHERE l.account = a.name AND l.kind = 'deposit' AND l.valid_from = t.target
                                          AND l.unit = cfg.unit), 0) AS amount
            FROM @extschema@.account a
            CROSS JOIN LATERAL (SELECT coalesce(a.personal_allotment,
                                                (SELECT @extschema@.setting_value('personal_allotment')::numeric))
                                           AS level) lv
            CROSS JOIN cfg
            CROSS JOIN LATERAL (SELECT (this_quarter + i * interval '3 months')::date AS target
                                FROM pg_catalog.generate_series(0, 2) AS i) t
            WHERE a.kind = 'personal' AND a.deleted_in IS NULL
              AND EXISTS (SELECT 1 FROM @extschema@.membership m JOIN active p ON p.name = m.account
                          WHERE m.username = a.name)
        ), booked AS (
            INSERT INTO @extschema@.ledger (account, kind, amount, unit, valid_from, valid_until, note)
            SELECT m.name, 'deposit', m.amount, cfg.unit, m.target, (m.target + interval '3 months')::date - 1,
                   hpcacct_internal.top_up_note(m.level)
            FROM missing m, cfg
            WHERE m.amount > 0
            ORDER BY m.name, m.target
            ON CONFLICT (account, valid_from, note) WHERE kind = 'deposit' AND note LIKE 'personal allotment up to %'
            DO NOTHING
            RETURNING account, valid_from, amount
        )
        INSERT INTO @extschema@.quarter_log (quarter, account, action, target_quarter, amount)
        SELECT this_quarter, b.account, 'top_up', b.valid_from, b.amount
        FROM booked b
        ORDER BY b.account, b.valid_from
        ON CONFLICT ON CONSTRAINT quarter_log_once
        DO UPDATE SET amount = @extschema@.quarter_log.amount + EXCLUDED.amount;

        -- expire personal accounts without an allocation for this or a later quarter (one with
        -- an allocation later only is inactive, as bank_state() says: neither expired nor deleted)
        INSERT INTO @extschema@.quarter_log (quarter, account, action, target_quarter)
        SELECT this_quarter, a.name, 'expired', this_quarter
        FROM @extschema@.account a
        CROSS JOIN LATERAL @extschema@.bank_state(a.name, this_quarter) b
        WHERE a.kind = 'personal' AND a.deleted_in IS NULL AND b.state = 'expired'
        ON CONFLICT DO NOTHING;

        -- delete those that expired in the previous quarter as well
        WITH deleted AS (
            UPDATE @extschema@.account a SET deleted_in = this_quarter
            WHERE a.kind = 'personal' AND a.deleted_in IS NULL
              AND EXISTS (SELECT 1 FROM @extschema@.quarter_log g
                          WHERE g.account = a.name AND g.action = 'expired' AND g.quarter = this_quarter)
              AND EXISTS (SELECT 1 FROM @extschema@.quarter_log g
                          WHERE g.account = a.name AND g.action = 'expired' AND g.quarter = previous_quarter)
            RETURNING a.name
        )
        INSERT INTO @extschema@.quarter_log (quarter, account, action, target_quarter)
        SELECT this_quarter, d.name, 'deleted', this_quarter FROM deleted d
        ON CONFLICT DO NOTHING;

        -- default projects that point to deleted accounts, or to expired ones the bank binds, fall
        -- back to the personal one, as job_account() resolves jobs from the quarter's midnight
        -- (bank_state() calls a GENCI or RWTH project without deposits expired: it does not
        -- expire). NO KEY UPDATE, as the update itself: FOR UPDATE would wait
        -- for every transaction whose foreign key holds the user's row, e.g. a portal user's open
        -- add_member() of that user
        WITH stale AS (
            SELECT u.username, u.default_account
            FROM @extschema@.hpc_user u
            CROSS JOIN LATERAL hpcacct_internal.job_account(u.username, NULL, this_quarter) AS j(account)
            WHERE u.default_account IS NOT NULL AND j.account IS DISTINCT FROM u.default_account
            FOR NO KEY UPDATE OF u
        ), reset AS (
            UPDATE @extschema@.hpc_user u SET default_account = NULL
            FROM stale s
            WHERE u.username = s.username
            RETURNING s.username, s.default_account AS old_default
        )
        INSERT INTO @extschema@.quarter_log (quarter, account, action, target_quarter, username)
        SELECT this_quarter, r.old_default, 'default_reset', this_quarter, r.username FROM reset r
        ON CONFLICT DO NOTHING;
    END
    $$;
COMMENT ON PROCEDURE @extschema@.open_quarter(date) IS
    'Quarter start (HLRN): top up personal accounts, expire and delete them, reset default projects; idempotent';
REVOKE EXECUTE ON PROCEDURE @extschema@.open_quarter(date) FROM PUBLIC;
