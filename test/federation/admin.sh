#!/usr/bin/env bash
# test/federation/admin.sh: what a federation's administrator does months after the set-up, on a
# centre and two sites (alpha, beta), three clusters of their own (lib.sh): a third site (gamma)
# added to the running federation, a re-rating at the centre while a site's charges are on
# their way, the monthly regulation and the quarter opening while a site is down, an account
# closed and a user removed at the centre while the sites queue and run their jobs, and a site
# renamed and retired. After each step every database is compared with `single`, one database (in the
# centre's cluster) given the same events: balances, charges, check_submit, the reports.
# Prints TAP lines and appends "fedadmin PASSED FAILED" to $HPCACCT_TALLY when set.
set -euo pipefail

JOBS=${JOBS:-300}
passed=0 failed=0 n=0
. "$(dirname "$0")/lib.sh"
stage_traps fedadmin

for node in centre alpha beta; do start_node "$node"; done
for node in centre alpha beta; do psql "$(conninfo "$node" postgres)" -XAtq -c "CREATE DATABASE hpc"; done
psql "$(conninfo centre postgres)" -XAtq -c "CREATE DATABASE single"
for node in centre alpha beta; do q "$node" "CREATE EXTENSION hpcacct CASCADE" >/dev/null; done
q centre "CREATE EXTENSION hpcacct CASCADE" single >/dev/null
q centre "$reference_sql" >/dev/null
q centre "$reference_sql" single >/dev/null
federate centre alpha beta
for site in alpha beta; do q "$site" "SELECT create_job_table()" >/dev/null; done
q centre "SELECT create_job_table()" single >/dev/null

# site_jobs SITE FROM TO: jobs of SITE's cluster at SITE and in single
site_jobs() {
    q "$1" "$(jobs_sql "$1" "$2" "$3")" >/dev/null
    q centre "$(jobs_sql "$1" "$2" "$3")" single >/dev/null
}
# both NODE SQL: run at NODE's hpc and in single (a centre's statement)
both() { q "$1" "$2" >/dev/null; q centre "$2" single >/dev/null; }
# caught_up NODES…: wait until each holds the ledger rows of every origin the others hold
caught_up() {
    local node want ms
    want=$(q centre "SELECT count(*) FROM ledger" single)
    for node in "$@"; do
        ms=$(wait_for "$node" "SELECT count(*) FROM ledger" "$want")
        waited "$ms" "$node holds as many ledger rows as single ($want)"
    done
}
bal_sql="SELECT string_agg(format('%s:%s', a.name, balance(a.name, '2026-11-20')), ' ' ORDER BY a.name) FROM account a"
charges_sql="SELECT string_agg(format('%s/%s/%s', account, resource_id, s), ' ' ORDER BY account, resource_id)
             FROM (SELECT account, resource_id, sum(amount) s FROM ledger WHERE kind = 'charge' GROUP BY 1, 2) x"
rollup_sql="SELECT string_agg(format('%s/%s/%s', account, month, a), ' ' ORDER BY account, month)
            FROM (SELECT account, month, sum(amount) a FROM charge_rollup GROUP BY 1, 2) x"
alloc_sql="SELECT string_agg(format('%s/%s:%s/%s', a.name, c.m, s.alloc, s.status), ' ' ORDER BY a.name, c.m)
           FROM account a, (VALUES ('alpha'), ('beta')) c(m), LATERAL allocation_status(a.name, c.m, '2026-11-20') s"
check_sql="SELECT string_agg(format('%s/%s:%s', u.username, a.name, coalesce((check_submit(u.username, a.name, '2026-11-20')).reason, 'ok')), ' ' ORDER BY 1)
           FROM hpc_user u, account a"
report_sql="SELECT md5(string_agg(format('%s', r), ' ' ORDER BY r::text)) FROM usage_by_account(2026, '2026-11-28') r"
twice_sql="SELECT count(*) FROM (SELECT cluster, jobid, job_submit FROM ledger WHERE kind = 'charge' AND note IS NULL
           GROUP BY 1, 2, 3 HAVING count(*) > 1) x"
