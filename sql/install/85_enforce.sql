-- ---------------------------------------------------------------------------------------
-- Enforcement (issue 15): one submit decision for every policy, queued jobs held and
-- released, and the association state Slurm should have.
--
-- Each account is bound by a set of policies (account.policies, or derived from what the
-- account has: account_policies()):
--   bank          HLRN's quarterly bank: an allocation for this quarter, a balance >= 0;
--   window_quota  RWTH's sliding window: refused once blocked, low priority past the quota;
--   regulation    GENCI/IDRIS allocations: a grant valid today, not used up (retractions count).
-- An account bound by none (HLRN's special accounts for staff) is refused only for what
-- refuses every account: unknown, deleted, or a user who is not a member.
-- ---------------------------------------------------------------------------------------

-- account_policies(account), the policies that bind an account, is defined with the bank
-- (80_bank.sql): the quarter start resets only default projects the bank binds.

-- Result of check_submit and account_verdict: may the job run, on which account, and why not.
-- reason is NULL when ok, else one word (see check_submit); message says it in words a user
-- can act on.
CREATE TYPE @extschema@.submit_decision AS (ok boolean, account text, reason text, message text);
COMMENT ON TYPE @extschema@.submit_decision IS 'Result of check_submit: may the job run, on which account, and why not';

-- The words of every refusal, defined once: check_submit's message, with details (what only the
-- account's members read: its balance, a quota's use and allowance, the day its allocation
-- begins, the day checked), and with details NULL the public reason, which a held job's comment
-- shows every user of the cluster (pending_job.hold_comment). reason is check_submit's; another
-- gives NULL.
CREATE FUNCTION hpcacct_internal.refusal_message(reason text, account text, username text, details text)
    RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN CASE reason
        WHEN 'unknown_user' THEN pg_catalog.format(
            'user %s is not known to the accounting system: submit with an account (sbatch -A) or ask support to register you',
            username)
        WHEN 'no_default_project' THEN pg_catalog.format(
            'user %s has no default project and no personal account: submit with an account (sbatch -A)', username)
        WHEN 'unknown_account' THEN pg_catalog.format(
            'account %s does not exist: check the account you gave (sbatch -A)', account)
        WHEN 'account_deleted' THEN pg_catalog.format(
            'account %s has been deleted and cannot be used again', account)
        WHEN 'no_access' THEN pg_catalog.format(
            'user %s is not a member of account %s: ask one of its project administrators to add you, or submit with '
            'another account', username, account)
        WHEN 'account_expired' THEN pg_catalog.format(
            'account %s has no allocation for this or a later quarter: ask for a new allocation, or submit with another '
            'account (sbatch -A)', account)
        WHEN 'account_inactive' THEN pg_catalog.format(
            'account %s has no allocation for this quarter%s: ask staff to move allocation into this quarter, or submit '
            'with another account', account, '; its allocation begins on ' || details)
        WHEN 'negative_balance' THEN pg_catalog.format(
            'account %s has a negative balance this quarter%s: ask for a transfer or a deposit, or submit with another '
            'account', account, ' (' || details || ')')
        WHEN 'quota_blocked' THEN pg_catalog.format(
            'account %s is blocked by its sliding-window quota%s: submit with another account', account,
            ' (' || details || ')')
        WHEN 'no_allocation' THEN pg_catalog.format(
            'account %s has no allocation valid%s: submit with another account', account, ' on ' || details)
        WHEN 'allocation_exhausted' THEN pg_catalog.format(
            'account %s has used up its allocation (after retractions): ask for a supplement, or submit with another '
            'account', account)
    END;
COMMENT ON FUNCTION hpcacct_internal.refusal_message(text, text, text, text) IS
    'The message of a submit refusal: with details (figures and days only the account''s members read) as '
    'check_submit gives it, with details NULL the public reason of a held job''s comment';

