# Sourced by run.sh (check, report): load_sacct() beside other sessions that stage lines
# (issue 14). A load that has the staging table alone reads it and truncates it; one that
# does not (another session holds uncommitted lines) or whose snapshot is older than its
# statement (REPEATABLE READ) claims lines by DELETE. Either way every committed line is
# loaded once: none lost, none loaded twice.
ldb=hpcacct_loader_race
createdb $ldb
psql -X -q -v ON_ERROR_STOP=1 -d $ldb -c 'CREATE EXTENSION hpcacct CASCADE' -c 'SELECT hpcacct.create_job_table()' -c "
    INSERT INTO hpcacct.setting VALUES ('timezone', 'UTC');
    INSERT INTO hpcacct.resource (cluster, partition, node, bundle, rate, unit)
    VALUES ('lr', 'cpu', 'cpu=32', 'cpu=1', 1, 'NPL');
    INSERT INTO hpcacct.account (name) VALUES ('p0');
    INSERT INTO hpcacct.hpc_user (username) VALUES ('u');
    INSERT INTO hpcacct.membership (account, username) VALUES ('p0', 'u');" >/dev/null || exit 1
lq() { psql -X -q -At -v ON_ERROR_STOP=1 -d $ldb "$@"; }
stage() {  # the INSERT of a staged line for job $1
    echo "INSERT INTO hpcacct.sacct_staging (lineno, cluster, jobid, account, \"user\", partition, submit, start, \"end\",
                                             alloctres, state)
          VALUES (1, 'lr', '$1', 'p0', 'u', 'cpu', '1717200000', '1717200000', '1717203600', 'cpu=2', 'COMPLETED')"
}
jobs_loaded() { lq -c "SELECT string_agg(jobid, ',' ORDER BY jobid) FROM hpcacct.job"; }
holds_staging() {  # another session holds a lock on the staging table (waits up to 5 s for it)
    for _ in $(seq 1 50); do
        [ "$(lq -c "SELECT count(*) FROM pg_locks WHERE relation = 'hpcacct.sacct_staging'::regclass AND granted")" -gt 0 ] &&
            return 0
        sleep 0.1
    done
    return 1
}

# Session B stages b1 and commits 3 s later; meanwhile A stages a1 and loads.
lq -c "BEGIN" -c "$(stage b1)" -c "SELECT pg_sleep(3)" -c "COMMIT" >/dev/null &
other=$!
holds_staging
lq -c "BEGIN" -c "$(stage a1)" -c "SELECT inserted FROM hpcacct.load_sacct()" -c "COMMIT" >"$HPCACCT_SCRATCH" 2>&1
waited=$(kill -0 $other 2>/dev/null && echo no || echo yes)
check "a load beside a session with uncommitted staged lines loads its own without waiting (inserted $(cat "$HPCACCT_SCRATCH"), waited: $waited)" \
    "$([ "$(cat "$HPCACCT_SCRATCH")" = 1 ] && [ "$waited" = no ] && [ "$(jobs_loaded)" = a1 ] && echo t)"
wait $other
check "and leaves the other session's lines, committed later, to the next load" \
    "$([ "$(lq -c "SELECT count(*) FROM hpcacct.sacct_staging")" = 1 ] &&
       [ "$(lq -c "SELECT inserted FROM hpcacct.load_sacct()")" = 1 ] && [ "$(jobs_loaded)" = a1,b1 ] &&
       [ "$(lq -c "SELECT count(*) FROM hpcacct.sacct_staging")" = 0 ] && echo t)"

# A REPEATABLE READ load whose snapshot predates d1's commit: d1 is not its to take.
lq -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT count(*) FROM hpcacct.job" -c "SELECT pg_sleep(2)" \
   -c "$(stage c1)" -c "SELECT inserted FROM hpcacct.load_sacct()" -c "COMMIT" >"$HPCACCT_SCRATCH" 2>&1 &
other=$!
sleep 0.5
lq -c "$(stage d1)"
wait $other
check "a REPEATABLE READ load takes the lines its snapshot sees (inserted $(tail -1 "$HPCACCT_SCRATCH"))" \
    "$([ "$(tail -1 "$HPCACCT_SCRATCH")" = 1 ] && [ "$(jobs_loaded)" = a1,b1,c1 ] && echo t)"
check "and leaves a line committed after its snapshot to the next load" \
    "$([ "$(lq -c "SELECT inserted FROM hpcacct.load_sacct()")" = 1 ] && [ "$(jobs_loaded)" = a1,b1,c1,d1 ] &&
       [ "$(lq -c "SELECT count(*) FROM hpcacct.sacct_staging")" = 0 ] && echo t)"

# The same run inserted by another session while the load writes: the load's plain INSERT of
# new runs waits for that session, fails on the key once it commits, and the load upserts
# instead (here re-rating: its line says the run ran 2 h, the other session's row 1 h).
# Nothing is quarantined or lost, and the ledger holds the run's charge once, at 2 h.
lq -c "BEGIN" -c "INSERT INTO hpcacct.job (cluster, jobid, account, \"user\", partition, submit, start, \"end\", alloctres, state)
                  VALUES ('lr', 'e1', 'p0', 'u', 'cpu', to_timestamp(1717200000), to_timestamp(1717200000),
                          to_timestamp(1717203600), 'cpu=2', 'COMPLETED')" \
   -c "SELECT pg_sleep(3)" -c "COMMIT" >/dev/null &
other=$!
for _ in $(seq 1 50); do
    [ "$(lq -c "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'SELECT pg_sleep(3)%'")" -gt 0 ] && break
    sleep 0.1
done
lq -c "INSERT INTO hpcacct.sacct_staging (lineno, cluster, jobid, account, \"user\", partition, submit, start, \"end\",
                                          alloctres, state)
       VALUES (1, 'lr', 'e1', 'p0', 'u', 'cpu', '1717200000', '1717200000', '1717207200', 'cpu=2', 'COMPLETED')" \
   -c "SELECT lines, quarantined FROM hpcacct.load_sacct()" >"$HPCACCT_SCRATCH" 2>&1
waited=$(kill -0 $other 2>/dev/null && echo no || echo yes)
wait $other
check "a load whose new run another session inserts meanwhile waits for it and upserts (load: $(tr '\n' ' ' <"$HPCACCT_SCRATCH"), waited: $waited)" \
    "$([ "$(cat "$HPCACCT_SCRATCH")" = '1|0' ] && [ "$waited" = yes ] &&
       [ "$(lq -c "SELECT \"end\" = to_timestamp(1717207200) FROM hpcacct.job WHERE jobid = 'e1'")" = t ] && echo t)"
check "and the run's charge is in the ledger once, for 2 h (its rows: $(lq -c "SELECT count(*) FROM hpcacct.ledger WHERE jobid = 'e1'"))" \
    "$(lq -c "SELECT sum(amount) FILTER (WHERE jobid = 'e1') = 2 * sum(amount) FILTER (WHERE jobid = 'a1')
                 AND count(*) FILTER (WHERE jobid = 'e1') = 3
                 AND NOT EXISTS (SELECT FROM hpcacct.sacct_quarantine)
                 AND NOT EXISTS (SELECT FROM hpcacct.sacct_staging)
              FROM hpcacct.ledger")"
