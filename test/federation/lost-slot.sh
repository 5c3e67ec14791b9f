#!/usr/bin/env bash
# test/federation/lost-slot.sh: a federation link whose replication slot was invalidated by
# max_slot_wal_keep_size (wal_status 'lost'), in both directions, and its recovery with
# hpcacct.federation_resync(): three clusters (centre, alpha, beta) as in run.sh, smaller.
#  1. alpha's slot that the centre reads (alpha's charges) lost while the centre's
#     subscription was disabled: charges booked meanwhile never arrive; federation_resync(1) at
#     the centre, while alpha charges from two sessions whose commits interleave out of id
#     order, brings every one of alpha's rows to the centre and beta exactly once.
#  2. the centre's slot that alpha reads lost: deposits, reference data and beta's charges
#     never arrive; federation_resync(0) at alpha, while beta charges and the centre deposits.
# Prints TAP lines and appends "fedlost PASSED FAILED" to $HPCACCT_TALLY when set.
# JOBS: jobs per site before the slots are lost (default 300; more to see what a resync costs).
set -euo pipefail

JOBS=${JOBS:-300}

passed=0 failed=0 n=0
. "$(dirname "$0")/lib.sh"
loaders=()

before_finish() {
    local pid
    for pid in "${loaders[@]}"; do kill "$pid" 2>/dev/null || true; done
}
stage_traps fedlost


# loader NODE CLUSTER TAG SECONDS: one session charging single jobs for SECONDS, each committed
# after a random pause inside its transaction (so two loaders commit out of id order)
loader() {
    psql "$(conninfo "$1")" -XAtq -v ON_ERROR_STOP=1 -c "DO \$\$
        DECLARE i integer := 0; stop timestamptz := clock_timestamp() + interval '$4 seconds';
        BEGIN
            WHILE clock_timestamp() < stop LOOP
                i := i + 1;
                INSERT INTO hpcacct.job VALUES ('$2', '$3-' || i, 'p' || (i % 12 + 1), 'u' || (i % 5),
                    CASE '$2' WHEN 'alpha' THEN 'cpu' ELSE 'gpu' END, '2026-11-19 10:00+01', '2026-11-19 10:00+01',
                    '2026-11-19 10:00+01'::timestamptz + (i % 50 + 1) * interval '1 minute',
                    (CASE '$2' WHEN 'alpha' THEN 'cpu=48' ELSE 'gres/gpu=1' END)::hpcacct.tres, 'COMPLETED');
                PERFORM pg_sleep(random() * 0.02);
                COMMIT;
            END LOOP;
        END \$\$" >/dev/null &
    loaders+=($!)
}
# deposits NODE SECONDS: the centre books small deposits, one a transaction
depositor() {
    psql "$(conninfo "$1")" -XAtq -v ON_ERROR_STOP=1 -c "DO \$\$
        DECLARE stop timestamptz := clock_timestamp() + interval '$2 seconds';
        BEGIN
            WHILE clock_timestamp() < stop LOOP
                PERFORM hpcacct.deposit('p' || (floor(random() * 12) + 1), '2026-10-01', 0.25);
                PERFORM pg_sleep(0.01);
                COMMIT;
            END LOOP;
        END \$\$" >/dev/null &
    loaders+=($!)
}
wait_loaders() { local pid; for pid in "${loaders[@]}"; do wait "$pid"; done; loaders=(); }

# ids of one origin's rows (or of all origins but one: ORIGIN negated), as one checksum
ids_of() {  # ids_of NODE CONDITION
    q "$1" "SELECT count(*) || '/' || md5(coalesce(string_agg(entry_id::text, ',' ORDER BY entry_id), '')) FROM ledger WHERE $2"
}
rollup_ok="SELECT count(*) FROM (SELECT account, sum(amount) s FROM ledger WHERE kind = 'charge' GROUP BY 1
           EXCEPT SELECT account, sum(amount) FROM charge_rollup GROUP BY 1) x"