-- What an account's own state allows, whoever submits: unknown_account, account_deleted, and
-- per policy
--   bank:         account_expired (no allocation this quarter or later), account_inactive (none
--                 this quarter, one later), negative_balance;
--   window_quota: quota_blocked;
--   regulation:   no_allocation (no grant valid today on any machine), allocation_exhausted
--                 (on every machine with a grant or supplement valid, the year's consumption has
--                 reached Alloc, after retractions; a machine where only a retraction is valid is used up).
-- Policies are applied in that order; the first refusal is the reason. A submit filter calls
-- it on one connection for every job: its statements (one account's lookups, whose best plan
-- does not depend on the values) are planned once per session, not at each call.
CREATE FUNCTION @extschema@.account_verdict(account text, at date DEFAULT @extschema@.site_today())
    RETURNS @extschema@.submit_decision
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    SET plan_cache_mode = force_generic_plan
    AS $$
    DECLARE
        a record;
        pol text[];
        bank record;
        wq record;
        pools text[];
        granted_pools text[];
        open_machines integer;
        reason text;
        message text;
    BEGIN
        IF account IS NULL THEN
            RAISE EXCEPTION 'account_verdict: account must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        at := hpcacct_internal.day_or_today(at, 'account_verdict');  -- NULL: today; infinite: 22008
        SELECT x.name, x.deleted_in INTO a FROM @extschema@.account x WHERE x.name = account_verdict.account;
        IF NOT FOUND THEN
            RETURN ROW(false, account, 'unknown_account',
                       hpcacct_internal.refusal_message('unknown_account', account, NULL, NULL))::@extschema@.submit_decision;
        ELSIF a.deleted_in IS NOT NULL AND a.deleted_in <= at THEN
            RETURN ROW(false, account, 'account_deleted',
                       hpcacct_internal.refusal_message('account_deleted', account, NULL, NULL))::@extschema@.submit_decision;
        END IF;
        pol := @extschema@.account_policies(account);

        IF 'bank' = ANY (pol) THEN
            SELECT b.state, b.next_allocation, b.balance INTO bank FROM @extschema@.bank_state(a.name, at) b;
            IF bank.state = 'expired' THEN
                RETURN ROW(false, account, 'account_expired',
                           hpcacct_internal.refusal_message('account_expired', account, NULL, NULL))::@extschema@.submit_decision;
            ELSIF bank.state = 'inactive' THEN
                RETURN ROW(false, account, 'account_inactive',
                           hpcacct_internal.refusal_message('account_inactive', account, NULL,
                                                            hpcacct_internal.iso_date(bank.next_allocation)))::@extschema@.submit_decision;
            ELSIF bank.balance < 0 THEN
                RETURN ROW(false, account, 'negative_balance',
                           hpcacct_internal.refusal_message('negative_balance', account, NULL,
                               format('%s %s', hpcacct_internal.ledger_figure(bank.balance), hpcacct_internal.bank_unit())))::@extschema@.submit_decision;
            END IF;
        END IF;

        IF 'window_quota' = ANY (pol) THEN
            SELECT u.state, u.monthly, u.consumed_current, u.unit INTO wq
            FROM @extschema@.window_quota_usage(a.name, at) u;
            IF wq.state = 'blocked' THEN
                RETURN ROW(false, account, 'quota_blocked',
                           hpcacct_internal.refusal_message('quota_blocked', account, NULL,
                               -- (as the quota_state message and the statement print them)
                               format('%s %s used this month, monthly allowance %s',
                                      hpcacct_internal.notify_number(wq.consumed_current::numeric), wq.unit,
                                      hpcacct_internal.notify_number(wq.monthly::numeric))))::@extschema@.submit_decision;
            END IF;
        END IF;

        IF 'regulation' = ANY (pol) THEN
            -- the machines with an event valid at the day, and those with a grant or supplement
            SELECT coalesce(pg_catalog.array_agg(DISTINCT l.pool), '{}'),
                   coalesce(pg_catalog.array_agg(DISTINCT l.pool) FILTER (WHERE l.kind <> 'retraction'), '{}')
            INTO pools, granted_pools
            FROM @extschema@.ledger l
            WHERE l.account = a.name AND l.kind IN ('grant', 'supplement', 'retraction')
              AND l.valid_from <= at AND l.valid_until >= at;
            IF pg_catalog.cardinality(pools) = 0 THEN
                RETURN ROW(false, account, 'no_allocation',
                           hpcacct_internal.refusal_message('no_allocation', account, NULL, hpcacct_internal.iso_date(at)))::@extschema@.submit_decision;
            END IF;
            -- allocation_status() on each machine, in one call: open where a grant or supplement
            -- is valid and the year's consumption is under Alloc (not TMC > 0: a retraction on
            -- 15 December, spread over half a month, makes TMC negative)
            SELECT count(*) FILTER (WHERE s.consumption < s.alloc AND s.machine = ANY (granted_pools))
            INTO open_machines
            FROM hpcacct_internal.allocation_statuses(pg_catalog.array_fill(a.name::text, ARRAY[pg_catalog.cardinality(pools)]),
                                                      pools, at) s;
            IF open_machines = 0 THEN
                RETURN ROW(false, account, 'allocation_exhausted',
                           hpcacct_internal.refusal_message('allocation_exhausted', account, NULL, NULL))::@extschema@.submit_decision;
            END IF;
        END IF;

        RETURN ROW(true, account, NULL::text, NULL::text)::@extschema@.submit_decision;
    END
    $$;
