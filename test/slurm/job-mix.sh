#!/usr/bin/env bash
# job-mix.sh [COMMAND [ARGS...]]: run inside test/slurm/with-slurm.sh. Submits a realistic mix
# of jobs, runs COMMAND (if given) once all are submitted while some still pend or run, then
# waits until every job and step has a final state in sacct (-D: every run).
# Prints one line per job, "KIND JOBID", and writes the same to $HPCACCT_SLURM_DIR/work/mix/jobs.
#
# Kinds: requeued (scontrol requeue while running: two runs, same JobID), plain, cpu4 (-c 4
# --mem), array (--array=1-3), multistep (three srun steps), multinode (-N 2), excl (partition
# excl), exclusive (--exclusive in cpu), gpu (--gres=gpu:1), het (two het components), failed
# (exit 1), timeout (--time=1: runs ~1-2 min), cancel_running, cancel_pending (-H, then
# scancel), zero (true), srun (an srun job, no batch step), unknown_account (proj_unknown,
# an account Slurm has but a downstream test treats as unknown), dependent (pends on a
# dependency, not eligible, until the timeout job ends), waiting (eligible, pends for
# resources, the timeout job's node, until that ends).
set -euo pipefail
: "${HPCACCT_SLURM_DIR:?run me inside test/slurm/with-slurm.sh}"

mix=$HPCACCT_SLURM_DIR/work/mix
mkdir -p "$mix"
cd "$mix"
: >"$mix/jobs"
timeout_s=${HPCACCT_MIX_TIMEOUT:-300}

note() { echo "$1 $2" | tee -a "$mix/jobs"; }
sb() {  # sb KIND SBATCH-ARGS...: submit and note; the job id is left in $id
    local kind=$1
    shift
    id=$(sbatch --parsable -J "$kind" -o "$mix/%x-%j.out" "$@")
    id=${id%%;*}
    note "$kind" "$id"
}
wait_state() {  # wait_state JOBID STATE SECONDS
    local i s
    for ((i = 0; i < $3 * 10; i++)); do
        s=$(squeue -h -j "$1" -o %T 2>/dev/null | head -n 1)
        [ "$s" = "$2" ] && return 0
        sleep 0.1
    done
    echo "job-mix: job $1 is ${s:-gone}, not $2, after $3 s" >&2
    return 1
}

# requeued first: a requeued job may wait before it is eligible again
cat >"$mix/requeue.sh" <<'EOF'
#!/bin/bash
# first run: long (it is requeued); second run: short
if [ "${SLURM_RESTART_COUNT:-0}" -eq 0 ]; then sleep 120; else sleep 1; fi
EOF
sb requeued --requeue "$mix/requeue.sh"
requeued=$id
wait_state "$requeued" RUNNING 30
sleep 1
scontrol requeue "$requeued"

# timeout runs on node4 alone, so that "waiting" blocks no other job
sb timeout --time=1 -p gpu -w node4 --wrap 'sleep 300'
timeout_job=$id
sb dependent --dependency=afterany:"$timeout_job" --wrap 'sleep 1'
# waiting: eligible, but pends for the timeout job's node until that ends
wait_state "$timeout_job" RUNNING 30
sb waiting -p gpu -w node4 --exclusive --wrap 'sleep 1'
sb plain --wrap 'sleep 2'
sb cpu4 -c 4 --mem=512M --wrap 'sleep 2'
sb array --array=1-3 --wrap 'sleep 2'
cat >"$mix/multistep.sh" <<'EOF'
#!/bin/bash
srun -n 1 sleep 1
srun -n 1 true
srun -n 1 hostname
EOF
sb multistep -n 1 "$mix/multistep.sh"
sb multinode -N 2 --ntasks-per-node=1 --wrap 'srun sleep 1'
sb excl -p excl --wrap 'sleep 2'
sb exclusive --exclusive --wrap 'sleep 2'
sb gpu -p gpu --gres=gpu:1 --wrap 'sleep 2'
cat >"$mix/het.sh" <<'EOF'
#!/bin/bash
srun --het-group=0,1 true
sleep 1
EOF
sb het -p cpu -n 1 : -p gpu -n 1 --gres=gpu:1 "$mix/het.sh"
sb failed --wrap 'sleep 1; exit 1'
sb zero --wrap true
sb unknown_account -A proj_unknown --wrap 'sleep 1'
sb cancel_pending -H --wrap 'sleep 1'
pending=$id
sb cancel_running --wrap 'sleep 120'
running=$id
# an srun job: an allocation with step 0 and no batch step
srun -J srun -o /dev/null true &
srun_pid=$!
wait_state "$running" RUNNING 60
sleep 1
scancel "$pending" "$running"
wait "$srun_pid"
srun_id=$(sacct -n -X -P --name=srun -o JobIDRaw | tail -n 1)
note srun "${srun_id:-?}"

if [ $# -gt 0 ]; then "$@"; fi

# done: nothing in the queue, and sacct shows no run or step still pending or running
for ((i = 0; i < timeout_s; i++)); do
    if [ -z "$(squeue -h -o %A)" ] &&
        ! sacct -a -D -n -P -S now-1days -o State | grep -qE '^(PENDING|RUNNING|COMPLETING|SUSPENDED|REQUEUE_HOLD)'; then
        exit 0
    fi
    sleep 1
done
echo "job-mix: jobs still not final after ${timeout_s}s:" >&2
squeue >&2
exit 1
