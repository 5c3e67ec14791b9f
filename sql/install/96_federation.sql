-- ---------------------------------------------------------------------------------------
-- Federation (issue 17): many clusters, one bank. One central database holds the reference
-- data (accounts, users, memberships, resources, settings) and every ledger row that is not
-- a job's charge; one database per cluster site charges its own jobs and answers its own
-- submit checks. PostgreSQL's logical replication carries the rows:
--   centre -> every site   reference tables, and the ledger rows of every origin but the site's
--   site k -> centre       the ledger rows that site k booked (its charges)
-- A ledger row's origin is in its id: site k numbers its entries from k * 2^48 (the centre,
-- site 0, from 1), so ids never collide and a row filter on entry_id keeps every row from
-- flowing back to where it came from (PostgreSQL 15 has no `origin = none`).
-- ---------------------------------------------------------------------------------------

-- At the centre: the cluster sites it publishes to.
CREATE TABLE @extschema@.federation_site (
    site     integer PRIMARY KEY CHECK (site BETWEEN 1 AND 32767),
    name     text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9_]{1,40}$'),
    added_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE @extschema@.federation_site IS
    'At the centre: the cluster sites of the federation, by number (1 to 32767) and name';

-- What each receiving end of a link reports it holds: database `receiver` (a site number, 0
-- for the centre) has received the ledger rows of `origin` up to last_entry_id. Written by the
-- receiver's apply session as it inserts received rows (note_replicated_charge,
-- roll_up_received) and replicated back to the sender in the link's reverse direction: the
-- centre's reports go to the site they are about (origin = that site), a site's to the centre.
-- So a sender counts the rows it has sent that are not yet received without asking the other
-- end (federation_status.rows_pending). At most one report a second per receiver and origin
-- (federation_report_due): each costs the sender an applied transaction, as much CPU as its
-- walsender spends on a one-job transaction. Not dumped: the next received row writes it again.
CREATE TABLE @extschema@.federation_received (
    receiver      integer NOT NULL CHECK (receiver BETWEEN 0 AND 32767),
    origin        integer NOT NULL CHECK (origin BETWEEN 0 AND 32767),
    last_entry_id bigint NOT NULL,
    received_at   timestamptz NOT NULL,
    PRIMARY KEY (receiver, origin)
);
COMMENT ON TABLE @extschema@.federation_received IS
    'Per federation database and origin site: the last ledger row that database received from that origin '
    '(written where received, replicated back to the sender)';

SELECT pg_catalog.pg_extension_config_dump('@extschema@.federation_site', '');

-- The ledger ids a site books: [site * 2^48, (site + 1) * 2^48), the centre's from 1. Sites
-- are 0 to 32767 (22023 otherwise, as federation_prepare() says it).
CREATE FUNCTION @extschema@.federation_id_range(site integer) RETURNS int8range
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN CASE WHEN site BETWEEN 0 AND 32767 OR hpcacct_internal.refuse_argument(site, 'federation_id_range', 'site')
                THEN pg_catalog.int8range(CASE WHEN site = 0 THEN 1 ELSE site::bigint * 281474976710656 END,
                                          (site::bigint + 1) * 281474976710656) END;
COMMENT ON FUNCTION @extschema@.federation_id_range(integer) IS
    'The ledger entry ids a federation site books: [site * 2^48, (site + 1) * 2^48); the centre (0) from 1; '
    'a site outside 0 to 32767 is an error (22023)';

-- The site that booked a ledger row, from its id.
CREATE FUNCTION @extschema@.federation_origin(entry_id bigint) RETURNS integer
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN (entry_id / 281474976710656)::integer;
COMMENT ON FUNCTION @extschema@.federation_origin(bigint) IS
    'The federation site (0: the centre) that booked the ledger row with this id';

-- The tables the centre publishes to every site as they are (inserts, updates, deletes):
-- the reference data charging, the loader (load_sacct: slurm_account_map), check_submit and
-- the site's reports read. The ledger is published apart, per site, with a row filter;
-- rollups are derived where they are read; logs of scheduled runs (regulation_log,
-- quarter_log) stay at the centre, which runs them, and so do the notifications' tables
-- (contacts, outbox): the centre sends them; jobs, pending jobs and the loader's own tables
-- (staging, quarantine, watermarks) stay at their site. Names are cast when it is called:
-- some of the tables are created after this file.
CREATE FUNCTION @extschema@.federation_reference_tables() RETURNS regclass[]
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT ARRAY['@extschema@.setting', '@extschema@.account', '@extschema@.resource',
                     '@extschema@.hpc_user', '@extschema@.membership', '@extschema@.regulation_machine',
                     '@extschema@.exoneration', '@extschema@.quota_period', '@extschema@.monthly_allowance',
                     '@extschema@.pool', '@extschema@.fairshare_user',
                     '@extschema@.slurm_account_map']::text[]::regclass[]
    $$;
COMMENT ON FUNCTION @extschema@.federation_reference_tables() IS
    'The reference tables the centre publishes to every site (written at the centre only)';

-- Whether a receiver reports the rows of an origin it received now: when it has not reported
-- them in the last second, or did in this transaction (a later row of it moves the report on).
-- Read without locking the report row (an ON CONFLICT ... WHERE would lock it, in the WAL).
CREATE FUNCTION hpcacct_internal.federation_report_due(receiver integer, origin integer) RETURNS boolean
    LANGUAGE sql STABLE STRICT
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT NOT EXISTS (SELECT 1 FROM @extschema@.federation_received p
                           WHERE p.receiver = federation_report_due.receiver AND p.origin = federation_report_due.origin
                             AND p.received_at > pg_catalog.now() - interval '1 second'
                             AND p.received_at < pg_catalog.now())
    $$;
COMMENT ON FUNCTION hpcacct_internal.federation_report_due(integer, integer) IS
    'Whether this database reports now the rows of an origin it received (at most one report a second)';

