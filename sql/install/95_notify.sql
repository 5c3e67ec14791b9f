-- ---------------------------------------------------------------------------------------
-- Notifications (issue 16): who hears about an account, and a transactional outbox.
--
-- Every decision a document says a person learns of writes its message into the outbox in
-- the transaction that makes the decision: a rolled-back run leaves no message, a committed
-- one cannot lose it. The decisions are already rows of their own logs (regulation_log,
-- quarter_log, pending_job), so the messages are written by triggers on those rows: the
-- procedures that decide are unchanged, and a second run, which logs nothing new, writes
-- nothing new. Two states no procedure records -- the sliding-window quota state and a
-- quarter balance below a site threshold -- are compared with what was last notified by
-- notify_scan(). The sender (hpcacct-notify) delivers the outbox over SMTP.
-- Nothing here runs with the owner's rights: the procedures that decide and notify_scan() are
-- the administrators' (hpcacct_admin), who may write the outbox; the sender's functions are
-- also the mail sender's (hpcacct_notify), who may only lease deliveries and record them.
-- ---------------------------------------------------------------------------------------

-- ---- contacts --------------------------------------------------------------------------

CREATE TABLE @extschema@.contact (
    username     text PRIMARY KEY REFERENCES @extschema@.hpc_user,
    email        text NOT NULL,
    display_name text,
    notify       boolean NOT NULL DEFAULT true,
    updated_at   timestamptz NOT NULL DEFAULT pg_catalog.statement_timestamp(),
    -- an address as SMTP takes it in RCPT TO (RFC 5321, RFC 6531): a dot-atom local part of at
    -- most 64 octets, a domain of labels of at most 63 characters (letters, digits, inner
    -- hyphens; an internationalized one as it is read, hpcacct-notify sends its A-label), no
    -- space, control or invisible character: no value can add a header or a recipient
    CONSTRAINT contact_email CHECK (
        email ~ ('^[A-Za-z0-9!#$%&''*+/=?^_`{|}~\u00a1-\U0010ffff-]+(\.[A-Za-z0-9!#$%&''*+/=?^_`{|}~\u00a1-\U0010ffff-]+)*'
                 '@[A-Za-z0-9\u00a1-\U0010ffff]([A-Za-z0-9\u00a1-\U0010ffff-]{0,61}[A-Za-z0-9\u00a1-\U0010ffff])?'
                 '(\.[A-Za-z0-9\u00a1-\U0010ffff]([A-Za-z0-9\u00a1-\U0010ffff-]{0,61}[A-Za-z0-9\u00a1-\U0010ffff])?)*$')
        AND email !~ '[[:space:][:cntrl:]\u0080-\u00a0\u00ad\u1680\u180e\u2000-\u200f\u2028-\u202f\u205f-\u206f\u3000\ufeff\ufff9-\ufffb]'
        AND pg_catalog.octet_length(pg_catalog.split_part(email, '@', 1)) <= 64
        AND pg_catalog.length(email) <= 254),
    CONSTRAINT contact_display_name CHECK (display_name !~ '[[:cntrl:]]' AND pg_catalog.length(display_name) <= 200)
);
COMMENT ON TABLE @extschema@.contact IS
    'E-mail address of a user; notify = false silences them. A portal user reads and changes only their own row';

-- A portal user sees and changes only their own row; administrators see and change every row.
ALTER TABLE @extschema@.contact ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_contact ON @extschema@.contact
    USING ((SELECT hpcacct_internal.sees_all_accounts('@extschema@.contact')) OR username = pg_catalog.session_user())
    WITH CHECK ((SELECT hpcacct_internal.sees_all_accounts('@extschema@.contact')) OR username = pg_catalog.session_user());

-- Who hears about an account: its managers (membership role admin: HLRN's project
-- administrators, GENCI's project manager, the PI; a personal account's owner) and its
-- members, with the addresses of those who have a contact and have not silenced it.
CREATE VIEW @extschema@.account_recipient AS
    SELECT m.account, m.username, CASE m.role WHEN 'admin' THEN 'manager' ELSE 'member' END AS role,
           c.email, c.display_name
    FROM @extschema@.membership m
    JOIN @extschema@.contact c ON c.username = m.username
    WHERE c.notify;
COMMENT ON VIEW @extschema@.account_recipient IS
    'Per account: the managers (membership admins) and members with an e-mail address who receive notifications';

-- ---- the outbox ------------------------------------------------------------------------

CREATE TABLE @extschema@.outbox (
    message_id   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic        text NOT NULL CHECK (topic IN ('regulation_warning', 'regulation_retraction', 'annual_warning',
                                                'annual_retraction', 'quota_state', 'account_expired',
                                                'account_deleted', 'job_held', 'job_released', 'balance_low',
                                                'account_expiry')),
    -- the decision the message is about: one message per topic and decision, whatever re-runs
    decision_key text NOT NULL,
    -- the account it is about (NULL: a job held for an account that does not exist)
    account      text REFERENCES @extschema@.account,
    subject      text NOT NULL CHECK (subject !~ '[[:cntrl:]]'),
    body         text NOT NULL,
    figures      jsonb NOT NULL DEFAULT '{}',
    -- the users it is for (the account's managers, maybe its members, named users): those
    -- with a contact get a delivery each
    addressed_to text[] NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL DEFAULT pg_catalog.statement_timestamp(),
    -- a message about one person's own job (job_held, job_released): that person, who reads it
    -- whatever its account; NULL: a message about the account
    job_owner    text,
    -- read by job_owner alone (and staff), not by the account's members: the job named no account,
    -- so that they do not see it in pending_job either
    owner_only   boolean NOT NULL DEFAULT false,
    CONSTRAINT outbox_once UNIQUE (topic, decision_key),
    CONSTRAINT outbox_owner_only CHECK (NOT owner_only OR job_owner IS NOT NULL)
);
COMMENT ON TABLE @extschema@.outbox IS
    'Messages about decisions, written in the deciding transaction; one per topic and decision (decision_key)';

-- The mailbox an address names, as hpcacct-notify sends to it: the local part as written, the
-- domain as its IDNA A-label (libidn2, as the sender) in lower case. A mailbox gets one copy of
-- a message: x@bücher.example, x@xn--bcher-kva.example and x@BÜCHER.example are one (outbox_claim).
CREATE FUNCTION hpcacct_internal.mailbox_key(address text) RETURNS text
    AS 'MODULE_PATHNAME', 'hpcacct_mailbox_key' LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION hpcacct_internal.mailbox_key(text) IS
    'The mailbox an address names: its local part as written, its domain as the IDNA A-label in lower case';

-- One row per message and recipient: the delivery record. States: pending (to send, from
-- next_attempt on; a sender may hold a lease on it), sending (a sender committed to finish
-- the SMTP transaction: the server may have it), delivered, failed (refused for good),
-- uncertain (a sender stopped while sending: it is never sent again automatically), and
-- withdrawn (not to be sent: its user left the account, or silenced or deleted their contact,
-- before it was sent; outbox_withdraw_member(), contact_follow()).
CREATE TABLE @extschema@.outbox_recipient (
    recipient_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id   bigint NOT NULL REFERENCES @extschema@.outbox,
    username     text NOT NULL,
    address      text NOT NULL,
    state        text NOT NULL DEFAULT 'pending'
                 CONSTRAINT outbox_recipient_state_check
                 CHECK (state IN ('pending', 'sending', 'delivered', 'failed', 'uncertain', 'withdrawn')),
    attempts     integer NOT NULL DEFAULT 0,
    next_attempt timestamptz NOT NULL DEFAULT pg_catalog.statement_timestamp(),
    lease_owner  text,
    lease_until  timestamptz,
    last_error   text,
    delivered_at timestamptz,
    mailbox      text GENERATED ALWAYS AS (hpcacct_internal.mailbox_key(address)) STORED
);
-- a message's deliveries (the foreign key's check when outbox_prune() deletes messages), those
-- to one mailbox (which get one copy: outbox_claim(), outbox_sending()); and whether a mailbox
-- has a message (delivered or uncertain), a probe that stays short when thousands of deliveries
-- share the mailbox
CREATE INDEX outbox_recipient_message ON @extschema@.outbox_recipient (message_id, mailbox);
CREATE INDEX outbox_recipient_has ON @extschema@.outbox_recipient (message_id, mailbox)
    WHERE state IN ('delivered', 'uncertain');
