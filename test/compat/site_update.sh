#!/usr/bin/env bash
# Runs inside with-cluster.sh, with HPCACCT_CRON_DATABASE=hpcacct_site (pg_cron's database):
# a populated site of the previous release, set up as that release's README told a site to,
# with its logins in use, updated with ALTER EXTENSION hpcacct UPDATE. What each login sees and
# may do is recorded before and after the update, and must not change:
#   - the rows each login reads of every relation of the previous release (and which accounts'
#     rows), a few reports too: the same, nothing more (a portal user sees no more than before);
#   - the submit check's decisions and the exact balances, as the site's logins get them;
#   - a project administrator's members changed through the portal's staff login (by_user);
#   - the loader's login still inserts jobs, charged once;
#   - a site's own tables protected with protect_table() stay protected, their policies
#     naming hpcacct_internal.sees_all_accounts(regclass), and keep the grants the site gave;
#     where a login reads fewer rows (granted a table itself, not through hpcacct_admin) the
#     update says so;
#   - the settings' values, the ledger's totals to the cent, runs in date order over the
#     previous release's logs;
#   - the pg_cron jobs scheduled by the previous README's recipe still run (pg_cron runs them).
# Then a second database: the site's views and function on objects the update drops stop it
# before it changes anything, naming each.
# Appends "siteupdate passed failed" to $HPCACCT_TALLY.
set -uo pipefail
cd "$(dirname "$0")/../.."
. test/scripts/checks.sh
work=$(mktemp -d)
chmod 755 "$work"
trap '[ -n "${SITE_UPDATE_KEEP:-}" ] && cp -r "$work" "$SITE_UPDATE_KEEP"; rm -rf "$work"' EXIT
started_at=$(date +%s)

current=$(sed -n "s/^default_version = '\(.*\)'/\1/p" hpcacct.control)
previous=$(ls sql/versions/hpcacct--*--"$current".sql 2>/dev/null | sed -n 's|.*/hpcacct--\([0-9.]*\)--[0-9.]*\.sql$|\1|p' \
           | sort -V | tail -1)
db=hpcacct_site
if [ -z "$previous" ] || [ "$(psql -X -At -d postgres -c "SHOW cron.database_name")" != "$db" ]; then
    echo "not ok - a previous release of hpcacct in sql/versions, and pg_cron's database $db"
    echo "siteupdate 0 1" >>"$HPCACCT_TALLY"
    exit 0
fi
echo "# a populated $previous site updated to $current"

q() { psql -X -q -At -v ON_ERROR_STOP=1 -d "$db" "$@"; }
# psql as login $1 (errors kept: they are part of what the login gets)
as() { local login=$1; shift; psql -X -q -At -U "$login" -d "$db" "$@" 2>&1; }
extversion() { q -c "SELECT extversion FROM pg_extension WHERE extname = 'hpcacct'"; }

# ---- the site, as the previous release's README set one up ----
createdb "$db"
q >/dev/null 2>"$work/site.err" <<SQL
CREATE EXTENSION pg_cron;
CREATE EXTENSION hpcacct VERSION '$previous' CASCADE;
SELECT hpcacct.create_job_table();
CALL hpcacct.setup_roles();
-- staff, the loader, the submit check (0.3: a login granted hpcacct_admin), two portal users
CREATE ROLE acct_admin LOGIN IN ROLE hpcacct_admin;
CREATE ROLE acct_loader LOGIN IN ROLE hpcacct_ingest;
CREATE ROLE slurm_submit LOGIN IN ROLE hpcacct_admin;
CREATE ROLE alice LOGIN IN ROLE hpcacct_portal;   -- administers nip00001
CREATE ROLE bob LOGIN IN ROLE hpcacct_portal;     -- a member of nip00001
SET search_path = public, hpcacct;
INSERT INTO setting VALUES ('timezone', 'Europe/Berlin');
INSERT INTO resource (cluster, partition, node, bundle, rate, unit, exclusive)
VALUES ('hlrn', 'mpp1', 'cpu=24,mem=64G', 'cpu=1', 1.0 / 12, 'NPL', true);
INSERT INTO resource (cluster, partition, node, bundle, rate, unit) VALUES ('ada', 'cpu', 'cpu=40', 'cpu=1', 1, 'hours');
INSERT INTO machine_setting (machine, monthly_threshold) VALUES ('ada', 1000000);
SELECT add_user(u, '2024-10-01') FROM unnest(ARRAY['alice', 'bob', 'carol', 'dave']) u;
INSERT INTO account (name, description) VALUES ('nip00001', 'alice''s project'), ('nip00002', 'carol''s project'),
                                               ('gen001', 'a GENCI project on ada');
SELECT add_member('nip00001', 'alice', 'admin'), add_member('nip00001', 'bob', 'member'),
       add_member('nip00002', 'carol', 'admin'), add_member('gen001', 'dave', 'admin'),
       add_member('gen001', 'alice', 'member');
