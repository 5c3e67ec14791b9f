#!/usr/bin/env bash
# test/slurm/loader.sh: hpcacct-sacct against a real Slurm (test/slurm/with-slurm.sh), inside
# with-cluster.sh (PGHOST... set). A job mix runs — jobs of every partition, an array, a
# heterogeneous job, a requeued job, a job cancelled while it waited, root's job, a job of an
# account hpcacct does not know, a job still running at the first load — and is loaded with
# `hpcacct-sacct run` several times over overlapping windows, connected as a login of
# hpcacct_ingest. Checks: every job's ledger amount equals an independent computation from
# sacct's own ElapsedRaw and AllocTRES (to 6 decimals); a re-run writes no ledger row; the
# unknown account is quarantined and charged once created; both runs of the requeued job are
# charged; steps and root are not; with `run --every 30` a job is charged within 60 s of
# its end; a run whose window starts in the hour a DST change repeats (Europe/Berlin) misses no
# job; accounts named p|q and nl\nname are synced by sync-accounts and charged; `load` reads
# a file sacct wrote with --delimiter=$'\x1f' (a job named a|b\nc). Leaves nothing running.
# TAP lines; appends "loader PASSED FAILED" to $HPCACCT_TALLY.
set -uo pipefail
cd "$(dirname "$0")/../.."
. test/scripts/checks.sh

if [ "${1:-}" != --inner ]; then
    test/slurm/with-slurm.sh "$0" --inner
    status=$?
    grep -q '^loader ' "$HPCACCT_TALLY" || { echo "not ok - the Slurm loader test did not finish ($status)"; echo "loader 0 1" >>"$HPCACCT_TALLY"; }
    exit 0
fi

bindir=$("${PG_CONFIG:-pg_config}" --bindir)
loader=$bindir/hpcacct-sacct
db=hpcacct_slurm
work=$HPCACCT_SLURM_DIR/work/loader
mkdir -p "$work"
cluster=$HPCACCT_SLURM_CLUSTER
loop_pid=
cleanup() { [ -n "$loop_pid" ] && kill "$loop_pid" 2>/dev/null && wait "$loop_pid" 2>/dev/null; true; }
trap cleanup EXIT

q() { psql -X -q -At -v ON_ERROR_STOP=1 -d $db "$@"; }

# --- the site: what Slurm's cluster has, except proj_unknown ---
createdb $db
q -c 'CREATE EXTENSION hpcacct CASCADE' -c 'SELECT hpcacct.create_job_table()' -c 'CALL hpcacct.setup_roles()' >/dev/null 2>&1
q <<SQL
CREATE ROLE hp_slurm_loader LOGIN IN ROLE hpcacct_ingest;
INSERT INTO hpcacct.setting VALUES ('timezone', 'Europe/Berlin');
INSERT INTO hpcacct.account (name) VALUES ('proj_a'), ('proj_b');
INSERT INTO hpcacct.slurm_account_map (slurm_account, account, note) VALUES ('root', NULL, 'not charged');
INSERT INTO hpcacct.resource (cluster, partition, node, bundle, rate, unit, exclusive) VALUES
    ('$cluster', 'cpu', 'cpu=4,mem=2000M', 'cpu=1,mem=500M', 1, 'core-hours', false),
    ('$cluster', 'excl', 'cpu=4,mem=2000M', 'cpu=1', 1, 'core-hours', true),
    ('$cluster', 'gpu', 'cpu=4,mem=2000M,gres/gpu=2', 'gres/gpu=1', 2, 'gpu-hours', false);
SQL
# the loader runs as a login of the ingestion role: COPY into the staging table must work for it
# each run carries this test's mark in its environment: what is left running is found by it,
# never by name (another test's hpcacct-sacct, here or in another installation, is not ours)
mark=HPCACCT_LOADER_TEST=$work
ld() { env "$mark" PGUSER=hp_slurm_loader PGDATABASE=$db "$loader" "$@"; }
ours() { grep -lsaF -- "$mark" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3 || true; }

since=$(date +%Y-%m-%dT%H:%M:%S -d '-1 minute')
sb() { sbatch --parsable -o "$HPCACCT_SLURM_DIR/slurm-%j.out" "$@" | cut -d';' -f1; }  # output in the harness's directory

