#!/usr/bin/env bash
# test/notify/run.sh: hpcacct-notify against a real SMTP server on 127.0.0.1 (aiosmtpd's sink,
# test/notify/smtp_sink.py, writing each message it accepts to a file). Runs inside
# with-cluster.sh (PGHOST etc. set). Prints TAP lines and appends "notify PASSED FAILED" to
# $HPCACCT_TALLY. Everything it starts (the sink, senders) runs in a mktemp directory and is
# stopped and removed at the end.
set -uo pipefail
cd "$(dirname "$0")/../.."

pg_config=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
sender=$("$pg_config" --bindir)/hpcacct-notify
python=/usr/bin/python3
work=$(mktemp -d "${TMPDIR:-/tmp}/hpcacct-notify-test.XXXXXX")
db=hpcacct_notify
sink_pid=
sender_pids=()
passed=0
failed=0
n=0

cleanup() {
    for p in "${sender_pids[@]}" $sink_pid; do
        kill -9 "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    [ -n "${HPCACCT_NOTIFY_KEEP:-}" ] && cp -a "$work" "$HPCACCT_NOTIFY_KEEP"
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ok() {  # ok CONDITION-STATUS DESCRIPTION [DIAGNOSTIC]
    n=$((n + 1))
    if [ "$1" -eq 0 ]; then
        echo "ok $n - $2"; passed=$((passed + 1))
    else
        echo "not ok $n - $2"; failed=$((failed + 1))
        [ -n "${3:-}" ] && echo "$3" | sed 's/^/# /'
    fi
}
is() {  # is GOT WANT DESCRIPTION
    [ "$1" = "$2" ]; ok $? "$3" "got: $1
want: $2"
}
report() {
    echo "1..$n"
    echo "notify $passed $failed" >>"${HPCACCT_TALLY:-/dev/null}"
}
trap 'cleanup; report' EXIT

sql() { psql -X -q -At -v ON_ERROR_STOP=1 -d "$db" "$@"; }

free_port() {
    $python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
port=$(free_port)
mail=$work/mail
mkdir -p "$mail"

start_sink() {  # start_sink [DELAY]
    $python test/notify/smtp_sink.py --port "$port" --dir "$mail" --delay "${1:-0}" >"$work/sink.log" 2>&1 &
    sink_pid=$!
    for _ in $(seq 50); do grep -q ready "$work/sink.log" 2>/dev/null && return 0; sleep 0.1; done
    echo "# the SMTP sink did not start"; cat "$work/sink.log"; return 1
}
stop_sink() {
    [ -n "$sink_pid" ] && { kill "$sink_pid" 2>/dev/null; wait "$sink_pid" 2>/dev/null; }
    sink_pid=
}

# the sender's configuration: a file, with the environment on top. It logs in as a member of
# hpcacct_notify, as the README says, not as a superuser or an administrator.
mailer=hpcacct_mail_test
cat >"$work/notify.conf" <<CONF
# hpcacct-notify test configuration
conninfo = dbname=$db user=$mailer
smtp_host = 127.0.0.1
smtp_port = $port
smtp_tls = none
from = hpc-accounting@centre.example
retry_base = 1
retry_max = 2
poll = 600
timeout = 5
lease = 60
batch = 5
CONF

# arrivals: "message-id recipient" per accepted message
arrivals() {
    for f in "$mail"/*.eml; do
        [ -e "$f" ] || continue
        awk 'BEGIN { IGNORECASE = 1 }
             /^X-Envelope-To:/ { to = $2 } /^Message-ID:/ { id = $2 }
             /^\r?$/ { print id, to; exit }' "$f" | tr -d '\r'
    done
}
count_state() { sql -c "SELECT count(*) FROM hpcacct.outbox_recipient WHERE state = '$1'"; }
wait_for() {  # wait_for SECONDS SQL-BOOLEAN
    local until=$((SECONDS + $1))
    while [ $SECONDS -lt $until ]; do
        [ "$(sql -c "SELECT ($2)")" = t ] && return 0
        sleep 0.2
    done
    return 1
}

# ---- the site: 12 GENCI projects under monthly regulation, two managers and a member each ----
createdb "$db"
sql >/dev/null <<'SQL'
CREATE EXTENSION hpcacct CASCADE;
SELECT hpcacct.create_job_table();
SET search_path = hpcacct, public;
INSERT INTO setting VALUES ('timezone', 'UTC');
INSERT INTO regulation_machine (machine, monthly_threshold) VALUES ('ada', 1000000);
INSERT INTO hpc_user (username) SELECT 'u' || i FROM generate_series(1, 36) i;
INSERT INTO contact (username, email, display_name)
SELECT 'u' || i, 'u' || i || '@lab' || (i % 3) || '.example', CASE WHEN i = 1 THEN 'Zoë Ünal' END
FROM generate_series(1, 36) i;
INSERT INTO account (name) SELECT 'p' || lpad(i::text, 2, '0') FROM generate_series(1, 12) i;
INSERT INTO membership (account, username, role)
SELECT 'p' || lpad(i::text, 2, '0'), 'u' || (3 * i - k), CASE WHEN k = 0 THEN 'member' ELSE 'admin' END
FROM generate_series(1, 12) i, generate_series(0, 2) k;
INSERT INTO ledger (account, kind, amount, unit, pool, valid_from, valid_until)
SELECT 'p' || lpad(i::text, 2, '0'), 'grant', 1200000, 'hours', 'ada', '2024-01-01', '2024-12-31'
FROM generate_series(1, 12) i;
CALL regulate('2024-02-15');
SQL
is "$(sql -c 'SELECT count(*) FROM hpcacct.outbox_recipient')" 24 \
   "setup: 12 warnings to 2 managers each are 24 deliveries"
sql -c 'CALL hpcacct.setup_roles()' -c "CREATE ROLE $mailer LOGIN IN ROLE hpcacct_notify" >/dev/null
is "$(sql -c "SELECT r.rolsuper, pg_has_role('$mailer', 'hpcacct_admin', 'MEMBER'), pg_has_role('$mailer', 'hpcacct_notify', 'MEMBER')
              FROM pg_roles r WHERE r.rolname = '$mailer'")" "f|f|t" \
   "setup: the sender's login is a member of hpcacct_notify, neither superuser nor administrator"

# ---- the command ----
[ -x "$sender" ]; ok $? "hpcacct-notify is installed in PostgreSQL's bindir"
out=$("$sender" --help 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q 'role hpcacct_notify' <<<"$out"; ok $? "--help names the role its login needs (exit $rc)" "$out"
out=$(HPCACCT_NOTIFY_FROM='' "$sender" --config "$work/notify.conf" --once 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q 'from must be' <<<"$out"; ok $? "a configuration without a sender address is refused (exit 1)" "$out"
out=$("$sender" --config "$work/notify.conf" --once --colour 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q 'unknown argument' <<<"$out"; ok $? "an unknown argument is refused" "$out"
out=$(HPCACCT_NOTIFY_SMTP_TLS=sometimes "$sender" --config "$work/notify.conf" --once 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q 'smtp_tls must be' <<<"$out"; ok $? "the environment overrides the file, and is checked" "$out"
# numbers out of range are refused (a database that does not exist: a sender that took them
# would try, and fail, to connect): timeout x batch overflowed (undefined behaviour) and passed
# the lease check; a poll of 2^63 - 1 s overflowed select()'s timeout; libcurl ignores a
# timeout over 2147483 s, which left none
for setting in TIMEOUT=9223372036854775807 POLL=9223372036854775807 LEASE=9999999999 TIMEOUT=3000000; do
    out=$(env HPCACCT_NOTIFY_LEASE=2000000000 HPCACCT_NOTIFY_CONNINFO=dbname=hpcacct_notify_nosuch \
              "HPCACCT_NOTIFY_$setting" "$sender" --config "$work/notify.conf" --once 2>&1); rc=$?
    key=$(tr 'A-Z' 'a-z' <<<"${setting%%=*}")
    [ $rc -eq 1 ] && grep -q "configuration: $key must be a whole number of seconds from 1 to" <<<"$out"
    ok $? "$key = ${setting#*=} is refused (exit 1, got $rc)" "$out"
done
# a sender's domain or a Message-ID domain that is not a host name (an empty label, a bare dot)
for setting in FROM=a@b..c FROM=a@. FROM=a@-lab.example DOMAIN=. DOMAIN=b..c; do
    out=$(env "HPCACCT_NOTIFY_$setting" "$sender" --config "$work/notify.conf" --once 2>&1); rc=$?
    key=$(tr 'A-Z' 'a-z' <<<"${setting%%=*}")
    [ $rc -eq 1 ] && grep -q "configuration: $key must be" <<<"$out"
    ok $? "$key = ${setting#*=} is refused (exit 1, got $rc)" "$out"
done
is "$(count_state delivered)" 0 "refused configurations sent nothing"

# ---- delivery ----
start_sink 0 || exit 1
"$sender" --config "$work/notify.conf" --once 2>"$work/once.log"; rc=$?
is "$rc" 0 "--once delivers what is due and exits 0"
is "$(count_state delivered)" 24 "every delivery is marked delivered"
is "$(arrivals | wc -l)" 24 "the server received 24 messages"
is "$(arrivals | awk '{print $2}' | sort | tr '\n' ' ')" \
   "$(sql -c "SELECT string_agg(address, ' ' ORDER BY address) || ' ' FROM hpcacct.outbox_recipient")" \
   "each to the envelope recipient the outbox names"
is "$(arrivals | awk '{print $2}' | grep -c -e '^u3@' -e '^u6@')" 0 "members who are not managers receive no regulation warning"
f=$(grep -l 'X-Envelope-To: u4@' "$mail"/*.eml | head -1)
grep -q '^Subject: \[hpcacct\] p02 on ada: under-consumption warning (2024-02-15)' "$f"; ok $? "the subject names project and date"
grep -q 'TMC = 100,000 hours' "$f" && grep -q 'theoretical consumption TC of 150,000 hours' "$f"
ok $? "the body carries the figures: TMC 100 000, TC(15 Feb) 150 000"
is "$(grep -c '^Message-ID: <hpcacct\.[0-9]*\.[0-9]*@centre\.example>' "$mail"/*.eml | grep -c ':1$')" 24 \
   "every message has a Message-ID per message and recipient"
f=$(grep -l 'X-Envelope-To: u1@' "$mail"/*.eml | head -1)
grep -q '^To: =?UTF-8?B?Wm/DqyDDnG5hbA==?= <u1@lab1.example>' "$f"; ok $? "a non-ASCII display name is encoded (RFC 2047)"
"$sender" --config "$work/notify.conf" --once 2>/dev/null
is "$(arrivals | wc -l)" 24 "a second run sends nothing again"
printf 'from = hpc-accounting@centre.example\nconninfo = dbname=%s user=%s\nsmtp_port = %s\n' "$db" "$mailer" "$port" >"$work/minimal.conf"
out=$("$sender" --config "$work/minimal.conf" --once 2>&1); rc=$?
is "$rc" 0 "a configuration with the defaults for everything but from, database and port is accepted ($out)"

# ---- NOTIFY wakes a running sender (poll is 600 s) ----
"$sender" --config "$work/notify.conf" 2>"$work/daemon.log" &
sender_pids+=($!)
sleep 1
sql -c "CALL hpcacct.regulate('2024-03-15')" 2>/dev/null
wait_for 10 "(SELECT count(*) FROM hpcacct.outbox_recipient WHERE state = 'delivered') = 48"
ok $? "a committed regulation run is delivered within seconds: NOTIFY woke the sender" "$(tail -3 "$work/daemon.log")"
grep -l 'hours retracted (2024-03-15)' "$mail"/*.eml | xargs grep -l 'goes from 1,200,000 to 1,100,000 hours' | wc -l >"$work/n"
is "$(cat "$work/n")" 24 "the retraction notices carry the allocation before and after"

# ---- the server down for a while loses nothing ----
stop_sink
sql -c "INSERT INTO hpcacct.account (name) VALUES ('q01'), ('q02')" \
    -c "INSERT INTO hpcacct.membership VALUES ('q01', 'u1', 'admin'), ('q02', 'u2', 'admin')" \
    -c "INSERT INTO hpcacct.ledger (account, kind, amount, unit, pool, valid_from, valid_until)
        VALUES ('q01', 'grant', 1200000, 'hours', 'ada', '2024-01-01', '2024-12-31'),
               ('q02', 'grant', 1200000, 'hours', 'ada', '2024-01-01', '2024-12-31')" \
    -c "CALL hpcacct.regulate('2024-04-15')" 2>/dev/null
new=$(sql -c "SELECT count(*) FROM hpcacct.outbox_recipient WHERE state = 'pending'")
[ "$new" -ge 2 ]; ok $? "setup: the 15 April run wrote $new deliveries"
# a mailbox's newer message (u1 and u2 manage two accounts each) waits for its older one
mailboxes=$(sql -c "SELECT count(DISTINCT mailbox) FROM hpcacct.outbox_recipient WHERE state = 'pending'")
oldest="(SELECT DISTINCT ON (r.mailbox) r.* FROM hpcacct.outbox_recipient r JOIN hpcacct.outbox m USING (message_id)
         WHERE r.state = 'pending' ORDER BY r.mailbox, m.created_at, m.message_id) o"
wait_for 10 "(SELECT min(attempts) FROM $oldest) >= 2"
ok $? "with the server down the sender retries (at least 2 attempts each, the oldest message to each mailbox)" \
   "$(tail -5 "$work/daemon.log")"
is "$(sql -c "SELECT count(*) FROM hpcacct.outbox_recipient WHERE state = 'pending' AND last_error ~ 'connect|Couldn'")" "$mailboxes" \
   "each pending with the connection error"
is "$(sql -c "SELECT count(*) FROM hpcacct.outbox_recipient WHERE state = 'pending' AND attempts = 0")" "$((new - mailboxes))" \
   "the $((new - mailboxes)) newer messages to a mailbox wait for the older ones, untried"
is "$(sql -c "SELECT count(*) FROM hpcacct.outbox_recipient WHERE state IN ('failed', 'uncertain')")" 0 \
   "none is given up"
sleep 3
start_sink 0 || exit 1
wait_for 15 "NOT EXISTS (SELECT 1 FROM hpcacct.outbox_recipient WHERE state <> 'delivered')"
ok $? "once the server is back, every delivery is made"
is "$(arrivals | wc -l)" "$((48 + new))" "and the server has each once"
kill "${sender_pids[0]}"; wait "${sender_pids[0]}" 2>/dev/null; sender_pids=()

# ---- SIGTERM while the claim waits for a lock: the sender cancels it and stops ----
# (someone's maintenance holds the outbox; stopping the service must not wait for it)
PGAPPNAME=hpcacct_test_lock psql -X -q -d "$db" \
    -c "BEGIN; LOCK TABLE hpcacct.outbox_recipient IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(300)" >/dev/null 2>&1 &
sender_pids+=($!)
wait_for 10 "EXISTS (SELECT 1 FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_stat_activity a USING (pid)
                     WHERE a.application_name = 'hpcacct_test_lock' AND l.mode = 'AccessExclusiveLock' AND l.granted)"
ok $? "setup: a session holds the outbox's deliveries locked"
"$sender" --config "$work/notify.conf" 2>"$work/stop.log" &
pid=$!
sender_pids+=($pid)
wait_for 10 "EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity WHERE application_name = 'hpcacct-notify' AND wait_event_type = 'Lock')"
ok $? "setup: the sender's claim waits for that lock" "$(cat "$work/stop.log")"
kill -TERM "$pid"
for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null; [ $? -ne 0 ]; ok $? "on SIGTERM the sender stops within 10 s, the lock still held" "$(cat "$work/stop.log")"
wait "$pid"; rc=$?
is "$rc/$(tail -1 "$work/stop.log")" "0/hpcacct-notify: 0 delivered; stopped by a signal" "it exits 0 and says why"
wait_for 5 "NOT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity WHERE application_name = 'hpcacct-notify')"
ok $? "its claim was cancelled on the server: no session of the sender is left waiting for the lock"
is "$(sql -c "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE application_name = 'hpcacct_test_lock'")" 1 \
   "the lock's session was not what ended the wait"
# a server that does not act on the cancel (its backend stopped): the sender leaves it after 10 s
"$sender" --config "$work/notify.conf" 2>"$work/stop.log" &
pid=$!
sender_pids+=($pid)
wait_for 10 "EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity WHERE application_name = 'hpcacct-notify' AND wait_event_type = 'Lock')"
ok $? "setup: a second sender's claim waits for the lock" "$(cat "$work/stop.log")"
backend=$(sql -c "SELECT pid FROM pg_catalog.pg_stat_activity WHERE application_name = 'hpcacct-notify'")
kill -STOP "$backend"
kill -TERM "$pid"
for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null; [ $? -ne 0 ]; ok $? "with its backend stopped, the sender still stops within 30 s" "$(cat "$work/stop.log")"
kill -CONT "$backend"
wait "$pid"; rc=$?
is "$rc/$(grep -c 'has not ended the cancelled statement in 10 s' "$work/stop.log")" "0/1" \
   "it exits 0 after saying it left the cancelled statement"
sql -c "SELECT pg_catalog.pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity WHERE application_name = 'hpcacct_test_lock'" >/dev/null
for p in "${sender_pids[@]}"; do wait "$p" 2>/dev/null; done
sender_pids=()

# ---- kill -9 of the sender mid-batch duplicates nothing ----
stop_sink
start_sink 0.15 || exit 1   # the server answers the final "." 0.15 s late
sql -c "INSERT INTO hpcacct.hpc_user (username) SELECT 'k' || i FROM generate_series(1, 40) i" \
    -c "INSERT INTO hpcacct.contact (username, email) SELECT 'k' || i, 'k' || i || '@kill.example' FROM generate_series(1, 40) i" \
    -c "INSERT INTO hpcacct.membership SELECT 'p' || lpad((1 + i % 12)::text, 2, '0'), 'k' || i, 'admin' FROM generate_series(1, 40) i" \
    -c "CALL hpcacct.regulate('2024-05-15')" 2>/dev/null
total=$(sql -c "SELECT count(*) FROM hpcacct.outbox_recipient WHERE state = 'pending'")
[ "$total" -ge 40 ]; ok $? "setup: the 15 May run wrote $total deliveries"
kills=0
kills_mid=0
for round in $(seq 1 40); do
    left=$(count_state pending)
    [ "$left" -eq 0 ] && break
    HPCACCT_NOTIFY_LEASE=3 HPCACCT_NOTIFY_TIMEOUT=1 HPCACCT_NOTIFY_BATCH=2 \
        "$sender" --config "$work/notify.conf" 2>>"$work/kill.log" &
    pid=$!
    sleep "0.$((RANDOM % 5 + 2))"
    kill -9 "$pid" 2>/dev/null && kills=$((kills + 1))
    wait "$pid" 2>/dev/null
    [ "$(count_state pending)" -gt 0 ] && kills_mid=$((kills_mid + 1))
    # leases of the killed sender run out before the next claim
    sleep 0.5
done
[ "$kills_mid" -ge 3 ]; ok $? "the sender was killed with -9 mid-batch ($kills_mid of $kills kills left deliveries pending)"
sleep 3.2   # every lease of a killed sender has run out
HPCACCT_NOTIFY_LEASE=3 HPCACCT_NOTIFY_TIMEOUT=1 HPCACCT_NOTIFY_BATCH=2 "$sender" --config "$work/notify.conf" --once 2>>"$work/kill.log"
is "$(sql -c "SELECT count(*) FROM hpcacct.outbox_recipient WHERE state NOT IN ('delivered', 'uncertain')")" 0 \
   "afterwards every delivery is delivered or uncertain"
dups=$(arrivals | sort | uniq -d)
is "$dups" "" "no message reached a recipient twice"
delivered_ids=$(sql -c "SELECT '<hpcacct.' || message_id || '.' || recipient_id || '@centre.example> ' || address
                         FROM hpcacct.outbox_recipient WHERE state = 'delivered' ORDER BY 1")
missing=$(comm -23 <(echo "$delivered_ids") <(arrivals | sort))
is "$missing" "" "every delivery marked delivered reached the server"
uncertain=$(count_state uncertain)
arrived_uncertain=$(comm -12 <(sql -c "SELECT '<hpcacct.' || message_id || '.' || recipient_id || '@centre.example> ' || address
                                       FROM hpcacct.outbox_recipient WHERE state = 'uncertain' ORDER BY 1") <(arrivals | sort) | wc -l)
echo "# $uncertain uncertain deliveries (killed between 'sending' and the server's answer), $arrived_uncertain of them arrived"
is "$(( $(arrivals | wc -l) ))" "$(( $(count_state delivered) + arrived_uncertain ))" \
   "the server holds exactly the delivered ones and the uncertain ones it got"

# ---- AUTH, a refused login, a refused recipient ----
stop_sink
start_sink_with() { $python test/notify/smtp_sink.py --port "$port" --dir "$mail" "$@" >"$work/sink.log" 2>&1 &
                    sink_pid=$!
                    for _ in $(seq 50); do grep -q ready "$work/sink.log" 2>/dev/null && return 0; sleep 0.1; done; return 1; }
start_sink_with --auth 'hpcmail:s3cret' --refuse 'gone@lab0.example' || exit 1
before=$(arrivals | wc -l)
sql -c "INSERT INTO hpcacct.hpc_user VALUES ('gone')" -c "INSERT INTO hpcacct.contact (username, email) VALUES ('gone', 'gone@lab0.example')" \
    -c "SELECT hpcacct.outbox_add('balance_low', 'auth/test', NULL, 'auth test', 'figures: 42', '{}', false, ARRAY['u1', 'gone'])" >/dev/null
HPCACCT_NOTIFY_SMTP_USER=hpcmail HPCACCT_NOTIFY_SMTP_PASSWORD=wrong "$sender" --config "$work/notify.conf" --once 2>"$work/auth.log"
is "$(sql -c "SELECT string_agg(state, ',' ORDER BY address) FROM hpcacct.outbox_status WHERE subject = 'auth test'")" "pending,pending" \
   "a refused login loses nothing: both deliveries wait for a retry"
grep -q -i 'login denied\|535' "$work/auth.log"; ok $? "and the log says why" "$(tail -2 "$work/auth.log")"
sleep 1.5
HPCACCT_NOTIFY_SMTP_USER=hpcmail HPCACCT_NOTIFY_SMTP_PASSWORD=s3cret "$sender" --config "$work/notify.conf" --once 2>>"$work/auth.log"
is "$(sql -c "SELECT string_agg(address || ' ' || state, ',' ORDER BY address) FROM hpcacct.outbox_status WHERE subject = 'auth test'")" \
   "gone@lab0.example failed,u1@lab1.example delivered" \
   "with the right password it is delivered; a recipient the server refuses (550) fails for good"
is "$(( $(arrivals | wc -l) - before ))" 1 "the server got the one message"

# ---- one recipient refused for now (450) holds up no other ----
stop_sink
start_sink_with --defer 'full@lab0.example' || exit 1
before=$(arrivals | wc -l)
sql -c "INSERT INTO hpcacct.hpc_user VALUES ('full')" -c "INSERT INTO hpcacct.contact (username, email) VALUES ('full', 'full@lab0.example')" \
    -c "SELECT hpcacct.outbox_add('balance_low', 'defer/' || u, NULL, 'defer test', 'figures: 44', '{}', false, ARRAY[u])
        FROM unnest(ARRAY['full', 'u1', 'u2', 'u4', 'u5']) u" >/dev/null
for _ in 1 2 3; do "$sender" --config "$work/notify.conf" --once 2>>"$work/defer.log"; sleep 1.1; done
is "$(sql -c "SELECT string_agg(address || ' ' || state, ',' ORDER BY address) FROM hpcacct.outbox_status WHERE subject = 'defer test'")" \
   "full@lab0.example pending,u1@lab1.example delivered,u2@lab2.example delivered,u4@lab1.example delivered,u5@lab2.example delivered" \
   "a recipient refused with 450 waits for a retry; the others of its batch are delivered" "$(tail -4 "$work/defer.log")"
is "$(( $(arrivals | wc -l) - before ))" 4 "the server got the four messages once each"
sql -c "UPDATE hpcacct.outbox_recipient SET state = 'failed' WHERE address = 'full@lab0.example'"  # out of the next tests' way

# ---- STARTTLS: required by the server, verified by the sender ----
stop_sink
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$work/key.pem" -out "$work/cert.pem" -days 1 \
    -subj /CN=localhost -addext subjectAltName=IP:127.0.0.1 >"$work/openssl.log" 2>&1
ok $? "setup: a self-signed certificate for 127.0.0.1" "$(tail -2 "$work/openssl.log")"
start_sink_with --tls "$work/cert.pem" "$work/key.pem" --auth 'hpcmail:s3cret' || exit 1
before=$(arrivals | wc -l)
sql -c "SELECT hpcacct.outbox_add('balance_low', 'tls/test', NULL, 'tls test', 'figures: 43', '{}', false, ARRAY['u2'])" >/dev/null
HPCACCT_NOTIFY_SMTP_TLS=none HPCACCT_NOTIFY_SMTP_USER=hpcmail HPCACCT_NOTIFY_SMTP_PASSWORD=s3cret \
    "$sender" --config "$work/notify.conf" --once 2>"$work/tls.log"
is "$(sql -c "SELECT state FROM hpcacct.outbox_status WHERE subject = 'tls test'")" pending \
   "without STARTTLS the server refuses, and the delivery waits"
sleep 1.5
HPCACCT_NOTIFY_SMTP_TLS=require_starttls HPCACCT_NOTIFY_SMTP_USER=hpcmail \
    HPCACCT_NOTIFY_SMTP_PASSWORD=s3cret "$sender" --config "$work/notify.conf" --once 2>"$work/tls2.log"
[ "$(sql -c "SELECT state FROM hpcacct.outbox_status WHERE subject = 'tls test'")" = pending ] \
    && grep -q 'retry (.*SSL certificate problem: self-signed certificate' "$work/tls2.log"
ok $? "a certificate the system's CAs do not vouch for: nothing sent, still waiting" "$(cat "$work/tls2.log")"
sleep 2.5
HPCACCT_NOTIFY_SMTP_TLS=require_starttls HPCACCT_NOTIFY_SMTP_CAINFO="$work/cert.pem" HPCACCT_NOTIFY_SMTP_USER=hpcmail \
    HPCACCT_NOTIFY_SMTP_PASSWORD=s3cret "$sender" --config "$work/notify.conf" --once 2>>"$work/tls.log"
is "$(sql -c "SELECT state FROM hpcacct.outbox_status WHERE subject = 'tls test'")" delivered \
   "with STARTTLS, a verified certificate and AUTH it is delivered" "$(tail -3 "$work/tls.log")"
is "$(( $(arrivals | wc -l) - before ))" 1 "the server got it once"

# ---- pg_dump and pg_restore keep the outbox as it is ----
# The logs' triggers fire while pg_restore loads the logs; the outbox is loaded before them,
# so they find every decision's message and write none.
pg_dump -Fc -d "$db" -f "$work/notify.dump" 2>"$work/dump.log" && createdb "${db}_restored" \
    && pg_restore -d "${db}_restored" "$work/notify.dump" 2>>"$work/dump.log"
ok $? "the database with its outbox dumps and restores" "$(tail -3 "$work/dump.log")"
outbox_text='SELECT m.message_id, m.topic, m.decision_key, m.account, md5(m.body), m.addressed_to, r.address, r.state
             FROM hpcacct.outbox m LEFT JOIN hpcacct.outbox_recipient r USING (message_id) ORDER BY 1, 7'
is "$(psql -X -At -d "${db}_restored" -c "$outbox_text" | md5sum)" "$(sql -c "$outbox_text" | md5sum)" \
   "the restored outbox and deliveries are the original ones ($(sql -c 'SELECT count(*) FROM hpcacct.outbox') messages)"

# ---- monthly statements in a real browser ----
. test/notify/statements.sh
# the README's my_accounts() and account_month() examples, on the same sample site
. test/notify/readme_json.sh

# ---- mail that every server and reader takes as written ----
# What arrives is read back as a mail reader reads it (test/notify/check_mail.py): line
# lengths, encoded words, and the decoded subject, display name and body against the outbox.
check_mail() {  # check_mail DATABASE LABEL WHERE: the deliveries of the outbox rows WHERE
    psql -X -At -d "$1" -c "SELECT json_agg(json_build_object('id', m.message_id, 'to', r.address,
                                'subject', m.subject, 'name', coalesce(c.display_name, ''),
                                'body', encode(convert_to(m.body, 'UTF8'), 'hex')))
                            FROM hpcacct.outbox m JOIN hpcacct.outbox_recipient r USING (message_id)
                            LEFT JOIN hpcacct.contact c ON c.username = r.username WHERE $3" >"$work/expected.json"
    local out status desc diag
    out=$($python test/notify/check_mail.py "$mail" "$work/expected.json" 2>&1)
    ok $? "$2: the messages are read back" "$out"
    while IFS='|' read -r status desc diag; do
        ok "$status" "$2: $desc" "$(printf '%b' "$diag")"
    done <<<"$out"
}
stop_sink
start_sink 0 || exit 1
sql >/dev/null <<'SQL'
SET search_path = hpcacct, public;
INSERT INTO hpc_user VALUES ('mime1'), ('mime2'), ('mime3'), ('mime4');
INSERT INTO contact (username, email, display_name) VALUES
    ('mime1', 'mime1@lab1.example', 'Prof. Dr. "Quoted" \Backslash\ ' || repeat('Longname-', 6) || ' ' || repeat('x', 90)),
    ('mime2', 'mime2@lab2.example', repeat(E'Zoë Łukasiewicz-Ünal \U0001D11E ', 6)),
    ('mime3', 'mime3@lab0.example', '=?UTF-8?B?SGk=?= is no encoded word'),
    ('mime4', 'mime4@lab1.example', 'Ann "the" O\Neil, PhD <x>');
-- long lines (ASCII, 2- and 4-byte UTF-8), dots, trailing blanks, a lone CR, CRLF, '=', no final LF
SELECT outbox_add('balance_low', 'mime/long', NULL,
    repeat('word ', 30) || repeat('A', 150) || ' end',
    repeat('x', 2000) || E'\n' || repeat('é', 700) || E'\n' || repeat(E'€\U0001D11Ea', 400) || E'\n'
    || E'.\n..two dots\n. a dot and a space\ntrailing spaces   \ntrailing tab\t\n \n\t\n'
    || E'lone CR\rinside\nCRLF\r\nline\n= and =3D and =?UTF-8?B?SGk=?=\nFrom the start\n\n\nno final newline  ',
    '{}', false, ARRAY['u1', 'mime1', 'mime2', 'mime3', 'mime4']);
SELECT outbox_add('balance_low', 'mime/utf8', NULL,
    repeat(E'Dépassement de quota — ž \U0001D11E ', 8),
    E'.\nÜberschreitung\r', '{}', false, ARRAY['u1', 'mime1', 'mime2', 'mime3', 'mime4']);
SELECT outbox_add('balance_low', 'mime/plain', NULL, 'Zoë: a short one',
    E'Grüße,\n.a dot first\nnothing else\n', '{}', false, ARRAY['u1', 'mime1', 'mime2', 'mime3', 'mime4']);
SELECT outbox_add('balance_low', 'mime/word', NULL, '=?UTF-8?B?SGk=?= is no encoded word', '',
    '{}', false, ARRAY['u1', 'mime1', 'mime2', 'mime3', 'mime4']);
SQL
"$sender" --config "$work/notify.conf" --once 2>"$work/mime.log"
is "$(sql -c "SELECT string_agg(DISTINCT r.state, ',') FROM hpcacct.outbox m JOIN hpcacct.outbox_recipient r USING (message_id)
               WHERE m.decision_key LIKE 'mime/%'")" delivered \
   "messages with long lines, long subjects and names, dots, blanks and CRs are delivered" "$(tail -3 "$work/mime.log")"
check_mail "$db" "hostile text" "m.decision_key LIKE 'mime/%'"
f=$(grep -l "^X-Hpcacct-Message: $(sql -c "SELECT message_id FROM hpcacct.outbox WHERE decision_key = 'mime/plain'")"$'\r' "$mail"/*.eml | head -1)
grep -q '^Content-Transfer-Encoding: 8bit' "$f" && grep -q 'Grüße,' "$f"
ok $? "a body of short lines keeps its UTF-8 readable in the source (8bit)"

# a CR or LF in an account's or a user's name (test/notify/hostile_site.sql, loaded by
# statements.sh) shows as a space in the bodies, as in subjects: it splits no line
sql_h() { psql -X -q -At -v ON_ERROR_STOP=1 -d hpcacct_hostile "$@"; }
sql_h >"$work/hostile-mail.log" 2>&1 <<'SQL'
SET search_path = hpcacct, public;
CALL setup_roles();
INSERT INTO hpc_user VALUES (E'bad\r\nuser\nname');
INSERT INTO contact (username, email, display_name)
SELECT username, 'hostile' || row_number() OVER (ORDER BY username) || '@lab.example', username
FROM hpc_user WHERE username !~ '[[:cntrl:]]'
UNION ALL SELECT E'bad\r\nuser\nname', 'bad@lab.example', NULL;
INSERT INTO balance_threshold VALUES (99);
SELECT notify_scan('2025-06-20');
INSERT INTO pending_job (cluster, jobid, username, account)
SELECT cl, E'j\r\n1', E'bad\r\nuser\nname', acct FROM (SELECT cluster AS cl FROM resource LIMIT 1) r,
       (SELECT name AS acct FROM account WHERE name LIKE '<script>%') a;
UPDATE pending_job SET held = true, hold_reason = 'no allocation';
SQL
ok $? "setup: the hostile site's scan and a held job of a user named with CR/LF write messages" "$(tail -3 "$work/hostile-mail.log")"
is "$(sql_h -c "SELECT count(*) FILTER (WHERE m.account LIKE '<script>%') > 1, count(*) FILTER (WHERE m.topic = 'job_held'),
                       count(*) FILTER (WHERE pg_catalog.translate(m.body, E'\n', '') ~ '[[:cntrl:]]')
                FROM hpcacct.outbox m")" "t|1|0" \
   "the messages about the account and the held job have no control character but LF in their bodies" \
   "$(sql_h -c "SELECT topic, body FROM hpcacct.outbox WHERE translate(body, E'\n', '') ~ '[[:cntrl:]]' LIMIT 2")"
is "$(sql_h -c "SELECT bool_and(strpos(m.body, pg_catalog.regexp_replace(m.account, '[[:cntrl:]]', ' ', 'g')) > 0)
                       AND bool_or(m.body LIKE E'Dear bad  user name,\n%')
                FROM hpcacct.outbox m WHERE m.account LIKE '<script>%'")" t \
   "the names show with a space for each CR or LF"
HPCACCT_NOTIFY_CONNINFO="dbname=hpcacct_hostile user=$mailer" "$sender" --config "$work/notify.conf" --once 2>"$work/hostile-send.log"
is "$(sql_h -c "SELECT string_agg(DISTINCT state, ',') FROM hpcacct.outbox_status WHERE state <> 'no_recipient'")" delivered \
   "they are delivered" "$(tail -3 "$work/hostile-send.log")"
check_mail hpcacct_hostile "hostile names" "true"

# ---- internationalized addresses ----
# A domain that is not ASCII goes as its A-label (envelope and To:); a local part that is not
# ASCII only to a server that offers SMTPUTF8, with it on MAIL FROM; a domain with no A-label,
# or a server without SMTPUTF8 for such a local part: failed with the reason, nothing sent.
out=$(HPCACCT_NOTIFY_FROM='zoë@centre.example' "$sender" --config "$work/notify.conf" --once 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q 'from must be an address with an ASCII local part' <<<"$out"
ok $? "a sender address with a non-ASCII local part is refused (exit 1)" "$out"
out=$(HPCACCT_NOTIFY_DOMAIN='☃.example' "$sender" --config "$work/notify.conf" --once 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q 'domain must be a domain name' <<<"$out"
ok $? "a Message-ID domain with no A-label is refused (exit 1)" "$out"
stop_sink
start_sink_with --no-smtputf8 || exit 1
before=$(arrivals | wc -l)
sql >/dev/null <<'SQL'
SET search_path = hpcacct, public;
INSERT INTO hpc_user VALUES ('idn1'), ('idn2'), ('idn3'), ('idn4');
INSERT INTO contact (username, email) VALUES
    ('idn1', 'zoë@lab.example'), ('idn2', 'c@Université.example'), ('idn3', 'd@☃.example'),
    ('idn4', 'z@x＞，＜v＠evil.example');
SELECT outbox_add('balance_low', 'idn/1', NULL, 'idn test', E'figures: 45\n', '{}', false,
                  ARRAY['idn1', 'idn2', 'idn3', 'idn4', 'u2']);
SQL
"$sender" --config "$work/notify.conf" --once 2>"$work/idn.log"
idn_state() { sql -c "SELECT state || ' ' || coalesce(last_error, '') FROM hpcacct.outbox_status
                      WHERE subject = 'idn test' AND address = '$1'"; }
is "$(idn_state 'c@Université.example')" "delivered " "an internationalized domain is delivered" "$(cat "$work/idn.log")"
f=$(grep -l -a 'X-Envelope-To: c@xn--universit-j4a.example' "$mail"/*.eml | head -1)
[ -n "$f" ] && grep -q '^To: <c@xn--universit-j4a\.example>' "$f"
ok $? "as its A-label, in the envelope and in To:"
is "$(idn_state 'd@☃.example')" \
   'failed the domain of "d@☃.example" has no IDNA A-label (libidn2: string contains a disallowed character); nothing was sent' \
   "a domain with no A-label fails with the reason"
# UTS #46 maps fullwidth '＞，＜＠' to ASCII: the A-label would add a recipient (envelope, To:)
is "$(idn_state 'z@x＞，＜v＠evil.example')" \
   'failed the domain of "z@x＞，＜v＠evil.example" has no IDNA A-label (maps to "x>,<v@evil.example"); nothing was sent' \
   "a domain whose IDNA mapping holds '<', '>', ',' or '@' fails with the reason"
is "$(idn_state 'zoë@lab.example')" \
   "failed the local part of zoë@lab.example is not ASCII and the server does not offer SMTPUTF8 (RFC 6531); nothing was sent" \
   "a non-ASCII local part to a server without SMTPUTF8 fails with the reason"
is "$(idn_state 'u2@lab2.example')" "delivered " "the message's ASCII recipient is delivered"
is "$(( $(arrivals | wc -l) - before ))" 2 "the server got the two it could take, nothing for the others"
stop_sink
start_sink 0 || exit 1   # aiosmtpd offers SMTPUTF8
sql -c "UPDATE hpcacct.outbox_recipient SET state = 'pending', next_attempt = now() WHERE address = 'zoë@lab.example'"
"$sender" --config "$work/notify.conf" --once 2>>"$work/idn.log"
is "$(idn_state 'zoë@lab.example')" "delivered " "to a server that offers SMTPUTF8 it is delivered" "$(tail -2 "$work/idn.log")"
f=$(grep -l -a 'X-Envelope-To: zoë@lab.example' "$mail"/*.eml | head -1)
[ -n "$f" ] && grep -q '^X-Envelope-SMTPUTF8: yes' "$f" && grep -q '^To: <zoë@lab\.example>' "$f"
ok $? "with SMTPUTF8 on MAIL FROM, the address as it is in To:"

# ---- one mailbox, one copy ----
# Users whose addresses name one mailbox -- an internationalized domain and its A-label, a
# domain in other case -- get one copy of a message; a local part in other case is another
# mailbox (RFC 5321: only its own server may read it otherwise).
sql >/dev/null <<'SQL'
SET search_path = hpcacct, public;
INSERT INTO hpc_user VALUES ('mb1'), ('mb2'), ('mb3'), ('mb4');
INSERT INTO contact (username, email) VALUES ('mb1', 'x@bücher.example'), ('mb2', 'x@xn--bcher-kva.example'),
    ('mb3', 'x@BÜCHER.Example'), ('mb4', 'X@bücher.example');
SELECT outbox_add('balance_low', 'mailbox/1', NULL, 'mailbox test', E'one copy\n', '{}', false,
                  ARRAY['mb1', 'mb2', 'mb3', 'mb4']);
SQL
"$sender" --config "$work/notify.conf" --once 2>"$work/mailbox.log"
is "$(sql -c "SELECT string_agg(address || ' ' || state, ',' ORDER BY address) FROM hpcacct.outbox_status WHERE subject = 'mailbox test'")" \
   "X@bücher.example delivered,x@BÜCHER.Example delivered,x@bücher.example delivered,x@xn--bcher-kva.example delivered" \
   "each user's delivery is delivered: three addresses of one mailbox by one copy, X@ by another" "$(cat "$work/mailbox.log")"
is "$(arrivals | grep -a -c '@xn--bcher-kva\.example$')" 2 "the server got two messages for the domain"
is "$(arrivals | grep -a -c ' x@xn--bcher-kva\.example$')" 1 "x@xn--bcher-kva.example got one copy"
is "$(arrivals | grep -a -c ' X@xn--bcher-kva\.example$')" 1 "X@xn--bcher-kva.example got its own"
# a user who moves to another recipient's address (her delivery follows her, whoever has the
# address): a message already delivered to it is not sent again, one waiting for both goes once
sql >/dev/null <<'SQL'
SET search_path = hpcacct, public;
INSERT INTO hpc_user VALUES ('mv1'), ('mv2');
INSERT INTO contact (username, email) VALUES ('mv1', 'shared@mv.example'), ('mv2', 'own@mv.example');
SELECT outbox_add('balance_low', 'move/1', NULL, 'move 1', E'one copy\n', '{}', false, ARRAY['mv1', 'mv2']);
UPDATE outbox_recipient SET next_attempt = now() + interval '1 day' WHERE username = 'mv2';
SQL
"$sender" --config "$work/notify.conf" --once 2>"$work/move.log"
sql >/dev/null <<'SQL'
SET search_path = hpcacct, public;
UPDATE contact SET email = 'shared@mv.example' WHERE username = 'mv2';
UPDATE outbox_recipient SET next_attempt = now() WHERE username = 'mv2' AND state = 'pending';
SELECT outbox_add('balance_low', 'move/2', NULL, 'move 2', E'one copy\n', '{}', false, ARRAY['mv1', 'mv2']);
SQL
"$sender" --config "$work/notify.conf" --once 2>>"$work/move.log"
is "$(sql -c "SELECT string_agg(subject || ' ' || username || ' ' || address || ' ' || state, ',' ORDER BY subject, username)
              FROM hpcacct.outbox_status WHERE subject LIKE 'move %'")" \
   "move 1 mv1 shared@mv.example delivered,move 1 mv2 shared@mv.example delivered,move 2 mv1 shared@mv.example delivered,move 2 mv2 shared@mv.example delivered" \
   "both users' deliveries of both messages are delivered" "$(cat "$work/move.log")"
is "$(arrivals | grep -a -c ' shared@mv\.example$')" 2 "the mailbox got one copy of each message" "$(arrivals | grep -a mv.example)"
is "$(arrivals | grep -a -c ' own@mv\.example$')" 0 "her old address none"

# ---- messages to a mailbox arrive in the order written ----
# The server refuses the final "." of one message for now (451): a newer message to the same
# mailbox waits for its retry (another mailbox's does not), both then arrive in the order
# written; after notify_order_wait a newer one goes while the older is still refused.
order_state() { sql -c "SELECT string_agg(m.decision_key || ' ' || r.state || ' ' || r.attempts, ',' ORDER BY m.message_id)
                        FROM hpcacct.outbox m JOIN hpcacct.outbox_recipient r USING (message_id)
                        WHERE m.decision_key LIKE 'order/%'"; }
order_add() { sql -c "SELECT hpcacct.outbox_add('quota_state', 'order/$1', NULL, 'order $2', E'state $2\n', '{}', false,
                                                ARRAY['$3'])" >/dev/null; }
stop_sink
start_sink_with --defer-data 'state one' --defer-data 'state three' || exit 1
sql -c "INSERT INTO hpcacct.hpc_user VALUES ('ord')" -c "INSERT INTO hpcacct.contact (username, email) VALUES ('ord', 'ord@lab0.example')" >/dev/null
order_add 1 one ord
"$sender" --config "$work/notify.conf" --once 2>"$work/order.log"
order_add 2 two ord
order_add 9 other u2
"$sender" --config "$work/notify.conf" --once 2>>"$work/order.log"
is "$(order_state)" "order/1 pending 1,order/2 pending 0,order/9 delivered 1" \
   "a message refused for now (451) is retried; a newer one to its mailbox waits, another mailbox's goes" \
   "$(cat "$work/order.log")"
stop_sink
start_sink 0 || exit 1
sleep 1.1   # order/1's back-off (retry_base 1 s)
"$sender" --config "$work/notify.conf" --once 2>>"$work/order.log"
is "$(order_state)" "order/1 delivered 2,order/2 delivered 1,order/9 delivered 1" "once the server takes it, both are delivered" \
   "$(cat "$work/order.log")"
is "$(grep -l -a 'X-Envelope-To: ord@lab0.example' "$mail"/*.eml | sort -t- -k2 | xargs grep -h -a '^Subject:' | tr -d '\r' | tr '\n' ',')" \
   "Subject: order one,Subject: order two," "in the order written"
stop_sink
start_sink_with --defer-data 'state three' || exit 1
sql -c "INSERT INTO hpcacct.setting VALUES ('notify_order_wait', '2 seconds')" >/dev/null
order_add 3 three ord
"$sender" --config "$work/notify.conf" --once 2>>"$work/order.log"
order_add 4 four ord
"$sender" --config "$work/notify.conf" --once 2>>"$work/order.log"
first=$(order_state)
sleep 2.1
"$sender" --config "$work/notify.conf" --once 2>>"$work/order.log"
is "$first / $(order_state | cut -d, -f4-)" \
   "order/1 delivered 2,order/2 delivered 1,order/9 delivered 1,order/3 pending 1,order/4 pending 0 / order/3 pending 2,order/4 delivered 1" \
   "after notify_order_wait (2 s) the newer one goes while the older is still refused" "$(tail -4 "$work/order.log")"
sql -c "DELETE FROM hpcacct.setting WHERE name = 'notify_order_wait'" \
    -c "UPDATE hpcacct.outbox_recipient SET state = 'failed' WHERE state = 'pending'" >/dev/null

# ---- the server down while a member leaves and another moves: where the message goes ----
# A delivery waiting for the server follows the membership and the contact until it is sent
# (pgTAP mail_year): nothing to the member removed meanwhile, the moved one at the new address.
stop_sink
sql >/dev/null <<'SQL'
SET search_path = hpcacct, public;
INSERT INTO hpc_user VALUES ('yr1'), ('yr2'), ('yr3');
INSERT INTO contact (username, email) VALUES ('yr1', 'yr1@lab0.example'), ('yr2', 'yr2@lab0.example'),
    ('yr3', 'yr3@old.example');
INSERT INTO account (name) VALUES ('y01');
INSERT INTO membership VALUES ('y01', 'yr1', 'admin'), ('y01', 'yr2', 'member'), ('y01', 'yr3', 'member');
SELECT outbox_add('account_expiry', 'year/1', 'y01', 'year test', E'to the members of y01\n', '{}', true);
SQL
"$sender" --config "$work/notify.conf" --once 2>"$work/year.log"
is "$(sql -c "SELECT string_agg(username || ' ' || state || ' ' || attempts, ',' ORDER BY username) FROM hpcacct.outbox_status WHERE subject = 'year test'")" \
   "yr1 pending 1,yr2 pending 1,yr3 pending 1" "setup: with the server down, the three deliveries wait" "$(cat "$work/year.log")"
sql -c "SELECT hpcacct.remove_member('y01', 'yr2')" -c "UPDATE hpcacct.contact SET email = 'yr3@new.example' WHERE username = 'yr3'" >/dev/null
start_sink 0 || exit 1
sleep 2.1   # the back-off (retry_max 2 s)
before=$(arrivals | grep -a -c ' yr')
"$sender" --config "$work/notify.conf" --once 2>>"$work/year.log"
is "$(sql -c "SELECT string_agg(username || ' ' || state || ' ' || address, ',' ORDER BY username) FROM hpcacct.outbox_status WHERE subject = 'year test'")" \
   "yr1 delivered yr1@lab0.example,yr2 withdrawn yr2@lab0.example,yr3 delivered yr3@new.example" \
   "once the server is back: the removed member's delivery is withdrawn, the moved one's sent to the new address" \
   "$(cat "$work/year.log")"
is "$(arrivals | grep -a ' yr' | awk '{print $2}' | sort | tr '\n' ' ')" "yr1@lab0.example yr3@new.example " \
   "the server got the message for yr1 and yr3's new address, none for yr2 or yr3's old one (before: $before)"

# ---- a site in New York: the commands' days and months are the site's, in any TimeZone ----
# The jobs of pgTAP dst_year: 144 NPL in March 2026, 109 of them by the end of 8 March (a day
# of 23 hours), 160 in November (1 November has 25). A scan of 8 March finds 891 NPL left
# (above 88 %), one of 31 March 856: the message names that day and its balance. The sender
# and hpcacct-report run with PGTZ=UTC and +14, a portal's or a laptop's zone.
dst=${db}_dst
createdb "$dst"
psql -X -q -At -v ON_ERROR_STOP=1 -d "$dst" >"$work/dst.log" 2>&1 <<'SQL'
CREATE EXTENSION hpcacct CASCADE;
SELECT hpcacct.create_job_table();
CALL hpcacct.setup_roles();
SET search_path = hpcacct, public;
INSERT INTO setting VALUES ('timezone', 'America/New_York'), ('bank_unit', 'NPL');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('dy_ny', 'p', 'cpu=64', 'cpu=1', 1, 'NPL');
INSERT INTO account (name) VALUES ('dy_ny');
SELECT deposit('dy_ny', q, 1000) FROM unnest(ARRAY[date '2026-01-01', '2026-10-01']) q;
INSERT INTO hpc_user (username) VALUES ('dyu');
INSERT INTO contact (username, email) VALUES ('dyu', 'dyu@lab0.example');
INSERT INTO membership (account, username, role) VALUES ('dy_ny', 'dyu', 'admin');
INSERT INTO job (cluster, jobid, account, "user", partition, start, "end", alloctres, state) VALUES
    ('dy_ny', 'm7a', 'dy_ny', 'dyu', 'p', '2026-03-07 23:40-05', '2026-03-07 23:55-05', 'cpu=60', 'COMPLETED'),
    ('dy_ny', 'm8x', 'dy_ny', 'dyu', 'p', '2026-03-07 23:50-05', '2026-03-08 00:10-05', 'cpu=60', 'COMPLETED'),
    ('dy_ny', 'dst', 'dy_ny', 'dyu', 'p', '2026-03-08 01:30-05', '2026-03-08 03:30-04', 'cpu=60', 'COMPLETED'),
    ('dy_ny', 'm8b', 'dy_ny', 'dyu', 'p', '2026-03-08 23:50-04', '2026-03-08 23:59-04', 'cpu=60', 'COMPLETED'),
    ('dy_ny', 'm9a', 'dy_ny', 'dyu', 'p', '2026-03-08 23:55-04', '2026-03-09 00:05-04', 'cpu=60', 'COMPLETED'),
    ('dy_ny', 'q1',  'dy_ny', 'dyu', 'p', '2026-03-31 23:30-04', '2026-04-01 00:30-04', 'cpu=60', 'COMPLETED'),
    ('dy_ny', 'q3',  'dy_ny', 'dyu', 'p', '2026-09-30 23:45-04', '2026-10-01 00:15-04', 'cpu=60', 'COMPLETED'),
    ('dy_ny', 'o31', 'dy_ny', 'dyu', 'p', '2026-10-31 23:50-04', '2026-11-01 00:10-04', 'cpu=60', 'COMPLETED'),
    ('dy_ny', 'fb',  'dy_ny', 'dyu', 'p', '2026-11-01 00:30-04', '2026-11-01 01:30-05', 'cpu=60', 'COMPLETED'),
    ('dy_ny', 'n1e', 'dy_ny', 'dyu', 'p', '2026-11-01 23:50-05', '2026-11-02 00:20-05', 'cpu=60', 'COMPLETED');
INSERT INTO balance_threshold VALUES (88);
SELECT notify_scan('2026-03-08');
SELECT notify_scan('2026-03-31');
SQL
ok $? "New York: the site loads and is scanned on 8 and 31 March" "$(tail -3 "$work/dst.log")"
sed "s/^conninfo = .*/conninfo = dbname=$dst user=$mailer/" "$work/notify.conf" >"$work/dst.conf"
PGTZ=Pacific/Kiritimati "$sender" --config "$work/dst.conf" --once 2>"$work/dst-send.log"
got=$(grep -l -a 'X-Envelope-To: dyu@lab0.example' "$mail"/*.eml 2>/dev/null | while read -r f; do
          $python -c 'import sys, email, email.policy
m = email.message_from_binary_file(open(sys.argv[1], "rb"), policy=email.policy.default)
body = m.get_body().get_content()
if "credits left" in m["Subject"]:  # not the notice that the allocation ends on 1 April
    print(m["Subject"], "|", [l for l in body.splitlines() if "at the end of" in l][0].strip())' "$f"; done)
is "$got" "[hpcacct] dy_ny: less than 88 % of the quarter's credits left (2026-03-31) | at the end of 2026-03-31, account dy_ny held 856.00 NPL of the 1,000.00 NPL" \
   "New York: one balance message arrives, of 31 March, with that day's balance (sender in +14)" "$(cat "$work/dst-send.log")"
for z in America/New_York UTC Pacific/Kiritimati; do
    for m in 2026-03 2026-11; do
        PGTZ=$z "$report" -d "$dst" dy_ny $m >"$work/dst-$m-${z//\//_}.html" 2>>"$work/dst-report.log"
        PGTZ=$z "$report" -d "$dst" --json dy_ny $m >"$work/dst-$m-${z//\//_}.json" 2>>"$work/dst-report.log"
    done
done
cmp -s "$work/dst-2026-03-UTC.html" "$work/dst-2026-03-America_New_York.html" \
    && cmp -s "$work/dst-2026-11-Pacific_Kiritimati.html" "$work/dst-2026-11-America_New_York.html" \
    && cmp -s "$work/dst-2026-03-Pacific_Kiritimati.json" "$work/dst-2026-03-America_New_York.json"
ok $? "New York: hpcacct-report writes the same statements with PGTZ=UTC and +14 as in the site's zone" "$(cat "$work/dst-report.log")"
got=$(for m in 2026-03 2026-11; do
          $python -c 'import sys, json
d = json.load(open(sys.argv[1]))
days = dict(d["bank"]["days"])
print(d["month"], d["charges"]["total"]["NPL"], *[k[5:] + "=" + str(days[k]) for k in sys.argv[2:]],
      *([d["figures_at"], len(days)] if d["month"] == "2026-03" else []))' \
              "$work/dst-$m-UTC.json" $( [ $m = 2026-03 ] && echo 2026-03-07 2026-03-08 2026-03-09 || echo 2026-10-31 2026-11-01 2026-11-02 ); done | paste -sd' ')
is "$got" "2026-03 144.0 03-07=975.0 03-08=891.0 03-09=886.0 2026-03-31 90 2026-11 160.0 10-31=975.0 11-01=835.0 11-02=815.0" \
   "New York: March's and November's statements (PGTZ=UTC): the month's charges, a bank point for each day, 8 March (23 h) and 1 November (25 h) once each"