-- The rollups of replicated charges. Logical replication applies rows one by one with
-- session_replication_role = replica, which fires neither the statement trigger
-- ledger_roll_up nor any ordinary trigger. So a BEFORE row trigger enabled for replica
-- sessions only (ENABLE REPLICA) holds each received charge back in a temporary table of the
-- applying session, pg_temp.hpcacct_received (created on its first use), and a deferred
-- constraint trigger on that table, fired once at the commit of the
-- received transaction, inserts them all into the ledger in one statement and rolls them up
-- with the statement trigger's own statements. So every row is rolled up exactly once: by
-- ledger_roll_up when booked here, by this pair when received. Set-based because row by row
-- is slow: the apply worker builds a fresh executor state for every row it applies, and so
-- parses and compiles the ledger's CHECK constraints again for each one (43 % of the
-- centre's apply), and a row-by-row rollup applied about 5 300 rows/s here. Temporary, not
-- a shared table: each apply worker sees only its own rows, and can truncate the table when
-- the dead versions of the rows it deleted fill more than 8 pages (later scans read them;
-- autovacuum does not clean temporary tables). Truncated then, at the first charge of a
-- transaction, not at every commit (ON COMMIT DELETE ROWS): that truncation, its file system
-- calls and the rebuild of the TOAST index, took a third of a one-job transaction's apply.
-- Other ledger rows (deposits, grants, ...) are applied as they come.
CREATE FUNCTION hpcacct_internal.note_replicated_charge() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        first boolean;
    BEGIN
        -- the held charges roll_up_received() inserts (a trigger's statement) go in
        IF pg_catalog.pg_trigger_depth() > 1 THEN
            RETURN NEW;
        END IF;
        -- other kinds go in as they come (rare: deposits, grants, retractions), reported received
        IF NEW.kind <> 'charge' THEN
            INSERT INTO @extschema@.federation_received AS p (receiver, origin, last_entry_id, received_at)
            SELECT n.site, @extschema@.federation_origin(NEW.entry_id), NEW.entry_id, pg_catalog.now()
            FROM @extschema@.federation_node n
            WHERE hpcacct_internal.federation_report_due(n.site, @extschema@.federation_origin(NEW.entry_id))
            ON CONFLICT (receiver, origin) DO UPDATE
                SET last_entry_id = GREATEST(p.last_entry_id, excluded.last_entry_id), received_at = excluded.received_at;
            RETURN NEW;
        END IF;
        first := pg_catalog.current_setting('hpcacct.received_pending', true) IS DISTINCT FROM 'on';
        IF first THEN
            PERFORM pg_catalog.set_config('hpcacct.received_pending', 'on', true);
            IF pg_catalog.to_regclass('pg_temp.hpcacct_received') IS NULL THEN
                CREATE TEMPORARY TABLE hpcacct_received (
                    entry                @extschema@.ledger NOT NULL,
                    first_in_transaction boolean NOT NULL
                );
                CREATE CONSTRAINT TRIGGER hpcacct_received_roll_up AFTER INSERT ON pg_temp.hpcacct_received
                    DEFERRABLE INITIALLY DEFERRED
                    FOR EACH ROW WHEN (NEW.first_in_transaction) EXECUTE FUNCTION hpcacct_internal.roll_up_received();
                -- written in replica sessions only: fire there
                ALTER TABLE pg_temp.hpcacct_received ENABLE ALWAYS TRIGGER hpcacct_received_roll_up;
            ELSIF pg_catalog.pg_relation_size('pg_temp.hpcacct_received') > 8 * 8192 THEN
                TRUNCATE pg_temp.hpcacct_received;  -- empty: only dead rows of earlier transactions
            END IF;
        END IF;
        INSERT INTO pg_temp.hpcacct_received (entry, first_in_transaction) VALUES (NEW, first);
        RETURN NULL;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.note_replicated_charge() IS
    'Row trigger of hpcacct.ledger for replicated rows (enabled for replica sessions only): holds received charges '
    'back until commit';
-- federation_prepare creates its trigger, ledger_roll_up_replicated, when this database joins a
-- federation, not before: a BEFORE INSERT row trigger, even one that does not fire, makes COPY
-- into the ledger (a restore) insert row by row instead of in batches.

-- Fires at commit for the first charge held in the transaction only (its WHEN clause), and
-- lowers the transaction's flag hpcacct.received_pending. Without JIT: the table is never
-- analyzed, the planner guesses thousands of rows, and compiling the plan cost 14 ms per
-- received transaction.
DO $do$
DECLARE
    received constant text := '(SELECT (r.entry).* FROM pg_temp.hpcacct_received r)';
BEGIN
    EXECUTE pg_catalog.format(
        'CREATE FUNCTION hpcacct_internal.roll_up_received() RETURNS trigger LANGUAGE plpgsql '
        'SET search_path = pg_catalog, pg_temp SET jit = off AS %L',
        pg_catalog.format(E'\n    BEGIN\n'
                          '        PERFORM pg_catalog.set_config(''hpcacct.received_pending'', ''off'', true);\n'
                          '        INSERT INTO @extschema@.ledger OVERRIDING SYSTEM VALUE\n'
                          '        SELECT (r.entry).* FROM pg_temp.hpcacct_received r ORDER BY (r.entry).entry_id;\n'
                          '%s;\n'
                          '%s;\n'
                          '        INSERT INTO @extschema@.federation_received AS p (receiver, origin, last_entry_id, received_at)\n'
                          '        SELECT n.site, @extschema@.federation_origin((r.entry).entry_id), pg_catalog.max((r.entry).entry_id),\n'
                          '               pg_catalog.now()\n'
                          '        FROM pg_temp.hpcacct_received r, @extschema@.federation_node n\n'
                          '        GROUP BY 1, 2\n'
                          '        HAVING hpcacct_internal.federation_report_due(n.site, @extschema@.federation_origin((r.entry).entry_id))\n'
                          '        ON CONFLICT (receiver, origin) DO UPDATE\n'
                          '            SET last_entry_id = GREATEST(p.last_entry_id, excluded.last_entry_id),\n'
                          '                received_at = excluded.received_at;\n'
                          '        DELETE FROM pg_temp.hpcacct_received;\n'
                          '        RETURN NULL;\n'
                          '    END\n    ',
                          hpcacct_internal.rollup_insert_sql(received), hpcacct_internal.consumption_rollup_insert_sql(received)));
END
$do$;
COMMENT ON FUNCTION hpcacct_internal.roll_up_received() IS
    'Deferred trigger of pg_temp.hpcacct_received: inserts the charges held in the transaction into the ledger and '
    'rolls them up, once';

-- At a site, reference data is the centre's: a row written there would not reach the
-- centre or the other sites, and the centre's own row of that key would later stop the
-- site's replication on a conflict. A row trigger on each reference table refuses writes
-- from the site's own sessions (HA013); rows applied by replication (replica sessions) pass.
-- federation_prepare creates the triggers at a site (also on tables a later version adds).
CREATE FUNCTION hpcacct_internal.federation_refuse_local_write() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        RAISE EXCEPTION '% is written at the federation''s centre, not at a site', TG_TABLE_NAME
            USING ERRCODE = 'HA013',
                  HINT = 'Make the change in the central database; it reaches every site by replication.';
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.federation_refuse_local_write() IS
    'Trigger of the reference tables at a federation site: refuses writes of the site''s own sessions (HA013)';

-- At a site, the ledger is written by charging (charge_jobs(), which runs as the extension's
-- owner) and by replication. A row booked by a site's own session otherwise (a deposit, a
-- grant, a charge of its own making) would reach the centre's bank and every site: a
-- statement trigger refuses it (HA013) unless the session's role is the owner or a superuser.
CREATE FUNCTION hpcacct_internal.federation_refuse_local_entry() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                       WHERE r.rolname = pg_catalog.current_user()
                         AND (r.rolsuper OR r.oid = (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = TG_RELID))) THEN
            RAISE EXCEPTION 'at a federation site the ledger is written by charging jobs only, not by role %',
                            pg_catalog.current_user()
                USING ERRCODE = 'HA013',
                      HINT = 'Book deposits, grants, transfers and corrections in the central database; they reach '
                             'every site by replication.';
        END IF;
        RETURN NULL;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.federation_refuse_local_entry() IS
    'Statement trigger of hpcacct.ledger at a federation site: refuses entries of the site''s own sessions but '
    'charging''s (HA013)';

-- Makes this database the centre (site 0) or site `site`: checks that it can be, records
-- it, narrows the ledger's id sequence to the site's range, and enables for replication the
-- triggers that must fire for replicated rows. Idempotent. Called by the procedures below.
CREATE FUNCTION @extschema@.federation_prepare(site integer, role text) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        node   @extschema@.federation_node;
        ids    int8range;  -- the site's, once the site is checked
        seq    constant text := pg_catalog.pg_get_serial_sequence('@extschema@.ledger', 'entry_id');
        stray  bigint;
        filled boolean;
        tab    regclass;
        trig   name;
        fires  "char";
    BEGIN
        IF site IS NULL OR role IS NULL THEN
            RAISE EXCEPTION 'site and role must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF role NOT IN ('centre', 'site') OR (role = 'centre') <> (site = 0) OR site NOT BETWEEN 0 AND 32767 THEN
            RAISE EXCEPTION 'invalid federation site % for role %', site, role
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'The centre is site 0; cluster sites are numbered 1 to 32767.';
        END IF;
        ids := @extschema@.federation_id_range(site);
        SELECT * INTO node FROM @extschema@.federation_node;
        IF FOUND AND (node.site <> site OR node.role <> role) THEN
            RAISE EXCEPTION 'this database is already federation % %, not % %', node.role, node.site, role, site
                USING ERRCODE = 'HA010', HINT = 'A database has one place in a federation.';
        END IF;
        IF NOT FOUND THEN
            -- ids booked before: they must lie in the range, or they would collide with another site's
            SELECT count(*) INTO stray FROM @extschema@.ledger l WHERE NOT ids @> l.entry_id;
            IF stray > 0 THEN
                RAISE EXCEPTION 'the ledger holds % entries outside site %''s id range %', stray, site, ids
                    USING ERRCODE = 'HA011',
                          HINT = CASE WHEN role = 'centre' THEN 'An existing database can become the centre only.'
                                      ELSE 'A site joins with an empty ledger.' END;
            END IF;
            IF role = 'site' THEN
                -- reference data comes from the centre; rows of its own would conflict with the copy
                FOREACH tab IN ARRAY @extschema@.federation_reference_tables() LOOP
                    EXECUTE pg_catalog.format('SELECT EXISTS (SELECT 1 FROM %s)', tab) INTO filled;
                    IF filled THEN
                        RAISE EXCEPTION 'a joining site must not hold reference data: % has rows', tab
                            USING ERRCODE = 'HA012',
                                  HINT = 'Accounts, users, resources and settings are written at the centre; '
                                         'join with the extension freshly created.';
                    END IF;
                END LOOP;
            END IF;
            INSERT INTO @extschema@.federation_node (site, role) VALUES (site, role);
        END IF;

        -- the ledger's ids: this site's range only (a sequence never wraps: it stops at the end)
        IF EXISTS (SELECT 1 FROM @extschema@.ledger l
                   WHERE l.entry_id >= pg_catalog.lower(ids) AND l.entry_id < pg_catalog.upper(ids)) THEN
            EXECUTE pg_catalog.format('ALTER SEQUENCE %s MINVALUE %s MAXVALUE %s START WITH %s', seq,
                                      pg_catalog.lower(ids), pg_catalog.upper(ids) - 1, pg_catalog.lower(ids));
        ELSE
            EXECUTE pg_catalog.format('ALTER SEQUENCE %s MINVALUE %s MAXVALUE %s START WITH %s RESTART WITH %s', seq,
                                      pg_catalog.lower(ids), pg_catalog.upper(ids) - 1, pg_catalog.lower(ids),
                                      pg_catalog.lower(ids));
        END IF;

        -- triggers that must fire for rows received: a rebuild of the rollups when the time
        -- zone or half-life they depend on changes, the roll-up of what is pending when the
        -- setting rollup returns to immediate, and the rollups of replicated charges. Each is
        -- altered only when it is not yet so (ALTER TABLE locks the table against writers), and
        -- setting before ledger: a worker copying or applying setting rows rebuilds the rollups,
        -- which locks the ledger; the other order deadlocked with it on a second join.
        -- (created on the first call only, before this database receives anything)
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                       WHERE t.tgrelid = '@extschema@.ledger'::regclass AND t.tgname = 'ledger_roll_up_replicated') THEN
            CREATE TRIGGER ledger_roll_up_replicated BEFORE INSERT ON @extschema@.ledger
                FOR EACH ROW EXECUTE FUNCTION hpcacct_internal.note_replicated_charge();
        END IF;
        FOR tab, trig, fires IN VALUES ('@extschema@.setting'::regclass, 'setting_rebuilds_rollup'::name, 'A'::"char"),
                                       ('@extschema@.setting', 'setting_rolls_up_pending', 'A'),
                                       ('@extschema@.ledger', 'ledger_roll_up_replicated', 'R') LOOP
            IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                           WHERE t.tgrelid = tab AND t.tgname = trig AND t.tgenabled = fires) THEN
                EXECUTE pg_catalog.format('ALTER TABLE %s ENABLE %s TRIGGER %I', tab,
                                          CASE fires WHEN 'A' THEN 'ALWAYS' ELSE 'REPLICA' END, trig);
            END IF;
        END LOOP;
        -- at a site, the reference tables are written by replication only, the ledger also by charging
        IF role = 'site' THEN
            IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                           WHERE t.tgrelid = '@extschema@.ledger'::regclass AND t.tgname = 'federation_charges_only') THEN
                CREATE TRIGGER federation_charges_only BEFORE INSERT ON @extschema@.ledger
                    FOR EACH STATEMENT EXECUTE FUNCTION hpcacct_internal.federation_refuse_local_entry();
            END IF;
            FOREACH tab IN ARRAY @extschema@.federation_reference_tables() LOOP
                IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                               WHERE t.tgrelid = tab AND t.tgname = 'federation_centre_only') THEN
                    EXECUTE pg_catalog.format('CREATE TRIGGER federation_centre_only BEFORE INSERT OR UPDATE OR DELETE '
                                              'ON %s FOR EACH ROW EXECUTE FUNCTION '
                                              'hpcacct_internal.federation_refuse_local_write()', tab);
                END IF;
            END LOOP;
        END IF;
    END
    $$;
