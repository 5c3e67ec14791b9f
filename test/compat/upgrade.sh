#!/usr/bin/env bash
# Runs inside with-cluster.sh: installs the previous release of hpcacct (the version the
# update script to the current one starts from), fills it with the demo's site, updates it
# with ALTER EXTENSION hpcacct UPDATE, and requires
#   - the same reports (reports.sql) before and after the update,
#   - the same schema (schema.sql) as a fresh install of the current version.
#   - that a portal user of the previous release still reads every report after it.
# Then the whole chain: every earlier release (0.1 on) installs and, updated step by step
# to the current version, has a fresh install's schema. A frozen full install script is
# kept only where no update script leads (the base of the chain): PostgreSQL installs any
# other release from that base and the update scripts.
# Appends "upgrade passed failed" to $HPCACCT_TALLY.
set -uo pipefail
cd "$(dirname "$0")/../.."
. test/scripts/checks.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

current=$(sed -n "s/^default_version = '\(.*\)'/\1/p" hpcacct.control)
previous=$(ls sql/versions/hpcacct--*--"$current".sql 2>/dev/null | sed -n 's|.*/hpcacct--\([0-9.]*\)--[0-9.]*\.sql$|\1|p' \
           | sort -V | tail -1)
if [ -z "$previous" ]; then
    echo "not ok - no previous release of hpcacct in sql/versions"
    echo "upgrade 0 1" >>"$HPCACCT_TALLY"
    exit 0
fi
echo "# updating $previous to $current"

# The installed version of hpcacct in database $1.
extversion() { psql -X -At -d "$1" -c "SELECT extversion FROM pg_extension WHERE extname = 'hpcacct'"; }
# ALTER EXTENSION hpcacct UPDATE in database $1, verbose: its errors on one line in
# update_error, the version after it in update_version.
try_update() {
    psql -X -q -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -d "$1" -c 'ALTER EXTENSION hpcacct UPDATE' >/dev/null 2>"$work/$1.err"
    update_error=$(tr '\n' ' ' <"$work/$1.err")
    update_version=$(extversion "$1")
}
# The update of database $1, which 0.4 refuses: check $2 that it stopped at the previous
# version with the error $3 (SQLSTATE and message) and the hint that nothing was changed.
check_refused() {
    try_update "$1"
    check "$2 ($update_version)" \
        "$([[ $update_error == *"ERROR:  $3"*"HINT:  Nothing was changed."* ]] && [ "$update_version" = "$previous" ] && echo t)"
    [ "$update_version" = "$previous" ] || echo "    $update_error" | head -c 600
}
# A new database $1 of the previous release, with the statements after it (each a psql -c);
# their errors shown.
previous_db() {
    local db=$1; shift
    createdb "$db"
    psql -X -q -v ON_ERROR_STOP=1 -d "$db" -c "CREATE EXTENSION hpcacct VERSION '$previous' CASCADE" "$@" \
        >/dev/null 2>"$work/$db.err"
    grep -v '^NOTICE' "$work/$db.err" | sed 's/^/    /' | head -5
}
# The repair on stdin, which ends with the update, in database $1; check $2: it reached $current.
update_after_repair() {
    psql -X -q -v ON_ERROR_STOP=1 -d "$1" >/dev/null 2>"$work/$1.err"
    check "$2" "$([ "$(extversion "$1")" = "$current" ] && echo t)"
    grep -v '^NOTICE' "$work/$1.err" | sed 's/^/    /' | head -5
}

