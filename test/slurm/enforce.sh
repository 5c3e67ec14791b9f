#!/usr/bin/env bash
# test/slurm/enforce.sh: hpcacct's decisions reach a real Slurm (issue 15).
#
# Starts a throw-away PostgreSQL cluster (test/scripts/with-cluster.sh) and inside it a
# throw-away Slurm (test/slurm/with-slurm.sh) with JobSubmitPlugins=lua running the shipped
# src/slurm/job_submit.lua, AccountingStorageEnforce=associations,limits,qos and a low QOS;
# then submits with sbatch, runs hpcacct-slurm-sync and checks what Slurm does (also with the
# database stopped, and with its backend not answering). Both reach the database over TCP
# with scram and TLS (verify-full, a CA made for the run). Prints TAP
# lines and appends "enforce PASSED FAILED" to $HPCACCT_TALLY (when set). Needs hpcacct
# installed for $PG_CONFIG (make install) and root. Leaves nothing running.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)

if [ "${1:-}" != --inside ]; then
    export PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
    export HPCACCT_ENFORCE_RESULT
    HPCACCT_ENFORCE_RESULT=$(mktemp)
    # a TERM or ^C waits for what runs below to stop (bash runs the trap after it)
    export HPCACCT_ENFORCE_SIGNALS
    HPCACCT_ENFORCE_SIGNALS=$(mktemp)
    trap 'rm -f "$HPCACCT_ENFORCE_RESULT" "$HPCACCT_ENFORCE_SIGNALS"' EXIT
    trap 'exit 143' TERM
    trap 'exit 130' INT
    # with-slurm.sh's teardown under a second signal (two Slurms of its own, about 20 s); its
    # lines are reported with the checks below
    test/slurm/signals.sh >"$HPCACCT_ENFORCE_SIGNALS"
    test/scripts/with-cluster.sh enforce "$root/test/slurm/enforce.sh" --inside
    status=$?
    result=$(cat "$HPCACCT_ENFORCE_RESULT")
    rm -f "$HPCACCT_ENFORCE_RESULT"
    [ -n "$result" ] || result="enforce 0 1"   # the test died before it reported
    [ -n "${HPCACCT_TALLY:-}" ] && echo "$result" >>"$HPCACCT_TALLY"
    echo "# $result"
    exit $status
fi

# ---- inside the PostgreSQL cluster (PGHOST etc. exported) -----------------------------------
if [ "${2:-}" != --slurm ]; then
    bindir=$("$PG_CONFIG" --bindir)
    export PATH=$bindir:$PATH   # hpcacct-slurm-sync as make install put it
    createdb acct || exit 1
    psql -X -q -v ON_ERROR_STOP=1 -d acct >/dev/null <<'SQL' || exit 1
CREATE EXTENSION hpcacct CASCADE;
SELECT hpcacct.create_job_table();
CALL hpcacct.setup_roles();
CREATE ROLE slurm_submit LOGIN IN ROLE hpcacct_submit;
CREATE ROLE slurm_sync LOGIN IN ROLE hpcacct_admin;
SET search_path = hpcacct, public;
INSERT INTO setting VALUES ('timezone', 'UTC');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit)
VALUES ('testcl', 'cpu', 'cpu=4', 'cpu=1', 1, 'NPL'),
       ('testcl', 'gpu', 'cpu=4', 'cpu=1', 1, 'core-hours');
SELECT add_user('root', current_date);               -- personal account root, this and 2 quarters
INSERT INTO account (name, kind) VALUES
    ('e_good', 'project'), ('e_expired', 'project'), ('e_neg', 'project'), ('e_rwth', 'project'),
    ('e_low', 'project'), ('e_staff', 'special'), ('e_hold', 'project'), ('e_low2', 'project');
INSERT INTO account (name, kind, deleted_in) VALUES ('e_deleted', 'personal', current_date - 1);
INSERT INTO hpc_user (username) VALUES ('e_deleted');
INSERT INTO hpc_user (username) VALUES ('nobody');   -- neither a default project nor a personal account
-- a non-ASCII name, read by logins whose default client encoding is not UTF-8
INSERT INTO account (name, kind) VALUES ('e_café', 'project');
ALTER ROLE slurm_submit SET client_encoding = 'LATIN1';
ALTER ROLE slurm_sync SET client_encoding = 'LATIN1';
INSERT INTO membership (account, username, role)
SELECT a, 'root', 'admin'
FROM unnest(ARRAY['e_good', 'e_expired', 'e_neg', 'e_rwth', 'e_low', 'e_staff', 'e_hold', 'e_deleted', 'e_low2',
                  'e_café']) AS a;
SELECT deposit('e_good', current_date, 100000);
SELECT deposit('e_expired', (current_date - interval '6 months')::date, 1000);
SELECT deposit('e_café', (current_date - interval '6 months')::date, 1000);
SELECT deposit('e_neg', current_date, 10), deposit('e_hold', current_date, 100);
SELECT set_default_project('root', 'e_good');
-- RWTH: e_rwth used far more than 6 x its monthly 10 core-hours; e_low past its consumable
-- (period from this month: 0 + 1 000 + 1 000 - 2 500 < 0) but not blocked (2 500 <= 6 000)
SELECT add_quota_period('e_rwth', date_trunc('month', current_date)::date,
                        (date_trunc('month', current_date) + interval '6 months - 1 day')::date, 10, 'testcl', 'core-hours');
SELECT add_quota_period('e_low2', date_trunc('month', current_date)::date,
                        (date_trunc('month', current_date) + interval '6 months - 1 day')::date, 1000, 'testcl',
                        'core-hours');
SELECT add_quota_period('e_low', date_trunc('month', current_date)::date,
                        (date_trunc('month', current_date) + interval '6 months - 1 day')::date, 1000, 'testcl',
                        'core-hours');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    ('testcl', 'w1', 'e_rwth', 'root', 'gpu', now() - interval '2 min', now() - interval '1 min', 'cpu=6000', 'COMPLETED'),
    ('testcl', 'w2', 'e_low', 'root', 'gpu', now() - interval '2 min', now() - interval '1 min', 'cpu=150000', 'COMPLETED'),
    -- e_neg: 10 NPL deposited, 50 charged
    ('testcl', 'n1', 'e_neg', 'root', 'cpu', now() - interval '2 min', now() - interval '1 min', 'cpu=3000', 'COMPLETED');
SQL
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    # As a site whose database is on another host: TCP (127.0.0.1, a free port) with password
    # authentication (scram) for the plugin's and the sync's roles; their passwords only in
    # files (a password file, a service file), never on a command line.
    tcp_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    submit_pw=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n') sync_pw=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
    psql -X -q -v ON_ERROR_STOP=1 -d acct <<SQL || exit 1
