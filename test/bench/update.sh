#!/usr/bin/env bash
# The cost of ALTER EXTENSION hpcacct UPDATE from the previous release at a site with a real
# ledger: builds and installs, then, in a throw-away cluster, fills the previous release with
# the bench's synthetic site (jobs.sql, site.sql, allocations.sql) and measures the update on
# a copy of that database: elapsed time, the statements that take it (pg_stat_statements,
# nested statements too), the locks it holds and what a second session waits on, WAL and
# temporary bytes written, and whether it rewrites or scans the ledger and the job table.
#
#   UPDATE_JOBS=100000  jobs of the site (UPDATE_JOBS=1000000 for the figures in RESULTS.md)
#   SEED=42, ANCHOR=date  as for test/bench/run.sh
#   BASELINE=rev        also measure the update script of git revision rev (e.g. main) on a
#                       second copy of the same database, this one and it alternating; it is
#                       installed as version "<current>base" for the run and removed after
#   ROUNDS=1            measurements of each script
#   HOLD=8              seconds the update's transaction stays open after the update for the
#                       second session's probes
# Prints everything to stdout; test/bench/out-update/ keeps the per-statement tables.
set -euo pipefail
cd "$(dirname "$0")/../.."

export PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
if [ "${UPDATE_IN_CLUSTER:-0}" != 1 ]; then
    make -s PG_CONFIG=$PG_CONFIG all >/dev/null
    flock "$($PG_CONFIG --sharedir)/extension" make -s PG_CONFIG=$PG_CONFIG install >/dev/null
    baseline_file=
    if [ -n "${BASELINE:-}" ]; then
        current=$(sed -n "s/^default_version = '\(.*\)'/\1/p" hpcacct.control)
        previous=$(ls sql/versions/hpcacct--*--"$current".sql | sed -n 's|.*/hpcacct--\([0-9.]*\)--[0-9.]*\.sql$|\1|p' | sort -V | tail -1)
        baseline_file=$($PG_CONFIG --sharedir)/extension/hpcacct--$previous--${current}base.sql
        git show "$BASELINE:sql/versions/hpcacct--$previous--$current.sql" >"$baseline_file"
        trap 'rm -f "$baseline_file"' EXIT
    fi
    UPDATE_IN_CLUSTER=1 test/scripts/with-cluster.sh update "$0"
    exit
fi