SELECT set_default_project('bob', 'nip00001');
SELECT deposit('nip00001', '2024-10-01', 1000), deposit('nip00001', '2025-01-01', 800),
       deposit('nip00002', '2024-10-01', 5000);
SELECT transfer('nip00002', '2024-10-01', 'nip00001', '2024-10-01', 150.5, 'a loan');
INSERT INTO ledger (account, kind, amount, unit, cluster, valid_from, valid_until, note)
VALUES ('gen001', 'grant', 1200000, 'hours', 'ada', '2024-01-01', '2024-12-31', 'first DARI session');
CALL regulate('2024-10-15');
CALL open_quarter('2024-10-01');
-- the site's own tables, protected as the README said: one in the schema, setup_roles() run
-- again for it, and one in a schema of the site's, granted by the site
CREATE TABLE hpcacct.project_note (account text NOT NULL REFERENCES hpcacct.account, note text NOT NULL);
INSERT INTO hpcacct.project_note VALUES ('nip00001', 'renewal due'), ('nip00002', 'carol''s secret'),
                                        ('gen001', 'DARI report sent');
SELECT hpcacct.protect_table('hpcacct.project_note');
-- and one left without row-level security, which 0.3's setup_roles() granted portal users whole
CREATE TABLE hpcacct.site_cost (account text NOT NULL, cost numeric NOT NULL);
INSERT INTO hpcacct.site_cost VALUES ('nip00001', 10), ('nip00002', 20), ('gen001', 30);
CALL hpcacct.setup_roles();
CREATE SCHEMA site;
CREATE TABLE site.publication (account text NOT NULL, username text NOT NULL, title text NOT NULL);
INSERT INTO site.publication VALUES ('nip00001', 'bob', 'Flows'), ('nip00002', 'carol', 'Waves'),
                                    ('gen001', 'dave', 'Grids'), ('nip00002', 'alice', 'Alice at carol''s');
SELECT hpcacct.protect_table('site.publication');
GRANT USAGE ON SCHEMA site TO hpcacct_admin, hpcacct_portal;
GRANT SELECT ON site.publication TO hpcacct_admin, hpcacct_portal;
-- and one granted to the staff's login itself, not to hpcacct_admin
CREATE TABLE site.review (account text NOT NULL, verdict text NOT NULL);
INSERT INTO site.review VALUES ('nip00001', 'good'), ('nip00002', 'fair'), ('gen001', 'late');
SELECT hpcacct.protect_table('site.review');
GRANT SELECT ON site.review TO acct_admin, hpcacct_portal;
-- and one in the schema, added after setup_roles() last ran, granted to the staff's login alone
CREATE TABLE hpcacct.staff_memo (account text NOT NULL, memo text NOT NULL);
INSERT INTO hpcacct.staff_memo VALUES ('nip00001', 'ok'), ('nip00002', 'watch'), ('gen001', 'ok');
SELECT hpcacct.protect_table('hpcacct.staff_memo');
GRANT SELECT ON hpcacct.staff_memo TO acct_admin;
-- the README's pg_cron lines (0.3), scheduled by the superuser
SELECT cron.schedule('hpcacct-regulate', '0 3 15 * *', \$\$CALL hpcacct.regulate(current_date)\$\$);
SELECT cron.schedule('hpcacct-regulate-annual', '0 3 1 5,6 *', \$\$CALL hpcacct.regulate(current_date)\$\$);
SELECT cron.schedule('hpcacct-open-quarter', '5 0 1 1,4,7,10 *', \$\$CALL hpcacct.open_quarter(current_date)\$\$);
SELECT cron.schedule('hpcacct-compact', '30 3 * * *', 'SELECT hpcacct.compact_rollup()');
SQL
check "a $previous site is set up as its README said ($(extversion))" \
    "$([ "$(extversion)" = "$previous" ] && ! grep -qv '^NOTICE' "$work/site.err" && echo t)"
grep -v '^NOTICE' "$work/site.err" | sed 's/^/    /' | head -5