status_of() {  # status_of NODE: site/direction/wal_status of every link
    q "$1" "SELECT string_agg(format('%s/%s/%s', site, direction, coalesce(wal_status, '-')), ' ' ORDER BY site, direction) FROM federation_status"
}
# makes the slot SLOT at NODE lost (its reader stopped) and no other: WAL past
# max_slot_wal_keep_size, a checkpoint with the limit off (active slots' restart_lsn moves on past
# it: waited for), then one with the limit on
lose_slot() {  # lose_slot NODE SLOT
    local lsn
    q "$1" "CREATE TABLE public.wal_filler AS SELECT g, repeat('x', 200) AS x FROM generate_series(1, 150000) g;
            DROP TABLE public.wal_filler" >/dev/null
    q "$1" "SELECT pg_switch_wal()" >/dev/null
    q "$1" "CHECKPOINT" >/dev/null
    lsn=$(q "$1" "SELECT pg_current_wal_lsn()")
    wait_for "$1" "SELECT count(*) FROM pg_replication_slots WHERE slot_name <> '$2' AND restart_lsn < '$lsn'" 0 >/dev/null
    q "$1" "ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'" >/dev/null
    q "$1" "SELECT pg_reload_conf()" >/dev/null
    sleep 0.3
    # no WAL switch here: the other slots' restart_lsn stays in the current segment, which a
    # limit under a segment still keeps (a switch first lost beta's active slot in one run)
    q "$1" "CHECKPOINT" >/dev/null
    q "$1" "ALTER SYSTEM RESET max_slot_wal_keep_size" >/dev/null
    q "$1" "SELECT pg_reload_conf()" >/dev/null
}

export NODE_CONF="track_commit_timestamp = on"
for node in centre alpha beta; do start_node "$node"; done
for node in centre alpha beta; do
    psql "$(conninfo "$node" postgres)" -XAtq -c "CREATE DATABASE hpc"
    q "$node" "CREATE EXTENSION hpcacct CASCADE" >/dev/null
done
q centre "$reference_sql
          INSERT INTO slurm_account_map (slurm_account, account) VALUES ('old_slurm', 'p1')" >/dev/null
federate centre alpha beta
for site in alpha beta; do q "$site" "SELECT create_job_table()" >/dev/null; done
# the sites charge once the centre's rows (accounts, resources, deposits) have arrived
ref=$(q centre "SELECT (SELECT count(*) FROM ledger) || '/' || (SELECT count(*) FROM membership) || '/' || (SELECT count(*) FROM resource)")
for site in alpha beta; do
    waited "$(wait_for "$site" "SELECT (SELECT count(*) FROM ledger) || '/' || (SELECT count(*) FROM membership) || '/' || (SELECT count(*) FROM resource)" "$ref")" \
        "$site received the centre's reference data and ledger rows"
done
q alpha "$(jobs_sql alpha 1 "$JOBS")" >/dev/null
q beta "$(jobs_sql beta 1 "$JOBS")" >/dev/null
total=$(( $(q alpha "SELECT count(*) FROM ledger WHERE federation_origin(entry_id) <> 2") \
          + $(q beta "SELECT count(*) FROM ledger WHERE federation_origin(entry_id) = 2") ))
for node in centre alpha beta; do
    waited "$(wait_for "$node" "SELECT count(*) FROM ledger" "$total")" "$node holds all $total rows after the set-up"
done

# ---- bad input: a named SQLSTATE, nothing written (the subscriptions stay enabled) ----
is "$(sqlstate centre "CALL hpcacct.federation_resync(1)")" "55000" "federation_resync without dblink: 55000"
for node in centre alpha beta; do q "$node" "CREATE EXTENSION dblink SCHEMA public" >/dev/null; done
is "$(sqlstate centre "CALL hpcacct.federation_resync(NULL)")" "22004" "federation_resync(NULL): 22004"
is "$(sqlstate centre "CALL hpcacct.federation_resync(7)")" "42704" "federation_resync of a site the centre does not publish to: 42704"
is "$(sqlstate alpha "CALL hpcacct.federation_resync(2)")" "22023" "at a site, federation_resync of another site: 22023"
is "$(sqlstate centre "BEGIN; CALL hpcacct.federation_resync(1); COMMIT")" "2D000" "federation_resync inside a transaction block: 2D000"
psql "$(conninfo centre postgres)" -XAtq -c "CREATE DATABASE loose"
q centre "CREATE EXTENSION hpcacct CASCADE; CREATE EXTENSION dblink SCHEMA public" loose >/dev/null
is "$(psql "$(conninfo centre loose)" -XAtq -v VERBOSITY=verbose -c "CALL hpcacct.federation_resync(0)" 2>&1 >/dev/null \
      | sed -n 's/^ERROR:  \([0-9A-Z]\{5\}\):.*/\1/p')" "42704" "federation_resync in a database outside any federation: 42704"
