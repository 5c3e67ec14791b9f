#!/usr/bin/env bash
# test/federation/run.sh: three PostgreSQL clusters on this machine — a centre and two cluster
# sites (alpha, beta) — federated with hpcacct.federation_publish / _join / _subscribe, each in
# a fresh mktemp directory of its own (Unix socket in that directory, no TCP), stopped and
# removed at the end. A fourth database, `single`, in the centre's cluster, is loaded with the
# same jobs without federation: the reference every figure is compared with.
# Prints TAP lines and appends "federation PASSED FAILED" to $HPCACCT_TALLY when set.
# Needs hpcacct installed in PG_CONFIG's PostgreSQL. JOBS (per site, default 3000).
set -euo pipefail

JOBS=${JOBS:-3000}
nodes=(centre alpha beta)
passed=0 failed=0 n=0
. "$(dirname "$0")/lib.sh"

update_script=
before_finish() {
    if [ -n "$update_script" ]; then rm -f "$update_script"; fi
}
stage_traps federation

for node in "${nodes[@]}"; do start_node "$node"; done
for node in "${nodes[@]}"; do psql "$(conninfo "$node" postgres)" -XAtq -c "CREATE DATABASE hpc"; done
psql "$(conninfo centre postgres)" -XAtq -c "CREATE DATABASE single"
for node in "${nodes[@]}"; do q "$node" "CREATE EXTENSION hpcacct CASCADE" >/dev/null; done
q centre "CREATE EXTENSION hpcacct CASCADE" single >/dev/null

q centre "$reference_sql" >/dev/null
q centre "$reference_sql" single >/dev/null

# ---- joining: bad input first ----
is "$(sqlstate centre "CALL hpcacct.federation_publish(0, 'alpha')")" "22023" "federation_publish: site 0 is the centre's (22023)"
is "$(sqlstate centre "CALL hpcacct.federation_publish(1, 'Alpha!')")" "22023" "federation_publish: a bad site name (22023)"
is "$(sqlstate centre "CALL hpcacct.federation_publish(NULL, 'alpha')")" "22004" "federation_publish: a NULL site (22004)"
is "$(sqlstate alpha "CALL hpcacct.federation_subscribe(1, 'host=/nonexistent')")" "42704" \
   "federation_subscribe on a database that did not publish to the site (42704)"
q beta "INSERT INTO hpcacct.account (name) VALUES ('local')" >/dev/null
is "$(sqlstate beta "CALL hpcacct.federation_join(2, '$(conninfo centre)')")" "HA012" \
   "federation_join refuses a site holding reference data of its own (HA012)"
q beta "DELETE FROM hpcacct.account" >/dev/null
is "$(sqlstate centre "BEGIN; CALL hpcacct.federation_publish(1, 'alpha'); COMMIT")" "2D000" \
   "federation_publish inside a transaction block fails with 2D000 (it commits between steps)"

psql "$(conninfo centre postgres)" -XAtq -c "CREATE DATABASE stray"
q centre "CREATE EXTENSION hpcacct CASCADE; INSERT INTO account (name) VALUES ('a');
          INSERT INTO ledger (entry_id, account, kind, amount, unit, valid_from, valid_until)
          OVERRIDING SYSTEM VALUE VALUES (2^48 + 5, 'a', 'deposit', 1, 'NPL', '2026-10-01', '2026-12-31')" stray >/dev/null 2>&1
is "$(psql "$(conninfo centre stray)" -XAtq -v VERBOSITY=verbose -c "CALL hpcacct.federation_publish(1, 'alpha')" 2>&1 >/dev/null \
      | sed -n 's/^ERROR:  \([0-9A-Z]\{5\}\):.*/\1/p')" "HA011" \
   "a database whose ledger holds ids of another site's range cannot become the centre (HA011)"
psql "$(conninfo centre postgres)" -XAtq -c "DROP DATABASE stray WITH (FORCE)"

# ---- set-up: the three calls per site ----
q centre "CALL federation_publish(1, 'alpha')" >/dev/null
q centre "CALL federation_publish(2, 'beta')" >/dev/null
q centre "CALL federation_publish(1, 'alpha')" >/dev/null   # idempotent
is "$(sqlstate centre "CALL hpcacct.federation_publish(3, 'alpha')")" "23505" "federation_publish: a name taken by another site (23505)"
q alpha "CALL federation_join(1, '$(conninfo centre)')" >/dev/null
q beta "CALL federation_join(2, '$(conninfo centre)')" >/dev/null
q alpha "CALL federation_join(1, '$(conninfo centre)')" >/dev/null  # idempotent
# joining again while workers write setting and ledger rows (the first join's table sync does,
# and its rollup rebuild then locks the ledger): a second join alters no trigger, so it waits
# for no such lock (it used to, and deadlocked with the sync now and then)
psql "$(conninfo alpha)" -XAtq -c "BEGIN" -c "LOCK TABLE hpcacct.setting, hpcacct.ledger IN ROW EXCLUSIVE MODE" \
     -c "SELECT pg_sleep(30) /* fed-lock-holder */" >/dev/null 2>&1 &
holder=$!
wait_for alpha "SELECT count(*) FROM pg_locks WHERE mode = 'RowExclusiveLock'
                AND relation IN ('hpcacct.setting'::regclass, 'hpcacct.ledger'::regclass)" 2 >/dev/null
is "$(PGOPTIONS='-c lock_timeout=3s' sqlstate alpha "CALL hpcacct.federation_join(1, '$(conninfo centre)')")" "" \
   "federation_join again while rows are written to setting and the ledger: no lock wait"
