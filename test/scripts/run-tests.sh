#!/usr/bin/env bash
# make test: install what is missing, build, install, then run the core's unit tests (also
# under ASan + UBSan), its libFuzzer targets briefly, and pg_regress (sql/, expected/) and
# pgTAP (test/pgtap/) in a throw-away cluster, the benchmark's quick mode, and a real Slurm's
# sacct output (test/slurm/).
# Prints the diffs of failing regression tests and exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/../.."

test/scripts/install-deps.sh || exit 1
export PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
make -s PG_CONFIG=$PG_CONFIG all >/dev/null || { echo "hpcacct: build failed" >&2; exit 1; }
make -s PG_CONFIG=$PG_CONFIG install >/dev/null || { echo "hpcacct: install failed" >&2; exit 1; }

tally=$(mktemp)
trap 'rm -f "$tally"' EXIT

# --- unit tests of the core ---
unit_log=$(mktemp)
make -s PG_CONFIG=$PG_CONFIG unit 2>&1 | tee "$unit_log"
unit_passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$unit_log")
unit_failed=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$unit_log")
if [ -z "$unit_passed" ] && [ -z "$unit_failed" ]; then unit_failed=1; fi  # did not build or run
echo "unit ${unit_passed:-0} ${unit_failed:-0}" >>"$tally"
rm -f "$unit_log"

# --- the same unit tests built with AddressSanitizer (+ LeakSanitizer) and UBSan ---
# A sanitizer report aborts the run or, for a leak, fails it after the summary: either way
# one failure more than GoogleTest counted.
asan_log=$(mktemp)
make -s PG_CONFIG=$PG_CONFIG unit-asan 2>&1 | tee "$asan_log"
asan_status=${PIPESTATUS[0]}
asan_passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$asan_log")
asan_failed=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$asan_log")
if [ "$asan_status" -ne 0 ] && [ "${asan_failed:-0}" -eq 0 ]; then asan_failed=1; fi
echo "unit-asan ${asan_passed:-0} ${asan_failed:-0}" >>"$tally"
rm -f "$asan_log"

# --- libFuzzer targets of the core, a few seconds each (`make fuzz` runs them longer) ---
# One test per target: passed if it ran without a finding; a finding prints its reproducer.
fuzz_log=$(mktemp)
make -s -j"$(nproc)" PG_CONFIG=$PG_CONFIG fuzz-smoke 2>&1 | tee "$fuzz_log"
fuzz_passed=$(grep -c '^fuzz .* passed' "$fuzz_log")
fuzz_failed=$(grep -c '^fuzz .* FAILED' "$fuzz_log")
grep -q '^fuzzers: ' "$fuzz_log" || fuzz_failed=$((fuzz_failed + 1))  # did not build or run
echo "fuzz $fuzz_passed $fuzz_failed" >>"$tally"
rm -f "$fuzz_log"

# --- the install script's parts use only what they or earlier parts define ---
HPCACCT_TALLY=$tally test/compat/install_order.py || true

# --- pg_regress and pgTAP in a throw-away cluster ---
HPCACCT_TALLY=$tally test/scripts/with-cluster.sh test test/scripts/cluster-tests.sh

# --- a populated site of the previous release, its logins and pg_cron jobs in use, updated
# (test/compat/site_update.sh; a cluster of its own, whose pg_cron database is the site's) ---
HPCACCT_TALLY=$tally HPCACCT_CRON_DATABASE=hpcacct_site test/scripts/with-cluster.sh siteupdate test/compat/site_update.sh || true

# --- hpcacct-notify against a real SMTP server on 127.0.0.1 (delivery, the server down, kill -9) ---
HPCACCT_TALLY=$tally test/scripts/with-cluster.sh notify test/notify/run.sh || true

# --- the benchmark's queries on a small site: every fast path must agree with its reference
# (make bench's quick mode; timings are printed, never asserted) ---
HPCACCT_TALLY=$tally JOBS=20000 SEED=42 RUNS=1 EXPLAIN=0 MEMORY=0 \
    test/scripts/with-cluster.sh bench test/bench/driver.sh || true

# --- a real Slurm on localhost in a throw-away directory: a mix of jobs, then what sacct
# shows of them and that nothing is left behind (test/slurm/smoke.sh, about 2 minutes) ---
HPCACCT_TALLY=$tally test/slurm/smoke.sh || true

# --- hpcacct's decisions in a real Slurm on localhost (job_submit/lua, hpcacct-slurm-sync):
# a PostgreSQL cluster and a Slurm of its own, both removed after ---
HPCACCT_TALLY=$tally test/slurm/enforce.sh || true
# job_submit.lua's job_modify under Lua 5.1 alone: who may write a comment "hpcacct: ..."
HPCACCT_TALLY=$tally test/slurm/job_modify.sh || true

# --- federation: a centre and two cluster sites, three clusters of their own (test/federation) ---
HPCACCT_TALLY=$tally PG_CONFIG=$PG_CONFIG test/federation/run.sh || true
# a link whose slot was lost (max_slot_wal_keep_size), in both directions, and federation_resync()
HPCACCT_TALLY=$tally PG_CONFIG=$PG_CONFIG test/federation/lost-slot.sh || true
# the links through a replication role narrower than postgres, and one lacking SELECT
HPCACCT_TALLY=$tally PG_CONFIG=$PG_CONFIG test/federation/narrow-role.sh || true
# a site, then the centre, restored from pg_dump into a fresh cluster and linked again
HPCACCT_TALLY=$tally PG_CONFIG=$PG_CONFIG test/federation/restore.sh || true
# an administrator's months: a site added later, a re-rating and a regulation with a link down, a site retired
HPCACCT_TALLY=$tally PG_CONFIG=$PG_CONFIG test/federation/admin.sh || true

passed=$(awk '{p += $2} END {print p + 0}' "$tally")
failed=$(awk '{f += $3} END {print f + 0}' "$tally")
echo
awk '{printf "  %-8s %5d passed, %d failed\n", $1, $2, $3}' "$tally"
echo "tests: $passed passed, $failed failed"
# every stage must have reported: a stage that died silently is a failure
for stage in unit unit-asan fuzz order regress cron pgtap stress compat upgrade siteupdate reference loader sacct_session commands sync_concurrent notify bench slurm enforce jobmodify federation fedlost fedrole fedrestore fedadmin; do
    grep -q "^$stage " "$tally" || { echo "hpcacct: stage $stage did not report" >&2; exit 1; }
done
[ "$failed" -eq 0 ]