psql "$(conninfo centre postgres)" -XAtq -c "DROP DATABASE loose"
is "$(q centre "SELECT string_agg(subname || ':' || subenabled, ' ' ORDER BY subname) FROM pg_subscription")" \
   "hpcacct_fed_s2c_1:true hpcacct_fed_s2c_2:true" "after the refused calls the centre's subscriptions are still enabled"

# ---- 1. alpha -> centre: alpha's slot lost ----
q centre "ALTER SUBSCRIPTION hpcacct_fed_s2c_1 DISABLE" >/dev/null
wait_for centre "SELECT count(*) FROM pg_stat_subscription WHERE subname = 'hpcacct_fed_s2c_1' AND pid IS NOT NULL" 0 >/dev/null
centre_had=$(ids_of centre "federation_origin(entry_id) = 1")
q alpha "$(jobs_sql alpha $((JOBS + 1)) $((JOBS + 100)))" >/dev/null
lose_slot alpha hpcacct_fed_s2c_1
is "$(q alpha "SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'hpcacct_fed_s2c_1'")" "lost" \
   "alpha's slot read by the centre, its reader stopped, WAL past max_slot_wal_keep_size: wal_status lost"
is "$(status_of alpha)" "0/from/- 0/to/lost" "federation_status at alpha shows its outgoing link lost"
warning=$(psql "$(conninfo alpha)" -XAtq -c "CALL hpcacct.federation_join(1, '$(conninfo centre)')" 2>&1 >/dev/null)
ok $(grep -q 'WARNING:  the slot hpcacct_fed_s2c_1 of this site is lost' <<<"$warning" && echo 0 || echo 1) \
   "federation_join run again at alpha warns that its slot is lost (and names federation_resync at the centre)"
q alpha "$(jobs_sql alpha $((JOBS + 101)) $((JOBS + 150)))" >/dev/null
q centre "ALTER SUBSCRIPTION hpcacct_fed_s2c_1 ENABLE" >/dev/null
sleep 3
is "$(ids_of centre "federation_origin(entry_id) = 1")" "$centre_had" \
   "the centre, subscribed again, never receives the 150 jobs alpha charged meanwhile"
ok $(grep -q 'cannot read from logical replication slot "hpcacct_fed_s2c_1"' "$(nodedir alpha)/server.log" && echo 0 || echo 1) \
   "alpha's walsender refuses the lost slot"

# the recovery at the centre, while alpha charges from two sessions
loader alpha alpha rsa 8
loader alpha alpha rsb 8
sleep 1.5
before=$(q alpha "SELECT clock_timestamp()")
t0=$(now_ms)
out=$(psql "$(conninfo centre)" -XAtq -v ON_ERROR_STOP=1 -c "CALL hpcacct.federation_resync(1)" 2>&1)
echo "# federation_resync(1) at the centre took $(( $(now_ms) - t0 )) ms"
after=$(q alpha "SELECT clock_timestamp()")
echo "$out" | sed 's/^/# /'
ok $(grep -q 'NOTICE:  hpcacct_fed_s2c_1: new slot; [0-9]* ledger rows copied' <<<"$out" && echo 0 || echo 1) "federation_resync(1) at the centre"
wait_loaders
during=$(q alpha "SELECT count(*) FROM ledger WHERE jobid ~ '^rs[ab]-' AND pg_xact_commit_timestamp(xmin) BETWEEN '$before' AND '$after'")
ok $([ "$during" -gt 0 ] && echo 0 || echo 1) "alpha charged $during jobs while the recovery ran"
# commit timestamps (track_commit_timestamp): some job committed after one with a higher id
out_of_order=$(q alpha "SELECT count(*) FROM (SELECT entry_id, max(entry_id) OVER (ORDER BY pg_xact_commit_timestamp(xmin), entry_id
                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) m FROM ledger WHERE jobid ~ '^rs[ab]-'
                        AND pg_xact_commit_timestamp(xmin) BETWEEN '$before' AND '$after') x WHERE entry_id < m")