q alpha "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query LIKE '%fed-lock-holder%' AND pid <> pg_backend_pid()" >/dev/null
wait "$holder" || true
is "$(sqlstate alpha "CALL hpcacct.federation_join(2, '$(conninfo centre)')")" "HA010" "a site cannot join again under another number (HA010)"
q centre "CALL federation_subscribe(1, '$(conninfo alpha)')" >/dev/null
q centre "CALL federation_subscribe(2, '$(conninfo beta)')" >/dev/null
q centre "CALL federation_subscribe(2, '$(conninfo beta)')" >/dev/null  # idempotent
is "$(sqlstate alpha "SELECT hpcacct.add_user('newcomer')")" "HA013" "a site refuses to write reference data of its own (HA013)"
is "$(sqlstate beta "INSERT INTO hpcacct.setting VALUES ('bank_unit', 'CHF')")" "HA013" "a site refuses to change a setting (HA013)"
# a site's ledger rows reach the centre's bank: a site's own administrators book none there
q alpha "CALL setup_roles(); CREATE ROLE fed_site_staff IN ROLE hpcacct_admin" >/dev/null
is "$(sqlstate alpha "SET ROLE fed_site_staff; INSERT INTO hpcacct.ledger (account, kind, amount, unit, valid_from, valid_until)
                      VALUES ('p1', 'deposit', 1000000, 'NPL', '2026-10-01', '2026-12-31')")" "HA013" \
   "a site's administrator cannot book a deposit there (HA013)"
is "$(sqlstate alpha "SET ROLE fed_site_staff; INSERT INTO hpcacct.ledger (account, kind, amount, unit, cluster, jobid)
                      VALUES ('p1', 'charge', -1000000, 'NPL', 'alpha', 'credit')")" "HA013" \
   "nor a charge of their own making (a negative one is a credit) (HA013)"
for site in alpha beta; do q "$site" "SELECT create_job_table()" >/dev/null; done
q centre "SELECT create_job_table()" single >/dev/null

expected_ref=$(q centre "SELECT count(*) FROM ledger")
for site in alpha beta; do
    ms=$(wait_for "$site" "SELECT count(*) FROM ledger" "$expected_ref")
    ok $([ "$ms" -ge 0 ] && echo 0 || echo 1) "$site received the centre's $expected_ref ledger rows (deposits, grants, allotments)"
done
is "$(q alpha "SELECT count(*) FROM account")" "$(q centre "SELECT count(*) FROM account")" "alpha received the accounts"
is "$(q beta "SELECT string_agg(value, ',') FROM setting")" "Europe/Berlin" "beta received the settings"
is "$(q alpha "SELECT nextval(pg_get_serial_sequence('hpcacct.ledger', 'entry_id')) = 2^48")" "t" \
   "alpha numbers its ledger from 2^48"
is "$(q beta "SELECT federation_origin(nextval(pg_get_serial_sequence('hpcacct.ledger', 'entry_id')))")" "2" "beta's ids are site 2's"

# ---- jobs at both sites, the same in `single` ----
half=$((JOBS / 2))
for range in "1 $half" "$((half + 1)) $JOBS"; do
    set -- $range
    q alpha "$(jobs_sql alpha "$1" "$2")" >/dev/null
    q beta "$(jobs_sql beta "$1" "$2")" >/dev/null
    q centre "$(jobs_sql alpha "$1" "$2")" single >/dev/null
    q centre "$(jobs_sql beta "$1" "$2")" single >/dev/null
