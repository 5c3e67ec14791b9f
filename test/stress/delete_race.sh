# Sourced by run.sh (check, report): an account or a resource deleted while jobs are being
# charged to it (issue 19). The ledger's foreign keys check new rows once per statement
# (ledger_check_references); whatever the interleaving and the deleter's isolation level, no
# ledger row may point nowhere, and the session that loses gets a clear SQLSTATE.
rdb=hpcacct_race
createdb $rdb
psql -X -q -v ON_ERROR_STOP=1 -d $rdb -c 'CREATE EXTENSION hpcacct CASCADE' -c 'SELECT hpcacct.create_job_table()' -c "
    INSERT INTO hpcacct.setting VALUES ('timezone', 'UTC');
    INSERT INTO hpcacct.resource (cluster, partition, node, bundle, rate, unit)
    VALUES ('race', 'cpu', 'cpu=32', 'cpu=1', 1, 'NPL');
    INSERT INTO hpcacct.account (name) VALUES ('p0');" >/dev/null || exit 1
race_out=$(mktemp -d)
orphans() {
    psql -X -At -d $rdb -c "SELECT count(*) FROM hpcacct.ledger l
        WHERE NOT EXISTS (SELECT 1 FROM hpcacct.account a WHERE a.name = l.account)
           OR (l.resource_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM hpcacct.resource r WHERE r.resource_id = l.resource_id))"
}
sqlstate_of() { grep -o 'ERROR:  [0-9A-Z]\{5\}' "$1" | head -1 | cut -c9-; }  # psql with VERBOSITY=sqlstate
session() { psql -X -q -v VERBOSITY=sqlstate -d $rdb "$@"; }
# loader N ACCOUNT PARTITION HOLD: charges 50 jobs in one statement, holds its transaction open HOLD seconds
loader() {
    session -c "BEGIN" -c "INSERT INTO hpcacct.job (cluster, jobid, account, \"user\", partition, start, \"end\", alloctres)
                           SELECT 'race', '$1-' || i, '$2', 'u', '$3', '2024-06-01 00:00+00', '2024-06-01 01:00+00', 'cpu=2'
                           FROM generate_series(1, 50) i" -c "SELECT pg_sleep($4)" -c "COMMIT"
}

# One interleaving: TARGET account|resource, ORDER load|delete (which goes first and holds
# its transaction open), ISOLATION of the deleter; stale: the repeatable-read deleter takes
# its snapshot before the load and deletes after the load has committed (no lock to wait for).
n=0
for target in account resource; do
    for order in load delete stale; do
        for isolation in 'READ COMMITTED' 'REPEATABLE READ'; do
            [ $order = stale ] && [ "$isolation" = 'READ COMMITTED' ] && continue
            n=$((n + 1))
            if [ $target = account ]; then
                account=a$n partition=cpu
                session -c "INSERT INTO hpcacct.account (name) VALUES ('$account')" >/dev/null
                delete="DELETE FROM hpcacct.account WHERE name = '$account'"
                present="SELECT count(*) FROM hpcacct.account WHERE name = '$account'"
            else
                account=p0 partition=r$n
                session -c "INSERT INTO hpcacct.resource (cluster, partition, node, bundle, rate, unit)
                            VALUES ('race', '$partition', 'cpu=32', 'cpu=1', 1, 'NPL')" >/dev/null
                delete="DELETE FROM hpcacct.resource WHERE cluster = 'race' AND partition = '$partition'"
                present="SELECT count(*) FROM hpcacct.resource WHERE cluster = 'race' AND partition = '$partition'"
            fi
            case $order in
                load)   # the load holds its charges uncommitted; the delete comes meanwhile
                    loader $n $account $partition 1.5 >"$race_out/load" 2>&1 &
                    sleep 0.5
                    session -c "BEGIN ISOLATION LEVEL $isolation" -c "SELECT count(*) FROM hpcacct.ledger" -c "$delete" \
                        -c "COMMIT" >"$race_out/delete" 2>&1
                    wait ;;
                delete) # the delete holds uncommitted; the load comes meanwhile
                    session -c "BEGIN ISOLATION LEVEL $isolation" -c "SELECT count(*) FROM hpcacct.ledger" -c "$delete" \
                        -c "SELECT pg_sleep(1.5)" -c "COMMIT" >"$race_out/delete" 2>&1 &
                    sleep 0.5
                    loader $n $account $partition 0 >"$race_out/load" 2>&1
                    wait ;;
                stale)  # snapshot first, the load commits, then the delete
                    session -c "BEGIN ISOLATION LEVEL $isolation" -c "SELECT count(*) FROM hpcacct.ledger" \
                        -c "SELECT pg_sleep(1.5)" -c "$delete" -c "COMMIT" >"$race_out/delete" 2>&1 &
                    sleep 0.5
                    loader $n $account $partition 0 >"$race_out/load" 2>&1
                    wait ;;
            esac
            load_state=$(sqlstate_of "$race_out/load") delete_state=$(sqlstate_of "$race_out/delete")
            charged=$(psql -X -At -d $rdb -c "SELECT count(*) FROM hpcacct.ledger WHERE jobid LIKE '$n-%'")
            kept=$(psql -X -At -d $rdb -c "$present")
            # exactly one wins: charged and kept (the delete failed), or deleted and nothing charged
            case "$kept/$charged/${load_state:-ok}/${delete_state:-ok}" in
                1/50/ok/23503 | 1/50/ok/40001 | 0/0/23503/ok | 0/0/40001/ok | 0/0/42704/ok) outcome=t ;;
                *) outcome=f ;;
            esac
            check "$target deleted during a load ($order first, deleter ${isolation,,}): kept=$kept, $charged charges, load ${load_state:-ok}, delete ${delete_state:-ok}; $(orphans) orphans" \
                "$([ $outcome = t ] && [ "$(orphans)" = 0 ] && echo t)"
        done
    done