REVOKE EXECUTE ON FUNCTION @extschema@.federation_prepare(integer, text) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.federation_prepare(integer, text) IS
    'Makes this database the federation centre (0) or a site: records it, narrows the ledger ids to its range, '
    'enables the triggers replicated rows need; idempotent';

-- Whether a logical replication slot exists in this cluster.
CREATE FUNCTION hpcacct_internal.federation_slot_exists(slot text) RETURNS boolean
    LANGUAGE sql STABLE STRICT
    SET search_path = pg_catalog, pg_temp
    AS $$ SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots s WHERE s.slot_name = slot) $$;
COMMENT ON FUNCTION hpcacct_internal.federation_slot_exists(text) IS 'Whether a replication slot of that name exists';

-- Whether publication `pub` of this database includes table `tab`.
CREATE FUNCTION hpcacct_internal.federation_publishes(pub text, tab regclass) RETURNS boolean
    LANGUAGE sql STABLE STRICT
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_publication_rel r JOIN pg_catalog.pg_publication p ON p.oid = r.prpubid
                       WHERE p.pubname = pub AND r.prrelid = tab)
    $$;
COMMENT ON FUNCTION hpcacct_internal.federation_publishes(text, regclass) IS
    'Whether the publication of that name includes the table';

-- Whether this database has a subscription of that name.
CREATE FUNCTION hpcacct_internal.federation_subscribed(sub text) RETURNS boolean
    LANGUAGE sql STABLE STRICT
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_subscription s
                       WHERE s.subname = sub AND s.subdbid = (SELECT d.oid FROM pg_catalog.pg_database d
                                                              WHERE d.datname = pg_catalog.current_database()))
    $$;
COMMENT ON FUNCTION hpcacct_internal.federation_subscribed(text) IS
    'Whether this database has a subscription of that name';

-- The tables of `tabs` that subscription `sub` does not receive (a refresh adds them), as a
-- list for a message; NULL when it receives them all.
CREATE FUNCTION hpcacct_internal.federation_not_received(sub text, tabs regclass[]) RETURNS text
    LANGUAGE sql STABLE STRICT
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT pg_catalog.string_agg(t::text, ', ')
        FROM pg_catalog.unnest(tabs) t
        WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_subscription_rel r
                          JOIN pg_catalog.pg_subscription s ON s.oid = r.srsubid
                          WHERE s.subname = sub AND r.srrelid = t)
    $$;
COMMENT ON FUNCTION hpcacct_internal.federation_not_received(text, regclass[]) IS
    'The listed tables the subscription does not receive, comma-separated; NULL when none';

-- Whether subscription `sub` receives no table at all: restored by pg_restore, which creates
-- subscriptions without their tables (and disabled).
CREATE FUNCTION hpcacct_internal.federation_receives_nothing(sub text) RETURNS boolean
    LANGUAGE sql STABLE STRICT
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT NOT EXISTS (SELECT 1 FROM pg_catalog.pg_subscription_rel r
                           JOIN pg_catalog.pg_subscription s ON s.oid = r.srsubid
                           WHERE s.subname = sub)
    $$;
COMMENT ON FUNCTION hpcacct_internal.federation_receives_nothing(text) IS
    'Whether the subscription receives no table (pg_restore creates subscriptions without their tables)';

-- Makes publication `pub` (created if missing) carry the ledger rows `ledger_where` selects
-- and the federation_received rows `received_where` selects, publishing inserts and updates: a
-- publication made before 0.4 lacks federation_received, and pg_restore restores one without
-- the extension's tables in it. A table it has already keeps its row filter.
CREATE FUNCTION hpcacct_internal.federation_publish_rows(pub text, ledger_where text, received_where text)
    RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        tab regclass;
        row_filter text;
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication p WHERE p.pubname = pub) THEN
            EXECUTE pg_catalog.format('CREATE PUBLICATION %I WITH (publish = ''insert, update'')', pub);
        ELSE
            EXECUTE pg_catalog.format('ALTER PUBLICATION %I SET (publish = ''insert, update'')', pub);
        END IF;
        FOR tab, row_filter IN VALUES ('@extschema@.ledger'::regclass, ledger_where),
                                      ('@extschema@.federation_received'::regclass, received_where) LOOP
            IF NOT hpcacct_internal.federation_publishes(pub, tab) THEN
                EXECUTE pg_catalog.format('ALTER PUBLICATION %I ADD TABLE %s WHERE (%s)', pub, tab, row_filter);
            END IF;
        END LOOP;
    END
    $$;
REVOKE EXECUTE ON FUNCTION hpcacct_internal.federation_publish_rows(text, text, text) FROM PUBLIC;
COMMENT ON FUNCTION hpcacct_internal.federation_publish_rows(text, text, text) IS
    'Creates the publication if missing and adds hpcacct.ledger and hpcacct.federation_received, with those row '
    'filters, where it lacks them; publishes inserts and updates';

-- The row filter of the ledger rows a link carries: those in `ids`, or outside them (`outside`).
CREATE FUNCTION hpcacct_internal.federation_ledger_where(ids int8range, outside boolean) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT pg_catalog.format(CASE WHEN outside THEN 'entry_id < %s OR entry_id >= %s'
                                      ELSE 'entry_id >= %s AND entry_id < %s' END,
                                 pg_catalog.lower(ids), pg_catalog.upper(ids))
    $$;
COMMENT ON FUNCTION hpcacct_internal.federation_ledger_where(int8range, boolean) IS
    'The row filter of the ledger rows in an id range, or outside it';

-- The publishing side of a link: publication `pub` of the ledger rows in `ids` (or outside
-- them, `outside`) and of the federation_received rows `received_where` selects, then a
-- COMMIT and the slot of the same name (see below why). Called with CALL from the
-- procedures below; leaves search_path set for the rest of the caller's transaction.
CREATE PROCEDURE hpcacct_internal.federation_publish_ledger(pub text, ids int8range, outside boolean,
                                                           received_where text)
    LANGUAGE plpgsql
    AS $$
    BEGIN
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        PERFORM hpcacct_internal.federation_publish_rows(pub, hpcacct_internal.federation_ledger_where(ids, outside),
                                                         received_where);
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        IF NOT hpcacct_internal.federation_slot_exists(pub) THEN
            PERFORM pg_catalog.pg_create_logical_replication_slot(pub, 'pgoutput');
        END IF;
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    END
    $$;
REVOKE EXECUTE ON PROCEDURE hpcacct_internal.federation_publish_ledger(text, int8range, boolean, text) FROM PUBLIC;
COMMENT ON PROCEDURE hpcacct_internal.federation_publish_ledger(text, int8range, boolean, text) IS
    'Publication of ledger rows (in or outside an id range) and federation_received rows, then its slot; idempotent';