done
# a re-rated and a deleted job: reversals flow like charges
for db in alpha:hpc beta:hpc centre:single; do
    q "${db%%:*}" "UPDATE job SET \"end\" = \"end\" + interval '1 hour' WHERE jobid IN ('alpha-7', 'beta-7');
                   DELETE FROM job WHERE jobid IN ('alpha-8', 'beta-8')" "${db#*:}" >/dev/null
done
total=$(q centre "SELECT count(*) FROM ledger" single)
for node in centre alpha beta; do
    ms=$(wait_for "$node" "SELECT count(*) FROM ledger" "$total")
    ok $([ "$ms" -ge 0 ] && echo 0 || echo 1) "$node holds all $total ledger rows of both sites and the centre (waited $ms ms)"
done
is "$(q centre "SELECT count(*) FROM ledger WHERE kind = 'charge'")" "$((2 * JOBS + 6))" \
   "the centre holds each job's charge once ($((2 * JOBS)) jobs, 2 re-rated, 2 deleted)"
is "$(q centre "SELECT count(*) FROM (SELECT cluster, jobid FROM ledger WHERE kind = 'charge' GROUP BY 1, 2 HAVING sum(amount) <> 0 AND count(*) NOT IN (1, 3)) x")" "0" \
   "no job is charged twice at the centre"

compare() {  # compare DESCRIPTION SQL: the centre (and both sites when ALL=1) against `single`
    local want; want=$(q centre "$2" single)
    is "$(q centre "$2")" "$want" "centre = single: $1"
    if [ "${ALL:-0}" = 1 ]; then
        is "$(q alpha "$2")" "$want" "alpha = single: $1"
        is "$(q beta "$2")" "$want" "beta = single: $1"
    fi
}
ALL=1 compare "charges per account and resource" \
    "SELECT string_agg(format('%s/%s/%s', account, resource_id, s), ' ' ORDER BY account, resource_id) FROM (SELECT account, resource_id, sum(amount) s FROM ledger WHERE kind = 'charge' GROUP BY 1, 2) x"
ALL=1 compare "the ledger, row by row (ids and booking times aside)" \
    "SELECT md5(string_agg(format('%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s', account, kind, amount, unit, resource_id, cluster, jobid, submitter, job_start, job_end, valid_from), E'\n' ORDER BY account, kind, cluster, jobid, amount, valid_from)) FROM ledger"
ALL=1 compare "the charge rollup's sums per account and month" \
    "SELECT string_agg(format('%s/%s/%s/%s', account, month, a, j), ' ' ORDER BY account, month) FROM (SELECT account, month, sum(amount) a, sum(job_amount) j FROM charge_rollup GROUP BY 1, 2) x"
ALL=1 compare "quarter balances" \
    "SELECT string_agg(format('%s', b), ' ' ORDER BY b::text) FROM quarter_balances b"
ALL=1 compare "balance() of every account, to the cent" \
    "SELECT string_agg(format('%s=%s', name, balance(name, '2026-11-20')), ' ' ORDER BY name) FROM account"
ALL=1 compare "check_submit of every user and account" \
    "SELECT string_agg(format('%s/%s:%s', u.username, a.name, (check_submit(u.username, a.name, '2026-11-20')).reason), ' ' ORDER BY 1) FROM hpc_user u, account a"
compare "usage_by_account" "SELECT string_agg(format('%s', r), E'\n' ORDER BY r::text) FROM usage_by_account(2026, '2026-11-21 12:00+01') r"
compare "usage_by_resource" "SELECT string_agg(format('%s', r), E'\n' ORDER BY r::text) FROM usage_by_resource(2026, '2026-11-21 12:00+01') r"
compare "usage_by_submitter" "SELECT string_agg(format('%s', r), E'\n' ORDER BY r::text) FROM usage_by_submitter(2026, '2026-11-21 12:00+01') r"
compare "usage_by_month" "SELECT md5(string_agg(format('%s', r), E'\n' ORDER BY r::text)) FROM usage_by_month(2026, '2026-11-21 12:00+01') r"
compare "the regulation report" "SELECT md5(string_agg(format('%s', r), E'\n' ORDER BY r::text)) FROM regulation_report r"
q centre "CALL regulate('2026-11-15')" >/dev/null
q centre "CALL regulate('2026-11-15')" single >/dev/null
compare "regulate('2026-11-15'): its log" \
    "SELECT string_agg(format('%s|%s|%s|%s|%s|%s|%s|%s', run, account, machine, outcome, alloc, round(consumption::numeric, 6), round(tc::numeric, 6), retracted), E'\n' ORDER BY account, machine) FROM regulation_log"
compare "regulate('2026-11-15'): the retractions it booked" \
    "SELECT coalesce(string_agg(format('%s/%s/%s', account, pool, amount), ' ' ORDER BY account, pool), 'none') FROM ledger WHERE kind = 'retraction'"
is "$(q centre "SELECT count(*) > 0 FROM ledger WHERE kind = 'retraction'")" "t" "regulate() booked retractions (the comparison is not vacuous)"
retractions=$(q centre "SELECT string_agg(format('%s/%s/%s', account, pool, amount), ' ' ORDER BY account, pool) FROM ledger WHERE kind = 'retraction'")
for site in alpha beta; do
    ms=$(wait_for "$site" "SELECT string_agg(format('%s/%s/%s', account, pool, amount), ' ' ORDER BY account, pool) FROM ledger WHERE kind = 'retraction'" "$retractions")
    ok $([ "$ms" -ge 0 ] && echo 0 || echo 1) "$site received regulate()'s retractions"
done
ALL=1 compare "allocation_status() after regulate(): the retractions count at every site" \
    "SELECT string_agg(format('%s/%s:%s/%s', a.name, c.m, s.alloc, s.status), ' ' ORDER BY a.name, c.m) FROM account a, (VALUES ('alpha'), ('beta')) c(m), LATERAL allocation_status(a.name, c.m, '2026-11-20') s"
ALL=1 compare "check_submit of every user and account after regulate()" \
    "SELECT string_agg(format('%s/%s:%s', u.username, a.name, (check_submit(u.username, a.name, '2026-11-20')).reason), ' ' ORDER BY 1) FROM hpc_user u, account a"

status=$(q centre "SELECT string_agg(format('%s/%s/%s', site, direction, connected), ' ' ORDER BY site, direction) FROM federation_status")
is "$status" "1/from/t 1/to/t 2/from/t 2/to/t" "federation_status at the centre: both sites, both directions, connected"
is "$(q centre "SELECT last_entry_id FROM federation_status WHERE site = 2 AND direction = 'from'")" \
   "$(q beta "SELECT max(entry_id) FROM ledger WHERE federation_origin(entry_id) = 2")" \
   "federation_status: the last row received from beta is beta's last"
is "$(q alpha "SELECT string_agg(format('%s/%s', site, direction), ' ' ORDER BY site, direction) FROM federation_status")" "0/from 0/to" \
   "federation_status at alpha: from the centre, to the centre (site 0 at both)"
# rows pending: counted by the sender, from what its receivers report they received
pending="SELECT string_agg(format('%s/%s:%s', site, direction, coalesce(rows_pending::text, '-')), ' ' ORDER BY site, direction) FROM federation_status"
ms=$(wait_for centre "$pending" "1/from:- 1/to:0 2/from:- 2/to:0")
ok $([ "$ms" -ge 0 ] && echo 0 || echo 1) "federation_status at the centre: no rows pending to either site once they hold every row ($ms ms)"
for site in alpha beta; do
    ms=$(wait_for "$site" "$pending" "0/from:- 0/to:0")
    ok $([ "$ms" -ge 0 ] && echo 0 || echo 1) "federation_status at $site: none of its rows pending once the centre reported them ($ms ms)"
done
reports="SELECT string_agg(format('%s<%s', receiver, origin), ' ' ORDER BY receiver, origin) FROM federation_received"
is "$(q centre "$reports")" "0<1 0<2 1<0 1<2 2<0 2<1" \
   "the centre holds its own reports of rows received and both sites' (receiver<origin)"
is "$(q alpha "$reports")/$(q beta "$reports")" "0<1 1<0 1<2/0<2 2<0 2<1" \
   "a site holds its own reports and the centre's report about its rows only (nothing loops back)"

# ---- one account spending at both sites: the combined balance refuses at both ----
# 'shared' gets 100 NPL this quarter; a job of 60 at alpha, then one of 60 at beta
q centre "SELECT deposit('shared', '2026-10-01', 100)" >/dev/null
refused="SELECT (check_submit('u0', 'shared', '2026-11-20')).reason"
for site in alpha beta; do wait_for "$site" "$refused" "" >/dev/null; done
is "$(q alpha "$refused")$(q beta "$refused")" "" "'shared' may submit at both sites after its deposit"
shared_job() {  # shared_job CLUSTER ID HOURS: a job of the given hours' charge on 'shared'
    if [ "$1" = alpha ]; then  # 48 cores exclusive: 1 NPL per hour
        echo "INSERT INTO job VALUES ('alpha', '$2', 'shared', 'u0', 'cpu', '2026-11-19 10:00+01', '2026-11-19 10:00+01', '2026-11-19 10:00+01'::timestamptz + $3 * interval '1 hour', 'cpu=48', 'COMPLETED')"
    else  # one GPU: 3 NPL per hour
        echo "INSERT INTO job VALUES ('beta', '$2', 'shared', 'u0', 'gpu', '2026-11-19 10:00+01', '2026-11-19 10:00+01', '2026-11-19 10:00+01'::timestamptz + $3 * interval '1 hour' / 3, 'gres/gpu=1', 'COMPLETED')"
    fi
}
q alpha "$(shared_job alpha s1 60)" >/dev/null
wait_for beta "SELECT balance('shared', '2026-11-20')" "40.000000" >/dev/null
is "$(q alpha "$refused")/$(q beta "$refused")" "/" "60 of 100 spent at alpha: both sites still accept"
q beta "$(shared_job beta s2 60)" >/dev/null
is "$(q beta "$refused")" "negative_balance" "beta refuses at once: its own charge and alpha's make -20"
ms=$(wait_for alpha "$refused" "negative_balance")
ok $([ "$ms" -ge 0 ] && echo 0 || echo 1) "alpha refuses 'shared' once beta's charge arrives, after $ms ms"
echo "# lag beta -> centre -> alpha for check_submit: $ms ms"
is "$(q centre "SELECT balance('shared', '2026-11-20')")" "-20.000000" "the centre's balance of 'shared' is -20"

# the lag of single charges, site to site through the centre, measured 10 times
lags=()
for i in $(seq 1 10); do
    before=$(q beta "SELECT count(*) FROM ledger WHERE jobid LIKE 'lag-%'")
    q alpha "$(shared_job alpha "lag-$i" 0.001)" >/dev/null
    lags+=("$(wait_for beta "SELECT count(*) FROM ledger WHERE jobid LIKE 'lag-%'" "$((before + 1))")")
done
sorted=$(printf '%s\n' "${lags[@]}" | sort -n)
echo "# lag alpha -> centre -> beta, 10 single jobs (ms): $(echo $sorted)"
ok $([ "$(head -1 <<<"$sorted")" -ge 0 ] && [ "$(tail -1 <<<"$sorted")" -lt 5000 ] && echo 0 || echo 1) \
   "every single job reached the other site within 5 s (max $(tail -1 <<<"$sorted") ms)"

# ---- a deposit at the centre reaches both sites' checks ----
q centre "SELECT deposit('shared', '2026-10-01', 50)" >/dev/null
for site in alpha beta; do
    ms=$(wait_for "$site" "$refused" "")
    ok $([ "$ms" -ge 0 ] && echo 0 || echo 1) "a deposit at the centre lets $site accept 'shared' again ($ms ms)"
done

# ---- a retraction booked at the centre reaches both sites' checks ----
# p1 holds GENCI grants on both machines (its check follows them): retracting what is left of
# both makes it allocation_exhausted at each site; supplements of as much open it again
p1_check="SELECT coalesce((check_submit('u1', 'p1', '2026-11-20')).reason, 'ok')"
is "$(q alpha "$p1_check")/$(q beta "$p1_check")" "ok/ok" "p1 may submit at both sites before the retraction"
left="SELECT m.c, s.alloc FROM (VALUES ('alpha'), ('beta')) m(c), LATERAL allocation_status('p1', m.c, '2026-11-20') s"
q centre "INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until, note)
          SELECT 'p1', 'retraction', -x.alloc, 'NPL', x.c, '2026-01-01', '2026-12-31', 'federation test' FROM ($left) x" >/dev/null
for site in alpha beta; do
    ms=$(wait_for "$site" "$p1_check" "allocation_exhausted")
    ok $([ "$ms" -ge 0 ] && echo 0 || echo 1) "a retraction at the centre makes $site refuse p1 as allocation_exhausted ($ms ms)"
done
q centre "INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until, note)
          SELECT 'p1', 'supplement', -l.amount, 'NPL', l.pool, '2026-01-01', '2026-12-31', 'federation test'
          FROM ledger l WHERE l.account = 'p1' AND l.kind = 'retraction' AND l.note = 'federation test'" >/dev/null
for site in alpha beta; do wait_for "$site" "$p1_check" "ok" >/dev/null; done
is "$(q alpha "$p1_check")/$(q beta "$p1_check")" "ok/ok" "supplements of as much let both sites accept p1 again"

# ---- a site stopped while the other charges, then restarted ----
# A receiver reports at most once a second: rows received less than a second after its last
# report are reported with the next ones. So that the count below is exact, a row of each
# origin a second later, and a wait until beta has reported them.
sleep 1.1
q alpha "$(shared_job alpha fresh-1 0.001)" >/dev/null
q centre "SELECT deposit('shared', '2026-10-01', 0.001)" >/dev/null
reported_all="SELECT count(*) FROM federation_received p
              WHERE p.last_entry_id = (SELECT max(l.entry_id) FROM ledger l WHERE federation_origin(l.entry_id) = p.origin)"
ms=$(wait_for centre "$reported_all AND p.receiver = 2 AND p.origin IN (0, 1)" 2)
ok $([ "$ms" -ge 0 ] && echo 0 || echo 1) "the centre has beta's reports of the last rows of both origins it receives ($ms ms)"
beta_had=$(q beta "SELECT count(*) FROM ledger")
stop_node beta
q alpha "$(jobs_sql alpha $((JOBS + 1)) $((JOBS + 500)))" >/dev/null
q centre "$(jobs_sql alpha $((JOBS + 1)) $((JOBS + 500)))" single >/dev/null
is "$(q alpha "SELECT (check_submit('u1', 'p1', '2026-11-20')).ok")" "t" "alpha charges and checks while beta is down"
expect=$(q alpha "SELECT count(*) FROM ledger")
wait_for centre "SELECT count(*) FROM ledger" "$expect" >/dev/null
is "$(q centre "SELECT format('%s/%s', connected, rows_pending) FROM federation_status WHERE site = 2 AND direction = 'to'")" \
   "f/$((expect - beta_had))" "federation_status at the centre: beta not connected, the $((expect - beta_had)) rows it lacks pending"
ms=$(wait_for centre "SELECT rows_pending FROM federation_status WHERE site = 1 AND direction = 'to'" 0)
ok $([ "$ms" -ge 0 ] && echo 0 || echo 1) "federation_status at the centre: nothing pending to alpha meanwhile"
start_node beta
ms=$(wait_for beta "SELECT count(*) FROM ledger" "$expect")
ok $([ "$ms" -ge 0 ] && echo 0 || echo 1) "beta, restarted, catches up with the $expect rows ($ms ms)"
ms=$(wait_for centre "SELECT rows_pending FROM federation_status WHERE site = 2 AND direction = 'to'" 0)
ok $([ "$ms" -ge 0 ] && echo 0 || echo 1) "federation_status at the centre: nothing pending to beta once it caught up ($ms ms after)"
is "$(q beta "SELECT count(*) - count(DISTINCT (cluster, jobid, amount)) FROM ledger WHERE kind = 'charge' AND jobid NOT IN ('alpha-7', 'beta-7')")" "0" \
   "beta holds no charge twice"

# ---- the centre stopped while both sites charge and check ----
sleep 1.1
q alpha "$(shared_job alpha fresh-2 0.001)" >/dev/null
q beta "$(shared_job beta fresh-3 0.001)" >/dev/null
ms=$(wait_for alpha "$reported_all AND p.receiver = 0 AND p.origin = 1" 1)
ms2=$(wait_for beta "$reported_all AND p.receiver = 0 AND p.origin = 2" 1)
ok $([ "$ms" -ge 0 ] && [ "$ms2" -ge 0 ] && echo 0 || echo 1) "both sites have the centre's report of their last row ($ms, $ms2 ms)"
stop_node centre
q alpha "$(jobs_sql alpha $((JOBS + 501)) $((JOBS + 800)))" >/dev/null
q beta "$(jobs_sql beta $((JOBS + 1)) $((JOBS + 300)))" >/dev/null
is "$(q alpha "SELECT format('%s/%s', connected, rows_pending) FROM federation_status WHERE direction = 'to'")/$(q beta "SELECT rows_pending FROM federation_status WHERE direction = 'to'")" \
   "f/300/300" "federation_status at both sites while the centre is down: not connected, the 300 charges each booked pending"
is "$(q alpha "SELECT (check_submit('u2', 'p3', '2026-11-20')).ok")/$(q beta "SELECT (check_submit('u2', 'p3', '2026-11-20')).ok")" "t/t" \
   "both sites charge and answer check_submit while the centre is down"
q beta "$(shared_job beta s3 120)" >/dev/null
is "$(q beta "$refused")" "negative_balance" "beta refuses 'shared' on its own charges while the centre is down"
start_node centre
q centre "$(jobs_sql alpha $((JOBS + 501)) $((JOBS + 800)))" single >/dev/null
q centre "$(jobs_sql beta $((JOBS + 1)) $((JOBS + 300)))" single >/dev/null
# every row there is: alpha's and the centre's (at alpha) and beta's own (at beta), none of
# which can change while the sites wait for each other's
expect=$(( $(q alpha "SELECT count(*) FROM ledger WHERE federation_origin(entry_id) <> 2") \
           + $(q beta "SELECT count(*) FROM ledger WHERE federation_origin(entry_id) = 2") ))
for node in centre alpha beta; do
    ms=$(wait_for "$node" "SELECT count(*) FROM ledger" "$expect")
    ok $([ "$ms" -ge 0 ] && echo 0 || echo 1) "after the centre's restart $node holds all $expect rows ($ms ms)"
done
ms=$(wait_for alpha "$refused" "negative_balance")
ok $([ "$ms" -ge 0 ] && echo 0 || echo 1) "alpha refuses 'shared' once beta's charge made during the outage arrives"
for node in alpha beta; do
    ms=$(wait_for "$node" "SELECT rows_pending FROM federation_status WHERE direction = 'to'" 0)
    ok $([ "$ms" -ge 0 ] && echo 0 || echo 1) "federation_status at $node: nothing pending once the centre is back ($ms ms)"
done
ALL=1 compare "charges per account after both outages (single: the same jobs, except 'shared')" \
    "SELECT string_agg(format('%s/%s', account, s), ' ' ORDER BY account) FROM (SELECT account, sum(amount) s FROM ledger WHERE kind = 'charge' AND account <> 'shared' GROUP BY 1) x"
for node in centre alpha beta; do
    is "$(q "$node" "SELECT count(*) FROM (SELECT account, sum(amount) s FROM ledger WHERE kind = 'charge' GROUP BY 1 EXCEPT SELECT account, sum(amount) FROM charge_rollup GROUP BY 1) x")" "0" \
       "$node: the charge rollup equals the ledger's charges (replicated rows rolled up once)"
done

# ---- an update rolled out node by node: the centre first, then each site ----
# ALTER EXTENSION hpcacct UPDATE to a version made for this test (its script, in the
# installation's extension directory while the test runs, adds a ledger column: the loader's
# run identity, say), run at one node after the other while both sites charge. A receiver
# lacking a column its sender sends stops applying (and retries) until it has it; nothing is
# lost or doubled.
from_version=$(q centre "SELECT extversion FROM pg_extension WHERE extname = 'hpcacct'")
to_version="$from_version.rollout$$"
update_script="$("$pg_config" --sharedir)/extension/hpcacct--$from_version--$to_version.sql"
echo 'ALTER TABLE @extschema@.ledger ADD COLUMN rollout_tag text;' >"$update_script"
add_column="ALTER EXTENSION hpcacct UPDATE TO '$to_version'"
q centre "$add_column" >/dev/null
q alpha "$(jobs_sql alpha 90001 90100)" >/dev/null
q beta "$(jobs_sql beta 90001 90100)" >/dev/null
own_alpha=$(q alpha "SELECT count(*) FROM ledger WHERE federation_origin(entry_id) = 1")
ms=$(wait_for centre "SELECT count(*) FROM ledger WHERE federation_origin(entry_id) = 1" "$own_alpha")
ok $([ "$ms" -ge 0 ] && echo 0 || echo 1) "centre updated first: the sites' charges still reach it ($ms ms)"
is "$(q alpha "SELECT (check_submit('u1', 'p2', '2026-11-20')).ok")" "t" "alpha, not yet updated, still charges and checks"
q alpha "$add_column" >/dev/null
q centre "INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until, rollout_tag)
          VALUES ('p1', 'deposit', 7, 'NPL', NULL, '2026-10-01', '2026-12-31', 'after-update')" >/dev/null
ms=$(wait_for alpha "SELECT count(*) FROM ledger WHERE rollout_tag = 'after-update'" "1")
ok $([ "$ms" -ge 0 ] && echo 0 || echo 1) "alpha, updated, receives the centre's rows with the new column filled ($ms ms)"
sleep 2
is "$(q beta "SELECT count(*) FROM ledger WHERE kind = 'deposit' AND amount = 7")" "0" \
   "beta, not yet updated, has not applied the row with the new column"
ok $(grep -q 'is missing replicated column: "rollout_tag"' "$(nodedir beta)/server.log" && echo 0 || echo 1) \
   "beta's apply stopped on the missing column (and retries) instead of dropping its values"
is "$(q beta "SELECT (check_submit('u1', 'p2', '2026-11-20')).ok")" "t" "beta, not yet updated, still checks"
q beta "$add_column" >/dev/null
expect=$(( $(q alpha "SELECT count(*) FROM ledger WHERE federation_origin(entry_id) <> 2") \
           + $(q beta "SELECT count(*) FROM ledger WHERE federation_origin(entry_id) = 2") ))
for node in centre alpha beta; do
    ms=$(wait_for "$node" "SELECT count(*) FROM ledger" "$expect")
    ok $([ "$ms" -ge 0 ] && echo 0 || echo 1) "after the rollout $node holds all $expect rows, none twice ($ms ms)"
done
is "$(q beta "SELECT rollout_tag FROM ledger WHERE note IS NULL AND kind = 'deposit' AND amount = 7")" "after-update" \
   "beta, updated last, received the rows sent while it was not, with the new column"
is "$(for node in centre alpha beta; do q "$node" "SELECT extversion FROM pg_extension WHERE extname = 'hpcacct'"; done | sort -u)" \
   "$to_version" "every node runs the updated version"
rm -f "$update_script"; update_script=""
ALL=1 compare "charges per account after the rollout" \
    "SELECT string_agg(format('%s/%s', account, s), ' ' ORDER BY account) FROM (SELECT account, sum(amount) s FROM ledger WHERE kind = 'charge' AND account <> 'shared' AND jobid !~ '-9[0-9]{4}$' GROUP BY 1) x"

# ---- the loader's Slurm account map: written at the centre, read by each site's load_sacct ----
q centre "INSERT INTO slurm_account_map (slurm_account, account, note)
          VALUES ('root', NULL, 'Slurm''s root: not charged'), ('p4_slurm', 'p4', 'p4 under its Slurm name')" >/dev/null
map="SELECT string_agg(format('%s>%s', slurm_account, coalesce(account, '-')), ' ' ORDER BY slurm_account) FROM slurm_account_map"
for site in alpha beta; do
    ms=$(wait_for "$site" "$map" "p4_slurm>p4 root>-")
    ok $([ "$ms" -ge 0 ] && echo 0 || echo 1) "the Slurm account map written at the centre reaches $site ($ms ms)"
done
is "$(sqlstate alpha "INSERT INTO hpcacct.slurm_account_map VALUES ('local_slurm', 'p1', NULL)")" "HA013" \
   "a site refuses to write the Slurm account map of its own (HA013)"
sacct_line() {  # sacct_line JOBID SLURM_ACCOUNT: one hour of 48 cores on alpha's cpu partition, as sacct prints it
    echo "alpha|$1|$2|u1|cpu|2026-11-19T08:00:00+0100|2026-11-19T08:00:00+0100|2026-11-19T09:00:00+0100|cpu=48|COMPLETED"
}
q alpha "INSERT INTO sacct_staging (lineno, line, cluster, jobid, account, \"user\", partition, submit, start, \"end\", alloctres, state)
         SELECT n, l, f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9], f[10]
         FROM unnest(ARRAY['$(sacct_line map-1 p4_slurm)', '$(sacct_line map-2 root)']) WITH ORDINALITY u(l, n),
              LATERAL (SELECT string_to_array(u.l, '|') AS f) s" >/dev/null