# --- the job mix ---
cat >"$work/het.sh" <<'EOF'
#!/bin/bash
#SBATCH -A proj_a -p cpu -c 1 --mem=300M
#SBATCH hetjob
#SBATCH -A proj_a -p cpu -c 2 --mem=600M
srun --het-group=0,1 sleep 2
EOF
long=$(sb -A proj_b -p gpu --gres=gpu:1 -c 1 --wrap 'sleep 25')     # still running at the first load
requeued=$(sb -A proj_a -p cpu -c 1 --mem=100M --requeue --wrap 'sleep 8')
sb -A proj_a -p cpu -c 2 --mem=1500M --wrap 'srun sleep 3' >/dev/null   # memory-bound, with a step
sb -A proj_a -p cpu -c 3 --mem=100M --wrap 'sleep 2' >/dev/null
sb -A proj_b -p gpu --gres=gpu:1 -c 1 --wrap 'sleep 3' >/dev/null
sb -A proj_b -p gpu --gres=gpu:2 -c 2 --wrap 'sleep 2' >/dev/null
sb -A proj_a -p excl -c 1 --wrap 'sleep 2' >/dev/null                  # exclusive: a whole node
sb -A proj_a -p cpu -c 1 --array=1-3 --wrap 'sleep 1' >/dev/null
sb "$work/het.sh" >/dev/null
sb -A root -p cpu -c 1 --wrap 'sleep 1' >/dev/null
unknown=$(sb -A proj_unknown -p cpu -c 1 --wrap 'sleep 2')
sleep 3
# a job cancelled while it waited for resources: both excl nodes are taken for 20 s first
b1=$(sb -A proj_a -p excl -c 1 --wrap 'sleep 20')
b2=$(sb -A proj_a -p excl -c 1 --wrap 'sleep 20')
for i in $(seq 1 50); do
    [ "$(squeue -h -j "$b1,$b2" -o %T | sort -u)" = RUNNING ] && break
    sleep 0.2
done
waiting=$(sb -A proj_a -p excl -c 1 --wrap 'sleep 1')
sleep 1
check "a job waits for the exclusive nodes" "$([ "$(squeue -h -j "$waiting" -o %T)" = PENDING ] && echo t)"
scancel "$waiting"
# requeue the running job once, and let its second run start at once
scontrol requeue "$requeued"
sleep 2
scontrol update JobId="$requeued" StartTime=now >/dev/null 2>&1

# --- first load, while the long job runs ---
ld run -M "$cluster" --since "$since" >"$work/run1.txt" 2>&1
check "hpcacct-sacct run loads as the ingestion role (exit 0)" "$([ $? -eq 0 ] && echo t)"
sed 's/^/    # /' "$work/run1.txt"
check "the first load left the running job for later" \
    "$([ "$(q -c "SELECT count(*) FROM hpcacct.job WHERE jobid = '$long'")" = 0 ] && grep -q 'unfinished=[1-9]' "$work/run1.txt" && echo t)"

# wait until every job of the mix has ended
for i in $(seq 1 90); do
    [ -z "$(squeue -h -o %A)" ] && break
    sleep 1
done
check "the job mix ended" "$([ -z "$(squeue -h -o %A)" ] && echo t)"
sleep 2  # slurmdbd records the last ends

# --- more loads over overlapping windows (the watermark minus an hour each time) ---
ld run -M "$cluster" >"$work/run2.txt" 2>&1; r2=$?
rows2=$(q -c 'SELECT count(*) FROM hpcacct.ledger')
ld run -M "$cluster" >"$work/run3.txt" 2>&1; r3=$?
rows3=$(q -c 'SELECT count(*) FROM hpcacct.ledger')
sed 's/^/    # /' "$work/run2.txt" "$work/run3.txt"
check "two more runs over overlapping windows succeed" "$([ $r2 -eq 0 ] && [ $r3 -eq 0 ] && echo t)"
check "a re-run writes no ledger row ($rows2 before, $rows3 after) and reports nothing inserted" \
    "$([ "$rows2" = "$rows3" ] && grep -q 'inserted=0 rerated=0 updated=0' "$work/run3.txt" && echo t)"
check "the running job of the first load is charged once it ended" \
    "$([ "$(q -c "SELECT count(*) FROM hpcacct.ledger WHERE jobid = '$long' AND amount > 0")" = 1 ] && echo t)"

