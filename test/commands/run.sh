#!/usr/bin/env bash
# test/commands/run.sh: hpcacct-sacct, hpcacct-report and hpcacct-notify as cron runs them:
# with a standard stream closed (the database connection must not take its descriptor), in a
# client encoding other than UTF-8, and with one-line messages on stderr for failures.
# No Slurm, no SMTP server. Runs inside with-cluster.sh (PGHOST... set). TAP lines; appends
# "commands PASSED FAILED" to $HPCACCT_TALLY.
set -uo pipefail
cd "$(dirname "$0")/../.."
. test/scripts/checks.sh

bindir=$("${PG_CONFIG:-pg_config}" --bindir)
work=$(mktemp -d "${TMPDIR:-/tmp}/hpcacct-commands.XXXXXX")
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT  # a daemon started below and not stopped yet: stopped too
db=hpcacct_commands
createdb "$db"
psql -q -X -v ON_ERROR_STOP=1 -d "$db" -c 'CREATE EXTENSION hpcacct CASCADE' -c 'SELECT hpcacct.create_job_table()' \
     -c "INSERT INTO hpcacct.account (name) VALUES ('proj_a'), ('proj_ü')" >/dev/null 2>&1
log=${HPCACCT_SERVER_LOG:-/dev/null}
protocol_errors() { grep -c 'invalid frontend message' "$log" 2>/dev/null || true; }
tf() { [ "$1" -eq 0 ] && echo t || echo f; }
notify() { env HPCACCT_NOTIFY_FROM=acct@example.org "$@"; }

# --- a closed standard stream is not the database connection's descriptor ---
before=$(protocol_errors)
"$bindir/hpcacct-report" -d "$db" proj_a 2026-01 >&- 2>"$work/err"
status=$?
check "report with standard output closed: exit 1 ($status)" "$(tf $((status != 1)))"
grep -q '^hpcacct-report: cannot write to standard output' "$work/err"
got=$?
check "report with standard output closed says it cannot write ($(head -1 "$work/err"))" "$(tf $got)"
check "report with standard output closed wrote nothing into the connection" "$(tf $(($(protocol_errors) != before)))"

"$bindir/hpcacct-sacct" -d "$db" load - <&- 2>"$work/err"
status=$?
check "sacct load - with standard input closed: exit 1 ($status)" "$(tf $((status != 1)))"
grep -q 'standard input: no sacct header line' "$work/err"
got=$?
check "sacct load - with standard input closed reads nothing ($(head -1 "$work/err"))" "$(tf $got)"

# SIGTERM to a daemon started here, SIGKILL after 10 s; returns its exit status
stop_daemon() {
    kill -TERM "$1"
    for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$1" 2>/dev/null
    wait "$1"
}

before=$(protocol_errors)
env HPCACCT_NOTIFY_FROM=acct@example.org HPCACCT_NOTIFY_CONNINFO="dbname=$db" HPCACCT_NOTIFY_POLL=1 \
    "$bindir/hpcacct-notify" 2>&- &
pid=$!
sleep 3
stop_daemon $pid
status=$?
check "notify with standard error closed: stopped by SIGTERM, exit 0 ($status)" "$(tf $status)"
check "notify with standard error closed wrote nothing into the connection" "$(tf $(($(protocol_errors) != before)))"