is "$(q alpha "SELECT format('%s inserted, %s ignored, %s quarantined', inserted, ignored, quarantined) FROM load_sacct()")" \
   "1 inserted, 1 ignored, 0 quarantined" "alpha's load_sacct charges the mapped Slurm account and ignores root"
ms=$(wait_for centre "SELECT string_agg(format('%s/%s', account, amount), ' ') FROM ledger WHERE jobid LIKE 'map-%'" "p4/1.000000")
ok $([ "$ms" -ge 0 ] && echo 0 || echo 1) "the centre has the mapped job's charge, to p4, from alpha's loader ($ms ms)"
# a site whose subscription predates a reference table (what an update adding one leaves):
# federation_join says what to refresh; after the refresh the table's rows arrive
q centre "ALTER PUBLICATION hpcacct_fed_reference DROP TABLE hpcacct.slurm_account_map" >/dev/null
q alpha "ALTER SUBSCRIPTION hpcacct_fed_c2s_1 REFRESH PUBLICATION" >/dev/null
q alpha "SET session_replication_role = replica; DELETE FROM hpcacct.slurm_account_map" >/dev/null
q centre "CALL federation_publish(1, 'alpha')" >/dev/null
q centre "INSERT INTO slurm_account_map (slurm_account, account) VALUES ('p5_slurm', 'p5')" >/dev/null
warning=$(psql "$(conninfo alpha)" -XAtq -c "CALL hpcacct.federation_join(1, '$(conninfo centre)')" 2>&1 >/dev/null)
ok $(grep -q 'WARNING:  this site does not receive hpcacct.slurm_account_map' <<<"$warning" && echo 0 || echo 1) \
   "federation_join at a site that lacks a reference table warns (and names the refresh)"