# jobs, loaded by the loader's login: nip00001 overdraws Q4 2024, the others do not
load_jobs() {  # $1: a job id prefix
    as acct_loader -v ON_ERROR_STOP=1 -c "INSERT INTO hpcacct.job (cluster, jobid, account, \"user\", partition, submit, start, \"end\", alloctres, state)
        SELECT c, '$1' || a || '-' || u || '-' || i, a, u, p, s - interval '1 hour', s, s + (i % 5 + 1) * interval '7 hours', t::hpcacct.tres, 'COMPLETED'
        FROM generate_series(1, 12) i,
             (VALUES ('hlrn', 'nip00001', 'alice', 'mpp1', 'cpu=48'), ('hlrn', 'nip00001', 'bob', 'mpp1', 'cpu=24'),
                     ('hlrn', 'nip00002', 'carol', 'mpp1', 'cpu=30'), ('ada', 'gen001', 'dave', 'cpu', 'cpu=400'),
                     ('ada', 'gen001', 'alice', 'cpu', 'cpu=80')) v(c, a, u, p, t),
             LATERAL (SELECT timestamptz '2024-10-03 08:00+02' + i * interval '5 days 3 hours') x(s)"
}
loaded=$(load_jobs j)
check "the loader's login loads jobs under $previous ($loaded)" "$([ "$loaded" = "" ] && echo t)"
# the 0.3 README's \copy of sacct's lines into the job table, as the loader's login
copy_job() {  # $1: a job id
    printf 'hlrn|%s|nip00002|carol|mpp1|2024-11-02T09:00:00|2024-11-02T10:00:00|2024-11-02T12:00:00|cpu=24|COMPLETED\n' "$1" |
        as acct_loader -c "\\copy hpcacct.job (cluster, jobid, account, \"user\", partition, submit, start, \"end\", alloctres, state) FROM pstdin (DELIMITER '|')"
}
copy_job c1 >"$work/copy.before"
q -c "SELECT hpcacct.compact_rollup()" >/dev/null

# ---- what each login sees and may do ----
# Every relation of the previous release's schema and the site's tables: rows each login reads
# (or the error it gets), and the accounts of those rows where the relation names one; three
# reports too (the fair share of now, the usage of 2024). Under the current release a relation
# is read by its new name.
q -c "SELECT c.oid::regclass FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname IN ('hpcacct', 'site') AND c.relkind IN ('r', 'v', 'p') ORDER BY 1" >"$work/relations"
cat >>"$work/relations" <<'EOF'
hpcacct.fairshare()
hpcacct.usage_by_account(2024, '2024-12-01 00:00+01')
hpcacct.usage_by_submitter(2024, '2024-12-01 00:00+01')
EOF
probe() {  # the reading of every relation as one DO block, under the names of release $1 (before or after)
    local rel from col accounts
    echo 'CREATE TEMP TABLE seen (rel text, n text);'
    echo 'DO $do$ DECLARE n text; BEGIN'
    while read -r rel; do
        from=$rel
        [ "$1" = after ] && from=$(echo "$rel" | sed -f test/compat/current_names.sed)
        col=$(q -c "SELECT CASE WHEN '$from' = 'hpcacct.account' THEN 'name'
                                WHEN EXISTS (SELECT FROM pg_attribute WHERE attrelid = to_regclass('$from')
                                              AND attname = 'account' AND NOT attisdropped) THEN 'account' END" 2>/dev/null)
        case $rel in *'('*) col=account ;; esac
        accounts=
        [ -n "$col" ] && accounts=" || ' ' || coalesce(string_agg(DISTINCT $col, ',' ORDER BY $col), '-')"
        echo "BEGIN EXECUTE \$q\$SELECT count(*)$accounts FROM $from\$q\$ INTO n;
              EXCEPTION WHEN OTHERS THEN n := 'ERROR ' || SQLSTATE; END; INSERT INTO seen VALUES (\$r\$$rel\$r\$, n);"
    done <"$work/relations"
    echo 'END $do$;'
    echo "SELECT rel || ': ' || n FROM seen;"
}
decisions() {  # every user for every account and without one, at two days, as the submit check's login
    as slurm_submit -c "SELECT u.username, coalesce(a.name, '(default)'), d, (hpcacct.check_submit(u.username, a.name, d)).ok,
                               (hpcacct.check_submit(u.username, a.name, d)).account, (hpcacct.check_submit(u.username, a.name, d)).reason
        FROM hpcacct.hpc_user u CROSS JOIN (SELECT name FROM hpcacct.account UNION ALL SELECT NULL) a
        CROSS JOIN (VALUES (date '2024-11-15'), (date '2025-01-20')) x(d) ORDER BY 1, 2, 3"
}
own_decisions() {  # $1: a portal login: its own submit decisions, for every account it names
    as "$1" -c "SELECT coalesce(a.name, '(default)'), d, (hpcacct.check_submit('$1', a.name, d)).ok,
                       (hpcacct.check_submit('$1', a.name, d)).account, (hpcacct.check_submit('$1', a.name, d)).reason
        FROM (SELECT unnest(ARRAY['nip00001', 'nip00002', 'gen001', '$1', NULL]) name) a
        CROSS JOIN (VALUES (date '2024-11-15'), (date '2025-01-20')) x(d) ORDER BY 1, 2"
}
balances() {  # $1: a login
    as "$1" -c "SELECT a.name, d, hpcacct.balance(a.name, d)::numeric(20, 6) FROM hpcacct.account a
        CROSS JOIN (VALUES (date '2024-10-20'), (date '2024-12-31'), (date '2025-02-01')) x(d) ORDER BY 1, 2"
}
ledger_totals() {
    q -c "SELECT account, kind, unit, count(*), round(sum(amount), 2) FROM hpcacct.ledger GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
}
record() {  # $1: before or after
    probe "$1" >"$work/probe.sql"
    for login in acct_admin slurm_submit acct_loader alice bob; do
        as $login -f "$work/probe.sql" | sed "s/^/$login /"
    done >"$work/seen.$1"
    decisions >"$work/decisions.$1"
    for login in alice bob; do own_decisions $login | sed "s/^/$login /"; done >"$work/own_decisions.$1"
    for login in acct_admin alice bob; do balances $login | sed "s/^/$login /"; done >"$work/balances.$1"
    ledger_totals >"$work/ledger.$1"
    q -c "SELECT name || '=' || value FROM hpcacct.settings ORDER BY 1" >"$work/settings.$1"
    [ "$1" = before ] && q -c "SELECT name || '=' || value FROM hpcacct.fairshare_settings ORDER BY 1" >>"$work/settings.$1"
    sort -o "$work/settings.$1" "$work/settings.$1"
}
record before