ALTER ROLE slurm_submit PASSWORD '$submit_pw';
ALTER ROLE slurm_sync PASSWORD '$sync_pw';
SQL
    data=$PGHOST/data
    # TLS as README "The database on another host" sets it up: a CA of this run, the server's
    # certificate for the name the clients use (127.0.0.1, as IP SAN and CN), and another CA
    # that signed nothing here; the two roles only over TLS (hostssl; hostnossl: reject)
    tls=$work/tls
    mkdir -p "$tls"
    for ca in ca wrongca; do
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
            -subj "/CN=hpcacct test $ca" -keyout "$tls/$ca.key" -out "$tls/$ca.crt" 2>"$tls/openssl.err" || {
            cat "$tls/openssl.err"; exit 1; }
    done
    printf 'subjectAltName = IP:127.0.0.1\n' >"$tls/server.ext"
    { openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=127.0.0.1 \
          -keyout "$tls/server.key" -out "$tls/server.csr" &&
      openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.crt" -CAkey "$tls/ca.key" -CAcreateserial -days 2 \
          -extfile "$tls/server.ext" -out "$tls/server.crt"; } 2>"$tls/openssl.err" || { cat "$tls/openssl.err"; exit 1; }
    install -o postgres -m 600 "$tls/server.key" "$data/server.key"
    install -o postgres -m 644 "$tls/server.crt" "$data/server.crt"
    { echo 'hostssl all slurm_submit,slurm_sync 127.0.0.1/32 scram-sha-256'
      echo 'hostnossl all slurm_submit,slurm_sync all reject'
      cat "$data/pg_hba.conf"; } >"$work/hba"
    cat "$work/hba" >"$data/pg_hba.conf"
    printf "listen_addresses = '127.0.0.1'\nport = %s\nlog_connections = on\nssl = on\n" "$tcp_port" >>"$data/postgresql.conf"
    runuser -u postgres -- "$("$PG_CONFIG" --bindir)/pg_ctl" -D "$data" -l "$PGHOST/server.log" -m fast -w restart >/dev/null ||
        exit 1
    export PGPORT=$tcp_port   # the socket's name follows the port
    umask 077
    echo "127.0.0.1:$tcp_port:acct:slurm_submit:$submit_pw" >"$work/submit.pgpass"
    echo "127.0.0.1:$tcp_port:acct:slurm_sync:$sync_pw" >"$work/sync.pgpass"
    echo "127.0.0.1:$tcp_port:acct:slurm_sync:wrong$sync_pw" >"$work/wrong.pgpass"
    printf '[hpcacct_sync]\nhost=127.0.0.1\nport=%s\ndbname=acct\nuser=slurm_sync\nsslmode=verify-full\nsslrootcert=%s\n' \
        "$tcp_port" "$tls/ca.crt" >"$work/pg_service.conf"
    umask 022
    cat >"$work/hpcacct_job_submit.conf" <<CONF
conninfo = host=127.0.0.1 port=$tcp_port dbname=acct user=slurm_submit passfile=$work/submit.pgpass connect_timeout=2 sslmode=verify-full sslrootcert=$tls/ca.crt
on_db_error = open
retry_seconds = 0
CONF
    export HPCACCT_JOB_SUBMIT_CONF=$work/hpcacct_job_submit.conf HPCACCT_ENFORCE_WORK=$work
    export HPCACCT_SLURM_CONF_EXTRA='JobSubmitPlugins=lua'
    export HPCACCT_SLURM_JOB_SUBMIT_LUA=$root/src/slurm/job_submit.lua
    export HPCACCT_SLURM_ENFORCE=associations,limits,qos
    # not exec: the EXIT trap above removes $work afterwards. In the background (timeout runs
    # in a process group of its own): a TERM or ^C here is passed on, and the Slurm part stops
    # what it started before this cluster goes away.
    timeout 600 test/slurm/with-slurm.sh "$root/test/slurm/enforce.sh" --inside --slurm &   # bounded: 10 minutes
    slurm=$!
    trap 'kill -TERM "$slurm" 2>/dev/null' INT TERM
    while :; do
        wait "$slurm"
        rc=$?
        kill -0 "$slurm" 2>/dev/null || break
    done
    exit $rc
fi

# ---- inside Slurm as well -----------------------------------------------------------------------
n=0 passed=0 failed=0
check() {  # check DESCRIPTION t|f
    n=$((n + 1))
    if [ "$2" = t ]; then passed=$((passed + 1)); echo "ok $n - $1"
    else failed=$((failed + 1)); echo "not ok $n - $1"; fi
}
# On any exit: a backend stopped below is continued and the sbatch waiting for it ended; a run
# that did not reach its end counts as failed.
frozen= frozen_sbatch= completed=
finish() {
    [ -n "$frozen" ] && kill -CONT "$frozen" 2>/dev/null
    [ -n "$frozen_sbatch" ] && kill -TERM "$frozen_sbatch" 2>/dev/null
    [ -n "$completed" ] || check "the test ran to its end (it was interrupted or died)" f
    echo "1..$n"
    echo "enforce $passed $failed" >"$HPCACCT_ENFORCE_RESULT"
}
trap finish EXIT
trap 'exit 143' TERM   # with-slurm.sh's teardown ends us with TERM
work=$HPCACCT_ENFORCE_WORK
signal_checks=0
while IFS= read -r line; do   # test/slurm/signals.sh's lines, run before the clusters
    case $line in
        'ok - '*) check "with-slurm.sh, ${line#ok - }" t; signal_checks=$((signal_checks + 1)) ;;
        'not ok - '*) check "with-slurm.sh, ${line#not ok - }" f; signal_checks=$((signal_checks + 1)) ;;
        *) echo "$line" ;;
    esac
done <"$HPCACCT_ENFORCE_SIGNALS"
[ "$signal_checks" -eq 2 ] || check "test/slurm/signals.sh reported its two checks" f
# the sync as cron would run it: a service name, the password in a password file
export HPCACCT_DSN=service=hpcacct_sync PGSERVICEFILE=$work/pg_service.conf PGPASSFILE=$work/sync.pgpass
sql() { psql -X -q -At -v ON_ERROR_STOP=1 -d acct -c "$1"; }
log=$HPCACCT_SLURM_DIR/log/slurmctld.log
script=$HPCACCT_SLURM_DIR/etc/job_submit.lua
reload() {  # new configuration: job_submit/lua reloads its script when the file changes
    touch -d "@$(($(date +%s) + 1))" "$script"   # a distinct mtime even within the same second
    sleep 1.1
}

accounts=e_good,e_expired,e_deleted,e_neg,e_rwth,e_low,e_staff,e_hold,e_nosuch,e_low2,e_café
sacctmgr -i add account $accounts cluster=testcl >/dev/null
sacctmgr -i add user root account=$accounts cluster=testcl >/dev/null
sacctmgr -i add qos hpcacct-low set priority=0 >/dev/null
sacctmgr -i modify qos normal set priority=100 >/dev/null
sleep 1   # slurmctld receives the association updates from slurmdbd

submit() {  # submit ACCOUNT [sbatch options]: sets out, rc, job
    local account=$1
    shift
    if [ -n "$account" ]; then set -- -A "$account" "$@"; fi
    out=$(sbatch --parsable -p cpu -n 1 -t 5 -o /dev/null "$@" --wrap 'sleep 600' 2>&1)
    rc=$?
    job=
    [ $rc -eq 0 ] && job=${out%%;*}
}
refused_with() {  # refused_with ACCOUNT TEXT: sbatch fails and prints TEXT
    submit "$1"
    if [ $rc -ne 0 ] && grep -qF -- "$2" <<<"$out"; then echo t; else echo "# sbatch said: $out" >&2; fi
}

# refusals through job_submit/lua, each with hpcacct's message
check "sbatch to an account hpcacct does not know is refused with its message" \
    "$(refused_with e_nosuch 'account e_nosuch does not exist')"
check "an expired account is refused: no allocation for this or a later quarter" \
    "$(refused_with e_expired 'account e_expired has no allocation for this or a later quarter')"
check "a deleted personal account is refused" "$(refused_with e_deleted 'account e_deleted has been deleted')"
check "an account named in UTF-8 is found though the plugin's login defaults to LATIN1 (and refused: expired)" \
    "$(refused_with e_café 'account e_café has no allocation for this or a later quarter')"
check "a negative balance is refused, with the balance" \
    "$(refused_with e_neg 'account e_neg has a negative balance this quarter (-40.00 NPL)')"
check "an RWTH account blocked by its window (C > 6 A) is refused" \
    "$(refused_with e_rwth 'account e_rwth is blocked by its sliding-window quota')"
# accepted
submit e_good
check "a good account is accepted (job $job)" "$([ $rc -eq 0 ] && [ -n "$job" ] && echo t)"
submit e_staff
check "a staff (special) account without deposits is accepted (job $job)" "$([ $rc -eq 0 ] && echo t)"
submit E_GOOD
check "an account named in upper case is Slurm's lower-case one: accepted (job $job, on $(squeue -h -j "$job" -o %a))" \
    "$([ $rc -eq 0 ] && [ "$(squeue -h -j "$job" -o %a)" = e_good ] && echo t)"
[ $rc -ne 0 ] && echo "# sbatch said: $out"
submit ""
check "a job without -A gets hpcacct's default project (e_good)" \
    "$([ $rc -eq 0 ] && [ "$(squeue -h -j "$job" -o %a)" = e_good ] && echo t)"
scancel --quiet $(squeue -h -o %A) 2>/dev/null
# set_account = no: a job without -A runs on the user's default account in Slurm, so that is the
# account to check, not hpcacct's default project (here e_good, while Slurm's is e_neg)
sacctmgr -i modify user root set defaultaccount=e_neg >/dev/null
sleep 1   # slurmctld receives the association update
printf 'set_account = no\n' >>"$HPCACCT_JOB_SUBMIT_CONF"
reload
submit ""
check "set_account = no: a job without -A is checked on the user's Slurm default account (e_neg), refused" \
    "$([ $rc -ne 0 ] && grep -qF 'account e_neg has a negative balance' <<<"$out" && echo t)"