echo "$warning" | sed 's/^/# /'
q alpha "ALTER SUBSCRIPTION hpcacct_fed_c2s_1 REFRESH PUBLICATION" >/dev/null
ms=$(wait_for alpha "$map" "p4_slurm>p4 p5_slurm>p5 root>-")
ok $([ "$ms" -ge 0 ] && echo 0 || echo 1) "after the refresh alpha has the whole map again ($ms ms)"
is "$(psql "$(conninfo alpha)" -XAtq -c "CALL hpcacct.federation_join(1, '$(conninfo centre)')" 2>&1 >/dev/null)" "" \
   "federation_join warns no more"

# ---- deferred rollups, a setting of the centre's: a site defers its own loads' rollups, and
# rolls them up when the centre sets rollup back to immediate ----
q centre "INSERT INTO setting VALUES ('rollup', 'deferred')" >/dev/null
ms=$(wait_for alpha "SELECT setting_value('rollup')" deferred)
ok $([ "$ms" -ge 0 ] && echo 0 || echo 1) "alpha receives the centre's rollup = deferred ($ms ms)"
q alpha "$(jobs_sql alpha 95001 95200)" >/dev/null
is "$(q alpha "SELECT sum(last_entry_id - first_entry_id + 1) FROM rollup_pending")" "200" \
   "alpha's 200 new charges wait in rollup_pending"
