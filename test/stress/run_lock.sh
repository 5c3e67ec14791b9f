# Sourced by run.sh (check): the runs that must not overlap (rollup upkeep, sacct loads, account
# syncs, quarter openings, federation resyncs) keep apart on rows that only the extension's
# owner and hpcacct_admin may lock. A login that holds advisory locks, any key, stalls none of
# them; two runs of one kind still wait for each other; a portal login cannot take their lock.
rdb=hpcacct_run_lock
createdb $rdb
rq() { psql -X -q -At -v ON_ERROR_STOP=1 -d $rdb "$@"; }
rq -c 'CREATE EXTENSION hpcacct CASCADE' -c 'SELECT hpcacct.create_job_table()' -c 'CALL hpcacct.setup_roles()' -c "
    DROP ROLE IF EXISTS hp_rl_portal; CREATE ROLE hp_rl_portal LOGIN IN ROLE hpcacct_portal;
    INSERT INTO hpcacct.setting VALUES ('timezone', 'UTC');" >/dev/null || exit 1
sqlstate_of() {  # sqlstate_of ROLE SQL...: the SQLSTATE the last statement fails with (none: ok)
    local role=$1; shift
    local out; out=$(psql -X -q -At -U "$role" -d $rdb -v ON_ERROR_STOP=1 -v VERBOSITY=verbose "$@" 2>&1 >/dev/null)
    [ -z "$out" ] && echo ok || sed -n 's/^[^:]*ERROR: *\([0-9A-Z]\{5\}\):.*/\1/p' <<<"$out" | head -1
}

# a portal login holds, for up to 60 s, the advisory lock keys the runs took before (any login may
# take any advisory lock), session and transaction level
psql -X -q -At -U hp_rl_portal -d $rdb -c "SELECT pg_advisory_lock(hashtext('hpcacct.charge_rollup')),
        pg_advisory_lock(hashtext('hpcacct.open_quarter')),
        pg_advisory_lock('hpcacct.sacct_staging'::regclass::oid::bigint),
        pg_advisory_lock('hpcacct.sacctmgr_staging'::regclass::oid::bigint),
        pg_advisory_lock(hashtext('hpcacct.federation_resync'), hashtext('hpcacct_fed_c2s_1'))" \
    -c "SELECT pg_sleep(60)" >/dev/null 2>&1 &
holder=$!
for _ in $(seq 1 50); do
    [ "$(rq -c "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
                WHERE l.locktype = 'advisory' AND l.granted AND a.usename = 'hp_rl_portal'")" = 5 ] && break
    sleep 0.1
done
for run in "SELECT hpcacct.load_sacct()" "SELECT hpcacct.sync_slurm_accounts()" "SELECT hpcacct.roll_up_pending()" \
           "SELECT hpcacct.rebuild_rollup()" "SELECT hpcacct.compact_rollup()" "CALL hpcacct.open_quarter(current_date)"; do
    state=$(sqlstate_of postgres -c "SET statement_timeout = '3s'" -c "$run")
    check "a portal login holding advisory locks does not stall $run (${state:-no SQLSTATE})" "$([ "$state" = ok ] && echo t)"
done
rq -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'hp_rl_portal'" >/dev/null
wait $holder 2>/dev/null

# two loads still keep apart: the second waits for the first (here until its lock_timeout)
rq -c "BEGIN" -c "SELECT hpcacct.load_sacct()" -c "SELECT pg_sleep(4)" -c "COMMIT" >/dev/null 2>&1 &
first=$!
sleep 1
state=$(sqlstate_of postgres -c "SET lock_timeout = '1s'" -c "SELECT hpcacct.load_sacct()")
check "a second load waits for the first, as before (lock_timeout: ${state:-no SQLSTATE})" "$([ "$state" = 55P03 ] && echo t)"
wait $first
# a portal login may not take the runs' lock
check "a portal login cannot lock the runs' rows (42501)" \
    "$([ "$(sqlstate_of hp_rl_portal -c "SELECT 1 FROM hpcacct_internal.run_lock FOR UPDATE")" = 42501 ] && echo t)"
check "nor call the function that takes them (42501)" \
    "$([ "$(sqlstate_of hp_rl_portal -c "SELECT hpcacct_internal.run_alone('load_sacct')")" = 42501 ] && echo t)"
dropdb $rdb
psql -X -q -d postgres -c "DROP ROLE IF EXISTS hp_rl_portal" >/dev/null 2>&1