-- The subscribing side of a link: subscription `sub` to `publications`, reached with
-- `conninfo`, on the slot of the same name that the publishing side made (so no slot is
-- created here), copying the rows already there; `options` are further subscription options.
-- Commits. Called with CALL from the procedures below; leaves search_path set.
CREATE PROCEDURE hpcacct_internal.federation_subscribe_slot(sub text, conninfo text, publications text[],
                                                           options text[])
    LANGUAGE plpgsql
    AS $$
    DECLARE
        names text;
    BEGIN
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        SELECT pg_catalog.string_agg(pg_catalog.quote_ident(n), ', ' ORDER BY o) INTO names
        FROM pg_catalog.unnest(publications) WITH ORDINALITY AS u(n, o);
        EXECUTE pg_catalog.format('CREATE SUBSCRIPTION %I CONNECTION %L PUBLICATION %s WITH (%s)',
                                  sub, conninfo, names,
                                  pg_catalog.array_to_string(ARRAY['create_slot = false',
                                                                   pg_catalog.format('slot_name = %L', sub),
                                                                   'copy_data = true'] || options, ', '));
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    END
    $$;
REVOKE EXECUTE ON PROCEDURE hpcacct_internal.federation_subscribe_slot(text, text, text[], text[]) FROM PUBLIC;
COMMENT ON PROCEDURE hpcacct_internal.federation_subscribe_slot(text, text, text[], text[]) IS
    'Subscription to publications on the slot of its name the other side made, copying existing rows; commits';

-- The procedures below create publications, replication slots and subscriptions. A slot
-- cannot be created in a transaction that has written anything, and CREATE SUBSCRIPTION
-- cannot create its slot on the publisher from inside a function or transaction block. So
-- each slot is created by the side that publishes, right after a COMMIT, and subscriptions
-- are created with create_slot = false on the slot made for them. That makes them
-- procedures: CALL them as a superuser, outside a transaction block. PostgreSQL forbids
-- COMMIT in a procedure with a SET clause, so instead of SET search_path each pins it with
-- set_config(…, true) first thing and again after every COMMIT (which ends the setting),
-- before any operator is resolved; pgTAP `privileges` checks that they do.

-- At the centre: publish to site `site` (number 1..32767) named `name`. Creates the
-- publication of the reference tables (shared by every site), the publication of the ledger
-- rows site `site` receives (every origin but its own) and the slot its subscription will
-- use. Idempotent. Then, at the site: federation_join(); and again at the centre:
-- federation_subscribe(), which subscribes to the site's charges.
CREATE PROCEDURE @extschema@.federation_publish(site integer, name text)
    LANGUAGE plpgsql
    AS $$
    DECLARE
        ids    int8range;
        pub    text;
        known  @extschema@.federation_site;
        tables text;
    BEGIN
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        IF site IS NULL OR name IS NULL THEN
            RAISE EXCEPTION 'site and name must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF site NOT BETWEEN 1 AND 32767 OR name !~ '^[a-z0-9_]{1,40}$' THEN
            RAISE EXCEPTION 'invalid site % "%"', site, name
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Sites are numbered 1 to 32767 and named with 1 to 40 of a-z, 0-9 and _.';
        END IF;
        PERFORM @extschema@.federation_prepare(0, 'centre');
        SELECT * INTO known FROM @extschema@.federation_site s WHERE s.site = federation_publish.site OR s.name = federation_publish.name;
        IF FOUND AND (known.site <> federation_publish.site OR known.name <> federation_publish.name) THEN
            RAISE EXCEPTION 'site % "%" conflicts with site % "%"', site, name, known.site, known.name
                USING ERRCODE = 'unique_violation';
        END IF;
        INSERT INTO @extschema@.federation_site (site, name) VALUES (site, name) ON CONFLICT DO NOTHING;

        SELECT pg_catalog.string_agg(t::text, ', ') INTO tables
        FROM pg_catalog.unnest(@extschema@.federation_reference_tables()) t;
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication p WHERE p.pubname = 'hpcacct_fed_reference') THEN
            EXECUTE pg_catalog.format('CREATE PUBLICATION hpcacct_fed_reference FOR TABLE %s '
                                      'WITH (publish = ''insert, update, delete'')', tables);
        ELSE
            EXECUTE pg_catalog.format('ALTER PUBLICATION hpcacct_fed_reference SET TABLE %s', tables);
        END IF;

        ids := @extschema@.federation_id_range(site);
        pub := 'hpcacct_fed_c2s_' || site;
        -- the ledger rows the site receives, and what the centre reports it received from the site
        CALL hpcacct_internal.federation_publish_ledger(pub, ids, true,
                                                        pg_catalog.format('receiver = 0 AND origin = %s', site));
        -- a slot invalidated by max_slot_wal_keep_size stays lost: running the calls again does not help
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots r
                   WHERE r.slot_name = pub AND r.wal_status = 'lost') THEN
            RAISE WARNING 'the slot % of site % is lost: the site no longer receives the centre''s rows', pub, site
                USING HINT = pg_catalog.format('Running the set-up calls again does not recover it: at site %s, '
                                               'CALL hpcacct.federation_resync(0).', site);
        END IF;
    END
    $$;
REVOKE EXECUTE ON PROCEDURE @extschema@.federation_publish(integer, text) FROM PUBLIC;
COMMENT ON PROCEDURE @extschema@.federation_publish(integer, text) IS
    'At the centre: publish reference data and the other sites'' ledger rows to site N, with its slot; idempotent';

-- At site `site`: join the federation whose centre is reached with `centre_conninfo`
-- (after federation_publish(site, …) there). Checks that this database may join (empty
-- reference tables and ledger, HA012 / HA011), numbers its ledger from site * 2^48,
-- publishes its own ledger rows and creates the slot the centre will subscribe with, then
-- subscribes to the centre. Idempotent: a second call updates the connection string.
CREATE PROCEDURE @extschema@.federation_join(site integer, centre_conninfo text)
    LANGUAGE plpgsql
    AS $$
    DECLARE
        ids  int8range;
        pub  text;
        sub  text;
        missing text;
    BEGIN
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        IF site IS NULL OR centre_conninfo IS NULL THEN
            RAISE EXCEPTION 'site and centre_conninfo must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        pub := 'hpcacct_fed_s2c_' || site;
        sub := 'hpcacct_fed_c2s_' || site;
        IF site NOT BETWEEN 1 AND 32767 THEN
            RAISE EXCEPTION 'invalid site %', site
                USING ERRCODE = 'invalid_parameter_value', HINT = 'Sites are numbered 1 to 32767; the centre is 0.';
        END IF;
        IF hpcacct_internal.federation_subscribed(sub) THEN
            -- joined before: the checks of an empty site no longer apply
            PERFORM @extschema@.federation_prepare(site, 'site');
            PERFORM hpcacct_internal.federation_publish_rows(
                pub, hpcacct_internal.federation_ledger_where(@extschema@.federation_id_range(site), false),
                pg_catalog.format('receiver = %s', site));
            EXECUTE pg_catalog.format('ALTER SUBSCRIPTION %I CONNECTION %L', sub, centre_conninfo);
            EXECUTE pg_catalog.format('ALTER SUBSCRIPTION %I ENABLE', sub);
            -- tables a later version added reach the site only after a refresh, which
            -- PostgreSQL does not allow inside a procedure: say so
            missing := hpcacct_internal.federation_not_received(
                sub, @extschema@.federation_reference_tables() || '@extschema@.federation_received'::regclass);
            IF missing IS NOT NULL AND hpcacct_internal.federation_receives_nothing(sub) THEN
                -- restored from a dump: the tables are here, the centre's rows since the dump are not
                RAISE WARNING 'this site receives no table (restored from a dump?)'
                    USING HINT = pg_catalog.format('Run ALTER SUBSCRIPTION %I REFRESH PUBLICATION WITH (copy_data = false) '
                                                   'and CALL hpcacct.federation_resync(0) here, then at the centre '
                                                   'CALL hpcacct.federation_resync(%s).', sub, site);
            ELSIF missing IS NOT NULL THEN
                RAISE WARNING 'this site does not receive %', missing
                    USING HINT = pg_catalog.format('After CALL hpcacct.federation_publish(%s, ...) at the centre, run '
                                                   'ALTER SUBSCRIPTION %I REFRESH PUBLICATION here.', site, sub);
            END IF;
            -- the slot the centre reads, invalidated by max_slot_wal_keep_size: say how to recover
            IF EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots r
                       WHERE r.slot_name = pub AND r.wal_status = 'lost') THEN
                RAISE WARNING 'the slot % of this site is lost: the centre no longer receives its charges', pub
                    USING HINT = pg_catalog.format('At the centre, CALL hpcacct.federation_resync(%s).', site);
            END IF;
            RETURN;
        END IF;
        PERFORM @extschema@.federation_prepare(site, 'site');
        ids := @extschema@.federation_id_range(site);
        -- its own ledger rows, and what it reports it received
        CALL hpcacct_internal.federation_publish_ledger(pub, ids, false, pg_catalog.format('receiver = %s', site));
        -- the centre made the slot for this subscription in federation_publish()
        CALL hpcacct_internal.federation_subscribe_slot(sub, centre_conninfo, ARRAY['hpcacct_fed_reference', sub],
                                                        '{}');
    END
    $$;
