-- ---------------------------------------------------------------------------------------
-- Resources that charged jobs, accounts that have ledger entries, and re-rating.
--
-- A job is charged at the resource row valid at its start, and the ledger names that row.
-- Editing the row afterwards (its rate, bundle, node, unit, pool, or the start of its
-- validity) would change what the ledger's charges mean without re-rating any of them, so a
-- row with charges may only be closed: the end of its validity moved, never before the start
-- of a job it still charges. Re-rating charged jobs is an explicit, logged operation,
-- rerate(), that books reversals and new charges through the ledger.
-- ---------------------------------------------------------------------------------------

-- The latest start of the jobs a resource row still charges (whose charges on it do not net
-- to zero: a job of zero length costs nothing at any rate); NULL when there is none.
CREATE FUNCTION hpcacct_internal.last_charged_start(resource_id bigint) RETURNS timestamptz
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT max(j.job_start)
        FROM (SELECT l.job_start
              FROM @extschema@.ledger l
              WHERE l.kind = 'charge' AND l.resource_id = last_charged_start.resource_id
              GROUP BY l.cluster, l.jobid, l.job_start
              HAVING sum(l.amount) <> 0) j
    $$;
COMMENT ON FUNCTION hpcacct_internal.last_charged_start(bigint) IS
    'Latest start of the jobs a resource row still charges (NULL: none)';

-- What waits for the charging in progress and then checks or re-rates its charges (a change of
-- a rate row, rerate(), rerate_catch_up()) must read them with a snapshot taken after the wait:
-- READ COMMITTED. Under REPEATABLE READ or SERIALIZABLE the snapshot predates the wait, and the
-- charges committed meanwhile would stay at the old rate. 25000 there.
CREATE FUNCTION hpcacct_internal.require_read_committed(what text) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
            RAISE EXCEPTION '% must run in a READ COMMITTED transaction, not %',
                            what, pg_catalog.current_setting('transaction_isolation')
                USING ERRCODE = 'invalid_transaction_state',
                      DETAIL = 'A snapshot taken before it waits for the charging in progress misses the charges '
                               'committed meanwhile: they would stay at the old rate.',
                      HINT = 'Run it in a READ COMMITTED transaction (the default).';
        END IF;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.require_read_committed(text) IS
    'A change of rate rows, rerate() and rerate_catch_up() run in READ COMMITTED only (25000 otherwise)';

