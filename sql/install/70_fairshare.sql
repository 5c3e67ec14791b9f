-- ---------------------------------------------------------------------------------------
-- Fair share and usage reports (rules §5: Fermilab LQCD, Compute Canada).
--
-- A pool is where allocations and usage meet: a resource's charges count in its pool
-- (coalesce(resource.pool, resource.cluster)), an allocation row of the ledger (any kind
-- but charge) counts in the pool named by its `pool`. A pool is further split by unit,
-- so a cluster with CPU and GPU partitions charged in different units has two pools.
-- Generation weights are rates: a resource row's rate holds the weight for its validity
-- range (a K20 hour costs 2 GPU-hours while the C2050 is the reference), and a new
-- reference year is a new row.
-- ---------------------------------------------------------------------------------------

-- Pools that need settings of their own: the allocation year's first month (1 January at
-- HLRN and GENCI, 1 April at Compute Canada, 1 July at Fermilab LQCD).
CREATE TABLE @extschema@.pool (
    name             text PRIMARY KEY CHECK (name <> ''),
    year_start_month integer NOT NULL CHECK (year_start_month BETWEEN 1 AND 12),
    description      text
);
COMMENT ON TABLE @extschema@.pool IS
    'Allocation pools with their own allocation year (first month); other pools take setting year_start_month';
COMMENT ON COLUMN @extschema@.pool.name IS 'The pool: a resource''s pool (or cluster), an allocation''s ledger.pool';

-- Shares of users inside an account (all pools). Users not listed have 1 share, so users
-- share an account equally by default. Listing a user with shares 0 takes them out.
CREATE TABLE @extschema@.fairshare_user (
    account   text NOT NULL REFERENCES @extschema@.account,
    submitter text NOT NULL,
    shares    float8 NOT NULL DEFAULT 1 CHECK (shares >= 0 AND shares < 'Infinity'),
    PRIMARY KEY (account, submitter)
);
COMMENT ON TABLE @extschema@.fairshare_user IS
    'Users'' shares inside an account for fairshare() (default 1 each); lists users before their first job too';

SELECT pg_catalog.pg_extension_config_dump('@extschema@.pool', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.fairshare_user', '');

-- ---- Decayed usage: the aggregates ---------------------------------------------------------

-- Support functions. The state is `internal` (the core's flat 48- or 64-byte state in the
-- aggregate context; see src/pg/fairshare.cpp), so the combine functions are not strict,
-- and the transition functions are not strict so that a NULL argument is an error (22004)
-- rather than a row silently left out.
CREATE FUNCTION hpcacct_internal.decayed_usage_transfn(internal, timestamptz, float8, timestamptz, interval)
    RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_decayed_usage_transfn' LANGUAGE c IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.decayed_usage_transfn(internal, timestamptz, float8, timestamptz, interval) IS
    'Transition function of hpcacct.decayed_usage (half-life form): adds one row';
CREATE FUNCTION hpcacct_internal.decayed_usage_combinefn(internal, internal) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_decayed_usage_combinefn' LANGUAGE c IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.decayed_usage_combinefn(internal, internal) IS
    'Combine function of hpcacct.decayed_usage (half-life form): merges two partial states';
CREATE FUNCTION hpcacct_internal.decayed_usage_serialfn(internal) RETURNS bytea
    AS 'MODULE_PATHNAME', 'hpcacct_decayed_usage_serialfn' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.decayed_usage_serialfn(internal) IS
    'Serial function of hpcacct.decayed_usage (half-life form): the 48 bytes of a partial state';
CREATE FUNCTION hpcacct_internal.decayed_usage_deserialfn(bytea, internal) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_decayed_usage_deserialfn' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.decayed_usage_deserialfn(bytea, internal) IS
    'Deserial function of hpcacct.decayed_usage (half-life form): checks the size and validity of a state';
CREATE FUNCTION hpcacct_internal.decayed_usage_finalfn(internal) RETURNS float8
    AS 'MODULE_PATHNAME', 'hpcacct_decayed_usage_finalfn' LANGUAGE c IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.decayed_usage_finalfn(internal) IS
    'Final function of hpcacct.decayed_usage (half-life form): the decayed usage, NULL without rows';

CREATE AGGREGATE @extschema@.decayed_usage(ts timestamptz, amount float8, at timestamptz, half_life interval) (
    SFUNC = hpcacct_internal.decayed_usage_transfn,
    STYPE = internal,
    SSPACE = 48,
    FINALFUNC = hpcacct_internal.decayed_usage_finalfn,
    COMBINEFUNC = hpcacct_internal.decayed_usage_combinefn,
    SERIALFUNC = hpcacct_internal.decayed_usage_serialfn,
    DESERIALFUNC = hpcacct_internal.decayed_usage_deserialfn,
    PARALLEL = SAFE
);
COMMENT ON AGGREGATE @extschema@.decayed_usage(timestamptz, float8, timestamptz, interval) IS
    'Slurm-style decayed usage at at: sum of amount x 2^(-(at - ts) / half_life); rows after at count 0; '
    'NULL arguments, negative or non-finite amounts, non-positive half-lives or ones with months are errors';

CREATE FUNCTION hpcacct_internal.decayed_usage_periods_transfn(internal, timestamptz, float8, timestamptz, interval,
                                                          float8, integer)
    RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_decayed_usage_periods_transfn' LANGUAGE c IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.decayed_usage_periods_transfn(internal, timestamptz, float8, timestamptz, interval,
                                                              float8, integer) IS
    'Transition function of hpcacct.decayed_usage (interval form): adds one row';
