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
# The site's roles, as the README sets them up: the submit check's login and a portal user's
# (named as the demo's first member). Their grants and row-level security must survive too.
portal_user=$(psql -X -At -d hpcacct_dump_src -c "SELECT min(username) FROM hpcacct.membership")
psql -X -q -v ON_ERROR_STOP=1 -d hpcacct_dump_src -c 'CALL hpcacct.setup_roles()' \
    -c 'CREATE ROLE dr_submit LOGIN IN ROLE hpcacct_submit' \
    -c "CREATE ROLE \"$portal_user\" LOGIN IN ROLE hpcacct_portal" >/dev/null 2>"$work/roles.err" \
    || { cat "$work/roles.err"; echo "compat 0 1" >>"$HPCACCT_TALLY"; exit 0; }
# every member's submit decision for each of their accounts, as the submit check's login sees it
decisions() {
    psql -X -At -U dr_submit -d "$1" -c "SELECT m.username, m.account, d.ok, d.reason
        FROM hpcacct.membership m, hpcacct.check_submit(m.username, m.account, '2024-11-15') d ORDER BY 1, 2"
}
# what the portal user reads: their rows of the ledger, the jobs and the accounts, and nobody else's
portal_view() {
    psql -X -At -U "$portal_user" -d "$1" -c "SELECT (SELECT count(*) FROM hpcacct.ledger),
        (SELECT count(*) FROM hpcacct.job), (SELECT string_agg(name, ',' ORDER BY name) FROM hpcacct.account)"
}
decisions hpcacct_dump_src >"$work/decisions_before.txt" 2>&1
portal_view hpcacct_dump_src >"$work/portal_before.txt" 2>&1

pg_dump -Fc -d hpcacct_dump_src -f "$work/site.dump"
createdb hpcacct_dump_dst
pg_restore --exit-on-error -d hpcacct_dump_dst "$work/site.dump" 2>"$work/restore.err"
check "pg_restore of a populated database succeeds" "$([ $? -eq 0 ] && echo t)"
[ -s "$work/restore.err" ] && sed 's/^/    /' "$work/restore.err" | head -20
psql -X -q -d hpcacct_dump_dst -f test/compat/reports.sql >"$work/after.txt" 2>&1

check "every report is identical after dump and restore ($(wc -l <"$work/before.txt") lines)" \
    "$(cmp -s "$work/before.txt" "$work/after.txt" && echo t)"
diff "$work/before.txt" "$work/after.txt" | head -20
decisions hpcacct_dump_dst >"$work/decisions_after.txt" 2>&1
check "the submit check's login decides as before for every member ($(wc -l <"$work/decisions_before.txt") decisions, $(grep -c '|f|' "$work/decisions_before.txt") refusals)" \
    "$(grep -q '|t|' "$work/decisions_before.txt" && grep -q '|f|' "$work/decisions_before.txt" \
       && cmp -s "$work/decisions_before.txt" "$work/decisions_after.txt" && echo t)"
diff "$work/decisions_before.txt" "$work/decisions_after.txt" | head -10
portal_view hpcacct_dump_dst >"$work/portal_after.txt" 2>&1
check "a portal user reads the same rows after the restore ($(cat "$work/portal_before.txt"))" \
    "$([ "$(cat "$work/portal_before.txt")" = "$(cat "$work/portal_after.txt")" ] \
       && [ "$(cut -d'|' -f1 "$work/portal_before.txt")" -lt "$(psql -X -At -d hpcacct_dump_dst -c 'SELECT count(*) FROM hpcacct.ledger')" ] \
       && echo t)"
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
