#!/usr/bin/env bash
# test/federation/restore.sh: a site, then the centre, restored from pg_dump into a fresh
# cluster and linked again with the calls README "Several clusters, one bank" gives for it.
#  1. alpha dumped after 100 jobs; 51 more jobs and the centre's new account, user, membership
#     and deposit reach both; alpha's WAL runs far ahead (so a fresh cluster's positions are
#     lower), then alpha is lost. Restored as alpha2 and linked again: alpha2 holds every row
#     of the centre, the same ids (its own 51 charges after the dump too), its next jobs get
#     ids the centre does not hold and reach it, nothing arrives twice. The 51 jobs its job
#     table lacks are listed in job_to_reload; loaded again, each is charged once (net), at
#     alpha2 and at the centre.
#  2. the centre dumped; a deposit there and alpha2's jobs after the dump; the centre lost,
#     restored as centre2 and linked again: centre2 holds every row alpha2 holds (its own
#     deposit after the dump too), balances agree, its next deposits reach alpha2.
# Prints TAP lines and appends "fedrestore PASSED FAILED" to $HPCACCT_TALLY when set.
set -euo pipefail

passed=0 failed=0 n=0
. "$(dirname "$0")/lib.sh"

stage_traps fedrestore

all_ids="SELECT count(*) || '/' || md5(coalesce(string_agg(entry_id::text || ':' || amount, ',' ORDER BY entry_id), '')) FROM ledger"
balances="SELECT md5(coalesce(string_agg(account || ':' || s, ',' ORDER BY account), '')) FROM (SELECT account, sum(amount) s FROM ledger GROUP BY 1) x"
rollup_ok="SELECT count(*) FROM (SELECT account, sum(amount) s FROM ledger WHERE kind = 'charge' GROUP BY 1
           EXCEPT SELECT account, sum(amount) FROM charge_rollup GROUP BY 1) x"
refs="SELECT md5(string_agg(x, '|' ORDER BY x)) FROM (
        SELECT 'a' || string_agg(t::text, ',' ORDER BY t::text) x FROM account t
        UNION ALL SELECT 'u' || string_agg(t::text, ',' ORDER BY t::text) FROM hpc_user t
        UNION ALL SELECT 'm' || string_agg(t::text, ',' ORDER BY t::text) FROM membership t) y"
# WAL written and a row after it, waited for at the receiver: the link's positions move far on
push_wal() {  # push_wal NODE RECEIVER SQL-OF-ONE-ROW CHECK
    q "$1" "CREATE TABLE public.wal_filler AS SELECT g, repeat('x', 200) AS x FROM generate_series(1, 100000) g;
            DROP TABLE public.wal_filler" >/dev/null
    q "$1" "$3" >/dev/null
    wait_for "$2" "$4" 1 >/dev/null
}
dump() { pg_dump -Fc -d "$(conninfo "$1")" -f "$base/$1.dump"; }
restore() {  # restore DUMP NODE: a fresh cluster with the dump in database hpc
    start_node "$2"
    psql "$(conninfo "$2" postgres)" -XAtq -c "CREATE DATABASE hpc"
    pg_restore --exit-on-error -d "$(conninfo "$2")" "$base/$1.dump" 2>&1 | sed 's/^/# pg_restore: /'
}
is_ok() { ok $([ "$(q "$1" "$2" 2>&1)" = "$3" ] && echo 0 || echo 1) "$4"; }

for node in centre alpha; do
    start_node "$node"
    psql "$(conninfo "$node" postgres)" -XAtq -c "CREATE DATABASE hpc"
    q "$node" "CREATE EXTENSION hpcacct CASCADE; CREATE EXTENSION dblink SCHEMA public" >/dev/null
done
q centre "$reference_sql" >/dev/null
federate centre alpha
q alpha "SELECT create_job_table()" >/dev/null
ref="SELECT (SELECT count(*) FROM ledger) || '/' || (SELECT count(*) FROM membership) || '/' || (SELECT count(*) FROM resource)"
wait_for alpha "$ref" "$(q centre "$ref")" >/dev/null
q alpha "$(jobs_sql alpha 1 100)" >/dev/null
wait_for centre "SELECT count(*) FROM ledger WHERE federation_origin(entry_id) = 1" 100 >/dev/null

# ---- 1. alpha restored ----
dump alpha
q alpha "$(jobs_sql alpha 101 150)" >/dev/null
q centre "INSERT INTO account (name) VALUES ('late'); SELECT add_user('late_user'); SELECT add_member('late', 'late_user');
          SELECT deposit('late', '2026-10-01', 5000)" >/dev/null
push_wal alpha centre "$(jobs_sql alpha 151 151)" "SELECT count(*) FROM ledger WHERE jobid = 'alpha-151'"
waited "$(wait_for alpha "$all_ids" "$(q centre "$all_ids")")" "before the loss, alpha and the centre hold the same rows"
centre_had=$(q centre "SELECT count(*) || '/' || max(entry_id) FROM ledger WHERE federation_origin(entry_id) = 1")
stop_node alpha
restore alpha alpha2
is "$(q alpha2 "SELECT count(*) FROM ledger WHERE federation_origin(entry_id) = 1")" "100" "alpha2: the dump's 100 charges of alpha"
# the README's calls for a restored site
out=$(q alpha2 "CALL federation_join(1, '$(conninfo centre)')" 2>&1)
echo "$out" | sed 's/^/# /'
ok $(grep -q 'REFRESH PUBLICATION WITH (copy_data = false)' <<<"$out" && echo 0 || echo 1) \
   "federation_join at the restored site names the refresh without a copy"
