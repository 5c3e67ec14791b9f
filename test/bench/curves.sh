#!/usr/bin/env bash
# make bench-curves: every report and scheduled procedure at several sizes of the site, each
# size in a throw-away cluster of its own (driver.sh with REFERENCES=0: the fast paths only,
# no hand-written references), then one table of median time and peak memory against size.
#
#   SIZES="1000000 3000000 10000000 10000000:5000000"   JOBS[:MONTH_JOBS] per size; MONTH_JOBS
#                 of the jobs end in the current month (default: the four sizes of issue 19)
#   RUNS=3        timed runs per case (median of the runs after a warm-up)
#   ADMIN_JOBS    jobs of the 10 000-account site of regulate() and open_quarter() (default:
#                 a third of JOBS, i.e. the site's jobs of one year, all in the regulated year)
#
# Results: test/bench/out-curves/<size>/ (each run's summary, timings and memory) and
# test/bench/out-curves/curves.txt (the table).
set -euo pipefail
cd "$(dirname "$0")/../.."

SIZES=${SIZES:-1000000 3000000 10000000 10000000:5000000}
export RUNS=${RUNS:-3} SEED=${SEED:-42}
export PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
test/scripts/install-deps.sh
make -s PG_CONFIG=$PG_CONFIG all >/dev/null
flock "$($PG_CONFIG --sharedir)/extension" make -s PG_CONFIG=$PG_CONFIG install >/dev/null

curves=test/bench/out-curves
mkdir -p "$curves"
reports='regulation_report window_quota_usage quarter_balances usage_by_resource usage_by_account usage_by_submitter usage_by_month'
for size in $SIZES; do
    jobs=${size%%:*}
    month_jobs=0
    [ "$size" != "$jobs" ] && month_jobs=${size#*:}
    label=$jobs$([ "$month_jobs" != 0 ] && echo "-month$month_jobs" || true)
    echo "[$(date +%T)] bench-curves: $jobs jobs, $month_jobs of them in the current month" >&2
    t0=$(date +%s)
    JOBS=$jobs MONTH_JOBS=$month_jobs ADMIN_JOBS=${ADMIN_JOBS:-$((jobs / 3))} REFERENCES=0 CHECK=0 EXPLAIN=0 \
        AGG_ROWS=0 MEMORY=1 MEMORY_REPORTS="$reports" BUDGET=${BUDGET:-600} \
        CASES='^(regulation_report|window_quota_usage|quarter_balances|usage_by_.*|fairshare|regulate|open_quarter|compact_rollup|memory)$' \
        test/scripts/with-cluster.sh bench test/bench/driver.sh >/dev/null
    rm -rf "${curves:?}/$label"
    cp -r test/bench/out "$curves/$label"
    echo "wall $(($(date +%s) - t0)) s" >>"$curves/$label/site.txt"
done

# One line per case and size: median of the timed runs (warm-ups left out), their spread
# (min-max), and from memory.txt the backend's peak memory (server accounting, RssAnon) and its
# CPU time per run (serial, repeated for 2 s: the figure other load on the machine changes least).
{
    printf '%-20s %-22s %10s %18s %11s %12s %11s\n' case size "median ms" "min-max ms" "CPU ms/run" "peak used MB" \
        "RssAnon MB"
    for dir in "$curves"/*/; do
        label=$(basename "$dir")
        [ -f "$dir/timings.tsv" ] || continue
        awk -F'\t' -v size="$label" -v mem="$dir/memory.txt" '
            BEGIN {
                while ((getline line < mem) > 0) {
                    nf = split(line, f, /  +/)
                    if (nf < 7) continue
                    key = f[1]; sub(/ view,.*| \(.*|, work_mem.*|,.*accounts.*/, "", key); sub(/\(\)$/, "", key)
                    used[key] = f[nf - 5]; rss[key] = f[nf - 4]; cpu[key] = f[nf - 1]
                }
            }
            $2 == "view" || $2 == "procedure" {
                if ($5 == "t") next
                n[$1]++; v[$1, n[$1]] = $4
            }
            END {
                for (g in n) {
                    m = n[g]
                    for (i = 1; i <= m; i++) a[i] = v[g, i]
                    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                    med = m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
                    key = g; if (g == "regulate_genci") key = "-"
                    printf "%-20s %-22s %10.0f %8.0f-%-9.0f %11s %12s %11s\n", g, size, med, a[1], a[m],
                           (key in cpu) ? cpu[key] : "-", (key in used) ? used[key] : "-", (key in rss) ? rss[key] : "-"
                }
            }' "$dir/timings.tsv"
    done | sort -k1,1 -k2,2V
} | tee "$curves/curves.txt"