done

# Free interleavings: 40 rounds of a load and a delete of a fresh account started together,
# each after a random pause of up to 50 ms, the deleter alternating between the levels.
for round in $(seq 1 40); do
    account=f$round
    session -c "INSERT INTO hpcacct.account (name) VALUES ('$account')" >/dev/null
    isolation=$([ $((round % 2)) = 0 ] && echo 'REPEATABLE READ' || echo 'READ COMMITTED')
    session -c "SELECT pg_sleep(random() * 0.05)" -c "BEGIN" \
        -c "INSERT INTO hpcacct.job (cluster, jobid, account, \"user\", partition, start, \"end\", alloctres)
            SELECT 'race', 'f$round-' || i, '$account', 'u', 'cpu', '2024-06-01 00:00+00', '2024-06-01 01:00+00', 'cpu=2'
            FROM generate_series(1, 2000) i" -c "COMMIT" >"$race_out/load.$round" 2>&1 &
    session -c "BEGIN ISOLATION LEVEL $isolation" -c "SELECT pg_sleep(random() * 0.05)" \
        -c "DELETE FROM hpcacct.account WHERE name = '$account'" -c "COMMIT" >"$race_out/delete.$round" 2>&1
    wait
done
states=$(for f in "$race_out"/load.* "$race_out"/delete.*; do sqlstate_of "$f"; done | sort | uniq -c | tr -s ' \n' ' ')
unclear=$(for f in "$race_out"/load.* "$race_out"/delete.*; do sqlstate_of "$f"; done | grep -cvE '^(23503|40001|42704)$')
split=$(psql -X -At -d $rdb -c "SELECT count(*) FROM generate_series(1, 40) r
    WHERE (SELECT count(*) FROM hpcacct.ledger WHERE jobid LIKE 'f' || r || '-%')
          <> CASE WHEN EXISTS (SELECT 1 FROM hpcacct.account WHERE name = 'f' || r) THEN 2000 ELSE 0 END")
check "40 free races of a load and an account delete: $(orphans) orphans, $split rounds half done, errors:${states:- none}" \
    "$([ "$(orphans)" = 0 ] && [ "$split" = 0 ] && [ "$unclear" = 0 ] && echo t)"
rm -rf "$race_out"