q alpha2 "ALTER SUBSCRIPTION hpcacct_fed_c2s_1 REFRESH PUBLICATION WITH (copy_data = false)" >/dev/null
# copied back while a slot here would send alpha's own rows out again: refused, nothing written
q alpha2 "SELECT pg_create_logical_replication_slot('hpcacct_fed_s2c_1', 'pgoutput')" >/dev/null
had=$(q alpha2 "$all_ids")
is "$(sqlstate alpha2 "CALL hpcacct.federation_resync(0)")" "55000" \
   "federation_resync refuses to copy alpha's own rows back while a slot of alpha2 would send them again: 55000"
is "$(q alpha2 "SELECT subenabled FROM pg_subscription WHERE subname = 'hpcacct_fed_c2s_1'")/$(q alpha2 "$all_ids")" \
   "t/$had" "and alpha2's subscription is still enabled, its ledger as it was"
q alpha2 "SELECT pg_drop_replication_slot('hpcacct_fed_s2c_1')" >/dev/null
q alpha2 "CALL federation_resync(0)" 2>&1 | sed 's/^/# /'
q centre "CALL federation_subscribe(1, '$(conninfo alpha2)')" 2>&1 | sed 's/^/# /'
q centre "CALL federation_resync(1)" 2>&1 | sed 's/^/# /'
waited "$(wait_for alpha2 "$all_ids" "$(q centre "$all_ids")")" \
       "alpha2 holds every row of the centre, the same ids (its own $centre_had charges after the dump too)"
is "$(q alpha2 "$refs")" "$(q centre "$refs")" "alpha2's accounts, users and memberships equal the centre's"
q alpha2 "$(jobs_sql alpha 152 171)" >/dev/null
is "$(q alpha2 "SELECT min(entry_id) > ${centre_had#*/} FROM ledger WHERE jobid ~ '^alpha-(15[2-9]|16[0-9]|17[01])$'")" "t" \
   "alpha2's next jobs get ids above every id of alpha's the centre holds"
waited "$(wait_for centre "$all_ids" "$(q alpha2 "$all_ids")")" "they reach the centre: it holds alpha2's rows, the same ids"
is "$(q centre "SELECT count(*) || '/' || count(DISTINCT jobid) FROM ledger WHERE federation_origin(entry_id) = 1")" "171/171" \
   "the centre holds 171 charges of alpha, one per job"
for node in centre alpha2; do is "$(q "$node" "$rollup_ok")" "0" "$node: the charge rollup equals the ledger"; done
# the jobs alpha loaded after the dump: charged, not in alpha2's job table; listed in
# job_to_reload, and loaded again they are charged once each (their charges replaced)
unloaded="SELECT count(*) FROM (SELECT l.cluster, l.jobid, l.job_submit FROM hpcacct.ledger l
           WHERE l.kind = 'charge' AND hpcacct.federation_origin(l.entry_id) = 1
             AND NOT EXISTS (SELECT 1 FROM hpcacct.job j WHERE j.cluster = l.cluster AND j.jobid = l.jobid
                                                         AND j.submit IS NOT DISTINCT FROM l.job_submit)
           GROUP BY 1, 2, 3 HAVING sum(l.amount) <> 0) x"
is "$(q alpha2 "$unloaded")" "51" "alpha2's ledger holds charges of 51 jobs (charged after the dump) that its job table lacks"
is "$(q alpha2 "SELECT count(*) || '/' || min(jobid) || '/' || max(jobid) FROM job_to_reload")" "51/alpha-101/alpha-151" \
   "federation_resync listed those 51 jobs in job_to_reload"
one_each="SELECT count(*) FILTER (WHERE n <> 1) || '/' || count(*) FROM (
            SELECT jobid, count(*) FILTER (WHERE amount > 0) - count(*) FILTER (WHERE amount < 0) AS n
            FROM ledger WHERE federation_origin(entry_id) = 1 GROUP BY jobid) x"
charged_each="SELECT md5(string_agg(jobid || ':' || s, ',' ORDER BY jobid)) FROM (
                SELECT jobid, sum(amount) s FROM ledger WHERE federation_origin(entry_id) = 1 GROUP BY jobid) x"
before=$(q alpha2 "$charged_each")
# the loader's upsert of the same rows
q alpha2 "$(jobs_sql alpha 101 151) ON CONFLICT (cluster, jobid, submit) DO UPDATE SET state = excluded.state" >/dev/null
is "$(q alpha2 "SELECT count(*) FROM job_to_reload")/$(q alpha2 "$unloaded")" "0/0" \
   "loaded again, they left job_to_reload, and every charge of alpha2 has its job row"
