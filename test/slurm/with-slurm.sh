#!/usr/bin/env bash
# with-slurm.sh COMMAND [ARGS...]: runs COMMAND against a real, throw-away Slurm (Debian 12's
# 22.05.8) on localhost, then stops and removes it; exits with COMMAND's status.
#
# Everything lives in one fresh directory (mktemp -d): munged (own key and socket), MariaDB
# (own datadir, TCP on a free 127.0.0.1 port, skip-grant-tables), slurmdbd, slurmctld and four
# slurmd (node1..node4, one port each, all on 127.0.0.1). Ports are picked free at start.
# Nothing outside that directory is touched, and no daemon it did not start. INT or TERM stops
# COMMAND and tears it all down; a further INT or TERM does not cut that teardown short
# (test/slurm/signals.sh).
#
# Cluster: ClusterName=testcl, select/cons_tres with CR_Core_Memory, priority/multifactor,
# accounting through slurmdbd (AccountingStorageTRES adds gres/gpu), JobCompType=jobcomp/none.
#   nodes      node1..node4: 4 CPUs, 2000 MB each; node3, node4 have gres gpu:2 (fake char
#              devices under the directory, since slurmd drops GPUs without File=)
#   partitions cpu (node1,node2; default), excl (node1,node2; OverSubscribe=EXCLUSIVE),
#              gpu (node3,node4)
#   accounts   proj_a, proj_b, proj_unknown; user root in all of them, default proj_a
#
# COMMAND sees:
#   SLURM_CONF             the private slurm.conf: sbatch, srun, squeue, scontrol, sacct,
#                          sacctmgr, sprio, sinfo, scancel talk to this cluster (the munge
#                          socket is in it as AuthInfo=socket=... and, for the connection to
#                          slurmdbd, AccountingStoragePass=...); other SLURM_* are unset
#   HPCACCT_SLURM_DIR      the private directory (logs under log/, a scratch dir work/)
#   HPCACCT_SLURM_CLUSTER  the cluster's name (testcl)
#   HPCACCT_SLURM_DB_SOCKET  slurmdbd's MariaDB socket (user root, no password; database
#                          slurm_acct_db, jobs in testcl_job_table): a test may move a job's
#                          times there, e.g. to a DST change in the past
# Its environment may set:
#   HPCACCT_SLURM_CONF_EXTRA      lines appended to slurm.conf (e.g. JobSubmitPlugins=lua)
#   HPCACCT_SLURM_JOB_SUBMIT_LUA  a job_submit.lua copied next to slurm.conf, where
#                                 JobSubmitPlugins=lua looks for it (set that in CONF_EXTRA)
#   HPCACCT_SLURM_ENFORCE         AccountingStorageEnforce (e.g. associations,limits,qos);
#                                 unset: none
#   HPCACCT_SLURM_KEEP_LOGS       a directory the daemons' logs are copied to on exit
#   HPCACCT_SLURM_CRED_EXPIRE     AuthInfo cred_expire, also how long a requeued job waits
#                                 before it may start again (default 10 s; Slurm's is 120 s)
#
# Ports: each daemon listens on 127.0.0.1 only, except slurmdbd, which 22.05 binds to every
# address (slurmdbd.conf has no option for it); its port is still picked free, and it talks
# only to clients with this run's munge key.
#
# SACCT NOTES: the invocation a loader should use on this Slurm (22.05.8), found with smoke.sh;
# real output in test/slurm/samples/:
#   SLURM_TIME_FORMAT=%FT%T%z sacct -a -D -X --parsable2 -S START -E END \
#     --format=Cluster,JobID,JobIDRaw,Account,User,Partition,Submit%40,Start%40,End%40,ElapsedRaw,AllocTRES,ReqTRES,State,QOS,NodeList
# - --parsable2: '|'-separated, no trailing '|', first line the header (field names without
#   the %N). Drop -X to get the steps too (JobID N.batch, N.extern, N.0, N.1...; steps have
#   User, Partition, QOS, ReqTRES empty and Submit = the step's start; .batch has no billing).
# - Times: sacct honours SLURM_TIME_FORMAT (a strftime format), but cuts every time to its
#   field's width (19) even under --parsable2: %FT%T%z alone loses the offset, hence
#   Submit%40 etc. Other fields are not cut under --parsable2 (only in the fixed-width output,
#   with a '+'). -S/-E are read in the local time zone (TZ), and printed in it; a time in the
#   hour a DST change repeats is read as the later hour (TZ=Europe/Berlin: -S 02:25 on the day
#   the clocks go back is 01:25 UTC, not 00:25).
# - A job of a second or two may show, for a moment, with End and AllocTRES but Partition
#   empty, QOS Unknown, ReqTRES empty (slurmdbd got its end before its start record).
# - Unknown: Start and End of a pending job, End of a running one (ElapsedRaw then counts up
#   to now), Eligible of a held one. A job cancelled while pending has Start None (held for
#   seconds) or Start = End (cancelled within its first second, or waiting on --begin): the
#   sure sign that it never ran is NodeList "None assigned" (as while pending) with AllocTRES
#   empty and ElapsedRaw 0. Eligible can lie in the future (--begin) or after End.
# - -S/-E without --state select a run when Eligible < END (strict; checked to the second) and
#   (End >= START, or not ended): a job that ended exactly at -E is included (it was eligible
#   before), and so is one that ended exactly at -S; consecutive windows [S,E) [E,F) can both
#   return a run, so load idempotently. A run not eligible (yet) is not selected: held, then
#   cancelled (it shows with -j, or with --state=CA and the window), pending on a dependency
#   or a future --begin. Without -S sacct starts at 00:00 today; without -E, END is now.
# - Requeue: with -D each run is a row of its own, same JobID and JobIDRaw; the earlier run has
#   State REQUEUED and its own Submit/Start/End; the later run's Submit is the requeue time.
#   Without -D only the last run shows. A requeued job waits AuthInfo cred_expire (here 10 s;
#   120 s by default) before it may start again.
# - Arrays: JobID A_T; JobIDRaw is a job id of its own per task, except one task (here the
#   last) that keeps A itself; so key rows on JobIDRaw (+ Submit for requeued runs), not JobID.
# - Het jobs: JobID H+0, H+1 with JobIDRaw H and a job id of its own (13+0 -> 13, 13+1 -> 14);
#   steps H+0.batch, H+0.0, H+1.0 (raw 13.batch, 13.0, 14.0); only component 0 has .batch.
# - State of a cancelled job is "CANCELLED by UID" (job row; its steps say CANCELLED).
# - AllocTRES order: billing,cpu,gres/gpu,mem,node (mem with a unit suffix, e.g. 512M).
set -euo pipefail

