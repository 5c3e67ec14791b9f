#!/usr/bin/env bash
# smoke.sh: run from the repository root. Starts test/slurm/with-slurm.sh, runs
# test/slurm/job-mix.sh in it and checks, as TAP, that every daemon ran from the private
# directory, that sacct shows every kind of job of the mix (steps, array tasks, het components,
# both runs of the requeued job), Unknown times while jobs pend or run, GPUs in AllocTRES, and
# that the directory and every daemon are gone afterwards.
# HPCACCT_TALLY=FILE appends "slurm PASSED FAILED" to FILE.
# HPCACCT_SLURM_SAVE_SAMPLES=DIR copies the sacct output it captured to DIR (the fixtures in
# test/slurm/samples/ were made so).
set -uo pipefail

# sacct's format for a loader; times are cut to their field's width even with --parsable2,
# so the ones with a UTC offset are widened
FIELDS=Cluster,JobID,JobIDRaw,Account,User,Partition,Submit%40,Start%40,End%40,ElapsedRaw,AllocTRES,ReqTRES,State,QOS,NodeList
export SLURM_TIME_FORMAT=%FT%T%z

# --- inside the harness ---
if [ "${1:-}" = --inside ]; then
    out=$2
    date +%s.%N >"$out/up"
    echo "$HPCACCT_SLURM_DIR" >"$out/dir"
    since=$(date +%FT%T -d '-10 min')
    echo "$since" >"$out/since"
    # our daemons: processes with a file open under the private directory
    find /proc/[0-9]*/fd -maxdepth 1 -lname "$HPCACCT_SLURM_DIR/*" 2>/dev/null | cut -d/ -f3 |
        sort -u | while read -r pid; do echo "$pid $(cat "/proc/$pid/comm" 2>/dev/null)"; done |
        grep -vE ' (bash|sh)$' >"$out/daemons"
    ss -Hltnp 2>/dev/null >"$out/listen" || true
    capture() {  # capture NAME: sacct with and without -X
        sacct -a -D -X --parsable2 -S "$since" -E now --format="$FIELDS" >"$out/$1-alloc.txt"
        sacct -a -D --parsable2 -S "$since" -E now --format="$FIELDS" >"$out/$1-steps.txt"
    }
    export -f capture
    export out since FIELDS
    test/slurm/job-mix.sh bash -c 'squeue -h -o "%i %T" >"$out/during-squeue"; capture during' \
        >"$out/jobs.log" 2>&1
    echo $? >"$out/mix-status"
    capture after
    sacct -a -X --parsable2 -S "$since" -E now --format="$FIELDS" >"$out/after-nodup-alloc.txt"
    cp "$HPCACCT_SLURM_DIR/work/mix/jobs" "$out/jobs"
    id=$(awk '$1 == "cancel_pending" {print $2}' "$out/jobs")
    sacct -a -X --parsable2 -j "$id" --format="$FIELDS" >"$out/cancel-pending.txt"
    exit 0
fi

# --- outside ---
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")/../.."
out=$(mktemp -d "${TMPDIR:-/tmp}/hpcacct-slurm-smoke.XXXXXX")
trap '[ -n "${HPCACCT_SLURM_SMOKE_KEEP:-}" ] || rm -rf "$out"' EXIT
passed=0 failed=0 n=0
check() {  # check DESCRIPTION COMMAND...
    local desc=$1
    shift
    n=$((n + 1))
    if "$@" >/dev/null 2>&1; then
        echo "ok $n - $desc"
        passed=$((passed + 1))
    else
        echo "not ok $n - $desc"
        failed=$((failed + 1))
    fi
}
t0=$(date +%s.%N)
# bounded: on TERM with-slurm.sh stops its command and every daemon at once
timeout 600 test/slurm/with-slurm.sh bash "$self" --inside "$out"
status=$?
t1=$(date +%s.%N)
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", a - b }'; }
[ -s "$out/up" ] && echo "# harness start: $(secs "$(cat "$out/up")" "$t0") s"
echo "# harness, mix and stop: $(secs "$t1" "$t0") s"

