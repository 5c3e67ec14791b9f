#!/usr/bin/env bash
# test/bench/claim.sh [USERS] [ROUNDS]: what the sender's claim costs after a message to many users.
#
# In a throw-away cluster (with-cluster.sh) with autovacuum off (the moment before it comes),
# one message to USERS members (default 20 000) of one account, in three shapes:
#   own      each user a mailbox of their own, one in ten sharing with the previous user
#   shared   every user the same address (one copy to send)
#   history  as own, written after five such messages were delivered and analyzed
# then ROUNDS rounds (default 12) of what hpcacct-notify does: outbox_claim() of 50, then
# outbox_sending() and outbox_result('delivered') of each. Reports each round's claim in ms,
# outbox_next_due() and outbox_status read whole. No ANALYZE but hpcacct's own (outbox_add_all(),
# outbox_claim()).
# `make bench` runs it after the database benchmarks.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
users=${1:-20000}
rounds=${2:-12}

if [ "${3:-}" != --inside ]; then
    export PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
    exec test/scripts/with-cluster.sh claimbench "$root/test/bench/claim.sh" "$users" "$rounds" --inside
fi

psql -X -q -c 'ALTER SYSTEM SET autovacuum = off' -c 'SELECT pg_reload_conf()' >/dev/null

# make_site DB ADDRESS_SQL: the account, its users and contacts, then one message to them
make_site() {
    createdb "$1"
    psql -X -q -v ON_ERROR_STOP=1 -d "$1" >/dev/null 2>&1 <<SQL
CREATE EXTENSION hpcacct CASCADE;
SET search_path = public, hpcacct;
INSERT INTO setting VALUES ('timezone', 'UTC');
INSERT INTO account (name) VALUES ('bench');
SELECT add_user('u' || i, '2025-01-02') FROM generate_series(1, $users) i;
INSERT INTO membership (account, username) SELECT 'bench', 'u' || i FROM generate_series(1, $users) i ON CONFLICT DO NOTHING;
INSERT INTO contact (username, email) SELECT 'u' || i, $2 FROM generate_series(1, $users) i;
SQL
}
message() {  # message DB N
    psql -X -q -v ON_ERROR_STOP=1 -d "$1" -c \
        "SELECT hpcacct.outbox_add('account_expiry', 'bench/$2', 'bench', 'Allocation', E'ends\n', '{}', true)" >/dev/null
}

own="'m' || (CASE WHEN i % 10 = 0 THEN i - 1 ELSE i END) || '@example.org'"
make_site own "$own"
make_site shared "'all@example.org'"
make_site history "$own"
for k in 1 2 3 4 5; do
    message history "$k"
    psql -X -q -d history -c "UPDATE hpcacct.outbox_recipient SET state = 'delivered', delivered_at = now() WHERE state = 'pending'"
done
psql -X -q -d history -c 'VACUUM ANALYZE hpcacct.outbox_recipient' -c 'ANALYZE hpcacct.outbox'
message own 1
message shared 1
message history 6

printf '%-8s %11s  %-58s %9s %8s\n' shape deliveries 'claim of 50, ms, round by round' next_due status
for db in own shared history; do
    script=$(mktemp)
    {
        echo '\timing on'
        for i in $(seq "$rounds"); do
            echo "CREATE TEMP TABLE c$i AS SELECT * FROM hpcacct.outbox_claim('bench', '5 minutes', 50);"
            echo "SELECT count(*) FROM (SELECT hpcacct.outbox_sending('bench', recipient_id),"
            echo "       hpcacct.outbox_result('bench', recipient_id, 'delivered') FROM c$i) s;"
        done
        echo 'SELECT hpcacct.outbox_next_due();'
        echo 'SELECT count(*) FROM hpcacct.outbox_status;'
    } >"$script"
    times=$(psql -X -q -At -v ON_ERROR_STOP=1 -d "$db" -f "$script" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p')
    rm -f "$script"
    claims=$(echo "$times" | head -n $((2 * rounds)) | awk 'NR % 2 == 1 { printf "%d ", $1 }')
    rest=($(echo "$times" | tail -n 2))
    count=$(psql -X -At -d "$db" -c 'SELECT count(*) FROM hpcacct.outbox_recipient WHERE message_id = (SELECT max(message_id) FROM hpcacct.outbox)')
    printf '%-8s %11s  %-58s %9.1f %8.1f\n' "$db" "$count" "$claims" "${rest[0]}" "${rest[1]}"
done
