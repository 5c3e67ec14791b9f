#!/usr/bin/env bash
# cron.sh schedule|check DB: the README's pg_cron recipe, run by pg_cron itself on this
# socket-only cluster (configured as the README says: cron.use_background_workers = on).
#   schedule  schedules every `cron.schedule('hpcacct-…')` line of the README as written, then
#             the same commands once more, every minute, under the names NAME-now, as a login
#             in hpcacct_admin granted the schema cron by the README's GRANT line;
#   check     waits until each NAME-now job has run (pg_cron 1.4 has minute granularity, and a
#             scheduler that started before pg_cron existed in the database may load the jobs
#             only at one minute boundary and run them at the next: up to 135 s after
#             `schedule`), checks cron.job_run_details says `succeeded` for it, that the
#             README's ```sql blocks that schedule a job run as written by that login, and
#             unschedules every job it made. Appends "cron passed failed" to $HPCACCT_TALLY.
# Run `schedule` early and `check` later, so that other tests run while pg_cron waits.
set -uo pipefail
cd "$(dirname "$0")/../.."
. test/scripts/checks.sh
mode=$1
db=$2
stamp=${HPCACCT_TALLY:-/tmp}.cron-scheduled
q() { psql -X -q -At -v ON_ERROR_STOP=1 -d "$db" "$@"; }

# The README's lines, e.g. SELECT cron.schedule('hpcacct-regulate', '17 * * * *', $$CALL …$$);
recipe() { grep -o "SELECT cron.schedule('hpcacct-[^;]*;" README.md; }
# The README's grant to an administrator's login, e.g. GRANT USAGE ON SCHEMA cron TO acct_admin;
admin=hpcacct_cron_admin
grant() { grep -o "GRANT USAGE ON SCHEMA cron TO [a-z_]*;" README.md | head -1 | sed "s/TO [a-z_]*;/TO $admin;/"; }

case $mode in
schedule)
    date +%s >"$stamp"
    recipe | q -f - >/dev/null || { echo "cron: the README's recipe failed" >&2; exit 1; }
    { echo 'CALL hpcacct.setup_roles();'; echo "CREATE ROLE $admin LOGIN IN ROLE hpcacct_admin;"; grant; } \
        | q -f - >/dev/null || { echo "cron: the README's grant to $admin failed" >&2; exit 1; }
    recipe | sed -E "s/cron.schedule\('(hpcacct-[a-z-]*)', '[^']*'/cron.schedule('\1-now', '* * * * *'/" \
        | q -U "$admin" -f - >/dev/null || { echo "cron: scheduling as $admin failed" >&2; exit 1; }
    ;;
