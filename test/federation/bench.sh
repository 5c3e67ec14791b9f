#!/usr/bin/env bash
# test/federation/bench.sh: charging speed at a site with replication on against off, and the
# lag at that rate. Four clusters on this machine: a federation (centre, sites alpha and beta,
# wal_level logical) and `solo`, a database without federation in a cluster with the default
# wal_level (replica). The same jobs are loaded at solo and then at alpha, ROUNDS times: for
# each number n in LOADS, n statements of BATCH jobs each (a loader's COPYs), then SINGLES
# statements of one job each. After each federated load the bench measures how long the last job takes to reach
# the centre and beta (the lag at the end of a load at that rate). Timings are printed, never
# asserted. On a machine with more than one core, alpha and solo (and the loader's psql) run
# on the first core and the centre and beta on the others (taskset), standing for separate
# machines: otherwise the centre's and beta's apply would take their CPU from alpha's loader.
# PIN=0 leaves every cluster on every core.
set -euo pipefail
BATCH=${BATCH:-5000} LOADS=${LOADS:-4 20} SINGLES=${SINGLES:-1000} ROUNDS=${ROUNDS:-2}
if [ "${PIN:-1}" = 1 ] && [ "$(nproc)" -gt 1 ] && command -v taskset >/dev/null; then
    export CPUS_alpha=0 CPUS_solo=0 CPUS_centre=1-$(($(nproc) - 1)) CPUS_beta=1-$(($(nproc) - 1))
    pin_loader=(taskset -c 0)
else
    pin_loader=()
fi
. "$(dirname "$0")/lib.sh"
trap 'rc=$?; stop_all; [ $rc -ne 0 ] && show_logs; remove_all; exit $rc' EXIT
trap 'exit 130' INT TERM

start_node centre; start_node alpha; start_node beta; start_node solo replica
for node in centre alpha beta solo; do
    psql "$(conninfo "$node" postgres)" -XAtq -c "CREATE DATABASE hpc"
    q "$node" "CREATE EXTENSION hpcacct CASCADE" >/dev/null 2>&1
done
q centre "$reference_sql" >/dev/null
q solo "$reference_sql" >/dev/null
federate centre alpha beta
# S2C_OPTIONS (e.g. "binary = false"): options of the centre's subscriptions to the sites, to
# compare them side by side
if [ -n "${S2C_OPTIONS:-}" ]; then
    for i in 1 2; do q centre "ALTER SUBSCRIPTION hpcacct_fed_s2c_$i SET ($S2C_OPTIONS)" >/dev/null; done
fi
q alpha "SELECT create_job_table()" >/dev/null; q solo "SELECT create_job_table()" >/dev/null
ref=$(q centre "SELECT count(*) FROM ledger")
[ "$(wait_for alpha "SELECT count(*) FROM ledger" "$ref")" -ge 0 ]
[ "$(wait_for beta "SELECT count(*) FROM ledger" "$ref")" -ge 0 ]

