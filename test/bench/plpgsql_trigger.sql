-- make bench: the ingestion reference: the charge rule as a classic PL/pgSQL row trigger, one
-- lookup and one INSERT per job. Same checks and SQLSTATEs as hpcacct_internal.charge_jobs(), same
-- ledger rows (the charge itself is hpcacct.charge(), the same C function the statement
-- trigger calls: what differs is row-at-a-time versus set-based). Created disabled; the
-- ingestion case enables it in place of the statement triggers.
CREATE FUNCTION bench.charge_job_row() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        r hpcacct.resource;
    BEGIN
        IF TG_OP IN ('UPDATE', 'DELETE') THEN
            IF TG_OP = 'DELETE' OR (OLD.cluster, OLD.jobid, OLD.account, OLD."user", OLD.partition, OLD.start, OLD."end",
                                    OLD.alloctres::text)
                                   IS DISTINCT FROM (NEW.cluster, NEW.jobid, NEW.account, NEW."user", NEW.partition,
                                                     NEW.start, NEW."end", NEW.alloctres::text) THEN
                INSERT INTO hpcacct.ledger (account, kind, amount, unit, resource_id, cluster, jobid, submitter,
                                            job_start, job_end, note)
                SELECT l.account, 'charge', -sum(l.amount), l.unit, l.resource_id, l.cluster, l.jobid, l.submitter,
                       l.job_start, l.job_end, 'reversal: job ' || lower(TG_OP) || 'd'
                FROM hpcacct.ledger l
                WHERE l.kind = 'charge' AND l.cluster = OLD.cluster AND l.jobid = OLD.jobid
                GROUP BY l.account, l.unit, l.resource_id, l.cluster, l.jobid, l.submitter, l.job_start, l.job_end
                HAVING sum(l.amount) <> 0;
            ELSE
                RETURN NULL;
            END IF;
            IF TG_OP = 'DELETE' THEN
                RETURN NULL;
            END IF;
        END IF;

        IF NEW."end" < NEW.start THEN
            RAISE EXCEPTION 'job %/% ends before it starts', NEW.cluster, NEW.jobid
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF NOT EXISTS (SELECT 1 FROM hpcacct.account a WHERE a.name = NEW.account) THEN
            RAISE EXCEPTION 'unknown account "%" (job %/%)', NEW.account, NEW.cluster, NEW.jobid
                USING ERRCODE = 'undefined_object';
        END IF;
        SELECT * INTO r FROM hpcacct.resource x
        WHERE x.cluster = NEW.cluster AND x.partition = NEW.partition AND x.valid @> NEW.start;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'no resource for cluster "%" partition "%" at % (job %/%)',
                            NEW.cluster, NEW.partition, NEW.start, NEW.cluster, NEW.jobid
                USING ERRCODE = 'undefined_object';
        END IF;
        INSERT INTO hpcacct.ledger (account, kind, amount, unit, resource_id, cluster, jobid, submitter, job_start, job_end)
        VALUES (NEW.account, 'charge',
                round(hpcacct.charge(NEW.alloctres, NEW."end" - NEW.start, r.bundle, r.rate,
                                     CASE WHEN r.exclusive THEN r.node END)::numeric, 6),
                r.unit, r.resource_id, NEW.cluster, NEW.jobid, NEW."user", NEW.start, NEW."end");
        RETURN NULL;
    END
    $$;

CREATE TRIGGER bench_charge_row AFTER INSERT OR UPDATE OR DELETE ON hpcacct.job
    FOR EACH ROW EXECUTE FUNCTION bench.charge_job_row();
ALTER TABLE hpcacct.job DISABLE TRIGGER bench_charge_row;

-- Puts the job table in the state of an ingestion variant, empty, with an empty ledger:
--   charge_jobs  hpcacct's statement triggers      plpgsql  the row trigger above
--   plain        no trigger at all (the table with its primary key, as COPY alone costs)
--   charge_jobs_deferred  charge_jobs with the setting rollup = deferred (every other: immediate)
CREATE FUNCTION bench.prepare_ingest(variant text) RETURNS void
    LANGUAGE plpgsql
    AS $$
    BEGIN
        SET LOCAL session_replication_role = replica;  -- the ledger's TRUNCATE guard stays quiet
        TRUNCATE hpcacct.job, hpcacct.ledger, hpcacct.charge_rollup, hpcacct.consumption_rollup,
                 hpcacct.rollup_pending;
        SET LOCAL session_replication_role = DEFAULT;
        IF variant = 'charge_jobs_deferred' THEN
            INSERT INTO hpcacct.setting VALUES ('rollup', 'deferred')
            ON CONFLICT (name) DO UPDATE SET value = excluded.value;
        ELSE
            DELETE FROM hpcacct.setting WHERE name = 'rollup';
        END IF;
        IF variant IN ('charge_jobs', 'charge_jobs_deferred') THEN
            ALTER TABLE hpcacct.job ENABLE TRIGGER USER;
            ALTER TABLE hpcacct.job DISABLE TRIGGER bench_charge_row;
        ELSIF variant = 'plpgsql' THEN
            ALTER TABLE hpcacct.job DISABLE TRIGGER USER;
            ALTER TABLE hpcacct.job ENABLE TRIGGER bench_charge_row;
        ELSE
            ALTER TABLE hpcacct.job DISABLE TRIGGER USER;
        END IF;
    END
    $$;

-- For the correctness check: ingest the file with a variant and return the ledger it wrote.
CREATE FUNCTION bench.ingest_ledger(variant text, file text)
    RETURNS TABLE (cluster text, jobid text, account text, submitter text, amount numeric, unit text,
                   resource_id bigint, job_start timestamptz, job_end timestamptz)
    LANGUAGE plpgsql
    AS $$
    BEGIN
        PERFORM bench.prepare_ingest(variant);
        EXECUTE format('COPY hpcacct.job FROM %L', file);
        RETURN QUERY SELECT l.cluster, l.jobid, l.account, l.submitter, l.amount, l.unit, l.resource_id,
                            l.job_start, l.job_end
                     FROM hpcacct.ledger l WHERE l.kind = 'charge';
    END
    $$;

-- For the check of the deferred variant: ingest the file with a variant, roll up what is
-- pending, and return the rollups' sums per group (charge and consumption).
CREATE FUNCTION bench.ingest_rollup(variant text, file text)
    RETURNS TABLE (k text, a numeric, b numeric)
    LANGUAGE plpgsql
    AS $$
    BEGIN
        PERFORM bench.prepare_ingest(variant);
        EXECUTE format('COPY hpcacct.job FROM %L', file);
        PERFORM hpcacct.roll_up_pending();
        RETURN QUERY
            SELECT concat_ws('/', 'charge', c.account, c.resource_id, c.submitter, c.month, c.end_month),
                   sum(c.amount), sum(c.job_amount)
            FROM hpcacct.charge_rollup c GROUP BY c.account, c.resource_id, c.submitter, c.month, c.end_month
            UNION ALL
            SELECT concat_ws('/', 'consumption', c.account, c.resource_id, c.boundary), sum(c.ended), sum(c.running)
            FROM hpcacct.consumption_rollup c GROUP BY c.account, c.resource_id, c.boundary;
    END
    $$;
