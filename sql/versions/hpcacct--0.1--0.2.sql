-- hpcacct 0.1 -> 0.2: every function of the extension has a comment; only administrators may
-- attach the charging trigger function (it writes the ledger with the owner's rights);
-- open_quarter logs a default-project reset once per user (0.1 kept one row per account).

\echo Use "ALTER EXTENSION hpcacct UPDATE TO '0.2'" to load this file. \quit

COMMENT ON FUNCTION @extschema@.tres_in(cstring) IS 'Text input of tres: Slurm TRES syntax, validated';
COMMENT ON FUNCTION @extschema@.tres_out(@extschema@.tres) IS 'Canonical text of a tres: keys sorted, memory in the largest whole unit';
COMMENT ON FUNCTION @extschema@.tres_recv(internal) IS 'Binary input of tres, validated as text input is';
COMMENT ON FUNCTION @extschema@.tres_send(@extschema@.tres) IS 'Binary output of tres: count, then key and float8 value per component';
COMMENT ON FUNCTION @extschema@.tres_eq(@extschema@.tres, @extschema@.tres) IS 'Equality of canonical resource vectors (operator =)';
COMMENT ON FUNCTION @extschema@.tres_ne(@extschema@.tres, @extschema@.tres) IS 'Inequality of canonical resource vectors (operator <>)';
COMMENT ON FUNCTION @extschema@.tres_lt(@extschema@.tres, @extschema@.tres) IS 'Order of resource vectors by key, then value (operator <)';
COMMENT ON FUNCTION @extschema@.tres_le(@extschema@.tres, @extschema@.tres) IS 'Order of resource vectors by key, then value (operator <=)';
COMMENT ON FUNCTION @extschema@.tres_gt(@extschema@.tres, @extschema@.tres) IS 'Order of resource vectors by key, then value (operator >)';
COMMENT ON FUNCTION @extschema@.tres_ge(@extschema@.tres, @extschema@.tres) IS 'Order of resource vectors by key, then value (operator >=)';
COMMENT ON FUNCTION @extschema@.tres_cmp(@extschema@.tres, @extschema@.tres) IS 'Btree support: -1, 0 or 1 by key, then value';
COMMENT ON FUNCTION @extschema@.tres_hash(@extschema@.tres) IS 'Hash support: hash of the canonical form';
COMMENT ON FUNCTION @extschema@.tres_hash_extended(@extschema@.tres, bigint) IS 'Hash support: seeded 64-bit hash of the canonical form';
COMMENT ON FUNCTION @extschema@.check_setting() IS 'Trigger: only known settings, with values of the right kind';
COMMENT ON FUNCTION @extschema@.ledger_is_append_only() IS 'Trigger: refuses UPDATE, DELETE and TRUNCATE of the ledger (HA001)';
COMMENT ON FUNCTION @extschema@.job_columns(regclass, text[]) IS 'The columns charging reads from a job table, checked, from role=column pairs';
COMMENT ON FUNCTION @extschema@.check_personal_allotment() IS 'Trigger: a personal allotment is at most double the setting';

REVOKE EXECUTE ON FUNCTION @extschema@.charge_jobs() FROM PUBLIC;

ALTER TABLE @extschema@.quarter_log
    DROP CONSTRAINT quarter_log_pkey,
    ADD CONSTRAINT quarter_log_once UNIQUE NULLS NOT DISTINCT (quarter, account, action, target_quarter, username);

CREATE OR REPLACE PROCEDURE @extschema@.open_quarter(q date)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        this_quarter constant date := @extschema@.quarter_start(q);
        previous_quarter constant date := (@extschema@.quarter_start(q) - interval '3 months')::date;
        personal record;
        deposited numeric;
        target date;
    BEGIN
        IF q IS NULL OR NOT isfinite(q) THEN
            RAISE EXCEPTION 'open_quarter needs a finite date' USING ERRCODE = 'datetime_field_overflow';
        END IF;
        -- one run at a time
        PERFORM pg_advisory_xact_lock(pg_catalog.hashtext('hpcacct.open_quarter'));

        FOR personal IN
            SELECT a.name FROM @extschema@.account a
            WHERE a.kind = 'personal' AND a.deleted_in IS NULL
              AND EXISTS (SELECT 1 FROM @extschema@.membership m JOIN @extschema@.account p ON p.name = m.account
                          WHERE m.username = a.name AND p.kind = 'project'
                            AND @extschema@.account_state(p.name, this_quarter) = 'active')
            ORDER BY a.name
        LOOP
            FOR i IN 0 .. 2 LOOP
                target := (this_quarter + i * interval '3 months')::date;
                deposited := @extschema@.top_up(personal.name, target, @extschema@.personal_allotment(personal.name));
                IF deposited > 0 THEN
                    INSERT INTO @extschema@.quarter_log (quarter, account, action, target_quarter, amount)
                    VALUES (this_quarter, personal.name, 'top_up', target, deposited)
                    ON CONFLICT ON CONSTRAINT quarter_log_once
                    DO UPDATE SET amount = @extschema@.quarter_log.amount + EXCLUDED.amount;
                END IF;
            END LOOP;
        END LOOP;

        -- expire personal accounts without an allocation for this quarter
        INSERT INTO @extschema@.quarter_log (quarter, account, action, target_quarter)
        SELECT this_quarter, a.name, 'expired', this_quarter
        FROM @extschema@.account a
        WHERE a.kind = 'personal' AND a.deleted_in IS NULL
          AND NOT EXISTS (SELECT 1 FROM @extschema@.ledger l
                          WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer')
                            AND l.unit = (SELECT @extschema@.setting_value('bank_unit')) AND l.valid_from = this_quarter
                          HAVING sum(l.amount) > 0)
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

        -- default projects that point to expired or deleted accounts fall back to the personal one
        WITH stale AS (
            SELECT u.username, u.default_account
            FROM @extschema@.hpc_user u
            WHERE u.default_account IS NOT NULL
              AND @extschema@.account_state(u.default_account, this_quarter) IN ('expired', 'deleted')
            FOR UPDATE
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