ok $([ "$out_of_order" -gt 0 ] && echo 0 || echo 1) "$out_of_order of those committed after one with a higher id"
want=$(ids_of alpha "federation_origin(entry_id) = 1")
for node in centre beta; do
    waited "$(wait_for "$node" "SELECT count(*) || '/' || md5(coalesce(string_agg(entry_id::text, ',' ORDER BY entry_id), '')) FROM ledger WHERE federation_origin(entry_id) = 1" "$want")" \
        "$node holds every one of alpha's ${want%%/*} rows, the same ids"
done
is "$(status_of alpha)" "0/from/- 0/to/reserved" "federation_status at alpha: its outgoing link's new slot is reserved"
is "$(q centre "SELECT connected FROM federation_status WHERE site = 1 AND direction = 'from'")" "t" "the centre's link from alpha is connected again"
q alpha "$(jobs_sql alpha $((JOBS + 201)) $((JOBS + 210)))" >/dev/null
want=$(ids_of alpha "federation_origin(entry_id) = 1")
for node in centre beta; do
    waited "$(wait_for "$node" "SELECT count(*) || '/' || md5(coalesce(string_agg(entry_id::text, ',' ORDER BY entry_id), '')) FROM ledger WHERE federation_origin(entry_id) = 1" "$want")" \
        "replication runs on: alpha's next 10 jobs reach $node"
done
for node in centre beta; do
    is "$(q "$node" "$rollup_ok")" "0" "$node: the charge rollup equals the ledger's charges (copied rows rolled up once)"
done
waited "$(wait_for alpha "SELECT rows_pending FROM federation_status WHERE direction = 'to'" 0)" \
       "federation_status at alpha: nothing pending to the centre"

# ---- 2. centre -> alpha: the centre's slot for alpha lost ----
q alpha "ALTER SUBSCRIPTION hpcacct_fed_c2s_1 DISABLE" >/dev/null
wait_for alpha "SELECT count(*) FROM pg_stat_subscription WHERE subname = 'hpcacct_fed_c2s_1' AND pid IS NOT NULL" 0 >/dev/null
alpha_had=$(ids_of alpha "federation_origin(entry_id) <> 1")
q centre "INSERT INTO account (name) VALUES ('newacct'); SELECT add_user('newbie'); SELECT add_member('newacct', 'newbie');
          SELECT deposit('newacct', '2026-10-01', 1000); DELETE FROM slurm_account_map WHERE slurm_account = 'old_slurm';
          UPDATE regulation_machine SET monthly_threshold = 2000 WHERE machine = 'alpha'" >/dev/null
q beta "$(jobs_sql beta $((JOBS + 1)) $((JOBS + 100)))" >/dev/null
lose_slot centre hpcacct_fed_c2s_1
is "$(status_of centre)" "1/from/- 1/to/lost 2/from/- 2/to/reserved" \
   "federation_status at the centre: alpha's incoming slot lost, beta's not"
q centre "SELECT deposit('p1', '2026-10-01', 77)" >/dev/null
q alpha "ALTER SUBSCRIPTION hpcacct_fed_c2s_1 ENABLE" >/dev/null
sleep 3
is "$(ids_of alpha "federation_origin(entry_id) <> 1")/$(q alpha "SELECT count(*) FROM account WHERE name = 'newacct'")" "$alpha_had/0" \
   "alpha, subscribed again, never receives the deposits, the new account or beta's charges"