createdb hpcacct_upgrade
psql -X -q -v ON_ERROR_STOP=1 -d hpcacct_upgrade -c "CREATE EXTENSION hpcacct VERSION '$previous' CASCADE" >/dev/null 2>&1
check "version $previous installs" "$([ "$(extversion hpcacct_upgrade)" = "$previous" ] && echo t)"
# the demo's parts create the extension themselves: skip that statement; they are written in
# the current version's names, the previous release's replace those it renamed
for part in test/demo/*.sql; do
    grep -v '^CREATE EXTENSION' "$part" | sed -f test/compat/previous_names.sed | psql -X -q -v ON_ERROR_STOP=1 -d hpcacct_upgrade >/dev/null 2>"$work/demo.err" \
        || { echo "    $part:"; sed 's/^/    /' "$work/demo.err" | head -5; }
done
# the site's roles, as setup_roles() made them under the previous release, and a portal user
psql -X -q -v ON_ERROR_STOP=1 -d hpcacct_upgrade -c 'CALL hpcacct.setup_roles()' \
    -c 'CREATE ROLE hp_upgrade_portal LOGIN IN ROLE hpcacct_portal' >/dev/null
# ledger.pool (issue 18): under the previous release an allocation row named its pool in
# `cluster` -- the demo's GENCI grants (machine ada) and, here, an HLRN deposit booked on a
# cluster; the update moves them to `pool`, and charges keep their cluster
psql -X -q -v ON_ERROR_STOP=1 -d hpcacct_upgrade \
    -c "INSERT INTO hpcacct.ledger (account, kind, amount, unit, cluster, valid_from, valid_until, note)
        VALUES ('hbp00042', 'deposit', 500, 'NPL', 'hlrn', '2024-10-01', '2024-12-31', 'deposit on a cluster')" >/dev/null
allocation_clusters=$(psql -X -At -d hpcacct_upgrade -c "SELECT string_agg(format('%s:%s', entry_id, cluster), ' ' ORDER BY entry_id)
    FROM hpcacct.ledger WHERE kind <> 'charge' AND cluster IS NOT NULL")
charge_clusters=$(psql -X -At -d hpcacct_upgrade -c "SELECT count(*) || ' ' || md5(string_agg(format('%s:%s', entry_id, cluster), ' ' ORDER BY entry_id))
    FROM hpcacct.ledger WHERE kind = 'charge'")
sed -f test/compat/previous_names.sed test/compat/reports.sql | psql -X -q -d hpcacct_upgrade >"$work/before.txt" 2>&1

# the ledger's row updates so far (its statistics, flushed by the session that made them)
ledger_updates() { psql -X -At -d hpcacct_upgrade -c "SELECT n_tup_upd FROM pg_stat_user_tables WHERE relid = 'hpcacct.ledger'::regclass"; }
updates_before=$(ledger_updates)
psql -X -q -v ON_ERROR_STOP=1 -d hpcacct_upgrade -c 'ALTER EXTENSION hpcacct UPDATE' -c 'SELECT pg_stat_force_next_flush()' \
    >/dev/null 2>"$work/update.err"
check "ALTER EXTENSION hpcacct UPDATE from $previous to $current succeeds" \
    "$([ "$(extversion hpcacct_upgrade)" = "$current" ] && echo t)"
sed 's/^/    /' "$work/update.err" | head -10

psql -X -q -d hpcacct_upgrade -f test/compat/reports.sql >"$work/after.txt" 2>&1
portal_errors=$(for view in usage_by_resource usage_by_account usage_by_submitter usage_by_month quarter_balances \
                            window_quota_usage regulation_report; do
                    psql -X -q -At -U hp_upgrade_portal -d hpcacct_upgrade -c "SELECT count(*) FROM hpcacct.$view" 2>&1 |
                        grep ERROR
                done; psql -X -q -At -U hp_upgrade_portal -d hpcacct_upgrade -c 'SELECT count(*) FROM hpcacct.fairshare()' 2>&1 |
                        grep ERROR)
check "after the update a portal user still reads every report (the new rollup is granted)" \
    "$([ -z "$portal_errors" ] && echo t)"
[ -n "$portal_errors" ] && echo "$portal_errors" | head -3 | sed 's/^/    /'
check "the data and every report are unchanged by the update ($(wc -l <"$work/before.txt") lines)" \
    "$(cmp -s "$work/before.txt" "$work/after.txt" && echo t)"
diff "$work/before.txt" "$work/after.txt" | head -10

# each ledger row the update fills (job_submit, core_hours, pool) is written once: a second
# UPDATE of a row writes it again, with its index entries and WAL (test/bench/update.sh)
rewritten=$(psql -X -At -d hpcacct_upgrade -c "SELECT ($(ledger_updates) - $updates_before) || ' row updates of '
    || count(*) FILTER (WHERE kind <> 'charge' AND pool IS NOT NULL OR job_submit IS NOT NULL OR core_hours IS NOT NULL)
    || ' filled rows' FROM hpcacct.ledger")
check "the update writes each ledger row it fills once ($rewritten)" \
    "$(echo "$rewritten" | awk '$1 > 0 && $1 <= $5 { print "t" }')"

# ledger.pool (issue 18): each allocation row's pool is what its cluster said, no allocation
# row has a cluster, and the charges keep theirs, without a pool
allocation_pools=$(psql -X -At -d hpcacct_upgrade -c "SELECT string_agg(format('%s:%s', entry_id, pool), ' ' ORDER BY entry_id)
    FROM hpcacct.ledger WHERE kind <> 'charge' AND pool IS NOT NULL")
moved=$(psql -X -At -d hpcacct_upgrade -c "SELECT count(*) FILTER (WHERE kind = 'grant' AND pool = 'ada') || ' GENCI grants, '
        || count(*) FILTER (WHERE kind = 'deposit' AND pool = 'hlrn') || ' HLRN deposit, '
        || count(*) FILTER (WHERE kind <> 'charge' AND cluster IS NOT NULL) || ' allocation rows with a cluster'
    FROM hpcacct.ledger")
check "allocation rows name their pool in pool after the update ($moved)" \
    "$([ -n "$allocation_clusters" ] && [ "$allocation_clusters" = "$allocation_pools" ] \
       && case "$moved" in "0 "*) ;; *" 1 HLRN deposit, 0 allocation rows with a cluster") echo t ;; esac)"
[ "$allocation_clusters" = "$allocation_pools" ] || echo "    before: ${allocation_clusters:0:200}"$'\n'"    after:  ${allocation_pools:0:200}"
check "charges keep their cluster and have no pool after the update" \
    "$([ "$(psql -X -At -d hpcacct_upgrade -c "SELECT count(*) || ' ' || md5(string_agg(format('%s:%s', entry_id, cluster), ' ' ORDER BY entry_id))
            FROM hpcacct.ledger WHERE kind = 'charge' AND pool IS NULL")" = "$charge_clusters" ] && echo t)"

# the loader's key (issue 14): every existing charge of a job names the job's run afterwards
unnamed=$(psql -X -At -d hpcacct_upgrade -c "SELECT count(*) FILTER (WHERE l.job_submit IS DISTINCT FROM j.submit) || ' of ' || count(*)
    FROM hpcacct.ledger l JOIN hpcacct.job j ON j.cluster = l.cluster AND j.jobid = l.jobid WHERE l.kind = 'charge'")
check "every existing charge names its job's run (submit) after the update ($unnamed without)" \
    "$(case "$unnamed" in "0 of 0" | "") ;; "0 of "*) echo t ;; esac)"

# raw core-hours (issue 16): the charges of jobs still in the job table get theirs, and each
# job's charges net to its cores x hours
cores=$(psql -X -At -d hpcacct_upgrade -c "SELECT count(*) FILTER (WHERE c.core_hours IS DISTINCT FROM
        round(hpcacct.tres_get(j.alloctres, 'cpu')::numeric * EXTRACT(epoch FROM j.\"end\" - j.start) / 3600, 6)) || ' of ' || count(*)
    FROM hpcacct.job j
    JOIN (SELECT cluster, jobid, job_submit, sum(core_hours) AS core_hours FROM hpcacct.ledger WHERE kind = 'charge'
          GROUP BY 1, 2, 3) c ON c.cluster = j.cluster AND c.jobid = j.jobid AND c.job_submit IS NOT DISTINCT FROM j.submit")
check "every job's charges carry its raw core-hours after the update ($cores jobs differ)" \
    "$(case "$cores" in "0 of 0" | "") ;; "0 of "*) echo t ;; esac)"

createdb hpcacct_fresh
psql -X -q -d hpcacct_fresh -c 'CREATE EXTENSION hpcacct CASCADE' >/dev/null 2>&1
psql -X -q -d hpcacct_fresh -c 'SELECT hpcacct.create_job_table()' >/dev/null 2>&1  # as the demo did
psql -X -q -d hpcacct_fresh -c 'CALL hpcacct.setup_roles()' >/dev/null 2>&1         # as the site did
psql -X -q -d hpcacct_fresh -f test/compat/schema.sql >"$work/fresh.txt" 2>&1
psql -X -q -d hpcacct_upgrade -f test/compat/schema.sql >"$work/updated.txt" 2>&1
check "the updated schema equals a fresh install of $current ($(wc -l <"$work/fresh.txt") lines compared)" \
    "$(cmp -s "$work/fresh.txt" "$work/updated.txt" && echo t)"
diff "$work/fresh.txt" "$work/updated.txt" | head -20

# ---- empty names (rows 0.3 took that 0.4's constraints refuse; slurm_account_map is new) ----
# The update stops before it changes anything, with 23514 naming each row; once they are named
# (the ledger's as the README's *updates* says: the site renames the unit, trigger disabled,
# rollups rebuilt) it runs.
previous_db hpcacct_empty_names \
    -c "INSERT INTO hpcacct.account (name) VALUES ('en1')" \
    -c "INSERT INTO hpcacct.resource (cluster, partition, node, bundle, rate, unit) VALUES ('', 'p', 'cpu=4', 'cpu=1', 1, '')" \
    -c "INSERT INTO hpcacct.ledger (account, kind, amount, unit, valid_from, valid_until)
        VALUES ('en1', 'grant', 10, '', '2024-01-01', '2024-12-31')" \
    -c "INSERT INTO hpcacct.quota_period (account, period_start, period_end, cluster, unit)
        VALUES ('en1', '2024-01-01', '2024-06-30', '', 'core-hours')" \
    -c "INSERT INTO hpcacct.pending_job (cluster, jobid, username) VALUES ('c', '', 'u')"
try_update hpcacct_empty_names
empty_error=$update_error
empty_state=$(psql -X -At -d hpcacct_empty_names -c "SELECT e.extversion || ' ' || (SELECT count(*) FROM hpcacct.resource WHERE cluster = '')
    || ' ' || (SELECT count(*) FROM hpcacct.ledger WHERE unit = '') || ' ' || (SELECT count(*) FROM hpcacct.quota_period WHERE cluster = '')
    || ' ' || (SELECT count(*) FROM hpcacct.pending_job WHERE jobid = '')
    FROM pg_extension e WHERE e.extname = 'hpcacct'")
check "rows with empty names stop the update with 23514 naming each, nothing changed ($empty_state)" \
    "$(case "$empty_error" in *"ERROR:  23514: hpcacct 0.4 refuses empty names, and 4 rows hold one: "*"ledger entry 1: unit; "*"pending_job ('c', ''): jobid; "*"quota_period ('en1', 2024-01-01): cluster; "*"resource 1: cluster, unit"*"HINT:  Nothing was changed."*)
           [ "$empty_state" = "$previous 1 1 1 1" ] && echo t ;; esac)"
[ "$empty_state" = "$previous 1 1 1 1" ] || echo "    $empty_error" | head -c 600
update_after_repair hpcacct_empty_names "named, they let the update run" <<'SQL'
BEGIN;
UPDATE hpcacct.resource SET cluster = 'c', unit = 'core-hours' WHERE resource_id = 1;
ALTER TABLE hpcacct.ledger DISABLE TRIGGER ledger_append_only;
UPDATE hpcacct.ledger SET unit = 'core-hours' WHERE unit = '';
ALTER TABLE hpcacct.ledger ENABLE TRIGGER ledger_append_only;
SELECT hpcacct.rebuild_rollup();
UPDATE hpcacct.quota_period SET cluster = NULL WHERE cluster = '';
DELETE FROM hpcacct.pending_job WHERE jobid = '';
COMMIT;
ALTER EXTENSION hpcacct UPDATE;
SQL
dropdb hpcacct_empty_names

# ---- a midnight that came twice, and a charge without an end ----
# America/Havana, 1 November 2026: PostgreSQL's midnight is the second (05:00 UTC). The previous
# release's rollup counted a job begun or ended in the first pass in November; the update
# rebuilds the rollups where the time zone has such a midnight in their months (and only there:
# the demo's update above rebuilt nothing). A charge without job_end stops it first (23514).
previous_db hpcacct_midnight \
    -c "INSERT INTO hpcacct.setting VALUES ('timezone', 'America/Havana')" \
    -c "INSERT INTO hpcacct.account (name) VALUES ('hv1')" \
    -c "INSERT INTO hpcacct.resource (cluster, partition, node, bundle, rate, unit) VALUES ('hv', 'p', 'cpu=64', 'cpu=1', 1, 'NPL')" \
    -c "INSERT INTO hpcacct.ledger (account, kind, amount, unit, resource_id, cluster, jobid, submitter, job_start, job_end)
        VALUES ('hv1', 'charge', 727.5, 'NPL', 1, 'hv', 'long', 'u', '2026-11-01 04:30+00', '2026-12-01 12:00+00'),
               ('hv1', 'charge', 40, 'NPL', 1, 'hv', 'first', 'u', '2026-11-01 04:10+00', '2026-11-01 04:50+00'),
               ('hv1', 'charge', 5, 'NPL', 1, 'hv', 'open', 'u', '2026-11-02 10:00+00', NULL)"
check_refused hpcacct_midnight "a charge without job_end stops the update with 23514 naming it, nothing changed" \
    "23514: hpcacct 0.4 refuses a charge without job_end, and 1 charges have none: ledger entry 3 (hv open)"
psql -X -q -v ON_ERROR_STOP=1 -d hpcacct_midnight >/dev/null 2>"$work/midnight.err" <<'SQL'
BEGIN;
ALTER TABLE hpcacct.ledger DISABLE TRIGGER ledger_append_only;
UPDATE hpcacct.ledger SET job_end = '2026-11-02 15:00+00' WHERE jobid = 'open';
ALTER TABLE hpcacct.ledger ENABLE TRIGGER ledger_append_only;
COMMIT;
ALTER EXTENSION hpcacct UPDATE;
SQL
rollup_vs_ledger=$(psql -X -At -d hpcacct_midnight -c "
    SELECT (SELECT string_agg(month || ' ' || round(s, 6), ', ' ORDER BY month)
            FROM (SELECT month, sum(amount) AS s FROM hpcacct.charge_rollup GROUP BY month) r)
           || ' / ' ||
           (SELECT string_agg(m::date || ' ' || round(s, 6), ', ' ORDER BY m)
            FROM (SELECT g.m, sum(l.amount * hpcacct.period_share(l.job_start, l.job_end, g.m AT TIME ZONE 'America/Havana',
                                                                 (g.m + interval '1 month') AT TIME ZONE 'America/Havana')) AS s
                  FROM hpcacct.ledger l, generate_series('2026-10-01'::timestamp, '2026-12-01', '1 month') g(m)
                  WHERE l.kind = 'charge' GROUP BY g.m) d)")
# (rows the update wrote have its transaction's xmin, which pg_extension's row has too)
rewritten="SELECT count(*) FILTER (WHERE c.xmin = e.xmin) || ' of ' || count(*) FROM hpcacct.charge_rollup c,
           (SELECT xmin FROM pg_extension WHERE extname = 'hpcacct') e"
midnight_rewritten=$(psql -X -At -d hpcacct_midnight -c "$rewritten")
check "given its end, the update runs and rebuilds the rollups ($midnight_rewritten rows): each month the job-by-job sum ($rollup_vs_ledger)" \
    "$([ "${midnight_rewritten%% of *}" != 0 ] && [ "${midnight_rewritten%% of *}" = "${midnight_rewritten##* of }" ] \
       && [ "$(extversion hpcacct_midnight)" = "$current" ] \
       && [ "${rollup_vs_ledger% / *}" = "${rollup_vs_ledger#* / }" ] && echo t)"
grep -v '^NOTICE' "$work/midnight.err" | sed 's/^/    /' | head -5
demo_rewritten=$(psql -X -At -d hpcacct_upgrade -c "$rewritten")
check "the demo's update (Europe/Berlin) did not rebuild the rollups ($demo_rewritten rows written)" \
    "$(case "$demo_rewritten" in "0 of 0") ;; "0 of "*) echo t ;; esac)"
dropdb hpcacct_midnight

# ---- an allocation entry without the end of its window (0.3's constraint let it through) ----
previous_db hpcacct_open_window \
    -c "INSERT INTO hpcacct.account (name) VALUES ('ow1')" \
    -c "INSERT INTO hpcacct.ledger (account, kind, amount, unit, valid_from, valid_until)
        VALUES ('ow1', 'deposit', 100, 'NPL', '2024-01-01', NULL)"
check_refused hpcacct_open_window "an allocation entry without valid_until stops the update with 23514 naming it, nothing changed" \
    "23514: hpcacct 0.4 refuses an allocation entry without valid_until, and 1 entries have none: ledger entry 1 (deposit ow1)"
update_after_repair hpcacct_open_window "given its end, the update runs" <<'SQL'
BEGIN;
ALTER TABLE hpcacct.ledger DISABLE TRIGGER ledger_append_only;
UPDATE hpcacct.ledger SET valid_until = '2024-03-31' WHERE account = 'ow1';
ALTER TABLE hpcacct.ledger ENABLE TRIGGER ledger_append_only;
COMMIT;
ALTER EXTENSION hpcacct UPDATE;
SQL
dropdb hpcacct_open_window

# ---- a time zone abbreviation as the site's zone (0.3's check took one) ----
previous_db hpcacct_zone_abbrev \
    -c "INSERT INTO hpcacct.setting VALUES ('timezone', 'IST')"
check_refused hpcacct_zone_abbrev "a site time zone set to an abbreviation (IST) stops the update with 22023 naming it, nothing changed" \
    "22023: hpcacct 0.4 takes a time zone's name as the setting timezone, not \"IST\""
update_after_repair hpcacct_zone_abbrev "given the zone's name, the update runs" <<'SQL'
UPDATE hpcacct.setting SET value = 'Asia/Kolkata' WHERE name = 'timezone';
ALTER EXTENSION hpcacct UPDATE;
SQL
dropdb hpcacct_zone_abbrev

# ---- a validity window its machine's month convention makes empty (0.3 booked it; every
# figure of the account on the machine then failed with 22023, the regulation run too) ----
previous_db hpcacct_empty_window \
    -c "INSERT INTO hpcacct.account (name) VALUES ('ew1')" \
    -c "INSERT INTO hpcacct.machine_setting (machine, monthly_threshold) VALUES ('ada', 100)" \
    -c "INSERT INTO hpcacct.ledger (account, kind, amount, unit, cluster, valid_from, valid_until)
        VALUES ('ew1', 'supplement', 1000, 'hours', 'ada', '2024-12-28', '2024-12-31')"
check_refused hpcacct_empty_window "a window half_month makes empty (28-31 December) stops the update with 22023 naming it, nothing changed" \
    "22023: hpcacct 0.4 refuses an allocation window that its machine's month convention makes empty, and 1 entries have one: ledger entry 1 (supplement ew1 on ada, 2024-12-28 to 2024-12-31)"
update_after_repair hpcacct_empty_window "with the machine's convention day, the update runs" <<'SQL'
UPDATE hpcacct.machine_setting SET month_convention = 'day' WHERE machine = 'ada';
ALTER EXTENSION hpcacct UPDATE;
SQL
dropdb hpcacct_empty_window

# ---- two job tables: the charges of each get their run, hpcacct.job's their core-hours ----
# (with one job table, the update fills job_submit and core_hours in one UPDATE; with two,
# job_submit from each table and core_hours from hpcacct.job in a second one)
previous_db hpcacct_two_tables \
    -c "SELECT hpcacct.create_job_table(), hpcacct.create_job_table('hpcacct.job_other')" \
    -c "INSERT INTO hpcacct.account (name) VALUES ('tt1')" \
    -c "INSERT INTO hpcacct.resource (cluster, partition, node, bundle, rate, unit)
        VALUES ('c1', 'p', 'cpu=4', 'cpu=1', 1, 'core-hours'), ('c2', 'p', 'cpu=4', 'cpu=1', 1, 'core-hours')" \
    -c "INSERT INTO hpcacct.job VALUES ('c1', '7', 'tt1', 'u', 'p', '2024-03-01 10:00+00', '2024-03-01 11:00+00',
                                        '2024-03-01 13:00+00', 'cpu=2', 'COMPLETED')" \
    -c "INSERT INTO hpcacct.job_other VALUES ('c2', '7', 'tt1', 'u', 'p', '2024-03-02 10:00+00', '2024-03-02 11:00+00',
                                              '2024-03-02 12:00+00', 'cpu=4', 'COMPLETED')"
try_update hpcacct_two_tables
two_tables=$(PGTZ=UTC psql -X -At -d hpcacct_two_tables -c "SELECT string_agg(format('%s/%s %s %s', cluster, jobid, job_submit,
        coalesce(core_hours::text, 'NULL')), '; ' ORDER BY entry_id) FROM hpcacct.ledger WHERE kind = 'charge'")
check "with two job tables each charge gets its run, hpcacct.job's its core-hours ($update_version: $two_tables)" \
    "$([ "$update_version" = "$current" ] \
       && [ "$two_tables" = "c1/7 2024-03-01 10:00:00+00 4.000000; c2/7 2024-03-02 10:00:00+00 NULL" ] && echo t)"
[ -n "$update_error" ] && echo "    $update_error" | head -c 600
dropdb hpcacct_two_tables

# ---- a refused update stops before it writes: its checks of the existing rows come first ----
# (at the end, they let a large site wait for the whole update, and its WAL, before the error)
previous_db hpcacct_refused \
    -c "SELECT hpcacct.create_job_table()" \
    -c "INSERT INTO hpcacct.account (name) VALUES ('rf1')" \
    -c "INSERT INTO hpcacct.resource (cluster, partition, node, bundle, rate, unit) VALUES ('c1', 'p', 'cpu=4', 'cpu=1', 1, 'core-hours')" \
    -c "INSERT INTO hpcacct.job VALUES ('c1', '8', 'rf1', 'u', 'p', '2024-03-01 10:00+00', '2024-03-01 11:00+00',
                                        '2024-03-01 13:00+00', 'cpu=2', 'COMPLETED')" \
    -c "INSERT INTO hpcacct.ledger (account, kind, amount, unit, valid_from, valid_until)
        VALUES ('rf1', 'deposit', 100, 'NPL', '2024-01-01', NULL)"
# without ON_ERROR_STOP: the flush of the session's statistics runs after the refused update
psql -X -q -v VERBOSITY=verbose -d hpcacct_refused -c 'ALTER EXTENSION hpcacct UPDATE' -c 'SELECT pg_stat_force_next_flush()' \
    >/dev/null 2>"$work/refused.err"
refused=$(psql -X -At -d hpcacct_refused -c "SELECT (SELECT extversion FROM pg_extension WHERE extname = 'hpcacct') || ', '
    || n_tup_upd || ' ledger rows updated' FROM pg_stat_user_tables WHERE relid = 'hpcacct.ledger'::regclass")
check "a refused update stops before it writes the ledger ($refused)" \
    "$(grep -q '23514' "$work/refused.err" && [ "$refused" = "$previous, 0 ledger rows updated" ] && echo t)"
grep -q '23514' "$work/refused.err" || head -c 600 "$work/refused.err"
dropdb hpcacct_refused

# ---- the whole chain ----
releases=$(ls sql/versions/hpcacct--*--*.sql | sed -n 's|.*/hpcacct--\([0-9.]*\)--[0-9.]*\.sql$|\1|p' | sort -uV)
bases=$(ls sql/versions/hpcacct--*.sql | sed -n 's|.*/hpcacct--\([0-9.]*\)\.sql$|\1|p' | sort -V)
reached=$(ls sql/versions/hpcacct--*--*.sql | sed -n 's|.*/hpcacct--[0-9.]*--\([0-9.]*\)\.sql$|\1|p' | sort -uV)
needless=$(comm -12 <(echo "$bases") <(echo "$reached") | tr '\n' ' ')
check "each frozen full install script is the base of an update path (none that an update reaches${needless:+: $needless})" \
    "$([ -z "$needless" ] && echo t)"
