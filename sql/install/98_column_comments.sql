-- ---- What every column of every view means -------------------------------------------
-- One row per column: the views that have it (a column of the same name means the same in
-- each) and its description, set as COMMENT ON COLUMN, which psql shows with \d+ and the
-- README's reference (test/compat/reference.sh) lists. A view's new column needs a row here:
-- pgTAP `catalog` refuses a view column without a comment; a row naming a column that no
-- longer exists makes the install fail.
DO $do$
DECLARE
    c record;
    v text;
BEGIN
    FOR c IN SELECT * FROM (VALUES
        -- the usage reports (functions of the same name for any year and instant)
        ('{usage_by_resource,usage_by_account,usage_by_submitter,usage_by_month}'::text[], 'pool',
         'Pool whose allocation year the row is in: resource.pool, or the cluster'),
        ('{usage_by_resource,usage_by_account,usage_by_submitter,usage_by_month,charge_by_month}', 'unit',
         'Unit of the amounts (e.g. core-hours)'),
        ('{usage_by_resource,usage_by_account,usage_by_submitter,usage_by_month}', 'year',
         'Allocation year, named by the calendar year it starts in'),
        ('{usage_by_resource,usage_by_account,usage_by_submitter}', 'first_day',
         'First day of the allocation year'),
        ('{usage_by_resource,usage_by_account,usage_by_submitter}', 'last_day',
         'Last day of the allocation year'),
        ('{usage_by_resource,usage_by_account,usage_by_submitter,usage_by_month}', 'usage',
         'Charges of jobs ended by now, pro rata inside the year up to now'),
        ('{usage_by_resource,usage_by_account,usage_by_submitter,usage_by_month}', 'usage_years',
         'usage in unit-years (unit-hours / hours_per_year)'),
        ('{usage_by_resource,usage_by_account,usage_by_submitter}', 'projected_usage',
         'usage x year length / elapsed wall-clock time (current year; NULL for past years)'),
        ('{usage_by_resource,usage_by_account,usage_by_submitter}', 'projected_years',
         'projected_usage in unit-years'),
        ('{usage_by_resource}', 'equivalent_hours', 'usage / rate: the hours of the resource''s bundles used'),
        ('{usage_by_account}', 'allocation',
         'Allocations (grants, supplements, deposits) pro rata by their days inside the year'),
        ('{usage_by_account}', 'allocation_years', 'allocation in unit-years'),
        ('{usage_by_account}', 'utilization_pct', 'usage / allocation in percent; NULL without an allocation'),
        ('{usage_by_account}', 'projected_utilization_pct',
         'projected_usage / allocation in percent; NULL without an allocation or projection'),
        ('{usage_by_account}', 'overuse', 'usage beyond the allocation (0 if none): shown, never refused'),
        ('{usage_by_submitter}', 'account_pct', 'The submitter''s share of the account''s usage in percent'),
        ('{usage_by_month,charge_by_month}', 'month', 'Calendar month (site time zone), as its first day'),
        ('{usage_by_resource,usage_by_month,charge_by_month}', 'cluster', 'Cluster of the resource charged'),
        ('{usage_by_resource,usage_by_month,charge_by_month}', 'partition', 'Partition of the resource charged'),
        ('{usage_by_month,usage_by_submitter,charge_by_month}', 'submitter', 'User who submitted the jobs'),
        -- every view with an account column
        ('{usage_by_account,usage_by_submitter,usage_by_month,charge_by_month,bank_entry,quarter_balances,'
         'window_quota_usage,regulation_report,slurm_association,account_recipient,outbox_status}', 'account',
         'Account (project or personal) the row is about'),
        -- charges and the bank
        ('{charge_by_month,bank_entry}', 'entry_id', 'The ledger entry'),
        ('{charge_by_month,bank_entry}', 'amount',
         'The entry''s amount; a charge''s share of it inside the month or quarter'),
        ('{charge_by_month}', 'pool', 'Pool of the resource charged: resource.pool, or the cluster'),
        ('{bank_entry}', 'kind', 'Ledger kind: deposit, transfer, refund or charge'),
        ('{bank_entry,quarter_balances}', 'quarter', 'Quarter the amounts count in, as its first day'),
        ('{quarter_balances}', 'account_kind', 'personal, project or special'),
        ('{quarter_balances}', 'deposits', 'Deposits of the quarter, in the bank unit'),
        ('{quarter_balances}', 'charges', 'Charges counted in the quarter (pro rata by job time)'),
        ('{quarter_balances}', 'transfers', 'Transfers in (positive) and out (negative) in the quarter'),
        ('{quarter_balances}', 'refunds', 'Refunds booked in the quarter'),
        ('{quarter_balances}', 'balance', 'Balance after the quarter, carried over under the bank''s rules'),
        ('{quarter_balances}', 'state', 'active, inactive, expired or deleted (rules section 4)'),
        -- the sliding-window quota
        ('{window_quota_usage}', 'period_start', 'First month of the quota period'),
        ('{window_quota_usage}', 'period_end', 'Last month of the quota period'),
        ('{window_quota_usage}', 'month', 'The month the figures are for (the current one)'),
        ('{window_quota_usage}', 'state', 'normal, low_priority or blocked'),
        ('{window_quota_usage}', 'monthly', 'Allowance per month'),
        ('{window_quota_usage}', 'remaining_prev', 'What the previous month left unused'),
        ('{window_quota_usage}', 'consumed_current', 'Consumption in the current month'),
        ('{window_quota_usage}', 'consumable_pct', 'Share of the window still consumable, in percent; NULL if undefined'),
        ('{window_quota_usage}', 'consumable', 'What may still be consumed in the window'),
        ('{window_quota_usage}', 'cluster', 'Cluster the quota period is for'),
        ('{window_quota_usage}', 'unit', 'Unit of the allowance and consumption'),
        -- GENCI / IDRIS regulation
        ('{regulation_report}', 'machine', 'Machine (pool) of the allocation'),
        ('{regulation_report}', 'month', 'Month of the row, as its first day'),
        ('{regulation_report}', 'as_of', 'The day the figures are taken at: the 15th of the month'),
        ('{regulation_report}', 'regulation', 'monthly or annual: the regulation that applies to the allocation'),
        ('{regulation_report}', 'alloc', 'Allocation in force since 1 January (grants, supplements, less retractions)'),
        ('{regulation_report}', 'tmc', 'Theoretical monthly consumption at as_of'),
        ('{regulation_report}', 'tc', 'Theoretical consumption to the end of as_of'),
        ('{regulation_report}', 'consumption', 'Consumption from 1 January to the end of as_of'),
        ('{regulation_report}', 'delta', 'consumption - tc'),
        ('{regulation_report}', 'status', 'ok, warning or retraction; NULL under annual regulation'),
        ('{regulation_report}', 'logged_outcome', 'What the monthly run logged for the month, if it ran'),
        ('{regulation_report}', 'retracted', 'Hours the monthly run retracted'),
        -- enforcement
        ('{slurm_association}', 'policies', 'The policies that bind the account'),
        ('{slurm_association}', 'state', 'blocked, low_priority or normal: what hpcacct-slurm-sync applies'),
        ('{slurm_association}', 'reason', 'Why the account is not normal; NULL if it is'),
        ('{slurm_association}', 'message', 'The message a user sees at submission'),
        -- settings
        ('{settings}', 'name', 'Setting name'),
        ('{settings}', 'value', 'Effective value'),
        ('{settings}', 'source', 'site (set in the table) or default'),
        ('{settings}', 'description', 'What the setting means'),
        -- notifications
        ('{account_recipient,outbox_status}', 'username', 'User the message goes to'),
        ('{account_recipient}', 'role', 'The user''s membership role: admin (manager) or member'),
        ('{account_recipient}', 'email', 'E-mail address (contact.email)'),
        ('{account_recipient}', 'display_name', 'Name shown in messages'),
        ('{outbox_status}', 'message_id', 'The message'),
        ('{outbox_status}', 'topic', 'What the message is about: regulation_warning, quota_state, job_held, balance_low, ...'),
        ('{outbox_status}', 'subject', 'Subject line'),
        ('{outbox_status}', 'created_at', 'When the message was written'),
        ('{outbox_status}', 'recipient_id', 'The delivery; NULL when nobody with an address was to receive it'),
        ('{outbox_status}', 'address', 'Address the delivery goes to'),
        ('{outbox_status}', 'state', 'pending, sending, delivered, failed, uncertain or no_recipient'),
        ('{outbox_status}', 'attempts', 'Delivery attempts so far'),
        ('{outbox_status}', 'next_attempt', 'When the sender may try again'),
        ('{outbox_status}', 'last_error', 'The last attempt''s error'),
        ('{outbox_status}', 'delivered_at', 'When the delivery succeeded'),
        ('{outbox_status}', 'waiting_for', 'A pending delivery not sent yet because this older message to its '
                                            'mailbox is still to be delivered (up to notify_order_wait); NULL: none'),
        -- pending jobs by fair share
        ('{fairshare_queue}', 'position', 'Place in the queue by fair share: 1 is dispatched first'),
        ('{fairshare_queue}', 'cluster', 'Cluster the job is pending on'),
        ('{fairshare_queue}', 'jobid', 'Slurm job id'),
        ('{fairshare_queue}', 'username', 'User who submitted the job'),
        ('{fairshare_queue}', 'account', 'Account the job will be charged to (the user''s default account when Slurm named none)'),
        ('{fairshare_queue}', 'partition', 'Partition(s) the job asked for; the first one selects the pool'),
        ('{fairshare_queue}', 'pool', 'Fair-share pool of that partition now; NULL when no resource row matches'),
        ('{fairshare_queue}', 'unit', 'Unit of the pool''s usage'),
        ('{fairshare_queue}', 'account_factor', 'The account''s fair-share factor now (the first sort key)'),
        ('{fairshare_queue}', 'user_factor', 'The user''s factor inside the account (the second sort key)'),
        ('{fairshare_queue}', 'held', 'Whether hpcacct-slurm-sync holds the job'),
        ('{fairshare_queue}', 'submitted_at', 'When the sync first recorded the job pending (the third sort key)'),
        ('{charge_by_month}', 'core_hours', 'Raw core-hours of the charges in that month (AllocTRES cores x wall-clock hours, pro rata; NULL when a charge''s cores are unknown)'),
        ('{charge_by_month}', 'job_start', 'Start of the charged job (the whole job, not its part in the month)'),
        ('{charge_by_month}', 'job_end', 'End of the charged job (the whole job; a bound on it lets the ledger''s index on job_end be used)'),
        -- several clusters
        ('{federation_status}', 'site', 'Site at the other end of the link (0: the centre; at a site always 0)'),
        ('{federation_status}', 'direction', 'from (a subscription here) or to (a slot another database reads)'),
        ('{federation_status}', 'link', 'Subscription or replication slot name'),
        ('{federation_status}', 'enabled', 'Whether the subscription is enabled (always true for a slot)'),
        ('{federation_status}', 'connected', 'Whether the link''s worker or reader is connected now'),
        ('{federation_status}', 'last_entry_id', 'The last ledger entry received from that site'),
        ('{federation_status}', 'last_booked_at', 'When that entry was booked'),
        ('{federation_status}', 'last_message_at', 'When the subscription last heard from the publisher'),
        ('{federation_status}', 'lag', 'Replay lag of an outgoing link'),
        ('{federation_status}', 'pending_wal_bytes', 'WAL not yet confirmed by the reader of an outgoing link'),
        ('{federation_status}', 'rows_pending', 'Ledger rows here that an outgoing link carries and its receiver has not reported received (NULL for incoming links: counted at their sender)'),
        ('{federation_status}', 'receiver_reported_at', 'When the receiver of an outgoing link last reported rows received'),
        ('{federation_status}', 'wal_status', 'An outgoing link''s slot: reserved, extended, unreserved or lost (lost: the receiver gets nothing more until federation_resync() there)'),
        ('{federation_status}', 'tables_copying', 'An incoming link''s tables whose initial copy has not finished (they apply nothing until it has; NULL for outgoing links)')
    ) AS t(views, col, description) LOOP
        FOREACH v IN ARRAY c.views LOOP
            EXECUTE pg_catalog.format('COMMENT ON COLUMN @extschema@.%I.%I IS %L', v, c.col, c.description);
        END LOOP;
    END LOOP;
END
$do$;
