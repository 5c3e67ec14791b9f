#!/usr/bin/env bash
# test/slurm/sacct_session.sh: `hpcacct-sacct run` sets the watermark to its run's time whatever
# the session's TimeZone and DateStyle (PGTZ, PGDATESTYLE): a non-ISO DateStyle writes zone
# abbreviations that read back as other zones (IST of Asia/Kolkata as Israel's, CST of
# Asia/Shanghai and CDT of America/Havana as the US ones). No Slurm: sacctmgr and sacct are stand-ins in a mktemp dir
# that print a known cluster and an empty job list. Runs inside with-cluster.sh (PGHOST...).
# TAP lines; appends "sacct_session PASSED FAILED" to $HPCACCT_TALLY.
set -uo pipefail
cd "$(dirname "$0")/../.."
. test/scripts/checks.sh

bindir=$("${PG_CONFIG:-pg_config}" --bindir)
fake=$(mktemp -d "${TMPDIR:-/tmp}/hpcacct-sacct-session.XXXXXX")
trap 'rm -rf "$fake"' EXIT
cat >"$fake/sacctmgr" <<'SH'
#!/bin/sh
echo tzc
SH
cat >"$fake/sacct" <<'SH'
#!/bin/sh
printf 'Cluster\037JobID\037JobIDRaw\037Account\037User\037Partition\037Submit\037Start\037End\037ElapsedRaw\037AllocTRES\037ReqTRES\037State\037QOS\037NodeList\n'
SH
chmod +x "$fake/sacctmgr" "$fake/sacct"

db=hpcacct_sacct_session
createdb "$db"
psql -q -X -v ON_ERROR_STOP=1 -d "$db" -c 'CREATE EXTENSION hpcacct CASCADE' -c 'SELECT hpcacct.create_job_table()' >/dev/null

for session in 'Asia/Kolkata|SQL, DMY' 'America/Havana|Postgres' 'Asia/Shanghai|German'; do
    zone=${session%|*} style=${session#*|}
    psql -q -X -d "$db" -c 'TRUNCATE hpcacct.sacct_watermark'
    out=$(PATH="$fake:$PATH" PGTZ=$zone PGDATESTYLE=$style "$bindir/hpcacct-sacct" -d "$db" run -M tzc --since 2024-01-01T00:00:00 2>&1)
    status=$?
    check "run in a session of $zone, DateStyle $style, succeeds" "$([ $status -eq 0 ] && echo t || echo f)"
    [ $status -eq 0 ] || echo "# $out"
    # within a minute of now: an hour (Havana) or three and a half (Kolkata) is a zone misread
    gap=$(psql -X -A -t -d "$db" -c "SELECT extract(epoch FROM abs_gap) FROM (SELECT greatest(now() - loaded_through, loaded_through - now()) AS abs_gap FROM hpcacct.sacct_watermark WHERE cluster = 'tzc') g")
    check "its watermark is the run's time ($zone, $style: ${gap:-none} s away)" \
        "$([ -n "$gap" ] && awk -v g="$gap" 'BEGIN { exit !(g < 60) }' && echo t || echo f)"
done

# Two runs of one job id a day apart, loaded in a session whose PGOPTIONS print float8 with one
# digit (extra_float_digits -15: both submit epochs 2e+09, one key), days in German and
# intervals in the SQL standard's style: both are charged, and the report is a default session's.
psql -q -X -d "$db" -c 'TRUNCATE hpcacct.sacct_watermark' -c "INSERT INTO hpcacct.account (name) VALUES ('tzacct')" \
     -c "INSERT INTO hpcacct.resource (cluster, partition, node, bundle, rate, unit) VALUES ('tzc', 'cpu', 'cpu=24', 'cpu=1', 1, 'core-hours')"
cat >"$fake/sacct" <<'SH'
#!/bin/sh
printf 'Cluster\037JobID\037JobIDRaw\037Account\037User\037Partition\037Submit\037Start\037End\037ElapsedRaw\037AllocTRES\037ReqTRES\037State\037QOS\037NodeList\n'
printf 'tzc\037900\037900\037tzacct\037u1\037cpu\0371709251200\0371709251200\0371709254800\0373600\037cpu=1\037cpu=1\037COMPLETED\037normal\037n1\n'
printf 'tzc\037900\037900\037tzacct\037u1\037cpu\0371709337600\0371709337600\0371709344800\0377200\037cpu=1\037cpu=1\037COMPLETED\037normal\037n1\n'
SH
out=$(PATH="$fake:$PATH" PGOPTIONS='-c extra_float_digits=-15 -c DateStyle=German -c IntervalStyle=sql_standard' \
      "$bindir/hpcacct-sacct" -d "$db" run -M tzc --since 2024-03-01T00:00:00 2>&1)
grep -q ' lines=2 inserted=2 ' <<<"$out"
check "two runs of one job id, loaded under PGOPTIONS extra_float_digits=-15: both inserted" "$([ $? -eq 0 ] && echo t || echo f)"
[ "$(grep -c . <<<"$out")" -eq 1 ] || echo "# $out"
charged=$(psql -X -A -t -d "$db" -c "SELECT count(*) FROM hpcacct.ledger WHERE cluster = 'tzc' AND jobid = '900' AND kind = 'charge'")
check "and both charged ($charged charges)" "$([ "$charged" = 2 ] && echo t || echo f)"

dropdb "$db"
report sacct_session