-- BEFORE INSERT, UPDATE or DELETE of a resource row: the overlap of two rates and the
-- deletion of a charged row get an error with a hint (the exclusion constraint and the
-- ledger's foreign key stay the guarantees); a charged row may only be closed.
CREATE FUNCTION hpcacct_internal.check_resource_change() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        other record;
        charged boolean;
        last_start timestamptz;
        -- what a charge was computed from, but the validity (tres compared in canonical text:
        -- its operators are not on this search_path)
        computed_from_changed boolean;
    BEGIN
        IF TG_OP = 'UPDATE' THEN
            computed_from_changed := (NEW.resource_id, NEW.cluster, NEW.partition, NEW.node::text, NEW.bundle::text,
                                      NEW.rate, NEW.unit, NEW.pool, NEW.exclusive)
                                     IS DISTINCT FROM
                                     (OLD.resource_id, OLD.cluster, OLD.partition, OLD.node::text, OLD.bundle::text,
                                      OLD.rate, OLD.unit, OLD.pool, OLD.exclusive);
        END IF;
        -- A change of what charging reads waited, in the statement trigger below, for the
        -- charging transactions in progress (one may be charging a job at this row) and holds
        -- new ones off until it commits; the checks below then see their charges. Under
        -- REPEATABLE READ or SERIALIZABLE they would read a snapshot taken before the wait, so
        -- such a change is refused there.
        IF TG_OP = 'UPDATE' AND (computed_from_changed OR NEW.valid IS DISTINCT FROM OLD.valid) THEN
            PERFORM hpcacct_internal.require_read_committed(
                pg_catalog.format('a change of resource %s (%s/%s)', OLD.resource_id, OLD.cluster, OLD.partition));
        END IF;
        IF TG_OP IN ('UPDATE', 'DELETE') THEN
            charged := EXISTS (SELECT 1 FROM @extschema@.ledger l
                               WHERE l.kind = 'charge' AND l.resource_id = OLD.resource_id);
        END IF;
        IF TG_OP = 'DELETE' THEN
            IF charged THEN
                RAISE EXCEPTION 'resource % (%/%) has charged jobs and cannot be deleted',
                                OLD.resource_id, OLD.cluster, OLD.partition
                    USING ERRCODE = 'foreign_key_violation',
                          HINT = format('The ledger''s charges name it. To stop charging at it, close it: UPDATE hpcacct.resource '
                                        'SET valid = tstzrange(lower(valid), <end>) WHERE resource_id = %s.',
                                        OLD.resource_id);
            END IF;
            RETURN OLD;
        END IF;

        IF TG_OP = 'UPDATE' AND charged THEN
            IF computed_from_changed
               OR (lower(NEW.valid), lower_inc(NEW.valid)) IS DISTINCT FROM (lower(OLD.valid), lower_inc(OLD.valid)) THEN
                RAISE EXCEPTION 'resource % (%/%) has charged jobs: only the end of its validity can change',
                                OLD.resource_id, OLD.cluster, OLD.partition
                    USING ERRCODE = 'HA006',
                          DETAIL = 'Its rate, bundle, node, unit, pool, exclusive flag and the start of its validity '
                                   'are what the ledger''s charges were computed from.',
                          HINT = format('For jobs from a date on, re-rate them: SELECT hpcacct.rerate(%s, <new rate>, <from>) '
                                        '(closes this row, adds the new one, books reversals and new charges). For future '
                                        'jobs only, close this row at <from> and insert a new one from <from>.',
                                        OLD.resource_id);
            END IF;
            last_start := hpcacct_internal.last_charged_start(OLD.resource_id);
            IF last_start IS NOT NULL AND NOT NEW.valid @> last_start THEN
                RAISE EXCEPTION 'resource % (%/%) cannot be closed at %: it charged a job that started at %',
                                OLD.resource_id, OLD.cluster, OLD.partition, upper(NEW.valid), last_start
                    USING ERRCODE = 'HA006',
                          HINT = format('Close it after %s, or re-rate the jobs from <from> on: '
                                        'SELECT hpcacct.rerate(%s, <new rate>, <from>).', last_start, OLD.resource_id);
            END IF;
        END IF;

        -- Two rates for one cluster and partition at the same time (the exclusion constraint
        -- would refuse it too, without saying what to do).
        SELECT r.resource_id, r.valid INTO other
        FROM @extschema@.resource r
        WHERE r.cluster = NEW.cluster AND r.partition = NEW.partition AND r.valid && NEW.valid
          AND r.resource_id IS DISTINCT FROM NEW.resource_id
        LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'a rate for %/% over % overlaps resource % (valid %)',
                            NEW.cluster, NEW.partition, NEW.valid, other.resource_id, other.valid
                USING ERRCODE = 'exclusion_violation', CONSTRAINT = 'resource_one_rate_at_a_time',
                      HINT = format('One rate at a time: close resource %s where the new rate starts '
                                    '(UPDATE hpcacct.resource SET valid = tstzrange(lower(valid), <start>) WHERE resource_id = %s), '
                                    'then insert the new row valid from <start>; to re-rate jobs already charged, '
                                    'use hpcacct.rerate().', other.resource_id, other.resource_id);
        END IF;
        RETURN NEW;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.check_resource_change() IS
    'Trigger: a charged resource row may only be closed (HA006), not deleted; overlapping rates get a hint';
CREATE TRIGGER check_resource_change BEFORE INSERT OR UPDATE OR DELETE ON @extschema@.resource
    FOR EACH ROW EXECUTE FUNCTION hpcacct_internal.check_resource_change();

-- BEFORE UPDATE of resource rows, before any row is locked: the ledger in SHARE ROW EXCLUSIVE
-- mode, as rerate() takes it (EXCLUSIVE) before the row. Taken in the row trigger, after
-- the row's lock, it deadlocked with a rerate() of the row (40P01). SHARE ROW EXCLUSIVE, not
-- SHARE: two changes take turns, so neither holds the other's later booking (a job loaded
-- again in the same transaction) off for good. Every UPDATE takes it, one of a description
-- too: such an edit may be followed by a change in the same transaction.
CREATE FUNCTION hpcacct_internal.lock_ledger_for_resource() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        LOCK TABLE @extschema@.ledger IN SHARE ROW EXCLUSIVE MODE;
        RETURN NULL;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.lock_ledger_for_resource() IS
    'Statement trigger of hpcacct.resource: an UPDATE waits for the charging in progress and holds new charging '
    'off (the ledger in SHARE ROW EXCLUSIVE mode) before it locks any row';
