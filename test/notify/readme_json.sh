# Sourced by test/notify/run.sh after statements.sh (its ok/is helpers, $work, $python and the
# sample site in hpcacct_statements): the README's my_accounts() and account_month() examples
# are what the functions return for the sample site (account_month's bank days cut to two).
readme_json() {  # readme_json MARKER: the first ```json block after the line with MARKER
    $python - "$1" <<'PY'
import sys
lines = open('README.md', encoding='utf-8').read().split('\n')
i = next(k for k, l in enumerate(lines) if sys.argv[1] in l)
i = next(k for k in range(i, len(lines)) if lines[k].startswith('```json'))
j = next(k for k in range(i + 1, len(lines)) if lines[k].startswith('```'))
print('\n'.join(lines[i + 1:j]))
PY
}
psql -X -q -d hpcacct_statements -c 'CALL hpcacct.setup_roles()' \
     -c "DO \$\$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'carol') THEN
            CREATE ROLE carol LOGIN IN ROLE hpcacct_portal; END IF; END \$\$" >"$work/readme_json.log" 2>&1
readme_json '`hpcacct.my_accounts(at DEFAULT today) → jsonb`' >"$work/my_accounts.json"
is "$(psql -X -q -At -d hpcacct_statements -v "want=$(cat "$work/my_accounts.json")" 2>&1 <<'SQL'
SET SESSION AUTHORIZATION carol;
SELECT CASE WHEN hpcacct.my_accounts('2025-05-20') = :'want'::jsonb THEN 'equal'
            ELSE hpcacct.my_accounts('2025-05-20')::text END;
SQL
)" "equal" "the README's my_accounts() example is carol's on 20 May 2025"
readme_json '`hpcacct.account_month(account, month) → jsonb`' >"$work/account_month.json"
is "$(psql -X -q -At -d hpcacct_statements -v "want=$(cat "$work/account_month.json")" 2>&1 <<'SQL'
SELECT CASE WHEN g = :'want'::jsonb THEN 'equal' ELSE g::text END
FROM (SELECT jsonb_set(m, '{bank,days}', (SELECT jsonb_agg(d ORDER BY k)
                                           FROM jsonb_array_elements(m -> 'bank' -> 'days') WITH ORDINALITY t(d, k)
                                           WHERE k <= 2)) AS g
      FROM hpcacct.account_month('nip00042', '2025-05-01') m) x;
SQL
)" "equal" "the README's account_month() example is nip00042's May 2025"