# agree STEP NODES…: every figure at each node equals single's
agree() {
    local step=$1 node what sql want; shift
    for what in bal charges rollup alloc check report; do
        sql=${what}_sql; want=$(q centre "${!sql}" single)
        for node in "$@"; do is "$(q "$node" "${!sql}")" "$want" "$step: $node = single: $what"; done
    done
    for node in "$@"; do is "$(q "$node" "$twice_sql")" "0" "$step: $node: no job charged twice"; done
}
links_sql="SELECT string_agg(format('%s/%s/%s/%s', site, direction, connected, coalesce(rows_pending::text, '-')), ' ' ORDER BY site, direction) FROM federation_status"
links() { q "$1" "$links_sql"; }

site_jobs alpha 1 "$JOBS"
site_jobs beta 1 "$JOBS"
caught_up centre alpha beta
agree "start" centre alpha beta

# ---- 1. a third site, months later ----
both centre "INSERT INTO resource (cluster, partition, node, bundle, rate, unit, exclusive)
             VALUES ('gamma', 'gpu', 'cpu=32,gres/gpu=4,mem=512G', 'gres/gpu=1,cpu=8', 2.0, 'NPL', false)"
start_node gamma
psql "$(conninfo gamma postgres)" -XAtq -c "CREATE DATABASE hpc"
q gamma "CREATE EXTENSION hpcacct CASCADE" >/dev/null
q centre "CALL federation_publish(3, 'gamma')" >/dev/null
q gamma "CALL federation_join(3, '$(conninfo centre)')" >/dev/null
q gamma "SELECT create_job_table()" >/dev/null
q centre "CALL federation_subscribe(3, '$(conninfo gamma)')" >/dev/null
caught_up gamma
is "$(q gamma "SELECT count(*) FROM ledger WHERE federation_origin(entry_id) IN (1, 2)")" \
   "$(q centre "SELECT count(*) FROM ledger WHERE federation_origin(entry_id) IN (1, 2)")" \
   "gamma, added later, holds every past charge of alpha and beta"
ms=$(wait_for gamma "SELECT string_agg(format('%s/%s/%s/%s', site, direction, connected, coalesce(tables_copying::text, '-')), ' ' ORDER BY direction) FROM federation_status" \
     "0/from/t/0 0/to/t/-")
waited "$ms" "federation_status at gamma: both links to the centre connected, no table still copying"
agree "gamma added" gamma
site_jobs gamma 1 100
caught_up centre alpha beta gamma
agree "gamma charged" centre alpha beta gamma
ms=$(wait_for centre "SELECT count(*) FROM federation_status WHERE connected AND (direction = 'from' OR rows_pending = 0)" 6)
waited "$ms" "federation_status at the centre: three sites, both links connected, nothing pending"

# ---- 2. a re-rating at the centre while beta's newest charges are on their way ----
q centre "ALTER SUBSCRIPTION hpcacct_fed_s2c_2 DISABLE" >/dev/null   # the link from beta is cut
site_jobs beta $((JOBS + 1)) $((JOBS + 40))
beta_rid=$(q centre "SELECT resource_id FROM resource WHERE cluster = 'beta'")
is "$(q centre "SELECT string_agg(format('%s/%s', site, connected), ' ') FROM federation_status WHERE site = 2 AND direction = 'from'")" \
   "2/f" "federation_status at the centre: the link from beta not connected"