REVOKE EXECUTE ON PROCEDURE @extschema@.federation_join(integer, text) FROM PUBLIC;
COMMENT ON PROCEDURE @extschema@.federation_join(integer, text) IS
    'At a cluster site: join the federation (ledger ids from site * 2^48, publish own charges, subscribe to the '
    'centre); idempotent';

-- At the centre, after federation_join() at the site: subscribe to site `site`'s own ledger
-- rows (its charges), reached with `site_conninfo`, on the slot the site created. Idempotent.
CREATE PROCEDURE @extschema@.federation_subscribe(site integer, site_conninfo text)
    LANGUAGE plpgsql
    AS $$
    DECLARE
        sub text;
    BEGIN
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        IF site IS NULL OR site_conninfo IS NULL THEN
            RAISE EXCEPTION 'site and site_conninfo must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        sub := 'hpcacct_fed_s2c_' || site;
        IF NOT EXISTS (SELECT 1 FROM @extschema@.federation_site s WHERE s.site = federation_subscribe.site)
           OR NOT EXISTS (SELECT 1 FROM @extschema@.federation_node n WHERE n.role = 'centre') THEN
            RAISE EXCEPTION 'site % is not published from this database', site
                USING ERRCODE = 'undefined_object', HINT = 'Run CALL hpcacct.federation_publish(site, name) first.';
        END IF;
        PERFORM @extschema@.federation_prepare(0, 'centre');
        IF hpcacct_internal.federation_subscribed(sub) THEN
            EXECUTE pg_catalog.format('ALTER SUBSCRIPTION %I CONNECTION %L', sub, site_conninfo);
            EXECUTE pg_catalog.format('ALTER SUBSCRIPTION %I SET (synchronous_commit = local, binary = true)', sub);
            EXECUTE pg_catalog.format('ALTER SUBSCRIPTION %I ENABLE', sub);
            -- a site joined by an earlier version publishes its reports of rows received once
            -- federation_join() ran there again; the subscription needs a refresh (not in a procedure)
            IF hpcacct_internal.federation_receives_nothing(sub) THEN
                -- restored from a dump: the ledger is here, the site's rows since the dump are not
                RAISE WARNING 'this database receives no table from site % (restored from a dump?)', site
                    USING HINT = pg_catalog.format('Run ALTER SUBSCRIPTION %I REFRESH PUBLICATION WITH (copy_data = false) '
                                                   'and CALL hpcacct.federation_resync(%s) here, before '
                                                   'CALL hpcacct.federation_publish(%s, ...).', sub, site, site);
            ELSIF hpcacct_internal.federation_not_received(
                   sub, ARRAY['@extschema@.federation_received'::regclass]) IS NOT NULL THEN
                RAISE WARNING 'this database does not receive site %''s reports of rows received', site
                    USING HINT = pg_catalog.format('After CALL hpcacct.federation_join(%s, ...) at the site, run '
                                                   'ALTER SUBSCRIPTION %I REFRESH PUBLICATION here.', site, sub);
            END IF;
            RETURN;
        END IF;
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        -- synchronous_commit = local: the centre relays what it applies to the other sites, and
        -- a walsender sends only flushed WAL; applied asynchronously (the default), a site's
        -- charge waited for the WAL writer (up to 3 x wal_writer_delay) before it went on.
        -- binary = true: the site's walsender sends the ledger's timestamps, numerics and dates
        -- as their binary form instead of formatting them as text (and the centre does not parse
        -- them); the ledger has built-in types only, the same at both ends
        CALL hpcacct_internal.federation_subscribe_slot(sub, site_conninfo, ARRAY[sub],
                                                        ARRAY['synchronous_commit = local', 'binary = true']);
    END
    $$;
REVOKE EXECUTE ON PROCEDURE @extschema@.federation_subscribe(integer, text) FROM PUBLIC;
COMMENT ON PROCEDURE @extschema@.federation_subscribe(integer, text) IS
    'At the centre: subscribe to a site''s charges (after federation_join there); idempotent';

-- The schema of the dblink extension (quoted) that federation_resync() reads the sender with;
-- 55000 when dblink is not installed in this database.
CREATE FUNCTION hpcacct_internal.federation_dblink_schema() RETURNS text
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        nsp text;
    BEGIN
        SELECT pg_catalog.quote_ident(n.nspname) INTO nsp
        FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
        WHERE e.extname = 'dblink';
        IF nsp IS NULL THEN
            RAISE EXCEPTION 'federation_resync needs the extension dblink in this database'
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'CREATE EXTENSION dblink SCHEMA public; (contrib, shipped with PostgreSQL).';
        END IF;
        RETURN nsp;
    END
    $$;
REVOKE EXECUTE ON FUNCTION hpcacct_internal.federation_dblink_schema() FROM PUBLIC;
COMMENT ON FUNCTION hpcacct_internal.federation_dblink_schema() IS
    'The schema of the dblink extension, quoted, for federation_resync(); 55000 when it is not installed';

