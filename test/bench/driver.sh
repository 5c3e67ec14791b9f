#!/usr/bin/env bash
# Runs inside with-cluster.sh (PGHOST etc. set): tunes the server, generates the site, runs
# every case side by side with its reference, checks fast paths against references, measures
# memory, and prints one table. Everything it writes is in test/bench/out/ (results.txt,
# timings.tsv, checks.tsv, plans/, memory.txt). Exits 1 when a check fails.
#
# In make test's cluster (correctness only, nothing timed, server left as it is):
#   TUNE=0 RUNS=0 JOBS=20000 ADMIN_ACCOUNTS=1000 EXPLAIN=0 MEMORY=0 test/bench/driver.sh
# appends "bench PASSED FAILED" to $HPCACCT_TALLY when that is set.
set -euo pipefail
trap 'echo "bench: driver.sh stopped at line $LINENO (exit status $?)" >&2' ERR
cd "$(dirname "$0")"
bench=$(pwd)

JOBS=${JOBS:-1000000}
SEED=${SEED:-42}
RUNS=${RUNS:-5}                 # 0: no timing at all, only the correctness checks
TUNE=${TUNE:-1}                 # 0: leave the server's settings alone (no restart)
ANCHOR=${ANCHOR:-$(date +%F)}
BUDGET=${BUDGET:-300}           # seconds per case group; a group stops repeating beyond it
CHECK=${CHECK:-1}
EXPLAIN=${EXPLAIN:-1}
MEMORY=${MEMORY:-1}             # MEMORY_REPORTS: views whose peak memory is sampled (see below)
CASES=${CASES:-.}
CHUNK=1000000                   # jobs per generated file (and per COPY when loading)
INGEST_JOBS=${INGEST_JOBS:-$((JOBS < CHUNK ? JOBS : CHUNK))}
ADMIN_JOBS=${ADMIN_JOBS:-$((JOBS < CHUNK ? JOBS : CHUNK))}
ADMIN_ACCOUNTS=${ADMIN_ACCOUNTS:-10000}
MONTH_JOBS=${MONTH_JOBS:-0}     # of the JOBS jobs, these many end in the anchor's month (jobs.sql)
AGG_ROWS=${AGG_ROWS:-1}         # 0: no aggregate rows (bench.agg_rows), no aggregate memory
REFERENCES=${REFERENCES:-1}     # 0: time the fast paths only (no references, no checks, no table of ratios)
PLPGSQL=${PLPGSQL:-1}           # 0: ingestion without its PL/pgSQL reference (21 min at 1 M jobs)
SUBMIT_CALLS=${SUBMIT_CALLS:-2000}
JIT=${JIT:-off}                 # on: PostgreSQL's default (and a site's); off: timings comparable with earlier runs

out=$bench/out
rm -rf "$out"
mkdir -p "$out/plans"
data=$PGHOST                    # the cluster's directory: the server writes and reads files there
bindir=$("${PG_CONFIG:-pg_config}" --bindir)
export PGTZ=UTC PGOPTIONS='-c client_min_messages=warning'
main=hpcacct_bench ingest=hpcacct_ingest admin=hpcacct_admin