cluster=testcl
base=$(mktemp -d "${TMPDIR:-/tmp}/hpcacct-slurm.XXXXXX")
# munged wants every directory above its socket searchable by all, and none writable by others
chmod 711 "$base"
etc=$base/etc log=$base/log run=$base/run
mkdir -p "$etc" "$log" "$run" "$base/munge" "$base/ctld" "$base/spool" "$base/dev" "$base/work" "$base/tmp"
chmod 711 "$base/munge"

# daemons we started, each in a session of its own (setsid, in place: $! is the daemon), so
# that a ^C or a signal to our process group reaches us and COMMAND only, and the teardown
# stops them in order (jobs first); killed with us should we be (setpriv --pdeathsig)
db_pid= dbd_pid= ctld_pid= slurmd_pids=()

# Free TCP ports on 127.0.0.1 below the ephemeral range, distinct, none in use now.
pick_ports() {
    local n=$1 used p picked=" "
    used=" $(for f in /proc/net/tcp /proc/net/tcp6; do
        [ -r "$f" ] && tail -n +2 "$f"
    done | while read -r _ local _; do echo $((16#${local##*:})); done | sort -u | tr '\n' ' ') "
    while [ "$n" -gt 0 ]; do
        p=$((20000 + RANDOM % 12000))
        case "$used$picked" in *" $p "*) continue ;; esac
        picked+="$p "
        n=$((n - 1))
    done
    echo $picked
}

# Processes other than this shell whose cwd or an open file lies under $base, and the
# processes of this cluster's jobs (their environment has its slurm.conf and a job id), which
# outlive a slurmstepd killed below.
procs_in_base() {
    local f
    {
        find /proc/[0-9]*/cwd /proc/[0-9]*/fd -maxdepth 1 \( -lname "$base" -o -lname "$base/*" \) \
            2>/dev/null | cut -d/ -f3
        for f in /proc/[0-9]*/environ; do
            grep -zqsxF "SLURM_CONF=$etc/slurm.conf" "$f" && grep -zqs '^SLURM_JOB_ID=' "$f" &&
                echo "${f:6:-8}"
        done
    } | sort -u | grep -vx -e "$$" -e "${BASHPID:-$$}" || true
}

wait_gone() {  # wait_gone SECONDS PID...: true when all PIDs have exited
    local t=$1 p alive i
    shift
    for ((i = 0; i < t * 10; i++)); do
        alive=0
        for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ $alive -eq 0 ] && return 0
        sleep 0.1
    done
    return 1
}

