# Sourced by run.sh (check): deferred rollups (setting rollup = deferred) under concurrency.
# Two loaders charge jobs at once, so that their statements' entry ids interleave, while two
# sessions call roll_up_pending() over and over; then the rollups must equal rebuild_rollup()'s
# (nothing lost, nothing rolled up twice), and the calls' counts add up to the charges.
ddb=hpcacct_deferred
createdb $ddb
psql -X -q -v ON_ERROR_STOP=1 -d $ddb -c 'CREATE EXTENSION hpcacct CASCADE' -c 'SELECT hpcacct.create_job_table()' -c "
    INSERT INTO hpcacct.setting VALUES ('timezone', 'Europe/Paris'), ('rollup', 'deferred');
    INSERT INTO hpcacct.resource (cluster, partition, node, bundle, rate, unit)
    VALUES ('dr', 'cpu', 'cpu=32', 'cpu=1', 1, 'core-hours');
    INSERT INTO hpcacct.account (name) VALUES ('da'), ('db');" \
    -c "-- every 50th ledger row waits 10 ms after taking its id: each loader's statement then
        -- lasts long enough that the two overlap and their ids interleave (otherwise luck)
        CREATE FUNCTION public.slow_ledger_insert() RETURNS trigger LANGUAGE plpgsql AS \$\$
        BEGIN
            IF NEW.entry_id % 50 = 0 THEN PERFORM pg_sleep(0.01); END IF;
            RETURN NEW;
        END \$\$;
        CREATE TRIGGER slow_ledger_insert BEFORE INSERT ON hpcacct.ledger
            FOR EACH ROW EXECUTE FUNCTION public.slow_ledger_insert();" >/dev/null || exit 1
deferred_out=$(mktemp -d)
statements=12 jobs=1500
# loader NAME: $statements statements of $jobs jobs each, across months and the 16ths
deferred_loader() {
    for s in $(seq 1 $statements); do
        psql -X -q -v ON_ERROR_STOP=1 -d $ddb -c "INSERT INTO hpcacct.job (cluster, jobid, account, \"user\", partition, start, \"end\", alloctres)
            SELECT 'dr', '$1-$s-' || i, CASE WHEN i % 2 = 0 THEN 'da' ELSE 'db' END, 'u' || (i % 7), 'cpu',
                   t, t + (i % 50) * interval '1 hour', ('cpu=' || (1 + i % 8))::hpcacct.tres
            FROM generate_series(1, $jobs) i,
                 LATERAL (SELECT timestamptz '2024-01-01 00:00+01' + ($s * $jobs + i) * interval '13 minutes' AS t) x" || return 1
    done
}
deferred_roller() {
    while [ ! -e "$deferred_out/stop" ]; do
        psql -X -At -d $ddb -c "SELECT hpcacct.roll_up_pending()" >>"$deferred_out/rolled.$1" 2>>"$deferred_out/err.$1"
    done
}
deferred_roller 1 & roller1=$!
deferred_roller 2 & roller2=$!
deferred_loader a >"$deferred_out/load.a" 2>&1 & loader_a=$!
deferred_loader b >"$deferred_out/load.b" 2>&1 & loader_b=$!
wait $loader_a; rc_a=$?
wait $loader_b; rc_b=$?
touch "$deferred_out/stop"
wait $roller1 $roller2
final=$(psql -X -At -d $ddb -c "SELECT hpcacct.roll_up_pending()")
charges=$(psql -X -At -d $ddb -c "SELECT count(*) FROM hpcacct.ledger WHERE kind = 'charge'")
calls=$(cat "$deferred_out"/rolled.* | grep -c .)
summed=$(cat "$deferred_out"/rolled.* | awk -v f="$final" '{ s += $1 } END { print s + f }')
# the ids of loader a's charges fall into more islands than it ran statements: interleaved
islands=$(psql -X -At -d $ddb -c "SELECT count(DISTINCT entry_id - n) FROM (SELECT entry_id, row_number() OVER (ORDER BY entry_id) AS n
                                   FROM hpcacct.ledger WHERE jobid LIKE 'a-%') i")
check "two deferred loaders: $charges charges, $((statements * jobs * 2)) jobs, loaders exited $rc_a/$rc_b" \
    "$([ "$rc_a" = 0 ] && [ "$rc_b" = 0 ] && [ "$charges" = $((statements * jobs * 2)) ] && echo t)"
check "their entry ids interleaved: loader a's ids form $islands islands over $statements statements" \
    "$([ "$islands" -gt "$statements" ] && echo t)"
check "$calls concurrent roll_up_pending() calls (two sessions) and a last one rolled up $summed charges, no error" \
    "$([ "$summed" = "$charges" ] && [ ! -s "$deferred_out/err.1" ] && [ ! -s "$deferred_out/err.2" ] && echo t)"
check "nothing is left pending" "$(psql -X -At -d $ddb -c "SELECT count(*) = 0 FROM hpcacct.rollup_pending")"
differ=$(psql -X -q -At -v ON_ERROR_STOP=1 -d $ddb <<'SQL'
CREATE TEMP VIEW groups AS
    SELECT 'charge' AS t, concat_ws('/', account, resource_id, unit, submitter, month, end_month) AS k, sum(amount) AS a,
           sum(job_amount) AS b, round(sum(decayed)::numeric, 6) AS c
    FROM hpcacct.charge_rollup GROUP BY account, resource_id, unit, submitter, month, end_month
    UNION ALL
    SELECT 'consumption', concat_ws('/', account, resource_id, boundary), sum(ended), sum(running), NULL
    FROM hpcacct.consumption_rollup GROUP BY account, resource_id, boundary;
CREATE TEMP TABLE rolled AS SELECT * FROM groups;
SELECT FROM hpcacct.rebuild_rollup();
SELECT (SELECT count(*) FROM rolled) || ' groups, '
       || (SELECT count(*) FROM ((TABLE rolled EXCEPT ALL TABLE groups) UNION ALL (TABLE groups EXCEPT ALL TABLE rolled)) d)
       || ' differ';
SQL
)
check "the rollups equal rebuild_rollup()'s: $differ" "$(echo "$differ" | grep -Eq '^[1-9][0-9]* groups, 0 differ$' && echo t)"
rm -rf "$deferred_out"
