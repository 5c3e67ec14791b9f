-- ---------------------------------------------------------------------------------------
-- Two displays the documents name (issue 16): the queue by fair-share priority (Fermilab
-- LQCD) and r_wlm_usage without -p (RWTH), the caller's own accounts.
-- ---------------------------------------------------------------------------------------

-- The account of each pending job (README, "The account of a job without -A"): the one it names,
-- or the one its user's jobs without an account go to today, resolved once per user (per job,
-- 10 000 such jobs of 200 users took 0.29 s in fairshare_queue, 0.06 s so; hpcacct-slurm-sync's
-- queue query 34-36 s, 0.13-0.18 s so). The day is a column, not a sub-select, so that
-- job_account() is inlined. As its caller: row-level security on pending_job applies.
CREATE VIEW hpcacct_internal.pending_job_account WITH (security_invoker = true) AS
    WITH today AS MATERIALIZED (
        SELECT @extschema@.site_today() AS day
    ), unnamed AS MATERIALIZED (
        SELECT u.username, j.account
        FROM (SELECT DISTINCT p.username FROM @extschema@.pending_job p WHERE p.account IS NULL) u
        CROSS JOIN today
        CROSS JOIN LATERAL hpcacct_internal.job_account(u.username, NULL, today.day) AS j(account)
    )
    SELECT p.cluster, p.jobid, coalesce(p.account, n.account) AS account
    FROM @extschema@.pending_job p
    LEFT JOIN unnamed n ON p.account IS NULL AND n.username = p.username;
COMMENT ON VIEW hpcacct_internal.pending_job_account IS
    'The account of each pending job today: the one it names, or the one its user''s jobs without an account go to';
GRANT SELECT ON hpcacct_internal.pending_job_account TO PUBLIC;

-- The pending jobs (pending_job: what hpcacct-slurm-sync --queue reads from squeue, or what a
-- site records itself), each with its account's fair-share factor in the pool of the job's
-- partition and its user's factor inside the account, highest account factor first. A job
-- without an account counts under the account job_account() resolves today
-- (pending_job_account), as check_submit() does; of a job that may run in several partitions ("a,b", as squeue prints
-- them) the first names the pool. A job whose pool is
-- unknown (no partition recorded, or no resource row for it now) or whose account has no
-- factor in that pool has NULL factors and comes last. The factors are fairshare()'s, now
-- (computed once per query): a portal user sees the jobs of their accounts and their own jobs
-- (row-level security on pending_job) with their accounts' factors.
CREATE VIEW @extschema@.fairshare_queue AS
    WITH f AS MATERIALIZED (
        SELECT s.pool, s.unit, s.account, s.submitter, s.factor FROM @extschema@.fairshare() s
    ), q AS (
        SELECT p.cluster, p.jobid, p.username, p.partition, p.held, p.submitted_at, a.account,
               coalesce(r.pool, r.cluster) AS pool, r.unit
        FROM @extschema@.pending_job p
        JOIN hpcacct_internal.pending_job_account a ON a.cluster = p.cluster AND a.jobid = p.jobid
        LEFT JOIN @extschema@.resource r
          ON r.cluster = p.cluster AND r.partition = pg_catalog.split_part(p.partition, ',', 1)
         AND r.valid @> pg_catalog.now()
    )
    SELECT pg_catalog.row_number() OVER (ORDER BY fa.factor DESC NULLS LAST, fu.factor DESC NULLS LAST,
                                         q.submitted_at, q.cluster, q.jobid) AS position,
           q.cluster, q.jobid, q.username, q.account, q.partition, q.pool, q.unit,
           fa.factor AS account_factor, fu.factor AS user_factor, q.held, q.submitted_at
    FROM q
    LEFT JOIN f fa ON fa.pool = q.pool AND fa.unit = q.unit AND fa.account = q.account AND fa.submitter IS NULL
    LEFT JOIN f fu ON fu.pool = q.pool AND fu.unit = q.unit AND fu.account = q.account AND fu.submitter = q.username
    ORDER BY 1;
ALTER VIEW @extschema@.fairshare_queue SET (security_invoker = true);
COMMENT ON VIEW @extschema@.fairshare_queue IS
    'Pending jobs (pending_job) ordered by their account''s fair-share factor in the pool of their partition, '
    'then the user''s factor and the submit time (LQCD''s queue by fair-share priority)';

-- r_wlm_usage -q: without a project, the sliding-window quota of the caller's own accounts
-- (those the session user is a member of) for the month containing `at`; administrators and
-- auditors, who are members of none as a rule, get every account with a quota period. With a
-- project (r_wlm_usage -p), that account's: 42704 when it does not exist or the caller may
-- not see it, no row when it has no quota period. A NULL `at` is today (site time zone).
CREATE FUNCTION @extschema@.r_wlm_usage(project text DEFAULT NULL, at date DEFAULT NULL)
    RETURNS TABLE (account text, period_start date, period_end date, month date, state text,
                   monthly float8, remaining_prev float8, consumed_current float8,
                   consumable_pct float8, consumable float8, cluster text, unit text)
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF project IS NOT NULL THEN
            RETURN QUERY SELECT * FROM @extschema@.window_quota_usage(project, at);
            RETURN;
        END IF;
        RETURN QUERY
        SELECT u.*
        FROM (SELECT DISTINCT p.account FROM @extschema@.quota_period p
              WHERE (SELECT hpcacct_internal.sees_all_accounts('@extschema@.quota_period'))
                 OR p.account = ANY ((SELECT hpcacct_internal.visible_accounts())::text[])) a
        CROSS JOIN LATERAL @extschema@.window_quota_usage(a.account, at) u
        ORDER BY u.account;
    END
    $$;
COMMENT ON FUNCTION @extschema@.r_wlm_usage(text, date) IS
    'r_wlm_usage -q: the window quota of the caller''s own accounts (administrators: every account), or of one '
    'project, for the month containing at (NULL: today in the site time zone)';
