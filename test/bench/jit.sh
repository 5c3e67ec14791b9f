#!/usr/bin/env bash
# jit.sh: CPU time per call of each report and scheduled procedure with jit = on and jit =
# off side by side, on a site driver.sh has built and holds (HOLD=1; PGHOST etc. set as it
# logs). Each measurement is a fresh backend: one call as a warm-up, then CALLS calls between
# two readings of the backend's own CPU time (utime + stime, /proc/self/stat); procedures run
# in a transaction rolled back. The settings alternate within each round.
#
#   ROUNDS=3 CALLS=3 SETTINGS="on off" CASES=. test/bench/jit.sh
#
# Prints "case setting round ms_per_call"; the summary lines (min-max per case and setting)
# go to stderr.
set -euo pipefail
cd "$(dirname "$0")"
ROUNDS=${ROUNDS:-3}
CALLS=${CALLS:-3}
SETTINGS=${SETTINGS:-on off}
CASES=${CASES:-.}
export PGTZ=UTC PGOPTIONS='-c client_min_messages=warning'
main=hpcacct_bench admin=hpcacct_admin
value() { psql -X -q -At -v ON_ERROR_STOP=1 "$@"; }
regulation_day=$(value -d $admin -c 'SELECT regulation_day FROM bench.site')
quarter=$(value -d $admin -c 'SELECT quarter FROM bench.site')
# an account with a bank (balance()) and 200 submit checks from the bench's sample
bank_account=$(value -d $main -c "SELECT account FROM hpcacct.ledger WHERE kind = 'deposit' ORDER BY account LIMIT 1")
submits=$(value -d $main -c 'SELECT count(*) FROM bench.submit_sample')

# name|database|rolled back|SQL of one call
cases() {
    local r
    for r in regulation_report window_quota_usage quarter_balances usage_by_resource usage_by_account \
             usage_by_submitter usage_by_month; do
        echo "$r|$main|f|SELECT * FROM hpcacct.$r"
    done
    echo "fairshare|$main|f|SELECT * FROM hpcacct.fairshare()"
    echo "regulate|$admin|t|CALL hpcacct.regulate('$regulation_day')"
    echo "open_quarter|$admin|t|CALL hpcacct.open_quarter('$quarter')"
    echo "compact_rollup|$main|t|SELECT hpcacct.compact_rollup()"
    # 100 calls of the per-job functions count as one "call" of these cases
    echo "check_submit x100|$main|f|SELECT c.* FROM bench.submit_sample s, LATERAL hpcacct.check_submit(s.username, s.account, s.at) c WHERE s.i = %I%"
    echo "balance x100|$main|f|SELECT hpcacct.balance('$bank_account')"
}

measure() {  # name db rollback sql setting -> ms per call
    local name=$1 db=$2 rollback=$3 sql=$4 setting=$5 n=1 k
    case $name in *x100) n=100 ;; esac
    one() {  # the SQL of one call (a case x100: n statements)
        for k in $(seq 1 "$n"); do
            local s=${sql//%I%/$(((RANDOM * 32768 + RANDOM) % submits + 1))}
            if [ "$rollback" = t ]; then echo "BEGIN; $s; ROLLBACK;"; else echo "$s;"; fi
        done
    }
    {
        echo "SET jit = $setting;"
        echo "CREATE FUNCTION pg_temp.cpu_ms() RETURNS float8 LANGUAGE sql AS \$\$
                  SELECT (split_part(s, ' ', 12)::float8 + split_part(s, ' ', 13)::float8) * 1000 / 100
                  FROM (SELECT split_part(pg_read_file('/proc/self/stat'), ') ', 2) AS s) x \$\$;"
        echo '\o /dev/null'
        one
        echo '\o'
        echo 'SELECT pg_temp.cpu_ms() AS c0 \gset'
        echo '\o /dev/null'
        for c in $(seq 1 "$CALLS"); do one; done
        echo '\o'
        echo "SELECT round(((pg_temp.cpu_ms() - :c0) / $CALLS)::numeric, 0);"
    } | value -d "$db" -f -
}

[ "$(getconf CLK_TCK)" = 100 ] || { echo "jit.sh: CLK_TCK is not 100" >&2; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for round in $(seq 1 "$ROUNDS"); do
    while IFS='|' read -r name db rollback sql; do
        echo "$name" | grep -Eq -- "$CASES" || continue
        for setting in $SETTINGS; do
            printf '%s\t%s\t%s\t%s\n' "$name" "$setting" "$round" "$(measure "$name" "$db" "$rollback" "$sql" "$setting")" |
                tee -a "$out"
        done
    done < <(cases)
done
awk -F'\t' '{ k = $1 "\t" $2; if (!(k in lo) || $4 < lo[k]) lo[k] = $4; if ($4 > hi[k]) hi[k] = $4; v[k] = v[k] " " $4 }
            END { for (k in lo) printf "%s\t%s-%s\t(%s )\n", k, lo[k], hi[k], v[k] }' "$out" | sort >&2