# --- the same as sacct shows it, computed independently from ElapsedRaw and AllocTRES ---
SLURM_TIME_FORMAT=%s sacct -a -X -D --parsable2 -S "$since" -E now \
    --format=JobID,Submit,Start,End,Partition,Account,ElapsedRaw,AllocTRES,State >"$work/sacct.txt"
python3 - "$work/sacct.txt" >"$work/expected.tsv" <<'PY' || echo "python failed" >>"$work/expected.tsv"
import sys, math
from decimal import Decimal, ROUND_HALF_UP
# the site's resources: partition -> (node, bundle, rate, exclusive); memory in MB
res = {'cpu': ({'cpu': 4, 'mem': 2000}, {'cpu': 1, 'mem': 500}, 1.0, False),
       'excl': ({'cpu': 4, 'mem': 2000}, {'cpu': 1}, 1.0, True),
       'gpu': ({'cpu': 4, 'mem': 2000, 'gres/gpu': 2}, {'gres/gpu': 1}, 2.0, False)}
units = {'K': 1.0 / 1024, 'M': 1.0, 'G': 1024.0, 'T': 1024.0 ** 2}
def tres(text):
    out = {}
    for part in filter(None, text.split(',')):
        k, v = part.split('=')
        if k in ('mem', 'vmem') and v[-1] in units:
            out[k] = float(v[:-1]) * units[v[-1]]
        else:
            out[k] = float(v)
    return out
lines = open(sys.argv[1]).read().splitlines()
head = lines[0].split('|')
for line in lines[1:]:
    f = dict(zip(head, line.split('|')))
    if f['Account'] not in ('proj_a', 'proj_b', 'proj_unknown') or f['Start'] in ('Unknown', 'None'):
        continue
    if f['AllocTRES'] == '' and f['Start'] == f['End']:  # cancelled while it waited: never ran
        continue
    node, bundle, rate, exclusive = res[f['Partition']]
    alloc = tres(f['AllocTRES'])
    if exclusive:  # whole nodes: the node count, or each component rounded up to whole nodes
        nodes = max([alloc.get('node', 0)] + [math.ceil(alloc.get(k, 0) / v * (1 - 1e-9)) for k, v in node.items()])
        alloc = {k: max(alloc.get(k, 0), nodes * node.get(k, 0)) for k in set(node) | set(alloc)}
    eq = max(alloc.get(k, 0) / v for k, v in bundle.items())
    hours = float(int(f['ElapsedRaw']) * 1000000) / 3600000000.0  # as PostgreSQL's interval, in microseconds
    amount = eq * hours * rate
    print('%s\t%s\t%s' % (f['JobID'], f['Submit'],
                          Decimal('%.15g' % amount).quantize(Decimal('0.000001'), rounding=ROUND_HALF_UP)))
PY
q -c "SELECT jobid, extract(epoch FROM job_submit)::bigint, sum(amount) FROM hpcacct.ledger
      WHERE kind = 'charge' GROUP BY 1, 2 ORDER BY 1, 2" | tr '|' '\t' >"$work/ledger.tsv"
grep -v "^$unknown	" "$work/expected.tsv" | sort >"$work/expected_known.tsv"
sort "$work/ledger.tsv" >"$work/ledger_sorted.tsv"
njobs=$(wc -l <"$work/expected_known.tsv")
check "every job's ledger amount equals ElapsedRaw x AllocTRES computed apart ($njobs runs, exact to 6 decimals)" \
    "$([ "$njobs" -ge 12 ] && cmp -s "$work/expected_known.tsv" "$work/ledger_sorted.tsv" && echo t)"
if ! cmp -s "$work/expected_known.tsv" "$work/ledger_sorted.tsv"; then
    diff "$work/expected_known.tsv" "$work/ledger_sorted.tsv" | head -10 | sed 's/^/    # /'
    sed 's/^/    # sacct: /' "$work/sacct.txt"
fi
check "both runs of the requeued job are charged, each with its submit time" \
    "$([ "$(q -c "SELECT count(DISTINCT job_submit) FROM hpcacct.ledger WHERE jobid = '$requeued' AND amount > 0")" = 2 ] && echo t)"
check "array tasks and heterogeneous components are jobs of their own" \
    "$([ "$(q -c "SELECT count(*) FROM hpcacct.job WHERE jobid ~ '_[0-9]+\$'")" = 3 ] &&
       [ "$(q -c "SELECT count(*) FROM hpcacct.job WHERE jobid ~ '\+[0-9]+\$'")" = 2 ] && echo t)"