q centre "SELECT rerate($beta_rid, 4.0, '2026-09-01 00:00+02')" >/dev/null 2>&1
q centre "SELECT rerate($beta_rid, 4.0, '2026-09-01 00:00+02')" single >/dev/null
q centre "ALTER SUBSCRIPTION hpcacct_fed_s2c_2 ENABLE" >/dev/null
beta_rows=$(q beta "SELECT count(*) FROM ledger WHERE federation_origin(entry_id) = 2")
ms=$(wait_for centre "SELECT count(*) FROM ledger WHERE federation_origin(entry_id) = 2" "$beta_rows")
waited "$ms" "the link from beta back: the centre holds beta's $beta_rows rows"
late=$(q beta "SELECT count(*) FROM job WHERE jobid::text IN (SELECT 'beta-' || i FROM generate_series($((JOBS + 1)), $((JOBS + 40))) i)
               AND start >= '2026-09-01 00:00+02'")
is "$(q centre "SELECT rerate_catch_up()")" "$late" "rerate_catch_up() at the centre re-rates the $late jobs beta charged at the old rate meanwhile"
is "$(q centre "SELECT rerate_catch_up()")" "0" "rerate_catch_up() again: nothing left"
is "$(sqlstate beta "SELECT hpcacct.rerate_catch_up()")" "HA013" "rerate_catch_up() at a site is refused (HA013)"
caught_up centre alpha beta gamma
is "$(q centre "SELECT format('%s/%s/%s', jobs, amount_before, amount_after) FROM rerate_log")" \
   "$(q centre "SELECT format('%s/%s/%s', jobs, amount_before, amount_after) FROM rerate_log" single)" "rerate_log: the centre's figures = single's"
agree "re-rated" centre alpha beta gamma
# the other way round: the link to beta cut, so beta charges at the rate row the centre closed
# meanwhile (a second re-rating, of the row the first made: a chain)
q beta "ALTER SUBSCRIPTION hpcacct_fed_c2s_2 DISABLE" >/dev/null
beta_rid2=$(q centre "SELECT max(resource_id) FROM resource WHERE cluster = 'beta'")
late_jobs="INSERT INTO job (cluster, jobid, account, \"user\", partition, submit, start, \"end\", alloctres, state)
           SELECT 'beta', 'late-' || i, 'p' || i, 'u1', 'gpu', t, t + interval '1 minute', t + interval '3 hours',
                  'cpu=8,gres/gpu=1', 'COMPLETED'
           FROM generate_series(1, 5) i, LATERAL (SELECT timestamptz '2026-11-01 10:00+01' + i * interval '1 day' AS t) x"
# (single: the same history as beta knew it, charged at the old row and then re-rated; charged
# after the re-rating they would be fresh charges, which can differ in the 6th decimal)
q centre "$late_jobs" single >/dev/null
q centre "SELECT rerate($beta_rid2, 5.0, '2026-10-15 00:00+02')" >/dev/null 2>&1
q centre "SELECT rerate($beta_rid2, 5.0, '2026-10-15 00:00+02')" single >/dev/null
q beta "$late_jobs" >/dev/null
q beta "ALTER SUBSCRIPTION hpcacct_fed_c2s_2 ENABLE" >/dev/null
beta_rows=$(q beta "SELECT count(*) FROM ledger WHERE federation_origin(entry_id) = 2")
ms=$(wait_for centre "SELECT count(*) FROM ledger WHERE federation_origin(entry_id) = 2" "$beta_rows")
waited "$ms" "the centre holds beta's $beta_rows rows"
is "$(q beta "SELECT count(DISTINCT jobid) FROM ledger WHERE resource_id = $beta_rid2 AND jobid LIKE 'late-%'")" "5" \
   "beta, cut off, charged its 5 November jobs at the row the centre had closed"
is "$(q centre "SELECT rerate_catch_up()")" "5" "rerate_catch_up(): those 5 jobs re-rated at the centre"
caught_up centre alpha beta gamma
is "$(q centre "SELECT string_agg(format('%s/%s/%s', jobs, amount_before, amount_after), ' ' ORDER BY rerate_id) FROM rerate_log")" \
   "$(q centre "SELECT string_agg(format('%s/%s/%s', jobs, amount_before, amount_after), ' ' ORDER BY rerate_id) FROM rerate_log" single)" \
   "rerate_log after two re-ratings: the centre's figures = single's"
agree "re-rated twice" centre alpha beta gamma
site_jobs beta $((JOBS + 46)) $((JOBS + 50))
caught_up centre alpha beta gamma
agree "beta charged at the new rate" centre beta

# ---- 3. the monthly regulation and the quarter opening while alpha is down ----
# (alpha: the machine whose accounts the monthly run regulates, threshold 1000)
q centre "ALTER SUBSCRIPTION hpcacct_fed_s2c_1 DISABLE" >/dev/null   # the link from alpha is cut
site_jobs alpha $((JOBS + 1)) $((JOBS + 70))
stop_node alpha
# (rows_pending of the link to alpha: what alpha had not reported received when it stopped, up
# to a second's rows (README, "The status view"); printed, not checked)
is "$(links centre | tr ' ' '\n' | grep '^1/' | cut -d/ -f1-3 | tr '\n' ' ')" "1/from/f 1/to/f " "federation_status at the centre: alpha down, both links not connected"
echo "# federation_status at the centre, alpha down: $(links centre | tr ' ' '\n' | grep '^1/' | tr '\n' ' ')"
is "$(sqlstate centre "CALL hpcacct.regulate('2026-11-15')")" "55000" \
   "regulate() at the centre while alpha's link is down is refused (55000): it would decide without alpha's charges"
q centre "CALL open_quarter('2026-10-01')" >/dev/null
q centre "CALL regulate('2026-11-15')" single >/dev/null
q centre "CALL open_quarter('2026-10-01')" single >/dev/null
start_node alpha
q centre "ALTER SUBSCRIPTION hpcacct_fed_s2c_1 ENABLE" >/dev/null
alpha_rows=$(q alpha "SELECT count(*) FROM ledger WHERE federation_origin(entry_id) = 1")
ms=$(wait_for centre "SELECT count(*) FROM ledger WHERE federation_origin(entry_id) = 1" "$alpha_rows")
waited "$ms" "alpha back: the centre holds alpha's $alpha_rows rows"
ms=$(wait_for centre "SELECT count(*) FROM federation_status WHERE connected AND direction = 'from'" 3)
waited "$ms" "federation_status at the centre: every link from a site connected"
q centre "CALL regulate('2026-11-15')" >/dev/null 2>&1
caught_up centre alpha beta gamma
is "$(q centre "SELECT md5(string_agg(format('%s', (account, machine, run, outcome, consumption, delta)), ' ' ORDER BY account, machine, run)) FROM regulation_log")" \
   "$(q centre "SELECT md5(string_agg(format('%s', (account, machine, run, outcome, consumption, delta)), ' ' ORDER BY account, machine, run)) FROM regulation_log" single)" \
   "regulate(): the centre's log = single's"
ql_sql="SELECT string_agg(format('%s/%s/%s/%s', account, action, target_quarter, amount), ' ' ORDER BY account, action, target_quarter) FROM quarter_log"
is "$(q centre "SELECT count(*) > 0 FROM quarter_log")" "t" "open_quarter() while alpha was down logged top-ups (the comparisons are not vacuous)"
is "$(q centre "$ql_sql")" "$(q centre "$ql_sql" single)" "open_quarter(): the centre's log = single's"
agree "regulated" centre alpha beta gamma

# ---- 4. an account closed at the centre while the sites queue and run its jobs ----
q alpha "INSERT INTO pending_job (cluster, jobid, username, account) VALUES ('alpha', 'q-p5', 'u1', 'p5')" >/dev/null
q centre "INSERT INTO pending_job (cluster, jobid, username, account) VALUES ('alpha', 'q-p5', 'u1', 'p5')" single >/dev/null
both centre "SELECT remove_member('p5', 'u' || i) FROM generate_series(0, 4) i"
ms=$(wait_for alpha "SELECT count(*) FROM membership WHERE account = 'p5'" 0)
waited "$ms" "alpha sees p5 without members"
is "$(q alpha "SELECT string_agg(reason, ',') FROM recheck_queued('2026-11-20') WHERE jobid = 'q-p5'")" \
   "$(q centre "SELECT string_agg(reason, ',') FROM recheck_queued('2026-11-20') WHERE jobid = 'q-p5'" single)" \
   "alpha's recheck of p5's queued job = single's"
# p5's job that was running ends after the close: charged all the same, once
run_job="INSERT INTO job (cluster, jobid, account, \"user\", partition, submit, start, \"end\", alloctres, state)
         VALUES ('alpha', 'run-p5', 'p5', 'u1', 'cpu', '2026-11-19 10:00+01', '2026-11-19 10:01+01', '2026-11-20 10:01+01', 'cpu=48', 'COMPLETED')"
both alpha "$run_job"
caught_up centre alpha beta gamma
agree "p5 closed" centre alpha beta gamma

# ---- 5. a user removed at the centre who still submits at a site ----
both centre "SELECT remove_member(m.account, 'u4') FROM membership m WHERE m.username = 'u4' AND m.account <> 'u4'"
ms=$(wait_for beta "SELECT count(*) FROM membership WHERE username = 'u4' AND account <> 'u4'" 0)
waited "$ms" "beta sees u4 without memberships"
is "$(q beta "SELECT coalesce((check_submit('u4', 'p1', '2026-11-20')).reason, 'ok')")" \
   "$(q centre "SELECT coalesce((check_submit('u4', 'p1', '2026-11-20')).reason, 'ok')" single)" "beta refuses u4 as single does"
q beta "INSERT INTO job (cluster, jobid, account, \"user\", partition, submit, start, \"end\", alloctres, state)
        VALUES ('beta', 'u4-late', 'p1', 'u4', 'gpu', '2026-11-20 08:00+01', '2026-11-20 08:01+01', '2026-11-20 09:01+01', 'cpu=8,gres/gpu=1', 'COMPLETED')" >/dev/null
q centre "INSERT INTO job (cluster, jobid, account, \"user\", partition, submit, start, \"end\", alloctres, state)
        VALUES ('beta', 'u4-late', 'p1', 'u4', 'gpu', '2026-11-20 08:00+01', '2026-11-20 08:01+01', '2026-11-20 09:01+01', 'cpu=8,gres/gpu=1', 'COMPLETED')" single >/dev/null
caught_up centre alpha beta gamma
agree "u4 removed" centre alpha beta gamma

# ---- 6. gamma renamed, then retired (README "Removing a site"), its charges kept ----
# (no federation_leave: the name is a label of federation_site, the links go by number)
q centre "UPDATE federation_site SET name = 'gamma_gpu' WHERE site = 3" >/dev/null
is "$(sqlstate centre "CALL hpcacct.federation_publish(3, 'gamma_gpu')")" "" "the set-up call runs again under the new name"
is "$(sqlstate centre "CALL hpcacct.federation_publish(3, 'gamma')")" "23505" "and refuses the old one (23505)"
q gamma "DROP SUBSCRIPTION hpcacct_fed_c2s_3" >/dev/null
q centre "DROP SUBSCRIPTION hpcacct_fed_s2c_3" >/dev/null
q centre "DROP PUBLICATION hpcacct_fed_c2s_3" >/dev/null
ms=$(wait_for centre "$links_sql" "1/from/t/- 1/to/t/0 2/from/t/- 2/to/t/0")
waited "$ms" "federation_status at the centre after gamma left: alpha's and beta's links only, nothing pending"
is "$(q centre "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE '%_3'")/$(q gamma "SELECT count(*) FROM pg_replication_slots")" "0/0" \
   "no slot left for gamma at the centre or at gamma"
is "$(sqlstate centre "CALL hpcacct.federation_publish(3, 'delta')")" "23505" "gamma's number is not given to a new site (23505)"
both centre "SELECT deposit('p2', '2026-10-01', 1000)"
caught_up centre alpha beta
agree "gamma retired" centre alpha beta
