#!/usr/bin/env bash
# test/slurm/bench-submit.sh [N] [ROUNDS]: what job_submit/lua's check adds to a submission.
#
# In a throw-away PostgreSQL cluster and a throw-away Slurm (with-cluster.sh, with-slurm.sh),
# submits N held jobs per round with the shipped job_submit.lua (check_submit over its
# persistent connection), N with the same script asking a query that checks nothing (the
# round trip: `roundtrip`) and N with a job_submit.lua that checks nothing, alternating for
# ROUNDS rounds (defaults 200 and 3). Reports slurmctld's own time per submit RPC, which
# includes the job_submit plugin (sdiag's REQUEST_SUBMIT_BATCH_JOB total_time, reset with
# `sdiag -r` before each submit; the usec= of slurmctld's log line is restarted after the plugin
# and would not see it), and the client's sbatch wall time: median and p99 of each, and the
# difference. Target of issue 15: the check adds < 2 ms at p99. `make bench` runs it after the
# database benchmarks.
#
# The breakdown, which depends less on the machine's load than the totals: check_submit's own
# time in the server (pg_stat_user_functions, track_functions = pl for the plugin's role), the
# round trip with the plugin's own work (roundtrip - nocheck), and the rest (check - roundtrip
# - check_submit: planning and executing the EXECUTE, the server waking for it).
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
n=${1:-200}
rounds=${2:-3}

if [ "${3:-}" != --inside ]; then
    export PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
    exec test/scripts/with-cluster.sh submitbench "$root/test/slurm/bench-submit.sh" "$n" "$rounds" --inside
fi

if [ "${4:-}" != --slurm ]; then
    createdb acct || exit 1
    psql -X -q -v ON_ERROR_STOP=1 -d acct >/dev/null <<'SQL' || exit 1
CREATE EXTENSION hpcacct CASCADE;
SELECT hpcacct.create_job_table();
CALL hpcacct.setup_roles();
CREATE ROLE slurm_submit LOGIN IN ROLE hpcacct_submit;
ALTER ROLE slurm_submit SET track_functions = 'pl';
SET search_path = hpcacct, public;
INSERT INTO setting VALUES ('timezone', 'UTC');
SELECT add_user('root', current_date);
INSERT INTO account (name) VALUES ('proj_a');
SELECT add_member('proj_a', 'root', 'admin');
SELECT deposit('proj_a', current_date, 100000);
SQL
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    printf 'conninfo = host=%s port=%s dbname=acct user=slurm_submit connect_timeout=2\n' "$PGHOST" "$PGPORT" \
        >"$work/hpcacct_job_submit.conf"
    cat >"$work/nocheck.lua" <<'LUA'
-- checks nothing: the reference
function slurm_job_submit(job_desc, part_list, submit_uid) return slurm.SUCCESS end
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid) return slurm.SUCCESS end
return slurm.SUCCESS
LUA
    export HPCACCT_JOB_SUBMIT_CONF=$work/hpcacct_job_submit.conf HPCACCT_BENCH_WORK=$work
    export HPCACCT_SLURM_CONF_EXTRA=$'JobSubmitPlugins=lua\nMaxJobCount=100000'
    # BENCH_SUBMIT_LUA: another job_submit.lua to measure (e.g. an earlier version's)
    export HPCACCT_SLURM_JOB_SUBMIT_LUA=${BENCH_SUBMIT_LUA:-$root/src/slurm/job_submit.lua}
    # not exec: the EXIT trap above removes $work afterwards
    rc=0
    test/slurm/with-slurm.sh "$root/test/slurm/bench-submit.sh" "$n" "$rounds" --inside --slurm || rc=$?
    exit $rc
fi

work=$HPCACCT_BENCH_WORK
log=$HPCACCT_SLURM_DIR/log/slurmctld.log
script=$HPCACCT_SLURM_DIR/etc/job_submit.lua
cp "$script" "$work/check.lua"
# the same script and connection, with a prepared query that reads nothing
# (or, for a script that sends its query as text, that query)
sed -e 's/SELECT ok, account, reason, message FROM hpcacct.check_submit(\$1, \$2)/SELECT true AS ok, $2 AS account, NULL::text AS reason, NULL::text AS message/' \
    -e 's/"SELECT ok, account, reason, message FROM hpcacct.check_submit(%s, %s)"/"SELECT true AS ok, %s::text AS user, %s::text AS account, NULL::text AS reason, NULL::text AS message"/' \
    "$script" >"$work/roundtrip.lua"
