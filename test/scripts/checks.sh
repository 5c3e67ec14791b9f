# Sourced by the stress and compat drivers: `check NAME t|f` prints a TAP-like line and
# counts it; `report STAGE` appends "STAGE passed failed" to $HPCACCT_TALLY.
passed=0
failed=0
check() {
    if [ "$2" = t ]; then passed=$((passed + 1)); echo "ok - $1"; else failed=$((failed + 1)); echo "not ok - $1"; fi
}
report() {
    echo "$1 $passed $failed" >>"$HPCACCT_TALLY"
}