CREATE TRIGGER resource_locks_ledger BEFORE UPDATE ON @extschema@.resource
    FOR EACH STATEMENT EXECUTE FUNCTION hpcacct_internal.lock_ledger_for_resource();

-- BEFORE DELETE or a rename of an account: one the ledger names stays, under its name (the
-- ledger is append-only); this gives the hint, the ledger's foreign key is the guarantee.
CREATE FUNCTION hpcacct_internal.check_account_delete() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF TG_OP = 'UPDATE' AND NEW.name IS NOT DISTINCT FROM OLD.name THEN
            RETURN NEW;
        END IF;
        IF EXISTS (SELECT 1 FROM @extschema@.ledger l WHERE l.account = OLD.name) THEN
            IF TG_OP = 'UPDATE' THEN
                RAISE EXCEPTION 'account "%" has ledger entries and cannot be renamed', OLD.name
                    USING ERRCODE = 'foreign_key_violation',
                          HINT = 'The ledger is append-only and its entries name the account. Keep the name; '
                                 'put what the account is now in its description.';
            END IF;
            RAISE EXCEPTION 'account "%" has ledger entries and cannot be deleted', OLD.name
                USING ERRCODE = 'foreign_key_violation',
                      HINT = 'The ledger is append-only, so its accounts stay. To end an account''s use, stop '
                             'allocating to it (without an allocation for the current quarter check_submit refuses '
                             'it as account_expired) and remove its members with hpcacct.remove_member().';
        END IF;
        RETURN CASE TG_OP WHEN 'UPDATE' THEN NEW ELSE OLD END;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.check_account_delete() IS
    'Trigger: an account with ledger entries cannot be deleted or renamed; says what to do instead';
CREATE TRIGGER check_account_delete BEFORE DELETE OR UPDATE OF name ON @extschema@.account
    FOR EACH ROW EXECUTE FUNCTION hpcacct_internal.check_account_delete();

-- Every re-rating: who, when, which rows, from when, and what it moved.
CREATE TABLE @extschema@.rerate_log (
    rerate_id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    rerated_at      timestamptz NOT NULL DEFAULT pg_catalog.statement_timestamp(),
    rerated_by      text NOT NULL DEFAULT pg_catalog.session_user(),
    old_resource_id bigint NOT NULL REFERENCES @extschema@.resource,
    new_resource_id bigint NOT NULL REFERENCES @extschema@.resource,
    old_rate        float8 NOT NULL,
    new_rate        float8 NOT NULL,
    effective_from  timestamptz NOT NULL,
    jobs            bigint NOT NULL,
    amount_before   numeric NOT NULL,
    amount_after    numeric NOT NULL,
    note            text
);
COMMENT ON TABLE @extschema@.rerate_log IS
    'Re-ratings (rerate()): the closed and the new resource row, the rates, from when, jobs and amounts moved';