check "no step, no root job and no job that never started is stored" \
    "$([ "$(q -c "SELECT count(*) FROM hpcacct.job WHERE jobid ~ '\.' OR account = 'root' OR jobid = '$waiting'")" = 0 ] && echo t)"
check "the job cancelled while it waited is counted as never started" \
    "$(grep -q 'never_started=[1-9]' "$work/run2.txt" && echo t)"
grep "^$waiting|" "$work/sacct.txt" | sed 's/^/    # sacct: /'
q -c "SELECT jobid, start, \"end\", state FROM hpcacct.job WHERE jobid ~ '\.' OR account = 'root' OR jobid = '$waiting'" | sed 's/^/    # stored: /'
check "root's job is counted as ignored, not quarantined" \
    "$(grep -q 'ignored=[1-9]' "$work/run2.txt" &&
       [ "$(q -c "SELECT count(*) FROM hpcacct.sacct_quarantine WHERE account = 'root'")" = 0 ] && echo t)"

# --- the unknown account: quarantined, then charged once created ---
check "the job of the unknown account proj_unknown is quarantined (42704)" \
    "$([ "$(q -c "SELECT sqlstate FROM hpcacct.sacct_quarantine WHERE jobid = '$unknown' AND resolved_at IS NULL")" = 42704 ] && echo t)"
q -c "INSERT INTO hpcacct.account (name) VALUES ('proj_unknown')"
ld run -M "$cluster" >"$work/run4.txt" 2>&1
expected_unknown=$(awk -F'\t' -v j="$unknown" '$1 == j { print $3 }' "$work/expected.tsv")
check "once the account exists, the next run charges it ($expected_unknown) and resolves its quarantine" \
    "$([ "$(q -c "SELECT sum(amount) FROM hpcacct.ledger WHERE jobid = '$unknown'")" = "$expected_unknown" ] &&
       [ "$(q -c "SELECT resolution FROM hpcacct.sacct_quarantine WHERE jobid = '$unknown'")" = inserted ] && echo t)"

# --- freshness: a loop every 30 s charges a job within 60 s of its end ---
env "$mark" PGUSER=hp_slurm_loader PGDATABASE=$db "$loader" run -M "$cluster" --every 30 >"$work/loop.txt" 2>&1 &
loop_pid=$!
fresh=$(sb -A proj_b -p cpu -c 1 --wrap 'sleep 2')
for i in $(seq 1 100); do
    [ "$(q -c "SELECT count(*) FROM hpcacct.ledger WHERE jobid = '$fresh'")" = 1 ] && break
    sleep 1
done
end=$(SLURM_TIME_FORMAT=%s sacct -n -X -j "$fresh" --parsable2 --format=End)
lag=$(q -c "SELECT round(extract(epoch FROM booked_at) - $end) FROM hpcacct.ledger WHERE jobid = '$fresh'")
check "a job is charged within 60 s of its end by run --every 30 (took ${lag:-never} s)" \
    "$([ -n "$lag" ] && [ "$lag" -le 60 ] && echo t)"
check "the loop is found by this test's mark (so that the next check can fail)" "$([ -n "$(ours)" ] && echo t)"
kill "$loop_pid"; wait "$loop_pid" 2>/dev/null; loop_pid=
check "the loop stopped" "$([ -z "$(ours)" ] && echo t)"
# --every and --overlap beyond 2^31 - 1 s are usage errors: an --every of 2^63 - 1 overflowed
# the loop's clock (undefined behaviour), and the loop then ran again at once, for ever
timeout 20 env "$mark" PGUSER=hp_slurm_loader PGDATABASE=$db "$loader" run -M "$cluster" --every 9223372036854775807 \
    >"$work/huge.txt" 2>&1; r=$?
check "run --every 9223372036854775807 is a usage error (exit 2, got $r), not a loop that never sleeps" \
    "$([ $r -eq 2 ] && grep -q -- '--every takes a number of seconds from 1 to 2147483647' "$work/huge.txt" && echo t)"
timeout 20 env "$mark" PGUSER=hp_slurm_loader PGDATABASE=$db "$loader" run -M "$cluster" --overlap 99999999999999999999 \
    >"$work/huge2.txt" 2>&1; r=$?
check "run --overlap 99999999999999999999 is a usage error (exit 2, got $r)" \
    "$([ $r -eq 2 ] && grep -q -- '--overlap takes a number of seconds from 0 to 2147483647' "$work/huge2.txt" && echo t)"