COMMENT ON FUNCTION @extschema@.account_verdict(text, date) IS
    'What an account''s state allows at a day under the policies that bind it: ok, or one reason and a message';

-- Resolves the account a job is charged to (job_account()) and says whether it may be
-- submitted. Refusals:
-- unknown_user (no account given, user unknown), no_default_project (no account given, the
-- user has neither a default project nor a personal account), unknown_account,
-- account_deleted, no_access (not a member), then the account's policies (account_verdict).
CREATE FUNCTION @extschema@.check_submit(username text, account text DEFAULT NULL,
                                         at date DEFAULT @extschema@.site_today())
    RETURNS @extschema@.submit_decision
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    SET plan_cache_mode = force_generic_plan
    AS $$
    DECLARE
        chosen text := account;
        verdict @extschema@.submit_decision;
    BEGIN
        IF username IS NULL THEN
            RAISE EXCEPTION 'check_submit: username must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        -- before any answer: an unknown user with an infinite day is an error too
        IF at IS NULL THEN
            at := @extschema@.site_today();  -- the documented default (job_account() refuses NULL)
        ELSIF NOT isfinite(at) THEN
            RAISE EXCEPTION 'check_submit: % is not a finite date', at USING ERRCODE = 'datetime_field_overflow';
        END IF;
        IF chosen IS NULL THEN
            -- the default project, or the personal account (job_account(): the one definition)
            SELECT j.account INTO chosen FROM hpcacct_internal.job_account(username, NULL, at) AS j(account);
            IF chosen IS NULL THEN
                RETURN ROW(false, NULL::text, 'unknown_user',
                           hpcacct_internal.refusal_message('unknown_user', NULL, username, NULL))::@extschema@.submit_decision;
            END IF;
        END IF;
        verdict := @extschema@.account_verdict(chosen, at);
        IF verdict.reason = 'unknown_account' AND account IS NULL THEN
            -- a user with neither a default project nor a personal account (sync_slurm_accounts adds none)
            RETURN ROW(false, chosen, 'no_default_project',
                       hpcacct_internal.refusal_message('no_default_project', chosen, username, NULL))::@extschema@.submit_decision;
        ELSIF verdict.reason IN ('unknown_account', 'account_deleted') THEN
            RETURN verdict;
        END IF;
        IF NOT EXISTS (SELECT 1 FROM @extschema@.membership m
                       WHERE m.account = chosen AND m.username = check_submit.username) THEN
            RETURN ROW(false, chosen, 'no_access',
                       hpcacct_internal.refusal_message('no_access', chosen, username, NULL))::@extschema@.submit_decision;
        END IF;
        RETURN verdict;
    END
    $$;
COMMENT ON FUNCTION @extschema@.check_submit(text, text, date) IS
    'Submit check under the account''s policies: resolves the default project; refuses unknown_user, no_default_project, '
    'unknown_account, account_deleted, no_access, account_expired, account_inactive, negative_balance, quota_blocked, '
    'no_allocation, allocation_exhausted, with a message';

