#!/usr/bin/env bash
# test/federation/lib.sh, sourced by run.sh and bench.sh: PostgreSQL clusters of a test, each
# in a fresh mktemp directory of its own, listening only on a Unix socket in that directory
# (no TCP port); stop_all stops them and remove_all removes them (the caller's exit trap).
# $base, also from mktemp, holds the list of those directories.

pg_config=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
bindir=$("$pg_config" --bindir)
WAIT=${FED_WAIT:-60}      # seconds a row may take to arrive before a wait gives up
base=$(mktemp -d "${TMPDIR:-/tmp}/hpcacct-fed.XXXXXX")
started=()

as_server_owner() {
    # from /: the caller's directory may be one the server owner cannot enter
    if [ "$(id -u)" -eq 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}
[ "$(id -u)" -eq 0 ] && chown postgres: "$base"

nodedir() { cat "$base/$1.dir"; }

# start_node NAME [WAL_LEVEL]: initdb on first use (wal_level logical unless given), then start
start_node() {
    local node=$1 dir
    if [ ! -f "$base/$node.dir" ]; then
        dir=$(mktemp -d "${TMPDIR:-/tmp}/hpcacct-fed-$node.XXXXXX")
        echo "$dir" >"$base/$node.dir"
        [ "$(id -u)" -eq 0 ] && chown postgres: "$dir"
    fi
    dir=$(nodedir "$node")
    if [ ! -d "$dir/data" ]; then
        as_server_owner "$bindir/initdb" -D "$dir/data" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 \
            --no-sync >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log"; exit 1; }
        cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$dir'
port = 5432
wal_level = ${2:-logical}
max_replication_slots = 10
max_wal_senders = 10
max_logical_replication_workers = 6
max_sync_workers_per_subscription = 2
max_worker_processes = 16
wal_retrieve_retry_interval = '500ms'
wal_receiver_status_interval = '1s'
fsync = off
full_page_writes = off
${NODE_CONF:-}
CONF
        started+=("$node")
    fi
    # CPUS_<node> (a taskset list) pins a node's processes to some cores (the bench does, to
    # stand for separate machines)
    local cpus_var="CPUS_$node" pin=()
    if [ -n "${!cpus_var:-}" ] && command -v taskset >/dev/null; then pin=(taskset -c "${!cpus_var}"); fi
    as_server_owner "${pin[@]}" "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w start >/dev/null
}
stop_node() { as_server_owner "$bindir/pg_ctl" -D "$(nodedir "$1")/data" -m fast -w stop >/dev/null; }
stop_all() {
    local node
    for node in "${started[@]}"; do
        if [ -f "$(nodedir "$node")/data/postmaster.pid" ]; then
            as_server_owner "$bindir/pg_ctl" -D "$(nodedir "$node")/data" -m immediate -w stop >/dev/null 2>&1 || true
        fi
    done
}
remove_all() {
    local f
    for f in "$base"/*.dir; do [ -f "$f" ] && rm -rf "$(cat "$f")"; done
    rm -rf "$base"
}
show_logs() {
    local node
    for node in "${started[@]}"; do
        echo "# --- server log of $node (tail) ---"; tail -n 30 "$(nodedir "$node")/server.log" 2>/dev/null | sed 's/^/# /'
    done
}
conninfo() { echo "host=$(nodedir "$1") port=5432 dbname=${2:-hpc} user=postgres"; }
q() {  # q NODE SQL [DB]: the statement's rows, unaligned, with hpcacct first in the search_path
    psql "$(conninfo "$1" "${3:-hpc}")" -XAtq -v ON_ERROR_STOP=1 -c "SET search_path = hpcacct, public" -c "$2"
}
sqlstate() {  # sqlstate NODE SQL: the SQLSTATE the statement fails with (empty when it succeeds)
    psql "$(conninfo "$1")" -XAtq -v VERBOSITY=verbose -c "$2" 2>&1 >/dev/null | sed -n 's/^ERROR:  \([0-9A-Z]\{5\}\):.*/\1/p' | head -1
}
now_ms() { date +%s%3N; }
wait_for() {  # wait_for NODE SQL EXPECTED [DB]: polls until the query returns EXPECTED; prints the ms waited (-1: gave up)
    local start; start=$(now_ms)
    while [ "$(q "$1" "$2" "${4:-hpc}" 2>/dev/null || true)" != "$3" ]; do
        if [ $(( $(now_ms) - start )) -gt $((WAIT * 1000)) ]; then echo "-1"; return 0; fi
        sleep 0.02
    done
    echo $(( $(now_ms) - start ))
}

# The federation of the tests: database hpc with hpcacct in each node; the first node is the
# centre, the others sites 1, 2, …, joined with the three calls of the README.
federate() {
    local centre=$1 site i=0; shift
    for site in "$@"; do i=$((i + 1)); q "$centre" "CALL federation_publish($i, '$site')" >/dev/null; done
    i=0; for site in "$@"; do i=$((i + 1)); q "$site" "CALL federation_join($i, '$(conninfo "$centre")')" >/dev/null; done
    i=0; for site in "$@"; do i=$((i + 1)); q "$centre" "CALL federation_subscribe($i, '$(conninfo "$site")')" >/dev/null; done
}

# The test site's reference data, written at the centre (and in a database without federation).
reference_sql="
INSERT INTO setting VALUES ('timezone', 'Europe/Berlin');
INSERT INTO account (name) SELECT 'p' || i FROM generate_series(1, 12) i;
INSERT INTO account (name) VALUES ('shared');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, exclusive)
VALUES ('alpha', 'cpu', 'cpu=48,mem=192G', 'cpu=1', 1.0 / 48, 'NPL', true),
       ('beta', 'gpu', 'cpu=32,gres/gpu=4,mem=512G', 'gres/gpu=1,cpu=8', 3.0, 'NPL', false);
