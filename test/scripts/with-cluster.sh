#!/usr/bin/env bash
# with-cluster.sh NAME COMMAND...: runs COMMAND against a throw-away PostgreSQL cluster in a
# fresh directory of its own (mktemp -d, Unix socket only, pg_cron preloaded), then stops
# and removes it. It never touches a cluster it did not start.
set -euo pipefail

name=$1
shift
pg_config=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
bindir=$("$pg_config" --bindir)
base=$(mktemp -d "${TMPDIR:-/tmp}/hpcacct-$name.XXXXXX")
data=$base/data

as_server_owner() {
    # from /: the caller's directory may be one the server owner cannot enter
    if [ "$(id -u)" -eq 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}

remove_cluster() {
    if [ -f "$data/postmaster.pid" ]; then
        as_server_owner "$bindir/pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$base"
}

trap remove_cluster EXIT
trap 'exit 130' INT TERM
[ "$(id -u)" -eq 0 ] && chown postgres: "$base"
as_server_owner "$bindir/initdb" -D "$data" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 \
    --no-sync >"$base/initdb.log" 2>&1 || { cat "$base/initdb.log"; exit 1; }
cat >>"$data/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$base'
port = 5432
shared_preload_libraries = 'pg_cron'
cron.database_name = '${HPCACCT_CRON_DATABASE:-hpcacct_tap}'
# as the README recommends for a socket-only server: jobs run in background workers, not
# through a connection to localhost (pg_cron's default, which fails without TCP)
cron.use_background_workers = on
cron.max_running_jobs = 5
max_worker_processes = 16
fsync = off
synchronous_commit = off
full_page_writes = off
max_parallel_workers_per_gather = 2
CONF
as_server_owner "$bindir/pg_ctl" -D "$data" -l "$base/server.log" -w start >/dev/null

export PGHOST=$base PGPORT=5432 PGUSER=postgres PGDATABASE=postgres
export HPCACCT_SERVER_LOG=$base/server.log
"$@"
