-- ---------------------------------------------------------------------------------------
-- Slurm in (issue 14): sacct's lines are staged as text (COPY, no row-level security), then
-- one set-based step, load_sacct(), charges what it can into hpcacct.job and quarantines the
-- rest with the line, the reason and the SQLSTATE; quarantined lines are retried by every
-- load. The command hpcacct-sacct streams sacct's output into the staging table and calls
-- it; a site with its own export can do the same with COPY and SELECT.
--
-- After the privileges file on purpose: the staging table must not get row-level security
-- (COPY FROM refuses a table with it for a role it applies to), and the quarantine gets it
-- explicitly below.
-- ---------------------------------------------------------------------------------------

-- The fields of a line, one list for the staging table and the quarantine (LIKE copies the
-- columns; the tables do not depend on the type, which is dropped below).
CREATE TYPE hpcacct_internal.sacct_fields AS (
    line       text,
    problem    text,
    cluster    text,
    jobid      text,
    jobidraw   text,
    account    text,
    "user"     text,
    partition  text,
    submit     text,
    start      text,
    "end"      text,
    alloctres  text,
    state      text,
    elapsedraw text,
    reqtres    text,
    qos        text,
    nodelist   text
);

-- One row per sacct line, every field as the text sacct printed. Columns are named after
-- sacct's fields (lower case); the required ones are cluster, jobid, account, user,
-- partition, submit, start, end, alloctres and state, the others are kept with quarantined
-- lines. `problem` is set by a loader that could not split the line (wrong number of fields).
-- Unlogged: hpcacct-sacct stages and loads in one transaction, so a crash loses no line it
-- has not loaded (the watermark has not moved); a site staging lines in a transaction of its
-- own loses them in a crash and exports them again.
CREATE UNLOGGED TABLE @extschema@.sacct_staging (
    lineno     bigint,
    LIKE hpcacct_internal.sacct_fields
);
COMMENT ON TABLE @extschema@.sacct_staging IS
    'sacct lines as text, field by field (COPY them here, then SELECT hpcacct.load_sacct()); emptied by every load';

-- What a load could not charge, with the line and why. Open rows (resolved_at NULL) are
-- retried by every load; a row that then loads (or is skipped) is marked resolved, and kept.
CREATE TABLE @extschema@.sacct_quarantine (
    quarantine_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_key     text NOT NULL,
    reason      text NOT NULL,
    sqlstate    text NOT NULL CHECK (sqlstate ~ '^[0-9A-Z]{5}$'),
    first_seen  timestamptz NOT NULL DEFAULT pg_catalog.statement_timestamp(),
    last_tried  timestamptz NOT NULL DEFAULT pg_catalog.statement_timestamp(),
    attempts    integer NOT NULL DEFAULT 1,
    resolved_at timestamptz,
    resolution  text,
    LIKE hpcacct_internal.sacct_fields,
    CONSTRAINT sacct_quarantine_resolution CHECK ((resolved_at IS NULL) = (resolution IS NULL))
);
DROP TYPE hpcacct_internal.sacct_fields;
CREATE UNIQUE INDEX sacct_quarantine_open ON @extschema@.sacct_quarantine (job_key) WHERE resolved_at IS NULL;
COMMENT ON TABLE @extschema@.sacct_quarantine IS
    'sacct lines a load could not charge: the line, the reason and its SQLSTATE; retried by every load until resolved';
COMMENT ON COLUMN @extschema@.sacct_quarantine.job_key IS
    'cluster|jobid|submit (submit as epoch seconds when it parses), or line:<the line> when none of them is read: '
    'one open row per job run; a key of more than 99 characters is its first 64, ... and an md5 of it';
COMMENT ON COLUMN @extschema@.sacct_quarantine.resolution IS
    'What a later load did with it: inserted, rerated, updated, unchanged, ignored, step, unfinished, never_started; '
    'rekeyed: quarantined again under another key (a time that parses now)';