-- Its jobs and amounts are every account's on the resource (one other project's usage, where
-- only it ran there): staff and auditors read it, portal users no row.
ALTER TABLE @extschema@.rerate_log ENABLE ROW LEVEL SECURITY;
CREATE POLICY member_rows ON @extschema@.rerate_log FOR SELECT USING ((SELECT hpcacct_internal.sees_all_accounts('@extschema@.rerate_log')));
CREATE POLICY insert_rows ON @extschema@.rerate_log FOR INSERT WITH CHECK (true);
CREATE POLICY update_rows ON @extschema@.rerate_log FOR UPDATE USING (true) WITH CHECK (true);
CREATE POLICY delete_rows ON @extschema@.rerate_log FOR DELETE USING (true);
SELECT pg_catalog.pg_extension_config_dump('@extschema@.rerate_log', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.rerate_log_rerate_id_seq', '');

-- A re-rating books, per job, a reversal of its net charge at the old row and a new charge at
-- the new one: the reversed amount x new rate / old rate, rounded to 6 decimals like every
-- charge. Two steps, since rerate() closes the old row between them (a row may not be closed
-- before the start of a job it still charges); rerate() and rerate_catch_up() share them.
-- The notes name the re-rating: 'reversal: ' || label, and label.

-- The reversals of the net charges resource row `resource_id` holds for jobs that started at
-- or after effective_from; returns their entry ids.
CREATE FUNCTION hpcacct_internal.rerate_reverse(resource_id bigint, effective_from timestamptz, label text)
    RETURNS bigint[]
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        reversals bigint[];
    BEGIN
        IF NOT pg_catalog.isfinite(effective_from) THEN  -- -infinity would reverse every charge of the row
            RAISE EXCEPTION 'rerate_reverse: effective_from must be finite, not %', effective_from
                USING ERRCODE = 'datetime_field_overflow';
        END IF;
        WITH moved AS (
            SELECT l.account, l.unit, l.cluster, l.jobid, l.job_submit, l.submitter, l.job_start, l.job_end,
                   sum(l.amount) AS amount, sum(l.core_hours) AS core_hours
            FROM @extschema@.ledger l
            WHERE l.kind = 'charge' AND l.resource_id = rerate_reverse.resource_id AND l.job_start >= effective_from
            GROUP BY l.account, l.unit, l.cluster, l.jobid, l.job_submit, l.submitter, l.job_start, l.job_end
            HAVING sum(l.amount) <> 0
        ), reversed AS (
            INSERT INTO @extschema@.ledger (account, kind, amount, unit, resource_id, cluster, jobid, job_submit,
                                            submitter, job_start, job_end, note, core_hours)
            SELECT m.account, 'charge', -m.amount, m.unit, rerate_reverse.resource_id, m.cluster, m.jobid, m.job_submit,
                   m.submitter, m.job_start, m.job_end, 'reversal: ' || label, -m.core_hours
            FROM moved m
            RETURNING entry_id
        )
        SELECT coalesce(pg_catalog.array_agg(r.entry_id), '{}') INTO reversals FROM reversed r;
        RETURN reversals;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.rerate_reverse(bigint, timestamptz, text) IS
    'A re-rating''s first step: reverses the net charges a resource row holds for jobs started from an instant on; '
    'returns the reversals'' entry ids';
REVOKE EXECUTE ON FUNCTION hpcacct_internal.rerate_reverse(bigint, timestamptz, text) FROM PUBLIC;

-- The new charges at resource row `resource_id`: each reversal's amount x ratio (new rate /
-- old rate); returns the jobs and the amounts before (reversed) and after.
CREATE FUNCTION hpcacct_internal.rerate_charge(reversals bigint[], resource_id bigint, ratio numeric, label text,
                                               OUT jobs bigint, OUT amount_before numeric, OUT amount_after numeric)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        WITH charged AS (
            INSERT INTO @extschema@.ledger (account, kind, amount, unit, resource_id, cluster, jobid, job_submit,
                                            submitter, job_start, job_end, note, core_hours)
            SELECT l.account, 'charge', round(-l.amount * ratio, 6), l.unit, rerate_charge.resource_id,
                   l.cluster, l.jobid, l.job_submit, l.submitter, l.job_start, l.job_end, label, -l.core_hours
            FROM @extschema@.ledger l
            WHERE l.entry_id = ANY (reversals)
            RETURNING amount
        )
        SELECT count(*), coalesce(sum(c.amount), 0) INTO jobs, amount_after FROM charged c;
        SELECT coalesce(-sum(l.amount), 0) INTO amount_before FROM @extschema@.ledger l WHERE l.entry_id = ANY (reversals);
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.rerate_charge(bigint[], bigint, numeric, text) IS
    'A re-rating''s second step: charges each reversal''s amount x ratio at a resource row; returns jobs and amounts';
REVOKE EXECUTE ON FUNCTION hpcacct_internal.rerate_charge(bigint[], bigint, numeric, text) FROM PUBLIC;