[ $rc -ne 0 ] || echo "# sbatch said: $out, the job's account: $(squeue -h -j "$job" -o %a)"
sed -i '/^set_account/d' "$HPCACCT_JOB_SUBMIT_CONF"
reload
sacctmgr -i modify user root set defaultaccount=e_good >/dev/null
sleep 1
# the other ways into the queue are checked too: each component of a heterogeneous job (on the
# command line and in a script), salloc, srun, sbatch --test-only, an array, and an account
# change of one component of a pending heterogeneous job or one task of a pending array
het_out=$(sbatch --parsable -A e_good -p cpu -n 1 -t 5 -o /dev/null : -A e_neg -p cpu -n 1 -t 5 --wrap 'sleep 600' 2>&1)
het_rc=$?
printf '#!/bin/sh\n#SBATCH -A e_good -p cpu -n 1 -t 5 -o /dev/null\n#SBATCH hetjob\n#SBATCH -A e_neg -p cpu -n 1 -t 5\nsleep 600\n' \
    >"$work/het.sh"
hetscript_out=$(sbatch --parsable "$work/het.sh" 2>&1)
hetscript_rc=$?
check "a heterogeneous job whose second component names a refused account is refused (command line and #SBATCH hetjob)" \
    "$([ $het_rc -ne 0 ] && grep -qF '1: account e_neg has a negative balance' <<<"$het_out" &&
       [ $hetscript_rc -ne 0 ] && grep -qF '1: account e_neg has a negative balance' <<<"$hetscript_out" && echo t)"
salloc_out=$(timeout 30 salloc -A e_neg -p cpu -n 1 -t 5 true 2>&1); salloc_rc=$?
srun_out=$(timeout 30 srun -A e_neg -p cpu -n 1 -t 5 true 2>&1); srun_rc=$?
testonly_out=$(sbatch --test-only -A e_neg -p cpu -n 1 -t 5 --wrap true 2>&1); testonly_rc=$?
submit e_neg --array=1-3 --hold --dependency=singleton
check "salloc, srun, sbatch --test-only and an array (held, with a dependency) to a refused account are refused, with its message" \
    "$([ $salloc_rc -ne 0 ] && grep -qF 'salloc: error: account e_neg has a negative balance' <<<"$salloc_out" &&
       [ $srun_rc -ne 0 ] && grep -qF 'srun: error: account e_neg has a negative balance' <<<"$srun_out" &&
       [ $testonly_rc -ne 0 ] && grep -qF 'account e_neg has a negative balance' <<<"$testonly_out" &&
       [ $rc -ne 0 ] && grep -qF 'account e_neg has a negative balance' <<<"$out" && echo t)"
het_out=$(sbatch --parsable -A e_good -p cpu -n 1 -t 5 -o /dev/null --begin=now+1hour : -A e_good -p cpu -n 1 -t 5 \
          --wrap 'sleep 600' 2>&1)
het=${het_out%%;*}
submit e_good --array=1-3 --begin=now+1hour
arr=$job
het_move=$(scontrol update jobid="$het+1" account=e_neg 2>&1); het_move_rc=$?
arr_move=$(scontrol update jobid="${arr}_2" account=e_neg 2>&1); arr_move_rc=$?
check "moving one component of a pending heterogeneous job, or one task of a pending array, to a refused account is refused" \
    "$([ $het_move_rc -ne 0 ] && [ $arr_move_rc -ne 0 ] &&
       [ "$(squeue -h -j "$het,$arr" -o %a | sort -u)" = e_good ] && echo t)"
scancel --quiet "$het" "$arr" 2>/dev/null
check "the refusals are logged by slurmctld" "$(grep -q 'hpcacct: submission refused for root on e_neg: negative_balance' "$log" && echo t)"
# a user without a default project or a personal account, without -A (root submits as nobody):
# no_default_project, Slurm's text that of an invalid account
out=$(sbatch --parsable --uid=nobody -p cpu -n 1 -t 5 -o /dev/null --wrap 'sleep 600' 2>&1)
rc=$?
check "a user without a default project, without -A, is refused as an invalid account, with hpcacct's message" \
    "$([ $rc -ne 0 ] && grep -qF 'user nobody has no default project and no personal account' <<<"$out" &&
       grep -qF 'Invalid account' <<<"$out" &&
       grep -q 'hpcacct: submission refused for nobody on nobody: no_default_project' "$log" && echo t)"
[ $rc -ne 0 ] || scancel --quiet "${out%%;*}" 2>/dev/null
echo "$out" | sed 's/^/# sbatch said: /'
# the account a user gives is logged on one line: a line break in it forges no line of its own
submit $'e_nosuch\nhpcacct: forged line'
grep -a -A1 'e_nosuch' "$log" | grep -a 'forged line' | sed 's/^/# logged: /'
check "an account given with a line break is logged on one line, its control characters as \\ddd" \
    "$([ $rc -ne 0 ] && grep -qF 'refused for root on e_nosuch\010hpcacct: forged line: unknown_account' "$log" &&
       ! grep -q '^hpcacct: forged line' "$log" && echo t)"
check "the plugin reaches the database over TCP, with the password from its password file (scram)" \
    "$([ "$(sql "SELECT client_addr FROM pg_stat_activity WHERE application_name LIKE 'slurm job_submit%'")" = 127.0.0.1 ] &&
       grep -q 'connection authenticated: identity="slurm_submit" method=scram-sha-256' "$HPCACCT_SERVER_LOG" && echo t)"
check "the plugin's connection is TLS (pg_stat_ssl), the server verified against the site's CA (verify-full)" \
    "$([ "$(sql "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
                WHERE a.application_name LIKE 'slurm job_submit%'")" = t ] && echo t)"
# a CA that did not sign the server's certificate: the plugin does not connect, and says why
sed -i "s|sslrootcert=$work/tls/ca.crt|sslrootcert=$work/tls/wrongca.crt|" "$HPCACCT_JOB_SUBMIT_CONF"
reload
submit e_staff
[ -n "$job" ] && scancel "$job"
grep -A2 'accepted unchecked for root (account e_staff)' "$log" | sed 's/^/# the plugin with a wrong CA: /'
check "with a wrong CA the plugin refuses the server: slurmctld logs 'certificate verify failed', on one line" \
    "$([ $rc -eq 0 ] && grep 'hpcacct: submission accepted unchecked for root (account e_staff)' "$log" |
       grep -q 'SSL error: certificate verify failed)$' && echo t)"
sed -i "s|sslrootcert=$work/tls/wrongca.crt|sslrootcert=$work/tls/ca.crt|" "$HPCACCT_JOB_SUBMIT_CONF"
reload

# associations
before=$(sacctmgr -n -P show assoc cluster=testcl format=Account,User,GrpSubmitJobs,DefaultQOS,QOS)
dry=$(hpcacct-slurm-sync --assoc --dry-run 2>&1)
after=$(sacctmgr -n -P show assoc cluster=testcl format=Account,User,GrpSubmitJobs,DefaultQOS,QOS)
check "--dry-run says what it would change and changes nothing" \
    "$(grep -q 'would run: sacctmgr -i modify account where name=e_neg cluster=testcl set GrpSubmitJobs=0' <<<"$dry" &&
       [ "$before" = "$after" ] && echo t)"
sync1=$(hpcacct-slurm-sync --assoc 2>&1)
echo "$sync1" | sed 's/^/# /'
assoc() { sacctmgr -n -P show assoc cluster=testcl account="$1" user="$2" format="$3"; }
check "after the sync blocked, expired, deleted and negative accounts have GrpSubmitJobs=0" \
    "$([ "$(assoc e_rwth '' GrpSubmitJobs)$(assoc e_expired '' GrpSubmitJobs)$(assoc e_deleted '' GrpSubmitJobs)$(assoc e_neg '' GrpSubmitJobs)" = 0000 ] && echo t)"
check "and so has the expired account named in UTF-8 (the sync's login defaults to LATIN1)" \
    "$([ "$(assoc e_café '' GrpSubmitJobs)" = 0 ] && echo t)"
check "good, staff and low-priority accounts have no submit limit" \
    "$([ -z "$(assoc e_good '' GrpSubmitJobs)$(assoc e_staff '' GrpSubmitJobs)$(assoc e_low '' GrpSubmitJobs)" ] && echo t)"