is "$(q alpha2 "$one_each")" "0/171" "each of the 171 jobs of alpha is charged once (net) at alpha2"
is "$(q alpha2 "$charged_each")" "$before" "and each job's charge is what it was before the reload"
q centre "SELECT deposit('p2', '2026-10-01', 0.5)" >/dev/null
waited "$(wait_for alpha2 "SELECT count(*) FROM ledger WHERE kind = 'deposit' AND amount = 0.5" 1)" "a deposit at the centre reaches alpha2"
wait_for alpha2 "SELECT rows_pending FROM federation_status WHERE direction = 'to'" 0 >/dev/null
wait_for centre "$all_ids" "$(q alpha2 "$all_ids")" >/dev/null
is "$(q centre "$one_each")/$(q centre "$charged_each")" "0/171/$before" \
   "the reversals and new charges reached the centre: each job charged once there too, the same amounts"
for node in centre alpha2; do is "$(q "$node" "$rollup_ok")" "0" "$node: the charge rollup still equals the ledger"; done

# ---- 2. the centre restored ----
dump centre
q centre "SELECT deposit('p3', '2026-10-01', 0.75)" >/dev/null
q alpha2 "$(jobs_sql alpha 172 200)" >/dev/null
push_wal centre alpha2 "SELECT deposit('p4', '2026-10-01', 0.875)" "SELECT count(*) FROM ledger WHERE kind = 'deposit' AND amount = 0.875"
waited "$(wait_for centre "$all_ids" "$(q alpha2 "$all_ids")")" "before the loss, the centre and alpha2 hold the same rows"
alpha_had=$(q alpha2 "SELECT count(*) || '/' || max(entry_id) FROM ledger WHERE federation_origin(entry_id) = 0")
stop_node centre
restore centre centre2
q centre2 "CALL federation_subscribe(1, '$(conninfo alpha2)')" 2>&1 | sed 's/^/# /'
q centre2 "ALTER SUBSCRIPTION hpcacct_fed_s2c_1 REFRESH PUBLICATION WITH (copy_data = false)" >/dev/null
q centre2 "CALL federation_resync(1)" 2>&1 | sed 's/^/# /'
q centre2 "CALL federation_publish(1, 'alpha')" 2>&1 | sed 's/^/# /'
q alpha2 "CALL federation_join(1, '$(conninfo centre2)')" 2>&1 | sed 's/^/# /'
q alpha2 "CALL federation_resync(0)" 2>&1 | sed 's/^/# /'
waited "$(wait_for centre2 "$all_ids" "$(q alpha2 "$all_ids")")" \
       "centre2 holds every row of alpha2, the same ids (the centre's own $alpha_had rows after the dump too)"
is "$(q centre2 "$balances")" "$(q alpha2 "$balances")" "every account's balance is the same at centre2 and alpha2"
q centre2 "SELECT deposit('p5', '2026-10-01', 0.9375)" >/dev/null
is "$(q centre2 "SELECT entry_id > ${alpha_had#*/} FROM ledger WHERE kind = 'deposit' AND amount = 0.9375")" "t" \
   "centre2's next deposit gets an id above every centre id alpha2 holds"
waited "$(wait_for alpha2 "$all_ids" "$(q centre2 "$all_ids")")" "it reaches alpha2: alpha2 holds centre2's rows, the same ids"
q alpha2 "$(jobs_sql alpha 201 210)" >/dev/null
waited "$(wait_for centre2 "$one_each" "0/210")" \
       "alpha2's next jobs reach centre2, each once"
for node in centre2 alpha2; do is "$(q "$node" "$rollup_ok")" "0" "$node: the charge rollup equals the ledger"; done
is "$(q centre2 "SELECT string_agg(format('%s/%s/%s/%s', site, direction, connected, coalesce(wal_status, '-')), ' ' ORDER BY direction) FROM federation_status")" \
   "1/from/t/- 1/to/t/reserved" "federation_status at centre2: both links to alpha2 connected"
# one database without federation, given the same reference data, deposits and jobs
psql "$(conninfo centre2 postgres)" -XAtq -c "CREATE DATABASE single"
q centre2 "CREATE EXTENSION hpcacct CASCADE" single >/dev/null 2>&1
q centre2 "$reference_sql
           INSERT INTO account (name) VALUES ('late'); SELECT add_user('late_user'); SELECT add_member('late', 'late_user');
           SELECT deposit('late', '2026-10-01', 5000);
           SELECT deposit(a, '2026-10-01', x) FROM (VALUES ('p2', 0.5), ('p3', 0.75), ('p4', 0.875), ('p5', 0.9375)) d(a, x);
           SELECT create_job_table();" single >/dev/null
q centre2 "$(jobs_sql alpha 1 210)" single >/dev/null
is "$(q centre2 "$balances")" "$(q centre2 "$balances" single)" \
   "every account's balance at centre2 equals that of one database given the same rows"
for node in centre alpha alpha2 centre2; do
    ok $(grep -q 'duplicate key value violates unique constraint' "$(nodedir "$node")/server.log" && echo 1 || echo 0) \
       "$node: no row arrived twice (no conflict in its log)"
done