# --- hpcacct-notify's connection ended by the server (as by a restart): it reconnects, and what
# libpq says of it is a line of hpcacct-notify's, not a bare "FATAL:" ---
backend() { psql -X -At -d "$db" -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'hpcacct-notify'"; }
env HPCACCT_NOTIFY_FROM=acct@example.org HPCACCT_NOTIFY_CONNINFO="dbname=$db" HPCACCT_NOTIFY_POLL=1 \
    "$bindir/hpcacct-notify" 2>"$work/notify.err" &
pid=$!
for _ in $(seq 50); do first=$(backend); [ -n "$first" ] && break; sleep 0.2; done
psql -X -q -d "$db" -c "SELECT pg_terminate_backend($first)" >/dev/null
for _ in $(seq 50); do second=$(backend); [ -n "$second" ] && [ "$second" != "$first" ] && break; sleep 0.2; done
stop_daemon $pid
status=$?
check "notify, its connection terminated: reconnected (backend $first, then ${second:-none}) and stopped by SIGTERM ($status)" \
    "$([ -n "$second" ] && [ "$second" != "$first" ] && [ $status -eq 0 ] && echo t || echo f)"
stray=$(grep -v '^hpcacct-notify: ' "$work/notify.err")
check "and every line it wrote is its own (${stray:-all prefixed})" "$([ -z "$stray" ] && echo t || echo f)"

# --- hpcacct-notify on a database whose statements fail (here: without hpcacct) backs off as
# when it cannot connect (1, 2, 4 ... s), not reconnecting and failing as fast as it can ---
env HPCACCT_NOTIFY_FROM=acct@example.org HPCACCT_NOTIFY_CONNINFO=dbname=postgres "$bindir/hpcacct-notify" 2>"$work/spin.err" &
pid=$!
sleep 3.5
stop_daemon $pid
status=$?
tries=$(grep -c 'SQLSTATE 3F000' "$work/spin.err")
check "notify, every claim failing: at most 4 tries in 3.5 s ($tries), stopped by SIGTERM ($status)" \
    "$([ "$tries" -ge 1 ] && [ "$tries" -le 4 ] && [ $status -eq 0 ] && echo t || echo f)"

# --- a client encoding other than UTF-8 (PGCLIENTENCODING) changes nothing ---
PGCLIENTENCODING=LATIN1 "$bindir/hpcacct-report" -d "$db" proj_a 2026-01 >"$work/latin1.html" 2>"$work/err"
got=$?
check "report under PGCLIENTENCODING=LATIN1 succeeds ($(head -1 "$work/err"))" "$(tf $got)"
"$bindir/hpcacct-report" -d "$db" proj_a 2026-01 >"$work/utf8.html"
cmp -s "$work/latin1.html" "$work/utf8.html"
check "and writes the same UTF-8 bytes as a UTF-8 session" "$(tf $?)"
PGCLIENTENCODING=LATIN1 "$bindir/hpcacct-report" -d "$db" --json 'proj_ü' 2026-01 >"$work/latin1.json" 2>"$work/err"
got=$?
check "report under PGCLIENTENCODING=LATIN1 finds the account proj_ü named in UTF-8 ($(head -1 "$work/err"))" "$(tf $got)"
# a message in the outbox with a euro sign; SMTP to a port where nothing listens: the delivery
# is tried (a retry), not stopped by the database
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
psql -q -X -v ON_ERROR_STOP=1 -d "$db" -c "INSERT INTO hpcacct.hpc_user VALUES ('enc')" \
     -c "INSERT INTO hpcacct.contact (username, email) VALUES ('enc', 'enc@example.org')" \
     -c "SELECT hpcacct.outbox_add('balance_low', 'enc/1', NULL, 'Guthaben 5 €', 'noch 5 €', '{}', false, ARRAY['enc'])" >/dev/null
notify PGCLIENTENCODING=LATIN1 HPCACCT_NOTIFY_CONNINFO="dbname=$db" HPCACCT_NOTIFY_SMTP_HOST=127.0.0.1 \
    HPCACCT_NOTIFY_SMTP_PORT="$port" HPCACCT_NOTIFY_SMTP_TLS=none HPCACCT_NOTIFY_TIMEOUT=2 "$bindir/hpcacct-notify" --once 2>"$work/err"
status=$?
check "notify --once under PGCLIENTENCODING=LATIN1 reads a message with a euro sign: exit 0 ($status: $(grep -v delivered "$work/err" | head -c 160))" "$(tf $status)"
state=$(psql -X -At -d "$db" -c "SELECT state || ' ' || attempts FROM hpcacct.outbox_status WHERE subject = 'Guthaben 5 €'")
check "and tried it, to be retried ($state)" "$([ "$state" = 'pending 1' ] && echo t || echo f)"

# --- a failure is one line on stderr, without libpq's hint or the statement's text ---
one_line() {  # one_line NAME STATUS-WANTED COMMAND...
    local name=$1 want=$2
    shift 2
    "$@" >/dev/null 2>"$work/err"
    local status=$?
    check "$name: exit $want ($status)" "$(tf $((status != want)))"
    check "$name: one line on stderr ($(wc -l <"$work/err") lines: $(head -c 160 "$work/err" | tr '\n\t' '  '))" \
        "$(tf $(($(wc -l <"$work/err") != 1)))"
}
one_line "sacct, no server" 1 env PGHOST="$work/none" "$bindir/hpcacct-sacct" load /dev/null
one_line "sacct load, a database without hpcacct" 1 "$bindir/hpcacct-sacct" -d postgres load test/slurm/samples/sacct-after-steps.txt
printf 'Cluster|Jobid\nc|1\n' >"$work/bad-header.txt"
one_line "sacct load, a header without the fields it needs" 1 "$bindir/hpcacct-sacct" -d "$db" load "$work/bad-header.txt"
one_line "report, no server" 1 env PGHOST="$work/none" "$bindir/hpcacct-report" proj_a 2026-01
one_line "notify --once, no server" 2 notify PGHOST="$work/none" "$bindir/hpcacct-notify" --once
one_line "notify --once, a database without hpcacct" 2 notify HPCACCT_NOTIFY_CONNINFO=dbname=postgres "$bindir/hpcacct-notify" --once
grep -q 'SQLSTATE 3F000' "$work/err"
got=$?
check "which names the SQLSTATE ($(head -c 160 "$work/err" | tr '\n' ' '))" "$(tf $got)"

# --- a missing value is named as such, not as an unknown option ---
"$bindir/hpcacct-sacct" -d 2>"$work/err"
status=$?
check "sacct -d without a value: exit 2, says so ($status: $(head -1 "$work/err"))" \
    "$([ $status -eq 2 ] && grep -q '^hpcacct-sacct: -d needs a value' "$work/err" && echo t || echo f)"
"$bindir/hpcacct-sacct" run -M c --since 2>"$work/err"
status=$?
check "sacct run --since without a value: exit 2, says so ($status: $(head -1 "$work/err"))" \
    "$([ $status -eq 2 ] && grep -q '^hpcacct-sacct: --since needs a value' "$work/err" && echo t || echo f)"

# --- hpcacct-slurm-sync (stand-in scontrol and sacctmgr): psql's failure on one line of its own,
# its connections named hpcacct-slurm-sync ---
mkdir -p "$work/fake"
printf '#!/bin/sh\necho "ClusterName = c1"\necho "AccountingStorageEnforce = associations,limits"\n' >"$work/fake/scontrol"
printf '#!/bin/sh\nexit 0\n' >"$work/fake/sacctmgr"
chmod +x "$work/fake/scontrol" "$work/fake/sacctmgr"
sync=$bindir/hpcacct-slurm-sync
PATH="$work/fake:$PATH" PGHOST="$work/none" "$sync" --assoc >/dev/null 2>"$work/err"
status=$?
check "slurm-sync --assoc, no server: exit 1, one line on stderr ($status, $(wc -l <"$work/err") lines: $(head -c 200 "$work/err" | tr '\n\t' '  '))" \
    "$([ $status -eq 1 ] && [ "$(wc -l <"$work/err")" -eq 1 ] && grep -q '^hpcacct-slurm-sync: cannot read hpcacct.slurm_association: .*failed' "$work/err" && echo t || echo f)"
psql -X -q -d "$db" -c "ALTER SYSTEM SET log_connections = on" -c "SELECT pg_reload_conf()" >/dev/null
sleep 0.5
PATH="$work/fake:$PATH" PGDATABASE="$db" "$sync" --assoc --dry-run >/dev/null 2>"$work/err"
status=$?
names=$(grep -o "database=$db application_name=[^ ]*" "$log" | sed 's/.*application_name=//' | sort -u | tr '\n' ' ')
check "slurm-sync --assoc --dry-run: exit 0 ($status), its connection named hpcacct-slurm-sync (names logged: $names)" \
    "$([ $status -eq 0 ] && grep -qw hpcacct-slurm-sync <<<"$names" && echo t || echo f)"
psql -X -q -d "$db" -c "ALTER SYSTEM RESET log_connections" -c "SELECT pg_reload_conf()" >/dev/null

# --- the README's example of a load's report line has the form the command prints ---
readme_line=$(tr '\n' ' ' <README.md | grep -o 'It prints one line per load[^.]*\(\.[^ ][^.]*\)*e\.g\. `[^`]*`' | sed 's/.*`\(.*\)`$/\1/' | tr -s ' ')
printf 'Cluster|JobID|Account|User|Partition|Submit|Start|End|AllocTRES|State\nc|1|proj_a|u|p|2024-01-02T09:00:00+00:00|2024-01-02T10:00:00+00:00|2024-01-02T11:00:00+00:00|cpu=1|COMPLETED\n' \
    >"$work/jobs.txt"
got=$(cd "$work" && "$bindir/hpcacct-sacct" -d "$db" load jobs.txt 2>/dev/null)
form() { sed -E 's/=[0-9]+/=N/g'; }
check "sacct load's report line has the README's form (README: $readme_line; printed: $got)" \
    "$([ -n "$readme_line" ] && [ "$(form <<<"$readme_line")" = "$(form <<<"$got")" ] && echo t || echo f)"

dropdb "$db"
report commands