check "nothing of those runs is left" "$([ -z "$(ours)" ] && echo t)"

# --- a cluster slurmdbd does not know, and a sacct that fails: nothing loaded, said so ---
watermark=$(q -c "SELECT loaded_through FROM hpcacct.sacct_watermark WHERE cluster = '$cluster'")
ld run -M no_such_cluster --since "$since" >"$work/bad.txt" 2>&1
check "a run for a cluster slurmdbd does not know exits non-zero with a message" \
    "$([ $? -ne 0 ] && grep -q 'knows no cluster named "no_such_cluster"' "$work/bad.txt" && echo t)"
SLURM_CONF=/nonexistent/slurm.conf ld run -M "$cluster" >"$work/bad2.txt" 2>&1
check "a run whose sacctmgr/sacct cannot reach Slurm exits non-zero with a message" \
    "$([ $? -ne 0 ] && grep -q "hpcacct-sacct: cluster $cluster: .*exited with status" "$work/bad2.txt" && echo t)"
sed 's/^/    # /' "$work/bad.txt" "$work/bad2.txt" | grep -v '^    # sacct' | head -4
check "and leaves the watermark where it was" \
    "$([ "$(q -c "SELECT loaded_through FROM hpcacct.sacct_watermark WHERE cluster = '$cluster'")" = "$watermark" ] &&
       [ "$(q -c "SELECT count(*) FROM hpcacct.sacct_watermark WHERE cluster = 'no_such_cluster'")" = 0 ] && echo t)"
# --- accounts whose names have a '|' or a line break (sacctmgr takes both, and prints both as
# they are): sync-accounts adds them with their members, and does not stop at them; their jobs
# are charged, not quarantined as lines with too many or too few fields
nl=$'nl\nname'
for a in 'p|q' "$nl"; do
    sacctmgr -i add account "$a" cluster="$cluster" >/dev/null && sacctmgr -i add user root account="$a" cluster="$cluster" >/dev/null
done
"$loader" -d "dbname=$db" sync-accounts >"$work/sync.txt" 2>&1
sync_status=$?
sed 's/^/    # /' "$work/sync.txt"
check "sync-accounts adds the accounts p|q and nl\\nname with their member, and the others (exit 0)" \
    "$([ $sync_status = 0 ] && grep -q 'skipped=0' "$work/sync.txt" &&
       [ "$(q -c "SELECT count(*) FROM hpcacct.membership WHERE username = 'root' AND account IN ('p|q', E'nl\\nname', 'proj_a')")" = 3 ] && echo t)"
sleep 1   # slurmctld receives the new associations
bar=$(sb -A 'p|q' -p cpu -c 1 --mem=100M --wrap 'sleep 1')
brk=$(sb -A "$nl" -p cpu -c 1 --mem=100M --wrap 'sleep 1')
named=$(sb -A proj_a -J $'a|b\nc' -p cpu -c 1 --mem=100M --wrap 'sleep 1')
for _ in $(seq 1 60); do
    [ "$(sacct -n -X -P -j "$bar,$brk,$named" -o End,Partition,AllocTRES | grep -cE '^[0-9T:-]+\|cpu\|.*cpu=')" = 3 ] && break
    sleep 0.5
done
# `load` of a file sacct wrote with the unit separator (sacct does not escape a '|' in a name)
SLURM_TIME_FORMAT=%s sacct -a -X -D --parsable2 --delimiter=$'\x1f' -j "$named" \
    --format=Cluster,JobID,JobName,Account,User,Partition,Submit,Start,End,AllocTRES,State >"$work/named.txt"
ld load "$work/named.txt" >"$work/named.out" 2>&1
named_status=$?
sed 's/^/    # /' "$work/named.out"
check "load reads a file written with --delimiter=\$'\\x1f': a job named a|b\\nc is charged" \
    "$([ $named_status = 0 ] && grep -q 'inserted=1 .* quarantined=0' "$work/named.out" &&
       [ "$(q -c "SELECT count(*) FROM hpcacct.ledger WHERE jobid = '$named' AND amount > 0")" = 1 ] && echo t)"
