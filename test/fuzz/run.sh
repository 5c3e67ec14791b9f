#!/usr/bin/env bash
# run.sh SECONDS TARGET...: runs each libFuzzer target built in test/fuzz/build/ for SECONDS,
# starting from its seed corpus test/fuzz/corpus/TARGET/ (left untouched) and the inputs earlier
# runs found (test/fuzz/build/corpus/TARGET/, where new ones go).
# Prints one line per target ("fuzz TARGET passed ..." or "fuzz TARGET FAILED ..." with the path
# of the reproducer and the end of the sanitizer report), then "fuzzers: P passed, F failed";
# exits non-zero if any target failed.
# Replay a reproducer with: test/fuzz/build/TARGET PATH
set -uo pipefail
cd "$(dirname "$0")/../.."

seconds=$1
shift
build=test/fuzz/build
passed=0
failed=0
for target in "$@"; do
    binary=$build/$target
    seeds=test/fuzz/corpus/$target
    work=$build/corpus/$target
    crashes=$build/crashes/$target
    log=$build/logs/$target.log
    mkdir -p "$work" "$crashes" "$(dirname "$log")" "$seeds"
    start=$(date +%s)
    # -timeout: one input taking longer is a finding; -rss_limit_mb: so is a memory blow-up.
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "$binary" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
        -print_final_stats=1 -artifact_prefix="$crashes/" "$work" "$seeds" >"$log" 2>&1
    status=$?
    elapsed=$(( $(date +%s) - start ))
    runs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)
    if [ "$status" -eq 0 ]; then
        echo "fuzz $target passed: ${runs:-?} inputs in ${elapsed}s, corpus $(ls "$work" | wc -l) + $(ls "$seeds" | wc -l) seeds"
        passed=$((passed + 1))
    else
        reproducer=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
        echo "fuzz $target FAILED (exit $status) after ${elapsed}s; reproducer: ${reproducer:-none}; log: $log"
        grep -E -A1 "ERROR|SUMMARY|property violated|runtime error|terminate called|what\(\)" "$log" | grep -v "^--$" | head -n 20 | sed "s/^/    /"
        echo "    replay: $binary ${reproducer:-}"
        failed=$((failed + 1))
    fi
done
echo "fuzzers: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