stop() {  # stop SECONDS PID...: TERM, and KILL what is left after SECONDS
    local t=$1
    shift
    [ $# -gt 0 ] || return 0
    kill -TERM "$@" 2>/dev/null
    # no 'wait PID...': after a ^C bash may wait there for a child it has reaped already;
    # wait_gone's sleeps reap our children (munged is not one)
    wait_gone "$t" "$@" && return 0
    kill -KILL "$@" 2>/dev/null
    wait_gone 5 "$@"
}

teardown() {
    local status=$?
    # to its end: a second ^C or TERM must not leave daemons or the directory behind
    trap '' INT TERM
    trap - EXIT
    set +e
    if [ -n "${cmd_pid:-}" ] && kill -0 "$cmd_pid" 2>/dev/null; then
        kill -TERM "$cmd_pid" 2>/dev/null
        wait_gone 5 "$cmd_pid" || kill -KILL "$cmd_pid" 2>/dev/null
    fi
    # jobs first, so that no slurmstepd outlives its slurmd (setsid: a ^C does not reach them,
    # nor timeout, which would pass it on)
    if [ -f "$etc/slurm.conf" ] && [ -n "${ctld_pid:-}" ] && kill -0 "$ctld_pid" 2>/dev/null; then
        local jobs
        jobs=$(SLURM_CONF=$etc/slurm.conf setsid timeout 10 squeue -h -o %A 2>/dev/null)
        if [ -n "$jobs" ]; then
            SLURM_CONF=$etc/slurm.conf setsid timeout 10 scancel $jobs 2>/dev/null
            for ((i = 0; i < 100; i++)); do
                [ -z "$(SLURM_CONF=$etc/slurm.conf setsid timeout 5 squeue -h -o %A 2>/dev/null)" ] && break
                sleep 0.1
            done
        fi
    fi
    # the slurm daemons together, then slurmdbd, then MariaDB and munged
    stop 10 "${slurmd_pids[@]}" $ctld_pid
    stop 10 $dbd_pid
    local munged_pid=
    [ -f "$run/munged.pid" ] && munged_pid=$(cat "$run/munged.pid")
    stop 10 $db_pid $munged_pid
    # anything left that belongs to us (steps, job processes)
    local left
    left=$(procs_in_base)
    if [ -n "$left" ]; then
        kill -KILL $left 2>/dev/null
        wait_gone 5 $left
    fi
    if [ -n "${HPCACCT_SLURM_KEEP_LOGS:-}" ]; then
        mkdir -p "$HPCACCT_SLURM_KEEP_LOGS" && cp -r "$log/." "$HPCACCT_SLURM_KEEP_LOGS/"
    fi
    rm -rf "$base"
    exit $status
}
trap teardown EXIT
# the first INT or TERM ignores further ones at once, before teardown has begun
trap 'trap "" INT TERM; exit 130' INT
trap 'trap "" INT TERM; exit 143' TERM

fail() {
    echo "with-slurm: $*" >&2
    for f in "$log"/*.log; do
        [ -s "$f" ] && { echo "--- tail of $f" >&2; tail -n 15 "$f" >&2; }
    done
    exit 1
}

wait_for() {  # wait_for SECONDS WHAT COMMAND...
    local t=$1 what=$2 deadline=$((SECONDS + $1))
    shift 2
    while [ $SECONDS -lt $deadline ]; do
        if declare -F "$1" >/dev/null; then
            "$@" >/dev/null 2>&1 && return 0
        else
            timeout 10 "$@" >/dev/null 2>&1 && return 0
        fi
        sleep 0.1
    done
    fail "$what did not come up within ${t}s"
}

read -r db_port dbd_port ctld_port n1_port n2_port n3_port n4_port <<<"$(pick_ports 7)"
node_ports=("$n1_port" "$n2_port" "$n3_port" "$n4_port")
for v in $(compgen -e); do [[ $v == SLURM_* ]] && unset "$v"; done
export SLURM_CONF=$etc/slurm.conf
# cred_expire also sets how long a requeued job waits before it may start again (120 s by default)
authinfo="AuthInfo=socket=$base/munge/munge.socket,cred_expire=${HPCACCT_SLURM_CRED_EXPIRE:-10}"
ctld_host=$(hostname -s)

# --- munge ---
mungekey --create --keyfile="$base/munge/munge.key" >/dev/null 2>&1 ||
    { dd if=/dev/urandom of="$base/munge/munge.key" bs=1 count=1024 status=none; }
chmod 600 "$base/munge/munge.key"
munged --socket="$base/munge/munge.socket" --key-file="$base/munge/munge.key" \
    --log-file="$log/munged.log" --pid-file="$run/munged.pid" --seed-file="$base/munge/munged.seed" ||
    fail "munged did not start"

# --- MariaDB ---
# (tried twice: on a busy machine one of two harnesses started at once has seen it fail; the
# first attempt's errors stay in the log)
install_db() {
    rm -rf "$base/db"
    mariadb-install-db --no-defaults --datadir="$base/db" --user=root --auth-root-authentication-method=normal \
        --skip-test-db >>"$log/mariadb-install.log" 2>&1
}
install_db || { grep -i -E 'error|warning' "$log/mariadb-install.log" | head -5 | sed 's/^/with-slurm: mariadb-install-db: /' >&2
                echo "with-slurm: mariadb-install-db failed once; trying again" >&2; install_db; } ||
    { grep -i -E 'error' "$log/mariadb-install.log" | head -10 >&2; fail "mariadb-install-db failed"; }
setsid setpriv --pdeathsig KILL mariadbd --no-defaults --user=root --datadir="$base/db" \
    --socket="$run/mysqld.sock" --pid-file="$run/mysqld.pid" --log-error="$log/mariadb.log" \
    --bind-address=127.0.0.1 --port="$db_port" --skip-grant-tables --skip-name-resolve --skip-log-bin \
    --innodb-flush-log-at-trx-commit=0 --innodb-doublewrite=0 --innodb-buffer-pool-size=128M \
    --innodb-lock-wait-timeout=900 --max-allowed-packet=64M >/dev/null 2>&1 &
db_pid=$!
wait_for 30 MariaDB mariadb-admin --no-defaults --protocol=tcp -h 127.0.0.1 -P "$db_port" -u root ping

# --- configuration ---
cat >"$etc/slurmdbd.conf" <<CONF
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$dbd_port
SlurmUser=root
AuthType=auth/munge
$authinfo
LogFile=$log/slurmdbd.log
PidFile=$run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$db_port
StorageUser=root
StorageLoc=slurm_acct_db
CONF
chmod 600 "$etc/slurmdbd.conf"

for n in 1 2 3 4; do mkdir -p "$base/spool/node$n"; done
for n in 3 4; do
    for g in 0 1; do mknod "$base/dev/node$n-gpu$g" c 195 $((n * 2 + g)); done
done
cat >"$etc/gres.conf" <<CONF
AutoDetect=off
NodeName=node3 Name=gpu File=$base/dev/node3-gpu[0-1]
NodeName=node4 Name=gpu File=$base/dev/node4-gpu[0-1]
CONF

{
    cat <<CONF
ClusterName=$cluster
SlurmctldHost=$ctld_host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
$authinfo
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
StateSaveLocation=$base/ctld
SlurmctldPidFile=$run/slurmctld.pid
SlurmctldLogFile=$log/slurmctld.log
SlurmdPidFile=$run/slurmd-%n.pid
SlurmdLogFile=$log/slurmd-%n.log
SlurmdSpoolDir=$base/spool/%n
TmpFS=$base/tmp
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
PrologFlags=Contain
MpiDefault=none
SwitchType=switch/none
MailProg=/bin/true
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=60
MessageTimeout=10
InactiveLimit=0
KillWait=5
MinJobAge=300
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=100
GresTypes=gpu
PriorityType=priority/multifactor
PriorityWeightAge=1000
PriorityWeightFairshare=10000
PriorityWeightJobSize=100
PriorityWeightPartition=1000
PriorityWeightQOS=1000
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$dbd_port
AccountingStoragePass=$base/munge/munge.socket
AccountingStorageTRES=gres/gpu
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
CONF
    [ -n "${HPCACCT_SLURM_ENFORCE:-}" ] && echo "AccountingStorageEnforce=$HPCACCT_SLURM_ENFORCE"
    for n in 1 2 3 4; do
        gres=
        [ $n -ge 3 ] && gres=" Gres=gpu:2"
        echo "NodeName=node$n NodeHostname=localhost NodeAddr=127.0.0.1 Port=${node_ports[n - 1]}" \
            "CPUs=4 Sockets=1 CoresPerSocket=4 ThreadsPerCore=1 RealMemory=2000$gres State=UNKNOWN"
    done
    cat <<CONF
PartitionName=cpu Nodes=node[1-2] Default=YES MaxTime=60 State=UP
PartitionName=excl Nodes=node[1-2] OverSubscribe=EXCLUSIVE MaxTime=60 State=UP
PartitionName=gpu Nodes=node[3-4] MaxTime=60 State=UP
CONF
    [ -n "${HPCACCT_SLURM_CONF_EXTRA:-}" ] && printf '%s\n' "$HPCACCT_SLURM_CONF_EXTRA"
} >"$etc/slurm.conf"
if [ -n "${HPCACCT_SLURM_JOB_SUBMIT_LUA:-}" ]; then
    cp "$HPCACCT_SLURM_JOB_SUBMIT_LUA" "$etc/job_submit.lua"
fi

# --- slurmdbd, then the cluster's associations (before slurmctld, which loads them) ---
setsid setpriv --pdeathsig KILL slurmdbd -D >"$log/slurmdbd.out" 2>&1 &
dbd_pid=$!
wait_for 60 slurmdbd sacctmgr -n list cluster
timeout 30 sacctmgr -i add cluster "$cluster" >/dev/null || fail "sacctmgr add cluster failed"
timeout 30 sacctmgr -i add account proj_a,proj_b,proj_unknown cluster="$cluster" >/dev/null ||
    fail "sacctmgr add account failed"
timeout 30 sacctmgr -i add user root account=proj_a,proj_b,proj_unknown cluster="$cluster" >/dev/null ||
    fail "sacctmgr add user failed"
timeout 30 sacctmgr -i modify user root set defaultaccount=proj_a >/dev/null || fail "sacctmgr modify user failed"

# --- slurmctld and four slurmd ---
setsid setpriv --pdeathsig KILL slurmctld -D -i >"$log/slurmctld.out" 2>&1 &
ctld_pid=$!
wait_for 30 slurmctld scontrol ping
for n in 1 2 3 4; do
    setsid setpriv --pdeathsig KILL slurmd -D -N "node$n" >"$log/slurmd-node$n.out" 2>&1 &
    slurmd_pids+=($!)
done
nodes_idle() { [ "$(timeout 10 sinfo -h -N -t idle -o %N | sort -u | wc -l)" -eq 4 ]; }
wait_for 30 "the four slurmd" nodes_idle

export HPCACCT_SLURM_DIR=$base HPCACCT_SLURM_CLUSTER=$cluster HPCACCT_SLURM_DB_SOCKET=$run/mysqld.sock
# in the background, so that INT or TERM reach teardown at once; stdin stays the caller's
# (when it has one: CI may run us with it closed)
if { : <&0; } 2>/dev/null; then
    "$@" <&0 &
else
    "$@" </dev/null &
fi
cmd_pid=$!
set +e
wait "$cmd_pid"
status=$?
cmd_pid=
exit $status
