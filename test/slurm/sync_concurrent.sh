#!/usr/bin/env bash
# test/slurm/sync_concurrent.sh: two clusters' `hpcacct-slurm-sync --queue` on one database at
# once (each cluster's controller runs its own from cron, at the same minute) do not deadlock.
# Each run first writes its own cluster's pending_job rows, then recheck_queued() locks every
# cluster's: two runs that both wrote before either rechecked waited for each other. A third
# session holds one row of a third cluster until both have written, so that they meet there.
# No Slurm: squeue and scontrol are stand-ins in a mktemp dir (an empty queue). Runs inside
# with-cluster.sh (PGHOST...). TAP lines; appends "sync_concurrent PASSED FAILED" to $HPCACCT_TALLY.
set -uo pipefail
cd "$(dirname "$0")/../.."
. test/scripts/checks.sh

bindir=$("${PG_CONFIG:-pg_config}" --bindir)
fake=$(mktemp -d "${TMPDIR:-/tmp}/hpcacct-sync-concurrent.XXXXXX")
trap 'rm -rf "$fake"' EXIT
printf '#!/bin/sh\n[ "$1 $2" = "show config" ] && echo "ClusterName = none"\nexit 0\n' >"$fake/scontrol"
printf '#!/bin/sh\nexit 0\n' >"$fake/squeue"
chmod +x "$fake/scontrol" "$fake/squeue"

db=hpcacct_sync_concurrent
createdb "$db"
psql -q -X -v ON_ERROR_STOP=1 -d "$db" -c 'CREATE EXTENSION hpcacct CASCADE' >/dev/null
psql -q -X -v ON_ERROR_STOP=1 -d "$db" >/dev/null <<'SQL'
SELECT hpcacct.add_user('u', '2024-01-05');
INSERT INTO hpcacct.pending_job (cluster, jobid, username)
SELECT c, j::text, 'u' FROM unnest(ARRAY['sa', 'sb', 'sc']) c, generate_series(1, 3) j;
SQL

for round in 1 2 3; do
    # the holder: one row of cluster sc, until both syncs have written theirs
    psql -q -X -d "$db" -c "BEGIN" \
         -c "SELECT 1 FROM hpcacct.pending_job WHERE cluster = 'sc' AND jobid = '1' FOR UPDATE" \
         -c "SELECT pg_sleep(3)" -c "COMMIT" >/dev/null 2>"$fake/holder.err" &
    holder=$!
    sleep 1
    PATH="$fake:$PATH" HPCACCT_DSN="dbname=$db" "$bindir/hpcacct-slurm-sync" --queue --cluster sa >"$fake/a.out" 2>"$fake/a.err" &
    a=$!
    PATH="$fake:$PATH" HPCACCT_DSN="dbname=$db" "$bindir/hpcacct-slurm-sync" --queue --cluster sb >"$fake/b.out" 2>"$fake/b.err" &
    b=$!
    wait $a; status_a=$?
    wait $b; status_b=$?
    wait $holder
    check "round $round: both clusters' syncs at once succeed (exit $status_a, $status_b)" \
        "$([ $status_a -eq 0 ] && [ $status_b -eq 0 ] && echo t || echo f)"
    if [ $status_a -ne 0 ] || [ $status_b -ne 0 ]; then sed 's/^/# /' "$fake/a.err" "$fake/b.err"; fi
    left=$(psql -X -A -t -d "$db" -c "SELECT string_agg(cluster, ',' ORDER BY cluster) FROM (SELECT DISTINCT cluster FROM hpcacct.pending_job) c")
    check "round $round: each removed its cluster's jobs that left the queue (left: $left)" "$([ "$left" = sc ] && echo t || echo f)"
    # the next round: the jobs back in the table
    psql -q -X -d "$db" -c "INSERT INTO hpcacct.pending_job (cluster, jobid, username)
                            SELECT c, j::text, 'u' FROM unnest(ARRAY['sa', 'sb']) c, generate_series(1, 3) j
                            ON CONFLICT DO NOTHING" >/dev/null
done

dropdb "$db"
report sync_concurrent