check "with-slurm.sh and the inside part exited 0" test "$status" -eq 0
check "job-mix.sh exited 0" grep -qx 0 "$out/mix-status"
[ -s "$out/jobs.log" ] && sed 's/^/# /' "$out/jobs.log"
dir=$(cat "$out/dir" 2>/dev/null)
for d in munged mariadbd slurmdbd slurmctld; do
    check "$d ran from the private directory" grep -qE " $d\$" "$out/daemons"
done
check "four slurmd ran from the private directory" test "$(grep -cE ' slurmd$' "$out/daemons")" -eq 4
loopback_only() {  # our daemons listen on 127.0.0.1 (slurmdbd 22.05 cannot: any address)
    local pid
    for pid in $(awk '$2 != "slurmdbd" {print $1}' "$out/daemons"); do
        grep "pid=$pid," "$out/listen" | awk '{print $4}' | grep -qv '^127\.0\.0\.1:' && return 1
    done
    return 0
}
check "daemons other than slurmdbd listen on 127.0.0.1 only" loopback_only

# after the run
check "the private directory is gone" test -n "$dir" -a ! -e "$dir"
gone() {
    local pid
    for pid in $(awk '{print $1}' "$out/daemons"); do kill -0 "$pid" 2>/dev/null && return 1; done
    [ -s "$out/daemons" ]
}
check "every daemon it started is gone" gone
in_dir() {  # no process has a file or its cwd in the private directory
    [ -z "$(find /proc/[0-9]*/cwd /proc/[0-9]*/fd -maxdepth 1 \( -lname "$dir" -o -lname "$dir/*" \) 2>/dev/null)" ]
}
check "no process is left in the private directory" in_dir

# sacct output
A=$out/after-alloc.txt S=$out/after-steps.txt D=$out/during-alloc.txt
id() { awk -v k="$1" '$1 == k {print $2}' "$out/jobs"; }
row() {  # row FILE JOBID: the rows whose JobID is JOBID
    awk -F'|' -v j="$2" 'NR > 1 && $2 == j' "$1"
}
has() { [ -n "$(row "$1" "$2")" ]; }
field() {  # field FILE JOBID N: field N of the last row of JOBID
    row "$1" "$2" | tail -n 1 | cut -d'|' -f"$3"
}
check "header is the loader's field list" \
    test "$(head -n 1 "$A")" = "Cluster|JobID|JobIDRaw|Account|User|Partition|Submit|Start|End|ElapsedRaw|AllocTRES|ReqTRES|State|QOS|NodeList"
for k in plain cpu4 multistep multinode excl exclusive gpu failed timeout cancel_running zero srun unknown_account dependent waiting; do
    check "sacct -X shows the $k job" has "$A" "$(id $k)"
done
has_all() {  # has_all FILE JOBID...
    local f=$1 j
    shift
    for j in "$@"; do has "$f" "$j" || return 1; done
}
a=$(id array)
check "array tasks ${a}_1, ${a}_2, ${a}_3" has_all "$A" "${a}_1" "${a}_2" "${a}_3"
h=$(id het)
check "het components ${h}+0 and ${h}+1 and their steps" \
    has_all "$S" "${h}+0" "${h}+1" "${h}+0.0" "${h}+1.0" "${h}+0.batch"
m=$(id multistep)
check "multistep steps .batch, .extern, .0, .1, .2" has_all "$S" "$m.batch" "$m.extern" "$m.0" "$m.1" "$m.2"
check "multinode job's step .0 ran on node[1-2]" test "$(field "$S" "$(id multinode).0" 15)" = "node[1-2]"
sr=$(id srun)
check "srun job has .0 and .extern, no .batch" \
    eval 'has_all "$S" "$sr.0" "$sr.extern" && ! has "$S" "$sr.batch"'
r=$(id requeued)
check "requeued job: two runs with -D" test "$(row "$A" "$r" | wc -l)" -eq 2
check "requeued job: first run REQUEUED, second COMPLETED" \
    test "$(row "$A" "$r" | cut -d'|' -f13 | tr '\n' ' ')" = "REQUEUED COMPLETED "
check "requeued job: same JobIDRaw, different Submit" \
    test "$(row "$A" "$r" | cut -d'|' -f3 | sort -u | wc -l)" -eq 1 -a "$(row "$A" "$r" | cut -d'|' -f7 | sort -u | wc -l)" -eq 2
check "requeued job: one row without -D" test "$(row "$out/after-nodup-alloc.txt" "$r" | wc -l)" -eq 1
check "failed job FAILED" test "$(field "$A" "$(id failed)" 13)" = FAILED
check "timeout job TIMEOUT" test "$(field "$A" "$(id timeout)" 13)" = TIMEOUT
check "cancelled running job CANCELLED by 0" test "$(field "$A" "$(id cancel_running)" 13)" = "CANCELLED by 0"
# Slurm keeps whole seconds: a `true` job that starts late in one second ends in the next and
# shows ElapsedRaw 1 (3 of about a dozen runs on 23 November), so "zero-length" means 0 or 1 here.
check "zero-length job COMPLETED in 0 or 1 s" \
    eval 'case "$(field "$A" "$(id zero)" 13)/$(field "$A" "$(id zero)" 10)" in COMPLETED/0|COMPLETED/1) true ;; *) false ;; esac'
p=$(id cancel_pending)
check "cancelled pending job is not in the -S/-E window (never eligible)" eval '! has "$A" "$p"'
check "cancelled pending job by -j: CANCELLED, NodeList 'None assigned', no AllocTRES" \
    test "$(field "$out/cancel-pending.txt" "$p" 13)|$(field "$out/cancel-pending.txt" "$p" 15)|$(field "$out/cancel-pending.txt" "$p" 11)" = "CANCELLED by 0|None assigned|"
check "unknown_account job charged to proj_unknown" test "$(field "$A" "$(id unknown_account)" 4)" = proj_unknown
check "GPU job: gres/gpu=1 in AllocTRES" bash -c "[[ '$(field "$A" "$(id gpu)" 11)' == *gres/gpu=1* ]]"
check "GPU job: AllocTRES has billing, cpu, mem, node" \
    bash -c "[[ '$(field "$A" "$(id gpu)" 11)' == billing=*,cpu=*,gres/gpu=1,mem=*,node=1 ]]"
check "cpu4 job: cpu=4,mem=512M" bash -c "[[ '$(field "$A" "$(id cpu4)" 11)' == *cpu=4,mem=512M,node=1 ]]"
check "excl partition job got the whole node (cpu=4)" bash -c "[[ '$(field "$A" "$(id excl)" 11)' == *cpu=4,* ]]"
check "times carry a UTC offset (SLURM_TIME_FORMAT=%FT%T%z with widened fields)" \
    bash -c "[[ '$(field "$A" "$(id plain)" 7)' =~ ^[0-9-]{10}T[0-9:]{8}[+-][0-9]{4}\$ ]]"
check "during the mix: a running job with End=Unknown" \
    bash -c "awk -F'|' '\$13 == \"RUNNING\" && \$9 == \"Unknown\"' '$D' | grep -q ."
check "during the mix: a pending job with Start=Unknown and End=Unknown" \
    test "$(field "$D" "$(id waiting)" 8)|$(field "$D" "$(id waiting)" 9)|$(field "$D" "$(id waiting)" 13)" = "Unknown|Unknown|PENDING"
check "during the mix: a job pending on a dependency is not in the window" eval '! has "$D" "$(id dependent)"'
check "after the mix: no Unknown time left" bash -c "! cut -d'|' -f7-9 '$A' | grep -q Unknown"

if [ -n "${HPCACCT_SLURM_SAVE_SAMPLES:-}" ]; then
    mkdir -p "$HPCACCT_SLURM_SAVE_SAMPLES"
    for f in during-alloc during-steps after-alloc after-steps after-nodup-alloc cancel-pending; do
        cp "$out/$f.txt" "$HPCACCT_SLURM_SAVE_SAMPLES/sacct-$f.txt"
    done
    cp "$out/jobs" "$HPCACCT_SLURM_SAVE_SAMPLES/jobs.txt"
fi

echo "1..$n"
echo "# slurm: $passed passed, $failed failed"
[ -n "${HPCACCT_TALLY:-}" ] && echo "slurm $passed $failed" >>"$HPCACCT_TALLY"
[ "$failed" -eq 0 ]
