#!/usr/bin/env bash
# test/slurm/signals.sh: with-slurm.sh's teardown runs to its end under a second signal.
#
# Starts two harnesses at once, each running a command that starts a batch job and waits. One
# gets ^C twice (INT to its process group, as a terminal sends it), the other TERM twice (to
# the harness alone, as a service manager or timeout sends it); the second signal comes once
# the teardown has begun (the command is gone). Then no process of either may be left (none
# whose command line or environment names its directory: daemons, steps, the job's processes)
# and the directory must be gone. Prints one line per check, "ok - ..." or "not ok - ...".
# Cleans up after a failure itself.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
set -m   # each background job in a process group of its own, INT not ignored

work=$(mktemp -d)
stop_all() {  # the harnesses still running tear down (bounded), then KILL
    local j left
    left=$(jobs -p)
    [ -n "$left" ] || return 0
    kill -TERM $left 2>/dev/null
    for _ in $(seq 1 600); do
        left=$(for j in $left; do kill -0 "$j" 2>/dev/null && echo "$j"; done)
        [ -n "$left" ] || return 0
        sleep 0.1
    done
    kill -KILL $left 2>/dev/null
}
trap 'stop_all; rm -rf "$work"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# the processes, other than ours, whose command line or environment names DIR
procs_of() {
    local d=$1 p
    [ -n "$d" ] || return 0   # an empty pattern names every process on the machine
    for p in /proc/[0-9]*; do
        [ "${p#/proc/}" = $$ ] && continue
        grep -qsF -- "$d" "$p/cmdline" "$p/environ" && echo "${p#/proc/}"
    done
}

start() {  # start NAME: a harness whose command runs a job, writes its directory, waits; pid in $!
    env --default-signal=INT,TERM -u HPCACCT_SLURM_CONF_EXTRA -u HPCACCT_SLURM_JOB_SUBMIT_LUA -u HPCACCT_SLURM_ENFORCE \
        -u HPCACCT_SLURM_KEEP_LOGS test/slurm/with-slurm.sh \
        sh -c 'j=$(sbatch --parsable -o /dev/null --wrap "sleep 300") || exit 1
               while [ "$(squeue -h -j "$j" -o %T)" != RUNNING ]; do sleep 0.2; done
               echo "$HPCACCT_SLURM_DIR" >"$0.tmp" && mv "$0.tmp" "$0" && exec sleep 300' "$work/$1.dir" \
        >"$work/$1.out" 2>&1 </dev/null &
}
# env runs the harness in its place: the leader of the job's process group. --default-signal:
# a shell started in the background without job control ignores INT, and its children can
# then neither trap nor take it (the ^C case failed when make test itself ran with '&')
start int
int_pid=$!
start term
term_pid=$!
set +m   # no job notices on standard error

for _ in $(seq 1 900); do
    [ -s "$work/int.dir" ] && [ -s "$work/term.dir" ] && break
    kill -0 "$int_pid" 2>/dev/null || break
    kill -0 "$term_pid" 2>/dev/null || break
    sleep 0.1
done
dir_int=$(cat "$work/int.dir" 2>/dev/null) dir_term=$(cat "$work/term.dir" 2>/dev/null)

second() {  # second HARNESS SIGNAL TARGET...: a signal, and the same once its command is gone
    local harness=$1 sig=$2 cmd
    shift 2
    cmd=$(pgrep -P "$harness" -x sleep)
    kill "-$sig" "$@"
    for _ in $(seq 1 100); do
        [ -n "$cmd" ] && kill -0 "$cmd" 2>/dev/null || break
        sleep 0.02
    done
    kill "-$sig" "$@"
}
if [ -n "$dir_int" ] && [ -n "$dir_term" ]; then
    second "$int_pid" INT -- "-$int_pid"     # the process group: ^C ^C
    second "$term_pid" TERM "$term_pid"      # the harness only
fi
for _ in $(seq 1 600); do   # bounded: a teardown that hangs is a failure too
    kill -0 "$int_pid" 2>/dev/null || kill -0 "$term_pid" 2>/dev/null || break
    sleep 0.1
done

result() {  # result NAME DIR WHAT
    local left
    left=$(procs_of "$2" | tr '\n' ' ')
    if [ -n "$2" ] && [ -z "$left" ] && [ ! -e "$2" ]; then
        echo "ok - $3: the teardown ran to its end (no process left, directory gone)"
    else
        echo "not ok - $3: the teardown ran to its end (no process left, directory gone)"
        echo "# left: ${left:-none}; directory: $([ -e "$2" ] && echo kept || echo gone)"
        [ -n "$left" ] && ps -o pid=,args= -p "$(echo $left | tr ' ' ,)" | cut -c1-150 | sed 's/^/# /'
        [ -z "$2" ] && sed 's/^/# /' "$work/$1.out"
        # what our harness started and left (none when it never said its directory)
        [ -n "$2" ] && [ -n "$left" ] && kill -KILL $left 2>/dev/null
        sleep 0.5
        [ -n "$2" ] && rm -rf "$2"
    fi
}
result int "$dir_int" "^C twice"
result term "$dir_term" "TERM twice"