-- At the receiving end of a link whose slot at the sender was lost (wal_status 'lost', after
-- max_slot_wal_keep_size) or dropped: gives it a new slot and copies what the receiver lacks.
-- At the centre federation_resync(k) repairs site k's charges to the centre; at site k,
-- federation_resync(0) repairs the centre's rows to the site (reference tables, every other
-- origin's ledger rows). Steps: the subscription is disabled and its worker waited for; over
-- dblink (with the subscription's connection string) the sender's slot is dropped and created
-- again on a replication connection that exports its snapshot; in a transaction on that
-- snapshot the receiver reads the sender's reference tables (upserted, rows gone deleted), the
-- ledger's counts per block of 65 536 ids of the origins the link carries, and the rows of the
-- blocks whose count differs (inserted where missing); then the subscription is enabled. Rows
-- committed at the sender before the slot's consistent point are in the snapshot, those after
-- it come through the slot: none is lost or copied twice, whatever the order of their ids.
-- This database's own charges copied back (it was restored from a dump) name jobs its job
-- table lacks: their runs are listed in job_to_reload, so that loading them again replaces
-- their charges instead of adding to them.
-- Rows are written as replication writes them (session_replication_role = replica: received
-- charges held back and rolled up at commit, reference rows without the site's refusal).
-- Why dblink and not a subscription with copy_data: only a replication connection's exported
-- snapshot splits the rows exactly between the copy and the stream, and a copy_data
-- subscription writes into the tables of the same name, whose rows are mostly there already.
-- A superuser, outside a transaction block (it commits). Refused before anything is written
-- when another resync of the link runs (55006), the sender cannot be reached (08001) or has
-- columns this database lacks (55000: a sender updated first). Run again after a later failure: the subscription stays disabled until a
-- run completes.
CREATE PROCEDURE @extschema@.federation_resync(site integer)
    LANGUAGE plpgsql
    AS $$
    DECLARE
        node     @extschema@.federation_node;
        ids      int8range;
        link     text;
        conninfo text;
        dbl      text;
        carried  text;
        received text;
        snap     text;
        waited   integer;
        busy     boolean;
        tab      regclass;
        keys     text;
        fkeys    text;
        xkeys    text;
        cols     text;
        blk      bigint;
        n        bigint;
        refs     bigint;
        gone     bigint;
        copied   bigint;
        missing  text;
        own      text;
        seq      text;
        theirs   bigint;
    BEGIN
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        IF site IS NULL THEN
            RAISE EXCEPTION 'site must not be NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = pg_catalog.current_user() AND r.rolsuper) THEN
            RAISE EXCEPTION 'federation_resync must be run by a superuser' USING ERRCODE = 'insufficient_privilege';
        END IF;
        SELECT * INTO node FROM @extschema@.federation_node;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'this database is not in a federation' USING ERRCODE = 'undefined_object';
        END IF;
        IF node.role = 'centre' THEN
            IF NOT EXISTS (SELECT 1 FROM @extschema@.federation_site s WHERE s.site = federation_resync.site) THEN
                RAISE EXCEPTION 'site % is not published from this database', site USING ERRCODE = 'undefined_object';
            END IF;
            link := 'hpcacct_fed_s2c_' || site;
            ids := @extschema@.federation_id_range(site);
            carried := pg_catalog.format('entry_id >= %s AND entry_id < %s', pg_catalog.lower(ids), pg_catalog.upper(ids));
            received := pg_catalog.format('receiver = %s', site);
        ELSE
            IF site <> 0 THEN
                RAISE EXCEPTION 'a site receives from the centre (0) only, not from site %', site
                    USING ERRCODE = 'invalid_parameter_value', HINT = 'At a site, CALL hpcacct.federation_resync(0).';
            END IF;
            link := 'hpcacct_fed_c2s_' || node.site;
            ids := @extschema@.federation_id_range(node.site);
            carried := pg_catalog.format('entry_id < %s OR entry_id >= %s', pg_catalog.lower(ids), pg_catalog.upper(ids));
            received := pg_catalog.format('receiver = 0 AND origin = %s', node.site);
        END IF;
        -- this database's own ids: rows of them only the sender holds are copied back (a restore)
        ids := @extschema@.federation_id_range(node.site);
        own := pg_catalog.format('entry_id >= %s AND entry_id < %s', pg_catalog.lower(ids), pg_catalog.upper(ids));
        seq := pg_catalog.pg_get_serial_sequence('@extschema@.ledger', 'entry_id');
        SELECT s.subconninfo INTO conninfo FROM pg_catalog.pg_subscription s
        WHERE s.subname = link
          AND s.subdbid = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database());
        IF conninfo IS NULL THEN
            RAISE EXCEPTION 'this database has no subscription %', link
                USING ERRCODE = 'undefined_object', HINT = 'Run the set-up calls first (README, "Several clusters").';
        END IF;
        dbl := hpcacct_internal.federation_dblink_schema();
        -- one resync of a link at a time, across the COMMITs below: a lease naming this session
        -- (a lease of a session that has ended, or of this one after a failed run, is taken over)
        INSERT INTO hpcacct_internal.run_lock (name) VALUES ('federation_resync ' || link) ON CONFLICT DO NOTHING;
        UPDATE hpcacct_internal.run_lock l SET holder_pid = pg_catalog.pg_backend_pid(), holder_since = pg_catalog.now()
        WHERE l.name = 'federation_resync ' || link
          AND (l.holder_pid IS NULL OR l.holder_pid = pg_catalog.pg_backend_pid()
               OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a
                              WHERE a.pid = l.holder_pid AND a.backend_start <= l.holder_since));
        IF NOT FOUND THEN
            RAISE EXCEPTION 'another federation_resync of % is running', link USING ERRCODE = 'object_in_use';
        END IF;
        -- the sender, reached before anything is written here (08001 when it cannot be)
        EXECUTE pg_catalog.format('SELECT %1$s.dblink_disconnect(c) FROM pg_catalog.unnest(%1$s.dblink_get_connections()) c '
                                  'WHERE c IN (''hpcacct_resync'', ''hpcacct_resync_slot'')', dbl);
        EXECUTE pg_catalog.format('SELECT %s.dblink_connect(''hpcacct_resync'', %L)', dbl, conninfo);
        EXECUTE pg_catalog.format('SELECT %s.dblink_connect(''hpcacct_resync_slot'', %L)', dbl,
                                  CASE WHEN conninfo ~ '^postgres(ql)?://'
                                       THEN conninfo || CASE WHEN pg_catalog.strpos(conninfo, '?') > 0 THEN '&' ELSE '?' END
                                            || 'replication=database'
                                       ELSE conninfo || ' replication=database' END);
        -- every column the sender has must be here: copied without it, a row would lose it
        -- (a sender updated first; replication stops on such a row instead)
        EXECUTE pg_catalog.format(
            'SELECT pg_catalog.string_agg(r.tab || ''.'' || r.col, '', '' ORDER BY r.tab, r.col) '
            'FROM %s.dblink(''hpcacct_resync'', %L) AS r(tab text, col text) '
            'WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a '
            '                  WHERE a.attrelid = pg_catalog.to_regclass(pg_catalog.quote_ident(''@extschema@'') || ''.'' || pg_catalog.quote_ident(r.tab)) '
            '                    AND a.attname = r.col AND a.attnum > 0 AND NOT a.attisdropped)',
            dbl, pg_catalog.format('SELECT c.relname::text, a.attname::text FROM pg_catalog.pg_attribute a '
                                   'JOIN pg_catalog.pg_class c ON c.oid = a.attrelid '
                                   'JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace '
                                   'WHERE n.nspname = %L AND a.attnum > 0 AND NOT a.attisdropped AND c.relname = ANY (%L::text[])',
                                   '@extschema@',
                                   (SELECT pg_catalog.array_agg(c.relname::text) FROM pg_catalog.pg_class c
                                    WHERE c.oid = ANY ('{@extschema@.ledger, @extschema@.federation_received}'::regclass[]
                                                       || CASE WHEN node.role = 'site' THEN @extschema@.federation_reference_tables()
                                                               ELSE '{}'::regclass[] END))))
            INTO missing;
        IF missing IS NOT NULL THEN
            EXECUTE pg_catalog.format('SELECT %1$s.dblink_disconnect(c) FROM pg_catalog.unnest(%1$s.dblink_get_connections()) c '
                                      'WHERE c IN (''hpcacct_resync'', ''hpcacct_resync_slot'')', dbl);
            RAISE EXCEPTION 'the sender has columns this database lacks: %', missing
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'Update this database''s hpcacct first (ALTER EXTENSION hpcacct UPDATE).';
        END IF;

        -- rows of this database's own that only the sender holds (this database was restored from
        -- a dump): copied back below, but a slot here would send them out again, to receivers that
        -- hold them (a key conflict there)
        EXECUTE pg_catalog.format('SELECT t.n FROM %s.dblink(''hpcacct_resync'', %L) AS t(n bigint)', dbl,
                                  pg_catalog.format('SELECT pg_catalog.count(*) FROM @extschema@.ledger WHERE %s', own))
            INTO theirs;
        EXECUTE pg_catalog.format('SELECT pg_catalog.count(*) < $1 FROM @extschema@.ledger WHERE %s', own)
            USING theirs INTO busy;
        IF busy AND EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots r
                                WHERE r.slot_name ~ '^hpcacct_fed_(c2s|s2c)_[0-9]+$'
                                  AND r.database = pg_catalog.current_database()) THEN
            EXECUTE pg_catalog.format('SELECT %1$s.dblink_disconnect(c) FROM pg_catalog.unnest(%1$s.dblink_get_connections()) c '
                                      'WHERE c IN (''hpcacct_resync'', ''hpcacct_resync_slot'')', dbl);
            RAISE EXCEPTION 'the sender holds rows this database booked that it lacks (restored from a dump?), and a '
                            'federation slot here would send them out again'
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'Run federation_resync before the calls that create this database''s slots (README, '
                             '"Several clusters", restoring from a dump), or drop its slots first.';
        END IF;

        -- stop the link's apply worker: the slot can be dropped only when no one reads it
        EXECUTE pg_catalog.format('ALTER SUBSCRIPTION %I DISABLE', link);
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        waited := 0;
        WHILE EXISTS (SELECT 1 FROM pg_catalog.pg_stat_subscription st WHERE st.subname = link AND st.pid IS NOT NULL) LOOP
            IF waited >= 600 THEN
                RAISE EXCEPTION 'the apply worker of % did not stop within 60 s', link USING ERRCODE = 'object_in_use';
            END IF;
            PERFORM pg_catalog.pg_sleep(0.1);
            waited := waited + 1;
        END LOOP;

        -- at the sender: a new slot in place of the old one, its snapshot imported by the
        -- other connection (the slot's creation waits for transactions that wrote: this one
        -- has written nothing since its COMMIT)
        waited := 0;
        LOOP
            EXECUTE pg_catalog.format('SELECT t.busy FROM %s.dblink(''hpcacct_resync'', %L) AS t(busy boolean)', dbl,
                                      pg_catalog.format('SELECT pg_catalog.bool_or(active) FROM pg_catalog.pg_replication_slots '
                                                        'WHERE slot_name = %L', link)) INTO busy;
            EXIT WHEN busy IS NOT TRUE;
            IF waited >= 600 THEN
                RAISE EXCEPTION 'the slot % is still in use at the sender after 60 s', link USING ERRCODE = 'object_in_use';
            END IF;
            PERFORM pg_catalog.pg_sleep(0.1);
            waited := waited + 1;
        END LOOP;
        IF busy IS NOT NULL THEN
            EXECUTE pg_catalog.format('SELECT pg_catalog.count(*) FROM %s.dblink(''hpcacct_resync'', %L) AS t(dropped integer)',
                                      dbl, pg_catalog.format('SELECT 1 FROM pg_catalog.pg_drop_replication_slot(%L)', link));
        END IF;
        EXECUTE pg_catalog.format('SELECT t.snapshot_name FROM %s.dblink(''hpcacct_resync_slot'', %L) '
                                  'AS t(slot_name text, consistent_point text, snapshot_name text, output_plugin text)',
                                  dbl, pg_catalog.format('CREATE_REPLICATION_SLOT %I LOGICAL pgoutput (SNAPSHOT ''export'')', link))
            INTO snap;
        EXECUTE pg_catalog.format('SELECT %s.dblink_exec(''hpcacct_resync'', ''BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY'')', dbl);
        EXECUTE pg_catalog.format('SELECT %s.dblink_exec(''hpcacct_resync'', %L)', dbl,
                                  pg_catalog.format('SET TRANSACTION SNAPSHOT %L', snap));
        EXECUTE pg_catalog.format('SELECT %s.dblink_disconnect(''hpcacct_resync_slot'')', dbl);

        -- here, as replication writes
        PERFORM pg_catalog.set_config('session_replication_role', 'replica', true);
        refs := 0;
        gone := 0;
        IF node.role = 'site' THEN
            FOR tab IN SELECT t FROM pg_catalog.unnest(@extschema@.federation_reference_tables()) t
                       WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_subscription_rel r
                                     JOIN pg_catalog.pg_subscription s ON s.oid = r.srsubid
                                     WHERE s.subname = link AND r.srrelid = t) LOOP
                SELECT pg_catalog.string_agg(pg_catalog.quote_ident(a.attname), ', ' ORDER BY a.attnum),
                       pg_catalog.string_agg('f.' || pg_catalog.quote_ident(a.attname), ', ' ORDER BY a.attnum),
                       pg_catalog.string_agg('x.' || pg_catalog.quote_ident(a.attname), ', ' ORDER BY a.attnum)
                INTO keys, fkeys, xkeys
                FROM pg_catalog.pg_index i
                JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
                WHERE i.indrelid = tab AND i.indisprimary;
                SELECT pg_catalog.string_agg(pg_catalog.format('%1$I = excluded.%1$I', a.attname), ', ' ORDER BY a.attnum)
                INTO cols
                FROM pg_catalog.pg_attribute a
                WHERE a.attrelid = tab AND a.attnum > 0 AND NOT a.attisdropped
                  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_index i
                                  WHERE i.indrelid = tab AND i.indisprimary AND a.attnum = ANY (i.indkey));
                EXECUTE pg_catalog.format('CREATE TEMPORARY TABLE hpcacct_resync_rows ON COMMIT DROP AS SELECT e.* '
                                          'FROM %s.dblink(''hpcacct_resync'', %L) AS r(j text), '
                                          'LATERAL pg_catalog.json_populate_record(NULL::%s, r.j::json) e',
                                          dbl, pg_catalog.format('SELECT pg_catalog.row_to_json(t)::text FROM %s t', tab), tab);
                EXECUTE pg_catalog.format('DELETE FROM %s x WHERE NOT EXISTS (SELECT 1 FROM pg_temp.hpcacct_resync_rows f '
                                          'WHERE (%s) = (%s))', tab, fkeys, xkeys);
                GET DIAGNOSTICS n = ROW_COUNT;
                gone := gone + n;
                EXECUTE pg_catalog.format('INSERT INTO %s AS x OVERRIDING SYSTEM VALUE SELECT * FROM pg_temp.hpcacct_resync_rows '
                                          'ON CONFLICT (%s) DO %s', tab, keys,
                                          CASE WHEN cols IS NULL THEN 'NOTHING'
                                               ELSE pg_catalog.format('UPDATE SET %s WHERE ROW(x.*)::text IS DISTINCT FROM ROW(excluded.*)::text', cols) END);
                GET DIAGNOSTICS n = ROW_COUNT;
                refs := refs + n;
                DROP TABLE pg_temp.hpcacct_resync_rows;
            END LOOP;
        END IF;
        -- what the sender reports it received over the reverse link
        EXECUTE pg_catalog.format('INSERT INTO @extschema@.federation_received AS p SELECT e.* '
                                  'FROM %s.dblink(''hpcacct_resync'', %L) AS r(j text), '
                                  'LATERAL pg_catalog.json_populate_record(NULL::@extschema@.federation_received, r.j::json) e '
                                  'ON CONFLICT (receiver, origin) DO UPDATE '
                                  'SET last_entry_id = GREATEST(p.last_entry_id, excluded.last_entry_id), '
                                  'received_at = GREATEST(p.received_at, excluded.received_at)',
                                  dbl, pg_catalog.format('SELECT pg_catalog.row_to_json(p)::text FROM @extschema@.federation_received p '
                                                         'WHERE %s', received));
        -- the ledger: per block of 65 536 ids (one origin each), the rows here are a subset of
        -- the sender's; the blocks that count fewer rows here are read whole
        CREATE TEMPORARY TABLE hpcacct_resync_blocks ON COMMIT DROP AS SELECT 0::bigint AS blk, 0::bigint AS missing LIMIT 0;
        EXECUTE pg_catalog.format('INSERT INTO pg_temp.hpcacct_resync_blocks '
                                  'SELECT b.blk, b.rows - (SELECT pg_catalog.count(*) FROM @extschema@.ledger l '
                                  '                        WHERE l.entry_id >= b.blk * 65536 AND l.entry_id < (b.blk + 1) * 65536) '
                                  'FROM %s.dblink(''hpcacct_resync'', %L) AS b(blk bigint, rows bigint)',
                                  dbl, pg_catalog.format('SELECT entry_id / 65536, pg_catalog.count(*) FROM @extschema@.ledger '
                                                         'WHERE (%s) OR (%s) GROUP BY 1', carried, own));
        copied := 0;
        -- (a block may count more rows here: this database's own rows the sender has not received)
        FOR blk, n IN SELECT b.blk, b.missing FROM pg_temp.hpcacct_resync_blocks b WHERE b.missing > 0 ORDER BY b.blk LOOP
            -- this database's own charges among them: their jobs are not in its job table
            EXECUTE pg_catalog.format('WITH fetched AS MATERIALIZED ('
                                      '    SELECT e.* FROM %s.dblink(''hpcacct_resync'', %L) AS r(j text), '
                                      '    LATERAL pg_catalog.json_populate_record(NULL::@extschema@.ledger, r.j::json) e '
                                      '    WHERE NOT EXISTS (SELECT 1 FROM @extschema@.ledger l WHERE l.entry_id = e.entry_id)), '
                                      'noted AS ('
                                      '    INSERT INTO @extschema@.job_to_reload (cluster, jobid, job_submit, account) '
                                      '    SELECT f.cluster, f.jobid, f.job_submit, pg_catalog.min(f.account) FROM fetched f '
                                      '    WHERE f.kind = ''charge'' AND %s GROUP BY 1, 2, 3 ON CONFLICT DO NOTHING) '
                                      'INSERT INTO @extschema@.ledger OVERRIDING SYSTEM VALUE SELECT * FROM fetched ORDER BY entry_id',
                                      dbl, pg_catalog.format('SELECT pg_catalog.row_to_json(l)::text FROM @extschema@.ledger l '
                                                             'WHERE l.entry_id >= %s AND l.entry_id < %s',
                                                             blk * 65536, (blk + 1) * 65536),
                                      '(' || own || ')');
            copied := copied + n;
        END LOOP;
        EXECUTE pg_catalog.format('SELECT %s.dblink_exec(''hpcacct_resync'', ''COMMIT'')', dbl);
        EXECUTE pg_catalog.format('SELECT %s.dblink_disconnect(''hpcacct_resync'')', dbl);
        -- the subscription starts at the new slot's consistent point: its origin's position is
        -- the old sender's WAL, which may lie ahead of a sender restored into another cluster
        -- (the sender would skip every transaction committed before it)
        PERFORM pg_catalog.pg_replication_origin_advance(o.roname, '0/0')
        FROM pg_catalog.pg_subscription s
        JOIN pg_catalog.pg_replication_origin o ON o.roname = 'pg_' || s.oid
        WHERE s.subname = link
          AND s.subdbid = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database());
        -- the held charges go in at this commit, rolled up
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        -- own rows copied back (now in the ledger): its ids go on above them
        EXECUTE pg_catalog.format('SELECT pg_catalog.setval(%L, x.m) FROM (SELECT pg_catalog.max(entry_id) AS m '
                                  'FROM @extschema@.ledger WHERE %s) x, %s s WHERE x.m > s.last_value', seq, own, seq);
        EXECUTE pg_catalog.format('ALTER SUBSCRIPTION %I ENABLE', link);
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        UPDATE hpcacct_internal.run_lock l SET holder_pid = NULL, holder_since = NULL
        WHERE l.name = 'federation_resync ' || link AND l.holder_pid = pg_catalog.pg_backend_pid();
        RAISE NOTICE '%: new slot; % ledger rows copied, % reference rows written, % deleted', link, copied, refs, gone;
    END
    $$;