-- a user's pending deliveries (contact_follow(), outbox_withdraw_member())
CREATE INDEX outbox_recipient_user_pending ON @extschema@.outbox_recipient (username) WHERE state = 'pending';
-- the deliveries to be made by when they are due (a claim's scan); "next_attempt IS NOT NULL",
-- which a claim's next_attempt <= now implies, keeps outbox_waiting()'s probe of a mailbox off
-- it: with statistics that counted no pending row, the planner took this index for empty and
-- read it whole for each delivery (outbox_status: over 20 s at 20 000 pending)
CREATE INDEX outbox_recipient_due ON @extschema@.outbox_recipient (next_attempt)
    WHERE state IN ('pending', 'sending') AND next_attempt IS NOT NULL;
-- the deliveries still to be made to a mailbox (a newer message waits for them: outbox_claim)
CREATE INDEX outbox_recipient_open ON @extschema@.outbox_recipient (mailbox, message_id) WHERE state IN ('pending', 'sending');
-- Analyzed after every 1 000 rows written or changed, whatever the table's size: the sender's
-- claims join its pending deliveries, and statistics that count none (a table of delivered
-- ones, which autovacuum analyzes again only after a tenth of it changed) make the planner
-- compare them pair by pair
ALTER TABLE @extschema@.outbox_recipient SET (autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 1000);
COMMENT ON TABLE @extschema@.outbox_recipient IS
    'Delivery record per message and recipient: pending, sending, delivered, failed, uncertain or withdrawn, with attempts and lease';

SELECT pg_catalog.pg_extension_config_dump('@extschema@.contact', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.outbox', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.outbox_message_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.outbox_recipient', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.outbox_recipient_recipient_id_seq', '');

-- The deliveries' statistics brought up to date, with the owner's rights (ANALYZE is the
-- owner's): plans made with statistics that count no pending delivery where there were 20 000
-- compared them pair by pair (85 s a claim). Called by a transaction that wrote 1 000 deliveries
-- (outbox_add_all(), with min_changes 0, before the sender, woken by its NOTIFY, plans a claim)
-- and by the sender, when min_changes rows changed since the table was last analyzed
-- (outbox_claim(), outbox_next_due(): many small writers, within autovacuum's naptime).
-- SKIP_LOCKED: not while autovacuum or another transaction holds the table for its own ANALYZE
-- (its warning is not the caller's).
CREATE FUNCTION hpcacct_internal.outbox_analyze(min_changes bigint DEFAULT 1000) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET client_min_messages = error
    AS $$
    BEGIN
        IF pg_catalog.pg_stat_get_mod_since_analyze('@extschema@.outbox_recipient'::regclass) >= min_changes THEN
            ANALYZE (SKIP_LOCKED) @extschema@.outbox_recipient;
        END IF;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.outbox_analyze(bigint) IS
    'Analyzes outbox_recipient as its owner when min_changes rows (default 1 000) changed since it was analyzed, unless '
    'it is being analyzed (outbox_add_all() after every 1 000 deliveries a transaction wrote, with 0; outbox_claim() and '
    'outbox_next_due())';
REVOKE EXECUTE ON FUNCTION hpcacct_internal.outbox_analyze(bigint) FROM PUBLIC;

-- Writes messages and their recipients, one per decision: those whose (topic, decision_key)
-- has a message already are skipped. messages is a jsonb array of {topic, decision_key,
-- account, subject, body, figures, to_managers, to_members, also, job_owner, owner_only} (the
-- last two: whose job a message is about, and whether only they read it); the recipients of
-- each are the account's managers (unless to_managers is false), its members too when to_members, and
-- the users named in also, those with a contact that is not silenced. One set-based statement for all, and one NOTIFY
-- hpcacct_outbox (delivered at commit) when anything was written; after every 1 000 deliveries a
-- transaction wrote, the deliveries' statistics brought up to date (outbox_analyze()). Returns
-- the new ids.
CREATE FUNCTION @extschema@.outbox_add_all(messages jsonb) RETURNS SETOF bigint
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        ids bigint[];
        deliveries bigint;
        counted text;
        missing text;
    BEGIN
        -- NULL is no message (jsonb_agg of no rows, as the triggers pass it); else an array of
        -- objects, each with its topic, decision_key, subject and body, and figures an object
        IF messages IS NOT NULL AND (pg_catalog.jsonb_typeof(messages) <> 'array'
                                     OR EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(messages) e
                                                WHERE pg_catalog.jsonb_typeof(e) <> 'object')) THEN
            RAISE EXCEPTION 'outbox_add_all: messages must be a JSON array of objects' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(coalesce(messages, '[]')) e
                   WHERE pg_catalog.jsonb_typeof(e -> 'figures') NOT IN ('object', 'null')) THEN
            RAISE EXCEPTION 'outbox_add_all: a message''s figures must be a JSON object' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        SELECT CASE WHEN m.topic IS NULL THEN 'topic' WHEN m.decision_key IS NULL THEN 'decision_key'
                    WHEN m.subject IS NULL THEN 'subject' ELSE 'body' END
        INTO missing
        FROM pg_catalog.jsonb_to_recordset(coalesce(messages, '[]')) AS m(topic text, decision_key text, subject text, body text)
        WHERE m.topic IS NULL OR m.decision_key IS NULL OR m.subject IS NULL OR m.body IS NULL
        LIMIT 1;
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'outbox_add_all: a message''s % must not be NULL', missing USING ERRCODE = 'null_value_not_allowed';
        END IF;
        -- an account that does not exist is 42704, as for every other function (not the foreign key's 23503)
        SELECT m.account INTO missing
        FROM pg_catalog.jsonb_to_recordset(coalesce(messages, '[]')) AS m(account text)
        WHERE m.account IS NOT NULL AND NOT EXISTS (SELECT 1 FROM @extschema@.account a WHERE a.name = m.account)
        LIMIT 1;
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'unknown account "%"', missing USING ERRCODE = 'undefined_object';
        END IF;
        -- A change of a contact or membership (contact_follow(), outbox_withdraw_member(), at its
        -- commit) cannot see deliveries not yet committed: it waits for this transaction, and
        -- this statement's reading of contacts waits for that commit (one lock for 1/128 of the
        -- users, shared by writers).
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(pg_catalog.hashtext('hpcacct.outbox_reach'), u.bucket)
        FROM (SELECT DISTINCT pg_catalog.hashtext(x.username) & 127 AS bucket
              FROM (SELECT a.username FROM pg_catalog.jsonb_to_recordset(coalesce(messages, '[]')) AS m(also text[]),
                                           pg_catalog.unnest(m.also) AS a(username)
                    UNION
                    SELECT ms.username FROM @extschema@.membership ms
                    WHERE ms.account IN (SELECT m.account FROM pg_catalog.jsonb_to_recordset(coalesce(messages, '[]')) AS m(account text))) x
              ORDER BY 1) u;
        -- set-based and index-driven: each message's users are found by its account (membership's
        -- key) and carried in its row, so no step joins the new messages to the input
        WITH written AS (
            INSERT INTO @extschema@.outbox (topic, decision_key, account, subject, body, figures, addressed_to,
                                            job_owner, owner_only)
            -- a subject is one header line: a control character of a name in it (an account
            -- named with a line break) is a space, so that the decision is not refused for it
            SELECT m.topic, m.decision_key, m.account, hpcacct_internal.notify_name(m.subject),
                   m.body, coalesce(m.figures, '{}'),
                   ARRAY(SELECT u.username FROM pg_catalog.unnest(coalesce(m.also, '{}')) AS u(username)
                         UNION
                         SELECT ms.username FROM @extschema@.membership ms
                         WHERE ms.account = m.account
                           AND ((ms.role = 'admin' AND coalesce(m.to_managers, true)) OR coalesce(m.to_members, false))
                         ORDER BY 1),
                   m.job_owner, coalesce(m.owner_only, false)
            FROM pg_catalog.jsonb_to_recordset(coalesce(messages, '[]')) AS m(topic text, decision_key text, account text,
                                                                             subject text, body text, figures jsonb,
                                                                             to_managers boolean, to_members boolean,
                                                                             also text[], job_owner text,
                                                                             owner_only boolean)
            ORDER BY m.topic, m.decision_key
            ON CONFLICT ON CONSTRAINT outbox_once DO NOTHING
            RETURNING message_id, addressed_to
        ), recipients AS (
            INSERT INTO @extschema@.outbox_recipient (message_id, username, address)
            -- one per user, whoever else has the address: the sender sends a mailbox one copy
            -- (outbox_claim), and a user's deliveries do not show other users' addresses
            SELECT w.message_id, c.username, c.email
            FROM written w
            CROSS JOIN LATERAL pg_catalog.unnest(w.addressed_to) AS u(username)
            JOIN @extschema@.contact c ON c.username = u.username AND c.notify
            ORDER BY w.message_id, c.username
            RETURNING 1
        )
        SELECT pg_catalog.array_agg(w.message_id ORDER BY w.message_id), (SELECT count(*) FROM recipients)
        INTO ids, deliveries FROM written w;
        -- counted per transaction (notify_scan() writes a message per account, each with a few)
        IF deliveries > 0 THEN
            -- (a value the session set that is not such a count is none)
            counted := pg_catalog.current_setting('hpcacct.deliveries_not_analyzed', true);
            deliveries := deliveries + CASE WHEN counted ~ '^[0-9]{1,6}$' THEN counted::bigint ELSE 0 END;
            IF deliveries >= 1000 THEN
                PERFORM hpcacct_internal.outbox_analyze(0);
                deliveries := 0;
            END IF;
            PERFORM pg_catalog.set_config('hpcacct.deliveries_not_analyzed', deliveries::text, true);
        END IF;
        IF ids IS NOT NULL THEN
            PERFORM pg_catalog.pg_notify('hpcacct_outbox', pg_catalog.array_length(ids, 1)::text);
            RETURN QUERY SELECT pg_catalog.unnest(ids);
        END IF;
    END
    $$;
COMMENT ON FUNCTION @extschema@.outbox_add_all(jsonb) IS
    'Writes messages about decisions and their recipients (managers, members if asked, named users), each decision '
    'once, in one statement; one NOTIFY hpcacct_outbox. messages NULL: none; a NULL topic, decision_key, subject or '
    'body is an error (22004), an unknown account 42704, figures other than an object 22023; a NULL account, figures, '
    'to_managers, to_members or also: no account''s users, {}, true, false, none';

-- One message: outbox_add_all of one. Returns its id, NULL when the decision had one already.
CREATE FUNCTION @extschema@.outbox_add(topic text, decision_key text, account text, subject text, body text,
                                       figures jsonb, to_members boolean DEFAULT false,
                                       also text[] DEFAULT '{}')
    RETURNS bigint
    LANGUAGE sql
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT id
        FROM @extschema@.outbox_add_all(pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object(
                 'topic', $1, 'decision_key', $2, 'account', $3, 'subject', $4, 'body', $5, 'figures', $6,
                 'to_members', $7, 'also', pg_catalog.to_jsonb($8)))) AS id
    $$;
COMMENT ON FUNCTION @extschema@.outbox_add(text, text, text, text, text, jsonb, boolean, text[]) IS
    'Writes a message about a decision and its recipients (managers, members if asked, named users) once; NOTIFY '
    'hpcacct_outbox. NULL topic, decision_key, subject or body: 22004; an unknown account: 42704; figures other than an '
    'object: 22023; NULL account, figures, to_members or also: no account''s users, {}, false, none';

-- ---- GENCI: regulation outcomes ------------------------------------------------------------

CREATE FUNCTION hpcacct_internal.notify_regulation() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM @extschema@.outbox_add_all(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
            'topic', x.topic, 'decision_key', pg_catalog.concat_ws('/', r.account, r.machine, hpcacct_internal.iso_date(r.run_date), r.run),
            'account', r.account,
            'subject', pg_catalog.format('[hpcacct] %s on %s: %s (%s)', r.account, r.machine,
                                         CASE x.topic WHEN 'regulation_warning' THEN 'under-consumption warning'
                                                      WHEN 'regulation_retraction' THEN 'hours retracted'
                                                      WHEN 'annual_warning' THEN 'annual under-consumption warning'
                                                      ELSE 'annual retraction' END, hpcacct_internal.iso_date(r.run_date)),
            'body', E'Dear project manager,\n\n' || CASE x.topic
                WHEN 'regulation_warning' THEN pg_catalog.format(
                    E'On %s project %s had consumed %s hours on %s, against a theoretical consumption TC of %s hours:\n'
                    'an under-consumption of %s hours, between one and two theoretical monthly consumptions\n'
                    '(TMC = %s hours). No hours are retracted now; should the under-consumption reach twice the TMC\n'
                    'on a later 15th, a TMC of hours will be retracted from the allocation.',
                    hpcacct_internal.iso_date(r.figures_at), hpcacct_internal.notify_name(r.account), hpcacct_internal.notify_number(r.consumption::numeric),
                    hpcacct_internal.notify_name(r.machine),
                    hpcacct_internal.notify_number(r.tc::numeric), hpcacct_internal.notify_number(-r.delta::numeric),
                    hpcacct_internal.notify_number(r.tmc::numeric))
                WHEN 'regulation_retraction' THEN pg_catalog.format(
                    E'On %s project %s had consumed %s hours on %s, against a theoretical consumption TC of %s hours:\n'
                    'an under-consumption of %s hours, at least twice the theoretical monthly consumption\n'
                    '(TMC = %s hours). %s hours (one TMC) are retracted from the allocation, effective %s and\n'
                    'valid until 31 December: the allocation goes from %s to %s hours.',
                    hpcacct_internal.iso_date(r.figures_at), hpcacct_internal.notify_name(r.account), hpcacct_internal.notify_number(r.consumption::numeric),
                    hpcacct_internal.notify_name(r.machine),
                    hpcacct_internal.notify_number(r.tc::numeric), hpcacct_internal.notify_number(-r.delta::numeric),
                    hpcacct_internal.notify_number(r.tmc::numeric), hpcacct_internal.notify_number(r.retracted),
                    hpcacct_internal.iso_date(r.run_date), hpcacct_internal.notify_number(r.alloc), hpcacct_internal.notify_number(r.alloc - r.retracted))
                WHEN 'annual_warning' THEN pg_catalog.format(
                    E'By the end of %s project %s had used %s of its %s hours on %s (%s %%), less than the %s %%\n'
                    'expected in the first five months. Unless a justification reaches GENCI before the end of May,\n'
                    'up to %s %% of the annual allocation may be retracted after May.',
                    hpcacct_internal.iso_date(r.figures_at), hpcacct_internal.notify_name(r.account), hpcacct_internal.notify_number(r.consumption::numeric),
                    hpcacct_internal.notify_number(r.alloc), hpcacct_internal.notify_name(r.machine),
                    pg_catalog.round(r.used_percent::numeric, 1),
                    s.annual_warning_percent, s.annual_retraction_percent)
                ELSE pg_catalog.format(
                    E'By the end of %s project %s had used %s of its %s hours on %s (%s %%), less than %s %%,\n'
                    'and it was not exonerated. %s hours are retracted from the allocation, effective %s: it goes\n'
                    'from %s to %s hours.',
                    hpcacct_internal.iso_date(r.figures_at), hpcacct_internal.notify_name(r.account), hpcacct_internal.notify_number(r.consumption::numeric),
                    hpcacct_internal.notify_number(r.alloc), hpcacct_internal.notify_name(r.machine),
                    pg_catalog.round(r.used_percent::numeric, 1),
                    s.annual_warning_percent, hpcacct_internal.notify_number(r.retracted), hpcacct_internal.iso_date(r.run_date),
                    hpcacct_internal.notify_number(r.alloc), hpcacct_internal.notify_number(r.alloc - r.retracted))
            END || E'\n\n'
            || pg_catalog.format(E'Figures at the end of %s:\n  Alloc        %s\n  TMC          %s\n  TC           %s\n'
                                 '  consumption  %s\n  delta        %s\n  retracted    %s\n'
                                 -- (a difference of figures rounded on their own can be 1 off the rounded
                                 -- difference: 150,001 - 0 against an under-consumption of 150,000)
                                 'Hours, each rounded on its own to the nearest whole hour (halves away from zero).\n',
                                 hpcacct_internal.iso_date(r.figures_at), hpcacct_internal.notify_number(r.alloc), hpcacct_internal.notify_number(r.tmc::numeric),
                                 hpcacct_internal.notify_number(r.tc::numeric), hpcacct_internal.notify_number(r.consumption::numeric),
                                 hpcacct_internal.notify_number(r.delta::numeric), hpcacct_internal.notify_number(r.retracted)),
            'figures', pg_catalog.jsonb_build_object('run_date', r.run_date, 'run', r.run, 'machine', r.machine,
                                                     'figures_at', r.figures_at, 'alloc', r.alloc, 'tmc', hpcacct_internal.float_figure(r.tmc), 'tc', hpcacct_internal.float_figure(r.tc),
                                                     'consumption', hpcacct_internal.float_figure(r.consumption), 'delta', hpcacct_internal.float_figure(r.delta),
                                                     'used_percent', hpcacct_internal.float_figure(r.used_percent), 'retracted', r.retracted))))
        FROM new_rows r
        JOIN @extschema@.regulation_machine s ON s.machine = r.machine
        CROSS JOIN LATERAL (SELECT CASE r.run WHEN 'monthly' THEN 'regulation_' || r.outcome ELSE r.run END AS topic) x
        WHERE (r.run = 'monthly' AND r.outcome IN ('warning', 'retraction'))
           OR (r.run = 'annual_warning' AND r.outcome = 'warning')
           OR (r.run = 'annual_retraction' AND r.outcome = 'retraction');
        RETURN NULL;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.notify_regulation() IS
    'Trigger: a regulation warning or retraction logged by regulate() writes its message to the project managers';