q centre "UPDATE setting SET value = 'immediate' WHERE name = 'rollup'" >/dev/null
ms=$(wait_for alpha "SELECT count(*) FROM rollup_pending" 0)
ok $([ "$ms" -ge 0 ] && echo 0 || echo 1) "the centre sets rollup = immediate again: alpha rolls up what was pending ($ms ms)"
is "$(q alpha "SELECT count(*) FROM (SELECT account, sum(amount) s FROM ledger WHERE kind = 'charge' GROUP BY 1 EXCEPT SELECT account, sum(amount) FROM charge_rollup GROUP BY 1) x")" "0" \
   "alpha: the charge rollup equals the ledger's charges after the roll-up"

# a row that looped back to where it came from, or came twice, would have stopped an apply
# worker on the ledger's primary key: no server log says so
for node in centre alpha beta; do
    ok $(grep -q 'duplicate key value violates unique constraint' "$(nodedir "$node")/server.log" && echo 1 || echo 0) \
       "$node: no replicated row ever conflicted with one already there"
done

# ---- a receiver stopped after a burst: rows it received less than a second after its last
# report stay counted as pending at the sender until it is back ----
sleep 1.1
q alpha "BEGIN; $(jobs_sql alpha 96000 96000); COMMIT; BEGIN; $(jobs_sql alpha 96001 96050); COMMIT" >/dev/null
wait_for beta "SELECT count(*) FROM ledger WHERE jobid ~ '^alpha-960[0-5][0-9]\$'" 51 >/dev/null
ms=$(wait_for centre "SELECT rows_pending FROM federation_status WHERE site = 2 AND direction = 'to'" 0)
ok $([ "$ms" -ge 0 ] && echo 0 || echo 1) "beta holds alpha's 51 new charges; the centre shows none pending to it ($ms ms)"
stop_node beta
q centre "SELECT deposit('p2', '2026-10-01', 2.5)" >/dev/null
is "$(q centre "SELECT format('%s/%s', connected, rows_pending) FROM federation_status WHERE site = 2 AND direction = 'to'")" "f/51" \
   "beta stopped, then a deposit at the centre: 51 rows pending (the deposit, and the 50 charges beta received unreported)"