next=1
load() {  # load NODE FIRST STATEMENTS: STATEMENTS statements of BATCH jobs from FIRST; prints the ms taken
    local t0 i; t0=$(now_ms)
    for i in $(seq 0 $(($3 - 1))); do
        "${pin_loader[@]}" psql "$(conninfo "$1")" -XAtq -v ON_ERROR_STOP=1 -c "SET search_path = hpcacct, public" \
            -c "$(jobs_sql alpha $(($2 + i * BATCH)) $(($2 + (i + 1) * BATCH - 1)))" >/dev/null || return 1
    done
    echo $(( $(now_ms) - t0 ))
}
load_singles() {  # load_singles NODE FIRST: SINGLES statements of one job each, in one session
    local t0 i; t0=$(now_ms)
    for i in $(seq 0 $((SINGLES - 1))); do
        jobs_sql alpha $(($2 + i)) $(($2 + i)); echo ";"
    done | "${pin_loader[@]}" psql "$(conninfo "$1")" -XAtq -v ON_ERROR_STOP=1 -c "SET search_path = hpcacct, public" -f - >/dev/null || return 1
    echo $(( $(now_ms) - t0 ))
}
arrival() {  # arrival: ms until the centre and beta hold alpha's last row
    # Looked up in the primary key, not counted: this query runs at alpha inside the window
    # whose CPU is counted (a count over its ledger cost 20-80 ms there, which solo never pays),
    # and the polls run at the centre and beta while they apply. The last row suffices: alpha's
    # loader is one session, and a receiver inserts a transaction's charges in one statement.
    local last; last=$(q alpha "SELECT max(entry_id) FROM ledger WHERE entry_id < 2 * 2^48::bigint")
    local arrived="SELECT EXISTS (SELECT 1 FROM ledger WHERE entry_id = $last)" c b
    c=$(wait_for centre "$arrived" t)
    b=$(wait_for beta "$arrived" t)
    echo "$c $((c + b))"
}
# CPU time (ms) the processes of a node's cluster have used so far: the postmaster, its live
# children and the children it has reaped (backends of finished connections). Unlike the
# elapsed time, it does not depend on what else the machine runs.
cluster_cpu() {
    local pm; pm=$(head -1 "$(nodedir "$1")/data/postmaster.pid")
    local pids; pids="$pm $(ps -o pid= --ppid "$pm" | tr '\n' ' ')"
    local ticks=0 pid f
    for pid in $pids; do
        [ -r "/proc/$pid/stat" ] || continue
        # fields after the command: 14 utime, 15 stime, 16 cutime, 17 cstime (children's only for the postmaster)
        f=$(sed 's/^.*) //' "/proc/$pid/stat")
        if [ "$pid" = "$pm" ]; then ticks=$((ticks + $(awk '{print $12 + $13 + $14 + $15}' <<<"$f")))
        else ticks=$((ticks + $(awk '{print $12 + $13}' <<<"$f"))); fi
    done
    echo $((ticks * 1000 / $(getconf CLK_TCK)))
}
proc_cpu() {  # proc_cpu PID: CPU time (ms) the process has used so far (0 when it is gone)
    if [ -r "/proc/$1/stat" ]; then
        echo $(( $(sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}') * 1000 / $(getconf CLK_TCK) ))
    else echo 0; fi
}
# alpha's walsender (the centre reading alpha's charges) and apply worker (alpha receiving the
# centre's rows, among them the centre's reports of what it received): looked up before a window
alpha_pids() {
    q alpha "SELECT coalesce((SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'hpcacct_fed_s2c_1'), 0),
                    coalesce((SELECT pid FROM pg_stat_subscription WHERE subname = 'hpcacct_fed_c2s_1' AND relid IS NULL), 0)" | tr '|' ' '
}
# CPU_DETAIL=1: after each row, the CPU time (ms) of each of alpha's and solo's processes in
# the window, by process title ("reaped": backends that exited)
cpu_snapshot() {  # cpu_snapshot NODE: "pid ticks title" per process
    local pm; pm=$(head -1 "$(nodedir "$1")/data/postmaster.pid")
    awk '{print $12 + $13 + $14 + $15}' <<<"$(sed 's/^.*) //' "/proc/$pm/stat")" | sed "s/^/reaped /;s/$/ reaped/"
    ps -o pid=,args= --ppid "$pm" | while read -r pid title; do
        [ -r "/proc/$pid/stat" ] && echo "$pid $(sed 's/^.*) //' "/proc/$pid/stat" | awk '{print $12 + $13}') $title"
    done
}
cpu_detail() {  # cpu_detail BEFORE AFTER: per title, the ms used in between
    [ "${CPU_DETAIL:-0}" = 1 ] || return 0
    awk -v hz="$(getconf CLK_TCK)" 'NR == FNR { t[$1] = $2; next }
        { title = $3; for (i = 4; i <= NF; i++) title = title " " $i; d = $2 - ($1 in t ? t[$1] : 0);
          if (d > 0) u[title] += d }
        END { for (k in u) printf "#   %6d ms  %s\n", u[k] * 1000 / hz, k }' "$1" "$2" | sort -k2 -nr
}
rate() { awk -v n="$1" -v ms="$2" 'BEGIN { printf "%.0f", n * 1000 / ms }'; }

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
printf '%-36s %7s %9s %9s %6s %12s %12s %7s %7s %6s %9s %8s\n' case jobs "off job/s" "on job/s" on/off \
    "lag centre" "lag beta" "off cpu" "on cpu" off/on "walsender" "apply"
row() {  # row CASE JOBS OFF_MS ON_MS LAG_CENTRE LAG_BETA OFF_CPU_MS ON_CPU_MS WALSENDER_MS APPLY_MS
    printf '%-36s %7d %9s %9s %6s %9s ms %9s ms %5s ms %5s ms %6s %6s ms %5s ms\n' "$1" "$2" "$(rate "$2" "$3")" \
        "$(rate "$2" "$4")" "$(ratio "$3" "$4")" "$5" "$6" "$7" "$8" "$(ratio "$7" "$8")" "$9" "${10}"
}
for round in $(seq 1 "$ROUNDS"); do
  for statements in $LOADS; do
    n=$((BATCH * statements))
    c0=$(cluster_cpu solo); off=$(load solo $next "$statements"); c1=$(cluster_cpu solo)
    read -r ws ap <<<"$(alpha_pids)"; w0=$(proc_cpu "$ws"); p0=$(proc_cpu "$ap")
    a0=$(cluster_cpu alpha); on=$(load alpha $next "$statements"); read -r lc lb <<<"$(arrival)"; a1=$(cluster_cpu alpha)
    w1=$(proc_cpu "$ws"); p1=$(proc_cpu "$ap")
    next=$((next + n))
    row "$statements x $BATCH jobs (round $round)" "$n" "$off" "$on" "$lc" "$lb" $((c1 - c0)) $((a1 - a0)) $((w1 - w0)) $((p1 - p0))
  done
    cpu_snapshot solo >"$base/s0"
    c0=$(cluster_cpu solo); off=$(load_singles solo $next); c1=$(cluster_cpu solo)
    cpu_snapshot solo >"$base/s1"
    read -r ws ap <<<"$(alpha_pids)"; w0=$(proc_cpu "$ws"); p0=$(proc_cpu "$ap")
    cpu_snapshot alpha >"$base/a0"
    a0=$(cluster_cpu alpha); on=$(load_singles alpha $next); read -r lc lb <<<"$(arrival)"; a1=$(cluster_cpu alpha)
    cpu_snapshot alpha >"$base/a1"
    w1=$(proc_cpu "$ws"); p1=$(proc_cpu "$ap")
    next=$((next + SINGLES))
    row "one job per statement (round $round)" "$SINGLES" "$off" "$on" "$lc" "$lb" $((c1 - c0)) $((a1 - a0)) $((w1 - w0)) $((p1 - p0))
    [ "${CPU_DETAIL:-0}" = 1 ] && { echo "# solo:"; cpu_detail "$base/s0" "$base/s1"; echo "# alpha:"; cpu_detail "$base/a0" "$base/a1"; }
done
echo "off cpu / on cpu: CPU time of the site's whole cluster for the load (for alpha until the centre and beta have it);"
echo "walsender, apply: of it, alpha's walsender (sending its charges to the centre) and apply worker (receiving the centre's rows)"
# The centre's apply alone: how fast it rolls up what a site sends (no loader running), and
# what alpha's walsender spends sending it: jobs loaded at alpha while the centre's
# subscription is disabled, then the subscription enabled, with its rows in binary and in
# text, alternately (QUEUED_ROUNDS times each). The processes that ENABLE starts (the centre's
# apply worker, alpha's walsender) do nothing but this, so their whole CPU time is its cost.
n=$((BATCH * 20))
for round in $(seq 1 "${QUEUED_ROUNDS:-2}"); do
  for binary in true false; do
    q centre "ALTER SUBSCRIPTION hpcacct_fed_s2c_1 DISABLE" >/dev/null
    load alpha $next 20 >/dev/null; next=$((next + n))
    q centre "ALTER SUBSCRIPTION hpcacct_fed_s2c_1 SET (binary = $binary)" >/dev/null
    q centre "ALTER SUBSCRIPTION hpcacct_fed_s2c_1 ENABLE" >/dev/null
    read -r lc lb <<<"$(arrival)"
    worker=$(q centre "SELECT pid FROM pg_stat_subscription WHERE subname = 'hpcacct_fed_s2c_1' AND relid IS NULL")
    read -r ws ap <<<"$(alpha_pids)"
    echo "$n jobs queued at alpha, binary = $binary (round $round): at the centre after $lc ms ($(rate $n "$lc") rows/s);" \
         "CPU: the centre's apply worker $(proc_cpu "$worker") ms, alpha's walsender $(proc_cpu "$ws") ms"
  done
done
q centre "ALTER SUBSCRIPTION hpcacct_fed_s2c_1 SET (binary = true)" >/dev/null
own=$(q alpha "SELECT count(*) FROM ledger WHERE federation_origin(entry_id) = 1")
for node in centre beta; do
    echo "$node: alpha's rows $(q "$node" "SELECT count(*) FROM ledger WHERE federation_origin(entry_id) = 1") of $own"
done
for node in centre alpha beta; do
    is_eq=$(q "$node" "SELECT count(*) FROM (SELECT account, sum(amount) FROM ledger WHERE kind = 'charge' GROUP BY 1 EXCEPT SELECT account, sum(amount) FROM charge_rollup GROUP BY 1) x")
    echo "$node: accounts whose rollup differs from the ledger: $is_eq"
done
