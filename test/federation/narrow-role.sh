#!/usr/bin/env bash
# test/federation/narrow-role.sh: the federation's links connect with a replication role
# narrower than postgres, granted what README "Several clusters, one bank" names: LOGIN
# REPLICATION, USAGE on the schema hpcacct and SELECT on its tables. Two clusters: the centre
# (database hpc) and one holding two site databases, alpha (site 1) and beta (site 2).
#  1. alpha joins with that role both ways: the initial copy brings every reference row and
#     ledger row (row-level security must not hide any account's rows from it), and its
#     charges reach the centre.
#  2. beta joins with a role lacking SELECT: the copy fails, and the centre's federation_status
#     shows beta's rows pending (not 0) until SELECT is granted, when they arrive.
#  3. alpha's and the centre's subscriptions owned by a role that lost SUPERUSER: the apply
#     stops and says why, federation_status shows it, federation_resync(0) at alpha still copies,
#     and once the role has BYPASSRLS every row arrives once.
# Prints TAP lines and appends "fedrole PASSED FAILED" to $HPCACCT_TALLY when set.
set -euo pipefail

passed=0 failed=0 n=0
. "$(dirname "$0")/lib.sh"

stage_traps fedrole

# a connection string for role ROLE to database DB of NODE
as_role() { echo "host=$(nodedir "$1") port=5432 dbname=$2 user=$3"; }
# every row of the reference tables and ledger, as one checksum per table
tables="account hpc_user membership resource setting regulation_machine ledger"
contents() {  # contents NODE DB
    local tab out=""
    for tab in $tables; do
        out+="$tab:$(q "$1" "SELECT count(*) || '/' || md5(coalesce(string_agg(t::text, E'\n' ORDER BY t::text), '')) FROM $tab t" "$2") "
    done
    echo "$out"
}

for node in centre sites; do start_node "$node"; done
psql "$(conninfo centre postgres)" -XAtq -c "CREATE DATABASE hpc"
q centre "CREATE EXTENSION hpcacct CASCADE" >/dev/null
for db in alpha beta; do
    psql "$(conninfo sites postgres)" -XAtq -c "CREATE DATABASE $db"
    q sites "CREATE EXTENSION hpcacct CASCADE" "$db" >/dev/null
done
q centre "$reference_sql" >/dev/null
# the roles, in both clusters: hpcacct_repl as documented, hpcacct_repl_nosel without SELECT
for node in centre sites; do
    psql "$(conninfo "$node" postgres)" -XAtq -c "CREATE ROLE hpcacct_repl LOGIN REPLICATION" \
        -c "CREATE ROLE hpcacct_repl_nosel LOGIN REPLICATION"
done
grants="GRANT USAGE ON SCHEMA hpcacct TO hpcacct_repl, hpcacct_repl_nosel;
        GRANT SELECT ON ALL TABLES IN SCHEMA hpcacct TO hpcacct_repl"
q centre "$grants" >/dev/null
for db in alpha beta; do q sites "$grants" "$db" >/dev/null; done

# ---- 1. alpha, the documented grants ----
q centre "CALL federation_publish(1, 'alpha')" >/dev/null
q sites "CALL federation_join(1, '$(as_role centre hpc hpcacct_repl)')" alpha >/dev/null
q sites "SELECT create_job_table()" alpha >/dev/null
q centre "CALL federation_subscribe(1, '$(as_role sites alpha hpcacct_repl)')" >/dev/null
waited "$(wait_for sites "SELECT count(*) FROM pg_subscription_rel WHERE srsubstate <> 'r'" 0 alpha)" \
       "alpha's initial copy through hpcacct_repl completed"
is "$(contents sites alpha)" "$(contents centre hpc)" \
   "alpha holds every reference row and ledger row of the centre (none hidden by row-level security)"