-- Re-checks queued jobs (HLRN's SystemHold): holds those whose account became invalid and
-- releases those it held whose account is valid again (a transfer, a deposit, another
-- account). Returns what changed: holds with their reason and message, releases with reason
-- NULL. A held job whose reason changed keeps its hold with the new message. A held job gets
-- the message for its owner (hold_reason) and the reason for everyone else (hold_comment).
CREATE FUNCTION @extschema@.recheck_queued(at date DEFAULT @extschema@.site_today())
    RETURNS TABLE (cluster text, jobid text, reason text, message text)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        later date;
    BEGIN
        at := hpcacct_internal.day_or_today(at, 'recheck_queued');  -- NULL: today; infinite: 22008
        -- checks go in date order (and wait for each other): a past day's check after a later
        -- one would hold, and tell the owners of, jobs on verdicts that have since changed
        later := hpcacct_internal.run_in_order('recheck_queued', at);
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'recheck_queued: % comes before the check of %', at, later
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Check the queue at today''s date (the default).';
        END IF;
        -- the hold messages (notify_hold) name the account this check resolved: its day
        PERFORM pg_catalog.set_config('hpcacct.check_day', pg_catalog.to_char(at, 'YYYY-MM-DD'), true);
        RETURN QUERY
        WITH checked AS (
            SELECT p.cluster, p.jobid, p.held AS was_held, c.ok, c.account, c.reason, c.message,
                   -- the same refusal without the account's details, a control character a space
                   hpcacct_internal.notify_name(hpcacct_internal.refusal_message(c.reason, c.account, p.username, NULL))
                       AS public_message
            FROM @extschema@.pending_job p
            CROSS JOIN LATERAL @extschema@.check_submit(p.username, p.account, at) c
            FOR UPDATE OF p
        ), updated AS (
            UPDATE @extschema@.pending_job p
            SET held = NOT c.ok, hold_reason = CASE WHEN c.ok THEN NULL ELSE c.message END,
                hold_comment = CASE WHEN c.ok THEN NULL ELSE c.public_message END,
                checked_at = pg_catalog.now()
            FROM checked c
            WHERE p.cluster = c.cluster AND p.jobid = c.jobid
            RETURNING p.cluster, p.jobid, c.was_held, c.ok, c.account, c.reason, c.message
        )
        SELECT u.cluster, u.jobid, u.reason,
               CASE WHEN u.ok THEN format('released: account %s is valid again', u.account) ELSE u.message END
        FROM updated u
        WHERE u.was_held = u.ok   -- held and now valid, or not held and now invalid
        ORDER BY 1, 2;
        PERFORM pg_catalog.set_config('hpcacct.check_day', '', true);
    END
    $$;
COMMENT ON FUNCTION @extschema@.recheck_queued(date) IS
    'Holds queued jobs whose account became invalid and releases those whose account is valid again (hold_reason '
    'for the owner, hold_comment without the account''s figures for everyone); returns the changes (releases with '
    'reason NULL)';
REVOKE EXECUTE ON FUNCTION @extschema@.recheck_queued(date) FROM PUBLIC;

-- ---- the association state Slurm should have ------------------------------------------

-- Per account at a day: blocked (no submission: what account_verdict refuses), low_priority
-- (the RWTH window's low-priority mode: a low QOS), or normal; hpcacct-slurm-sync applies
-- today's (the view slurm_association) to Slurm's associations.
CREATE FUNCTION @extschema@.slurm_associations(at date DEFAULT @extschema@.site_today())
    RETURNS TABLE (account text, policies text[], state text, reason text, message text)
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT hpcacct_internal.day_or_today($1, 'slurm_associations');  -- infinite: 22008, with no account too
        SELECT a.name, v.pol,
               CASE WHEN NOT (v.d).ok THEN 'blocked'
                    WHEN 'window_quota' = ANY (v.pol)
                         AND @extschema@.window_quota_state(a.name, $1) = 'low_priority' THEN 'low_priority'
                    ELSE 'normal' END,
               (v.d).reason, (v.d).message
        FROM @extschema@.account a
        CROSS JOIN LATERAL (SELECT @extschema@.account_policies(a.name) AS pol,
                                   @extschema@.account_verdict(a.name, $1) AS d) v
        ORDER BY a.name
    $$;
COMMENT ON FUNCTION @extschema@.slurm_associations(date) IS
    'The state each account''s Slurm association should have at a day: blocked (no submission), low_priority '
    '(a low QOS), normal; with the reason and message of a block';

CREATE VIEW @extschema@.slurm_association AS
    SELECT s.account, s.policies, s.state, s.reason, s.message
    FROM @extschema@.slurm_associations((SELECT @extschema@.site_today())) s;
COMMENT ON VIEW @extschema@.slurm_association IS
    'slurm_associations() today (site time zone): what hpcacct-slurm-sync applies';