REVOKE EXECUTE ON PROCEDURE @extschema@.federation_resync(integer) FROM PUBLIC;
COMMENT ON PROCEDURE @extschema@.federation_resync(integer) IS
    'At the receiving end of a federation link whose slot was lost: a new slot at the sender, and the rows missing '
    'here copied from its snapshot (dblink); at the centre the site''s number, at a site 0';

-- At the centre: what rerate() could not see. rerate() reverses and charges again the charges
-- the centre holds; a site's charge of a job that started from effective_from on, on the
-- closed row, that reached the centre afterwards (booked while the site's link was down or
-- its rows on their way, or before the closed row reached the site) stays at the old rate.
-- This re-rates those, per logged re-rating in order (a chain of them too), as rerate() would
-- have: the same reversal and new charge per job, the same notes, added to rerate_log's figures.
-- Returns the jobs re-rated (0 once none is left); idempotent. Refused at a site (HA013: its
-- rows would reach the centre, which re-rates them itself), and outside READ COMMITTED (25000).
CREATE FUNCTION @extschema@.rerate_catch_up() RETURNS bigint
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        r record;
        label text;
        reversals bigint[];
        moved bigint;
        before_sum numeric;
        after_sum numeric;
        total bigint := 0;
    BEGIN
        PERFORM hpcacct_internal.refuse_at_site('rerate_catch_up');
        -- as rerate(): no charging meanwhile, and only READ COMMITTED sees the charges
        -- committed before the lock
        PERFORM hpcacct_internal.require_read_committed('rerate_catch_up()');
        LOCK TABLE @extschema@.ledger IN EXCLUSIVE MODE;
        FOR r IN SELECT g.rerate_id, g.old_resource_id, g.new_resource_id, g.old_rate, g.new_rate, g.effective_from
                 FROM @extschema@.rerate_log g ORDER BY g.rerate_id LOOP
            label := 're-rated: resource ' || r.old_resource_id || ' from ' || hpcacct_internal.iso_instant(r.effective_from);
            reversals := hpcacct_internal.rerate_reverse(r.old_resource_id, r.effective_from, label);
            CONTINUE WHEN pg_catalog.cardinality(reversals) = 0;
            SELECT c.jobs, c.amount_before, c.amount_after INTO moved, before_sum, after_sum
            FROM hpcacct_internal.rerate_charge(reversals, r.new_resource_id,
                                                r.new_rate::numeric / r.old_rate::numeric, label) c;
            UPDATE @extschema@.rerate_log g
            SET jobs = g.jobs + moved, amount_before = g.amount_before + before_sum, amount_after = g.amount_after + after_sum
            WHERE g.rerate_id = r.rerate_id;
            total := total + moved;
        END LOOP;
        RETURN total;
    END
    $$;