for version in $releases; do
    db="hpcacct_chain_${version//./_}"
    createdb "$db"
    psql -X -q -v ON_ERROR_STOP=1 -d "$db" -c "CREATE EXTENSION hpcacct VERSION '$version' CASCADE" >/dev/null 2>"$work/chain.err"
    installed=$(extversion "$db")
    psql -X -q -v ON_ERROR_STOP=1 -d "$db" -c 'ALTER EXTENSION hpcacct UPDATE' 2>>"$work/chain.err"
    psql -X -q -d "$db" -c 'SELECT hpcacct.create_job_table()' >/dev/null 2>&1
    psql -X -q -d "$db" -c 'CALL hpcacct.setup_roles()' >/dev/null 2>&1
    psql -X -q -d "$db" -f test/compat/schema.sql >"$work/chain.txt" 2>&1
    check "release $version installs${installed:+ ($installed)} and, updated to $current, has a fresh install's schema" \
        "$([ "$installed" = "$version" ] && cmp -s "$work/fresh.txt" "$work/chain.txt" && echo t)"
    grep -v '^NOTICE' "$work/chain.err" | sed 's/^/    /' | head -5
    diff "$work/fresh.txt" "$work/chain.txt" | head -10
    dropdb "$db"
done

rm -rf "$work"
report upgrade