start_node beta
ms=$(wait_for centre "SELECT rows_pending FROM federation_status WHERE site = 2 AND direction = 'to'" 0)
ok $([ "$ms" -ge 0 ] && echo 0 || echo 1) "beta back: nothing pending ($ms ms)"

# ---- removing a site whose database is gone: the centre's steps of the README ----
stop_node beta
q centre "ALTER SUBSCRIPTION hpcacct_fed_s2c_2 DISABLE" >/dev/null
q centre "ALTER SUBSCRIPTION hpcacct_fed_s2c_2 SET (slot_name = NONE)" >/dev/null
q centre "DROP SUBSCRIPTION hpcacct_fed_s2c_2" >/dev/null
q centre "SELECT pg_drop_replication_slot('hpcacct_fed_c2s_2')" >/dev/null
q centre "DROP PUBLICATION hpcacct_fed_c2s_2" >/dev/null
is "$(q centre "SELECT string_agg(format('%s/%s/%s', site, direction, connected), ' ' ORDER BY site, direction) FROM federation_status")" \
   "1/from/t 1/to/t" "beta removed: the centre shows alpha's two links only"
is "$(q centre "SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name ~ '_2\$')
                     + (SELECT count(*) FROM pg_subscription WHERE subname ~ '_2\$')
                     + (SELECT count(*) FROM pg_publication WHERE pubname ~ '_2\$')")" "0" \
   "beta removed: no slot, subscription or publication of site 2 left at the centre"