# the portal's staff login adds a member for the project administrator alice (by_user), and
# alice's own login cannot change members
as acct_admin -c "SELECT hpcacct.add_member('nip00001', 'dave', 'member', 'alice')" >"$work/add_member.before"
as acct_admin -c "SELECT hpcacct.add_member('nip00002', 'dave', 'member', 'alice')" | grep -o 'ERROR: .*' >>"$work/add_member.before"
q -c "DELETE FROM hpcacct.membership WHERE username = 'dave' AND account LIKE 'nip%'"
as alice -c "SELECT hpcacct.add_member('nip00001', 'carol', 'member', 'alice')" | grep -o 'ERROR: .*' >"$work/add_member_portal.before"

# the cron jobs as the site scheduled them
q -c "SELECT jobname || ' ' || username || ' ' || command FROM cron.job WHERE jobname LIKE 'hpcacct-%' ORDER BY jobid" \
    >"$work/cron.jobs"

# ---- the update ----
q -c 'ALTER EXTENSION hpcacct UPDATE' >/dev/null 2>"$work/update.err"
check "ALTER EXTENSION hpcacct UPDATE from $previous to $current succeeds on the site" \
    "$([ "$(extversion)" = "$current" ] && echo t)"
grep -v '^WARNING\|^HINT\|^DETAIL' "$work/update.err" | sed 's/^/    /' | head -10
# the staff's login granted site.review and hpcacct.staff_memo itself read their every row as a
# member of hpcacct_admin; 0.4 shows every row only where hpcacct_admin may read the table: the
# update says so (granting it would show the table to every administrator, here the submit
# check's login too, and the update's setup_roles() grants the schema's site tables no role)
check "the update warns that acct_admin now reads only its accounts' rows of hpcacct.staff_memo and site.review, the grant as hint" \
    "$(grep -q '^WARNING:  hpcacct 0.4: acct_admin read every row of site.review as members of hpcacct_admin' "$work/update.err" \
       && grep -q '^WARNING:  hpcacct 0.4: acct_admin read every row of hpcacct.staff_memo as members of hpcacct_admin' "$work/update.err" \
       && grep -q '^HINT:  If every administrator may read it: GRANT SELECT ON site.review TO hpcacct_admin;' "$work/update.err" \
       && [ "$(grep -c '^WARNING:  hpcacct 0.4: .* read every row of' "$work/update.err")" = 2 ] && echo t)"
grep '^WARNING:  hpcacct 0.4' "$work/update.err" | sed 's/^/    /'
record after
# those rows apart (checked after the comparison), every login reads what it read before
admin_narrowed=$(grep -c '^acct_admin \(site.review\|hpcacct.staff_memo\): 0 -$' "$work/seen.after")
sed -i '/^acct_admin \(site.review\|hpcacct.staff_memo\): /d' "$work/seen.before" "$work/seen.after"

# ---- compare ----
# apart: the settings (0.4 keeps the fair-share settings in setting, and its settings view lists
# every setting: compared by value below) and the site's table without row-level security
# (below); every other relation is compared as it is
apart_rel='hpcacct\.\(settings\|fairshare_setting\|fairshare_settings\|site_cost\):'
# (reports are compared for what they show of whom below: 0.4 counts the bank's credit as an
# allocation in every pool of its unit, and shows a portal user the fair share of now only)
for login in acct_admin slurm_submit alice bob; do
    changed=$(diff <(grep "^$login " "$work/seen.before" | grep -v " $apart_rel" | grep -v '(') \
                   <(grep "^$login " "$work/seen.after" | grep -v " $apart_rel" | grep -v '(') | grep '^[<>]' | head -6)
    check "$login reads the same rows of every relation after the update ($(grep "^$login " "$work/seen.before" | grep -v " $apart_rel" | grep -vc '(') compared)" \
        "$([ -z "$changed" ] && echo t)"
    [ -n "$changed" ] && echo "$changed" | sed 's/^/    /'