newcheck="SELECT coalesce((check_submit('newbie', 'newacct', '2026-11-20')).reason, 'ok')"
is "$(q alpha "$newcheck")" "unknown_account" "alpha refuses the new account meanwhile"

loader beta beta rsc 7
loader beta beta rsd 7
depositor centre 7
sleep 1.5
before=$(q centre "SELECT clock_timestamp()")
t0=$(now_ms)
out=$(psql "$(conninfo alpha)" -XAtq -v ON_ERROR_STOP=1 -c "CALL hpcacct.federation_resync(0)" 2>&1)
echo "# federation_resync(0) at alpha took $(( $(now_ms) - t0 )) ms"
after=$(q centre "SELECT clock_timestamp()")
echo "$out" | sed 's/^/# /'
ok $(grep -q 'NOTICE:  hpcacct_fed_c2s_1: new slot; [0-9]* ledger rows copied' <<<"$out" && echo 0 || echo 1) "federation_resync(0) at alpha"
wait_loaders
during=$(( $(q beta "SELECT count(*) FROM ledger WHERE jobid ~ '^rs[cd]-' AND pg_xact_commit_timestamp(xmin) BETWEEN '$before' AND '$after'") \
         + $(q centre "SELECT count(*) FROM ledger WHERE kind = 'deposit' AND amount = 0.25 AND pg_xact_commit_timestamp(xmin) BETWEEN '$before' AND '$after'") ))
ok $([ "$during" -gt 0 ] && echo 0 || echo 1) "beta charged and the centre deposited $during rows while the recovery ran"
want=$(ids_of centre "federation_origin(entry_id) <> 1")
waited "$(wait_for alpha "SELECT count(*) || '/' || md5(coalesce(string_agg(entry_id::text, ',' ORDER BY entry_id), '')) FROM ledger WHERE federation_origin(entry_id) <> 1" "$want")" \
    "alpha holds every row of the centre and beta, ${want%%/*}, the same ids"
for tab in account hpc_user membership resource setting regulation_machine slurm_account_map; do
    sql="SELECT md5(coalesce(string_agg(t::text, E'\n' ORDER BY t::text), '')) FROM $tab t"
    is "$(q alpha "$sql")" "$(q centre "$sql")" "alpha's $tab equals the centre's"
done
is "$(q alpha "$newcheck")" "ok" "alpha accepts the new account"
is "$(q alpha "$rollup_ok")" "0" "alpha: the charge rollup equals the ledger's charges"
is "$(status_of centre)" "1/from/- 1/to/reserved 2/from/- 2/to/reserved" "federation_status at the centre: alpha's slot reserved again"
q centre "SELECT deposit('p2', '2026-10-01', 0.125)" >/dev/null
waited "$(wait_for alpha "SELECT count(*) FROM ledger WHERE amount = 0.125" 1)" "replication runs on: the next deposit reaches alpha"
waited "$(wait_for centre "SELECT rows_pending FROM federation_status WHERE site = 1 AND direction = 'to'" 0)" \
       "federation_status at the centre: nothing pending to alpha"
# a sender with a ledger column the receiver lacks (updated first): refused before anything is
# written (copied, the rows would lose that column's values)
q centre "ALTER TABLE ledger ADD COLUMN resync_probe text" >/dev/null
is "$(sqlstate alpha "CALL hpcacct.federation_resync(0)")" "55000" \
   "federation_resync from a sender with a ledger column this database lacks: 55000"
is "$(q alpha "SELECT subenabled FROM pg_subscription WHERE subname = 'hpcacct_fed_c2s_1'")" "t" \
   "and alpha's subscription is still enabled"
q centre "ALTER TABLE ledger DROP COLUMN resync_probe" >/dev/null
# a sender that cannot be reached: 08001, nothing written
q alpha "ALTER SUBSCRIPTION hpcacct_fed_c2s_1 CONNECTION 'host=$(nodedir centre)/nowhere port=5432 dbname=hpc user=postgres'" >/dev/null
is "$(sqlstate alpha "CALL hpcacct.federation_resync(0)")" "08001" "federation_resync with the sender out of reach: 08001"
is "$(q alpha "SELECT subenabled FROM pg_subscription WHERE subname = 'hpcacct_fed_c2s_1'")" "t" \
   "and alpha's subscription is still enabled"