q centre "SELECT deposit('p2', '2026-10-01', 3.5)" >/dev/null
ms=$(wait_for alpha "SELECT count(*) FROM ledger WHERE account = 'p2' AND kind = 'deposit' AND amount = 3.5" 1)
ok $([ "$ms" -ge 0 ] && echo 0 || echo 1) "beta removed: a deposit at the centre still reaches alpha ($ms ms)"
is "$(sqlstate centre "CALL hpcacct.federation_publish(2, 'gamma')")" "23505" \
   "beta removed: its number is not given to another site (23505)"

# ---- a site cut off from the centre (its subscription disabled) refuses who and what is new
# there: a new member as no_access, a new user without an account as unknown_user, a new
# account as unknown_account; all pass once the link is back ----
q alpha "ALTER SUBSCRIPTION hpcacct_fed_c2s_1 DISABLE" >/dev/null
q centre "SELECT add_user('newcomer2'); SELECT add_member('p1', 'newcomer2'); INSERT INTO account (name) VALUES ('fresh');
          SELECT add_member('fresh', 'u1'); SELECT deposit('fresh', '2026-10-01', 100)" >/dev/null
new_checks="SELECT format('%s %s %s', (check_submit('newcomer2', 'p1', '2026-11-20')).reason,
                       (check_submit('newcomer2', NULL, '2026-11-20')).reason, (check_submit('u1', 'fresh', '2026-11-20')).reason)"
is "$(q alpha "$new_checks")" "no_access unknown_user unknown_account" \
   "alpha cut off: a new member is no_access, a new user without an account unknown_user, a new account unknown_account"
q alpha "ALTER SUBSCRIPTION hpcacct_fed_c2s_1 ENABLE" >/dev/null
ms=$(wait_for alpha "SELECT format('%s %s', (check_submit('newcomer2', 'p1', '2026-11-20')).ok, (check_submit('u1', 'fresh', '2026-11-20')).ok)" "t t")
ok $([ "$ms" -ge 0 ] && echo 0 || echo 1) "alpha, linked again, accepts the new member and the new account ($ms ms)"

# ---- a slot invalidated by max_slot_wal_keep_size (alpha stopped): the set-up calls do not
# recover it, and federation_publish says so ----
stop_node alpha
q centre "ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'" >/dev/null
q centre "SELECT pg_reload_conf()" >/dev/null
q centre "CREATE TABLE public.wal_filler AS SELECT g, repeat('x', 200) AS x FROM generate_series(1, 150000) g" >/dev/null
q centre "SELECT pg_switch_wal()" >/dev/null
q centre "CHECKPOINT" >/dev/null
is "$(q centre "SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'hpcacct_fed_c2s_1'")" "lost" \
   "alpha stopped while the centre wrote more WAL than max_slot_wal_keep_size: its slot is lost"
warning=$(psql "$(conninfo centre)" -XAtq -c "CALL hpcacct.federation_publish(1, 'alpha')" 2>&1 >/dev/null)
ok $(grep -q 'WARNING:  the slot hpcacct_fed_c2s_1 of site 1 is lost' <<<"$warning" && echo 0 || echo 1) \
   "federation_publish run again warns that alpha's slot is lost"
is "$(q centre "SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'hpcacct_fed_c2s_1'")" "lost" \
   "and the slot stays lost: running the set-up calls again does not recover it"
q centre "DROP TABLE public.wal_filler; ALTER SYSTEM RESET max_slot_wal_keep_size" >/dev/null 2>&1 || true