done
# more than before: a relation or report read where it was refused, or rows of an account the
# login read nowhere before
widened() {  # $1: a login; prints what it reads now beyond what it read before
    local known
    known=$(grep "^$1 " "$work/seen.before" | sed -n 's/.*: [0-9]* \([^ ]*\)$/\1/p' | tr ',' '\n' | sort -u | paste -sd,)
    join -t'|' <(grep "^$1 " "$work/seen.before" | sed 's/: /|/' | sort) <(grep "^$1 " "$work/seen.after" | sed 's/: /|/' | sort) |
        while IFS='|' read -r rel before after; do
            case $rel in *settings | *fairshare_setting) continue ;; esac
            [ "$before" = "$after" ] && continue
            case $after in ERROR*) continue ;; esac
            case $before in ERROR*) echo "$rel: $before -> $after"; continue ;; esac
            for a in $(echo "$after" | sed -n 's/^[0-9]* //p' | tr ',' ' '); do
                case ",$known," in *",$a,"*) ;; *) echo "$rel: $before -> $after (account $a)" ;; esac
            done
        done
}
for login in acct_admin slurm_submit acct_loader alice bob; do
    more=$(widened $login | head -5)
    narrowed=$(diff <(grep "^$login " "$work/seen.before" | grep -v " $apart_rel") \
                    <(grep "^$login " "$work/seen.after" | grep -v " $apart_rel") | grep -c '^>')
    check "$login reads nothing it did not read before ($narrowed relations read differently)" "$([ -z "$more" ] && echo t)"
    [ -n "$more" ] && echo "$more" | sed 's/^/    /'
done
# the settings: every value the previous release showed, the same
check "every setting keeps its value ($(wc -l <"$work/settings.before") settings)" \
    "$([ -s "$work/settings.before" ] && [ -z "$(comm -23 "$work/settings.before" "$work/settings.after")" ] && echo t)"
comm -23 "$work/settings.before" "$work/settings.after" | head -5 | sed 's/^/    /'
# the portal users read only their accounts' rows (and, of the site's publications, their own)
foreign=$( { grep '^alice ' "$work/seen.before" | grep -v 'site.publication\|hpcacct.site_cost' | grep -E ': [0-9]+ .*(nip00002|carol|bob|dave)';
             grep '^bob ' "$work/seen.before" | grep -v 'hpcacct.site_cost' | grep -E ': [0-9]+ .*(nip00002|gen001|carol|alice|dave)'; } | head -5)
check "the portal users read rows, and only of their accounts (alice: nip00001, gen001 and alice; bob: nip00001 and bob)" \
    "$(grep -q '^alice hpcacct.ledger: [1-9][0-9]* alice,gen001,nip00001$' "$work/seen.before" \
       && grep -q '^bob hpcacct.ledger: [1-9][0-9]* bob,nip00001$' "$work/seen.before" && [ -z "$foreign" ] && echo t)"
[ -n "$foreign" ] && echo "$foreign" | sed 's/^/    /'
# (0.3 held every account to the bank: its GENCI project, without deposits, was expired; 0.4
# decides by the rules that bind the account: open while the grant is valid)
check "the submit check's login decides as before for the bank's accounts ($(grep -vc '|gen001|20' "$work/decisions.before") decisions, $(grep -v '|gen001|20' "$work/decisions.before" | grep -c '|f|') refusals)" \
    "$(grep -q '|t|' "$work/decisions.before" && grep -q '|f|' "$work/decisions.before" \
       && cmp -s <(grep -v '|gen001|20' "$work/decisions.before") <(grep -v '|gen001|20' "$work/decisions.after") && echo t)"
diff <(grep -v '|gen001|20' "$work/decisions.before") <(grep -v '|gen001|20' "$work/decisions.after") | head -6 | sed 's/^/    /'
check "the GENCI project's members: account_expired under $previous, open while the grant is valid under $current" \
    "$([ "$(grep '^\(alice\|dave\)|gen001|20' "$work/decisions.before" | cut -d'|' -f4,6 | sort -u)" = "f|account_expired" ] \
       && [ "$(grep '^\(alice\|dave\)|gen001|20' "$work/decisions.after" | cut -d'|' -f3,4,6 | sort -u | paste -sd' ')" = "2024-11-15|t| 2025-01-20|f|no_allocation" ] && echo t)"
check "the portal users' own submit decisions are the same but the GENCI project's member's ($(grep -vc '^alice gen001|' "$work/own_decisions.before") decisions; another's account unknown_account)" \
    "$(grep -q '|t|' "$work/own_decisions.before" && grep -q '^bob gen001|2024-11-15|f|gen001|unknown_account$' "$work/own_decisions.before" \
       && cmp -s <(grep -v '^alice gen001|' "$work/own_decisions.before") <(grep -v '^alice gen001|' "$work/own_decisions.after") \
       && [ "$(grep '^alice gen001|' "$work/own_decisions.after" | cut -d'|' -f2,3,5 | paste -sd' ')" = "2024-11-15|t| 2025-01-20|f|no_allocation" ] && echo t)"
