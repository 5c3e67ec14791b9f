# Sourced by run.sh (check): a project's two administrators, each removing the other (or making
# the other a plain member) at the same time, leave it one administrator: the second change
# waits for the first and then finds the last one (HA003), as it does one after the other.
mdb=hpcacct_member_race
createdb $mdb
mq() { psql -X -q -At -v ON_ERROR_STOP=1 -d $mdb "$@"; }
mq -c 'CREATE EXTENSION hpcacct CASCADE' -c "
    INSERT INTO hpcacct.hpc_user (username) VALUES ('mr_a'), ('mr_b');
    INSERT INTO hpcacct.account (name) VALUES ('mr_p')" >/dev/null || exit 1
for change in "remove_member('mr_p', '%s')" "add_member('mr_p', '%s', 'member')"; do
    mq -c "DELETE FROM hpcacct.membership WHERE account = 'mr_p';
           INSERT INTO hpcacct.membership VALUES ('mr_p', 'mr_a', 'admin'), ('mr_p', 'mr_b', 'admin')" >/dev/null
    # the first change keeps its transaction open for 3 s after it is made
    PGAPPNAME=hpcacct_member_race_first psql -X -q -At -d $mdb -c "BEGIN" \
        -c "SELECT hpcacct.$(printf "$change" mr_a)" -c "SELECT pg_sleep(3)" -c "COMMIT" >/dev/null 2>&1 &
    first=$!
    for _ in $(seq 1 300); do  # up to 30 s on a loaded machine
        [ "$(mq -c "SELECT count(*) FROM pg_stat_activity WHERE datname = '$mdb'
                    AND application_name = 'hpcacct_member_race_first' AND query LIKE '%pg_sleep%'")" = 1 ] && break
        sleep 0.1
    done
    out=$(psql -X -q -At -d $mdb -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -c "SELECT hpcacct.$(printf "$change" mr_b)" 2>&1 >/dev/null)
    second=$(sed -n 's/^[^:]*ERROR: *\([0-9A-Z]\{5\}\):.*/\1/p' <<<"$out" | head -1)
    wait $first
    admins=$(mq -c "SELECT string_agg(username, ',' ORDER BY username) FROM hpcacct.membership
                    WHERE account = 'mr_p' AND role = 'admin'")
    check "two concurrent $(printf "$change" '…') of the two administrators: the second fails with ${second:-nothing} (want HA003), administrators left: ${admins:-none}" \
        "$([ "$second" = HA003 ] && [ "$admins" = mr_b ] && echo t)"
done