COMMENT ON FUNCTION @extschema@.rerate_catch_up() IS
    'At the centre: re-rates the charges of jobs a logged rerate() covered that reached the ledger after it '
    '(a site''s, booked while its link was down); returns the jobs re-rated; HA013 at a site, 25000 outside '
    'READ COMMITTED';
REVOKE EXECUTE ON FUNCTION @extschema@.rerate_catch_up() FROM PUBLIC;

-- Per link of this database: the site at the other end (at a site: always the centre, 0),
-- whether rows come in ('from', a subscription here) or go out ('to', a slot the other end
-- reads), whether the link is connected, the last ledger row here that the other end booked
-- (incoming links), and for outgoing links the replay lag the sender measures, the WAL the
-- receiver has not confirmed, and rows_pending: 0 when the receiver has confirmed all the WAL
-- written here and reported rows of every origin it has rows of here (not before its initial
-- copy is in), else the ledger rows this database holds that the link carries above the last
-- id per origin the receiver reported (federation_received, replicated back; at most a second
-- old while rows stream, receiver_reported_at), and the slot's wal_status ('lost': the receiver
-- gets nothing more until federation_resync() there). Exact when each origin's rows commit in id order
-- (one loader per site); rows of concurrent transactions committed out of that order are not
-- counted while the receiver holds a higher id. An incoming link's are counted at its sender;
-- it shows instead the tables whose initial copy has not finished (tables_copying).
CREATE VIEW @extschema@.federation_status WITH (security_invoker = true) AS
    WITH links AS (
        SELECT (pg_catalog.regexp_match(s.subname, '^hpcacct_fed_(c2s|s2c)_([0-9]+)$'))[2]::integer AS link_site,
               s.subname AS link, 'from' AS direction, s.subenabled AS enabled
        FROM pg_catalog.pg_subscription s
        WHERE s.subname ~ '^hpcacct_fed_(c2s|s2c)_[0-9]+$'
          AND s.subdbid = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
        UNION ALL
        SELECT (pg_catalog.regexp_match(r.slot_name::text, '^hpcacct_fed_(c2s|s2c)_([0-9]+)$'))[2]::integer,
               r.slot_name::text, 'to', true
        FROM pg_catalog.pg_replication_slots r
        WHERE r.slot_name ~ '^hpcacct_fed_(c2s|s2c)_[0-9]+$' AND r.database = pg_catalog.current_database()
    ), ends AS (  -- the other end of each link: at a site, the centre
        SELECT k.*, CASE WHEN n.role = 'site' THEN 0 ELSE k.link_site END AS other_end, n.role, n.site AS me
        FROM links k
        LEFT JOIN @extschema@.federation_node n ON true
    )
    SELECT k.other_end AS site, k.direction, k.link, k.enabled,
           CASE WHEN k.direction = 'from'
                THEN EXISTS (SELECT 1 FROM pg_catalog.pg_stat_subscription st
                             WHERE st.subname = k.link AND st.relid IS NULL AND st.pid IS NOT NULL)
                ELSE EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots r WHERE r.slot_name = k.link AND r.active)
           END AS connected,
           last.entry_id AS last_entry_id, last.booked_at AS last_booked_at,
           CASE WHEN k.direction = 'from'
                THEN (SELECT st.last_msg_receipt_time FROM pg_catalog.pg_stat_subscription st
                      WHERE st.subname = k.link AND st.relid IS NULL) END AS last_message_at,
           CASE WHEN k.direction = 'to'
                THEN (SELECT pg_catalog.max(sr.replay_lag) FROM pg_catalog.pg_stat_replication sr
                      WHERE sr.application_name = k.link) END AS lag,
           CASE WHEN k.direction = 'to'
                THEN (SELECT pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), r.confirmed_flush_lsn)
                      FROM pg_catalog.pg_replication_slots r WHERE r.slot_name = k.link) END AS pending_wal_bytes,
           CASE WHEN k.direction = 'to' AND pending.reported AND EXISTS (
                    SELECT 1 FROM pg_catalog.pg_replication_slots r
                    WHERE r.slot_name = k.link AND r.confirmed_flush_lsn >= pg_catalog.pg_current_wal_insert_lsn())
                THEN 0  -- the receiver confirmed all the WAL written here, and reported rows of each origin
                ELSE pending.rows END AS rows_pending,
           pending.reported_at AS receiver_reported_at,
           CASE WHEN k.direction = 'to'
                THEN (SELECT r.wal_status FROM pg_catalog.pg_replication_slots r WHERE r.slot_name = k.link) END
               AS wal_status,
           -- a table not yet copied is not applied either: its rows wait (or the copy fails, logged)
           CASE WHEN k.direction = 'from'
                THEN (SELECT pg_catalog.count(*) FROM pg_catalog.pg_subscription_rel r
                      JOIN pg_catalog.pg_subscription s ON s.oid = r.srsubid
                      WHERE s.subname = k.link AND r.srsubstate <> 'r')::integer END AS tables_copying
    FROM ends k
    LEFT JOIN LATERAL (
        SELECT l.entry_id, l.booked_at FROM @extschema@.ledger l,
               LATERAL (SELECT @extschema@.federation_id_range(k.other_end) AS ids) r
        WHERE k.direction = 'from'
          AND l.entry_id >= pg_catalog.lower(r.ids) AND l.entry_id < pg_catalog.upper(r.ids)
        ORDER BY l.entry_id DESC LIMIT 1
    ) last ON true
    LEFT JOIN LATERAL (
        -- per origin the link carries (a site: its own rows; the centre: every origin but the
        -- receiver's), the rows above the last one the receiver reported
        -- reported: the receiver reported rows of every origin it has rows of here (a WAL
        -- position confirmed says nothing of the rows before its slot: the initial copy's)
        SELECT pg_catalog.sum(c.rows)::bigint AS rows, pg_catalog.max(p.received_at) AS reported_at,
               coalesce(pg_catalog.bool_and(p.last_entry_id IS NOT NULL OR c.rows = 0), true) AS reported
        FROM (SELECT k.me AS origin WHERE k.role = 'site'
              UNION ALL SELECT 0 WHERE k.role = 'centre'
              UNION ALL SELECT s.site FROM @extschema@.federation_site s WHERE k.role = 'centre') o
        LEFT JOIN @extschema@.federation_received p ON p.receiver = k.other_end AND p.origin = o.origin
        CROSS JOIN LATERAL (SELECT @extschema@.federation_id_range(o.origin) AS ids) r
        CROSS JOIN LATERAL (
            SELECT pg_catalog.count(*) AS rows FROM @extschema@.ledger l
            WHERE l.entry_id > coalesce(p.last_entry_id, pg_catalog.lower(r.ids) - 1)
              AND l.entry_id < pg_catalog.upper(r.ids)
        ) c
        WHERE k.direction = 'to' AND o.origin <> k.other_end
    ) pending ON k.direction = 'to';
COMMENT ON VIEW @extschema@.federation_status IS
    'Per federation link of this database: the site at the other end, direction, connected, the last ledger row '
    'received from it and the tables whose initial copy has not finished; for outgoing links the lag, unconfirmed '
    'WAL, the rows the receiver has not reported received and the slot''s wal_status (lost: run federation_resync at '
    'the receiver)';