check "the low_priority account's associations default to the low QOS" \
    "$([ "$(assoc e_low '' DefaultQOS)" = hpcacct-low ] && [ "$(assoc e_low root DefaultQOS)" = hpcacct-low ] && echo t)"
mkdir -p "$work/pshim"   # records psql's arguments
printf '#!/bin/sh\nprintf "%%s\\n" "$*" >>%s/psql.args\nexec %s "$@"\n' "$work" "$(command -v psql)" >"$work/pshim/psql"
chmod +x "$work/pshim/psql"
sync2=$(PATH=$work/pshim:$PATH hpcacct-slurm-sync --assoc 2>&1)
check "a second sync changes nothing" "$(grep -q 'associations: nothing to change' <<<"$sync2" && ! grep -q 'ran:' <<<"$sync2" && echo t)"
# sacctmgr stores QOS names in lower case (add qos HPCACCT-Low makes hpcacct-low): a setting in
# another case names the same QOS
sync3=$(HPCACCT_LOW_QOS=HPCACCT-Low HPCACCT_NORMAL_QOS=Normal hpcacct-slurm-sync --assoc 2>&1)
echo "$sync3" | grep 'ran:' | sed 's/^/# /'
check "QOS names set in upper case are Slurm's lower-case ones: nothing to change" \
    "$(grep -q 'associations: nothing to change' <<<"$sync3" && ! grep -q 'ran:' <<<"$sync3" && echo t)"
check "--help prints the whole header, to its cron line" \
    "$(hpcacct-slurm-sync --help | tail -n 1 | grep -q '^\*/10 \* \* \* \* root /usr/lib/postgresql/15/bin/hpcacct-slurm-sync$' && echo t)"
wrong=$(PGPASSFILE=$work/wrong.pgpass hpcacct-slurm-sync --assoc 2>&1)
echo "# with a wrong password: $(head -1 <<<"$wrong")"
check "the sync reaches the database over TCP with the password from PGPASSFILE, never on psql's command line" \
    "$(grep -q 'connection authenticated: identity="slurm_sync" method=scram-sha-256' "$HPCACCT_SERVER_LOG" &&
       grep -q 'password authentication failed for user "slurm_sync"' <<<"$wrong" &&
       grep -q 'service=hpcacct_sync' "$work/psql.args" && ! grep -qiE 'password|[0-9a-f]{32}' "$work/psql.args" && echo t)"
wrong_ca=$(HPCACCT_DSN="service=hpcacct_sync sslrootcert=$work/tls/wrongca.crt" hpcacct-slurm-sync --assoc 2>&1)
echo "# the sync with a wrong CA: $(head -1 <<<"$wrong_ca")"
plain=$(psql -X -At -d "service=hpcacct_sync sslmode=disable" -c 'SELECT 1' 2>&1)
echo "# without TLS: $(head -1 <<<"$plain")"
check "the sync's connections are TLS; a wrong CA is refused (certificate verify failed), and so is one without TLS" \
    "$(grep -q 'connection authorized: user=slurm_sync database=acct.* SSL enabled' "$HPCACCT_SERVER_LOG" &&
       ! grep 'connection authorized: user=slurm_sync' "$HPCACCT_SERVER_LOG" | grep -qv 'SSL enabled' &&
       grep -q 'certificate verify failed' <<<"$wrong_ca" && grep -q 'no encryption' <<<"$plain" && echo t)"

# priority of a low_priority account's pending job
submit e_good -N 2 -n 8 --exclusive     # fills the cpu partition: what follows stays pending
filler=$job
sleep 2
submit e_good
normal_job=$job
submit e_low
low_job=$job
sleep 1
prio_normal=$(squeue -h -j "$normal_job" -o %Q)
prio_low=$(squeue -h -j "$low_job" -o %Q)
echo "# filler $filler; priority of e_good's pending job $prio_normal, of e_low's $prio_low"
check "e_low's job runs under the low QOS" "$([ "$(squeue -h -j "$low_job" -o %q)" = hpcacct-low ] && echo t)"
check "a low_priority account's pending job ranks below a normal one" \
    "$([ "$(squeue -h -t PD -j "$normal_job,$low_job" | wc -l)" -eq 2 ] &&
       [ -n "$prio_low" ] && [ -n "$prio_normal" ] && [ "$prio_low" -lt "$prio_normal" ] && echo t)"
sprio -h -j "$normal_job,$low_job" -o '%i %A %F %Q %Y' | sed 's/^/# sprio (job age fairshare qos priority): /'

# an account that enters low-priority mode: its pending jobs move to the low QOS, and back
submit e_low2
low2_job=$job
was=$(squeue -h -j "$low2_job" -o %q)
sql "INSERT INTO hpcacct.job (cluster, jobid, account, \"user\", partition, start, \"end\", alloctres, state)
     VALUES ('testcl', 'w3', 'e_low2', 'root', 'gpu', now() - interval '2 min', now() - interval '1 min', 'cpu=150000', 'COMPLETED')"
s1=$(hpcacct-slurm-sync 2>&1)
echo "$s1" | sed 's/^/# /'
check "e_low2 enters low-priority mode: its pending job moves from normal to the low QOS" \
    "$([ "$was" = normal ] && [ "$(squeue -h -j "$low2_job" -o %q)" = hpcacct-low ] &&
       [ "$(assoc e_low2 root DefaultQOS)" = hpcacct-low ] && echo t)"
sql "DELETE FROM hpcacct.job WHERE jobid = 'w3'"     # charged back: consumable again
s2=$(hpcacct-slurm-sync 2>&1)
echo "$s2" | sed 's/^/# /'
check "and back to normal: the job and the associations return to the normal QOS" \
    "$([ "$(squeue -h -j "$low2_job" -o %q)" = normal ] && [ "$(assoc e_low2 '' DefaultQOS)" = normal ] &&
       [ "$(assoc e_low2 root DefaultQOS)" = normal ] && echo t)"
scancel "$low2_job"

# holds and releases of pending jobs
submit e_hold
hold_job=$job
submit e_hold --array=1-4%2   # pending as one line, N_[1-4%2]: not a job id scontrol takes
hold_array=$job
q1=$(hpcacct-slurm-sync --queue 2>&1)
check "a pending job of a valid account is left alone" \
    "$([ "$(squeue -h -j "$hold_job" -o %r)" != JobHeldAdmin ] && ! grep -q "hold $hold_job" <<<"$q1" && echo t)"
check "the pending job is recorded with its partition (the pool of fairshare_queue)" \
    "$([ "$(sql "SELECT partition FROM hpcacct.pending_job WHERE jobid = '$hold_job'")" = "$(squeue -h -j "$hold_job" -o %P)" ] &&
       [ -n "$(squeue -h -j "$hold_job" -o %P)" ] && echo t)"
sql "INSERT INTO hpcacct.job (cluster, jobid, account, \"user\", partition, start, \"end\", alloctres, state)
     VALUES ('testcl', 'big', 'e_hold', 'root', 'cpu', now() - interval '2 min', now() - interval '1 min', 'cpu=60000', 'COMPLETED')"
q2=$(hpcacct-slurm-sync --queue 2>&1)
echo "$q2" | sed 's/^/# /'
check "the account ran negative: its pending job is held" "$([ "$(squeue -h -j "$hold_job" -o %r)" = JobHeldAdmin ] && echo t)"
check "with the reason in the job's comment" \
    "$(squeue -h -j "$hold_job" -o %k | grep -q '^hpcacct: account e_hold has a negative balance' && echo t)"
# squeue shows every job's comment to every user (no PrivateData here): another Unix user, a
# member of no account, reads it; the account's balance is its members' (pending_job, mail)
others_read=$(runuser -u nobody -- env SLURM_CONF="$SLURM_CONF" squeue -h -j "$hold_job" -o %k 2>&1)
echo "# the comment as user nobody reads it: $others_read"
check "which every user reads (squeue as nobody): it gives no figure of the account (no balance)" \
    "$(grep -q '^hpcacct: account e_hold has a negative balance this quarter: ask' <<<"$others_read" &&
       ! grep -q 'NPL' <<<"$others_read" && echo t)"