q sites "$(jobs_sql alpha 1 50)" alpha >/dev/null || true  # refused when the copy missed the accounts
want=$(q sites "SELECT count(*) || '/' || sum(amount) FROM ledger WHERE federation_origin(entry_id) = 1" alpha)
is "${want%%/*}" "50" "alpha charged its 50 jobs"
waited "$(wait_for centre "SELECT count(*) || '/' || sum(amount) FROM ledger WHERE federation_origin(entry_id) = 1" "$want")" \
       "alpha's 50 charges reach the centre through hpcacct_repl"
q centre "SELECT deposit('p3', '2026-10-01', 123)" >/dev/null
waited "$(wait_for sites "SELECT count(*) FROM ledger WHERE amount = 123" 1 alpha)" "a deposit at the centre reaches alpha"
is "$(q sites "SELECT coalesce((check_submit('u1', 'p3', '2026-11-20')).reason, 'ok')" alpha)" "ok" \
   "alpha's check_submit accepts a member's job"

# ---- 2. beta, a role without SELECT ----
q centre "CALL federation_publish(2, 'beta')" >/dev/null
q sites "CALL federation_join(2, '$(as_role centre hpc hpcacct_repl_nosel)')" beta >/dev/null
q sites "SELECT create_job_table()" beta >/dev/null
q centre "CALL federation_subscribe(2, '$(as_role sites beta hpcacct_repl)')" >/dev/null
log=$(nodedir centre)/server.log
start=$(now_ms)
while ! grep -q 'permission denied for table' "$log" && [ $(( $(now_ms) - start )) -lt $((WAIT * 1000)) ]; do sleep 0.1; done
ok $(grep -q 'permission denied for table' "$log" && echo 0 || echo 1) "beta's copy fails loudly: the centre's log says permission denied"
q centre "SELECT deposit('p4', '2026-10-01', 7)" >/dev/null
# once beta has confirmed the centre's WAL, the rows it lacks still count as pending
wait_for centre "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'hpcacct_fed_c2s_2' AND confirmed_flush_lsn >= pg_current_wal_insert_lsn()" 1 >/dev/null
sleep 1.5
is "$(q sites "SELECT count(*) FROM ledger" beta)/$(q sites "SELECT count(*) FROM account" beta)" "0/0" "beta holds nothing"
is "$(q sites "SELECT connected || '/' || (tables_copying > 0) FROM federation_status WHERE direction = 'from'" beta)" "true/true" \
   "beta's federation_status: its link from the centre connected, tables still being copied"
is "$(q centre "SELECT rows_pending FROM federation_status WHERE site = 2 AND direction = 'to'")" \
   "$(q centre "SELECT count(*) FROM ledger WHERE federation_origin(entry_id) <> 2")" \
   "the centre's federation_status shows every row beta lacks as pending, not 0"
q centre "GRANT SELECT ON ALL TABLES IN SCHEMA hpcacct TO hpcacct_repl_nosel" >/dev/null
waited "$(wait_for sites "SELECT count(*) FROM pg_subscription_rel WHERE srsubstate <> 'r'" 0 beta)" \
       "once SELECT is granted, beta's copy completes"
is "$(contents sites beta)" "$(contents centre hpc)" "beta holds every reference row and ledger row of the centre"
is "$(q sites "SELECT tables_copying FROM federation_status WHERE direction = 'from'" beta)" "0" \
   "and its federation_status shows no table being copied"
waited "$(wait_for centre "SELECT rows_pending FROM federation_status WHERE site = 2 AND direction = 'to'" 0)" \
       "and the centre shows nothing pending to beta"