cmp -s "$script" "$work/roundtrip.lua" && { echo "bench-submit: cannot derive the round-trip script" >&2; exit 1; }
variants="check roundtrip nocheck"
use() {  # use check|nocheck: install that script; slurmctld reloads it when its mtime changes
    cp "$work/$1.lua" "$script"
    touch -d "@$(($(date +%s) + 1))" "$script"
    sleep 1.1
    sbatch --hold -A proj_a -p cpu -n 1 -t 1 -o /dev/null --wrap true >/dev/null 2>&1 || true   # loads it
    scancel -u root 2>/dev/null
}
: >"$work/samples"
for ((r = 1; r <= rounds; r++)); do
    for variant in $variants; do
        use $variant
        for ((i = 0; i < n; i++)); do
            sdiag -r >/dev/null
            t0=$(date +%s%N)
            sbatch --hold -A proj_a -p cpu -n 1 -t 1 -o /dev/null --wrap true >/dev/null 2>&1 || {
                echo "bench-submit: sbatch failed ($variant)" >&2; exit 1; }
            t1=$(date +%s%N)
            rpc=$(sdiag | sed -n 's/.*REQUEST_SUBMIT_BATCH_JOB.*count:1 .*total_time:\([0-9]*\).*/\1/p')
            [ -n "$rpc" ] && echo "$variant $rpc $(((t1 - t0) / 1000))" >>"$work/samples"
        done
        scancel -u root 2>/dev/null
    done
done
stats() {  # stats FILE: n, median, p99 (microseconds) of the numbers in FILE
    sort -n "$1" | awk '{v[NR] = $1} END {
        if (NR == 0) { print "0 0 0"; exit }
        m = v[int((NR + 1) / 2)]; p = v[int(NR * 0.99 + 0.999999)]; if (p == "") p = v[NR]
        printf "%d %d %d\n", NR, m, p }'
}
for variant in $variants; do
    awk -v v=$variant '$1 == v {print $2}' "$work/samples" >"$work/$variant.rpc"
    awk -v v=$variant '$1 == v {print $3}' "$work/samples" >"$work/$variant.wall"
done
read -r cn cm cp < <(stats "$work/check.rpc")
read -r nn nm np < <(stats "$work/nocheck.rpc")
read -r rn rm rp < <(stats "$work/roundtrip.rpc")
read -r _ cwm cwp < <(stats "$work/check.wall")
read -r _ nwm nwp < <(stats "$work/nocheck.wall")
sleep 11  # the plugin's backend reports its function statistics when idle
server_us=$(psql -X -At -d acct -c "SELECT round((total_time * 1000 / nullif(calls, 0))::numeric, 1) || ' ' || calls
                                    FROM pg_stat_user_functions WHERE schemaname = 'hpcacct' AND funcname = 'check_submit'")
read -r server_avg server_calls <<<"${server_us:-0 0}"
echo "job_submit/lua, $cn submits with the check, $rn with a query that checks nothing, $nn without (held jobs, $rounds rounds alternating):"
printf '  %-34s %10s %10s\n' "" "median" "p99"
printf '  %-34s %8.3f ms %8.3f ms\n' "slurmctld RPC, hpcacct check" "$(bc -l <<<"$cm/1000")" "$(bc -l <<<"$cp/1000")"
printf '  %-34s %8.3f ms %8.3f ms\n' "slurmctld RPC, plugin checks nothing" "$(bc -l <<<"$nm/1000")" "$(bc -l <<<"$np/1000")"
printf '  %-34s %8.3f ms %8.3f ms\n' "slurmctld RPC, query checks nothing" "$(bc -l <<<"$rm/1000")" "$(bc -l <<<"$rp/1000")"
printf '  %-34s %8.3f ms %8.3f ms\n' "the check adds" "$(bc -l <<<"($cm-$nm)/1000")" "$(bc -l <<<"($cp-$np)/1000")"
echo "  breakdown of what the check adds (medians):"
printf '    %-40s %8.3f ms\n' "round trip and the plugin's own work" "$(bc -l <<<"($rm-$nm)/1000")"
printf '    %-40s %8.3f ms  (%s calls, server statistics)\n' "check_submit in the server (mean)" "$(bc -l <<<"$server_avg/1000")" "$server_calls"
printf '    %-40s %8.3f ms\n' "the rest (EXECUTE around it, wake-up)" "$(bc -l <<<"($cm-$rm-$server_avg)/1000")"
printf '  %-34s %8.3f ms %8.3f ms\n' "sbatch wall time, hpcacct check" "$(bc -l <<<"$cwm/1000")" "$(bc -l <<<"$cwp/1000")"
printf '  %-34s %8.3f ms %8.3f ms\n' "sbatch wall time, checks nothing" "$(bc -l <<<"$nwm/1000")" "$(bc -l <<<"$nwp/1000")"
verdict=missed
[ $((cp - np)) -lt 2000 ] && verdict=met
echo "  target: the check adds < 2 ms at p99 (slurmctld's RPC time): $verdict"