log() { printf '[%s] %s\n' "$(date +%T)" "$*" >&2; }
q() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }
value() { psql -X -q -At -v ON_ERROR_STOP=1 "$@"; }
as_server_owner() { if [ "$(id -u)" -eq 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi; }
seconds() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

# ---- server settings for a 2-core, 24 GiB machine ---------------------------------------
log "bench: JOBS=$JOBS SEED=$SEED RUNS=$RUNS ANCHOR=$ANCHOR BUDGET=${BUDGET}s CHECK=$CHECK JIT=$JIT"
if [ "$TUNE" = 1 ]; then
q -d postgres -v jit="$JIT" <<'SQL'
ALTER SYSTEM SET shared_buffers = '6GB';              -- a quarter of RAM; the rest is page cache
ALTER SYSTEM SET effective_cache_size = '16GB';
ALTER SYSTEM SET work_mem = '64MB';                   -- hash aggregates of reports stay in memory
ALTER SYSTEM SET maintenance_work_mem = '1GB';
ALTER SYSTEM SET max_wal_size = '16GB';               -- no checkpoint storm during bulk loads
ALTER SYSTEM SET checkpoint_timeout = '30min';
ALTER SYSTEM SET max_worker_processes = 8;
ALTER SYSTEM SET max_parallel_workers = 4;
ALTER SYSTEM SET max_parallel_workers_per_gather = 2; -- 2 cores: leader + 2 workers at most
ALTER SYSTEM SET random_page_cost = 1.1;              -- SSD
ALTER SYSTEM SET effective_io_concurrency = 200;
ALTER SYSTEM SET jit = :'jit';                        -- JIT=off by default: stable timings, comparable runs
ALTER SYSTEM SET log_line_prefix = '%m [%p] ';        -- memory-context dumps name their backend
SQL
as_server_owner "$bindir/pg_ctl" -D "$PGHOST/data" -l "$HPCACCT_SERVER_LOG" -w restart >/dev/null
fi
value -d postgres -c "SELECT name || ' = ' || setting || coalesce(' ' || unit, '') FROM pg_settings
                      WHERE name IN ('shared_buffers', 'effective_cache_size', 'work_mem', 'maintenance_work_mem',
                                     'max_wal_size', 'max_parallel_workers_per_gather', 'max_parallel_workers',
                                     'jit', 'fsync', 'synchronous_commit', 'full_page_writes', 'random_page_cost')
                      ORDER BY name" >"$out/settings.txt"

for db in $main $ingest $admin; do
    createdb "$db"
    q -d "$db" -c 'CREATE EXTENSION hpcacct CASCADE' -v seed="$SEED" -f common.sql
done

# ---- the site: 2 000 accounts, JOBS jobs over three years, allocations --------------------
t=$(seconds)
q -d $main -v seed="$SEED" -v anchor="$ANCHOR" -f site.sql
chunks=$(((JOBS + CHUNK - 1) / CHUNK))
for c in $(seq 1 $chunks); do
    lo=$(((c - 1) * CHUNK + 1)); hi=$((c * CHUNK < JOBS ? c * CHUNK : JOBS))
    printf '%s %s %s\n' "$lo" "$hi" "$(printf '%s/jobs_%03d.tsv' "$data" "$c")"
done >"$out/chunks.txt"
# two generators at a time (2 cores)
xargs -P 2 -L 1 sh -c 'psql -X -q -v ON_ERROR_STOP=1 -d '$main' -v lo=$0 -v hi=$1 -v jobs='$JOBS' -v month_jobs='$MONTH_JOBS' -v file=$2 -f jobs.sql' \
    <"$out/chunks.txt"
generated=$(since "$t")
log "generated $JOBS jobs in ${generated}s"
t=$(seconds)
while read -r lo hi file; do
    q -d $main -c "COPY hpcacct.job FROM '$file'"
done <"$out/chunks.txt"
loaded=$(since "$t")
log "charged $JOBS jobs (COPY through the trigger, $chunks COPY of up to $CHUNK) in ${loaded}s"
t=$(seconds)
q -d $main -f allocations.sql
[ "$AGG_ROWS" = 1 ] && q -d $main -v jobs="$JOBS" -f agg_rows.sql
q -d $main -f reference.sql
q -d $main -c 'SELECT hpcacct.compact_rollup()' >/dev/null  # the site's daily compaction (pg_cron), once
q -d $main -c 'VACUUM ANALYZE'
prepared=$(since "$t")
log "allocations, aggregate rows, references in ${prepared}s"
{
    echo "generate $generated"; echo "load $loaded"; echo "prepare $prepared"
    value -d $main -c "SELECT 'ledger_rows ' || count(*) FROM hpcacct.ledger"
    value -d $main -c "SELECT 'database_size ' || pg_size_pretty(pg_database_size(current_database()))"
} >"$out/site.txt"

# ingestion database: the same accounts and resources, no jobs; the first INGEST_JOBS jobs
q -d $ingest -v seed="$SEED" -v anchor="$ANCHOR" -f site.sql -f plpgsql_trigger.sql
ingest_file=$data/ingest.tsv
# awk, not `cat | head`: with several chunks head exits early, cat dies of SIGPIPE and
# pipefail would end the run
awk -v n="$INGEST_JOBS" 'NR > n { exit } { print }' "$data"/jobs_*.tsv >"$ingest_file"
[ "$(id -u)" -eq 0 ] && chown postgres: "$ingest_file"

# procedures at 10 000 accounts
t=$(seconds)
q -d $admin -v seed="$SEED" -v anchor="$ANCHOR" -v accounts="$ADMIN_ACCOUNTS" -v jobs="$ADMIN_JOBS" \
    -v file="$data/admin_jobs.tsv" -f admin.sql
q -d $admin -c "COPY hpcacct.job FROM '$data/admin_jobs.tsv'"
q -d $admin -f admin_grants.sql
log "$ADMIN_ACCOUNTS-account site ($ADMIN_JOBS jobs) in $(since "$t")s"
regulation_day=$(value -d $admin -c 'SELECT regulation_day FROM bench.site')
quarter=$(value -d $admin -c 'SELECT quarter FROM bench.site')

q -d $main -v anchor="$ANCHOR" -v ingest_file="$ingest_file" -v ingest_jobs="$INGEST_JOBS" -v admin_accounts="$ADMIN_ACCOUNTS" \
    -v regulation_day="$regulation_day" \
    -v quarter="$quarter" -f cases.sql
if [ "$PLPGSQL" = 0 ]; then
    q -d $main -c "DELETE FROM bench.pair WHERE grp = 'ingest' AND ref = 'plpgsql'" \
        -c "DELETE FROM bench.variant WHERE grp = 'ingest' AND variant = 'plpgsql'"
fi
if [ "$REFERENCES" = 0 ]; then
    q -d $main -c "DELETE FROM bench.pair" -c "DELETE FROM bench.variant WHERE variant NOT IN ('view', 'procedure')"
fi

# HOLD=1 (debugging): keep the cluster after set-up until out/release exists.
if [ "${HOLD:-0}" = 1 ]; then
    log "holding: PGHOST=$PGHOST databases $main $ingest $admin; touch $out/release to go on"
    while [ ! -e "$out/release" ]; do sleep 2; done
fi

# ---- the cases --------------------------------------------------------------------------
dbname() { case $1 in main) echo $main ;; ingest) echo $ingest ;; admin) echo $admin ;; esac; }
: >"$out/timings.tsv"
: >"$out/rows.tsv"
: >"$out/checks.tsv"
while IFS='|' read -r grp db explain; do
    echo "$grp" | grep -Eq -- "$CASES" || continue
    db=$(dbname "$db")
    log "case $grp"
    slug=$(echo "$grp" | tr ' ' '_')
    if [ "$RUNS" = 0 ]; then
        :  # checks only
    elif [ "$grp" = check_submit ] || [ "$grp" = check_submit_genci ] || [ "$grp" = check_submit_rwth ]; then
        # pgbench, one call per transaction, client round trip included (as a submit filter sees it)
        case $grp in
            check_submit) n=$(value -d $db -c "SELECT count(*) FROM bench.submit_sample") ;;
            *) n=$(value -d $db -c "SELECT count(*) FROM bench.submit_sample_project WHERE centre = '${grp#check_submit_}'") ;;
        esac
        value -d $main -c "SELECT variant FROM bench.variant WHERE grp = '$grp' ORDER BY variant" >"$out/variants"
        for run in $(seq 0 "$RUNS"); do
            while read -r variant; do
                value -d $main -c "SELECT sql FROM bench.variant WHERE grp = '$grp' AND variant = '$variant'" \
                    >"$out/script.pgbench"
                tx=$([ "$run" -eq 0 ] && echo 200 || echo "$SUBMIT_CALLS")
                ms=$(pgbench -n -M prepared -c 1 -j 1 -t "$tx" -D n="$n" -f "$out/script.pgbench" $db 2>&1 |
                     sed -n 's/^latency average = \([0-9.]*\) ms.*/\1/p')
                [ -n "$ms" ] || { echo "pgbench failed for $grp/$variant" >&2; exit 1; }
                printf '%s\t%s\t%s\t%s\t%s\n' "$grp" "$variant" "$run" "$ms" "$([ "$run" -eq 0 ] && echo t || echo f)" \
                    >>"$out/timings.tsv"
            done <"$out/variants"
        done
        printf '%s\t%s\n' "$grp" "$((RUNS * SUBMIT_CALLS)) calls" >>"$out/rows.tsv"
    elif [ "$grp" = loader ]; then
        # the ingestion jobs, whole seconds, as a file for COPY and as sacct text (epoch seconds,
        # what hpcacct-sacct run gets from sacct) with its header
        value -d $db -c "SELECT bench.prepare_ingest('plain')" >/dev/null
        q -d $db -c "COPY hpcacct.job FROM '$ingest_file'" \
            -c "UPDATE hpcacct.job SET submit = date_trunc('second', submit), start = date_trunc('second', start),
                                       \"end\" = date_trunc('second', \"end\")" \
            -c "COPY hpcacct.job TO '$data/loader.tsv'" \
            -c "COPY (SELECT 'Cluster|JobID|JobIDRaw|Account|User|Partition|Submit|Start|End|ElapsedRaw|AllocTRES|State'
                      UNION ALL
                      SELECT * FROM (SELECT concat_ws('|', cluster, jobid, jobid, account, \"user\", partition,
                                                       coalesce(extract(epoch FROM submit)::bigint::text, 'Unknown'),
                                                       extract(epoch FROM start)::bigint, extract(epoch FROM \"end\")::bigint,
                                                       extract(epoch FROM \"end\" - start)::bigint, alloctres,
                                                       coalesce(state, ''))
                                     FROM hpcacct.job ORDER BY start, jobid) l) TO '$data/loader.sacct'"
        ms_since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", (b - a) * 1000 }'; }
        # CPU time besides the wall time (steadier on a shared machine): the client's from
        # time(1); the server's as the CPU time of the postmaster's children, live, exited
        # (zombies still show theirs) or reaped (the postmaster's cutime) — the round's backend
        # and whatever background process or autovacuum worker ran meanwhile
        postmaster=$(head -1 "$(value -d $db -c 'SHOW data_directory')/postmaster.pid")
        tick=$(getconf CLK_TCK)
        server_cpu() {  # in ms; after the command name, fields 12-13 are utime, stime, 14-15 the reaped children's
            local before after children
            while :; do  # again if the postmaster reaped a child meanwhile (its time would be missed)
                before=$(sed 's/^.*) //' "/proc/$postmaster/stat" | awk '{ print $12 + $13 + $14 + $15 }')
                children=$(for child in $(pgrep -P "$postmaster"); do sed 's/^.*) //' "/proc/$child/stat" 2>/dev/null; done |
                           awk '{ s += $12 + $13 } END { print s + 0 }')
                after=$(sed 's/^.*) //' "/proc/$postmaster/stat" | awk '{ print $12 + $13 + $14 + $15 }')
                [ "$before" = "$after" ] && break
            done
            awk -v t="$tick" -v s="$((after + children))" 'BEGIN { printf "%.0f", s * 1000 / t }'
        }
        cpu() {  # variant run: the last command's client and server CPU time, in ms
            printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$(awk '{ printf "%.0f", ($1 + $2) * 1000 }' "$out/client_cpu")" \
                "$(($(server_cpu) - backend0))" >>"$out/loader_cpu.tsv"
        }
        printf 'variant\trun\tclient_ms\tserver_ms\n' >"$out/loader_cpu.tsv"
        lines=$(value -d $db -c 'SELECT count(*) FROM hpcacct.job')
        for run in $(seq 0 "$RUNS"); do
            warm=$([ "$run" -eq 0 ] && [ "$RUNS" -gt 0 ] && echo t || echo f)
            value -d $db -c "SELECT bench.prepare_ingest('charge_jobs')" -c CHECKPOINT >/dev/null
            backend0=$(server_cpu)
            t=$(seconds)
            /usr/bin/time -f '%U %S' -o "$out/client_cpu" psql -X -q -v ON_ERROR_STOP=1 -d $db \
                -c "COPY hpcacct.job FROM '$data/loader.tsv'"
            printf '%s\t%s\t%s\t%s\t%s\n' loader copy "$run" "$(ms_since "$t")" "$warm" >>"$out/timings.tsv"
            cpu copy "$run"
            q -d $db -c 'DROP TABLE IF EXISTS bench.loader_ref' \
                -c 'CREATE TABLE bench.loader_ref AS SELECT cluster, jobid, amount FROM hpcacct.ledger'
            value -d $db -c "SELECT bench.prepare_ingest('charge_jobs')" -c 'TRUNCATE hpcacct.sacct_quarantine' \
                -c CHECKPOINT >/dev/null
            backend0=$(server_cpu)
            t=$(seconds)
            PGDATABASE=$db /usr/bin/time -f '%U %S' -o "$out/client_cpu" \
                "$bindir/hpcacct-sacct" load "$data/loader.sacct" >"$out/loader_load.txt"
            printf '%s\t%s\t%s\t%s\t%s\n' loader load "$run" "$(ms_since "$t")" "$warm" >>"$out/timings.tsv"
            cpu load "$run"
            first_rows=$(value -d $db -c 'SELECT count(*) FROM hpcacct.ledger')
            value -d $db -c CHECKPOINT >/dev/null
            backend0=$(server_cpu)
            t=$(seconds)
            PGDATABASE=$db /usr/bin/time -f '%U %S' -o "$out/client_cpu" \
                "$bindir/hpcacct-sacct" load "$data/loader.sacct" >"$out/loader_reload.txt"
            printf '%s\t%s\t%s\t%s\t%s\n' loader reload "$run" "$(ms_since "$t")" "$warm" >>"$out/timings.tsv"
            cpu reload "$run"
            second_rows=$(value -d $db -c 'SELECT count(*) FROM hpcacct.ledger')
        done
        log "  $(cat "$out/loader_load.txt")"
        log "  $(cat "$out/loader_reload.txt")"
        printf '%s\t%s\n' "$grp" "$lines" >>"$out/rows.tsv"
        if [ "$CHECK" = 1 ]; then
            {
                printf '12\tloader: the ledger of hpcacct-sacct load = COPY\t%s\n' \
                    "$(value -d $db -c "SELECT bench.compare('SELECT cluster, jobid, amount FROM hpcacct.ledger',
                                                          'SELECT cluster, jobid, amount FROM bench.loader_ref',
                                                          '{cluster,jobid}')")"
                printf '13\tloader: every line inserted, none quarantined\t%s\n' \
                    "$(grep -q "lines=$lines inserted=$lines .* quarantined=0 " "$out/loader_load.txt" &&
                       echo "ok: $lines lines" || echo "MISMATCH: $(cat "$out/loader_load.txt")")"
                printf '14\tloader: a re-load writes no ledger row\t%s\n' \
                    "$([ "$first_rows" = "$second_rows" ] && grep -q "inserted=0 rerated=0 updated=0 unchanged=$lines " \
                           "$out/loader_reload.txt" && echo "ok: $second_rows ledger rows" ||
                       echo "MISMATCH: $first_rows then $second_rows ledger rows; $(cat "$out/loader_reload.txt")")"
            } | tee -a "$out/checks.tsv" | awk -F'\t' '{ printf "[check] %s: %s\n", $2, substr($3, 1, 200) }' >&2
        fi
    else
        value -d $main -c "SELECT bench.script('$grp', $RUNS, $BUDGET)" >"$out/script.sql"
        if ! psql -X -q -At -d $db -f "$out/script.sql" >"$out/script.out" 2>&1; then
            log "  case $grp failed: $(grep -m1 ERROR "$out/script.out")"
            printf '0\t%s\tERROR: %s\n' "$grp" "$(grep -m1 ERROR "$out/script.out")" >>"$out/checks.tsv"
        fi
        { grep -E '^[^|]+\|[0-9]+\|' "$out/script.out" || true; } |
            awk -F'|' -v g="$grp" 'BEGIN { OFS = "\t" } { print g, $1, $2, $3, $4 }' >>"$out/timings.tsv"
        rows_sql=$(value -d $main -c "SELECT rows_sql FROM bench.grp WHERE grp = '$grp'")
        printf '%s\t%s\n' "$grp" "$(value -d $db -c "$rows_sql")" >>"$out/rows.tsv"
        if [ "$EXPLAIN" = 1 ] && [ "$explain" = true ]; then
            for variant in $(value -d $main -c "SELECT replace(variant, ' ', '_') FROM bench.variant WHERE grp = '$grp'"); do
                value -d $main -c "SELECT 'SET client_min_messages = warning; ' || settings || E'\nSELECT bench.explain('
                                          || quote_literal(sql) || ');'
                                   FROM bench.variant WHERE grp = '$grp' AND replace(variant, ' ', '_') = '$variant'" |
                    value -d $db >"$out/plans/$slug--$variant.txt"
            done
        fi
    fi
    if [ "$CHECK" = 1 ]; then
        value -d $main -c "SELECT format('SELECT %L || E''\t'' || %L || E''\t'' || bench.compare(%L, %L, %L, %L, %L);',
                                         ord, name, check_fast, check_ref, check_keys, coalesce(check_fast_gucs, '{}'),
                                         coalesce(check_ref_gucs, '{}'))
                           FROM bench.pair WHERE grp = '$grp' AND check_fast IS NOT NULL ORDER BY ord" >"$out/check.sql"
        psql -X -q -At -d $db -f "$out/check.sql" 2>&1 | tee -a "$out/checks.tsv" |
            awk -F'\t' '{ printf "[check] %s: %s\n", $2, substr($3, 1, 200) }' >&2
    fi