ld run -M "$cluster" >"$work/bar.txt" 2>&1
sed 's/^/    # /' "$work/bar.txt"
check "a job of the account p|q is charged to it" \
    "$([ -n "$bar" ] && [ "$(q -c "SELECT account FROM hpcacct.job WHERE jobid = '$bar'")" = 'p|q' ] &&
       [ "$(q -c "SELECT count(*) FROM hpcacct.ledger WHERE jobid = '$bar' AND amount > 0")" = 1 ] && echo t)"
check "a job of the account nl\\nname is charged to it, and no line of it is quarantined" \
    "$([ -n "$brk" ] && [ "$(q -c "SELECT account = E'nl\\nname' FROM hpcacct.job WHERE jobid = '$brk'")" = t ] &&
       [ "$(q -c "SELECT count(*) FROM hpcacct.ledger WHERE jobid = '$brk' AND amount > 0")" = 1 ] &&
       [ "$(q -c "SELECT count(*) FROM hpcacct.sacct_quarantine WHERE resolved_at IS NULL AND line ~ '^(testcl[|][0-9]+[|][0-9]+[|]nl|name[|])'")" = 0 ] && echo t)"

# --- a DST change (Europe/Berlin): the job ran 02:21-02:40 CEST on the day the clocks go back,
# the last run was at 02:35 CEST (the job still running), the next has --overlap 600: its -S
# is 02:25 CEST, which as local text sacct reads as 02:25 CET, an hour later, and missed the job.
# Another ran across the change, 02:21 CEST to 02:40 CET: 79 minutes. The jobs' times are
# moved there in slurmdbd's database.
dst=$(sb -A proj_b -p cpu -c 1 --mem=100M --wrap 'sleep 1')
across=$(sb -A proj_b -p cpu -c 1 --mem=100M --wrap 'sleep 1')
# until slurmdbd has the whole jobs: a short job's end may come before its start record (an
# empty Partition meanwhile), and a record that comes after the move makes a row of its own
for _ in $(seq 1 60); do
    [ "$(sacct -n -X -P -j "$dst,$across" -o End,Partition,AllocTRES | grep -cE '^[0-9T:-]+\|cpu\|.*cpu=')" = 2 ] && break
    sleep 0.5
done
year=$(date -u +%Y)
last_sunday() { date -u -d "$1-10-31 -$(date -u -d "$1-10-31" +%w) days" +%F; }
day=$(last_sunday "$year")
[ "$(date -u -d "$day" +%s)" -ge $(($(date -u +%s) - 86400)) ] && day=$(last_sunday $((year - 1)))
at() { date -u -d "$day $1 UTC" +%s; }   # the clocks go back at 01:00 UTC
mariadb --no-defaults -S "$HPCACCT_SLURM_DB_SOCKET" -u root slurm_acct_db -e \
    "UPDATE ${cluster}_job_table SET time_submit = $(at 00:20), time_eligible = $(at 00:20),
         time_start = $(at 00:21), time_end = $(at 00:40) WHERE id_job = $dst;
     UPDATE ${cluster}_job_table SET time_submit = $(at 00:10), time_eligible = $(at 00:10),
         time_start = $(at 00:21), time_end = $(at 01:40) WHERE id_job = $across"
q -c "UPDATE hpcacct.sacct_watermark SET loaded_through = to_timestamp($(at 00:35)) WHERE cluster = '$cluster'"
TZ=Europe/Berlin ld run -M "$cluster" --overlap 600 >"$work/dst.txt" 2>&1
sed 's/^/    # /' "$work/dst.txt"
check "a job that ended in the hour a DST change repeats is loaded by the next run (its -S in that hour)" \
    "$([ "$(q -c "SELECT sum(amount) FROM hpcacct.ledger WHERE jobid = '$dst' AND job_submit = to_timestamp($(at 00:20))")" = 0.316667 ] && echo t)"
check "a job across the change is charged its 79 minutes" \
    "$([ "$(q -c "SELECT sum(amount) FROM hpcacct.ledger WHERE jobid = '$across' AND job_submit = to_timestamp($(at 00:10))")" = 1.316667 ] && echo t)"
SLURM_TIME_FORMAT=%s sacct -a -X -D --parsable2 -j "$dst,$across" --format=JobID,Submit,Eligible,Start,End,State | sed 's/^/    # sacct: /'
q -c "SELECT jobid, reason, line FROM hpcacct.sacct_quarantine WHERE resolved_at IS NULL" | sed 's/^/    # quarantined: /'

check "nothing of the loader is left running" "$([ -z "$(ours)" ] && echo t)"

report loader
