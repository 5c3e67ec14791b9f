#!/usr/bin/env bash
# Runs inside with-cluster.sh: pg_regress, then pgTAP. Appends "stage passed failed" lines
# to $HPCACCT_TALLY.
set -uo pipefail

# pg_cron runs the README's recipe itself in the pgTAP database (cron.database_name): the
# jobs are scheduled now and checked after pg_regress, so that the wait for pg_cron's next
# minute overlaps it (test/scripts/cron.sh).
createdb hpcacct_tap
psql -q -X -v ON_ERROR_STOP=1 -d hpcacct_tap \
    -c 'CREATE EXTENSION pgtap' -c 'CREATE EXTENSION pg_cron' -c 'CREATE EXTENSION hpcacct CASCADE' -c 'SELECT hpcacct.create_job_table()' \
    && test/scripts/cron.sh schedule hpcacct_tap

# pg_regress: one test per file in sql/.
regress_log=$(mktemp) tap_log=
trap 'rm -f "$regress_log" ${tap_log:+"$tap_log"}' EXIT
make -s PG_CONFIG="$PG_CONFIG" installcheck 2>&1 | tee "$regress_log"
regress_total=$(ls sql/*.sql | wc -l)
regress_failed=$(sed -n 's/.* \([0-9]*\) of [0-9]* tests failed.*/\1/p' "$regress_log")
if ! grep -q "All $regress_total tests passed" "$regress_log" && [ -z "$regress_failed" ]; then
    regress_failed=$regress_total  # pg_regress did not run
fi
regress_failed=${regress_failed:-0}
[ "$regress_failed" -ne 0 ] && [ -f regression.diffs ] && cat regression.diffs
echo "regress $((regress_total - regress_failed)) $regress_failed" >>"$HPCACCT_TALLY"
rm -f "$regress_log"

# pgTAP: each file runs in its own transaction in one database, where pg_cron may live.
test/scripts/cron.sh check hpcacct_tap

tap_log=$(mktemp)
pg_prove -d hpcacct_tap --ext .sql -r test/pgtap 2>&1 | tee "$tap_log"
tap_total=$(sed -n 's/^Files=[0-9]*, Tests=\([0-9]*\),.*/\1/p' "$tap_log")
tap_failed=$(sed -n 's/.*Failed \([0-9]*\)\/[0-9]* subtests.*/\1/p' "$tap_log" | awk '{s += $1} END {print s + 0}')
if ! grep -q '^Result: PASS' "$tap_log"; then
    [ "$tap_failed" -eq 0 ] && tap_failed=1  # a file died or pg_prove did not run
fi
echo "pgtap $(( ${tap_total:-0} - tap_failed < 0 ? 0 : ${tap_total:-0} - tap_failed )) $tap_failed" >>"$HPCACCT_TALLY"
rm -f "$tap_log"

# Concurrency (pgbench) and crash (kill -9 mid-COPY) tests of the ledger invariants.
test/stress/run.sh

# pg_dump of a populated database restored into a fresh one gives identical reports.
test/compat/dump_restore.sh

# The previous release, filled and updated with ALTER EXTENSION, equals a fresh install.
test/compat/upgrade.sh

# The README's reference of every object is the catalog's.
test/compat/reference.sh

# hpcacct-sacct against a real Slurm (test/slurm/with-slurm.sh): the job mix, loaded and checked.
test/slurm/loader.sh

# hpcacct-sacct's watermark in sessions of other TimeZones and DateStyles (stand-in sacct).
test/slurm/sacct_session.sh

# The commands as cron runs them: a standard stream closed, PGCLIENTENCODING, one-line failures.
test/commands/run.sh

# Two clusters' hpcacct-slurm-sync queue runs on one database at once (stand-in squeue, scontrol).
test/slurm/sync_concurrent.sh