CREATE FUNCTION hpcacct_internal.decayed_usage_periods_combinefn(internal, internal) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_decayed_usage_periods_combinefn' LANGUAGE c IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.decayed_usage_periods_combinefn(internal, internal) IS
    'Combine function of hpcacct.decayed_usage (interval form): merges two partial states';
CREATE FUNCTION hpcacct_internal.decayed_usage_periods_serialfn(internal) RETURNS bytea
    AS 'MODULE_PATHNAME', 'hpcacct_decayed_usage_periods_serialfn' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.decayed_usage_periods_serialfn(internal) IS
    'Serial function of hpcacct.decayed_usage (interval form): the 64 bytes of a partial state';
CREATE FUNCTION hpcacct_internal.decayed_usage_periods_deserialfn(bytea, internal) RETURNS internal
    AS 'MODULE_PATHNAME', 'hpcacct_decayed_usage_periods_deserialfn' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.decayed_usage_periods_deserialfn(bytea, internal) IS
    'Deserial function of hpcacct.decayed_usage (interval form): checks the size and validity of a state';
CREATE FUNCTION hpcacct_internal.decayed_usage_periods_finalfn(internal) RETURNS float8
    AS 'MODULE_PATHNAME', 'hpcacct_decayed_usage_periods_finalfn' LANGUAGE c IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.decayed_usage_periods_finalfn(internal) IS
    'Final function of hpcacct.decayed_usage (interval form): the decayed usage, NULL without rows';

CREATE AGGREGATE @extschema@.decayed_usage(ts timestamptz, amount float8, at timestamptz, period interval,
                                           decay float8, depth integer) (
    SFUNC = hpcacct_internal.decayed_usage_periods_transfn,
    STYPE = internal,
    SSPACE = 64,
    FINALFUNC = hpcacct_internal.decayed_usage_periods_finalfn,
    COMBINEFUNC = hpcacct_internal.decayed_usage_periods_combinefn,
    SERIALFUNC = hpcacct_internal.decayed_usage_periods_serialfn,
    DESERIALFUNC = hpcacct_internal.decayed_usage_periods_deserialfn,
    PARALLEL = SAFE
);
COMMENT ON AGGREGATE @extschema@.decayed_usage(timestamptz, float8, timestamptz, interval, float8, integer) IS
    'Maui-style decayed usage at at: sum over periods i < depth of decay^i x usage of period i, where period i '
    'is (at - (i+1) x period, at - i x period]; rows after at or older than depth periods count 0';

CREATE FUNCTION @extschema@.fairshare_factor(usage float8, share float8) RETURNS float8
    AS 'MODULE_PATHNAME', 'hpcacct_fairshare_factor' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.fairshare_factor(float8, float8) IS
    'Slurm''s classic fair-share factor 2^(-usage / share) of a normalized usage and share; 0 when share is 0';

-- ---- Allocation years ---------------------------------------------------------------------

CREATE FUNCTION @extschema@.year_start_month(pool text) RETURNS integer
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT coalesce((SELECT p.year_start_month FROM @extschema@.pool p WHERE p.name = $1),
                        @extschema@.setting_value('year_start_month')::integer)
    $$;
COMMENT ON FUNCTION @extschema@.year_start_month(text) IS
    'First month of a pool''s allocation year (hpcacct.pool, else setting year_start_month)';