check)
    check "the cluster listens on a Unix socket only" "$(q -c "SELECT current_setting('listen_addresses') = ''")"
    check "cron.use_background_workers is on, as the README says" \
        "$(q -c "SELECT current_setting('cron.use_background_workers') = 'on'")"
    names=$(recipe | sed -E "s/.*cron.schedule\('(hpcacct-[a-z-]*)'.*/\1/")
    check "the README's GRANT let an hpcacct_admin login schedule the commands (jobs of $admin)" \
        "$(q -c "SELECT count(*) > 0 AND bool_and(username = '$admin') FROM cron.job WHERE jobname LIKE 'hpcacct-%-now'")"
    check "the README schedules regulate, open_quarter and compact_rollup ($(echo $names))" \
        "$(q -c "SELECT count(*) = $(echo "$names" | wc -l) AND count(*) >= 4 FROM cron.job
                  WHERE jobname IN ($(echo "$names" | sed "s/.*/'&'/" | paste -sd,))")"
    started=$(cat "$stamp" 2>/dev/null || date +%s)
    while [ $(( $(date +%s) - started )) -lt 135 ]; do
        pending=$(q -c "SELECT count(*) FROM cron.job j WHERE j.jobname LIKE 'hpcacct-%-now'
                         AND NOT EXISTS (SELECT FROM cron.job_run_details d WHERE d.jobid = j.jobid
                                         AND d.status IN ('succeeded', 'failed'))")
        [ "$pending" = 0 ] && break
        sleep 2
    done
    for name in $names; do
        status=$(q -c "SELECT coalesce(string_agg(DISTINCT d.status || coalesce(': ' || nullif(d.return_message, ''), ''), '; '),
                                       'never ran')
                         FROM cron.job j LEFT JOIN cron.job_run_details d USING (jobid)
                        WHERE j.jobname = '$name-now' AND d.status IS DISTINCT FROM 'running'")
        echo "    $name-now: $status"
        check "pg_cron ran $name's command and cron.job_run_details says succeeded" \
            "$(q -c "SELECT EXISTS (SELECT FROM cron.job j JOIN cron.job_run_details d USING (jobid)
                                     WHERE j.jobname = '$name-now' AND d.status = 'succeeded')
                        AND NOT EXISTS (SELECT FROM cron.job j JOIN cron.job_run_details d USING (jobid)
                                         WHERE j.jobname = '$name-now' AND d.status = 'failed')")"
    done
    check "the runs on the empty site wrote nothing (no ledger, regulation or quarter rows)" \
        "$(q -c "SELECT NOT EXISTS (SELECT FROM hpcacct.ledger) AND NOT EXISTS (SELECT FROM hpcacct.regulation_log)
                    AND NOT EXISTS (SELECT FROM hpcacct.quarter_log)")"
    # every ```sql block of the README that schedules a job runs as written by that login
    # (in a transaction rolled back: its jobs are not left scheduled)
    n=0
    while IFS= read -r -d '' block; do
        n=$((n + 1))
        out=$(printf 'BEGIN;\n%s\nROLLBACK;\n' "$block" | q -U "$admin" -f - 2>&1 >/dev/null | head -c 160 | tr '\n' ' ')
        check "the README's sql block $n that schedules a job runs as written by $admin (${out:-no error})" \
            "$([ -z "$out" ] && echo t || echo f)"
    done < <(awk '/^```sql$/ { on = 1; block = ""; next }
                  on && /^```$/ { on = 0; if (block ~ /cron\.schedule\(.hpcacct-/) printf "%s%c", block, 0; next }
                  on { block = block $0 "\n" }' README.md)
    check "the README has sql blocks that schedule jobs ($n)" "$([ "$n" -ge 3 ] && echo t || echo f)"
    jobids=$(q -c "SELECT coalesce(string_agg(jobid::text, ','), '0') FROM cron.job WHERE jobname LIKE 'hpcacct-%'")
    q -c "SELECT count(cron.unschedule(jobid)) FROM cron.job WHERE jobname LIKE 'hpcacct-%'" >/dev/null
    check "every job the test made is unscheduled" "$(q -c "SELECT count(*) = 0 FROM cron.job WHERE jobname LIKE 'hpcacct-%'")"
    # a run the last minute started goes on after the unschedule: let it end before other
    # tests use the database
    started=$(date +%s)
    while [ $(( $(date +%s) - started )) -lt 60 ] &&
          [ "$(q -c "SELECT count(*) FROM cron.job_run_details WHERE jobid IN ($jobids)
                      AND status NOT IN ('succeeded', 'failed')")" != 0 ]; do
        sleep 1
    done
    check "no run of those jobs is left going" \
        "$(q -c "SELECT count(*) = 0 FROM cron.job_run_details WHERE jobid IN ($jobids) AND status NOT IN ('succeeded', 'failed')")"
    q -c "REVOKE USAGE ON SCHEMA cron FROM $admin" -c "DROP ROLE $admin" >/dev/null
    # the runs of today kept their day (open_quarter, notify_scan: a past day after it is
    # refused); the pgTAP files that follow run days of past years in this database
    check "the runs kept today's day in run_day (open_quarter and notify_scan)" \
        "$(q -c "SELECT count(*) = 2 FROM hpcacct_internal.run_day WHERE run IN ('open_quarter', 'notify_scan')")"
    q -c "DELETE FROM hpcacct_internal.run_day" >/dev/null
    rm -f "$stamp"
    report cron
    ;;
*)
    echo "usage: $0 schedule|check DB" >&2
    exit 2
    ;;
esac