squeue -h -j "$hold_array" -o '%i %r' | sed 's/^/# the array: /'
check "a throttled job array of the account is held too, with the reason" \
    "$([ "$(squeue -h -j "$hold_array" -o %r | sort -u)" = JobHeldAdmin ] &&
       squeue -h -j "$hold_array" -o %k | grep -q '^hpcacct: account e_hold has a negative balance' && echo t)"
q3=$(hpcacct-slurm-sync --queue 2>&1)
check "a second run holds nothing again" "$(grep -q 'pending jobs: nothing to change' <<<"$q3" && echo t)"
sql "SELECT hpcacct.deposit('e_hold', current_date, 100000)" >/dev/null
q4=$(hpcacct-slurm-sync --queue 2>&1)
echo "$q4" | sed 's/^/# /'
squeue -h -j "$hold_job" -o '%i %T %r %k' | sed 's/^/# after the release: /'
check "after a deposit the job is released, pending again without hpcacct's comment" \
    "$([ "$(squeue -h -j "$hold_job" -o %T)" = PENDING ] && [ "$(squeue -h -j "$hold_job" -o %r)" != JobHeldAdmin ] &&
       [ -z "$(squeue -h -j "$hold_job" -o %k | sed 's/^(null)$//')" ] && echo t)"
q5=$(hpcacct-slurm-sync --queue 2>&1)
check "a second run releases nothing again" "$(grep -q 'pending jobs: nothing to change' <<<"$q5" && echo t)"
check "and the array is released" \
    "$([ -n "$(squeue -h -j "$hold_array" -o %r)" ] && ! squeue -h -j "$hold_array" -o %r | grep -q JobHeldAdmin && echo t)"
scancel "$hold_array"

# the owner corrects the reason by moving the held job to a valid account (HLRN)
sql "INSERT INTO hpcacct.job (cluster, jobid, account, \"user\", partition, start, \"end\", alloctres, state)
     VALUES ('testcl', 'big2', 'e_hold', 'root', 'cpu', now() - interval '2 min', now() - interval '1 min', 'cpu=9000000', 'COMPLETED')"
hpcacct-slurm-sync --queue >/dev/null 2>&1
held_again=$(squeue -h -j "$hold_job" -o %r)
bad_move=$(scontrol update jobid="$hold_job" account=e_nosuch 2>&1)
bad_rc=$?
echo "# moving the job to e_nosuch: $bad_move"
check "the plugin refuses to move a pending job to an account hpcacct refuses" \
    "$([ "$held_again" = JobHeldAdmin ] && [ $bad_rc -ne 0 ] && [ "$(squeue -h -j "$hold_job" -o %a)" = e_hold ] &&
       grep -q 'hpcacct: account change refused for root on e_nosuch: unknown_account' "$log" && echo t)"
scontrol update jobid="$hold_job" account=e_good
q6=$(hpcacct-slurm-sync --queue 2>&1)
echo "$q6" | sed 's/^/# /'
check "moved to a valid account by its owner, the held job is released" \
    "$([ "$(squeue -h -j "$hold_job" -o %a)" = e_good ] && [ "$(squeue -h -j "$hold_job" -o %r)" != JobHeldAdmin ] &&
       grep -q "ran: scontrol release $hold_job" <<<"$q6" && echo t)"

# A job's comment is its owner's to write (sbatch --comment, scontrol update): it must not
# forge a queued job for the sync, break the queue run, or release a hold that is not hpcacct's.
forged='424242|root|e_neg|normal|JobHeldAdmin|cpu|hpcacct: forged'
submit e_good --begin=now+1hour --comment "$(printf 'mine\n%s' "$forged")"
forging_job=$job
q8=$(hpcacct-slurm-sync --queue 2>&1)
echo "$q8" | sed 's/^/# /'
check "a line break in a job's comment forges no queued job (job $forging_job)" \
    "$([ -n "$forging_job" ] && [ "$(sql "SELECT count(*) FROM hpcacct.pending_job WHERE jobid = '424242'")" = 0 ] &&
       [ "$(sql "SELECT count(*) FROM hpcacct.pending_job WHERE jobid = '$forging_job'")" = 1 ] &&
       ! grep -q 424242 <<<"$q8" && echo t)"
# another user's queued job (here: the job above), named with a blocked account
submit e_good --begin=now+1hour --comment "$(printf 'mine\n%s|root|e_neg|normal|None|cpu|x' "$forging_job")"
repeating_job=$job
q9=$(hpcacct-slurm-sync --queue 2>&1)
echo "$q9" | sed 's/^/# /'
check "nor gets another queued job held by repeating its id" \
    "$([ -n "$repeating_job" ] && [ "$(squeue -h -j "$forging_job" -o %r)" != JobHeldAdmin ] &&
       [ "$(sql "SELECT account FROM hpcacct.pending_job WHERE jobid = '$forging_job'")" = e_good ] && echo t)"
scancel "$forging_job" "$repeating_job"
submit e_good --begin=now+1hour
staff_job=$job
scontrol hold "$staff_job"
scontrol update jobid="$staff_job" comment="hpcacct: account e_good has a negative balance"
q10=$(hpcacct-slurm-sync --queue 2>&1)
echo "$q10" | sed 's/^/# /'
check "a hold hpcacct did not place stays, whatever the owner writes into the comment" \
    "$([ -n "$staff_job" ] && [ "$(squeue -h -j "$staff_job" -o %r)" = JobHeldAdmin ] &&
       ! grep -q "release $staff_job" <<<"$q10" && echo t)"
scancel "$staff_job"

# a release that fails (scontrol refuses) is retried by the next run
printf 'exempt_users = root\n' >>"$HPCACCT_JOB_SUBMIT_CONF"
reload
submit e_hold --begin=now+1hour       # e_hold is negative (job big2)
retry_job=$job
sed -i '/^exempt_users/d' "$HPCACCT_JOB_SUBMIT_CONF"
reload
hpcacct-slurm-sync --queue >/dev/null 2>&1
held_first=$(squeue -h -j "$retry_job" -o %r)
sql "SELECT hpcacct.deposit('e_hold', current_date, 10000000)" >/dev/null
mkdir -p "$work/shim"
printf '#!/bin/sh\n[ "$1" = release ] && { echo refused >&2; exit 1; }\nexec %s "$@"\n' "$(command -v scontrol)" \
    >"$work/shim/scontrol"
chmod +x "$work/shim/scontrol"
q11=$(PATH=$work/shim:$PATH hpcacct-slurm-sync --queue 2>&1)
echo "$q11" | sed 's/^/# /'
held_after_failure=$(squeue -h -j "$retry_job" -o %r)
q12=$(hpcacct-slurm-sync --queue 2>&1)
echo "$q12" | sed 's/^/# /'
check "a release that failed is retried by the next run" \
    "$([ "$held_first" = JobHeldAdmin ] && grep -q "FAILED: scontrol release $retry_job" <<<"$q11" &&
       [ "$held_after_failure" = JobHeldAdmin ] && grep -q "ran: scontrol release $retry_job" <<<"$q12" &&
       [ "$(squeue -h -j "$retry_job" -o %r)" != JobHeldAdmin ] && echo t)"
scancel "$retry_job"

# An operator's hold and hpcacct's on the same job, in both orders: hpcacct lifts only its own.
sql "INSERT INTO hpcacct.job (cluster, jobid, account, \"user\", partition, start, \"end\", alloctres, state)
     VALUES ('testcl', 'big3', 'e_hold', 'root', 'cpu', now() - interval '2 min', now() - interval '1 min', 'cpu=900000000', 'COMPLETED')"
printf 'exempt_users = root\n' >>"$HPCACCT_JOB_SUBMIT_CONF"
reload
submit e_hold --begin=now+1hour --comment 'kept by the operator'
op_first=$job
submit e_hold --begin=now+1hour
own_first=$job
submit e_hold --begin=now+1hour
op_after=$job
submit e_hold --begin=now+1hour
op_released=$job
sed -i '/^exempt_users/d' "$HPCACCT_JOB_SUBMIT_CONF"
reload
scontrol hold "$op_first"      # an operator's hold before hpcacct's
scontrol hold "$op_released"   # the same, released again below
scontrol uhold "$own_first"    # the owner's own hold before hpcacct's
h1=$(hpcacct-slurm-sync --queue 2>&1)
echo "$h1" | sed 's/^/# /'
why() { squeue -h -j "$1" -o '%r|%k'; }
echo "# operator first: $(why "$op_first"); owner first: $(why "$own_first"); hpcacct first: $(why "$op_after")"
check "a job an operator held before hpcacct would is left as it is (no hold, comment kept)" \
    "$([ "$(why "$op_first")" = 'JobHeldAdmin|kept by the operator' ] && ! grep -Eq "(=| )$op_first( |\$)" <<<"$h1" && echo t)"