# ---- 3. subscriptions owned by a role that is no longer a superuser ----
# the apply worker runs with the owner's rights: it stops, loudly, and nothing is lost or doubled
for node in centre sites; do psql "$(conninfo "$node" postgres)" -XAtq -c "CREATE ROLE fedowner SUPERUSER LOGIN"; done
q centre "ALTER SUBSCRIPTION hpcacct_fed_s2c_1 OWNER TO fedowner; ALTER ROLE fedowner NOSUPERUSER" >/dev/null
q sites "ALTER SUBSCRIPTION hpcacct_fed_c2s_1 OWNER TO fedowner; ALTER ROLE fedowner NOSUPERUSER" alpha >/dev/null
owner_grants="GRANT USAGE ON SCHEMA hpcacct, hpcacct_internal TO fedowner; GRANT ALL ON ALL TABLES IN SCHEMA hpcacct TO fedowner"
q centre "$owner_grants" >/dev/null
q sites "$owner_grants; CREATE EXTENSION dblink SCHEMA public" alpha >/dev/null
q sites "$(jobs_sql alpha 51 60)" alpha >/dev/null
q centre "SELECT deposit('p5', '2026-10-01', 0.0625)" >/dev/null
sleep 3
is "$(q centre "SELECT count(*) FROM ledger WHERE federation_origin(entry_id) = 1")/$(q sites "SELECT count(*) FROM ledger WHERE kind = 'deposit' AND amount = 0.0625" alpha)" \
   "50/0" "owners without superuser nor BYPASSRLS: alpha's 10 jobs and the centre's deposit do not arrive"
ok $(grep -q 'cannot replicate into relation with row-level security enabled: "ledger"' "$log" && echo 0 || echo 1) \
   "the centre's log says why"
# (the centre's failing worker reconnects every wal_retrieve_retry_interval: for the instant of
# a retry the link shows connected, so the status is read until it shows the link down)
waited "$(wait_for sites "SELECT connected || '/' || rows_pending FROM federation_status WHERE direction = 'to'" "false/10" alpha)" \
   "alpha's federation_status: the link to the centre not connected between the retries, its 10 charges pending"
out=$(q sites "CALL federation_resync(0)" alpha 2>&1)
ok $(grep -q 'NOTICE:  hpcacct_fed_c2s_1: new slot; 1 ledger rows copied' <<<"$out" && echo 0 || echo 1) \
   "federation_resync(0) at alpha in that state copies the deposit"
for node in centre sites; do psql "$(conninfo "$node" postgres)" -XAtq -c "ALTER ROLE fedowner BYPASSRLS"; done
q centre "SELECT deposit('p5', '2026-10-01', 0.03125)" >/dev/null
want=$(q sites "SELECT count(*) || '/' || sum(amount) FROM ledger WHERE federation_origin(entry_id) = 1" alpha)
waited "$(wait_for centre "SELECT count(*) || '/' || sum(amount) FROM ledger WHERE federation_origin(entry_id) = 1" "$want")" \
       "with BYPASSRLS, alpha's 60 charges are at the centre"
waited "$(wait_for sites "SELECT count(*) FROM ledger WHERE kind = 'deposit' AND amount IN (0.0625, 0.03125)" 2 alpha)" \
       "and both deposits at alpha, once each"
is "$(contents sites alpha | sed 's/ledger:[^ ]* //')" "$(contents centre hpc | sed 's/ledger:[^ ]* //')" "alpha's reference tables equal the centre's"
is "$(q sites "SELECT count(*) || '/' || md5(string_agg(entry_id::text, ',' ORDER BY entry_id)) FROM ledger" alpha)" \
   "$(q centre "SELECT count(*) || '/' || md5(string_agg(entry_id::text, ',' ORDER BY entry_id)) FROM ledger WHERE federation_origin(entry_id) <> 2")" \
   "alpha's ledger is the centre's but beta's rows, the same ids"
for node in centre; do
    is "$(q "$node" "SELECT count(*) FROM (SELECT account, sum(amount) s FROM ledger WHERE kind = 'charge' GROUP BY 1
                     EXCEPT SELECT account, sum(amount) FROM charge_rollup GROUP BY 1) x")" "0" "$node: the charge rollup equals the ledger"
done
for node in centre sites; do
    ok $(grep -q 'duplicate key value violates unique constraint' "$(nodedir "$node")/server.log" && echo 1 || echo 0) \
       "$node: no row arrived twice (no conflict in its log)"
done