CREATE TRIGGER notify_regulation AFTER INSERT ON @extschema@.regulation_log
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION hpcacct_internal.notify_regulation();

-- ---- HLRN: expiry and deletion of personal accounts (open_quarter) ----------------------

CREATE FUNCTION hpcacct_internal.notify_quarter() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        PERFORM @extschema@.outbox_add_all(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
            'topic', 'account_' || r.action, 'decision_key', pg_catalog.concat_ws('/', r.account, hpcacct_internal.iso_date(r.quarter)),
            'account', r.account, 'also', pg_catalog.jsonb_build_array(r.account),
            'subject', pg_catalog.format('[hpcacct] account %s %s (%s)', r.account,
                                         CASE r.action WHEN 'expired' THEN 'has expired' ELSE 'is deleted' END, hpcacct_internal.iso_date(r.quarter)),
            'body', CASE r.action
                WHEN 'expired' THEN pg_catalog.format(
                    E'Dear %s,\n\nyour personal account %s holds no allocation for the quarter starting %s, so it\n'
                    'has expired: you can still log in and work interactively, but you cannot submit batch jobs.\n'
                    'A personal account that is still expired at the next quarter start (%s) is deleted, and\n'
                    'with it the files of the login. Join an active project or ask your consultant for an\n'
                    'allocation to keep it.\n', hpcacct_internal.notify_name(r.account), hpcacct_internal.notify_name(r.account),
                    hpcacct_internal.iso_date(r.quarter),
                    hpcacct_internal.iso_date((r.quarter + interval '3 months')::date))
                ELSE pg_catalog.format(
                    E'Dear %s,\n\nyour personal account %s expired in the previous quarter and still holds no\n'
                    'allocation on %s: it is deleted. The login is closed and its files on disk and tape are\n'
                    'deleted.\n', hpcacct_internal.notify_name(r.account), hpcacct_internal.notify_name(r.account), hpcacct_internal.iso_date(r.quarter))
            END,
            'figures', pg_catalog.jsonb_build_object('quarter', r.quarter, 'action', r.action))))
        FROM new_rows r
        -- an account that expired the quarter before is deleted by the same run: one notice, the deletion
        WHERE r.action = 'deleted'
           OR (r.action = 'expired'
               AND NOT EXISTS (SELECT 1 FROM @extschema@.quarter_log p
                               WHERE p.account = r.account AND p.action = 'expired'
                                 AND p.quarter = (r.quarter - interval '3 months')::date));
        RETURN NULL;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.notify_quarter() IS
    'Trigger: an expiry or deletion logged by open_quarter() writes its message to the account''s owner';
CREATE TRIGGER notify_quarter AFTER INSERT ON @extschema@.quarter_log
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION hpcacct_internal.notify_quarter();

-- ---- HLRN: a queued job held (recheck_queued), or released -----------------------------
--
-- Held: recheck_queued() decided it (held turns true). Released: hpcacct-slurm-sync lifted the
-- hold it placed (sync_hold turns NULL in a transaction that set hpcacct.sync_lifted to on);
-- held turning false alone says nothing, as an operator may still hold the job in Slurm. A job
-- the sync saw held by someone else (other_hold) is told its account's reason, not a hold. A
-- held job whose reason changed (its public reason, hold_comment) is told the new one.