op_told=$(sql "SELECT count(*) || E'\n' || coalesce(string_agg(body, ''), '') FROM hpcacct.outbox
               WHERE topic = 'job_held' AND figures ->> 'jobid' = '$op_first'")
sed 's/^/# job_held of the job an operator holds: /' <<<"$op_told"
check "the owner of a job an operator holds is told its account's reason once, not that hpcacct held it" \
    "$([ "$(head -1 <<<"$op_told")" = 1 ] && grep -q 'held by an administrator' <<<"$op_told" &&
       grep -q 'negative balance' <<<"$op_told" && ! grep -q 'has been put on hold' <<<"$op_told" && echo t)"
check "hpcacct holds a job its owner held (JobHeldUser), with its reason" \
    "$(why "$own_first" | grep -q '^JobHeldAdmin|hpcacct: account e_hold has a negative balance' &&
       why "$op_after" | grep -q '^JobHeldAdmin|hpcacct: account e_hold has a negative balance' && echo t)"
shown() { scontrol show job -o "$1" | tr ' ' '\n' | grep -v '^LastSchedEval='; }
before_rehold=$(shown "$op_after")
scontrol hold "$op_after"      # an operator's hold after hpcacct's: Slurm shows no change,
after_rehold=$(shown "$op_after")
check "an operator's second hold of a job hpcacct holds changes nothing scontrol show job shows" \
    "$([ -n "$before_rehold" ] && [ "$before_rehold" = "$after_rehold" ] && echo t)"
scontrol update jobid="$op_after" comment='operator: keep held'   # the operator's comment tells
scontrol release "$op_released"
h2=$(hpcacct-slurm-sync --queue 2>&1)
echo "$h2" | sed 's/^/# /'
check "a job the operator released while the account is still invalid gets hpcacct's hold" \
    "$(why "$op_released" | grep -q '^JobHeldAdmin|hpcacct: account e_hold has a negative balance' && echo t)"
sql "DELETE FROM hpcacct.job WHERE jobid = 'big3'"    # charged back: e_hold is valid again
h3=$(hpcacct-slurm-sync --queue 2>&1)
echo "$h3" | sed 's/^/# /'
echo "# operator first: $(why "$op_first"); owner first: $(why "$own_first"); hpcacct first: $(why "$op_after")"
check "the account valid again: the operator's earlier hold stays" \
    "$([ "$(why "$op_first")" = 'JobHeldAdmin|kept by the operator' ] && echo t)"
check "the operator's later hold stays, with the operator's comment" \
    "$([ "$(why "$op_after")" = 'JobHeldAdmin|operator: keep held' ] && echo t)"
check "the job an operator released, then hpcacct held, had its one job_held, at the operator's hold" \
    "$([ "$(sql "SELECT count(*) FROM hpcacct.outbox WHERE topic = 'job_held' AND figures ->> 'jobid' = '$op_released'
                 AND body LIKE '%held by an administrator%'")" = 1 ] &&
       [ "$(sql "SELECT count(*) FROM hpcacct.outbox WHERE topic = 'job_held' AND figures ->> 'jobid' = '$op_released'")" = 1 ] &&
       echo t)"
check "and hpcacct's hold of that job is lifted" "$(case $(why "$op_released") in JobHeldAdmin* | JobHeldUser*) ;; *) echo t ;; esac)"
check "the owner's own hold is back, hpcacct's comment gone" \
    "$(case $(why "$own_first") in 'JobHeldUser|(null)' | 'JobHeldUser|') echo t ;; esac)"
released() { sql "SELECT count(*) FROM hpcacct.outbox WHERE topic = 'job_released' AND figures ->> 'jobid' = '$1'"; }
told="$(released "$op_released")$(released "$own_first")$(released "$op_first")$(released "$op_after")"
echo "# job_released messages (hpcacct released, owner's hold back, operator first, operator after): $told"
check "job_released is written for the jobs hpcacct released, not for those an operator still holds" \
    "$([ "$told" = 1100 ] && echo t)"
check "the owner whose own hold is back is told so" \
    "$(sql "SELECT body FROM hpcacct.outbox WHERE topic = 'job_released' AND figures ->> 'jobid' = '$own_first'" |
       grep -q 'Your own hold on it remains' && echo t)"
h4=$(hpcacct-slurm-sync --queue 2>&1)
check "a second run changes nothing" "$(grep -q 'pending jobs: nothing to change' <<<"$h4" && echo t)"
scancel "$op_first" "$own_first" "$op_after" "$op_released"

# The sync changes Slurm, then records it: a record that fails once (a trigger raises) must
# neither leave hpcacct's hold looking like an operator's, nor lose a release and its message.
psql -X -q -v ON_ERROR_STOP=1 -d acct >/dev/null <<'SQL'
CREATE SEQUENCE public.fail_hold;
CREATE SEQUENCE public.fail_lift;
CREATE FUNCTION public.fail_once() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF OLD.sync_hold IS NULL AND NEW.sync_hold IS NOT NULL THEN
        IF nextval('public.fail_hold') = 1 THEN RAISE EXCEPTION 'the test fails this hold''s record once'; END IF;
    ELSIF OLD.sync_hold IS NOT NULL AND NEW.sync_hold IS NULL
          AND coalesce(current_setting('hpcacct.sync_lifted', true), '') = 'on' THEN
        IF nextval('public.fail_lift') = 1 THEN RAISE EXCEPTION 'the test fails this release''s record once'; END IF;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER fail_once BEFORE UPDATE ON hpcacct.pending_job FOR EACH ROW EXECUTE FUNCTION public.fail_once();
SQL
submit e_hold --begin=now+1hour   # e_hold is valid
lost_job=$job
submit e_hold --begin=now+1hour   # cancelled before the run that records its release
gone_job=$job
sql "INSERT INTO hpcacct.job (cluster, jobid, account, \"user\", partition, start, \"end\", alloctres, state)
     VALUES ('testcl', 'big4', 'e_hold', 'root', 'cpu', now() - interval '2 min', now() - interval '1 min', 'cpu=900000000', 'COMPLETED')"
r1=$(hpcacct-slurm-sync --queue 2>&1)    # the hold's record fails
echo "$r1" | sed 's/^/# /'
r2=$(hpcacct-slurm-sync --queue 2>&1)
echo "$r2" | sed 's/^/# /'
mine() { sql "SELECT coalesce(sync_hold, 'none') FROM hpcacct.pending_job WHERE jobid = '$1'"; }
echo "# job $lost_job: $(why "$lost_job"), hpcacct's hold: $(mine "$lost_job")"
check "a hold whose record failed is hpcacct's after the next run (not taken for an operator's)" \
    "$([ -n "$lost_job" ] && grep -q 'cannot record' <<<"$r1" && [ "$(mine "$lost_job")" = release ] &&
       why "$lost_job" | grep -q '^JobHeldAdmin|hpcacct: account e_hold has a negative balance' && echo t)"
sql "DELETE FROM hpcacct.job WHERE jobid = 'big4'"
r3=$(hpcacct-slurm-sync --queue 2>&1)    # the release's record fails
echo "$r3" | sed 's/^/# /'
released_r3=$(released "$lost_job") why_r3=$(why "$lost_job")
scancel "$gone_job"
r4=$(hpcacct-slurm-sync --queue 2>&1)
echo "$r4" | sed 's/^/# /'
r5=$(hpcacct-slurm-sync --queue 2>&1)
echo "# job $lost_job: after the failed record $why_r3, $released_r3 message(s); then $(why "$lost_job"), $(released "$lost_job")"
check "a release whose record failed: released in Slurm, no message yet" \
    "$(grep -q "ran: scontrol release $lost_job" <<<"$r3" && grep -q 'cannot record' <<<"$r3" &&
       [ "$released_r3" = 0 ] && case $why_r3 in JobHeld*) ;; *) echo t ;; esac)"