-- Re-rates the jobs that resource row `resource_id` charges and that started at or after
-- `effective_from`: closes the row at effective_from, adds a row with the new rate from then
-- to the old row's end (the same cluster, partition, node, bundle, unit, pool and flag), and
-- books, per job, a reversal of its charge and a new charge at the new rate, i.e. the old
-- charge × new rate / old rate, rounded to 6 decimals like every charge. Returns the new
-- row's id; the operation is a row of rerate_log. Charging statements running meanwhile wait
-- (the ledger is locked until the transaction ends), so no job is charged at the closed rate.
CREATE FUNCTION @extschema@.rerate(resource_id bigint, new_rate float8, effective_from timestamptz,
                                   note text DEFAULT NULL)
    RETURNS bigint
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        was @extschema@.resource%ROWTYPE;
        new_id bigint;
        reversals bigint[];
        moved bigint;
        before_sum numeric;
        after_sum numeric;
        -- (the instant in ISO 8601 and UTC, whatever the session's DateStyle and TimeZone)
        label constant text := 're-rated: resource ' || resource_id || ' from '
                               || hpcacct_internal.iso_instant(effective_from);
    BEGIN
        IF resource_id IS NULL OR new_rate IS NULL OR effective_from IS NULL THEN
            RAISE EXCEPTION 'rerate: resource_id, new_rate and effective_from must not be NULL'
                USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF new_rate = 'NaN' OR new_rate < 0 OR new_rate = 'Infinity' THEN
            RAISE EXCEPTION 'rerate: the rate must be a finite, non-negative number, not %', new_rate
                USING ERRCODE = 'numeric_value_out_of_range';
        END IF;
        -- No charging while the rows change hands: charging inserts into the ledger. The lock
        -- waits for the charging in progress, whose charges only READ COMMITTED then sees.
        PERFORM hpcacct_internal.require_read_committed('rerate()');
        LOCK TABLE @extschema@.ledger IN EXCLUSIVE MODE;
        SELECT r.* INTO was FROM @extschema@.resource r WHERE r.resource_id = rerate.resource_id FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'rerate: no resource %', resource_id USING ERRCODE = 'undefined_object';
        END IF;
        IF NOT (was.valid @> effective_from) OR effective_from = lower(was.valid) THEN
            RAISE EXCEPTION 'rerate: % is not inside resource %''s validity % after its start', effective_from,
                            resource_id, was.valid
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Re-rate from an instant after the row''s start and before its end; jobs are charged at '
                             'the row valid at their start.';
        END IF;
        IF was.rate = 0 THEN
            RAISE EXCEPTION 'rerate: resource % has rate 0: its charges cannot be scaled to a new rate', resource_id
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Close the row, add one with the rate, and load its jobs again (DELETE and INSERT re-charge them).';
        END IF;
        IF new_rate = was.rate THEN
            RAISE EXCEPTION 'rerate: resource % already has rate %', resource_id, new_rate
                USING ERRCODE = 'invalid_parameter_value';
        END IF;

        -- Reversals first: the row then charges nothing from effective_from on and may be closed.
        reversals := hpcacct_internal.rerate_reverse(resource_id, effective_from, label);
        UPDATE @extschema@.resource r SET valid = pg_catalog.tstzrange(lower(was.valid), effective_from,
                                                                       CASE WHEN lower_inc(was.valid) THEN '[)' ELSE '()' END)
        WHERE r.resource_id = rerate.resource_id;
        INSERT INTO @extschema@.resource (cluster, partition, node, bundle, rate, unit, pool, exclusive, valid, description)
        VALUES (was.cluster, was.partition, was.node, was.bundle, new_rate, was.unit, was.pool, was.exclusive,
                pg_catalog.tstzrange(effective_from, upper(was.valid), CASE WHEN upper_inc(was.valid) THEN '[]' ELSE '[)' END),
                was.description)
        RETURNING resource.resource_id INTO new_id;
        SELECT c.jobs, c.amount_before, c.amount_after INTO moved, before_sum, after_sum
        FROM hpcacct_internal.rerate_charge(reversals, new_id, new_rate::numeric / was.rate::numeric, label) c;
        INSERT INTO @extschema@.rerate_log (old_resource_id, new_resource_id, old_rate, new_rate, effective_from,
                                            jobs, amount_before, amount_after, note)
        VALUES (resource_id, new_id, was.rate, new_rate, effective_from, moved, before_sum, after_sum, note);
        -- a federation's centre (it publishes the reference data) re-rated the charges it holds:
        -- the sites' still on their way are not
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_publication p WHERE p.pubname = 'hpcacct_fed_reference') THEN
            RAISE WARNING 'rerate: the sites'' charges of these jobs that reach this database later stay at the old rate'
                USING DETAIL = 'Charges booked at a site while its link was down, or before the closed row reached it.',
                      HINT = 'Once every site''s charges up to now are here (federation_status: every link connected, '
                             'no rows pending at the sites), run SELECT hpcacct.rerate_catch_up().';
        END IF;
        RETURN new_id;
    END
    $$;
COMMENT ON FUNCTION @extschema@.rerate(bigint, float8, timestamptz, text) IS
    'Re-rates the jobs a resource row charged from an instant on: closes the row, adds one with the new rate, '
    'books reversals and new charges; logged in rerate_log; returns the new row''s id';
REVOKE EXECUTE ON FUNCTION @extschema@.rerate(bigint, float8, timestamptz, text) FROM PUBLIC;