q alpha "ALTER SUBSCRIPTION hpcacct_fed_c2s_1 CONNECTION '$(conninfo centre)'" >/dev/null
q centre "SELECT deposit('p2', '2026-10-01', 0.0625)" >/dev/null
waited "$(wait_for alpha "SELECT count(*) FROM ledger WHERE amount = 0.0625" 1)" "and the centre's rows still reach alpha"
# one resync of a link at a time: another live session holding the link's lease makes it 55006
psql "$(conninfo centre)" -XAtq -c "INSERT INTO hpcacct_internal.run_lock VALUES ('federation_resync hpcacct_fed_s2c_2', pg_backend_pid(), now())
                                    ON CONFLICT (name) DO UPDATE SET holder_pid = excluded.holder_pid, holder_since = excluded.holder_since" \
     -c "SELECT pg_sleep(20) /* fedlost-lock-holder */" >/dev/null 2>&1 &
holder=$!
wait_for centre "SELECT count(*) FROM hpcacct_internal.run_lock WHERE holder_pid IS NOT NULL" 1 >/dev/null
is "$(sqlstate centre "CALL hpcacct.federation_resync(2)")" "55006" "federation_resync while another runs for the same link: 55006"
is "$(q centre "SELECT subenabled FROM pg_subscription WHERE subname = 'hpcacct_fed_s2c_2'")" "t" \
   "and the centre's subscription to beta is still enabled"
kill "$holder" 2>/dev/null || true
q centre "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%fedlost-lock-holder%' AND pid <> pg_backend_pid()" >/dev/null
wait "$holder" 2>/dev/null || true
# that session gone, its lease is taken over; a login holding the advisory key the resync used
# before does not stop it either
psql "$(conninfo centre)" -XAtq -c "SELECT pg_advisory_lock(hashtext('hpcacct.federation_resync'), hashtext('hpcacct_fed_s2c_2'))" \
     -c "SELECT pg_sleep(30) /* fedlost-advisory-holder */" >/dev/null 2>&1 &
holder=$!
wait_for centre "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted" 1 >/dev/null
# a link that was not lost: a resync copies nothing and the link runs on
out=$(psql "$(conninfo centre)" -XAtq -v ON_ERROR_STOP=1 -c "CALL hpcacct.federation_resync(2)" 2>&1)
ok $(grep -q 'NOTICE:  hpcacct_fed_s2c_2: new slot; 0 ledger rows copied' <<<"$out" && echo 0 || echo 1) \
   "federation_resync(2) at the centre, beta's link not lost: nothing to copy (the lease of a session gone taken over, an advisory lock on the old key held)"
is "$(q centre "SELECT count(*) FROM hpcacct_internal.run_lock WHERE holder_pid IS NOT NULL")" "0" "the resync left no lease behind"
kill "$holder" 2>/dev/null || true
q centre "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%fedlost-advisory-holder%' AND pid <> pg_backend_pid()" >/dev/null
wait "$holder" 2>/dev/null || true
q beta "$(jobs_sql beta $((JOBS + 301)) $((JOBS + 305)))" >/dev/null
want=$(ids_of beta "federation_origin(entry_id) = 2")
for node in centre alpha; do
    waited "$(wait_for "$node" "SELECT count(*) || '/' || md5(coalesce(string_agg(entry_id::text, ',' ORDER BY entry_id), '')) FROM ledger WHERE federation_origin(entry_id) = 2" "$want")" \
        "and beta's next jobs reach $node"
done
for node in centre alpha beta; do
    ok $(grep -q 'duplicate key value violates unique constraint' "$(nodedir "$node")/server.log" && echo 1 || echo 0) \
       "$node: no row arrived twice (no conflict in its log)"
done