check "the next run records that release (also of a job gone from the queue since), with one job_released message; the run after changes nothing" \
    "$([ "$(released "$lost_job")" = 1 ] && [ "$(mine "$lost_job")" = none ] && [ "$(released "$gone_job")" = 1 ] &&
       grep -q "job $gone_job: hpcacct's hold was lifted by an earlier run: recorded now" <<<"$r4" &&
       grep -q 'pending jobs: nothing to change' <<<"$r5" && echo t)"
sql "DROP TRIGGER fail_once ON hpcacct.pending_job; DROP FUNCTION public.fail_once();
     DROP SEQUENCE public.fail_hold; DROP SEQUENCE public.fail_lift" >/dev/null
scancel "$lost_job"

# Names Slurm takes and prints as they are (sacctmgr keeps a '|', CR, tab and line break in an
# account name): the plugin checks them, the sync holds their pending jobs and blocks their
# associations, without stopping at one of them or touching another account. "name" is what
# the line break's second half would be taken for.
odd=('p|q' $'cr\rname' $'tab\tname' $'nl\nname' 'sp ace' name)
for a in "${odd[@]}"; do
    sacctmgr -i add account "$a" cluster=testcl >/dev/null && sacctmgr -i add user root account="$a" cluster=testcl >/dev/null
done
sql "INSERT INTO hpcacct.account (name) VALUES ('p|q'), (E'cr\rname'), (E'tab\tname'), (E'nl\nname'), ('sp ace'), ('name');
     INSERT INTO hpcacct.membership (account, username)
     SELECT name, 'root' FROM hpcacct.account WHERE name ~ 'name|[| ]';
     SELECT hpcacct.deposit(name, current_date, 100) FROM hpcacct.account WHERE name ~ 'name|[| ]'" >/dev/null
sleep 1   # slurmctld receives the new associations
odd_jobs=()
for a in "${odd[@]}"; do
    submit "$a" --begin=now+1hour
    odd_jobs+=("$job")
done
check "the plugin accepts jobs of valid accounts named p|q, cr\\rname, tab\\tname, nl\\nname, 'sp ace' (${odd_jobs[*]})" \
    "$([ "${#odd_jobs[@]}" = 6 ] && [ -n "${odd_jobs[4]}" ] && [ "$(squeue -h -j "$(IFS=,; echo "${odd_jobs[*]}")" -o %i | wc -l)" = 6 ] && echo t)"
# all but "name" run negative
sql "INSERT INTO hpcacct.job (cluster, jobid, account, \"user\", partition, start, \"end\", alloctres, state)
     SELECT 'testcl', 'big' || md5(name), name, 'root', 'cpu', now() - interval '2 min', now() - interval '1 min',
            'cpu=60000', 'COMPLETED'
     FROM hpcacct.account WHERE name ~ 'name|[| ]' AND name <> 'name'"
n1=$(hpcacct-slurm-sync --queue 2>&1); n1_status=$?
echo "$n1" | sed 's/^/# /'
held_odd=0
for j in "${odd_jobs[@]:0:5}"; do
    [ "$(squeue -h -j "$j" -o %r)" = JobHeldAdmin ] && squeue -h -j "$j" -o %k | grep -q '^hpcacct: account .* has a negative balance' &&
        held_odd=$((held_odd + 1))
done
check "the queue sync holds the jobs of all five accounts that ran negative, with the reason (exit 0)" \
    "$([ $n1_status = 0 ] && [ $held_odd = 5 ] && echo t)"
check "and not the job of the valid account name" \
    "$([ "$(squeue -h -j "${odd_jobs[5]}" -o %r)" != JobHeldAdmin ] && echo t)"
n2=$(hpcacct-slurm-sync --queue 2>&1)
check "a second run changes nothing" "$(grep -q 'pending jobs: nothing to change' <<<"$n2" && ! grep -q 'ran:' <<<"$n2" && echo t)"
n3=$(hpcacct-slurm-sync --assoc 2>&1)
echo "$n3" | sed 's/^/# /'
check "the association sync blocks the five accounts, and not the account name" \
    "$([ "$(for a in "${odd[@]:0:5}"; do assoc "$a" '' GrpSubmitJobs; done | tr -d '\n')" = 00000 ] &&
       [ -z "$(assoc name '' GrpSubmitJobs)" ] && echo t)"
scancel "${odd_jobs[@]}"

# The hold comment, which every user reads (squeue as nobody): why the job is held, from the
# decision, without the account's figures (here: when its allocation begins, which no
# parenthesis marks), while its owner reads them in pending_job.hold_reason (and job_held).
sacctmgr -i add account e_later cluster=testcl >/dev/null && sacctmgr -i add user root account=e_later cluster=testcl >/dev/null
later_first=$(sql "SELECT (date_trunc('quarter', current_date) + interval '3 months')::date")
sql "INSERT INTO hpcacct.account (name, kind) VALUES ('e_later', 'project');
     INSERT INTO hpcacct.membership (account, username) VALUES ('e_later', 'root');
     SELECT hpcacct.deposit('e_later', '$later_first', 100)" >/dev/null
sleep 1   # slurmctld receives the new association
printf 'exempt_users = root\n' >>"$HPCACCT_JOB_SUBMIT_CONF"
reload
submit e_later --begin=now+1hour      # accepted unchecked: e_later's allocation begins next quarter
later_job=$job
sed -i '/^exempt_users/d' "$HPCACCT_JOB_SUBMIT_CONF"
reload
hpcacct-slurm-sync --queue 2>&1 | sed 's/^/# /'
later_read=$(runuser -u nobody -- env SLURM_CONF="$SLURM_CONF" squeue -h -j "$later_job" -o %k 2>&1)
echo "# the comment of job $later_job as user nobody reads it: $later_read"
check "an inactive account's held job: every user reads why, not the day its allocation begins ($later_first)" \
    "$([ -n "$later_job" ] && [ "$(squeue -h -j "$later_job" -o %r)" = JobHeldAdmin ] &&
       [ "$later_read" = 'hpcacct: account e_later has no allocation for this quarter: ask staff to move allocation into this quarter, or submit with another account' ] &&
       echo t)"
check "while its owner reads the day in pending_job.hold_reason" \
    "$(sql "SELECT hold_reason FROM hpcacct.pending_job WHERE jobid = '$later_job'" | grep -qF "its allocation begins on $later_first" && echo t)"
[ -n "$later_job" ] && scancel "$later_job"

# Slurm itself refuses a blocked account, without the plugin's check
printf 'exempt_users = root\n' >>"$HPCACCT_JOB_SUBMIT_CONF"
reload
submit e_neg
echo "# without the plugin's check: $out"
check "a blocked account is refused by Slurm itself (GrpSubmitJobs=0)" \
    "$([ $rc -ne 0 ] && ! grep -q 'negative balance' <<<"$out" && grep -qi 'policy' <<<"$out" && echo t)"
sed -i '/^exempt_users/d' "$HPCACCT_JOB_SUBMIT_CONF"
reload

# A requeued job passes no job_submit script: a running job of an account that ran negative
# meanwhile, put back into the queue (scontrol requeue), is held by the next queue run
sacctmgr -i add account e_requeue cluster=testcl >/dev/null &&
    sacctmgr -i add user root account=e_requeue cluster=testcl >/dev/null
sql "INSERT INTO hpcacct.account (name, kind) VALUES ('e_requeue', 'project');
     INSERT INTO hpcacct.membership (account, username) VALUES ('e_requeue', 'root');
     SELECT hpcacct.deposit('e_requeue', current_date, 100)" >/dev/null
sleep 1   # slurmctld receives the new association
submit e_requeue -p gpu   # the cpu partition is full (filler above)
requeue_job=$job
for _ in $(seq 1 150); do   # up to 30 s: a loaded machine's scheduler may be slow to start it
    [ "$(squeue -h -j "$requeue_job" -o %T)" = RUNNING ] && break
    sleep 0.2
done
requeue_ran=$(squeue -h -j "$requeue_job" -o %T)
sql "INSERT INTO hpcacct.job (cluster, jobid, account, \"user\", partition, start, \"end\", alloctres, state)
     VALUES ('testcl', 'rq1', 'e_requeue', 'root', 'cpu', now() - interval '2 min', now() - interval '1 min', 'cpu=60000', 'COMPLETED')"
scontrol requeue "$requeue_job"
for _ in $(seq 1 200); do   # requeued: COMPLETING, then PENDING (up to 40 s)
    [ "$(squeue -h -j "$requeue_job" -o %T)" = PENDING ] && break
    sleep 0.2