-- Slurm accounts that are not charged under their own name: account NULL means their jobs
-- are not charged at all (Slurm's root, test accounts), counted as ignored; a name means
-- they are charged to that hpcacct account.
CREATE TABLE @extschema@.slurm_account_map (
    slurm_account text PRIMARY KEY,
    account       text REFERENCES @extschema@.account,
    note          text,
    CONSTRAINT slurm_account_map_slurm_account_named CHECK (slurm_account <> '')
);
COMMENT ON TABLE @extschema@.slurm_account_map IS
    'Slurm accounts charged under another name (account), or not at all (account NULL: jobs ignored, e.g. root)';

-- How far hpcacct-sacct run has loaded each cluster: the end of its last sacct window.
CREATE TABLE @extschema@.sacct_watermark (
    cluster        text PRIMARY KEY,
    loaded_through timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT pg_catalog.statement_timestamp()
);
COMMENT ON TABLE @extschema@.sacct_watermark IS
    'Per cluster, the end of the last sacct window loaded; advanced by load_sacct() in the load''s transaction';

-- The runs a window showed running, until a line shows them ended. sacct's window shows a
-- run that had not ended before its start: a run seen running whose end slurmdbd records
-- more than the overlap late (slurmdbd down while it ended, slurmctld's backlog sent after
-- the next run) is in no later window. A load whose window does not show such a run marks it
-- missing; sacct_window_start() then starts the next window at its start, and a load whose
-- window does not show it either marks it lost. Pending runs are not kept: a held job's
-- Eligible is Unknown, so the windows stop showing it at every hold (hpcacct-slurm-sync's
-- too), and each would move a window back to its submit.
CREATE TABLE @extschema@.sacct_running (
    job_key       text PRIMARY KEY,
    cluster       text NOT NULL,
    jobid         text NOT NULL,
    account       text,
    submit        timestamptz NOT NULL,
    start         timestamptz NOT NULL,
    first_seen    timestamptz NOT NULL,
    missing_since timestamptz,
    lost_at       timestamptz,
    CONSTRAINT sacct_running_lost_after_missing CHECK (lost_at IS NULL OR missing_since IS NOT NULL)
);
COMMENT ON TABLE @extschema@.sacct_running IS
    'Runs a sacct window showed running (cluster, jobid, submit), until a line shows them ended: one that a later '
    'window no longer shows starts the next window at its start';
COMMENT ON COLUMN @extschema@.sacct_running.start IS 'Its start when last seen';
COMMENT ON COLUMN @extschema@.sacct_running.first_seen IS 'The end of the first window that showed it unfinished';
COMMENT ON COLUMN @extschema@.sacct_running.missing_since IS
    'The end of the first window that did not show it: its end was recorded late; the next window starts at its start';
COMMENT ON COLUMN @extschema@.sacct_running.lost_at IS
    'The end of a later window, from its start, that did not show it either: slurmdbd has no such run any more';

-- sacctmgr's associations (sacctmgr show assoc -P format=Cluster,Account,User), for
-- sync_slurm_accounts().
CREATE TABLE @extschema@.sacctmgr_staging (
    cluster text,
    account text,
    "user"  text
);
COMMENT ON TABLE @extschema@.sacctmgr_staging IS
    'sacctmgr associations as text (COPY them here, then SELECT hpcacct.sync_slurm_accounts()); emptied by the sync';

-- A time as sacct prints it: seconds since the epoch (SLURM_TIME_FORMAT=%s, what
-- hpcacct-sacct run asks for) or ISO text with a UTC offset (%FT%T%z where a Slurm prints
-- it, or Z) are that instant; ISO text without an offset (sacct's default) is read in `zone`
-- (the site's time zone, never the session's). NULL when the text is not such a time
-- (Unknown, None, a bad date) or has no offset and zone is NULL; raises only for an unknown
-- zone. In C (src/core/sacct.cpp parse_time): three regular expressions per time cost the
-- loader 0.45 s per 200 000 lines.
CREATE FUNCTION @extschema@.sacct_time(value text, zone text) RETURNS timestamptz
    AS 'MODULE_PATHNAME', 'hpcacct_sacct_time' LANGUAGE c STABLE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.sacct_time(text, text) IS
    'A sacct time: epoch seconds or ISO with a UTC offset are that instant, ISO without one is read in zone; '
    'NULL if it is not a time (Unknown, None, bad)';

CREATE FUNCTION @extschema@.tres_problem(text) RETURNS text
    AS 'MODULE_PATHNAME', 'hpcacct_tres_problem' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.tres_problem(text) IS
    'NULL when the text is a valid tres, else ''SQLSTATE message'' of the error its input would raise';
CREATE FUNCTION @extschema@.sacct_tres(text) RETURNS @extschema@.tres
    AS 'MODULE_PATHNAME', 'hpcacct_sacct_tres' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.sacct_tres(text) IS
    'The text as a tres, or NULL where its input would raise (tres_problem() says why): one parse per sacct line';

-- Where hpcacct-sacct run starts a cluster's next window: the watermark minus the overlap
-- (sacct's -S and -E include both ends, and slurmdbd may record a job after it ended), or
-- earlier, at the start of a run the last window no longer showed (sacct_running).
-- NULL when the cluster was never loaded. The overlap is checked first, loaded or not: a
-- negative one would start the window after the watermark, skipping the jobs in between, and
-- so would one with a negative part ('1 mon -30 days' is 0 by comparison, but its months and
-- days are subtracted apart: from 1 March, 3 March).
CREATE FUNCTION @extschema@.sacct_window_start(cluster text, overlap interval) RETURNS timestamptz
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF overlap IS NULL THEN
            RAISE EXCEPTION 'sacct_window_start: overlap must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        -- its months, days and time each (the total at least 0 then too)
        IF pg_catalog.date_trunc('month', overlap) < interval '0'
           OR pg_catalog.date_trunc('day', overlap) - pg_catalog.date_trunc('month', overlap) < interval '0'
           OR overlap - pg_catalog.date_trunc('day', overlap) < interval '0' THEN
            RAISE EXCEPTION 'sacct_window_start: overlap must not be negative'
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = pg_catalog.format('Its months, days and time are subtracted one by one: none may be '
                                                 'negative (%s).', overlap);
        END IF;
        -- (or the earliest start of a run the last window no longer showed: see sacct_running)
        RETURN (SELECT LEAST(hpcacct_internal.shift_utc(w.loaded_through, -overlap),
                             (SELECT pg_catalog.min(r.start) FROM @extschema@.sacct_running r
                              WHERE r.cluster = w.cluster AND r.missing_since IS NOT NULL AND r.lost_at IS NULL))
                FROM @extschema@.sacct_watermark w
                WHERE w.cluster = sacct_window_start.cluster);
    END
    $$;
COMMENT ON FUNCTION @extschema@.sacct_window_start(text, interval) IS
    'Start of a cluster''s next sacct window: its watermark minus the overlap (days of 24 hours, months of UTC), or the '
    'start of a run the last window no longer showed (sacct_running) if earlier; NULL if never loaded; '
    'a NULL overlap is an error (22004), a negative one or one with a negative part (months, days, time) 22023';

-- The load: every staged line (and every open quarantine row) is sorted, in one statement,
-- into steps, ignored accounts, unfinished runs (not charged yet: a later window shows them
-- finished), runs that never started (Start None or Unknown, or no allocation and no time),
-- lines to quarantine, and runs to charge. A run is
-- (cluster, jobid, submit), as slurmdbd identifies it; a run already in hpcacct.job with
-- the same fields writes nothing, a changed one is updated (and re-rated by the charging
-- trigger when a charging field changed). If charging still fails (a site trigger refusing
-- a job, a TRES the checks missed), the rows are bisected until the failing ones are found
-- and quarantined with their error; the rest load. `through` and `clusters`, when given,
-- advance those clusters' watermarks in the same transaction.
CREATE FUNCTION @extschema@.load_sacct(through timestamptz DEFAULT NULL, clusters text[] DEFAULT NULL,
    OUT lines bigint, OUT inserted bigint, OUT rerated bigint, OUT updated bigint, OUT unchanged bigint,
    OUT unfinished bigint, OUT never_started bigint, OUT steps bigint, OUT ignored bigint,
    OUT duplicates bigint, OUT quarantined bigint, OUT retried bigint, OUT resolved bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET jit = off  -- one-off statements over many rows: compiling them cost more than it saved (1.3 s of 17)
    AS $fn$
    DECLARE
        zone    text;
        problems bigint;
        max_length  interval := @extschema@.setting_value('max_job_length')::interval;
        need_member boolean := @extschema@.setting_value('require_membership')::boolean;
        pending bigint[];
        lo      bigint;
        hi      bigint;
        mid     bigint;
        total   bigint;
        written bigint;
        state_  text;
        message text;
        whole   boolean := true;  -- the first attempt (the whole set) is still to come
        plain   boolean;          -- this attempt inserts new runs by a plain INSERT
        alone   boolean := false; -- the staging table is ours alone: read it, then truncate it
    BEGIN
        IF pg_catalog.to_regclass('@extschema@.job') IS NULL THEN
            RAISE EXCEPTION 'there is no job table @extschema@.job to load into'
                USING ERRCODE = 'undefined_table', HINT = 'Create it with SELECT @extschema@.create_job_table().';
        END IF;
        IF through IS NOT NULL AND (clusters IS NULL OR pg_catalog.cardinality(clusters) = 0
                                    OR pg_catalog.array_position(clusters, NULL) IS NOT NULL) THEN
            RAISE EXCEPTION 'a watermark (through) needs the clusters it is for'
                USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF through IS NOT NULL AND NOT pg_catalog.isfinite(through) THEN
            RAISE EXCEPTION 'the watermark must be finite, not %', through USING ERRCODE = 'datetime_field_overflow';
        END IF;
        -- it only moves forward: one ahead of the clock would make every later window skip
        -- the jobs that end before it (an hour's leeway for the loader host's clock)
        IF through > pg_catalog.statement_timestamp() + interval '1 hour' THEN
            RAISE EXCEPTION 'the watermark % is more than an hour after the database server''s clock (%)',
                through, pg_catalog.statement_timestamp()
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'The next sacct window starts at the watermark, which never moves back: check the loader host''s clock.';
        END IF;
        -- One load at a time (another waits here): every committed line is loaded once.
        PERFORM hpcacct_internal.run_alone('load_sacct');
        -- When no other session holds the staging table (none is staging or reading lines) it
        -- is locked until commit, read whole and truncated: deleting every line cost 0.4 s per
        -- 200 000. Only where each statement sees what is committed (read committed): a
        -- snapshot taken earlier would miss lines the TRUNCATE removes. Otherwise the lines
        -- are claimed by DELETE, and another session's uncommitted lines wait for a later load.
        IF pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
            BEGIN
                LOCK TABLE @extschema@.sacct_staging IN ACCESS EXCLUSIVE MODE NOWAIT;
                alone := true;
            EXCEPTION WHEN lock_not_available THEN
                alone := false;
            END;
        END IF;
        -- Times without an offset are read in the site's time zone; unset, they are quarantined.
        SELECT s.value INTO zone FROM @extschema@.setting s WHERE s.name = 'timezone';

        IF pg_catalog.to_regclass('pg_temp.hpcacct_sacct_batch') IS NOT NULL THEN  -- a load that failed earlier
            DROP TABLE pg_temp.hpcacct_sacct_batch;
        END IF;
        IF pg_catalog.to_regclass('pg_temp.hpcacct_sacct_dup') IS NOT NULL THEN
            DROP TABLE pg_temp.hpcacct_sacct_dup;
        END IF;
        IF pg_catalog.to_regclass('pg_temp.hpcacct_sacct_write') IS NOT NULL THEN
            DROP TABLE pg_temp.hpcacct_sacct_write;
        END IF;
        IF pg_catalog.to_regclass('pg_temp.hpcacct_sacct_failed') IS NOT NULL THEN
            DROP TABLE pg_temp.hpcacct_sacct_failed;
        END IF;
        CREATE TEMP TABLE hpcacct_sacct_batch ON COMMIT DROP AS
        WITH claimed AS (
            DELETE FROM @extschema@.sacct_staging WHERE NOT alone RETURNING *
        ), parsed AS (
            SELECT r.*,
                   @extschema@.sacct_time(r.submit, zone) AS t_submit,
                   @extschema@.sacct_time(r.start, zone) AS t_start,
                   @extschema@.sacct_time(r."end", zone) AS t_end,
                   @extschema@.sacct_tres(r.alloctres) AS alloc  -- NULL: not a tres (tres_problem() says why)
            FROM (SELECT 0 AS origin, NULL::bigint AS quarantine_id, c.lineno, c.line, c.problem, c.cluster, c.jobid, c.jobidraw, c.account,
                         c."user", c.partition, c.submit, c.start, c."end", c.alloctres, c.state, c.elapsedraw,
                         c.reqtres, c.qos, c.nodelist
                  FROM (SELECT * FROM claimed
                        UNION ALL
                        SELECT * FROM @extschema@.sacct_staging WHERE alone) c
                  UNION ALL
                  SELECT 1, q.quarantine_id, NULL, q.line, q.problem, q.cluster, q.jobid, q.jobidraw, q.account, q."user",
                         q.partition, q.submit, q.start, q."end", q.alloctres, q.state, q.elapsedraw, q.reqtres,
                         q.qos, q.nodelist
                  FROM @extschema@.sacct_quarantine q WHERE q.resolved_at IS NULL) r
            OFFSET 0  -- computed once per line: flattened, every reference would parse the times again
        ), keyed AS (
            -- a key longer than 99 characters (a line no field was read from, or a field of
            -- garbage): its first 64 and an md5 of it, within what the index of open rows takes
            SELECT p.*,
                   CASE WHEN pg_catalog.length(k.job_key) > 99
                        THEN pg_catalog.left(k.job_key, 64) || '...' || pg_catalog.md5(k.job_key)
                        ELSE k.job_key END AS job_key
            FROM parsed p
            CROSS JOIN LATERAL (
                SELECT CASE WHEN p.cluster IS NULL AND p.jobid IS NULL AND p.submit IS NULL
                            THEN 'line:' || coalesce(p.line, '')
                            ELSE coalesce(p.cluster, '') || '|' || coalesce(p.jobid, '') || '|'
                                 -- (the epoch as numeric: a float8's text follows extra_float_digits,
                                 -- with -15 2e+09 for every run of a job id)
                                 || coalesce(pg_catalog.trim_scale(EXTRACT(epoch FROM p.t_submit))::text,
                                             'raw:' || coalesce(p.submit, ''))
                       END AS job_key) k
            OFFSET 0
        ), ranked AS (
            SELECT k.*,
                   1 AS rank,  -- the line that counts for its run is 1, the others 2 (below)
                   m.slurm_account IS NOT NULL AND m.account IS NULL AS ignored,
                   CASE WHEN m.slurm_account IS NOT NULL THEN m.account ELSE k.account END AS charged_account,
                   -- a rate at the start (one at most: resource_one_rate_at_a_time); joined, not
                   -- looked up per line (a million index probes)
                   rs.resource_id IS NOT NULL AS rated,
                   -- the account and the membership, joined too (unique keys: one row at most)
                   a.name IS NOT NULL AS account_known,
                   ms.account IS NOT NULL AS member
            FROM keyed k
            LEFT JOIN @extschema@.slurm_account_map m ON m.slurm_account = k.account
            LEFT JOIN @extschema@.account a
              ON a.name = CASE WHEN m.slurm_account IS NOT NULL THEN m.account ELSE k.account END
            LEFT JOIN @extschema@.membership ms
              ON ms.account = a.name AND ms.username = k."user"
            LEFT JOIN @extschema@.resource rs
              ON rs.cluster = k.cluster AND rs.partition = k.partition AND rs.valid @> k.t_start
        )
        SELECT r.*,
               CASE
                   WHEN r.problem IS NOT NULL THEN 'quarantine:22P02:' || r.problem
                   WHEN pg_catalog.strpos(r.jobid, '.') > 0 THEN 'step'
                   WHEN r.ignored THEN 'ignored'
                   WHEN coalesce(r."end", '') IN ('', 'Unknown', 'None') THEN 'unfinished'
                   WHEN coalesce(r.start, '') IN ('', 'Unknown', 'None') THEN 'never_started'
                   WHEN coalesce(r.cluster, '') = '' OR coalesce(r.jobid, '') = '' OR coalesce(r.account, '') = ''
                        OR coalesce(r."user", '') = '' OR coalesce(r.partition, '') = ''
                        OR coalesce(r.submit, '') IN ('', 'Unknown', 'None') OR r.alloctres IS NULL
                       THEN 'quarantine:22004:the line lacks a cluster, jobid, account, user, partition, submit time or alloctres'
                   WHEN (r.t_submit IS NULL OR r.t_start IS NULL OR r.t_end IS NULL) AND zone IS NULL
                        AND (@extschema@.sacct_time(r.submit, 'UTC') IS NOT NULL AND r.t_submit IS NULL
                             OR @extschema@.sacct_time(r.start, 'UTC') IS NOT NULL AND r.t_start IS NULL
                             OR @extschema@.sacct_time(r."end", 'UTC') IS NOT NULL AND r.t_end IS NULL)
                       THEN 'quarantine:22023:a time without a UTC offset, and the site''s timezone setting is unset '
                            '(set it, or run sacct with SLURM_TIME_FORMAT=%s)'
                   WHEN r.t_submit IS NULL OR r.t_start IS NULL OR r.t_end IS NULL
                       THEN 'quarantine:22007:invalid time (submit "' || r.submit || '", start "' || r.start
                            || '", end "' || r."end" || '")'
                   WHEN r.t_end < r.t_start
                       THEN 'quarantine:22023:the job ends before it starts'
                   -- cancelled while it waited: Slurm 22.05 may record Start = End and no allocation
                   WHEN r.alloctres = '' AND r.t_end = r.t_start THEN 'never_started'
                   WHEN r.t_end - r.t_start > max_length
                       THEN 'quarantine:HA004:the job claims to have run longer than max_job_length ('
                            || @extschema@.setting_value('max_job_length') || ')'
                   WHEN r.alloc IS NULL
                       THEN 'quarantine:' || pg_catalog.left(@extschema@.tres_problem(r.alloctres), 5) || ':'
                            || pg_catalog.substr(@extschema@.tres_problem(r.alloctres), 7)
                   WHEN NOT r.account_known
                       THEN 'quarantine:42704:unknown account "' || r.charged_account || '"'
                   WHEN need_member AND NOT r.member
                       THEN 'quarantine:HA005:user "' || r."user" || '" is not a member of account "'
                            || r.charged_account || '"'
                   WHEN NOT r.rated
                       THEN 'quarantine:42704:no resource for cluster "' || r.cluster || '" partition "'
                            || r.partition || '" at ' || hpcacct_internal.iso_instant(r.t_start)
                   ELSE 'charge'
               END AS verdict
        FROM ranked r;
        IF alone THEN
            TRUNCATE @extschema@.sacct_staging;
        END IF;
        -- the columns later statements join and filter on (all 30 of them cost more)
        ANALYZE pg_temp.hpcacct_sacct_batch (job_key, origin, rank, verdict);
        -- Several lines of one run (a file holding two windows, a quarantined line seen again):
        -- the newest staged line counts, then the quarantined one; the others rank 2. Found by
        -- hashing the keys, without sorting every line; the batch is updated only if there are
        -- any (joining it with none still hashed every line: 0.4 s per 200 000).
        CREATE TEMP TABLE hpcacct_sacct_dup ON COMMIT DROP AS
        SELECT b.job_key FROM pg_temp.hpcacct_sacct_batch b GROUP BY b.job_key HAVING pg_catalog.count(*) > 1;
        GET DIAGNOSTICS total = ROW_COUNT;
        IF total > 0 THEN
            WITH ordered AS (
                SELECT b.ctid AS row_id,
                       pg_catalog.row_number() OVER (PARTITION BY b.job_key ORDER BY b.origin, b.lineno DESC) AS n
                FROM pg_temp.hpcacct_sacct_batch b JOIN pg_temp.hpcacct_sacct_dup d ON d.job_key = b.job_key
            )
            UPDATE pg_temp.hpcacct_sacct_batch b SET rank = 2
            FROM ordered o WHERE b.ctid = o.row_id AND o.n > 1;
        END IF;

        -- Runs to write: those to charge that hpcacct.job does not hold as they are (an
        -- unchanged run is only counted: a re-load writes no row here).
        CREATE TEMP TABLE hpcacct_sacct_write ON COMMIT DROP AS
        SELECT pg_catalog.row_number() OVER () AS seq, w.*
        FROM (SELECT b.origin, b.lineno, b.job_key, b.cluster, b.jobid, b.charged_account AS account, b."user",
                     b.partition, b.t_submit AS submit, b.t_start AS start, b.t_end AS "end", b.alloc AS alloctres,
                     b.state,
                     CASE WHEN j.cluster IS NULL THEN 'inserted'
                          WHEN (j.account, j."user", j.partition, j.start, j."end")
                               IS DISTINCT FROM (b.charged_account, b."user", b.partition, b.t_start, b.t_end)
                               OR NOT j.alloctres OPERATOR(@extschema@.=) b.alloc THEN 'rerated'
                          WHEN j.state IS DISTINCT FROM b.state THEN 'updated'
                          ELSE 'unchanged'
                     END AS action
              FROM pg_temp.hpcacct_sacct_batch b
              LEFT JOIN @extschema@.job j ON j.cluster = b.cluster AND j.jobid = b.jobid AND j.submit = b.t_submit
              WHERE b.verdict = 'charge' AND b.rank = 1) w
        WHERE w.action <> 'unchanged';
        GET DIAGNOSTICS total = ROW_COUNT;
        ANALYZE pg_temp.hpcacct_sacct_write (seq, job_key, action);

        CREATE TEMP TABLE hpcacct_sacct_failed (seq bigint PRIMARY KEY, sqlstate text, reason text) ON COMMIT DROP;
        -- Ranges still to write, as pairs lo, hi: the whole set first; a range that fails is
        -- split in halves, and a single row that fails is quarantined.
        IF total > 0 THEN
            pending := ARRAY[1, total];
        END IF;
        WHILE pg_catalog.cardinality(pending) > 0 LOOP
            lo := pending[1];
            hi := pending[2];
            pending := pending[3:];
            BEGIN
                -- The whole set first: new runs by a plain INSERT (no speculative insertion per
                -- row), changed ones by the upsert. If that fails (a site trigger, a run another
                -- session inserted meanwhile), the whole set is upserted, then bisected if need be.
                plain := whole;
                whole := false;  -- a variable: not undone by the exception
                IF plain THEN
                    INSERT INTO @extschema@.job (cluster, jobid, account, "user", partition, submit, start, "end",
                                                 alloctres, state)
                    SELECT w.cluster, w.jobid, w.account, w."user", w.partition, w.submit, w.start, w."end",
                           w.alloctres, w.state
                    FROM pg_temp.hpcacct_sacct_write w
                    WHERE w.action = 'inserted';
                END IF;
                INSERT INTO @extschema@.job AS j (cluster, jobid, account, "user", partition, submit, start, "end",
                                                  alloctres, state)
                SELECT w.cluster, w.jobid, w.account, w."user", w.partition, w.submit, w.start, w."end",
                       w.alloctres, w.state
                FROM pg_temp.hpcacct_sacct_write w
                WHERE w.seq BETWEEN lo AND hi AND NOT (plain AND w.action = 'inserted')
                ON CONFLICT (cluster, jobid, submit) DO UPDATE
                    SET account = excluded.account, "user" = excluded."user", partition = excluded.partition,
                        start = excluded.start, "end" = excluded."end", alloctres = excluded.alloctres,
                        state = excluded.state
                    WHERE (j.account, j."user", j.partition, j.start, j."end", j.alloctres::text, j.state)
                          IS DISTINCT FROM (excluded.account, excluded."user", excluded.partition, excluded.start,
                                            excluded."end", excluded.alloctres::text, excluded.state);
            EXCEPTION WHEN OTHERS THEN
                GET STACKED DIAGNOSTICS state_ = RETURNED_SQLSTATE, message = MESSAGE_TEXT;
                -- Only what a job's data can cause is quarantined; anything else (out of
                -- memory, deadlock, a full disk) fails the load.
                IF pg_catalog.left(state_, 2) NOT IN ('22', '23', '42', '44', 'HA', 'P0') THEN
                    RAISE;
                END IF;
                IF plain THEN  -- the same range again, upserted
                    pending := ARRAY[lo, hi] || pending;
                ELSIF lo = hi THEN
                    INSERT INTO pg_temp.hpcacct_sacct_failed VALUES (lo, state_, message);
                ELSE
                    mid := (lo + hi) / 2;
                    pending := ARRAY[lo, mid, mid + 1, hi] || pending;
                END IF;
            END;
        END LOOP;

        -- Open quarantine rows (all of them are in the batch) whose run this load took
        -- (charged, unchanged or skipped) are resolved; so are those whose key changed (a time
        -- without offset that now parses): they are quarantined again under the new key below.
        -- (the batch's counts, all in one scan; unchanged is completed below)
        SELECT pg_catalog.count(*) FILTER (WHERE b.origin = 0),
               pg_catalog.count(*) FILTER (WHERE b.rank = 1 AND b.verdict = 'unfinished'),
               pg_catalog.count(*) FILTER (WHERE b.rank = 1 AND b.verdict = 'never_started'),
               pg_catalog.count(*) FILTER (WHERE b.rank = 1 AND b.verdict = 'step'),
               pg_catalog.count(*) FILTER (WHERE b.rank = 1 AND b.verdict = 'ignored'),
               pg_catalog.count(*) FILTER (WHERE b.rank > 1 AND b.origin = 0),
               pg_catalog.count(*) FILTER (WHERE b.rank = 1 AND b.verdict LIKE 'quarantine:%'),
               pg_catalog.count(*) FILTER (WHERE b.origin = 1),
               pg_catalog.count(*) FILTER (WHERE b.rank = 1 AND b.verdict = 'charge')
        INTO lines, unfinished, never_started, steps, ignored, duplicates, quarantined, retried, unchanged
        FROM pg_temp.hpcacct_sacct_batch b;
        problems := quarantined + (SELECT pg_catalog.count(*) FROM pg_temp.hpcacct_sacct_failed);
        IF retried > 0 THEN
            WITH done AS (
                UPDATE @extschema@.sacct_quarantine q
                SET resolved_at = pg_catalog.statement_timestamp(),
                    resolution = CASE WHEN q.job_key <> b.job_key AND (top.verdict LIKE 'quarantine:%' OR f.seq IS NOT NULL)
                                      THEN 'rekeyed'
                                 WHEN w.action IS NOT NULL THEN w.action
                                 WHEN top.verdict = 'charge' THEN 'unchanged'  -- not in the write table
                                 ELSE top.verdict END
                FROM pg_temp.hpcacct_sacct_batch b
                JOIN pg_temp.hpcacct_sacct_batch top ON top.job_key = b.job_key AND top.rank = 1
                LEFT JOIN pg_temp.hpcacct_sacct_write w ON w.job_key = top.job_key
                LEFT JOIN pg_temp.hpcacct_sacct_failed f ON f.seq = w.seq
                WHERE b.origin = 1 AND q.quarantine_id = b.quarantine_id
                  AND ((top.verdict NOT LIKE 'quarantine:%' AND f.seq IS NULL) OR q.job_key <> b.job_key)
                RETURNING q.resolution
            )
            SELECT pg_catalog.count(*) FILTER (WHERE d.resolution <> 'rekeyed') INTO resolved FROM done d;
        ELSE
            resolved := 0;
        END IF;

        -- Quarantine: new problems, and open rows that failed again.
        IF problems > 0 THEN
            INSERT INTO @extschema@.sacct_quarantine AS q
                (job_key, reason, sqlstate, line, problem, cluster, jobid, jobidraw, account, "user", partition,
                 submit, start, "end", alloctres, state, elapsedraw, reqtres, qos, nodelist)
            SELECT b.job_key,
                   coalesce(f.reason, pg_catalog.substr(b.verdict, 18)),
                   coalesce(f.sqlstate, pg_catalog.substr(b.verdict, 12, 5)),
                   b.line, b.problem, b.cluster, b.jobid, b.jobidraw, b.account, b."user", b.partition, b.submit,
                   b.start, b."end", b.alloctres, b.state, b.elapsedraw, b.reqtres, b.qos, b.nodelist
            FROM pg_temp.hpcacct_sacct_batch b
            LEFT JOIN pg_temp.hpcacct_sacct_write w ON w.job_key = b.job_key AND b.verdict = 'charge'
            LEFT JOIN pg_temp.hpcacct_sacct_failed f ON f.seq = w.seq
            WHERE b.rank = 1 AND (b.verdict LIKE 'quarantine:%' OR f.seq IS NOT NULL)
            ON CONFLICT (job_key) WHERE resolved_at IS NULL DO UPDATE
                SET reason = excluded.reason, sqlstate = excluded.sqlstate, last_tried = excluded.last_tried,
                    attempts = q.attempts + 1, line = excluded.line, problem = excluded.problem,
                    cluster = excluded.cluster, jobid = excluded.jobid, jobidraw = excluded.jobidraw,
                    account = excluded.account, "user" = excluded."user", partition = excluded.partition,
                    submit = excluded.submit, start = excluded.start, "end" = excluded."end",
                    alloctres = excluded.alloctres, state = excluded.state, elapsedraw = excluded.elapsedraw,
                    reqtres = excluded.reqtres, qos = excluded.qos, nodelist = excluded.nodelist;
        END IF;

        -- The runs seen running (sacct_running): those a line shows ended (charged, skipped or
        -- quarantined) are forgotten; a window of the clusters (`through`) adds the runs it shows
        -- running, and marks those of its clusters it does not show missing, or lost when an
        -- earlier window missed them already (this one started at their start).
        IF EXISTS (SELECT 1 FROM @extschema@.sacct_running) THEN  -- (else no scan of the batch)
            DELETE FROM @extschema@.sacct_running r
            USING pg_temp.hpcacct_sacct_batch b
            WHERE b.job_key = r.job_key AND b.rank = 1 AND b.verdict <> 'unfinished';
        END IF;
        IF through IS NOT NULL THEN
            -- (runs already known are written only when their start or their missing mark
            -- changes: an upsert would lock every one of them at every load)
            UPDATE @extschema@.sacct_running r
            SET start = b.t_start, missing_since = NULL, lost_at = NULL
            FROM pg_temp.hpcacct_sacct_batch b
            WHERE b.job_key = r.job_key AND b.rank = 1 AND b.verdict = 'unfinished' AND b.t_start IS NOT NULL
              AND (r.start <> b.t_start OR r.missing_since IS NOT NULL);
            INSERT INTO @extschema@.sacct_running (job_key, cluster, jobid, account, submit, start, first_seen)
            SELECT b.job_key, b.cluster, b.jobid, b.charged_account, b.t_submit, b.t_start, through
            FROM pg_temp.hpcacct_sacct_batch b
            WHERE b.rank = 1 AND b.origin = 0 AND b.verdict = 'unfinished' AND b.t_submit IS NOT NULL
              AND b.t_start IS NOT NULL  -- running: a pending run leaves the windows when held
              AND b.cluster = ANY (clusters)
              AND NOT EXISTS (SELECT 1 FROM @extschema@.sacct_running r WHERE r.job_key = b.job_key);
            UPDATE @extschema@.sacct_running r
            SET missing_since = coalesce(r.missing_since, through),
                lost_at = CASE WHEN r.missing_since IS NOT NULL THEN through END
            WHERE r.cluster = ANY (clusters) AND r.lost_at IS NULL
              AND NOT EXISTS (SELECT 1 FROM pg_temp.hpcacct_sacct_batch b WHERE b.job_key = r.job_key);
        END IF;

        IF through IS NOT NULL THEN
            INSERT INTO @extschema@.sacct_watermark AS wm (cluster, loaded_through)
            SELECT DISTINCT c, through FROM pg_catalog.unnest(clusters) AS c
            ON CONFLICT (cluster) DO UPDATE
                SET loaded_through = GREATEST(wm.loaded_through, excluded.loaded_through),
                    updated_at = excluded.updated_at;
        END IF;

        SELECT pg_catalog.count(*) FILTER (WHERE w.action = 'inserted' AND f.seq IS NULL),
               pg_catalog.count(*) FILTER (WHERE w.action = 'rerated' AND f.seq IS NULL),
               pg_catalog.count(*) FILTER (WHERE w.action = 'updated' AND f.seq IS NULL),
               pg_catalog.count(*) FILTER (WHERE f.seq IS NOT NULL),
               pg_catalog.count(*)
        INTO inserted, rerated, updated, total, written
        FROM pg_temp.hpcacct_sacct_write w
        LEFT JOIN pg_temp.hpcacct_sacct_failed f ON f.seq = w.seq;
        unchanged := unchanged - written;  -- runs to charge that were not to be written
        quarantined := quarantined + total;
        DROP TABLE pg_temp.hpcacct_sacct_batch, pg_temp.hpcacct_sacct_dup, pg_temp.hpcacct_sacct_write,
                   pg_temp.hpcacct_sacct_failed;
    END
    $fn$;
COMMENT ON FUNCTION @extschema@.load_sacct(timestamptz, text[]) IS
    'Loads the staged sacct lines (and retries the quarantine): charges finished runs, skips steps, unfinished runs and '
    'ignored accounts, quarantines the rest; advances the clusters'' watermarks to through (at most an hour ahead of '
    'the server''s clock: 22023)';

-- Accounts, users and memberships from sacctmgr's associations: adds what is missing, never
-- removes anything. Slurm accounts in slurm_account_map are not added (an ignored account is
-- not charged; a mapped one is charged to its hpcacct account). Runs with the caller's
-- rights: an administrator's.
CREATE FUNCTION @extschema@.sync_slurm_accounts(OUT accounts_added bigint, OUT users_added bigint,
                                                OUT memberships_added bigint, OUT associations bigint)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $fn$
    BEGIN
        PERFORM hpcacct_internal.run_alone('sync_slurm_accounts');
        IF pg_catalog.to_regclass('pg_temp.hpcacct_assoc') IS NOT NULL THEN
            DROP TABLE pg_temp.hpcacct_assoc;
        END IF;
        CREATE TEMP TABLE hpcacct_assoc ON COMMIT DROP AS
        WITH claimed AS (DELETE FROM @extschema@.sacctmgr_staging RETURNING *)
        SELECT DISTINCT c.account, nullif(c."user", '') AS username
        FROM claimed c
        WHERE coalesce(c.account, '') <> ''
          AND NOT EXISTS (SELECT 1 FROM @extschema@.slurm_account_map m WHERE m.slurm_account = c.account);
        SELECT pg_catalog.count(*) INTO associations FROM pg_temp.hpcacct_assoc;

        -- Only rows this snapshot lacks reach the INSERTs: ON CONFLICT waits for a transaction
        -- that is deleting or updating a conflicting row (a project administrator's open
        -- remove_member() of that membership, and of the user's default project), and a row
        -- still visible here is not missing. Should that transaction commit, the next sync adds
        -- the membership back, as if it had committed just after this one.
        INSERT INTO @extschema@.account (name, description)
        SELECT DISTINCT a.account, 'from Slurm (sacctmgr)' FROM pg_temp.hpcacct_assoc a
        WHERE NOT EXISTS (SELECT 1 FROM @extschema@.account x WHERE x.name = a.account)
        ON CONFLICT (name) DO NOTHING;
        GET DIAGNOSTICS accounts_added = ROW_COUNT;
        INSERT INTO @extschema@.hpc_user (username)
        SELECT DISTINCT a.username FROM pg_temp.hpcacct_assoc a
        WHERE a.username IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM @extschema@.hpc_user u WHERE u.username = a.username)
        ON CONFLICT (username) DO NOTHING;
        GET DIAGNOSTICS users_added = ROW_COUNT;
        INSERT INTO @extschema@.membership (account, username)
        SELECT DISTINCT a.account, a.username FROM pg_temp.hpcacct_assoc a
        WHERE a.username IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM @extschema@.membership m WHERE m.account = a.account AND m.username = a.username)
        ON CONFLICT (account, username) DO NOTHING;
        GET DIAGNOSTICS memberships_added = ROW_COUNT;
        DROP TABLE pg_temp.hpcacct_assoc;
    END
    $fn$;
COMMENT ON FUNCTION @extschema@.sync_slurm_accounts() IS
    'Adds the accounts, users and memberships of the staged sacctmgr associations that are missing; removes nothing';

-- Portal users see the quarantined lines and the mappings of their own accounts only.
SELECT hpcacct_internal.protect_table('@extschema@.sacct_quarantine');
SELECT hpcacct_internal.protect_table('@extschema@.slurm_account_map');
SELECT hpcacct_internal.protect_table('@extschema@.sacct_running');

REVOKE EXECUTE ON FUNCTION
    @extschema@.load_sacct(timestamptz, text[]),
    @extschema@.sync_slurm_accounts(),
    @extschema@.sacct_window_start(text, interval)
    FROM PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('@extschema@.sacct_quarantine', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.sacct_quarantine_quarantine_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.slurm_account_map', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.sacct_watermark', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.sacct_running', '');
