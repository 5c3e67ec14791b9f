#!/usr/bin/env bash
# test/federation/decoding-cost.sh: what a site's walsender spends per published row, and
# whether publishing one batch row per statement instead of every ledger row would save it
# (issue 17, item 4). Not hpcacct's tables: two plain tables shaped like the site's job and
# ledger rows, so that only logical decoding is measured. Two clusters (publisher, subscriber
# with binary = true). Per round and mode, STATEMENTS transactions of ROWS jobs (one job row
# and one ledger row each) at the publisher; printed: the loading backend's CPU (read from
# /proc/self/stat by the backend itself) and the walsender's CPU until the subscriber has
# everything. Modes: none (no subscription), rows (the ledger-like table published),
# decode (a publication of an unused table: all WAL decoded, nothing sent), batch (the
# ledger-like rows not published; a statement trigger writes them as one array row into a
# published table), chunks (the same, but one array row per CHUNK ledger rows, kept in the
# row uncompressed up to 8 160 bytes, and deleted again in the same transaction: what a relay
# table would do), jchunks (chunks as jsonb arrays, which a receiver can map by column name).
# MODES picks modes. Timings are printed, never asserted. Needs root or the server owner.
set -euo pipefail
ROWS=${ROWS:-5000} STATEMENTS=${STATEMENTS:-20} ROUNDS=${ROUNDS:-3} CHUNK=${CHUNK:-50}
. "$(dirname "$0")/lib.sh"
trap 'rc=$?; stop_all; [ $rc -ne 0 ] && show_logs; remove_all; exit $rc' EXIT
trap 'exit 130' INT TERM

start_node pub; start_node sub
schema="CREATE TABLE ledger_like (entry_id bigint PRIMARY KEY, account text NOT NULL, kind text NOT NULL,
            amount numeric(20,6) NOT NULL, unit text, resource_id bigint, cluster text, jobid text, submitter text,
            job_start timestamptz, job_end timestamptz, booked_at timestamptz DEFAULT now());
        CREATE TABLE job_like (jobid text PRIMARY KEY, account text, submitter text, tres text,
            job_start timestamptz, job_end timestamptz);
        CREATE TABLE batch (batch_id bigserial PRIMARY KEY, entries ledger_like[] NOT NULL);
        CREATE TABLE chunk (entries ledger_like[] NOT NULL);
        CREATE TABLE jchunk (entries jsonb NOT NULL);
        ALTER TABLE chunk ALTER entries SET STORAGE main, SET (toast_tuple_target = 8160);
        ALTER TABLE jchunk ALTER entries SET STORAGE main, SET (toast_tuple_target = 8160);"
for node in pub sub; do
    psql "$(conninfo "$node" postgres)" -XAtq -c "CREATE DATABASE hpc"
    q "$node" "$schema" >/dev/null