done
requeued=$(squeue -h -j "$requeue_job" -o '%T %r')
rq=$(hpcacct-slurm-sync --queue 2>&1)
echo "$rq" | sed 's/^/# /'
echo "# job $requeue_job: $requeue_ran, then after scontrol requeue $requeued, after the queue run $(why "$requeue_job")"
check "a requeued job of an account that ran negative while it ran is held by the next queue run" \
    "$([ "$requeue_ran" = RUNNING ] && [ "${requeued%% *}" = PENDING ] &&
       why "$requeue_job" | grep -q '^JobHeldAdmin|hpcacct: account e_requeue has a negative balance' && echo t)"
[ -n "$requeue_job" ] && scancel "$requeue_job"
# a heterogeneous job one of whose components runs on an account that turned invalid (accepted
# here as by an exempt user): the queue run holds that component
printf 'exempt_users = root\n' >>"$HPCACCT_JOB_SUBMIT_CONF"
reload
het_out=$(sbatch --parsable -A e_good -p cpu -n 1 -t 5 -o /dev/null --begin=now+1hour : -A e_requeue -p cpu -n 1 -t 5 \
          --wrap 'sleep 600' 2>&1)
het=${het_out%%;*}
sed -i '/^exempt_users/d' "$HPCACCT_JOB_SUBMIT_CONF"
reload
hq=$(hpcacct-slurm-sync --queue 2>&1)
echo "$hq" | sed 's/^/# /'
check "the queue run holds the component of a heterogeneous job whose account is refused, not the other" \
    "$(grep -q "ran: scontrol hold $het+1\$" <<<"$hq" &&
       why "$het+1" | grep -q '^JobHeldAdmin|hpcacct: account e_requeue has a negative balance' &&
       [ "$(squeue -h -j "$het+0" -o %r)" != JobHeldAdmin ] && echo t)"
[ -n "$het" ] && scancel "$het"

# the database stopped: fail open (the setting), reconnection, fail closed
data=$PGHOST/data
pgbin=$("$PG_CONFIG" --bindir)
# e_nosuch: refused by hpcacct (unknown to it), not limited in Slurm (the sync leaves
# associations hpcacct does not know alone)
submit e_nosuch
check "before the stop the plugin's connection refuses as before" "$([ $rc -ne 0 ] && echo t)"
runuser -u postgres -- "$pgbin/pg_ctl" -D "$data" -m fast -w stop >/dev/null
submit e_nosuch
fo_job=$job
check "database stopped, on_db_error = open: the job is accepted" "$([ $rc -eq 0 ] && echo t)"
check "and slurmctld logs that it was accepted unchecked" \
    "$(grep -q 'hpcacct: submission accepted unchecked for root (account e_nosuch)' "$log" && echo t)"
runuser -u postgres -- "$pgbin/pg_ctl" -D "$data" -l "$PGHOST/server.log" -w start >/dev/null
check "database back: the plugin reconnects and refuses again" \
    "$(refused_with e_nosuch 'account e_nosuch does not exist')"
sed -i 's/^on_db_error = open/on_db_error = closed/' "$HPCACCT_JOB_SUBMIT_CONF"
reload
runuser -u postgres -- "$pgbin/pg_ctl" -D "$data" -m fast -w stop >/dev/null
check "database stopped, on_db_error = closed: the job is refused, saying why" \
    "$(refused_with e_good 'the accounting database cannot be reached')"
runuser -u postgres -- "$pgbin/pg_ctl" -D "$data" -l "$PGHOST/server.log" -w start >/dev/null
q7=$(hpcacct-slurm-sync --queue 2>&1)
echo "$q7" | sed 's/^/# /'
check "the job accepted unchecked is held by the next queue run" \
    "$([ -n "$fo_job" ] && [ "$(squeue -h -j "$fo_job" -o %r)" = JobHeldAdmin ] &&
       squeue -h -j "$fo_job" -o %k | grep -q '^hpcacct: account e_nosuch does not exist' && echo t)"
check "its comment keeps the reason's words in parentheses" \
    "$([ "$(squeue -h -j "$fo_job" -o %k)" = 'hpcacct: account e_nosuch does not exist: check the account you gave (sbatch -A)' ] && echo t)"
[ -n "$fo_job" ] && scancel "$fo_job" 2>/dev/null

# a database that does not answer (its backend stopped): the submission waits for it (README)
submit e_good   # the plugin connects again after the restart
[ -n "$job" ] && scancel "$job"
backend=$(sql "SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'slurm job_submit%' LIMIT 1")
frozen_out='' frozen_rc=''
if [ -n "$backend" ]; then
    frozen=$backend
    kill -STOP "$backend"
    # in the background, so that a TERM is handled at once (wait returns), not after sbatch
    timeout 60 sbatch --parsable -J hpcacct-frozen -A e_good -p cpu -n 1 -t 5 -o /dev/null --wrap 'sleep 600' \
        >"$work/frozen.out" 2>&1 &
    frozen_sbatch=$!
    wait "$frozen_sbatch"
    frozen_rc=$?
    frozen_sbatch=
    frozen_out=$(cat "$work/frozen.out")
    kill -CONT "$backend"
    frozen=
fi
echo "# backend ${backend:-none} stopped: sbatch said: $frozen_out"
frozen_job=
for _ in $(seq 1 50); do
    frozen_job=$(squeue -h -n hpcacct-frozen -o %A)
    [ -n "$frozen_job" ] && break
    sleep 0.2
done
check "the database not answering: sbatch times out, and the job is created once it answers" \
    "$([ "$frozen_rc" = 1 ] && grep -q 'Socket timed out' <<<"$frozen_out" && [ -n "$frozen_job" ] && echo t)"
[ -n "$frozen_job" ] && scancel "$frozen_job" 2>/dev/null

# A database that takes a new connection but never answers it (its postmaster stopped), with a
# conninfo that sets no connect_timeout: the plugin's own default bounds the wait.
sed -i 's/ connect_timeout=2//' "$HPCACCT_JOB_SUBMIT_CONF"
reload
submit e_good      # the reloaded script connects
[ -n "$job" ] && scancel "$job"
sql "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'slurm job_submit%'" >/dev/null
postmaster=$(head -1 "$data/postmaster.pid")
frozen=$postmaster
kill -STOP "$postmaster"
start=$(date +%s%N)
timeout 60 sbatch --parsable -J hpcacct-hung -A e_good -p cpu -n 1 -t 5 -o /dev/null --wrap 'sleep 600' \
    >"$work/hung.out" 2>&1 &
frozen_sbatch=$!
wait "$frozen_sbatch"
hung_rc=$?
frozen_sbatch=
waited_ms=$((($(date +%s%N) - start) / 1000000))
kill -CONT "$postmaster"
frozen=
echo "# postmaster stopped: sbatch waited $waited_ms ms and said: $(cat "$work/hung.out")"
check "a database that never answers a new connection: refused (on_db_error = closed) within 5 s, not at MessageTimeout" \
    "$([ "$hung_rc" != 0 ] && grep -q 'the accounting database cannot be reached' "$work/hung.out" &&
       [ "$waited_ms" -lt 5000 ] && echo t)"
hung_job=$(squeue -h -n hpcacct-hung -o %A)
[ -n "$hung_job" ] && scancel "$hung_job"

# a check slower than statement_timeout_ms (2 s; the accounts locked away): the server cancels it
submit e_good      # connected again
[ -n "$job" ] && scancel "$job"
psql -X -q -d acct -c 'BEGIN' -c 'LOCK TABLE hpcacct.account IN ACCESS EXCLUSIVE MODE' -c 'SELECT pg_sleep(5)' \
    -c 'COMMIT' >/dev/null 2>&1 &
locker=$!
sleep 0.5
start=$(date +%s%N)
submit e_good
waited_ms=$((($(date +%s%N) - start) / 1000000))
wait "$locker"
echo "# accounts locked: sbatch waited $waited_ms ms and said: $out"
check "a check slower than statement_timeout_ms: refused (on_db_error = closed) after about 2 s" \
    "$([ $rc -ne 0 ] && grep -q 'the accounting database cannot be reached' <<<"$out" &&
       [ "$waited_ms" -ge 1900 ] && [ "$waited_ms" -lt 5000 ] && echo t)"
completed=1
[ "$failed" -eq 0 ]