-- The allocation year of a pool: the one named `for_year` (the calendar year it starts in),
-- or when `for_year` is NULL the one containing `at` (a year from 1 to 9999; 22008 otherwise).
-- Bounds are midnights of the site time zone.
-- `upto` is `at` clamped to the year; elapsed = upto - starts (wall-clock time: maintenance
-- downtime does not stop it), length = ends - starts.
-- A for_year outside 1 to 9999 (allocation_year() and the usage reports; NULL is the year
-- containing `at`, checked by the caller): 22008, naming the caller.
CREATE FUNCTION hpcacct_internal.refuse_year(for_year integer, caller text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE COST 1
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        RAISE EXCEPTION '%: for_year must be a year from 1 to 9999, not %', caller, for_year
            USING ERRCODE = 'datetime_field_overflow';
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.refuse_year(integer, text) IS
    'Raises 22008 for a for_year outside 1 to 9999, naming the calling report';

CREATE FUNCTION @extschema@.allocation_year(pool text, for_year integer DEFAULT NULL,
                                            at timestamptz DEFAULT pg_catalog.now())
    RETURNS TABLE (year integer, first_day date, last_day date, starts timestamptz, ends timestamptz,
                   upto timestamptz, elapsed interval, length interval, state text)
    LANGUAGE plpgsql STABLE PARALLEL SAFE ROWS 1
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        tz    constant text := @extschema@.site_timezone();
        m     constant integer := @extschema@.year_start_month(allocation_year.pool);
        today constant date := hpcacct_internal.local_time(allocation_year.at, tz)::date;
    BEGIN
        IF allocation_year.at IS NULL THEN
            RAISE EXCEPTION 'allocation_year: at must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        ELSIF NOT pg_catalog.isfinite(allocation_year.at) THEN
            RAISE EXCEPTION 'allocation_year: at must be a finite timestamp' USING ERRCODE = 'datetime_field_overflow';
        ELSIF for_year NOT BETWEEN 1 AND 9999 THEN
            PERFORM hpcacct_internal.refuse_year(for_year, 'allocation_year');
        END IF;
        year := coalesce(for_year, pg_catalog.date_part('year', today)::integer
                                   - CASE WHEN pg_catalog.date_part('month', today) < m THEN 1 ELSE 0 END);
        IF year NOT BETWEEN 1 AND 9999 THEN
            RAISE EXCEPTION 'allocation_year: the allocation year containing at is %, outside 1 to 9999', year
                USING ERRCODE = 'datetime_field_overflow';
        END IF;
        first_day := pg_catalog.make_date(year, m, 1);
        last_day := (first_day + interval '1 year')::date - 1;
        starts := first_day::timestamp AT TIME ZONE tz;
        ends := (first_day + interval '1 year') AT TIME ZONE tz;
        upto := greatest(starts, least(allocation_year.at, ends));
        elapsed := upto - starts;
        length := ends - starts;
        state := CASE WHEN allocation_year.at >= ends THEN 'past'
                      WHEN allocation_year.at < starts THEN 'future' ELSE 'current' END;
        RETURN NEXT;
    END
    $$;
COMMENT ON FUNCTION @extschema@.allocation_year(text, integer, timestamptz) IS
    'A pool''s allocation year (by the year it starts in, or the one containing at): days, bounds in the site '
    'time zone, elapsed and total wall-clock time at at, and whether it is past, current or future; for_year, or '
    'the year containing at, from 1 to 9999 (22008 otherwise)';

-- The projection of a year's usage to its end, as the usage reports give it: in the current
-- year, usage x length / elapsed (wall-clock time, allocation_year()); NULL in a past or future
-- year, or before any time elapsed. SQL-standard, without SET options: inlined.
CREATE FUNCTION hpcacct_internal.projected_usage(usage numeric, state text, elapsed interval, length interval)
    RETURNS numeric
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN state = 'current' AND elapsed > interval '0'
                THEN usage * pg_catalog.date_part('epoch', length)::numeric
                     / pg_catalog.date_part('epoch', elapsed)::numeric END;
COMMENT ON FUNCTION hpcacct_internal.projected_usage(numeric, text, interval, interval) IS
    'Usage projected to the end of its allocation year (usage x length / elapsed) in the current year, else NULL';

-- ---- Usage reports ----------------------------------------------------------------------

-- The charges of each pool's allocation year up to `at`, pro rata by wall-clock time
-- (rules §0), from the rollup: per resource, account, submitter (unless not per_submitter:
-- NULL, and fewer rows to read) and month, jobs that ended by `at` (what the usage reports read).
-- A SQL-standard body (bound when created, so no search_path to pin): the reports inline it
-- instead of storing its rows in a tuplestore of their own (about a tenth of their CPU time).
-- Written "name (" as setting_catalog() (see there).
CREATE FUNCTION @extschema@.year_usage (for_year integer, at timestamptz, per_submitter boolean)
    RETURNS TABLE (pool text, unit text, cluster text, partition text, account text, submitter text,
                   rate float8, month date, amount numeric, year integer, first_day date, last_day date,
                   elapsed interval, length interval, state text)
    LANGUAGE sql STABLE PARALLEL SAFE
    BEGIN ATOMIC
        WITH years AS MATERIALIZED (
            SELECT p.pool, y.*
            FROM (SELECT DISTINCT coalesce(r.pool, r.cluster) AS pool FROM @extschema@.resource r) p
            CROSS JOIN LATERAL @extschema@.allocation_year(p.pool, $1, $2) y
        )
        SELECT y.pool, c.unit, r.cluster, r.partition, c.account, c.submitter, r.rate, c.month, c.amount,
               y.year, y.first_day, y.last_day, y.elapsed, y.length, y.state
        FROM @extschema@.charges_ended_by($2, coalesce((SELECT pg_catalog.min(first_day) FROM years), 'infinity'),
                                          coalesce((SELECT pg_catalog.max(last_day) FROM years), '-infinity'), $3) c
        JOIN @extschema@.resource r USING (resource_id)
        JOIN years y ON y.pool = coalesce(r.pool, r.cluster)
        WHERE c.month BETWEEN y.first_day AND y.last_day
          AND ($3 IS NOT NULL OR hpcacct_internal.refuse_argument($3, 'year_usage', 'per_submitter'));
    END;
COMMENT ON FUNCTION @extschema@.year_usage(integer, timestamptz, boolean) IS
    'Charges per resource, account, submitter (or not: NULL) and month of each pool''s allocation year (named, or '
    'containing at), jobs ended by at, from the charge rollup; the building block of the usage reports';

-- Allocation of each account in each pool for the allocation year: every allocation row
-- of the ledger (grant, supplement, deposit, retraction, transfer, refund) in the pool,
-- pro rata by the days of its validity inside the year (a grant for the year counts whole,
-- a grant over two years by its days in each). A row names its pool in `pool`; one
-- without (the quarterly bank's deposits, transfers and refunds) is credit for every pool
-- charged in its unit, and counts in each: one bank, one allocation.
CREATE FUNCTION @extschema@.year_allocations(for_year integer, at timestamptz)
    RETURNS TABLE (pool text, unit text, account text, allocation numeric)
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        WITH allocations AS MATERIALIZED (
            SELECT coalesce(l.pool, u.pool) AS pool, l.unit, l.account, l.amount, l.valid_from, l.valid_until
            FROM @extschema@.ledger l
            LEFT JOIN (SELECT DISTINCT r.unit, coalesce(r.pool, r.cluster) AS pool FROM @extschema@.resource r) u
              ON l.pool IS NULL AND u.unit = l.unit
            WHERE l.kind <> 'charge' AND coalesce(l.pool, u.pool) IS NOT NULL
        ), years AS MATERIALIZED (
            SELECT p.pool, y.first_day, y.last_day
            FROM (SELECT DISTINCT a.pool FROM allocations a) p
            CROSS JOIN LATERAL @extschema@.allocation_year(p.pool, $1, $2) y
        )
        SELECT a.pool, a.unit, a.account,
               sum(a.amount * greatest(0, least(a.valid_until, y.last_day) + 1 - greatest(a.valid_from, y.first_day))
                   / (a.valid_until + 1 - a.valid_from))
        FROM allocations a
        JOIN years y ON y.pool = a.pool
        WHERE a.valid_from <= y.last_day AND a.valid_until >= y.first_day
        GROUP BY a.pool, a.unit, a.account
    $$;
COMMENT ON FUNCTION @extschema@.year_allocations(integer, timestamptz) IS
    'Allocation of each account in each pool (ledger.pool; without one, every pool charged in its unit) '
    'and unit for the allocation year, allocation rows pro rata by their days of validity inside it';

-- Usage by resource (cluster and partition) for the allocation year.
CREATE FUNCTION @extschema@.usage_by_resource(for_year integer DEFAULT NULL, at timestamptz DEFAULT pg_catalog.now())
    RETURNS TABLE (pool text, unit text, cluster text, partition text, year integer, first_day date, last_day date,
                   equivalent_hours numeric, usage numeric, usage_years numeric,
                   projected_usage numeric, projected_years numeric)
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        -- a bad instant or year is refused here, in this function's name (also with no pool)
        SELECT (pg_catalog.isfinite($2) OR hpcacct_internal.refuse_argument($2, 'usage_by_resource', 'at'))
           AND ($1 IS NULL OR $1 BETWEEN 1 AND 9999 OR hpcacct_internal.refuse_year($1, 'usage_by_resource'));
        SELECT u.pool, u.unit, u.cluster, u.partition, u.year, u.first_day, u.last_day,
               round(u.hours, 6), round(u.usage, 6), round(u.usage / h.hours, 6),
               round(u.projected, 6), round(u.projected / h.hours, 6)
        FROM (
            SELECT c.pool, c.unit, c.cluster, c.partition, c.year AS year, c.first_day, c.last_day,
                   sum(c.usage / nullif(c.rate, 0)::numeric) AS hours, sum(c.usage) AS usage,
                   hpcacct_internal.projected_usage(sum(c.usage), c.state, c.elapsed, c.length) AS projected
            FROM (  -- per rate first: one division per rate
                SELECT y.pool, y.unit, y.cluster, y.partition, y.rate, y.year, y.first_day, y.last_day, y.state,
                       y.elapsed, y.length, sum(y.amount) AS usage
                FROM @extschema@.year_usage($1, $2, false) y
                GROUP BY y.pool, y.unit, y.cluster, y.partition, y.rate, y.year, y.first_day, y.last_day, y.state,
                         y.elapsed, y.length
            ) c
            GROUP BY c.pool, c.unit, c.cluster, c.partition, c.year, c.first_day, c.last_day, c.state,
                     c.elapsed, c.length
            HAVING sum(c.usage) <> 0  -- only reversed charges: nothing to show
        ) u
        CROSS JOIN (SELECT (SELECT @extschema@.setting_value('hours_per_year'))::numeric AS hours) h
    $$;
COMMENT ON FUNCTION @extschema@.usage_by_resource(integer, timestamptz) IS
    'Usage per cluster and partition in each pool''s allocation year (named, or containing at) up to at: '
    'equivalent-hours (unweighted), usage in the unit and in unit-years, projection for the current year';

-- Usage by account (project) and pool for the allocation year, against the allocation.
CREATE FUNCTION @extschema@.usage_by_account(for_year integer DEFAULT NULL, at timestamptz DEFAULT pg_catalog.now())
    RETURNS TABLE (pool text, unit text, account text, year integer, first_day date, last_day date,
                   allocation numeric, allocation_years numeric, usage numeric, usage_years numeric,
                   utilization_pct numeric, projected_usage numeric, projected_years numeric,
                   projected_utilization_pct numeric, overuse numeric)
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        -- a bad instant or year is refused here, in this function's name (also with no pool)
        SELECT (pg_catalog.isfinite($2) OR hpcacct_internal.refuse_argument($2, 'usage_by_account', 'at'))
           AND ($1 IS NULL OR $1 BETWEEN 1 AND 9999 OR hpcacct_internal.refuse_year($1, 'usage_by_account'));
        WITH used AS (
            SELECT c.pool, c.unit, c.account, sum(c.amount) AS usage
            FROM @extschema@.year_usage($1, $2, false) c
            GROUP BY c.pool, c.unit, c.account
        ), acct AS (
            SELECT coalesce(a.pool, u.pool) AS pool, coalesce(a.unit, u.unit) AS unit,
                   coalesce(a.account, u.account) AS account,
                   coalesce(a.allocation, 0) AS allocation, coalesce(u.usage, 0) AS usage
            FROM @extschema@.year_allocations($1, $2) a
            FULL JOIN used u ON u.pool = a.pool AND u.unit = a.unit AND u.account = a.account
            WHERE a.pool IS NOT NULL OR u.usage <> 0  -- an allocation, or usage that was not all reversed
        ), years AS MATERIALIZED (
            SELECT p.pool, y.*
            FROM (SELECT DISTINCT r.pool FROM acct r) p
            CROSS JOIN LATERAL @extschema@.allocation_year(p.pool, $1, $2) y
        )
        SELECT r.pool, r.unit, r.account, y.year, y.first_day, y.last_day,
               round(r.allocation, 6), round(r.allocation / h.hours, 6),
               round(r.usage, 6), round(r.usage / h.hours, 6),
               CASE WHEN r.allocation > 0 THEN round(r.usage * 100 / r.allocation, 2) END,
               round(p.projected, 6), round(p.projected / h.hours, 6),
               CASE WHEN r.allocation > 0 THEN round(p.projected * 100 / r.allocation, 2) END,
               round(greatest(r.usage - greatest(r.allocation, 0), 0), 6)
        FROM acct r
        JOIN years y ON y.pool = r.pool
        CROSS JOIN LATERAL (
            SELECT hpcacct_internal.projected_usage(r.usage, y.state, y.elapsed, y.length) AS projected
        ) p
        CROSS JOIN (SELECT (SELECT @extschema@.setting_value('hours_per_year'))::numeric AS hours) h
    $$;
COMMENT ON FUNCTION @extschema@.usage_by_account(integer, timestamptz) IS
    'Allocation and usage per account and pool in the allocation year (named, or containing at) up to at: '
    'unit and unit-years, utilization %, projection and projected utilization for the current year, overuse';

-- Usage by submitter inside each account and pool for the allocation year.
CREATE FUNCTION @extschema@.usage_by_submitter(for_year integer DEFAULT NULL, at timestamptz DEFAULT pg_catalog.now())
    RETURNS TABLE (pool text, unit text, account text, submitter text, year integer, first_day date, last_day date,
                   usage numeric, usage_years numeric, account_pct numeric,
                   projected_usage numeric, projected_years numeric)
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        -- a bad instant or year is refused here, in this function's name (also with no pool)
        SELECT (pg_catalog.isfinite($2) OR hpcacct_internal.refuse_argument($2, 'usage_by_submitter', 'at'))
           AND ($1 IS NULL OR $1 BETWEEN 1 AND 9999 OR hpcacct_internal.refuse_year($1, 'usage_by_submitter'));
        SELECT u.pool, u.unit, u.account, u.submitter, u.year, u.first_day, u.last_day,
               round(u.usage, 6), round(u.usage / h.hours, 6),
               round(u.usage * 100 / nullif(sum(u.usage) OVER (PARTITION BY u.pool, u.unit, u.account), 0), 2),
               round(u.projected, 6), round(u.projected / h.hours, 6)
        FROM (
            SELECT c.pool, c.unit, c.account, c.submitter, c.year AS year, c.first_day, c.last_day,
                   sum(c.amount) AS usage,
                   hpcacct_internal.projected_usage(sum(c.amount), c.state, c.elapsed, c.length) AS projected
            FROM @extschema@.year_usage($1, $2, true) c
            GROUP BY c.pool, c.unit, c.account, c.submitter, c.year, c.first_day, c.last_day, c.state,
                     c.elapsed, c.length
            HAVING sum(c.amount) <> 0
        ) u
        CROSS JOIN (SELECT (SELECT @extschema@.setting_value('hours_per_year'))::numeric AS hours) h
    $$;
COMMENT ON FUNCTION @extschema@.usage_by_submitter(integer, timestamptz) IS
    'Usage per submitter (the job''s user) inside each account and pool in the allocation year up to at: '
    'unit, unit-years, share of the account''s usage, projection for the current year';

-- Monthly breakdown: usage per calendar month (site time zone) of the allocation year up to
-- `at`, per resource, account and submitter (group further as needed).
CREATE FUNCTION @extschema@.usage_by_month(for_year integer DEFAULT NULL, at timestamptz DEFAULT pg_catalog.now())
    RETURNS TABLE (pool text, unit text, cluster text, partition text, account text, submitter text,
                   year integer, month date, usage numeric, usage_years numeric)
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        -- a bad instant or year is refused here, in this function's name (also with no pool)
        SELECT (pg_catalog.isfinite($2) OR hpcacct_internal.refuse_argument($2, 'usage_by_month', 'at'))
           AND ($1 IS NULL OR $1 BETWEEN 1 AND 9999 OR hpcacct_internal.refuse_year($1, 'usage_by_month'));
        SELECT m.pool, m.unit, m.cluster, m.partition, m.account, m.submitter, m.year, m.month,
               round(m.usage, 6), round(m.usage / h.hours, 6)
        FROM (
            SELECT c.pool, c.unit, c.cluster, c.partition, c.account, c.submitter, c.year, c.month,
                   sum(c.amount) AS usage
            FROM @extschema@.year_usage($1, $2, true) c
            GROUP BY c.pool, c.unit, c.cluster, c.partition, c.account, c.submitter, c.year, c.month
            HAVING sum(c.amount) <> 0
        ) m
        CROSS JOIN (SELECT (SELECT @extschema@.setting_value('hours_per_year'))::numeric AS hours) h
    $$;
COMMENT ON FUNCTION @extschema@.usage_by_month(integer, timestamptz) IS
    'Usage per calendar month (site time zone) of the allocation year up to at, per pool, resource, account '
    'and submitter, pro rata by wall-clock time';

-- The current allocation year (of each pool) as views; the functions give any year.
CREATE VIEW @extschema@.usage_by_resource AS SELECT * FROM @extschema@.usage_by_resource(NULL, pg_catalog.now());
COMMENT ON VIEW @extschema@.usage_by_resource IS
    'Usage per cluster and partition in the current allocation year, with projection (usage_by_resource(year, at) for others)';
CREATE VIEW @extschema@.usage_by_account AS SELECT * FROM @extschema@.usage_by_account(NULL, pg_catalog.now());
COMMENT ON VIEW @extschema@.usage_by_account IS
    'Allocation, usage, utilization and projection per account and pool in the current allocation year';
CREATE VIEW @extschema@.usage_by_submitter AS SELECT * FROM @extschema@.usage_by_submitter(NULL, pg_catalog.now());
COMMENT ON VIEW @extschema@.usage_by_submitter IS
    'Usage and projection per submitter inside each account and pool in the current allocation year';
CREATE VIEW @extschema@.usage_by_month AS SELECT * FROM @extschema@.usage_by_month(NULL, pg_catalog.now());
COMMENT ON VIEW @extschema@.usage_by_month IS
    'Monthly usage per pool, resource, account and submitter in the current allocation year';

-- ---- Fair share ---------------------------------------------------------------------------

-- Per pool (and unit) and account, and per user inside each account:
--   share       = account's allocation valid at `at` / the pool's total (users: the account's
--                 share divided by their shares, equal by default)
--   usage       = decayed usage at `at` (setting decay: half_life or interval); each job's
--                 net charge dated at its end, jobs that ended after `at` not counted
--   norm_usage  = usage / the pool's total decayed usage
--   factor      = 2^(-norm_usage / share), times exhausted_factor when the account's usage in
--                 the allocation year containing `at` has reached its allocation for it
-- No JIT: at 3 M jobs its statement is costed above jit_above_cost, and compiling it took
-- 0.15 s of CPU for nothing gained (it aggregates a few rows per user).
CREATE FUNCTION @extschema@.fairshare_all(at timestamptz DEFAULT pg_catalog.now())
    RETURNS TABLE (pool text, unit text, account text, submitter text, allocation numeric, share float8,
                   usage float8, norm_usage float8, year_usage numeric, exhausted boolean, factor float8)
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    SET jit = off
    AS $$
        SELECT pg_catalog.isfinite(coalesce($1, pg_catalog.now()))
               OR hpcacct_internal.refuse_argument($1, 'fairshare_all', 'at');  -- 22008
        WITH cfg AS MATERIALIZED (
            SELECT coalesce($1, pg_catalog.now()) AS at,
                   hpcacct_internal.local_time(coalesce($1, pg_catalog.now()), z.tz)::date AS day,
                   z.tz,
                   -- (as the rollup counts months: local_time())
                   pg_catalog.date_trunc('month', hpcacct_internal.local_time(coalesce($1, pg_catalog.now()), z.tz))
                       AS at_month,
                   @extschema@.setting_value('decay') AS form,
                   @extschema@.setting_value('half_life')::interval AS half_life,
                   @extschema@.setting_value('period')::interval AS period,
                   @extschema@.setting_value('period_decay')::float8 AS decay,
                   @extschema@.setting_value('depth')::integer AS depth,
                   @extschema@.setting_value('exhausted_factor')::float8 AS penalty
            FROM (SELECT @extschema@.site_timezone() AS tz) z
        ), recent AS MATERIALIZED (
            -- the jobs read from the ledger: those that ended in the month of `at` (half-life;
            -- earlier ones are in the rollup), or in the counted periods (interval). Half-life:
            -- none when the rollup's sum of that month, decayed to the month's end, can be
            -- scaled back to `at` (closed_form): no charge of the month ends after `at` (a
            -- report of now), and the month's end is at most 64 half-lives after `at`
            SELECT cfg.*,
                   CASE cfg.form WHEN 'half_life' THEN cfg.at_month AT TIME ZONE cfg.tz
                                 -- (days of 24 hours, as decayed_usage() counts them: not the
                                 -- session TimeZone's, where a day of DST has 23)
                                 ELSE (cfg.at AT TIME ZONE 'UTC' - cfg.depth * cfg.period) AT TIME ZONE 'UTC' END
                       AS since,
                   cfg.form = 'half_life'
                   AND @extschema@.decay_weight(cfg.at, (cfg.at_month + interval '1 month') AT TIME ZONE cfg.tz,
                                                cfg.half_life) >= 2 ^ -64
                   -- (an aggregate, not NOT EXISTS: planned for all its rows, it takes the BRIN index
                   -- on job_end; an EXISTS, planned for its first row, scanned the whole ledger)
                   AND (SELECT max(l.job_end) FROM @extschema@.ledger l
                        WHERE l.kind = 'charge' AND l.job_end > coalesce($1, pg_catalog.now())
                          AND l.job_end < (cfg.at_month + interval '1 month') AT TIME ZONE cfg.tz) IS NULL
                       AS closed_form
            FROM cfg
        ), factors AS MATERIALIZED (
            -- half-life: how much the rollup's decayed sums of each month decay until `at`,
            -- by month number (year * 12 + month - 1) from the rollup's first month on; the
            -- month of `at` (closed form) is scaled back from its end: 1 / 2^(-(end - at) / half_life)
            SELECT f.first_index,
                   pg_catalog.array_agg(CASE WHEN m.month < w.at_month
                                             THEN @extschema@.decay_weight((m.month + interval '1 month') AT TIME ZONE w.tz,
                                                                           w.at, w.half_life)
                                             ELSE 1 / @extschema@.decay_weight(w.at, (m.month + interval '1 month') AT TIME ZONE w.tz,
                                                                               w.half_life) END
                                        ORDER BY m.month) AS factor
            FROM recent w
            CROSS JOIN (SELECT min(c.end_month) AS first_month,
                               (pg_catalog.date_part('year', min(c.end_month)) * 12
                                + pg_catalog.date_part('month', min(c.end_month)) - 1)::integer AS first_index
                        FROM hpcacct_internal.charge_rollup_exact c) f
            CROSS JOIN LATERAL pg_catalog.generate_series(f.first_month,
                                                          w.at_month - CASE WHEN w.closed_form THEN interval '0'
                                                                            ELSE interval '1 month' END,
                                                          interval '1 month') AS m(month)
            WHERE w.form = 'half_life'
            GROUP BY f.first_index
        ), base AS MATERIALIZED (
            -- fairshare_base serves `at` when everything in it ended before the month of `at`
            -- (compaction decays every row to the latest month folded when that month advances)
            SELECT coalesce((SELECT max(b.through) FROM @extschema@.fairshare_base b) < cfg.at_month, true) AS usable
            FROM cfg
        ), alloc AS (
            -- as in year_allocations: a row without a pool (the quarterly bank's deposits,
            -- transfers, refunds) is credit for every pool charged in its unit
            SELECT coalesce(l.pool, u.pool) AS pool, l.unit, l.account, greatest(sum(l.amount), 0) AS allocation
            FROM @extschema@.ledger l
            CROSS JOIN cfg
            LEFT JOIN (SELECT DISTINCT r.unit, coalesce(r.pool, r.cluster) AS pool FROM @extschema@.resource r) u
              ON l.pool IS NULL AND u.unit = l.unit
            WHERE l.kind <> 'charge' AND coalesce(l.pool, u.pool) IS NOT NULL
              AND cfg.day BETWEEN l.valid_from AND l.valid_until
            GROUP BY coalesce(l.pool, u.pool), l.unit, l.account
        ), jobs AS (
            -- the charges and reversals themselves: a reversal decays exactly as the charge it
            -- cancels (same end, same amount) and is subtracted, so a re-rated job counts its
            -- new charge and a deleted one nothing, without grouping the ledger by job
            SELECT l.resource_id, l.unit, l.account, l.submitter, l.job_end,
                   abs(l.amount)::float8 AS amount, l.amount < 0 AS reversal, l.amount AS net
            FROM recent w
            JOIN @extschema@.ledger l ON l.job_end >= w.since AND l.job_end <= w.at
            WHERE l.kind = 'charge' AND NOT w.closed_form
        ), decayed AS (
            -- usage: decayed (a sum of floats: never below 0), rounded to float8's 15 significant
            -- decimal digits (the cast to numeric), so that the closed form's last bits do not
            -- show where the job-by-job sum is a short decimal; net: exact, what makes a user count
            SELECT d.pool, d.unit, d.account, d.submitter, greatest(sum(d.usage), 0)::numeric::float8 AS usage,
                   sum(d.net) AS net
            FROM (
                SELECT coalesce(r.pool, r.cluster) AS pool, g.unit, g.account, g.submitter, g.usage, g.net
                FROM (  -- per resource first, its pool looked up once per group
                    SELECT j.resource_id, j.unit, j.account, j.submitter,
                           coalesce(@extschema@.decayed_usage(j.job_end, j.amount, cfg.at, cfg.half_life)
                                        FILTER (WHERE cfg.form = 'half_life' AND NOT j.reversal),
                                    @extschema@.decayed_usage(j.job_end, j.amount, cfg.at, cfg.period, cfg.decay,
                                                              cfg.depth)
                                        FILTER (WHERE cfg.form = 'interval' AND NOT j.reversal), 0)
                           - coalesce(@extschema@.decayed_usage(j.job_end, j.amount, cfg.at, cfg.half_life)
                                          FILTER (WHERE cfg.form = 'half_life' AND j.reversal),
                                      @extschema@.decayed_usage(j.job_end, j.amount, cfg.at, cfg.period, cfg.decay,
                                                                cfg.depth)
                                          FILTER (WHERE cfg.form = 'interval' AND j.reversal), 0) AS usage,
                           sum(j.net) AS net
                    FROM jobs j CROSS JOIN cfg
                    GROUP BY j.resource_id, j.unit, j.account, j.submitter
                ) g
                JOIN @extschema@.resource r USING (resource_id)
                UNION ALL
                -- half-life: the rollup's sums for the jobs that ended before the month of `at`
                -- (and in it, closed form), decayed from the end of the month they ended in to
                -- `at`; the rows folded into fairshare_base are read from there when it was
                -- folded before that month
                SELECT coalesce(r.pool, r.cluster), c.unit, c.account, c.submitter,
                       sum(c.decayed * (SELECT f.factor FROM factors f)[
                               (pg_catalog.date_part('year', c.end_month) * 12 + pg_catalog.date_part('month', c.end_month))::integer
                               - (SELECT f.first_index FROM factors f)]),
                       sum(c.job_amount)
                FROM (SELECT c.* FROM hpcacct_internal.charge_rollup_exact c WHERE NOT c.folded  -- its partial index
                      UNION ALL
                      SELECT c.* FROM @extschema@.charge_rollup c WHERE c.folded AND NOT (SELECT b.usable FROM base b)) c
                JOIN @extschema@.resource r USING (resource_id)
                WHERE (c.end_month < (SELECT w.at_month FROM recent w)
                       OR (c.end_month = (SELECT w.at_month FROM recent w) AND (SELECT w.closed_form FROM recent w)))
                  AND (SELECT w.form FROM recent w) = 'half_life'
                GROUP BY coalesce(r.pool, r.cluster), c.unit, c.account, c.submitter
                UNION ALL
                SELECT coalesce(r.pool, r.cluster), b.unit, b.account, b.submitter,
                       sum(b.decayed * @extschema@.decay_weight((b.through + interval '1 month')::timestamp AT TIME ZONE cfg.tz,
                                                                cfg.at, cfg.half_life)),
                       sum(b.job_amount)
                FROM @extschema@.fairshare_base b
                JOIN @extschema@.resource r USING (resource_id)
                CROSS JOIN cfg
                WHERE cfg.form = 'half_life' AND (SELECT u.usable FROM base u)
                GROUP BY coalesce(r.pool, r.cluster), b.unit, b.account, b.submitter
            ) d
            GROUP BY d.pool, d.unit, d.account, d.submitter
        ), account_usage AS (
            SELECT d.pool, d.unit, d.account, sum(d.usage) AS usage
            FROM decayed d
            GROUP BY d.pool, d.unit, d.account
        ), accounts AS (
            SELECT coalesce(a.pool, u.pool) AS pool, coalesce(a.unit, u.unit) AS unit,
                   coalesce(a.account, u.account) AS account,
                   coalesce(a.allocation, 0) AS allocation, coalesce(u.usage, 0) AS usage
            FROM alloc a
            FULL JOIN account_usage u ON u.pool = a.pool AND u.unit = a.unit AND u.account = a.account
            WHERE coalesce(a.allocation, 0) > 0 OR coalesce(u.usage, 0) > 0
        ), shares AS (
            SELECT a.pool, a.unit, a.account, a.allocation, a.usage,
                   CASE WHEN sum(a.allocation) OVER w > 0
                        THEN (a.allocation / sum(a.allocation) OVER w)::float8 ELSE 0 END AS share,
                   CASE WHEN sum(a.usage) OVER w > 0 THEN a.usage / sum(a.usage) OVER w ELSE 0 END AS norm_usage,
                   sum(a.usage) OVER w AS pool_usage,
                   y.usage AS year_usage,
                   coalesce(y.allocation > 0 AND y.usage >= y.allocation, false) AS exhausted
            FROM accounts a
            LEFT JOIN @extschema@.usage_by_account(NULL, coalesce($1, pg_catalog.now())) y
              ON y.pool = a.pool AND y.unit = a.unit AND y.account = a.account
            WINDOW w AS (PARTITION BY a.pool, a.unit)
        ), members AS (
            SELECT s.pool, s.unit, s.account, m.submitter, coalesce(d.usage, 0) AS usage,
                   coalesce(f.shares, 1) AS shares,
                   sum(coalesce(f.shares, 1)) OVER (PARTITION BY s.pool, s.unit, s.account) AS account_shares,
                   s.share AS account_share, s.pool_usage, s.exhausted
            FROM shares s
            JOIN (SELECT d.pool, d.unit, d.account, d.submitter FROM decayed d WHERE d.net > 0
                  UNION
                  SELECT s2.pool, s2.unit, s2.account, f2.submitter
                  FROM shares s2 JOIN @extschema@.fairshare_user f2 ON f2.account = s2.account) m
              ON m.pool = s.pool AND m.unit = s.unit AND m.account = s.account
            LEFT JOIN decayed d
              ON d.pool = s.pool AND d.unit = s.unit AND d.account = s.account AND d.submitter = m.submitter
            LEFT JOIN @extschema@.fairshare_user f ON f.account = s.account AND f.submitter = m.submitter
        ), users AS (
            SELECT m.pool, m.unit, m.account, m.submitter, m.usage, m.exhausted,
                   CASE WHEN m.account_shares > 0 THEN m.account_share * m.shares / m.account_shares ELSE 0 END
                       AS share,
                   CASE WHEN m.pool_usage > 0 THEN m.usage / m.pool_usage ELSE 0 END AS norm_usage
            FROM members m
        )
        SELECT s.pool, s.unit, s.account, NULL::text, s.allocation, s.share, s.usage, s.norm_usage,
               s.year_usage, s.exhausted,
               @extschema@.fairshare_factor(s.norm_usage, s.share) * CASE WHEN s.exhausted THEN cfg.penalty ELSE 1 END
        FROM shares s CROSS JOIN cfg
        UNION ALL
        SELECT u.pool, u.unit, u.account, u.submitter, NULL, u.share, u.usage, u.norm_usage, NULL, u.exhausted,
               @extschema@.fairshare_factor(u.norm_usage, u.share) * CASE WHEN u.exhausted THEN cfg.penalty ELSE 1 END
        FROM users u CROSS JOIN cfg
        ORDER BY 1, 2, 3, 4 NULLS FIRST
    $$;
COMMENT ON FUNCTION @extschema@.fairshare_all(timestamptz) IS
    'Fair share at at (NULL: now) per pool and account (submitter NULL) and per user inside it: allocation valid at at, '
    'target share, decayed and normalized usage, usage in the allocation year, exhausted flag, '
    'factor 2^(-norm_usage / share) (times setting exhausted_factor when the year''s allocation is used up)';
REVOKE EXECUTE ON FUNCTION @extschema@.fairshare_all(timestamptz) FROM PUBLIC;