done < <(value -d $main -c "SELECT grp || '|' || db || '|' || explain FROM bench.grp ORDER BY ord")

# ---- memory: the server's own accounting -------------------------------------------------
# (1) EXPLAIN ANALYZE's HashAggregate memory of each aggregate and of sum(): 2 000 groups
#     (GROUP BY account) over N and over N/10 rows (the same: state does not grow with rows),
#     and about one group per row (GROUP BY account, valid_from: bytes per group, the
#     aggregate's state next to sum()'s); work_mem 1 GB so that nothing spills.
# (2) peak memory of the backend while a query runs (once, then again for 2 s), sampled every 0.1 s: the server's own
#     accounting (pg_log_backend_memory_contexts, "Grand total ... used") and RssAnon.
if [ "$MEMORY" = 1 ] && echo memory | grep -Eq -- "$CASES"; then
    log "memory"
    {
      if [ "$AGG_ROWS" = 1 ]; then
        printf '%-16s %-22s %9s %8s %12s %10s\n' aggregate grouping rows groups "hash memory" "per group"
        value -d $main -c "SELECT a.name || '|' || a.call FROM (VALUES
                ('tc', 'hpcacct.tc(valid_from, valid_until, amount, ''$ANCHOR''::date)'),
                ('tmc', 'hpcacct.tmc(valid_from, valid_until, amount, ''$ANCHOR''::date)'),
                ('window_quota', 'hpcacct.window_quota(month, allowance, amount, ''$ANCHOR''::date)'),
                ('quarter_balance', 'hpcacct.quarter_balance(kind, month, amount::numeric, ''$ANCHOR''::date)'),
                ('decayed_usage', 'hpcacct.decayed_usage(ts, amount, ''$ANCHOR''::timestamptz, ''7 days'')'),
                ('sum()', 'sum(amount)'), ('sum() x2', 'sum(allowance), sum(amount)')) AS a(name, call)" |
        while IFS='|' read -r name call; do
            for shape in "account|$JOBS" "account|$((JOBS / 10))" "account, valid_from|$JOBS"; do
                grouping=${shape%|*} rows=${shape#*|}
                plan=$(value -d $main -c "SET max_parallel_workers_per_gather = 0; SET work_mem = '1GB';
                       SELECT bench.explain('SELECT $grouping, $(echo "$call" | sed "s/'/''/g")
                                             FROM (SELECT * FROM bench.agg_rows LIMIT $rows) r GROUP BY $grouping')")
                groups=$(echo "$plan" | sed -n 's/.*HashAggregate.*rows=\([0-9]*\) loops.*/\1/p' | sed -n 1p)
                kb=$(echo "$plan" | sed -n 's/.*Memory Usage: \([0-9]*\)kB.*/\1/p' | sed -n 1p)
                printf '%-16s %-22s %9s %8s %9s kB %8s B\n' "$name" "$grouping" "$rows" "$groups" "$kb" \
                    "$(awk -v k="$kb" -v g="$groups" 'BEGIN { if (g > 0) printf "%.0f", k * 1024 / g }')"
            done
        done
        echo
      fi
        printf '%-62s %14s %12s %6s %12s %12s %9s\n' "query (serial plan)" "peak used MB" "RssAnon MB" runs \
            "wall ms/run" "CPU ms/run" "seconds"
        # peak LABEL WORK_MEM SQL [DB [ROLLBACK]]: run SQL serially in its own backend, sample its memory
        # and its CPU time (utime + stime: what other processes on the machine change least)
        peak() {
            local label=$1 work_mem=$2 sql=$3 db=${4:-$main} rollback=${5:-false} app="bench-mem-$RANDOM" pid="" rss=0 r bg t0
            local ticks=0 c
            t0=$(seconds)
            psql -X -q -At -d "$db" -c "SET application_name = '$app'; SET max_parallel_workers_per_gather = 0;
                                    SET work_mem = '$work_mem';
                                    CREATE TEMP TABLE timing (variant text, run integer, ms float8, warmup boolean);
                                    SELECT bench.time('memory', 1, \$q\$ $sql \$q\$, $rollback, 1e15, 1000000);
                                    -- again until 2 s have passed, so that a short query is sampled too
                                    DO \$d\$ DECLARE t0 timestamptz := clock_timestamp(); BEGIN
                                        WHILE clock_timestamp() - t0 < interval '2 seconds' LOOP
                                            PERFORM bench.time('memory', 1, \$q\$ $sql \$q\$, $rollback, 1e15, 1000000);
                                        END LOOP; END \$d\$;
                                    SELECT 'executions ' || count(*) || ' ' || round(avg(ms)::numeric, 1) FROM timing;
                                    SELECT pg_sleep(0.3)  -- idle, so that the sampler reads the final CPU time" \
                >"$out/peak.out" &
            bg=$!
            while kill -0 $bg 2>/dev/null; do
                [ -n "$pid" ] || pid=$(value -d postgres -c "SELECT pid FROM pg_stat_activity WHERE application_name = '$app'")
                if [ -n "$pid" ]; then
                    value -d postgres -c "SELECT pg_log_backend_memory_contexts($pid)" >/dev/null 2>&1 || true
                    r=$(awk '/^RssAnon:/ { print $2 }' /proc/"$pid"/status 2>/dev/null || echo 0)
                    [ "${r:-0}" -gt "$rss" ] && rss=$r
                    c=$(awk '{ print $14 + $15 }' /proc/"$pid"/stat 2>/dev/null || echo 0)
                    [ "${c:-0}" -gt "$ticks" ] && ticks=$c
                fi
                sleep 0.1
            done
            wait $bg || true
            local used
            used=$({ grep "\[$pid\].*Grand total:" "$HPCACCT_SERVER_LOG" || true; } |
                   sed -n 's/.*; \([0-9]*\) used.*/\1/p' | sort -n | tail -1)
            local runs wall
            read -r runs wall < <(sed -n 's/^executions //p' "$out/peak.out")
            printf '%-62s %14s %12s %6s %12s %12s %9s\n' "$label" "$(awk -v u="${used:-0}" 'BEGIN { printf "%.1f", u / 1048576 }')" \
                "$(awk -v r="$rss" 'BEGIN { printf "%.1f", r / 1024 }')" "${runs:-0}" "${wall:--}" \
                "$(awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" -v n="${runs:-0}" 'BEGIN { if (n > 0) printf "%.0f", t * 1000 / hz / n; else print "-" }')" \
                "$(since "$t0")"
        }
        if [ "$AGG_ROWS" = 1 ]; then
        peak "window_quota, GROUP BY account, valid_from, $JOBS rows" 1GB \
            "SELECT account, valid_from, hpcacct.window_quota(month, allowance, amount, '$ANCHOR'::date) FROM bench.agg_rows GROUP BY account, valid_from"
        peak "sum() x2, GROUP BY account, valid_from, $JOBS rows" 1GB \
            "SELECT account, valid_from, sum(allowance), sum(amount) FROM bench.agg_rows GROUP BY account, valid_from"
        fi
        for report in ${MEMORY_REPORTS:-regulation_report window_quota_usage quarter_balances usage_by_month}; do
            peak "$report view, work_mem $(value -d $main -c 'SHOW work_mem')" "$(value -d $main -c 'SHOW work_mem')" \
                "SELECT * FROM hpcacct.$report"
        done
        peak "fairshare(), work_mem $(value -d $main -c 'SHOW work_mem')" "$(value -d $main -c 'SHOW work_mem')" \
            "SELECT * FROM hpcacct.fairshare()"
        # the scheduled procedures, rolled back
        wm=$(value -d $main -c 'SHOW work_mem')
        peak "regulate(), $ADMIN_ACCOUNTS accounts, work_mem $wm" "$wm" "CALL hpcacct.regulate('$regulation_day')" $admin true
        peak "open_quarter(), $ADMIN_ACCOUNTS accounts, work_mem $wm" "$wm" "CALL hpcacct.open_quarter('$quarter')" $admin true
        peak "compact_rollup(), work_mem $wm" "$wm" "SELECT hpcacct.compact_rollup()" $main true
    } >"$out/memory.txt"
fi

# ---- the table -----------------------------------------------------------------------------
q -d $main -c "CREATE TABLE bench.timing (grp text, variant text, run integer, ms float8, warmup boolean)" \
    -c "CREATE TABLE bench.grp_rows (grp text, rows text)" \
    -c "\\copy bench.timing FROM '$out/timings.tsv'" -c "\\copy bench.grp_rows FROM '$out/rows.tsv'"
value -d $main -v jobs="$JOBS" -f report.sql >"$out/results.txt"
# the ingestion runs one by one (their spread on a shared machine)
value -d $main -c "SELECT format('  %-22s %s ms', variant, string_agg(round(ms)::text, ' ' ORDER BY run))
                   FROM bench.timing WHERE grp = 'ingest' AND NOT warmup GROUP BY variant ORDER BY variant" \
    >"$out/ingest_runs.txt"
{
    echo
    echo "hpcacct bench: JOBS=$JOBS SEED=$SEED RUNS=$RUNS ANCHOR=$ANCHOR JIT=$JIT, $(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), $(value -d postgres -c 'SELECT version()' | cut -d, -f1)"
    echo "site: $(tr '\n' ' ' <"$out/site.txt")"
    echo
    cat "$out/results.txt"
    if [ -s "$out/ingest_runs.txt" ]; then
        echo
        echo "ingestion, every timed run:"
        cat "$out/ingest_runs.txt"
    fi
    if [ -s "$out/checks.tsv" ]; then
        echo
        echo "checks (fast path = reference):"
        sort -n "$out/checks.tsv" | awk -F'\t' '{ printf "  %-45s %s\n", $2, substr($3, 1, 300) }'
    fi
    if [ -f "$out/memory.txt" ]; then echo; cat "$out/memory.txt"; fi
} | tee "$out/summary.txt"

if [ -n "${HPCACCT_TALLY:-}" ]; then
    echo "bench $(cut -f3 "$out/checks.tsv" | grep -c '^ok') $(cut -f3 "$out/checks.tsv" | grep -vc '^ok')" >>"$HPCACCT_TALLY"
fi
if [ -s "$out/checks.tsv" ] && cut -f3 "$out/checks.tsv" | grep -qv '^ok'; then
    echo "bench: some fast paths disagree with their references (see above)" >&2
    exit 1
fi