diff <(grep -v '^alice gen001|' "$work/own_decisions.before") <(grep -v '^alice gen001|' "$work/own_decisions.after") | head -6 | sed 's/^/    /'
# the site's table without row-level security: 0.3's setup_roles() showed portal users every
# account's rows of it; the update's setup_roles() revokes that, and warns
check "hpcacct.site_cost: every account's rows to portal users under $previous, refused (42501) after the update, with a warning" \
    "$(grep -q '^alice hpcacct.site_cost: 3 gen001,nip00001,nip00002$' "$work/seen.before" \
       && grep -q '^alice hpcacct.site_cost: ERROR 42501$' "$work/seen.after" && grep -q '^bob hpcacct.site_cost: ERROR 42501$' "$work/seen.after" \
       && grep -q '^acct_admin hpcacct.site_cost: 3 ' "$work/seen.after" \
       && grep -q 'WARNING:  setup_roles: hpcacct_portal is not granted SELECT on hpcacct.site_cost' "$work/update.err" && echo t)"
check "balance() gives staff and portal users the same figures ($(wc -l <"$work/balances.before") balances)" \
    "$(grep -q '^alice nip00001|2024-12-31|-' "$work/balances.before" && cmp -s "$work/balances.before" "$work/balances.after" && echo t)"
diff "$work/balances.before" "$work/balances.after" | head -6 | sed 's/^/    /'
check "the ledger's totals are unchanged to the cent ($(wc -l <"$work/ledger.before") account, kind and unit sums)" \
    "$(cmp -s "$work/ledger.before" "$work/ledger.after" && echo t)"
diff "$work/ledger.before" "$work/ledger.after" | head -6 | sed 's/^/    /'

as acct_admin -c "SELECT hpcacct.add_member('nip00001', 'dave', 'member', 'alice')" >"$work/add_member.after"
as acct_admin -c "SELECT hpcacct.add_member('nip00002', 'dave', 'member', 'alice')" | grep -o 'ERROR: .*' >>"$work/add_member.after"
check "the portal's staff login adds a member for a project administrator, and not for another's project, as before" \
    "$(grep -q 'not an administrator\|42501\|ERROR' "$work/add_member.before" \
       && [ "$(cut -c1-40 "$work/add_member.before")" = "$(cut -c1-40 "$work/add_member.after")" ] \
       && [ "$(q -c "SELECT string_agg(account, ',' ORDER BY account) FROM hpcacct.membership WHERE username = 'dave'")" = "dave,gen001,nip00001" ] && echo t)"
diff "$work/add_member.before" "$work/add_member.after" | sed 's/^/    /'

copy_job c2 >"$work/copy.after"
check "the loader's \\copy into the job table does as before ($(head -1 "$work/copy.before"))" \
    "$([ "$(sed 's/c1/cN/g' "$work/copy.before")" = "$(sed 's/c2/cN/g' "$work/copy.after")" ] \
       && [ "$(q -c "SELECT count(*) FROM hpcacct.ledger WHERE jobid IN ('c1', 'c2')")" = "$(q -c "SELECT count(*) FROM hpcacct.job WHERE jobid IN ('c1', 'c2')")" ] && echo t)"
diff "$work/copy.before" "$work/copy.after" | sed 's/^/    /'
loaded=$(load_jobs k)
check "the loader's login still loads jobs, each charged once ($loaded)" \
    "$([ -z "$loaded" ] && [ "$(q -c "SELECT count(*) FILTER (WHERE jobid LIKE 'k%') || ' ' || count(DISTINCT (cluster, jobid)) FILTER (WHERE jobid LIKE 'k%')
                                      FROM hpcacct.ledger WHERE kind = 'charge'")" = "60 60" ] && echo t)"

check "acct_admin reads none of site.review's and hpcacct.staff_memo's rows after the update, and all once the site grants them as the hints say" \
    "$([ "$admin_narrowed" = 2 ] && sed -n 's/^HINT:  If every administrator may read it: //p' "$work/update.err" | q -f - >/dev/null \
       && [ "$(as acct_admin -c 'SELECT count(*) FROM site.review')" = 3 ] \
       && [ "$(as acct_admin -c 'SELECT count(*) FROM hpcacct.staff_memo')" = 3 ] && echo t)"