# ---- inside the cluster ----------------------------------------------------------------
JOBS=${UPDATE_JOBS:-100000}
SEED=${SEED:-42}
ANCHOR=${ANCHOR:-$(date +%F)}
HOLD=${HOLD:-8}
ROUNDS=${ROUNDS:-1}
out=test/bench/out-update
rm -rf "$out"; mkdir -p "$out"
bindir=$("$PG_CONFIG" --bindir)
export PGTZ=UTC PGOPTIONS='-c client_min_messages=warning'
log() { printf '[%s] %s\n' "$(date +%T)" "$*" >&2; }
q() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }
value() { psql -X -q -At -v ON_ERROR_STOP=1 "$@"; }
as_server_owner() { if [ "$(id -u)" -eq 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi; }

current=$(sed -n "s/^default_version = '\(.*\)'/\1/p" hpcacct.control)
previous=$(ls sql/versions/hpcacct--*--"$current".sql | sed -n 's|.*/hpcacct--\([0-9.]*\)--[0-9.]*\.sql$|\1|p' | sort -V | tail -1)
baseline=
[ -f "$($PG_CONFIG --sharedir)/extension/hpcacct--$previous--${current}base.sql" ] && [ -n "${BASELINE:-}" ] && baseline=${current}base

# a site's settings (full_page_writes on: the WAL a site writes), pg_stat_statements for the
# statements inside the update script
q -d postgres <<'SQL'
ALTER SYSTEM SET shared_buffers = '2GB';
ALTER SYSTEM SET maintenance_work_mem = '512MB';
ALTER SYSTEM SET work_mem = '64MB';
ALTER SYSTEM SET max_wal_size = '16GB';
ALTER SYSTEM SET checkpoint_timeout = '30min';
ALTER SYSTEM SET full_page_writes = on;
ALTER SYSTEM SET jit = off;
ALTER SYSTEM SET shared_preload_libraries = 'pg_cron', 'pg_stat_statements';
SQL
as_server_owner "$bindir/pg_ctl" -D "$PGHOST/data" -l "$HPCACCT_SERVER_LOG" -w restart >/dev/null
q -d postgres -c "ALTER SYSTEM SET pg_stat_statements.track = 'all'" -c 'ALTER SYSTEM SET pg_stat_statements.max = 20000'
as_server_owner "$bindir/pg_ctl" -D "$PGHOST/data" -l "$HPCACCT_SERVER_LOG" -w restart >/dev/null

# ---- the previous release with the bench's site ---------------------------------------
t0=$(date +%s)
createdb site
q -d site -c "CREATE EXTENSION hpcacct VERSION '$previous' CASCADE"
# common.sql's functions name the current version's objects: not checked at creation here
PGOPTIONS="$PGOPTIONS -c check_function_bodies=off" q -d site -v seed="$SEED" -f test/bench/common.sql
sed -f test/compat/previous_names.sed test/bench/site.sql | q -d site -v seed="$SEED" -v anchor="$ANCHOR"
file=$PGHOST/jobs.tsv
q -d site -v lo=1 -v hi="$JOBS" -v jobs="$JOBS" -v file="$file" -f test/bench/jobs.sql
log "site and $JOBS jobs generated in $(($(date +%s) - t0))s"
t=$(date +%s)
q -d site -c "COPY hpcacct.job FROM '$file'"
rm -f "$file"
log "charged them (COPY through $previous's trigger) in $(($(date +%s) - t))s"
sed -f test/compat/previous_names.sed -e 's/\bl\.pool = s\.machine\b/l.cluster = s.machine/' test/bench/allocations.sql | q -d site
q -d site -c 'CALL hpcacct.setup_roles()'
q -d site -c 'VACUUM ANALYZE'
value -d site -c "SELECT 'site: ' || (SELECT count(*) FROM hpcacct.job) || ' jobs, '
                         || (SELECT count(*) FROM hpcacct.ledger) || ' ledger rows (ledger '
                         || pg_size_pretty(pg_total_relation_size('hpcacct.ledger')) || ' with indexes, job table '
                         || pg_size_pretty(pg_total_relation_size('hpcacct.job')) || ', database '
                         || pg_size_pretty(pg_database_size(current_database())) || ')'"
log "site ready in $(($(date +%s) - t0))s"

# the tables a probe may touch: sizes and identities before and after
tables="'hpcacct.ledger', 'hpcacct.job', 'hpcacct.charge_rollup', 'hpcacct.consumption_rollup', 'hpcacct.account'"
table_state() {
    value -d "$1" -F ' ' -c "SELECT c.oid::regclass, c.relfilenode, pg_relation_size(c.oid), coalesce(s.seq_scan, 0),
                                    coalesce(s.n_tup_upd, 0), coalesce(s.n_tup_hot_upd, 0)
                             FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
                             WHERE c.oid IN (SELECT to_regclass(x) FROM unnest(ARRAY[$tables]) x) ORDER BY 1"
}

# One measured update of a fresh copy of the site: update to version $2, label $1.
measure() {
    local label=$1 to=$2 db=site_$1 pid
    q -d postgres -c "CREATE DATABASE $db TEMPLATE site STRATEGY file_copy"
    q -d $db -c 'CREATE EXTENSION IF NOT EXISTS pg_stat_statements' -c 'SELECT pg_stat_statements_reset()' >/dev/null
    table_state $db >"$out/$label.before"
    q -d $db -c 'CHECKPOINT'
    local lsn0 temp0
    lsn0=$(value -d $db -c 'SELECT pg_current_wal_lsn()')
    temp0=$(value -d $db -c 'SELECT temp_bytes FROM pg_stat_database WHERE datname = current_database()')
    # the update, its transaction held open HOLD seconds after it for the probes
    PGAPPNAME=hpcacct_update_$label psql -X -q -At -v ON_ERROR_STOP=1 -d $db >"$out/$label.update" 2>&1 <<SQL &
BEGIN;
SELECT 'start ' || extract(epoch FROM clock_timestamp());
ALTER EXTENSION hpcacct UPDATE TO '$to';
SELECT 'end ' || extract(epoch FROM clock_timestamp());
SELECT pg_sleep($HOLD);
COMMIT;
SQL
    pid=$!
    # the update's locks as they are taken: first seen (seconds into the update)
    local start; start=$(date +%s.%N)
    : >"$out/$label.locks"
    while ! grep -q '^end ' "$out/$label.update" 2>/dev/null && kill -0 $pid 2>/dev/null; do
        value -d $db -F ' ' -c "SELECT l.relation::regclass, l.mode FROM pg_locks l JOIN pg_stat_activity a USING (pid)
                                WHERE a.application_name = 'hpcacct_update_$label' AND l.locktype = 'relation'
                                  AND l.mode IN ('AccessExclusiveLock', 'ExclusiveLock', 'ShareLock', 'ShareRowExclusiveLock')
                                  AND l.relation::regclass::text IN ($tables)" 2>/dev/null |
            awk -v t="$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')" '{ print t, $0 }' >>"$out/$label.locks"
        sleep 0.5
    done
    # second sessions during the update's transaction, all at once: what each waits on
    if grep -q '^end ' "$out/$label.update"; then
        local names=() sqls=() i ppids=()
        names+=("SELECT count(*) FROM hpcacct.ledger"); sqls+=("SELECT count(*) FROM hpcacct.ledger")
        names+=("SELECT count(*) FROM hpcacct.job"); sqls+=("SELECT count(*) FROM hpcacct.job")
        names+=("INSERT INTO hpcacct.job (a job)")
        sqls+=("BEGIN; INSERT INTO hpcacct.job VALUES ('probe', 'p1', 'gen0001', 'u', 'cpu', now(), now(), now(), 'cpu=1', 'COMPLETED'); ROLLBACK;")
        names+=("hpcacct.check_submit('pi_gen0001')"); sqls+=("SELECT * FROM hpcacct.check_submit('pi_gen0001')")
        names+=("SELECT count(*) FROM hpcacct.account"); sqls+=("SELECT count(*) FROM hpcacct.account")
        names+=("hpcacct.balance('hbk0001')"); sqls+=("SELECT hpcacct.balance('hbk0001')")
        for i in "${!sqls[@]}"; do
            PGAPPNAME=hpcacct_probe_$i psql -X -q -At -d $db -c "SET statement_timeout = '4s'" -c "${sqls[$i]}" >/dev/null 2>&1 &
            ppids+=($!)
        done
        sleep 2
        {
            echo "probes from second sessions while the update's transaction is open ($label):"
            for i in "${!sqls[@]}"; do
                printf '  %-40s %s\n' "${names[$i]}" "$(value -d $db -c "SELECT coalesce(string_agg(DISTINCT coalesce(l.relation::regclass::text, l.locktype)
                                                                                            || ' (' || l.mode || ')', ', '), 'does not wait')
                    FROM pg_locks l JOIN pg_stat_activity a USING (pid)
                    WHERE a.application_name = 'hpcacct_probe_$i' AND NOT l.granted")"
            done
            echo "  the update holds ACCESS EXCLUSIVE on: $(value -d $db -c "SELECT string_agg(c.relname, ', ' ORDER BY pg_relation_size(c.oid) DESC, c.relname)
                FROM pg_locks l JOIN pg_stat_activity a USING (pid) JOIN pg_class c ON c.oid = l.relation
                WHERE a.application_name = 'hpcacct_update_$label' AND l.mode = 'AccessExclusiveLock' AND c.relkind IN ('r', 'p', 'm')")"
        } | tee "$out/$label.probes"
        for i in "${ppids[@]}"; do wait "$i" || true; done
    fi
    wait $pid || { cat "$out/$label.update"; exit 1; }
    local s e
    s=$(sed -n 's/^start //p' "$out/$label.update"); e=$(sed -n 's/^end //p' "$out/$label.update")
    local wal temp
    wal=$(value -d $db -c "SELECT pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), '$lsn0'))")
    temp=$(value -d $db -c "SELECT pg_size_pretty(temp_bytes - $temp0) FROM pg_stat_database WHERE datname = current_database()")
    sleep 1  # the statistics of the ended transaction
    table_state $db >"$out/$label.after"
    echo "== $label: ALTER EXTENSION hpcacct UPDATE TO '$to': $(awk -v a="$s" -v b="$e" 'BEGIN { printf "%.1f", b - a }') s, WAL $wal, temporary files $temp"
    echo "   table: relfilenode changed (rewrite), size before -> after, sequential scans, rows updated (HOT)"
    join <(sort "$out/$label.before") <(sort "$out/$label.after") |
        awk '{ printf "   %-28s %-3s %6.0f -> %6.0f MB  %2d scans  %8d updated (%d HOT)\n", $1, ($2 == $7 ? "no" : "yes"),
                      $3 / 1048576, $8 / 1048576, $9 - $4, $10 - $5, $11 - $6 }'
    echo "   strongest lock on each, first seen (s into the update):"
    awk '!seen[$2 " " $3]++ { print "   " $2 " " $3 " at " $1 }' "$out/$label.locks" | sort -u
    value -d $db -F ' | ' -c "SELECT round(total_exec_time::numeric / 1000, 2) AS s, calls,
                                     regexp_replace(left(query, 110), '\s+', ' ', 'g')
                              FROM pg_stat_statements
                              WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                                AND NOT toplevel
                              ORDER BY total_exec_time DESC LIMIT 40" >"$out/$label.statements"
    echo "   statements over 0.2 s (nested ones count inside the DO block that runs them too):"
    awk -F ' [|] ' '$1 >= 0.2 { printf "   %7.2f s  %s\n", $1, $3 }' "$out/$label.statements"
    # what it wrote, to compare between scripts: the ledger's rows and the job table's keys
    echo "   ledger and job table after it: $(value -d $db -c "SELECT (SELECT count(*) || ' rows, md5 ' || md5(string_agg(
            concat_ws('|', entry_id, kind, account, cluster, pool, jobid, job_submit, core_hours, amount, unit), ',' ORDER BY entry_id))
        FROM hpcacct.ledger) || '; job table keys: ' || (SELECT string_agg(pg_get_constraintdef(oid), '; ' ORDER BY conname)
        FROM pg_constraint WHERE conrelid = 'hpcacct.job'::regclass AND contype IN ('p', 'u'))")"
    # the dead versions the update left: what a VACUUM of the ledger afterwards costs
    local v0 lsn1
    lsn1=$(value -d $db -c 'SELECT pg_current_wal_lsn()')
    v0=$(date +%s.%N)
    q -d $db -c 'VACUUM (ANALYZE) hpcacct.ledger'
    echo "   then VACUUM (ANALYZE) hpcacct.ledger: $(awk -v a="$v0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s, WAL" \
         "$(value -d $db -c "SELECT pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), '$lsn1'))")"
    q -d postgres -c "DROP DATABASE $db"
}

