#!/usr/bin/env bash
# Runs inside with-cluster.sh: fills a database with the demo's site, dumps it with pg_dump,
# restores it into a fresh database and requires identical reports (reports.sql) and an
# identical ledger. Appends "compat passed failed" to $HPCACCT_TALLY.
set -uo pipefail
cd "$(dirname "$0")/../.."
. test/scripts/checks.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"

createdb hpcacct_dump_src
for part in test/demo/*.sql; do
    psql -X -q -v ON_ERROR_STOP=1 -d hpcacct_dump_src -f "$part" >/dev/null 2>"$work/demo.err" \
        || { cat "$work/demo.err"; echo "compat 0 1" >>"$HPCACCT_TALLY"; exit 0; }
done
psql -X -q -d hpcacct_dump_src -f test/compat/reports.sql >"$work/before.txt" 2>&1

pg_dump -Fc -d hpcacct_dump_src -f "$work/site.dump"
createdb hpcacct_dump_dst
pg_restore --exit-on-error -d hpcacct_dump_dst "$work/site.dump" 2>"$work/restore.err"
check "pg_restore of a populated database succeeds" "$([ $? -eq 0 ] && echo t)"
[ -s "$work/restore.err" ] && sed 's/^/    /' "$work/restore.err" | head -20
psql -X -q -d hpcacct_dump_dst -f test/compat/reports.sql >"$work/after.txt" 2>&1

check "every report is identical after dump and restore ($(wc -l <"$work/before.txt") lines)" \
    "$(cmp -s "$work/before.txt" "$work/after.txt" && echo t)"
diff "$work/before.txt" "$work/after.txt" | head -20
ledger_of() { psql -X -At -d "$1" -c "SELECT count(*), sum(amount), max(entry_id) FROM hpcacct.ledger"; }
check "the ledger is restored row for row, not re-charged ($(ledger_of hpcacct_dump_src))" \
    "$([ "$(ledger_of hpcacct_dump_src)" = "$(ledger_of hpcacct_dump_dst)" ] && echo t)"
# The restored database keeps working: a new job is charged once, with a fresh entry_id.
psql -X -q -d hpcacct_dump_dst -c "INSERT INTO hpcacct.job SELECT cluster, jobid || '-new', account, \"user\", partition,
    submit, start, \"end\", alloctres, state FROM hpcacct.job ORDER BY jobid LIMIT 1" >/dev/null 2>&1
check "a job loaded after the restore is charged once" \
    "$([ "$(psql -X -At -d hpcacct_dump_dst -c "SELECT count(*) FROM hpcacct.ledger WHERE jobid LIKE '%-new'")" = 1 ] && echo t)"

# DROP EXTENSION ... CASCADE keeps the job table (the site's data; its alloctres column, of the
# extension's type, goes), and a new CREATE EXTENSION must not touch a table it does not own.
jobs=$(psql -X -At -d hpcacct_dump_src -c "SELECT count(*) FROM hpcacct.job")
psql -X -q -d hpcacct_dump_src -c "SET client_min_messages = warning" -c "DROP EXTENSION hpcacct CASCADE" >/dev/null 2>&1
psql -X -q -v ON_ERROR_STOP=1 -d hpcacct_dump_src -c "CREATE EXTENSION hpcacct" >/dev/null 2>"$work/recreate.err"
check "CREATE EXTENSION hpcacct again beside the job table a dropped one left ($jobs jobs kept)" \
    "$([ $? -eq 0 ] && [ "$(psql -X -At -d hpcacct_dump_src -c "SELECT count(*) FROM hpcacct.job")" = "$jobs" ] && echo t)"
sed 's/^/    /' "$work/recreate.err" | head -5

rm -rf "$work"
report compat