CREATE FUNCTION hpcacct_internal.notify_hold() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        lifted constant boolean := coalesce(pg_catalog.current_setting('hpcacct.sync_lifted', true), '') = 'on';
        -- the day of the check that holds the job (recheck_queued() sets it while it updates), else today
        check_day constant date := coalesce(NULLIF(pg_catalog.current_setting('hpcacct.check_day', true), '')::date,
                                            @extschema@.site_today());
    BEGIN
        PERFORM @extschema@.outbox_add_all(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
            'topic', CASE WHEN e.held OR e.changed THEN 'job_held' ELSE 'job_released' END,
            -- (the instant in ISO 8601 and UTC, not in the session's DateStyle and TimeZone)
            'decision_key', pg_catalog.concat_ws('/', n.cluster, n.jobid,
                                                 CASE WHEN e.held THEN 'held' WHEN e.changed THEN 'reason' ELSE 'released' END,
                                                 pg_catalog.to_char(coalesce(n.checked_at, pg_catalog.statement_timestamp())
                                                                    AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') || '+00'),
            -- the account as check_submit() resolves it (job_account(), at the check's day);
            -- NULL when it does not exist. The job's owner is told, not the account's managers.
            'account', (SELECT a.name FROM @extschema@.account a WHERE a.name = acct.name),
            'to_managers', false,
            -- read by the owner, and by the account's members only when they see the job: one
            -- that named no account is hidden from them (pending_job's row-level security)
            'job_owner', n.username, 'owner_only', n.account IS NULL,
            'also', pg_catalog.jsonb_build_array(n.username),
            'subject', pg_catalog.format('[hpcacct] job %s on %s %s', n.jobid, n.cluster,
                                         CASE WHEN e.held THEN 'is held' WHEN e.changed THEN 'is still held'
                                              ELSE 'is released' END),
            'body', CASE WHEN (e.held OR e.changed) AND n.other_hold THEN pg_catalog.format(
                    E'Dear %s,\n\nyour queued job %s on %s (account %s) is held by an administrator, and its\n'
                    'account cannot run it either: %s.\n'
                    'When the administrator releases the job, it stays on hold until that is corrected (e.g.\n'
                    'another account for the job), or ask the project administrator for an allocation.\n',
                    hpcacct_internal.notify_name(n.username), hpcacct_internal.notify_name(n.jobid), hpcacct_internal.notify_name(n.cluster),
                    hpcacct_internal.notify_name(acct.shown),
                    hpcacct_internal.notify_name(coalesce(n.hold_reason, 'no reason given')))
                 WHEN e.held OR e.changed THEN pg_catalog.format(
                    E'Dear %s,\n\nyour queued job %s on %s (account %s) %s: %s.\n'
                    'Correct the reason (e.g. another account: scontrol update jobid=%s account=...), or ask\n'
                    'the project administrator for an allocation: the job is then released\n'
                    'at the next check. The hold is an administrator''s: scontrol release does not lift it.\n',
                    hpcacct_internal.notify_name(n.username), hpcacct_internal.notify_name(n.jobid), hpcacct_internal.notify_name(n.cluster),
                    hpcacct_internal.notify_name(acct.shown),
                    CASE WHEN e.held THEN 'has been put on hold' ELSE 'is still on hold, for another reason now' END,
                    hpcacct_internal.notify_name(coalesce(n.hold_reason, 'no reason given')), hpcacct_internal.notify_name(n.jobid))
                 WHEN o.sync_hold = 'uhold' THEN pg_catalog.format(
                    E'Dear %s,\n\nyour queued job %s on %s (account %s) is no longer held by hpcacct.\n'
                    'Your own hold on it remains: release it (scontrol release %s) when it may run.\n',
                    hpcacct_internal.notify_name(n.username), hpcacct_internal.notify_name(n.jobid), hpcacct_internal.notify_name(n.cluster),
                    hpcacct_internal.notify_name(acct.shown), hpcacct_internal.notify_name(n.jobid))
                 ELSE pg_catalog.format(E'Dear %s,\n\nyour queued job %s on %s (account %s) is no longer held.\n',
                    hpcacct_internal.notify_name(n.username), hpcacct_internal.notify_name(n.jobid), hpcacct_internal.notify_name(n.cluster),
                    hpcacct_internal.notify_name(acct.shown))
            END,
            'figures', pg_catalog.jsonb_build_object('cluster', n.cluster, 'jobid', n.jobid, 'reason', n.hold_reason,
                                                     'other_hold', n.other_hold))))
        FROM new_rows n
        JOIN old_rows o ON o.cluster = n.cluster AND o.jobid = n.jobid
        CROSS JOIN LATERAL (SELECT n.held AND NOT o.held AS held,
                                   n.held AND o.held AND o.hold_comment IS NOT NULL
                                   AND n.hold_comment IS DISTINCT FROM o.hold_comment AS changed) e
        CROSS JOIN LATERAL hpcacct_internal.job_account(n.username, n.account, check_day) AS resolved(name)
        -- (a user with neither a default project nor a personal account, as the account sync
        -- makes them, resolves to a personal account that does not exist: the message names none)
        CROSS JOIN LATERAL (SELECT resolved.name, CASE WHEN n.account IS NOT NULL THEN n.account
                                                WHEN EXISTS (SELECT 1 FROM @extschema@.account a WHERE a.name = resolved.name)
                                                    THEN resolved.name || ', your default'
                                                ELSE 'default' END AS shown) acct
        WHERE e.held OR e.changed
           OR (lifted AND o.sync_hold IS NOT NULL AND n.sync_hold IS NULL);
        RETURN NULL;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.notify_hold() IS
    'Trigger: a queued job put on hold, held for another reason, or released by hpcacct-slurm-sync, writes its '
    'message to the job''s owner';
CREATE TRIGGER notify_hold AFTER UPDATE ON @extschema@.pending_job
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION hpcacct_internal.notify_hold();

-- ---- RWTH: sliding-window quota states; HLRN: a balance below a threshold ----------------
--
-- No procedure records these: the quota state follows from the charges of every job, and a
-- balance from every charge. notify_scan(at) compares them with what was last notified and
-- writes a message for each change, in its own transaction (schedule it, e.g. hourly).

-- The quota state each account was last told of (none yet: normal).
CREATE TABLE @extschema@.quota_state_notified (
    account     text PRIMARY KEY REFERENCES @extschema@.account,
    state       text NOT NULL CHECK (state IN ('normal', 'low_priority', 'blocked')),
    since       date NOT NULL,
    notified_at timestamptz NOT NULL DEFAULT pg_catalog.statement_timestamp()
);
COMMENT ON TABLE @extschema@.quota_state_notified IS
    'Sliding-window quota state each account was last notified of (notify_scan); no row: normal';

-- Site thresholds: when an account's balance in a quarter falls below this percentage of the
-- quarter's allocation (deposits, transfers and refunds), its managers are told, once per
-- account, quarter, threshold and top-up. 0 means a negative balance (jobs are refused).
CREATE TABLE @extschema@.balance_threshold (
    percent numeric PRIMARY KEY CHECK (percent >= 0 AND percent < 100),
    note    text
);
COMMENT ON TABLE @extschema@.balance_threshold IS
    'Balance thresholds (percent of the quarter''s allocation left; 0: negative) whose crossing notifies the managers';

SELECT pg_catalog.pg_extension_config_dump('@extschema@.quota_state_notified', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.balance_threshold', '');

CREATE FUNCTION @extschema@.notify_scan(at date DEFAULT @extschema@.site_today()) RETURNS integer
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        r record;
        q date;
        written integer := 0;
        id bigint;
        bank_unit text;
        next_q date;
        warn_days integer;
        key text;
        k integer;
        later date;
    BEGIN
        IF at IS NULL THEN
            RAISE EXCEPTION 'notify_scan needs a date' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF NOT pg_catalog.isfinite(at) THEN
            RAISE EXCEPTION 'notify_scan needs a finite date' USING ERRCODE = 'datetime_field_overflow';
        END IF;
        IF at > @extschema@.site_today() THEN
            RAISE EXCEPTION 'notify_scan: % is in the future', at
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = pg_catalog.format('Today is %s in the site time zone.', @extschema@.site_today());
        END IF;
        -- one scan at a time: a second one waits and then finds the states notified
        LOCK TABLE @extschema@.quota_state_notified IN SHARE ROW EXCLUSIVE MODE;
        -- scans go in date order: a day before a change already notified would tell its
        -- members of a state that has passed, and the next scan of the change back
        SELECT max(n.since) INTO later FROM @extschema@.quota_state_notified n WHERE n.since > at;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'notify_scan: % comes before the quota state change notified on %', at, later
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- nor a day before a later scan, which may have told no change: the state it found has
        -- been told, and a past day's scan would tell one that has since passed
        later := hpcacct_internal.run_in_order('notify_scan', at);
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'notify_scan: % comes before the scan of %', at, later
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Scans go in date order; scan today''s date (the default).';
        END IF;

        -- quota states: entry into low_priority and blocked, and back, of the accounts the
        -- window binds (check_submit() and slurm_associations() ignore it elsewhere), at the
        -- end of the day: a scan of a past day does not count the month's later jobs
        FOR r IN SELECT u.*, coalesce(n.state, 'normal') AS old_state, n.since AS old_since
                 FROM (SELECT DISTINCT p.account FROM @extschema@.quota_period p
                       WHERE 'window_quota' = ANY (@extschema@.account_policies(p.account))) a
                 CROSS JOIN LATERAL hpcacct_internal.window_quota_usage_rows(a.account, at, true) u
                 LEFT JOIN @extschema@.quota_state_notified n ON n.account = u.account
                 WHERE u.state IS DISTINCT FROM coalesce(n.state, 'normal')
                 ORDER BY u.account LOOP
            -- account/day/from/to; the same change again that day (the state went back and
            -- forth) is a change of its own: /2, /3...
            key := pg_catalog.concat_ws('/', r.account, hpcacct_internal.iso_date(at), r.old_state, r.state);
            k := 1;
            WHILE EXISTS (SELECT 1 FROM @extschema@.outbox o
                          WHERE o.topic = 'quota_state' AND o.decision_key = key || CASE WHEN k > 1 THEN '/' || k ELSE '' END) LOOP
                k := k + 1;
            END LOOP;
            id := @extschema@.outbox_add(
                'quota_state', key || CASE WHEN k > 1 THEN '/' || k ELSE '' END, r.account,
                pg_catalog.format('[hpcacct] %s: quota state %s (%s)', r.account, pg_catalog.replace(r.state, '_', ' '), hpcacct_internal.iso_date(at)),
                pg_catalog.format(E'Dear members of %s,\n\nthe core-hour quota of %s is now in state "%s" (before: "%s").\n%s\n\n'
                                  'Accounting period:            %s to %s\n'
                                  'Monthly allowance:            %s %s\n'
                                  'Remaining of previous month:  %s\n'
                                  'Consumed this month:          %s\n'
                                  'Consumable (%%):               %s\n'
                                  'Consumable:                   %s\n',
                                  hpcacct_internal.notify_name(r.account), hpcacct_internal.notify_name(r.account), r.state, r.old_state,
                                  -- a month outside the period has no quota (low_priority): said as such
                                  CASE WHEN r.state = 'low_priority' AND r.month < r.period_start
                                       THEN pg_catalog.format(E'The accounting period starts on %s: until then the account has no quota, and jobs\n'
                                                              'run, and count, only when no other project with quota left is waiting (low-priority mode).',
                                                              hpcacct_internal.iso_date(r.period_start))
                                       WHEN r.state = 'low_priority' AND r.month > r.period_end
                                       THEN pg_catalog.format(E'The accounting period ended on %s: without a quota, jobs still run, and count, but\n'
                                                              'only when no other project with quota left is waiting (low-priority mode).',
                                                              hpcacct_internal.iso_date(r.period_end))
                                       WHEN r.state = 'low_priority'
                                       THEN E'The quota of the three-month window is used up: jobs still run, and count, but only\nwhen no other project with quota left is waiting (low-priority mode).'
                                       WHEN r.state = 'blocked'
                                       THEN E'The monthly quota was exceeded six times or the period''s quota twice: no new job can\nbe submitted.'
                                       -- (low_priority or blocked told before the period began)
                                       WHEN r.month = r.period_start AND r.old_since < r.period_start
                                       THEN pg_catalog.format('The accounting period began on %s: jobs run with normal priority.', hpcacct_internal.iso_date(r.period_start))
                                       ELSE E'The quota of the three-month window is no longer used up: jobs run with normal priority.'
                                  END,
                                  hpcacct_internal.iso_date(r.period_start), hpcacct_internal.iso_date(r.period_end),
                                  hpcacct_internal.notify_number(r.monthly::numeric), hpcacct_internal.notify_name(r.unit),
                                  hpcacct_internal.notify_number(r.remaining_prev::numeric),
                                  hpcacct_internal.notify_number(r.consumed_current::numeric),
                                  hpcacct_internal.notify_number(r.consumable_pct::numeric),
                                  hpcacct_internal.notify_number(r.consumable::numeric)),
                pg_catalog.jsonb_build_object('at', at, 'state', r.state, 'previous_state', r.old_state,
                                              'monthly', hpcacct_internal.float_figure(r.monthly), 'remaining_prev', hpcacct_internal.float_figure(r.remaining_prev),
                                              'consumed_current', hpcacct_internal.float_figure(r.consumed_current),
                                              'consumable_pct', hpcacct_internal.float_figure(r.consumable_pct), 'consumable', hpcacct_internal.float_figure(r.consumable),
                                              'unit', r.unit),
                true);
            written := written + (id IS NOT NULL)::integer;
            INSERT INTO @extschema@.quota_state_notified AS n (account, state, since)
            VALUES (r.account, r.state, at)
            ON CONFLICT (account) DO UPDATE
                SET state = EXCLUDED.state, since = EXCLUDED.since, notified_at = pg_catalog.statement_timestamp();
        END LOOP;

        -- balances below a threshold, once per account, quarter, threshold and top-up: an
        -- account topped up (a second deposit or transfer in) that runs low again is told again
        q := @extschema@.quarter_start(at);
        bank_unit := @extschema@.setting_value('bank_unit');
        FOR r IN WITH alloc AS (
                     SELECT l.account, sum(l.amount) AS amount,
                            count(*) FILTER (WHERE l.kind IN ('deposit', 'transfer') AND l.amount > 0) AS credits
                     FROM @extschema@.ledger l
                     WHERE l.kind IN ('deposit', 'transfer', 'refund') AND l.unit = bank_unit
                       AND l.valid_from >= q AND l.valid_from < q + interval '3 months'
                     GROUP BY l.account
                     HAVING sum(l.amount) > 0
                 )
                 SELECT a.account, a.amount AS alloc, a.credits, b.balance, t.percent
                 FROM alloc a
                 -- (at the end of the day: a scan of a past day does not count the quarter's later jobs)
                 JOIN hpcacct_internal.balances_at_end(ARRAY(SELECT alloc.account FROM alloc), at) b ON b.account = a.account
                 JOIN @extschema@.balance_threshold t
                   ON (t.percent = 0 AND b.balance < 0) OR (t.percent > 0 AND b.balance < a.amount * t.percent / 100)
                 -- (an account the bank does not bind: its jobs are not refused for its balance)
                 WHERE 'bank' = ANY (@extschema@.account_policies(a.account))
                 -- thresholds in the order they are crossed: the last message is the state now
                 ORDER BY a.account, t.percent DESC LOOP
            id := @extschema@.outbox_add(
                -- account/quarter/threshold, and /N after the Nth credit of the quarter (a top-up)
                'balance_low', pg_catalog.concat_ws('/', r.account, hpcacct_internal.iso_date(q), r.percent,
                                                    CASE WHEN r.credits > 1 THEN r.credits END), r.account,
                -- (the day it is about: a message can arrive days later, the server down)
                pg_catalog.format('[hpcacct] %s: %s (%s)', r.account,
                                  CASE WHEN r.percent = 0 THEN 'balance negative, jobs are refused'
                                       ELSE pg_catalog.format('less than %s %% of the quarter''s credits left', r.percent) END,
                                  hpcacct_internal.iso_date(at)),
                pg_catalog.format(E'Dear project administrator,\n\nat the end of %s, account %s held %s %s of the %s %s\n'
                                  'of the quarter starting %s (%s %%).\n%s\n',
                                  hpcacct_internal.iso_date(at),
                                  hpcacct_internal.notify_name(r.account), hpcacct_internal.ledger_figure(r.balance),
                                  hpcacct_internal.notify_name(bank_unit),
                                  hpcacct_internal.ledger_figure(r.alloc), hpcacct_internal.notify_name(bank_unit), hpcacct_internal.iso_date(q),
                                  pg_catalog.round(100 * r.balance / r.alloc, 1),
                                  CASE WHEN r.percent = 0
                                       THEN 'The balance is negative: new jobs and queued jobs of the account are refused.'
                                       ELSE pg_catalog.format('That is below the threshold of %s %%.', r.percent) END),
                pg_catalog.jsonb_build_object('at', at, 'quarter', q, 'balance', r.balance, 'allocation', r.alloc,
                                              'threshold_percent', r.percent, 'unit', bank_unit));
            written := written + (id IS NOT NULL)::integer;
        END LOOP;

        -- bank accounts active this quarter with no allocation for the next one, within
        -- expiry_warning_days (at most a quarter) of its start: once per account and expiry day
        next_q := (q + interval '3 months')::date;
        warn_days := @extschema@.setting_value('expiry_warning_days')::integer;
        FOR r IN WITH allocated AS (
                     SELECT l.account, @extschema@.quarter_start(l.valid_from) AS quarter, sum(l.amount) AS amount
                     FROM @extschema@.ledger l
                     WHERE l.kind IN ('deposit', 'transfer') AND l.unit = bank_unit AND l.valid_from >= q
                     GROUP BY 1, 2
                     HAVING sum(l.amount) > 0
                 )
                 SELECT a.name AS account, a.kind, now_q.amount AS alloc,
                        (SELECT min(later.quarter) FROM allocated later
                         WHERE later.account = a.name AND later.quarter > next_q) AS later_quarter
                 FROM allocated now_q
                 JOIN @extschema@.account a ON a.name = now_q.account
                 WHERE now_q.quarter = q AND warn_days > 0 AND next_q - at <= warn_days
                   AND a.deleted_in IS NULL AND 'bank' = ANY (@extschema@.account_policies(a.name))
                   AND NOT EXISTS (SELECT 1 FROM allocated nx WHERE nx.account = a.name AND nx.quarter = next_q)
                   -- a personal account whose owner is a member of a project allocated for the
                   -- next quarter does not expire: that quarter's start tops it up (open_quarter())
                   AND NOT (a.kind = 'personal'
                            AND EXISTS (SELECT 1 FROM @extschema@.membership m
                                        JOIN @extschema@.account p ON p.name = m.account AND p.kind = 'project'
                                        JOIN allocated nx ON nx.account = m.account AND nx.quarter = next_q
                                        WHERE m.username = a.name))
                 ORDER BY a.name LOOP
            id := @extschema@.outbox_add(
                'account_expiry', pg_catalog.concat_ws('/', r.account, hpcacct_internal.iso_date(next_q)), r.account,
                pg_catalog.format('[hpcacct] account %s: no allocation from %s, %s', r.account, hpcacct_internal.iso_date(next_q),
                                  CASE WHEN r.later_quarter IS NULL THEN 'it expires' ELSE 'jobs will be refused' END),
                pg_catalog.format(E'Dear members of %s,\n\naccount %s holds an allocation for the quarter ending %s but none for the\n'
                                  'quarter starting %s (%s days from %s). %s\n\n'
                                  'Balance now:        %s %s of %s %s\n'
                                  'Allocation ends:    %s\n%s',
                                  hpcacct_internal.notify_name(r.account), hpcacct_internal.notify_name(r.account), hpcacct_internal.iso_date(next_q - 1),
                                  hpcacct_internal.iso_date(next_q), next_q - at, hpcacct_internal.iso_date(at),
                                  CASE WHEN r.later_quarter IS NOT NULL
                                       THEN pg_catalog.format(E'Its next allocation starts on %s: until then its jobs\n'
                                                              'are refused and queued jobs are held.', hpcacct_internal.iso_date(r.later_quarter))
                                       WHEN r.kind = 'personal'
                                       THEN E'On that day the personal account expires: no batch jobs can be submitted\n'
                                            'with it, and one still expired a quarter later is deleted. Join an active\n'
                                            'project or ask your consultant for an allocation.'
                                       ELSE E'On that day the account expires: its jobs are refused and queued jobs are held.\n'
                                            'Ask for an allocation for the next quarter, or move credits to it, before then.' END,
                                  hpcacct_internal.ledger_figure(hpcacct_internal.balance_at_end(r.account, at)),
                                  hpcacct_internal.notify_name(bank_unit),
                                  hpcacct_internal.ledger_figure(r.alloc), hpcacct_internal.notify_name(bank_unit), hpcacct_internal.iso_date(next_q - 1),
                                  CASE WHEN r.later_quarter IS NOT NULL
                                       THEN pg_catalog.format(E'Next allocation:    %s\n', hpcacct_internal.iso_date(r.later_quarter)) ELSE '' END),
                pg_catalog.jsonb_build_object('at', at, 'quarter', q, 'allocation_ends', next_q - 1,
                                              'no_allocation_from', next_q, 'days_left', next_q - at,
                                              'next_allocation', r.later_quarter, 'allocation', r.alloc,
                                              'balance', hpcacct_internal.balance_at_end(r.account, at), 'unit', bank_unit),
                true);
            written := written + (id IS NOT NULL)::integer;
        END LOOP;
        RETURN written;
    END
    $$;
COMMENT ON FUNCTION @extschema@.notify_scan(date) IS
    'Writes messages for sliding-window quota state changes since the last notified one, for quarter balances '
    'below a site threshold (once per account, quarter, threshold and top-up) and for bank accounts whose allocation runs '
    'out within expiry_warning_days (once per account and expiry), each for the accounts its policy binds '
    '(account_policies); returns how many';

-- ---- the sender's protocol ----------------------------------------------------------------
--
-- 1. outbox_claim: recipients whose delivery is due, under a lease of the calling sender;
--    deliveries a sender left in 'sending' after its lease ran out become 'uncertain'.
-- 2. outbox_sending, committed before the SMTP server is told the message is complete (the
--    final dot): from here on the server may have it, so it is never sent again by itself.
--    It fails (false) when the lease was lost to another sender.
-- 3. outbox_result: delivered, retry (with back-off), failed or uncertain.
--
-- A mailbox gets one copy of a message, however many of its deliveries name it (users who share
-- an address, or took another's): a claim leases them together and returns one, whose sending
-- and result are recorded on all of them; one that names a mailbox which has the message
-- already (delivered, or uncertain) is not sent, and ends as that copy did. Each user's delivery
-- so ends as it would with her address alone: it shows nothing of other users' addresses.
--
-- Messages to a mailbox arrive in the order they were written (message_id, the order in which
-- they were inserted): a delivery is not claimed while one of an older message to the same mailbox is
-- pending or sending (a retry), unless the setting notify_order_wait (default 1 hour) has
-- passed since its own message was written: one message that cannot be delivered holds up the
-- newer ones that long, not for good.

-- Deliveries that wait, at a time, for an older message to their mailbox: pending while one
-- of an older message to the same mailbox is pending or sending, until notify_order_wait
-- (order_wait) has passed since their own message was written; waits_for is the oldest such
-- message. The one definition for outbox_claim, outbox_next_due and outbox_status; a
-- SQL-standard body without SET options, which the planner inlines into them.
CREATE FUNCTION hpcacct_internal.outbox_waiting (order_wait interval, at timestamptz)
    RETURNS TABLE (recipient_id bigint, waits_for bigint)
    LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT d.recipient_id, d.oldest
    FROM (SELECT r.recipient_id,
                 -- the mailbox's oldest message still to be delivered, if older: one probe of
                 -- outbox_recipient_open per delivery, whatever the planner expects (a join of the
                 -- deliveries with those grouped by mailbox, planned for one row where there were
                 -- 20 000, compared them pair by pair: 56 s a claim)
                 (SELECT min(o.message_id) FROM @extschema@.outbox_recipient o
                  WHERE o.mailbox = r.mailbox AND o.state IN ('pending', 'sending') AND o.message_id < r.message_id) AS oldest
          FROM @extschema@.outbox_recipient r
          JOIN @extschema@.outbox m ON m.message_id = r.message_id
          -- (elapsed time against the wait, its days 24 hours: not a day of the session's TimeZone)
          WHERE r.state = 'pending' AND at - m.created_at < order_wait) d
    WHERE d.oldest IS NOT NULL;
END;
COMMENT ON FUNCTION hpcacct_internal.outbox_waiting(interval, timestamptz) IS
    'Pending deliveries that wait at a time for an older message to their mailbox (up to order_wait after '
    'their own was written), with the oldest such message';

-- No JIT (nor in outbox_next_due()): with 20 000 deliveries pending, the claim's statement is
-- costed past jit_above_cost, and compiling it took 0.63 s of a claim that found nothing to send.
-- Statistics first: outbox_analyze().
CREATE FUNCTION @extschema@.outbox_claim(worker text, lease interval DEFAULT '5 minutes', batch integer DEFAULT 50)
    RETURNS TABLE (recipient_id bigint, message_id bigint, address text, display_name text, subject text,
                   body text, created_at timestamptz, attempts integer)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    SET jit = off
    AS $$
    DECLARE
        order_wait constant interval := @extschema@.setting_value('notify_order_wait')::interval;
        now_ timestamptz;
    BEGIN
        IF worker IS NULL OR lease IS NULL OR batch IS NULL THEN
            RAISE EXCEPTION 'outbox_claim needs a worker, a lease and a batch size' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF lease <= interval '0' OR batch < 1 THEN
            RAISE EXCEPTION 'outbox_claim needs a positive lease and batch size' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        PERFORM hpcacct_internal.outbox_analyze();
        UPDATE @extschema@.outbox_recipient r
        SET state = 'uncertain', lease_owner = NULL, lease_until = NULL,
            last_error = pg_catalog.format('sender %s stopped while sending (lease until %s): not sent again',
                                           r.lease_owner, hpcacct_internal.iso_instant(r.lease_until))
        WHERE r.state = 'sending' AND r.lease_until < pg_catalog.clock_timestamp();
        -- a due delivery to a mailbox that has its message (delivered, or maybe: uncertain) is not
        -- sent again: it ends as that copy did
        UPDATE @extschema@.outbox_recipient r
        SET state = c.has, lease_owner = NULL, lease_until = NULL, attempts = r.attempts + 1,
            delivered_at = CASE WHEN c.has = 'delivered' THEN pg_catalog.clock_timestamp() END,
            last_error = CASE WHEN c.has = 'uncertain' THEN 'not sent: its mailbox may have the message already (uncertain)' END
        FROM (SELECT d.recipient_id,
                     (SELECT min(o.state) FROM @extschema@.outbox_recipient o
                      WHERE o.message_id = d.message_id AND o.mailbox = d.mailbox AND o.state IN ('delivered', 'uncertain')) AS has
              FROM @extschema@.outbox_recipient d
              WHERE d.state = 'pending' AND d.next_attempt <= pg_catalog.clock_timestamp()
                AND (d.lease_until IS NULL OR d.lease_until < pg_catalog.clock_timestamp())
                AND EXISTS (SELECT 1 FROM @extschema@.outbox_recipient o
                            WHERE o.message_id = d.message_id AND o.mailbox = d.mailbox AND o.state IN ('delivered', 'uncertain'))
              FOR UPDATE OF d SKIP LOCKED) c
        WHERE r.recipient_id = c.recipient_id;
        now_ := pg_catalog.clock_timestamp();
        RETURN QUERY
        WITH due AS (
            -- of a message's deliveries to one mailbox, the first due (the others go with it);
            -- none while one of them is leased or being sent
            SELECT r.recipient_id, r.message_id, r.mailbox
            FROM @extschema@.outbox_recipient r
            -- the first due of them, grouped once (an anti join on the others due compared each
            -- pair of a mailbox's deliveries: a message to many users who share the mailbox)
            JOIN (SELECT min(o.recipient_id) AS first
                  FROM @extschema@.outbox_recipient o
                  WHERE o.state = 'pending' AND o.next_attempt <= now_
                    AND (o.lease_until IS NULL OR o.lease_until < now_)
                  GROUP BY o.message_id, o.mailbox) f ON f.first = r.recipient_id
            WHERE r.state = 'pending' AND r.next_attempt <= now_
              AND (r.lease_until IS NULL OR r.lease_until < now_)
              -- in the order written: not while an older message to the mailbox is to be delivered
              AND NOT EXISTS (SELECT 1 FROM hpcacct_internal.outbox_waiting(order_wait, now_) w
                              WHERE w.recipient_id = r.recipient_id)
              -- nor when the mailbox has the message (a delivery moved there after the first
              -- UPDATE above read: the next claim ends it)
              AND NOT EXISTS (SELECT 1 FROM @extschema@.outbox_recipient o
                              WHERE o.message_id = r.message_id AND o.mailbox = r.mailbox AND o.recipient_id <> r.recipient_id
                                AND (o.state IN ('sending', 'delivered', 'uncertain')
                                     OR (o.state = 'pending' AND o.lease_until >= now_)))
            ORDER BY r.next_attempt, r.recipient_id
            LIMIT batch
            FOR UPDATE OF r SKIP LOCKED
        ), claimed AS (
            -- with the deliveries to its mailbox due and not leased (one in its own back-off
            -- keeps it: when due, it finds the mailbox has the message, above), but those
            -- another claim has locked: two claims that each took a different delivery of one
            -- copy as its first waited for each other (40P01); each now leases what it could
            -- lock, and outbox_sending() lets one of them send the copy
            UPDATE @extschema@.outbox_recipient r
            SET lease_owner = worker, lease_until = hpcacct_internal.shift_utc(pg_catalog.clock_timestamp(), lease), attempts = r.attempts + 1
            FROM (SELECT o.recipient_id, d.recipient_id AS first
                  FROM due d
                  JOIN @extschema@.outbox_recipient o ON o.message_id = d.message_id AND o.mailbox = d.mailbox
                  WHERE o.state = 'pending' AND o.next_attempt <= now_ AND (o.lease_until IS NULL OR o.lease_until < now_)
                  FOR UPDATE OF o SKIP LOCKED) l
            WHERE r.recipient_id = l.recipient_id
            RETURNING r.*, l.first
        )
        -- (one copy: the display name its users share, else none)
        SELECT c.recipient_id, c.message_id, c.address,
               (SELECT CASE WHEN count(DISTINCT k.display_name) = 1 AND count(k.display_name) = count(*)
                            THEN min(k.display_name) END
                FROM claimed o LEFT JOIN @extschema@.contact k ON k.username = o.username
                WHERE o.first = c.first),
               m.subject, m.body, m.created_at, c.attempts
        FROM claimed c
        JOIN @extschema@.outbox m ON m.message_id = c.message_id
        WHERE c.recipient_id = c.first
        ORDER BY c.message_id, c.recipient_id;
    END
    $$;
COMMENT ON FUNCTION @extschema@.outbox_claim(text, interval, integer) IS
    'Sender: leases up to batch due deliveries to worker, oldest message first, one copy per message and mailbox (the '
    'others due to the mailbox leased with it), none while an older message to its mailbox is to be delivered (up to '
    'notify_order_wait); ends a due delivery whose mailbox has the message as that copy did, and one left in sending '
    'past its lease uncertain; the lease''s days are 24 hours';

-- When the next delivery is due (a sender sleeps until then): the earliest next attempt or
-- lease end of those to be made, a delivery that waits for an older message counted from
-- when its wait ends (or when the older one is due). NULL: nothing to deliver. Volatile: it may
-- analyze the deliveries first, as a claim does.
CREATE FUNCTION @extschema@.outbox_next_due() RETURNS timestamptz
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    SET jit = off
    AS $$
    DECLARE
        order_wait constant interval := @extschema@.setting_value('notify_order_wait')::interval;
        now_ constant timestamptz := pg_catalog.clock_timestamp();
    BEGIN
        PERFORM hpcacct_internal.outbox_analyze();
        -- (the wait's days 24 hours, as outbox_waiting() counts them: shift_utc()); a delivery
        -- to a mailbox whose copy of the message is leased or being sent not before that lease
        -- ends (outbox_claim() gives it to nobody meanwhile)
        RETURN (SELECT min(greatest(CASE WHEN w.recipient_id IS NOT NULL
                                         THEN greatest(r.next_attempt, hpcacct_internal.shift_utc(m.created_at, order_wait))
                                         ELSE greatest(r.next_attempt, coalesce(r.lease_until, r.next_attempt)) END,
                                    h.held))
                FROM @extschema@.outbox_recipient r
                JOIN @extschema@.outbox m ON m.message_id = r.message_id
                LEFT JOIN hpcacct_internal.outbox_waiting(order_wait, now_) w
                       ON w.recipient_id = r.recipient_id
                LEFT JOIN (SELECT o.message_id, o.mailbox, max(o.lease_until) AS held
                           FROM @extschema@.outbox_recipient o
                           WHERE o.state = 'sending' OR (o.state = 'pending' AND o.lease_until >= now_)
                           GROUP BY o.message_id, o.mailbox) h
                       ON h.message_id = r.message_id AND h.mailbox = r.mailbox
                WHERE r.state IN ('pending', 'sending'));
    END
    $$;
COMMENT ON FUNCTION @extschema@.outbox_next_due() IS
    'Sender: when the next delivery is due (a wait for an older message to its mailbox included); NULL: none';

CREATE FUNCTION @extschema@.outbox_sending(worker text, recipient bigint) RETURNS boolean
    LANGUAGE sql
    SET search_path = pg_catalog, pg_temp
    AS $$
        -- One copy per mailbox whatever the claims' timing (two claims whose snapshots each
        -- missed the other's lease can lease two deliveries of one copy): every delivery of the
        -- message to the mailbox is locked, in one order, so that senders commit to its copy one
        -- at a time; the next statement, with a snapshot taken after, refuses when another is
        -- being sent or has been. (Row locks, not advisory ones, which any login may take.)
        SELECT count(*) FROM (
            SELECT 1 FROM @extschema@.outbox_recipient o
            WHERE (o.message_id, o.mailbox) = (SELECT l.message_id, l.mailbox FROM @extschema@.outbox_recipient l
                                               WHERE l.recipient_id = recipient)
            ORDER BY o.recipient_id
            FOR UPDATE) g;
        -- the delivery and those to its mailbox that worker leased with it
        WITH s AS (
            UPDATE @extschema@.outbox_recipient r SET state = 'sending'
            WHERE (r.message_id, r.mailbox) = (SELECT l.message_id, l.mailbox FROM @extschema@.outbox_recipient l
                                               WHERE l.recipient_id = recipient AND l.state = 'pending' AND l.lease_owner = worker
                                                 AND l.lease_until > pg_catalog.clock_timestamp())
              AND r.state = 'pending' AND r.lease_owner = worker AND r.lease_until > pg_catalog.clock_timestamp()
              AND NOT EXISTS (SELECT 1 FROM @extschema@.outbox_recipient o
                              WHERE o.message_id = r.message_id AND o.mailbox = r.mailbox
                                AND o.state IN ('sending', 'delivered', 'uncertain'))
            RETURNING r.recipient_id
        )
        SELECT EXISTS (SELECT 1 FROM s WHERE s.recipient_id = recipient)
    $$;
COMMENT ON FUNCTION @extschema@.outbox_sending(text, bigint) IS
    'Sender: records that the SMTP transaction is about to complete (on the deliveries to the mailbox leased with it); '
    'false when worker no longer holds the lease, or when the mailbox''s copy is being sent or has been';

CREATE FUNCTION @extschema@.outbox_result(worker text, recipient bigint, outcome text, error text DEFAULT NULL,
                                          retry_base interval DEFAULT '1 minute',
                                          retry_max interval DEFAULT '1 hour')
    RETURNS boolean
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        done boolean;
    BEGIN
        IF outcome IS NULL OR outcome NOT IN ('delivered', 'retry', 'failed', 'uncertain') THEN
            RAISE EXCEPTION 'unknown delivery outcome "%"', outcome
                USING ERRCODE = 'invalid_parameter_value', HINT = 'Use delivered, retry, failed or uncertain.';
        END IF;
        IF retry_base IS NULL OR retry_max IS NULL THEN
            RAISE EXCEPTION 'outbox_result needs a retry_base and a retry_max'
                USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF retry_base < interval '0' OR retry_max < interval '0' THEN
            RAISE EXCEPTION 'outbox_result: retry_base and retry_max must not be negative'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- the delivery, locked first, and those to its mailbox that worker leased with it
        WITH u AS (
            UPDATE @extschema@.outbox_recipient r
            SET state = CASE outcome WHEN 'retry' THEN 'pending' ELSE outcome END,
                next_attempt = CASE WHEN outcome = 'retry'
                                    THEN hpcacct_internal.shift_utc(pg_catalog.clock_timestamp(),
                                             least(retry_max, retry_base * pg_catalog.power(2, least(greatest(r.attempts - 1, 0), 30))))
                                    ELSE r.next_attempt END,
                delivered_at = CASE WHEN outcome = 'delivered' THEN pg_catalog.clock_timestamp() END,
                last_error = error, lease_owner = NULL, lease_until = NULL
            WHERE (r.message_id, r.mailbox) = (SELECT l.message_id, l.mailbox FROM @extschema@.outbox_recipient l
                                               WHERE l.recipient_id = recipient AND l.lease_owner = worker
                                                 AND l.state IN ('pending', 'sending')
                                               FOR UPDATE)
              AND r.lease_owner = worker AND r.state IN ('pending', 'sending')
            RETURNING r.recipient_id
        )
        SELECT EXISTS (SELECT 1 FROM u WHERE u.recipient_id = recipient) INTO done;
        RETURN done;
    END
    $$;
COMMENT ON FUNCTION @extschema@.outbox_result(text, bigint, text, text, interval, interval) IS
    'Sender: records a delivery''s outcome (delivered, retry after base * 2^(attempts-1) up to max, failed, uncertain), '
    'on the deliveries to its mailbox leased with it too; spans in days of 24 hours, NULL 22004, negative 22023; false '
    'when worker does not hold the lease';

-- What a site watches: every message with its deliveries.
CREATE VIEW @extschema@.outbox_status AS
    SELECT m.message_id, m.topic, m.account, m.subject, m.created_at,
           r.recipient_id, r.username, r.address, coalesce(r.state, 'no_recipient') AS state, r.attempts,
           r.next_attempt, r.last_error, r.delivered_at, w.waits_for AS waiting_for
    FROM @extschema@.outbox m
    LEFT JOIN @extschema@.outbox_recipient r ON r.message_id = m.message_id
    LEFT JOIN hpcacct_internal.outbox_waiting(@extschema@.setting_value('notify_order_wait')::interval,
                                              pg_catalog.statement_timestamp()) w ON w.recipient_id = r.recipient_id;
COMMENT ON VIEW @extschema@.outbox_status IS
    'Messages with their deliveries; state no_recipient for a message nobody with an address was to receive';

-- What keeps the outbox in check: a message and its deliveries are kept while any delivery
-- is to be made or uncertain, and for keep after it was written. Deleted: the messages of
-- the hold trigger and of notify_scan, whose decisions do not recur (a job's hold at an
-- instant; a scan's day or quarter, before the quarter of the last scan, which a scan cannot
-- come back to: keep is at least a quarter). Kept: those of regulation_log and quarter_log, one per log row, which a restore of the log
-- would write again (and send) without them.
-- The last day a scheduled run ran for (run_day is the owner's).
CREATE FUNCTION hpcacct_internal.last_run_day(run text) RETURNS date
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$ SELECT r.last_day FROM hpcacct_internal.run_day r WHERE r.run = last_run_day.run $$;
COMMENT ON FUNCTION hpcacct_internal.last_run_day(text) IS
    'The latest day a scheduled run that goes in date order ran for; NULL: never';
REVOKE EXECUTE ON FUNCTION hpcacct_internal.last_run_day(text) FROM PUBLIC;

CREATE FUNCTION @extschema@.outbox_prune(keep interval DEFAULT '1 year') RETURNS bigint
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        ids bigint[];
        last_scan constant date := hpcacct_internal.last_run_day('notify_scan');
        scan_floor timestamptz;
        cutoff timestamptz;
    BEGIN
        IF keep IS NULL THEN
            RAISE EXCEPTION 'outbox_prune needs how long to keep messages' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        -- (a month counts 30 days, a day 24 hours, whatever the session's TimeZone)
        IF keep < interval '92 days' THEN
            RAISE EXCEPTION 'outbox_prune keeps messages at least 92 days (a quarter), not %', keep
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'notify_scan tells a balance once per quarter by the message it finds.';
        END IF;
        BEGIN
            cutoff := hpcacct_internal.shift_utc(pg_catalog.now(), -keep);
        EXCEPTION WHEN datetime_field_overflow THEN
            RETURN 0;  -- a keep that reaches before the earliest instant: nothing is that old
        END;
        -- a scan's messages once scans have left their quarter (the scan of the last day, run
        -- again, finds its quarter's messages)
        scan_floor := CASE WHEN last_scan IS NULL THEN '-infinity'
                           ELSE @extschema@.quarter_start(last_scan)::timestamp AT TIME ZONE @extschema@.site_timezone() END;
        ids := ARRAY(SELECT m.message_id FROM @extschema@.outbox m
                     WHERE m.created_at < cutoff
                       AND (m.topic IN ('job_held', 'job_released')
                            OR (m.topic IN ('quota_state', 'balance_low', 'account_expiry') AND m.created_at < scan_floor))
                       AND NOT EXISTS (SELECT 1 FROM @extschema@.outbox_recipient r
                                       WHERE r.message_id = m.message_id AND r.state IN ('pending', 'sending', 'uncertain'))
                     ORDER BY m.message_id
                     FOR UPDATE OF m);
        DELETE FROM @extschema@.outbox_recipient r WHERE r.message_id = ANY (ids);
        DELETE FROM @extschema@.outbox m WHERE m.message_id = ANY (ids);
        RETURN pg_catalog.cardinality(ids);
    END
    $$;
COMMENT ON FUNCTION @extschema@.outbox_prune(interval) IS
    'Deletes hold messages, and scan messages before the last scan''s quarter, written more than keep ago (at least '
    '92 days; default 1 year) with their deliveries, when none is pending, sending or uncertain; keeps regulation and '
    'quarter messages; returns how many; 22004, 22023';

REVOKE EXECUTE ON FUNCTION
    @extschema@.outbox_prune(interval),
    @extschema@.outbox_add_all(jsonb),
    @extschema@.outbox_add(text, text, text, text, text, jsonb, boolean, text[]),
    @extschema@.notify_scan(date),
    @extschema@.outbox_claim(text, interval, integer),
    @extschema@.outbox_next_due(),
    @extschema@.outbox_sending(text, bigint),
    @extschema@.outbox_result(text, bigint, text, text, interval, interval)
    FROM PUBLIC;

-- Row-level security as for every table naming an account or a user (protect_table): portal
-- users see their accounts' messages (below: a job's message as the job), their own deliveries
-- and their accounts' quota states.
-- contact has its own policy above (reading and writing one's own row only).
SELECT hpcacct_internal.protect_table(t)
FROM pg_catalog.unnest(ARRAY['@extschema@.outbox', '@extschema@.outbox_recipient',
                             '@extschema@.quota_state_notified']::regclass[]) AS t;
-- A message about a person's job: that person reads it, and the account's members when the job
-- named the account (pending_job shows it to them then); a job of no account is its owner's.
ALTER POLICY member_rows ON @extschema@.outbox
    USING ((SELECT hpcacct_internal.sees_all_accounts('@extschema@.outbox')) OR job_owner = pg_catalog.session_user()
           OR (NOT owner_only AND account = ANY ((SELECT hpcacct_internal.visible_accounts())::text[])));
ALTER VIEW @extschema@.account_recipient SET (security_invoker = true);
ALTER VIEW @extschema@.outbox_status SET (security_invoker = true);

-- updated_at follows every change of a contact
CREATE FUNCTION hpcacct_internal.contact_touch() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        NEW.updated_at := pg_catalog.statement_timestamp();
        RETURN NEW;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.contact_touch() IS 'Trigger: sets contact.updated_at on every change';
CREATE TRIGGER contact_touch BEFORE UPDATE ON @extschema@.contact
    FOR EACH ROW EXECUTE FUNCTION hpcacct_internal.contact_touch();

-- ---- deliveries follow their users until they are sent -----------------------------------
-- A delivery is written with its message; it may wait (the server down for a day, an older
-- message to its mailbox). Until a sender commits to it ('sending'), it goes where the contact
-- and the membership say: a user who leaves the account is not sent its messages (those about
-- their own job excepted), a silenced or deleted contact none, a changed address the new one
-- (whoever else has it: the sender sends a mailbox one copy, outbox_claim). A lease on a changed delivery is dropped, so that its sender, which read the old address,
-- cannot complete it (outbox_sending() is false) and the next claim reads the new one.

-- At commit (a deferred trigger): a membership deleted and added again in one transaction
-- never ended for anyone else, and keeps its deliveries. With the owner's rights: at commit it
-- runs as the session's role, outside remove_member(), and a project administrator's portal
-- login may not write deliveries; this writes only the leaving user's pending ones.
CREATE FUNCTION hpcacct_internal.outbox_withdraw_member() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF EXISTS (SELECT 1 FROM @extschema@.membership s WHERE s.account = OLD.account AND s.username = OLD.username) THEN
            RETURN NULL;
        END IF;
        -- waits for a message being written to them, and holds new ones back (outbox_add_all())
        PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('hpcacct.outbox_reach'), pg_catalog.hashtext(OLD.username) & 127);
        UPDATE @extschema@.outbox_recipient r
        SET state = 'withdrawn', lease_owner = NULL, lease_until = NULL,
            last_error = pg_catalog.format('not sent: %s left account %s at %s', r.username, m.account,
                                           hpcacct_internal.iso_instant(pg_catalog.statement_timestamp()))
        FROM @extschema@.outbox m
        WHERE r.username = OLD.username AND r.state = 'pending'
          AND m.message_id = r.message_id AND m.account = OLD.account AND m.job_owner IS DISTINCT FROM r.username;
        RETURN NULL;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.outbox_withdraw_member() IS
    'Trigger: a user who leaves an account is not sent its pending messages (but those about their own job)';
REVOKE EXECUTE ON FUNCTION hpcacct_internal.outbox_withdraw_member() FROM PUBLIC;
CREATE CONSTRAINT TRIGGER outbox_withdraw_member AFTER DELETE ON @extschema@.membership
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION hpcacct_internal.outbox_withdraw_member();

-- With the owner's rights: a portal user changes their own contact (own_contact) and may not
-- write deliveries; this writes only that contact's pending ones.
CREATE FUNCTION hpcacct_internal.contact_follow() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        why text;
    BEGIN
        IF TG_OP = 'DELETE' THEN
            why := 'its contact was deleted';
        ELSIF NOT NEW.notify THEN
            why := 'its contact was silenced';
        ELSIF NEW.username IS DISTINCT FROM OLD.username THEN
            why := 'its contact was moved to another user';
        END IF;
        -- waits for a message being written to them, and holds new ones back (outbox_add_all())
        PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('hpcacct.outbox_reach'), pg_catalog.hashtext(OLD.username) & 127);
        IF why IS NOT NULL THEN
            UPDATE @extschema@.outbox_recipient r
            SET state = 'withdrawn', lease_owner = NULL, lease_until = NULL,
                last_error = pg_catalog.format('not sent: %s at %s', why,
                                               hpcacct_internal.iso_instant(pg_catalog.statement_timestamp()))
            WHERE r.username = OLD.username AND r.state = 'pending';
        ELSIF NEW.email IS DISTINCT FROM OLD.email THEN
            -- (not withdrawn when another recipient has the address: that would tell its user so)
            UPDATE @extschema@.outbox_recipient r
            SET address = NEW.email, lease_owner = NULL, lease_until = NULL
            WHERE r.username = OLD.username AND r.state = 'pending';
        END IF;
        RETURN NULL;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.contact_follow() IS
    'Trigger: a contact''s pending deliveries go to its new address; silenced or deleted: withdrawn';
REVOKE EXECUTE ON FUNCTION hpcacct_internal.contact_follow() FROM PUBLIC;
-- At commit (deferred): the lock that orders it with the writers of messages is held only
-- while the change commits, not while a portal user's transaction stays open.
CREATE CONSTRAINT TRIGGER contact_follow AFTER UPDATE OF email, notify, username OR DELETE ON @extschema@.contact
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION hpcacct_internal.contact_follow();

-- ---- the sender's role ---------------------------------------------------------------------
-- hpcacct-notify connects as a member of hpcacct_notify (99_roles.sql), which reads the
-- deliveries and writes their state, nothing else: it sees every delivery, the messages'
-- subjects and bodies and the display names, which its claim reads, through the policies
-- below (not sees_all_accounts(), which would show it every account's rows where it is granted).
-- Only a role that holds hpcacct_notify's privileges and not a portal user's: a portal user's
-- grants are every column, its rows its own, and with the sender's rows would read every
-- account's messages and figures and every contact's address (a portal login in the mail role
-- sends after SET ROLE hpcacct_notify).
CREATE FUNCTION hpcacct_internal.sends_mail() RETURNS boolean
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        RETURN EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                       WHERE r.rolname = 'hpcacct_notify'
                         AND pg_catalog.pg_has_role(pg_catalog.current_user(), r.oid, 'USAGE'))
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                           WHERE r.rolname = 'hpcacct_portal'
                             AND pg_catalog.pg_has_role(pg_catalog.current_user(), r.oid, 'USAGE'));
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.sends_mail() IS
    'True for roles with hpcacct_notify''s privileges (the mail sender) and not a portal user''s, who read every '
    'delivery and its message';
CREATE POLICY sender_rows ON @extschema@.outbox FOR SELECT USING ((SELECT hpcacct_internal.sends_mail()));
CREATE POLICY sender_rows ON @extschema@.outbox_recipient FOR SELECT USING ((SELECT hpcacct_internal.sends_mail()));
CREATE POLICY sender_rows ON @extschema@.contact FOR SELECT USING ((SELECT hpcacct_internal.sends_mail()));