INSERT INTO regulation_machine (machine, monthly_threshold) VALUES ('alpha', 1000), ('beta', 1000000);
SELECT add_user('u' || i, '2026-01-01') FROM generate_series(0, 4) i;
SELECT add_member('p' || a, 'u' || u) FROM generate_series(1, 12) a, generate_series(0, 4) u;
SELECT add_member('shared', 'u0');
SELECT deposit('p' || a, q::date, 500000) FROM generate_series(1, 12) a,
       generate_series('2026-01-01'::date, '2026-10-01', '3 months') q;
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
SELECT 'p' || a, 'grant', 20000 + 1000 * a, 'NPL', m, '2026-01-01', '2026-12-31'
FROM generate_series(1, 12) a, (VALUES ('alpha'), ('beta')) c(m);
"

# jobs of cluster C numbered FROM..TO, the same at a site and in `single`: spread over 2026 up
# to 20 November, accounts p1..p12, users u0..u4
jobs_sql() {
    echo "INSERT INTO job (cluster, jobid, account, \"user\", partition, submit, start, \"end\", alloctres, state)
    SELECT '$1', '$1-' || i, 'p' || (i * 7 % 12 + 1), 'u' || (i % 5), CASE '$1' WHEN 'alpha' THEN 'cpu' ELSE 'gpu' END,
           t, t + interval '1 minute', t + interval '1 minute' + (i * 37 % 600 + 1) * interval '1 minute',
           CASE '$1' WHEN 'alpha' THEN ('cpu=' || (i * 13 % 96 + 1) || ',mem=' || (i % 7 + 1) || 'G')
                     ELSE ('cpu=' || (i % 4 + 1) * 8 || ',gres/gpu=' || (i % 4 + 1)) END::tres, 'COMPLETED'
    FROM generate_series($2::bigint, $3) i,
         LATERAL (SELECT timestamptz '2026-01-01 00:00+01' + (i * 7919 % 463 + 0.37 * i) * interval '1 day' / 1.7 AS t0) a,
         LATERAL (SELECT least(t0, timestamptz '2026-11-20 00:00+01') AS t) b"
}


# TAP lines for the federation tests (passed, failed and n start at 0 in the test)
ok() {  # ok STATUS(0: passed) DESCRIPTION
    n=$((n + 1))
    if [ "$1" -eq 0 ]; then echo "ok $n - $2"; passed=$((passed + 1)); else echo "not ok $n - $2"; failed=$((failed + 1)); fi
}
is() {  # is GOT EXPECTED DESCRIPTION
    if [ "$1" == "$2" ]; then ok 0 "$3"; else ok 1 "$3"; echo "#   got:      $(head -c 600 <<<"$1")"; echo "#   expected: $(head -c 600 <<<"$2")"; fi
}
waited() {  # waited MS DESCRIPTION: ok when a wait_for did not give up
    ok $([ "$1" -ge 0 ] && echo 0 || echo 1) "$2 ($1 ms)"
}
# tap_end STAGE RC: after the clusters are stopped, the plan and the counts, appended to
# $HPCACCT_TALLY when set; fails when a check failed or the test stopped early (RC not 0)
tap_end() {
    if [ "$2" -ne 0 ] && [ "$n" -gt 0 ]; then
        echo "not ok $((n + 1)) - the test stopped early (exit $2)"; failed=$((failed + 1))
    fi
    echo "1..$((passed + failed))"
    echo "# $1: $passed passed, $failed failed"
    if [ -n "${HPCACCT_TALLY:-}" ]; then echo "$1 $passed $failed" >>"$HPCACCT_TALLY"; fi
    [ "$failed" -eq 0 ] && [ "$2" -eq 0 ]
}
# stage_traps STAGE: on exit, the script's own before_finish (when it defines one), every node
# stopped and removed (their logs shown after a failure), and the TAP end as STAGE
stage_traps() {
    fed_stage=$1
    trap stage_finish EXIT
    trap 'exit 130' INT TERM
    trap 'echo "# stopped at line $LINENO: $BASH_COMMAND" >&2' ERR
}
stage_finish() {
    local rc=$?
    if declare -F before_finish >/dev/null; then before_finish; fi
    stop_all
    if [ "$rc" -ne 0 ] || [ "$failed" -ne 0 ]; then show_logs; fi
    remove_all
    tap_end "$fed_stage" "$rc"
}