# a file that repeats jobs, loaded as the job table's hint said (ON CONFLICT DO NOTHING): nothing charged twice
reload=$(as acct_loader -c "INSERT INTO hpcacct.job SELECT * FROM (VALUES ('hlrn', 'jnip00001-alice-1', 'nip00001', 'alice', 'mpp1',
        timestamptz '2024-10-08 10:00+02', timestamptz '2024-10-08 11:00+02', timestamptz '2024-10-08 18:00+02', 'cpu=48'::hpcacct.tres,
        'COMPLETED')) v ON CONFLICT DO NOTHING")
check "the loader's login reloads a job already loaded with ON CONFLICT DO NOTHING, charged once ($reload)" \
    "$([ -z "$reload" ] && [ "$(q -c "SELECT count(*) FROM hpcacct.ledger WHERE jobid = 'jnip00001-alice-1'")" = 1 ] && echo t)"
# staff still book: a deposit by the administrator's login
booked=$(as acct_admin -c "SELECT hpcacct.deposit('nip00002', '2025-01-01', 300) > 0")
check "the administrator's login deposits ($booked)" "$([ "$booked" = t ] && echo t)"
# runs in date order over the previous release's: its regulation run (2024-10-15, logged)
# refuses an earlier 15th, and nothing is written. A known gap, shown and not fixed: its quarter
# start (2024-10-01) logged nothing (the users were added that day with their allotments), and
# 0.3 kept no run_day, so an open_quarter of Q3 2024 runs after the update (here it writes nothing).
changes() { q -c "SELECT (SELECT count(*) FROM hpcacct.ledger) || ' ledger rows, ' || (SELECT count(*) FROM hpcacct.quarter_log)
                          || ' quarter_log rows, ' || (SELECT count(*) FROM hpcacct.regulation_log) || ' regulation_log rows'"; }
changes_before=$(changes)
late_regulate=$(as acct_admin -v VERBOSITY=verbose -c "CALL hpcacct.regulate('2024-09-15')" | grep -o 'ERROR:  [0-9A-Z]*')
late_quarter=$(as acct_admin -v VERBOSITY=verbose -c "CALL hpcacct.open_quarter('2024-07-01')" | grep -o 'ERROR:  [0-9A-Z]*')
check "the administrator's regulate of 15 September 2024, after the $previous run of 15 October, is refused, and nothing is written (${late_regulate:-regulate ran}; $(changes))" \
    "$([ "$late_regulate" = "ERROR:  22023" ] && [ "$(changes)" = "$changes_before" ] && echo t)"
echo "# known gap: open_quarter of Q3 2024 after the $previous run of Q4, which logged nothing: ${late_quarter:-it ran}"
# a project administrator's own portal login: 0.3 refused add_member (no EXECUTE); 0.4 lets
# it manage its own projects only
own=$(as alice -c "SELECT hpcacct.add_member('nip00001', 'carol', 'member', 'alice')")
other=$(as alice -c "SELECT hpcacct.add_member('nip00002', 'alice', 'admin', 'alice')" | grep -o 'ERROR: .*')
check "alice's portal login adds a member to her project, and is refused carol's (42501) ($other)" \
    "$(grep -q 'permission denied for function add_member' "$work/add_member_portal.before" && [ -z "$own" ] \
       && [[ $other == *"ERROR:  42501"* || $other == *"not an administrator"* || $other == *"administer"* ]] \
       && [ "$(q -c "SELECT string_agg(account || ':' || role, ',' ORDER BY account) FROM hpcacct.membership WHERE username IN ('carol', 'alice') AND account = 'nip00002'")" = "nip00002:admin" ] && echo t)"
cat "$work/add_member_portal.before" | sed 's/^/    before: /'

# the site's tables: still under row-level security, every policy on the new function
policies=$(q -c "SELECT string_agg(format('%s.%s: %s', c.oid::regclass, p.polname, pg_get_expr(p.polqual, p.polrelid)), E'\n' ORDER BY 1)
    FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid
    WHERE c.oid IN ('hpcacct.project_note'::regclass, 'site.publication'::regclass) AND p.polname = 'member_rows' AND c.relrowsecurity")
check "the site's own tables keep row-level security, their policies calling hpcacct_internal.sees_all_accounts(regclass)" \
    "$([ "$(echo "$policies" | grep -c "hpcacct_internal.sees_all_accounts('[a-z_.]*'::regclass)")" = 2 ] && echo t)"
echo "$policies" | sed 's/^/    /'

# ---- the pg_cron jobs still run: pg_cron runs each once more, now, as scheduled ----
q -c "SELECT count(cron.alter_job(jobid, schedule := '* * * * *')) FROM cron.job WHERE jobname LIKE 'hpcacct-%'" >/dev/null
check "the cron jobs are those the site scheduled, commands unchanged" \
    "$([ "$(q -c "SELECT jobname || ' ' || username || ' ' || command FROM cron.job WHERE jobname LIKE 'hpcacct-%' ORDER BY jobid")" \
         = "$(cat "$work/cron.jobs")" ] && echo t)"
cron_from=$(date +%s)
while [ $(( $(date +%s) - cron_from )) -lt 135 ]; do
    pending=$(q -c "SELECT count(*) FROM cron.job j WHERE j.jobname LIKE 'hpcacct-%'
                     AND NOT EXISTS (SELECT FROM cron.job_run_details d WHERE d.jobid = j.jobid AND d.status IN ('succeeded', 'failed'))")
    [ "$pending" = 0 ] && break
    sleep 2
done
runs=$(q -c "SELECT string_agg(j.jobname || ': ' || coalesce(d.status || coalesce(' ' || nullif(d.return_message, ''), ''), 'never ran'), E'\n' ORDER BY j.jobid)
    FROM cron.job j LEFT JOIN cron.job_run_details d ON d.jobid = j.jobid AND d.status IN ('succeeded', 'failed') WHERE j.jobname LIKE 'hpcacct-%'")
check "pg_cron runs each job the site scheduled under $previous, and each succeeds ($(wc -l <"$work/cron.jobs") jobs)" \
    "$([ "$(echo "$runs" | grep -c ': succeeded')" = "$(wc -l <"$work/cron.jobs")" ] && ! echo "$runs" | grep -qv ': succeeded' && echo t)"
echo "$runs" | sed 's/^/    /'
q -c "SELECT count(cron.unschedule(jobid)) FROM cron.job WHERE jobname LIKE 'hpcacct-%'" >/dev/null
# a run the last minute started goes on after the unschedule: let it end before the cluster goes
cron_from=$(date +%s)
while [ $(( $(date +%s) - cron_from )) -lt 60 ] &&
      [ "$(q -c "SELECT count(*) FROM cron.job_run_details WHERE status NOT IN ('succeeded', 'failed')")" != 0 ]; do
    sleep 1
done

# ---- the site's objects on 0.3 objects the update drops ----
# A portal's view over quarter_balances (which 0.4 replaces) and one, and a function with a
# SQL-standard body, on 0.3's documented sees_all_accounts() (which 0.4 drops): the update stops
# before it changes anything, naming each (not PostgreSQL's 2BP01 from its middle, whose hint,
# DROP ... CASCADE, would drop the site's views). Dropped, the update runs.
createdb hpcacct_site_views
psql -X -q -v ON_ERROR_STOP=1 -d hpcacct_site_views >/dev/null 2>"$work/views.err" <<SQL
CREATE EXTENSION hpcacct VERSION '$previous' CASCADE;
CREATE SCHEMA portal;
CREATE VIEW portal.balance_page AS SELECT account, quarter, balance FROM hpcacct.quarter_balances;
CREATE TABLE portal.note (account text, note text);
CREATE VIEW portal.my_note AS SELECT * FROM portal.note
    WHERE hpcacct.sees_all_accounts() OR account = ANY (hpcacct.visible_accounts());
CREATE FUNCTION portal.is_staff() RETURNS boolean LANGUAGE sql STABLE BEGIN ATOMIC SELECT hpcacct.sees_all_accounts(); END;
SQL
grep -v '^NOTICE' "$work/views.err" | sed 's/^/    /' | head -5
psql -X -q -v VERBOSITY=verbose -d hpcacct_site_views -c 'ALTER EXTENSION hpcacct UPDATE' >/dev/null 2>"$work/views.err"
views_error=$(grep -v '^NOTICE' "$work/views.err" | tr '\n' ' ')
views_version=$(psql -X -At -d hpcacct_site_views -c "SELECT extversion FROM pg_extension WHERE extname = 'hpcacct'")
check "the site's views and function on objects $current drops stop the update with 2BP01 naming each, nothing changed ($views_version)" \
    "$([ "$views_version" = "$previous" ] \
       && [[ $views_error == *"ERROR:  2BP01: hpcacct $current drops or replaces objects of $previous that 3 objects of the site depend on: "*"function portal.is_staff() (on function sees_all_accounts())"*"view portal.balance_page (on view quarter_balances)"*"view portal.my_note (on function sees_all_accounts())"*"HINT:  Nothing was changed."* ]] && echo t)"
[ "$views_version" = "$previous" ] && echo "    ${views_error:0:600}"
psql -X -q -v ON_ERROR_STOP=1 -d hpcacct_site_views -c 'DROP VIEW portal.balance_page, portal.my_note' -c 'DROP FUNCTION portal.is_staff()' \
    -c 'ALTER EXTENSION hpcacct UPDATE' >/dev/null 2>"$work/views.err"
check "dropped, they let the update run" \
    "$([ "$(psql -X -At -d hpcacct_site_views -c "SELECT extversion FROM pg_extension WHERE extname = 'hpcacct'")" = "$current" ] && echo t)"
grep -v '^NOTICE' "$work/views.err" | sed 's/^/    /' | head -5
dropdb hpcacct_site_views

echo "# $(( $(date +%s) - started_at )) s"
report siteupdate