done
q pub "CREATE FUNCTION write_batch() RETURNS trigger LANGUAGE plpgsql AS \$\$
       BEGIN INSERT INTO batch (entries) SELECT array_agg(n::ledger_like) FROM new_rows n; RETURN NULL; END \$\$;
       CREATE FUNCTION write_chunks() RETURNS trigger LANGUAGE plpgsql AS \$\$
       DECLARE added tid[];
       BEGIN
           WITH a AS (INSERT INTO chunk (entries) SELECT array_agg(n::ledger_like) FROM new_rows n
                      GROUP BY n.entry_id / $CHUNK RETURNING ctid)
           SELECT array_agg(ctid) INTO added FROM a;
           DELETE FROM chunk WHERE ctid = ANY (added);
           RETURN NULL;
       END \$\$;
       CREATE FUNCTION write_jchunks() RETURNS trigger LANGUAGE plpgsql AS \$\$
       DECLARE added tid[];
       BEGIN
           WITH a AS (INSERT INTO jchunk (entries) SELECT jsonb_agg(to_jsonb(n)) FROM new_rows n
                      GROUP BY n.entry_id / $CHUNK RETURNING ctid)
           SELECT array_agg(ctid) INTO added FROM a;
           DELETE FROM jchunk WHERE ctid = ANY (added);
           RETURN NULL;
       END \$\$" >/dev/null

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
statements() {  # the load: STATEMENTS transactions of ROWS job rows and ROWS ledger-like rows
    local i f
    for i in $(seq 0 $((STATEMENTS - 1))); do
        f=$((1 + i * ROWS))
        cat <<SQL
BEGIN;
INSERT INTO job_like SELECT 'job' || g, 'acct' || (g % 1000), 'u' || (g % 20000), 'cpu=4,mem=8G,node=1',
    now() - interval '2 hours', now() FROM generate_series($f, $f + $ROWS - 1) g;
INSERT INTO ledger_like (entry_id, account, kind, amount, unit, resource_id, cluster, jobid, submitter, job_start, job_end)
    SELECT g, 'acct' || (g % 1000), 'charge', (g % 977) * 1.25, 'core-hours', 1, 'alpha', 'job' || g, 'u' || (g % 20000),
           now() - interval '2 hours', now() FROM generate_series($f, $f + $ROWS - 1) g;
COMMIT;
SQL
    done
}
self_cpu="(split_part(pg_read_file('/proc/self/stat'), ' ', 14)::int + split_part(pg_read_file('/proc/self/stat'), ' ', 15)::int)"
run() {  # run MODE: prints MODE, backend ms, walsender ms
    local mode=$1 ws="" w0=0 backend
    q sub "DROP SUBSCRIPTION IF EXISTS s" >/dev/null 2>&1 || true
    q pub "SET client_min_messages = warning; DROP PUBLICATION IF EXISTS p;
           DROP TRIGGER IF EXISTS batch_rows ON ledger_like; TRUNCATE ledger_like, job_like, batch, chunk, jchunk; CHECKPOINT" >/dev/null
    q sub "TRUNCATE ledger_like, job_like, batch, chunk, jchunk" >/dev/null
    case $mode in
        rows) q pub "CREATE PUBLICATION p FOR TABLE ledger_like" >/dev/null ;;
        decode) q pub "CREATE PUBLICATION p FOR TABLE batch" >/dev/null ;;
        batch) q pub "CREATE TRIGGER batch_rows AFTER INSERT ON ledger_like REFERENCING NEW TABLE AS new_rows
                      FOR EACH STATEMENT EXECUTE FUNCTION write_batch();
                      CREATE PUBLICATION p FOR TABLE batch" >/dev/null ;;
        chunks|jchunks) q pub "CREATE TRIGGER batch_rows AFTER INSERT ON ledger_like REFERENCING NEW TABLE AS new_rows
                      FOR EACH STATEMENT EXECUTE FUNCTION write_$mode();
                      CREATE PUBLICATION p FOR TABLE ${mode%s} WITH (publish = 'insert')" >/dev/null ;;
    esac
    if [ "$mode" != none ]; then
        q sub "CREATE SUBSCRIPTION s CONNECTION '$(conninfo pub)' PUBLICATION p WITH (binary = true)" >/dev/null 2>&1
        [ "$(wait_for pub "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'" 1)" -ge 0 ]
        ws=$(q pub "SELECT pid FROM pg_stat_replication WHERE state = 'streaming'")
        w0=$(cpu_ticks "$ws")
    fi
    backend=$({ echo "\\o /dev/null"; echo "SELECT $self_cpu AS ticks \\gset start_"; statements; echo "\\o";
                echo "SELECT $self_cpu - :start_ticks"; } | psql "$(conninfo pub)" -XAtq -v ON_ERROR_STOP=1 -f -)
    case $mode in
        rows) [ "$(wait_for sub "SELECT count(*) FROM ledger_like" $((STATEMENTS * ROWS)))" -ge 0 ] ;;
        batch) [ "$(wait_for sub "SELECT count(*) FROM batch" "$STATEMENTS")" -ge 0 ] ;;
        chunks) [ "$(wait_for sub "SELECT sum(cardinality(entries)) FROM chunk" $((STATEMENTS * ROWS)))" -ge 0 ] ;;
        jchunks) [ "$(wait_for sub "SELECT sum(jsonb_array_length(entries)) FROM jchunk" $((STATEMENTS * ROWS)))" -ge 0 ] ;;
        decode) [ "$(wait_for pub "SELECT confirmed_flush_lsn >= pg_current_wal_lsn() FROM pg_replication_slots WHERE slot_name = 's'" t)" -ge 0 ] ;;
    esac
    local walsender=0
    [ -n "$ws" ] && walsender=$(( $(cpu_ticks "$ws") - w0 ))
    echo "$mode $((backend * 10)) $((walsender * 10))"
}
echo "mode backend_cpu_ms walsender_cpu_ms  ($STATEMENTS statements of $ROWS jobs)"
for round in $(seq 1 "$ROUNDS"); do
    for mode in ${MODES:-none rows decode batch chunks jchunks}; do run "$mode"; done
done