# A refused update: the same site with one row 0.4 refuses (a deposit without valid_until, which
# 0.3 took): how long the site waits, and the WAL written, before it learns so.
measure_refused() {
    local label=$1 to=$2 db=site_refused_$1 t lsn0
    q -d postgres -c "CREATE DATABASE $db TEMPLATE site STRATEGY file_copy"
    q -d $db -c "INSERT INTO hpcacct.ledger (account, kind, amount, unit, valid_from, valid_until, note)
                 VALUES ('hbk0001', 'deposit', 1, 'NPL', '2024-01-01', NULL, 'update.sh: refused')" -c 'CHECKPOINT'
    lsn0=$(value -d $db -c 'SELECT pg_current_wal_lsn()')
    t=$(date +%s.%N)
    if psql -X -q -v ON_ERROR_STOP=1 -v VERBOSITY=terse -d $db -c "ALTER EXTENSION hpcacct UPDATE TO '$to'" 2>"$out/$label.refused"; then
        echo "== $label: the update was not refused"; exit 1
    fi
    echo "== $label: ALTER EXTENSION hpcacct UPDATE TO '$to' refused after" \
         "$(awk -v a="$t" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s, WAL" \
         "$(value -d $db -c "SELECT pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), '$lsn0'))"):" \
         "$(head -c 100 "$out/$label.refused")"
    q -d postgres -c "DROP DATABASE $db"
}

for r in $(seq 1 "$ROUNDS"); do
    measure "new$r" "$current"
    [ -n "$baseline" ] && measure "base$r" "$baseline"
    measure_refused "refused_new$r" "$current"
    [ -n "$baseline" ] && measure_refused "refused_base$r" "$baseline"
done
log "done in $(($(date +%s) - t0))s"
